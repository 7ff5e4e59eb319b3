// A forward step planned before anything is launched (as FlashInfer's plan/run): from the
// batch's shape, the model and the backend's options, every decision the recorder follows — the
// workspace, input and download layouts, the attention tiles and KV splits, which fusions apply,
// the head's path, the transfers and the key of the CUDA graph that replays the step. Pure host
// code without CUDA, so tests run it on any machine; record.cpp turns a plan into launches, one
// function per phase. A plan's decisions are shape decisions: the kernels' own checks of pointers
// and device limits (gemv_fusion_ok, moe_front_supported, …) still run when the step is recorded.
#pragma once

#include "engine/backend/backend.h"
#include "engine/cuda/cuda_twin_model.h"
#include "engine/model/model_config.h"

#include <cstddef>
#include <cstdint>
#include <tuple>
#include <vector>

namespace es {

// Steps with at most this many tokens use the GEMV kernels (weights streamed once per step);
// larger ones use cuBLASLt and the grouped expert GEMM (shared with the twin model).
inline constexpr int64_t k_gemv_max_tokens = cuda_gemv_max_tokens;
// Routed experts: GEMV per (token, choice) up to this many tokens, then grouped by expert.
inline constexpr int64_t k_moe_gemv_max_tokens = 8;
// Steps with at most this many tokens are captured as CUDA graphs and replayed.
inline constexpr int64_t k_graph_max_tokens = 8;
// Captured decode graphs kept at most (least recently replayed dropped first). One chat needs a
// few dozen over a long reply; a server's mix of batches can ask for thousands.
inline constexpr size_t k_max_graphs = 256;
// Steps of at most this many tokens fuse norms, RoPE/KV writes and the MoE front into fewer
// launches (gemv.cuh, moe_front.cuh): one token gains 3–5% on the H200, while at 4 and 8 tokens the
// fused kernels, which normalize every row in every block, lose 20–35% to the separate launches.
inline constexpr int64_t k_fuse_max_tokens = 1;
// Attention of decode-sized steps splits each sequence's KV range over up to this many blocks
// (flash-decoding: a step has only n_head_kv tiles of work otherwise): one split per 32-position
// chunk of the longest context in the step up to k_cluster_kv_splits (one thread-block cluster
// merges them), more only where a context is so deep that each of those would walk more than
// k_deep_split_chunks chunks one after another (the splits then merge through memory, which costs
// a round trip, and each keeps at least that many chunks). The split count is part of the graph
// key, so a long generation captures at most k_decode_kv_splits graphs.
inline constexpr int64_t k_decode_kv_splits = 64, k_cluster_kv_splits = 16, k_deep_split_chunks = 8;

// The KV splits of a decode-sized step whose longest context ends at max_pos; chunks: 32-position
// chunks per split at least; max_splits: at most this many (≤ k_decode_kv_splits).
int64_t decode_kv_splits(int64_t max_pos, int64_t chunks = 1, int64_t max_splits = k_decode_kv_splits);

inline size_t align256(size_t b) { return (b + 255) & ~size_t(255); }
// The smallest at_least · 2^i ≥ need (workspace capacities grow by doubling).
int64_t round_cap(int64_t need, int64_t at_least);

// The batch's inputs (int32 and fp32 bits), packed for one step's T, R and block-table length so
// that one transfer of `total` bytes carries them; every array 16-byte aligned. A graph's key holds
// T, R and the table's size, so the offsets a graph was captured with are those of every replay.
struct input_layout {
    size_t tokens = 0, pos = 0, seq = 0, rows = 0, temps = 0, samp = 0, tiles = 0, bt = 0, total = 0;
};
input_layout make_input_layout(int64_t T, int64_t R, int64_t bt);

// The candidates' block for R rows of n: ids [R, n], logits [R, n], row max [R], then the
// 8-aligned row sums [R] (double).
size_t cand_sums_offset(int64_t R, int64_t n);
size_t cand_bytes(int64_t R, int64_t n);

// The download block of a step, relative to the workspace's `out`: the routing record's ids
// [n_moe, T, K], weights [n_moe, T, K] and margins [n_moe, T], then the candidates, 16-byte
// aligned after them; placed for the step's T and K (step_plan::K), so one transfer brings the
// record and the candidates.
struct out_layout {
    size_t ids = 0, wts = 0, margins = 0, cand = 0;
};
out_layout make_out_layout(size_t out_offset, int64_t n_moe, int64_t T, int64_t K);

// The routed experts' places per token of a step: the largest k of its sequences (an expert
// intervention's top_k, else the model's), as the CPU backend's routing record counts them.
int64_t step_routing_width(const batch &b, const model_config &cfg);
// The workspace tokens a step of T tokens with K places per token takes: the slot buffers hold
// T · k places of the model's k, so a wider K counts as more tokens.
int64_t step_ws_tokens(int64_t T, int64_t K, int64_t model_k);

// What the workspace depends on besides its capacities.
struct workspace_shape {
    model_config cfg;
    int64_t n_moe = 0;           // MoE layers
    int64_t max_ff = 1;          // the widest dense MLP or shared-expert block
    bool fp8_activations = false; // FP8 weights with FP8 activations for prefill-sized linears
    unsigned pick_keys_cap = 0;  // the greedy pick's warp keys (64 per SM)
};

// The workspace's regions (byte offsets, each 256-aligned) for capacities of T tokens, R logits
// rows and bt block-table entries.
struct work_layout {
    int64_t T = 0, R = 0, bt = 0;
    size_t x = 0, xn = 0, qkv = 0, q = 0, attn = 0, gu = 0, act = 0, out = 0, act_e = 0, y_e = 0;
    size_t counts = 0, offsets = 0, tile_offsets = 0, sorted = 0, xr = 0, logits = 0;
    size_t out_bytes = 0; // the download block's capacity (out_layout)
    size_t router_logits = 0, router_counters = 0, attn_counters = 0, slot_rows = 0, attn_partial = 0;
    // Logit candidates: topk_logits' scratch and per-row counters (zeroed at allocation, left zero
    // by the kernel); its output is in the download block.
    size_t topk_scratch = 0, topk_counters = 0;
    size_t samp_weights = 0; // sample_rows' weights [R, n_vocab]
    size_t pick_keys = 0; // the greedy pick fused into the head's GEMV: its warps' keys
    // FP8 activations of prefill-sized linears: [T, act_k] codes, [T] scales
    size_t act_q = 0, act_scale = 0;
    int64_t act_k = 0;
    // FP8 activations of the routed experts' grouped GEMM: the gate/up's [T, H] codes, then (the
    // same bytes) the down's [T·K, n_ff_exp]; [T·K] scales
    size_t ex_q = 0, ex_scale = 0;
    size_t total = 0;
    size_t in_total = 0; // the inputs' device region and its pinned mirror (input_layout)
};
work_layout make_work_layout(const workspace_shape &s, int64_t T, int64_t R, int64_t bt);

// The backend's choices that shape a plan (cuda_backend_impl::read_switches sets the measuring
// aids among them).
struct plan_options {
    bool use_graphs = true;
    bool fuse = true;            // decode's fused launches
    bool head_pick = true;       // a greedy one-row step picks in the head's GEMV
    bool zero_copy = true;       // candidates steps' graphs do their own I/O
    bool combine_norm = true;    // moe_combine writes the next norm
    bool moe_down_rows = true;   // decode's routed down in per-slot rows + moe_combine
    bool moe_slot_counters = true;
    bool record_routing = true;  // the routing record comes back
    bool profiling = false;      // every launch timed: eager, synchronous
    bool skipping_ops = false;   // launches are left out (ES_CUDA_SKIP_OPS)
    int kv_split_chunks = 1;
    int64_t kv_splits_max = 32; // ES_CUDA_KV_SPLITS_MAX (up to k_decode_kv_splits)
    int64_t moe_gemv_max_tokens = k_moe_gemv_max_tokens;
};

// Where the previous submitted forward left its candidates (fed tokens of this step read them on
// the GPU when `valid`).
struct fed_source {
    size_t cand = 0; // workspace offset
    int64_t top_n = 0, R = 0;
    bool valid = false;
};

// T, R, S, stride, n_tiles, kv_splits, max_tile, top_n, the head's token (0: none, 1: the pick, 2: the
// draw), the transfers in the graph (0: none; 1 + record + 2 · slot), the fed tokens' source (−1: none).
using graph_key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                             int64_t, int64_t>;

struct step_plan {
    int64_t T = 0, R = 0, S = 0;
    int64_t stride = 1;               // block-table entries per sequence (capacity, rounded up)
    std::vector<int32_t> tiles;       // attention's query tiles (attention_tiles): [n_tiles, 2]
    int64_t n_tiles = 0, max_tile = 1;
    int64_t kv_splits = 1;            // decode attention's KV splits (1: none)
    int64_t top_n = 0;                // candidates per row (0: full rows)
    int64_t n_moe = 0, nk = 0;        // MoE layers; routing-record entries (0: record off)
    int64_t K = 0;                    // routed experts' places per token (step_routing_width)
    // A sequence carries an expert intervention: after each layer's router, moe_reroute selects
    // every token's experts again under its sequence's rule (and the step runs eagerly).
    bool reroute = false;
    bool has_fed = false;             // the batch holds fed tokens
    bool fed_on_gpu = false;          // …patched on the GPU from the previous step's candidates
    int slot = 0;                     // the pinned I/O slot

