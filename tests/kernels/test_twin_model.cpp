// The twin model (the CUDA backend's numerics emulated on the CPU: engine/cuda/cuda_twin_model.h)
// against HF's logits on every reference checkpoint, and what its options change: the activation
// steps, the routed experts' FP8 activations, 128×128 block scales. Plain C++: runs without a GPU
// or a CUDA toolkit.
#include "kernel_twin_support.h"

#include "engine/cuda/cuda_twin_model.h"
#include "engine/model/npy.h"
#include "engine/model/safetensors.h"
#include "engine/runtime/model.h"

#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QtTest>

#include <algorithm>
#include <memory>
#include <random>

using namespace es_test;

class TestTwinModel : public QObject {
    Q_OBJECT
private slots:
    void twinModel_data();
    void twinModel();
    void twinModelActivationSteps();
    void twinModelRoutedFp8();
    void twinModelBlockScales();
    void bf16Fidelity_data();
    void bf16Fidelity();
    void twinModelInterventions_data();
    void twinModelInterventions();
};

void TestTwinModel::twinModel_data() {
    QTest::addColumn<QString>("dir");
    QTest::addColumn<bool>("fp8");
    QTest::addColumn<int>("act"); // es::activation_format
    QTest::addColumn<bool>("kv8"); // an FP8 KV cache
    const QDir data(ES_TEST_DATA_DIR);
    for (const QString &name : data.entryList(QDir::Dirs | QDir::NoDotAndDotDot, QDir::Name)) {
        if (!QFile::exists(data.filePath(name + "/ref_logits.npy"))) continue;
        QTest::newRow(qPrintable(name + " bf16"))
            << data.filePath(name) << false << int(es::activation_format::bf16) << false;
        for (auto a : {es::activation_format::bf16, es::activation_format::e4m3, es::activation_format::e5m2})
            QTest::newRow(qPrintable(name + " fp8 " + es::activation_format_name(a) + " act"))
                << data.filePath(name) << true << int(a) << false;
        QTest::newRow(qPrintable(name + " bf16, fp8 KV"))
            << data.filePath(name) << false << int(es::activation_format::bf16) << true;
        QTest::newRow(qPrintable(name + " fp8 e4m3 act, fp8 KV"))
            << data.filePath(name) << true << int(es::activation_format::e4m3) << true;
    }
}

// The CUDA backend's numerics, emulated, stay close to HF float32: BF16 activations cost a little
// (NMSE ≤ 5e-3), FP8 weights more (≤ 0.1, with E4M3 prefill activations too), E5M2 activations
// (two mantissa bits) more again (≤ 0.2: 0.03–0.1 on these models); a wrong layer order or layout
// would cost everything.
void TestTwinModel::twinModel() {
    QFETCH(QString, dir);
    QFETCH(bool, fp8);
    QFETCH(int, act);
    QFETCH(bool, kv8);
    QFile f(dir + "/reference.json");
    QVERIFY(f.open(QIODevice::ReadOnly));
    std::vector<int32_t> prompt;
    for (const auto v : QJsonDocument::fromJson(f.readAll()).object()["prompt_ids"].toArray()) prompt.push_back(v.toInt());
    auto golden = es::read_npy_f32((dir + "/ref_logits.npy").toStdString());
    QVERIFY(golden.ok());
    auto cfg = es::load_model_config(dir.toStdString());
    QVERIFY(cfg.ok());
    auto store = es::weight_store::open_dir(dir.toStdString());
    QVERIFY(store.ok());
    auto bound = es::bind_model_tensors(*cfg, **store);
    QVERIFY(bound.ok());
    es::twin_options to;
    to.activations = es::activation_format(act);
    to.kv_cache = kv8 ? es::kv_cache_dtype::fp8 : es::kv_cache_dtype::bf16;
    auto logits = es::twin_forward_logits(*cfg, *bound, prompt,
                                          fp8 ? es::weight_precision::fp8 : es::weight_precision::bf16, to);
    QVERIFY2(logits.ok(), logits.ok() ? "" : logits.message().c_str());
    const double e = nmse(*logits, golden->data);
    qInfo("%s %s (%s activations%s): twin model NMSE vs HF %.3e", qPrintable(QDir(dir).dirName()),
          fp8 ? "fp8" : "bf16", es::activation_format_name(to.activations), kv8 ? ", fp8 KV" : "", e);
    const double limit = !fp8                                            ? (kv8 ? 5e-2 : 5e-3)
                         : to.activations == es::activation_format::e5m2 ? 0.2
                                                                         : 0.1;
    QVERIFY2(e <= limit, qPrintable(QString("NMSE %1").arg(e)));
    if (kv8) { // the option reaches the cache: the same run with a BF16 cache differs
        to.kv_cache = es::kv_cache_dtype::bf16;
        auto bf_kv = es::twin_forward_logits(*cfg, *bound, prompt,
                                             fp8 ? es::weight_precision::fp8 : es::weight_precision::bf16, to);
        QVERIFY(bf_kv.ok());
        QVERIFY(*bf_kv != *logits);
    }
}

