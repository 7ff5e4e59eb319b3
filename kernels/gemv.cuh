// gemv: decode-sized linear layer, y[m, :] (+)= x[m, :] · Wᵀ for a few tokens m, with BF16 or
// FP8 E4M3 weights W [n, k] (FP8: times w_scale[n], one fp32 scale per output channel), BF16
// activations and fp32 accumulation and output. `accumulate` adds into y (the residual stream:
// o_proj and down_proj fuse the residual add this way). Split-K (k_splits > 1) adds partial sums
// with atomics; the launcher picks it when n is too small to fill the GPU (k_splits = 0).
#pragma once

#include "kernel_common.h"

namespace es {

struct gemv_params {
    const bf16_t *x = nullptr;        // [n_tokens, ldx]
    int64_t ldx = 0;
    const void *w = nullptr;          // [n, k] in wfmt
    weight_format wfmt = weight_format::bf16;
    const float *w_scale = nullptr;   // [n], FP8 only
    float *y = nullptr;               // [n_tokens, ldy]
    int64_t ldy = 0;
    int64_t n_tokens = 0, n = 0, k = 0;
    bool accumulate = false;
    int k_splits = 0;                 // 0: launcher decides; 1: no split
};

void gemv_ref(const gemv_params &p);
#ifdef ES_KERNELS_HAVE_LAUNCHERS
cudaError_t launch_gemv(const gemv_params &p, cudaStream_t stream);
#endif

} // namespace es
