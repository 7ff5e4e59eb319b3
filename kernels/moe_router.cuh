// moe_router: the ERNIE-4.5 MoE router, all fp32 (as HF and the CPU backend):
//   logits = W_gate · x (x: the normalized hidden state, BF16 → fp32),  p = softmax(logits),
//   ids = top-k of p + bias (e_score_correction_bias changes which experts, ties → lower id),
//   weights[j] = p[ids[j]] / max(Σ_j p[ids[j]], norm_min)   (the unbiased p).
#pragma once

#include "kernel_common.h"

namespace es {

struct moe_router_params {
    const bf16_t *x = nullptr;    // [n_tokens, n_embd]
    const float *w = nullptr;     // [n_expert, n_embd]
    const float *bias = nullptr;  // [n_expert]
    int32_t *ids = nullptr;       // [n_tokens, n_expert_used], in selection order
    float *weights = nullptr;     // [n_tokens, n_expert_used]
    int64_t n_tokens = 0, n_embd = 0, n_expert = 0, n_expert_used = 0;
    float norm_min = 1e-12f;
    // GPU scratch: the logits and, per token, a counter of finished blocks that must be zero
    // before the first launch (the kernel leaves it zero again).
    float *logits = nullptr;        // [n_tokens, n_expert]
    unsigned *counters = nullptr;   // [n_tokens]
};

inline constexpr int64_t moe_router_max_experts = 4096;

void moe_router_ref(const moe_router_params &p);
#ifdef ES_KERNELS_HAVE_LAUNCHERS
cudaError_t launch_moe_router(const moe_router_params &p, cudaStream_t stream);
#endif

} // namespace es
