// The engine thread's step loop (step_loop.h): commands, then one step — schedule, execute,
// update — then a telemetry snapshot. Everything here runs on the engine thread, except post(),
// request_stop(), info() and now_us().
#include "engine/runtime/step_loop.h"

#include "engine/runtime/memory_estimate.h"
#include "engine/runtime/row_sampling.h"

#include <algorithm>
#include <limits>

namespace es {

namespace {

using clk = std::chrono::steady_clock;
double ms(clk::time_point a, clk::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); }

// Length of the longest suffix of `text` that is a proper prefix of some stop string.
size_t held_suffix(const std::string &text, const std::vector<std::string> &stops) {
    size_t best = 0;
    for (const auto &s : stops)
        for (size_t len = std::min(s.size() - 1, text.size()); len > best; --len)
            if (text.compare(text.size() - len, len, s, 0, len) == 0) {
                best = len;
                break;
            }
    return best;
}

} // namespace

step_loop::step_loop(const engine_params &p, telemetry_channel &telemetry) : m_params(p), m_telemetry(telemetry) {}

int64_t step_loop::now_us() const {
    return std::chrono::duration_cast<std::chrono::microseconds>(clk::now() - m_t0).count();
}

void step_loop::post(command c) {
    {
        std::lock_guard lock(m_mutex);
        m_commands.push_back(std::move(c));
    }
    m_cv.notify_all();
}

void step_loop::request_stop() {
    {
        std::lock_guard lock(m_mutex);
        m_stop = true;
    }
    m_cv.notify_all();
}

std::optional<model_info> step_loop::info() const {
    std::lock_guard lock(m_info_mutex);
    return m_info;
}

void step_loop::run() {
    publish(true);
    for (;;) {
        std::deque<command> cmds;
        {
            std::unique_lock lock(m_mutex);
            const bool busy = (m_sched && m_sched->has_work()) || m_pending;
            const auto woken = [&] { return m_stop || !m_commands.empty(); };
            if (!busy) {
                // Idle: until a command, or until the KV pool's cached top is due to go.
                if (const auto deadline = kv_idle_deadline()) m_cv.wait_until(lock, *deadline, woken);
                else m_cv.wait(lock, woken);
            }
            if (m_stop) break;
            cmds.swap(m_commands);
        }
        for (auto &c : cmds) {
            if (auto *s = std::get_if<cmd_submit>(&c)) admit(*s);
            else if (auto *x = std::get_if<cmd_cancel>(&c)) finish_request(x->id, "cancelled");
            else if (auto *l = std::get_if<cmd_load>(&c)) load(*l);
            else if (std::holds_alternative<cmd_unload>(c)) drop_model();
        }
        if ((m_sched && m_sched->has_work()) || m_pending) {
            step();
            publish(!m_sched->has_work());
        } else {
            publish(true);
        }
        trim_kv();
    }
    // Shutdown: every open stream learns it was cancelled; pending commands are answered.
    std::deque<command> rest;
    {
        std::lock_guard lock(m_mutex);
        rest.swap(m_commands);
    }
    for (auto &c : rest) {
        if (auto *s = std::get_if<cmd_submit>(&c)) fail_stream(s->stream, "the engine is shutting down");
        else if (auto *l = std::get_if<cmd_load>(&c)) l->done->set_value(error{"the engine is shutting down"});
    }
    drop_model();
}

// Finishes a live request: held-back text flushed (unless a stop string ended it), its stream told why.
void step_loop::finish_request(request_id id, const std::string &reason) {
    auto it = m_live.find(id);
    if (it == m_live.end()) return;
    live_request &lr = it->second;
    // Flush held-back text (no stop string completed) unless stopped by one.
    std::string tail = lr.held + (lr.detok ? lr.detok->flush() : std::string());
    if (!tail.empty() && reason != "stop_string") lr.stream->push({event_kind::token, tail, {}, {}, {}, now_us()});
    {
        std::lock_guard lock(lr.stream->m_mutex);
        lr.stream->m_metrics.t_finish_us = now_us();
    }
    lr.stream->push({event_kind::finished, {}, {}, reason == "stop_string" ? "stop" : reason, {}, now_us()});
    if (m_sched) m_sched->finish(id);
    m_live.erase(it);
    ++m_n_finished;
}

void step_loop::fail_stream(const std::shared_ptr<request_stream> &s, const std::string &msg) {
    s->push({event_kind::failed, {}, {}, {}, msg, now_us()});
}

