// fp8_dequantize: FP8 E4M3 weights with per-row scales back to BF16, out[r, c] = bf16(e4m3(q) ·
// scale[r]). Used to feed prefill-sized FP8 linears to the BF16 cuBLASLt GEMM (one rounding to
// BF16 on top of the FP8 error) until the FP8 cuBLASLt path exists.
#pragma once

#include "kernels/kernel_common.h"

namespace es {

struct fp8_dequantize_params {
    const fp8_t *q = nullptr;     // [n, k]
    const float *scale = nullptr; // [fp8_scale_count(n, k, layout)]
    bf16_t *out = nullptr;        // [n, k]
    int64_t n = 0, k = 0;
    scale_layout layout = scale_layout::channel;
};

void fp8_dequantize_ref(const fp8_dequantize_params &p);
#ifdef ES_KERNELS_HAVE_LAUNCHERS
cudaError_t launch_fp8_dequantize(const fp8_dequantize_params &p, cudaStream_t stream);
#endif

} // namespace es
