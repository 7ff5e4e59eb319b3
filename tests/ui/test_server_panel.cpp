// Model ▸ Server… (ServerDialog over the window's LocalServer) through the real widgets, engine
// and HTTP: the app's loaded tiny model served on a free port, with and without its key, the
// answers logged with their token counts and counted, the same engine (its telemetry counts the
// server's tokens; the app's own chat answers meanwhile; the profiler shows the served request),
// Stop closes the port; a port in use, a non-loopback address without a key and no model are
// refused with the reason; a model change and closing the window stop the server (a streaming
// request in flight included); the address, port and name are remembered, the key only when asked.
// Every wait is bounded. ES_SCREENSHOT_DIR=<dir> saves the panel while it serves
// (server-panel.png, the README's screenshot).
#include "chat_pane.h"
#include "chat_store.h"
#include "composer.h"
#include "desktop_screen.h"
#include "engine_session.h"
#include "latency_view.h"
#include "local_server.h"
#include "main_window.h"
#include "profile_recorder.h"
#include "profiler_panel.h"
#include "served_request_model.h"
#include "server_dialog.h"
#include "settings_keys.h"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <QCheckBox>
#include <QClipboard>
#include <QDockWidget>
#include <QElapsedTimer>
#include <QLabel>
#include <QLineEdit>
#include <QMenuBar>
#include <QPushButton>
#include <QSettings>
#include <QSignalSpy>
#include <QSpinBox>
#include <QStatusBar>
#include <QTableView>
#include <QTcpServer>
#include <QTemporaryDir>
#include <QToolButton>
#include <QtTest>

#include <thread>

using namespace es;
using nlohmann::json;

namespace {

const QString kModel = QStringLiteral(ES_TEST_DATA_DIR) + "/moe-shared";
const std::string kKey = "panel-key-123";

httplib::Headers auth(const std::string &key = kKey) { return {{"Authorization", "Bearer " + key}}; }

std::unique_ptr<httplib::Client> client(int port) {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", port);
    c->set_connection_timeout(2);
    c->set_read_timeout(30);
    c->set_write_timeout(10);
    c->set_keep_alive(true); // one connection: the server answers (and logs) its requests in order
    return c;
}

std::string chatBody(bool stream, int maxTokens) {
    json b = {{"model", "tiny"},
              {"messages", json::array({{{"role", "user"}, {"content", "Hello from a client"}}})},
              {"max_tokens", maxTokens},
              {"temperature", 0}};
    if (stream) {
        b["stream"] = true;
        b["stream_options"] = {{"include_usage", true}};
    }
    return b.dump();
}

// Whether anything accepts connections on 127.0.0.1:port.
bool portOpen(int port) {
    auto c = client(port);
    return bool(c->Get("/health"));
}

QString cell(ServedRequestModel *m, int row, int column) { return m->data(m->index(row, column)).toString(); }

// The completion tokens a stream's usage chunk reports; -1 without one.
int streamedCompletionTokens(const std::string &sse) {
    size_t pos = 0;
    while ((pos = sse.find("data: ", pos)) != std::string::npos) {
        const size_t end = sse.find("\n\n", pos);
        const std::string data = sse.substr(pos + 6, end == std::string::npos ? std::string::npos : end - pos - 6);
        pos = end;
        if (data == "[DONE]") break;
        const json j = json::parse(data, nullptr, false);
        if (j.is_object() && j.contains("usage") && j["usage"].is_object())
            return j["usage"]["completion_tokens"].get<int>();
    }
    return -1;
}

} // namespace

class TestServerPanel : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void init();
    void cleanup();
    void servesTheAppsModelAndLogsEachRequest();
    void portInUseIsNamed();
    void nonLoopbackWithoutKeyIsRefused();
    void noModelNoServer();
    void modelChangeStopsTheServer();
    void closingTheWindowStopsAStreamingServer();
    void choicesAreRemembered();
    void shortcutsDoNotClash();

private:
    ServerDialog *openPanel() {
        m_window->openServerPanel();
        return m_window->serverDialog();
    }
    // Fills the panel for 127.0.0.1 on any free port with the test's key.
    void fill(ServerDialog *d, const QString &key = QString::fromStdString(kKey)) {
        d->hostEdit()->setText("127.0.0.1");
        d->portSpin()->setValue(0);
        d->keyEdit()->setText(key);
        d->modelNameEdit()->setText("tiny");
    }

    QTemporaryDir m_home;
    std::unique_ptr<ChatStore> m_store;
    std::unique_ptr<EngineSession> m_session;
    std::unique_ptr<MainWindow> m_window;
};

