// expertscope-cli serve: the OpenAI-compatible server (app/server) in the foreground.
// SIGINT/SIGTERM are taken by a dedicated thread (sigwait), which stops the server gracefully:
// open requests are cancelled, listen() returns, the engine is shut down.
#include "cli_commands.h"

#include "api_server.h"

#include <atomic>
#include <csignal>
#include <cstdio>
#include <malloc.h>
#include <pthread.h>
#include <thread>

namespace es::cli {

int cmd_serve(const serve_opts &o, const common_opts &common) {
    // Block the signals in every thread started from here on (engine, OpenMP, HTTP pool).
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, nullptr);
    std::signal(SIGPIPE, SIG_IGN);
    // The server's heap policy: one malloc arena. glibc gives each busy thread an arena of its
    // own, and what a thread frees at its arena's top stays resident up to the trim threshold,
    // which glibc raises to twice the largest block ever mapped (tens of MiB once a model has
    // loaded); malloc_trim does not shrink a thread arena's top. With 64 worker threads that
    // each once handled a large request, that is gigabytes. In the one main arena, the trims
    // after large requests (api_server) give everything freed back. Small blocks stay in each
    // thread's tcache, so the shared arena's lock is rarely taken; the engine allocates exactly
    // as before (fixing the mmap threshold instead would map and unmap its per-step buffers).
    mallopt(M_ARENA_MAX, 1);

    server::server_options so;
    so.model_dir = o.model_dir;
    if (!o.shape.empty()) {
        auto cfg = bench_shape_config(o.shape, o.layers);
        if (!cfg) return fail(cfg.message());
        so.random_shape = *cfg;
        so.model_dir = o.shape + (o.layers > 0 ? "-" + std::to_string(o.layers) + "l" : "");
        std::fprintf(stderr, "serve: building random weights of %s on %s…\n", so.model_dir.c_str(),
                     common.backend.c_str());
    }
    so.precision = common.precision;
    so.kv_cache = common.kv_cache;
    so.fp8_scales = common.fp8_scales;
    so.kv_cache_bytes = o.kv_cache_mib << 20;
    so.kv_cache_min_bytes = o.kv_cache_min_mib << 20;
    so.gpu_memory_utilization = common.gpu_memory_utilization;
    so.host = o.host;
    so.port = o.port;
    so.api_key = o.api_key;
    so.served_model_name = o.served_model_name;
    so.max_body_bytes = o.max_body_bytes;
    so.max_prompt_tokens = o.max_prompt_tokens;
    so.max_num_seqs = o.max_num_seqs;
    so.header_timeout_s = o.header_timeout;
    so.body_timeout_s = o.body_timeout;
    so.idle_timeout_s = o.keep_alive_timeout;
    so.write_timeout_s = o.write_timeout;
    so.max_connections = o.max_connections;
    so.max_connections_per_client = o.max_connections_per_client;
    so.allowed_origins = o.allowed_origins;
    so.insecure_no_api_key = o.insecure_no_api_key;
    so.threads = common.threads;
    so.backend = common.backend;
    server::api_server srv(so);
    if (std::string err = srv.load(); !err.empty()) return fail(err);

    std::atomic<bool> signalled{false};
    std::thread sig([&srv, &signalled, set] {
        int signo = 0;
        sigwait(&set, &signo);
        signalled = true;
        if (signo == SIGINT || signo == SIGTERM) {
            std::fprintf(stderr, "serve: %s, shutting down\n", signo == SIGINT ? "SIGINT" : "SIGTERM");
            srv.stop();
        }
    });
    const std::string err = srv.listen();
    if (!signalled) pthread_kill(sig.native_handle(), SIGTERM);  // wake the signal thread
    sig.join();
    if (!err.empty()) return fail(err);
    std::fprintf(stderr, "serve: stopped\n");
    return 0;
}

} // namespace es::cli