// The twin changes the numerics only for the tokens of steps above the GEMV threshold (quantized
// activations where cuBLASLt's FP8 GEMM can take the shape, else BF16-dequantized weights): steps
// of ≤ 8 tokens give the same logits whatever the activation format, a prefill-sized step changes
// them (with FP8 activations, and with BF16 ones through the dequantized weights), and bad steps
// are an error.
void TestTwinModel::twinModelActivationSteps() {
    const QString dir = QString(ES_TEST_DATA_DIR) + "/dense";
    QFile f(dir + "/reference.json");
    QVERIFY(f.open(QIODevice::ReadOnly));
    std::vector<int32_t> prompt;
    for (const auto v : QJsonDocument::fromJson(f.readAll()).object()["prompt_ids"].toArray())
        prompt.push_back(v.toInt());
    QVERIFY(prompt.size() > 2 * es::cuda_gemv_max_tokens);
    auto cfg = es::load_model_config(dir.toStdString());
    auto store = es::weight_store::open_dir(dir.toStdString());
    QVERIFY(cfg.ok() && store.ok());
    auto bound = es::bind_model_tensors(*cfg, **store);
    QVERIFY(bound.ok());
    auto run = [&](es::activation_format a, std::vector<int64_t> steps) {
        es::twin_options o;
        o.activations = a;
        o.steps = std::move(steps);
        return es::twin_forward_logits(*cfg, *bound, prompt, es::weight_precision::fp8, o);
    };
    const int64_t T = int64_t(prompt.size());
    auto bf = run(es::activation_format::bf16, std::vector<int64_t>(size_t(T), 1));
    auto bf_big = run(es::activation_format::bf16, {});
    auto small = run(es::activation_format::e4m3, std::vector<int64_t>(size_t(T), 1));
    auto big = run(es::activation_format::e4m3, {});
    auto mixed = run(es::activation_format::e4m3, {T - 3, 3});
    QVERIFY(bf.ok() && bf_big.ok() && small.ok() && big.ok() && mixed.ok());
    QVERIFY(*small == *bf);
    QVERIFY(*bf_big != *bf);
    QVERIFY(*big != *bf && *big != *bf_big);
    // The first T − 3 tokens' logits as in one big step (causal: later tokens do not matter).
    const size_t V = size_t(cfg->n_vocab), head = size_t(T - 3) * V;
    QVERIFY(std::equal(mixed->begin(), mixed->begin() + long(head), big->begin()));
    QVERIFY(!std::equal(mixed->begin() + long(head), mixed->end(), big->begin() + long(head)));
    QVERIFY(!run(es::activation_format::e4m3, {T - 1}).ok());
    QVERIFY(!run(es::activation_format::e4m3, {T, 0}).ok());
}

