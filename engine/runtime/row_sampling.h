// Sampling a forward's output rows: which candidates to ask a backend for, and the token of a row
// from its candidates or, when they cannot decide, from the full row. The one place the engine's
// step loop and the CUDA bench sample; generation itself is the engine's (engine.h).
#pragma once

#include "engine/backend/backend.h"
#include "engine/runtime/sampler.h"

#include <functional>
#include <span>
#include <string>
#include <vector>

namespace es {

// Logit candidates per sampled row that the engine and the CUDA benchmark ask
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

} // namespace es
