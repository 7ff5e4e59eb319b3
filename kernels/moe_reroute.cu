// moe_reroute (see moe_reroute.cuh). One warp a token (grid: the tokens): lane l holds experts
// l, l + 32, … of the token's probabilities and scores in shared memory; the softmax is a warp
// max and a warp sum; each free choice is a warp arg-max round with the tie rule "greater, or
// equal and lower id"; lane 0 writes the choices and their weights in choice order (the sum of
// the chosen probabilities in that order, as the CPU). A taken or disabled expert's score is −∞
// and every other score at least −FLT_MAX (NaN included), so a round never picks one. Steps with
// an intervention are rare (the expert lab) and small beside the experts: no effort goes into
// overlapping it with its neighbours.
#include "kernels/moe_reroute.cuh"
#include "kernels/kernel_common.cuh"

#include <cfloat>

namespace es {

namespace {

// The best untaken score's expert over the warp (−1: none left), and its score.
__device__ __forceinline__ int warp_best(const float *score, int64_t E, int lane, float &best) {
    best = -INFINITY;
    int bi = -1;
    for (int64_t e = lane; e < E; e += 32) {
        const float s = score[e];
        if (s > best) { // strictly greater: the lane's lowest id wins ties
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
    return bi;
}

} // namespace

__global__ void __launch_bounds__(32) moe_reroute_kernel(moe_reroute_params p) {
    extern __shared__ __align__(16) float sm[];
    const int64_t E = p.n_expert, K = p.K, t = blockIdx.x;
    const int lane = threadIdx.x;
    float *prob = sm, *score = sm + E;
    int *chosen = reinterpret_cast<int *>(sm + 2 * E); // [K]
    pdl_enter();
    const int32_t *rule = p.rules + int64_t(p.token_rule[t]) * moe_reroute_rule_words(E);
    const int64_t k = rule[0], n_forced = rule[1];
    const float bias_scale = __int_as_float(rule[2]);
    const int32_t *forced = rule + 4;
    const uint8_t *disabled = reinterpret_cast<const uint8_t *>(rule + 4 + E);
    const float *logits = p.logits + t * E;

    float mx = -INFINITY;
    for (int64_t e = lane; e < E; e += 32) {
        const float v = disabled[e] ? -INFINITY : __ldcg(logits + e);
        prob[e] = v;
        mx = fmaxf(mx, v);
    }
    mx = warp_max(mx);
    float sum = 0.0f;
    for (int64_t e = lane; e < E; e += 32) {
        const float v = expf(prob[e] - mx);
        prob[e] = v;
        sum += v;
    }
    const float inv = 1.0f / warp_sum(sum);
    for (int64_t e = lane; e < E; e += 32) {
        const float pe = prob[e] * inv;
        prob[e] = pe;
        const float s = bias_scale == 1.0f ? pe + p.bias[e] : pe + bias_scale * p.bias[e];
        score[e] = disabled[e] ? -INFINITY : s == s ? fmaxf(s, -FLT_MAX) : -FLT_MAX;
    }
    __syncwarp();
    // The forced experts first, in their order.
    for (int64_t j = lane; j < n_forced; j += 32) {
        chosen[j] = forced[j];
        score[forced[j]] = -INFINITY;
    }
    __syncwarp();
    float last_free = -INFINITY, best = -INFINITY;
    for (int64_t j = n_forced; j < k; ++j) {
        const int bi = warp_best(score, E, lane, best);
        last_free = best;
        __syncwarp(); // every lane has read the scores before lane 0 takes one
        if (lane == 0) {
            chosen[j] = bi;
            score[bi] = -INFINITY;
        }
        __syncwarp();
    }
    float margin = __int_as_float(0x7fc00000); // NaN
    if (p.margins && k > n_forced) {
        const int bi = warp_best(score, E, lane, best);
        if (bi >= 0) margin = last_free - best;
    }
    if (lane != 0) return;
    float chosen_sum = 0.0f;
    for (int64_t j = 0; j < k; ++j) chosen_sum += prob[chosen[j]];
    const float denom = fmaxf(chosen_sum, p.norm_min);
    for (int64_t j = 0; j < K; ++j) {
        p.ids[t * K + j] = j < k ? chosen[j] : chosen[0];
        p.weights[t * K + j] = j < k ? prob[chosen[j]] / denom : 0.0f;
    }
    if (p.margins) p.margins[t] = margin;
}

cudaError_t launch_moe_reroute(const moe_reroute_params &p, cudaStream_t stream) {
    if (p.n_tokens <= 0) return cudaSuccess;
    if (p.n_expert <= 0 || p.n_expert > moe_reroute_max_experts || p.K <= 0 || p.K > p.n_expert || !p.logits ||
        !p.bias || !p.rules || !p.token_rule || !p.ids || !p.weights)
        return cudaErrorInvalidValue;
    const size_t smem = size_t(2 * p.n_expert + p.K) * 4;
    return launch_decode<moe_reroute_kernel>(dim3(unsigned(p.n_tokens)), dim3(32), smem, stream, p);
}

} // namespace es
