// read_sum (see read_sum.cuh): a grid-stride loop of 16-byte loads, four in flight a thread, the
// XOR reduced in the warp, then one atomicXor a warp. XOR is associative and commutative, so the
// result does not depend on the grid or the order of the loads.
#include "kernels/read_sum.cuh"
#include "kernels/kernel_common.cuh"

namespace es {

__global__ void __launch_bounds__(256) read_sum_kernel(const uint4 *src, size_t n_vec, unsigned *out) {
    const size_t stride = size_t(gridDim.x) * blockDim.x;
    unsigned x = 0;
    size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n_vec; i += 4 * stride) {
        const uint4 a = __ldcs(src + i), b = __ldcs(src + i + stride), c = __ldcs(src + i + 2 * stride),
                    d = __ldcs(src + i + 3 * stride);
        x ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
    }
    for (; i < n_vec; i += stride) {
        const uint4 a = __ldcs(src + i);
        x ^= a.x ^ a.y ^ a.z ^ a.w;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x ^= __shfl_xor_sync(0xffffffffu, x, o);
    if ((threadIdx.x & 31) == 0 && x) atomicXor(out, x);
}

cudaError_t launch_read_sum(const read_sum_params &p, cudaStream_t stream, unsigned blocks) {
    if (p.bytes == 0) return cudaSuccess;
    if (!p.src || !p.out || p.bytes % 16 != 0 || !aligned16(p.src)) return cudaErrorInvalidValue;
    if (blocks == 0) {
        int dev = 0, sms = 0;
        cudaError_t e = cudaGetDevice(&dev);
        if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
        if (e != cudaSuccess) return e;
        blocks = unsigned(8 * sms);
    }
    read_sum_kernel<<<blocks, 256, 0, stream>>>(static_cast<const uint4 *>(p.src), p.bytes / 16, p.out);
    return cudaGetLastError();
}

} // namespace es
