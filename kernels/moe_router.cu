// moe_router (see moe_router.cuh): one block of 256 threads per token. The token's row is staged
// in shared memory as fp32; warp w computes the logits of experts w, w+8, … (lanes stride over
// n_embd, shuffle reduction). Softmax: block max, then sum of exp (as the CPU: p = e^(l−max) ·
// (1/sum)). Selection: warp 0 runs k rounds of a warp arg-max over p + bias with the tie rule
// "greater, or equal and lower id", marking chosen experts; lane 0 renormalizes.
#include "moe_router.cuh"
#include "kernel_common.cuh"

namespace es {

__global__ void moe_router_kernel(moe_router_params p) {
    extern __shared__ float sm[];
    float *xs = sm;                   // [n_embd]
    float *prob = xs + p.n_embd;      // [n_expert]
    float *score = prob + p.n_expert; // [n_expert] biased score, −inf once chosen
    __shared__ float red[32];
    __shared__ float s_max, s_inv;
    const int64_t t = blockIdx.x, H = p.n_embd, E = p.n_expert, K = p.n_expert_used;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, n_warps = blockDim.x / 32;
    for (int64_t i = tid; i < H; i += blockDim.x) xs[i] = bf16_to_f(p.x[t * H + i]);
    __syncthreads();
    for (int64_t e = warp; e < E; e += n_warps) {
        const float *w = p.w + e * H;
        float acc = 0.0f;
        for (int64_t i = lane; i < H; i += 32) acc += w[i] * xs[i];
        acc = warp_sum(acc);
        if (lane == 0) prob[e] = acc;
    }
    __syncthreads();
    float mx = -INFINITY;
    for (int64_t e = tid; e < E; e += blockDim.x) mx = fmaxf(mx, prob[e]);
    mx = warp_max(mx);
    if (lane == 0) red[warp] = mx;
    __syncthreads();
    if (warp == 0) {
        float v = lane < n_warps ? red[lane] : -INFINITY;
        v = warp_max(v);
        if (lane == 0) s_max = v;
    }
    __syncthreads();
    float sum = 0.0f;
    for (int64_t e = tid; e < E; e += blockDim.x) {
        const float v = expf(prob[e] - s_max);
        prob[e] = v;
        sum += v;
    }
    sum = warp_sum(sum);
    __syncthreads(); // red[] reuse
    if (lane == 0) red[warp] = sum;
    __syncthreads();
    if (warp == 0) {
        float v = lane < n_warps ? red[lane] : 0.0f;
        v = warp_sum(v);
        if (lane == 0) s_inv = 1.0f / v;
    }
    __syncthreads();
    for (int64_t e = tid; e < E; e += blockDim.x) {
        prob[e] *= s_inv;
        score[e] = prob[e] + p.bias[e];
    }
    __syncthreads();
    if (warp != 0) return;
    float chosen_sum = 0.0f;
    for (int64_t j = 0; j < K; ++j) {
        float best = -INFINITY;
        int bi = -1;
        for (int64_t e = lane; e < E; e += 32) {
            const float s = score[e];
            if (bi < 0 || s > best) { // strictly greater: the lane's lowest id wins ties
                best = s;
                bi = int(e);
            }
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const float b2 = __shfl_xor_sync(0xffffffffu, best, o);
            const int i2 = __shfl_xor_sync(0xffffffffu, bi, o);
            if (i2 >= 0 && (bi < 0 || b2 > best || (b2 == best && i2 < bi))) {
                best = b2;
                bi = i2;
            }
        }
        if (lane == 0) {
            p.ids[t * K + j] = bi;
            score[bi] = -INFINITY;
            chosen_sum += prob[bi];
        }
        __syncwarp();
    }
    if (lane == 0) {
        const float denom = fmaxf(chosen_sum, p.norm_min);
        for (int64_t j = 0; j < K; ++j) p.weights[t * K + j] = prob[p.ids[t * K + j]] / denom;
    }
}

cudaError_t launch_moe_router(const moe_router_params &p, cudaStream_t stream) {
    if (p.n_tokens <= 0) return cudaSuccess;
    if (p.n_expert <= 0 || p.n_expert > moe_router_max_experts || p.n_expert_used <= 0 || p.n_expert_used > p.n_expert)
        return cudaErrorInvalidValue;
    const size_t smem = size_t(p.n_embd + 2 * p.n_expert) * sizeof(float);
    if (smem > 48 * 1024) {
        const cudaError_t e = cudaFuncSetAttribute(moe_router_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
        if (e != cudaSuccess) return e;
    }
    moe_router_kernel<<<unsigned(p.n_tokens), 256, smem, stream>>>(p);
    return cudaGetLastError();
}

} // namespace es
