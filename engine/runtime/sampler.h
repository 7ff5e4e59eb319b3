// Token sampling: greedy, temperature, top-k, top-p, min-p, repetition / presence / frequency
// penalties, per-request seed. Order as in vLLM: penalties → temperature → min-p → top-k → top-p →
// draw. The draw itself is engine/core/sampling.h's, made on the device by a backend that supports
// it (backend::supports_sampling) or on the CPU (sampler::sample), with the same token from the
// same logits either way. The random number of draw i of a request is a function of
// (seed, i) alone, so a seeded request gives the same tokens whatever else the engine runs beside
// it, and whether its steps were submitted ahead or not.
#pragma once

#include "engine/core/sampling.h"

#include <cstdint>
#include <optional>
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

    // The draw that follows `output`, as a backend reads it. prompt/output: the request's ids so
    // far. A negative id at the end of `output` is a token drawn by a forward still in flight (a
    // fed token): it counts as drawn, and its value is read on the device from the batch's token
    // `input_index` (row_sampling::extra_token). The penalty entries are appended to `penalties`;
    // the returned row_sampling::penalties is the index of the first of them.
    row_sampling spec(std::span<const int32_t> prompt, std::span<const int32_t> output, int32_t input_index,
                      std::vector<penalty_entry> &penalties) const;

    // The draw on the CPU (sampling_draw): logits [n_vocab], penalties applied in place.
    int32_t sample(std::span<float> logits, std::span<const int32_t> prompt, std::span<const int32_t> output);

    bool greedy() const { return m_p.temperature <= sampling_greedy_temperature; }
    bool has_penalties() const;
    // Greedy without penalties: the token is the row's top, which a backend's candidates give.
    bool picks_top() const { return greedy() && !has_penalties(); }
    const sampling_params &params() const { return m_p; }
    uint64_t seed() const { return m_seed; }

private:
    sampling_params m_p;
    uint64_t m_seed;
    std::vector<penalty_entry> m_pen;
};

} // namespace es
