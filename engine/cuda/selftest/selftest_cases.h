// The self-test's case types: one aggregate per kernel (or kernel family) holding its shape, with
// name() for the row name and run() for the launch, the CPU twin and the rows with their limits
// (selftest_support.h: the case protocol). The table that lists them in order is in
// cuda_selftest.cpp; name() and run() live in the family's file: cases_misc.cpp, cases_gemv.cpp,
// cases_attention.cpp, cases_moe.cpp. The model checks (cases_models.cpp) are functions, one per
// row of the entry's model table.
#pragma once

#include "engine/cuda/selftest/selftest_support.h"

#include "kernels/attention.cuh"
#include "kernels/gemm_lt.cuh"
#include "kernels/moe_gate_up_gemv.cuh"
#include "kernels/moe_grouped_gemm.cuh"

#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace es::selftest {

// ---- cases_misc.cpp: elementwise, norm, rope, quantization, argmax, copy_bytes, topk -----------

struct fill_random_case {
    int64_t n;
    std::string name() const;
    void run(runner &R, const std::string &name) const;
};

struct embedding_case {
    int64_t T, V, H;
    std::string name() const;
    void run(runner &R, const std::string &name) const;
};

struct rms_norm_case {
    int64_t rows, H;
    bool delta, gather;
    std::string name() const;
    void run(runner &R, const std::string &name) const;
};

struct rope_kv_case {
    int64_t n_head, n_head_kv, hd;
    kv_format kv = kv_format::bf16;
    std::string name() const;
    void run(runner &R, const std::string &name) const;
};

struct silu_mul_case {
    int64_t T, F;
    std::string name() const;
    void run(runner &R, const std::string &name) const;
};

struct fp8_quantize_case {
    int64_t N, K;
    scale_layout L = scale_layout::channel;
    std::string name() const;
    void run(runner &R, const std::string &name) const;
};

struct fp8_dequantize_case {
    int64_t N, K;
    scale_layout L = scale_layout::channel;
    std::string name() const;
    void run(runner &R, const std::string &name) const;
};

struct act_quantize_case {
    int64_t M, K, ldx;
    fp8_format f;
    std::string name() const;
    void run(runner &R, const std::string &name) const;
};

struct argmax_case {
    int64_t rows, V;
    std::string name() const;
    void run(runner &R, const std::string &name) const;
};

// copy_bytes (the zero-copy I/O of decode graphs): pinned host memory to device memory and device
// memory to pinned host memory (the device reaching the host's pages directly), aligned and at odd
// offsets and sizes, against the twin's memcpy, exact; the bytes around the target untouched.
struct copy_bytes_case {
    size_t bytes, offset;
    std::string name() const;
    void run(runner &R, const std::string &name) const;
};

// copy_bytes with fed tokens (backend::submit): a step's input block from pinned memory, its n
// tokens at fed_offset mixing ids and placeholders −row − 1 (row 0's −1 first: a one-token
// step's only kind; the kernel loads row 0's candidate beside the block), patched from a [rows,
// stride] candidates array on the GPU, against the twin, exact.
struct copy_bytes_fed_case {
    int64_t n, rows;
    std::string name() const;
    void run(runner &R, const std::string &name) const;
};

// read_sum (the read-bandwidth probe's kernel) vs its twin: the XOR of every word, exact, for
// sizes inside one block, across many blocks and with a partial last round of loads.
struct read_sum_case {
    size_t bytes;
    unsigned blocks; // 0: the launcher's default grid
    std::string name() const;
    void run(runner &R, const std::string &name) const;
};

// topk_logits vs its twin: exact ids and values (set and order), row max exact, sums within 1e-5
// relative; launched twice (the per-row counters must re-arm), then timed (info row).
struct topk_logits_case {
    int64_t rows, V;
    int32_t N;
    std::string name() const;
    void run(runner &R, const std::string &name) const;
};

