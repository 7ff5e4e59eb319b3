// The app's remote-endpoint backend against the REAL server: `expertscope-cli serve` on the
// embedded default model, started as a process on 127.0.0.1 (a free port it prints). The remote
// session lists the model, streams replies equal to the local engine's for the same seed, records
// client-side TTFT/ITL, fills memory, queue and routing from /metrics, and a cancel mid-stream
// frees the request on the server. Connection errors (key refused, unreachable, unknown model,
// not an OpenAI server) are named. The chat window stores remote replies like local ones, and
// the profiler says plainly when a server has no expert metrics. Every wait is bounded.
#include "chat_pane.h"
#include "chat_store.h"
#include "composer.h"
#include "connect_server_dialog.h"
#include "engine_session.h"
#include "main_window.h"
#include "profiler_panel.h"
#include "routing_view.h"

#include <QComboBox>
#include <QDockWidget>
#include <QElapsedTimer>
#include <QLabel>
#include <QLineEdit>
#include <QProcess>
#include <QRegularExpression>
#include <QSignalSpy>
#include <QTcpServer>
#include <QTcpSocket>
#include <QTemporaryDir>
#include <QtTest>

#include "serve_process.h"

#include <limits>

using namespace es;

namespace {

const QString default_model = QStringLiteral(ES_TEST_DATA_DIR) + "/../../resources/models/default";
const QString api_key = QStringLiteral("remote-test-key");

ChatRequest ask(const QString &text, int maxTokens, double temperature, quint64 seed) {
    ChatRequest r;
    r.messages = {{MessageRole::User, text}};
    r.sampling.maxTokens = maxTokens;
    r.sampling.temperature = temperature;
    r.sampling.seed = seed;
    return r;
}

struct Reply {
    QString text, reason, error;
    MessageMetrics metrics;
    ReplyProfile profile;
};

// Submits and collects one reply (text, finish, metrics, profile) from any session.
Reply run(EngineSession &s, const ChatRequest &r, int timeoutMs = 60000) {
    Reply out;
    bool done = false;
    const quint64 id = s.submit(r);
    QObject ctx;
    QObject::connect(&s, &EngineSession::tokensGenerated, &ctx, [&](quint64 rid, const QString &d) {
        if (rid == id) out.text += d;
    });
    QObject::connect(&s, &EngineSession::replyProfiled, &ctx, [&](quint64 rid, const ReplyProfile &p) {
        if (rid == id) out.profile = p;
    });
    QObject::connect(&s, &EngineSession::replyFinished, &ctx,
                     [&](quint64 rid, const QString &reason, const MessageMetrics &m) {
                         if (rid != id) return;
                         out.reason = reason;
                         out.metrics = m;
                         done = true;
                     });
    QObject::connect(&s, &EngineSession::replyFailed, &ctx, [&](quint64 rid, const QString &msg) {
        if (rid != id) return;
        out.error = msg;
        done = true;
    });
    QElapsedTimer clock;
    clock.start();
    while (!done && clock.elapsed() < timeoutMs) QTest::qWait(10);
    if (!done) out.error = QStringLiteral("no reply within %1 ms").arg(timeoutMs);
    return out;
}

// A one-shot HTTP server answering every request with `response` (a fake, only where the real
// server cannot play the part: a server that is not OpenAI-compatible, or one like vLLM).
class CannedServer : public QTcpServer {
public:
    QHash<QString, QByteArray> routes; // path → full HTTP response
    CannedServer() {
        connect(this, &QTcpServer::newConnection, this, [this] {
            while (QTcpSocket *s = nextPendingConnection()) {
                connect(s, &QTcpSocket::readyRead, s, [this, s] {
                    const QByteArray req = s->readAll();
                    const QByteArray path = req.split(' ').value(1);
                    s->write(routes.value(
                        QString::fromLatin1(path),
                        "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"));
                    s->disconnectFromHost();
                });
                connect(s, &QTcpSocket::disconnected, s, &QObject::deleteLater);
            }
        });
    }
    static QByteArray ok(const QByteArray &type, const QByteArray &body) {
        return "HTTP/1.1 200 OK\r\nContent-Type: " + type +
               "\r\nContent-Length: " + QByteArray::number(body.size()) + "\r\nConnection: close\r\n\r\n" +
               body;
    }
    QUrl url() const { return QUrl(QStringLiteral("http://127.0.0.1:%1").arg(serverPort())); }
};

// Connects s to a canned server listening on loopback; false when no model list came in time.
bool connectCanned(EngineSession &s, const CannedServer &fake) {
    QSignalSpy ok(&s, &EngineSession::modelLoaded);
    s.connectRemote({fake.url(), QString(), QString()});
    return ok.wait(15000);
}

} // namespace

