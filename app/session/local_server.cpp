// LocalServer (see local_server.h).
#include "local_server.h"

#include "engine_session.h"
#include "engine_views.h"

#include "app/server/api_server.h"
#include "engine/runtime/engine.h"

#include <deque>
#include <mutex>

namespace es {

// What the workers hand to the GUI thread: answered requests, oldest first, at most kLogLimit.
// Only the newest completion keeps its engine measurements (a routing trace can be megabytes;
// the profiler shows the latest request only).
struct LocalServer::Inbox {
    std::mutex mutex;
    std::deque<server::request_log_entry> entries;
    std::shared_ptr<const request_metrics> latestMetrics;
    quint64 latestId = 0;
};

namespace {

QString bracketed(const QString &host) { return host.contains(QLatin1Char(':')) ? "[" + host + "]" : host; }

ServedRequest toRow(const server::request_log_entry &e) {
    ServedRequest r;
    r.time = QDateTime::fromMSecsSinceEpoch(e.unix_ms);
    r.client = QString::fromStdString(e.client);
    r.method = QString::fromStdString(e.method);
    r.route = QString::fromStdString(e.path);
    r.model = QString::fromStdString(e.model);
    r.status = e.status;
    r.stream = e.stream;
    r.promptTokens = int(e.prompt_tokens);
    r.completionTokens = int(e.completion_tokens);
    r.durationMs = e.duration_ms;
    r.ttftMs = e.ttft_ms;
    r.finishReason = QString::fromStdString(e.finish_reason);
    r.requestId = e.request_id;
    return r;
}

} // namespace

LocalServer::LocalServer(EngineSession *session, QObject *parent) : QObject(parent), m_session(session) {
    qRegisterMetaType<es::ServedRequest>();
    qRegisterMetaType<es::ServerTotals>();
    qRegisterMetaType<es::LocalServerOptions>();
    m_timer.setInterval(kDrainMs);
    connect(&m_timer, &QTimer::timeout, this, &LocalServer::drain);
    // Direct: the server stops before the session touches the model it serves.
    if (session)
        connect(session, &EngineSession::localModelAboutToChange, this, [this](const QString &why) { stop(why); },
                Qt::DirectConnection);
}

LocalServer::~LocalServer() { stop(tr("the app is closing")); }

QString LocalServer::exposureProblem(const LocalServerOptions &o) {
    const QString host = o.host.trimmed();
    if (host.isEmpty())
        return tr("Enter an address to listen on: 127.0.0.1 serves this machine only, 0.0.0.0 every network.");
    const server::host_exposure x = server::resolve_exposure(host.toStdString());
    if (!x.resolve_error.empty())
        return tr("The address “%1” cannot be used: %2.").arg(host, QString::fromStdString(x.resolve_error));
    if (!x.loopback && o.apiKey.isEmpty() && !o.allowWithoutKey)
        return tr("Refusing to serve on %1 without an API key: anyone who can reach that address could use the "
                  "model. Set an API key, listen on 127.0.0.1 (this machine only), or tick “Allow without a key”.")
            .arg(host);
    return {};
}

QString LocalServer::start(const LocalServerOptions &o) {
    if (m_server) return tr("The server is already running at %1.").arg(m_url);
    if (!m_session) return tr("No model is loaded: open one first (File ▸ Open model…), then start the server.");
    if (m_session->isRemote())
        return tr("The app is connected to a remote server: only a model loaded in the app can be served. "
                  "Disconnect (Model ▸ Disconnect from the server) and open a model first.");
    if (m_session->isLoading()) return tr("The model is still loading: start the server once it has loaded.");
    if (!m_session->isModelLoaded() || !m_session->localEngine())
        return tr("No model is loaded: open one first (File ▸ Open model…), then start the server.");
    if (o.port < 0 || o.port > 65535)
        return tr("%1 is not a port number: use 1 … 65535, or 0 for any free port.").arg(o.port);
    if (const QString why = exposureProblem(o); !why.isEmpty()) return why;

    server::server_options so;
    so.host = o.host.trimmed().toStdString();
    so.port = o.port;
    so.api_key = o.apiKey.toStdString();
    so.insecure_no_api_key = o.allowWithoutKey;
    so.served_model_name = o.modelName.trimmed().toStdString();
    so.max_num_seqs = std::max(1, m_session->options().maxConcurrentReplies);
    auto srv = std::make_unique<server::api_server>(so, m_session->localEngine());
    if (const std::string e = srv->load(); !e.empty())
        return tr("The loaded model cannot be served: %1.").arg(QString::fromStdString(e));
    auto inbox = std::make_shared<Inbox>();
    srv->set_request_logger([inbox](const server::request_log_entry &e) {
        std::lock_guard lock(inbox->mutex);
        inbox->entries.push_back(e);
        if (e.metrics) {
            inbox->latestMetrics = e.metrics;
            inbox->latestId = e.request_id;
        }
        inbox->entries.back().metrics.reset();
        while (inbox->entries.size() > size_t(kLogLimit)) inbox->entries.pop_front();
    });
    if (const std::string e = srv->bind(); !e.empty()) {
        if (e.find("(the port is in use)") != std::string::npos)
            return tr("Port %1 on %2 is in use (another program or server listens there): choose another port, "
                      "or 0 for any free one.")
                .arg(o.port)
                .arg(o.host.trimmed());
        return tr("The server could not start: %1.").arg(QString::fromStdString(e));
    }
    m_options = o;
    m_port = srv->port();
    m_url = QStringLiteral("http://%1:%2").arg(bracketed(o.host.trimmed())).arg(m_port);
    m_modelName = QString::fromStdString(srv->served_model_name());
    m_inbox = inbox;
    server::api_server *raw = srv.get();
    m_server = std::move(srv);
    m_thread = std::thread([raw] { raw->serve(); });
    m_totals = {};
    m_rate.clear();
    m_clock.start();
    m_timer.start();
    emit started(m_url);
    emit totalsChanged(m_totals);
    return {};
}

void LocalServer::stop(const QString &why) {
    if (!m_server) return;
    m_server->stop(); // cancels its open requests; serve() returns once the workers are done
    if (m_thread.joinable()) m_thread.join();
    m_timer.stop();
    drain(); // the last answers, and the final totals
    m_server.reset();
    m_inbox.reset();
    m_url.clear();
    m_port = 0;
    m_totals.active = 0;
    m_totals.tokensPerSecond = 0;
    emit totalsChanged(m_totals);
    emit stopped(why);
}

void LocalServer::clearRequests() {
    m_log.clear();
    emit requestsCleared();
}

void LocalServer::drain() {
    if (!m_server || !m_inbox) return;
    std::deque<server::request_log_entry> got;
    std::shared_ptr<const request_metrics> latest;
    quint64 latestId = 0;
    {
        std::lock_guard lock(m_inbox->mutex);
        got.swap(m_inbox->entries);
        latest = std::move(m_inbox->latestMetrics);
        latestId = m_inbox->latestId;
    }
    if (!got.empty()) {
        const qsizetype before = m_log.size();
        QList<ServedRequest> rows;
        rows.reserve(qsizetype(got.size()));
        for (auto it = got.rbegin(); it != got.rend(); ++it) rows.append(toRow(*it)); // newest first
        m_log = rows + m_log;
        const qsizetype dropped = std::max<qsizetype>(0, m_log.size() - kLogLimit);
        if (dropped > 0) m_log.resize(kLogLimit);
        emit requestsLogged(int(std::min<qsizetype>(rows.size(), kLogLimit)), int(std::min(dropped, before)));
    }
    const server::server_totals t = m_server->totals();
    m_totals.requests = t.requests;
    m_totals.errors = t.errors;
    m_totals.active = t.active;
    m_totals.promptTokens = t.prompt_tokens;
    m_totals.completionTokens = t.generation_tokens;
    const qint64 now = m_clock.elapsed();
    m_rate.append({now, t.tokens_out});
    while (m_rate.size() > 2 && now - m_rate[1].first >= 2000) m_rate.removeFirst();
    const auto &[t0, n0] = m_rate.first();
    m_totals.tokensPerSecond = now > t0 ? double(t.tokens_out - n0) * 1000.0 / double(now - t0) : 0.0;
    emit totalsChanged(m_totals);
    if (latest && m_session) {
        const SessionModelInfo info = m_session->modelInfo();
        emit requestProfiled(toReplyProfile(latestId, *latest, info.moeLayers, info.nExperts));
    }
    if (t.active > 0) emit serving();
}

} // namespace es
