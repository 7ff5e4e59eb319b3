// The asynchronous step: forward = submit + finish. submit plans the step, packs its inputs into
// a pinned slot and launches it (a graph or eagerly) with its outputs' download; finish waits for
// the slot's event and unpacks the routing record and the logits or candidates. Fed tokens (the
// previous step's greedy pick) are patched on the GPU where its candidates still are.
#include "engine/cuda/backend/cuda_backend_impl.h"

#include "kernels/copy_bytes.cuh"
#include "kernels/moe_reroute.cuh"

#include <algorithm>
#include <chrono>
#include <cstring>

namespace es {

status cuda_backend_impl::forward(const batch &b, forward_output &out) {
    if (!m_flight.empty()) return error{"forward: a submitted forward is not finished (finish it first)"};
    const auto t0 = std::chrono::steady_clock::now();
    if (auto s = submit(b); !s) return s;
    auto s = finish(out);
    if (s && !out.phases.on_device)
        out.phases.total_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return s;
}

status cuda_backend_impl::submit(const batch &b) {
    return catch_errors([&]() -> status {
        check_usable();
        guard_sticky([&] {
            if (m_flight.size() >= 2) throw load_error("submit: two forwards are in flight already; finish one first");
            check_batch(b, true);
            m_flight.push_back(start(b));
        });
        return ok_status();
    });
}

status cuda_backend_impl::finish(forward_output &out) {
    return catch_errors([&]() -> status {
        if (m_flight.empty()) throw load_error("finish: no forward was submitted");
        pending_forward p = std::move(m_flight.front());
        m_flight.pop_front();
        if (p.done) {
            if (p.st) out = std::move(p.out);
            return p.st;
        }
        check_usable();
        guard_sticky([&] { collect(p, out, m_flight.empty()); });
        return ok_status();
    });
}

status cuda_backend_impl::logits_row(int32_t row, std::span<float> out) {
    return catch_errors([&]() -> status {
        check_usable();
        if (!m_flight.empty())
            throw load_error("logits_row: a forward is in flight (the workspace's rows are the newer one's)");
        if (row < 0 || row >= m_last_rows)
            throw load_error("logits_row: row " + std::to_string(row) +
                             " is not a logits row of the last forward pass (" +
                             std::to_string(m_last_rows) + " rows)");
        if (int64_t(out.size()) != m_cfg.n_vocab)
            throw load_error("logits_row: the output holds " + std::to_string(out.size()) +
                             " values, n_vocab is " + std::to_string(m_cfg.n_vocab));
        const size_t bytes = size_t(m_cfg.n_vocab) * 4;
        if (m_io[0].logits.bytes() < bytes)
            m_io[0].logits.alloc(size_t(k_graph_max_tokens * m_cfg.n_vocab) * 4, "pinned logits buffer");
        ck(cudaMemcpyAsync(m_io[0].logits.at(), m_work.at(m_lay.logits + size_t(row) * bytes), bytes,
                           cudaMemcpyDeviceToHost, m_stream),
           "logits row download");
        ck(cudaStreamSynchronize(m_stream), "logits row download");
        std::memcpy(out.data(), m_io[0].logits.at(), bytes);
        return ok_status();
    });
}

void cuda_backend_impl::drain() {
    for (pending_forward &p : m_flight)
        if (!p.done) {
            p.done = true;
            try {
                collect(p, p.out, &p == &m_flight.back());
            } catch (const load_error &e) {
                p.st = error{e.what()};
            }
        }
}

auto cuda_backend_impl::start(const batch &b) -> pending_forward {
    using hclk = std::chrono::steady_clock;
    pending_forward pf;
    pf.h0 = hclk::now();
    check_step_request(b);
    pf.T = b.n_tokens();
    pf.R = int64_t(b.logits_rows.size());
    if (pf.T == 0) {
        pf.done = true;
        pf.out.logits.clear();
        m_fed.valid = false;
        m_last_tops.clear();
        m_last_tops_current = true;
        return pf;
    }
    // The workspace grows only with nothing in flight (its pinned buffers hold their outputs).
    const int64_t bt = int64_t(b.seqs.size()) * block_table_stride(b);
    const int64_t ws_T = step_ws_tokens(pf.T, step_routing_width(b, m_cfg), m_cfg.n_expert_used);
    if (!workspace_fits(ws_T, pf.R, bt)) drain();
    ensure_workspace(ws_T, pf.R, bt);
    const int64_t prev_rows = m_fed.valid ? m_fed.R : int64_t(m_last_tops.size());
    const int slot = m_flight.empty() ? 0 : 1 - m_flight.back().slot;
    const step_plan p = plan_step(m_cfg, n_moe_layers(), b, current_plan_options(), m_fed, prev_rows, slot);
    pf.slot = slot;
    pf.top_n = p.top_n;
    pf.nk = p.nk;
    pf.cand_rel = p.cand_rel;
    pf.logit_bytes = p.logit_bytes;
    pf.via_pinned = p.via_pinned;
    pf.cand_block = p.cand_block;
    pf.sample = p.sample;
    pf.timed = b.time_phases;
    pf.K = p.K;
    m_last_slot = slot;
    m_last_in = p.in;
    m_out = make_out_layout(m_lay.out, p.n_moe, p.T, p.K);
    if (p.reroute) upload_route_rules(b, p, pf);
    // The KV bytes each layer's attention reads (the step timeline's figure): every sequence's
    // keys and values up to its last position in the batch.
    std::vector<int64_t> seq_end(b.seqs.size(), 0);
    for (int64_t t = 0; t < pf.T; ++t)
        seq_end[size_t(b.seq[size_t(t)])] = std::max<int64_t>(seq_end[size_t(b.seq[size_t(t)])], b.pos[size_t(t)] + 1);
    int64_t kv_tokens = 0;
    for (int64_t e : seq_end) kv_tokens += e;
    m_step_kv_bytes = double(kv_tokens) * double(m_cfg.kv_dim()) * 2.0 * double(kv_format_bytes(kv_fmt()));
    pack_inputs(b, p, host_tokens(b, p));
    if (p.sync_now) drain(); // (the forward's rows go straight into its output below)
    if (!p.via_pinned) pf.out.logits.resize(size_t(p.R * m_cfg.n_vocab)); // every element is written below
    pinned_buffer &pin_logits = m_io[slot].logits;
    if (p.via_pinned && pin_logits.bytes() < p.cand_rel + p.logit_bytes)
        pin_logits.alloc(std::max(p.cand_rel + p.logit_bytes, size_t(k_graph_max_tokens * m_cfg.n_vocab) * 4),
                         "pinned logits buffer");
    pf.h1 = hclk::now();
    launch_step(p, pf);
    // What the next forward's fed tokens read: these candidates, on the GPU.
    m_fed = fed_source{m_out.cand, p.top_n, p.R, p.cand_block};
    m_last_tops_current = false;
    if (p.sync_now) {
        collect(pf, pf.out, true);
        pf.done = true;
    }
    return pf;
}

std::vector<int32_t> cuda_backend_impl::host_tokens(const batch &b, const step_plan &p) {
    std::vector<int32_t> tokens(b.tokens);
    if (!p.has_fed || p.fed_on_gpu) return tokens;
    if (!m_last_tops_current) drain_for_tops();
    for (int32_t &t : tokens)
        if (t < 0) {
            t = m_last_tops[size_t(-int64_t(t) - 1)];
            if (t < 0)
                throw load_error("batch: a fed token names a row of the previous forward that had no "
                                 "candidate (every logit NaN)");
        }
    return tokens;
}

void cuda_backend_impl::pack_inputs(const batch &b, const step_plan &p, const std::vector<int32_t> &tokens) {
    pinned_buffer &pin = m_io[p.slot].inputs;
    const input_layout &il = p.in;
    std::memcpy(pin.at(il.tokens), tokens.data(), size_t(p.T) * 4);
    std::memcpy(pin.at(il.pos), b.pos.data(), size_t(p.T) * 4);
    std::memcpy(pin.at(il.seq), b.seq.data(), size_t(p.T) * 4);
    if (p.R) std::memcpy(pin.at(il.rows), b.logits_rows.data(), size_t(p.R) * 4);
    for (int64_t r = 0; r < p.R; ++r)
        pin.at<float>(il.temps)[r] = b.temperatures.empty() ? 0.0f : b.temperatures[size_t(r)];
    if (p.sample) {
        // The penalty lists stay in the slot's pinned memory, read there by sample_rows; each
        // row's index into them becomes their address.
        pinned_buffer &pen = m_io[p.slot].penalties;
        const size_t need = b.penalties.size() * sizeof(penalty_entry);
        if (need > pen.bytes()) pen.alloc(std::max(2 * need, size_t(64) << 10), "pinned penalty lists");
        if (need) std::memcpy(pen.at(), b.penalties.data(), need);
        auto *rs = reinterpret_cast<row_sampling *>(pin.at(il.samp));
        for (int64_t r = 0; r < p.R; ++r) {
            rs[r] = b.sampling[size_t(r)];
            rs[r].penalties = rs[r].n_penalties > 0
                                  ? reinterpret_cast<uint64_t>(pen.at()) + b.sampling[size_t(r)].penalties * sizeof(penalty_entry)
                                  : 0;
        }
    }
    std::memcpy(pin.at(il.tiles), p.tiles.data(), p.tiles.size() * 4);
    int32_t *btp = pin.at<int32_t>(il.bt);
    for (int64_t s = 0; s < p.S; ++s) {
        const auto &tbl = b.seqs[size_t(s)].block_table;
        std::copy(tbl.begin(), tbl.end(), btp + s * p.stride);
        std::fill(btp + s * p.stride + int64_t(tbl.size()), btp + (s + 1) * p.stride, 0);
    }
}

void cuda_backend_impl::upload_route_rules(const batch &b, const step_plan &p, pending_forward &pf) {
    const model_config &c = m_cfg;
    const int64_t E = c.n_expert, words = moe_reroute_rule_words(E), T = p.T;
    // Rule 0: the model's routing; then one per distinct intervention (sequences may share one).
    std::vector<const routing_intervention *> rules{nullptr};
    std::vector<int32_t> seq_rule(b.seqs.size(), 0);
    for (size_t s = 0; s < b.seqs.size(); ++s) {
        const routing_intervention *iv = b.seqs[s].routing.get();
        if (!iv || iv->empty()) continue;
        const auto it = std::find(rules.begin(), rules.end(), iv);
        seq_rule[s] = int32_t(it - rules.begin());
        if (it == rules.end()) rules.push_back(iv);
    }
    const int64_t n_rules = int64_t(rules.size());
    m_route_rules = align256(size_t(T) * 4);
    std::vector<int32_t> host(m_route_rules / 4 + size_t(p.n_moe * n_rules * words), 0);
    pf.token_k.resize(size_t(T));
    for (int64_t t = 0; t < T; ++t) {
        const int32_t r = seq_rule[size_t(b.seq[size_t(t)])];
        host[size_t(t)] = r;
        pf.token_k[size_t(t)] = int32_t(r && rules[size_t(r)]->top_k > 0 ? rules[size_t(r)]->top_k : c.n_expert_used);
    }
    static const routing_intervention none;
    int64_t m = 0;
    for (int64_t il = 0; il < c.n_layer; ++il) {
        if (!m_w.layers[il].is_moe) continue;
        for (int64_t r = 0; r < n_rules; ++r) {
            const layer_routing lr = routing_for_layer(r ? *rules[size_t(r)] : none, int32_t(il), E, c.n_expert_used);
            moe_reroute_fill_rule(&host[m_route_rules / 4 + size_t((m * n_rules + r) * words)], E, lr.k,
                                  lr.forced.data(), int32_t(lr.forced.size()), lr.disabled.data(), lr.bias_scale);
        }
        ++m;
    }
    const size_t bytes = host.size() * 4;
    if (m_route.bytes() < bytes) {
        drain(); // a forward in flight may still read the rules buffer
        m_route.alloc(std::max(bytes, size_t(64) << 10), "the expert interventions' routing rules");
    }
    // From pageable memory: the copy has taken the bytes when it returns, and the stream orders
    // it after every launch of the forwards before this one.
    ck(cudaMemcpyAsync(m_route.at(), host.data(), bytes, cudaMemcpyHostToDevice, m_stream),
       "the routing rules' upload");
    m_route_n_rules = n_rules;
}

void cuda_backend_impl::launch_step(const step_plan &p, pending_forward &pf) {
    using hclk = std::chrono::steady_clock;
    io_slot &io = m_io[p.slot];
    const input_layout &il = p.in;
    // The inputs in: a copy, or (fed tokens on the GPU) copy_bytes patching them on the way.
    copy_bytes_params in;
    in.dst = m_inputs.at();
    in.src = io.inputs.at();
    in.bytes = il.total;
    if (p.fed_on_gpu) {
        in.fed_offset = il.tokens;
        in.fed_n = p.T;
        in.fed_ids = m_work.at<int32_t>(m_fed.cand);
        in.fed_stride = m_fed.top_n;
    }
    const std::function<void()> upload = [&] {
        if (p.fed_on_gpu)
            op("inputs in", [&] { return launch_copy_bytes(in, m_stream); });
        else
            ck(cudaMemcpyAsync(m_inputs.at(), io.inputs.at(), il.total, cudaMemcpyHostToDevice, m_stream),
               "input upload");
    };
    const std::function<void()> download = [&] {
        if (p.cand_block) {
            const size_t from = p.nk ? 0 : p.cand_rel; // the record too when it is on
            ck(cudaMemcpyAsync(io.logits.at(from), m_work.at(m_out.ids + from), p.cand_rel - from + p.logit_bytes,
                               cudaMemcpyDeviceToHost, m_stream),
               "candidates download");
        } else if (p.R)
            ck(cudaMemcpyAsync(p.via_pinned ? io.logits.at() : static_cast<void *>(pf.out.logits.data()),
                               m_work.at(m_lay.logits), p.logit_bytes, cudaMemcpyDeviceToHost, m_stream),
               "logits download");
        if (p.nk && !p.cand_block) // ids, weights and margins
            ck(cudaMemcpyAsync(io.record.at(), m_work.at(m_out.ids), p.cand_rel, cudaMemcpyDeviceToHost, m_stream),
               "routing download");
    };
    // Zero-copy I/O (plan: io_in_graph): the graph's first kernel reads the inputs from the slot's
    // pinned mirror and its last writes the download block to the slot's `block` (the device
    // reaching pinned host memory directly), so that a replay is one launch call and no transfer
    // (a 21B-A3B token's host share 9.4-10.8 µs instead of 14.5-15.7 on the H200). The same
    // transfers as copy nodes inside the graph make its launch call 3-7× longer.
    const size_t dl_from = p.nk ? 0 : p.cand_rel, dl_bytes = p.cand_rel - dl_from + p.logit_bytes;
    const std::function<void()> copy_in = [&] { op("inputs in", [&] { return launch_copy_bytes(in, m_stream); }); };
    const std::function<void()> copy_out = [&] {
        copy_bytes_params cp;
        cp.dst = io.block.at(dl_from);
        cp.src = m_work.at(m_out.ids + dl_from);
        cp.bytes = dl_bytes;
        op("download block out", [&] { return launch_copy_bytes(cp, m_stream); });
    };
    pf.h2 = pf.h1;
    bool launched = false, io_done = false;
    // A timed step (batch::time_phases) runs alone: the one before it has finished, so that only
    // its own launches write the kernel timeline, and it has finished before the next is launched.
    cudaEvent_t t_begin = nullptr, t_end = nullptr;
    cudaGraphExec_t timed_exec = nullptr;
    struct timeline_off { // the kernels' timeline off again, whatever happens between
        cudaStream_t stream;
        bool on = false;
        ~timeline_off() {
            if (!on) return;
            cudaStreamSynchronize(stream);
            set_kernel_timeline(nullptr);
            cudaDeviceSynchronize();
            cudaGetLastError();
        }
    } timeline_guard{m_stream};
    if (pf.timed) {
        ck(cudaStreamSynchronize(m_stream), "phase timing");
        m_timing.next = 0;
        m_timing.ops.clear();
        m_timing.op_event.clear();
        t_begin = timing_event();
        t_end = timing_event();
    }
    bool begun = false; // the step's start recorded: right before its first transfer or launch
    const auto mark_begin = [&] {
        if (!pf.timed || begun) return;
        ck(cudaEventRecord(t_begin, m_stream), "cudaEventRecord");
        begun = true;
    };
    if (p.graphable && m_graph.error.empty()) {
        auto it = m_graph.execs.find(p.key);
        if (it == m_graph.execs.end() && pf.timed && m_graph.seen.count(p.key)) {
            // A timed step of a key run once: its graph captured now and replayed below, so that
            // the step timed is the graph every later step of the key replays (a capture failure
            // leaves it eager, as an untimed step's would).
            m_inputs_by_kernel = p.io_in_graph || p.fed_on_gpu;
            if (capture_and_launch(p, p.io_in_graph ? copy_in : nullptr, p.io_in_graph ? copy_out : nullptr, false))
                it = m_graph.execs.find(p.key);
        }
        if (it != m_graph.execs.end()) {
            if (!p.io_in_graph) upload();
            if (pf.timed) {
                // The pointer each kernel unit reads is set by a copy outside this stream: the
                // stream idle before it (the upload's kernel must not record) and the copy landed
                // (the device synchronized) before the graph's first kernel.
                if (!m_timing.timeline) {
                    void *buf = nullptr;
                    ck(cudaMalloc(&buf, (1 + 2 * size_t(kernel_timeline_max)) * 8), "the kernel timeline buffer");
                    m_timing.timeline = static_cast<unsigned long long *>(buf);
                }
                ck(cudaMemsetAsync(m_timing.timeline, 0, 8, m_stream), "kernel timeline reset");
                ck(cudaStreamSynchronize(m_stream), "kernel timeline reset");
                timeline_guard.on = true;
                ck(set_kernel_timeline(m_timing.timeline), "set_kernel_timeline");
                ck(cudaDeviceSynchronize(), "set_kernel_timeline");
                timed_exec = it->second;
            }
            pf.h2 = hclk::now();
            m_graph.last = it->second;
            m_graph.used[p.key] = ++m_graph.tick;
            mark_begin();
            ck(cudaGraphLaunch(it->second, m_stream), "cudaGraphLaunch");
            note_graph_launch(it->second, p.slot);
            launched = pf.replayed = true;
            io_done = p.io_in_graph;
        } else if (m_graph.seen.count(p.key) && !pf.timed) { // (a timed step's capture is above)
            if (!p.io_in_graph) upload();
            m_inputs_by_kernel = p.io_in_graph || p.fed_on_gpu; // layer 0's GEMV reads them after its wait
            launched = capture_and_launch(p, p.io_in_graph ? copy_in : nullptr, p.io_in_graph ? copy_out : nullptr);
            io_done = launched && p.io_in_graph;
            if (!launched && p.io_in_graph) upload(); // the eager launches below need the inputs
        } else {
            m_graph.seen.insert(p.key); // run eagerly once first: lazy initialization stays out of the graph
            mark_begin();
            upload();
        }
    } else {
        mark_begin();
        upload();
    }
    if (!launched) {
        m_inputs_by_kernel = p.fed_on_gpu;
        mark_begin();
        m_timing.on = pf.timed; // each launch between events
        struct timing_off {
            bool &on;
            ~timing_off() { on = false; }
        } timing_guard{m_timing.on};
        record_step(p);
    }
    pf.h3 = hclk::now();
    if (!io_done) download();
    if (pf.timed) {
        ck(cudaEventRecord(t_end, m_stream), "cudaEventRecord");
        finish_step_timing(pf, timed_exec, t_begin, t_end);
        timeline_guard.on = false; // (finish_step_timing switched it off)
    }
    ck(cudaEventRecord(io.done, m_stream), "cudaEventRecord");
    pf.h4 = hclk::now();
    pf.io_done = io_done;
}

void cuda_backend_impl::drain_for_tops() {
    drain();
    if (!m_last_tops_current)
        throw load_error("batch: fed tokens need the previous forward's candidates (batch::top_n >= 1)");
}

void cuda_backend_impl::collect(pending_forward &pf, forward_output &out, bool latest) {
    using hclk = std::chrono::steady_clock;
    const auto &c = m_cfg;
    const int64_t T = pf.T, R = pf.R, top_n = pf.top_n, nk = pf.nk, K = pf.K;
    const int slot = pf.slot;
    ck(cudaEventSynchronize(m_io[slot].done), "the forward pass");
    ck(cudaGetLastError(), "the forward pass");
    const auto h5 = hclk::now();
    // The routing record's ids and weights and the candidates are sized and filled in place,
    // so a caller that passes the same output every step (the bench, the engine) allocates
    // nothing for them in a decode step.
    routing_record &rr = out.routing;
    rr.moe_layers.clear();
    rr.n_expert_used = int32_t(K);
    logit_candidate_rows &cr = out.candidates;
    cr.top_n = 0;
    cr.ids.clear();
    cr.logits.clear();
    cr.row_max.clear();
    cr.row_sum.clear();
    out.phases = pf.timed ? pf.phases : phase_times{};
    if (pf.timed) out.timeline = std::move(pf.timeline);
    else out.timeline.clear();
    if (&out != &pf.out) {
        if (pf.via_pinned || R == 0) out.logits.clear();
        else out.logits = std::move(pf.out.logits);
    }
    // The download block's host copy: written by the graph itself (zero-copy) or by the copy.
    const unsigned char *dl = pf.io_done ? m_io[slot].block.at() : m_io[slot].logits.at();
    if (pf.via_pinned && top_n > 0) {
        const unsigned char *p = dl + pf.cand_rel;
        cr.top_n = int32_t(top_n);
        cr.ids.assign(reinterpret_cast<const int32_t *>(p), reinterpret_cast<const int32_t *>(p) + R * top_n);
        p += size_t(R * top_n) * 4;
        cr.logits.assign(reinterpret_cast<const float *>(p), reinterpret_cast<const float *>(p) + R * top_n);
        p += size_t(R * top_n) * 4;
        cr.row_max.assign(reinterpret_cast<const float *>(p), reinterpret_cast<const float *>(p) + R);
        const double *sums = reinterpret_cast<const double *>(dl + pf.cand_rel + cand_sums_offset(R, top_n));
        cr.row_sum.assign(sums, sums + R);
    } else if (pf.via_pinned) {
        out.logits.resize(size_t(R * c.n_vocab));
        std::memcpy(out.logits.data(), m_io[slot].logits.at(), pf.logit_bytes);
    }
    m_last_rows = R;
    // The top candidates, for fed tokens of a next forward that cannot read them on the GPU.
    m_last_tops.clear();
    for (int64_t r = 0; r < (top_n > 0 ? R : 0); ++r) m_last_tops.push_back(cr.ids[size_t(r * top_n)]);
    m_last_tops_current = latest && top_n > 0;
    // Draws: the candidates' first slots hold them.
    out.sampled.clear();
    if (pf.sample) {
        out.sampled = std::move(cr.ids);
        cr = logit_candidate_rows{};
    }
    if (m_prof.on) collect_profile();
    if (nk) {
        const unsigned char *rec = pf.cand_block ? dl : m_io[slot].record.at();
        const int32_t *ids = reinterpret_cast<const int32_t *>(rec);
        const float *wts = reinterpret_cast<const float *>(rec + size_t(nk) * 4);
        const float *margins = reinterpret_cast<const float *>(rec + size_t(nk) * 8);
        rr.ids.resize(size_t(n_moe_layers()));
        rr.weights.resize(size_t(n_moe_layers()));
        rr.margins.resize(size_t(n_moe_layers()));
        int64_t m = 0;
        for (int64_t il = 0; il < c.n_layer; ++il) {
            if (!m_w.layers[il].is_moe) continue;
            rr.moe_layers.push_back(int32_t(il));
            std::vector<int16_t> &li = rr.ids[size_t(m)];
            std::vector<float> &lw = rr.weights[size_t(m)];
            li.resize(size_t(T * K));
            for (int64_t i = 0; i < T * K; ++i) li[size_t(i)] = int16_t(ids[m * T * K + i]);
            lw.assign(wts + m * T * K, wts + (m + 1) * T * K);
            // A token that selected fewer than K (moe_reroute's padding): −1 and 0 in the places
            // past its k, as the record defines them.
            for (int64_t t = 0; t < (pf.token_k.empty() ? 0 : T); ++t)
                for (int64_t j = pf.token_k[size_t(t)]; j < K; ++j) {
                    li[size_t(t * K + j)] = -1;
                    lw[size_t(t * K + j)] = 0.0f;
                }
            rr.margins[size_t(m)].assign(margins + m * T, margins + (m + 1) * T);
            ++m;
        }
    } else {
        rr.ids.clear();
        rr.weights.clear();
        rr.margins.clear();
    }
    if (pf.replayed) {
        auto us = [](hclk::time_point a, hclk::time_point b) {
            return std::chrono::duration<double, std::micro>(b - a).count();
        };
        forward_host_times &h = m_host_times;
        ++h.forwards;
        h.prep_us += us(pf.h0, pf.h1);
        h.upload_us += us(pf.h1, pf.h2);
        h.launch_us += us(pf.h2, pf.h3);
        h.download_us += us(pf.h3, pf.h4);
        h.wait_us += us(std::max(pf.h4, m_last_collect), h5); // (overlapped: from the previous one's end)
        h.unpack_us += us(h5, hclk::now());
    }
    m_last_collect = hclk::now();
}

cudaEvent_t cuda_backend_impl::timing_event() {
    while (m_timing.events.size() <= m_timing.next) {
        cudaEvent_t e = nullptr;
        ck(cudaEventCreate(&e), "cudaEventCreate");
        m_timing.events.push_back(e);
    }
    return m_timing.events[m_timing.next++];
}

void cuda_backend_impl::finish_step_timing(pending_forward &pf, cudaGraphExec_t exec, cudaEvent_t begin,
                                           cudaEvent_t end) {
    ck(cudaEventSynchronize(end), "the timed step");
    float total_ms = 0.0f;
    ck(cudaEventElapsedTime(&total_ms, begin, end), "cudaEventElapsedTime");
    std::vector<op_time> ops;
    if (exec) {
        // The graph's kernels in launch order, each from its release (the one before it done) to
        // the next one's; the last one's end is not recorded (its time stays in other_ms).
        ck(cudaStreamSynchronize(m_stream), "kernel timeline");
        ck(set_kernel_timeline(nullptr), "set_kernel_timeline");
        ck(cudaDeviceSynchronize(), "set_kernel_timeline");
        unsigned long long count = 0;
        ck(cudaMemcpy(&count, m_timing.timeline, 8, cudaMemcpyDeviceToHost), "kernel timeline download");
        const auto tags = m_graph.ops.find(exec);
        const size_t n = size_t(count & 0xffffffffu);
        // A launch that does not record (no programmatic-launch wait) would misalign the names:
        // then the step keeps only its total.
        if (tags != m_graph.ops.end() && n == tags->second.size() && n > 0 && n <= kernel_timeline_max) {
            std::vector<unsigned long long> rec(2 * n);
            ck(cudaMemcpy(rec.data(), m_timing.timeline + 1, rec.size() * 8, cudaMemcpyDeviceToHost),
               "kernel timeline download");
            const double t0 = double(rec[1]);
            ops = tags->second;
            for (size_t i = 0; i < n; ++i) {
                const double released = double(rec[2 * i + 1]);
                ops[i].start_us = (released - t0) / 1000.0;
                ops[i].dur_us = i + 1 < n ? std::max(0.0, (double(rec[2 * i + 3]) - released) / 1000.0) : 0.0;
            }
        }
    } else {
        ops = std::move(m_timing.ops);
        for (size_t i = 0; i < ops.size(); ++i) {
            float start = 0.0f, dur = 0.0f;
            const size_t e = m_timing.op_event[i];
            ck(cudaEventElapsedTime(&start, begin, m_timing.events[e]), "cudaEventElapsedTime");
            ck(cudaEventElapsedTime(&dur, m_timing.events[e], m_timing.events[e + 1]), "cudaEventElapsedTime");
            ops[i].start_us = 1000.0 * double(start);
            ops[i].dur_us = 1000.0 * double(dur);
        }
    }
    m_timing.ops.clear();
    m_timing.op_event.clear();
    phase_times ph;
    add_op_times(ph, ops);
    ph.total_ms = double(total_ms);
    // What no launch accounts for: transfers, launch gaps, a graph's last kernel.
    ph.other_ms += std::max(0.0, ph.total_ms - ph.sum_ms());
    ph.timed = !ops.empty();
    ph.on_device = true;
    pf.phases = ph;
    pf.timeline = std::move(ops);
}

} // namespace es
