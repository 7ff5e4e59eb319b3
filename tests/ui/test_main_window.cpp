// Widget tests of the chat window against the real engine on a tiny model and an in-memory
// store: send (Enter), stop (Esc), regenerate and edit-and-resend make sibling branches, the
// branch switcher, preset apply, conversation search, delete + undo, checkpoints while streaming,
// File ▸ Export/Import (a real reply's profile, with its steps, into every report format).
#include "chat_pane.h"
#include "chat_store.h"
#include "composer.h"
#include "conversation_list_model.h"
#include "conversation_sidebar.h"
#include "desktop_screen.h"
#include "engine/cuda/cuda_loader.h"
#include "engine_session.h"
#include "export_menu.h"
#include "main_window.h"
#include "message_widget.h"

#include <QLabel>
#include <QLineEdit>
#include <QListView>
#include <QMenuBar>
#include <QPushButton>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QToolButton>
#include <QtTest>

using namespace es;

namespace {

QToolButton *button(QWidget *w, const QString &text) {
    for (auto *b : w->findChildren<QToolButton *>())
        if (b->text() == text) return b;
    return nullptr;
}

} // namespace

class TestMainWindow : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void init();
    void cleanup();
    void sendWithEnterStoresBothMessages();
    void escStopsAndKeepsText();
    void checkpointsWhileStreaming();
    void regenerateMakesSiblingBranch();
    void editAndResendMakesSiblingBranch();
    void presetApplyReplacesPrefix();
    void searchFindsMessageText();
    void deleteAndUndo();
    void sendToAllPanes();
    void failedReplyKeepsItsProfile();
    void comparePrecisionsSideBySide();
    void statusBarSaysWhyTheGpuIsNotUsed();
    void kvCacheMenuKeepsTheCpuWorking();
    void exportAndImportFromTheFileMenu();

private:
    void sendAndWait(const QString &text);
    ChatPane *pane() const { return m_window->currentPane(); }

    QTemporaryDir m_home;
    std::unique_ptr<ChatStore> m_store;
    std::unique_ptr<EngineSession> m_session;
    std::unique_ptr<MainWindow> m_window;
};

void TestMainWindow::initTestCase() {
    qputenv("HOME", m_home.path().toUtf8()); // QSettings of the test stay out of the real home
    QCoreApplication::setOrganizationName("ExpertScopeTests");
    QCoreApplication::setApplicationName("test_main_window");
}

void TestMainWindow::init() {
    m_store = std::make_unique<ChatStore>();
    QVERIFY(m_store->open(":memory:").ok());
    m_session = std::make_unique<EngineSession>(EngineSessionOptions{.backend = "cpu", .defaultMaxTokens = 24});
    QSignalSpy loaded(m_session.get(), &EngineSession::modelLoaded);
    m_session->loadModel(QStringLiteral(ES_TEST_DATA_DIR) + "/moe-shared");
    QVERIFY(loaded.wait(30000));
    m_window = std::make_unique<MainWindow>(m_store.get(), m_session.get());
    m_window->show();
    QVERIFY(QTest::qWaitForWindowExposed(m_window.get()));
}

void TestMainWindow::cleanup() {
    m_window.reset();
    m_session.reset();
    m_store.reset();
}

void TestMainWindow::sendAndWait(const QString &text) {
    QSignalSpy done(m_session.get(), &EngineSession::replyFinished);
    pane()->composer()->setText(text);
    pane()->composer()->editor()->setFocus();
    QTest::keyClick(pane()->composer()->editor(), Qt::Key_Return);
    QVERIFY(done.wait(30000));
    QTRY_VERIFY(!pane()->isGenerating());
}

void TestMainWindow::sendWithEnterStoresBothMessages() {
    // Shift+Enter is a newline, not a send.
    pane()->composer()->editor()->setFocus();
    QTest::keyClicks(pane()->composer()->editor(), "line one");
    QTest::keyClick(pane()->composer()->editor(), Qt::Key_Return, Qt::ShiftModifier);
    QVERIFY(!pane()->isGenerating());
    QVERIFY(pane()->composer()->text().contains('\n'));
    pane()->composer()->setText(QString());
    sendAndWait("Hello there");
    QVERIFY(pane()->conversationId().has_value());
    const QList<Message> path = m_store->activePath(*pane()->conversationId());
    QCOMPARE(path.size(), 2);
    QCOMPARE(path[0].content, QString("Hello there"));
    QCOMPARE(path[1].role, MessageRole::Assistant);
    QCOMPARE(path[1].state, MessageState::Complete);
    QVERIFY(!path[1].content.isEmpty());
    QVERIFY(m_store->metrics(path[1].id).has_value());
    QTRY_COMPARE(pane()->messageWidgets().size(), 2);
    QCOMPARE(m_window->sidebar()->model()->rowCount(), 1);
    QVERIFY(pane()->composer()->text().isEmpty());
}

