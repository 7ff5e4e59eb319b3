// gemv: decode-sized linear layer, y[m, :] (+)= x[m, :] · Wᵀ for a few tokens m, with BF16 or
// FP8 E4M3 weights W [n, k] (FP8: times w_scale[n], one fp32 scale per output channel), BF16
// activations and fp32 accumulation and output. `accumulate` adds into y (the residual stream:
// o_proj and down_proj fuse the residual add this way). Split-K (k_splits > 1) adds partial sums
// with atomics; the launcher picks it when n is too small to fill the GPU (k_splits = 0).
//
// Two fusions for the decode path's q/k/v projection (both optional):
// - `norm` (kernel_common.h: norm_in): the input is the fp32 residual stream norm.x [n_tokens, k],
//   normalized in every block (rms_norm's arithmetic) instead of BF16 x: no separate rms_norm launch.
// - `rope` (rope_on): W is the fused q|k|v projection and the epilogue applies rope_kv to the
//   outputs instead of writing y: q' → rope.q_out, k' and v → the K/V pools at the token's slot
//   (rope.qkv and rope.n_tokens are ignored). Needs no split-K and an even head_dim; with `norm`
//   the input is normalized in the kernel, without it x holds rows normalized already (decode's
//   MoE layers: moe_combine's norm output), and one token's rows of a matrix of at least
//   gemv_preload_min_bytes() load into registers before the wait, as plain rows do.
#pragma once

#include "kernels/kernel_common.h"
#include "kernels/rope_kv.cuh"

namespace es {

// The greedy pick fused into the one-token GEMV of very many rows (the LM head; gemv_pick_ok):
// besides y, what topk_logits writes for that row at n_top = 1 and T ≤ 0 — the id of its largest
// non-NaN value (ties → the lower id; −1 when every value is NaN), that value, the row max (the
// same value; −inf when there is none) and a row sum of 0 — so a greedy decode step needs no top-k
// after its head, only launch_gemv_pick_finish (one block) reducing the GEMV's warps' bests
// (warp_keys: GPU scratch of at least warp_keys_cap ≥ the grid's warps, rewritten every launch).
struct gemv_pick {
    int32_t *id = nullptr;
    float *value = nullptr;
    float *row_max = nullptr;
    double *row_sum = nullptr;
    unsigned long long *warp_keys = nullptr;
    unsigned warp_keys_cap = 0;
    bool on() const { return id != nullptr; }
};

struct gemv_params {
    const bf16_t *x = nullptr;        // [n_tokens, ldx]
    int64_t ldx = 0;
    const void *w = nullptr;          // [n, k] in wfmt
    weight_format wfmt = weight_format::bf16;
    const float *w_scale = nullptr;   // FP8 only: [fp8_scale_count(n, k, w_layout)]
    scale_layout w_layout = scale_layout::channel; // block128 needs k % 16 == 0 (the vector path)
    float *y = nullptr;               // [n_tokens, ldy]
    int64_t ldy = 0;
    int64_t n_tokens = 0, n = 0, k = 0;
    bool accumulate = false;
    int k_splits = 0;                 // 0: launcher decides; 1: no split
    // Accumulating into a y that no kernel of the last two launches writes (the residual stream
    // under o_proj and the FFN's down projection): y is read before the programmatic-launch wait.
    // Every kernel waits before it lets the next one launch (pdl_enter), so when this kernel
    // starts, the launch two back has finished; the read bypasses L1 (ld.global.cg).
    bool y_ready = false;
    norm_in norm;                     // fused RMSNorm of the input (then x is unused)
    // The embedding folded in (decode's first layer; one token, needs norm): the input rows are the table's
    // rows embd_table[embd_tokens[m]], BF16 widened exactly as the embedding kernel does, instead of
    // norm.x; one block also writes them, widened, to embd_out (the residual stream the layers add
    // into). norm.x must then point at embd_out (unread).
    const int32_t *embd_tokens = nullptr; // [n_tokens]
    const bf16_t *embd_table = nullptr;   // [vocab, k]
    float *embd_out = nullptr;            // [n_tokens, k]
    bool rope_on = false;             // fused RoPE + KV-write epilogue (then y is unused)
    rope_kv_params rope;
    // The epilogue's inputs (positions, sequences, block tables) were written by the kernel just
    // before (a decode graph's copy_bytes of its inputs): read after the wait, not before it.
    bool rope_inputs_after_wait = false;
    gemv_pick pick;                   // the greedy pick of y's row (gemv_pick_ok)
    // Set by launch_gemv (the caller's value is ignored): the leading fraction of each row's slice
    // sent towards L2 before the wait (kernel_common.h: l2_prefetch_max_bytes).
    float pre_l2_fraction = 1.0f;
};

// Shared memory the normalized rows may take (MT tokens × k BF16; the same with the embedding
// fold): under the default 48 KB per block.
inline constexpr int64_t gemv_norm_smem_max = 44 * 1024;
inline int64_t gemv_norm_smem_bytes(int64_t mt, int64_t k) { return mt * k * 2; }

// Whether launch_gemv takes these fused inputs/epilogues (shared memory for the normalized rows,
// 16-byte vectors, no split-K under rope): the backend falls back to separate launches otherwise.
bool gemv_fusion_ok(const gemv_params &p);
// Whether launch_gemv takes p with its greedy pick: one token, no fusion, no split-K, no
// accumulation, at least gemv_pick_min_rows rows, 16-byte vectors (the persistent rows kernel),
// every output and the warp keys given.
inline constexpr int64_t gemv_pick_min_rows = 32768;
bool gemv_pick_ok(const gemv_params &p);

void gemv_ref(const gemv_params &p);
#ifdef ES_KERNELS_HAVE_LAUNCHERS
// After launch_gemv(p) with p.pick on: the pick's last part (one block) on the same stream, with
// the same p; it writes pick.id, value, row_max and row_sum.
cudaError_t launch_gemv_pick_finish(const gemv_params &p, cudaStream_t stream);
cudaError_t launch_gemv(const gemv_params &p, cudaStream_t stream);
// One-token GEMVs of matrices of at least this many bytes (default 4 MiB) load a lane's share of
// its row into registers before the programmatic-launch wait instead of asking L2 for it (gemv.cu:
// PRE). Process-wide; a measuring aid (ES_CUDA_GEMV_PRELOAD_MIN_KB).
void set_gemv_preload_min_bytes(int64_t bytes);
int64_t gemv_preload_min_bytes();
#endif

} // namespace es
