// The engine thread's state and its step loop, one method per phase (as vLLM's EngineCore.step:
// schedule → execute → update): commands first (admit a request, load or drop a model, cancel),
// then one step — schedule() turns the scheduler's chunks into a batch and submits its forward,
// step() finishes it (submitting its successor first where steps overlap: can_speculate), update()
// records the routing, samples, emits text and finishes requests — then publish() a telemetry
// snapshot, and trim_kv() gives the KV pool's free top back where the backend maps it on demand.
// Everything runs on the engine thread except post(), request_stop(), info() and now_us().
#pragma once

#include "engine/runtime/engine.h"
#include "engine/runtime/row_sampling.h"
#include "engine/runtime/scheduler.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <variant>

namespace es {

struct cmd_submit {
    std::shared_ptr<request_stream> stream;
    request_params params;
};
struct cmd_cancel {
    request_id id;
};
struct cmd_load {
    std::filesystem::path dir; // empty: random weights of `random_cfg`, or the model `built`
    std::optional<model_config> random_cfg;
    std::unique_ptr<model> built;
    uint64_t seed = 0;
    std::function<void(const std::string &, float)> progress;
    std::shared_ptr<std::promise<status>> done;
};
struct cmd_unload {};
using command = std::variant<cmd_submit, cmd_cancel, cmd_load, cmd_unload>;

struct live_request {
    std::shared_ptr<request_stream> stream;
    sampling_params sp;
    std::unique_ptr<sampler> smp;
    std::unique_ptr<detokenizer> detok;
    std::string held;   // text withheld while it may be the start of a stop string
    int32_t n_prompt = 0;
    int32_t traced = 0; // positions whose routing is recorded
    int32_t timed = 0;  // its sampling steps timed per phase (the first two always: its prompt's last, a decode)
};

// A step whose forward was submitted (backend::submit) and whose outputs are not yet processed.
struct inflight_step {
    scheduler_output so;
    std::vector<uint64_t> ids; // so.chunks[i].req's id: a request may finish or be cancelled meanwhile
    step_record rec;
    std::chrono::steady_clock::time_point t0, t1; // the step's start, its schedule's end
    bool updated = false;                          // the scheduler's update() ran (speculate)
};

class step_loop {
public:
    step_loop(const engine_params &p, telemetry_channel &telemetry);

    // Any thread.
    void post(command c);
    void request_stop();
    std::optional<model_info> info() const;
    int64_t now_us() const;
    request_id next_id() { return m_next_id++; }
    void set_detailed_profiling(bool on) { m_detailed.store(on); }
    bool detailed_profiling() const { return m_detailed.load(); }

    // The engine thread's body: until request_stop(); then every open stream is cancelled.
    void run();

private:
    using clk = std::chrono::steady_clock;
    // Commands.
    void admit(cmd_submit &c);
    void load(cmd_load &c);
    void drop_model();
    void finish_request(request_id id, const std::string &reason);
    void fail_stream(const std::shared_ptr<request_stream> &s, const std::string &msg);
    // Fails every request of a step whose forward could not run (still alive: none finished since).
    void fail_step(const inflight_step &f, const std::string &what);

