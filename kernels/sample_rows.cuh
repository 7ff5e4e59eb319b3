// sample_rows: one token drawn from each logits row on the device, with penalties, temperature,
// min-p, top-k and top-p, from a counter-based random number, so that no row leaves the GPU and a
// sampled step can be submitted before the one before it has finished. The CPU twin draws the same
// token from the same row and parameters, bit for bit: every quantity that decides a draw is either
// an integer or a float computed by the functions below, whose operations are each correctly
// rounded (fmaf, division, multiplication by a power of two) on both sides.
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
// pass) and sums masses in a cluster of blocks a row (compute capability 9.0), the twin sorts and
// walks.
#pragma once

#include "kernels/kernel_common.h"

#if defined(__CUDACC__)
#include <cuda_runtime.h>
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

struct sample_rows_params {
    float *logits = nullptr;            // [n_rows, n_vocab]; penalties are applied in place
    const row_sampling *rows = nullptr; // [n_rows]
    const int32_t *tokens = nullptr;    // the batch's tokens (row_sampling::extra_token indexes them)
    int32_t *ids = nullptr;             // [n_rows] the drawn token
    float *values = nullptr;            // [n_rows] its logit after penalties (or null)
    float *row_max = nullptr;           // [n_rows] the row's max after penalties (or null)
    float *scratch = nullptr;           // [n_rows, n_vocab] the weights w (device only)
    int64_t n_rows = 0, n_vocab = 0;
};

void sample_rows_ref(const sample_rows_params &p);
#ifdef ES_KERNELS_HAVE_LAUNCHERS
cudaError_t launch_sample_rows(const sample_rows_params &p, cudaStream_t stream);
#endif

// The arithmetic both sides share. Each operation is written as one correctly rounded operation,
// so that no compiler contracts or reorders it differently on the two sides.
#if defined(__CUDA_ARCH__)
ES_HOST_DEVICE inline float sampling_fma(float a, float b, float c) { return __fmaf_rn(a, b, c); }
ES_HOST_DEVICE inline float sampling_mul(float a, float b) { return __fmul_rn(a, b); }
ES_HOST_DEVICE inline float sampling_sub(float a, float b) { return __fsub_rn(a, b); }
ES_HOST_DEVICE inline float sampling_div(float a, float b) { return __fdiv_rn(a, b); }
ES_HOST_DEVICE inline float sampling_rint(float a) { return rintf(a); }
ES_HOST_DEVICE inline uint32_t sampling_float_bits(float f) { return __float_as_uint(f); }
ES_HOST_DEVICE inline float sampling_bits_float(uint32_t u) { return __uint_as_float(u); }
ES_HOST_DEVICE inline uint64_t sampling_mulhi(uint64_t a, uint64_t b) { return __umul64hi(a, b); }
ES_HOST_DEVICE inline uint64_t sampling_mass_of(float w) { return __float2ull_rz(__fmul_rn(w, 1099511627776.0f)); }
ES_HOST_DEVICE inline uint64_t sampling_target(float p, uint64_t m) {
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
ES_HOST_DEVICE inline float sampling_exp(float x) {
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
ES_HOST_DEVICE inline float sampling_penalized(float l, int32_t count, const row_sampling &s) {
    if (s.repetition != 1.0f) l = l > 0.0f ? sampling_div(l, s.repetition) : sampling_mul(l, s.repetition);
    if (count > 0) l = sampling_sub(l, sampling_fma(s.frequency, float(count), s.presence));
    return l;
}

ES_HOST_DEVICE inline bool sampling_has_penalties(const row_sampling &s) {
    return s.repetition != 1.0f || s.presence != 0.0f || s.frequency != 0.0f;
}

// NaN reads as −inf.
ES_HOST_DEVICE inline float sampling_clean(float l) { return l != l ? -INFINITY : l; }

// Step 4's key of logit l (not NaN) at id v.
ES_HOST_DEVICE inline uint64_t sampling_key(float l, int64_t v) {
    uint32_t u = sampling_float_bits(l);
    if ((u & 0x7FFFFFFFu) == 0) u = 0; // −0 ties with +0
    const uint32_t ord = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return (uint64_t(ord) << 32) | uint64_t(0xFFFFFFFFu - uint32_t(v));
}
ES_HOST_DEVICE inline float sampling_key_logit(uint64_t key) {
    const uint32_t ord = uint32_t(key >> 32);
    return sampling_bits_float((ord & 0x80000000u) ? (ord & 0x7FFFFFFFu) : ~ord);
}
ES_HOST_DEVICE inline int32_t sampling_key_id(uint64_t key) { return int32_t(0xFFFFFFFFu - uint32_t(key)); }

// Step 3's weight and mass of logit l against the row's max at temperature t.
ES_HOST_DEVICE inline float sampling_weight(float l, float max, float t) {
    return sampling_exp(sampling_div(sampling_sub(l, max), t));
}

// Step 7's uniform 64-bit number for draw `counter` of a sequence seeded with `seed` (SplitMix64's
// finalizer, twice).
ES_HOST_DEVICE inline uint64_t sampling_mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
ES_HOST_DEVICE inline uint64_t sampling_random(uint64_t seed, uint64_t counter) {
    return sampling_mix(sampling_mix(seed ^ 0x6a09e667f3bcc909ull) + counter * 0x9e3779b97f4a7c15ull);
}
// Round j's number of a draw (round 0: the draw's own).
ES_HOST_DEVICE inline uint64_t sampling_round_random(uint64_t random, int round) {
    return round == 0 ? random : sampling_mix(random + uint64_t(round) * 0xd1b54a32d192ed03ull);
}

} // namespace es
