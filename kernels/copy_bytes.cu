// copy_bytes (see copy_bytes.cuh): one 16-byte vector a thread where both ends are 16-byte aligned
// (the step's input and download blocks are; fed tokens are patched in the vector that carries
// them), the unaligned tail byte by byte; a block of 128 threads per 2 KB, so a step's few hundred
// bytes to few KB are one round trip over PCIe.
#include "kernels/copy_bytes.cuh"
#include "kernels/kernel_common.cuh"

#include <algorithm>

namespace es {

__global__ void __launch_bounds__(128) copy_bytes_kernel(copy_bytes_params p) {
    pdl_enter();
    const auto *src = static_cast<const unsigned char *>(p.src);
    auto *dst = static_cast<unsigned char *>(p.dst);
    const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x, stride = size_t(gridDim.x) * blockDim.x;
    if (aligned16(src) && aligned16(dst)) {
        const size_t n16 = p.bytes / 16, fed_end = p.fed_offset + size_t(p.fed_n) * 4;
        for (size_t v = i; v < n16; v += stride) {
            const bool fed = 16 * v < fed_end && 16 * v + 16 > p.fed_offset;
            // Row 0's candidate, loaded beside the vector rather than after it (a one-token step's
            // only fed token is −1): the two loads' latencies overlap.
            const int32_t row0 = fed ? __ldcg(p.fed_ids) : 0;
            uint4 q = reinterpret_cast<const uint4 *>(src)[v];
            if (fed) { // a vector of tokens: feed the negative ones
                int32_t *t = reinterpret_cast<int32_t *>(&q);
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const size_t at = 16 * v + 4 * size_t(e);
                    if (at >= p.fed_offset && at < fed_end && t[e] < 0)
                        t[e] = t[e] == -1 ? row0 : p.fed_ids[(-int64_t(t[e]) - 1) * p.fed_stride];
                }
            }
            reinterpret_cast<uint4 *>(dst)[v] = q;
        }
        for (size_t b = n16 * 16 + i; b < p.bytes; b += stride) dst[b] = src[b];
    } else {
        for (size_t b = i; b < p.bytes; b += stride) dst[b] = src[b];
    }
}

cudaError_t launch_copy_bytes(const copy_bytes_params &p, cudaStream_t stream) {
    if (p.bytes == 0) return cudaSuccess;
    if (!p.dst || !p.src) return cudaErrorInvalidValue;
    // Fed tokens: aligned ends and tokens, inside the block, whole 16-byte vectors copied.
    if (p.fed_n > 0 && (!p.fed_ids || p.fed_stride < 1 || !aligned16(p.dst) || !aligned16(p.src) ||
                        p.fed_offset % 16 != 0 || p.fed_offset + size_t(p.fed_n) * 4 > p.bytes / 16 * 16))
        return cudaErrorInvalidValue;
    const unsigned blocks = unsigned(std::min<size_t>((p.bytes + 2047) / 2048, 64));
    return launch_decode<copy_bytes_kernel>(blocks, 128, 0, stream, p);
}

} // namespace es
