// The CUDA backend's step planner (engine/cuda/backend/step_plan.h) on the CPU: layouts, the
// decisions each shape of step gets (fusions, the MoE path, KV splits, graphs, transfers), the
// graph key, and the refusals. No GPU needed: the plan is pure host code.
#include "engine/cuda/backend/step_plan.h"
#include "engine/core/status.h"

#include <QtTest>

#include <set>

namespace {

es::model_config shape(const char *name) {
    auto c = es::model_config_for_shape(name);
    if (!c) qFatal("%s", c.message().c_str());
    return *c;
}

// n_seqs sequences decoding one token each at position pos (block size 16), or one sequence
// prefilling `prefill` tokens from 0 when prefill > 0; logits of every sequence's last token.
es::batch make_batch(int n_seqs, int pos, int prefill = 0, int top_n = 0, float temperature = 0.0f) {
    es::batch b;
    const int per_seq = prefill > 0 ? prefill : 1;
    for (int s = 0; s < n_seqs; ++s) {
        es::batch_seq seq;
        const int last = prefill > 0 ? prefill - 1 : pos;
        for (int blk = 0; blk <= last / 16; ++blk) seq.block_table.push_back(s * 100 + blk);
        b.seqs.push_back(seq);
        for (int t = 0; t < per_seq; ++t) {
            b.tokens.push_back(5 + t);
            b.pos.push_back(prefill > 0 ? t : pos);
            b.seq.push_back(s);
        }
        b.logits_rows.push_back(int32_t(b.tokens.size()) - 1);
        b.temperatures.push_back(temperature);
    }
    b.top_n = top_n;
    return b;
}

es::step_plan plan(const es::batch &b, const es::plan_options &o = {}, const es::fed_source &fed = {},
                   int64_t prev_rows = 0, int slot = 0, const char *name = "ernie-4.5-21b-a3b") {
    const es::model_config c = shape(name);
    return es::plan_step(c, c.n_moe_layers(), b, o, fed, prev_rows, slot);
}

} // namespace

class TestStepPlan : public QObject {
    Q_OBJECT
private slots:
    void inputLayoutIsPackedAndAligned() {
        const es::input_layout l = es::make_input_layout(3, 2, 5);
        const std::vector<size_t> offs{l.tokens, l.pos, l.seq, l.rows, l.temps, l.samp, l.tiles, l.bt};
        for (size_t o : offs) QCOMPARE(o % 16, size_t(0));
        QCOMPARE(l.pos - l.tokens, size_t(16)); // 3 int32 round up to 16 bytes
        QCOMPARE(l.samp - l.temps, size_t(16));
        QCOMPARE(l.tiles - l.samp, 2 * sizeof(es::row_sampling)); // a row_sampling per row
        QCOMPARE(l.bt - l.tiles, size_t(32)); // 2·3 int32 → 32 bytes
        QCOMPARE(l.total, l.bt + size_t(32));
    }

    void workLayoutRegionsAreDisjointAndAligned_data() {
        QTest::addColumn<QString>("name");
        QTest::addColumn<bool>("fp8");
        QTest::newRow("0.3b bf16") << "ernie-4.5-0.3b" << false;
        QTest::newRow("21b-a3b fp8") << "ernie-4.5-21b-a3b" << true;
    }
    void workLayoutRegionsAreDisjointAndAligned() {
        QFETCH(QString, name);
        QFETCH(bool, fp8);
        es::workspace_shape s;
        s.cfg = shape(name.toUtf8().constData());
        s.n_moe = s.cfg.n_moe_layers();
        s.max_ff = std::max<int64_t>(s.cfg.n_ff, s.cfg.n_ff_exp * s.cfg.n_expert_shared);
        s.fp8_activations = fp8;
        s.pick_keys_cap = 64 * 132;
        const es::work_layout w = es::make_work_layout(s, 16, 4, 64);
        std::set<size_t> starts{w.x, w.xn, w.qkv, w.q, w.attn, w.gu, w.act, w.out, w.xr, w.logits,
                                w.router_logits, w.router_counters, w.attn_counters, w.slot_rows,
                                w.topk_scratch, w.topk_counters, w.samp_weights, w.pick_keys, w.attn_partial};
        if (s.n_moe) starts.insert({w.act_e, w.y_e, w.counts, w.offsets, w.tile_offsets, w.sorted});
        if (fp8) starts.insert({w.act_q, w.act_scale});
        for (size_t o : starts) QCOMPARE(o % 256, size_t(0));
        QVERIFY(*starts.rbegin() < w.total);
        QVERIFY(w.logits + size_t(4 * s.cfg.n_vocab) * 4 <= w.router_logits); // the logits rows fit
        QCOMPARE(w.in_total, es::make_input_layout(16, 4, 64).total);
        QCOMPARE(w.act_k, fp8 ? std::max({s.cfg.n_embd, s.cfg.q_dim(), s.max_ff}) : int64_t(0));
    }