    // The step.
    void step();
    // Schedules a step and submits its forward. Tokens that are placeholders (negative: the picks
    // of the step still running, speculate()) go to the backend as fed tokens. Empty when nothing
    // was scheduled or the submission failed (its requests failed).
    std::optional<inflight_step> schedule();
    // Whether the step still running can have its successor submitted now (overlapped steps):
    // every running request decodes in it with a token the backend knows (its draw on the device,
    // or a greedy sampler's top candidate), none is waiting or about to reach its length limit, no command waits,
    // and the blocks for one more position are free (the next schedule then neither preempts nor
    // admits).
    bool can_speculate(const inflight_step &f);
    sampled_row sampled_row_of(const scheduled_chunk &c, int32_t input_index);
    // Submits the step after f before f's tokens are known: each request's next token is a
    // placeholder (−row − 1: row `row` of f's outputs, fed on the backend) until update(f) puts
    // the sampled id in its place.
    std::optional<inflight_step> speculate(inflight_step &f);
    // Reads a finished step's outputs: routing telemetry, sampling, emission, finishing. Requests
    // that finished or were cancelled while it ran are skipped (their rows too).
    void update(inflight_step &f, const status &st);
    void record_routing(const inflight_step &f, const std::vector<char> &alive);
    double sample_and_emit(inflight_step &f, const std::vector<char> &alive);
    void close_step(inflight_step &f, clk::time_point t2, clk::time_point t3, clk::time_point t4, double emit_ms);
    bool emit_text(live_request &lr, const std::string &piece, const std::vector<int32_t> &ids);
    void publish(bool force);

    // The KV pool's memory (engine_params::kv_cache_min_bytes and the trims' intervals): gives
    // back the free top of the pool (above the floor, m_kv_floor) when nothing is in flight — the
    // uncached blocks as soon as no request is left, the cached ones too after kv_idle_trim_ms of
    // that, and while requests run the uncached ones once per kv_busy_trim_ms. Publishes a
    // snapshot when memory went back.
    void trim_kv();
    // Whether a trim while requests run is due: the interval passed and the pool holds memory
    // above the floor (the step then does not overlap its successor, so that nothing is in flight
    // after it; trim_kv restarts the interval, whether or not a whole step was free).
    bool kv_trim_due() const;
    // When the idle engine next has a trim to make (the cached blocks' delay), if it has one.
    std::optional<clk::time_point> kv_idle_deadline() const;

    const engine_params m_params;
    telemetry_channel &m_telemetry;
    const clk::time_point m_t0 = clk::now();
    std::atomic<uint64_t> m_next_id{1};
    std::atomic<bool> m_detailed{false}; // every step timed per phase (engine::set_detailed_profiling)

    // The command queue (any thread).
    std::mutex m_mutex;
    std::condition_variable m_cv;
    bool m_stop = false;
    std::deque<command> m_commands;
    // What info() answers (any thread).
    mutable std::mutex m_info_mutex;
    std::optional<model_info> m_info;

    // The engine thread's.
    std::unique_ptr<model> m_mdl;
    std::unique_ptr<scheduler> m_sched;
    std::map<request_id, live_request> m_live;
    forward_output m_out;                   // every step's forward output (its buffers reused)
    std::optional<inflight_step> m_pending; // a step submitted and not yet processed (overlapped steps)
    std::vector<float> m_row_scratch;       // a full logits row where the backend does not draw
    clk::time_point m_last_step_end{};      // the last processed step's end
    clk::time_point m_last_publish{};
    // Telemetry.
    uint64_t m_n_steps = 0;
    std::deque<step_record> m_ring;
    std::vector<int32_t> m_moe_layers;
    std::vector<uint64_t> m_expert_tokens, m_expert_window_sum;
    std::vector<double> m_expert_weight;
    std::deque<std::vector<uint32_t>> m_window;
    // The latest step timed on the device: its launches and number (telemetry_snapshot).
    std::vector<op_time> m_timeline;
    int32_t m_steps_untimed = 0; // steps since the last one timed per phase
    uint64_t m_timeline_step = 0;
    double m_read_bandwidth = 0.0; // the device's, measured at load (0: not a GPU, or unknown)
    // The KV pool's memory: blocks always kept mapped, when the engine went idle (no request),
    // whether that idle spell's cached blocks were trimmed, the last trim while busy.
    int32_t m_kv_floor = 0;
    std::optional<clk::time_point> m_idle_since;
    bool m_idle_trimmed = false;
    clk::time_point m_last_busy_trim{};
    uint64_t m_n_finished = 0, m_n_generated = 0, m_n_prompt_tokens = 0, m_n_overlapped = 0;
};

} // namespace es
