// The KV pool's budget (es::kv_budget_bytes, es::pick_kv_blocks): on a GPU the share
// gpu_memory_utilization leaves beside what is used (this process's weights and workspace, and
// other processes), raised towards one full context from what is free, capped at max_num_seqs full
// contexts; on the CPU min(1 GiB, RAM/4); kv_cache_bytes and n_kv_blocks override; never fewer
// than 2 blocks. The figures are the 21B-A3B's (28 layers, 4 KV heads of 128, context 131,072)
// on an 80 GB card, where the pool must hold at least 400K tokens by default. On the CPU the
// estimate's weights are the bytes the CPU backend holds once loaded, at every precision.
#include "engine/runtime/engine.h"
#include "engine/runtime/memory_estimate.h"
#include "engine/runtime/model.h"

#include <QtTest>

using namespace es;

namespace {

constexpr uint64_t GiB = uint64_t(1) << 30;

model_config shape_21b() {
    model_config c;
    c.n_layer = 28;
    c.n_head = 20;
    c.n_head_kv = 4;
    c.head_dim = 128;
    c.n_embd = 2560;
    c.n_ctx_train = 131072;
    return c;
}

// A 16-token block of BF16 keys and values in every layer.
uint64_t bf16_block_bytes(const model_config &c) { return 16 * uint64_t(c.kv_dim()) * 2 * 2 * uint64_t(c.n_layer); }

} // namespace

class TestMemoryEstimate : public QObject {
    Q_OBJECT
private slots:
    void gpuTakesTheShareLeftByWeightsAndWorkspace() {
        const model_config c = shape_21b();
        engine_params p;
        const uint64_t bb = bf16_block_bytes(c);
        const uint64_t total = 80 * GiB, used = 24 * GiB; // FP8 weights + workspace + CUDA context
        const uint64_t bytes = kv_budget_bytes(p, c, bb, {total, total - used});
        QCOMPARE(bytes, uint64_t(0.90 * double(total)) - used);
        const int64_t tokens = int64_t(pick_kv_blocks(p, c, bb, {total, total - used})) * p.block_size;
        QVERIFY2(tokens >= 400000, qPrintable(QString::number(tokens)));
    }

    void otherProcessesCountAsUsed() {
        const model_config c = shape_21b();
        engine_params p;
        const uint64_t bb = bf16_block_bytes(c);
        const uint64_t total = 80 * GiB;
        const uint64_t alone = kv_budget_bytes(p, c, bb, {total, 56 * GiB});
        const uint64_t shared = kv_budget_bytes(p, c, bb, {total, 46 * GiB}); // 10 GiB held elsewhere
        QCOMPARE(alone - shared, 10 * GiB);
    }

    void utilizationScalesTheBudget() {
        const model_config c = shape_21b();
        engine_params p;
        const uint64_t bb = bf16_block_bytes(c);
        p.gpu_memory_utilization = 0.5;
        QCOMPARE(kv_budget_bytes(p, c, bb, {80 * GiB, 56 * GiB}), 16 * GiB);
    }

    void oneFullContextWhereItFits() {
        const model_config c = shape_21b();
        engine_params p;
        const uint64_t bb = bf16_block_bytes(c);
        const uint64_t full = uint64_t(c.n_ctx_train / 16) * bb; // 7 GiB of BF16 KV
        // The share is spent (other processes hold most of the card), yet a context fits in what
        // is free with a twentieth of the card to spare: one full context.
        p.gpu_memory_utilization = 0.30;
        QCOMPARE(kv_budget_bytes(p, c, bb, {80 * GiB, 12 * GiB}), full);
        // Less is free: what is left beside the spare twentieth (6 of 10 GiB), as much context
        // as the card has.
        QCOMPARE(kv_budget_bytes(p, c, bb, {80 * GiB, 10 * GiB}), 6 * GiB);
        // Nothing beside the spare twentieth: the share (nothing) stands, 2 blocks.
        QCOMPARE(kv_budget_bytes(p, c, bb, {80 * GiB, 3 * GiB}), uint64_t(0));
        QCOMPARE(pick_kv_blocks(p, c, bb, {80 * GiB, 3 * GiB}), 2);
    }

    void cappedAtMaxNumSeqsFullContexts() {
        const model_config c = shape_21b();
        engine_params p;
        p.max_num_seqs = 2;
        const uint64_t bb = bf16_block_bytes(c);
        const uint64_t full = uint64_t(c.n_ctx_train / 16) * bb;
        QCOMPARE(kv_budget_bytes(p, c, bb, {141 * GiB, 130 * GiB}), 2 * full);
    }