void TestServerPanel::initTestCase() {
    qputenv("HOME", m_home.path().toUtf8()); // QSettings of the test stay out of the real home
    QCoreApplication::setOrganizationName("ExpertScopeTests");
    QCoreApplication::setApplicationName("test_server_panel");
}

void TestServerPanel::init() {
    QSettings().clear();
    m_store = std::make_unique<ChatStore>();
    QVERIFY(m_store->open(":memory:").ok());
    m_session = std::make_unique<EngineSession>(EngineSessionOptions{.backend = "cpu", .defaultMaxTokens = 16});
    QSignalSpy loaded(m_session.get(), &EngineSession::modelLoaded);
    m_session->loadModel(kModel);
    QVERIFY(loaded.wait(30000));
    m_window = std::make_unique<MainWindow>(m_store.get(), m_session.get());
    m_window->show();
    QVERIFY(QTest::qWaitForWindowExposed(m_window.get()));
}

void TestServerPanel::cleanup() {
    m_window.reset();
    m_session.reset();
    m_store.reset();
}

void TestServerPanel::servesTheAppsModelAndLogsEachRequest() {
    ServerDialog *d = openPanel();
    QVERIFY(d && d->isVisible());
    QVERIFY(!d->stopButton()->isEnabled());
    // The key is hidden until asked for.
    QCOMPARE(d->keyEdit()->echoMode(), QLineEdit::Password);
    d->showKeyButton()->click();
    QCOMPARE(d->keyEdit()->echoMode(), QLineEdit::Normal);
    d->showKeyButton()->click();
    QCOMPARE(d->keyEdit()->echoMode(), QLineEdit::Password);

    fill(d);
    const TelemetryView before = m_session->telemetry();
    d->startButton()->click();
    LocalServer *server = m_window->localServer();
    QVERIFY2(server->isRunning(), qPrintable(d->messageLabel()->text()));
    const int port = server->port();
    QVERIFY(port > 0); // port 0 asked for any free one
    QCOMPARE(d->urlEdit()->text(), QStringLiteral("http://127.0.0.1:%1").arg(port));
    QVERIFY(!d->startButton()->isEnabled() && d->stopButton()->isEnabled() && !d->hostEdit()->isEnabled());
    d->copyButton()->click();
    QCOMPARE(QApplication::clipboard()->text(), d->urlEdit()->text());
    auto *label = m_window->statusBar()->findChild<QLabel *>("serverLabel");
    QVERIFY(label && label->isVisible() && label->text().contains(d->urlEdit()->text()));

    auto c = client(port);
    // /v1/models: 401 without the key, the served name with it.
    auto noKey = c->Get("/v1/models");
    QVERIFY(noKey);
    QCOMPARE(noKey->status, 401);
    auto models = c->Get("/v1/models", auth());
    QVERIFY(models);
    QCOMPARE(models->status, 200);
    QCOMPARE(json::parse(models->body)["data"][0]["id"].get<std::string>(), std::string("tiny"));
    // A chat completion without the key is refused too; with it, answered with its usage.
    auto refused = c->Post("/v1/chat/completions", chatBody(false, 8), "application/json");
    QVERIFY(refused);
    QCOMPARE(refused->status, 401);
    auto chat = c->Post("/v1/chat/completions", auth(), chatBody(false, 8), "application/json");
    QVERIFY(chat);
    QCOMPARE(chat->status, 200);
    const json answer = json::parse(chat->body);
    const int prompt = answer["usage"]["prompt_tokens"].get<int>();
    const int completion = answer["usage"]["completion_tokens"].get<int>();
    QVERIFY(prompt > 0 && completion > 0);
    auto streamed = c->Post("/v1/chat/completions", auth(), chatBody(true, 6), "application/json");
    QVERIFY(streamed);
    QCOMPARE(streamed->status, 200);
    QVERIFY(streamed->body.find("data: [DONE]") != std::string::npos);
    const int streamedTokens = streamedCompletionTokens(streamed->body);
    QVERIFY(streamedTokens > 0);

    // Each request is a row, newest first, with its token counts; the totals count them.
    ServedRequestModel *m = d->requestsModel();
    QTRY_COMPARE_WITH_TIMEOUT(m->rowCount(), 5, 10000);
    QVERIFY(m->request(0).stream); // the newest: the streaming chat
    QCOMPARE(m->request(0).status, 200);
    QVERIFY(m->request(0).ttftMs >= 0);
    QCOMPARE(m->request(0).completionTokens, streamedTokens);
    QCOMPARE(cell(m, 0, ServedRequestModel::Route), QString("POST /v1/chat/completions (stream)"));
    QVERIFY(cell(m, 0, ServedRequestModel::Ttft).endsWith("ms"));
    const int row = 1;
    QVERIFY(!m->request(row).stream);
    QCOMPARE(cell(m, row, ServedRequestModel::PromptTokens), QString::number(prompt));
    QCOMPARE(cell(m, row, ServedRequestModel::CompletionTokens), QString::number(completion));
    QCOMPARE(cell(m, row, ServedRequestModel::Status), QString("200"));
    QCOMPARE(cell(m, row, ServedRequestModel::Model), QString("tiny"));
    QCOMPARE(cell(m, row, ServedRequestModel::Route), QString("POST /v1/chat/completions"));
    QCOMPARE(cell(m, row, ServedRequestModel::Ttft), QString("–")); // not streamed
    QVERIFY(m->request(row).client.startsWith("127.0.0.1:"));
    QVERIFY(m->request(row).durationMs > 0);
    for (auto [r, route, status] : {std::tuple{2, "POST /v1/chat/completions", 401}, {3, "GET /v1/models", 200},
                                    {4, "GET /v1/models", 401}}) {
        QCOMPARE(cell(m, r, ServedRequestModel::Route), QString(route));
        QCOMPARE(m->request(r).status, status);
    }
    QCOMPARE(cell(m, 4, ServedRequestModel::PromptTokens), QString("–"));
    QTRY_VERIFY_WITH_TIMEOUT(d->totalsLabel()->text().startsWith("Requests 5 · active 0 · errors 2"), 5000);
    QVERIFY2(d->totalsLabel()->text().contains(QStringLiteral("%1 prompt, %2 completion").arg(prompt + m->request(0).promptTokens).arg(completion + streamedTokens)),
             qPrintable(d->totalsLabel()->text()));

    // The app's own engine did the work: its telemetry counts the server's tokens and requests.
    const TelemetryView after = m_session->telemetry();
    QVERIFY(after.tokensGenerated >= before.tokensGenerated + quint64(completion + streamedTokens));
    QVERIFY(after.requestsFinished >= before.requestsFinished + 2);
    // The profiler shows the latest served request (its tokens and engine steps).
    ProfileRecorder *recorder = ProfileRecorder::forSession(m_session.get());
    QTRY_VERIFY_WITH_TIMEOUT(recorder->isServed(m->request(0).requestId), 5000);
    ProfilerPanel *panel = m_window->profilerPanel();
    QVERIFY(panel->showsServedRequest());
    QCOMPARE(panel->shownProfile().tokenTimesUs.size(), streamedTokens);
    QVERIFY(panel->shownProfile().nSteps > 0);
    panel->setCurrentTab(ProfilerPanel::Tab::Latency);
    panel->refresh();
    QVERIFY2(panel->latencyView()->summary().startsWith(QStringLiteral("Served over HTTP: %1 tokens").arg(streamedTokens)),
             qPrintable(panel->latencyView()->summary()));

    // While it serves, the app's chat answers on the same engine.
    ChatPane *pane = m_window->currentPane();
    QSignalSpy replied(m_session.get(), &EngineSession::replyFinished);
    std::thread other([port] {
        auto c2 = client(port);
        c2->Post("/v1/chat/completions", auth(), chatBody(true, 40), "application/json");
    });
    pane->composer()->setText("A question in the app");
    pane->composer()->editor()->setFocus();
    QTest::keyClick(pane->composer()->editor(), Qt::Key_Return);
    QVERIFY(replied.wait(30000));
    other.join();
    QTRY_COMPARE_WITH_TIMEOUT(m->rowCount(), 6, 10000);
    QCOMPARE(m->request(0).status, 200);

    if (const QString dir = qEnvironmentVariable("ES_SCREENSHOT_DIR"); !dir.isEmpty()) {
        d->resize(1000, 600);
        QTest::qWait(300);
        QVERIFY(d->grab().save(dir + "/server-panel.png"));
    }

    // Clear empties the log, not the totals.
    d->clearButton()->click();
    QCOMPARE(m->rowCount(), 0);
    QVERIFY(server->requests().isEmpty());
    QVERIFY(d->totalsLabel()->text().startsWith("Requests 6"));

    // Stop closes the port.
    QSignalSpy stopped(server, &LocalServer::stopped);
    d->stopButton()->click();
    QCOMPARE(stopped.count(), 1);
    QVERIFY(!server->isRunning());
    QVERIFY(!label->isVisible());
    QVERIFY(d->urlEdit()->text().isEmpty());
    QVERIFY(d->startButton()->isEnabled() && d->hostEdit()->isEnabled());
    QVERIFY(!portOpen(port));
    // The engine and its model stay: the app still chats.
    QVERIFY(m_session->isModelLoaded());
    pane->composer()->setText("And after the server stopped");
    QTest::keyClick(pane->composer()->editor(), Qt::Key_Return);
    QVERIFY(replied.wait(30000));
}

