// EngineSession against the real engine on the tiny reference models: tokens arrive as coalesced
// signals, cancel is immediate, two panes generate at once, failures are shown, the model load
// reports progress and errors, and destroying the session mid-reply is clean.
#include "engine/cuda/cuda_loader.h"
#include "engine/model/model_config.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/model.h"
#include "engine_session.h"

#include <QSignalSpy>
#include <QtTest>

using namespace es;

namespace {

const QString data_dir = QStringLiteral(ES_TEST_DATA_DIR);

ChatRequest ask(const QString &text, int max_tokens, std::optional<double> temperature = 0.0) {
    ChatRequest r;
    r.messages = {{MessageRole::User, text}};
    r.sampling.maxTokens = max_tokens;
    r.sampling.temperature = temperature;
    return r;
}

std::unique_ptr<EngineSession> loaded(const QString &model, EngineSessionOptions o = {}) {
    o.backend = "cpu";
    auto s = std::make_unique<EngineSession>(o);
    QSignalSpy ok(s.get(), &EngineSession::modelLoaded);
    s->loadModel(data_dir + "/" + model);
    if (!ok.wait(30000)) qFatal("model did not load");
    return s;
}

} // namespace

class TestEngineSession : public QObject {
    Q_OBJECT
private slots:
    void loadReportsProgressAndInfo();
    void loadFailureNamesTheProblem();
    void tokensArrive();
    void cancelIsImmediate();
    void twoPanesAtOnce();
    void failureIsShown();
    void estimateBeforeLoading();
    void shutdownWhileGenerating();
};

void TestEngineSession::loadReportsProgressAndInfo() {
    EngineSession s(EngineSessionOptions{.backend = "cpu"});
    QSignalSpy started(&s, &EngineSession::modelLoadStarted);
    QSignalSpy progress(&s, &EngineSession::modelLoadProgress);
    QSignalSpy ok(&s, &EngineSession::modelLoaded);
    s.loadModel(data_dir + "/moe-odd");
    QVERIFY(s.isLoading());
    QVERIFY(ok.wait(30000));
    QCOMPARE(started.count(), 1);
    QVERIFY(progress.count() >= 1);
    const SessionModelInfo info = s.modelInfo();
    QVERIFY(s.isModelLoaded());
    QCOMPARE(info.architecture, QString("Ernie4_5_MoeForCausalLM"));
    QCOMPARE(info.nExperts, 6);
    QCOMPARE(info.moeLayers, (QList<int>{1, 3}));
    QVERIFY(info.backend.startsWith("cpu"));
    QVERIFY(info.weightsBytes > 0);
}

void TestEngineSession::loadFailureNamesTheProblem() {
    EngineSession s(EngineSessionOptions{.backend = "cpu"});
    QSignalSpy failed(&s, &EngineSession::modelLoadFailed);
    s.loadModel("/nonexistent/folder");
    QVERIFY(failed.wait(10000));
    QVERIFY(failed.at(0).at(1).toString().contains("/nonexistent/folder"));
    QVERIFY(!s.isModelLoaded());
}

void TestEngineSession::tokensArrive() {
    auto s = loaded("moe-shared");
    QSignalSpy tokens(s.get(), &EngineSession::tokensGenerated);
    QSignalSpy done(s.get(), &EngineSession::replyFinished);
    QSignalSpy profiled(s.get(), &EngineSession::replyProfiled);
    const quint64 id = s->submit(ask("Hello", 40));
    QVERIFY(done.wait(30000));
    QCOMPARE(done.at(0).at(0).toULongLong(), id);
    QCOMPARE(done.at(0).at(1).toString(), QString("length"));
    int n = 0;
    for (const auto &args : tokens) n += args.at(2).toInt();
    QCOMPARE(n, 40);
    // Coalesced: far fewer signals than tokens would be normal, never more.
    QVERIFY(tokens.count() <= 40);
    const auto metrics = done.at(0).at(2).value<MessageMetrics>();
    QCOMPARE(metrics.nOutputTokens.value_or(0), 40);
    QCOMPARE(metrics.itlMs.size(), 39);
    QVERIFY(metrics.ttftMs.has_value());
    const auto routing = done.at(0).at(3).value<QList<LayerRouting>>();
    QCOMPARE(routing.size(), 2); // moe-shared: layers 1 and 2
    quint32 n_slots = 0;
    for (auto c : routing[0].expertCounts) n_slots += c;
    QVERIFY(n_slots > 0);
    QCOMPARE(s->activeReplies(), 0);
    // The profile: every token's time and the routing of every computed position.
    QCOMPARE(profiled.count(), 1);
    const auto profile = profiled.at(0).at(1).value<ReplyProfile>();
    QCOMPARE(profile.tokenTimesUs.size(), 40);
    QCOMPARE(profile.moeLayers, (QList<int>{1, 2}));
    const int positions = profile.nPromptTokens + 40 - 1; // the last token is sampled, never computed
    QCOMPARE(profile.ids.size(), qsizetype(positions * 2 * profile.k));
    // Telemetry agrees: the engine counted the same token slots.
    const TelemetryView t = s->telemetry();
    QVERIFY(t.valid);
    quint64 total = 0;
    for (quint64 c : t.expertTokens) total += c;
    QCOMPARE(total, quint64(profile.ids.size()));
}

