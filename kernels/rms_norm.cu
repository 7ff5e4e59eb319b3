// rms_norm (see rms_norm.cuh): one block of 256 threads per output row; each thread adds the
// residual delta over a strided slice, accumulates its sum of squares, and a block reduction
// (warp shuffles, then one warp over the warp partials) gives the row's scale. 1/sqrt is IEEE
// (not rsqrtf) so the result tracks the CPU twin to rounding.
#include "rms_norm.cuh"
#include "kernel_common.cuh"

namespace es {

__global__ void rms_norm_kernel(rms_norm_params p) {
    pdl_enter();
    __shared__ float partial[32];
    __shared__ float row_scale;
    const int64_t r = blockIdx.x;
    const int64_t s = p.rows ? p.rows[r] : r;
    float *x = p.x + s * p.n_embd;
    const float *d = p.delta ? p.delta + s * p.n_embd : nullptr;
    float ss = 0.0f;
    for (int64_t i = threadIdx.x; i < p.n_embd; i += blockDim.x) {
        float v = x[i];
        if (d) {
            v += d[i];
            x[i] = v;
        }
        ss += v * v;
    }
    ss = warp_sum(ss);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) partial[warp] = ss;
    __syncthreads();
    if (warp == 0) {
        float v = lane < int(blockDim.x / 32) ? partial[lane] : 0.0f;
        v = warp_sum(v);
        if (lane == 0) row_scale = 1.0f / sqrtf(v / float(p.n_embd) + p.eps);
    }
    __syncthreads();
    const float scale = row_scale;
    uint16_t *out = p.out + r * p.n_embd;
    for (int64_t i = threadIdx.x; i < p.n_embd; i += blockDim.x) out[i] = f_to_bf16(bf16_to_f(p.weight[i]) * (x[i] * scale));
}

cudaError_t launch_rms_norm(const rms_norm_params &p, cudaStream_t stream) {
    if (p.n_rows <= 0) return cudaSuccess;
    return launch_kernel(rms_norm_kernel, unsigned(p.n_rows), 256, 0, stream, p);
}

} // namespace es