class TestRemoteSession : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void cleanupTestCase();
    void connectListsModelAndMetrics();
    void connectErrorsAreNamed_data();
    void connectErrorsAreNamed();
    void notAnOpenAiServer();
    void streamedReplyEqualsLocalEngine_data();
    void streamedReplyEqualsLocalEngine();
    void metricsFeedRoutingAndQueue();
    void cancelMidStreamFreesServerRequest();
    void chatWindowStoresRemoteReplies();
    void dialogFetchesModels();
    void serverWithoutExpertMetricsIsSaidPlainly();
    void hostileMetricsAreBounded();
    void streamCutShortFails();
    void backToTheLocalEngine();

private:
    QUrl baseUrl() const { return QUrl(QStringLiteral("http://127.0.0.1:%1").arg(m_port)); }
    std::unique_ptr<EngineSession> connected(int defaultMaxTokens = 64);
    QProcess m_server;
    int m_port = 0;
    QTemporaryDir m_home;
    std::unique_ptr<EngineSession> m_local;
};

void TestRemoteSession::initTestCase() {
    qputenv("HOME", m_home.path().toUtf8());
    QCoreApplication::setOrganizationName("ExpertScopeTests");
    QCoreApplication::setApplicationName("test_remote_session");
    const QString started = es_test::start_serve(
        m_server, {"--model", default_model, "--port", "0", "--api-key", api_key, "--threads", "2"}, &m_port);
    QVERIFY2(started.isEmpty(), qPrintable(started));

    m_local = std::make_unique<EngineSession>(EngineSessionOptions{.backend = "cpu", .threads = 2});
    QSignalSpy loaded(m_local.get(), &EngineSession::modelLoaded);
    m_local->loadModel(default_model);
    QVERIFY(loaded.wait(30000));
}

void TestRemoteSession::cleanupTestCase() {
    m_local.reset();
    if (m_server.state() != QProcess::Running) return;
    m_server.terminate();
    if (!m_server.waitForFinished(15000)) {
        m_server.kill();
        m_server.waitForFinished(5000);
        QFAIL("the server did not stop within 15 s of SIGTERM");
    }
    QCOMPARE(m_server.exitCode(), 0);
}

std::unique_ptr<EngineSession> TestRemoteSession::connected(int defaultMaxTokens) {
    auto s = std::make_unique<EngineSession>(
        EngineSessionOptions{.backend = "cpu", .defaultMaxTokens = defaultMaxTokens});
    QSignalSpy ok(s.get(), &EngineSession::modelLoaded);
    QSignalSpy failed(s.get(), &EngineSession::modelLoadFailed);
    s->connectRemote({baseUrl(), api_key, QString()});
    if (!ok.wait(15000))
        qFatal("could not connect: %s",
               failed.isEmpty() ? "timeout" : qPrintable(failed.first().at(1).toString()));
    return s;
}

void TestRemoteSession::connectListsModelAndMetrics() {
    EngineSession s(EngineSessionOptions{.backend = "cpu"});
    QSignalSpy started(&s, &EngineSession::modelLoadStarted);
    QSignalSpy ok(&s, &EngineSession::modelLoaded);
    s.connectRemote({QUrl(baseUrl().toString() + "/v1/"), api_key, QString()}); // a trailing /v1 is accepted
    QVERIFY(s.isLoading());
    QVERIFY(ok.wait(15000));
    QCOMPARE(started.count(), 1);
    QVERIFY(s.isRemote());
    const SessionModelInfo info = s.modelInfo();
    QCOMPARE(info.remoteUrl, baseUrl().toString());
    QCOMPARE(info.name, QString("default"));
    QCOMPARE(info.contextLength, 2048);
    // The default model: 6 layers, 12 experts, MoE from layer 1 — read from the server's metrics.
    QVERIFY(info.isMoe);
    QCOMPARE(info.nExperts, 12);
    QCOMPARE(info.moeLayers, (QList<int>{1, 2, 3, 4, 5}));
    QCOMPARE(info.nLayers, 6);
    QVERIFY(info.weightsBytes > 0);
    const TelemetryView t = s.telemetry();
    QVERIFY(t.valid);
    QCOMPARE(t.remoteUrl, baseUrl().toString());
    QVERIFY(!t.noExpertMetrics);
    QVERIFY(t.memory.kvBlocksTotal > 0);
    QVERIFY(t.memory.kvBlockBytes > 0);
    // The server's pool (the CPU backend's, allocated whole): mapped is all of it.
    QCOMPARE(t.memory.kvCapacityBytes, t.memory.kvBlockBytes * t.memory.kvBlocksTotal);
    QCOMPARE(t.memory.kvMappedBytes, t.memory.kvCapacityBytes);
}

