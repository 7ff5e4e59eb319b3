// silu_mul: the SwiGLU activation between a fused gate|up GEMM and the down GEMM:
//   out[t, f] = bf16(silu(gate_up[t, f]) · gate_up[t, n_ff + f]),  silu(g) = g / (1 + e^−g), fp32.
#pragma once

#include "kernels/kernel_common.h"

namespace es {

struct silu_mul_params {
    const float *gate_up = nullptr; // [n_tokens, 2·n_ff]: gate columns, then up columns
    bf16_t *out = nullptr;          // [n_tokens, n_ff]
    int64_t n_tokens = 0, n_ff = 0;
};

void silu_mul_ref(const silu_mul_params &p);
#ifdef ES_KERNELS_HAVE_LAUNCHERS
cudaError_t launch_silu_mul(const silu_mul_params &p, cudaStream_t stream);
#endif

} // namespace es
