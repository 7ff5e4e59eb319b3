// The engine: one worker thread that owns all model state (weights, KV cache, scheduler) and
// runs the step loop schedule → run → sample → emit. Any thread may submit and cancel requests
// and read telemetry; results come back through each request's thread-safe event stream.
// Destroying the engine mid-generation finishes every open stream (reason "cancelled"), joins
// the thread and frees everything.
#pragma once

#include "engine/backend/routing_intervention.h"
#include "engine/core/telemetry.h"
#include "engine/model/chat_template.h"
#include "engine/runtime/memory_estimate.h"
#include "engine/runtime/model.h"
#include "engine/runtime/sampler.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace es {

using request_id = uint64_t;
class step_loop;

struct request_params {
    std::vector<chat_message> messages; // rendered with the chat template, or …
    std::vector<int32_t> prompt_ids;    // … token ids used as they are when messages is empty
    std::string system_prompt;          // when non-empty, the first message (system)
    std::string preset_prefix;          // mode prefix (【技术解析模式】…) put before the last user message
    sampling_params sampling;           // callers start from engine::model_defaults()
    bool add_generation_prompt = true;
    // The last message is an assistant reply to carry on (render_chat's continue_final_message):
    // the prompt ends inside it, so what is generated extends that reply.
    bool continue_final_message = false;
    // Expert intervention (routing_intervention.h); null or empty: the model's routing. Refused
    // with a message when the backend does not apply interventions or the model has no such
    // layer or expert. Its KV is never shared through the prefix cache.
    std::shared_ptr<const routing_intervention> routing;
    // Non-empty: the request fails at once with this message. A caller that found part of the
    // request invalid before building it still gets a stream, an id and the failure through the
    // same events as every other failure.
    std::string refusal;
};

// The text a request's messages are tokenized from: the system prompt first, the preset prefix
// before the last user message, rendered with the chat template. Anyone counting a prompt's
// tokens before submitting it renders it here, so the count is the engine's.
std::string render_request_prompt(const request_params &r);

enum class event_kind { token, finished, failed };

struct request_event {
    event_kind kind = event_kind::token;
    std::string text;                 // token: text delta (may be empty while a UTF-8 char or a
                                      // possible stop string is pending)
    std::vector<int32_t> token_ids;   // token: ids this event covers
    std::string finish_reason;        // finished: "stop" | "length" | "cancelled"
    std::string error;                // failed: what went wrong
    int64_t t_us = 0;                 // engine clock
};

// Per-request measurements, copied out on request (ARCHITECTURE.md metric definitions).
struct request_metrics {
    int64_t t_submit_us = 0, t_first_token_us = -1, t_finish_us = -1;
    std::vector<int64_t> token_times_us;  // one per generated token
    int32_t n_prompt_tokens = 0, n_cached_prompt_tokens = 0, n_preemptions = 0;
    uint64_t seed = 0;
    // Routing trace: for position p (prompt and generated), MoE slot m, choice j:
    // trace[(p * n_moe + m) * k + j]; -1 where the position was served by the prefix cache.
    // k is the request's (its intervention's top-k, else the model's).
    int32_t n_moe_layers = 0, k = 0;
    std::vector<int16_t> trace;
    std::vector<float> trace_weights;     // same layout
    // The router's margin (routing_record::margins) of position p in MoE slot m:
    // trace_margins[p * n_moe + m]; NaN where the position was served by the prefix cache or the
    // backend does not record margins (CUDA).
    std::vector<float> trace_margins;
    double ttft_ms() const { return t_first_token_us < 0 ? -1.0 : (t_first_token_us - t_submit_us) / 1000.0; }
};

class request_stream {
public:
    request_id id() const { return m_id; }
    // Blocks until an event arrives or the timeout passes; false on timeout.
    bool wait_pop(request_event &ev, std::chrono::milliseconds timeout);
    bool try_pop(request_event &ev);
    std::vector<request_event> drain();
    bool done() const;                  // a finished/failed event has been queued
    request_metrics metrics() const;
    // Called on the engine thread after events are queued (e.g. to wake a GUI timer); keep it cheap.
    void set_notify(std::function<void()> f);

private:
    friend class engine;
    friend class step_loop;
    explicit request_stream(request_id id) : m_id(id) {}
    void push(request_event ev);

    request_id m_id;
    mutable std::mutex m_mutex;
    std::condition_variable m_cv;
    std::deque<request_event> m_events;
    bool m_done = false;
    request_metrics m_metrics;
    std::function<void()> m_notify;
};

inline constexpr int32_t k_gpu_step_tokens = 2048, k_cpu_step_tokens = 512;