void TestRemoteSession::connectErrorsAreNamed_data() {
    QTest::addColumn<QString>("url");
    QTest::addColumn<QString>("key");
    QTest::addColumn<QString>("model");
    QTest::addColumn<QString>("expected");
    QTcpServer closed; // a port nobody listens on
    QVERIFY(closed.listen(QHostAddress::LocalHost));
    const int deadPort = closed.serverPort();
    closed.close();
    const QString url = QStringLiteral("http://127.0.0.1:%1").arg(m_port);
    QTest::newRow("wrong key") << url << "nope"
                               << ""
                               << "The server refused the API key (HTTP 401): Incorrect API key provided";
    QTest::newRow("no key")
        << url << ""
        << ""
        << "The server refused the API key (HTTP 401): Missing API key: send 'Authorization: Bearer <key>'";
    QTest::newRow("unreachable")
        << QStringLiteral("http://127.0.0.1:%1").arg(deadPort) << ""
        << "" << QStringLiteral("Cannot reach http://127.0.0.1:%1/v1/models").arg(deadPort);
    QTest::newRow("model not served")
        << url << api_key << "ernie-4.5-300b"
        << QStringLiteral("%1 does not serve the model 'ernie-4.5-300b' (it serves: default)").arg(url);
    QTest::newRow("not a URL") << "ftp://x"
                               << ""
                               << ""
                               << "Not a server address: give http://host:port";
}

void TestRemoteSession::connectErrorsAreNamed() {
    QFETCH(QString, url);
    QFETCH(QString, key);
    QFETCH(QString, model);
    QFETCH(QString, expected);
    EngineSession s(EngineSessionOptions{.backend = "cpu"});
    QSignalSpy ok(&s, &EngineSession::modelLoaded);
    QSignalSpy failed(&s, &EngineSession::modelLoadFailed);
    s.connectRemote({QUrl(url), key, model});
    QVERIFY(failed.wait(15000) || failed.count() == 1);
    QCOMPARE(ok.count(), 0);
    const QString message = failed.first().at(1).toString();
    QVERIFY2(message.startsWith(expected), qPrintable(message));
    QVERIFY(!s.isRemote());
    QVERIFY(!s.isModelLoaded());
    QVERIFY(!s.isLoading());
}

void TestRemoteSession::notAnOpenAiServer() {
    CannedServer fake;
    fake.routes["/v1/models"] = CannedServer::ok("text/html", "<html>hello</html>");
    QVERIFY(fake.listen(QHostAddress::LocalHost));
    EngineSession s(EngineSessionOptions{.backend = "cpu"});
    QSignalSpy failed(&s, &EngineSession::modelLoadFailed);
    s.connectRemote({fake.url(), QString(), QString()});
    QVERIFY(failed.wait(15000));
    QVERIFY2(failed.first().at(1).toString().contains("not with an OpenAI model list"),
             qPrintable(failed.first().at(1).toString()));
}

void TestRemoteSession::streamedReplyEqualsLocalEngine_data() {
    QTest::addColumn<QString>("prompt");
    QTest::addColumn<QString>("system");
    QTest::addColumn<QString>("prefix");
    QTest::addColumn<double>("temperature");
    QTest::addColumn<int>("maxTokens");
    QTest::newRow("greedy 24") << "Hello"
                               << ""
                               << "" << 0.0 << 24;
    QTest::newRow("greedy, system prompt and preset prefix") << "What are experts?"
                                                             << "You are terse."
                                                             << "【技术解析模式】" << 0.0 << 32;
    QTest::newRow("sampled seed 7, 40") << "Tell me a story."
                                        << ""
                                        << "" << 0.9 << 40;
    QTest::newRow("one token") << "你好"
                               << ""
                               << "" << 0.0 << 1;
}

