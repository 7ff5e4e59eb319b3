// generate_tokens(): see generate.h. Blocks 0..n-1 of the backend's KV pool hold the sequence.
#include "generate.h"

#include <algorithm>
#include <chrono>

namespace es {

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
        if (auto s = be.forward(b, out); !s) return s.err();
    }
    res.prefill_ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();

    auto is_stop = [&](int32_t id) { return std::find(sp.stop_ids.begin(), sp.stop_ids.end(), id) != sp.stop_ids.end(); };
    clock::time_point t_first;
    int64_t pos = int64_t(prompt.size());
    res.finish_reason = "length";
    for (int32_t i = 0; i < sp.max_tokens; ++i) {
        const int32_t id = smp.sample(out.logits, prompt, res.tokens);
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
        if (auto s = be.forward(b, out); !s) return s.err();
        ++pos;
    }
    if (!res.tokens.empty()) res.decode_ms = std::chrono::duration<double, std::milli>(clock::now() - t_first).count();
    return res;
}

} // namespace es
