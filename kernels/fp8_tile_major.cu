// fp8_tile_major (see fp8_tile_major.cuh): one 16-byte vector per thread, read in row-major order
// and written to its tile-major place (a load-time pass over each expert's stack).
#include "kernels/fp8_tile_major.cuh"
#include "kernels/kernel_common.cuh"

#include <algorithm>

namespace es {

__global__ void fp8_tile_major_kernel(fp8_tile_major_params p) {
    pdl_enter();
    const int64_t F = p.n_ff, H = p.n_embd, per = 2 * F * H, vecs = p.n_expert * per / 16;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < vecs;
         i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t byte = i * 16, e = byte / per, row = (byte % per) / H, col = byte % H;
        *reinterpret_cast<uint4 *>(p.dst + e * per + fp8_tile_major_offset(row, col, F, H)) =
            *reinterpret_cast<const uint4 *>(p.src + byte);
    }
}

cudaError_t launch_fp8_tile_major(const fp8_tile_major_params &p, cudaStream_t stream) {
    if (p.n_expert <= 0) return cudaSuccess;
    if (!fp8_tile_major_ok(p.n_ff, p.n_embd) || !aligned16(p.src) || !aligned16(p.dst) || p.src == p.dst)
        return cudaErrorInvalidValue;
    const int64_t vecs = p.n_expert * 2 * p.n_ff * p.n_embd / 16;
    const unsigned blocks = unsigned(std::min<int64_t>((vecs + 255) / 256, 132 * 32));
    return launch_kernel(fp8_tile_major_kernel, blocks, 256, 0, stream, p);
}

} // namespace es
