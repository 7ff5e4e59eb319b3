// ChatStore search: FTS5 over titles and message text (trigram tokenizer, Chinese included), the
// LIKE scan for short terms, ranking, snippets and highlights, and the index staying consistent
// with its content tables after every kind of write.
#include "chat_store_test_support.h"

#include <QTemporaryDir>
#include <QtTest>

using namespace es;
using namespace es_test;

class TestChatStoreSearch : public QObject {
    Q_OBJECT

private:
    QTemporaryDir m_dir;
    int m_fileCounter = 0;
    QString freshPath() { return m_dir.filePath(QStringLiteral("chats-%1.sqlite").arg(++m_fileCounter)); }

    // The search fixture: six conversations, one with a reply still streaming.
    void fillSearchFixture(ChatStore &s) {
        auto add = [&s](const QString &title, const QStringList &texts) {
            const qint64 c = *s.createConversation(title);
            std::optional<qint64> parent;
            bool user = true;
            for (const QString &t : texts) {
                parent = s.addMessage(c, parent, user ? MessageRole::User : MessageRole::Assistant, t);
                user = !user;
            }
            return std::pair{c, parent};
        };
        add(QStringLiteral("MoE routing notes"), {QStringLiteral("How does expert routing work in ERNIE?"),
                                                  QStringLiteral("Each token picks the top-k experts by router score.")});
        add(QStringLiteral("深度学习笔记"), {QStringLiteral("请解释混合专家模型的负载均衡"),
                                             QStringLiteral("负载均衡损失让每个专家处理的词元数量接近。")});
        add(QStringLiteral("Cooking"), {QStringLiteral("Recipe for 宫保鸡丁 please"),
                                        QStringLiteral("Stir-fry chicken with peanuts and chilies; 100% tasty_stuff.")});
        add(QStringLiteral("Empty chat"), {});
        const auto [streaming, question] =
            add(QStringLiteral("Streaming"), {QStringLiteral("Tell me something")});
        const auto partial = s.beginPartialReply(streaming, *question, {});
        s.updatePartialReply(*partial, QStringLiteral("secretpartialtext about routing"));
        add(QStringLiteral("Network notes"), {QStringLiteral("The routing table of the router.")});
    }

private Q_SLOTS:
    void initTestCase() { QVERIFY(m_dir.isValid()); }

    // The FTS5 index must match its content tables after every kind of write (FTS5's own
    // integrity check against the external content; valid while no reply is streaming).
    void searchIndexStaysConsistent() {
        const QString path = freshPath();
        {
            ChatStore s;
            QVERIFY(s.open(path).ok());
            fillSearchFixture(s);
            const QList<Conversation> list = s.conversations();
            QVERIFY(s.renameConversation(list.first().id, QStringLiteral("renamed title")));
            const std::optional<ConversationSnapshot> snap = s.deleteConversation(list.last().id);
            QVERIFY(snap);
            QVERIFY(s.restoreConversation(*snap));
            QVERIFY(s.deleteConversation(snap->conversation.id));
            // Delete and restore the conversation whose reply is streaming (not indexed yet).
            const qint64 streaming = s.search(QStringLiteral("Streaming")).first().conversation.id;
            const std::optional<ConversationSnapshot> withPartial = s.deleteConversation(streaming);
            QVERIFY(withPartial);
            QVERIFY(s.restoreConversation(*withPartial));
            QCOMPARE(s.recoverPartialReplies(), 1); // its reply, now indexed
            QCOMPARE(titles(s.search(QStringLiteral("secretpartialtext"))), QStringList{QStringLiteral("Streaming")});
            QCOMPARE(titles(s.search(QStringLiteral("renamed"))), QStringList{QStringLiteral("renamed title")});
            QVERIFY(s.search(QStringLiteral("Network notes")).isEmpty());
        }
        RawDb raw(path);
        QString error;
        QVERIFY2(raw.exec(QStringLiteral("INSERT INTO messages_fts (messages_fts, rank) VALUES ('integrity-check', 1)"),
                          &error),
                 qPrintable(error));
        QVERIFY2(raw.exec(QStringLiteral(
                              "INSERT INTO conversations_fts (conversations_fts, rank) VALUES ('integrity-check', 1)"),
                          &error),
                 qPrintable(error));
    }

    // ---- Search ------------------------------------------------------------------------------------------------