void TestMainWindow::escStopsAndKeepsText() {
    ConversationSettings s;
    s.sampling.maxTokens = 3000;
    const qint64 conv = *m_store->createConversation("long", s);
    pane()->setConversation(conv);
    QSignalSpy tokens(m_session.get(), &EngineSession::tokensGenerated);
    pane()->composer()->setText("Go on and on");
    QTest::keyClick(pane()->composer()->editor(), Qt::Key_Return);
    QVERIFY(pane()->isGenerating());
    QVERIFY(tokens.wait(10000));
    QTest::keyClick(pane()->composer()->editor(), Qt::Key_Escape);
    QVERIFY(!pane()->isGenerating()); // immediate
    const QList<Message> path = m_store->activePath(conv);
    QCOMPARE(path.size(), 2);
    QCOMPARE(path[1].finishReason, QString("cancelled"));
    QCOMPARE(path[1].state, MessageState::Complete);
    QVERIFY(!path[1].content.isEmpty());
}

void TestMainWindow::checkpointsWhileStreaming() {
    ConversationSettings s;
    s.sampling.maxTokens = 4000;
    const qint64 conv = *m_store->createConversation("stream", s);
    pane()->setConversation(conv);
    QSignalSpy tokens(m_session.get(), &EngineSession::tokensGenerated);
    pane()->send("Write a lot");
    QVERIFY(pane()->isGenerating());
    // The user's message and the reply's row are there before any token.
    QList<Message> path = m_store->activePath(conv);
    QCOMPARE(path.size(), 2);
    QCOMPARE(path[1].state, MessageState::Partial);
    QVERIFY(tokens.wait(30000));
    QTest::qWait(600); // past two checkpoint intervals (250 ms), well short of a second
    path = m_store->activePath(conv);
    QCOMPARE(path[1].state, MessageState::Partial);
    QVERIFY2(!path[1].content.isEmpty(), "no checkpoint of the partial reply 0.6 s after its first tokens");
    pane()->stop();
    const Message stopped = *m_store->message(path[1].id);
    QCOMPARE(stopped.finishReason, QStringLiteral("cancelled"));
    QVERIFY(stopped.content.startsWith(path[1].content)); // the checkpoint was a prefix of the reply
}

void TestMainWindow::regenerateMakesSiblingBranch() {
    sendAndWait("First question");
    const qint64 conv = *pane()->conversationId();
    const qint64 firstReply = m_store->activePath(conv).last().id;
    QSignalSpy done(m_session.get(), &EngineSession::replyFinished);
    pane()->regenerate(firstReply);
    QVERIFY(done.wait(30000));
    QTRY_VERIFY(!pane()->isGenerating());
    const QList<Message> path = m_store->activePath(conv);
    QCOMPARE(path.size(), 2);
    QVERIFY(path.last().id != firstReply);
    QCOMPARE(m_store->siblings(path.last().id).ids.size(), 2);
    // The switcher shows 2/2 and goes back to 1/2.
    QTRY_VERIFY(!pane()->messageWidgets().isEmpty());
    MessageWidget *reply = nullptr;
    for (auto *w : pane()->messageWidgets())
        if (w->messageId() == path.last().id) reply = w;
    QVERIFY(reply);
    QToolButton *prev = button(reply, QStringLiteral("‹"));
    QVERIFY(prev);
    QTRY_VERIFY(prev->isVisible()); // new widgets are shown on the next event-loop turn
    QVERIFY(prev->isEnabled());
    prev->click();
    QCOMPARE(m_store->activePath(conv).last().id, firstReply);
}

