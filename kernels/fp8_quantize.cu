// fp8_quantize (see fp8_quantize.cuh): one block of 256 threads per row: a block max-reduction of
// |w|, then each thread converts a strided slice with an IEEE division (__fdiv_rn) and the
// hardware's saturating E4M3 conversion, so results equal the CPU twin.
#include "kernels/fp8_quantize.cuh"
#include "kernels/kernel_common.cuh"

namespace es {

__global__ void fp8_quantize_kernel(fp8_quantize_params p) {
    pdl_enter();
    __shared__ float partial[32];
    __shared__ float row_scale;
    const int64_t r = blockIdx.x;
    const uint16_t *w = p.w + r * p.k;
    float amax = 0.0f;
    for (int64_t i = threadIdx.x; i < p.k; i += blockDim.x) amax = fmaxf(amax, fabsf(bf16_to_f(w[i])));
    amax = warp_max(amax);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) partial[warp] = amax;
    __syncthreads();
    if (warp == 0) {
        float v = lane < int(blockDim.x / 32) ? partial[lane] : 0.0f;
        v = warp_max(v);
        if (lane == 0) {
            const float s = __fdiv_rn(v, fp8_e4m3_max);
            row_scale = s > 0.0f ? s : 1.0f;
            p.scale[r] = row_scale;
        }
    }
    __syncthreads();
    const float s = row_scale;
    uint8_t *q = p.q + r * p.k;
    for (int64_t i = threadIdx.x; i < p.k; i += blockDim.x) q[i] = f_to_fp8(__fdiv_rn(bf16_to_f(w[i]), s));
}

// block128: one block of 256 threads per 128×128 tile (grid: column blocks × row blocks), the same
// max-reduction over the tile, then the tile's elements converted.
__global__ void fp8_quantize_block_kernel(fp8_quantize_params p) {
    pdl_enter();
    __shared__ float partial[32];
    __shared__ float tile_scale;
    const int64_t r0 = int64_t(blockIdx.y) * fp8_block, c0 = int64_t(blockIdx.x) * fp8_block;
    const int64_t rows = min(fp8_block, p.n - r0), cols = min(fp8_block, p.k - c0);
    float amax = 0.0f;
    for (int64_t i = threadIdx.x; i < rows * cols; i += blockDim.x)
        amax = fmaxf(amax, fabsf(bf16_to_f(p.w[(r0 + i / cols) * p.k + c0 + i % cols])));
    amax = warp_max(amax);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) partial[warp] = amax;
    __syncthreads();
    if (warp == 0) {
        float v = lane < int(blockDim.x / 32) ? partial[lane] : 0.0f;
        v = warp_max(v);
        if (lane == 0) {
            const float s = __fdiv_rn(v, fp8_e4m3_max);
            tile_scale = s > 0.0f ? s : 1.0f;
            p.scale[int64_t(blockIdx.y) * gridDim.x + blockIdx.x] = tile_scale;
        }
    }
    __syncthreads();
    const float s = tile_scale;
    for (int64_t i = threadIdx.x; i < rows * cols; i += blockDim.x) {
        const int64_t e = (r0 + i / cols) * p.k + c0 + i % cols;
        p.q[e] = f_to_fp8(__fdiv_rn(bf16_to_f(p.w[e]), s));
    }
}

cudaError_t launch_fp8_quantize(const fp8_quantize_params &p, cudaStream_t stream) {
    if (p.n <= 0) return cudaSuccess;
    if (p.layout == scale_layout::block128)
        return launch_kernel(fp8_quantize_block_kernel, dim3(ceil_div_u(p.k, fp8_block), ceil_div_u(p.n, fp8_block)),
                             256, 0, stream, p);
    return launch_kernel(fp8_quantize_kernel, unsigned(p.n), 256, 0, stream, p);
}

} // namespace es
