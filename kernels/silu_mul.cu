// silu_mul (see silu_mul.cuh): a flat grid-stride loop, one output element per thread step.
#include "kernel_common.cuh"
#include "silu_mul.cuh"

#include <algorithm>

namespace es {

__global__ void silu_mul_kernel(silu_mul_params p) {
    pdl_enter();
    const int64_t n = p.n_tokens * p.n_ff;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
         i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t t = i / p.n_ff, f = i % p.n_ff;
        const float *row = p.gate_up + t * 2 * p.n_ff;
        p.out[i] = f_to_bf16(silu_f(row[f]) * row[p.n_ff + f]);
    }
}

cudaError_t launch_silu_mul(const silu_mul_params &p, cudaStream_t stream) {
    const int64_t n = p.n_tokens * p.n_ff;
    if (n <= 0) return cudaSuccess;
    const unsigned blocks = unsigned(std::min<int64_t>((n + 255) / 256, 132 * 16));
    return launch_kernel(silu_mul_kernel, blocks, 256, 0, stream, p);
}

} // namespace es
