// The CPU backend against HF transformers (float32) on every reference checkpoint in tests/data
// and on the embedded default model (resources/models/default):
// teacher-forced logits (NMSE <= 1e-6 and the same argmax at every position) and the greedy
// continuation (identical ids). References come from tests/reference/make_reference.py, run on
// the GPU machine. Also checks the CLI's `logits` command end to end on one checkpoint.
#include "engine/core/compare.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cuda/cuda_twin_model.h"
#include "engine/model/model_config.h"
#include "engine/model/npy.h"
#include "engine/model/safetensors.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/model.h"
#include "engine_generate.h"
#include "kernels/fp8_quantize.cuh"

#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <cmath>
#include <cstring>
#include <map>

namespace {

struct reference {
    std::vector<int32_t> prompt, greedy;
};

reference read_reference(const QString &dir) {
    QFile f(dir + "/reference.json");
    if (!f.open(QIODevice::ReadOnly)) qFatal("cannot open %s", qPrintable(f.fileName()));
    const QJsonObject o = QJsonDocument::fromJson(f.readAll()).object();
    reference r;
    for (const auto v : o["prompt_ids"].toArray()) r.prompt.push_back(v.toInt());
    for (const auto v : o["greedy_ids"].toArray()) r.greedy.push_back(v.toInt());
    return r;
}

double nmse(const float *a, const float *b, size_t n) {
    return es::nmse(std::span<const float>(a, n), std::span<const float>(b, n));
}

size_t argmax(const float *x, size_t n) { return size_t(std::max_element(x, x + n) - x); }

} // namespace

class TestModelReference : public QObject {
    Q_OBJECT
private slots:
    void logits_data();
    void logits();
    void greedy_data() { logits_data(); }
    void greedy();
    void cliLogits();
    void weightRoundingMatchesTheGpuQuantizer();
    void emulatedPrecision_data() { logits_data(); }
    void emulatedPrecision();
    void storedTypesGiveTheFp32Bits_data() { logits_data(); }
    void storedTypesGiveTheFp32Bits();
};

void TestModelReference::logits_data() {
    QTest::addColumn<QString>("dir");
    const QDir data(ES_TEST_DATA_DIR);
    int n = 0;
    for (const QString &name : data.entryList(QDir::Dirs | QDir::NoDotAndDotDot, QDir::Name)) {
        if (!QFile::exists(data.filePath(name + "/ref_logits.npy"))) continue;
        QTest::newRow(qPrintable(name)) << data.filePath(name);
        ++n;
    }
    QVERIFY2(n >= 5, "expected at least five reference checkpoints in tests/data");
    // The embedded default model (resources/models/default) carries its own HF reference.
    const QString def = QString(ES_TEST_DATA_DIR) + "/../../resources/models/default";
    if (QFile::exists(def + "/ref_logits.npy")) QTest::newRow("default-model") << QDir::cleanPath(def);
}

namespace {

// Logits of one sequence from position 0 through a fresh cache.
std::vector<float> prompt_logits(es::backend &be, const std::vector<int32_t> &prompt) {
    if (!be.init_kv_cache({16, 8}).ok()) return {};
    es::batch b;
    b.seqs.resize(1);
    b.seqs[0].block_table = {0, 1, 2, 3, 4, 5, 6, 7};
    b.tokens = prompt;
    for (int32_t i = 0; i < int32_t(prompt.size()); ++i) {
        b.pos.push_back(i);
        b.seq.push_back(0);
        b.logits_rows.push_back(i);
    }
    es::forward_output out;
    if (!be.forward(b, out).ok()) return {};
    return out.logits;
}

} // namespace

