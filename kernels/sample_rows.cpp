// CPU twin of sample_rows (see sample_rows.cuh for the draw it makes). Top-k's threshold is found by
// sorting the candidates of one bucket of a 16-bit histogram over the keys; the draw's rounds are
// passes over the row.
#include "kernels/sample_rows.cuh"

#include <algorithm>
#include <vector>

namespace es {

namespace {

void apply_penalties(float *row, int64_t V, const row_sampling &s, const int32_t *tokens) {
    if (!sampling_has_penalties(s)) return;
    const auto *e = reinterpret_cast<const penalty_entry *>(s.penalties);
    const int32_t n = e ? s.n_penalties : 0;
    const int32_t extra = s.extra_token >= 0 && tokens ? tokens[s.extra_token] : -1;
    bool extra_listed = false;
    for (int32_t i = 0; i < n; ++i) {
        if (e[i].id < 0 || e[i].id >= V) continue;
        const bool is_extra = e[i].id == extra;
        extra_listed |= is_extra;
        row[e[i].id] = sampling_penalized(row[e[i].id], e[i].count + (is_extra ? 1 : 0), s);
    }
    if (extra >= 0 && extra < V && !extra_listed) row[extra] = sampling_penalized(row[extra], 1, s);
}

// The largest key t among the candidates (key, weight) with Σ weight over keys ≥ t reaching
// target; `above` gets Σ weight over keys > t. Every candidate's weight is summed exactly
// (integers), so the answer does not depend on the order the candidates come in.
struct select_result {
    uint64_t key = 0;
    uint64_t above = 0;
};
template <class Weight>
select_result select_threshold(std::vector<std::pair<uint64_t, int32_t>> &cand, uint64_t target, Weight weight) {
    // A histogram on the keys' top 16 bits finds the bucket holding the threshold; only that
    // bucket is sorted.
    std::vector<uint64_t> hist(65536, 0);
    for (const auto &[key, v] : cand) hist[key >> 48] += weight(key);
    uint64_t acc = 0;
    int b = 65535;
    for (; b > 0; --b) {
        if (acc + hist[size_t(b)] >= target) break;
        acc += hist[size_t(b)];
    }
    std::vector<uint64_t> in;
    for (const auto &[key, v] : cand)
        if (int(key >> 48) == b) in.push_back(key);
    std::sort(in.begin(), in.end(), std::greater<>());
    select_result r;
    r.above = acc;
    for (uint64_t key : in) {
        const uint64_t w = weight(key);
        if (r.above + w >= target) {
            r.key = key;
            return r;
        }
        r.above += w;
    }
    // Unreachable when target ≤ the candidates' total: the last key then.
    r.key = in.empty() ? 0 : in.back();
    return r;
}

struct row_result {
    int32_t id = 0;
    float max = -INFINITY;
};

row_result sample_one(float *row, int64_t V, const row_sampling &s, const int32_t *tokens) {
    apply_penalties(row, V, s, tokens);
    // 2. The max and the top.
    uint64_t top_key = 0;
    for (int64_t v = 0; v < V; ++v) top_key = std::max(top_key, sampling_key(sampling_clean(row[v]), v));
    row_result res;
    res.max = sampling_key_logit(top_key);
    res.id = sampling_key_id(top_key);
    const float mx = res.max, t = s.temperature;
    if (!(t > sampling_greedy_temperature) || !std::isfinite(mx)) return res;

    // 3. Each id's mass (0 where min-p drops it).
    std::vector<uint64_t> q(static_cast<size_t>(V));
    for (int64_t v = 0; v < V; ++v) {
        const float w = sampling_weight(sampling_clean(row[v]), mx, t);
        q[size_t(v)] = w >= s.min_p ? sampling_mass_of(w) : 0;
    }
    // 5. Top-k over every id (min-p keeps a prefix in key order, so the order of the two cuts
    // does not matter).
    uint64_t lo = 0; // kept: key ≥ lo
    if (s.top_k > 0 && s.top_k < V) {
        std::vector<std::pair<uint64_t, int32_t>> cand;
        cand.reserve(size_t(V));
        for (int64_t v = 0; v < V; ++v) cand.emplace_back(sampling_key(sampling_clean(row[v]), v), int32_t(v));
        lo = select_threshold(cand, uint64_t(s.top_k), [](uint64_t) { return uint64_t(1); }).key;
    }
    auto key_of = [&](int64_t v) { return sampling_key(sampling_clean(row[v]), v); };
    // 6–7. Rounds over S = {kept, key ≥ s_lo}.
    const bool top_p = s.top_p < 1.0f;
    const uint64_t random = sampling_random(s.seed, s.counter);
    uint64_t target = 0, s_lo = lo;
    for (int round = 0; round < sampling_max_rounds; ++round) {
        uint64_t mass = 0;
        for (int64_t v = 0; v < V; ++v)
            if (!s_lo || key_of(v) >= s_lo) mass += q[size_t(v)];
        if (round == 0 && top_p) target = sampling_target(s.top_p, mass);
        const uint64_t r = sampling_mulhi(sampling_round_random(random, round), mass);
        uint64_t cum = 0;
        int64_t drawn = -1;
        for (int64_t v = 0; v < V && drawn < 0; ++v) {
            if (s_lo && key_of(v) < s_lo) continue;
            cum += q[size_t(v)];
            if (cum > r) drawn = v;
        }
        if (drawn < 0) break; // unreachable: r < mass
        if (!top_p) {
            res.id = int32_t(drawn);
            return res;
        }
        const uint64_t drawn_key = key_of(drawn);
        uint64_t above = 0;
        for (int64_t v = 0; v < V; ++v)
            if (key_of(v) > drawn_key) above += q[size_t(v)];
        if (above < target) {
            res.id = int32_t(drawn);
            return res;
        }
        s_lo = drawn_key + 1;
    }
    return res; // every round rejected: the top
}

} // namespace

void sample_rows_ref(const sample_rows_params &p) {
    for (int64_t r = 0; r < p.n_rows; ++r) {
        float *row = p.logits + r * p.n_vocab;
        const row_result res = sample_one(row, p.n_vocab, p.rows[r], p.tokens);
        p.ids[r] = res.id;
        if (p.values) p.values[r] = sampling_clean(row[res.id]);
        if (p.row_max) p.row_max[r] = res.max;
    }
}

} // namespace es
