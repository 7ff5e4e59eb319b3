// The chat pane's context controls through the real widgets, the real engine on the tiny model
// (CPU) and an in-memory store: the composer's token count follows typing and equals the prompt
// the engine then receives (system prompt included); a chat longer than a tiny context keeps
// working under "drop oldest" and its replies say what was left out, while "refuse" names the
// sizes; Continue extends a reply cut at its token limit in place; Delete removes a message and
// its branch (stopping a reply in progress first); each reply shows its stats line.
#include "chat_pane.h"
#include "chat_store.h"
#include "composer.h"
#include "engine_session.h"
#include "message_widget.h"

#include <QApplication>
#include <QComboBox>
#include <QFile>
#include <QJsonDocument>
#include <QJsonObject>
#include <QMessageBox>
#include <QPushButton>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QToolButton>
#include <QtTest>

using namespace es;

namespace {

// A copy of the tiny model whose context is `context` tokens (RoPE does not depend on it).
bool copyModelWithContext(const QString &to, int context) {
    const QString from = QStringLiteral(ES_TEST_DATA_DIR) + "/moe-shared/";
    for (const char *f : {"model.safetensors", "tokenizer.model", "tokenizer_config.json", "special_tokens_map.json",
                          "generation_config.json"})
        if (!QFile::copy(from + f, to + "/" + f)) return false;
    QFile in(from + "config.json");
    if (!in.open(QIODevice::ReadOnly)) return false;
    QJsonObject cfg = QJsonDocument::fromJson(in.readAll()).object();
    cfg["max_position_embeddings"] = context;
    QFile out(to + "/config.json");
    return out.open(QIODevice::WriteOnly) && out.write(QJsonDocument(cfg).toJson()) > 0;
}

QToolButton *visibleButton(QWidget *w, const QString &text) {
    for (auto *b : w->findChildren<QToolButton *>())
        if (b->text() == text && b->isVisibleTo(w)) return b;
    return nullptr;
}

// Clicks the destructive button of the next message box (the delete confirmation).
void confirmNextMessageBox() {
    auto *tries = new int(0);
    auto *timer = new QTimer;
    timer->setInterval(20);
    QObject::connect(timer, &QTimer::timeout, [timer, tries] {
        if (auto *box = qobject_cast<QMessageBox *>(QApplication::activeModalWidget())) {
            for (QAbstractButton *b : box->buttons())
                if (box->buttonRole(b) == QMessageBox::DestructiveRole) b->click();
        } else if (++*tries < 250) {
            return;
        }
        timer->deleteLater();
        delete tries;
    });
    timer->start();
}

} // namespace

class TestChatContext : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void cleanup();
    void counterFollowsTypingAndIsThePromptSent();
    void longChatStaysUsableWhenDroppingOldest();
    void refuseNamesTheSizes();
    void continueExtendsACutReply();
    void deleteRemovesTheBranch();
    void deleteStopsAReplyInProgress();
    void statsLineUnderEachReply();

private:
    // A pane over a fresh store and a session on `modelDir`; the conversation (when settings are
    // given) created with them.
    void start(const QString &modelDir, int defaultMaxTokens, std::optional<ConversationSettings> settings = {});
    void sendAndWait(const QString &text);
    QList<Message> path() const { return m_store->activePath(*m_pane->conversationId()); }

    QTemporaryDir m_tinyContext;
    std::unique_ptr<ChatStore> m_store;
    std::unique_ptr<EngineSession> m_session;
    std::unique_ptr<ChatPane> m_pane;
};

void TestChatContext::initTestCase() {
    QVERIFY(m_tinyContext.isValid());
    QVERIFY(copyModelWithContext(m_tinyContext.path(), 160));
}

void TestChatContext::cleanup() {
    m_pane.reset();
    m_session.reset();
    m_store.reset();
}

