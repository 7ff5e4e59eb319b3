// A chat turn's writes: beginTurn / beginTurnInNewConversation / beginEditedTurn put the user's
// message and the partial reply in one transaction (a failure of either leaves neither), and
// ReplyWriter saves a streaming reply's text within kCheckpointInterval — by its timer, or from
// append() when the timer is late — then writes the final state and nothing after it; a failed
// save is reported once and retried. The kill -9 test of the same path is test_reply_crash.cpp.
#include "chat_store.h"
#include "chat_store_test_support.h"
#include "reply_writer.h"

#include <QSignalSpy>
#include <QTemporaryDir>
#include <QThread>
#include <QtTest>

using namespace es;
using namespace es_test;

namespace {

// A reply row that nothing can be added under: the second insert of a turn fails.
const QString kRefuseReplies =
    QStringLiteral("CREATE TRIGGER refuse_replies BEFORE INSERT ON messages WHEN new.role = 'assistant' "
                   "BEGIN SELECT RAISE(ABORT, 'no room for the reply'); END");
// A partial reply whose text cannot be updated (as on a full disk).
const QString kRefuseCheckpoints =
    QStringLiteral("CREATE TRIGGER refuse_checkpoints BEFORE UPDATE OF content ON messages "
                   "WHEN old.state = 'partial' AND new.state = 'partial' "
                   "BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END");

QString contentOf(ChatStore &store, qint64 id) { return store.message(id)->content; }

} // namespace

class TestReplyWriter : public QObject {
    Q_OBJECT

private:
    QTemporaryDir m_dir;
    int m_files = 0;
    QString freshPath() { return m_dir.filePath(QStringLiteral("turns-%1.sqlite").arg(++m_files)); }

private slots:
    void initTestCase() { QVERIFY(m_dir.isValid()); }

    // ---- Turns ----------------------------------------------------------------------------------------

    void beginTurnWritesBothRows() {
        auto s = memoryStore();
        const qint64 c = *s->createConversation(QStringLiteral("turns"));
        QSignalSpy messages(s.get(), &ChatStore::messagesChanged);
        const std::optional<TurnIds> t =
            s->beginTurn(c, std::nullopt, QStringLiteral("第一个问题"), sampleGeneration());
        QVERIFY2(t, qPrintable(s->lastError()));
        QCOMPARE(t->conversationId, c);
        QCOMPARE(messages.count(), 1); // one commit, one notification
        const Message user = *s->message(t->userMessageId);
        QCOMPARE(user.role, MessageRole::User);
        QCOMPARE(user.state, MessageState::Complete);
        QCOMPARE(user.content, QStringLiteral("第一个问题"));
        QVERIFY(!user.parentId);
        const Message reply = *s->message(t->replyId);
        QCOMPARE(reply.role, MessageRole::Assistant);
        QCOMPARE(reply.state, MessageState::Partial);
        QCOMPARE(reply.parentId, std::optional<qint64>(t->userMessageId));
        QCOMPARE(reply.generation, sampleGeneration());
        QCOMPARE(s->conversation(c)->currentLeafId, std::optional<qint64>(t->replyId));
        // A follow-up goes under the given parent.
        QVERIFY(s->finishReply(t->replyId, QStringLiteral("答"), QStringLiteral("stop")));
        const std::optional<TurnIds> next = s->beginTurn(c, t->replyId, QStringLiteral("and then?"), {});
        QVERIFY(next);
        QCOMPARE(ids(s->activePath(c)),
                 (QList<qint64>{t->userMessageId, t->replyId, next->userMessageId, next->replyId}));
    }

    void beginTurnInNewConversation() {
        auto s = memoryStore();
        NewConversation created;
        created.title = QStringLiteral("新对话");
        created.settings.sampling.temperature = 0.3;
        QSignalSpy listChanged(s.get(), &ChatStore::conversationsChanged);
        const std::optional<TurnIds> t = s->beginTurnInNewConversation(created, QStringLiteral("hello"), {});
        QVERIFY2(t, qPrintable(s->lastError()));
        QCOMPARE(listChanged.count(), 1);
        const Conversation c = *s->conversation(t->conversationId);
        QCOMPARE(c.title, QStringLiteral("新对话"));
        QCOMPARE(c.settings, created.settings);
        QCOMPARE(ids(s->activePath(c.id)), (QList<qint64>{t->userMessageId, t->replyId}));
    }

