// act_quantize: BF16 activations → FP8 codes with one fp32 scale per token (row), the input of
// gemm_lt's FP8 path for prefill-sized steps:
//   scale[r] = amax(|x[r, 0:k]|) / fmt_max   (fmt_max: 448 for E4M3, 57344 for E5M2),
//   q[r, c]  = fp8_satfinite(x[r, c] / scale[r])   (round to nearest even, IEEE division),
// so x ≈ fp8(q) · scale[r]. An all-zero row gets scale 1 (codes 0, and the product is still 0);
// NaNs are skipped by the max (fmaxf) and become NaN codes; an infinity makes the row's scale
// infinite. The scale is not rounded to a power of two: it is the exact fp32 quotient, the same
// on the GPU and in the twin.
#pragma once

#include "kernels/kernel_common.h"

namespace es {

struct act_quantize_params {
    const bf16_t *x = nullptr; // [m, ldx], the first k columns used
    int64_t ldx = 0;
    fp8_t *q = nullptr;     // [m, k] (dense: row r starts at r · k)
    float *scale = nullptr; // [m]
    int64_t m = 0, k = 0;
    fp8_format fmt = fp8_format::e4m3;
};

void act_quantize_ref(const act_quantize_params &p);
#ifdef ES_KERNELS_HAVE_LAUNCHERS
cudaError_t launch_act_quantize(const act_quantize_params &p, cudaStream_t stream);
#endif

} // namespace es