void TestChatContext::start(const QString &modelDir, int defaultMaxTokens, std::optional<ConversationSettings> settings) {
    m_store = std::make_unique<ChatStore>();
    QVERIFY(m_store->open(":memory:").ok());
    m_session = std::make_unique<EngineSession>(EngineSessionOptions{.backend = "cpu", .defaultMaxTokens = defaultMaxTokens});
    QSignalSpy loaded(m_session.get(), &EngineSession::modelLoaded);
    m_session->loadModel(modelDir);
    QVERIFY(loaded.wait(30000));
    m_pane = std::make_unique<ChatPane>(m_store.get(), m_session.get());
    m_pane->resize(900, 700);
    m_pane->show();
    QVERIFY(QTest::qWaitForWindowExposed(m_pane.get()));
    if (settings) {
        const auto id = m_store->createConversation("test", *settings);
        QVERIFY(id);
        m_pane->setConversation(*id);
    }
}

void TestChatContext::sendAndWait(const QString &text) {
    QSignalSpy done(m_session.get(), &EngineSession::replyFinished);
    m_pane->composer()->setText(text);
    m_pane->composer()->editor()->setFocus();
    QTest::keyClick(m_pane->composer()->editor(), Qt::Key_Return);
    QVERIFY(done.wait(30000));
    QTRY_VERIFY(!m_pane->isGenerating());
}

void TestChatContext::counterFollowsTypingAndIsThePromptSent() {
    start(QStringLiteral(ES_TEST_DATA_DIR) + "/moe-shared", 8);
    // The model's context and KV budget are shown.
    QVERIFY2(m_pane->composer()->contextText().contains("4,096") || m_pane->composer()->contextText().contains("4096"),
             qPrintable(m_pane->composer()->contextText()));
    QVERIFY(m_pane->composer()->contextText().contains("KV"));
    // A system prompt without a preset: shown, and part of the count.
    QVERIFY(m_pane->setSystemPrompt("Answer like a pirate."));
    QVERIFY(m_pane->systemPromptBannerText().contains("pirate"));

    for (int round = 0; round < 2; ++round) { // an empty history, then one with a reply
        QTRY_VERIFY(m_pane->promptTokenCount() > 0);
        const int before = m_pane->promptTokenCount();
        m_pane->composer()->editor()->setFocus();
        QTest::keyClicks(m_pane->composer()->editor(), "How are tokens routed to the experts");
        QTRY_VERIFY(m_pane->promptTokenCount() > before);
        const int typed = m_pane->promptTokenCount();
        QTest::keyClicks(m_pane->composer()->editor(), " of each layer?");
        QTRY_VERIFY(m_pane->promptTokenCount() > typed);
        const int counted = m_pane->promptTokenCount();
        QVERIFY(m_pane->composer()->tokenCountText().contains("/"));
        // What the engine then receives is exactly what was shown.
        QSignalSpy done(m_session.get(), &EngineSession::replyFinished);
        QTest::keyClick(m_pane->composer()->editor(), Qt::Key_Return);
        QVERIFY(done.wait(30000));
        QCOMPARE(done.first().at(2).value<MessageMetrics>().nPromptTokens.value_or(-1), counted);
        QTRY_VERIFY(!m_pane->isGenerating());
    }
    const auto conv = m_store->conversation(*m_pane->conversationId());
    QCOMPARE(conv->systemPrompt, QString("Answer like a pirate."));
}