void TestRemoteSession::streamedReplyEqualsLocalEngine() {
    QFETCH(QString, prompt);
    QFETCH(QString, system);
    QFETCH(QString, prefix);
    QFETCH(double, temperature);
    QFETCH(int, maxTokens);
    ChatRequest r = ask(prompt, maxTokens, temperature, 7);
    r.systemPrompt = system;
    r.presetPrefix = prefix;
    const Reply local = run(*m_local, r);
    QVERIFY(local.error.isEmpty());
    QVERIFY(!local.text.isEmpty());

    auto remote = connected();
    const Reply got = run(*remote, r);
    QVERIFY2(got.error.isEmpty(), qPrintable(got.error));
    QCOMPARE(got.text, local.text);
    QCOMPARE(got.reason, local.reason);
    QCOMPARE(got.metrics.nOutputTokens, local.metrics.nOutputTokens);
    QCOMPARE(got.metrics.nPromptTokens, local.metrics.nPromptTokens);
    // Client-side latency: TTFT and one arrival time per chunk, gaps between them.
    QVERIFY(got.metrics.ttftMs && *got.metrics.ttftMs > 0);
    QVERIFY(!got.metrics.tokenTimesMs.isEmpty());
    QCOMPARE(got.metrics.itlMs.size(), got.metrics.tokenTimesMs.size() - 1);
    QCOMPARE(got.metrics.tokenTimesMs.first(), float(*got.metrics.ttftMs));
    QCOMPARE(got.profile.tokenTimesUs.size(), got.metrics.tokenTimesMs.size());
    QVERIFY(got.profile.tFirstTokenUs >= got.profile.tSubmitUs);
    QVERIFY(got.profile.tFinishUs >= got.profile.tFirstTokenUs);
    QCOMPARE(got.profile.seed, quint64(7));
}

void TestRemoteSession::metricsFeedRoutingAndQueue() {
    auto s = connected();
    const auto sum = [](const QList<quint64> &v) {
        quint64 n = 0;
        for (quint64 c : v) n += c;
        return n;
    };
    const quint64 tokensBefore = sum(s->telemetry().expertTokens);
    const Reply r = run(*s, ask("Count the experts.", 16, 0.0, 3));
    QVERIFY(r.error.isEmpty());
    // Every position computed routes k = 2 experts in each of the 5 MoE layers: prompt and output
    // less the last token (never fed back), less at most one prefix-cached block of 16.
    const quint64 positions = quint64(*r.metrics.nPromptTokens + *r.metrics.nOutputTokens - 1);
    QSignalSpy scraped(s->remote(), &RemoteClient::metricsScraped);
    TelemetryView t;
    for (int i = 0; i < 10; ++i) { // a scrape already in flight may predate the reply's end
        s->remote()->scrapeNow();
        QVERIFY(scraped.wait(5000));
        t = s->telemetry();
        if (sum(t.expertTokens) - tokensBefore >= (positions - 16) * 10 && t.running == 0) break;
    }
    const quint64 delta = sum(t.expertTokens) - tokensBefore;
    QVERIFY2(delta >= (positions - 16) * 10 && delta <= positions * 10,
             qPrintable(QStringLiteral("%1 expert token-slots for %2 positions").arg(delta).arg(positions)));
    QVERIFY(sum(t.expertTokensWindow) > 0);
    QCOMPARE(t.moeLayers, (QList<int>{1, 2, 3, 4, 5}));
    QCOMPARE(t.nExperts, 12);
    QCOMPARE(t.running, 0);
    QCOMPARE(t.waiting, 0);
    QVERIFY(t.memory.weightsBytes > 0);
    QCOMPARE(t.memory.kvBlocksUsed, 0);
}

