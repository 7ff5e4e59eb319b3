// attention: causal GQA attention of every batch token over its own sequence's paged KV cache
// (layout as rope_kv.cuh; BF16 pools, or E4M3 ones with kv = fp8_e4m3, every element read as the
// BF16 of fp8 · k_scale or v_scale, kernel_common.h's kv_read_fp8, as the kernels stage it), fp32
// scores and softmax, scale 1/sqrt(head_dim) given by the caller. Query token t attends to positions [0,
// pos[t]] of sequence seq[t] through its block table.
//
// Work is cut into query tiles (plan on the host with attention_tiles): a tile is a run of
// consecutive batch tokens of one sequence, at most attention_tile_tokens(group) of them, so that
// a tile's (token, q-head) rows of one KV head number at most 32.
//
// Two kernels share the params, the plan and the twin (attention_uses_tensor_cores says which
// one runs): a CUDA-core kernel with split-KV for decode and every shape, and a tensor-core
// (mma.sync BF16, flash-attention-2 style) kernel for prefill-like steps (rule below) of
// head_dim 64 or 128 and group ≤ 32.
#pragma once

#include "kernels/kernel_common.h"

#include <vector>

namespace es {

// Which kernel launch_attention runs: automatic (the engine) or one forced (the self-test; a
// forced tensor_core path on a shape it does not support is an error, not a fallback).
enum class attention_path : int32_t { automatic, cuda_core, tensor_core };

struct attention_params {
    const bf16_t *q = nullptr;       // [n_tokens, n_head·head_dim] post-RoPE
    const void *k_cache = nullptr;   // [n_blocks·block_size, n_head_kv·head_dim] of `kv` elements
    const void *v_cache = nullptr;
    kv_format kv = kv_format::bf16;
    float k_scale = 1.0f, v_scale = 1.0f;  // FP8 KV: read value = fp8 · scale
    const int32_t *pos = nullptr;          // [n_tokens]
    const int32_t *seq = nullptr;          // [n_tokens]
    const int32_t *block_tables = nullptr; // [n_seqs, bt_stride]
    int64_t bt_stride = 0;
    const int32_t *tiles = nullptr; // [n_tiles, 2]: first token, token count
    int64_t n_tiles = 0;
    bf16_t *out = nullptr; // [n_tokens, n_head·head_dim]
    int64_t n_tokens = 0, n_head = 0, n_head_kv = 0, head_dim = 0, block_size = 16;
    float scale = 1.0f;
    // Split-KV (flash-decoding): kv_splits blocks share a tile's KV range (chunk c goes to split
    // c mod kv_splits) and a second kernel merges their partial softmax states. For decode, where
    // a step has only n_head_kv tiles of work. partial: attention_partial_floats(…) floats.
    int64_t kv_splits = 1;
    float *partial = nullptr;
    // The most tokens any tile holds (0: unknown, n_tokens is assumed); lets decode steps, with
    // one token per tile, use a kernel sized for few rows.
    int64_t max_tile_tokens = 0;
    // [n_tiles, n_head_kv] zeros, left zero by every launch: the decode kernel's split merging
    // (the last split block of a tile and KV head to finish merges). Null: the general kernel
    // and a second merge kernel.
    unsigned *counters = nullptr;
    attention_path path = attention_path::automatic;
};

inline constexpr int64_t attention_max_head_dim = 256;
// KV splits: the decode kernel merges up to attention_max_kv_splits, the general one (a lane a
// split) up to attention_general_max_kv_splits.
inline constexpr int64_t attention_max_kv_splits = 64, attention_general_max_kv_splits = 32;

// Query tokens per tile for a GQA group of `group` q heads per KV head.
inline int64_t attention_tile_tokens(int64_t group) { return group >= 32 ? 1 : 32 / group; }

// Scratch floats the split-KV path needs for n_tiles tiles.
inline int64_t attention_partial_floats(int64_t n_tiles, int64_t n_head, int64_t n_head_kv, int64_t head_dim,
                                        int64_t kv_splits) {
    const int64_t group = n_head / n_head_kv, blocks_y = n_head_kv * ((group + 31) / 32);
    return n_tiles * blocks_y * kv_splits * 32 * (head_dim + 2);
}

// The automatic choice takes the tensor-core kernel for steps of at least this many tokens whose
// tiles hold 16 (token, head) rows on average (n_tokens·group ≥ 16·n_tiles): prefill chunks,
// mixed or not, but not decode batches (≤ 8 tokens in the engine, split-KV) nor batches of many
// single decode tokens, where a tile would fill only group of a warp's 16 MMA rows.
inline constexpr int64_t attention_tc_min_tokens = 16;

// Whether the tensor-core kernel can run p's shape (kv_splits 1, head_dim 64 or 128, group ≤ 32,
// q / K / V / out 16-byte aligned; either KV format), and whether launch_attention runs it for p (path and
// rule above).
bool attention_tc_supported(const attention_params &p);
bool attention_uses_tensor_cores(const attention_params &p);

// Tiles for a batch whose tokens of one sequence are contiguous: flat [first, count] pairs.
std::vector<int32_t> attention_tiles(const int32_t *seq, int64_t n_tokens, int64_t group);

void attention_ref(const attention_params &p);
#ifdef ES_KERNELS_HAVE_LAUNCHERS
cudaError_t launch_attention(const attention_params &p, cudaStream_t stream);
// The decode kernel (attention_decode.cu), which launch_attention uses when path is automatic and
// attention_decode_ok holds: tiles of at most 8 rows (max_tile_tokens × q heads per KV head), head_dim 64, 128 or 256, and
// for kv_splits > 1 both partial and counters.
bool attention_decode_ok(const attention_params &p);
cudaError_t launch_attention_decode(const attention_params &p, cudaStream_t stream);
// Whether the decode kernel merges its KV splits inside a thread-block cluster (compute capability
// 9.0, the splits' cluster fitting the device) instead of through `partial` and the last block of a
// counter (attention_decode.cu); both give the same bits. On by default, process-wide; off is a
// measuring aid (ES_CUDA_ATTN_CLUSTER=0) and what the self-test compares the cluster merge with.
void set_attention_cluster_merge(bool on);
// The cluster merge by pulls from the peers (off, the default) or by pushes into the merging
// blocks (on: a measuring aid, ES_CUDA_ATTN_MERGE=push; attention_decode.cu says what it costs).
void set_attention_merge_push(bool on);
bool attention_cluster_merge();
// Whether launch_attention_decode would merge p's splits in a cluster.
bool attention_decode_clustered(const attention_params &p);
#endif

} // namespace es
