// ProfileRepository: reads and writes message_metrics, message_routing and message_profiles.
// BLOB columns use the encodings of storage_types.h (formats in message_profile_codec.cpp).
#include "profile_repository.h"

#include "store_connection.h"
#include "store_sql.h"

#include <QSqlError>

namespace es {

namespace {
const QLatin1String
    kProfileColumns("ttft_us, duration_us, token_times, n_prompt_tokens, n_cached_prompt_tokens, "
                    "n_preemptions, attention_ms, moe_ms, dense_ms, sampling_ms, other_ms, n_steps, "
                    "n_steps_missed, max_batch_seqs, memory_peak_bytes, kv_blocks_peak, n_layers, "
                    "n_experts, n_shared_experts, top_k, moe_layers, routing_trace, steps, "
                    "memory_samples, moe_shared_ms, n_steps_timed, step_timeline");

QByteArray encodeLayers(const QList<int> &layers) {
    if (layers.isEmpty()) return QByteArray(""); // a zero-length BLOB, not NULL (dense models)
    QList<quint32> v;
    for (int l : layers) v.append(quint32(l));
    return encodeUInt32(v);
}
} // namespace

// ---- Metrics and routing --------------------------------------------------------------------------

std::optional<MessageMetrics> ProfileRepository::metrics(qint64 messageId) const {
    if (!m_connection.checkThread()) return std::nullopt;
    QSqlQuery q(m_connection.db());
    if (!run(q,
             QStringLiteral(
                 "SELECT ttft_ms, n_prompt_tokens, n_output_tokens, prefill_tok_s, decode_tok_s, itl_ms, "
                 "token_times_ms, stop_reason, peak_memory_bytes FROM message_metrics WHERE message_id = ?"),
             {messageId})) {
        m_connection.fail(tr("Could not read the metrics of message %1").arg(messageId),
                          q.lastError().text());
        return std::nullopt;
    }
    if (!q.next()) return std::nullopt;
    MessageMetrics mm;
    mm.ttftMs = optionalValue<double>(q.value(0));
    mm.nPromptTokens = optionalValue<int>(q.value(1));
    mm.nOutputTokens = optionalValue<int>(q.value(2));
    mm.prefillTokS = optionalValue<double>(q.value(3));
    mm.decodeTokS = optionalValue<double>(q.value(4));
    mm.itlMs = decodeFloat32(q.value(5).toByteArray());
    mm.tokenTimesMs = decodeFloat32(q.value(6).toByteArray());
    mm.stopReason = q.value(7).toString();
    mm.peakMemoryBytes = optionalValue<qint64>(q.value(8));
    return mm;
}

QList<LayerRouting> ProfileRepository::routing(qint64 messageId) const {
    QList<LayerRouting> out;
    if (!m_connection.checkThread()) return out;
    QSqlQuery q(m_connection.db());
    if (!run(q,
             QStringLiteral(
                 "SELECT layer, expert_counts FROM message_routing WHERE message_id = ? ORDER BY layer"),
             {messageId})) {
        m_connection.fail(tr("Could not read the routing of message %1").arg(messageId),
                          q.lastError().text());
        return out;
    }
    while (q.next()) out.append({q.value(0).toInt(), decodeUInt32(q.value(1).toByteArray())});
    return out;
}

// ---- Profiles (schema v4) ---------------------------------------------------------------------------

bool ProfileRepository::writeProfile(qint64 messageId, const MessageProfile &p, bool writeRouting) {
    QSqlQuery q(m_connection.db());
    const QByteArray trace = encodeRoutingTrace(p.traceIds, p.traceWeights, p.nExperts, p.traceMargins);
    if (!run(q,
             QStringLiteral(
                 "INSERT OR REPLACE INTO message_profiles (message_id, %1) "
                 "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
                 .arg(kProfileColumns),
             {messageId,
              nullable(p.ttftUs),
              p.durationUs,
              encodeTokenTimes(p.tokenTimesUs, p.tokenTextEnds),
              p.nPromptTokens,
              p.nCachedPromptTokens,
              p.nPreemptions,
              p.phases.attentionMs,
              p.phases.moeMs,
              p.phases.denseMs,
              p.phases.samplingMs,
              p.phases.otherMs,
              p.nSteps,
              p.nStepsMissed,
              p.maxBatchSeqs,
              p.memoryPeakBytes,
              p.kvBlocksPeak,
              p.nLayers,
              p.nExperts,
              p.nSharedExperts,
              p.k,
              encodeLayers(p.moeLayers),
              trace.isEmpty() ? QVariant(QMetaType(QMetaType::QByteArray)) : QVariant(trace),
              encodeProfileSteps(p.steps),
              encodeMemorySamples(p.memory),
              p.phases.moeSharedMs,
              p.nStepsTimed,
              p.timeline.isEmpty() ? QVariant(QMetaType(QMetaType::QByteArray)) : QVariant(encodeStepTimeline(p.timeline))}))
        return m_connection.fail(tr("Could not save the profile of message %1").arg(messageId),
                                 q.lastError().text());
    if (!writeRouting) return true;
    if (!run(q, QStringLiteral("DELETE FROM message_routing WHERE message_id = ?"), {messageId}))
        return m_connection.fail(tr("Could not save the routing of message %1").arg(messageId),
                                 q.lastError().text());
    for (const LayerRouting &r : p.routing)
        if (!run(q,
                 QStringLiteral(
                     "INSERT INTO message_routing (message_id, layer, expert_counts) VALUES (?, ?, ?)"),
                 {messageId, r.layer, encodeUInt32(r.expertCounts)}))
            return m_connection.fail(tr("Could not save the routing of message %1").arg(messageId),
                                     q.lastError().text());
    return true;
}

bool ProfileRepository::saveProfile(qint64 messageId, const MessageProfile &profile) {
    if (!m_connection.checkThread()) return false;
    std::optional<qint64> conversationId;
    {
        StoreTransaction t(m_connection);
        if (!t.ok()) return false;
        conversationId = conversationOf(m_connection, messageId);
        if (!conversationId) return false;
        if (!writeProfile(messageId, profile, true)) return false;
        if (!t.commit()) return false;
    }
    m_connection.notifyMessagesChanged(*conversationId);
    return true;
}

std::optional<MessageProfile> ProfileRepository::profile(qint64 messageId) const {
    if (!m_connection.checkThread()) return std::nullopt;
    QSqlQuery q(m_connection.db());
    if (!run(q, QStringLiteral("SELECT %1 FROM message_profiles WHERE message_id = ?").arg(kProfileColumns),
             {messageId})) {
        m_connection.fail(tr("Could not read the profile of message %1").arg(messageId),
                          q.lastError().text());
        return std::nullopt;
    }
    if (!q.next()) return std::nullopt;
    MessageProfile p;
    p.ttftUs = optionalValue<qint64>(q.value(0));
    p.durationUs = q.value(1).toLongLong();
    const std::optional<QList<qint64>> times = decodeTokenTimes(q.value(2).toByteArray(), &p.tokenTextEnds);
    p.nPromptTokens = q.value(3).toInt();
    p.nCachedPromptTokens = q.value(4).toInt();
    p.nPreemptions = q.value(5).toInt();
    p.phases = {q.value(6).toDouble(), q.value(7).toDouble(), q.value(8).toDouble(), q.value(9).toDouble(),
                q.value(10).toDouble()};
    p.nSteps = q.value(11).toInt();
    p.nStepsMissed = q.value(12).toInt();
    p.maxBatchSeqs = q.value(13).toInt();
    p.memoryPeakBytes = q.value(14).toLongLong();
    p.kvBlocksPeak = q.value(15).toInt();
    p.nLayers = q.value(16).toInt();
    p.nExperts = q.value(17).toInt();
    p.nSharedExperts = q.value(18).toInt();
    p.k = q.value(19).toInt();
    for (quint32 l : decodeUInt32(q.value(20).toByteArray())) p.moeLayers.append(int(l));
    const bool traceOk = decodeRoutingTrace(q.value(21).toByteArray(), &p.traceIds, &p.traceWeights, &p.traceMargins);
    const auto steps = decodeProfileSteps(q.value(22).toByteArray());
    const auto memory = decodeMemorySamples(q.value(23).toByteArray());
    p.phases.moeSharedMs = q.value(24).toDouble();
    p.nStepsTimed = q.value(25).toInt();
    const auto timeline = decodeStepTimeline(q.value(26).toByteArray());
    if (!times || !traceOk || !steps || !memory || !timeline) {
        m_connection.fail(tr("The stored profile of message %1 is damaged").arg(messageId), {});
        return std::nullopt;
    }
    p.tokenTimesUs = *times;
    p.steps = *steps;
    p.memory = *memory;
    p.timeline = *timeline;
    p.routing = routing(messageId);
    return p;
}

} // namespace es