// Fails every request of a step whose forward could not run (still alive: none finished since).
void step_loop::fail_step(const inflight_step &f, const std::string &what) {
    for (request_id id : f.ids) {
        auto it = m_live.find(id);
        if (it == m_live.end()) continue;
        fail_stream(it->second.stream, what);
        m_sched->finish(id);
        m_live.erase(it);
    }
}

// The model and its scheduler go; a forward in flight is finished and its requests cancelled.
void step_loop::drop_model() {
    if (m_pending && m_mdl) {
        forward_output discard;
        m_mdl->be->finish(discard); // (its requests are cancelled below)
    }
    m_pending.reset();
    std::vector<request_id> ids;
    for (auto &[id, lr] : m_live) ids.push_back(id);
    for (request_id id : ids) finish_request(id, "cancelled");
    m_sched.reset();
    m_mdl.reset();
    m_kv_floor = 0;
    m_idle_since.reset();
    m_idle_trimmed = false;
    std::lock_guard lock(m_info_mutex);
    m_info.reset();
}

// A submitted request enters the scheduler: its prompt rendered and tokenized, checked, and a
// sampler and detokenizer made for it.
void step_loop::admit(cmd_submit &c) {
    request_params &r = c.params;
    if (!r.refusal.empty()) return fail_stream(c.stream, r.refusal);
    if (!m_mdl) return fail_stream(c.stream, "no model is loaded");
    if (auto msg = r.sampling.validate(); !msg.empty()) return fail_stream(c.stream, "sampling parameters: " + msg);
    std::vector<int32_t> ids;
    if (!r.messages.empty()) {
        if (!m_mdl->tok) return fail_stream(c.stream, "the model has no tokenizer; submit token ids");
        ids = m_mdl->tok->encode(render_request_prompt(r));
    } else {
        ids = r.prompt_ids;
    }
    for (int32_t id : ids)
        if (id < 0 || id >= m_mdl->config.n_vocab)
            return fail_stream(c.stream, "token id " + std::to_string(id) + " is outside the vocabulary");
    const bool intervenes = r.routing && !r.routing->empty();
    if (intervenes) {
        if (!m_mdl->be->supports_routing_interventions())
            return fail_stream(c.stream, "expert interventions run on the CPU backend; the " + m_mdl->be->name() +
                                             " backend's router does not apply them");
        if (auto s = check_routing_intervention(*r.routing, m_mdl->config); !s)
            return fail_stream(c.stream, "expert intervention: " + s.message());
    }
    auto sr = std::make_unique<sched_request>();
    sr->id = c.stream->id();
    if (intervenes) sr->routing = r.routing;
    sr->tokens = ids;
    sr->n_prompt = int32_t(ids.size());
    if (auto msg = m_sched->add(std::move(sr)); !msg.empty()) return fail_stream(c.stream, msg);
    live_request lr;
    lr.stream = c.stream;
    lr.sp = r.sampling;
    lr.smp = std::make_unique<sampler>(r.sampling);
    if (m_mdl->tok) lr.detok = std::make_unique<detokenizer>(*m_mdl->tok);
    lr.n_prompt = int32_t(ids.size());
    {
        std::lock_guard lock(c.stream->m_mutex);
        auto &m = c.stream->m_metrics;
        m.n_prompt_tokens = lr.n_prompt;
        m.seed = lr.smp->seed();
        m.n_moe_layers = int32_t(m_moe_layers.size());
        m.k = intervenes && r.routing->top_k > 0 ? r.routing->top_k : int32_t(m_mdl->config.n_expert_used);
    }
    m_n_prompt_tokens += uint64_t(ids.size());
    m_live.emplace(c.stream->id(), std::move(lr));
    if (r.sampling.max_tokens == 0) finish_request(c.stream->id(), "length");
}