// sample_rows vs its twin: the same token from every row (flat, peaked, tied, NaN, −inf, ±0,
// +inf rows; greedy, temperature, top-k, top-p, min-p, penalties with a fed token), over `draws`
// draws each (the counter advancing), the drawn logit, the row max and the penalized logits exact;
// then timed (info rows) on flat rows at temperature 0.8, top-p 0.8.
struct sample_rows_case {
    int64_t rows, V;
    int32_t draws;
    std::string name() const;
    void run(runner &R, const std::string &name) const;
};

// ---- cases_gemv.cpp: the dense products (gemv, its pick and fusions, cuBLASLt) -----------------

struct gemv_case {
    weight_format f;
    int64_t M, N, K;
    bool acc;
    int splits = 0;
    scale_layout L = scale_layout::channel;
    std::string name() const;
    void run(runner &R, const std::string &name) const;
};

// gemv's greedy pick (gemv.cuh: gemv_pick) in the head's rows kernel: y against the twin, and the
// pick exactly what topk_logits_ref writes at n_top = 1 over the y the GPU wrote (the twin's y
// may round differently at a near-tie), over three launches (the warps' keys are rewritten each
// time); then the launch timed with and without the pick (info rows). case_: "random" (two equal
// top rows: the lower id wins), "nan-top" (the largest row NaN, BF16 weights: the next one wins),
// "zero" (x = 0: every value ±0, id 0), "nan" (x NaN: no value, id −1, value and max −inf).
struct gemv_pick_case {
    weight_format f;
    int64_t N, K;
    std::string case_;
    scale_layout L = scale_layout::channel;
    std::string name() const;
    void run(runner &R, const std::string &name) const;
};

// gemv's fusions (gemv.cuh): the input normalized in the kernel (norm_in) and/or the q|k|v
// projection's RoPE + KV-write epilogue, against the twin (rms_norm_ref, gemv_ref, rope_kv_ref).
// embd: the embedding folded in too (one token): the input row a table row, widened into the
// residual stream, which is checked exactly.
// normed: rope without the norm, x BF16 rows normalized already (decode's MoE layers, after a
// moe_combine with norm_out).
struct gemv_fused_case {
    weight_format f;
    int64_t T, H, n_head, n_head_kv, hd;
    bool rope;
    scale_layout L = scale_layout::channel;
    kv_format kv = kv_format::bf16;
    bool embd = false, normed = false;
    std::string name() const;
    void run(runner &R, const std::string &name) const;
};

// The cuBLASLt context the gemm_lt cases share: gemm_lt_context_case makes it, and it is
// destroyed with the last case that holds it. ready: the context case's R.run answered true (it
// does on success, on a failure that leaves CUDA usable, and when --only leaves the case out);
// after a sticky CUDA error the gemm_lt cases add no rows and the context is not destroyed.
struct gemm_lt_state {
    gemm_lt_context *ctx = nullptr;
    bool ready = false;
    gemm_lt_state() = default;
    gemm_lt_state(const gemm_lt_state &) = delete;
    gemm_lt_state &operator=(const gemm_lt_state &) = delete;
    ~gemm_lt_state();
};

struct gemm_lt_context_case {
    std::shared_ptr<gemm_lt_state> lt;
    std::string name() const { return "gemm_lt context"; }
    void run(runner &R, const std::string &name) const;
    void done(bool ok) const { lt->ready = ok; }
};

struct gemm_lt_case {
    std::shared_ptr<gemm_lt_state> lt;
    int64_t M, N, K;
    bool acc;
    bool wanted() const { return lt->ready; }
    std::string name() const;
    void run(runner &R, const std::string &name) const;
};

// The FP8 path: activations quantized by the twin (act_quantize is checked on its own), weights
// by fp8_quantize's twin, then cuBLASLt against gemm_lt_fp8_ref (the same product in fp32: only
// the summation order differs) and, without accumulation, against BF16 activations (what the
// activation quantization costs: ~6e-4 NMSE for E4M3's 3 mantissa bits, ~4× that for E5M2).
struct gemm_lt_fp8_case {
    std::shared_ptr<gemm_lt_state> lt;
    int cc_major;
    int64_t M, N, K;
    bool acc;
    fp8_format f;
    bool wanted() const { return lt->ready; }
    std::string name() const;
    void run(runner &R, const std::string &name) const;
};