// The routed experts' FP8 activations in the twin (twin_options::grouped_fp8): taken in every
// step above the GEMV threshold, so such a step's logits change (and stay near the
// BF16-activation ones), while steps of GEMV size are the same bits as without the option.
void TestTwinModel::twinModelRoutedFp8() {
    const std::string dir = std::string(ES_TEST_DATA_DIR) + "/moe-shared";
    auto cfg = es::load_model_config(dir);
    auto store = es::weight_store::open_dir(dir);
    QVERIFY(cfg.ok() && store.ok());
    auto bound = es::bind_model_tensors(*cfg, **store);
    QVERIFY(bound.ok());
    std::vector<int32_t> prompt(size_t(4 * es::cuda_gemv_max_tokens));
    std::mt19937 gen(11);
    for (auto &t : prompt) t = int32_t(gen() % uint32_t(cfg->n_vocab));
    auto run = [&](bool routed, std::vector<int64_t> steps) {
        es::twin_options o;
        o.activations = es::activation_format::e4m3;
        o.steps = std::move(steps);
        o.grouped_fp8 = routed;
        auto r = es::twin_forward_logits(*cfg, *bound, prompt, es::weight_precision::fp8, o);
        return r.ok() ? *r : std::vector<float>{};
    };
    const auto plain = run(false, {}), routed = run(true, {});
    QVERIFY(!plain.empty() && !routed.empty());
    QVERIFY(routed != plain);
    QVERIFY(nmse(routed, plain) < 5e-2);
    // Steps of GEMV size (BF16 activations everywhere): the option changes nothing.
    const std::vector<int64_t> small(4, es::cuda_gemv_max_tokens);
    QCOMPARE(run(true, small), run(false, small));
}

// --fp8-scales block128 in the twin: the models whose every k is a multiple of 16 (dense, and
// MoE with each expert its own block grid) run with one scale per 128×128 block, as close to HF
// as per-channel scales (≤ 0.1) yet different from them; prefill-sized steps take BF16
// activations whatever was asked (cuBLASLt's FP8 GEMM takes per-row scales only); shapes the
// kernels cannot take (k % 16) are an error naming the option.
void TestTwinModel::twinModelBlockScales() {
    struct ref_model {
        std::vector<int32_t> prompt;
        std::vector<float> golden;
        es::model_config cfg;
        std::unique_ptr<es::weight_store> store;
        es::model_tensors t;
    };
    auto open = [](const QString &name, ref_model &m) {
        const QString dir = QString(ES_TEST_DATA_DIR) + "/" + name;
        QFile f(dir + "/reference.json");
        if (!f.open(QIODevice::ReadOnly)) return false;
        for (const auto v : QJsonDocument::fromJson(f.readAll()).object()["prompt_ids"].toArray())
            m.prompt.push_back(v.toInt());
        auto g = es::read_npy_f32((dir + "/ref_logits.npy").toStdString());
        auto cfg = es::load_model_config(dir.toStdString());
        auto store = es::weight_store::open_dir(dir.toStdString());
        if (!g.ok() || !cfg.ok() || !store.ok()) return false;
        m.golden = g->data;
        m.cfg = *cfg;
        m.store = std::move(*store);
        auto bound = es::bind_model_tensors(m.cfg, *m.store);
        if (!bound.ok()) return false;
        m.t = *bound;
        return true;
    };
    auto run = [](const ref_model &m, es::scale_layout l, es::activation_format a, bool head) {
        es::twin_options o;
        o.activations = a;
        o.fp8.scales = l;
        o.fp8.head = head;
        return es::twin_forward_logits(m.cfg, m.t, m.prompt, es::weight_precision::fp8, o);
    };
    for (const char *name : {"dense", "moe-shared", "moe-sharded"}) {
        ref_model m;
        QVERIFY(open(name, m));
        for (const bool head : {false, true}) {
            auto blk = run(m, es::scale_layout::block128, es::activation_format::e4m3, head);
            QVERIFY2(blk.ok(), blk.ok() ? "" : blk.message().c_str());
            auto blk_bf = run(m, es::scale_layout::block128, es::activation_format::bf16, head);
            auto ch = run(m, es::scale_layout::channel, es::activation_format::bf16, head);
            QVERIFY(blk_bf.ok() && ch.ok());
            const double e = nmse(*blk, m.golden), ec = nmse(*ch, m.golden);
            qInfo("%s fp8%s, block128 scales: twin model NMSE vs HF %.3e (per-channel scales %.3e)", name,
                  head ? " (head fp8)" : "", e, ec);
            QVERIFY2(e <= 0.1, qPrintable(QString("%1: NMSE %2").arg(name).arg(e)));
            QVERIFY(*blk == *blk_bf); // BF16 activations whatever was asked
            QVERIFY(*blk != *ch);     // the layout reaches the weights
        }
    }
    for (const char *name : {"dense-untied", "moe-odd"}) {
        ref_model m;
        QVERIFY(open(name, m));
        auto r = run(m, es::scale_layout::block128, es::activation_format::e4m3, false);
        QVERIFY2(!r.ok() && r.message().find("block128") != std::string::npos, name);
    }
}