// Loads a model (from a folder or random weights of a shape): the KV pool sized to the budget,
// a scheduler over it, the telemetry reset.
void step_loop::load(cmd_load &c) {
    drop_model();
    model_load_params lp = m_params.load;
    lp.on_progress = c.progress;
    auto m = c.built               ? result<std::unique_ptr<model>>(std::move(c.built))
             : c.random_cfg        ? es::make_random_model(*c.random_cfg, c.seed, lp)
                                   : es::load_model(c.dir, lp);
    if (!m) return c.done->set_value(m.err());
    auto &mdl = *m;
    const model_config &cfg = mdl->config;
    // The budget in the pools' real bytes (kv_block_bytes: fp32 on the CPU, BF16 or FP8 on the
    // GPU, so an FP8 KV cache holds twice the blocks), known once a minimal pool exists. On a
    // GPU the workspace of the largest step is placed first, so that the pool takes what the
    // weights and the workspace leave (kv_budget_bytes).
    if (auto s = mdl->be->init_kv_cache({m_params.block_size, 2}); !s) return c.done->set_value(s.err());
    device_room room;
    const int32_t step_tokens = step_token_budget(m_params, mdl->be->kv_in_device_memory());
    if (mdl->be->kv_in_device_memory()) {
        const int32_t blocks_per_seq = int32_t((cfg.n_ctx_train + m_params.block_size - 1) / m_params.block_size);
        if (auto s = mdl->be->reserve_workspace(step_tokens, m_params.max_num_seqs, blocks_per_seq); !s)
            return c.done->set_value(s.err());
        const backend_memory bm = mdl->be->memory();
        room = {bm.device_total, bm.device_free};
    }
    // Measured before the KV pool takes the free memory the measurement reads through.
    m_read_bandwidth = mdl->be->device_read_bandwidth();
    const int32_t n_blocks = pick_kv_blocks(m_params, cfg, mdl->be->kv_block_bytes(), room);
    if (auto s = mdl->be->init_kv_cache({m_params.block_size, n_blocks, true}); !s) return c.done->set_value(s.err());
    // A backend that maps the pool on demand has none of it mapped yet: the floor now, the rest as
    // requests need it (the scheduler's grow function, which asks the backend), given back by
    // trim_kv.
    const uint64_t block_bytes = std::max<uint64_t>(mdl->be->kv_block_bytes(), 1);
    m_kv_floor = int32_t(std::min<uint64_t>((m_params.kv_cache_min_bytes + block_bytes - 1) / block_bytes,
                                            uint64_t(n_blocks)));
    if (auto s = mdl->be->kv_ensure_blocks(m_kv_floor); !s) return c.done->set_value(s.err());
    scheduler_params sp;
    sp.max_num_seqs = m_params.max_num_seqs;
    sp.max_batched_tokens = step_tokens;
    sp.block_size = m_params.block_size;
    sp.n_blocks = n_blocks;
    sp.n_mapped = mdl->be->kv_mapped_blocks();
    sp.grow = [be = mdl->be.get()](int32_t want, std::string &error) {
        if (const status s = be->kv_ensure_blocks(want); !s) error = s.message();
        return be->kv_mapped_blocks();
    };
    sp.max_model_len = cfg.n_ctx_train;
    sp.enable_prefix_caching = m_params.enable_prefix_caching;
    m_sched = std::make_unique<scheduler>(sp);
    m_moe_layers.clear();
    for (int64_t il = 0; il < cfg.n_layer; ++il)
        if (cfg.is_moe_layer(il)) m_moe_layers.push_back(int32_t(il));
    const size_t n_cells = m_moe_layers.size() * size_t(cfg.n_expert);
    m_expert_tokens.assign(n_cells, 0);
    m_expert_weight.assign(n_cells, 0.0);
    m_expert_window_sum.assign(n_cells, 0);
    m_window.clear();
    m_ring.clear();
    m_timeline.clear();
    m_timeline_step = 0;
    m_mdl = std::move(mdl);
    {
        std::lock_guard lock(m_info_mutex);
        m_info = model_info{m_mdl->dir,
                            cfg,
                            m_mdl->be->name(),
                            m_mdl->backend_note,
                            m_mdl->generation_defaults,
                            n_blocks,
                            m_params.block_size,
                            m_mdl->be->supports_routing_interventions(),
                            m_mdl->tok,
                            m_mdl->be->memory().kv_note};
    }
    c.done->set_value(ok_status());
}

// Appends text to a request's output, holding back what may begin a stop string.
// Returns true when a stop string completed (the request must finish).
bool step_loop::emit_text(live_request &lr, const std::string &piece, const std::vector<int32_t> &ids) {
    std::string text = lr.held + piece;
    lr.held.clear();
    const auto &stops = lr.sp.stop_strings;
    if (!stops.empty()) {
        size_t cut = std::string::npos;
        for (const auto &s : stops)
            if (!s.empty())
                if (size_t at = text.find(s); at != std::string::npos) cut = std::min(cut, at);
        if (cut != std::string::npos) {
            lr.stream->push({event_kind::token, text.substr(0, cut), ids, {}, {}, now_us()});
            return true;
        }
        const size_t keep = held_suffix(text, stops);
        lr.held = text.substr(text.size() - keep);
        text.resize(text.size() - keep);
    }
    lr.stream->push({event_kind::token, text, ids, {}, {}, now_us()});
    return false;
}

