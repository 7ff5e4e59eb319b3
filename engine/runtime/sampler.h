// Token sampling: greedy, temperature, top-k, top-p, min-p, repetition / presence / frequency
// penalties, per-request seed. Order as in vLLM: penalties → temperature → min-p → top-k →
// top-p → draw. Same seed and same logits give the same token (mt19937_64, and every sum and walk
// in a fixed order, below).
//
// The arithmetic, exactly (sample() and sample_candidates() share it):
//  1. penalties on the logits (repetition over prompt ∪ output, then presence/frequency over
//     output); NaN logits become −inf. Greedy (temperature ≤ 1e-5), or a row whose max is not
//     finite: the first id holding the max (all −inf: id 0).
//  2. w_v = expf((l_v − max) / T) (float); min-p keeps w_v ≥ min_p (min_p · p_max in
//     probability terms); top-k keeps the first k in the order "logit descending, ties → lower
//     id" (the order every later walk uses).
//  3. mass = Σ w over the kept ids in ascending id order, in double. Top-p: walk the kept ids
//     in order, cum += w (double), stop at the first cum ≥ top_p · mass; those are kept and the
//     draw total is that cum; otherwise the draw total is the mass.
//  4. r = U[0,1) · total (one mt19937_64 draw); the token is the first kept id in walk order
//     with r < cum (cum += w in that order, double), else the last kept in walk order. The walk
//     order is the order of 2; with top-p off and more than k_sorted_walk ids kept, its first
//     k_sorted_walk, then the other kept ids ascending (any order draws from the same
//     distribution, and a flat row would otherwise sort half the vocabulary).
//
// sample_candidates() decides from a backend's top-N list (ids and logits in the order of 2, the
// unpenalized row's Σ exp((l − max)/T) in double) and returns a token only when it is the token
// sample() returns on the full row; otherwise nullopt ("insufficient": the caller fetches the row
// and calls sample(), and the RNG has not advanced). When the list is complete (fewer valid
// entries than slots, or N ≥ n_vocab) it rebuilds the row and calls sample(). Otherwise:
//  - penalties that can raise a logit (repetition < 1, presence or frequency < 0) → insufficient.
//    Lowering penalties: every id outside the list stays ≤ θ (the list's last original logit),
//    so the penalized list is exact for its entries above θ ("certain"; all N without penalties);
//  - greedy: the top certain entry (none certain → insufficient);
//  - the kept set is known when top-k ≤ #certain-kept, or when min-p excludes everything ≤ θ
//    (expf((θ − max)/T) < min_p); then every step above runs on the list, bit for bit;
//  - otherwise the kept set is the whole vocabulary only when min_p = 0, top_k is 0 or ≥ n_vocab
//    and there are no penalties: the mass is the backend's sum, which differs from step 3's
//    float-exp sum by ≤ ~3e-6 relative (expf ≤ 2 ulp, argument rounding over ≤ ln V of log-mass);
//    the token is returned only when it is the same for every mass within ±1e-5 relative of it,
//    and only when the walk ends inside the list and, top-p off, inside its first k_sorted_walk
//    (else insufficient). So the candidates decide
//    exactly; the fallback costs one row download in the rare cases (top-p boundary, or the
//    draw landing in the tail beyond the N-th candidate).
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace es {

// The walk order's sorted prefix when top-p is off (step 4 above); a backend's candidate list
// (sample_candidates) decides draws inside its first this many entries only.
inline constexpr int32_t k_sorted_walk = 64;

struct sampling_params {
    float temperature = 0.8f;        // <= 0: greedy
    int32_t top_k = 0;               // 0: off
    float top_p = 1.0f;              // 1: off
    float min_p = 0.0f;              // 0: off
    float repetition_penalty = 1.0f; // HF style, over prompt and output tokens
    float presence_penalty = 0.0f;   // OpenAI style, over output tokens
    float frequency_penalty = 0.0f;  // OpenAI style, over output tokens
    std::optional<uint64_t> seed;    // none: a random seed
    int32_t max_tokens = 512;
    std::vector<int32_t> stop_ids;
    std::vector<std::string> stop_strings;

    // Returns an empty string when the parameters make sense, else what is wrong.
    std::string validate() const;
};

// One logits row reduced by a backend (kernels/topk_logits.cuh): its top N, the row's softmax
// denominator at sum_temperature. Spans point into the backend's output.
struct logit_candidates {
    std::span<const int32_t> ids;  // [N] logit descending, ties → lower id; −1 after the last valid entry
    std::span<const float> logits; // [N] unpenalized
    double sum = 0.0; // Σ_v exp((l_v − max) / sum_temperature), NaN excluded; 0 if not computed
    float sum_temperature = 0.0f; // <= 0: no sum
    int64_t n_vocab = 0;
};

class sampler {
public:
    explicit sampler(const sampling_params &p);

    // logits: [n_vocab], modified in place (penalties, NaN → −inf). prompt/output: token ids so far.
    int32_t sample(std::span<float> logits, std::span<const int32_t> prompt, std::span<const int32_t> output);

    // The token sample() would return on the full row, or nullopt when the candidates cannot
    // decide (the RNG is then untouched). See the rules at the top of this file.
    std::optional<int32_t> sample_candidates(const logit_candidates &c, std::span<const int32_t> prompt,
                                             std::span<const int32_t> output);

    // The temperature a backend should compute its row sum at for this sampler (0: no sum needed).
    float sum_temperature() const;
    bool greedy() const { return m_p.temperature <= 1e-5f; }
    // Greedy without penalties: the token is the row's top, so one candidate always decides.
    bool picks_top() const { return greedy() && !has_penalties(); }
    const sampling_params &params() const { return m_p; }
    uint64_t seed() const { return m_seed; }

    // Relative tolerance sample_candidates allows between the backend's sum and step 3's mass.
    static constexpr double sum_tolerance = 1e-5;

private:
    bool has_penalties() const;
    void prepare_penalties(std::span<const int32_t> prompt, std::span<const int32_t> output);
    float penalized(int32_t id, float l) const;

    sampling_params m_p;
    uint64_t m_seed;
    std::mt19937_64 m_rng;
    std::vector<int32_t> m_idx, m_tmp;
    std::vector<char> m_mark; // sample(): the walk's sorted prefix, by id
    std::vector<float> m_w, m_row;
    std::vector<int32_t> m_seen;                       // distinct prompt ∪ output ids, sorted
    std::vector<std::pair<int32_t, int32_t>> m_counts; // output (id, count), sorted by id
};

} // namespace es