void TestServerPanel::portInUseIsNamed() {
    QTcpServer taken;
    QVERIFY(taken.listen(QHostAddress::LocalHost, 0));
    ServerDialog *d = openPanel();
    fill(d);
    d->portSpin()->setValue(taken.serverPort());
    d->startButton()->click();
    QVERIFY(!m_window->localServer()->isRunning());
    const QString message = d->messageLabel()->text();
    QVERIFY2(d->messageLabel()->isVisible() && message.contains(QString::number(taken.serverPort())) &&
                 message.contains("in use"),
             qPrintable(message));
    QVERIFY(d->startButton()->isEnabled());
}

void TestServerPanel::nonLoopbackWithoutKeyIsRefused() {
    ServerDialog *d = openPanel();
    fill(d, QString());
    d->hostEdit()->setText("0.0.0.0");
    d->startButton()->click();
    QVERIFY(!m_window->localServer()->isRunning());
    QVERIFY2(d->messageLabel()->text().contains("Refusing to serve on 0.0.0.0 without an API key"),
             qPrintable(d->messageLabel()->text()));
    // A name that does not resolve is named.
    d->hostEdit()->setText("no-such-host.invalid");
    d->startButton()->click();
    QVERIFY(!m_window->localServer()->isRunning());
    QVERIFY2(d->messageLabel()->text().contains("“no-such-host.invalid” cannot be used"),
             qPrintable(d->messageLabel()->text()));
    // Loopback without a key is served; so is every address once the user allows it explicitly.
    d->hostEdit()->setText("0.0.0.0");
    d->allowWithoutKeyBox()->setChecked(true);
    d->startButton()->click();
    QVERIFY2(m_window->localServer()->isRunning(), qPrintable(d->messageLabel()->text()));
    auto models = client(m_window->localServer()->port())->Get("/v1/models");
    QVERIFY(models);
    QCOMPARE(models->status, 200);
    d->stopButton()->click();
    QVERIFY(!m_window->localServer()->isRunning());
}