// Every reference checkpoint, and the embedded default model, which carries its own HF reference.
void TestTwinModel::bf16Fidelity_data() {
    QTest::addColumn<QString>("dir");
    const QDir data(ES_TEST_DATA_DIR);
    for (const QString &name : data.entryList(QDir::Dirs | QDir::NoDotAndDotDot, QDir::Name))
        if (QFile::exists(data.filePath(name + "/ref_logits.npy")))
            QTest::newRow(qPrintable(name)) << data.filePath(name);
    const QString def = QDir::cleanPath(QString(ES_TEST_DATA_DIR) + "/../../resources/models/default");
    if (QFile::exists(def + "/ref_logits.npy")) QTest::newRow("default-model") << def;
}

namespace {

// The CPU backend's logits and routing of one sequence from position 0 (fp32: HF float32's
// logits within NMSE 1e-12).
bool cpu_forward(const QString &dir, const std::vector<int32_t> &prompt, es::forward_output &out,
                 std::shared_ptr<const es::routing_intervention> iv = nullptr) {
    es::model_load_params lp;
    lp.need_tokenizer = false;
    auto m = es::load_model(dir.toStdString(), lp);
    if (!m.ok() || !(*m)->be->init_kv_cache({16, 8}).ok()) return false;
    es::batch b;
    b.seqs.resize(1);
    b.seqs[0].block_table = {0, 1, 2, 3, 4, 5, 6, 7};
    b.seqs[0].routing = std::move(iv);
    b.tokens = prompt;
    for (int32_t i = 0; i < int32_t(prompt.size()); ++i) {
        b.pos.push_back(i);
        b.seq.push_back(0);
        b.logits_rows.push_back(i);
    }
    return (*m)->be->forward(b, out).ok();
}

// Whether token t's chosen experts (as a set) differ between two routings at some MoE layer.
bool routing_differs(const es::routing_record &a, const es::routing_record &b, size_t t) {
    if (a.ids.size() != b.ids.size()) return true;
    const size_t K = size_t(a.n_expert_used);
    for (size_t l = 0; l < a.ids.size(); ++l) {
        std::vector<int16_t> x(a.ids[l].begin() + long(t * K), a.ids[l].begin() + long(t * K + K)),
            y(b.ids[l].begin() + long(t * K), b.ids[l].begin() + long(t * K + K));
        std::sort(x.begin(), x.end());
        std::sort(y.begin(), y.end());
        if (x != y) return true;
    }
    return false;
}

} // namespace

