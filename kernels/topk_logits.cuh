// topk_logits: per logits row, the n_top largest values with their ids, the row max and
// Σ_v exp((l_v − max) / T_r) at the row's temperature (the engine asks for n_top = 1: a greedy
// step's picks when the head's GEMV does not pick). Order: value descending,
// ties → lower id first (the sampler's order). NaN is never a candidate and counts nowhere (the
// sampler treats NaN as −inf); −inf values are ordinary candidates. Slots past the row's non-NaN
// values hold id −1 and value −inf. The sum is accumulated in double over exps in double (for
// n_top ≤ 64 a lane's eight terms in fp32 with the fast exp first: relative error of the sum
// ~1e-6 at most); it is 0 when T_r ≤ 0 or the max is not finite.
#pragma once

#include "kernels/kernel_common.h"

namespace es {

inline constexpr int32_t topk_logits_max_top = 256;

struct topk_logits_params {
    const float *logits = nullptr;       // [n_rows, n_vocab]
    const float *temperatures = nullptr; // [n_rows]; T_r <= 0: no sum (row_sum = 0)
    int32_t *ids = nullptr;              // [n_rows, n_top]
    float *values = nullptr;             // [n_rows, n_top]
    float *row_max = nullptr;            // [n_rows] largest non-NaN value (−inf if none)
    double *row_sum = nullptr;           // [n_rows]
    int64_t n_rows = 0, n_vocab = 0;
    int32_t n_top = 64; // 1..topk_logits_max_top
    // GPU scratch (topk_logits_scratch_bytes): per-block partial results and one counter per row
    // that must be zero before the first launch (the kernel leaves it zero again).
    void *scratch = nullptr;
    unsigned *counters = nullptr; // [n_rows]
};

// Bytes of scratch the launcher needs for these shapes (0 for the twin).
size_t topk_logits_scratch_bytes(int64_t n_rows, int64_t n_vocab, int32_t n_top);

void topk_logits_ref(const topk_logits_params &p);
#ifdef ES_KERNELS_HAVE_LAUNCHERS
cudaError_t launch_topk_logits(const topk_logits_params &p, cudaStream_t stream);
#endif

} // namespace es