void TestRemoteSession::cancelMidStreamFreesServerRequest() {
    // A seed whose reply runs at least 300 tokens (the local engine says; the server gives the
    // same tokens for the same seed), so the reply is surely still streaming when cancelled.
    // The tiny model ends its replies early at usual temperatures; at 5 with top-p 1 it rambles.
    const auto essay = [](int maxTokens, quint64 seed) {
        ChatRequest r = ask("Write a long essay.", maxTokens, 5.0, seed);
        r.sampling.topP = 1.0;
        return r;
    };
    std::optional<quint64> seed;
    for (quint64 k = 1; k <= 12 && !seed; ++k)
        if (run(*m_local, essay(300, k)).reason == "length") seed = k;
    QVERIFY2(seed, "no seed in 1..12 gives a 300-token reply");
    auto s = connected();
    QSignalSpy tokens(s.get(), &EngineSession::tokensGenerated);
    QSignalSpy finished(s.get(), &EngineSession::replyFinished);
    const quint64 id = s->submit(essay(2000, *seed));
    QVERIFY(tokens.wait(30000));
    QSignalSpy scraped(s->remote(), &RemoteClient::metricsScraped);
    for (int i = 0; i < 5 && s->telemetry().running == 0; ++i) { // an older scrape may be in flight
        s->remote()->scrapeNow();
        QVERIFY(scraped.wait(5000));
    }
    QCOMPARE(finished.count(), 0);
    QCOMPARE(s->telemetry().running, 1); // the server is mid-reply
    QVERIFY(s->telemetry().memory.kvBlocksUsed > 0);
    s->cancel(id);
    QCOMPARE(finished.count(), 1); // at once, as with the local engine
    QCOMPARE(finished.first().at(1).toString(), QString("cancelled"));
    QCOMPARE(s->activeReplies(), 0);
    // The server notices the closed connection, cancels the request and frees its KV blocks.
    bool freed = false;
    for (int i = 0; i < 50 && !freed; ++i) {
        QTest::qWait(100);
        scraped.clear();
        s->remote()->scrapeNow();
        if (!scraped.wait(3000)) continue;
        const TelemetryView t = s->telemetry();
        freed = t.running == 0 && t.memory.kvBlocksUsed == 0;
    }
    QVERIFY2(freed, "the server still runs the cancelled request 5 s later");
}

void TestRemoteSession::chatWindowStoresRemoteReplies() {
    ChatStore store;
    QVERIFY(store.open(":memory:").ok());
    auto s = connected(24);
    MainWindow window(&store, s.get());
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    // The status bar names the server and the model (the window was made after the connection:
    // tell it as the session would).
    emit s->modelLoaded(s->modelInfo());
    QVERIFY2(window.statusText().contains("remote: " + baseUrl().toString() + " · default"),
             qPrintable(window.statusText()));

    QSignalSpy done(s.get(), &EngineSession::replyFinished);
    ChatPane *pane = window.currentPane();
    pane->composer()->setText("Hello");
    pane->composer()->editor()->setFocus();
    QTest::keyClick(pane->composer()->editor(), Qt::Key_Return);
    QVERIFY(done.wait(60000));
    QTRY_VERIFY(!pane->isGenerating());
    const QList<Message> path = store.activePath(*pane->conversationId());
    QCOMPARE(path.size(), 2);
    const Message &reply = path[1];
    QCOMPARE(reply.role, MessageRole::Assistant);
    QCOMPARE(reply.state, MessageState::Complete);
    QVERIFY(!reply.content.isEmpty());
    QCOMPARE(reply.generation.modelName, QString("default"));
    QCOMPARE(reply.generation.precision, QString("remote"));
    const std::optional<MessageMetrics> m = store.metrics(reply.id);
    QVERIFY(m && m->ttftMs && *m->ttftMs > 0);
    QVERIFY(!m->tokenTimesMs.isEmpty());
    QVERIFY(m->peakMemoryBytes && *m->peakMemoryBytes > 0); // from the server's memory gauges
    const std::optional<MessageProfile> p = store.profile(reply.id);
    QVERIFY(p && p->ttftUs && !p->tokenTimesUs.isEmpty());
    QVERIFY(p->routing.isEmpty()); // the OpenAI API carries no per-request routing
    // The server's queue in the status bar, from the next scrape (the reply has ended).
    QTRY_VERIFY_WITH_TIMEOUT(window.statusText().contains("0 running · 0 waiting"), 5000);

    // The profiler's live routing reads the server's expert metrics.
    window.profilerDock()->show();
    ProfilerPanel *panel = window.profilerPanel();
    panel->setCurrentTab(ProfilerPanel::Tab::Routing);
    panel->findChild<RoutingView *>()->setSource(RoutingView::Source::LiveWindow);
    panel->refresh();
    QTRY_VERIFY_WITH_TIMEOUT(
        panel->findChild<RoutingView *>()->caption().startsWith("Live: the server's last"), 5000);
}