    void turnIsAllOrNothing() {
        const QString path = freshPath();
        ChatStore s;
        QVERIFY(s.open(path).ok());
        const qint64 c = *s.createConversation(QStringLiteral("all or nothing"));
        const qint64 u = *s.addMessage(c, std::nullopt, MessageRole::User, QStringLiteral("original"));
        const qint64 a = *s.addMessage(c, u, MessageRole::Assistant, QStringLiteral("answer"));
        {
            RawDb raw(path);
            QString error;
            QVERIFY2(raw.exec(kRefuseReplies, &error), qPrintable(error));
        }
        // The user's message is refused with its reply: no question without an answer row, no
        // conversation without messages.
        QVERIFY(!s.beginTurn(c, a, QStringLiteral("lost question"), {}));
        QVERIFY2(s.lastError().contains(QLatin1String("no room for the reply")), qPrintable(s.lastError()));
        QVERIFY(!s.beginEditedTurn(u, QStringLiteral("lost edit"), {}));
        QVERIFY(!s.beginTurnInNewConversation({QStringLiteral("lost conversation"), {}}, QStringLiteral("q"),
                                              {}));
        QCOMPARE(s.messageCount(c), 2);
        QCOMPARE(s.conversations().size(), 1);
        QCOMPARE(s.conversation(c)->currentLeafId, std::optional<qint64>(a));
        QCOMPARE(s.search(QStringLiteral("lost")).size(), 0);
    }

    void beginEditedTurnMakesASiblingBranch() {
        auto s = memoryStore();
        const std::optional<TurnIds> first =
            s->beginTurnInNewConversation({QStringLiteral("edit"), {}}, QStringLiteral("question"), {});
        QVERIFY(first);
        QVERIFY(s->finishReply(first->replyId, QStringLiteral("answer"), QStringLiteral("stop")));
        const std::optional<TurnIds> edited =
            s->beginEditedTurn(first->userMessageId, QStringLiteral("question, edited"), sampleGeneration());
        QVERIFY2(edited, qPrintable(s->lastError()));
        QCOMPARE(edited->conversationId, first->conversationId);
        QCOMPARE(s->siblings(edited->userMessageId).ids,
                 (QList<qint64>{first->userMessageId, edited->userMessageId}));
        QCOMPARE(ids(s->activePath(first->conversationId)),
                 (QList<qint64>{edited->userMessageId, edited->replyId}));
        QCOMPARE(s->message(edited->replyId)->state, MessageState::Partial);
        QCOMPARE(s->message(first->replyId)->content, QStringLiteral("answer")); // the old branch stays
        QVERIFY(!s->beginEditedTurn(first->replyId, QStringLiteral("not a user message"), {}));
    }

    // ---- ReplyWriter ------------------------------------------------------------------------------------

    void savesWithinTheInterval() {
        auto s = memoryStore();
        const TurnIds t = *s->beginTurnInNewConversation({QStringLiteral("w"), {}}, QStringLiteral("q"), {});
        ReplyWriter writer(s.get(), t.replyId);
        QSignalSpy saved(&writer, &ReplyWriter::checkpointSaved);
        writer.append(QStringLiteral("第一段 "));
        writer.append(QStringLiteral("second piece "));
        // The timer saves without another piece arriving.
        QVERIFY(saved.wait(5000));
        QCOMPARE(saved.count(), 1);
        QCOMPARE(contentOf(*s, t.replyId), QStringLiteral("第一段 second piece "));
        QCOMPARE(writer.savedLength(), writer.text().size());
        QCOMPARE(s->message(t.replyId)->state, MessageState::Partial);
        // Nothing new, nothing written.
        QTest::qWait(int(ReplyWriter::kCheckpointInterval.count()) * 2);
        QCOMPARE(saved.count(), 1);
        QCOMPARE(writer.stats().saves, 1);
    }

    void lateTimerSavesOnAppend() {
        // The event loop does not turn (a busy GUI thread): the piece that arrives after the
        // interval saves everything at once.
        auto s = memoryStore();
        const TurnIds t = *s->beginTurnInNewConversation({QStringLiteral("w"), {}}, QStringLiteral("q"), {});
        ReplyWriter writer(s.get(), t.replyId);
        writer.append(QStringLiteral("a"));
        QThread::msleep(ReplyWriter::kCheckpointInterval.count() + 20);
        QCOMPARE(contentOf(*s, t.replyId), QString());
        writer.append(QStringLiteral("b"));
        QCOMPARE(contentOf(*s, t.replyId), QStringLiteral("ab"));
        // A piece within the interval waits for the timer.
        writer.append(QStringLiteral("c"));
        QCOMPARE(contentOf(*s, t.replyId), QStringLiteral("ab"));
        QTRY_COMPARE_WITH_TIMEOUT(contentOf(*s, t.replyId), QStringLiteral("abc"), 5000);
    }

