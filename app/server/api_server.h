// api_server: the OpenAI-compatible HTTP front of one shared es::engine. A gate (http_gate) owns
// the listening socket and bounds every client — connections per address and in all, deadlines
// for a request's head and body, body limits — and hands complete requests to a pool of worker
// threads, where cpp-httplib's request processing runs the handlers; every handler submits to
// the same engine, whose scheduler batches the requests of all clients (continuous batching).
// Routes: GET /v1/models, POST /v1/chat/completions, POST /v1/completions, GET /metrics,
// GET /health. Browser-facing checks (http_policy): JSON on POSTs, Origin, and Host on a
// loopback server without a key.
// Two ways to get a model: load() loads its own engine (the CLI's `serve`), or the server is made
// on an engine someone else owns and has loaded (the desktop app's), and serves that model beside
// its other clients without loading a second copy of the weights.
// Threads: listen() (or serve()) blocks the caller; stop() may be called from any thread (a signal
// thread); the request logger runs on the worker threads.
#pragma once

#include "engine/model/model_config.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace es {
class engine;
struct request_metrics;
} // namespace es

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

// What a host name stands for: resolve_error when it does not resolve, else whether every address
// it resolves to is a loopback one (127.0.0.0/8, ::1). "" is every address (not loopback).
struct host_exposure {
    std::string resolve_error;
    bool loopback = false;
};
host_exposure resolve_exposure(const std::string &host);

// Whether these options may start a server: an error naming the option to change, or empty.
// Resolves the host (no socket is opened), so it can run before the model loads. Without a key,
// an address that is not loopback is refused unless insecure_no_api_key is set.
std::string check_exposure(const server_options &o);

// One request a worker answered, as a request log shows it. Token counts, TTFT and the engine's
// measurements are there only for a completion that reached the engine.
struct request_log_entry {
    int64_t unix_ms = 0;           // when the request was handed to a worker (its bytes complete)
    std::string client;            // the peer, "ip:port" ("[ip]:port" for IPv6)
    std::string method, path;      // from the request line
    std::string model;             // the model the body asked for ("" when none)
    int status = 0;                // the response's status (0: none was written)
    bool stream = false;
    int64_t prompt_tokens = -1, completion_tokens = -1; // -1: not a completion the engine ran
    double duration_ms = 0;        // handed to a worker → the response's last byte written
    double ttft_ms = -1;           // streaming completions: submit → first token (engine clock)
    std::string finish_reason;     // stop | length | cancelled ("" without an engine request)
    uint64_t request_id = 0;       // the engine's request id (0: none)
    std::shared_ptr<const request_metrics> metrics; // the engine's measurements (null: none)
};
// Called on a worker thread once per request, after its response; keep it short (queue and
// return) — it holds the worker.
using request_logger = std::function<void(const request_log_entry &)>;

// The server's running totals. prompt/generation tokens: of completions that ended; active:
// requests being answered now; errors: answers with a status of 400 or more.
// tokens_out: tokens the engine has generated for this server's requests so far, those still
// running included (a live rate is its change over time).
struct server_totals {
    uint64_t requests = 0, errors = 0, active = 0, prompt_tokens = 0, generation_tokens = 0, tokens_out = 0;
};

class api_server {
public:
    // Loads its own model with load() (model_dir or random_shape).
    explicit api_server(server_options o);
    // Serves the model loaded in `shared` (whose owner keeps using it): load() reads that model's
    // name, context, tokenizer and defaults instead of loading; the backend and memory options
    // are the engine's own and these options' are unused. stop() cancels only this server's
    // requests and leaves the engine and its model as they are.
    api_server(server_options o, std::shared_ptr<engine> shared);
    ~api_server();

    // Loads the model (or, on a shared engine, takes the loaded one's facts); an error message on
    // failure (empty on success): a shared engine without a model, or one without a tokenizer,
    // is refused.
    std::string load();
    // Binds, prints "listening on http://HOST:PORT" on stdout, serves until stop().
    // Returns an error message when it cannot bind (empty after a clean stop).
    std::string listen();
    // listen() in two steps, for a caller that reports the address itself: bind() opens the
    // listening socket (an error naming the address — "the port is in use" — or the exposure
    // refusal; empty on success), serve() then serves until stop() and prints nothing.
    std::string bind();
    void serve();
    // The port bound (after bind(); 0 before), and the name the model is served as (after load()).
    int port() const;
    std::string served_model_name() const;
    // Before bind(): called once per answered request (request_log_entry).
    void set_request_logger(request_logger logger);
    server_totals totals() const;
    // Cancels every open request and stops accepting; listen() returns. Any thread.
    void stop();

private:
    struct impl;
    std::unique_ptr<impl> m;
};

} // namespace es::server