void TestMainWindow::editAndResendMakesSiblingBranch() {
    sendAndWait("Original question");
    const qint64 conv = *pane()->conversationId();
    const qint64 original = m_store->activePath(conv).first().id;
    MessageWidget *user = nullptr;
    QTRY_VERIFY(!pane()->messageWidgets().isEmpty());
    for (auto *w : pane()->messageWidgets())
        if (w->messageId() == original) user = w;
    QVERIFY(user);
    QTRY_VERIFY(user->isVisible());
    button(user, "Edit")->click();
    auto *editor = user->findChild<QPlainTextEdit *>();
    QVERIFY(editor);
    QTRY_VERIFY(editor->isVisible());
    editor->setPlainText("Edited question");
    QSignalSpy done(m_session.get(), &EngineSession::replyFinished);
    for (auto *b : user->findChildren<QPushButton *>())
        if (b->text().startsWith("Save")) b->click();
    QVERIFY(done.wait(30000));
    QTRY_VERIFY(!pane()->isGenerating());
    const QList<Message> path = m_store->activePath(conv);
    QCOMPARE(path.first().content, QString("Edited question"));
    QCOMPARE(m_store->siblings(path.first().id).ids.size(), 2);
    QVERIFY(m_store->message(original).has_value()); // the original branch is kept
}

void TestMainWindow::presetApplyReplacesPrefix() {
    const QList<Preset> presets = m_store->presets();
    QVERIFY(presets.size() >= 2);
    pane()->composer()->setText("Explain routing");
    m_window->applyPresetToCurrentPane(presets[0]);
    QCOMPARE(pane()->composer()->text(), presets[0].prefix + "Explain routing");
    m_window->applyPresetToCurrentPane(presets[1]);
    QCOMPARE(pane()->composer()->text(), presets[1].prefix + "Explain routing");
    m_window->applyPresetToCurrentPane(std::nullopt);
    QCOMPARE(pane()->composer()->text(), QString("Explain routing"));
}

void TestMainWindow::searchFindsMessageText() {
    sendAndWait("Tell me about zebras");
    m_window->sidebar()->newConversation();
    sendAndWait("专家混合模型的路由器");
    auto *model = m_window->sidebar()->model();
    QCOMPARE(model->rowCount(), 2);
    m_window->sidebar()->searchField()->setText("zebras");
    QTRY_COMPARE(model->rowCount(), 1);
    m_window->sidebar()->searchField()->setText("路由器");
    QTRY_COMPARE(model->rowCount(), 1);
    m_window->sidebar()->searchField()->clear();
    QTRY_COMPARE(model->rowCount(), 2);
}

void TestMainWindow::deleteAndUndo() {
    sendAndWait("Keep me");
    const qint64 conv = *pane()->conversationId();
    m_window->sidebar()->selectConversation(conv);
    m_window->sidebar()->deleteCurrent();
    QVERIFY(!m_store->conversation(conv).has_value());
    QVERIFY(!pane()->conversationId().has_value());
    QVERIFY(m_window->sidebar()->canUndoDelete());
    m_window->sidebar()->undoDelete();
    QVERIFY(m_store->conversation(conv).has_value());
    QCOMPARE(m_store->activePath(conv).size(), 2);
}

void TestMainWindow::sendToAllPanes() {
    const QList<Preset> presets = m_store->presets();
    ChatPane *left = pane();
    left->setActivePreset(presets[0]);
    ChatPane *right = m_window->addPane();
    right->setActivePreset(presets[1]);
    m_window->sendToAllAction()->setChecked(true);
    QSignalSpy done(m_session.get(), &EngineSession::replyFinished);
    right->composer()->setText(presets[1].prefix + "Same question");
    QTest::keyClick(right->composer()->editor(), Qt::Key_Return);
    QTRY_COMPARE_WITH_TIMEOUT(done.count(), 2, 30000);
    QTRY_VERIFY(!left->isGenerating() && !right->isGenerating());
    QCOMPARE(m_store->activePath(*left->conversationId()).first().content, presets[0].prefix + "Same question");
    QCOMPARE(m_store->activePath(*right->conversationId()).first().content, presets[1].prefix + "Same question");
}