// The sampling of chunk c's output row (its token at batch index input_index): the request's
// ids before the token it draws (a placeholder last while the step before still runs).
sampled_row step_loop::sampled_row_of(const scheduled_chunk &c, int32_t input_index) {
    live_request &lr = m_live.at(c.req->id);
    const size_t at = size_t(c.start + c.n_new);
    sampled_row r;
    r.smp = lr.smp.get();
    r.prompt = std::span<const int32_t>(c.req->tokens.data(), size_t(lr.n_prompt));
    r.output = std::span<const int32_t>(c.req->tokens.data() + lr.n_prompt, at - size_t(lr.n_prompt));
    r.input_index = input_index;
    return r;
}

// Schedules a step and submits its forward. Tokens that are placeholders (negative: the picks
// of the step still running, speculate()) go to the backend as fed tokens. Empty when nothing
// was scheduled or the submission failed (its requests failed).
std::optional<inflight_step> step_loop::schedule() {
    inflight_step f;
    f.rec.step = m_n_steps++;
    f.t0 = clk::now();
    f.rec.t_start_us = int64_t(std::chrono::duration_cast<std::chrono::microseconds>(f.t0 - m_t0).count());
    f.so = m_sched->schedule();
    f.t1 = clk::now();
    // Requests the KV pool cannot grow to hold (nothing runs that could free blocks): failed.
    for (const auto &[id, why] : f.so.failed) {
        auto it = m_live.find(id);
        if (it == m_live.end()) continue;
        fail_stream(it->second.stream, why);
        m_live.erase(it);
    }
    f.rec.n_preempted = int32_t(f.so.preempted.size());
    if (f.so.chunks.empty()) return std::nullopt;
    f.rec.seq_tokens.reserve(f.so.chunks.size());
    for (const scheduled_chunk &c : f.so.chunks) {
        f.rec.seq_tokens.emplace_back(c.req->id, c.n_new);
        f.ids.push_back(c.req->id);
    }
    batch b;
    std::vector<sampled_row> rows; // one per logits row
    for (size_t i = 0; i < f.so.chunks.size(); ++i) {
        const scheduled_chunk &c = f.so.chunks[i];
        b.seqs.push_back({c.req->blocks, c.req->routing});
        for (int32_t p = c.start; p < c.start + c.n_new; ++p) {
            b.tokens.push_back(c.req->tokens[p]);
            b.pos.push_back(p);
            b.seq.push_back(int32_t(i));
        }
        if (c.samples) {
            b.logits_rows.push_back(b.n_tokens() - 1);
            rows.push_back(sampled_row_of(c, b.n_tokens() - 1));
        }
    }
    // Each row is drawn on the backend where it can (nothing in the engine needs whole rows).
    request_sampling(*m_mdl->be, b, rows);
    // One step in phase_timing_every is timed per phase, and each request's first two (its
    // prompt's last chunk or whole prompt, and a decode), so that every reply has its own.
    const int32_t every = m_params.phase_timing_every;
    b.time_phases = m_detailed.load(std::memory_order_relaxed) || (every > 0 && m_steps_untimed + 1 >= every);
    for (const scheduled_chunk &c : f.so.chunks)
        b.time_phases = b.time_phases || (every > 0 && c.samples && m_live.at(c.req->id).timed < 2);
    m_steps_untimed = b.time_phases ? 0 : m_steps_untimed + 1;
    if (b.time_phases)
        for (const scheduled_chunk &c : f.so.chunks) m_live.at(c.req->id).timed += c.samples ? 1 : 0;
    if (const status st = m_mdl->be->submit(b); !st) {
        fail_step(f, "the forward pass failed: " + st.message());
        return std::nullopt;
    }
    return f;
}