void TestEngineSession::cancelIsImmediate() {
    auto s = loaded("moe-shared");
    QSignalSpy tokens(s.get(), &EngineSession::tokensGenerated);
    QSignalSpy done(s.get(), &EngineSession::replyFinished);
    const quint64 id = s->submit(ask("Go on", 3000));
    QVERIFY(tokens.wait(10000));
    s->cancel(id);
    // Synchronous: the signal is already there, no event loop turn needed.
    QCOMPARE(done.count(), 1);
    QCOMPARE(done.at(0).at(1).toString(), QString("cancelled"));
    QCOMPARE(s->activeReplies(), 0);
    const int after = tokens.count();
    QTest::qWait(200);
    QCOMPARE(tokens.count(), after); // nothing from that request after the cancel
}

void TestEngineSession::twoPanesAtOnce() {
    auto s = loaded("moe-odd");
    QSignalSpy done(s.get(), &EngineSession::replyFinished);
    QSignalSpy tokens(s.get(), &EngineSession::tokensGenerated);
    const quint64 a = s->submit(ask("【技术解析模式】What is routing?", 30));
    const quint64 b = s->submit(ask("【创意写作模式】写一首诗", 30, 0.9));
    QVERIFY(a != b);
    QTRY_COMPARE_WITH_TIMEOUT(done.count(), 2, 30000);
    QSet<quint64> seen;
    for (const auto &args : tokens) seen.insert(args.at(0).toULongLong());
    QVERIFY(seen.contains(a) && seen.contains(b));
}

void TestEngineSession::failureIsShown() {
    auto s = loaded("dense");
    QSignalSpy failed(s.get(), &EngineSession::replyFailed);
    ChatRequest r = ask("x", 4);
    r.sampling.topP = 0.0; // invalid: top_p must be in (0, 1]
    const quint64 id = s->submit(r);
    QVERIFY(failed.wait(10000));
    QCOMPARE(failed.at(0).at(0).toULongLong(), id);
    QVERIFY(failed.at(0).at(1).toString().contains("top_p"));
    // A prompt longer than the context.
    ChatRequest big = ask(QString("word ").repeated(5000), 4);
    s->submit(big);
    QVERIFY(failed.wait(20000));
    QVERIFY2(failed.at(1).at(1).toString().contains("context"), qPrintable(failed.at(1).at(1).toString()));
}

void TestEngineSession::estimateBeforeLoading() {
    const auto e = EngineSession::estimate(data_dir + "/moe-shared", EngineSessionOptions{.backend = "cpu"});
    QVERIFY(e.ok);
    QVERIFY(e.fits);
    QVERIFY(e.weightsBytes > 0);
    QVERIFY(!e.message.isEmpty());
    const auto bad = EngineSession::estimate("/nonexistent", {});
    QVERIFY(!bad.ok);
    QVERIFY(bad.message.contains("/nonexistent"));
    // The CPU holds the checkpoint's BF16 matrices as BF16 (its F32 routers and the norms fp32):
    // what the backend holds once loaded, about half of fp32's 4 bytes a parameter.
    const auto cfg = load_model_config((data_dir + "/moe-shared").toStdString());
    QVERIFY(cfg.ok());
    model_load_params lp;
    lp.need_tokenizer = false;
    auto held = load_model((data_dir + "/moe-shared").toStdString(), lp);
    QVERIFY(held.ok());
    QCOMPARE(e.weightsBytes, qint64((*held)->be->weights_bytes()));
    QVERIFY(e.weightsBytes < qint64(cfg->n_params()) * 4 * 11 / 20);
    QVERIFY(!e.gpu);
    // Automatic / CUDA: the GPU's figures where one is usable, else the CPU's with the reason
    // (automatic) or an error naming it (CUDA).
    const cuda_status_info &cuda = cuda_status();
    const auto a = EngineSession::estimate(data_dir + "/moe-shared", EngineSessionOptions{.backend = "auto"});
    const auto c = EngineSession::estimate(data_dir + "/moe-shared", EngineSessionOptions{.backend = "cuda"});
    QVERIFY(a.ok);
    if (cuda.available) {
        QVERIFY(a.gpu && c.ok && c.gpu);
        QCOMPARE(a.weightsBytes, qint64(cuda_weight_bytes(*cfg, weight_precision::fp8)));
        QVERIFY(a.message.contains("free"));
    } else {
        QVERIFY(!a.gpu);
        QVERIFY2(a.message.contains("CUDA not used"), qPrintable(a.message));
        QVERIFY(!c.ok);
        QVERIFY2(c.message.contains(QString::fromStdString(cuda.reason)), qPrintable(c.message));
    }
    // The CUDA weight arena: FP8 linears take a byte a weight plus a scale a row; the rest stays.
    const uint64_t bf16 = cuda_weight_bytes(*cfg, weight_precision::bf16), fp8 = cuda_weight_bytes(*cfg, weight_precision::fp8);
    QVERIFY(fp8 < bf16);
    QVERIFY(bf16 >= uint64_t(cfg->n_params()) * 2); // every weight in BF16 or wider (router fp32), aligned
    QVERIFY(bf16 < uint64_t(cfg->n_params()) * 2 + uint64_t(cfg->n_layer) * 16 * 256 + 4096 + uint64_t(cfg->n_expert) * cfg->n_embd * 2 * cfg->n_layer);
}

void TestEngineSession::shutdownWhileGenerating() {
    auto s = loaded("moe-odd");
    QSignalSpy tokens(s.get(), &EngineSession::tokensGenerated);
    s->submit(ask("one", 3000));
    s->submit(ask("two", 3000));
    QVERIFY(tokens.wait(10000));
    s.reset(); // joins the engine thread mid-generation
    QVERIFY(true);
}

QTEST_GUILESS_MAIN(TestEngineSession)
#include "test_engine_session.moc"