void TestServerPanel::noModelNoServer() {
    EngineSession empty(EngineSessionOptions{.backend = "cpu"});
    LocalServer server(&empty);
    ServerDialog d(&server, &empty);
    d.hostEdit()->setText("127.0.0.1");
    d.portSpin()->setValue(0);
    d.startButton()->click();
    QVERIFY(!server.isRunning());
    QVERIFY2(d.messageLabel()->text().startsWith("No model is loaded"), qPrintable(d.messageLabel()->text()));
}

void TestServerPanel::modelChangeStopsTheServer() {
    ServerDialog *d = openPanel();
    fill(d);
    d->startButton()->click();
    LocalServer *server = m_window->localServer();
    QVERIFY(server->isRunning());
    const int port = server->port();
    QSignalSpy stopped(server, &LocalServer::stopped);
    QSignalSpy loaded(m_session.get(), &EngineSession::modelLoaded);
    m_session->loadModel(QStringLiteral(ES_TEST_DATA_DIR) + "/dense");
    // Stopped before the engine loaded anything else, and said so.
    QCOMPARE(stopped.count(), 1);
    QVERIFY(stopped.first().first().toString().contains("dense is loading in its place"));
    QVERIFY(!server->isRunning());
    QVERIFY(!portOpen(port));
    QVERIFY2(d->messageLabel()->text().startsWith("The server stopped: dense is loading in its place"),
             qPrintable(d->messageLabel()->text()));
    QVERIFY(loaded.wait(30000));
    // Serving again serves the new model under its folder's name.
    d->modelNameEdit()->clear();
    d->startButton()->click();
    QVERIFY(server->isRunning());
    QCOMPARE(server->servedModelName(), QString("dense"));
    auto models = client(server->port())->Get("/v1/models", auth());
    QVERIFY(models);
    QCOMPARE(json::parse(models->body)["data"][0]["id"].get<std::string>(), std::string("dense"));
    // New engine settings restart the engine: the server stops first.
    EngineSessionOptions o = m_session->options();
    o.threads = 1;
    m_session->reconfigure(o);
    QCOMPARE(stopped.count(), 2);
    QVERIFY(!server->isRunning());
}