// ---- cases_attention.cpp -----------------------------------------------------------------------

// seqs: (first position, token count) per sequence; tokens of a sequence are contiguous (the
// positions before the first are in the cache too). The name says " tc" when the tensor-core
// kernel runs (forced by path, or chosen by the automatic rule), " cuda-core" when forced off.
struct attention_case {
    int64_t n_head, n_head_kv, hd;
    std::vector<std::pair<int32_t, int32_t>> seqs;
    std::string label;
    int64_t splits = 1, bs = 16;
    attention_path path = attention_path::automatic;
    kv_format kv = kv_format::bf16;
    // The launcher's view of the shape (the device buffers are aligned): what decides the kernel.
    attention_params launch_shape() const;
    std::string name() const;
    void run(runner &R, const std::string &name) const;
};

// ---- cases_moe.cpp: the router, decode's expert kernels and prefill's grouped GEMM -------------

using mma_shape = moe_gate_up_gemv_params::mma_shape_t;

struct moe_router_case {
    int64_t T, H, E, K;
    bool all_tied;
    std::string name() const;
    void run(runner &R, const std::string &name) const;
};

// moe_gate_up_gemv, then moe_down_gemv on the twin's activations (rows named after each kernel).
// tm: the gate/up stack tile-major on the GPU (fp8_tile_major.cuh), the twin on the row-major
// one; the kernel's output is also compared bit for bit with its own on the row-major stack.
struct moe_gemv_case {
    weight_format f;
    int64_t T, H, E, K, Fe;
    scale_layout L = scale_layout::channel;
    int mma = 0;
    mma_shape ms = {};
    bool tm = false;
    std::string format_label() const; // what follows the dims in both kernels' row names
    std::string name() const;
    void run(runner &R, const std::string &name) const;
};

// moe_reroute against its twin: rules of every kind (routing_intervention.h) over random logits.
struct moe_reroute_case {
    int64_t T, E, K;
    std::string name() const;
    void run(runner &R, const std::string &name) const;
};

struct moe_router_norm_case {
    int64_t T, H, E, K;
    bool all_tied;
    std::string name() const;
    void run(runner &R, const std::string &name) const;
};

// moe_gate_up_gemv with the fused norm: a dense MLP (routed = false: ids null, one "expert") or
// routed experts.
struct gate_up_norm_case {
    weight_format f;
    int64_t T, H, F;
    bool routed;
    scale_layout L = scale_layout::channel;
    std::string name() const;
    void run(runner &R, const std::string &name) const;
};

struct moe_front_case {
    weight_format f;
    int64_t T, H, E, K, Fs;
    bool all_tied;
    scale_layout L = scale_layout::channel;
    std::string name() const;
    void run(runner &R, const std::string &name) const;
};

// moe_down_gemv's per-slot mode with the shared experts' slot, then moe_combine adding it first.
// ready: the shared slot before pdl_wait (sh_ready) and moe_combine's x_ready, as decode runs them
// (here the inputs were uploaded before the launch, which is what those flags promise).
// rpw: rows_per_warp, 0 = the kernel's default (2 for the 21B-A3B's FP8 widths and the small
// shapes, 1 for its BF16 ones); 1 = one row per warp; 2 or 4 also compare the slots with one row
// per warp's bit for bit.
struct moe_down_shared_case {
    weight_format f;
    int64_t T, H, E, K, Fe, Fs;
    bool ready;
    scale_layout L = scale_layout::channel;
    int rpw = 0;
    std::string name() const;
    void run(runner &R, const std::string &name) const;
};

// moe_combine with the next layer's norm (norm_out: one cluster a token), against the twin: the
// residual rows as the plain combine's (the same arithmetic), the normalized rows within BF16's
// rounding (the row's sum of squares in another order). Only where moe_combine_norm_ok holds.
struct moe_combine_norm_case {
    int64_t T, H, K;
    bool shared;
    std::string name() const;
    void run(runner &R, const std::string &name) const;
};

