// moe_down_gemv: decode-sized routed-expert down-projection and weighted combine, added into the
// residual stream:  y[t, n] += Σ_j weights[t, j] · scale · Wd_e[n] · act[t·k_used + j],  e = ids[t, j],
// summed in choice order j (deterministic: one warp owns each (t, n), no atomics).
// Weights: [n_expert, n_embd, n_ff_exp], BF16 or FP8 with scales [n_expert, n_embd] (or per
// 128×128 block of each expert: w_layout).
#pragma once

#include "kernels/kernel_common.h"

namespace es {

struct moe_down_gemv_params {
    const bf16_t *act = nullptr;    // [n_tokens·n_expert_used, n_ff_exp]
    const int32_t *ids = nullptr;   // [n_tokens, n_expert_used]
    const float *weights = nullptr; // [n_tokens, n_expert_used]
    const void *w = nullptr;        // [n_expert, n_embd, n_ff_exp]
    weight_format wfmt = weight_format::bf16;
    const float *w_scale = nullptr; // FP8 only: [n_expert · fp8_scale_count(n_embd, n_ff_exp, w_layout)]
    float *y = nullptr;             // [n_tokens, n_embd], accumulated into
    int64_t n_tokens = 0, n_embd = 0, n_expert_used = 0, n_ff_exp = 0;
    // Per-slot mode: when set, y is not touched; y_slots[t·k_used + j, n] = scale · Wd_e[n] · act
    // (unweighted), for moe_combine to add in choice order.
    float *y_slots = nullptr; // [n_tokens·n_expert_used, n_embd]
    // Per-slot mode only: the shared experts as one more slot per token (sh_w set), unweighted:
    // y_shared[t, n] = scale · Wsh[n] · sh_act[t], in the routed experts' format; moe_combine adds
    // it first (weight 1), as the CPU backend adds the shared experts before the routed ones.
    const void *sh_w = nullptr;        // [n_embd, n_ff_sh]
    const float *sh_w_scale = nullptr; // FP8 only: [fp8_scale_count(n_embd, n_ff_sh, w_layout)]
    const bf16_t *sh_act = nullptr;    // [n_tokens, n_ff_sh]
    float *y_shared = nullptr;         // [n_tokens, n_embd]
    int64_t n_ff_sh = 0;
    // sh_act was written at least two launches back (moe_front before the routed gate/up): every
    // kernel waits before it releases the next, so that kernel has finished when this one starts,
    // and the shared slot is computed (its activations read through L2) and written before
    // pdl_wait, in the shadow of the previous kernel.
    bool sh_ready = false;
    // Per-slot mode, per-channel scales: output rows n per warp, 1, 2 or 4; anything else is
    // cudaErrorInvalidValue. More rows per warp, their loads issued together, a grid that many times
    // smaller; bit-identical output. 0 = the default: 2 where a lane's share of each routed row fits
    // in registers (16-byte rows of ≤ 3 vectors per lane, the 21B-A3B's FP8 rows), 1 otherwise.
    // (Block scales always take one row per warp.)
    int rows_per_warp = 0;
    // Per-slot mode: when set, moe_gate_up_gemv's slot_rows_done of the launch just before.
    // Instead of waiting for that whole kernel, each routed block waits until its slot's counter
    // reaches n_ff_exp (the slot's activations are all written), so the slots gate/up finished
    // first are projected while it still runs; only block (0, 0) waits for the kernel itself (the
    // launch after this one then still finds every launch before it finished). Needs sh_ready
    // with the shared slot; the counters are not reset here (moe_combine's reset does it).
    const unsigned *slot_rows_done = nullptr;
    // block128 (w and sh_w): expert e's [n_embd, n_ff_exp] matrix has its own grid
    // (fp8_stack_scale_index), the shared experts' one grid; needs n_ff_exp (and n_ff_sh) % 16 == 0
    // and 16-byte aligned weights and activations.
    scale_layout w_layout = scale_layout::channel;
};

void moe_down_gemv_ref(const moe_down_gemv_params &p);
#ifdef ES_KERNELS_HAVE_LAUNCHERS
cudaError_t launch_moe_down_gemv(const moe_down_gemv_params &p, cudaStream_t stream);
#endif

} // namespace es
