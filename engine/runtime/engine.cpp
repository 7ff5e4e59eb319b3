// The engine's public face (engine.h): request streams, and the calls that post commands to the
// engine thread's step loop (step_loop.h), which owns the model, the scheduler and the telemetry.
#include "engine/runtime/engine.h"

#include "engine/runtime/step_loop.h"

namespace es {

int32_t step_token_budget(const engine_params &p, bool gpu) {
    return p.max_batched_tokens > 0 ? p.max_batched_tokens : gpu ? k_gpu_step_tokens : k_cpu_step_tokens;
}

// ---------------------------------------------------------------- request_stream

void request_stream::push(request_event ev) {
    std::function<void()> notify;
    {
        std::lock_guard lock(m_mutex);
        if (m_done) return;
        if (ev.kind != event_kind::token) m_done = true;
        m_events.push_back(std::move(ev));
        notify = m_notify;
    }
    m_cv.notify_all();
    if (notify) notify();
}

bool request_stream::wait_pop(request_event &ev, std::chrono::milliseconds timeout) {
    std::unique_lock lock(m_mutex);
    if (!m_cv.wait_for(lock, timeout, [&] { return !m_events.empty(); })) return false;
    ev = std::move(m_events.front());
    m_events.pop_front();
    return true;
}

bool request_stream::try_pop(request_event &ev) {
    std::lock_guard lock(m_mutex);
    if (m_events.empty()) return false;
    ev = std::move(m_events.front());
    m_events.pop_front();
    return true;
}

std::vector<request_event> request_stream::drain() {
    std::lock_guard lock(m_mutex);
    std::vector<request_event> out(std::make_move_iterator(m_events.begin()), std::make_move_iterator(m_events.end()));
    m_events.clear();
    return out;
}

bool request_stream::done() const {
    std::lock_guard lock(m_mutex);
    return m_done;
}

request_metrics request_stream::metrics() const {
    std::lock_guard lock(m_mutex);
    return m_metrics;
}

void request_stream::set_notify(std::function<void()> f) {
    std::lock_guard lock(m_mutex);
    m_notify = std::move(f);
}

engine::engine(engine_params p)
    : m_params(std::move(p)), m_loop(std::make_unique<step_loop>(m_params, m_telemetry)) {
    m_thread = std::thread([this] { m_loop->run(); });
}

engine::~engine() {
    m_loop->request_stop();
    if (m_thread.joinable()) m_thread.join();
}

int64_t engine::now_us() const { return m_loop->now_us(); }

std::future<status> engine::load_model(const std::filesystem::path &dir,
                                       std::function<void(const std::string &, float)> on_progress) {
    auto done = std::make_shared<std::promise<status>>();
    auto fut = done->get_future();
    cmd_load c;
    c.dir = dir;
    c.progress = std::move(on_progress);
    c.done = done;
    m_loop->post(std::move(c));
    return fut;
}

std::future<status> engine::load_random_model(const model_config &cfg, uint64_t seed) {
    auto done = std::make_shared<std::promise<status>>();
    auto fut = done->get_future();
    cmd_load c;
    c.random_cfg = cfg;
    c.seed = seed;
    c.done = done;
    m_loop->post(std::move(c));
    return fut;
}

std::future<status> engine::load_model(std::unique_ptr<model> built) {
    auto done = std::make_shared<std::promise<status>>();
    auto fut = done->get_future();
    if (!built) {
        done->set_value(error{"load_model: no model"});
        return fut;
    }
    cmd_load c;
    c.built = std::move(built);
    c.done = done;
    m_loop->post(std::move(c));
    return fut;
}

void engine::unload_model() { m_loop->post(cmd_unload{}); }

void engine::set_detailed_profiling(bool on) { m_loop->set_detailed_profiling(on); }

bool engine::detailed_profiling() const { return m_loop->detailed_profiling(); }

std::string render_request_prompt(const request_params &r) {
    std::vector<chat_message> msgs;
    if (!r.system_prompt.empty()) msgs.push_back({chat_role::system, r.system_prompt});
    msgs.insert(msgs.end(), r.messages.begin(), r.messages.end());
    if (!r.preset_prefix.empty())
        for (auto it = msgs.rbegin(); it != msgs.rend(); ++it)
            if (it->role == chat_role::user) {
                it->content = r.preset_prefix + it->content;
                break;
            }
    return render_chat(msgs, r.add_generation_prompt, r.continue_final_message);
}

bool engine::has_model() const { return m_loop->info().has_value(); }

std::optional<model_info> engine::info() const { return m_loop->info(); }

sampling_params engine::model_defaults() const {
    const auto i = m_loop->info();
    return i ? i->defaults : sampling_params{};
}

std::shared_ptr<request_stream> engine::submit(request_params r) {
    auto stream = std::shared_ptr<request_stream>(new request_stream(m_loop->next_id()));
    stream->m_metrics.t_submit_us = m_loop->now_us();
    m_loop->post(cmd_submit{stream, std::move(r)});
    return stream;
}

void engine::cancel(request_id id) { m_loop->post(cmd_cancel{id}); }

} // namespace es