void TestRemoteSession::dialogFetchesModels() {
    ConnectServerDialog dialog;
    QSignalSpy fetched(&dialog, &ConnectServerDialog::modelsFetched);
    dialog.urlEdit()->setText(QStringLiteral("127.0.0.1:%1").arg(m_port)); // no scheme: http assumed
    dialog.keyEdit()->setText("wrong");
    dialog.fetchModels();
    QVERIFY(fetched.wait(10000));
    QCOMPARE(fetched.first().at(0).toBool(), false);
    QVERIFY2(dialog.messageLabel()->text().contains("refused the API key"),
             qPrintable(dialog.messageLabel()->text()));
    QCOMPARE(dialog.modelBox()->count(), 0);
    dialog.keyEdit()->setText(api_key);
    fetched.clear();
    dialog.fetchModels();
    QVERIFY(fetched.wait(10000));
    QCOMPARE(fetched.first().at(0).toBool(), true);
    QCOMPARE(dialog.modelBox()->currentText(), QString("default"));
    const RemoteEndpoint ep = dialog.endpoint();
    QCOMPARE(ep.baseUrl, baseUrl());
    QCOMPARE(ep.apiKey, api_key);
    QCOMPARE(ep.model, QString("default"));
    dialog.accept();
    QSettings settings;
    QCOMPARE(settings.value("remote/url").toString(), QStringLiteral("127.0.0.1:%1").arg(m_port));
    QVERIFY(!settings.contains("remote/apiKey")); // not written unless asked
}

// A server like vLLM: OpenAI API and /metrics, but no expertscope:* series. (A canned server: the
// only fake in this suite, since the real one always has expert metrics.)
void TestRemoteSession::serverWithoutExpertMetricsIsSaidPlainly() {
    CannedServer fake;
    fake.routes["/v1/models"] = CannedServer::ok(
        "application/json",
        R"({"object":"list","data":[{"id":"baidu/ERNIE-4.5-21B-A3B-PT","object":"model"}]})");
    fake.routes["/metrics"] = CannedServer::ok(
        "text/plain",
        "vllm:num_requests_running{model_name=\"m\"} 2\nvllm:num_requests_waiting{model_name=\"m\"} 5\n"
        "vllm:kv_cache_usage_perc{model_name=\"m\"} 0.5\n"
        "vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"400\"} 1\n");
    QVERIFY(fake.listen(QHostAddress::LocalHost));
    EngineSession s(EngineSessionOptions{.backend = "cpu"});
    QVERIFY(connectCanned(s, fake));
    QVERIFY(!s.modelInfo().isMoe);
    const TelemetryView t = s.telemetry();
    QVERIFY(t.noExpertMetrics);
    QCOMPARE(t.running, 2);
    QCOMPARE(t.waiting, 5);
    QCOMPARE(t.memory.kvBlocksTotal, 400);
    QCOMPARE(t.memory.kvBlocksUsed, 200);

    ChatStore store;
    QVERIFY(store.open(":memory:").ok());
    ProfilerPanel panel(&store, &s);
    panel.show();
    panel.setCurrentTab(ProfilerPanel::Tab::Routing);
    panel.findChild<RoutingView *>()->setSource(RoutingView::Source::LiveWindow);
    panel.refresh();
    const QString caption = panel.findChild<RoutingView *>()->caption();
    QVERIFY2(caption.contains("does not expose expert metrics"), qPrintable(caption));
}

