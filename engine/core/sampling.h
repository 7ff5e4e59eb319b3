// A token's draw from a logits row: penalties, temperature, min-p, top-k and top-p, from a
// counter-based random number. Defined once, here, for every place that draws: the CUDA kernel
// (kernels/sample_rows.cuh, which a backend launches so that no row leaves the GPU and a sampled
// step can be submitted before the one before it has finished), its CPU twin and the engine's own
// draw on a full row (sampling_draw below), which give the same token bit for bit: every quantity
// that decides a draw is either an integer or a float computed by the functions below, whose
// operations are each correctly rounded (fmaf, division, multiplication by a power of two) on
// both sides. Header-only and free of the engine, so that the kernels include it too.
//
// The draw, exactly (one row, n_vocab = V):
//  1. Penalties, in place: every penalty_entry's id is in the prompt or the output; with
//     repetition r ≠ 1 its logit l becomes l > 0 ? l / r : l · r; with count c > 0 (occurrences in
//     the output) it then loses fmaf(frequency, c, presence). extra_token names one more output
//     token (a fed token: the batch token at that index), counted once more. NaN reads as −inf.
//  2. max = the largest logit; the top is the lowest id holding it. Greedy (temperature ≤ 1e-5)
//     or a max that is not finite: the token is the top.
//  3. w_v = sampling_exp((l_v − max) / T) ∈ [0, 1]; v is kept by min-p when w_v ≥ min_p; its mass
//     q_v = ⌊w_v · 2^40⌋ when kept, else 0 (integer, so that every sum is exact in any order).
//  4. key_v = (order-preserving bits of l_v, −0 as +0) · 2^32 + (2^32 − 1 − v): keys are distinct
//     and rank the ids as "logit descending, ties → lower id".
//  5. Top-k (0 < k < V): kept only when key_v ≥ t_k, the k-th largest key.
//  6. M = Σ q over the kept ids; top-p (p < 1): target = max(1, ⌊double(p) · double(M)⌋), and
//     the top-p set is the kept ids whose "mass above" (Σ q over kept ids with a larger key) is
//     under the target: the shortest prefix in key order holding at least that mass.
//  7. The draw, in rounds j = 0, 1, … over a set S (S₀: the kept ids): r = ⌊sampling_round_random(
//     sampling_random(seed, counter), j) · mass(S) / 2^64⌋; the drawn id c is the lowest id of S
//     whose cumulative mass (ids ascending) exceeds r. Without top-p, c is the token. With it, c
//     is the token when its mass above is under the target (c is in the top-p set); else S
//     becomes the kept ids above c — which still holds the whole top-p set — and the next round
//     draws. This is rejection sampling from supersets of the top-p set, so the token follows q
//     restricted to it exactly, and no round needs the set itself: each is one pass of sums.
//     After sampling_max_rounds rejections (each removes c and everything below it, so it takes
//     a vanishing chance) the token is the top, which the set always holds.
// Every decision is an integer comparison or a float computed by the functions below, so any order
// of evaluation decides alike: the device finds t_k by radix selection over the keys (8 bits a
// pass) and sums masses in a cluster of blocks a row (compute capability 9.0); sampling_draw sorts
// and walks.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <utility>
#include <vector>

// Functions the device and the host both call.
#if defined(__CUDACC__)
#define ES_SAMPLING_HD __host__ __device__
#else
#define ES_SAMPLING_HD
#endif