void TestServerPanel::closingTheWindowStopsAStreamingServer() {
    ServerDialog *d = openPanel();
    fill(d);
    d->startButton()->click();
    LocalServer *server = m_window->localServer();
    QVERIFY(server->isRunning());
    const int port = server->port();
    // A greedy stream of 3,000 tokens runs for seconds on the CPU; closing must not wait for it.
    std::atomic<bool> ended{false};
    std::thread streaming([port, &ended] {
        auto c = client(port);
        c->Post("/v1/chat/completions", auth(), chatBody(true, 3000), "application/json");
        ended = true;
    });
    QTRY_VERIFY_WITH_TIMEOUT(server->totals().active == 1, 10000);
    QVERIFY(!ended);
    QElapsedTimer t;
    t.start();
    m_window.reset(); // stops the server it owns
    const qint64 ms = t.elapsed();
    streaming.join();
    QVERIFY(ended);
    qInfo("closing the window with a stream in flight took %lld ms", ms);
    QVERIFY2(ms < 5000, qPrintable(QStringLiteral("closing took %1 ms").arg(ms)));
    QVERIFY(!portOpen(port));
    QVERIFY(m_session->isModelLoaded());
}

void TestServerPanel::choicesAreRemembered() {
    ServerDialog *d = openPanel();
    fill(d);
    d->portSpin()->setValue(0);
    d->modelNameEdit()->setText("remembered-name");
    d->startButton()->click();
    QVERIFY(m_window->localServer()->isRunning());
    d->stopButton()->click();
    {
        const QSettings s;
        QCOMPARE(s.value(settings_keys::kServerHost).toString(), QString("127.0.0.1"));
        QCOMPARE(s.value(settings_keys::kServerPort).toInt(), 0);
        QCOMPARE(s.value(settings_keys::kServerModelName).toString(), QString("remembered-name"));
        QVERIFY(!s.contains(settings_keys::kServerApiKey)); // not asked to remember it
    }
    d->rememberKeyBox()->setChecked(true);
    d->startButton()->click();
    QVERIFY(m_window->localServer()->isRunning());
    d->stopButton()->click();
    QCOMPARE(QSettings().value(settings_keys::kServerApiKey).toString(), QString::fromStdString(kKey));
    // A new panel starts from them.
    LocalServer other(m_session.get());
    ServerDialog fresh(&other, m_session.get());
    QCOMPARE(fresh.hostEdit()->text(), QString("127.0.0.1"));
    QCOMPARE(fresh.portSpin()->value(), 0);
    QCOMPARE(fresh.modelNameEdit()->text(), QString("remembered-name"));
    QCOMPARE(fresh.keyEdit()->text(), QString::fromStdString(kKey));
    QVERIFY(fresh.rememberKeyBox()->isChecked());
    // Unticking forgets the stored key at once.
    fresh.rememberKeyBox()->setChecked(false);
    QVERIFY(!QSettings().contains(settings_keys::kServerApiKey));
}

void TestServerPanel::shortcutsDoNotClash() {
    QCOMPARE(m_window->serverAction()->shortcut(), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_S));
    QHash<QKeySequence, QString> seen;
    std::function<void(QMenu *)> walk = [&](QMenu *menu) {
        for (QAction *a : menu->actions()) {
            if (a->menu()) walk(a->menu());
            for (const QKeySequence &k : a->shortcuts()) {
                QVERIFY2(!seen.contains(k), qPrintable(QStringLiteral("%1: %2 and %3")
                                                           .arg(k.toString(), seen.value(k), a->text())));
                seen.insert(k, a->text());
            }
        }
    };
    for (QAction *a : m_window->menuBar()->actions())
        if (a->menu()) walk(a->menu());
    // The Profiler's toggle lives in the View menu; the preset bar's Alt+1…9 are no menu shortcuts.
    QVERIFY(seen.contains(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_S)));
}

ES_DESKTOP_QTEST_MAIN(TestServerPanel)
#include "test_server_panel.moc"