// A server's /metrics is outside input: NaN, infinities, 1e300 and labels beyond any model's
// layers or experts neither crash the client nor reach the charts as nonsense (before, each of
// these was a cast of an out-of-range double, undefined, and a label of 2^31 - 1 experts sized a
// 16 GiB vector).
void TestRemoteSession::hostileMetricsAreBounded() {
    CannedServer fake;
    fake.routes["/v1/models"] =
        CannedServer::ok("application/json", R"({"object":"list","data":[{"id":"m"}]})");
    fake.routes["/metrics"] = CannedServer::ok(
        "text/plain",
        "vllm:num_requests_running NaN\nvllm:num_requests_waiting +Inf\n"
        "vllm:generation_tokens_total 1e300\nexpertscope:engine_steps_total -Inf\n"
        "expertscope:kv_blocks{state=\"total\"} 1e12\nexpertscope:kv_blocks{state=\"used\"} 1e15\n"
        "expertscope:memory_bytes{kind=\"weights\"} 1e300\nexpertscope:memory_bytes{kind=\"kv_total\"} NaN\n"
        "expertscope:memory_bytes{kind=\"kv_mapped\"} 1e300\n"
        "expertscope:memory_fragmentation NaN\nexpertscope:kv_cache_waste 7\n"
        "expertscope:expert_tokens_total{layer=\"1\",expert=\"2147483647\"} 5\n"
        "expertscope:expert_tokens_total{layer=\"-3\",expert=\"0\"} 5\n"
        "expertscope:expert_tokens_total{layer=\"x\",expert=\"0\"} 5\n"
        "expertscope:expert_tokens_total{layer=\"2\",expert=\"3\"} +Inf\n");
    QVERIFY(fake.listen(QHostAddress::LocalHost));
    EngineSession s(EngineSessionOptions{.backend = "cpu"});
    QVERIFY(connectCanned(s, fake));
    const TelemetryView t = s.telemetry();
    QCOMPARE(t.running, 0);
    QCOMPARE(t.waiting, std::numeric_limits<int>::max());
    QCOMPARE(t.tokensGenerated, std::numeric_limits<quint64>::max());
    QCOMPARE(t.memory.kvBlocksTotal, 1 << 30);
    QCOMPARE(t.memory.kvBlocksUsed, 1 << 30);
    QCOMPARE(t.memory.kvBlocksFree, 0);
    QCOMPARE(t.memory.weightsBytes, qint64(1) << 50);
    QCOMPARE(t.memory.kvBlockBytes, qint64(0));
    QCOMPARE(t.memory.kvMappedBytes, qint64(0)); // never more than the pool's (NaN: 0) total
    QCOMPARE(t.memory.fragmentation, 0.0);
    QCOMPARE(t.memory.kvWaste, 1.0);
    // Only the one sample with sane labels is routing: layer 2, expert 3 of 4.
    QCOMPARE(t.moeLayers, QList<int>{2});
    QCOMPARE(t.nExperts, 4);
    QCOMPARE(t.expertTokens, (QList<quint64>{0, 0, 0, std::numeric_limits<quint64>::max()}));
}

// A stream that ends without a finish reason (the server died or closed early) fails the reply
// with a message; the text that came is kept.
void TestRemoteSession::streamCutShortFails() {
    CannedServer fake;
    fake.routes["/v1/models"] =
        CannedServer::ok("application/json", R"({"object":"list","data":[{"id":"m"}]})");
    fake.routes["/v1/chat/completions"] =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
        "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"finish_reason\":null}]}\n\n";
    QVERIFY(fake.listen(QHostAddress::LocalHost));
    EngineSession s(EngineSessionOptions{.backend = "cpu"});
    QVERIFY(connectCanned(s, fake));
    QVERIFY(s.telemetry().noExpertMetrics); // no /metrics at all
    const Reply r = run(s, ask("Hello", 8, 0.0, 1), 15000);
    QCOMPARE(r.text, QString("Hi"));
    QCOMPARE(r.error, QString("The server closed the stream before the reply ended"));
}

// Opening a model folder after a connection goes back to the local engine (and its ids).
void TestRemoteSession::backToTheLocalEngine() {
    auto s = connected();
    QVERIFY(s->isRemote());
    const ChatRequest r = ask("Hello", 12, 0.0, 5);
    const Reply remote = run(*s, r);
    QVERIFY(remote.error.isEmpty());
    QSignalSpy loaded(s.get(), &EngineSession::modelLoaded);
    s->loadModel(default_model);
    QVERIFY(!s->isRemote());
    QVERIFY(loaded.wait(30000));
    QVERIFY(s->modelInfo().remoteUrl.isEmpty());
    QCOMPARE(s->modelInfo().precision, QString("fp32"));
    const Reply local = run(*s, r);
    QVERIFY(local.error.isEmpty());
    QCOMPARE(local.text, remote.text);
    QVERIFY(local.profile.k > 0); // the local engine's routing trace is back
    QVERIFY(s->telemetry().remoteUrl.isEmpty());
}

QTEST_MAIN(TestRemoteSession)
#include "test_remote_session.moc"