// A reply that the engine fails (here: an expert intervention naming an expert the model does
// not have; a prompt longer than the context no longer reaches the engine, the pane refuses it
// with the sizes: tests/ui/test_chat_context.cpp) is stored as failed with what was measured
// until then: metrics (stop reason "error") and its profile.
void TestMainWindow::failedReplyKeepsItsProfile() {
    QSignalSpy failed(m_session.get(), &EngineSession::replyFailed);
    ExpertIntervention iv;
    iv.disabled = "1:99";
    QVERIFY(pane()->setConversationIntervention(iv));
    pane()->composer()->setText("word");
    pane()->composer()->editor()->setFocus();
    QTest::keyClick(pane()->composer()->editor(), Qt::Key_Return);
    QVERIFY(failed.wait(30000));
    QTRY_VERIFY(!pane()->isGenerating());
    const qint64 conv = *pane()->conversationId();
    const Message reply = m_store->activePath(conv).last();
    QCOMPARE(reply.role, MessageRole::Assistant);
    QCOMPARE(reply.state, MessageState::Failed);
    QVERIFY2(reply.finishReason.contains("99"), qPrintable(reply.finishReason));
    const std::optional<MessageProfile> profile = m_store->profile(reply.id);
    QVERIFY2(profile, qPrintable(m_store->lastError()));
    QVERIFY(profile->durationUs >= 0);
    const std::optional<MessageMetrics> metrics = m_store->metrics(reply.id);
    QVERIFY(metrics);
    QCOMPARE(metrics->stopReason, QString("error"));
    QCOMPARE(metrics->nOutputTokens, std::optional<int>(0));
}

// A pane at another precision: its own session loads the same model with FP8 weights (emulated
// on the CPU); "send to all panes" asks both; the replies record their precisions; closing the
// pane releases the second session.
// Model ▸ KV cache ▸ FP8 is remembered and reloads the model; on the CPU backend (this test's)
// the model keeps loading and answering with its fp32 cache: the choice is the GPU's.
void TestMainWindow::kvCacheMenuKeepsTheCpuWorking() {
    QMenu *kv = nullptr;
    for (QAction *top : m_window->menuBar()->actions())
        if (top->menu() && top->text() == tr("&Model"))
            for (QAction *a : top->menu()->actions())
                if (a->menu() && a->text() == tr("&KV cache")) kv = a->menu();
    QVERIFY(kv);
    QList<QAction *> choices = kv->actions();
    QCOMPARE(choices.size(), 2);
    QVERIFY(choices[0]->isChecked()); // BF16 by default
    QSignalSpy loaded(m_session.get(), &EngineSession::modelLoaded);
    choices[1]->trigger();
    QVERIFY(choices[1]->isChecked() && !choices[0]->isChecked());
    QCOMPARE(m_session->options().kvCache, QString("fp8"));
    QCOMPARE(QSettings().value("engine/kv_cache").toString(), QString("fp8"));
    QVERIFY(loaded.wait(30000));
    QVERIFY(m_session->isModelLoaded());
    QVERIFY(!m_session->modelInfo().backend.contains("fp8 KV"));
    sendAndWait("hello");
    QVERIFY(!pane()->findChildren<MessageWidget *>().isEmpty());
    QSettings().remove("engine/kv_cache");
}

void TestMainWindow::comparePrecisionsSideBySide() {
    // Three panes beside the sidebar and the profiler: wider than the default window (a pane that
    // would widen the window is not added).
    m_window->resize(1900, 1000);
    QCoreApplication::processEvents();
    ChatPane *first = pane();
    QCOMPARE(first->engineBadge(), QString("fp32"));
    ChatPane *second = m_window->addPrecisionPane("fp8");
    QVERIFY(second);
    QVERIFY(second->session() != m_session.get());
    QTRY_VERIFY_WITH_TIMEOUT(second->session()->isModelLoaded(), 30000);
    QTRY_COMPARE(second->engineBadge(), QString("fp8-e4m3 (emulated)"));
    QVERIFY(QString::fromStdString(second->session()->modelInfo().backend.toStdString()).contains("fp8-e4m3"));
    // Asking for the same precision again reuses the session.
    ChatPane *third = m_window->addPrecisionPane("fp8");
    QCOMPARE(third->session(), second->session());

    m_window->sendToAllAction()->setChecked(true);
    QSignalSpy doneMain(m_session.get(), &EngineSession::replyFinished);
    QSignalSpy doneFp8(second->session(), &EngineSession::replyFinished);
    first->composer()->setText("What does a router do?");
    first->composer()->editor()->setFocus();
    QTest::keyClick(first->composer()->editor(), Qt::Key_Return);
    QTRY_VERIFY_WITH_TIMEOUT(doneMain.count() == 1 && doneFp8.count() == 2, 60000);
    QTRY_VERIFY(!first->isGenerating() && !second->isGenerating() && !third->isGenerating());
    const Message a = m_store->activePath(*first->conversationId()).last();
    const Message b = m_store->activePath(*second->conversationId()).last();
    QCOMPARE(a.role, MessageRole::Assistant);
    QCOMPARE(b.role, MessageRole::Assistant);
    QCOMPARE(a.generation.precision, QString("fp32"));
    QCOMPARE(b.generation.precision, QString("fp8-e4m3 (emulated)"));
    QVERIFY(m_store->profile(b.id)); // stored with its profile, comparable in the profiler

    // Closing both fp8 panes releases their session.
    QPointer<EngineSession> fp8 = second->session();
    for (ChatPane *p : {third, second}) {
        p->composer()->editor()->setFocus();
        QTRY_COMPARE(m_window->currentPane(), p);
        m_window->closeCurrentPane();
        QTRY_VERIFY(!m_window->panes().contains(p));
    }
    QTRY_VERIFY(fp8.isNull());
    QCOMPARE(m_window->panes().size(), 1);
}

