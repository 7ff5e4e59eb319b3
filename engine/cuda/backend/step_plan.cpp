// step_plan.h: layouts and the step's decisions, in host code only.
#include "engine/cuda/backend/step_plan.h"

#include "engine/core/status.h"
#include "kernels/attention.cuh"
#include "kernels/topk_logits.cuh"

#include <algorithm>
#include <string>

namespace es {

int64_t decode_kv_splits(int64_t max_pos, int64_t chunks, int64_t max_splits) {
    const int64_t n = max_pos / 32 / std::max<int64_t>(chunks, 1) + 1; // one chunk a split
    const int64_t cap = std::clamp<int64_t>(max_splits, 1, k_decode_kv_splits);
    if (n <= k_cluster_kv_splits) return std::min(n, cap);
    return std::min(cap, std::max(k_cluster_kv_splits, n / k_deep_split_chunks));
}

int64_t round_cap(int64_t need, int64_t at_least) {
    int64_t c = at_least;
    while (c < need) c *= 2;
    return c;
}

input_layout make_input_layout(int64_t T, int64_t R, int64_t bt) {
    input_layout l;
    size_t i = 0;
    auto in = [&](int64_t n) { // each array 16-byte aligned
        const size_t r = i;
        i += (size_t(n) * 4 + 15) / 16 * 16;
        return r;
    };
    l.tokens = in(T);
    l.pos = in(T);
    l.seq = in(T);
    l.rows = in(R);
    l.temps = in(R); // fp32 bits
    l.samp = in(R * int64_t(sizeof(row_sampling) / 4));
    l.tiles = in(2 * T);
    l.bt = in(bt);
    l.total = i;
    return l;
}

size_t cand_sums_offset(int64_t R, int64_t n) { return (size_t(R * n) * 8 + size_t(R) * 4 + 7) / 8 * 8; }
size_t cand_bytes(int64_t R, int64_t n) { return cand_sums_offset(R, n) + size_t(R) * 8; }

out_layout make_out_layout(size_t out_offset, int64_t n_moe, int64_t T, int64_t K) {
    const size_t nk = size_t(n_moe * T * std::max<int64_t>(K, 1));
    out_layout l;
    l.ids = out_offset;
    l.wts = l.ids + nk * 4;
    l.margins = l.wts + nk * 4;
    l.cand = l.ids + (nk * 8 + size_t(n_moe * T) * 4 + 15) / 16 * 16;
    return l;
}

int64_t step_routing_width(const batch &b, const model_config &cfg) {
    int64_t K = 0;
    for (const batch_seq &s : b.seqs)
        K = std::max<int64_t>(K, s.routing && s.routing->top_k > 0 ? s.routing->top_k : cfg.n_expert_used);
    return K > 0 ? K : cfg.n_expert_used;
}

int64_t step_ws_tokens(int64_t T, int64_t K, int64_t model_k) {
    const int64_t k = std::max<int64_t>(model_k, 1);
    return K <= k ? T : (T * K + k - 1) / k;
}

work_layout make_work_layout(const workspace_shape &s, int64_t T, int64_t R, int64_t bt) {
    const model_config &c = s.cfg;
    const int64_t H = c.n_embd, qd = c.q_dim(), kvd = c.kv_dim(), F = s.max_ff;
    const int64_t K = std::max<int64_t>(c.n_expert_used, 1), E = std::max<int64_t>(c.n_expert, 1);
    const int64_t n_moe = s.n_moe;
    work_layout w;
    w.T = T;
    w.R = R;
    w.bt = bt;
    size_t o = 0;
    auto take = [&](size_t bytes) {
        const size_t r = o;
        o += align256(bytes);
        return r;
    };
    w.x = take(size_t(T * H) * 4);
    w.xn = take(size_t(T * H) * 2);
    w.qkv = take(size_t(T * (qd + 2 * kvd)) * 4);
    w.q = take(size_t(T * qd) * 2);
    w.attn = take(size_t(T * qd) * 2);
    w.gu = take(size_t(T * 2 * F) * 4);
    w.act = take(size_t(T * F) * 2);
    // The step's download block (out_layout): the routing record's ids and weights, then the
    // logit candidates, placed for each forward's T and R so one transfer brings them all.
    w.out_bytes = size_t(std::max<int64_t>(n_moe, 1) * T * K) * 8 + size_t(std::max<int64_t>(n_moe, 1) * T) * 4 + 16 +
                  cand_bytes(R, topk_logits_max_top);
    w.out = take(w.out_bytes);
    if (n_moe > 0) {
        w.act_e = take(size_t(T * K * c.n_ff_exp) * 2);
        w.y_e = take(size_t(T * (K + 1) * H) * 4); // + the shared experts' slot (decode)
        w.counts = take(size_t(E) * 4);
        w.offsets = take(size_t(E + 1) * 4);
        w.tile_offsets = take(size_t(E + 1) * 4);
        w.sorted = take(size_t(T * K) * 4);
    }
    w.xr = take(size_t(R * H) * 2);
    w.logits = take(size_t(R * c.n_vocab) * 4);
    w.router_logits = take(size_t(T * E) * 4);
    w.router_counters = take(size_t(T) * 4);             // zeroed at allocation; the router leaves it zero
    w.attn_counters = take(size_t(T * c.n_head_kv) * 4); // the same for attention's split merging
    w.slot_rows = take(size_t(T * K) * 4);               // the same: moe_combine resets it
    w.topk_scratch = take(topk_logits_scratch_bytes(R, c.n_vocab, topk_logits_max_top));
    w.topk_counters = take(size_t(R) * 4);
    w.samp_weights = take(size_t(R * c.n_vocab) * 4);
    w.pick_keys = take(size_t(s.pick_keys_cap) * 8);
    w.attn_partial = take(size_t(attention_partial_floats(std::min<int64_t>(T, k_graph_max_tokens), c.n_head,
                                                          c.n_head_kv, c.head_dim, k_decode_kv_splits)) *
                          4);
    if (s.fp8_activations) {
        w.act_k = std::max({H, qd, F}); // the widest input of a dense linear
        w.act_q = take(size_t(T * w.act_k));
        w.act_scale = take(size_t(T) * 4);
        if (n_moe > 0) {
            w.ex_q = take(size_t(T * std::max(H, K * c.n_ff_exp)));
            w.ex_scale = take(size_t(T * K) * 4);
        }
    }
    w.total = o;
    w.in_total = make_input_layout(T, R, bt).total;
    return w;
}

void check_step_request(const batch &b) {
    if (b.top_n < 0 || (!b.temperatures.empty() && b.temperatures.size() != b.logits_rows.size()))
        throw load_error("batch: top_n must be >= 0 and temperatures one per logits row");
}

int64_t block_table_stride(const batch &b) {
    int64_t stride = 1;
    for (const auto &s : b.seqs) stride = std::max<int64_t>(stride, int64_t(s.block_table.size()));
    return round_cap(stride, 1);
}

step_plan plan_step(const model_config &cfg, int64_t n_moe, const batch &b, const plan_options &o,
                    const fed_source &fed, int64_t prev_rows, int slot) {
    step_plan p;
    p.T = b.n_tokens();
    p.R = int64_t(b.logits_rows.size());
    p.S = int64_t(b.seqs.size());
    p.slot = slot;
    p.n_moe = n_moe;
    check_step_request(b);
    p.top_n = b.top_n > 0 ? std::min<int64_t>(b.top_n, topk_logits_max_top) : 0;
    // Draws come back as each row's one candidate (sample_rows writes the candidates' first slot).
    p.sample = !b.sampling.empty() && !b.logits_rows.empty();
    if (p.sample) p.top_n = 1;
    p.has_fed = std::any_of(b.tokens.begin(), b.tokens.end(), [](int32_t t) { return t < 0; });
    if (p.has_fed)
        for (int32_t t : b.tokens)
            if (t < 0 && -int64_t(t) - 1 >= prev_rows)
                throw load_error("batch: a fed token names row " + std::to_string(-int64_t(t) - 1) +
                                 " of the previous forward, which had " + std::to_string(prev_rows) +
                                 " candidate rows (fed tokens need its candidates: batch::top_n >= 1)");
    if (p.T == 0) return p;
    const int64_t T = p.T, R = p.R;

    // Greedy rows need no row sum: one candidate from the head's GEMV where the step has one row.
    p.pick = o.head_pick && !p.sample && p.top_n == 1 && R == 1 &&
             std::all_of(b.temperatures.begin(), b.temperatures.end(), [](float t) { return !(t > 0.0f); });
    p.stride = block_table_stride(b);
    p.tiles = attention_tiles(b.seq.data(), T, cfg.n_head / cfg.n_head_kv);
    p.n_tiles = int64_t(p.tiles.size() / 2);
    for (int64_t i = 0; i < p.n_tiles; ++i) p.max_tile = std::max<int64_t>(p.max_tile, p.tiles[size_t(2 * i + 1)]);
    const int64_t max_pos = *std::max_element(b.pos.begin(), b.pos.end());
    p.kv_splits = T <= k_graph_max_tokens ? decode_kv_splits(max_pos, o.kv_split_chunks, o.kv_splits_max) : 1;
    p.attention_splits = T <= k_graph_max_tokens && p.kv_splits > 1;
    p.K = step_routing_width(b, cfg);
    p.reroute = batch_has_routing(b);
    p.ws_T = step_ws_tokens(T, p.K, cfg.n_expert_used);
    p.ws_R = R;
    p.ws_bt = p.S * p.stride;
    p.in = make_input_layout(T, R, p.ws_bt);

    // Phases.
    p.fuse = o.fuse && T <= k_fuse_max_tokens;
    p.embed_in_qkv = p.fuse && T == 1 && !o.skipping_ops;
    p.moe_decode_gemv = T <= o.moe_gemv_max_tokens;
    p.moe_slot_counters = o.moe_slot_counters && o.moe_down_rows && !o.skipping_ops;
    p.shared_in_down = p.fuse && o.moe_down_rows && p.moe_decode_gemv; // the grouped down has no such slot
    p.combine_norm = o.combine_norm && p.fuse && o.moe_down_rows;
    p.combine_norm_head = p.combine_norm && T == 1 && R == 1;

    // Transfers. Decode-sized logits come through the slot's pinned buffer (one DMA at full speed,
    // then a host copy), larger ones straight into the (pageable) output, at once. Candidates: one
    // small DMA of the download block, the routing record with them when it is on; with full rows
    // the record comes in a transfer of its own.
    p.nk = o.record_routing ? n_moe * T * p.K : 0;
    p.logit_bytes = p.top_n > 0 ? cand_bytes(R, p.top_n) : size_t(R * cfg.n_vocab) * 4;
    p.via_pinned = R > 0 && (R <= k_graph_max_tokens || p.top_n > 0);
    const out_layout rel = make_out_layout(0, n_moe, T, p.K);
    p.cand_rel = rel.cand;
    p.cand_block = R > 0 && p.top_n > 0;
    p.sync_now = o.profiling || (R > 0 && !p.via_pinned);
    p.fed_on_gpu = p.has_fed && fed.valid && !o.profiling;
    // Zero-copy I/O: a candidates step's graph reads its inputs from the slot's pinned mirror and
    // writes its download block to pinned memory itself, so a replay is one launch call.
    p.io_in_graph = o.zero_copy && p.cand_block;
    p.graphable = o.use_graphs && !o.profiling && T <= k_graph_max_tokens && !p.reroute;
    // The graph holds the slot's pinned pointers when it carries its I/O, and the fed tokens' source.
    const int64_t io_key = p.io_in_graph ? 1 + (p.nk ? 1 : 0) + 2 * slot : 0;
    const int64_t fed_key = p.fed_on_gpu ? int64_t(fed.cand) * 128 + fed.top_n : -1;
    p.key = std::make_tuple(T, R, p.S, p.stride, p.n_tiles, p.kv_splits, p.max_tile, p.top_n,
                            int64_t(p.sample ? 2 : p.pick ? 1 : 0), io_key, fed_key);
    return p;
}

} // namespace es
