// The engine thread and its step loop (see engine.h). Commands (submit, cancel, load, unload)
// arrive through a mutex-guarded queue; everything else below runs on the engine thread only.
// One step: schedule (scheduler.h) → one forward pass over every scheduled chunk → sample the
// chunks that reached their last known token → emit text (stop strings held back until they
// can no longer match) → record telemetry and publish a snapshot at most every 10 ms.
#include "engine/runtime/engine.h"

#include "engine/core/scale_layout.h"
#include "engine/cuda/cuda_loader.h"
#include "engine/runtime/generate.h"
#include "engine/runtime/scheduler.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <unistd.h>
#include <variant>

namespace es {

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

// ---------------------------------------------------------------- engine internals

namespace {

struct cmd_submit {
    std::shared_ptr<request_stream> stream;
    request_params params;
};
struct cmd_cancel {
    request_id id;
};
struct cmd_load {
    std::filesystem::path dir;       // empty: random weights of `random_cfg`
    std::optional<model_config> random_cfg;
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
    std::string held;               // text withheld while it may be the start of a stop string
    int32_t n_prompt = 0;
    int32_t traced = 0;             // positions whose routing is recorded
};

// A step whose forward was submitted (backend::submit) and whose outputs are not yet processed.
struct inflight_step {
    scheduler_output so;
    std::vector<uint64_t> ids; // so.chunks[i].req's id: a request may finish or be cancelled meanwhile
    step_record rec;
    std::chrono::steady_clock::time_point t0, t1; // the step's start, its schedule's end
    bool updated = false;                          // the scheduler's update() ran (speculate)
};

uint64_t physical_memory() {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? uint64_t(pages) * uint64_t(page) : 0;
}

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

struct engine::impl {
    std::mutex mutex;
    std::condition_variable cv;
    bool stop = false;
    std::deque<command> commands;
    std::atomic<uint64_t> next_id{1};
    std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();

    mutable std::mutex info_mutex;
    std::optional<model_info> info;

    // engine thread only
    std::unique_ptr<model> mdl;
    std::unique_ptr<scheduler> sched;
    std::map<request_id, live_request> live;
    uint64_t n_steps = 0;
    std::deque<step_record> ring;
    std::vector<uint64_t> expert_tokens, expert_window_sum;
    std::vector<float> row_scratch; // a full logits row when candidates cannot decide
    forward_output out;             // every step's forward output (its buffers reused)
    std::optional<inflight_step> pending; // a step submitted and not yet processed (overlapped steps)
    std::chrono::steady_clock::time_point last_step_end{}; // the last processed step's end
    std::vector<double> expert_weight;
    std::deque<std::vector<uint32_t>> window;
    std::vector<int32_t> moe_layers;
    uint64_t n_finished = 0, n_generated = 0, n_prompt_tokens = 0, n_overlapped = 0;
    std::chrono::steady_clock::time_point last_publish{};

