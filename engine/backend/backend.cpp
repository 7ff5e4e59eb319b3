// check_batch(): the batch validation every backend runs first (see backend.h).
#include "engine/backend/backend.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace es {

status backend::kv_ensure_blocks(int32_t n) {
    if (n <= kv_mapped_blocks()) return ok_status();
    return error{"the KV pool has " + std::to_string(kv_capacity_blocks()) + " blocks; " + std::to_string(n) +
                 " were asked for"};
}

bool batch_has_routing(const batch &b) {
    for (const auto &s : b.seqs)
        if (s.routing && !s.routing->empty()) return true;
    return false;
}

void check_batch(const batch &b, const model_config &cfg, const kv_cache_params &kv, bool fed) {
    const size_t T = b.tokens.size();
    if (b.pos.size() != T || b.seq.size() != T) throw load_error("batch: tokens, pos and seq differ in length");
    for (size_t t = 0; t < T; ++t) {
        if ((b.tokens[t] < 0 && !fed) || b.tokens[t] >= cfg.n_vocab)
            throw load_error("batch: token id " + std::to_string(b.tokens[t]) + " is outside the vocabulary [0, " +
                             std::to_string(cfg.n_vocab) + ")");
        if (b.seq[t] < 0 || size_t(b.seq[t]) >= b.seqs.size()) throw load_error("batch: bad sequence index");
        const auto &bt = b.seqs[b.seq[t]].block_table;
        const int64_t blk = b.pos[t] / kv.block_size;
        if (b.pos[t] < 0 || blk >= int64_t(bt.size()))
            throw load_error("batch: position " + std::to_string(b.pos[t]) + " has no KV block");
        if (b.pos[t] >= cfg.n_ctx_train)
            throw load_error("batch: position " + std::to_string(b.pos[t]) + " is past the model's context of " +
                             std::to_string(cfg.n_ctx_train));
    }
    // A sequence's tokens are one run with positions rising by one: the CUDA decode attention
    // treats keys below the run's first position as written by earlier passes (read before its
    // wait for this pass's K/V writes), and every backend writes K/V before attending.
    std::vector<char> started(b.seqs.size(), 0);
    for (size_t t = 0; t < T; ++t) {
        const int32_t s = b.seq[t];
        if (t > 0 && b.seq[t - 1] == s) {
            if (b.pos[t] != b.pos[t - 1] + 1)
                throw load_error("batch: the positions of sequence " + std::to_string(s) +
                                 " do not rise by one (token " + std::to_string(t) + ": " + std::to_string(b.pos[t - 1]) +
                                 " then " + std::to_string(b.pos[t]) + ")");
        } else {
            if (started[size_t(s)])
                throw load_error("batch: the tokens of sequence " + std::to_string(s) + " are not contiguous (token " +
                                 std::to_string(t) + ")");
            started[size_t(s)] = 1;
        }
    }
    for (const auto &s : b.seqs)
        for (int32_t blk : s.block_table)
            if (blk < 0 || blk >= kv.n_blocks) throw load_error("batch: KV block id out of range");
    for (const auto &s : b.seqs)
        if (s.routing)
            if (auto st = check_routing_intervention(*s.routing, cfg); !st) throw load_error("batch: " + st.message());
    for (int32_t r : b.logits_rows)
        if (r < 0 || size_t(r) >= T) throw load_error("batch: logits row out of range");
    if (b.sampling.empty()) return;
    if (b.sampling.size() != b.logits_rows.size()) throw load_error("batch: sampling must be one per logits row");
    if (cfg.n_vocab >= (int64_t(1) << 23)) throw load_error("batch: sampling on the device needs a vocabulary under 2^23");
    for (const row_sampling &s : b.sampling) {
        if (!(s.top_p > 0.0f && s.top_p <= 1.0f) || !(s.min_p >= 0.0f && s.min_p <= 1.0f) || s.top_k < 0 ||
            !(s.temperature >= 0.0f) || !(s.repetition > 0.0f))
            throw load_error("batch: sampling parameters out of range");
        if (s.n_penalties < 0 || s.penalties > b.penalties.size() || size_t(s.n_penalties) > b.penalties.size() - s.penalties)
            throw load_error("batch: a row's penalty entries lie outside batch::penalties");
        if (s.extra_token >= int32_t(T)) throw load_error("batch: a row's extra token lies outside the batch");
        for (int32_t i = 1; i < s.n_penalties; ++i)
            if (b.penalties[size_t(s.penalties) + size_t(i)].id <= b.penalties[size_t(s.penalties) + size_t(i) - 1].id)
                throw load_error("batch: a row's penalty ids must ascend");
    }
}

std::vector<int32_t> top_candidates(const forward_output &out, int64_t n_vocab) {
    if (!out.sampled.empty()) return out.sampled;
    std::vector<int32_t> top;
    const logit_candidate_rows &c = out.candidates;
    if (c.top_n > 0) {
        for (size_t r = 0; r * size_t(c.top_n) < c.ids.size(); ++r) top.push_back(c.ids[r * size_t(c.top_n)]);
        return top;
    }
    if (n_vocab <= 0) return top;
    for (size_t r = 0; (r + 1) * size_t(n_vocab) <= out.logits.size(); ++r) {
        const float *row = out.logits.data() + r * size_t(n_vocab);
        int32_t best = -1;
        for (int64_t v = 0; v < n_vocab; ++v)
            if (!std::isnan(row[v]) && (best < 0 || row[v] > row[best])) best = int32_t(v);
        top.push_back(best);
    }
    return top;
}

status backend::submit(const batch &b) {
    if (m_queued.size() >= 2) return error{"submit: two forwards are in flight already; finish one first"};
    const batch *use = &b;
    batch resolved;
    if (std::any_of(b.tokens.begin(), b.tokens.end(), [](int32_t t) { return t < 0; })) {
        resolved = b;
        for (int32_t &t : resolved.tokens) {
            if (t >= 0) continue;
            const int64_t row = -int64_t(t) - 1;
            if (row >= int64_t(m_prev_top.size()))
                return error{"batch: a fed token names row " + std::to_string(row) + " of the previous forward, which had " +
                             std::to_string(m_prev_top.size()) + " output rows"};
            if (m_prev_top[size_t(row)] < 0)
                return error{"batch: a fed token names row " + std::to_string(row) +
                             " of the previous forward, which had no candidate (every logit NaN)"};
            t = m_prev_top[size_t(row)];
        }
        use = &resolved;
    }
    queued_forward q;
    q.st = forward(*use, q.out);
    m_prev_top = q.st ? top_candidates(q.out, config().n_vocab) : std::vector<int32_t>{};
    m_queued.push_back(std::move(q));
    return ok_status();
}

status backend::finish(forward_output &out) {
    if (m_queued.empty()) return error{"finish: no forward was submitted"};
    queued_forward q = std::move(m_queued.front());
    m_queued.pop_front();
    if (q.st) out = std::move(q.out);
    return q.st;
}

} // namespace es
