// moe_grouped_gemm: prefill-sized routed-expert GEMM over the selected experts only, all experts
// in one launch, driven by moe_plan's grouping (so no copy back to the host). For every slot s in
// expert e's group, with activation row a_s = a[s / a_row_div]:
//   glu:   out_act[s, f] = bf16(silu(sg · Wg_e[f]·a_s) · su · Wu_e[f]·a_s)   (gate rows f, up rows n + f)
//   plain: out_f32[s, c] = sc · W_e[c]·a_s
// Weights: one stack [n_expert, w_rows, k] (w_rows = 2n for glu, else n), BF16 or FP8 E4M3 with
// per-row scales [n_expert, w_rows] (or per 128×128 block: w_layout). Tensor cores, fp32
// accumulators: on Hopper (compute capability 9.0, an sm_90a build) FP8 stacks with per-row
// scales run on warpgroup MMA (wgmma, operands from shared memory: the weights widened to BF16
// exactly there, or with FP8 activations both FP8 as they are) in row tiles of 128 slots;
// everything else on mma.sync BF16 (FP8 staged as
// bytes, widened in registers) in row tiles of 64. Either way the weights' scales are applied in
// the epilogue. A row tile holds one expert's slots; moe_plan's tile_rows must be the kernel's
// (moe_grouped_gemm_plan_rows).
#pragma once

#include "kernels/kernel_common.h"

namespace es {

struct moe_grouped_gemm_params {
    const bf16_t *a = nullptr; // activation rows [*, lda]
    int64_t lda = 0;
    // FP8 activations instead of a (moe_grouped_gemm_fp8_act_ok: compute capability 8.9 and
    // later, on either kernel; lda % 16 == 0, 16-byte aligned codes):
    // codes [*, lda] in a_fmt (act_quantize's) with one fp32 scale per row, so that
    //   glu:   out_act[s, f] = bf16(silu(sa · sg · Σ qa·Wg_e[f]) · sa · su · Σ qa·Wu_e[f])
    //   plain: out_f32[s, c] = sa · sc · Σ qa·W_e[c]          (sa = a_scale[s / a_row_div])
    // on FP8 × FP8 tensor cores, the codes' products summed in fp32 as they are.
    const fp8_t *a_q = nullptr;
    const float *a_scale = nullptr;
    fp8_format a_fmt = fp8_format::e4m3;
    int64_t a_row_div = 1; // n_expert_used when a holds token rows, 1 when slot rows
    const int32_t *sorted_slots = nullptr, *offsets = nullptr, *tile_offsets = nullptr; // moe_plan
    int64_t n_expert = 0;
    int64_t max_tiles = 0;   // moe_plan_max_tiles(…, tile_rows)
    int64_t tile_rows = 64;  // the plan's row tile: moe_grouped_gemm_plan_rows(p) (64 or 128)
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
    // Hopper's warpgroup MMA for FP8 stacks with per-row scales where it applies (a GPU of
    // compute capability 9.0, a build with sm_90a, k % 16 == 0, 16-byte aligned operands and
    // rows, i.e. lda % 8 == 0 for a, lda % 16 == 0 for a_q): moe_grouped_gemm_wgmma_ok.
    // Otherwise, or when false, the mma.sync kernel (BF16 activations only).
    bool allow_wgmma = true;
};

inline constexpr int64_t moe_grouped_gemm_tile_rows = 64;        // the mma.sync kernel's row tile
inline constexpr int64_t moe_grouped_gemm_wgmma_tile_rows = 128; // the warpgroup-MMA kernel's
// The engine takes the warpgroup-MMA kernel for steps of at least this many slots (tokens ·
// experts used) per expert on average. H200, the 21B-A3B's widths (64 experts, top-6), FP8
// activations on both kernels (ES_CUDA_MOE_WGMMA_MIN; docs/benchmarks.md): prefill tok/s with
// wgmma from 0 / 4 / 16 slots an expert, 32 tokens (3 an expert) 4,562 / 4,421 / 4,375, 64 (6)
// 7,910 / 7,895 / 7,385, 128 (12) 13,467 / 13,530 / 11,888; batched decode tok/s with wgmma from
// 0 / 16, 32 sequences 3,088 / 3,185, 64 5,629 / 5,553, 128 10,122 / 9,639. Around 3 an expert the two
// kernels are even (the weights' streaming bounds both); from 6 on wgmma wins.
inline constexpr int64_t moe_grouped_gemm_wgmma_min_slots_per_expert = 4;

void moe_grouped_gemm_ref(const moe_grouped_gemm_params &p);
#ifdef ES_KERNELS_HAVE_LAUNCHERS
// The current device runs the warpgroup-MMA kernel: compute capability 9.0 and sm_90a code in
// this build.
bool moe_grouped_gemm_wgmma_device();
// The current device runs FP8 × FP8 MMAs (mma.sync m16n8k32): compute capability 8.9 and later
// with code for it in this build; FP8 activations then go to either kernel.
bool moe_grouped_gemm_fp8_mma_device();
// True when launch_moe_grouped_gemm takes p with FP8 activations (p.a_q) on the current device.
bool moe_grouped_gemm_fp8_act_ok(const moe_grouped_gemm_params &p);
// True when launch_moe_grouped_gemm takes the warpgroup-MMA kernel for p on the current device
// (it reads neither the plan nor the outputs, so it can be asked before the plan is made).
bool moe_grouped_gemm_wgmma_ok(const moe_grouped_gemm_params &p);
// The row tile the plan must use for p (moe_plan_params::tile_rows, p.tile_rows, p.max_tiles):
// moe_grouped_gemm_wgmma_tile_rows where the warpgroup-MMA kernel applies, else
// moe_grouped_gemm_tile_rows. launch_moe_grouped_gemm refuses a p.tile_rows that differs.
int64_t moe_grouped_gemm_plan_rows(const moe_grouped_gemm_params &p);
cudaError_t launch_moe_grouped_gemm(const moe_grouped_gemm_params &p, cudaStream_t stream);
#endif

} // namespace es
