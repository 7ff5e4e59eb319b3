// rope_kv: interleaved (GPT-J pair) RoPE on q and k fused with the paged KV write.
// For token t at position pos and pair i in [0, head_dim/2): angle = pos · inv_freq[i] (fp32),
//   q'[2i] = q[2i]·cos − q[2i+1]·sin,  q'[2i+1] = q[2i+1]·cos + q[2i]·sin   (same for k),
// q' → q_out (BF16); k' and v → the K/V pools at slot block_table[pos / block_size] ·
// block_size + pos % block_size of the token's sequence. Pool layout: [n_blocks·block_size,
// n_head_kv·head_dim], as the CPU backend, of BF16 elements or (kv = fp8_e4m3) E4M3 bytes of
// k' / k_scale and v / v_scale, saturating (kernel_common.h's kv_store_fp8).
#pragma once

#include "kernels/kernel_common.h"

namespace es {

struct rope_kv_params {
    const float *qkv = nullptr;          // [n_tokens, (n_head + 2·n_head_kv)·head_dim]: q | k | v
    const int32_t *pos = nullptr;        // [n_tokens]
    const int32_t *seq = nullptr;        // [n_tokens] row of block_tables
    const int32_t *block_tables = nullptr; // [n_seqs, bt_stride]
    int64_t bt_stride = 0;
    const float *inv_freq = nullptr;     // [head_dim/2]: theta^(-2i/head_dim), computed as the CPU backend
    bf16_t *q_out = nullptr;             // [n_tokens, n_head·head_dim]
    void *k_cache = nullptr;             // [n_blocks·block_size, n_head_kv·head_dim] of `kv` elements
    void *v_cache = nullptr;
    int64_t n_tokens = 0, n_head = 0, n_head_kv = 0, head_dim = 0, block_size = 16;
    kv_format kv = kv_format::bf16;
    float k_scale = 1.0f, v_scale = 1.0f; // FP8 KV: per-tensor scales (stored = x / scale)
};

void rope_kv_ref(const rope_kv_params &p);
#ifdef ES_KERNELS_HAVE_LAUNCHERS
cudaError_t launch_rope_kv(const rope_kv_params &p, cudaStream_t stream);
#endif

} // namespace es