    void search_data() {
        QTest::addColumn<QString>("query");
        QTest::addColumn<QStringList>("expected"); // titles, best first
        const QString moe = QStringLiteral("MoE routing notes"), zh = QStringLiteral("深度学习笔记"),
                      cooking = QStringLiteral("Cooking"), net = QStringLiteral("Network notes");
        QTest::newRow("title and text beat text only") << QString("routing") << QStringList{moe, net};
        QTest::newRow("case-insensitive") << QString("ROUTING") << QStringList{moe, net};
        QTest::newRow("two terms, both required") << QString("top-k experts") << QStringList{moe};
        QTest::newRow("title only") << QString("Cooking") << QStringList{cooking};
        QTest::newRow("Chinese substring in text") << QString("混合专家") << QStringList{zh};
        QTest::newRow("Chinese in the middle of a run") << QString("专家处理") << QStringList{zh};
        QTest::newRow("Chinese title") << QString("深度学习") << QStringList{zh};
        QTest::newRow("Chinese, two characters (scan)") << QString("专家") << QStringList{zh};
        QTest::newRow("Chinese title, two characters (scan)") << QString("笔记") << QStringList{zh};
        QTest::newRow("one character (scan)") << QString("鸡") << QStringList{cooking};
        QTest::newRow("mixed scripts") << QString("Recipe 宫保鸡丁") << QStringList{cooking};
        QTest::newRow("percent sign, indexed") << QString("100%") << QStringList{cooking};
        QTest::newRow("percent sign is literal (scan)") << QString("%") << QStringList{cooking};
        QTest::newRow("underscore is literal (scan)") << QString("_") << QStringList{cooking};
        QTest::newRow("quotes are literal") << QString("\"router\"") << QStringList{};
        QTest::newRow("FTS syntax is literal") << QString("NEAR(routing") << QStringList{};
        QTest::newRow("no match") << QString("zebra") << QStringList{};
        QTest::newRow("terms in different conversations") << QString("routing 宫保") << QStringList{};
        QTest::newRow("streaming text is not searched") << QString("secretpartialtext") << QStringList{};
        QTest::newRow("empty") << QString("   ") << QStringList{};
    }

    void search() {
        QFETCH(QString, query);
        QFETCH(QStringList, expected);
        auto s = memoryStore();
        fillSearchFixture(*s);
        const QList<SearchHit> hits = s->search(query);
        QCOMPARE(titles(hits), expected);
        const QStringList terms = query.split(QLatin1Char(' '), Qt::SkipEmptyParts);
        for (const SearchHit &h : hits) {
            QVERIFY(h.messageId || !h.titleHighlights.isEmpty());
            if (h.messageId) {
                QVERIFY2(!h.snippetHighlights.isEmpty(), qPrintable(h.snippet));
                const Message m = *s->message(*h.messageId);
                QCOMPARE(m.conversationId, h.conversation.id);
            }
            // Every highlighted span is one of the terms (case aside).
            auto check = [&terms](const QString &text, const QList<TextRange> &ranges) {
                for (const TextRange &r : ranges) {
                    const QString span = text.mid(r.start, r.length);
                    if (!terms.contains(span, Qt::CaseInsensitive)) return span;
                }
                return QString();
            };
            const QString badSnippet = check(h.snippet, h.snippetHighlights);
            QVERIFY2(badSnippet.isEmpty(), qPrintable(h.snippet + QStringLiteral(" | ") + badSnippet));
            const QString badTitle = check(h.conversation.title, h.titleHighlights);
            QVERIFY2(badTitle.isEmpty(), qPrintable(h.conversation.title + QStringLiteral(" | ") + badTitle));
        }
    }

    void searchSnippet() {
        auto s = memoryStore();
        const qint64 c = *s->createConversation(QStringLiteral("long"));
        QString text;
        for (int i = 0; i < 40; ++i) text += QStringLiteral("无关的句子%1。").arg(i);
        text += QStringLiteral("这里提到了混合专家路由。");
        for (int i = 0; i < 40; ++i) text += QStringLiteral("后面的句子%1。").arg(i);
        const qint64 m = *s->addMessage(c, std::nullopt, MessageRole::Assistant, text);
        for (const QString &query : {QStringLiteral("混合专家"), QStringLiteral("路由")}) {
            const QList<SearchHit> hits = s->search(query);
            QCOMPARE(hits.size(), 1);
            const SearchHit &h = hits.first();
            QCOMPARE(h.messageId, std::optional<qint64>(m));
            QVERIFY2(h.snippet.size() < 120, qPrintable(h.snippet));
            QVERIFY2(h.snippet.startsWith(QStringLiteral("…")) && h.snippet.endsWith(QStringLiteral("…")),
                     qPrintable(h.snippet));
            QCOMPARE(h.snippetHighlights.size(), 1);
            QCOMPARE(h.snippet.mid(h.snippetHighlights[0].start, h.snippetHighlights[0].length), query);
        }
    }
};

QTEST_GUILESS_MAIN(TestChatStoreSearch)

#include "test_chat_store_search.moc"
