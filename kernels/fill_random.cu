// fill_random (see fill_random.cuh): grid-stride loop, one hash per element. The arithmetic uses
// explicitly rounded intrinsics so no fused multiply-add makes it differ from the CPU twin.
#include "kernels/fill_random.cuh"
#include "kernels/kernel_common.cuh"

#include <algorithm>

namespace es {

__device__ __forceinline__ uint64_t fill_hash_dev(uint64_t seed, uint64_t i) {
    uint64_t z = seed ^ (i * 0x9e3779b97f4a7c15ull);
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

__global__ void fill_random_kernel(fill_random_params p) {
    pdl_enter();
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < p.n;
         i += int64_t(gridDim.x) * blockDim.x) {
        const float u = float(fill_hash_dev(p.seed, uint64_t(i)) >> 40) * (1.0f / 16777216.0f);
        const float v = __fadd_rn(p.mean, __fmul_rn(__fsub_rn(__fmul_rn(2.0f, u), 1.0f), p.half_range));
        p.out[i] = f_to_bf16(v);
    }
}

cudaError_t launch_fill_random(const fill_random_params &p, cudaStream_t stream) {
    if (p.n <= 0) return cudaSuccess;
    const unsigned blocks = unsigned(std::min<int64_t>((p.n + 255) / 256, 132 * 32));
    return launch_kernel(fill_random_kernel, blocks, 256, 0, stream, p);
}

} // namespace es
