// ReplyWriter (see reply_writer.h).
#include "reply_writer.h"

#include "chat_store.h"

namespace es {

ReplyWriter::ReplyWriter(ChatStore *store, qint64 replyId, QObject *parent)
    : ReplyWriter(store, replyId, QString(), parent) {}

ReplyWriter::ReplyWriter(ChatStore *store, qint64 replyId, const QString &savedText, QObject *parent)
    : QObject(parent), m_store(store), m_replyId(replyId), m_text(savedText), m_savedLength(savedText.size()) {
    m_timer.setSingleShot(true);
    m_timer.setTimerType(Qt::PreciseTimer); // a coarse timer may fire 5% late
    connect(&m_timer, &QTimer::timeout, this, &ReplyWriter::checkpoint);
}

void ReplyWriter::append(const QString &delta) {
    if (m_ended || delta.isEmpty()) return;
    m_text += delta;
    if (!m_unsavedSince.isValid()) {
        m_unsavedSince.start();
        m_timer.start(kCheckpointInterval);
    } else if (m_unsavedSince.elapsed() >= kCheckpointInterval.count()) {
        checkpoint();
    }
}

void ReplyWriter::checkpoint() {
    m_timer.stop();
    if (m_ended || !m_store || m_text.size() == m_savedLength) {
        m_unsavedSince.invalidate();
        return;
    }
    QElapsedTimer took;
    took.start();
    const bool saved = m_store->updatePartialReply(m_replyId, m_text);
    const qint64 ns = took.nsecsElapsed();
    if (!saved) {
        // Tried again one interval later (a full disk may have room again by then).
        m_unsavedSince.start();
        m_timer.start(kCheckpointInterval);
        if (!m_failureReported) {
            m_failureReported = true;
            emit checkpointFailed(m_store->lastError());
        }
        return;
    }
    ++m_stats.saves;
    m_stats.saveNs += ns;
    m_stats.maxSaveNs = std::max(m_stats.maxSaveNs, ns);
    m_savedLength = m_text.size();
    m_unsavedSince.invalidate();
    emit checkpointSaved(m_savedLength);
}

// Stops the saves; false when there is nothing to end (already ended, or the store is gone).
bool ReplyWriter::end() {
    m_timer.stop();
    m_unsavedSince.invalidate();
    if (m_ended || !m_store) return false;
    m_ended = true;
    return true;
}

bool ReplyWriter::finish(const QString &reason, const MessageMetrics &metrics,
                         const QList<LayerRouting> &routing, const std::optional<MessageProfile> &profile) {
    if (!end()) return false;
    return profile ? m_store->finishReply(m_replyId, m_text, reason, metrics, routing, *profile)
                   : m_store->finishReply(m_replyId, m_text, reason, metrics, routing);
}

bool ReplyWriter::fail(const QString &reason) {
    if (!end()) return false;
    return m_store->failReply(m_replyId, m_text, reason);
}

bool ReplyWriter::fail(const QString &reason, const MessageMetrics &metrics, const MessageProfile &profile) {
    if (!end()) return false;
    return m_store->failReply(m_replyId, m_text, reason, metrics, profile);
}

bool ReplyWriter::cancel() {
    if (!end()) return false;
    return m_store->finishReply(m_replyId, m_text, QStringLiteral("cancelled"));
}

} // namespace es
