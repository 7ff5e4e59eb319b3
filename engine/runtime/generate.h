// Single-sequence generation on a backend: chunked prefill, then decode with the sampler.
// Used by the CLI and the reference tests; the multi-request runtime (scheduler, block pool)
// drives backends directly.
#pragma once

#include "engine/backend/backend.h"
#include "engine/runtime/sampler.h"

#include <functional>
#include <span>
#include <string>
#include <vector>

namespace es {

struct generate_result {
    std::vector<int32_t> tokens;     // generated ids (stop token excluded)
    std::string finish_reason;       // "stop" (stop id), "length" (max_tokens or context), "cancelled"
    double ttft_ms = 0.0;            // start → first token sampled
    double prefill_ms = 0.0;
    double decode_ms = 0.0;          // first token → last token
    uint64_t seed = 0;
};

struct generate_params {
    int32_t prefill_chunk = 512;
    // Called for each generated token (stop tokens excluded); return false to stop.
    std::function<bool(int32_t)> on_token;
};

// Logit candidates per sampled row that the engine, generate_tokens and the CUDA benchmark ask
// a backend for (batch::top_n) when it supports them: 64 hold nearly all of the mass at usual
// temperatures, so a fallback to the full row is rare, and they come back in ~1 KB.
inline constexpr int32_t k_sample_top_n = 64;
static_assert(k_sample_top_n <= k_sorted_walk, "candidates beyond the sampler's sorted walk cannot decide a draw");

// Sets b.top_n and b.temperatures for the rows in b.logits_rows (one sampler each, in order), or
// clears them when the backend returns only full rows. When every sampler is greedy without
// penalties (sampler::picks_top), one candidate a row: the CUDA backend then picks a one-row
// step's token in its head GEMV, without a top-k launch.
void request_candidates(const backend &be, batch &b, std::span<sampler *const> samplers);

// The token for output row `row` of `out`, the last forward() of `be`: from the row's candidates
// when the backend returned them and they decide (sampler::sample_candidates), else from the full
// row (out.logits, or fetched through backend::logits_row into `scratch`; *fetched is then set).
// The same token as sampler::sample on the full row, always.
result<int32_t> sample_output_row(backend &be, forward_output &out, int32_t row, sampler &smp,
                                  std::span<const int32_t> prompt, std::span<const int32_t> output,
                                  std::vector<float> &scratch, bool *fetched = nullptr);

result<generate_result> generate_tokens(backend &be, const std::vector<int32_t> &prompt, const sampling_params &sp,
                                        const generate_params &gp = {});

} // namespace es