    void candidateBlockLayout() {
        QCOMPARE(es::cand_sums_offset(1, 1), size_t(16)); // id, value, max, then 8-aligned sums
        QCOMPARE(es::cand_bytes(1, 1), size_t(24));
        QCOMPARE(es::cand_sums_offset(3, 64) % 8, size_t(0));
        const es::out_layout o = es::make_out_layout(512, 2, 3, 6);
        QCOMPARE(o.ids, size_t(512));
        QCOMPARE(o.wts, size_t(512 + 2 * 3 * 6 * 4));
        QCOMPARE(o.margins, o.wts + size_t(2 * 3 * 6 * 4));
        QCOMPARE(o.cand % 16, size_t(0));
        QVERIFY(o.cand >= o.margins + size_t(2 * 3) * 4);
    }

    // A step whose batch carries an expert intervention: moe_reroute after each router, eagerly,
    // with K the widest k of the batch and the workspace's tokens scaled to hold T · K places.
    void interventionStepsRerouteEagerlyWithTheWidestK() {
        const es::model_config c = shape("ernie-4.5-21b-a3b");
        es::batch b = make_batch(2, 40, 0, 1);
        QCOMPARE(es::step_routing_width(b, c), c.n_expert_used);
        const es::step_plan plain = plan(b);
        QVERIFY(!plain.reroute);
        QCOMPARE(plain.K, c.n_expert_used);
        QCOMPARE(plain.ws_T, plain.T);

        auto disable = std::make_shared<es::routing_intervention>();
        disable->disabled.push_back({-1, 3});
        b.seqs[0].routing = disable;
        const es::step_plan d = plan(b);
        QVERIFY(d.reroute);
        QVERIFY(!d.graphable); // the rules are uploaded per step
        QCOMPARE(d.K, c.n_expert_used);
        QCOMPARE(d.nk, d.n_moe * d.T * c.n_expert_used);

        auto wide = std::make_shared<es::routing_intervention>();
        wide->top_k = int32_t(c.n_expert_used + 4);
        b.seqs[1].routing = wide;
        const es::step_plan w = plan(b);
        QCOMPARE(w.K, c.n_expert_used + 4);
        QCOMPARE(w.nk, w.n_moe * w.T * w.K);
        QVERIFY(w.ws_T * c.n_expert_used >= w.T * w.K);
        QCOMPARE(w.cand_rel, es::make_out_layout(0, w.n_moe, w.T, w.K).cand);

        auto narrow = std::make_shared<es::routing_intervention>();
        narrow->top_k = 2;
        b.seqs[1].routing = narrow;
        QCOMPARE(es::step_routing_width(b, c), c.n_expert_used); // the model's k for the other sequence
        b.seqs[0].routing = narrow;
        QCOMPARE(es::step_routing_width(b, c), int64_t(2)); // every sequence under k = 2
        QCOMPARE(plan(b).nk, plan(b).n_moe * plan(b).T * 2);
        QCOMPARE(es::step_ws_tokens(7, 3, 6), int64_t(7));
        QCOMPARE(es::step_ws_tokens(7, 8, 6), int64_t(10)); // ⌈7 · 8 / 6⌉
    }

    void greedyOneTokenDecodeTakesEveryFusion() {
        const es::step_plan p = plan(make_batch(1, 40, 0, 1));
        QCOMPARE(p.T, int64_t(1));
        QVERIFY(p.fuse);
        QVERIFY(p.embed_in_qkv);
        QVERIFY(p.pick);
        QVERIFY(p.moe_decode_gemv);
        QVERIFY(p.moe_slot_counters);
        QVERIFY(p.shared_in_down);
        QVERIFY(p.combine_norm);
        QVERIFY(p.combine_norm_head);
        QVERIFY(p.graphable);
        QVERIFY(p.cand_block);
        QVERIFY(p.via_pinned);
        QVERIFY(p.io_in_graph);
        QVERIFY(!p.sync_now);
        QCOMPARE(p.kv_splits, es::decode_kv_splits(40));
        QCOMPARE(p.kv_splits, int64_t(2));
        QVERIFY(p.attention_splits);
        QCOMPARE(p.nk, p.n_moe * shape("ernie-4.5-21b-a3b").n_expert_used);
    }