    void finishWritesTheFinalStateAndNothingAfter() {
        auto s = memoryStore();
        const TurnIds t = *s->beginTurnInNewConversation({QStringLiteral("w"), {}}, QStringLiteral("q"), {});
        ReplyWriter writer(s.get(), t.replyId);
        QSignalSpy saved(&writer, &ReplyWriter::checkpointSaved);
        writer.append(QStringLiteral("the whole "));
        writer.append(QStringLiteral("answer"));
        QVERIFY(writer.finish(QStringLiteral("stop"), sampleMetrics(), sampleRouting(), sampleProfile()));
        QVERIFY(writer.hasEnded());
        const Message m = *s->message(t.replyId);
        QCOMPARE(m.state, MessageState::Complete);
        QCOMPARE(m.content, QStringLiteral("the whole answer"));
        QCOMPARE(m.finishReason, QStringLiteral("stop"));
        QCOMPARE(*s->metrics(t.replyId), sampleMetrics());
        QVERIFY(s->profile(t.replyId).has_value());
        writer.append(QStringLiteral(" and more"));
        QVERIFY(!writer.finish(QStringLiteral("stop"), {}, {})); // once only
        QVERIFY(!writer.cancel());
        QTest::qWait(int(ReplyWriter::kCheckpointInterval.count()) * 2);
        QCOMPARE(saved.count(), 0);
        QCOMPARE(*s->message(t.replyId), m);
    }

    void failAndCancelKeepTheText() {
        auto s = memoryStore();
        const TurnIds t = *s->beginTurnInNewConversation({QStringLiteral("w"), {}}, QStringLiteral("q"), {});
        {
            ReplyWriter writer(s.get(), t.replyId);
            writer.append(QStringLiteral("half an answer"));
            QVERIFY(writer.fail(QStringLiteral("error: out of memory")));
        }
        Message m = *s->message(t.replyId);
        QCOMPARE(m.state, MessageState::Failed);
        QCOMPARE(m.content, QStringLiteral("half an answer"));
        QCOMPARE(m.finishReason, QStringLiteral("error: out of memory"));

        const qint64 again = *s->regenerate(t.replyId, {});
        ReplyWriter writer(s.get(), again);
        writer.append(QStringLiteral("stopped here"));
        QVERIFY(writer.cancel());
        m = *s->message(again);
        QCOMPARE(m.state, MessageState::Complete);
        QCOMPARE(m.content, QStringLiteral("stopped here"));
        QCOMPARE(m.finishReason, QStringLiteral("cancelled"));
    }

    void failedSaveIsReportedOnceAndRetried() {
        const QString path = freshPath();
        ChatStore s;
        QVERIFY(s.open(path).ok());
        const TurnIds t =
            *s.beginTurnInNewConversation({QStringLiteral("full disk"), {}}, QStringLiteral("q"), {});
        {
            RawDb raw(path);
            QVERIFY(raw.exec(kRefuseCheckpoints));
        }
        ReplyWriter writer(&s, t.replyId);
        QSignalSpy failed(&writer, &ReplyWriter::checkpointFailed);
        QSignalSpy saved(&writer, &ReplyWriter::checkpointSaved);
        writer.append(QStringLiteral("first "));
        QVERIFY(failed.wait(5000));
        QVERIFY2(failed.at(0).at(0).toString().contains(QLatin1String("disk is full")),
                 qPrintable(failed.at(0).at(0).toString()));
        writer.append(QStringLiteral("second "));
        QTest::qWait(int(ReplyWriter::kCheckpointInterval.count()) *
                     3); // more failed attempts, no more reports
        QCOMPARE(failed.count(), 1);
        QCOMPARE(saved.count(), 0);
        {
            RawDb raw(path);
            QVERIFY(raw.exec(QStringLiteral("DROP TRIGGER refuse_checkpoints")));
        }
        QVERIFY(saved.wait(5000)); // the retry, with no new piece
        QCOMPARE(contentOf(s, t.replyId), QStringLiteral("first second "));
    }
};

QTEST_GUILESS_MAIN(TestReplyWriter)
#include "test_reply_writer.moc"