// The CPU's E4M3 rounding is the GPU's quantizer (fp8_quantize's twin) followed by e4m3 × scale.
void TestModelReference::weightRoundingMatchesTheGpuQuantizer() {
    const int64_t rows = 3, cols = 37;
    std::vector<float> w(size_t(rows * cols));
    for (size_t i = 0; i < w.size(); ++i) w[i] = std::sin(float(i) * 0.7f) * (i % 5 == 0 ? 30.0f : 0.01f);
    std::fill(w.begin() + cols, w.begin() + 2 * cols, 0.0f); // an all-zero row: scale 1
    std::vector<es::bf16_t> b(w.size());
    for (size_t i = 0; i < w.size(); ++i) b[i] = es::float_to_bf16_bits(w[i]);
    std::vector<es::fp8_t> q(w.size());
    std::vector<float> scale(static_cast<size_t>(rows));
    es::fp8_quantize_ref({b.data(), q.data(), scale.data(), rows, cols});
    std::vector<float> mine = w;
    es::round_cpu_weights(mine.data(), rows, cols, es::cpu_weight_rounding::fp8_e4m3);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
            const size_t i = size_t(r * cols + c);
            QCOMPARE(mine[i], es::fp8_e4m3_to_float(q[i]) * scale[size_t(r)]);
            // E4M3 keeps 3 mantissa bits: within 1/16 relative, or the subnormal step of the row.
            QVERIFY(std::abs(mine[i] - w[i]) <= std::abs(w[i]) / 16 + scale[size_t(r)] * 0x1p-9f + 1e-7f);
        }
    std::vector<float> bf = w;
    es::round_cpu_weights(bf.data(), rows, cols, es::cpu_weight_rounding::bf16);
    for (size_t i = 0; i < w.size(); ++i) QCOMPARE(bf[i], es::round_bf16(w[i]));
}

// The CPU emulating FP8 / BF16 weights: close to HF (bounded by what the rounding costs), further
// from it than the exact weights, and closer than the exact weights to the GPU's numerics (the
// CUDA backend's CPU twin) — the emulation measures what the precision does.
void TestModelReference::emulatedPrecision() {
    QFETCH(QString, dir);
    const reference ref = read_reference(dir);
    auto golden = es::read_npy_f32((dir + "/ref_logits.npy").toStdString());
    QVERIFY(golden.ok());
    std::vector<float> twin_fp8;
    {
        auto cfg = es::load_model_config(dir.toStdString());
        auto store = es::weight_store::open_dir(dir.toStdString());
        QVERIFY(cfg.ok() && store.ok());
        auto bound = es::bind_model_tensors(*cfg, **store);
        QVERIFY(bound.ok());
        // The emulation rounds weights only: the twin of decode-sized steps (GEMV on the FP8 codes,
        // BF16 activations).
        es::twin_options to;
        to.activations = es::activation_format::bf16;
        to.steps.assign(ref.prompt.size(), 1);
        auto tw = es::twin_forward_logits(*cfg, *bound, ref.prompt, es::weight_precision::fp8, to);
        QVERIFY2(tw.ok(), tw.ok() ? "" : tw.message().c_str());
        twin_fp8 = std::move(*tw);
    }
    std::map<std::string, std::vector<float>> logits;
    for (const char *mode : {"exact", "bf16", "fp8"}) {
        es::model_load_params lp;
        lp.need_tokenizer = false;
        lp.emulate_precision_on_cpu = std::string(mode) != "exact";
        lp.precision = std::string(mode) == "fp8" ? es::weight_precision::fp8 : es::weight_precision::bf16;
        auto m = es::load_model(dir.toStdString(), lp);
        QVERIFY2(m.ok(), m.ok() ? "" : m.message().c_str());
        const std::string name = (*m)->be->name();
        if (std::string(mode) == "fp8") QVERIFY2(name.find("fp8-e4m3") != std::string::npos, name.c_str());
        logits[mode] = prompt_logits(*(*m)->be, ref.prompt);
        QCOMPARE(logits[mode].size(), golden->data.size());
    }
    const size_t n = golden->data.size();
    const double exact = nmse(logits["exact"].data(), golden->data.data(), n);
    const double bf16 = nmse(logits["bf16"].data(), golden->data.data(), n);
    const double fp8 = nmse(logits["fp8"].data(), golden->data.data(), n);
    const double fp8_vs_twin = nmse(logits["fp8"].data(), twin_fp8.data(), n);
    const double exact_vs_twin = nmse(logits["exact"].data(), twin_fp8.data(), n);
    qInfo("%s: NMSE vs HF exact %.2e, bf16 %.2e, fp8 %.2e; vs the GPU twin (fp8): emulated %.2e, exact %.2e",
          qPrintable(QDir(dir).dirName()), exact, bf16, fp8, fp8_vs_twin, exact_vs_twin);
    QVERIFY(fp8 > exact);
    QVERIFY(fp8 < 0.1); // the self-test's FP8-vs-HF bound for the GPU
    QVERIFY(bf16 < 5e-3);
    QVERIFY(fp8_vs_twin < exact_vs_twin);
}

