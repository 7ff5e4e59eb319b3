// rms_norm (see rms_norm.cuh): one block of 256 threads per output row. Rows of up to 4,096
// elements (n_embd % 4 == 0) take rms_norm_vec_kernel (the row in registers, below); others this
// loop: each thread adds the
// residual delta over a strided slice, accumulates its sum of squares, and a block reduction
// (warp shuffles, then one warp over the warp partials) gives the row's scale. 1/sqrt is IEEE
// (not rsqrtf) so the result tracks the CPU twin to rounding.
#include "kernels/kernel_common.cuh"
#include "kernels/rms_norm.cuh"

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
    for (int64_t i = threadIdx.x; i < p.n_embd; i += blockDim.x)
        out[i] = f_to_bf16(bf16_to_f(p.weight[i]) * (x[i] * scale));
}

// Rows of n_embd % 4 == 0 up to 256·4·V elements: each thread keeps its V float4 of the row in
// registers (one pass over memory, all loads in flight together), and loads its slice of the
// weight before waiting for the previous kernel (no kernel writes weights).
template <int V>
__global__ void __launch_bounds__(256) rms_norm_vec_kernel(rms_norm_params p) {
    __shared__ float partial[8];
    const int tid = threadIdx.x, n4 = int(p.n_embd / 4);
    uint2 wb[V];
#pragma unroll
    for (int i = 0; i < V; ++i)
        if (tid + i * 256 < n4) wb[i] = __ldg(reinterpret_cast<const uint2 *>(p.weight) + tid + i * 256);
    pdl_enter();
    const int64_t r = blockIdx.x;
    const int64_t s = p.rows ? p.rows[r] : r;
    float4 *x = reinterpret_cast<float4 *>(p.x + s * p.n_embd);
    const float4 *d = p.delta ? reinterpret_cast<const float4 *>(p.delta + s * p.n_embd) : nullptr;
    float4 v[V];
#pragma unroll
    for (int i = 0; i < V; ++i)
        if (tid + i * 256 < n4) v[i] = x[tid + i * 256];
    float ss = 0.0f;
#pragma unroll
    for (int i = 0; i < V; ++i) {
        if (tid + i * 256 >= n4) continue;
        if (d) {
            const float4 dv = d[tid + i * 256];
            v[i] = make_float4(v[i].x + dv.x, v[i].y + dv.y, v[i].z + dv.z, v[i].w + dv.w);
            x[tid + i * 256] = v[i];
        }
        ss += v[i].x * v[i].x + v[i].y * v[i].y + v[i].z * v[i].z + v[i].w * v[i].w;
    }
    ss = warp_sum(ss);
    const int warp = tid / 32, lane = tid % 32;
    if (lane == 0) partial[warp] = ss;
    __syncthreads();
    float tot = lane < 8 ? partial[lane] : 0.0f;
    tot = warp_sum(tot);
    const float scale = 1.0f / sqrtf(tot / float(p.n_embd) + p.eps);
    uint2 *out = reinterpret_cast<uint2 *>(p.out + r * p.n_embd);
#pragma unroll
    for (int i = 0; i < V; ++i) {
        if (tid + i * 256 >= n4) continue;
        const uint2 w = wb[i];
        const float o0 = bf16_lo(w.x) * (v[i].x * scale), o1 = bf16_hi(w.x) * (v[i].y * scale),
                    o2 = bf16_lo(w.y) * (v[i].z * scale), o3 = bf16_hi(w.y) * (v[i].w * scale);
        out[tid + i * 256] = make_uint2(uint32_t(f_to_bf16(o0)) | (uint32_t(f_to_bf16(o1)) << 16),
                                        uint32_t(f_to_bf16(o2)) | (uint32_t(f_to_bf16(o3)) << 16));
    }
}

cudaError_t launch_rms_norm(const rms_norm_params &p, cudaStream_t stream) {
    if (p.n_rows <= 0) return cudaSuccess;
    const bool vec = p.n_embd % 4 == 0 && aligned16(p.x) && (!p.delta || aligned16(p.delta)) &&
                     (reinterpret_cast<uintptr_t>(p.weight) & 7u) == 0 &&
                     (reinterpret_cast<uintptr_t>(p.out) & 7u) == 0;
    const int64_t n4 = p.n_embd / 4;
    if (vec && n4 <= 256) return launch_decode<rms_norm_vec_kernel<1>>(unsigned(p.n_rows), 256, 0, stream, p);
    if (vec && n4 <= 512) return launch_decode<rms_norm_vec_kernel<2>>(unsigned(p.n_rows), 256, 0, stream, p);
    if (vec && n4 <= 1024)
        return launch_decode<rms_norm_vec_kernel<4>>(unsigned(p.n_rows), 256, 0, stream, p);
    return launch_decode<rms_norm_kernel>(unsigned(p.n_rows), 256, 0, stream, p);
}

} // namespace es
