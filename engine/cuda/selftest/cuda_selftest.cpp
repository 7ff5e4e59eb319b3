// The CUDA self-test's entry (cuda_selftest.h): probes the device, builds the table of kernel
// cases and walks it, then the model checks. The table lists every case once, in the order its
// rows appear; the cases draw their random inputs from one generator in that order, so the order
// is part of every row's inputs and a new case goes where its rows belong.
#include "engine/cuda/selftest/cuda_selftest.h"

#include "engine/cuda/selftest/selftest_cases.h"

#include "engine/cuda/backend/cuda_backend.h"
#include "engine/cuda/cuda_loader.h"
#include "engine/cuda/cuda_module_abi.h"

#include <cstdio>

namespace es {

namespace selftest {
namespace {

// ---- the kernel table, in sections of consecutive cases ----------------------------------------

void norm_rope_cases(case_list &c) {
    add(c, fill_random_case{1 << 20});
    add(c, embedding_case{7, 1000, 40});
    add(c, embedding_case{1, 103424, 64});
    add(c, embedding_case{3, 5000, 2560}); // 16-byte vectors, a partial last round
    add(c, embedding_case{2, 300, 36});    // 4-element loads, one partial round
    add(c, embedding_case{2, 300, 38});    // a width that is no multiple of 4: one element at a time
    add(c, rms_norm_case{5, 40, true, false});
    add(c, rms_norm_case{3, 2560, false, false});
    add(c, rms_norm_case{4, 1024, false, true});
    add(c, rope_kv_case{6, 2, 12});
    add(c, rope_kv_case{16, 2, 128});
    // FP8 KV cache: the writers (rope_kv, the q/k/v GEMV's epilogue).
    add(c, rope_kv_case{6, 2, 12, kv_format::fp8_e4m3});
    add(c, rope_kv_case{16, 2, 128, kv_format::fp8_e4m3});
}

void gemv_fused_cases(case_list &c) {
    add(c, gemv_fused_case{weight_format::fp8_e4m3, 1, 2560, 20, 4, 128, true, scale_layout::channel,
                           kv_format::fp8_e4m3});
    add(c, gemv_fused_case{weight_format::bf16, 5, 1024, 16, 2, 64, true, scale_layout::channel,
                           kv_format::fp8_e4m3});
    add(c, gemv_fused_case{weight_format::bf16, 3, 96, 6, 2, 12, true, scale_layout::channel,
                           kv_format::fp8_e4m3});
    for (weight_format f : {weight_format::fp8_e4m3, weight_format::bf16}) {
        add(c, gemv_fused_case{f, 1, 1024, 16, 2, 64, true});  // 0.3B decode
        add(c, gemv_fused_case{f, 1, 2560, 20, 4, 128, true}); // 21B-A3B decode
        add(c, gemv_fused_case{f, 1, 1024, 16, 2, 64, true, scale_layout::channel, kv_format::bf16,
                               true}); // layer 0
        add(c,
            gemv_fused_case{f, 1, 2560, 20, 4, 128, true, scale_layout::channel, kv_format::fp8_e4m3, true});
        add(c, gemv_fused_case{f, 1, 96, 6, 2, 12, false, scale_layout::channel, kv_format::bf16,
                               true});                         // no rope
        add(c, gemv_fused_case{f, 5, 2560, 20, 4, 128, true}); // batch 5: MT = 8, three rows idle
        add(c, gemv_fused_case{f, 8, 2560, 20, 4, 128, true});
        add(c, gemv_fused_case{f, 3, 96, 6, 2, 12, true});     // head_dim / 2 odd
        add(c, gemv_fused_case{f, 2, 96, 5, 1, 6, true});      // 42 rows: the last block half empty
        add(c, gemv_fused_case{f, 2, 1024, 16, 2, 64, false}); // norm only
        // The input normalized already (moe_combine's norm_out): the 21B-A3B's one-token shape loads
        // its rows into registers before the wait; the 0.3B's and batches do not.
        add(c, gemv_fused_case{f, 1, 2560, 20, 4, 128, true, scale_layout::channel, kv_format::bf16, false,
                               true});
        add(c, gemv_fused_case{f, 1, 2560, 20, 4, 128, true, scale_layout::channel, kv_format::fp8_e4m3,
                               false, true});
        add(c, gemv_fused_case{f, 1, 2048, 16, 4, 128, true, scale_layout::channel, kv_format::bf16, false,
                               true});
        add(c, gemv_fused_case{f, 1, 1024, 16, 2, 64, true, scale_layout::channel, kv_format::fp8_e4m3, false,
                               true});
        add(c, gemv_fused_case{f, 5, 2560, 20, 4, 128, true, scale_layout::channel, kv_format::bf16, false,
                               true});
        add(c, gemv_fused_case{f, 2, 96, 5, 1, 6, true, scale_layout::channel, kv_format::bf16, false, true});
        // One token, matrices of 6 MB and more: uneven lanes (FP8 2,000: 125 vectors), norm only.
        add(c, gemv_fused_case{f, 1, f == weight_format::fp8_e4m3 ? 2000 : 1024, 32, 8, 64, true});
        add(c, gemv_fused_case{f, 1, f == weight_format::fp8_e4m3 ? 2560 : 1280, 32, 8, 128, false});
    }
}

void attention_cases(case_list &c) {
    add(c, attention_case{16, 2, 128, {{0, 37}}, "prefill 37"});
    add(c, attention_case{6, 2, 12, {{50, 3}, {0, 20}}, "2 seqs"});
    add(c, attention_case{20, 4, 128, {{300, 1}}, "decode pos 300"});
    add(c, attention_case{20, 4, 128, {{0, 1}}, "decode pos 0"});
    add(c, attention_case{40, 1, 64, {{10, 5}}, "group 40"});
    add(c, attention_case{8, 8, 256, {{0, 2}, {33, 1}}, "hd 256"});
    add(c, attention_case{20, 4, 128, {{300, 1}}, "decode pos 300", 16});
    add(c, attention_case{16, 2, 128, {{2047, 1}}, "decode pos 2047", 16});
    add(c, attention_case{6, 2, 12, {{50, 3}, {0, 20}}, "2 seqs", 4});
    add(c, attention_case{40, 1, 64, {{10, 5}}, "group 40", 3});
    // The decode kernel (attention_decode_ok: ≤ 8 rows per tile, head_dim 64/128/256).
    add(c, attention_case{16, 2, 128, {{5, 1}, {100, 1}, {700, 1}, {31, 1}}, "decode batch 4"});
    add(c, attention_case{16, 2, 128, {{5, 1}, {100, 1}, {700, 1}, {31, 1}}, "decode batch 4", 4});
    add(c, attention_case{16, 2, 128, {{0, 1}}, "decode pos 0", 16});
    add(c, attention_case{20, 4, 128, {{127, 1}, {1000, 1}}, "decode batch 2", 16});
    // Past a cluster's 16 splits (merged through memory), deep enough that each walks many
    // pipelined chunks; an FP8 cache; a batch with a short sequence beside the deep one.
    add(c, attention_case{20, 4, 128, {{9000, 1}}, "decode pos 9000", 32});
    add(c, attention_case{20, 4, 128, {{9000, 1}}, "decode pos 9000 fp8", 32, 16, attention_path::automatic,
                          kv_format::fp8_e4m3});
    add(c, attention_case{20, 4, 128, {{9000, 1}, {40, 1}}, "decode batch 2 deep", 32});
    add(c, attention_case{20, 4, 128, {{20000, 1}}, "decode pos 20000", 64});
    add(c, attention_case{8, 2, 64, {{40, 2}}, "decode 2 tokens", 2});
    add(c, attention_case{4, 2, 256, {{63, 1}, {64, 1}}, "decode hd 256", 5});
    // Tensor-core (prefill) kernel: chunk lengths around the 16-row MMA tile and the 64-key KV
    // tile, from position 0 and from 37 (a cached prefix), group 8 (0.3B) and 5 (21B-A3B), block
    // size 16 and 7 (key tiles crossing blocks), two sequences in one batch (a CTA whose two
    // planner tiles belong to different sequences), head_dim 64.
    const auto tc = attention_path::tensor_core;
    const auto chunk = [](int32_t n, int32_t at) {
        return "prefill " + std::to_string(n) + " at " + std::to_string(at);
    };
    for (int32_t n : {1, 15, 16, 17, 64, 200, 700})
        for (int32_t at : {0, 37}) add(c, attention_case{16, 2, 128, {{at, n}}, chunk(n, at), 1, 16, tc});
    for (int32_t n : {1, 17, 200, 700})
        add(c, attention_case{20, 4, 128, {{37, n}}, chunk(n, 37), 1, 16, tc});
    add(c, attention_case{20, 4, 128, {{0, 64}}, "prefill 64 at 0", 1, 16, tc});
    add(c, attention_case{16, 2, 128, {{37, 200}}, "prefill 200 at 37", 1, 7, tc});
    add(c, attention_case{20, 4, 128, {{0, 700}}, "prefill 700 at 0", 1, 7, tc});
    add(c, attention_case{16, 2, 128, {{37, 198}, {0, 17}}, "2 seqs", 1, 16, tc});
    add(c, attention_case{20, 4, 128, {{0, 15}, {100, 64}}, "2 seqs", 1, 7, tc});
    add(c, attention_case{20, 4, 128, {{5, 3}, {300, 1}, {0, 40}, {64, 1}}, "4 seqs", 1, 16, tc});
    add(c, attention_case{8, 1, 64, {{37, 200}}, "prefill 200 at 37", 1, 16, tc});
    add(c, attention_case{10, 2, 64, {{0, 64}, {20, 33}}, "2 seqs", 1, 7, tc});
    add(c, attention_case{16, 2, 128, {{37, 17}}, "prefill 17 at 37", 1, 1, tc});
    // 20 single decode tokens: every tensor-core CTA runs two passes (its tiles are of two
    // sequences); the automatic rule gives such a batch to the CUDA-core kernel.
    std::vector<std::pair<int32_t, int32_t>> decodes;
    for (int32_t i = 0; i < 20; ++i) decodes.push_back({37 * i, 1});
    add(c, attention_case{16, 2, 128, decodes, "20 decode tokens", 1, 16, tc});
    add(c, attention_case{16, 2, 128, decodes, "20 decode tokens"});
    // The automatic choice on a prefill chunk (tensor cores), and the CUDA-core kernel on one.
    add(c, attention_case{16, 2, 128, {{100, 300}}, "prefill 300 at 100"});
    add(c, attention_case{16, 2, 128, {{37, 200}}, "prefill 200 at 37", 1, 7, attention_path::cuda_core});
    // FP8 KV cache: every reader. The decode kernel at head_dim 64 / 128 / 256, with and without
    // splits; the general kernel (16-byte and pairwise staging, splits); the tensor-core kernel.
    {
        const auto f8kv = kv_format::fp8_e4m3;
        const auto au = attention_path::automatic, cc = attention_path::cuda_core;
        add(c, attention_case{
                   16, 2, 128, {{5, 1}, {100, 1}, {700, 1}, {31, 1}}, "decode batch 4", 1, 16, au, f8kv});
        add(c, attention_case{
                   16, 2, 128, {{5, 1}, {100, 1}, {700, 1}, {31, 1}}, "decode batch 4", 4, 16, au, f8kv});
        add(c, attention_case{20, 4, 128, {{300, 1}}, "decode pos 300", 16, 16, au, f8kv});
        add(c, attention_case{16, 2, 128, {{2047, 1}}, "decode pos 2047", 16, 7, au, f8kv});
        add(c, attention_case{16, 2, 128, {{0, 1}}, "decode pos 0", 16, 16, au, f8kv});
        add(c, attention_case{8, 2, 64, {{40, 2}}, "decode 2 tokens", 2, 16, au, f8kv});
        add(c, attention_case{8, 1, 64, {{500, 1}, {3, 1}}, "decode batch 2", 8, 16, au, f8kv});
        add(c, attention_case{4, 2, 256, {{63, 1}, {64, 1}}, "decode hd 256", 5, 16, au, f8kv});
        add(c, attention_case{4, 2, 256, {{700, 1}}, "decode hd 256", 1, 16, au, f8kv});
        add(c, attention_case{40, 1, 64, {{10, 5}}, "group 40", 3, 16, au, f8kv});
        add(c, attention_case{6, 2, 12, {{50, 3}, {0, 20}}, "2 seqs", 4, 4, au, f8kv});
        add(c, attention_case{8, 8, 256, {{0, 2}, {33, 1}}, "hd 256", 1, 16, cc, f8kv});
        add(c, attention_case{16, 2, 128, {{37, 200}}, "prefill 200 at 37", 1, 7, cc, f8kv});
        add(c, attention_case{16, 2, 128, {{37, 200}}, "prefill 200 at 37", 1, 7, tc, f8kv});
        add(c, attention_case{16, 2, 128, {{0, 17}}, "prefill 17 at 0", 1, 16, tc, f8kv});
        add(c, attention_case{20, 4, 128, {{0, 700}}, "prefill 700 at 0", 1, 16, tc, f8kv});
        add(c, attention_case{20, 4, 128, {{5, 3}, {300, 1}, {0, 40}, {64, 1}}, "4 seqs", 1, 16, tc, f8kv});
        add(c, attention_case{8, 1, 64, {{37, 200}}, "prefill 200 at 37", 1, 16, tc, f8kv});
        add(c, attention_case{10, 2, 64, {{0, 64}, {20, 33}}, "2 seqs", 1, 7, tc, f8kv});
        add(c,
            attention_case{16, 2, 128, {{100, 300}}, "prefill 300 at 100", 1, 16, au, f8kv}); // automatic: tc
    }
}

void silu_mul_router_cases(case_list &c) {
    add(c, silu_mul_case{3, 100});
    add(c, silu_mul_case{1, 1536});
    add(c, silu_mul_case{70, 3072}); // the four-wide kernel: rows of 768 groups, three blocks a row
    add(c, silu_mul_case{5, 1028});  // the four-wide kernel, a partial last block
    add(c, silu_mul_case{3, 102});   // rows of no multiple of 4: the grid-stride kernel
    add(c, moe_router_case{5, 2560, 64, 6, false});
    add(c, moe_router_case{7, 40, 6, 3, false});
    add(c, moe_router_case{2, 64, 8, 2, true});
    // Steps of 64 tokens and more take the token-tiled kernel (16 tokens × 8 experts a block): a
    // partial last group of tokens, fewer experts than a block's warps, more than 64 experts (the
    // general tail), all tied.
    add(c, moe_router_case{80, 2560, 64, 6, false});
    add(c, moe_router_case{129, 40, 6, 3, false});
    add(c, moe_router_case{70, 128, 160, 8, false});
    add(c, moe_router_case{64, 64, 8, 2, true});
    add(c, moe_reroute_case{9, 64, 8});   // the 21B-A3B's 64 experts, k up to 8
    add(c, moe_reroute_case{300, 160, 10}); // more experts than a warp's lanes hold twice
}

void gemv_cases(case_list &c) {
    const auto bf = weight_format::bf16, f8 = weight_format::fp8_e4m3;
    for (auto f : {bf, f8}) {
        add(c, gemv_case{f, 1, 2560, 2560, false});
        add(c, gemv_case{f, 1, 40003, 1024, false}); // the head's kernel (≥ 32,768 rows), a partial last warp
        add(c, gemv_case{f, 1, 103424, 1024, false}); // the 0.3B's head: several row groups a warp (one wave)
        // The greedy pick in the head's kernel: the heads of both shapes, a partial last group and
        // warp (40,003 rows), and the edge rows.
        add(c, gemv_pick_case{f, 103424, 2560, "random"});
        add(c, gemv_pick_case{f, 40003, 1024, "random"});
        add(c, gemv_pick_case{f, 103424, 1024, "zero"});
        add(c, gemv_pick_case{f, 40003, 1024, "nan"});
        if (f == bf) add(c, gemv_pick_case{f, 40003, 1024, "nan-top"});
        add(c, gemv_case{f, 1, 32769, 512, true});
        add(c, gemv_case{f, 3, 1000, 40, false});
        add(c, gemv_case{f, 13, 100, 100, false});
        add(c, gemv_case{f, 1, 64, 2560, false});
        add(c, gemv_case{f, 2, 512, 1024, true, 4});
        add(c, gemv_case{f, 8, 1536, 2560, true});
        // One token, a lane's share of the row preloaded before the wait (≤ 6 vectors, ≥ 4 MB):
        // the whole six, an uneven last round and a partial last block; then a matrix below 4 MB
        // (the L2 path).
        add(c, gemv_case{f, 1, 2048, f == f8 ? 3072 : 1536, true});
        add(c, gemv_case{f, 1, 4100, 1040, false});
        add(c, gemv_case{f, 1, 700, 40, true});
    }
}

// The FP8 weight quantization, the GEMVs on block scales, the activation quantization.
void quantize_cases(case_list &c) {
    add(c, fp8_quantize_case{64, 2560});
    add(c, fp8_dequantize_case{33, 100});
    // 128×128 block scales: partial blocks in both dimensions, the GEMV's paths (one row per warp,
    // the head's rows kernel, split-K, eight tokens, the fused q/k/v launch).
    const scale_layout blk = scale_layout::block128;
    add(c, fp8_quantize_case{300, 2600, blk});
    add(c, fp8_dequantize_case{200, 272, blk});
    add(c, gemv_case{weight_format::fp8_e4m3, 1, 2560, 2560, false, 0, blk});
    add(c, gemv_case{weight_format::fp8_e4m3, 1, 40003, 1024, false, 0, blk});
    add(c, gemv_pick_case{weight_format::fp8_e4m3, 40003, 1024, "random", blk});
    add(c, gemv_case{weight_format::fp8_e4m3, 2, 512, 1024, true, 4, blk});
    add(c, gemv_case{weight_format::fp8_e4m3, 8, 1536, 2560, true, 0, blk});
    add(c, gemv_case{weight_format::fp8_e4m3, 3, 1000, 48, false, 0, blk});
    add(c, gemv_fused_case{weight_format::fp8_e4m3, 1, 2560, 20, 4, 128, true, blk});
    add(c, gemv_fused_case{weight_format::fp8_e4m3, 3, 96, 6, 2, 12, true, blk});
    add(c, gemv_fused_case{weight_format::fp8_e4m3, 1, 2560, 20, 4, 128, true, blk, kv_format::bf16, false,
                           true});
    for (auto f : {fp8_format::e4m3, fp8_format::e5m2}) {
        add(c, act_quantize_case{6, 2560, 2560, f}); // 16-byte path
        add(c, act_quantize_case{7, 100, 104, f});   // k not a multiple of 8: element path
        add(c, act_quantize_case{9, 40, 48, f});     // k not a multiple of 16, padded rows
    }
    add(c, act_quantize_case{300, 1024, 1024, fp8_format::e4m3});
}

void moe_decode_cases(case_list &c) {
    const auto bf = weight_format::bf16, f8 = weight_format::fp8_e4m3;
    for (auto f : {bf, f8}) {
        add(c, moe_gemv_case{f, 1, 2560, 8, 6, 1536});
        add(c, moe_gemv_case{f, 3, 40, 6, 3, 24});
        add(c, moe_gemv_case{f, 8, 2560, 64, 6, 1536}); // the most tokens decode runs through these
        // 125 vectors a row (lanes of 4 and of 3), a partial block of gate/up rows
        add(c, moe_gemv_case{f, 2, f == f8 ? 2000 : 1000, 8, 3, 37});
    }
    // The fused decode kernels: the 21B-A3B's widths (hidden 2560, 64 experts, top-6, expert FFN
    // 1536, shared FFN 3072, dense FFN 12288), the 0.3B's (hidden 1024, FFN 3072), odd shapes
    // (hidden not a multiple of 8 or 16: scalar paths; FFN widths that leave partial blocks; an
    // odd expert count), 1–4 tokens, router ties.
    add(c, moe_router_norm_case{1, 2560, 64, 6, false});
    add(c, moe_router_norm_case{3, 44, 7, 3, false});
    add(c, moe_router_norm_case{2, 64, 8, 2, true});
    for (auto f : {bf, f8}) {
        // (At 132 SMs the first and the 12,300-row one take three rows a warp, the last block of
        // the latter partial: moe_gate_up_gemv.cu, launch_norm.)
        add(c, gate_up_norm_case{f, 1, 2560, 12288, false});
        add(c, gate_up_norm_case{f, 1, 2560, 12300, false});
        add(c, gate_up_norm_case{f, 2, 2560, 12288, false});
        add(c, gate_up_norm_case{f, 1, 1024, 3072, false});
        add(c, gate_up_norm_case{f, 2, 1024, 3072, false});
        add(c, gate_up_norm_case{f, 2, 44, 23, false});
        add(c, gate_up_norm_case{f, 3, 40, 37, true});
        add(c, gate_up_norm_case{f, 1, 2560, 1536, true});
        add(c, moe_front_case{f, 1, 2560, 64, 6, 3072, false});
        add(c, moe_front_case{f, 2, 2560, 64, 6, 3072, false});
        add(c, moe_front_case{f, 3, 2560, 64, 6, 3072, false});
        add(c, moe_front_case{f, 4, 2560, 64, 6, 3072, false});
        add(c, moe_front_case{f, 3, 44, 7, 3, 23, false});
        add(c, moe_front_case{f, 1, 40, 6, 2, 0, false});
        add(c, moe_front_case{f, 4, 64, 8, 2, 48, true});
        add(c, moe_front_case{f, 2, 1024, 64, 6, 3072, true});
        add(c, moe_down_shared_case{f, 1, 2560, 8, 6, 1536, 3072, true});
        add(c, moe_down_shared_case{f, 1, 2560, 8, 6, 1536, 3072, false});
        add(c, moe_down_shared_case{f, 4, 2560, 8, 6, 1536, 3072, true});
        add(c, moe_down_shared_case{f, 8, 2560, 64, 6, 1536, 3072, false});
        add(c, moe_down_shared_case{f, 3, 40, 6, 3, 24, 40, false});
        add(c, moe_down_shared_case{f, 2, 44, 5, 2, 23, 17, true});
        // Rows per warp (the cases above: the default): the 21B-A3B's widths at one row per warp,
        // and at 2 and 4 (FP8: every vector loaded first; BF16: 6 vectors a lane, one row after
        // another), 640-wide rows (unequal lanes) with 101 rows (a warp partly past the end, routed
        // and shared), odd widths (scalar paths), the shared slot before and after the wait.
        add(c, moe_down_shared_case{f, 1, 2560, 8, 6, 1536, 3072, true, scale_layout::channel, 1});
        add(c, moe_down_shared_case{f, 4, 2560, 8, 6, 1536, 3072, false, scale_layout::channel, 1});
        for (int rpw : {2, 4}) {
            add(c, moe_down_shared_case{f, 1, 2560, 8, 6, 1536, 3072, true, scale_layout::channel, rpw});
            add(c, moe_down_shared_case{f, 1, 2560, 8, 6, 1536, 3072, false, scale_layout::channel, rpw});
            add(c, moe_down_shared_case{f, 2, 101, 7, 4, 640, 96, false, scale_layout::channel, rpw});
            add(c, moe_down_shared_case{f, 3, 40, 6, 3, 24, 40, true, scale_layout::channel, rpw});
            add(c, moe_down_shared_case{f, 2, 44, 5, 2, 23, 17, false, scale_layout::channel, rpw});
        }
    }
    // moe_combine with the next layer's norm: the 21B-A3B's rows (a cluster of ten blocks), a
    // partial last block, sixteen blocks (the non-portable size), one block.
    add(c, moe_combine_norm_case{1, 2560, 6, true});
    add(c, moe_combine_norm_case{4, 2560, 6, false});
    add(c, moe_combine_norm_case{2, 1000, 3, true});
    add(c, moe_combine_norm_case{1, 4096, 8, true});
    add(c, moe_combine_norm_case{3, 44, 2, false});
}

void moe_slot_counter_cases(case_list &c, int cc_major) {
    const auto bf = weight_format::bf16, f8 = weight_format::fp8_e4m3;
    // Slot counters between gate/up and down (decode's default): the 21B-A3B's widths at 1, 4
    // and 8 tokens, one and four rows per warp, odd widths (scalar paths, partial blocks), and
    // once without programmatic launch (the down kernel then starts after gate/up has finished).
    const bool pdl = cc_major >= 9;
    for (auto f : {bf, f8}) {
        add(c, moe_slot_counters_case{f, 1, 2560, 64, 6, 1536, 3072, 0, pdl});
        add(c, moe_slot_counters_case{f, 4, 2560, 64, 6, 1536, 3072, 0, pdl});
        add(c, moe_slot_counters_case{f, 8, 2560, 64, 6, 1536, 3072, 0, pdl});
        add(c, moe_slot_counters_case{f, 1, 2560, 64, 6, 1536, 3072, 1, pdl});
        add(c, moe_slot_counters_case{f, 2, 2560, 64, 6, 1536, 3072, 4, pdl});
        add(c, moe_slot_counters_case{f, 3, 44, 5, 2, 23, 17, 0, pdl});
    }
    add(c, moe_slot_counters_case{f8, 1, 2560, 64, 6, 1536, 3072, 0, false});
    // The routed gate/up on tensor cores (decode's FP8 default: one round of tiles; more rounds are
    // ES_CUDA_MOE_MMA's measuring aid): 1, 2, 3 and 8 rounds, 1 and 8 tokens, a width no multiple
    // of 16 (a partial last tile), 4,096-wide rows.
    for (int mma : {1, 2, 3, 8}) {
        add(c, moe_slot_counters_case{f8, 1, 2560, 64, 6, 1536, 3072, 0, pdl, mma});
        add(c, moe_slot_counters_case{f8, 8, 2560, 64, 6, 1536, 3072, 0, pdl, mma});
        add(c, moe_gemv_case{f8, 3, 4096, 8, 2, 40, scale_layout::channel, mma});
    }
    add(c, moe_gemv_case{f8, 1, 2560, 8, 6, 1536, scale_layout::channel, 2});
    // Every other instance of the tensor-core kernel (ES_CUDA_MOE_MMA_SHAPE): one round and one
    // resident wave, with slot counters at the 21B-A3B's widths, and at widths whose chunks do not
    // split evenly over the warps (a 1,600-wide row: 25 chunks) with a partial last tile.
    for (int w : {2, 4, 8})
        for (int rt : {1, 2})
            for (int d = 1; d <= 4; ++d) {
                const mma_shape m{w, rt, d, false};
                if (!moe_gate_up_mma_shape_ok(m) || (w == 4 && rt == 2 && d == 1)) continue;
                for (bool wave : {false, true}) {
                    const mma_shape mw{w, rt, d, wave};
                    add(c, moe_slot_counters_case{f8, 1, 2560, 64, 6, 1536, 3072, 0, pdl, 1, mw});
                    add(c, moe_gemv_case{f8, 3, 1600, 8, 2, 44, scale_layout::channel, 1, mw});
                }
            }
    add(c, moe_slot_counters_case{f8, 8, 2560, 64, 6, 1536, 3072, 0, pdl, 1, mma_shape{4, 2, 1, true}});
    // The routed gate/up stacks tile-major (cuda_backend_params::moe_tile_major, the default for
    // FP8 where it applies): the layout's kernel, the tensor-core gate/up on it (1, 3 and 8 tokens, rounds,
    // one wave, with slot counters), the prefill grouped GEMM on it.
    add(c, fp8_tile_major_case{3, 48, 1600});
    add(c, fp8_tile_major_case{2, 1536, 2560});
    add(c, moe_gemv_case{f8, 1, 2560, 64, 6, 1536, scale_layout::channel, 1, {}, true});
    add(c, moe_gemv_case{f8, 3, 1600, 8, 2, 48, scale_layout::channel, 1, {}, true});
    add(c, moe_gemv_case{f8, 8, 2560, 16, 6, 1536, scale_layout::channel, 2, {}, true});
    add(c, moe_slot_counters_case{f8, 1, 2560, 64, 6, 1536, 3072, 0, pdl, 1, {}, true});
    add(c, moe_slot_counters_case{f8, 8, 2560, 64, 6, 1536, 3072, 0, pdl, 1, mma_shape{4, 2, 1, true}, true});
    add(c, grouped_gemm_case{f8, true, 150, 4, 16, 512, 256, 0, {}, scale_layout::channel, true});
    add(c, grouped_gemm_case{f8, true, 300, 2, 4, 256, 192, 0, {}, scale_layout::channel, true});
}

void grouped_gemm_cases(case_list &c) {
    const auto bf = weight_format::bf16, f8 = weight_format::fp8_e4m3;
    // Hopper's warpgroup-MMA kernel (FP8, per-row scales; the default where it applies): the
    // tile-major and row-major gate/up and the down at the shapes above, the 21B-A3B's widths
    // (64 experts, top-6, 2,560 / 1,536), and edge groups with n not a multiple of the block's
    // outputs (64 glu, 128 plain) at k = 208 (the last k stage 16 wide).
    {
        const auto ch = scale_layout::channel;
        const std::vector<int32_t> edge{0, 1, 64, 65, 63, 128};
        add(c, grouped_gemm_case{f8, true, 150, 4, 16, 512, 256, 0, {}, ch, true, true});
        add(c, grouped_gemm_case{f8, true, 300, 2, 4, 256, 192, 0, {}, ch, true, true});
        add(c, grouped_gemm_case{f8, true, 96, 6, 64, 2560, 1536, 0, {}, ch, true, true});
        add(c, grouped_gemm_case{
                   f8, true, 260, 2, 4, 2560, 1536, 0, {}, ch, true, true}); // tiles of 128 and partial
        for (bool glu : {true, false}) {
            add(c, grouped_gemm_case{
                       f8, glu, 150, 4, 16, glu ? 512 : 256, glu ? 256 : 512, 0, {}, ch, false, true});
            add(c, grouped_gemm_case{f8, glu, 300, 2, 4, 256, 192, 0, {}, ch, false, true});
            add(c, grouped_gemm_case{f8, glu, 107, 3, 6, 208, glu ? 67 : 131, 0, edge, ch, false, true});
        }
        add(c, grouped_gemm_case{f8, false, 96, 6, 64, 1536, 2560, 0, {}, ch, false, true});
        // FP8 activations (E4M3, E5M2): the same kernel with both operands FP8.
        for (int qa : {1, 2}) {
            add(c, grouped_gemm_case{f8, true, 260, 2, 4, 2560, 1536, 0, {}, ch, true, true, qa});
            add(c, grouped_gemm_case{f8, false, 260, 2, 4, 1536, 2560, 0, {}, ch, false, true, qa});
        }
        add(c, grouped_gemm_case{f8, true, 150, 4, 16, 512, 256, 0, {}, ch, true, true, 1});
        add(c, grouped_gemm_case{f8, true, 107, 3, 6, 208, 67, 0, edge, ch, false, true, 1});
        add(c, grouped_gemm_case{f8, false, 107, 3, 6, 208, 131, 0, edge, ch, false, true, 1});
        add(c, grouped_gemm_case{f8, false, 96, 6, 64, 1536, 2560, 0, {}, ch, false, true, 1});
        // FP8 activations on mma.sync (batched decode's sizes; Ada): the same shapes, and k not
        // a multiple of 16 (a short last chunk of codes; rows of 208 codes) on row-major stacks.
        for (int qa : {1, 2}) {
            add(c, grouped_gemm_case{f8, true, 96, 6, 64, 2560, 1536, 0, {}, ch, true, false, qa});
            add(c, grouped_gemm_case{f8, false, 96, 6, 64, 1536, 2560, 0, {}, ch, false, false, qa});
        }
        add(c, grouped_gemm_case{f8, true, 150, 4, 16, 512, 256, 0, {}, ch, false, false, 1});
        add(c, grouped_gemm_case{f8, true, 107, 3, 6, 200, 67, 8, edge, ch, false, false, 1});
        add(c, grouped_gemm_case{f8, false, 107, 3, 6, 200, 131, 8, edge, ch, false, false, 1});
    }
    add(c, moe_gemv_case{f8, 3, 1600, 8, 2, 44, scale_layout::channel, 1});
    add(c, moe_plan_case{24, 6, 3});
    add(c, moe_plan_case{2048, 64, 6});
    add(c, moe_plan_case{2048, 64, 6, moe_grouped_gemm_wgmma_tile_rows});
    for (auto f : {bf, f8})
        for (bool glu : {true, false}) {
            add(c, grouped_gemm_case{f, glu, 37, 3, 6, glu ? 40 : 24, glu ? 24 : 40});
            add(c, grouped_gemm_case{f, glu, 150, 4, 16, glu ? 512 : 256, glu ? 256 : 512});
            // Several row tiles per expert, every copy on the 16-byte path.
            add(c, grouped_gemm_case{f, glu, 300, 2, 4, 256, 192});
            // Groups of 0, 1, 64, 65, 63 and 128 rows; n not a multiple of the column tile (64 glu,
            // 128 plain) and odd (scalar stores); the last k tile partial, with k odd (scalar
            // staging of A and W), k % 8 ≠ 0 on 16-byte aligned rows (A by cp.async with a short
            // last chunk, W scalar), k = 208 (everything by cp.async, last k tile 16 wide).
            const std::vector<int32_t> edge{0, 1, 64, 65, 63, 128};
            for (int64_t k : {135, 100, 208})
                add(c, grouped_gemm_case{f, glu, 107, 3, 6, k, glu ? 67 : 131, k == 100 ? 4 : 0, edge});
        }
}

void moe_block_scale_cases(case_list &c) {
    const auto f8 = weight_format::fp8_e4m3;
    const scale_layout blk = scale_layout::block128;
    // The MoE kernels with 128×128 block scales (each expert its own grid): the channel rows' real
    // widths, and partial blocks in both dimensions (rows and k not multiples of 128).
    add(c, moe_gemv_case{f8, 1, 2560, 8, 6, 1536, blk});
    add(c, moe_gemv_case{f8, 3, 272, 6, 3, 144, blk});
    add(c, moe_gemv_case{f8, 2, 48, 12, 10, 16, blk}); // ten choices: the gather kernel's one-at-a-time loop
    add(c, gate_up_norm_case{f8, 1, 2560, 12288, false, blk});
    add(c, gate_up_norm_case{f8, 2, 1024, 3072, false, blk});
    add(c, gate_up_norm_case{f8, 3, 272, 200, true, blk});
    add(c, gate_up_norm_case{f8, 1, 2560, 1536, true, blk});
    add(c, moe_front_case{f8, 1, 2560, 64, 6, 3072, false, blk});
    add(c, moe_front_case{f8, 4, 2560, 64, 6, 3072, false, blk});
    add(c, moe_front_case{f8, 3, 272, 7, 3, 200, false, blk});
    add(c, moe_down_shared_case{f8, 1, 2560, 8, 6, 1536, 3072, true, blk});
    add(c, moe_down_shared_case{f8, 4, 2560, 8, 6, 1536, 3072, false, blk});
    add(c, moe_down_shared_case{f8, 3, 200, 6, 3, 144, 272, false, blk});
    for (bool glu : {true, false}) {
        add(c, grouped_gemm_case{f8, glu, 150, 4, 16, glu ? 512 : 256, glu ? 256 : 512, 0, {}, blk});
        add(c, grouped_gemm_case{f8, glu, 300, 2, 4, 256, 192, 0, {}, blk});
        const std::vector<int32_t> edge{0, 1, 64, 65, 63, 128};
        for (int64_t k : {135, 100, 208})
            add(c, grouped_gemm_case{f8, glu, 107, 3, 6, k, glu ? 67 : 131, k == 100 ? 4 : 0, edge, blk});
    }
    add(c, moe_combine_case{5, 40, 3});
}

// cuBLASLt: the context first (the cases share it), then BF16 and FP8 GEMMs.
void gemm_lt_cases(case_list &c, int cc_major) {
    const auto lt = std::make_shared<gemm_lt_state>();
    add(c, gemm_lt_context_case{lt});
    add(c, gemm_lt_case{lt, 64, 256, 512, false});
    add(c, gemm_lt_case{lt, 100, 384, 1024, true});
    add(c, gemm_lt_case{lt, 17, 1000, 64, false});
    const auto e4 = fp8_format::e4m3, e5 = fp8_format::e5m2;
    add(c, gemm_lt_fp8_case{lt, cc_major, 9, 2560, 1024, false, e4});
    add(c, gemm_lt_fp8_case{lt, cc_major, 64, 1024, 3072, true, e4});
    add(c, gemm_lt_fp8_case{lt, cc_major, 300, 2560, 1024, true, e4});
    add(c, gemm_lt_fp8_case{lt, cc_major, 17, 1008, 48, false, e4});
    add(c, gemm_lt_fp8_case{lt, cc_major, 64, 2560, 1024, false, e5});
    add(c, gemm_lt_fp8_case{lt, cc_major, 300, 1024, 3072, false, e5});
    add(c, gemm_lt_fp8_case{lt, cc_major, 9, 1024, 3072, true, e5});
}

void logits_and_copy_cases(case_list &c) {
    add(c, argmax_case{3, 103424});
    for (size_t bytes : {size_t(16), size_t(368), size_t(1344), size_t(5000), size_t(70000)})
        for (size_t offset : {size_t(0), size_t(3)}) add(c, copy_bytes_case{bytes, offset});
    add(c, copy_bytes_fed_case{1, 1});
    add(c, copy_bytes_fed_case{9, 4});
    add(c, copy_bytes_fed_case{64, 64});
    for (int32_t N : {1, 64, 256}) {
        add(c, topk_logits_case{1, 103424, N});
        add(c, topk_logits_case{8, 103424, N});
        add(c, topk_logits_case{8, 3001, N}); // a small odd vocabulary: two blocks per row, one partial
    }
    add(c, topk_logits_case{5, 97, 64});      // N below V in one block; and 5 rows
    add(c, topk_logits_case{2, 40, 64});      // N > V: unused slots id -1
    add(c, topk_logits_case{64, 103424, 64}); // the largest decode batch
    add(c, topk_logits_case{3, 6144, 63});    // V a multiple of the block's 2048; N odd
    add(c, topk_logits_case{8, 2049, 64});    // a last block of one value
    // Every row kind under every parameter set (9 × 12 rows).
    add(c, sample_rows_case{108, 103424, 6}); // the ERNIE vocabulary: clusters of 8 blocks a row
    add(c, sample_rows_case{108, 3001, 12});  // a small odd vocabulary (one block a row)
    add(c, sample_rows_case{108, 40, 12});    // fewer ids than one warp's segment
    add(c, topk_logits_case{8, 600000, 64});  // more lists than phase 2 holds in registers (293 blocks)
}

case_list kernel_cases(int cc_major) {
    case_list c;
    norm_rope_cases(c);
    gemv_fused_cases(c);
    attention_cases(c);
    silu_mul_router_cases(c);
    gemv_cases(c);
    quantize_cases(c);
    moe_decode_cases(c);
    moe_slot_counter_cases(c, cc_major);
    grouped_gemm_cases(c);
    moe_block_scale_cases(c);
    gemm_lt_cases(c, cc_major);
    logits_and_copy_cases(c);
    // Last, with data of their own: the rows before keep the shared generator's sequence.
    for (size_t bytes : {size_t(16), size_t(4096), size_t(1) << 20, (size_t(64) << 20) + 48})
        for (unsigned blocks : {0u, 3u}) add(c, read_sum_case{bytes, blocks});
    return c;
}

// ---- the model table ----------------------------------------------------------------------------

// A model check and whether it needs the reference checkpoints (selftest_options::data_dir).
struct model_check {
    bool needs_data;
    void (*run)(runner &R, const std::filesystem::path &data_dir);
};

const model_check k_model_checks[] = {
    {true, checkpoint_checks},
    {false, tile_major_model_check}, // random weights of a real shape: no data needed
    {false, head_pick_model_checks},
    {true, routed_fp8_model_checks},
    {true, intervention_model_checks},
    {false, phase_timing_checks},
    {false, memory_cycle_checks},
    {false, kv_pool_checks},
    {false, kv_pool_oom_checks},
};

} // namespace
} // namespace selftest

selftest_report run_cuda_selftest(const selftest_options &o) {
    // load_model(backend_kind::cuda) below uses the CUDA code linked here, not a module file.
    detail::use_linked_cuda_module(&linked_cuda_module());
    selftest_report rep;
    auto dev = probe_cuda_device(0);
    if (!dev) {
        rep.skipped = true;
        rep.skip_reason = dev.message();
        return rep;
    }
    char cc[32];
    std::snprintf(cc, sizeof cc, "%d.%d", dev->cc_major, dev->cc_minor);
    rep.device = dev->name + " (compute capability " + cc + ", " + std::to_string(dev->n_sm) + " SMs, " +
                 std::to_string(dev->total_bytes >> 30) + " GiB)";
    selftest::runner R(o, rep);
    if (o.kernels) {
        selftest::case_list cases = selftest::kernel_cases(dev->cc_major);
        selftest::walk(R, "kernel", cases);
    }
    if (o.models)
        for (const selftest::model_check &m : selftest::k_model_checks)
            if (!m.needs_data || !o.data_dir.empty()) m.run(R, o.data_dir);
    return rep;
}

} // namespace es