// Whether the step still running can have its successor submitted now (overlapped steps):
// every running request decodes in it with a greedy sampler without penalties (its token is
// the backend's pick), none is waiting or about to reach its length limit, no command waits,
// and the blocks for one more position are free (the next schedule then neither preempts nor
// admits).
bool step_loop::can_speculate(const inflight_step &f) {
    const bool on = m_params.overlap == engine_params::overlap_mode::on ||
                    (m_params.overlap == engine_params::overlap_mode::automatic && m_mdl->be->overlaps_steps());
    if (!on || m_sched->n_waiting() > 0 || size_t(m_sched->n_running()) != f.so.chunks.size()) return false;
    {
        std::lock_guard lock(m_mutex);
        if (!m_commands.empty()) return false;
    }
    const auto &pool = m_sched->pool();
    const int32_t bs = pool.block_size();
    const int64_t kv_capacity = int64_t(pool.n_blocks()) * bs;
    int32_t need_blocks = 0;
    for (size_t i = 0; i < f.so.chunks.size(); ++i) {
        const scheduled_chunk &c = f.so.chunks[i];
        auto it = m_live.find(f.ids[i]); // (by id: a finished request's pointer dangles)
        if (it == m_live.end() || c.n_new != 1 || !c.samples) return false;
        if (!it->second.smp->picks_top() && !m_mdl->be->supports_sampling()) return false;
        const sched_request &sr = *c.req;
        // After the running step's token: n + 1 tokens; the speculated step computes the
        // (n + 1)-th and samples the (n + 2)-th.
        const int32_t n = sr.n_tokens(), n_out = n + 1 - it->second.n_prompt;
        if (n_out >= it->second.sp.max_tokens || n + 1 >= m_sched->params().max_model_len || n + 1 >= kv_capacity)
            return false;
        need_blocks += (n + 1 + bs - 1) / bs > int32_t(sr.blocks.size());
    }
    return pool.n_free_mapped() >= need_blocks; // (blocks with memory: the schedule needs no grow)
}

// Submits the step after f before f's tokens are known: each request's next token is a
// placeholder (−row − 1: row `row` of f's outputs, fed on the backend) until process(f) puts
// the sampled id in its place.
std::optional<inflight_step> step_loop::speculate(inflight_step &f) {
    m_sched->update(f.so);
    f.updated = true;
    int32_t row = 0;
    for (const scheduled_chunk &c : f.so.chunks) m_sched->append_token(*c.req, -1 - row++);
    auto next = schedule();
    if (next) ++m_n_overlapped;
    return next;
}

// One step: the running step (submitted by the previous call when it overlapped) or a new one;
// its successor submitted before its outputs are read where can_speculate allows.
void step_loop::step() {
    if (!m_pending) {
        auto f = schedule();
        if (!f) return;
        m_pending = std::move(f);
    }
    std::optional<inflight_step> next;
    if (!kv_trim_due() && can_speculate(*m_pending)) next = speculate(*m_pending);
    inflight_step cur = std::move(*m_pending);
    m_pending.reset();
    const status st = m_mdl->be->finish(m_out);
    update(cur, st);
    m_pending = std::move(next);
}

// Reads a finished step's outputs: routing telemetry, sampling, emission, finishing. Requests
// that finished or were cancelled while it ran are skipped (their rows too).
void step_loop::update(inflight_step &f, const status &st) {
    const auto t2 = clk::now();
    if (!st) return fail_step(f, "the forward pass failed: " + st.message());
    // The chunks whose requests are still alive (a pointer of a finished one dangles).
    std::vector<char> alive(f.so.chunks.size());
    for (size_t i = 0; i < f.so.chunks.size(); ++i) alive[i] = m_live.count(f.ids[i]) > 0;
    if (!f.updated) {
        scheduler_output so_alive = f.so;
        so_alive.chunks.clear();
        for (size_t i = 0; i < f.so.chunks.size(); ++i)
            if (alive[i]) so_alive.chunks.push_back(f.so.chunks[i]);
        m_sched->update(so_alive);
    }

    record_routing(f, alive);
    const auto t3 = clk::now();
    const double emit_ms = sample_and_emit(f, alive);
    close_step(f, t2, t3, clk::now(), emit_ms);
}