    // Phases: which path and which fusions the recorder takes (the kernels' own checks permitting).
    bool fuse = false;                // norm into GEMVs, RoPE + KV write in the q/k/v GEMV, moe_front
    bool embed_in_qkv = false;        // one token: the embedding inside layer 0's q/k/v GEMV
    bool moe_decode_gemv = false;     // routed experts as GEMVs per slot (else grouped GEMMs)
    bool moe_slot_counters = false;   // the routed down starts each slot when its rows are in
    bool shared_in_down = false;      // the shared experts' down as one more slot of the routed down
    bool combine_norm = false;        // moe_combine writes the next layer's normalized row
    bool combine_norm_head = false;   // …and after the last layer the head's
    bool pick = false;                // greedy one row: the head's GEMV picks the token
    bool sample = false;              // each row's token drawn on the GPU (batch::sampling, sample_rows)
    bool attention_splits = false;    // decode attention merges KV splits (kv_splits > 1)

    // Transfers.
    size_t logit_bytes = 0;           // the logits or candidates the step brings back
    size_t cand_rel = 0;              // the candidates' offset in the download block
    bool cand_block = false;          // candidates instead of full rows
    bool via_pinned = false;          // outputs through the slot's pinned buffer
    bool sync_now = false;            // the forward runs to its end at submit (profiling, large rows)
    bool io_in_graph = false;         // the graph reads inputs and writes outputs itself (zero-copy)
    bool graphable = false;           // replayed as a CUDA graph (after one eager run of its key)

    input_layout in;
    int64_t ws_T = 0, ws_R = 0, ws_bt = 0; // the capacities this step needs
    graph_key key{};
};

// The batch's top_n and temperatures as a step takes them; an es::load_error names what is wrong.
void check_step_request(const batch &b);
// Block-table entries per sequence a step reserves: the longest table, rounded up to a power of two.
int64_t block_table_stride(const batch &b);

// Plans one forward of batch b (already checked: check_batch). slot: the pinned slot the step
// uses; fed: the previous forward's candidates. Throws es::load_error for a batch the step cannot
// take (top_n < 0, temperatures of the wrong count, fed tokens naming rows the previous forward did
// not have).
step_plan plan_step(const model_config &cfg, int64_t n_moe, const batch &b, const plan_options &o,
                    const fed_source &fed, int64_t prev_rows, int slot);

} // namespace es
