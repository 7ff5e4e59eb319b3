// Report builders and the profile's JSON form (see report_data.h).
#include "report_data.h"
#include "es_build_info.h"

#include "chat_store.h"
#include "latency_stats.h"
#include "routing_stats.h"

#include <QJsonDocument>
#include <QSet>

#include <cmath>
#include <limits>

namespace es::report {

namespace {

constexpr int kExcerptMessages = 12; // the last messages of the branch shown in the excerpt
constexpr int kExcerptChars = 4000;  // per message

const double kNaN = std::numeric_limits<double>::quiet_NaN();

Provenance appProvenance() {
    Provenance p;
    p.appVersion = QStringLiteral(ES_VERSION);
    p.appCommit = QStringLiteral(ES_GIT_COMMIT);
    return p;
}

ExcerptMessage excerptOf(const Message &m) {
    ExcerptMessage e;
    e.role = messageRoleName(m.role);
    e.createdAt = m.createdAt;
    e.text = m.content;
    if (e.text.size() > kExcerptChars) {
        e.text.truncate(kExcerptChars);
        e.truncated = true;
    }
    return e;
}

void setExcerpt(Report &r, const QList<Message> &path) {
    const qsizetype from = std::max<qsizetype>(0, path.size() - kExcerptMessages);
    r.excerptOmitted = int(from);
    for (qsizetype i = from; i < path.size(); ++i) r.excerpt.append(excerptOf(path.at(i)));
}

void setGeneration(Provenance &p, const GenerationInfo &g) {
    p.modelName = g.modelName;
    p.modelHash = g.modelHash;
    p.precision = g.precision;
    p.sampling = g.sampling.toJson();
    p.seed = g.seed;
}

// A request from a stored reply; nullopt when it has neither profile nor metrics.
std::optional<ReportRequest> storedRequest(const ChatStore &store, const Message &m) {
    if (m.role != MessageRole::Assistant) return std::nullopt;
    ReportRequest q;
    q.label = QStringLiteral("message %1").arg(m.id);
    q.messageId = m.id;
    q.metrics = store.metrics(m.id);
    const std::optional<MessageProfile> p = store.profile(m.id);
    if (p) {
        q.profile = *p;
    } else if (q.metrics) {
        // Before schema v4 only the metrics exist: the token times and routing still make a report.
        for (float t : q.metrics->tokenTimesMs) q.profile.tokenTimesUs.append(qRound64(double(t) * 1000.0));
        if (q.metrics->ttftMs) q.profile.ttftUs = qRound64(*q.metrics->ttftMs * 1000.0);
        q.profile.nPromptTokens = q.metrics->nPromptTokens.value_or(0);
        q.profile.memoryPeakBytes = q.metrics->peakMemoryBytes.value_or(0);
        q.profile.durationUs = q.profile.tokenTimesUs.isEmpty() ? 0 : q.profile.tokenTimesUs.last();
        q.profile.routing = store.routing(m.id);
        for (const LayerRouting &lr : q.profile.routing) {
            q.profile.moeLayers.append(lr.layer);
            q.profile.nExperts = std::max(q.profile.nExperts, int(lr.expertCounts.size()));
        }
    } else {
        return std::nullopt;
    }
    // A stored profile may come from an older build or a hand edit: its counts are bounded by
    // its arrays before any chart or table is sized by them.
    q.profile = boundedProfile(std::move(q.profile));
    return q;
}

bool fieldError(QString *error, const QString &what) {
    if (error) *error = what;
    return false;
}

bool fitsInt(qint64 v) {
    return v >= std::numeric_limits<int>::min() && v <= std::numeric_limits<int>::max();
}

// Reads an integer field (JSON numbers are doubles: refuse fractions and values beyond 2^53).
bool readInt(const QJsonObject &o, const char *key, qint64 *out, QString *error, bool required = false) {
    const QJsonValue v = o.value(QLatin1String(key));
    if (v.isUndefined() || v.isNull())
        return !required || fieldError(error, QStringLiteral("\"%1\" is missing").arg(QLatin1String(key)));
    const double d = v.toDouble(kNaN);
    if (!v.isDouble() || d != std::floor(d) || std::fabs(d) > 9007199254740992.0)
        return fieldError(error, QStringLiteral("\"%1\" is not an integer").arg(QLatin1String(key)));
    *out = qint64(d);
    return true;
}

template <typename T>
bool readIntList(const QJsonObject &o, const char *key, QList<T> *out, QString *error) {
    const QJsonValue v = o.value(QLatin1String(key));
    out->clear();
    if (v.isUndefined() || v.isNull()) return true;
    if (!v.isArray())
        return fieldError(error, QStringLiteral("\"%1\" is not an array").arg(QLatin1String(key)));
    const QJsonArray a = v.toArray();
    out->reserve(a.size());
    for (const QJsonValue &x : a) {
        // T's range as doubles: min is a power of two (or 0), exact; the bound above is 2^digits,
        // exclusive (double(max) of a 64-bit T rounds up to 2^63 or 2^64, which T cannot hold).
        const double d = x.toDouble(kNaN);
        if (!x.isDouble() || d != std::floor(d) || d < double(std::numeric_limits<T>::min()) ||
            d >= std::ldexp(1.0, std::numeric_limits<T>::digits))
            return fieldError(
                error,
                QStringLiteral("\"%1\" holds a value that is not a valid integer").arg(QLatin1String(key)));
        out->append(T(d));
    }
    return true;
}

bool readFloatList(const QJsonObject &o, const char *key, QList<float> *out, QString *error) {
    const QJsonValue v = o.value(QLatin1String(key));
    out->clear();
    if (v.isUndefined() || v.isNull()) return true;
    if (!v.isArray())
        return fieldError(error, QStringLiteral("\"%1\" is not an array").arg(QLatin1String(key)));
    for (const QJsonValue &x : v.toArray()) {
        // Stored as float32: a number beyond its range would become infinity, which JSON cannot
        // write back (an export would then not import).
        if (!x.isDouble() || std::fabs(x.toDouble()) > double(std::numeric_limits<float>::max()))
            return fieldError(error,
                              QStringLiteral("\"%1\" holds a value that is not a number in float range")
                                  .arg(QLatin1String(key)));
        out->append(float(x.toDouble()));
    }
    return true;
}

// "trace_margins": optional; null entries are margins not recorded (NaN). A margin is the k-th
// choice's score over the (k+1)-th's, so never negative, and float16 (the store's) must hold it.
bool readMargins(const QJsonObject &o, QList<float> *out, QString *error) {
    out->clear();
    const QJsonValue v = o.value(QStringLiteral("trace_margins"));
    if (v.isUndefined() || v.isNull()) return true;
    if (!v.isArray()) return fieldError(error, QStringLiteral("\"trace_margins\" is not an array"));
    for (const QJsonValue &x : v.toArray()) {
        if (x.isNull()) {
            out->append(std::numeric_limits<float>::quiet_NaN());
            continue;
        }
        if (!x.isDouble() || !(x.toDouble() >= 0.0 && x.toDouble() <= 65504.0))
            return fieldError(error, QStringLiteral("\"trace_margins\" holds a value that is not null or a "
                                                    "router margin in [0, 65504]"));
        out->append(float(x.toDouble()));
    }
    return true;
}

template <typename T>
QJsonArray intArray(const QList<T> &v) {
    QJsonArray a;
    for (T x : v) a.append(qint64(x));
    return a;
}

} // namespace

// ---- Profile JSON ------------------------------------------------------------------------------------

QJsonObject profileToJson(const MessageProfile &p) {
    QJsonObject o;
    if (p.ttftUs) o.insert(QStringLiteral("ttft_us"), *p.ttftUs);
    o.insert(QStringLiteral("duration_us"), p.durationUs);
    o.insert(QStringLiteral("token_times_us"), intArray(p.tokenTimesUs));
    o.insert(QStringLiteral("prompt_tokens"), p.nPromptTokens);
    o.insert(QStringLiteral("cached_prompt_tokens"), p.nCachedPromptTokens);
    o.insert(QStringLiteral("preemptions"), p.nPreemptions);
    o.insert(QStringLiteral("phases_ms"), QJsonObject{{QStringLiteral("attention"), p.phases.attentionMs},
                                                      {QStringLiteral("moe"), p.phases.moeMs},
                                                      {QStringLiteral("moe_shared"), p.phases.moeSharedMs},
                                                      {QStringLiteral("dense"), p.phases.denseMs},
                                                      {QStringLiteral("sampling"), p.phases.samplingMs},
                                                      {QStringLiteral("other"), p.phases.otherMs}});
    o.insert(QStringLiteral("n_steps"), p.nSteps);
    o.insert(QStringLiteral("n_steps_timed"), p.nStepsTimed);
    if (!p.timeline.isEmpty())
        o.insert(QStringLiteral("step_timeline"), QJsonDocument::fromJson(encodeStepTimeline(p.timeline)).object());
    o.insert(QStringLiteral("n_steps_missed"), p.nStepsMissed);
    o.insert(QStringLiteral("max_batch_seqs"), p.maxBatchSeqs);
    o.insert(QStringLiteral("memory_peak_bytes"), p.memoryPeakBytes);
    o.insert(QStringLiteral("kv_blocks_peak"), p.kvBlocksPeak);
    o.insert(QStringLiteral("n_layers"), p.nLayers);
    o.insert(QStringLiteral("n_experts"), p.nExperts);
    o.insert(QStringLiteral("n_shared_experts"), p.nSharedExperts);
    o.insert(QStringLiteral("k"), p.k);
    o.insert(QStringLiteral("moe_layers"), intArray(p.moeLayers));
    if (!p.tokenTextEnds.isEmpty()) o.insert(QStringLiteral("token_text_ends"), intArray(p.tokenTextEnds));
    o.insert(QStringLiteral("trace_ids"), intArray(p.traceIds));
    QJsonArray w;
    for (float x : p.traceWeights) w.append(double(x));
    o.insert(QStringLiteral("trace_weights"), w);
    if (!p.traceMargins.isEmpty()) {
        QJsonArray margins; // null where not recorded (JSON has no NaN)
        for (float x : p.traceMargins) margins.append(std::isnan(x) ? QJsonValue() : QJsonValue(double(x)));
        o.insert(QStringLiteral("trace_margins"), margins);
    }
    QJsonArray routing;
    for (const LayerRouting &r : p.routing)
        routing.append(QJsonObject{{QStringLiteral("layer"), r.layer},
                                   {QStringLiteral("expert_counts"), intArray(r.expertCounts)}});
    o.insert(QStringLiteral("routing"), routing);
    QJsonArray steps;
    for (const ProfileStep &s : p.steps)
        steps.append(QJsonObject{{QStringLiteral("t_start_us"), s.tStartUs},
                                 {QStringLiteral("duration_us"), s.durationUs},
                                 {QStringLiteral("n_seqs"), s.nSeqs},
                                 {QStringLiteral("n_prefill_tokens"), s.nPrefillTokens},
                                 {QStringLiteral("n_decode_tokens"), s.nDecodeTokens},
                                 {QStringLiteral("attention_us"), s.attentionUs},
                                 {QStringLiteral("moe_us"), s.moeUs},
                                 {QStringLiteral("dense_us"), s.denseUs},
                                 {QStringLiteral("sampling_us"), s.samplingUs}});
    o.insert(QStringLiteral("steps"), steps);
    QJsonArray memory;
    for (const ProfileMemorySample &m : p.memory)
        memory.append(QJsonObject{{QStringLiteral("t_us"), m.tUs},
                                  {QStringLiteral("in_use_bytes"), m.inUseBytes},
                                  {QStringLiteral("kv_blocks_used"), m.kvBlocksUsed}});
    o.insert(QStringLiteral("memory"), memory);
    return o;
}

std::optional<MessageProfile> profileFromJson(const QJsonObject &o, QString *error) {
    MessageProfile p;
    qint64 v = 0;
    if (o.contains(QStringLiteral("ttft_us"))) {
        if (!readInt(o, "ttft_us", &v, error)) return std::nullopt;
        p.ttftUs = v;
    }
    struct IntField {
        const char *key;
        qint64 *to64;
        int *to32;
    };
    const IntField ints[] = {{"duration_us", &p.durationUs, nullptr},
                             {"prompt_tokens", nullptr, &p.nPromptTokens},
                             {"cached_prompt_tokens", nullptr, &p.nCachedPromptTokens},
                             {"preemptions", nullptr, &p.nPreemptions},
                             {"n_steps", nullptr, &p.nSteps},
                             {"n_steps_missed", nullptr, &p.nStepsMissed},
                             {"max_batch_seqs", nullptr, &p.maxBatchSeqs},
                             {"memory_peak_bytes", &p.memoryPeakBytes, nullptr},
                             {"kv_blocks_peak", nullptr, &p.kvBlocksPeak},
                             {"n_layers", nullptr, &p.nLayers},
                             {"n_experts", nullptr, &p.nExperts},
                             {"n_shared_experts", nullptr, &p.nSharedExperts},
                             {"k", nullptr, &p.k}};
    for (const IntField &f : ints) {
        v = 0;
        if (!readInt(o, f.key, &v, error)) return std::nullopt;
        if (f.to64)
            *f.to64 = v;
        else if (fitsInt(v))
            *f.to32 = int(v);
        else {
            fieldError(error, QStringLiteral("\"%1\" is %2, beyond any count this profile can hold")
                                  .arg(QLatin1String(f.key))
                                  .arg(v));
            return std::nullopt;
        }
    }
    if (!readIntList(o, "token_times_us", &p.tokenTimesUs, error) ||
        !readIntList(o, "moe_layers", &p.moeLayers, error) ||
        !readIntList(o, "trace_ids", &p.traceIds, error) ||
        !readIntList(o, "token_text_ends", &p.tokenTextEnds, error) ||
        !readFloatList(o, "trace_weights", &p.traceWeights, error))
        return std::nullopt;
    if (p.traceIds.size() != p.traceWeights.size()) {
        fieldError(error, QStringLiteral("\"trace_ids\" and \"trace_weights\" differ in length"));
        return std::nullopt;
    }
    // Router weights after renormalizing: in [0, 1] (the store keeps them as float16, which could
    // not hold much more).
    for (float w : p.traceWeights)
        if (!(w >= 0.0f && w <= 1.0f)) {
            fieldError(error,
                       QStringLiteral("\"trace_weights\" holds %1, not a router weight in [0, 1]").arg(w));
            return std::nullopt;
        }
    if (!readMargins(o, &p.traceMargins, error)) return std::nullopt;
    const QJsonObject ph = o.value(QStringLiteral("phases_ms")).toObject();
    p.phases = {ph.value(QStringLiteral("attention")).toDouble(), ph.value(QStringLiteral("moe")).toDouble(),
                ph.value(QStringLiteral("dense")).toDouble(), ph.value(QStringLiteral("sampling")).toDouble(),
                ph.value(QStringLiteral("other")).toDouble(), ph.value(QStringLiteral("moe_shared")).toDouble()};
    p.nStepsTimed = o.value(QStringLiteral("n_steps_timed")).toInt(-1);
    if (p.nStepsTimed < -1 || p.nStepsTimed > p.nSteps) {
        fieldError(error, QStringLiteral("\"n_steps_timed\" is %1, not -1 or a count of the %2 steps")
                              .arg(p.nStepsTimed)
                              .arg(p.nSteps));
        return std::nullopt;
    }
    if (o.contains(QStringLiteral("step_timeline"))) {
        const auto tl = decodeStepTimeline(
            QJsonDocument(o.value(QStringLiteral("step_timeline")).toObject()).toJson(QJsonDocument::Compact));
        if (!tl || !o.value(QStringLiteral("step_timeline")).isObject()) {
            fieldError(error, QStringLiteral("\"step_timeline\" is not a step timeline (version 1)"));
            return std::nullopt;
        }
        p.timeline = *tl;
    }
    QSet<qint64> layers;
    for (const QJsonValue &x : o.value(QStringLiteral("routing")).toArray()) {
        const QJsonObject r = x.toObject();
        LayerRouting lr;
        qint64 layer = 0;
        if (!readInt(r, "layer", &layer, error, true) ||
            !readIntList(r, "expert_counts", &lr.expertCounts, error))
            return std::nullopt;
        if (layer < 0 || layer > std::numeric_limits<int>::max()) {
            fieldError(error, QStringLiteral("\"routing\" has layer %1, not a layer index").arg(layer));
            return std::nullopt;
        }
        if (layers.contains(layer)) {
            fieldError(error, QStringLiteral("\"routing\" lists layer %1 twice").arg(layer));
            return std::nullopt;
        }
        layers.insert(layer);
        lr.layer = int(layer);
        p.routing.append(lr);
    }
    for (const QJsonValue &x : o.value(QStringLiteral("steps")).toArray()) {
        const QJsonObject s = x.toObject();
        qint64 f[9] = {};
        const char *keys[9] = {"t_start_us",       "duration_us",     "n_seqs",
                               "n_prefill_tokens", "n_decode_tokens", "attention_us",
                               "moe_us",           "dense_us",        "sampling_us"};
        for (int i = 0; i < 9; ++i)
            if (!readInt(s, keys[i], &f[i], error)) return std::nullopt;
        for (int i = 2; i < 5; ++i)
            if (!fitsInt(f[i])) {
                fieldError(error,
                           QStringLiteral("a step's \"%1\" is %2, beyond any count this profile can hold")
                               .arg(QLatin1String(keys[i]))
                               .arg(f[i]));
                return std::nullopt;
            }
        p.steps.append({f[0], f[1], int(f[2]), int(f[3]), int(f[4]), f[5], f[6], f[7], f[8]});
    }
    for (const QJsonValue &x : o.value(QStringLiteral("memory")).toArray()) {
        const QJsonObject m = x.toObject();
        qint64 t = 0, b = 0, k = 0;
        if (!readInt(m, "t_us", &t, error) || !readInt(m, "in_use_bytes", &b, error) ||
            !readInt(m, "kv_blocks_used", &k, error))
            return std::nullopt;
        if (!fitsInt(k)) {
            fieldError(error,
                       QStringLiteral("a memory sample's \"kv_blocks_used\" is %1, beyond any count this "
                                      "profile can hold")
                           .arg(k));
            return std::nullopt;
        }
        p.memory.append({t, b, int(k)});
    }
    // The counts and the arrays must agree before anything is sized by them (storage_types.h).
    if (const std::optional<QString> shape = profileShapeError(p)) {
        fieldError(error, *shape);
        return std::nullopt;
    }
    return p;
}

QJsonObject metricsToJson(const MessageMetrics &m) {
    QJsonObject o;
    if (m.ttftMs) o.insert(QStringLiteral("ttft_ms"), *m.ttftMs);
    if (m.nPromptTokens) o.insert(QStringLiteral("prompt_tokens"), *m.nPromptTokens);
    if (m.nOutputTokens) o.insert(QStringLiteral("output_tokens"), *m.nOutputTokens);
    if (m.prefillTokS) o.insert(QStringLiteral("prefill_tok_s"), *m.prefillTokS);
    if (m.decodeTokS) o.insert(QStringLiteral("decode_tok_s"), *m.decodeTokS);
    QJsonArray itl, times;
    for (float x : m.itlMs) itl.append(double(x));
    for (float x : m.tokenTimesMs) times.append(double(x));
    o.insert(QStringLiteral("itl_ms"), itl);
    o.insert(QStringLiteral("token_times_ms"), times);
    o.insert(QStringLiteral("stop_reason"), m.stopReason);
    if (m.peakMemoryBytes) o.insert(QStringLiteral("peak_memory_bytes"), *m.peakMemoryBytes);
    return o;
}

std::optional<MessageMetrics> metricsFromJson(const QJsonObject &o, QString *error) {
    MessageMetrics m;
    auto real = [&](const char *key, std::optional<double> *to) {
        const QJsonValue v = o.value(QLatin1String(key));
        if (v.isUndefined() || v.isNull()) return true;
        if (!v.isDouble())
            return fieldError(error, QStringLiteral("\"%1\" is not a number").arg(QLatin1String(key)));
        *to = v.toDouble();
        return true;
    };
    qint64 v = 0;
    if (o.contains(QStringLiteral("prompt_tokens"))) {
        if (!readInt(o, "prompt_tokens", &v, error)) return std::nullopt;
        m.nPromptTokens = int(v);
    }
    if (o.contains(QStringLiteral("output_tokens"))) {
        if (!readInt(o, "output_tokens", &v, error)) return std::nullopt;
        m.nOutputTokens = int(v);
    }
    if (o.contains(QStringLiteral("peak_memory_bytes"))) {
        if (!readInt(o, "peak_memory_bytes", &v, error)) return std::nullopt;
        m.peakMemoryBytes = v;
    }
    if (!real("ttft_ms", &m.ttftMs) || !real("prefill_tok_s", &m.prefillTokS) ||
        !real("decode_tok_s", &m.decodeTokS) || !readFloatList(o, "itl_ms", &m.itlMs, error) ||
        !readFloatList(o, "token_times_ms", &m.tokenTimesMs, error))
        return std::nullopt;
    m.stopReason = o.value(QStringLiteral("stop_reason")).toString();
    return m;
}

// ---- Builders ----------------------------------------------------------------------------------------

std::optional<Report> messageReport(const ChatStore &store, qint64 messageId, QString *error) {
    const std::optional<Message> m = store.message(messageId);
    if (!m) {
        *error = QStringLiteral("There is no message %1 in %2").arg(messageId).arg(store.path());
        return std::nullopt;
    }
    std::optional<ReportRequest> q = storedRequest(store, *m);
    if (!q) {
        *error = m->role == MessageRole::Assistant
                     ? QStringLiteral("Message %1 has no stored measurements (no profile, no metrics)")
                           .arg(messageId)
                     : QStringLiteral("Message %1 is a %2 message; reports are made of assistant replies")
                           .arg(messageId)
                           .arg(messageRoleName(m->role));
        return std::nullopt;
    }
    Report r;
    r.kind = QStringLiteral("message");
    const std::optional<Conversation> c = store.conversation(m->conversationId);
    r.title = QStringLiteral("Message %1 — %2").arg(messageId).arg(c ? c->title : QString());
    r.generatedAt = QDateTime::currentDateTimeUtc();
    r.provenance = appProvenance();
    setGeneration(r.provenance, m->generation);
    r.provenance.source = QStringLiteral("message %1 of conversation %2 in %3")
                              .arg(messageId)
                              .arg(m->conversationId)
                              .arg(store.path());
    setExcerpt(r, store.pathTo(messageId));
    r.requests.append(*q);
    return r;
}

std::optional<Report> conversationReport(const ChatStore &store, qint64 conversationId, QString *error,
                                         const ProgressFn &progress) {
    const std::optional<Conversation> c = store.conversation(conversationId);
    if (!c) {
        *error = QStringLiteral("There is no conversation %1 in %2").arg(conversationId).arg(store.path());
        return std::nullopt;
    }
    Report r;
    r.kind = QStringLiteral("conversation");
    r.title = c->title;
    r.generatedAt = QDateTime::currentDateTimeUtc();
    r.provenance = appProvenance();
    r.provenance.source =
        QStringLiteral("conversation %1 (active branch) in %2").arg(conversationId).arg(store.path());
    const QList<Message> path = store.activePath(conversationId);
    setExcerpt(r, path);
    QDateTime first;
    for (qsizetype i = 0; i < path.size(); ++i) {
        if (progress && !progress(i, path.size())) {
            *error = QStringLiteral("Cancelled");
            return std::nullopt;
        }
        const Message &m = path.at(i);
        std::optional<ReportRequest> q = storedRequest(store, m);
        if (!q) continue;
        if (!first.isValid()) first = m.createdAt;
        q->offsetUs = first.msecsTo(m.createdAt) * 1000;
        setGeneration(r.provenance, m.generation); // the last reply's
        r.requests.append(*q);
    }
    if (r.requests.isEmpty()) {
        *error = QStringLiteral("Conversation %1 has no measured replies on its active branch")
                     .arg(conversationId);
        return std::nullopt;
    }
    return r;
}

std::optional<Report> benchReport(const QJsonObject &j, const QString &source, QString *error) {
    const QJsonValue results = j.value(QStringLiteral("results"));
    if (!results.isArray() || !j.value(QStringLiteral("backend")).isString()) {
        *error =
            QStringLiteral("%1 is not the JSON of `expertscope-cli bench --json` (no \"results\" array or "
                           "\"backend\")")
                .arg(source);
        return std::nullopt;
    }
    const int version = j.value(QStringLiteral("format_version")).toInt(1);
    if (version > 2) {
        *error = QStringLiteral("%1 has bench format version %2; this build reads up to 2")
                     .arg(source)
                     .arg(version);
        return std::nullopt;
    }
    Report r;
    r.kind = QStringLiteral("bench");
    r.generatedAt = QDateTime::currentDateTimeUtc();
    Provenance &p = r.provenance;
    p = appProvenance();
    p.runVersion = j.value(QStringLiteral("version")).toString();
    p.runCommit = j.value(QStringLiteral("commit")).toString();
    p.backend = j.value(QStringLiteral("backend")).toString();
    p.device = j.value(QStringLiteral("device")).toString();
    p.driver = j.value(QStringLiteral("driver")).toString();
    p.modelName = j.value(QStringLiteral("model_name")).toString(j.value(QStringLiteral("model")).toString());
    p.modelHash = j.value(QStringLiteral("model_hash")).toString();
    p.precision = j.value(QStringLiteral("precision")).toString();
    p.sampling = QJsonObject{{QStringLiteral("temperature"), 0}}; // bench feeds fixed token ids, no sampling
    if (j.value(QStringLiteral("seed")).isDouble()) p.seed = seedFromJson(j.value(QStringLiteral("seed")));
    p.source = source;
    r.title = QStringLiteral("Benchmark: %1 on %2").arg(p.modelName, p.backend);
    for (const QJsonValue &v : results.toArray()) {
        const QJsonObject o = v.toObject();
        BenchRow row;
        row.test = o.value(QStringLiteral("test")).toString();
        row.tokensPerSecond = o.value(QStringLiteral("tokens_per_s")).toDouble();
        row.seconds = o.value(QStringLiteral("seconds")).toDouble();
        if (o.contains(QStringLiteral("roofline_tokens_per_s")))
            row.rooflineTokensPerSecond = o.value(QStringLiteral("roofline_tokens_per_s")).toDouble();
        if (o.contains(QStringLiteral("mbu"))) row.mbu = o.value(QStringLiteral("mbu")).toDouble();
        if (row.test.isEmpty()) {
            *error = QStringLiteral("%1: a result has no \"test\" name").arg(source);
            return std::nullopt;
        }
        r.bench.append(row);
    }
    for (const char *key : {"threads", "weights_bytes", "read_bandwidth_bytes_per_s",
                            "decode_bytes_per_token", "vram_used_bytes", "host_cpu", "model"})
        if (j.contains(QLatin1String(key)))
            r.benchMachine.insert(QLatin1String(key), j.value(QLatin1String(key)));
    if (j.value(QStringLiteral("request")).isObject()) {
        QString why;
        const QJsonObject ro = j.value(QStringLiteral("request")).toObject();
        std::optional<MessageProfile> prof = profileFromJson(ro, &why);
        if (!prof) {
            *error = QStringLiteral("%1: the instrumented request is malformed: %2").arg(source, why);
            return std::nullopt;
        }
        if (prof->nSteps == 0) prof->nSteps = int(prof->steps.size());
        if (prof->maxBatchSeqs == 0 && !prof->steps.isEmpty()) prof->maxBatchSeqs = 1;
        if (prof->phases.totalMs() == 0) {
            for (const ProfileStep &s : prof->steps) {
                prof->phases.attentionMs += s.attentionUs / 1000.0;
                prof->phases.moeMs += s.moeUs / 1000.0;
                prof->phases.denseMs += s.denseUs / 1000.0;
                prof->phases.samplingMs += s.samplingUs / 1000.0;
                prof->phases.otherMs +=
                    std::max<qint64>(0, s.durationUs - s.attentionUs - s.moeUs - s.denseUs - s.samplingUs) /
                    1000.0;
            }
        }
        if (prof->memoryPeakBytes == 0)
            for (const ProfileMemorySample &m : prof->memory)
                prof->memoryPeakBytes = std::max(prof->memoryPeakBytes, m.inUseBytes);
        ReportRequest q;
        q.label = ro.value(QStringLiteral("label")).toString(QStringLiteral("request"));
        q.profile = *prof;
        r.requests.append(q);
    }
    return r;
}

std::optional<Report> benchRunReport(const ChatStore &store, qint64 benchRunId, QString *error) {
    for (const BenchRun &b : store.benchRuns())
        if (b.id == benchRunId)
            return benchReport(b.json, QStringLiteral("bench run %1 in %2").arg(benchRunId).arg(store.path()),
                               error);
    *error = QStringLiteral("There is no bench run %1 in %2").arg(benchRunId).arg(store.path());
    return std::nullopt;
}

// ---- Summary -------------------------------------------------------------------------------------

ReportSummary summarize(const Report &r) {
    ReportSummary s;
    s.nRequests = int(r.requests.size());
    QList<double> ttft, itl;
    double decodeTokens = 0, decodeSeconds = 0;
    RoutingMatrix routing;
    for (const ReportRequest &q : r.requests) {
        const MessageProfile &p = q.profile;
        if (p.ttftUs) ttft.append(*p.ttftUs / 1000.0);
        itl.append(interTokenLatenciesMs(p.tokenTimesUs));
        if (p.tokenTimesUs.size() >= 2) {
            decodeTokens += double(p.tokenTimesUs.size() - 1);
            decodeSeconds += (p.tokenTimesUs.last() - p.tokenTimesUs.first()) / 1e6;
        }
        s.nOutputTokens += int(p.tokenTimesUs.size());
        s.nPromptTokens += p.nPromptTokens;
        s.nCachedPromptTokens += p.nCachedPromptTokens;
        s.nSteps += p.nSteps;
        s.nStepsTimed += p.nStepsTimed < 0 ? p.nSteps : p.nStepsTimed;
        s.peakMemoryBytes = std::max(s.peakMemoryBytes, p.memoryPeakBytes);
        accumulate(s.phases, p.phases);
        routing.add(RoutingMatrix::fromLayerRouting(p.routing, p.nExperts));
    }
    const Percentiles t = percentiles(ttft), i = percentiles(itl);
    s.ttftP50Ms = t.p50, s.ttftP90Ms = t.p90, s.ttftP99Ms = t.p99;
    s.nItl = i.n;
    s.itlP50Ms = i.p50, s.itlP90Ms = i.p90, s.itlP99Ms = i.p99;
    s.decodeTokS = decodeSeconds > 0 ? decodeTokens / decodeSeconds : kNaN;
    s.prefixCacheHitRate = s.nPromptTokens > 0 ? double(s.nCachedPromptTokens) / s.nPromptTokens : kNaN;
    for (int row = 0; row < routing.rows(); ++row) {
        const LayerBalance b = layerBalance(routing.row(row));
        s.layers.append({routing.layers.at(row), b.total, b.imbalance, b.entropy, b.deadExperts});
    }
    return s;
}

QList<std::pair<QString, QString>> metricDefinitions() {
    return {
        {QStringLiteral("TTFT"), QStringLiteral("Time to first token: from the request's submission to the "
                                                "engine until its first generated token.")},
        {QStringLiteral("ITL"),
         QStringLiteral(
             "Inter-token latency: the gap between two consecutive generated tokens of one request. "
             "Percentiles interpolate linearly between closest ranks (numpy's default).")},
        {QStringLiteral("Decode tok/s"),
         QStringLiteral(
             "(generated tokens − 1) / (time of the last token − time of the first), summed over requests.")},
        {QStringLiteral("Prefix-cache hit rate"),
         QStringLiteral("Prompt tokens served from cached KV blocks / prompt tokens.")},
        {QStringLiteral("Peak memory"),
         QStringLiteral("Largest weights + KV blocks in use + workspace in use seen while the request ran.")},
        {QStringLiteral("Expert share"),
         QStringLiteral("c / Σc: a layer's token slots routed to one expert over all its slots (shared "
                        "experts are not counted).")},
        {QStringLiteral("Imbalance"),
         QStringLiteral(
             "max(c) / mean(c) per MoE layer: 1 is perfectly even, E means one expert took every token.")},
        {QStringLiteral("Entropy"),
         QStringLiteral("H(share) / ln E per layer (natural log): 1 is uniform routing.")},
        {QStringLiteral("Dead experts"), QStringLiteral("Experts of a layer that received no token.")},
        {QStringLiteral("Phases"),
         QStringLiteral("Engine time of the steps that ran during the request: attention (norms, q/k/v, "
                        "RoPE, KV write, attention, output projection), MoE (router, routed and shared "
                        "experts), dense (dense MLPs and the LM head), sampling, other (scheduling, "
                        "embedding, emitting text). A step shared with concurrent requests counts in proportion to "
                        "the request's tokens in it.")},
    };
}

} // namespace es::report
