// moe_router: the ERNIE-4.5 MoE router, all fp32 (as HF and the CPU backend):
//   logits = W_gate · x (x: the normalized hidden state, BF16 → fp32),  p = softmax(logits),
//   ids = top-k of p + bias (e_score_correction_bias changes which experts, ties → lower id),
//   weights[j] = p[ids[j]] / max(Σ_j p[ids[j]], norm_min)   (the unbiased p).
#pragma once

#include "kernels/kernel_common.h"

namespace es {

// The token-tiled kernel's default floor (moe_router_params::tiles_min_tokens): where the two
// kernels cross on the H200 with the 21B-A3B's router (2,560 × 64; µs for three
// layers, per-token / tiled): 64 tokens 58.8 / 145.6, 128 84.2 / 139.1, 256 140.0 / 139.3, 512
// 246.8 / 140.7, 2,048 902.1 / 321.6. Below it the per-token kernel's E / 2 · T blocks (2,048 at
// 64 tokens) fill the GPU where the tiles' E / 8 · T / 32 (16) do not (batch-64 decode: ITL 15.3 →
// 14.5 ms).
inline constexpr int64_t moe_router_tiles_min_tokens = 256;

struct moe_router_params {
    const bf16_t *x = nullptr;   // [n_tokens, n_embd]; unused when norm is on
    const float *w = nullptr;    // [n_expert, n_embd]
    const float *bias = nullptr; // [n_expert]
    int32_t *ids = nullptr;      // [n_tokens, n_expert_used], in selection order
    float *weights = nullptr;    // [n_tokens, n_expert_used]
    int64_t n_tokens = 0, n_embd = 0, n_expert = 0, n_expert_used = 0;
    float norm_min = 1e-12f;
    // [n_tokens] or null: each token's margin, the k-th choice's score (p + bias) minus the
    // (k+1)-th's (NaN where k = n_expert): routing_record::margins.
    float *margins = nullptr;
    // GPU scratch: the logits (moe_reroute reads them after the launch; the twin writes them when
    // set) and, per token, a counter of finished blocks that must be zero before the first launch
    // (the kernel leaves it zero again).
    float *logits = nullptr;      // [n_tokens, n_expert]
    unsigned *counters = nullptr; // [n_tokens] (one a token, or a group of tokens)
    // Fused input norm (kernel_common.h): when on, every block normalizes its token's residual row
    // itself (no separate rms_norm launch); norm.out, when set, receives the normalized rows.
    norm_in norm;
    // Steps of at least this many tokens (norm off) take the token-tiled kernel (moe_router.cu:
    // the router read once per 32 tokens instead of once per token); 0: never.
    int64_t tiles_min_tokens = moe_router_tiles_min_tokens;
};

inline constexpr int64_t moe_router_max_experts = 4096;
// The fused norm's limits: n_embd % 4 == 0, its row fits the launch's shared memory beside the
// tail's (48 KB), norm.x and norm.out 16-byte and norm.weight 8-byte aligned.
bool moe_router_norm_ok(const moe_router_params &p);

void moe_router_ref(const moe_router_params &p);
#ifdef ES_KERNELS_HAVE_LAUNCHERS
cudaError_t launch_moe_router(const moe_router_params &p, cudaStream_t stream);
#endif

} // namespace es