void TestChatContext::longChatStaysUsableWhenDroppingOldest() {
    start(m_tinyContext.path(), 12);
    m_pane->composer()->setText("x");
    QTRY_VERIFY(m_pane->composer()->contextText().contains("160"));
    auto *policy = m_pane->findChild<QComboBox *>("overflowPolicy");
    QVERIFY(policy);
    const int drop = policy->findData(int(OverflowPolicy::DropOldest));
    policy->setCurrentIndex(drop);
    emit policy->activated(drop);
    QCOMPARE(m_pane->overflowPolicy(), OverflowPolicy::DropOldest);

    QSignalSpy failed(m_session.get(), &EngineSession::replyFailed);
    QSignalSpy errors(m_pane.get(), &ChatPane::errorOccurred);
    const QString longText = "Tell me again about the routing of tokens to experts in every layer of the model, "
                             "and how the shared expert and the gate work together for each token.";
    int withDropped = 0;
    for (int i = 0; i < 6; ++i) {
        sendAndWait(longText);
        const Message reply = path().constLast();
        QCOMPARE(reply.role, MessageRole::Assistant);
        QVERIFY2(reply.state == MessageState::Complete, qPrintable(reply.finishReason));
        if (reply.droppedMessages > 0) {
            ++withDropped;
            MessageWidget *w = m_pane->messageWidgets().constLast();
            QTRY_VERIFY(w->contextNoteText().contains(QString::number(reply.droppedMessages)));
        }
    }
    QCOMPARE(failed.count(), 0);
    QVERIFY2(errors.isEmpty(), errors.isEmpty() ? "" : qPrintable(errors.first().first().toString()));
    QVERIFY(withDropped >= 2); // the history outgrew the context and the chat went on
    // The policy is stored with the conversation.
    QCOMPARE(m_store->conversation(*m_pane->conversationId())->overflowPolicy, OverflowPolicy::DropOldest);
    // The composer says what will happen to the next message.
    QTest::keyClicks(m_pane->composer()->editor(), "more");
    QTRY_VERIFY(m_pane->composer()->tokenCountText().contains("left out"));
}

void TestChatContext::refuseNamesTheSizes() {
    start(m_tinyContext.path(), 12);
    QVERIFY(m_pane->setOverflowPolicy(OverflowPolicy::Refuse));
    const QString longText = "Tell me again about the routing of tokens to experts in every layer of the model, "
                             "and how the shared expert and the gate work together for each token.";
    QSignalSpy errors(m_pane.get(), &ChatPane::errorOccurred);
    QSignalSpy engineFailed(m_session.get(), &EngineSession::replyFailed);
    for (int i = 0; i < 8 && errors.isEmpty(); ++i) {
        m_pane->composer()->setText(longText);
        m_pane->composer()->editor()->setFocus();
        QTest::keyClick(m_pane->composer()->editor(), Qt::Key_Return);
        QTRY_VERIFY_WITH_TIMEOUT(!m_pane->isGenerating(), 30000);
    }
    QCOMPARE(errors.count(), 1);
    const QString why = errors.first().first().toString();
    // Refused by the pane, before the engine: the sizes, the room the reply keeps, what to do.
    QCOMPARE(engineFailed.count(), 0);
    QVERIFY2(why.contains("160") && why.contains("148") && why.contains("12") && why.contains("Drop oldest"),
             qPrintable(why));
    // The refused turn's reply says why; the conversation is still there to change the policy.
    const Message reply = path().constLast();
    QCOMPARE(reply.state, MessageState::Failed);
    QVERIFY(reply.finishReason.contains("160"));
}

void TestChatContext::continueExtendsACutReply() {
    ConversationSettings settings;
    settings.sampling.temperature = 0.0;
    settings.sampling.maxTokens = 6;
    start(QStringLiteral(ES_TEST_DATA_DIR) + "/moe-shared", 6, settings);
    sendAndWait("Write a long story about experts.");
    const Message cut = path().constLast();
    QCOMPARE(cut.finishReason, QString("length"));
    QTRY_COMPARE(m_pane->messageWidgets().size(), 2);
    QToolButton *cont = nullptr;
    QTRY_VERIFY((cont = visibleButton(m_pane->messageWidgets().constLast(), "Continue")));
    QVERIFY(!visibleButton(m_pane->messageWidgets().constFirst(), "Continue"));

    QSignalSpy done(m_session.get(), &EngineSession::replyFinished);
    cont->click();
    QVERIFY(m_pane->isGenerating());
    QVERIFY(done.wait(30000));
    QTRY_VERIFY(!m_pane->isGenerating());
    const Message grown = *m_store->message(cut.id);
    QCOMPARE(path().constLast().id, cut.id); // the same message, no new branch
    QCOMPARE(m_store->siblings(cut.id).ids.size(), 1);
    QVERIFY(grown.content.size() > cut.content.size());
    QVERIFY(grown.content.startsWith(cut.content));
    QCOMPARE(grown.state, MessageState::Complete);
    QCOMPARE(m_store->metrics(cut.id)->nOutputTokens.value_or(0), 12);
    QTRY_COMPARE(m_pane->messageWidgets().size(), 2);
    QCOMPARE(m_pane->messageWidgets().constLast()->text(), grown.content);
}