// The BF16 path (the twin of one prefill step; decode-sized steps give the same bits at BF16)
// against the exact fp32 forward, position by position. BF16 rounds activations only where the
// next operation reads BF16 (the normalized rows, q/k/v, the attention output, SiLU·up): the
// residual stream, softmaxes, the router and every accumulation stay fp32, a subset of the
// roundings HF's own bf16 forward makes. Until the first token the router sends elsewhere than
// the CPU does, the positions stay within NMSE 3e-4 together and 1e-3 each (measured: 1.2e-4 and
// 7.6e-4; HF's bf16 forward reaches 1.1e-3 at a position on these prompts). From that token on a
// different expert's output is in the residual and the attention: moe-shared's token 17 (its
// first MoE layer, a gap of 5.1e-3 in p + bias) costs 3.3e-2 there. Those positions are reported,
// not bounded (ARCHITECTURE.md, "Fidelity of the BF16 path").
void TestTwinModel::bf16Fidelity() {
    QFETCH(QString, dir);
    QFile f(dir + "/reference.json");
    QVERIFY(f.open(QIODevice::ReadOnly));
    std::vector<int32_t> prompt;
    for (const auto v : QJsonDocument::fromJson(f.readAll()).object()["prompt_ids"].toArray())
        prompt.push_back(v.toInt());
    auto cfg = es::load_model_config(dir.toStdString());
    auto store = es::weight_store::open_dir(dir.toStdString());
    QVERIFY(cfg.ok() && store.ok());
    auto bound = es::bind_model_tensors(*cfg, **store);
    QVERIFY(bound.ok());
    es::forward_output cpu;
    QVERIFY(cpu_forward(dir, prompt, cpu));
    es::routing_record routing;
    es::twin_options to;
    to.activations = es::activation_format::bf16;
    to.routing = &routing;
    auto twin = es::twin_forward_logits(*cfg, *bound, prompt, es::weight_precision::bf16, to);
    QVERIFY2(twin.ok(), twin.ok() ? "" : twin.message().c_str());
    const size_t T = prompt.size(), V = size_t(cfg->n_vocab);
    QCOMPARE(twin->size(), T * V);
    QCOMPARE(cpu.logits.size(), T * V);
    QCOMPARE(routing.ids.size(), cpu.routing.ids.size());
    es::nmse_accumulator all, agreeing;
    double worst = 0, worst_agreeing = 0;
    size_t at = 0, n_agreeing = 0;
    QString flipped;
    bool context_agrees = true; // every token up to t routed as the CPU routes it
    for (size_t t = 0; t < T; ++t) {
        const std::span<const float> a(twin->data() + t * V, V), ref(cpu.logits.data() + t * V, V);
        const double e = es::nmse(a, ref);
        all.add(a, ref);
        if (e > worst) worst = e, at = t;
        if (routing_differs(routing, cpu.routing, t)) {
            flipped += QString(" %1 (%2)").arg(t).arg(e, 0, 'e', 2);
            context_agrees = false;
        }
        if (!context_agrees) continue;
        agreeing.add(a, ref);
        worst_agreeing = std::max(worst_agreeing, e);
        ++n_agreeing;
    }
    qInfo("%s bf16 vs the CPU backend: NMSE %.3e, worst position %zu %.3e; the %zu positions before any "
          "routing difference: NMSE %.3e, worst %.3e; tokens routed otherwise (their NMSE):%s",
          qPrintable(QDir(dir).dirName()), all.value(), at, worst, n_agreeing, agreeing.value(),
          worst_agreeing, flipped.isEmpty() ? " none" : qPrintable(flipped));
    QVERIFY2(agreeing.value() <= 3e-4, qPrintable(QString("NMSE %1").arg(agreeing.value())));
    QVERIFY2(worst_agreeing <= 1e-3, qPrintable(QString("worst position NMSE %1").arg(worst_agreeing)));
}

void TestTwinModel::twinModelInterventions_data() {
    QTest::addColumn<QString>("dir");
    const QDir data(ES_TEST_DATA_DIR);
    int n = 0;
    for (const QString &name : data.entryList(QDir::Dirs | QDir::NoDotAndDotDot, QDir::Name))
        if (QFile::exists(data.filePath(name + "/interventions.json"))) {
            QTest::newRow(qPrintable(name)) << data.filePath(name);
            ++n;
        }
    QVERIFY2(n >= 2, "expected MoE reference checkpoints with interventions.json in tests/data");
}

