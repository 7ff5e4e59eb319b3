// silu_mul (see silu_mul.cuh): a flat grid-stride loop, one output element per thread step, or,
// for rows of a multiple of 4 with aligned pointers, four outputs a thread (silu_mul_vec_kernel).
#include "kernels/kernel_common.cuh"
#include "kernels/silu_mul.cuh"

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

// n_ff % 4 == 0, gate_up 16-byte and out 8-byte aligned (prefill's shapes): four outputs a
// thread from two float4 loads, a block's threads along one token's row (grid: row chunks ×
// tokens, the tokens strided by gridDim.y), no division. The same arithmetic per element as the
// kernel above. (In prefill the grid-stride loop above spent 41 µs a layer on the 21B-A3B's shared
// experts at 2,048 tokens, 63 MB: an int64 division and remainder per element.)
__global__ void __launch_bounds__(256) silu_mul_vec_kernel(silu_mul_params p) {
    pdl_enter();
    const int64_t F = p.n_ff, f4 = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    if (4 * f4 >= F) return;
    for (int64_t t = blockIdx.y; t < p.n_tokens; t += gridDim.y) {
        const float *row = p.gate_up + t * 2 * F;
        const float4 g = __ldg(reinterpret_cast<const float4 *>(row) + f4),
                     u = __ldg(reinterpret_cast<const float4 *>(row + F) + f4);
        const uint32_t o0 = f_to_bf16(silu_f(g.x) * u.x), o1 = f_to_bf16(silu_f(g.y) * u.y),
                       o2 = f_to_bf16(silu_f(g.z) * u.z), o3 = f_to_bf16(silu_f(g.w) * u.w);
        reinterpret_cast<uint2 *>(p.out + t * F)[f4] = make_uint2(o0 | (o1 << 16), o2 | (o3 << 16));
    }
}

cudaError_t launch_silu_mul(const silu_mul_params &p, cudaStream_t stream) {
    const int64_t n = p.n_tokens * p.n_ff;
    if (n <= 0) return cudaSuccess;
    if (p.n_ff % 4 == 0 && (reinterpret_cast<uintptr_t>(p.gate_up) & 15u) == 0 &&
        (reinterpret_cast<uintptr_t>(p.out) & 7u) == 0) {
        const dim3 grid(unsigned((p.n_ff / 4 + 255) / 256), unsigned(std::min<int64_t>(p.n_tokens, 65535)));
        return launch_decode<silu_mul_vec_kernel>(grid, 256, 0, stream, p);
    }
    const unsigned blocks = unsigned(std::min<int64_t>((n + 255) / 256, 132 * 16));
    return launch_decode<silu_mul_kernel>(blocks, 256, 0, stream, p);
}

} // namespace es