// Routing: the positions computed for the first time go into their request's trace and the
// expert counts (the live window too).
void step_loop::record_routing(const inflight_step &f, const std::vector<char> &alive) {
    std::vector<uint32_t> step_counts(m_expert_tokens.size(), 0);
    const int32_t n_moe = int32_t(m_out.routing.moe_layers.size()), K = m_out.routing.n_expert_used;
    const int64_t E = m_mdl->config.n_expert;
    constexpr float kNoMargin = std::numeric_limits<float>::quiet_NaN();
    const bool has_margins = int32_t(m_out.routing.margins.size()) == n_moe;
    int32_t row = 0;
    for (size_t ci = 0; ci < f.so.chunks.size(); ++ci) {
        const scheduled_chunk &c = f.so.chunks[ci];
        if (!alive[ci]) {
            row += c.n_new;
            continue;
        }
        live_request &lr = m_live.at(f.ids[ci]);
        std::lock_guard lock(lr.stream->m_mutex);
        auto &m = lr.stream->m_metrics;
        m.n_preemptions = c.req->n_preemptions;
        m.n_cached_prompt_tokens = c.req->n_cached_tokens;
        const int32_t kr = std::min(m.k, K); // this request's k; the step's K is the most any row took
        if (lr.traced < c.start) { // positions served by the prefix cache
            m.trace.resize(size_t(c.start) * n_moe * m.k, int16_t(-1));
            m.trace_weights.resize(size_t(c.start) * n_moe * m.k, 0.0f);
            m.trace_margins.resize(size_t(c.start) * n_moe, kNoMargin);
            lr.traced = c.start;
        }
        for (int32_t p = c.start; p < c.start + c.n_new; ++p, ++row) {
            if (p < lr.traced || n_moe == 0) continue;
            for (int32_t s = 0; s < n_moe; ++s) {
                m.trace_margins.push_back(has_margins ? m_out.routing.margins[s][size_t(row)] : kNoMargin);
                for (int32_t j = 0; j < m.k; ++j) {
                    const int16_t e = j < kr ? m_out.routing.ids[s][size_t(row) * K + j] : int16_t(-1);
                    const float w = j < kr ? m_out.routing.weights[s][size_t(row) * K + j] : 0.0f;
                    m.trace.push_back(e);
                    m.trace_weights.push_back(w);
                    if (e < 0) continue;
                    m_expert_tokens[size_t(s) * E + e] += 1;
                    m_expert_weight[size_t(s) * E + e] += w;
                    step_counts[size_t(s) * E + e] += 1;
                }
            }
            lr.traced = p + 1;
        }
    }
    if (!m_expert_tokens.empty()) {
        for (size_t i = 0; i < step_counts.size(); ++i) m_expert_window_sum[i] += step_counts[i];
        m_window.push_back(std::move(step_counts));
        if (int32_t(m_window.size()) > m_params.telemetry_window) {
            for (size_t i = 0; i < m_window.front().size(); ++i) m_expert_window_sum[i] -= m_window.front()[i];
            m_window.pop_front();
        }
    }
}

// Samples every row of the step, emits the text (stop strings held back) and finishes the requests
// that stopped; returns the time spent emitting, in ms.
double step_loop::sample_and_emit(inflight_step &f, const std::vector<char> &alive) {
    std::vector<std::pair<request_id, std::string>> to_finish;
    int32_t logit_row = 0;
    double emit_ms = 0.0;
    std::vector<std::pair<request_id, std::string>> to_fail;
    for (size_t ci = 0; ci < f.so.chunks.size(); ++ci) {
        const scheduled_chunk &c = f.so.chunks[ci];
        if (!c.samples) continue;
        const int32_t this_row = logit_row++;
        if (!alive[ci]) continue;
        sched_request &sr = *c.req;
        live_request &lr = m_live.at(sr.id);
        // The sampled token's place: a placeholder when the next step was submitted already.
        const size_t at = size_t(c.start + c.n_new);
        const bool placeholder = sr.tokens.size() > at;
        // sample_ms includes the full row's download where the backend does not draw.
        const auto sampled = token_of_row(*m_mdl->be, m_out, this_row, sampled_row_of(c, -1), m_row_scratch);
        if (!sampled) {
            to_fail.emplace_back(sr.id, "sampling failed: " + sampled.err().message);
            continue;
        }
        const int32_t id = *sampled;
        const auto te = clk::now();
        const int64_t now = now_us();
        {
            std::lock_guard lock(lr.stream->m_mutex);
            auto &m = lr.stream->m_metrics;
            if (m.t_first_token_us < 0) m.t_first_token_us = now;
            m.token_times_us.push_back(now);
        }
        ++m_n_generated;
        if (std::find(lr.sp.stop_ids.begin(), lr.sp.stop_ids.end(), id) != lr.sp.stop_ids.end()) {
            to_finish.emplace_back(sr.id, "stop");
            continue;
        }
        if (placeholder) sr.tokens[at] = id;
        else m_sched->append_token(sr, id);
        const std::string piece = lr.detok ? lr.detok->push(id) : std::string();
        if (emit_text(lr, piece, {id})) {
            to_finish.emplace_back(sr.id, "stop_string");
            continue;
        }
        const int32_t n_out = int32_t(at) + 1 - lr.n_prompt;
        const auto &pool = m_sched->pool();
        const int64_t kv_capacity = int64_t(pool.n_blocks()) * pool.block_size();
        if (n_out >= lr.sp.max_tokens || int64_t(at) + 1 >= m_sched->params().max_model_len ||
            int64_t(at) + 1 >= kv_capacity)
            to_finish.emplace_back(sr.id, "length");
        emit_ms += ms(te, clk::now());
    }
    for (auto &[id, reason] : to_finish) finish_request(id, reason);
    for (auto &[id, msg] : to_fail) {
        auto it = m_live.find(id);
        if (it == m_live.end()) continue;
        fail_stream(it->second.stream, msg);
        m_sched->finish(id);
        m_live.erase(it);
    }
    return emit_ms;
}