    void explicitBytesAndBlocksOverride() {
        const model_config c = shape_21b();
        engine_params p;
        const uint64_t bb = bf16_block_bytes(c);
        p.kv_cache_bytes = 3 * GiB;
        QCOMPARE(kv_budget_bytes(p, c, bb, {80 * GiB, 56 * GiB}), 3 * GiB);
        QCOMPARE(kv_budget_bytes(p, c, bb), 3 * GiB);
        p.n_kv_blocks = 77;
        QCOMPARE(pick_kv_blocks(p, c, bb, {80 * GiB, 56 * GiB}), 77);
    }

    void cpuWeightsAreWhatTheBackendHolds_data() {
        QTest::addColumn<QString>("dir");
        QTest::addColumn<QString>("precision");
        for (const char *d : {"dense", "dense-untied", "moe-odd", "moe-sharded", "moe-shared"})
            for (const char *prec : {"exact", "bf16", "fp8"})
                QTest::newRow((std::string(d) + " " + prec).c_str())
                    << QString(ES_TEST_DATA_DIR "/") + d << QString(prec);
    }

    void cpuWeightsAreWhatTheBackendHolds() {
        QFETCH(QString, dir);
        QFETCH(QString, precision);
        engine_params p;
        p.load.kind = backend_kind::cpu;
        p.load.need_tokenizer = false;
        p.load.emulate_precision_on_cpu = precision != "exact";
        p.load.precision = precision == "fp8" ? weight_precision::fp8 : weight_precision::bf16;
        auto e = engine::estimate_memory(dir.toStdString(), p);
        QVERIFY2(e.ok(), e.ok() ? "" : e.message().c_str());
        auto m = load_model(dir.toStdString(), p.load);
        QVERIFY2(m.ok(), m.ok() ? "" : m.message().c_str());
        QCOMPARE(e->weights_bytes, uint64_t((*m)->be->weights_bytes()));
        // BF16 checkpoints: about half of fp32 (norms and F32 routers stay fp32).
        QVERIFY(e->weights_bytes < uint64_t((*m)->config.n_params()) * 4 * 11 / 20);
    }

    // A model not at hand (the download catalogue) is estimated from its config, its tensors typed
    // as the hub's checkpoints are; on checkpoints typed so, that is the headers' count exactly.
    void configEstimateIsTheCheckpointsOwn_data() {
        QTest::addColumn<QString>("dir");
        QTest::addColumn<QString>("precision");
        for (const char *d : {"dense", "dense-untied", "moe-sharded", "moe-shared"}) // moe-odd: a BF16 router
            for (const char *prec : {"exact", "bf16", "fp8"})
                QTest::newRow((std::string(d) + " " + prec).c_str())
                    << QString(ES_TEST_DATA_DIR "/") + d << QString(prec);
    }

    void configEstimateIsTheCheckpointsOwn() {
        QFETCH(QString, dir);
        QFETCH(QString, precision);
        engine_params p;
        p.load.kind = backend_kind::cpu;
        p.load.emulate_precision_on_cpu = precision != "exact";
        p.load.precision = precision == "fp8" ? weight_precision::fp8 : weight_precision::bf16;
        auto from_dir = engine::estimate_memory(dir.toStdString(), p);
        QVERIFY2(from_dir.ok(), from_dir.ok() ? "" : from_dir.message().c_str());
        auto cfg = load_model_config(dir.toStdString());
        QVERIFY(cfg.ok());
        auto from_config = engine::estimate_memory(*cfg, p);
        QVERIFY2(from_config.ok(), from_config.ok() ? "" : from_config.message().c_str());
        QCOMPARE(from_config->weights_bytes, from_dir->weights_bytes);
        QCOMPARE(from_config->kv_bytes, from_dir->kv_bytes);
        QCOMPARE(from_config->fits, from_dir->fits);
        QCOMPARE(from_config->summary, from_dir->summary);
    }

    // The 300B-A47B's shape (the catalogue's figures): 300B parameters, 47B active a token.
    void theLargestShape() {
        auto c = model_config_for_shape("ernie-4.5-300b-a47b");
        QVERIFY2(c.ok(), c.ok() ? "" : c.message().c_str());
        QVERIFY(!c->tie_word_embeddings);
        QCOMPARE(c->n_moe_layers(), int64_t(51));
        QVERIFY(c->n_params() > int64_t(299e9) && c->n_params() < int64_t(301e9));
        QVERIFY(c->n_params_active() > int64_t(47e9) && c->n_params_active() < int64_t(48.5e9));
    }

    void cpuKeepsItsRamDefault() {
        const model_config c = shape_21b();
        engine_params p;
        const uint64_t bb = 16 * uint64_t(c.kv_dim()) * 4 * 2 * uint64_t(c.n_layer); // fp32 K and V
        const uint64_t ram = physical_memory();
        QVERIFY(ram > 0);
        QCOMPARE(kv_budget_bytes(p, c, bb), std::min(GiB, ram / 4));
    }
};

QTEST_APPLESS_MAIN(TestMemoryEstimate)
#include "test_memory_estimate.moc"
