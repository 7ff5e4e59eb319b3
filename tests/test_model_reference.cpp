// The CPU backend against HF transformers (float32) on every reference checkpoint in tests/data
// and on the embedded default model (resources/models/default):
// teacher-forced logits (NMSE <= 1e-6 and the same argmax at every position) and the greedy
// continuation (identical ids). References come from tests/reference/make_reference.py, run on
// the GPU machine. Also checks the CLI's `logits` command end to end on one checkpoint.
#include "generate.h"
#include "model.h"
#include "npy.h"

#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <cmath>

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

// Normalized mean squared error: sum((a-b)²) / sum(b²).
double nmse(const float *a, const float *b, size_t n) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < n; ++i) {
        num += double(a[i] - b[i]) * double(a[i] - b[i]);
        den += double(b[i]) * double(b[i]);
    }
    return den > 0 ? num / den : num;
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
    es::generate_params gp;
    gp.prefill_chunk = 7; // several chunks, not a tile multiple
    auto r = es::generate_tokens(*(*m)->be, ref.prompt, sp, gp);
    QVERIFY2(r.ok(), r.ok() ? "" : r.message().c_str());
    QCOMPARE(r->tokens, ref.greedy);
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
