// fp8_quantize: BF16 weights [n, k] → FP8 E4M3 with one fp32 scale per output channel (row):
//   scale[r] = amax(|w[r, :]|) / 448   (1 for an all-zero row),   q[r, c] = e4m3_satfinite(w / scale).
// Dequantized value: e4m3(q) · scale[r]. Done once at load; the GEMV/GEMM kernels apply the
// scale after the dot product.
#pragma once

#include "kernels/kernel_common.h"

namespace es {

struct fp8_quantize_params {
    const bf16_t *w = nullptr; // [n, k]
    fp8_t *q = nullptr;        // [n, k]
    float *scale = nullptr;    // [fp8_scale_count(n, k, layout)]
    int64_t n = 0, k = 0;
    scale_layout layout = scale_layout::channel; // block128: one scale per 128×128 block (its amax / 448)
};

void fp8_quantize_ref(const fp8_quantize_params &p);
#ifdef ES_KERNELS_HAVE_LAUNCHERS
cudaError_t launch_fp8_quantize(const fp8_quantize_params &p, cudaStream_t stream);
#endif

} // namespace es
