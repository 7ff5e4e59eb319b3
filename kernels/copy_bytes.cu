// copy_bytes (see copy_bytes.cuh): one 16-byte vector a thread where both ends are 16-byte aligned
// (the step's input and download blocks are), the unaligned head and tail byte by byte; a block of
// 128 threads per 2 KB, so a step's few hundred bytes to few KB are one round trip over PCIe.
#include "copy_bytes.cuh"
#include "kernel_common.cuh"

#include <algorithm>

namespace es {

__global__ void __launch_bounds__(128) copy_bytes_kernel(copy_bytes_params p) {
    pdl_enter();
    const auto *src = static_cast<const unsigned char *>(p.src);
    auto *dst = static_cast<unsigned char *>(p.dst);
    const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x, stride = size_t(gridDim.x) * blockDim.x;
    if (aligned16(src) && aligned16(dst)) {
        const size_t n16 = p.bytes / 16;
        for (size_t v = i; v < n16; v += stride)
            reinterpret_cast<uint4 *>(dst)[v] = reinterpret_cast<const uint4 *>(src)[v];
        for (size_t b = n16 * 16 + i; b < p.bytes; b += stride) dst[b] = src[b];
    } else {
        for (size_t b = i; b < p.bytes; b += stride) dst[b] = src[b];
    }
}

cudaError_t launch_copy_bytes(const copy_bytes_params &p, cudaStream_t stream) {
    if (p.bytes == 0) return cudaSuccess;
    if (!p.dst || !p.src) return cudaErrorInvalidValue;
    const unsigned blocks = unsigned(std::min<size_t>((p.bytes + 2047) / 2048, 64));
    return launch_decode<copy_bytes_kernel>(blocks, 128, 0, stream, p);
}

} // namespace es
