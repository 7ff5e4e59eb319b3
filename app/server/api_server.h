// api_server: the OpenAI-compatible HTTP front of one shared es::engine. A gate (http_gate) owns
// the listening socket and bounds every client — connections per address and in all, deadlines
// for a request's head and body, body limits — and hands complete requests to a pool of worker
// threads, where cpp-httplib's request processing runs the handlers; every handler submits to
// the same engine, whose scheduler batches the requests of all clients (continuous batching).
// Routes: GET /v1/models, POST /v1/chat/completions, POST /v1/completions, GET /metrics,
// GET /health. Browser-facing checks (http_policy): JSON on POSTs, Origin, and Host on a
// loopback server without a key.
// Threads: listen() blocks the caller; stop() may be called from any thread (a signal thread).
#pragma once

#include "engine/model/model_config.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace es::server {

struct server_options {
    std::string model_dir; // with random_shape: the shape's name (served as NAME-random)
    // Instead of model_dir: random weights of this shape (load runs on the chosen backend). Such a
    // model has no tokenizer: only token-id prompts on /v1/completions are served, and each
    // generated token is written as "[id]" (random weights have no vocabulary to decode into).
    std::optional<model_config> random_shape;
    std::string precision = "bf16"; // CUDA weights: bf16 | fp8
    std::string kv_cache = "bf16";  // CUDA KV cache elements: bf16 | fp8 (E4M3: twice the tokens)
    std::string fp8_scales = "channel"; // CUDA, fp8 weights: channel | block128 (fp8_policy::scales)
    uint64_t kv_cache_bytes = 0;    // 0: the engine's default
    uint64_t kv_cache_min_bytes = 0; // of a KV pool mapped on demand, kept when idle (engine_params)
    double gpu_memory_utilization = 0.90; // CUDA: engine_params::gpu_memory_utilization
    std::string host = "127.0.0.1";
    int port = 8000;                    // 0: any free port (printed by listen)
    std::string api_key;                // empty: no authentication
    std::string served_model_name;      // empty: the model folder's name
    // Without a key, binding an address other than loopback is refused unless this is set.
    bool insecure_no_api_key = false;
    std::vector<std::string> allowed_origins; // browser origins allowed cross-site ("*": any)
    size_t max_body_bytes = 1 << 20;
    int64_t max_prompt_tokens = 0;      // 0: only the context bounds the prompt
    int32_t max_num_seqs = 16;
    int threads = 0;                    // CPU threads of the engine (0: all cores)
    std::string backend = "cpu";        // cpu | cuda | auto
    int http_threads = 0;               // 0: enough for max_num_seqs streams and a few more
    double header_timeout_s = 10;       // accept → the end of a request's headers
    double body_timeout_s = 30;         // the end of the headers → the end of the body
    double idle_timeout_s = 5;          // a kept-alive connection waiting for its next request
    double write_timeout_s = 30;        // one write of a response (a client that stops reading)
    size_t max_connections = 512;       // open connections in all; more get 503 at once
    size_t max_connections_per_client = 128; // open connections from one address
};

// Whether these options may start a server: an error naming the option to change, or empty.
// Resolves the host (no socket is opened), so it can run before the model loads.
std::string check_exposure(const server_options &o);

class api_server {
public:
    explicit api_server(server_options o);
    ~api_server();

    // Loads the model; an error message on failure (empty on success).
    std::string load();
    // Binds, prints "listening on http://HOST:PORT" on stdout, serves until stop().
    // Returns an error message when it cannot bind (empty after a clean stop).
    std::string listen();
    // Cancels every open request and stops accepting; listen() returns. Any thread.
    void stop();

private:
    struct impl;
    std::unique_ptr<impl> m;
};

} // namespace es::server