// Weights held as BF16 (the checkpoint's), or as the GPU holds them (BF16, E4M3 codes with a
// scale a row), give every logit bit for bit as the same values held in fp32 — the layout the
// backend had before, and the one the HF references were first met with — in a fraction of the
// bytes, which cpu_weight_bytes counts before loading.
void TestModelReference::storedTypesGiveTheFp32Bits() {
    QFETCH(QString, dir);
    const reference ref = read_reference(dir);
    auto cfg = es::load_model_config(dir.toStdString());
    auto store = es::weight_store::open_dir(dir.toStdString());
    QVERIFY(cfg.ok() && store.ok());
    auto bound = es::bind_model_tensors(*cfg, **store);
    QVERIFY(bound.ok());
    const struct {
        es::cpu_weight_rounding rounding;
        const char *held; // the linears' type in the backend's name
    } modes[] = {{es::cpu_weight_rounding::none, "bf16 weights"},
                 {es::cpu_weight_rounding::bf16, "bf16 weights"},
                 {es::cpu_weight_rounding::fp8_e4m3, "fp8-e4m3 weights"}};
    for (const auto &mode : modes) {
        es::cpu_backend_params wide, compact;
        wide.rounding = compact.rounding = mode.rounding;
        wide.widen_to_fp32 = true;
        auto a = es::make_cpu_backend(*cfg, *bound, wide);
        auto b = es::make_cpu_backend(*cfg, *bound, compact);
        QVERIFY2(a.ok() && b.ok(), a.ok() ? (b.ok() ? "" : b.message().c_str()) : a.message().c_str());
        QVERIFY2((*b)->name().find(mode.held) != std::string::npos, (*b)->name().c_str());
        const std::vector<float> fp32 = prompt_logits(**a, ref.prompt), held = prompt_logits(**b, ref.prompt);
        QCOMPARE(held.size(), ref.prompt.size() * size_t(cfg->n_vocab));
        QVERIFY2(fp32.size() == held.size() &&
                     std::memcmp(fp32.data(), held.data(), held.size() * sizeof(float)) == 0,
                 qPrintable(QString("rounding %1: the logits differ from the fp32-held weights'")
                                .arg(int(mode.rounding))));
        // Bytes: what cpu_weight_bytes says before loading; every BF16 matrix at half its fp32 bytes
        // (the fp32 norms, biases and F32 routers stay), E4M3 linears smaller still.
        auto want_a = es::cpu_weight_bytes(*cfg, *bound, wide),
             want_b = es::cpu_weight_bytes(*cfg, *bound, compact);
        QVERIFY(want_a.ok() && want_b.ok());
        QCOMPARE((*a)->weights_bytes(), *want_a);
        QCOMPARE((*b)->weights_bytes(), *want_b);
        QCOMPARE((*a)->weights_bytes(), size_t(cfg->n_params()) * 4);
        QVERIFY2((*b)->weights_bytes() < (*a)->weights_bytes() * 11 / 20,
                 qPrintable(QString("%1 of %2 bytes").arg((*b)->weights_bytes()).arg((*a)->weights_bytes())));
        if (mode.rounding == es::cpu_weight_rounding::fp8_e4m3)
            QVERIFY((*b)->weights_bytes() < *es::cpu_weight_bytes(*cfg, *bound, {}));
    }
}

