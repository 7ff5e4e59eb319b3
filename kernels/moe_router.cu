// moe_router (see moe_router.cuh). Grid (expert pairs, tokens), 256 threads: warps 4i..4i+3 of
// block b compute the logit of expert 2b + i, each over a quarter of n_embd (float4 loads, four
// in flight, shuffle reduction, the quarters summed in order) into the logits scratch, so the
// 655 KB router of a 21B-A3B layer is read by many SMs at once, and its rows start moving into L2
// before the kernel waits for its predecessor (one block per token was latency-bound at ~15 µs;
// eight experts per block, one warp each, at ~18 µs with five dependent load rounds per warp). The last block
// of a token to finish (a counter bumped after a fence) then does the rest for that token with
// one warp (no block barriers): softmax (max, then e^(l−max) · (1/sum), as the CPU), k rounds of
// a warp arg-max over p + bias with the tie rule "greater, or equal and lower id", and the
// renormalized weights.
#include "kernel_common.cuh"
#include "moe_router.cuh"

namespace es {

namespace {
// Two experts per block, four warps each: a warp streams a quarter of the expert's fp32 row.
constexpr int k_experts_per_block = 2, k_warps_per_expert = 4;
} // namespace

__global__ void __launch_bounds__(256) moe_router_kernel(moe_router_params p) {
    extern __shared__ __align__(16) float sm[];
    __shared__ float red[32];
    __shared__ bool s_last;
    const int64_t t = blockIdx.y, H = p.n_embd, E = p.n_expert, K = p.n_expert_used;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

    const int64_t e = int64_t(blockIdx.x) * k_experts_per_block + warp / k_warps_per_expert;
    const int quarter = warp % k_warps_per_expert;
    const bool vec = (H % 4) == 0 && (reinterpret_cast<uintptr_t>(p.w) & 15u) == 0 &&
                     (reinterpret_cast<uintptr_t>(p.x) & 7u) == 0;
    const int64_t n4 = H / 4, q_begin = n4 * quarter / k_warps_per_expert,
                  q_end = n4 * (quarter + 1) / k_warps_per_expert;
    // The router's weights are never written by a kernel: this warp's slice heads for L2 while the
    // previous kernel finishes.
    if (vec && e < E)
        for (int64_t i = q_begin * 4 + int64_t(lane) * 32; i < q_end * 4; i += 32 * 32)
            prefetch_l2(p.w + e * H + i);
    pdl_enter();
    float acc = 0.0f;
    if (e < E) {
        const float *w = p.w + e * H;
        const uint16_t *x = p.x + t * H;
        if (vec) {
            const float4 *w4 = reinterpret_cast<const float4 *>(w);
            const uint2 *x4 = reinterpret_cast<const uint2 *>(x);
#pragma unroll 4
            for (int64_t i = q_begin + lane; i < q_end; i += 32) {
                const float4 a = __ldg(w4 + i);
                const uint2 b = __ldg(x4 + i);
                acc += a.x * bf16_lo(b.x) + a.y * bf16_hi(b.x) + a.z * bf16_lo(b.y) + a.w * bf16_hi(b.y);
            }
        } else {
            const int64_t b = H * quarter / k_warps_per_expert, en = H * (quarter + 1) / k_warps_per_expert;
            for (int64_t i = b + lane; i < en; i += 32) acc += w[i] * bf16_to_f(x[i]);
        }
    }
    acc = warp_sum(acc);
    if (lane == 0) red[warp] = acc;
    __syncthreads();
    if (quarter == 0 && lane == 0 && e < E) {
        float v = 0.0f;
        for (int q = 0; q < k_warps_per_expert; ++q) v += red[warp + q];
        p.logits[t * E + e] = v;
    }
    __syncthreads();
    if (tid == 0) {
        __threadfence(); // this block's logits are visible before the counter says so
        const unsigned done = atomicAdd(&p.counters[t], 1u);
        s_last = done == gridDim.x - 1;
    }
    __syncthreads();
    if (!s_last) return;
    __threadfence();

    if (warp != 0) return; // one warp from here: no block barriers on the tail's latency path
    float *prob = sm;      // [n_expert]
    float *score = sm + E; // [n_expert] biased score, −inf once chosen
    int *chosen = reinterpret_cast<int *>(sm + 2 * E); // [n_expert_used] ids in choice order
    // Lane l owns experts l, l + 32, …: softmax (max, e^(l−max), · 1/sum, as the CPU), then the
    // biased scores, each lane touching only its own entries until the __syncwarp.
    float mx = -INFINITY;
    for (int64_t i = lane; i < E; i += 32) {
        const float v = __ldcg(p.logits + t * E + i);
        prob[i] = v;
        mx = fmaxf(mx, v);
    }
    if (lane == 0) p.counters[t] = 0; // ready for the next launch
    mx = warp_max(mx);
    float sum = 0.0f;
    for (int64_t i = lane; i < E; i += 32) {
        const float v = expf(prob[i] - mx);
        prob[i] = v;
        sum += v;
    }
    const float inv = 1.0f / warp_sum(sum);
    for (int64_t i = lane; i < E; i += 32) {
        prob[i] *= inv;
        score[i] = prob[i] + p.bias[i];
    }
    __syncwarp();
    float chosen_sum = 0.0f;
    for (int64_t j = 0; j < K; ++j) {
        float best = -INFINITY;
        int bi = -1;
        for (int64_t i = lane; i < E; i += 32) {
            const float sc = score[i];
            if (bi < 0 || sc > best) { // strictly greater: the lane's lowest id wins ties
                best = sc;
                bi = int(i);
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
            chosen[j] = bi;
            score[bi] = -INFINITY;
            chosen_sum += prob[bi];
        }
        __syncwarp();
    }
    if (lane == 0) {
        const float denom = fmaxf(chosen_sum, p.norm_min);
        for (int64_t j = 0; j < K; ++j) p.weights[t * K + j] = prob[chosen[j]] / denom;
    }
}

cudaError_t launch_moe_router(const moe_router_params &p, cudaStream_t stream) {
    if (p.n_tokens <= 0) return cudaSuccess;
    if (p.n_expert <= 0 || p.n_expert > moe_router_max_experts || p.n_expert_used <= 0 ||
        p.n_expert_used > p.n_expert || !p.logits || !p.counters)
        return cudaErrorInvalidValue;
    const size_t smem = size_t(2 * p.n_expert + p.n_expert_used) * sizeof(float);
    const dim3 grid(unsigned((p.n_expert + k_experts_per_block - 1) / k_experts_per_block),
                    unsigned(p.n_tokens));
    return launch_kernel(moe_router_kernel, grid, 256, smem, stream, p);
}

} // namespace es