void TestMainWindow::statusBarSaysWhyTheGpuIsNotUsed() {
    auto *label = m_window->findChild<QLabel *>(QStringLiteral("backendLabel"));
    QVERIFY(label);
    auto reloadWith = [&](const QString &backend) {
        QSignalSpy loaded(m_session.get(), &EngineSession::modelLoaded);
        EngineSessionOptions o = m_session->options();
        o.backend = backend;
        m_session->reconfigure(o);
        return loaded.wait(30000);
    };
    // cpu was asked for: nothing to explain.
    QVERIFY(reloadWith(QStringLiteral("cpu")));
    QVERIFY2(label->text().startsWith("cpu") && !label->text().contains("GPU not used"),
             qPrintable(label->text()));
    QVERIFY(label->toolTip().isEmpty());
    // auto: CUDA when it can run here, else the CPU and the reason (the machine decides which).
    QVERIFY(reloadWith(QStringLiteral("auto")));
    const es::cuda_status_info &cuda = es::cuda_status();
    if (cuda.available) {
        QVERIFY2(label->text().startsWith("cuda"), qPrintable(label->text()));
        QVERIFY(label->toolTip().isEmpty());
    } else {
        QVERIFY(!cuda.reason.empty());
        QVERIFY2(label->text().startsWith("cpu") && label->text().contains("GPU not used"),
                 qPrintable(label->text()));
        QCOMPARE(label->toolTip(), QString::fromStdString("CUDA not used: " + cuda.reason));
        QCOMPARE(m_session->modelInfo().backendNote, label->toolTip());
    }
}

ES_DESKTOP_QTEST_MAIN(TestMainWindow) // room for three panes
#include "test_main_window.moc"

void TestMainWindow::exportAndImportFromTheFileMenu() {
    sendAndWait("Tell me about experts");
    const qint64 conv = *pane()->conversationId();
    const QList<Message> path = m_store->activePath(conv);
    const std::optional<MessageProfile> profile = m_store->profile(path.last().id);
    QVERIFY(profile);
    QVERIFY(!profile->steps.isEmpty());  // schema v5: the recorder stored the reply's steps
    QVERIFY(!profile->memory.isEmpty()); // and its memory samples
    QCOMPARE(profile->steps.size(), profile->nSteps);

    QStringList entries;
    for (QAction *a : m_window->menuBar()->actions().first()->menu()->actions()) entries << a->text();
    QVERIFY2(entries.contains(tr("E&xport conversation")) && entries.contains(tr("&Import conversation…")) &&
                 entries.contains(tr("Export &report")),
             qPrintable(entries.join(", ")));

    ExportMenu *menu = m_window->exportMenu();
    QTemporaryDir dir;
    for (const char *format : {"html", "pdf", "json", "csv", "trace"}) {
        const QString file = dir.filePath(QStringLiteral("message.") + QLatin1String(format));
        QVERIFY2(menu->exportReport(false, QLatin1String(format), file), qPrintable(menu->lastError()));
        QVERIFY(QFileInfo(file).size() > 100);
    }
    QVERIFY2(menu->exportReport(true, "html", dir.filePath("conversation.html")),
             qPrintable(menu->lastError()));
    QVERIFY2(menu->exportConversation(conv, false, dir.filePath("c.md")), qPrintable(menu->lastError()));
    QVERIFY2(menu->exportConversation(conv, true, dir.filePath("c.json")), qPrintable(menu->lastError()));
    const std::optional<qint64> imported = menu->importConversation(dir.filePath("c.json"));
    QVERIFY2(imported, qPrintable(menu->lastError()));
    QCOMPARE(*pane()->conversationId(), *imported); // the import is opened
    QCOMPARE(m_store->activePath(*imported).size(), path.size());
    QCOMPARE(m_store->profile(m_store->activePath(*imported).last().id), profile);
}
