// moe_front: the front of a decode MoE layer in one launch, for up to moe_front_max_tokens
// tokens: the FFN RMSNorm of the residual rows, the router (moe_router's arithmetic) and the
// shared experts' gate/up projection with SiLU·up (moe_gate_up_gemv's):
//   xn[t]     = rms_norm(x[t]) · norm weight                      (BF16, also stored to norm.out)
//   ids, weights = moe_router(xn)                                  (softmax, biased top-k, renormalized)
//   sh_act[t, f] = bf16(silu(scale_g · Wg[f] · xn[t]) · scale_u · Wu[f] · xn[t])
// The shared experts' weights are [2·n_ff_sh, n_embd] (gate rows, then up rows), BF16 or FP8
// E4M3 with per-row (or 128×128 block: sh_w_layout) scales; n_ff_sh = 0 means no shared experts.
#pragma once

#include "kernels/kernel_common.h"

namespace es {

inline constexpr int64_t moe_front_max_tokens = 4;

struct moe_front_params {
    norm_in norm; // x [n_tokens, n_embd] residual, weight, eps; out [n_tokens, n_embd] (required)
    // router (moe_router.cuh)
    const float *router_w = nullptr; // [n_expert, n_embd]
    const float *bias = nullptr;     // [n_expert]
    int32_t *ids = nullptr;          // [n_tokens, n_expert_used], in selection order
    float *weights = nullptr;        // [n_tokens, n_expert_used]
    int64_t n_expert = 0, n_expert_used = 0;
    float norm_min = 1e-12f;
    float *margins = nullptr;    // [n_tokens] or null: moe_router_params::margins
    float *logits = nullptr;     // GPU scratch [n_tokens, n_expert]
    unsigned *counter = nullptr; // GPU scratch, zero before the first launch (left zero again)
    // shared experts' gate/up
    const void *sh_w = nullptr; // [2·n_ff_sh, n_embd]
    weight_format sh_wfmt = weight_format::bf16;
    const float *sh_w_scale = nullptr; // FP8 only: [fp8_scale_count(2·n_ff_sh, n_embd, sh_w_layout)]
    bf16_t *sh_act = nullptr;          // [n_tokens, n_ff_sh]
    int64_t n_ff_sh = 0;
    int64_t n_tokens = 0, n_embd = 0;
    // block128: one grid over the [2·n_ff_sh, n_embd] matrix; needs n_embd % 16 == 0 and 16-byte
    // aligned weights.
    scale_layout sh_w_layout = scale_layout::channel;
};

// Whether the fused kernel takes these shapes: 1 ≤ n_tokens ≤ moe_front_max_tokens, 1 ≤ n_expert
// ≤ 4096, 1 ≤ n_expert_used ≤ n_expert, n_embd % 4 == 0, the normalized rows (and the router's
// tail) in 48 KB of shared memory, norm.x / norm.out 16-byte and norm.weight 8-byte aligned.
// Otherwise the caller runs rms_norm, moe_router and moe_gate_up_gemv.
bool moe_front_supported(const moe_front_params &p);
// Token rows a block holds (1, 2 or 4) and the launch's dynamic shared memory: the normalized
// rows, reused by the router's tail (prob, score, chosen per token).
inline int moe_front_rows(int64_t n_tokens) { return n_tokens <= 1 ? 1 : n_tokens <= 2 ? 2 : 4; }
inline size_t moe_front_smem_bytes(const moe_front_params &p) {
    const int64_t mt = moe_front_rows(p.n_tokens);
    const size_t rows = size_t(mt * p.n_embd) * 2;
    const size_t tail = size_t(mt * (2 * p.n_expert + p.n_expert_used)) * sizeof(float);
    return rows > tail ? rows : tail;
}

void moe_front_ref(const moe_front_params &p);
#ifdef ES_KERNELS_HAVE_LAUNCHERS
cudaError_t launch_moe_front(const moe_front_params &p, cudaStream_t stream);
#endif

} // namespace es