// The CUDA backend's way of applying an expert intervention (the router's logits, then
// moe_reroute under the layer's rule, K places with the padding at weight 0), emulated by the
// twin, against the CPU backend under the same intervention (which matches HF's logits under it:
// test_routing_intervention): the record's k and its padding exactly the CPU's, and the logits
// within the BF16 path's bound (bf16Fidelity) up to the first tipped routing decision. The
// self-test holds the GPU to this twin.
void TestTwinModel::twinModelInterventions() {
    QFETCH(QString, dir);
    QFile f(dir + "/reference.json"), cf(dir + "/interventions.json");
    QVERIFY(f.open(QIODevice::ReadOnly) && cf.open(QIODevice::ReadOnly));
    std::vector<int32_t> prompt;
    for (const auto v : QJsonDocument::fromJson(f.readAll()).object()["prompt_ids"].toArray())
        prompt.push_back(v.toInt());
    const QJsonArray cases = QJsonDocument::fromJson(cf.readAll()).object()["cases"].toArray();
    QVERIFY(!cases.isEmpty());
    auto cfg = es::load_model_config(dir.toStdString());
    auto store = es::weight_store::open_dir(dir.toStdString());
    QVERIFY(cfg.ok() && store.ok());
    auto bound = es::bind_model_tensors(*cfg, **store);
    QVERIFY(bound.ok());
    const size_t T = prompt.size(), V = size_t(cfg->n_vocab);
    es::twin_options to;
    to.activations = es::activation_format::bf16;
    // An empty intervention changes no bit.
    auto plain = es::twin_forward_logits(*cfg, *bound, prompt, es::weight_precision::bf16, to);
    to.intervention = std::make_shared<const es::routing_intervention>();
    auto empty = es::twin_forward_logits(*cfg, *bound, prompt, es::weight_precision::bf16, to);
    QVERIFY(plain.ok() && empty.ok());
    QVERIFY(*plain == *empty);
    for (const QJsonValue &cv : cases) {
        const QJsonObject c = cv.toObject();
        auto iv = es::make_routing_intervention(c["disable"].toString().toStdString(),
                                                c["force"].toString().toStdString(), c["top_k"].toInt(),
                                                float(c["bias_scale"].toDouble()), "disable", "force");
        QVERIFY2(iv.ok(), iv.ok() ? "" : iv.message().c_str());
        auto ivp = std::make_shared<const es::routing_intervention>(*iv);
        es::forward_output cpu;
        QVERIFY(cpu_forward(dir, prompt, cpu, ivp));
        es::routing_record routing;
        to.routing = &routing;
        to.intervention = ivp;
        auto twin = es::twin_forward_logits(*cfg, *bound, prompt, es::weight_precision::bf16, to);
        QVERIFY2(twin.ok(), twin.ok() ? "" : twin.message().c_str());
        QCOMPARE(twin->size(), T * V);
        QCOMPARE(routing.n_expert_used, cpu.routing.n_expert_used);
        QCOMPARE(routing.ids.size(), cpu.routing.ids.size());
        for (size_t l = 0; l < routing.ids.size(); ++l)
            for (size_t i = 0; i < routing.ids[l].size(); ++i)
                QCOMPARE(routing.ids[l][i] < 0, cpu.routing.ids[l][i] < 0); // the padding past each k
        es::nmse_accumulator agreeing;
        double worst_agreeing = 0;
        size_t n_agreeing = 0;
        for (size_t t = 0; t < T && !routing_differs(routing, cpu.routing, t); ++t, ++n_agreeing) {
            const std::span<const float> a(twin->data() + t * V, V), ref(cpu.logits.data() + t * V, V);
            agreeing.add(a, ref);
            worst_agreeing = std::max(worst_agreeing, es::nmse(a, ref));
        }
        qInfo("%s %s: the %zu of %zu positions before any routing difference: NMSE %.3e, worst %.3e",
              qPrintable(QDir(dir).dirName()), es::describe_routing_intervention(*iv).c_str(), n_agreeing, T,
              agreeing.value(), worst_agreeing);
        QVERIFY2(n_agreeing > 0, "the first token is routed otherwise than on the CPU");
        QVERIFY2(agreeing.value() <= 3e-4, qPrintable(QString("NMSE %1").arg(agreeing.value())));
        // A position on its own: 2e-3 (an intervention moves the logits the roundings act on;
        // moe-sharded with experts disabled reaches 1.2e-3; HF's own bf16 forward reaches 1.1e-3
        // … 3.4e-3 at a position of these prompts, ARCHITECTURE.md).
        QVERIFY2(worst_agreeing <= 2e-3, qPrintable(QString("worst position NMSE %1").arg(worst_agreeing)));
    }
}

QTEST_GUILESS_MAIN(TestTwinModel)
#include "test_twin_model.moc"
