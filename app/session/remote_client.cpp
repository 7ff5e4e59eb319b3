// RemoteClient (see remote_client.h). Every HTTP exchange is asynchronous (QNetworkAccessManager
// on the owner's thread); a streamed reply is parsed as it arrives (SSE events split on blank
// lines, `data:` lines joined), and its text is handed on by a 33 ms pump, as EngineSession does
// with the engine's events. Metrics are scraped every second while connected.
#include "remote_client.h"

#include <QCoreApplication>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QNetworkAccessManager>
#include <QNetworkReply>

#include <algorithm>
#include <cmath>
#include <limits>

namespace es {

namespace {

constexpr int kPumpMs = 33;
constexpr int kScrapeMs = 1000;
constexpr size_t kWindowScrapes = 10; // the live routing window: the last ~10 s

// A server's /metrics is outside input: its numbers are bounded before they become counts, so a
// buggy or hostile server (NaN, +Inf, 1e300, a layer label of 2^31) cannot make a cast undefined,
// a product overflow or an allocation explode. Byte figures stop at 2^50 (1 PiB), block counts
// at 2^30, and layers and experts are indices below kMaxRoutingIndex.
constexpr double kMaxBytes = 1125899906842624.0; // 2^50
constexpr double kMaxBlocks = 1073741824.0;      // 2^30
constexpr int kMaxRoutingIndex = 1024;

// NaN and negatives are 0; beyond `top` (or T's range) the value stops there.
template <typename T>
T boundedCount(double v, double top = std::numeric_limits<double>::infinity()) {
    if (!(v > 0)) return T(0);
    const double limit = std::ldexp(1.0, std::numeric_limits<T>::digits); // T holds [0, limit)
    if (v >= limit) return top < limit ? T(top) : std::numeric_limits<T>::max();
    return v >= top ? T(top) : T(v);
}

// A ratio in [0, 1]; NaN is 0.
double fraction(double v) { return std::isnan(v) ? 0.0 : std::clamp(v, 0.0, 1.0); }

QString serverErrorMessage(const QByteArray &body) {
    const QJsonDocument doc = QJsonDocument::fromJson(body);
    if (!doc.isObject()) return {};
    const QJsonValue e = doc.object().value(QLatin1String("error"));
    if (e.isObject()) return e.toObject().value(QLatin1String("message")).toString();
    if (e.isString()) return e.toString();
    const QJsonValue d = doc.object().value(QLatin1String("detail")); // FastAPI-style servers
    return d.isString() ? d.toString() : QString();
}

} // namespace

QUrl normalizeBaseUrl(const QString &text) {
    QString t = text.trimmed();
    if (t.isEmpty()) return {};
    if (!t.contains(QLatin1String("://"))) t.prepend(QLatin1String("http://"));
    QUrl url(t, QUrl::StrictMode);
    if (!url.isValid() || url.host().isEmpty() ||
        (url.scheme() != QLatin1String("http") && url.scheme() != QLatin1String("https")))
        return {};
    QString path = url.path();
    while (path.endsWith('/')) path.chop(1);
    if (path.endsWith(QLatin1String("/v1"))) path.chop(3);
    url.setPath(path);
    url.setQuery(QString());
    url.setFragment(QString());
    return url;
}

QString describeNetworkError(QNetworkReply *reply, const QByteArray &body) {
    const int status = reply->attribute(QNetworkRequest::HttpStatusCodeAttribute).toInt();
    const QString where = reply->url().toString(QUrl::RemoveUserInfo);
    const QString server = serverErrorMessage(body);
    // Transport failures (codes below 100): before any answer, or in the middle of a stream.
    const bool transport = reply->error() > QNetworkReply::NoError && reply->error() < 100;
    if (transport && status != 0)
        return QCoreApplication::translate("RemoteClient", "The connection to %1 was lost: %2")
            .arg(where, reply->errorString());
    if (status == 0)
        return QCoreApplication::translate("RemoteClient", "Cannot reach %1: %2")
            .arg(where, reply->errorString());
    if (status == 401 || status == 403)
        return QCoreApplication::translate("RemoteClient", "The server refused the API key (HTTP %1)%2")
            .arg(status)
            .arg(server.isEmpty() ? QString() : QStringLiteral(": ") + server);
    if (status == 404 && server.isEmpty())
        return QCoreApplication::translate(
                   "RemoteClient", "HTTP 404 at %1: no such route — is this an OpenAI-compatible server?")
            .arg(where);
    if (!server.isEmpty())
        return QCoreApplication::translate("RemoteClient", "HTTP %1 from the server: %2")
            .arg(status)
            .arg(server);
    QString text = QString::fromUtf8(body.left(200)).simplified();
    return QCoreApplication::translate("RemoteClient", "HTTP %1 from %2%3")
        .arg(status)
        .arg(where, text.isEmpty() ? QString() : QStringLiteral(": ") + text);
}

// ---- RemoteModelQuery -------------------------------------------------------------------------

RemoteModelQuery::RemoteModelQuery(QObject *parent)
    : QObject(parent), m_net(new QNetworkAccessManager(this)) {}

namespace {
// The ids of an OpenAI model list, or an error text.
QStringList parseModelList(const QByteArray &body, const QString &where, QString &error) {
    const QJsonDocument doc = QJsonDocument::fromJson(body);
    QStringList ids;
    if (doc.isObject() && doc.object().value(QLatin1String("data")).isArray())
        for (const QJsonValue &m : doc.object().value(QLatin1String("data")).toArray()) {
            const QString id = m.toObject().value(QLatin1String("id")).toString();
            if (!id.isEmpty()) ids << id;
        }
    if (ids.isEmpty())
        error =
            doc.isObject() && doc.object().value(QLatin1String("data")).isArray()
                ? QCoreApplication::translate("RemoteClient", "%1 lists no models").arg(where)
                : QCoreApplication::translate(
                      "RemoteClient",
                      "%1 answered, but not with an OpenAI model list — is it an OpenAI-compatible server?")
                      .arg(where);
    return ids;
}

QNetworkRequest jsonRequest(const QUrl &url, const QString &apiKey) {
    QNetworkRequest r(url);
    r.setAttribute(QNetworkRequest::RedirectPolicyAttribute, QNetworkRequest::NoLessSafeRedirectPolicy);
    if (!apiKey.isEmpty()) r.setRawHeader("Authorization", "Bearer " + apiKey.toUtf8());
    return r;
}
} // namespace

void RemoteModelQuery::fetch(const QUrl &baseUrl, const QString &apiKey, int timeoutMs) {
    if (m_reply) {
        m_reply->disconnect(this);
        m_reply->abort();
        m_reply->deleteLater();
    }
    if (!baseUrl.isValid() || baseUrl.isEmpty()) {
        emit finished(
            {}, QCoreApplication::translate("RemoteClient", "Not a server address: give http://host:port"));
        return;
    }
    QUrl url = baseUrl;
    url.setPath(baseUrl.path() + QLatin1String("/v1/models"));
    QNetworkRequest r = jsonRequest(url, apiKey);
    r.setTransferTimeout(timeoutMs);
    QNetworkReply *reply = m_net->get(r);
    m_reply = reply;
    connect(reply, &QNetworkReply::finished, this, [this, reply] {
        reply->deleteLater();
        const QByteArray body = reply->readAll();
        const int status = reply->attribute(QNetworkRequest::HttpStatusCodeAttribute).toInt();
        if (reply->error() != QNetworkReply::NoError || status != 200) {
            emit finished({}, describeNetworkError(reply, body));
            return;
        }
        QString error;
        const QStringList ids = parseModelList(body, reply->url().toString(QUrl::RemoveUserInfo), error);
        emit finished(ids, error);
    });
}

// ---- RemoteClient -----------------------------------------------------------------------------

RemoteClient::RemoteClient(const RemoteEndpoint &endpoint, int defaultMaxTokens, QObject *parent)
    : QObject(parent), m_endpoint(endpoint), m_defaultMaxTokens(defaultMaxTokens),
      m_net(new QNetworkAccessManager(this)) {
    m_endpoint.baseUrl = normalizeBaseUrl(endpoint.baseUrl.toString());
    m_clock.start();
    m_pump.setInterval(kPumpMs);
    m_pump.setTimerType(Qt::PreciseTimer);
    connect(&m_pump, &QTimer::timeout, this, &RemoteClient::pump);
    m_scrape.setInterval(kScrapeMs);
    connect(&m_scrape, &QTimer::timeout, this, &RemoteClient::scrapeNow);
}

RemoteClient::~RemoteClient() {
    m_scrape.stop();
    m_pump.stop();
    for (Active &a : m_active)
        if (a.reply) {
            a.reply->disconnect(this);
            a.reply->abort();
        }
}

QNetworkRequest RemoteClient::makeRequest(const QString &path) const {
    QUrl url = m_endpoint.baseUrl;
    url.setPath(m_endpoint.baseUrl.path() + path);
    return jsonRequest(url, m_endpoint.apiKey);
}

void RemoteClient::connectToServer() {
    if (m_connecting) return;
    m_connecting = true;
    const QString where = m_endpoint.baseUrl.toString();
    if (!m_endpoint.baseUrl.isValid() || m_endpoint.baseUrl.isEmpty()) {
        m_connecting = false;
        emit connectFailed(
            QCoreApplication::translate("RemoteClient", "Not a server address: give http://host:port"));
        return;
    }
    QNetworkRequest r = makeRequest(QStringLiteral("/v1/models"));
    r.setTransferTimeout(10000);
    QNetworkReply *reply = m_net->get(r);
    connect(reply, &QNetworkReply::finished, this, [this, reply, where] {
        reply->deleteLater();
        const QByteArray body = reply->readAll();
        const int status = reply->attribute(QNetworkRequest::HttpStatusCodeAttribute).toInt();
        if (reply->error() != QNetworkReply::NoError || status != 200) {
            m_connecting = false;
            emit connectFailed(describeNetworkError(reply, body));
            return;
        }
        QString error;
        const QStringList ids = parseModelList(body, reply->url().toString(QUrl::RemoveUserInfo), error);
        if (!error.isEmpty()) {
            m_connecting = false;
            emit connectFailed(error);
            return;
        }
        if (m_endpoint.model.isEmpty()) m_endpoint.model = ids.first();
        if (!ids.contains(m_endpoint.model)) {
            m_connecting = false;
            emit connectFailed(QCoreApplication::translate("RemoteClient",
                                                           "%1 does not serve the model '%2' (it serves: %3)")
                                   .arg(where, m_endpoint.model, ids.join(QStringLiteral(", "))));
            return;
        }
        SessionModelInfo v;
        v.dir = v.remoteUrl = where;
        v.name = m_endpoint.model;
        v.architecture = QStringLiteral("remote");
        v.backend = QCoreApplication::translate("RemoteClient", "remote: %1").arg(where);
        v.precision = QStringLiteral("remote");
        for (const QJsonValue &m :
             QJsonDocument::fromJson(body).object().value(QLatin1String("data")).toArray()) {
            const QJsonObject o = m.toObject();
            if (o.value(QLatin1String("id")).toString() == m_endpoint.model)
                v.contextLength = o.value(QLatin1String("max_model_len")).toInt();
        }
        m_info = v;
        scrapeNow(); // the first scrape completes the connection (model shape from expert metrics)
    });
}

void RemoteClient::scrapeNow() {
    if (m_scrapeReply) return; // one at a time; a slow server is not piled on
    QNetworkRequest r = makeRequest(QStringLiteral("/metrics"));
    r.setTransferTimeout(3000);
    QNetworkReply *reply = m_net->get(r);
    m_scrapeReply = reply;
    connect(reply, &QNetworkReply::finished, this, [this, reply] { onScraped(reply); });
}

void RemoteClient::onScraped(QNetworkReply *reply) {
    reply->deleteLater();
    m_scrapeReply = nullptr;
    const QByteArray body = reply->readAll();
    const int status = reply->attribute(QNetworkRequest::HttpStatusCodeAttribute).toInt();
    bool parsed = false;
    if (reply->error() == QNetworkReply::NoError && status == 200) {
        const PromExposition p = parsePrometheusText(body);
        if (!p.samples.isEmpty()) {
            applyMetrics(p);
            parsed = true;
        }
    }
    if (!parsed) {
        m_hasMetrics = false;
        m_hasExpertMetrics = false;
        m_telemetry = {};
        m_telemetry.remoteUrl = m_info.remoteUrl;
        m_telemetry.noExpertMetrics = true;
    }
    if (m_connecting) {
        m_connecting = false;
        m_connected = true;
        if (m_hasExpertMetrics) {
            m_info.isMoe = true;
            m_info.moeLayers = m_telemetry.moeLayers;
            m_info.nExperts = m_telemetry.nExperts;
            m_info.nLayers = m_telemetry.moeLayers.isEmpty() ? 0 : m_telemetry.moeLayers.last() + 1;
        }
        if (m_hasMetrics) {
            m_info.weightsBytes = m_telemetry.memory.weightsBytes;
            m_info.kvCacheBytes = m_telemetry.memory.kvBlockBytes * m_telemetry.memory.kvBlocksTotal;
        }
        m_scrape.start();
        emit connected(m_info);
    }
    if (parsed) emit metricsScraped();
    SessionStats s;
    s.tokensPerSecond = m_active.isEmpty() ? 0.0 : m_chunksPerSecond;
    s.running = m_telemetry.running;
    s.waiting = m_telemetry.waiting;
    const MemoryView &m = m_telemetry.memory;
    s.memoryInUse = m.weightsBytes + m.kvBlockBytes * m.kvBlocksUsed + m.allocInUse;
    s.memoryTotal =
        m.deviceTotal > 0 ? m.deviceTotal : m.weightsBytes + m.kvBlockBytes * m.kvBlocksTotal + m.allocInUse;
    s.kvBlocksUsed = m.kvBlocksUsed;
    s.kvBlocksTotal = m.kvBlocksTotal;
    emit statsUpdated(s);
}

void RemoteClient::applyMetrics(const PromExposition &p) {
    TelemetryView t;
    t.valid = true;
    t.remoteUrl = m_info.remoteUrl;
    t.tUs = nowUs();
    ++m_nScrapes;
    m_hasMetrics = true;
    const auto val = [&p](const char *name, const QList<QPair<QString, QString>> &match = {}) {
        return p.sum(QLatin1String(name), match);
    };
    const std::optional<double> steps = val("expertscope:engine_steps_total");
    // Step counts stay below 2^53 so that they are exact as the doubles of m_stepsHistory.
    t.nSteps = steps ? boundedCount<quint64>(*steps, 9007199254740992.0) : m_nScrapes;
    t.running = boundedCount<int>(val("vllm:num_requests_running").value_or(0));
    t.waiting = boundedCount<int>(val("vllm:num_requests_waiting").value_or(0));
    t.tokensGenerated = boundedCount<quint64>(val("vllm:generation_tokens_total").value_or(0));
    t.prefixQueries = boundedCount<quint64>(val("vllm:prefix_cache_queries_total").value_or(0));
    t.prefixHits = boundedCount<quint64>(val("vllm:prefix_cache_hits_total").value_or(0));

    MemoryView &m = t.memory;
    if (const auto blocks = val("expertscope:kv_blocks", {{"state", "total"}})) {
        m.kvBlocksTotal = boundedCount<int>(*blocks, kMaxBlocks);
        m.kvBlocksUsed =
            std::min(m.kvBlocksTotal,
                     boundedCount<int>(val("expertscope:kv_blocks", {{"state", "used"}}).value_or(0)));
        m.kvBlocksCached =
            std::min(m.kvBlocksTotal,
                     boundedCount<int>(val("expertscope:kv_blocks", {{"state", "cached"}}).value_or(0)));
        m.kvBlocksFree = m.kvBlocksTotal - m.kvBlocksUsed;
        const qint64 kvTotal = boundedCount<qint64>(
            val("expertscope:memory_bytes", {{"kind", "kv_total"}}).value_or(0), kMaxBytes);
        m.kvBlockBytes = m.kvBlocksTotal > 0 ? kvTotal / m.kvBlocksTotal : 0;
        // A pool mapped on demand: its memory now (absent from older servers: all of it).
        if (const auto mapped = val("expertscope:memory_bytes", {{"kind", "kv_mapped"}})) {
            m.kvMappedBytes = std::min(boundedCount<qint64>(*mapped, kMaxBytes), std::max<qint64>(kvTotal, 0));
            m.kvCapacityBytes = kvTotal;
        }
        m.weightsBytes = boundedCount<qint64>(
            val("expertscope:memory_bytes", {{"kind", "weights"}}).value_or(0), kMaxBytes);
        m.allocInUse = boundedCount<qint64>(
            val("expertscope:memory_bytes", {{"kind", "workspace"}}).value_or(0), kMaxBytes);
        m.fragmentation = fraction(val("expertscope:memory_fragmentation").value_or(0));
        m.kvWaste = fraction(val("expertscope:kv_cache_waste").value_or(0));
    } else if (auto perc = val("vllm:kv_cache_usage_perc") ? val("vllm:kv_cache_usage_perc")
                                                           : val("vllm:gpu_cache_usage_perc")) {
        // vLLM / SGLang-style: a usage fraction, and the block count in cache_config_info's labels.
        int total = 0;
        for (const PromSample &s : p.family(QStringLiteral("vllm:cache_config_info")))
            total =
                std::max(total, std::min(s.label(QStringLiteral("num_gpu_blocks")).toInt(), int(kMaxBlocks)));
        m.kvBlocksTotal = total > 0 ? total : 1000;
        m.kvBlocksUsed = int(std::lround(fraction(*perc) * m.kvBlocksTotal));
        m.kvBlocksFree = m.kvBlocksTotal - m.kvBlocksUsed;
    }

    // Expert routing: cumulative counts per (layer, expert), the window as the difference with
    // the scrape kWindowScrapes ago.
    // Samples whose layer or expert label is not an index below kMaxRoutingIndex are left out.
    QList<PromSample> experts = p.family(QStringLiteral("expertscope:expert_tokens_total"));
    experts.removeIf([](const PromSample &s) {
        bool okLayer = false, okExpert = false;
        const int layer = s.label(QStringLiteral("layer")).toInt(&okLayer);
        const int expert = s.label(QStringLiteral("expert")).toInt(&okExpert);
        return !okLayer || !okExpert || layer < 0 || layer >= kMaxRoutingIndex || expert < 0 ||
               expert >= kMaxRoutingIndex;
    });
    m_hasExpertMetrics = !experts.isEmpty();
    t.noExpertMetrics = !m_hasExpertMetrics;
    if (m_hasExpertMetrics) {
        QList<int> layers;
        int nExperts = 0;
        for (const PromSample &s : experts) {
            const int layer = s.label(QStringLiteral("layer")).toInt();
            if (!layers.contains(layer)) layers << layer;
            nExperts = std::max(nExperts, s.label(QStringLiteral("expert")).toInt() + 1);
        }
        std::sort(layers.begin(), layers.end());
        QList<quint64> counts(layers.size() * nExperts, 0);
        for (const PromSample &s : experts) {
            const int slot = int(layers.indexOf(s.label(QStringLiteral("layer")).toInt()));
            const int e = s.label(QStringLiteral("expert")).toInt();
            if (slot >= 0 && e >= 0) counts[slot * nExperts + e] = boundedCount<quint64>(s.value);
        }
        if (!m_expertHistory.empty() && m_expertHistory.back().size() != counts.size()) {
            m_expertHistory.clear(); // the server's model changed
            m_stepsHistory.clear();
        }
        m_expertHistory.push_back(counts);
        m_stepsHistory.push_back(double(t.nSteps));
        while (m_expertHistory.size() > kWindowScrapes + 1) {
            m_expertHistory.pop_front();
            m_stepsHistory.pop_front();
        }
        const QList<quint64> &oldest = m_expertHistory.front();
        QList<quint64> window(counts.size(), 0);
        for (qsizetype i = 0; i < counts.size(); ++i)
            window[i] = counts[i] >= oldest[i] ? counts[i] - oldest[i] : 0;
        t.moeLayers = layers;
        t.nExperts = nExperts;
        t.expertTokens = counts;
        t.expertTokensWindow = window;
        t.windowSteps = boundedCount<int>(m_stepsHistory.back() - m_stepsHistory.front());
        t.windowSeconds = double(m_expertHistory.size() - 1) * kScrapeMs / 1000.0;
    }
    m_telemetry = t;
}

quint64 RemoteClient::submit(const ChatRequest &request) {
    const quint64 id = m_nextId++;
    Active a;
    a.tSubmitUs = nowUs();
    a.seed = request.sampling.seed.value_or(0);

    // The same conversation the local engine would render: system prompt first, the preset's
    // mode prefix before the last user message.
    QJsonArray messages;
    if (!request.systemPrompt.isEmpty())
        messages.append(QJsonObject{{"role", "system"}, {"content", request.systemPrompt}});
    qsizetype lastUser = -1;
    for (qsizetype i = 0; i < request.messages.size(); ++i)
        if (request.messages[i].role == MessageRole::User) lastUser = i;
    for (qsizetype i = 0; i < request.messages.size(); ++i) {
        const ChatTurn &t = request.messages[i];
        const char *role = t.role == MessageRole::System      ? "system"
                           : t.role == MessageRole::Assistant ? "assistant"
                                                              : "user";
        messages.append(QJsonObject{{"role", QLatin1String(role)},
                                    {"content", i == lastUser && !request.presetPrefix.isEmpty()
                                                    ? request.presetPrefix + t.content
                                                    : t.content}});
    }
    const SamplingParams &s = request.sampling;
    if (!s.intervention.isEmpty()) { // the OpenAI API has no way to ask for one: refused, not dropped
        m_active.insert(id, a);
        QTimer::singleShot(0, this, [this, id] {
            failReply(id, tr("expert interventions run in the built-in engine; a remote server does not take them "
                             "(clear them in Model ▸ Expert lab, or disconnect)"));
        });
        return id;
    }
    if (request.continueLastReply) { // the OpenAI API cannot leave the last reply open: refused, not re-asked
        m_active.insert(id, a);
        QTimer::singleShot(0, this, [this, id] {
            failReply(id, tr("continuing a reply needs the built-in engine; the OpenAI API of a remote server "
                             "cannot carry on an assistant message (disconnect to continue it here)"));
        });
        return id;
    }
    QJsonObject body{{"model", m_endpoint.model},
                     {"messages", messages},
                     {"stream", true},
                     {"stream_options", QJsonObject{{"include_usage", true}}},
                     {"max_tokens", s.maxTokens ? *s.maxTokens : m_defaultMaxTokens}};
    if (s.temperature) body["temperature"] = *s.temperature;
    if (s.topP) body["top_p"] = *s.topP;
    if (s.topK) body["top_k"] = *s.topK;
    if (s.minP) body["min_p"] = *s.minP;
    if (s.repetitionPenalty) body["repetition_penalty"] = *s.repetitionPenalty;
    if (s.presencePenalty) body["presence_penalty"] = *s.presencePenalty;
    if (s.frequencyPenalty) body["frequency_penalty"] = *s.frequencyPenalty;
    if (s.seed) body["seed"] = qint64(*s.seed & ((quint64(1) << 53) - 1)); // exact in a JSON number
    QJsonArray stops;
    for (const QString &stop : s.stopStrings)
        if (!stop.isEmpty()) stops.append(stop);
    if (!stops.isEmpty()) body["stop"] = stops;

    QNetworkRequest r = makeRequest(QStringLiteral("/v1/chat/completions"));
    r.setHeader(QNetworkRequest::ContentTypeHeader, QStringLiteral("application/json"));
    r.setRawHeader("Accept", "text/event-stream");
    QNetworkReply *reply = m_net->post(r, QJsonDocument(body).toJson(QJsonDocument::Compact));
    a.reply = reply;
    m_active.insert(id, a);
    connect(reply, &QNetworkReply::readyRead, this, [this, id] { onReadyRead(id); });
    connect(reply, &QNetworkReply::finished, this, [this, id] { onFinished(id); });
    if (!m_pump.isActive()) m_pump.start();
    return id;
}

void RemoteClient::onReadyRead(quint64 id) {
    auto it = m_active.find(id);
    if (it == m_active.end() || !it->reply) return;
    Active &a = *it;
    const QByteArray data = a.reply->readAll();
    const int status = a.reply->attribute(QNetworkRequest::HttpStatusCodeAttribute).toInt();
    if (status != 200) {
        a.errorBody += data.left(65536 - a.errorBody.size());
        return;
    }
    a.buffer += data;
    drainEvents(a);
}

void RemoteClient::drainEvents(Active &a) {
    a.buffer.replace("\r\n", "\n");
    qsizetype end;
    while ((end = a.buffer.indexOf("\n\n")) >= 0) {
        const QByteArray event = a.buffer.left(end);
        a.buffer.remove(0, end + 2);
        QByteArray payload;
        for (const QByteArray &line : event.split('\n')) {
            if (!line.startsWith("data:")) continue; // comments (keep-alive), event:, id:
            QByteArray d = line.mid(5);
            if (d.startsWith(' ')) d.remove(0, 1);
            if (!payload.isEmpty()) payload += '\n';
            payload += d;
        }
        if (!payload.isEmpty()) handleEvent(a, payload);
    }
}

void RemoteClient::handleEvent(Active &a, const QByteArray &data) {
    if (data == "[DONE]") {
        a.done = true;
        return;
    }
    const QJsonDocument doc = QJsonDocument::fromJson(data);
    if (!doc.isObject()) {
        if (a.error.isEmpty())
            a.error = QCoreApplication::translate("RemoteClient",
                                                  "The server sent a stream event that is not JSON: %1")
                          .arg(QString::fromUtf8(data.left(120)));
        return;
    }
    const QJsonObject o = doc.object();
    if (o.contains(QLatin1String("error"))) {
        a.error = serverErrorMessage(data);
        if (a.error.isEmpty())
            a.error =
                QCoreApplication::translate("RemoteClient", "The server reported an error in the stream");
        return;
    }
    const QJsonArray choices = o.value(QLatin1String("choices")).toArray();
    if (!choices.isEmpty()) {
        const QJsonObject c = choices.first().toObject();
        QString text = c.value(QLatin1String("delta")).toObject().value(QLatin1String("content")).toString();
        if (text.isEmpty()) text = c.value(QLatin1String("text")).toString();
        if (!text.isEmpty()) {
            const qint64 now = nowUs();
            if (a.tFirstUs < 0) a.tFirstUs = now;
            a.chunkTimesUs << now;
            a.pendingUtf8 += text.toUtf8();
            ++a.pendingChunks;
            ++m_rateChunks;
        }
        const QJsonValue f = c.value(QLatin1String("finish_reason"));
        if (f.isString() && !f.toString().isEmpty()) a.finishReason = f.toString();
    }
    const QJsonValue u = o.value(QLatin1String("usage"));
    if (u.isObject()) {
        a.promptTokens = u.toObject().value(QLatin1String("prompt_tokens")).toInt(-1);
        a.completionTokens = u.toObject().value(QLatin1String("completion_tokens")).toInt(-1);
    }
}

void RemoteClient::onFinished(quint64 id) {
    auto it = m_active.find(id);
    if (it == m_active.end() || !it->reply) return;
    QNetworkReply *reply = it->reply;
    onReadyRead(id); // whatever is left
    it = m_active.find(id);
    if (it == m_active.end()) return;
    Active &a = *it;
    a.tFinishUs = nowUs();
    if (!a.buffer.trimmed().isEmpty()) { // a last event without its blank line
        a.buffer += "\n\n";
        drainEvents(a);
    }
    a.buffer.clear();
    const int status = reply->attribute(QNetworkRequest::HttpStatusCodeAttribute).toInt();
    if (reply->error() != QNetworkReply::NoError || status != 200)
        return failReply(id, describeNetworkError(reply, a.errorBody));
    if (!a.error.isEmpty()) return failReply(id, a.error);
    if (a.finishReason.isEmpty())
        return failReply(id, QCoreApplication::translate(
                                 "RemoteClient", "The server closed the stream before the reply ended"));
    // OpenAI's finish reasons; vLLM says "abort" for a request it cancelled.
    const QString reason =
        a.finishReason == QLatin1String("abort") ? QStringLiteral("cancelled") : a.finishReason;
    finishReply(id, reason);
}

void RemoteClient::pump() {
    const qint64 now = nowUs();
    if (m_rateSinceUs == 0) m_rateSinceUs = now;
    if (now - m_rateSinceUs >= 500000) {
        m_chunksPerSecond = m_rateChunks / ((now - m_rateSinceUs) / 1e6);
        m_rateChunks = 0;
        m_rateSinceUs = now;
    }
    struct Out {
        quint64 id;
        QString text;
        int n;
    };
    QList<Out> out; // emitted after the loop: a slot may cancel a reply
    for (auto it = m_active.begin(); it != m_active.end(); ++it) {
        if (it->pendingUtf8.isEmpty()) continue;
        out.append({it.key(), QString::fromUtf8(it->pendingUtf8), it->pendingChunks});
        it->pendingUtf8.clear();
        it->pendingChunks = 0;
    }
    for (const Out &o : out)
        if (m_active.contains(o.id)) emit tokensGenerated(o.id, o.text, o.n);
    if (m_active.isEmpty()) {
        m_pump.stop();
        m_rateSinceUs = 0;
        m_rateChunks = 0;
        m_chunksPerSecond = 0;
    }
}

MessageMetrics RemoteClient::makeMetrics(const Active &a) const {
    MessageMetrics out;
    const int nChunks = int(a.chunkTimesUs.size());
    if (a.promptTokens >= 0) out.nPromptTokens = a.promptTokens;
    out.nOutputTokens = a.completionTokens >= 0 ? a.completionTokens : nChunks;
    if (a.tFirstUs >= 0) out.ttftMs = (a.tFirstUs - a.tSubmitUs) / 1000.0;
    for (int i = 0; i < nChunks; ++i) {
        out.tokenTimesMs.push_back(float((a.chunkTimesUs[i] - a.tSubmitUs) / 1000.0));
        if (i > 0) out.itlMs.push_back(float((a.chunkTimesUs[i] - a.chunkTimesUs[i - 1]) / 1000.0));
    }
    if (nChunks > 1 && *out.nOutputTokens > 1) {
        const double span_s = (a.chunkTimesUs.last() - a.chunkTimesUs.first()) / 1e6;
        if (span_s > 0) out.decodeTokS = (*out.nOutputTokens - 1) / span_s;
    }
    return out;
}

ReplyProfile RemoteClient::makeProfile(quint64 id, const Active &a) const {
    ReplyProfile p;
    p.requestId = id;
    p.tSubmitUs = a.tSubmitUs;
    p.tFirstTokenUs = a.tFirstUs;
    p.tFinishUs = a.tFinishUs;
    p.tokenTimesUs = a.chunkTimesUs;
    p.nPromptTokens = std::max(0, a.promptTokens);
    p.seed = a.seed;
    return p; // no routing trace: the OpenAI API carries none
}

ReplyProfile RemoteClient::replyProfile(quint64 requestId) const {
    auto it = m_active.find(requestId);
    return it == m_active.end() ? ReplyProfile{} : makeProfile(requestId, *it);
}

void RemoteClient::finishReply(quint64 id, const QString &reason) {
    auto it = m_active.find(id);
    if (it == m_active.end()) return;
    Active a = it.value();
    m_active.erase(it);
    if (a.reply) {
        a.reply->disconnect(this);
        a.reply->deleteLater();
    }
    if (a.tFinishUs < 0) a.tFinishUs = nowUs();
    if (!a.pendingUtf8.isEmpty()) emit tokensGenerated(id, QString::fromUtf8(a.pendingUtf8), a.pendingChunks);
    MessageMetrics metrics = makeMetrics(a);
    metrics.stopReason = reason;
    emit replyProfiled(id, makeProfile(id, a));
    emit replyFinished(id, reason, metrics, {}, a.seed);
}

void RemoteClient::failReply(quint64 id, const QString &message) {
    auto it = m_active.find(id);
    if (it == m_active.end()) return;
    Active a = it.value();
    m_active.erase(it);
    if (a.reply) {
        a.reply->disconnect(this);
        a.reply->deleteLater();
    }
    if (!a.pendingUtf8.isEmpty()) emit tokensGenerated(id, QString::fromUtf8(a.pendingUtf8), a.pendingChunks);
    emit replyProfiled(id, makeProfile(id, a));
    emit replyFailed(id, message);
}

void RemoteClient::cancel(quint64 requestId) {
    auto it = m_active.find(requestId);
    if (it == m_active.end()) return;
    if (it->reply) {
        it->reply->disconnect(this);
        it->reply->abort(); // closes the connection: the server cancels the request
    }
    finishReply(requestId, QStringLiteral("cancelled"));
}

void RemoteClient::cancelAll() {
    const auto ids = m_active.keys();
    for (quint64 id : ids) cancel(id);
}

} // namespace es
