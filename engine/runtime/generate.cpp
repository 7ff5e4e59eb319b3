// generate_tokens(): see generate.h. Blocks 0..n-1 of the backend's KV pool hold the sequence.
#include "engine/runtime/generate.h"

#include <algorithm>
#include <chrono>

namespace es {

void request_candidates(const backend &be, batch &b, std::span<sampler *const> samplers) {
    b.temperatures.clear();
    // No rows to sample: no candidates (one CUDA graph fewer: top_n is part of its key).
    b.top_n = be.supports_candidates() && !samplers.empty() ? k_sample_top_n : 0;
    if (!b.top_n) return;
    if (std::all_of(samplers.begin(), samplers.end(), [](const sampler *s) { return s->picks_top(); })) b.top_n = 1;
    for (const sampler *s : samplers) b.temperatures.push_back(s->sum_temperature());
}

result<int32_t> sample_output_row(backend &be, forward_output &out, int32_t row, sampler &smp,
                                  std::span<const int32_t> prompt, std::span<const int32_t> output,
                                  std::vector<float> &scratch, bool *fetched) {
    const int64_t V = be.config().n_vocab;
    if (fetched) *fetched = false;
    const logit_candidate_rows &cr = out.candidates;
    if (cr.top_n > 0) {
        const size_t n = size_t(cr.top_n), r = size_t(row);
        if (cr.ids.size() < (r + 1) * n || cr.logits.size() < (r + 1) * n || cr.row_sum.size() <= r)
            return error{"the backend returned too few logit candidates for row " + std::to_string(row)};
        logit_candidates lc;
        lc.ids = std::span<const int32_t>(cr.ids).subspan(r * n, n);
        lc.logits = std::span<const float>(cr.logits).subspan(r * n, n);
        lc.sum = cr.row_sum[r];
        lc.sum_temperature = smp.sum_temperature();
        lc.n_vocab = V;
        if (auto id = smp.sample_candidates(lc, prompt, output)) return *id;
        scratch.resize(size_t(V));
        if (auto s = be.logits_row(row, scratch); !s) return s.err();
        if (fetched) *fetched = true;
        return smp.sample(scratch, prompt, output);
    }
    if (out.logits.size() < size_t(row + 1) * size_t(V))
        return error{"the backend returned no logits for row " + std::to_string(row)};
    return smp.sample(std::span<float>(out.logits.data() + size_t(row) * size_t(V), size_t(V)), prompt,
                      output);
}

result<generate_result> generate_tokens(backend &be, const std::vector<int32_t> &prompt, const sampling_params &sp,
                                        const generate_params &gp) {
    using clock = std::chrono::steady_clock;
    const auto &cfg = be.config();
    if (prompt.empty()) return error{"the prompt is empty"};
    if (auto msg = sp.validate(); !msg.empty()) return error{"sampling parameters: " + msg};
    const int64_t n_ctx = cfg.n_ctx_train;
    if (int64_t(prompt.size()) >= n_ctx)
        return error{"the prompt has " + std::to_string(prompt.size()) + " tokens but the model's context is " +
                     std::to_string(n_ctx) + " tokens"};
    const int64_t max_total = std::min<int64_t>(n_ctx, int64_t(prompt.size()) + sp.max_tokens);

    kv_cache_params kv = be.kv_params();
    const int32_t bs = kv.block_size > 0 ? kv.block_size : 16;
    const int32_t need_blocks = int32_t((max_total + bs - 1) / bs);
    if (kv.n_blocks < need_blocks) {
        if (auto s = be.init_kv_cache({bs, need_blocks}); !s) return s.err();
    }
    batch b;
    b.seqs.resize(1);
    for (int32_t i = 0; i < need_blocks; ++i) b.seqs[0].block_table.push_back(i);

    generate_result res;
    sampler smp(sp);
    sampler *const smp_ptr = &smp;
    std::vector<float> row_scratch;
    res.seed = smp.seed();
    forward_output out;
    const auto t0 = clock::now();
    // Prefill in chunks; logits only for the last prompt token.
    const int32_t chunk = std::max(1, gp.prefill_chunk);
    for (size_t start = 0; start < prompt.size(); start += size_t(chunk)) {
        const size_t end = std::min(prompt.size(), start + size_t(chunk));
        b.tokens.assign(prompt.begin() + long(start), prompt.begin() + long(end));
        b.pos.resize(b.tokens.size());
        for (size_t i = 0; i < b.pos.size(); ++i) b.pos[i] = int32_t(start + i);
        b.seq.assign(b.tokens.size(), 0);
        b.logits_rows.clear();
        if (end == prompt.size()) b.logits_rows.push_back(int32_t(b.tokens.size() - 1));
        request_candidates(be, b,
                           b.logits_rows.empty() ? std::span<sampler *const>()
                                                 : std::span<sampler *const>(&smp_ptr, 1));
        if (auto s = be.forward(b, out); !s) return s.err();
    }
    res.prefill_ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();

    auto is_stop = [&](int32_t id) { return std::find(sp.stop_ids.begin(), sp.stop_ids.end(), id) != sp.stop_ids.end(); };
    clock::time_point t_first;
    int64_t pos = int64_t(prompt.size());
    res.finish_reason = "length";
    for (int32_t i = 0; i < sp.max_tokens; ++i) {
        const auto sampled = sample_output_row(be, out, 0, smp, prompt, res.tokens, row_scratch);
        if (!sampled) return sampled.err();
        const int32_t id = *sampled;
        if (i == 0) {
            t_first = clock::now();
            res.ttft_ms = std::chrono::duration<double, std::milli>(t_first - t0).count();
        }
        if (is_stop(id)) {
            res.finish_reason = "stop";
            break;
        }
        res.tokens.push_back(id);
        if (gp.on_token && !gp.on_token(id)) {
            res.finish_reason = "cancelled";
            break;
        }
        if (i + 1 == sp.max_tokens || pos >= max_total) break; // no room for another position
        b.tokens = {id};
        b.pos = {int32_t(pos)};
        b.seq = {0};
        b.logits_rows = {0};
        request_candidates(be, b, std::span<sampler *const>(&smp_ptr, 1));
        if (auto s = be.forward(b, out); !s) return s.err();
        ++pos;
    }
    if (!res.tokens.empty()) res.decode_ms = std::chrono::duration<double, std::milli>(clock::now() - t_first).count();
    return res;
}

} // namespace es