    void sampledRowsAreNotPicked() {
        const es::step_plan p = plan(make_batch(1, 40, 0, 64, 0.8f));
        QVERIFY(!p.pick);
        QVERIFY(!p.sample);
        QCOMPARE(p.top_n, int64_t(64));
        QCOMPARE(p.logit_bytes, es::cand_bytes(1, 64));
    }

    // Rows drawn on the device: one slot a row in the candidates' block (the draw), never the
    // head's pick, and a graph of their own.
    void drawnRowsComeBackAsOneCandidate() {
        es::batch b = make_batch(2, 40, 0, 1);
        const es::step_plan greedy = plan(b);
        b.sampling.resize(b.logits_rows.size());
        b.sampling[0].temperature = 0.8f;
        const es::step_plan p = plan(b);
        QVERIFY(p.sample);
        QVERIFY(!p.pick);
        QCOMPARE(p.top_n, int64_t(1));
        QVERIFY(p.cand_block);
        QCOMPARE(p.logit_bytes, es::cand_bytes(2, 1));
        QVERIFY(p.key != greedy.key);
        es::batch one = make_batch(1, 40, 0, 1);
        one.sampling.resize(1);
        QVERIFY(!plan(one).pick); // a greedy spec is still a draw: the kernel applies its penalties
    }

    void batchedDecodeFusesLess() {
        const es::step_plan p = plan(make_batch(4, 300, 0, 1));
        QCOMPARE(p.T, int64_t(4));
        QVERIFY(!p.fuse);
        QVERIFY(!p.embed_in_qkv);
        QVERIFY(!p.pick); // four rows
        QVERIFY(p.moe_decode_gemv);
        QVERIFY(!p.combine_norm);
        QVERIFY(p.graphable);
        QCOMPARE(p.kv_splits, int64_t(10));
        QCOMPARE(p.S, int64_t(4));
        QCOMPARE(p.stride, int64_t(32)); // 19 blocks, rounded up to a power of two
    }

    void prefillIsGroupedEagerAndUnsplit() {
        const es::step_plan p = plan(make_batch(1, 0, 100));
        QCOMPARE(p.T, int64_t(100));
        QVERIFY(!p.moe_decode_gemv);
        QVERIFY(!p.graphable);
        QCOMPARE(p.kv_splits, int64_t(1));
        QVERIFY(!p.attention_splits);
        QVERIFY(p.via_pinned); // one full row
        QVERIFY(!p.sync_now);
        QVERIFY(!p.shared_in_down);
    }

    void manyFullRowsRunSynchronously() {
        es::batch b = make_batch(12, 10);
        const es::step_plan p = plan(b);
        QVERIFY(!p.via_pinned);
        QVERIFY(p.sync_now);
        QVERIFY(!p.graphable); // 12 tokens
    }

    void profilingIsEagerAndSynchronous() {
        es::plan_options o;
        o.profiling = true;
        const es::step_plan p = plan(make_batch(1, 40, 0, 1), o);
        QVERIFY(!p.graphable);
        QVERIFY(p.sync_now);
    }

