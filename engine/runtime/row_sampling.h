// Sampling a forward's output rows: what to ask a backend for (each row's draw made on the device,
// or only the rows' top candidates when every row is greedy), and each row's token from what came
// back. The one place the engine's step loop and the CUDA bench sample; generation itself is the
// engine's (engine.h).
#pragma once

#include "engine/backend/backend.h"
#include "engine/runtime/sampler.h"

#include <span>
#include <vector>

namespace es {

// One output row to sample: its request's sampler and ids so far (sampler::spec), and the index of
// the row's own token in the batch.
struct sampled_row {
    sampler *smp = nullptr;
    std::span<const int32_t> prompt, output;
    int32_t input_index = -1;
};

// Sets the batch's sampling for its logits rows (one sampled_row each, in order). Every row greedy
// without penalties: one candidate a row (the CUDA backend then picks a one-row step's token in
// its head GEMV). Otherwise, where the backend draws on the device, each row's row_sampling and the
// penalty lists; else nothing (full rows come back, sampled on the CPU by token_of_row).
void request_sampling(const backend &be, batch &b, std::span<const sampled_row> rows);

// The token of output row `row` of `out`, the last forward of `be`: the device's draw, the top
// candidate of a greedy row, or the CPU's draw on the full row (out.logits, or fetched through
// backend::logits_row into `scratch`). The same token in every case for the same logits.
result<int32_t> token_of_row(backend &be, forward_output &out, int32_t row, const sampled_row &r,
                             std::vector<float> &scratch);

} // namespace es