namespace es {

// One row's sampling, as the device reads it (plain data, the same layout on host and device).
struct row_sampling {
    float temperature = 0.0f; // <= 1e-5: greedy
    float top_p = 1.0f;       // (0, 1]; 1: off
    float min_p = 0.0f;       // [0, 1]; 0: off
    float repetition = 1.0f;  // HF style, over prompt and output
    float presence = 0.0f;    // OpenAI style, over output
    float frequency = 0.0f;   // OpenAI style, over output
    int32_t top_k = 0;        // 0: off
    int32_t n_penalties = 0;  // entries at `penalties`
    uint64_t penalties = 0;   // address of n_penalties penalty_entry, ids ascending and distinct
    uint64_t seed = 0;
    uint64_t counter = 0;     // the draw's index in its sequence (tokens drawn before it)
    int32_t extra_token = -1; // >= 0: the batch token at this index is one more output token
    int32_t reserved = 0;
};
static_assert(sizeof(row_sampling) == 64, "row_sampling is read by the device as 64 bytes");

// An id of the prompt or the output and how often it occurs in the output.
struct penalty_entry {
    int32_t id = 0;
    int32_t count = 0;
};

inline constexpr float sampling_greedy_temperature = 1e-5f;
inline constexpr int sampling_max_rounds = 32; // step 7's draws before the top is taken
inline constexpr int sampling_mass_bits = 40; // q = ⌊w · 2^40⌋: V < 2^23 keeps every sum < 2^64

// The arithmetic both sides share. Each operation is written as one correctly rounded operation,
// so that no compiler contracts or reorders it differently on the two sides.
#if defined(__CUDA_ARCH__)
ES_SAMPLING_HD inline float sampling_fma(float a, float b, float c) { return __fmaf_rn(a, b, c); }
ES_SAMPLING_HD inline float sampling_mul(float a, float b) { return __fmul_rn(a, b); }
ES_SAMPLING_HD inline float sampling_sub(float a, float b) { return __fsub_rn(a, b); }
ES_SAMPLING_HD inline float sampling_div(float a, float b) { return __fdiv_rn(a, b); }
ES_SAMPLING_HD inline float sampling_rint(float a) { return rintf(a); }
ES_SAMPLING_HD inline uint32_t sampling_float_bits(float f) { return __float_as_uint(f); }
ES_SAMPLING_HD inline float sampling_bits_float(uint32_t u) { return __uint_as_float(u); }
ES_SAMPLING_HD inline uint64_t sampling_mulhi(uint64_t a, uint64_t b) { return __umul64hi(a, b); }
ES_SAMPLING_HD inline uint64_t sampling_mass_of(float w) { return __float2ull_rz(__fmul_rn(w, 1099511627776.0f)); }
ES_SAMPLING_HD inline uint64_t sampling_target(float p, uint64_t m) {
    const uint64_t t = __double2ull_rz(__dmul_rn(double(p), __ull2double_rn(m)));
    return t ? t : 1;
}
#else
inline float sampling_fma(float a, float b, float c) { return std::fma(a, b, c); }
inline float sampling_mul(float a, float b) {
    volatile float r = a * b; // a product never fused into a later sum
    return r;
}
inline float sampling_sub(float a, float b) { return a - b; }
inline float sampling_div(float a, float b) { return a / b; }
inline float sampling_rint(float a) { return std::nearbyint(a); }
inline uint32_t sampling_float_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}
inline float sampling_bits_float(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
inline uint64_t sampling_mulhi(uint64_t a, uint64_t b) {
    return uint64_t((static_cast<unsigned __int128>(a) * b) >> 64);
}
inline uint64_t sampling_mass_of(float w) { return uint64_t(sampling_mul(w, 1099511627776.0f)); }
inline uint64_t sampling_target(float p, uint64_t m) {
    volatile double prod = double(p) * double(m);
    const uint64_t t = uint64_t(prod);
    return t ? t : 1;
}
#endif

// e^x for x ≤ 0 to within ~1 ulp, 0 below −30 (where ⌊e^x · 2^40⌋ is 0 anyway): Cody–Waite
// reduction by ln 2, a degree-7 polynomial, the power of two from its bits. e^0 = 1 exactly.
ES_SAMPLING_HD inline float sampling_exp(float x) {
    if (!(x > -30.0f)) return 0.0f;
    const float n = sampling_rint(sampling_mul(x, 1.44269504088896341f));
    float r = sampling_fma(-n, 0.693359375f, x);
    r = sampling_fma(n, 2.12194440e-4f, r);
    float p = 1.98412698e-4f; // 1/5040
    p = sampling_fma(p, r, 1.38888889e-3f);
    p = sampling_fma(p, r, 8.33333333e-3f);
    p = sampling_fma(p, r, 4.16666667e-2f);
    p = sampling_fma(p, r, 1.66666667e-1f);
    p = sampling_fma(p, r, 0.5f);
    p = sampling_fma(p, r, 1.0f);
    p = sampling_fma(p, r, 1.0f);
    const float scale = sampling_bits_float(uint32_t(int32_t(n) + 127) << 23);
    return sampling_mul(p, scale);
}

// Step 1's penalty on one logit (the id is in the prompt or output; count: its output occurrences).
ES_SAMPLING_HD inline float sampling_penalized(float l, int32_t count, const row_sampling &s) {
    if (s.repetition != 1.0f) l = l > 0.0f ? sampling_div(l, s.repetition) : sampling_mul(l, s.repetition);
    if (count > 0) l = sampling_sub(l, sampling_fma(s.frequency, float(count), s.presence));
    return l;
}

ES_SAMPLING_HD inline bool sampling_has_penalties(const row_sampling &s) {
    return s.repetition != 1.0f || s.presence != 0.0f || s.frequency != 0.0f;
}

// NaN reads as −inf.
ES_SAMPLING_HD inline float sampling_clean(float l) { return l != l ? -INFINITY : l; }

// Step 4's key of logit l (not NaN) at id v.
ES_SAMPLING_HD inline uint64_t sampling_key(float l, int64_t v) {
    uint32_t u = sampling_float_bits(l);
    if ((u & 0x7FFFFFFFu) == 0) u = 0; // −0 ties with +0
    const uint32_t ord = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return (uint64_t(ord) << 32) | uint64_t(0xFFFFFFFFu - uint32_t(v));
}
ES_SAMPLING_HD inline float sampling_key_logit(uint64_t key) {
    const uint32_t ord = uint32_t(key >> 32);
    return sampling_bits_float((ord & 0x80000000u) ? (ord & 0x7FFFFFFFu) : ~ord);
}
ES_SAMPLING_HD inline int32_t sampling_key_id(uint64_t key) { return int32_t(0xFFFFFFFFu - uint32_t(key)); }

// Step 3's weight and mass of logit l against the row's max at temperature t.
ES_SAMPLING_HD inline float sampling_weight(float l, float max, float t) {
    return sampling_exp(sampling_div(sampling_sub(l, max), t));
}

// Step 7's uniform 64-bit number for draw `counter` of a sequence seeded with `seed` (SplitMix64's
// finalizer, twice).
ES_SAMPLING_HD inline uint64_t sampling_mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
ES_SAMPLING_HD inline uint64_t sampling_random(uint64_t seed, uint64_t counter) {
    return sampling_mix(sampling_mix(seed ^ 0x6a09e667f3bcc909ull) + counter * 0x9e3779b97f4a7c15ull);
}
// Round j's number of a draw (round 0: the draw's own).
ES_SAMPLING_HD inline uint64_t sampling_round_random(uint64_t random, int round) {
    return round == 0 ? random : sampling_mix(random + uint64_t(round) * 0xd1b54a32d192ed03ull);
}

// sampling_draw's parts (the CPU's draw, step by step).
namespace sampling_detail {


inline void apply_penalties(float *row, int64_t V, const row_sampling &s, const int32_t *tokens) {
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
inline select_result select_threshold(std::vector<std::pair<uint64_t, int32_t>> &cand, uint64_t target, Weight weight) {
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

inline row_result sample_one(float *row, int64_t V, const row_sampling &s, const int32_t *tokens) {
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

} // namespace sampling_detail

// The draw on the CPU: row [V] (penalties applied in place), s's penalty entries at the address
// s.penalties names, tokens the batch's (s.extra_token indexes them). Returns the token; value: its
// logit after penalties, max: the row's max (either may be null).
inline int32_t sampling_draw(float *row, int64_t V, const row_sampling &s, const int32_t *tokens,
                             float *value = nullptr, float *max = nullptr) {
    const sampling_detail::row_result res = sampling_detail::sample_one(row, V, s, tokens);
    if (value) *value = sampling_clean(row[res.id]);
    if (max) *max = res.max;
    return res.id;
}

} // namespace es
