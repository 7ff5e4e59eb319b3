// moe_grouped_gemm: prefill-sized routed-expert GEMM over the selected experts only, all experts
// in one launch, driven by moe_plan's grouping (so no copy back to the host). For every slot s in
// expert e's group, with activation row a_s = a[s / a_row_div]:
//   glu:   out_act[s, f] = bf16(silu(sg · Wg_e[f]·a_s) · su · Wu_e[f]·a_s)   (gate rows f, up rows n + f)
//   plain: out_f32[s, c] = sc · W_e[c]·a_s
// Weights: one stack [n_expert, w_rows, k] (w_rows = 2n for glu, else n), BF16 or FP8 E4M3 with
// per-row scales [n_expert, w_rows] (or per 128×128 block: w_layout). Tensor cores (mma.sync BF16, fp32 accumulate); FP8 weights
// are staged as bytes, widened to BF16 exactly in registers and scaled in the epilogue. Row tiles
// of moe_grouped_gemm_tile_rows slots, one expert each (moe_plan's tile_rows must match).
#pragma once

#include "kernel_common.h"

namespace es {

struct moe_grouped_gemm_params {
    const bf16_t *a = nullptr; // activation rows [*, lda]
    int64_t lda = 0;
    int64_t a_row_div = 1; // n_expert_used when a holds token rows, 1 when slot rows
    const int32_t *sorted_slots = nullptr, *offsets = nullptr, *tile_offsets = nullptr; // moe_plan
    int64_t n_expert = 0;
    int64_t max_tiles = 0;   // moe_plan_max_tiles(…, moe_grouped_gemm_tile_rows)
    const void *w = nullptr; // [n_expert, w_rows, k]
    weight_format wfmt = weight_format::bf16;
    const float *w_scale = nullptr; // FP8 only: [n_expert · fp8_scale_count(w_rows, k, w_layout)]
    int64_t k = 0, n = 0;
    bool glu = false;
    bf16_t *out_act = nullptr; // glu: [slots, ldo]
    float *out_f32 = nullptr;  // plain: [slots, ldo]
    int64_t ldo = 0;
    // block128: expert e's [w_rows, k] matrix has its own grid (fp8_stack_scale_index); each FP8
    // weight is widened to bf16(e4m3 · its block's scale) as the B fragments are built (a
    // 64-wide k stage lies in one 128 block), fp8_dequantize's value, and no epilogue scale.
    scale_layout w_layout = scale_layout::channel;
    // The stack tile-major (fp8_tile_major.cuh): FP8 with per-row scales, glu, n % 16 == 0,
    // k % 64 == 0, 16-byte aligned weights; each 16-byte vector is read from its place there.
    bool w_tile_major = false;
};

inline constexpr int64_t moe_grouped_gemm_tile_rows = 64;

void moe_grouped_gemm_ref(const moe_grouped_gemm_params &p);
#ifdef ES_KERNELS_HAVE_LAUNCHERS
cudaError_t launch_moe_grouped_gemm(const moe_grouped_gemm_params &p, cudaStream_t stream);
#endif

} // namespace es