    int64_t now_us() const {
        return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count();
    }
};

engine::engine(engine_params p) : m_params(std::move(p)), m_impl(std::make_unique<impl>()) {
    m_thread = std::thread([this] { thread_main(); });
}

engine::~engine() {
    {
        std::lock_guard lock(m_impl->mutex);
        m_impl->stop = true;
    }
    m_impl->cv.notify_all();
    if (m_thread.joinable()) m_thread.join();
}

int64_t engine::now_us() const { return m_impl->now_us(); }

std::future<status> engine::load_model(const std::filesystem::path &dir,
                                       std::function<void(const std::string &, float)> on_progress) {
    auto done = std::make_shared<std::promise<status>>();
    auto fut = done->get_future();
    {
        std::lock_guard lock(m_impl->mutex);
        m_impl->commands.push_back(cmd_load{dir, std::nullopt, 0, std::move(on_progress), done});
    }
    m_impl->cv.notify_all();
    return fut;
}

std::future<status> engine::load_random_model(const model_config &cfg, uint64_t seed) {
    auto done = std::make_shared<std::promise<status>>();
    auto fut = done->get_future();
    {
        std::lock_guard lock(m_impl->mutex);
        m_impl->commands.push_back(cmd_load{{}, cfg, seed, {}, done});
    }
    m_impl->cv.notify_all();
    return fut;
}

void engine::unload_model() {
    {
        std::lock_guard lock(m_impl->mutex);
        m_impl->commands.push_back(cmd_unload{});
    }
    m_impl->cv.notify_all();
}

bool engine::has_model() const {
    std::lock_guard lock(m_impl->info_mutex);
    return m_impl->info.has_value();
}

std::optional<model_info> engine::info() const {
    std::lock_guard lock(m_impl->info_mutex);
    return m_impl->info;
}

sampling_params engine::model_defaults() const {
    std::lock_guard lock(m_impl->info_mutex);
    return m_impl->info ? m_impl->info->defaults : sampling_params{};
}

std::shared_ptr<request_stream> engine::submit(request_params r) {
    auto stream = std::shared_ptr<request_stream>(new request_stream(m_impl->next_id++));
    stream->m_metrics.t_submit_us = m_impl->now_us();
    {
        std::lock_guard lock(m_impl->mutex);
        m_impl->commands.push_back(cmd_submit{stream, std::move(r)});
    }
    m_impl->cv.notify_all();
    return stream;
}

void engine::cancel(request_id id) {
    {
        std::lock_guard lock(m_impl->mutex);
        m_impl->commands.push_back(cmd_cancel{id});
    }
    m_impl->cv.notify_all();
}

namespace {

int32_t pick_kv_blocks(const engine_params &p, const model_config &c, uint64_t block_bytes) {
    if (p.n_kv_blocks > 0) return p.n_kv_blocks;
    const uint64_t ram = physical_memory();
    uint64_t bytes = p.kv_cache_bytes ? p.kv_cache_bytes : std::min<uint64_t>(uint64_t(1) << 30, ram / 4);
    const int64_t per_seq = (c.n_ctx_train + p.block_size - 1) / p.block_size;
    int64_t n = int64_t(bytes / std::max<uint64_t>(block_bytes, 1));
    n = std::min<int64_t>(n, per_seq * p.max_num_seqs);
    return int32_t(std::clamp<int64_t>(n, 2, INT32_MAX / 2));
}

} // namespace

uint64_t cuda_weight_bytes(const model_config &c, weight_precision precision, const fp8_policy &policy) {
    const auto align = [](uint64_t b) { return (b + 255) / 256 * 256; };
    const bool fp8 = precision == weight_precision::fp8;
    const uint64_t H = uint64_t(c.n_embd), qd = uint64_t(c.q_dim()), kvd = uint64_t(c.kv_dim());
    uint64_t total = 0;
    // An FP8 matrix's scales: per row, or per 128×128 block of each of its `stack` matrices (experts).
    auto lin_as = [&](uint64_t n, uint64_t k, bool q, uint64_t stack = 1) {
        const uint64_t scales =
            stack * uint64_t(fp8_scale_count(int64_t(n / stack), int64_t(k), policy.scales));
        total += align(n * k * (q ? 1 : 2)) + (q ? align(scales * 4) : 0);
    };
    auto lin = [&](uint64_t n, uint64_t k, uint64_t stack = 1) { lin_as(n, k, fp8, stack); };
    total += align(uint64_t(c.n_vocab) * H * 2) + align(H * 2);
    if (!c.tie_word_embeddings) total += align(uint64_t(c.n_vocab) * H * 2);
    if (fp8 && policy.head) lin_as(uint64_t(c.n_vocab), H, true); // the FP8 copy of the head
    for (int64_t il = 0; il < c.n_layer; ++il) {
        total += 2 * align(H * 2);
        lin(qd + 2 * kvd, H);
        lin_as(H, qd, fp8 && policy.attn_out);
        if (!c.is_moe_layer(il)) {
            lin(2 * uint64_t(c.n_ff), H);
            lin(H, uint64_t(c.n_ff));
            continue;
        }
        total += align(uint64_t(c.n_expert) * H * 4) + align(uint64_t(c.n_expert) * 4);
        lin(uint64_t(c.n_expert) * 2 * uint64_t(c.n_ff_exp), H, uint64_t(c.n_expert));
        lin(uint64_t(c.n_expert) * H, uint64_t(c.n_ff_exp), uint64_t(c.n_expert));
        if (c.n_expert_shared > 0) {
            const uint64_t F = uint64_t(c.n_ff_exp * c.n_expert_shared);
            lin(2 * F, H);
            lin(H, F);
        }
    }
    return total + align(uint64_t(c.head_dim / 2) * 4);
}

result<memory_estimate> engine::estimate_memory(const std::filesystem::path &dir, const engine_params &p) {
    auto cfg = load_model_config(dir);
    if (!cfg) return cfg.err();
    memory_estimate e;
    // Where it would load: the same decision as load_model.
    if (p.load.kind != backend_kind::cpu) {
        const cuda_status_info &cs = cuda_status();
        if (cs.available) e.gpu = true;
        else if (p.load.kind == backend_kind::cuda) return error{"the CUDA backend cannot run here: " + cs.reason};
        else e.note = "CUDA not used: " + cs.reason;
    }
    const model_config &c = *cfg;
    if (!e.gpu && p.load.kv_cache == kv_cache_dtype::fp8) // as load_model: not silently fp32 KV
        return error{"an FP8 KV cache (--kv-cache fp8) needs the CUDA backend" +
                     (e.note.empty() ? std::string("; the CPU backend keeps fp32 KV") : " (" + e.note + ")")};
    if (e.gpu) {
        const cuda_status_info &cs = cuda_status();
        e.device = cs.device.name;
        e.weights_bytes = cuda_weight_bytes(c, p.load.precision, p.load.fp8);
        const uint64_t kv_elem =
            p.load.kv_cache == kv_cache_dtype::fp8 ? 1 : 2; // as the backend's kv_block_bytes
        const uint64_t block_bytes =
            uint64_t(p.block_size) * uint64_t(c.kv_dim()) * 2 * kv_elem * uint64_t(c.n_layer);
        e.kv_bytes = uint64_t(pick_kv_blocks(p, c, block_bytes)) * block_bytes;
        // The forward pass at a full token budget: logits in fp32 plus the widest activations
        // (q/k/v, gate/up of the routed experts of every token) in fp32, the FP8 prefill's BF16
        // dequantization buffer, and cuBLASLt's workspace.
        const uint64_t T = uint64_t(std::max(1, p.max_batched_tokens));
        const uint64_t widest = uint64_t(std::max({c.q_dim() + 2 * c.kv_dim(), 2 * c.n_ff,
                                                   2 * c.n_ff_exp * std::max<int64_t>(1, c.n_expert_used), c.n_embd}));
        e.workspace_bytes = T * uint64_t(c.n_vocab) * 4 + T * widest * 4 * 4 + (uint64_t(32) << 20);
        if (p.load.precision == weight_precision::fp8)
            e.workspace_bytes += uint64_t(std::max({(c.q_dim() + 2 * c.kv_dim()) * c.n_embd, 2 * c.n_ff * c.n_embd,
                                                   2 * c.n_ff_exp * c.n_expert_shared * c.n_embd})) * 2;
        e.available_bytes = cs.device.free_bytes;
    } else {
        // The CPU backend holds fp32 weights; KV is fp32 K and V per layer.
        e.device = "CPU";
        e.weights_bytes = uint64_t(c.n_params()) * 4;
        const uint64_t block_bytes = uint64_t(p.block_size) * uint64_t(c.kv_dim()) * 4 * 2 * uint64_t(c.n_layer);
        e.kv_bytes = uint64_t(pick_kv_blocks(p, c, block_bytes)) * block_bytes;
        e.available_bytes = physical_memory();
    }
    e.fits = e.weights_bytes + e.kv_bytes + e.workspace_bytes < e.available_bytes / 20 * 19;
    auto gib = [](uint64_t b) {
        const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
        double v = double(b);
        int u = 0;
        while (v >= 1024.0 && u < 4) {
            v /= 1024.0;
            ++u;
        }
        char buf[32];
        std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
        return std::string(buf);
    };
    if (e.gpu)
        e.summary = e.device + " (" + (p.load.precision == weight_precision::fp8 ? "FP8" : "BF16") + "): weights " +
                    gib(e.weights_bytes) + " + KV cache " + gib(e.kv_bytes) + " + workspace " + gib(e.workspace_bytes) +
                    " of " + gib(e.available_bytes) + " free — " + (e.fits ? "fits" : "does not fit");
    else
        e.summary = "CPU: weights " + gib(e.weights_bytes) + " + KV cache " + gib(e.kv_bytes) + " of " +
                    gib(e.available_bytes) + " RAM — " + (e.fits ? "fits" : "does not fit");
    return e;
}

void engine::thread_main() {
    impl &I = *m_impl;
    auto finish = [&](request_id id, const std::string &reason) {
        auto it = I.live.find(id);
        if (it == I.live.end()) return;
        live_request &lr = it->second;
        // Flush held-back text (no stop string completed) unless stopped by one.
        std::string tail = lr.held + (lr.detok ? lr.detok->flush() : std::string());
        if (!tail.empty() && reason != "stop_string") lr.stream->push({event_kind::token, tail, {}, {}, {}, I.now_us()});
        {
            std::lock_guard lock(lr.stream->m_mutex);
            lr.stream->m_metrics.t_finish_us = I.now_us();
        }
        lr.stream->push({event_kind::finished, {}, {}, reason == "stop_string" ? "stop" : reason, {}, I.now_us()});
        if (I.sched) I.sched->finish(id);
        I.live.erase(it);
        ++I.n_finished;
    };
    auto fail = [&](const std::shared_ptr<request_stream> &s, const std::string &msg) {
        s->push({event_kind::failed, {}, {}, {}, msg, I.now_us()});
    };
    auto drop_model = [&]() {
        if (I.pending && I.mdl) {
            forward_output discard;
            I.mdl->be->finish(discard); // (its requests are cancelled below)
        }
        I.pending.reset();
        std::vector<request_id> ids;
        for (auto &[id, lr] : I.live) ids.push_back(id);
        for (request_id id : ids) finish(id, "cancelled");
        I.sched.reset();
        I.mdl.reset();
        std::lock_guard lock(I.info_mutex);
        I.info.reset();
    };

    auto handle_submit = [&](cmd_submit &c) {
        if (!I.mdl) return fail(c.stream, "no model is loaded");
        request_params &r = c.params;
        if (auto msg = r.sampling.validate(); !msg.empty()) return fail(c.stream, "sampling parameters: " + msg);
        std::vector<int32_t> ids;
        if (!r.messages.empty()) {
            if (!I.mdl->tok) return fail(c.stream, "the model has no tokenizer; submit token ids");
            std::vector<chat_message> msgs;
            if (!r.system_prompt.empty()) msgs.push_back({chat_role::system, r.system_prompt});
            msgs.insert(msgs.end(), r.messages.begin(), r.messages.end());
            if (!r.preset_prefix.empty())
                for (auto it = msgs.rbegin(); it != msgs.rend(); ++it)
                    if (it->role == chat_role::user) {
                        it->content = r.preset_prefix + it->content;
                        break;
                    }
            ids = I.mdl->tok->encode(render_chat(msgs, r.add_generation_prompt));
        } else {
            ids = r.prompt_ids;
        }
        for (int32_t id : ids)
            if (id < 0 || id >= I.mdl->config.n_vocab)
                return fail(c.stream, "token id " + std::to_string(id) + " is outside the vocabulary");
        auto sr = std::make_unique<sched_request>();
        sr->id = c.stream->id();
        sr->tokens = ids;
        sr->n_prompt = int32_t(ids.size());
        if (auto msg = I.sched->add(std::move(sr)); !msg.empty()) return fail(c.stream, msg);
        live_request lr;
        lr.stream = c.stream;
        lr.sp = r.sampling;
        lr.smp = std::make_unique<sampler>(r.sampling);
        if (I.mdl->tok) lr.detok = std::make_unique<detokenizer>(*I.mdl->tok);
        lr.n_prompt = int32_t(ids.size());
        {
            std::lock_guard lock(c.stream->m_mutex);
            auto &m = c.stream->m_metrics;
            m.n_prompt_tokens = lr.n_prompt;
            m.seed = lr.smp->seed();
            m.n_moe_layers = int32_t(I.moe_layers.size());
            m.k = int32_t(I.mdl->config.n_expert_used);
        }
        I.n_prompt_tokens += uint64_t(ids.size());
        I.live.emplace(c.stream->id(), std::move(lr));
        if (r.sampling.max_tokens == 0) finish(c.stream->id(), "length");
    };

    auto handle_load = [&](cmd_load &c) {
        drop_model();
        model_load_params lp = m_params.load;
        lp.on_progress = c.progress;
        auto m = c.random_cfg ? es::make_random_model(*c.random_cfg, c.seed, lp) : es::load_model(c.dir, lp);
        if (!m) return c.done->set_value(m.err());
        auto &mdl = *m;
        const model_config &cfg = mdl->config;
        // The budget in the pools' real bytes (kv_block_bytes: fp32 on the CPU, BF16 or FP8 on the
        // GPU, so an FP8 KV cache holds twice the blocks), known once a minimal pool exists.
        if (auto s = mdl->be->init_kv_cache({m_params.block_size, 2}); !s) return c.done->set_value(s.err());
        const int32_t n_blocks = pick_kv_blocks(m_params, cfg, mdl->be->kv_block_bytes());
        if (auto s = mdl->be->init_kv_cache({m_params.block_size, n_blocks}); !s) return c.done->set_value(s.err());
        scheduler_params sp;
        sp.max_num_seqs = m_params.max_num_seqs;
        sp.max_batched_tokens = m_params.max_batched_tokens;
        sp.block_size = m_params.block_size;
        sp.n_blocks = n_blocks;
        sp.max_model_len = cfg.n_ctx_train;
        sp.enable_prefix_caching = m_params.enable_prefix_caching;
        I.sched = std::make_unique<scheduler>(sp);
        I.moe_layers.clear();
        for (int64_t il = 0; il < cfg.n_layer; ++il)
            if (cfg.is_moe_layer(il)) I.moe_layers.push_back(int32_t(il));
        const size_t n_cells = I.moe_layers.size() * size_t(cfg.n_expert);
        I.expert_tokens.assign(n_cells, 0);
        I.expert_weight.assign(n_cells, 0.0);
        I.expert_window_sum.assign(n_cells, 0);
        I.window.clear();
        I.ring.clear();
        I.mdl = std::move(mdl);
        {
            std::lock_guard lock(I.info_mutex);
            I.info = model_info{c.dir, cfg, I.mdl->be->name(), I.mdl->backend_note, I.mdl->generation_defaults,
                                n_blocks, m_params.block_size};
        }
        c.done->set_value(ok_status());
    };

    // Appends text to a request's output, holding back what may begin a stop string.
    // Returns true when a stop string completed (the request must finish).
    auto emit_text = [&](live_request &lr, const std::string &piece, const std::vector<int32_t> &ids) {
        std::string text = lr.held + piece;
        lr.held.clear();
        const auto &stops = lr.sp.stop_strings;
        if (!stops.empty()) {
            size_t cut = std::string::npos;
            for (const auto &s : stops)
                if (!s.empty())
                    if (size_t at = text.find(s); at != std::string::npos) cut = std::min(cut, at);
            if (cut != std::string::npos) {
                lr.stream->push({event_kind::token, text.substr(0, cut), ids, {}, {}, I.now_us()});
                return true;
            }
            const size_t keep = held_suffix(text, stops);
            lr.held = text.substr(text.size() - keep);
            text.resize(text.size() - keep);
        }
        lr.stream->push({event_kind::token, text, ids, {}, {}, I.now_us()});
        return false;
    };

    using clk = std::chrono::steady_clock;
    auto ms = [](clk::time_point a, clk::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
    // Fails every request of a step whose forward could not run (still alive: none finished since).
    auto fail_step = [&](const inflight_step &f, const std::string &what) {
        for (request_id id : f.ids) {
            auto it = I.live.find(id);
            if (it == I.live.end()) continue;
            fail(it->second.stream, what);
            I.sched->finish(id);
            I.live.erase(it);
        }
    };
    // Schedules a step and submits its forward. Tokens that are placeholders (negative: the picks
    // of the step still running, speculate()) go to the backend as fed tokens. Empty when nothing
    // was scheduled or the submission failed (its requests failed).
    auto schedule_and_submit = [&]() -> std::optional<inflight_step> {
        inflight_step f;
        f.rec.step = I.n_steps++;
        f.rec.t_start_us = I.now_us();
        f.t0 = clk::now();
        f.so = I.sched->schedule();
        f.t1 = clk::now();
        f.rec.n_preempted = int32_t(f.so.preempted.size());
        if (f.so.chunks.empty()) return std::nullopt;
        f.rec.seq_tokens.reserve(f.so.chunks.size());
        for (const scheduled_chunk &c : f.so.chunks) {
            f.rec.seq_tokens.emplace_back(c.req->id, c.n_new);
            f.ids.push_back(c.req->id);
        }
        batch b;
        std::vector<sampler *> row_samplers; // one per logits row
        for (size_t i = 0; i < f.so.chunks.size(); ++i) {
            const scheduled_chunk &c = f.so.chunks[i];
            b.seqs.push_back({c.req->blocks});
            for (int32_t p = c.start; p < c.start + c.n_new; ++p) {
                b.tokens.push_back(c.req->tokens[p]);
                b.pos.push_back(p);
                b.seq.push_back(int32_t(i));
            }
            if (c.samples) {
                b.logits_rows.push_back(b.n_tokens() - 1);
                row_samplers.push_back(I.live.at(c.req->id).smp.get());
            }
        }
        // Sampling rows come back as candidates where the backend can (the full row is fetched
        // only when they cannot decide): nothing in the engine needs whole rows.
        request_candidates(*I.mdl->be, b, row_samplers);
        if (const status st = I.mdl->be->submit(b); !st) {
            fail_step(f, "the forward pass failed: " + st.message());
            return std::nullopt;
        }
        return f;
    };
    // Whether the step still running can have its successor submitted now (overlapped steps):
    // every running request decodes in it with a greedy sampler without penalties (its token is
    // the backend's pick), none is waiting or about to reach its length limit, no command waits,
    // and the blocks for one more position are free (the next schedule then neither preempts nor
    // admits).
    auto can_speculate = [&](const inflight_step &f) {
        const bool on = m_params.overlap == engine_params::overlap_mode::on ||
                        (m_params.overlap == engine_params::overlap_mode::automatic && I.mdl->be->overlaps_steps());
        if (!on || I.sched->n_waiting() > 0 || size_t(I.sched->n_running()) != f.so.chunks.size()) return false;
        {
            std::lock_guard lock(I.mutex);
            if (!I.commands.empty()) return false;
        }
        const auto &pool = I.sched->pool();
        const int32_t bs = pool.block_size();
        const int64_t kv_capacity = int64_t(pool.n_blocks()) * bs;
        int32_t need_blocks = 0;
        for (size_t i = 0; i < f.so.chunks.size(); ++i) {
            const scheduled_chunk &c = f.so.chunks[i];
            auto it = I.live.find(f.ids[i]); // (by id: a finished request's pointer dangles)
            if (it == I.live.end() || c.n_new != 1 || !c.samples || !it->second.smp->picks_top()) return false;
            const sched_request &sr = *c.req;
            // After the running step's token: n + 1 tokens; the speculated step computes the
            // (n + 1)-th and samples the (n + 2)-th.
            const int32_t n = sr.n_tokens(), n_out = n + 1 - it->second.n_prompt;
            if (n_out >= it->second.sp.max_tokens || n + 1 >= I.sched->params().max_model_len || n + 1 >= kv_capacity)
                return false;
            need_blocks += (n + 1 + bs - 1) / bs > int32_t(sr.blocks.size());
        }
        return pool.n_free() >= need_blocks;
    };
    // Submits the step after f before f's tokens are known: each request's next token is a
    // placeholder (−row − 1: row `row` of f's outputs, fed on the backend) until process(f) puts
    // the sampled id in its place.
    auto speculate = [&](inflight_step &f) -> std::optional<inflight_step> {
        I.sched->update(f.so);
        f.updated = true;
        int32_t row = 0;
        for (const scheduled_chunk &c : f.so.chunks) I.sched->append_token(*c.req, -1 - row++);
        auto next = schedule_and_submit();
        if (next) ++I.n_overlapped;
        return next;
    };
    // Reads a finished step's outputs: routing telemetry, sampling, emission, finishing. Requests
    // that finished or were cancelled while it ran are skipped (their rows too).
    auto process = [&](inflight_step &f, const status &st) {
        const auto t2 = clk::now();
        forward_output &out = I.out;
        if (!st) return fail_step(f, "the forward pass failed: " + st.message());
        // The chunks whose requests are still alive (a pointer of a finished one dangles).
        std::vector<char> alive(f.so.chunks.size());
        for (size_t i = 0; i < f.so.chunks.size(); ++i) alive[i] = I.live.count(f.ids[i]) > 0;
        if (!f.updated) {
            scheduler_output so_alive = f.so;
            so_alive.chunks.clear();
            for (size_t i = 0; i < f.so.chunks.size(); ++i)
                if (alive[i]) so_alive.chunks.push_back(f.so.chunks[i]);
            I.sched->update(so_alive);
        }

        // Routing: record positions computed for the first time (traces and expert counts).
        std::vector<uint32_t> step_counts(I.expert_tokens.size(), 0);
        const int32_t n_moe = int32_t(out.routing.moe_layers.size()), K = out.routing.n_expert_used;
        const int64_t E = I.mdl->config.n_expert;
        int32_t row = 0;
        for (size_t ci = 0; ci < f.so.chunks.size(); ++ci) {
            const scheduled_chunk &c = f.so.chunks[ci];
            if (!alive[ci]) {
                row += c.n_new;
                continue;
            }
            live_request &lr = I.live.at(f.ids[ci]);
            std::lock_guard lock(lr.stream->m_mutex);
            auto &m = lr.stream->m_metrics;
            m.n_preemptions = c.req->n_preemptions;
            m.n_cached_prompt_tokens = c.req->n_cached_tokens;
            if (lr.traced < c.start) { // positions served by the prefix cache
                m.trace.resize(size_t(c.start) * n_moe * K, int16_t(-1));
                m.trace_weights.resize(size_t(c.start) * n_moe * K, 0.0f);
                lr.traced = c.start;
            }
            for (int32_t p = c.start; p < c.start + c.n_new; ++p, ++row) {
                if (p < lr.traced || n_moe == 0) continue;
                for (int32_t s = 0; s < n_moe; ++s)
                    for (int32_t j = 0; j < K; ++j) {
                        const int16_t e = out.routing.ids[s][size_t(row) * K + j];
                        const float w = out.routing.weights[s][size_t(row) * K + j];
                        m.trace.push_back(e);
                        m.trace_weights.push_back(w);
                        I.expert_tokens[size_t(s) * E + e] += 1;
                        I.expert_weight[size_t(s) * E + e] += w;
                        step_counts[size_t(s) * E + e] += 1;
                    }
                lr.traced = p + 1;
            }
        }
        if (!I.expert_tokens.empty()) {
            for (size_t i = 0; i < step_counts.size(); ++i) I.expert_window_sum[i] += step_counts[i];
            I.window.push_back(std::move(step_counts));
            if (int32_t(I.window.size()) > m_params.telemetry_window) {
                for (size_t i = 0; i < I.window.front().size(); ++i) I.expert_window_sum[i] -= I.window.front()[i];
                I.window.pop_front();
            }
        }

        // Sample and emit.
        const auto t3 = clk::now();
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
            live_request &lr = I.live.at(sr.id);
            // The sampled token's place: a placeholder when the next step was submitted already.
            const size_t at = size_t(c.start + c.n_new);
            const bool placeholder = sr.tokens.size() > at;
            std::span<const int32_t> prompt(sr.tokens.data(), size_t(lr.n_prompt));
            std::span<const int32_t> output(sr.tokens.data() + lr.n_prompt, at - size_t(lr.n_prompt));
            // sample_ms includes the full row's download when the candidates cannot decide.
            const auto sampled = sample_output_row(*I.mdl->be, out, this_row, *lr.smp, prompt, output, I.row_scratch);
            if (!sampled) {
                to_fail.emplace_back(sr.id, "sampling failed: " + sampled.err().message);
                continue;
            }
            const int32_t id = *sampled;
            const auto te = clk::now();
            const int64_t now = I.now_us();
            {
                std::lock_guard lock(lr.stream->m_mutex);
                auto &m = lr.stream->m_metrics;
                if (m.t_first_token_us < 0) m.t_first_token_us = now;
                m.token_times_us.push_back(now);
            }
            ++I.n_generated;
            if (std::find(lr.sp.stop_ids.begin(), lr.sp.stop_ids.end(), id) != lr.sp.stop_ids.end()) {
                to_finish.emplace_back(sr.id, "stop");
                continue;
            }
            if (placeholder) sr.tokens[at] = id;
            else I.sched->append_token(sr, id);
            const std::string piece = lr.detok ? lr.detok->push(id) : std::string();
            if (emit_text(lr, piece, {id})) {
                to_finish.emplace_back(sr.id, "stop_string");
                continue;
            }
            const int32_t n_out = int32_t(at) + 1 - lr.n_prompt;
            const auto &pool = I.sched->pool();
            const int64_t kv_capacity = int64_t(pool.n_blocks()) * pool.block_size();
            if (n_out >= lr.sp.max_tokens || int64_t(at) + 1 >= I.sched->params().max_model_len ||
                int64_t(at) + 1 >= kv_capacity)
                to_finish.emplace_back(sr.id, "length");
            emit_ms += ms(te, clk::now());
        }
        for (auto &[id, reason] : to_finish) finish(id, reason);
        for (auto &[id, msg] : to_fail) {
            auto it = I.live.find(id);
            if (it == I.live.end()) continue;
            fail(it->second.stream, msg);
            I.sched->finish(id);
            I.live.erase(it);
        }
        const auto t4 = clk::now();

        step_record &rec = f.rec;
        // An overlapped step began while the one before it was still processed: its span starts
        // where that one's ended, so that the steps' spans partition the engine's time (the phase
        // sums of a reply's profile count each moment once). Its schedule ran inside the span
        // before (schedule_ms).
        const clk::time_point from = std::max(f.t0, I.last_step_end);
        rec.t_start_us += int64_t(std::chrono::duration_cast<std::chrono::microseconds>(from - f.t0).count());
        rec.duration_ms = ms(from, t4);
        rec.schedule_ms = ms(f.t0, f.t1);
        rec.forward_ms = ms(std::max(f.t1, from), t2);
        I.last_step_end = t4;
        rec.sample_ms = ms(t3, t4) - emit_ms;
        rec.emit_ms = emit_ms + ms(t2, t3);
        rec.n_seqs = int32_t(f.so.chunks.size());
        rec.n_prefill_tokens = f.so.n_prefill_tokens;
        rec.n_decode_tokens = f.so.n_decode_tokens;
        rec.attention_ms = out.phases.attention_ms;
        rec.moe_ms = out.phases.moe_ms;
        rec.dense_ms = out.phases.dense_ms;
        rec.head_ms = out.phases.head_ms;
        I.ring.push_back(std::move(rec));
        if (int32_t(I.ring.size()) > m_params.telemetry_ring) I.ring.pop_front();
    };

    // One step: the running step (submitted by the previous call when it overlapped) or a new one;
    // its successor submitted before its outputs are read where can_speculate allows.
    auto step = [&]() {
        if (!I.pending) {
            auto f = schedule_and_submit();
            if (!f) return;
            I.pending = std::move(f);
        }
        std::optional<inflight_step> next;
        if (can_speculate(*I.pending)) next = speculate(*I.pending);
        inflight_step cur = std::move(*I.pending);
        I.pending.reset();
        const status st = I.mdl->be->finish(I.out);
        process(cur, st);
        I.pending = std::move(next);
    };

    auto publish = [&](bool force) {
        const auto now = std::chrono::steady_clock::now();
        if (!force && now - I.last_publish < std::chrono::milliseconds(10)) return;
        I.last_publish = now;
        auto s = std::make_shared<telemetry_snapshot>();
        s->n_steps = I.n_steps;
        s->t_us = I.now_us();
        s->recent_steps.assign(I.ring.begin(), I.ring.end());
        s->moe_layers = I.moe_layers;
        if (I.mdl) {
            s->n_expert = int32_t(I.mdl->config.n_expert);
            s->n_expert_used = int32_t(I.mdl->config.n_expert_used);
        }
        s->expert_tokens = I.expert_tokens;
        s->expert_weight = I.expert_weight;
        s->window_steps = int32_t(I.window.size());
        s->expert_tokens_window = I.expert_window_sum;
        if (I.mdl && I.sched) {
            memory_stats &m = s->memory;
            const block_pool &pool = I.sched->pool();
            m.weights_bytes = I.mdl->be->weights_bytes();
            m.kv_block_bytes = I.mdl->be->kv_block_bytes();
            m.kv_blocks_total = pool.n_blocks();
            m.kv_blocks_used = pool.n_used();
            m.kv_blocks_free = pool.n_free();
            m.kv_blocks_cached = pool.n_cached();
            pool.states(m.kv_block_states);
            m.kv_blocks_cached_free = int32_t(
                std::count(m.kv_block_states.begin(), m.kv_block_states.end(), uint8_t(kv_block_state::cached)));
            m.kv_tokens_stored = I.sched->kv_tokens_stored();
            const int64_t cap = int64_t(m.kv_blocks_used) * pool.block_size();
            m.kv_waste = cap > 0 ? 1.0 - double(m.kv_tokens_stored) / double(cap) : 0.0;
            const backend_memory bm = I.mdl->be->memory();
            m.alloc_reserved = bm.reserved;
            m.alloc_in_use = bm.in_use;
            m.alloc_largest_free = bm.largest_free;
            m.device_total = bm.device_total;
            m.device_free = bm.device_free;
            const uint64_t free_total = bm.reserved - std::min(bm.reserved, bm.in_use);
            m.fragmentation = free_total > 0 ? 1.0 - double(bm.largest_free) / double(free_total) : 0.0;
            s->n_running = I.sched->n_running();
            s->n_waiting = I.sched->n_waiting();
            s->prefix_queries = pool.queries();
            s->prefix_hits = pool.hits();
        }
        s->n_requests_finished = I.n_finished;
        s->n_tokens_generated = I.n_generated;
        s->n_prompt_tokens = I.n_prompt_tokens;
        s->n_steps_overlapped = I.n_overlapped;
        m_telemetry.publish(std::move(s));
    };

    publish(true);
    for (;;) {
        std::deque<command> cmds;
        {
            std::unique_lock lock(I.mutex);
            const bool busy = (I.sched && I.sched->has_work()) || I.pending;
            if (!busy) I.cv.wait(lock, [&] { return I.stop || !I.commands.empty(); });
            if (I.stop) break;
            cmds.swap(I.commands);
        }
        for (auto &c : cmds) {
            if (auto *s = std::get_if<cmd_submit>(&c)) handle_submit(*s);
            else if (auto *x = std::get_if<cmd_cancel>(&c)) finish(x->id, "cancelled");
            else if (auto *l = std::get_if<cmd_load>(&c)) handle_load(*l);
            else if (std::holds_alternative<cmd_unload>(c)) drop_model();
        }
        if ((I.sched && I.sched->has_work()) || I.pending) {
            step();
            publish(!I.sched->has_work());
        } else {
            publish(true);
        }
    }
    // Shutdown: every open stream learns it was cancelled; pending commands are answered.
    std::deque<command> rest;
    {
        std::lock_guard lock(I.mutex);
        rest.swap(I.commands);
    }
    for (auto &c : rest) {
        if (auto *s = std::get_if<cmd_submit>(&c)) fail(s->stream, "the engine is shutting down");
        else if (auto *l = std::get_if<cmd_load>(&c)) l->done->set_value(error{"the engine is shutting down"});
    }
    drop_model();
}

} // namespace es
