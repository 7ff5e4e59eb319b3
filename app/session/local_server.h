// LocalServer: the desktop app's OpenAI-compatible HTTP server (app/server's api_server) on the
// EngineSession's own engine — the model loaded in the app is served as it is, without a second
// copy of the weights, and the engine's scheduler batches the server's requests with the app's
// chats. It serves only while that model stays loaded: the session's localModelAboutToChange
// (another model, new engine settings, a remote connection, the app closing) stops it first and
// says why. stop() is bounded: open requests are cancelled, the workers give back their
// connections (their writes give up at once) and the serving thread is joined.
// Threads: create and use on the GUI thread. The server's own threads (the gate, its workers, the
// serving thread) never touch this object: each answered request goes into a locked inbox that a
// GUI-thread timer drains into the requests log (the newest kLogLimit) four times a second.
#pragma once

#include "session_types.h"

#include <QDateTime>
#include <QElapsedTimer>
#include <QList>
#include <QObject>
#include <QPointer>
#include <QString>
#include <QTimer>

#include <memory>
#include <thread>

namespace es {

class EngineSession;

namespace server {
class api_server;
}

struct LocalServerOptions {
    QString host = QStringLiteral("127.0.0.1"); // 127.0.0.1: this machine only
    int port = 8000;                            // 0: any free port
    QString apiKey;                             // empty: no key (loopback addresses only, unless…)
    bool allowWithoutKey = false;               // … this: another address without a key
    QString modelName;                          // the name clients send; empty: the model folder's
};

// One answered request, a row of the requests log.
struct ServedRequest {
    QDateTime time;       // when the request was complete and handed to a worker
    QString client;       // the peer, ip:port
    QString method, route;
    QString model;        // the model the body named (empty: none)
    int status = 0;       // 0: no response was written (the client went first)
    bool stream = false;
    int promptTokens = -1, completionTokens = -1; // -1: not a completion the engine ran
    double durationMs = 0;
    double ttftMs = -1;   // streaming completions only
    QString finishReason; // stop | length | cancelled
    quint64 requestId = 0;
};

// Running totals. requests and errors (status ≥ 400) count answers of the routes; active: being
// answered now; tokensPerSecond: tokens generated for the server's requests per second over the
// last two seconds (requests still streaming included).
struct ServerTotals {
    quint64 requests = 0, errors = 0, active = 0, promptTokens = 0, completionTokens = 0;
    double tokensPerSecond = 0;
};

class LocalServer : public QObject {
    Q_OBJECT
public:
    explicit LocalServer(EngineSession *session, QObject *parent = nullptr);
    ~LocalServer() override; // stops serving (bounded)

    static constexpr int kLogLimit = 1000;
    static constexpr int kDrainMs = 250;

    bool isRunning() const { return m_server != nullptr; }
    // While running: the listening address ("http://127.0.0.1:8000"), the port actually bound (port
    // 0 asks for any) and the name the model is served as.
    QString url() const { return m_url; }
    int port() const { return m_port; }
    QString servedModelName() const { return m_modelName; }
    LocalServerOptions options() const { return m_options; }

    // The requests log, newest first (at most kLogLimit rows).
    const QList<ServedRequest> &requests() const { return m_log; }
    ServerTotals totals() const { return m_totals; }

    // Why these options may not serve ("" when they may): no address, an address that does not
    // resolve (named), or one reachable from other machines without a key and without
    // allowWithoutKey — api_server's exposure rule (check_exposure), worded for the app.
    static QString exposureProblem(const LocalServerOptions &options);

public slots:
    // Starts serving the session's loaded model; "" on success (then started(url)), else why not,
    // in words naming what was wrong: no model loaded, a model still loading, a remote server in
    // use, the address, the port in use.
    QString start(const es::LocalServerOptions &options);
    // Stops serving; `why` ("" when asked) goes with stopped(). Nothing when not running.
    void stop(const QString &why = {});
    void clearRequests();

signals:
    void started(const QString &url);
    void stopped(const QString &why);
    // New rows at the top of the log (newest first); `dropped`: rows that fell off its end.
    void requestsLogged(int added, int dropped);
    void requestsCleared();
    void totalsChanged(const es::ServerTotals &totals);
    // A completion the server answered, as a reply profile on the session's engine clock (the
    // newest of each drain), for the profiler (ProfileRecorder::recordServedReply).
    void requestProfiled(const es::ReplyProfile &profile);
    // A drain found requests in flight: the profiler reads the engine's steps now, before its
    // telemetry ring moves past them.
    void serving();

private:
    struct Inbox;
    void drain();

    QPointer<EngineSession> m_session;
    std::unique_ptr<server::api_server> m_server;
    std::shared_ptr<Inbox> m_inbox;
    std::thread m_thread; // runs api_server::serve
    QTimer m_timer;
    LocalServerOptions m_options;
    QString m_url, m_modelName;
    int m_port = 0;
    QList<ServedRequest> m_log;
    ServerTotals m_totals;
    // Tokens out at the last few drains (for tokensPerSecond): {ms since start, tokens}.
    QList<QPair<qint64, quint64>> m_rate;
    QElapsedTimer m_clock;
};

} // namespace es

Q_DECLARE_METATYPE(es::ServedRequest)
Q_DECLARE_METATYPE(es::ServerTotals)
Q_DECLARE_METATYPE(es::LocalServerOptions)
