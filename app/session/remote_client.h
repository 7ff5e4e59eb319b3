// RemoteClient: EngineSession's other source of replies — a remote OpenAI-compatible server
// (ExpertScope's own `expertscope-cli serve`, vLLM, SGLang, FastDeploy…) reached with Qt Network,
// never blocking the GUI thread. It produces what the local engine produces, with the same
// signals: streamed text (SSE, coalesced per 33 ms tick like the local pump), a reply's profile
// and metrics measured on the client (TTFT and inter-token gaps are the arrival times of SSE
// chunks), and a TelemetryView rebuilt from a 1 s scrape of the server's /metrics (queue,
// KV cache, memory; the routing heatmap from expertscope:expert_tokens_total deltas).
// What a remote server cannot give: per-request routing traces and engine phase times, so
// remote replies are stored without routing and the profiler says so.
// Thread: GUI thread (or any one thread with an event loop). Owned by EngineSession.
#pragma once

#include "prometheus_text.h"
#include "session_types.h"

#include <QElapsedTimer>
#include <QHash>
#include <QNetworkRequest>
#include <QObject>
#include <QPointer>
#include <QTimer>
#include <QUrl>

#include <deque>

class QNetworkAccessManager;
class QNetworkReply;

namespace es {

struct RemoteEndpoint {
    QUrl baseUrl;   // http://host:port (a trailing /v1 is accepted and dropped)
    QString apiKey; // empty: no Authorization header
    QString model;  // the id sent in requests (from /v1/models)
};

// "host:8000", "http://host:8000/", "http://host:8000/v1" → http://host:8000. Invalid: empty.
QUrl normalizeBaseUrl(const QString &text);
// The message for a failed request: unreachable, 401/403 (the key), not an OpenAI server, or
// the server's own OpenAI error message with the HTTP status.
QString describeNetworkError(QNetworkReply *reply, const QByteArray &body);

// GET /v1/models once; finished(models, error) with either the ids or a message.
class RemoteModelQuery : public QObject {
    Q_OBJECT
public:
    explicit RemoteModelQuery(QObject *parent = nullptr);
    void fetch(const QUrl &baseUrl, const QString &apiKey, int timeoutMs = 10000);
signals:
    void finished(const QStringList &models, const QString &error);

private:
    QNetworkAccessManager *m_net;
    QPointer<QNetworkReply> m_reply;
};

class RemoteClient : public QObject {
    Q_OBJECT
public:
    RemoteClient(const RemoteEndpoint &endpoint, int defaultMaxTokens, QObject *parent = nullptr);
    ~RemoteClient() override;

    const RemoteEndpoint &endpoint() const { return m_endpoint; }
    // Checks /v1/models (reachable, key accepted, model served), scrapes /metrics once, then
    // connected(info) or connectFailed(message). Scraping then continues every second.
    void connectToServer();
    bool isConnected() const { return m_connected; }
    SessionModelInfo modelInfo() const { return m_info; }
    // Has the last scrape shown ExpertScope's expert metrics? Did /metrics answer at all?
    bool hasExpertMetrics() const { return m_hasExpertMetrics; }
    bool hasMetrics() const { return m_hasMetrics; }

    quint64 submit(const ChatRequest &request);
    void cancel(quint64 requestId); // aborts the HTTP request; replyFinished("cancelled") at once
    void cancelAll();
    int activeReplies() const { return int(m_active.size()); }
    TelemetryView telemetry() const { return m_telemetry; }
    ReplyProfile replyProfile(quint64 requestId) const;
    // Scrapes /metrics now (tests; the timer does it every second).
    void scrapeNow();

signals:
    void connected(const es::SessionModelInfo &info);
    void connectFailed(const QString &message);
    void tokensGenerated(quint64 requestId, const QString &textDelta, int nTokens);
    void replyFinished(quint64 requestId, const QString &finishReason, const es::MessageMetrics &metrics,
                       const QList<es::LayerRouting> &routing, quint64 seed);
    void replyFailed(quint64 requestId, const QString &message);
    void replyProfiled(quint64 requestId, const es::ReplyProfile &profile);
    void statsUpdated(const es::SessionStats &stats);
    void metricsScraped(); // after each scrape that parsed (tests wait on it)

private:
    struct Active {
        QPointer<QNetworkReply> reply;
        QByteArray buffer;      // SSE bytes not yet split into events
        QByteArray errorBody;   // the body of a non-200 answer
        QByteArray pendingUtf8; // text not yet emitted
        int pendingChunks = 0;
        quint64 seed = 0;
        qint64 tSubmitUs = 0, tFirstUs = -1, tFinishUs = -1;
        QList<qint64> chunkTimesUs; // arrival of each chunk that carried text
        QString finishReason, error;
        int promptTokens = -1, completionTokens = -1;
        bool done = false; // [DONE] seen
    };

    qint64 nowUs() const { return m_clock.nsecsElapsed() / 1000; }
    QNetworkRequest makeRequest(const QString &path) const;
    void onReadyRead(quint64 id);
    void onFinished(quint64 id);
    void drainEvents(Active &a);
    void handleEvent(Active &a, const QByteArray &data);
    void pump();
    void finishReply(quint64 id, const QString &reason);
    void failReply(quint64 id, const QString &message);
    ReplyProfile makeProfile(quint64 id, const Active &a) const;
    MessageMetrics makeMetrics(const Active &a) const;
    void onScraped(QNetworkReply *reply);
    void applyMetrics(const PromExposition &p);

    RemoteEndpoint m_endpoint;
    int m_defaultMaxTokens;
    QNetworkAccessManager *m_net;
    QElapsedTimer m_clock;
    QTimer m_pump, m_scrape;
    QHash<quint64, Active> m_active;
    quint64 m_nextId = quint64(1) << 48; // apart from the local engine's ids
    bool m_connected = false, m_connecting = false;
    SessionModelInfo m_info;
    QPointer<QNetworkReply> m_scrapeReply;
    bool m_hasMetrics = false, m_hasExpertMetrics = false;
    quint64 m_nScrapes = 0;
    TelemetryView m_telemetry;
    std::deque<QList<quint64>> m_expertHistory; // cumulative counts of the last scrapes (window)
    std::deque<double> m_stepsHistory;
    // Client-side token rate: chunks with text over the last second.
    qint64 m_rateSinceUs = 0;
    int m_rateChunks = 0;
    double m_chunksPerSecond = 0;
};

} // namespace es
