// The router's device code, shared by moe_router.cu and moe_front.cu (device code only): a warp's
// quarter of an expert's logit for up to MT tokens, the block-level "last to finish" election,
// and the one-warp tail (softmax, biased top-k, renormalized weights) of one token.
#pragma once

#include "kernels/kernel_common.cuh"

namespace es {

// Warps per expert logit: each streams a quarter of the expert's fp32 row.
inline constexpr int k_router_warps_per_expert = 4;

// float4s of its quarter a lane loads into registers before pdl_wait (quarters of up to 768
// floats: the whole row of n_embd ≤ 3,072, the 21B-A3B's 2,560); the rest of a longer quarter goes to L2 and
// is read after the wait.
inline constexpr int k_router_pre = 6;

// Vector path (H % 4 == 0, w 16-byte aligned): this lane's first k_router_pre float4s of its
// quarter of router row w into registers, the rest of the quarter towards L2. Weights, which no
// kernel writes: called before pdl_wait, so the loads overlap the previous kernel's tail.
__device__ __forceinline__ void router_preload_quarter(const float *w, int64_t H, int quarter, int lane,
                                                       float4 (&pre)[k_router_pre]) {
    const int64_t n4 = H / 4, qb = n4 * quarter / k_router_warps_per_expert,
                  qe = n4 * (quarter + 1) / k_router_warps_per_expert;
    const float4 *w4 = reinterpret_cast<const float4 *>(w);
#pragma unroll
    for (int j = 0; j < k_router_pre; ++j) {
        const int64_t i = qb + lane + 32 * j;
        pre[j] = i < qe ? __ldg(w4 + i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    for (int64_t i = (qb + 32 * k_router_pre) * 4 + int64_t(lane) * 32; i < qe * 4; i += 32 * 32)
        prefetch_l2(w + i);
}

// This lane's share of dot(w[quarter], x_m[quarter]) for the mt ≤ MT token rows x + m·ldx (BF16;
// XS: in shared memory), in element order i = qb + lane, + 32, …. vec: float4 weights (the first
// k_router_pre from `pre`, router_preload_quarter's) and 4-element activation loads (w 16-byte
// and x 8-byte aligned); else element by element. The caller reduces over the warp and sums the
// quarters in order.
template <int MT, bool XS>
__device__ __forceinline__ void router_lane_quarter(const float *w, const uint16_t *x, int64_t ldx, int mt,
                                                    int64_t H, int quarter, int lane, bool vec,
                                                    const float4 (&pre)[k_router_pre], float (&acc)[MT]) {
#pragma unroll
    for (int m = 0; m < MT; ++m) acc[m] = 0.0f;
    if (vec) {
        const int64_t n4 = H / 4, qb = n4 * quarter / k_router_warps_per_expert,
                      qe = n4 * (quarter + 1) / k_router_warps_per_expert;
        const float4 *w4 = reinterpret_cast<const float4 *>(w);
        auto step = [&](const float4 a, int64_t i) {
#pragma unroll
            for (int m = 0; m < MT; ++m)
                if (m < mt) {
                    const uint2 *xp = reinterpret_cast<const uint2 *>(x + m * ldx) + i;
                    const uint2 b = XS ? *xp : __ldg(xp);
                    acc[m] +=
                        a.x * bf16_lo(b.x) + a.y * bf16_hi(b.x) + a.z * bf16_lo(b.y) + a.w * bf16_hi(b.y);
                }
        };
#pragma unroll
        for (int j = 0; j < k_router_pre; ++j) {
            const int64_t i = qb + lane + 32 * j;
            if (i < qe) step(pre[j], i);
        }
#pragma unroll 4
        for (int64_t i = qb + lane + 32 * k_router_pre; i < qe; i += 32) step(__ldg(w4 + i), i);
    } else {
        const int64_t b = H * quarter / k_router_warps_per_expert,
                      en = H * (quarter + 1) / k_router_warps_per_expert;
        for (int64_t i = b + lane; i < en; i += 32) {
            const float wv = w[i];
#pragma unroll
            for (int m = 0; m < MT; ++m)
                if (m < mt) acc[m] += wv * bf16_to_f(x[m * ldx + i]);
        }
    }
}

// The router's tail for one token on one warp (no block barriers): softmax of logits[0, E) (max,
// e^(l−max) · (1/sum), as the CPU), k rounds of a warp arg-max over p + bias with the tie rule
// "greater, or equal and lower id", ids in choice order and weights p / max(Σ p, norm_min).
// sm: 2·E + K floats of this warp's own shared memory.
//
// Up to 64 experts (two a lane) the choice is by rank instead of k rounds: each expert's rank is
// the number of experts ahead of it under that rule (each lane compares its two scores with all
// 64, by shuffles, at once), and rank r < k puts it at choice r — the same ids in the same order,
// without k dependent arg-max rounds. The logits and the biases load together. (A NaN score
// ranks as −∞, so the ids stay valid experts.)
// margin, when set, receives the k-th choice's score minus the (k+1)-th's (NaN where k = E): how
// narrowly the last choice won (routing_record::margins).
__device__ __forceinline__ void router_tail_warp64(const float *logits, const float *bias, int64_t E,
                                                   int64_t K, float norm_min, int32_t *ids, float *weights,
                                                   float *margin, float *sm, int lane) {
    const bool v0 = lane < E, v1 = lane + 32 < E;
    const float l0 = v0 ? __ldcg(logits + lane) : -INFINITY, l1 = v1 ? __ldcg(logits + lane + 32) : -INFINITY;
    const float b0 = v0 ? bias[lane] : 0.0f, b1 = v1 ? bias[lane + 32] : 0.0f;
    const float mx = warp_max(fmaxf(l0, l1));
    const float e0 = v0 ? expf(l0 - mx) : 0.0f, e1 = v1 ? expf(l1 - mx) : 0.0f;
    float sum = 0.0f; // in the lane's order of ids, as router_tail_warp
    if (v0) sum += e0;
    if (v1) sum += e1;
    const float inv = 1.0f / warp_sum(sum);
    const float p0 = e0 * inv, p1 = e1 * inv;
    float s0 = p0 + b0, s1 = p1 + b1;
    if (!(s0 == s0)) s0 = -INFINITY;
    if (!(s1 == s1)) s1 = -INFINITY;
    // Experts ahead of a score s at id i: greater, or equal and lower id (valid ids only).
    int r0 = 0, r1 = 0;
#pragma unroll 8
    for (int src = 0; src < 32; ++src) {
        const float t0 = __shfl_sync(0xffffffffu, s0, src), t1 = __shfl_sync(0xffffffffu, s1, src);
        const bool w0 = src < E, w1 = src + 32 < E; // ids src and src + 32
        r0 += (w0 && (t0 > s0 || (t0 == s0 && src < lane))) +
              (w1 && (t1 > s0 || (t1 == s0 && src + 32 < lane)));
        r1 += (w0 && (t0 > s1 || (t0 == s1 && src < lane + 32))) +
              (w1 && (t1 > s1 || (t1 == s1 && src < lane)));
    }
    float *cp = sm; // [K] the chosen experts' p in choice order; then the k-th and (k+1)-th scores
    if (v0 && r0 < K) {
        ids[r0] = lane;
        cp[r0] = p0;
    }
    if (v1 && r1 < K) {
        ids[r1] = lane + 32;
        cp[r1] = p1;
    }
    if (margin) {
        if (v0 && (r0 == K - 1 || r0 == K)) sm[K + (r0 - (K - 1))] = s0;
        if (v1 && (r1 == K - 1 || r1 == K)) sm[K + (r1 - (K - 1))] = s1;
    }
    __syncwarp();
    if (margin && lane == 0) *margin = K < E ? sm[K] - sm[K + 1] : __int_as_float(0x7fc00000);
    float chosen_sum = 0.0f; // in choice order, as router_tail_warp (every lane the same)
    for (int64_t j = 0; j < K; ++j) chosen_sum += cp[j];
    const float denom = fmaxf(chosen_sum, norm_min);
    for (int64_t j = lane; j < K; j += 32) weights[j] = cp[j] / denom;
}

__device__ __forceinline__ void router_tail_warp(const float *logits, const float *bias, int64_t E, int64_t K,
                                                 float norm_min, int32_t *ids, float *weights, float *margin,
                                                 float *sm, int lane) {
    if (E <= 64) {
        router_tail_warp64(logits, bias, E, K, norm_min, ids, weights, margin, sm, lane);
        return;
    }
    float *prob = sm;                                  // [E]
    float *score = sm + E;                             // [E] biased score, −inf once chosen
    int *chosen = reinterpret_cast<int *>(sm + 2 * E); // [K] ids in choice order
    // Lane l owns experts l, l + 32, …, touching only its own entries until the __syncwarp.
    float mx = -INFINITY;
    for (int64_t i = lane; i < E; i += 32) {
        const float v = __ldcg(logits + i);
        prob[i] = v;
        mx = fmaxf(mx, v);
    }
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
        score[i] = prob[i] + bias[i];
    }
    __syncwarp();
    float chosen_sum = 0.0f, last = -INFINITY;
    for (int64_t j = 0; j <= K; ++j) {
        if (j == K && (!margin || K == E)) break; // round K: the margin's best score left out
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
        if (j == K) {
            if (lane == 0) *margin = last - best;
            break;
        }
        last = best;
        if (lane == 0) {
            ids[j] = bi;
            chosen[j] = bi;
            score[bi] = -INFINITY;
            chosen_sum += prob[bi];
        }
        __syncwarp();
    }
    if (margin && K == E && lane == 0) *margin = __int_as_float(0x7fc00000);
    if (lane == 0) {
        const float denom = fmaxf(chosen_sum, norm_min);
        for (int64_t j = 0; j < K; ++j) weights[j] = prob[chosen[j]] / denom;
    }
}

// Copies mt rows of H BF16 values (H % 4 == 0) from shared memory to global memory, the whole block.
__device__ __forceinline__ void block_store_rows(const uint16_t *src, uint16_t *dst, int mt, int64_t H) {
    const int64_t n = int64_t(mt) * H / 4;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        reinterpret_cast<uint2 *>(dst)[i] = reinterpret_cast<const uint2 *>(src)[i];
}

} // namespace es
