// ReplyWriter: keeps one streaming reply's text in the store while it grows, and ends it. The chat
// pane hands it each piece of text as it arrives; it saves the whole text so far through
// ChatStore::updatePartialReply so that no piece stays only in memory for longer than
// kCheckpointInterval, and finish / fail / cancel write the final state in one transaction.
// Invariants: the stored text is always a prefix of text() made of whole appended pieces; once
// the reply has ended nothing more is written; a failed save is retried one interval later and
// reported once (checkpointFailed). It never ends a reply by itself: its owner decides how.
// Lives on the store's thread and needs that thread's event loop (the save timer).
#pragma once

#include "storage_types.h"

#include <QElapsedTimer>
#include <QObject>
#include <QPointer>
#include <QTimer>

#include <chrono>
#include <optional>

namespace es {

class ChatStore;

class ReplyWriter : public QObject {
    Q_OBJECT
public:
    // The longest a received piece of text stays unsaved, i.e. the most a killed app loses: less
    // than a reader notices, ~500 tokens at 2,000 tok/s. In WAL mode with synchronous=NORMAL a
    // save is one UPDATE of the row and no fsync, so four a second are cheap: at 2,000 tok/s they
    // take 0.3% of the GUI thread over a 5 s reply and 1.5% over a 30 s one (386 KiB; the whole
    // text is rewritten each time) — docs/benchmarks.md, "Saving a streaming reply".
    static constexpr std::chrono::milliseconds kCheckpointInterval{250};

    // Time spent saving, for the benchmark (a save is one committed checkpoint).
    struct Stats {
        int saves = 0;
        qint64 saveNs = 0;
        qint64 maxSaveNs = 0;
    };

    // replyId: a message in state 'partial' (ChatStore::beginTurn or regenerate, or a reply
    // reopened to continue it: then `savedText` is its stored text, which appends extend).
    ReplyWriter(ChatStore *store, qint64 replyId, QObject *parent = nullptr);
    ReplyWriter(ChatStore *store, qint64 replyId, const QString &savedText, QObject *parent = nullptr);

    qint64 replyId() const { return m_replyId; }
    const QString &text() const { return m_text; }
    qsizetype savedLength() const { return m_savedLength; } // characters of text() committed
    bool hasEnded() const { return m_ended; }
    Stats stats() const { return m_stats; }

    // Adds a piece of the reply. The first unsaved piece starts the interval; the save comes when
    // it ends (timer), or at once from here when the timer is late (a busy event loop).
    void append(const QString &delta);
    // Each ends the reply in one transaction; false (ChatStore::lastError) when that failed, and
    // the row is then left partial, for the next open to recover as interrupted.
    // complete: text, finish reason, metrics, routing and the profile when there is one.
    bool finish(const QString &reason, const MessageMetrics &metrics, const QList<LayerRouting> &routing,
                const std::optional<MessageProfile> &profile = std::nullopt);
    // failed, keeping the text; the second form also keeps what was measured until the failure.
    bool fail(const QString &reason);
    bool fail(const QString &reason, const MessageMetrics &metrics, const MessageProfile &profile);
    // stopped by the user or by closing: complete with finish reason "cancelled".
    bool cancel();

signals:
    void checkpointSaved(qsizetype savedLength);
    void checkpointFailed(const QString &error); // the first failed save of this reply

private:
    void checkpoint();
    bool end();

    QPointer<ChatStore> m_store;
    qint64 m_replyId = 0;
    QString m_text;
    qsizetype m_savedLength = 0;
    QElapsedTimer m_unsavedSince; // invalid while everything is saved
    QTimer m_timer;
    bool m_ended = false;
    bool m_failureReported = false;
    Stats m_stats;
};

} // namespace es