struct engine_params {
    model_load_params load;
    int32_t max_num_seqs = 16;
    // Tokens in one step; 0: the backend's own (k_gpu_step_tokens where the KV pool is in device
    // memory, a 2,048-token prompt in one step; else k_cpu_step_tokens, so that a long prompt's
    // chunk keeps a CPU step short beside the other chats' decodes).
    int32_t max_batched_tokens = 0;
    int32_t block_size = 16;
    int32_t n_kv_blocks = 0;            // 0: from kv_cache_bytes
    // 0: on a GPU, what gpu_memory_utilization leaves once the weights and the workspace are
    // placed (up to one full context from what is free when that is less); on the CPU,
    // min(1 GiB, a quarter of RAM). Either way capped at what max_num_seqs full contexts need
    // (kv_budget_bytes).
    uint64_t kv_cache_bytes = 0;
    // Where the backend maps the KV pool's memory on demand (backend::kv_ensure_blocks; the CUDA
    // backend), the budget above is the pool's capacity and its memory follows the requests: the
    // blocks requests need are mapped before their step, and the free top of the pool is given
    // back — free blocks without a cached prefix as soon as no request is left, cached prefix
    // blocks too after kv_idle_trim_ms without a request, and while requests run the free top at
    // most every kv_busy_trim_ms (each such trim costs one step its overlap). kv_cache_min_bytes of
    // the pool (its lowest blocks) stay mapped however idle the engine is.
    uint64_t kv_cache_min_bytes = 0;
    int32_t kv_idle_trim_ms = 30000;
    int32_t kv_busy_trim_ms = 10000;
    // The share of the GPU's memory this process may fill (weights, workspace and KV pool
    // together), as vLLM's --gpu-memory-utilization: what other processes hold counts as used.
    double gpu_memory_utilization = 0.90;
    bool enable_prefix_caching = true;
    int32_t telemetry_ring = 512;       // steps kept in snapshots
    int32_t telemetry_window = 64;      // steps in the live expert window
    // Overlapped decode steps: while a step of greedy decodes (samplers without penalties) runs,
    // the next one is submitted with its tokens fed from the running step's picks (backend::submit),
    // so that the host's part of a step hides behind the GPU's. automatic: where the backend
    // overlaps steps (CUDA); on: always (the default submit runs at once: the CPU then computes
    // the same tokens, which is what the tests check); off: never.
    enum class overlap_mode { automatic, on, off } overlap = overlap_mode::automatic;
    // One step in this many is timed per phase on the device (batch::time_phases), which costs it
    // the overlap with its neighbours (bench --phase-timing measures the cost); 1: every step
    // (engine::set_detailed_profiling does so at run time); 0: none. Backends that time every
    // forward on the host (the CPU) ignore it.
    int32_t phase_timing_every = 64;
};

// engine_params::max_batched_tokens as it applies to a backend whose KV pool is (gpu) or is not in
// device memory.
int32_t step_token_budget(const engine_params &p, bool gpu);

struct model_info {
    std::filesystem::path dir;
    model_config config;
    std::string backend_name;
    std::string backend_note;           // model::backend_note: why CUDA is not used, when it is not
    sampling_params defaults;
    int32_t n_kv_blocks = 0, block_size = 0; // the KV pool's capacity
    bool routing_interventions = false; // backend::supports_routing_interventions
    std::shared_ptr<const tokenizer> tok; // the model's (null without one); encode() is thread-safe
    std::string kv_note;                // how the KV pool's memory is held (backend_memory::kv_note)
};

class engine {
public:
    explicit engine(engine_params p = {});
    ~engine();
    engine(const engine &) = delete;
    engine &operator=(const engine &) = delete;

    // Loads (or replaces) the model on the engine thread; progress is called there.
    // Open requests of a replaced model are finished with "cancelled".
    std::future<status> load_model(const std::filesystem::path &dir,
                                   std::function<void(const std::string &, float)> on_progress = {});
    // Random weights of a real shape, no tokenizer (serve-bench on real shapes).
    std::future<status> load_random_model(const model_config &cfg, uint64_t seed);
    // A model built by the caller (es::load_model, or a backend wrapped by a test), owned by the
    // engine from now on.
    std::future<status> load_model(std::unique_ptr<model> built);
    void unload_model();
    static result<memory_estimate> estimate_memory(const std::filesystem::path &dir, const engine_params &p);
    // The same for a model not at hand (not yet downloaded): from its config alone, its tensors
    // typed as the hub's ERNIE-4.5 checkpoints are (cpu_weight_bytes without tensors).
    static result<memory_estimate> estimate_memory(const model_config &c, const engine_params &p);

    bool has_model() const;
    std::optional<model_info> info() const;
    sampling_params model_defaults() const;

    // Never blocks on the step loop. Invalid requests fail through the stream.
    std::shared_ptr<request_stream> submit(request_params r);
    void cancel(request_id id);

    std::shared_ptr<const telemetry_snapshot> telemetry() const { return m_telemetry.latest(); }
    int64_t now_us() const;
    // Detailed profiling: every step timed per phase on the device (else one in
    // engine_params::phase_timing_every). Any thread; from the next step on.
    void set_detailed_profiling(bool on);
    bool detailed_profiling() const;

private:
    engine_params m_params;
    telemetry_channel m_telemetry;
    std::unique_ptr<step_loop> m_loop; // the engine thread's state (step_loop.h)
    std::thread m_thread;
};

} // namespace es
