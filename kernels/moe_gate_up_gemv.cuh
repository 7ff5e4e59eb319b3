// moe_gate_up_gemv: decode-sized routed-expert up-projection over the selected experts only.
// For each slot s = t·k_used + j (token t, choice j) with expert e = ids[s]:
//   act[s, f] = bf16(silu(g) · u),  g = scale_g · Wg_e[f] · x_t,  u = scale_u · Wu_e[f] · x_t
// Weights of all experts are one stack [n_expert, 2·n_ff_exp, n_embd] (gate rows, then up rows),
// BF16 or FP8 E4M3 with per-row scales [n_expert, 2·n_ff_exp] (or per 128×128 block of each
// expert: w_layout). With ids null every slot uses
// expert 0 (a dense MLP: n_expert_used = 1, the weights [2·n_ff, n_embd]). With norm on, x_t is
// the RMSNorm of the residual row norm.x[t], computed by every block (no separate rms_norm).
#pragma once

#include "kernels/kernel_common.h"

namespace es {

struct moe_gate_up_gemv_params {
    const bf16_t *x = nullptr;      // [n_tokens, n_embd] normalized hidden states (unused with norm)
    const int32_t *ids = nullptr;   // [n_tokens, n_expert_used], or null: expert 0 everywhere
    const void *w = nullptr;        // [n_expert, 2·n_ff_exp, n_embd]
    weight_format wfmt = weight_format::bf16;
    const float *w_scale = nullptr; // FP8 only: [n_expert · fp8_scale_count(2·n_ff_exp, n_embd, w_layout)]
    bf16_t *act = nullptr;          // [n_tokens·n_expert_used, n_ff_exp]
    int64_t n_tokens = 0, n_embd = 0, n_expert_used = 0, n_ff_exp = 0;
    norm_in norm; // fused input norm (kernel_common.h); off: x is read
    // block128: expert e's [2·n_ff_exp, n_embd] matrix has its own grid (fp8_stack_scale_index);
    // needs n_embd % 16 == 0 and 16-byte aligned weights (and x without the norm).
    scale_layout w_layout = scale_layout::channel;
    // When set ([n_tokens·n_expert_used], zero before the launch): every block, its rows written,
    // adds their count to its slot's counter, so moe_down_gemv (slot_rows_done) can start on a
    // slot as soon as its n_ff_exp rows are there instead of waiting for this whole kernel.
    unsigned *slot_rows_done = nullptr;
    // r > 0 (the backend's decode default: 1; ES_CUDA_MOE_MMA): FP8 with per-row scales, norm off,
    // n_embd % 64 == 0 and 16-byte aligned weights and x take tiles of 8·mma_shape.tiles rows on
    // tensor cores (moe_gate_up_mma.cuh; x widened to f16 there: exact for |x| in [2⁻¹⁴, 65504]),
    // the slot-major list of tiles taken by ⌈tiles / r⌉ blocks in r rounds (block b: tiles b, b + G,
    // …). One round (every tile at once, one wave at the 21B-A3B's 576 tiles) is the fast one; more
    // rounds let the first slots reach moe_down_gemv early but cost more than they gain
    // (docs/benchmarks.md, designs tried). 0: the CUDA-core kernel (a warp per row).
    int mma = 0;
    // The tensor-core kernel's shape (a measuring aid; the default is the fastest measured):
    // warps a block, row tiles of 8 f a block, chunks each warp's loads run ahead of its products —
    // the combinations moe_gate_up_gemv.cu instantiates (ES_MMA_SHAPES; moe_gate_up_mma_shape_ok) —
    // and wave: one resident wave of blocks (resident_blocks) taking the tiles in turn instead of r
    // rounds. Every shape gives the same sums for the same warps (each warp adds its chunks in
    // order, the warps' parts in order).
    struct mma_shape_t {
        int warps = 4, tiles = 2, depth = 1;
        bool wave = false;
    } mma_shape;
    // The stack tile-major (fp8_tile_major.cuh): only the tensor-core kernel reads it (mma > 0,
    // FP8 with per-row scales, norm off, n_ff_exp % 16 == 0, n_embd % 64 == 0, the default shape);
    // any other launch of it is refused.
    bool w_tile_major = false;
    // Set by the launcher (the caller's value is ignored): the leading fraction of each dense row
    // the fused-norm kernel sends towards L2 before the wait (kernel_common.h: l2_prefetch_max_bytes).
    float pre_l2_fraction = 1.0f;
};

// The fused norm's limits: n_embd % 4 == 0 and ≤ 24,576 (its BF16 row in 48 KB of shared
// memory), norm.x and norm.out 16-byte and norm.weight 8-byte aligned.
bool moe_gate_up_gemv_norm_ok(const moe_gate_up_gemv_params &p);

void moe_gate_up_gemv_ref(const moe_gate_up_gemv_params &p);
#ifdef ES_KERNELS_HAVE_LAUNCHERS
cudaError_t launch_moe_gate_up_gemv(const moe_gate_up_gemv_params &p, cudaStream_t stream);
// Whether the tensor-core kernel has an instance of this shape, for row-major stacks or (tile_major)
// for the tile-major layout (fp8_tile_major.cuh: four warps, 16-row tiles).
bool moe_gate_up_mma_shape_ok(const moe_gate_up_gemv_params::mma_shape_t &m, bool tile_major = false);
// Rows a warp of the fused-norm kernel takes: 2 or 3 (a measuring aid, ES_CUDA_NORM_ROWS); 0,
// the default, takes 3 where 2 would leave the grid more than one resident wave and 3 do not.
void set_moe_gate_up_norm_rows(int rows);
#endif

} // namespace es
