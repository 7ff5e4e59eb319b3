// moe_combine: adds the experts' outputs into the residual stream after the grouped (prefill)
// expert GEMMs or the per-slot decode down projection:
//   x[t, :] = (x[t, :] + y_shared[t, :]) + Σ_j weights[t, j] · y[t·n_expert_used + j, :],
// fp32, left to right: the shared experts' output first (when given, weight 1, as the CPU backend
// adds them), then the routed ones in choice order j = 0 … k−1 (deterministic: no atomics).
#pragma once

#include "kernels/kernel_common.h"

namespace es {

struct moe_combine_params {
    const float *y = nullptr;       // [n_tokens·n_expert_used, n_embd] expert output per slot
    const float *weights = nullptr; // [n_tokens, n_expert_used]
    float *x = nullptr;             // [n_tokens, n_embd]
    int64_t n_tokens = 0, n_embd = 0, n_expert_used = 0;
    const float *y_shared = nullptr; // [n_tokens, n_embd] or null
    // x was last written at least two launches back (decode: by o_proj, before moe_front): the
    // kernel reads it through L2 before pdl_wait (kernels/README.md).
    bool x_ready = false;
    // Counters zeroed after the wait, by block (0, 0): decode's moe_gate_up_gemv slot_rows_done,
    // which the down kernel before this one has finished waiting on.
    unsigned *reset = nullptr;
    int64_t n_reset = 0;
    // With norm_out set: each new residual row's RMSNorm too (rms_norm's formula),
    //   norm_out[t, :] = bf16(norm_weight · (x[t, :] · 1/sqrt(mean(x[t, :]²) + norm_eps))),
    // decode's next attention input, so that the q/k/v GEMV after this launch need not normalize
    // it. Needs moe_combine_norm_ok (a thread-block cluster a token adds the row's parts).
    const bf16_t *norm_weight = nullptr; // [n_embd]
    float norm_eps = 1e-5f;
    bf16_t *norm_out = nullptr; // [n_tokens, n_embd]
};

void moe_combine_ref(const moe_combine_params &p);
#ifdef ES_KERNELS_HAVE_LAUNCHERS
cudaError_t launch_moe_combine(const moe_combine_params &p, cudaStream_t stream);
// Whether launch_moe_combine can add p's norm (compute capability 9.0: a token's ⌈n_embd / 256⌉ ≤
// 16 blocks are one cluster, cluster_fits): otherwise it refuses norm_out and the caller
// normalizes elsewhere.
bool moe_combine_norm_ok(const moe_combine_params &p);
#endif

} // namespace es