struct moe_combine_case {
    int64_t T, H, K;
    std::string name() const;
    void run(runner &R, const std::string &name) const;
};

// Decode's routed experts as the backend chains them with slot counters: moe_gate_up_gemv
// reporting each slot's rows, moe_down_gemv (per-slot, the shared slot before the wait) starting
// on a slot once its rows are in, back to back under programmatic launch (pdl) so the two
// kernels overlap, then moe_combine resetting the counters; against the twins' chain.
struct moe_slot_counters_case {
    weight_format f;
    int64_t T, H, E, K, Fe, Fs;
    int rpw;
    bool pdl;
    int mma = 0;
    mma_shape ms = {};
    bool tm = false;
    std::string name() const;
    void run(runner &R, const std::string &name) const;
};

// fp8_tile_major against its twin (bytes), and the twin's inverse restoring the row-major stack.
struct fp8_tile_major_case {
    int64_t E, F, H;
    std::string name() const;
    void run(runner &R, const std::string &name) const;
};

struct moe_plan_case {
    int64_t T, E, K;
    int64_t tile_rows = moe_grouped_gemm_tile_rows;
    std::string name() const;
    void run(runner &R, const std::string &name) const;
};

// counts (optional): the number of slots of each expert (summing to T·K), to place group sizes on
// the tile edges (0, 1, 63, 64, 65, 128 rows); otherwise random top-k with the last expert empty.
// lda_pad: activation rows longer than k (a k that is not a multiple of 8 with 16-byte aligned rows).
// tm: the weights tile-major; wg: the warpgroup-MMA kernel allowed (else mma.sync, whatever the
// GPU); qa: FP8 activations (1: E4M3, 2: E5M2), act_quantize's codes of the rows.
struct grouped_gemm_case {
    weight_format f;
    bool glu;
    int64_t T, K, E, k, n;
    int64_t lda_pad = 0;
    std::vector<int32_t> counts = {};
    scale_layout L = scale_layout::channel;
    bool tm = false, wg = false;
    int qa = 0;
    std::string name() const;
    void run(runner &R, const std::string &name) const;
};

// ---- cases_models.cpp: the model checks (rows of the entry's model table) -----------------------

// Every reference checkpoint under data_dir (folders with ref_logits.npy): the FP8 head copy's
// placement slack on the first, then per checkpoint the CPU reference and every precision variant.
void checkpoint_checks(runner &R, const std::filesystem::path &data_dir);
// Random weights of real shapes (no data needed).
void tile_major_model_check(runner &R, const std::filesystem::path &data_dir);
void head_pick_model_checks(runner &R, const std::filesystem::path &data_dir);
// The MoE reference checkpoints with FP8 routed activations.
void routed_fp8_model_checks(runner &R, const std::filesystem::path &data_dir);

// ---- cases_routing.cpp: expert interventions end to end ------------------------------------------

// Every reference checkpoint's interventions.json on the CUDA backend (BF16) against HF's logits
// under the same router change and against the CPU backend: prefill, decode, and a batch mixing
// an intervened sequence with a plain one; the routing record's padding and margins.
void intervention_model_checks(runner &R, const std::filesystem::path &data_dir);

// ---- cases_profiler.cpp: steps timed per phase, device memory across loads, the KV pool -----------

void phase_timing_checks(runner &R, const std::filesystem::path &data_dir);
void memory_cycle_checks(runner &R, const std::filesystem::path &data_dir);
// The KV pool mapped on demand: grown, its top blocks, trimmed (kv_pool_checks); a grow past the
// free memory through the backend and through the engine (kv_pool_oom_checks).
void kv_pool_checks(runner &R, const std::filesystem::path &data_dir);
void kv_pool_oom_checks(runner &R, const std::filesystem::path &data_dir);

} // namespace es::selftest
