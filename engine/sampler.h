// Token sampling: greedy, temperature, top-k, top-p, min-p, repetition / presence / frequency
// penalties, per-request seed. Order as in vLLM: penalties → temperature → min-p → top-k →
// top-p → draw. Same seed and same logits give the same token on every platform (mt19937_64 and
// a CDF walk in fixed order).
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace es {

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

class sampler {
public:
    explicit sampler(const sampling_params &p);

    // logits: [n_vocab], modified in place. prompt/output: token ids so far.
    int32_t sample(std::span<float> logits, std::span<const int32_t> prompt, std::span<const int32_t> output);

    uint64_t seed() const { return m_seed; }

private:
    sampling_params m_p;
    uint64_t m_seed;
    std::mt19937_64 m_rng;
    std::vector<int32_t> m_idx;
    std::vector<int32_t> m_counts;
};

} // namespace es
