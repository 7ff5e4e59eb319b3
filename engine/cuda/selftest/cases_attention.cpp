// The self-test's attention cases (selftest_cases.h): the CUDA-core, decode and tensor-core
// kernels over paged KV caches (BF16 and FP8), against attention_ref; where the decode kernel
// merges its KV splits in a cluster, the merge through memory and the merge by pushes must give
// the same bits.
#include "engine/cuda/selftest/selftest_cases.h"

#include <cmath>
#include <numeric>

namespace es::selftest {

namespace {

// The tensor-core attention kernels feed P·V with P rounded to BF16 (as flash-attention does);
// a CPU emulation of the kernel against the fp32 twin reached 0.0113 (prefill 700, group 5).
constexpr double k_attention_tc_limit = 2e-2;

} // namespace

attention_params attention_case::launch_shape() const {
    attention_params shape; // the launcher's choice from the shape (the device buffers are aligned)
    std::vector<int32_t> seq_of;
    for (size_t s = 0; s < seqs.size(); ++s) seq_of.insert(seq_of.end(), size_t(seqs[s].second), int32_t(s));
    shape.n_tokens = int64_t(seq_of.size());
    const std::vector<int32_t> shape_tiles =
        attention_tiles(seq_of.data(), shape.n_tokens, n_head / n_head_kv);
    shape.n_tiles = int64_t(shape_tiles.size() / 2);
    // As the engine passes it: the most tokens a tile holds (1 lets the decode kernel skip the plan).
    for (size_t i = 1; i < shape_tiles.size(); i += 2)
        shape.max_tile_tokens = std::max<int64_t>(shape.max_tile_tokens, shape_tiles[i]);
    shape.n_head = n_head;
    shape.n_head_kv = n_head_kv;
    shape.head_dim = hd;
    shape.block_size = bs;
    shape.kv_splits = splits;
    shape.path = path;
    shape.kv = kv;
    return shape;
}

std::string attention_case::name() const {
    const attention_params shape = launch_shape();
    const bool tc = attention_uses_tensor_cores(shape);
    return shape_name("attention", {{"heads", n_head}, {"kv", n_head_kv}, {"hd", hd}},
                      label + (splits > 1 ? " kv_splits=" + std::to_string(splits) : "") +
                          (bs != 16 ? " bs=" + std::to_string(bs) : "") +
                          (tc                                  ? " tc"
                           : path == attention_path::cuda_core ? " cuda-core"
                                                               : "") +
                          kv_label(kv));
}

void attention_case::run(runner &R, const std::string &name) const {
    const attention_params shape = launch_shape();
    const bool tc = attention_uses_tensor_cores(shape);
    const int64_t qd = n_head * hd, kvd = n_head_kv * hd;
    std::vector<int32_t> pos, seq;
    int64_t stride = 1;
    for (size_t s = 0; s < seqs.size(); ++s) {
        for (int32_t i = 0; i < seqs[s].second; ++i) {
            pos.push_back(seqs[s].first + i);
            seq.push_back(int32_t(s));
        }
        stride = std::max<int64_t>(stride, (seqs[s].first + seqs[s].second + bs - 1) / bs);
    }
    const int64_t T = int64_t(pos.size()), S = int64_t(seqs.size()), n_blocks = S * stride + 3;
    // Each sequence's blocks are distinct and out of order (the block table is honoured).
    std::vector<int32_t> bt(static_cast<size_t>(S * stride));
    std::vector<int32_t> perm(static_cast<size_t>(n_blocks));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng());
    for (size_t i = 0; i < bt.size(); ++i) bt[i] = perm[i];
    auto q = rand_bf16(static_cast<size_t>(T * qd), -2, 2);
    // K, V: BF16 pools, or FP8 ones quantized from the same kind of values (the twin reads the
    // same codes, widened as the kernels widen them).
    const auto k = kv_pool_of(rand_bf16(static_cast<size_t>(n_blocks * bs * kvd), -2, 2), kv, k_test_k_scale),
               v = kv_pool_of(rand_bf16(static_cast<size_t>(n_blocks * bs * kvd)), kv, k_test_v_scale);
    const int64_t group = n_head / n_head_kv;
    const std::vector<int32_t> tiles = attention_tiles(seq.data(), T, group);
    dvec<bf16_t> dq(q), dout(static_cast<size_t>(T * qd));
    dvec<uint8_t> dk(k), dv(v);
    dvec<int32_t> dpos(pos), dseq(seq), dbt(bt), dtiles(tiles);
    attention_params p;
    p.q = dq.get();
    p.k_cache = dk.get();
    p.v_cache = dv.get();
    p.pos = dpos.get();
    p.seq = dseq.get();
    p.block_tables = dbt.get();
    p.bt_stride = stride;
    p.tiles = dtiles.get();
    p.n_tiles = int64_t(tiles.size() / 2);
    p.max_tile_tokens = shape.max_tile_tokens;
    p.out = dout.get();
    p.n_tokens = T;
    p.n_head = n_head;
    p.n_head_kv = n_head_kv;
    p.head_dim = hd;
    p.block_size = bs;
    p.scale = 1.0f / std::sqrt(float(hd));
    p.kv = kv;
    p.k_scale = k_test_k_scale;
    p.v_scale = k_test_v_scale;
    dvec<float> dpart(
        static_cast<size_t>(attention_partial_floats(p.n_tiles, n_head, n_head_kv, hd, splits)));
    dvec<unsigned> dcounters(std::vector<unsigned>(static_cast<size_t>(p.n_tiles * n_head_kv), 0u));
    p.kv_splits = splits;
    p.partial = splits > 1 ? dpart.get() : nullptr;
    p.counters = dcounters.get();
    p.path = path;
    if (attention_uses_tensor_cores(p) != tc) throw test_failure("kernel choice differs from the shape's");
    ck(launch_attention(p, nullptr), "launch");
    sync(name);
    const std::vector<bf16_t> first = dout.download();
    ck(launch_attention(p, nullptr), "launch"); // again: split merging re-arms its counters
    sync(name);
    // Where the splits merged inside a cluster: the merge through memory and a counter, once
    // more after it re-armed its counters, gives the same bits (attention_decode.cu: merge_fold).
    // So does the cluster merge by pushes (attention.cuh: set_attention_merge_push).
    std::vector<bf16_t> by_counter, by_push;
    if (path == attention_path::automatic && attention_decode_clustered(p)) {
        set_attention_cluster_merge(false);
        const auto launched = launch_attention(p, nullptr);
        const auto again = launched == cudaSuccess ? launch_attention(p, nullptr) : launched;
        set_attention_cluster_merge(true);
        ck(again, "launch (counter merge)");
        sync(name);
        by_counter = dout.download();
        set_attention_merge_push(true);
        if (attention_decode_clustered(p)) {
            const auto pushed = launch_attention(p, nullptr);
            set_attention_merge_push(false);
            ck(pushed, "launch (cluster merge by pushes)");
            sync(name);
            by_push = dout.download();
        }
        set_attention_merge_push(false);
    }
    std::vector<bf16_t> out(static_cast<size_t>(T * qd));
    p.q = q.data();
    p.k_cache = k.data();
    p.v_cache = v.data();
    p.pos = pos.data();
    p.seq = seq.data();
    p.block_tables = bt.data();
    p.tiles = tiles.data();
    p.out = out.data();
    attention_ref(p);
    // Both tensor-core kernels (prefill, and decode when the launcher takes it) round P to BF16.
    const double limit = tc || (path == attention_path::automatic && attention_decode_ok(p))
                             ? k_attention_tc_limit
                             : k_bf16_limit;
    R.add("kernel", name, "max scaled err (bf16)", scaled_err(widen(dout.download()), widen(out)), limit);
    R.add("kernel", name + " (first launch)", "max scaled err (bf16)", scaled_err(widen(first), widen(out)),
          limit);
    if (!by_counter.empty())
        R.add("kernel", name + " cluster merge", "outputs differing from the counter merge's (bits)",
              bit_diffs(first, by_counter), 0.0);
    if (!by_push.empty())
        R.add("kernel", name + " cluster merge by pushes",
              "outputs differing from the counter merge's (bits)", bit_diffs(by_push, by_counter), 0.0);
}

} // namespace es::selftest