    void optionsTurnPathsOff() {
        es::plan_options o;
        o.skipping_ops = true;
        es::step_plan p = plan(make_batch(1, 40, 0, 1), o);
        QVERIFY(p.fuse);
        QVERIFY(!p.embed_in_qkv);
        QVERIFY(!p.moe_slot_counters);
        o = {};
        o.fuse = false;
        p = plan(make_batch(1, 40, 0, 1), o);
        QVERIFY(!p.fuse && !p.embed_in_qkv && !p.combine_norm && !p.shared_in_down);
        o = {};
        o.moe_down_rows = false;
        p = plan(make_batch(1, 40, 0, 1), o);
        QVERIFY(!p.combine_norm && !p.shared_in_down && !p.moe_slot_counters);
        o = {};
        o.head_pick = false;
        QVERIFY(!plan(make_batch(1, 40, 0, 1), o).pick);
        o = {};
        o.zero_copy = false;
        QVERIFY(!plan(make_batch(1, 40, 0, 1), o).io_in_graph);
        o = {};
        o.use_graphs = false;
        QVERIFY(!plan(make_batch(1, 40, 0, 1), o).graphable);
        o = {};
        o.moe_gemv_max_tokens = 0;
        QVERIFY(!plan(make_batch(1, 40, 0, 1), o).moe_decode_gemv);
        o = {};
        o.record_routing = false;
        QCOMPARE(plan(make_batch(1, 40, 0, 1), o).nk, int64_t(0));
        o = {};
        o.kv_split_chunks = 4;
        QCOMPARE(plan(make_batch(1, 1000, 0, 1), o).kv_splits, es::decode_kv_splits(1000, 4));
    }

    void kvSplitsGrowWithTheContextUpToTheirCap() {
        QCOMPARE(es::decode_kv_splits(0), int64_t(1));
        QCOMPARE(es::decode_kv_splits(31), int64_t(1));
        QCOMPARE(es::decode_kv_splits(32), int64_t(2));
        QCOMPARE(es::decode_kv_splits(32 * 15), es::k_cluster_kv_splits);
        // Past a cluster's splits only where each would walk more than k_deep_split_chunks chunks.
        QCOMPARE(es::decode_kv_splits(32 * 100), es::k_cluster_kv_splits);
        QCOMPARE(es::decode_kv_splits(32 * 8 * 20), int64_t(20));
        QCOMPARE(es::decode_kv_splits(1000000), es::k_decode_kv_splits);
        QCOMPARE(es::decode_kv_splits(100000, 1, 16), int64_t(16));
        QCOMPARE(plan(make_batch(1, 100000, 0, 1)).kv_splits, int64_t(32)); // the plan's default cap
        QCOMPARE(es::decode_kv_splits(100, 1, 2), int64_t(2));
    }

    void graphKeysSeparateWhatGraphsHold() {
        const es::batch b = make_batch(1, 40, 0, 1);
        const es::step_plan s0 = plan(b, {}, {}, 0, 0), s1 = plan(b, {}, {}, 0, 1);
        QVERIFY(s0.key != s1.key); // the graph holds the slot's pinned pointers
        es::plan_options no_io;
        no_io.zero_copy = false;
        QVERIFY(plan(b, no_io, {}, 0, 0).key == plan(b, no_io, {}, 0, 1).key);
        es::batch later = make_batch(1, 41, 0, 1);
        QVERIFY(plan(later).key == s0.key); // the same splits: one graph replays both
        QVERIFY(plan(make_batch(1, 64, 0, 1)).key != s0.key); // three splits
    }

    void fedTokensReadTheLastCandidates() {
        es::batch b = make_batch(1, 40, 0, 1);
        b.tokens[0] = -1; // row 0's top candidate of the previous forward
        es::fed_source fed;
        fed.cand = 4096;
        fed.top_n = 1;
        fed.R = 1;
        fed.valid = true;
        const es::step_plan on_gpu = plan(b, {}, fed, 1);
        QVERIFY(on_gpu.has_fed && on_gpu.fed_on_gpu);
        fed.valid = false;
        const es::step_plan on_host = plan(b, {}, fed, 1);
        QVERIFY(on_host.has_fed && !on_host.fed_on_gpu);
        QVERIFY(on_gpu.key != on_host.key);
        b.tokens[0] = -2; // row 1: the previous forward had one row
        QVERIFY_THROWS_EXCEPTION(es::load_error, plan(b, {}, fed, 1));
    }

    void malformedRequestsAreRefused() {
        es::batch b = make_batch(1, 40, 0, 1);
        b.top_n = -1;
        QVERIFY_THROWS_EXCEPTION(es::load_error, plan(b));
        b = make_batch(2, 40, 0, 1);
        b.temperatures.pop_back();
        QVERIFY_THROWS_EXCEPTION(es::load_error, plan(b));
    }

    void anEmptyBatchPlansNothing() {
        es::batch b;
        const es::step_plan p = plan(b);
        QCOMPARE(p.T, int64_t(0));
        QVERIFY(!p.graphable);
    }
};

QTEST_GUILESS_MAIN(TestStepPlan)
#include "test_step_plan.moc"