// The step's record: its span and its phases (the telemetry ring).
void step_loop::close_step(inflight_step &f, clk::time_point t2, clk::time_point t3, clk::time_point t4,
                           double emit_ms) {
    step_record &rec = f.rec;
    // An overlapped step began while the one before it was still processed: its span starts
    // where that one's ended, so that the steps' spans partition the engine's time (the phase
    // sums of a reply's profile count each moment once). Its schedule ran inside the span
    // before (schedule_ms).
    const clk::time_point from = std::max(f.t0, m_last_step_end);
    // From the same clock reading as the span's end: consecutive spans then meet to within the
    // microsecond the start is truncated to (a separate now_us() read could be microseconds off).
    rec.t_start_us = int64_t(std::chrono::duration_cast<std::chrono::microseconds>(from - m_t0).count());
    rec.duration_ms = ms(from, t4);
    rec.schedule_ms = ms(f.t0, f.t1);
    rec.forward_ms = ms(std::max(f.t1, from), t2);
    m_last_step_end = t4;
    rec.sample_ms = ms(t3, t4) - emit_ms;
    rec.emit_ms = emit_ms + ms(t2, t3);
    rec.n_seqs = int32_t(f.so.chunks.size());
    rec.n_prefill_tokens = f.so.n_prefill_tokens;
    rec.n_decode_tokens = f.so.n_decode_tokens;
    const phase_times &ph = m_out.phases;
    if (ph.timed) {
        rec.attention_ms = ph.attention_ms;
        rec.moe_ms = ph.moe_ms;
        rec.moe_shared_ms = ph.moe_shared_ms;
        rec.dense_ms = ph.dense_ms;
        rec.head_ms = ph.head_ms;
        rec.other_ms = ph.other_ms;
        rec.phases_timed = true;
        rec.phases_on_device = ph.on_device;
        rec.device_ms = ph.on_device ? ph.total_ms : 0.0;
    }
    if (!m_out.timeline.empty()) {
        m_timeline.swap(m_out.timeline);
        m_out.timeline.clear();
        m_timeline_step = rec.step;
    }
    m_ring.push_back(std::move(rec));
    if (int32_t(m_ring.size()) > m_params.telemetry_ring) m_ring.pop_front();
}