void TestModelReference::logits() {
    QFETCH(QString, dir);
    const reference ref = read_reference(dir);
    auto golden = es::read_npy_f32((dir + "/ref_logits.npy").toStdString());
    QVERIFY2(golden.ok(), golden.ok() ? "" : golden.message().c_str());

    es::model_load_params lp;
    lp.need_tokenizer = false;
    auto m = es::load_model(dir.toStdString(), lp);
    QVERIFY2(m.ok(), m.ok() ? "" : m.message().c_str());
    es::backend &be = *(*m)->be;
    const int64_t V = be.config().n_vocab, T = int64_t(ref.prompt.size());
    QCOMPARE(golden->shape, (std::vector<int64_t>{T, V}));

    // Two chunks with positions continuing through the paged cache, as a prefix-cached run would.
    QVERIFY(be.init_kv_cache({16, 4}).ok());
    std::vector<float> logits;
    es::batch b;
    b.seqs.resize(1);
    b.seqs[0].block_table = {3, 1}; // deliberately not in order: the block table is honoured
    const int32_t split = 10;
    for (int32_t start : {0, split}) {
        const int32_t end = start == 0 ? split : int32_t(T);
        b.tokens.assign(ref.prompt.begin() + start, ref.prompt.begin() + end);
        b.pos.clear();
        b.seq.assign(b.tokens.size(), 0);
        b.logits_rows.clear();
        for (int32_t i = start; i < end; ++i) {
            b.pos.push_back(i);
            b.logits_rows.push_back(i - start);
        }
        es::forward_output out;
        auto s = be.forward(b, out);
        QVERIFY2(s.ok(), s.ok() ? "" : s.message().c_str());
        logits.insert(logits.end(), out.logits.begin(), out.logits.end());
    }
    QCOMPARE(int64_t(logits.size()), T * V);
    const double e = nmse(logits.data(), golden->data.data(), logits.size());
    QVERIFY2(e <= 1e-6, qPrintable(QString("NMSE %1 > 1e-6").arg(e)));
    for (int64_t t = 0; t < T; ++t)
        QVERIFY2(argmax(&logits[t * V], V) == argmax(&golden->data[t * V], V),
                 qPrintable(QString("argmax differs at position %1").arg(t)));
    qInfo("%s: NMSE %.3e", qPrintable(QDir(dir).dirName()), e);
}

void TestModelReference::greedy() {
    QFETCH(QString, dir);
    const reference ref = read_reference(dir);
    es::model_load_params lp;
    lp.need_tokenizer = false;
    auto m = es::load_model(dir.toStdString(), lp);
    QVERIFY2(m.ok(), m.ok() ? "" : m.message().c_str());
    es::sampling_params sp;
    sp.temperature = 0.0f;
    sp.max_tokens = int32_t(ref.greedy.size());
    sp.stop_ids.clear(); // HF's reference loop does not stop at eos
    es::engine_params ep;
    ep.max_batched_tokens = 7; // prefill in several chunks, not a tile multiple
    es::engine e(ep);
    const es::status st = e.load_model(std::move(*m)).get();
    QVERIFY2(st.ok(), st.ok() ? "" : st.message().c_str());
    const es_test::generation r = es_test::generate_with_engine(e, ref.prompt, sp);
    QVERIFY2(r.ok(), r.error.c_str());
    QCOMPARE(r.tokens, ref.greedy);
}

void TestModelReference::cliLogits() {
#ifndef ES_CLI_PATH
    QSKIP("expertscope-cli is not built");
#else
    const QString dir = QString(ES_TEST_DATA_DIR) + "/moe-odd";
    const reference ref = read_reference(dir);
    QStringList ids;
    for (int32_t id : ref.prompt) ids << QString::number(id);
    QTemporaryDir tmp;
    const QString out = tmp.filePath("logits.npy");
    QProcess p;
    p.start(ES_CLI_PATH, {"logits", "--model", dir, "--ids", ids.join(','), "--out", out});
    QVERIFY(p.waitForFinished(60000));
    QVERIFY2(p.exitCode() == 0, p.readAllStandardError().constData());
    auto mine = es::read_npy_f32(out.toStdString());
    auto golden = es::read_npy_f32((dir + "/ref_logits.npy").toStdString());
    QVERIFY(mine.ok() && golden.ok());
    QCOMPARE(mine->shape, golden->shape);
    QVERIFY(nmse(mine->data.data(), golden->data.data(), golden->data.size()) <= 1e-6);
#endif
}

QTEST_GUILESS_MAIN(TestModelReference)
#include "test_model_reference.moc"