void TestChatContext::deleteRemovesTheBranch() {
    ConversationSettings settings;
    settings.sampling.maxTokens = 4;
    start(QStringLiteral(ES_TEST_DATA_DIR) + "/moe-shared", 4, settings);
    sendAndWait("first question");
    sendAndWait("second question");
    QTRY_COMPARE(m_pane->messageWidgets().size(), 4);
    const QList<Message> before = path();
    MessageWidget *second = m_pane->messageWidgets().at(2);
    QCOMPARE(second->messageId(), before[2].id);
    QAction *del = nullptr;
    for (QAction *a : second->findChildren<QAction *>())
        if (a->text() == "Delete message…") del = a;
    QVERIFY(del);
    confirmNextMessageBox();
    del->trigger();
    QTRY_COMPARE(m_pane->messageWidgets().size(), 2);
    QCOMPARE(m_store->messageCount(*m_pane->conversationId()), 2);
    QCOMPARE(path().constLast().id, before[1].id); // the branch now ends at the first reply
    QVERIFY(!m_store->message(before[3].id));
}

void TestChatContext::deleteStopsAReplyInProgress() {
    ConversationSettings settings;
    settings.sampling.maxTokens = 3000; // long enough to still stream when the delete comes
    start(QStringLiteral(ES_TEST_DATA_DIR) + "/moe-shared", 3000, settings);
    QSignalSpy interrupted(m_pane.get(), &ChatPane::replyInterrupted);
    m_pane->composer()->setText("stream for a while");
    m_pane->composer()->editor()->setFocus();
    QTest::keyClick(m_pane->composer()->editor(), Qt::Key_Return);
    QVERIFY(m_pane->isGenerating());
    QTRY_COMPARE(m_pane->messageWidgets().size(), 2);
    MessageWidget *user = m_pane->messageWidgets().constFirst();
    QAction *del = nullptr;
    for (QAction *a : user->findChildren<QAction *>())
        if (a->text() == "Delete message…") del = a;
    QVERIFY(del && del->isEnabled());
    confirmNextMessageBox();
    del->trigger();
    QVERIFY(!m_pane->isGenerating());
    QCOMPARE(interrupted.count(), 1);
    QCOMPARE(m_store->messageCount(*m_pane->conversationId()), 0);
    QTRY_COMPARE(m_pane->messageWidgets().size(), 0);
}

void TestChatContext::statsLineUnderEachReply() {
    ConversationSettings settings;
    settings.sampling.temperature = 0.0;
    settings.sampling.maxTokens = 5;
    start(QStringLiteral(ES_TEST_DATA_DIR) + "/moe-shared", 5, settings);
    sendAndWait("Say something.");
    QTRY_COMPARE(m_pane->messageWidgets().size(), 2);
    MessageWidget *user = m_pane->messageWidgets().constFirst();
    MessageWidget *reply = m_pane->messageWidgets().constLast();
    const QString stats = reply->statsText();
    QVERIFY2(stats.contains("tok/s") && stats.contains("5 token") && stats.contains("TTFT") &&
                 stats.contains("stop: length"),
             qPrintable(stats));
    QVERIFY(user->statsText().isEmpty());
    QVERIFY2(reply->headerToolTip().contains("Started") && reply->headerToolTip().contains("Finished"),
             qPrintable(reply->headerToolTip()));
    QVERIFY(user->headerToolTip().contains("Sent"));
}

QTEST_MAIN(TestChatContext)
#include "test_chat_context.moc"