// A telemetry snapshot, at most every 10 ms unless forced (the end of a burst of work).
void step_loop::publish(bool force) {
    const auto now = std::chrono::steady_clock::now();
    if (!force && now - m_last_publish < std::chrono::milliseconds(10)) return;
    m_last_publish = now;
    auto s = std::make_shared<telemetry_snapshot>();
    s->n_steps = m_n_steps;
    s->t_us = now_us();
    s->recent_steps.assign(m_ring.begin(), m_ring.end());
    s->moe_layers = m_moe_layers;
    if (m_mdl) {
        s->n_expert = int32_t(m_mdl->config.n_expert);
        s->n_expert_used = int32_t(m_mdl->config.n_expert_used);
    }
    s->expert_tokens = m_expert_tokens;
    s->expert_weight = m_expert_weight;
    s->window_steps = int32_t(m_window.size());
    s->expert_tokens_window = m_expert_window_sum;
    if (m_mdl && m_sched) {
        memory_stats &m = s->memory;
        const block_pool &pool = m_sched->pool();
        m.weights_bytes = m_mdl->be->weights_bytes();
        m.kv_block_bytes = m_mdl->be->kv_block_bytes();
        m.kv_blocks_total = pool.n_blocks();
        m.kv_blocks_used = pool.n_used();
        m.kv_blocks_free = pool.n_free();
        m.kv_blocks_cached = pool.n_cached();
        pool.states(m.kv_block_states);
        m.kv_blocks_cached_free = int32_t(
            std::count(m.kv_block_states.begin(), m.kv_block_states.end(), uint8_t(kv_block_state::cached)));
        m.kv_blocks_mapped = pool.n_mapped();
        m.kv_tokens_stored = m_sched->kv_tokens_stored();
        const int64_t cap = int64_t(m.kv_blocks_used) * pool.block_size();
        m.kv_waste = cap > 0 ? 1.0 - double(m.kv_tokens_stored) / double(cap) : 0.0;
        const backend_memory bm = m_mdl->be->memory();
        m.alloc_reserved = bm.reserved;
        m.alloc_in_use = bm.in_use;
        m.alloc_largest_free = bm.largest_free;
        m.device_total = bm.device_total;
        m.device_free = bm.device_free;
        m.device_parts = bm.parts;
        // The backend's own figures where it reports them (mapped in whole steps, rounded to its
        // granularity), else the blocks' bytes.
        m.kv_capacity_bytes = bm.kv_capacity ? bm.kv_capacity : uint64_t(pool.n_blocks()) * m.kv_block_bytes;
        m.kv_mapped_bytes = bm.kv_capacity ? bm.kv_mapped : uint64_t(pool.n_mapped()) * m.kv_block_bytes;
        m.kv_note = bm.kv_note;
        const uint64_t free_total = bm.reserved - std::min(bm.reserved, bm.in_use);
        m.fragmentation = free_total > 0 ? 1.0 - double(bm.largest_free) / double(free_total) : 0.0;
        s->n_running = m_sched->n_running();
        s->n_waiting = m_sched->n_waiting();
        s->prefix_queries = pool.queries();
        s->prefix_hits = pool.hits();
    }
    s->n_requests_finished = m_n_finished;
    s->n_tokens_generated = m_n_generated;
    s->n_prompt_tokens = m_n_prompt_tokens;
    s->n_steps_overlapped = m_n_overlapped;
    s->timeline = m_timeline;
    s->timeline_step = m_timeline_step;
    s->device_read_bandwidth = m_read_bandwidth;
    m_telemetry.publish(std::move(s));
}

// The KV pool's free top back to the device (engine_params::kv_cache_min_bytes, kv_idle_trim_ms,
// kv_busy_trim_ms): never with a forward in flight (its writes may land in those blocks), never
// below the floor, and only what the backend can give back whole (kv_mapped_after_trim).
void step_loop::trim_kv() {
    if (!m_mdl || !m_sched) return;
    const auto now = clk::now();
    bool keep_cached = true;
    if (m_sched->has_work()) {
        m_idle_since.reset();
        if (m_pending || now - m_last_busy_trim < std::chrono::milliseconds(m_params.kv_busy_trim_ms)) return;
        m_last_busy_trim = now;
    } else {
        if (!m_idle_since) {
            m_idle_since = now;
            m_idle_trimmed = false;
        }
        if (m_pending) return;
        if (!m_idle_trimmed && now - *m_idle_since >= std::chrono::milliseconds(m_params.kv_idle_trim_ms)) {
            keep_cached = false;
            m_idle_trimmed = true;
        }
    }
    backend &be = *m_mdl->be;
    if (be.in_flight() > 0) return;
    const int32_t target = std::max(m_kv_floor, m_sched->pool().trim_floor(keep_cached));
    if (be.kv_mapped_after_trim(target) >= be.kv_mapped_blocks()) return;
    (void)be.kv_trim_blocks(target); // (a failure keeps what it could not unmap, which the count says)
    m_sched->set_mapped(be.kv_mapped_blocks());
    publish(true);
}

bool step_loop::kv_trim_due() const {
    if (!m_mdl || !m_sched || !m_sched->has_work()) return false;
    if (clk::now() - m_last_busy_trim < std::chrono::milliseconds(m_params.kv_busy_trim_ms)) return false;
    const backend &be = *m_mdl->be;
    return be.kv_mapped_after_trim(m_kv_floor) < be.kv_mapped_blocks();
}

std::optional<step_loop::clk::time_point> step_loop::kv_idle_deadline() const {
    if (!m_idle_since || m_idle_trimmed || !m_mdl) return std::nullopt;
    const backend &be = *m_mdl->be;
    if (be.kv_mapped_after_trim(m_kv_floor) >= be.kv_mapped_blocks()) return std::nullopt; // nothing to give
    return *m_idle_since + std::chrono::milliseconds(m_params.kv_idle_trim_ms);
}

} // namespace es
