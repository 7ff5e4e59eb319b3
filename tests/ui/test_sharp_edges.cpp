// The app's sharp edges, each driven through the real widgets (offscreen) against the real engine
// on the tiny model and an in-memory store: keys typed into the composer and the search field,
// the Model menu's choices, a model folder that is only half there, a conversation deleted or left
// while its reply streams, SIGTERM to the running app, the small visible things (copy feedback,
// code blocks, titles, dialogs), exports, the profiler's consistency and the window's layout.
// Each test is named after the edge it guards.
#include "chat_pane.h"
#include "chat_store.h"
#include "composer.h"
#include "connect_server_dialog.h"
#include "conversation_list_model.h"
#include "conversation_sidebar.h"
#include "desktop_screen.h"
#include "engine_session.h"
#include "main_window.h"
#include "compare_view.h"
#include "export_menu.h"
#include "latency_view.h"
#include "memory_usage_view.h"
#include "message_widget.h"
#include "preset_bar.h"
#include "profiler_panel.h"
#include "report_data.h"
#include "report_writers.h"
#include "routing_view.h"

#include <qcustomplot.h>

#include <QAbstractButton>
#include <QClipboard>
#include <QLabel>
#include <QPushButton>
#include <QTextBlock>
#include <QTextBrowser>
#include <QToolButton>
#include <QTranslator>
#include <QAction>
#include <QApplication>
#include <QDesktopServices>
#include <QDockWidget>
#include <QFileDialog>
#include <QHeaderView>
#include <QScreen>
#include <QRegularExpression>
#include <QSplitter>
#include <QStandardPaths>
#include <QTableWidget>
#include <QTabWidget>
#include <QLineEdit>
#include <QListView>
#include <QMenu>
#include <QMenuBar>
#include <QMessageBox>
#include <QProcess>
#include <QSqlDatabase>
#include <QSqlQuery>
#include <QSettings>
#include <QSignalSpy>
#include <QStatusBar>
#include <QTemporaryDir>
#include <QTimer>
#include <QtTest>

#include <functional>

#include <signal.h>

using namespace es;

namespace {

const QString kModel = QStringLiteral(ES_TEST_DATA_DIR "/moe-shared");

// The menu-bar action whose text (without '&' and shortcut) starts with `path`'s last element,
// under the menus named by the elements before it.
QAction *menuAction(QMainWindow *window, const QStringList &path) {
    QList<QAction *> actions = window->menuBar()->actions();
    for (qsizetype i = 0; i < path.size(); ++i) {
        QAction *found = nullptr;
        for (QAction *a : actions)
            if (a->text().remove('&').section('\t', 0, 0).startsWith(path[i])) found = a;
        if (!found) return nullptr;
        if (i + 1 == path.size()) return found;
        if (!found->menu()) return nullptr;
        actions = found->menu()->actions();
    }
    return nullptr;
}

// Answers every modal dialog that opens while it lives: records its title and text, then
// presses `button` (a QMessageBox's standard button) or rejects it.
class DialogAnswerer : public QObject {
public:
    explicit DialogAnswerer(QMessageBox::StandardButton button = QMessageBox::NoButton) : m_button(button) {
        m_timer.setInterval(20);
        connect(&m_timer, &QTimer::timeout, this, [this] {
            QWidget *w = QApplication::activeModalWidget();
            if (!w) return;
            if (auto *box = qobject_cast<QMessageBox *>(w)) {
                seen << QStringLiteral("%1: %2").arg(box->windowTitle(), box->text());
                if (m_button != QMessageBox::NoButton && box->button(m_button)) box->button(m_button)->click();
                else box->reject();
            } else if (auto *dialog = qobject_cast<QDialog *>(w)) {
                seen << dialog->windowTitle();
                dialog->reject();
            }
        });
        m_timer.start();
    }
    QStringList seen;

private:
    QMessageBox::StandardButton m_button;
    QTimer m_timer;
};

} // namespace

class TestSharpEdges : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void init();
    void cleanup();
    void edge2_ctrlDelWhileTypingKeepsTheConversation();
    void edge1_searchKeepsFocusAndSendsNothing();
    void edge4_halfValidFolderKeepsTheModel();
    void edge3_unusableBackendIsDisabledAndNeverSticks();
    void edge9_replyInProgressIsStoppedAndSaidSo();
    void edge5_sigtermQuitsCleanly();
    void edge10_smallVisibleThings();
    void edge6_layoutLeavesTheChatItsRoom();
    void edge7_profilerIsConsistent();
    void edge8_exportsSayWhereTheyWent();

private:
    // The expertscope binary with `args`, offscreen, its settings and data under `home`; killed
    // after timeoutMs.
    struct AppRun {
        bool finished = false;
        int exitCode = -1;
        QString out, err;
    };
    static QProcessEnvironment appEnvironment(const QString &home);
    static AppRun runApp(const QString &home, const QStringList &args, int timeoutMs = 60000);
    ChatPane *pane() const { return m_window->currentPane(); }
    void activate();
    qint64 conversationWith(const QString &title, const QString &userText);

    QTemporaryDir m_home;
    std::unique_ptr<ChatStore> m_store;
    std::unique_ptr<EngineSession> m_session;
    std::unique_ptr<MainWindow> m_window;
};

void TestSharpEdges::initTestCase() {
    QVERIFY(m_home.isValid());
    qputenv("HOME", m_home.path().toUtf8()); // QSettings of the test stay out of the real home
    qputenv("XDG_CONFIG_HOME", m_home.filePath(QStringLiteral("config")).toUtf8());
    QCoreApplication::setOrganizationName("ExpertScopeTests");
    QCoreApplication::setApplicationName("test_sharp_edges");
}

void TestSharpEdges::init() {
    QSettings().clear();
    m_store = std::make_unique<ChatStore>();
    QVERIFY(m_store->open(":memory:").ok());
    m_session = std::make_unique<EngineSession>(EngineSessionOptions{.backend = "cpu", .defaultMaxTokens = 24});
    QSignalSpy loaded(m_session.get(), &EngineSession::modelLoaded);
    m_session->loadModel(kModel);
    QVERIFY(loaded.wait(30000));
    m_window = std::make_unique<MainWindow>(m_store.get(), m_session.get());
    m_window->show();
    QVERIFY(QTest::qWaitForWindowExposed(m_window.get()));
}

void TestSharpEdges::cleanup() {
    m_window.reset();
    m_session.reset();
    m_store.reset();
}

QProcessEnvironment TestSharpEdges::appEnvironment(const QString &home) {
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert(QStringLiteral("HOME"), home);
    env.insert(QStringLiteral("XDG_DATA_HOME"), home + QStringLiteral("/data"));
    env.insert(QStringLiteral("XDG_CONFIG_HOME"), home + QStringLiteral("/config"));
    env.insert(QStringLiteral("XDG_CACHE_HOME"), home + QStringLiteral("/cache"));
    env.insert(QStringLiteral("QT_QPA_PLATFORM"), QStringLiteral("offscreen"));
    return env;
}

TestSharpEdges::AppRun TestSharpEdges::runApp(const QString &home, const QStringList &args, int timeoutMs) {
    QProcess app;
    app.setProcessEnvironment(appEnvironment(home));
    app.start(QStringLiteral(ES_APP_PATH), args);
    AppRun run;
    run.finished = app.waitForStarted(10000) && app.waitForFinished(timeoutMs);
    if (!run.finished) app.kill();
    app.waitForFinished(10000);
    run.exitCode = app.exitStatus() == QProcess::NormalExit ? app.exitCode() : -1;
    run.out = QString::fromLocal8Bit(app.readAllStandardOutput());
    run.err = QString::fromLocal8Bit(app.readAllStandardError());
    return run;
}

// Shortcuts reach only the active window.
void TestSharpEdges::activate() {
    m_window->activateWindow();
    QVERIFY(QTest::qWaitForWindowActive(m_window.get()));
}

qint64 TestSharpEdges::conversationWith(const QString &title, const QString &userText) {
    const qint64 id = *m_store->createConversation(title);
    const auto user = m_store->addMessage(id, std::nullopt, MessageRole::User, userText);
    m_store->addMessage(id, user, MessageRole::Assistant, QStringLiteral("An answer about ") + userText);
    return id;
}

// Edge 2: Ctrl+Del in the composer deletes a word, not the conversation; the list's Ctrl+Del
// deletes it, and Edit ▸ Undo delete is enabled exactly while it can restore it — also after the
// undo bar has gone.
void TestSharpEdges::edge2_ctrlDelWhileTypingKeepsTheConversation() {
    const qint64 conv = conversationWith(QStringLiteral("Keep me"), QStringLiteral("a question"));
    m_window->sidebar()->selectConversation(conv);
    pane()->setConversation(conv);
    activate();
    ComposerEdit *edit = pane()->composer()->editor();
    edit->setFocus();
    QTest::keyClicks(edit, QStringLiteral("hello world"));
    QTest::keyClick(edit, Qt::Key_Home);
    QTest::keyClick(edit, Qt::Key_Delete, Qt::ControlModifier);
    QVERIFY2(m_store->conversation(conv).has_value(), "Ctrl+Del in the composer deleted the conversation");
    QCOMPARE(pane()->conversationId(), std::optional<qint64>(conv));
    QCOMPARE(pane()->composer()->text(), QStringLiteral("world")); // the word and its space
    QTest::keyClick(edit, Qt::Key_Z, Qt::ControlModifier); // the composer's own undo
    QCOMPARE(pane()->composer()->text(), QStringLiteral("hello world"));

    QAction *undo = menuAction(m_window.get(), {QStringLiteral("Edit"), QStringLiteral("Undo delete")});
    QVERIFY(undo);
    QVERIFY2(!undo->isEnabled(), "Undo delete is enabled with nothing to undo");
    QListView *list = m_window->sidebar()->listView();
    list->setFocus();
    QTest::keyClick(list, Qt::Key_Delete, Qt::ControlModifier);
    QVERIFY(!m_store->conversation(conv).has_value());
    QVERIFY(undo->isEnabled());
    QVERIFY(undo->text().contains(QStringLiteral("Keep me")));
    m_window->sidebar()->expireUndoBar(); // what its timeout does
    QVERIFY(!m_window->sidebar()->undoBar()->isVisible());
    QVERIFY2(undo->isEnabled(), "the undo bar went and took the undo with it");
    QTest::keyClick(list, Qt::Key_Z, Qt::ControlModifier);
    QVERIFY2(m_store->conversation(conv).has_value(), "Ctrl+Z in the list did not restore the conversation");
    QCOMPARE(m_store->activePath(conv).size(), 2);
    QCOMPARE(pane()->conversationId(), std::optional<qint64>(conv));
    QVERIFY(!undo->isEnabled());
}

// Edge 1: typing in the search field filters the list and nothing else — the open conversation,
// the focus and the composer stay; Enter opens the first match and sends nothing.
void TestSharpEdges::edge1_searchKeepsFocusAndSendsNothing() {
    const qint64 welcome = conversationWith(QStringLiteral("Welcome to ExpertScope"), QStringLiteral("welcome"));
    const qint64 other = conversationWith(QStringLiteral("Zebras"), QStringLiteral("stripes"));
    m_window->sidebar()->selectConversation(other);
    pane()->setConversation(other);
    activate();
    pane()->composer()->editor()->setFocus();
    QTest::keyClick(m_window.get(), Qt::Key_F, Qt::ControlModifier);
    QLineEdit *search = m_window->sidebar()->searchField();
    QTRY_VERIFY(search->hasFocus());
    for (const QChar c : QStringLiteral("welc")) {
        QTest::keyClick(QApplication::focusWidget(), c.toLatin1(), Qt::NoModifier, 30);
        QApplication::processEvents();
    }
    QCOMPARE(search->text(), QStringLiteral("welc"));
    QVERIFY2(search->hasFocus(), "the search field lost the focus while typing");
    QCOMPARE(pane()->conversationId(), std::optional<qint64>(other));
    QVERIFY(pane()->composer()->text().isEmpty());
    QTest::keyClick(QApplication::focusWidget(), Qt::Key_Return);
    QCOMPARE(pane()->conversationId(), std::optional<qint64>(welcome)); // Enter opens the match
    QVERIFY(pane()->composer()->editor()->hasFocus());                   // ready for the next message
    QVERIFY(!pane()->isGenerating());
    QCOMPARE(m_store->activePath(welcome).size(), 2); // nothing was sent
    QCOMPARE(m_store->activePath(other).size(), 2);
    QVERIFY(pane()->composer()->text().isEmpty());
}

// Edge 4: a folder that cannot load is rejected before any question and before the loaded model
// is touched — weights missing, or only the tokenizer missing (which the memory estimate alone
// never read) — and the model in use stays loaded and answering.
void TestSharpEdges::edge4_halfValidFolderKeepsTheModel() {
    QTemporaryDir configOnly, noTokenizer;
    QVERIFY(QFile::copy(kModel + "/config.json", configOnly.filePath("config.json")));
    for (const char *name : {"config.json", "generation_config.json", "model.safetensors"})
        QVERIFY(QFile::link(kModel + "/" + name, noTokenizer.filePath(QLatin1String(name))));
    for (const auto &[dir, missing] : {std::pair{configOnly.path(), QStringLiteral("model.safetensors")},
                                       std::pair{noTokenizer.path(), QStringLiteral("tokenizer.model")}}) {
        QSignalSpy started(m_session.get(), &EngineSession::modelLoadStarted);
        DialogAnswerer answerer(QMessageBox::Yes); // "load anyway?" would be answered Yes
        m_window->loadModelFolder(dir);
        QTRY_COMPARE(answerer.seen.size(), 1);
        QVERIFY2(answerer.seen[0].contains(missing), qPrintable(answerer.seen.join('\n')));
        QVERIFY2(!answerer.seen[0].contains(QLatin1String("fit")), qPrintable(answerer.seen[0]));
        QCOMPARE(started.count(), 0);
        QVERIFY2(m_session->isModelLoaded(), "the model in use was unloaded for a folder that cannot load");
        QCOMPARE(m_session->modelInfo().dir, kModel);
        // The session itself refuses such a folder before unloading, whoever asks.
        QSignalSpy failed(m_session.get(), &EngineSession::modelLoadFailed);
        m_session->loadModel(dir);
        QTRY_COMPARE(failed.count(), 1);
        QVERIFY(failed.at(0).at(1).toString().contains(missing));
        QVERIFY(m_session->isModelLoaded());
    }
    QSignalSpy done(m_session.get(), &EngineSession::replyFinished);
    pane()->send(QStringLiteral("still there?"));
    QVERIFY(done.wait(30000));
}

// Edge 3: a backend that cannot run here is shown disabled with the reason; a saved choice of it
// does not stop later starts; and switching back reloads the model a failed load left behind.
void TestSharpEdges::edge3_unusableBackendIsDisabledAndNeverSticks() {
    const EngineSession::BackendAvailability cuda = EngineSession::backendAvailability(QStringLiteral("cuda"));
    if (cuda.usable) QSKIP("CUDA can run here: no unusable backend to show");
    QVERIFY(!cuda.reason.isEmpty());
    QAction *choice = menuAction(m_window.get(), {QStringLiteral("Model"), QStringLiteral("Backend"),
                                                  QStringLiteral("CUDA")});
    QVERIFY(choice);
    QVERIFY2(!choice->isEnabled(), "Model ▸ Backend ▸ CUDA can be chosen without a usable GPU");
    QVERIFY2(choice->text().contains(cuda.reason), qPrintable(choice->text()));
    QCOMPARE(choice->toolTip(), cuda.reason);
    QVERIFY(menuAction(m_window.get(), {QStringLiteral("Model"), QStringLiteral("Backend"),
                                        QStringLiteral("CPU")})->isEnabled());

    // A session told to use CUDA fails to load; back on Automatic it loads that model.
    EngineSession session(EngineSessionOptions{.backend = QStringLiteral("cuda"), .defaultMaxTokens = 8});
    QSignalSpy failed(&session, &EngineSession::modelLoadFailed), loaded(&session, &EngineSession::modelLoaded);
    session.loadModel(kModel);
    QTRY_COMPARE_WITH_TIMEOUT(failed.count(), 1, 30000);
    EngineSessionOptions automatic = session.options();
    automatic.backend = QStringLiteral("auto");
    session.reconfigure(automatic);
    QVERIFY2(loaded.count() == 1 || loaded.wait(30000), "switching back to Automatic reloaded nothing");
    QCOMPARE(session.modelInfo().dir, kModel);

    // The app started with a saved backend=cuda starts on Automatic and answers.
    QTemporaryDir home;
    QVERIFY(QDir().mkpath(home.filePath(QStringLiteral("config/ExpertScope"))));
    {
        QSettings saved(home.filePath(QStringLiteral("config/ExpertScope/ExpertScope.conf")), QSettings::IniFormat);
        saved.setValue(QStringLiteral("engine/backend"), QStringLiteral("cuda"));
    }
    const AppRun run = runApp(home.path(), {QStringLiteral("--smoke-test"), QStringLiteral("--model"), kModel});
    QVERIFY(run.finished);
    QVERIFY2(run.exitCode == 0, qPrintable(run.err));
}

// Edge 9: a reply in progress stopped by leaving its conversation or deleting it is said so in the
// status bar and saved as stopped — no internal error about a message that no longer exists, and
// undoing the delete brings the stopped reply back.
void TestSharpEdges::edge9_replyInProgressIsStoppedAndSaidSo() {
    ConversationSettings longReplies;
    longReplies.sampling.maxTokens = 4000;
    const qint64 conv = *m_store->createConversation(QStringLiteral("Streaming"), longReplies);
    const qint64 other = conversationWith(QStringLiteral("Other"), QStringLiteral("something else"));
    m_window->sidebar()->selectConversation(conv);
    pane()->setConversation(conv);
    QSignalSpy errors(pane(), &ChatPane::errorOccurred);
    QSignalSpy tokens(m_session.get(), &EngineSession::tokensGenerated);

    pane()->send(QStringLiteral("Write a lot"));
    QVERIFY(tokens.wait(30000));
    m_window->sidebar()->selectConversation(other);
    emit m_window->sidebar()->conversationSelected(other); // as a click in the list
    QCOMPARE(pane()->conversationId(), std::optional<qint64>(other));
    QVERIFY(!pane()->isGenerating());
    QVERIFY2(m_window->statusBar()->currentMessage().contains(QStringLiteral("Streaming")),
             qPrintable(m_window->statusBar()->currentMessage()));
    QCOMPARE(m_store->activePath(conv).last().finishReason, QStringLiteral("cancelled"));

    m_window->sidebar()->selectConversation(conv);
    emit m_window->sidebar()->conversationSelected(conv);
    tokens.clear();
    pane()->send(QStringLiteral("Write more"));
    QVERIFY(tokens.wait(30000));
    const qint64 reply = m_store->activePath(conv).last().id;
    m_window->sidebar()->deleteCurrent();
    QVERIFY(!m_store->conversation(conv).has_value());
    QVERIFY(!pane()->isGenerating());
    QTest::qWait(600); // past two checkpoint intervals: nothing may still write the deleted reply
    QVERIFY2(errors.isEmpty(), qPrintable(errors.isEmpty() ? QString() : errors.first().first().toString()));
    QVERIFY2(m_window->statusBar()->currentMessage().contains(QStringLiteral("deleted")),
             qPrintable(m_window->statusBar()->currentMessage()));
    m_window->sidebar()->undoDelete();
    const std::optional<Message> restored = m_store->message(reply);
    QVERIFY(restored.has_value());
    QCOMPARE(restored->state, MessageState::Complete);
    QCOMPARE(restored->finishReason, QStringLiteral("cancelled"));
    QVERIFY(!restored->content.isEmpty());
}

// Edge 5: SIGTERM to the running app (kill, a logout) while it writes a reply ends it cleanly: exit
// code 0, the window's state and the clean exit recorded — the next start is no crash and opens
// the model — and the reply saved as stopped, not left partial.
void TestSharpEdges::edge5_sigtermQuitsCleanly() {
    QTemporaryDir home;
    QProcess app;
    app.setProcessEnvironment(appEnvironment(home.path()));
    app.start(QStringLiteral(ES_APP_PATH), {QStringLiteral("--model"), kModel, QStringLiteral("--backend"),
                                            QStringLiteral("cpu"), QStringLiteral("--demo-prompt"),
                                            QStringLiteral("Write a long story")});
    QVERIFY(app.waitForStarted(10000));
    const QString database = home.filePath(QStringLiteral("data/ExpertScope/ExpertScope/expertscope.sqlite"));
    // Reads the replies' states while the app runs (SQLite's WAL lets a reader in).
    const auto replyStates = [&database] {
        QStringList states;
        {
            QSqlDatabase db = QSqlDatabase::addDatabase(QStringLiteral("QSQLITE"), QStringLiteral("peek"));
            db.setDatabaseName(database);
            db.setConnectOptions(QStringLiteral("QSQLITE_OPEN_READONLY"));
            if (db.open()) {
                QSqlQuery q(QStringLiteral("SELECT state FROM messages WHERE role = 'assistant' AND content != '' "
                                           "AND conversation_id IN (SELECT conversation_id FROM messages "
                                           "WHERE content = 'Write a long story')"),
                            db);
                while (q.next()) states << q.value(0).toString();
            }
            db.close();
        }
        QSqlDatabase::removeDatabase(QStringLiteral("peek"));
        return states;
    };
    QTRY_VERIFY_WITH_TIMEOUT(!replyStates().isEmpty() || app.state() != QProcess::Running, 60000);
    QCOMPARE(app.state(), QProcess::Running);
    ::kill(pid_t(app.processId()), SIGTERM);
    QVERIFY2(app.waitForFinished(30000), "the app did not end after SIGTERM");
    QCOMPARE(app.exitStatus(), QProcess::NormalExit);
    QCOMPARE(app.exitCode(), 0);
    const QStringList states = replyStates();
    QVERIFY(!states.isEmpty());
    QVERIFY2(!states.contains(QStringLiteral("partial")), qPrintable(states.join(',')));

    QSettings saved(home.filePath(QStringLiteral("config/ExpertScope/ExpertScope.conf")), QSettings::IniFormat);
    QCOMPARE(saved.value(QStringLiteral("session/running")).toBool(), false);
    QVERIFY(saved.contains(QStringLiteral("window/geometry")));
    QCOMPARE(saved.value(QStringLiteral("model/lastDir")).toString(), QDir(kModel).absolutePath());
}

// Edge 10: the small visible things — Copy says "Copied" and needs no symbol font, code blocks have
// a background, titles are text not markup, the rename dialog fits its title, Connect needs only
// an address and Disconnect exists, the last conversation reopens, --help needs no display, and
// the zh_CN catalogue has the strings it lacked.
void TestSharpEdges::edge10_smallVisibleThings() {
    Message m;
    m.id = 1;
    m.role = MessageRole::Assistant;
    m.content = QStringLiteral("Some code:\n\n```cpp\nint x = 1;\n```\n");
    MessageWidget message(m);
    message.resize(500, 300);
    message.show();
    QTextBrowser *body = message.findChild<QTextBrowser *>();
    QVERIFY(body);
    QVERIFY(body->toPlainText().contains(QStringLiteral("Copy code · cpp")));
    QVERIFY2(!body->toPlainText().contains(QChar(0x29C9)), "the copy link needs a symbol font");
    bool shaded = false;
    for (QTextBlock b = body->document()->begin(); b.isValid(); b = b.next())
        if (b.blockFormat().hasProperty(QTextFormat::BlockCodeFence))
            shaded = b.blockFormat().background().style() != Qt::NoBrush;
    QVERIFY2(shaded, "the code block has no background");
    QToolButton *copy = nullptr;
    for (auto *b : message.findChildren<QToolButton *>())
        if (b->text() == QStringLiteral("Copy")) copy = b;
    QVERIFY(copy);
    copy->click();
    QCOMPARE(QApplication::clipboard()->text(), m.content);
    QCOMPARE(message.statusText(), QStringLiteral("Copied"));

    const QString markup = QStringLiteral("<b>bold</b> & <i>co</i>");
    const qint64 conv = conversationWith(markup, QStringLiteral("question"));
    m_window->sidebar()->selectConversation(conv);
    pane()->setConversation(conv);
    bool plain = false;
    for (QLabel *l : pane()->findChildren<QLabel *>())
        if (l->text() == markup) plain = l->textFormat() == Qt::PlainText;
    QVERIFY2(plain, "the pane's header renders the conversation title as HTML");

    QTRY_COMPARE(m_window->sidebar()->currentConversation(), std::optional<qint64>(conv));
    bool renameFits = false;
    QTimer poll;
    poll.setInterval(20);
    QObject::connect(&poll, &QTimer::timeout, this, [this, &renameFits] {
        QDialog *d = m_window->sidebar()->renameDialog();
        if (!d || !d->isVisible()) return;
        renameFits = d->width() >= d->fontMetrics().horizontalAdvance(d->windowTitle()) + 100;
        d->reject();
    });
    poll.start();
    m_window->sidebar()->renameCurrent();
    poll.stop();
    QVERIFY2(renameFits, "the rename dialog is narrower than its title");

    ConnectServerDialog connect;
    connect.urlEdit()->clear();
    QTest::keyClicks(connect.urlEdit(), QStringLiteral("http://127.0.0.1:9"));
    QVERIFY2(connect.connectButton()->isEnabled(), "Connect waits for Fetch models");
    QAction *disconnect = menuAction(m_window.get(), {QStringLiteral("Model"), QStringLiteral("Disconnect")});
    QVERIFY2(disconnect, "no Model ▸ Disconnect");
    QVERIFY(!disconnect->isEnabled()); // a local model: nothing to disconnect from

    m_window->close();
    m_window = std::make_unique<MainWindow>(m_store.get(), m_session.get());
    QCOMPARE(m_window->currentPane()->conversationId(), std::optional<qint64>(conv));

    QProcess help;
    QProcessEnvironment env = appEnvironment(m_home.path());
    env.insert(QStringLiteral("QT_QPA_PLATFORM"), QStringLiteral("xcb"));
    env.remove(QStringLiteral("DISPLAY"));
    env.remove(QStringLiteral("WAYLAND_DISPLAY"));
    help.setProcessEnvironment(env);
    help.start(QStringLiteral(ES_APP_PATH), {QStringLiteral("--help")});
    QVERIFY(help.waitForFinished(30000));
    QCOMPARE(help.exitStatus(), QProcess::NormalExit);
    QCOMPARE(help.exitCode(), 0);
    QVERIFY(QString::fromLocal8Bit(help.readAllStandardOutput()).contains(QStringLiteral("--model")));

    QTranslator zh;
    QVERIFY(zh.load(QStringLiteral(":/i18n/expertscope_zh_CN.qm")));
    for (const auto &[context, source] : {std::pair{"es::ChatPane", "remote"},
                                          {"es::RoutingView", "max/mean"},
                                          {"es::RoutingView", "H/ln E"},
                                          {"es::EngineSession", "this build has no CUDA backend"},
                                          {"es::EngineSession", "no usable CUDA device (%1)"}}) {
        const QString t = zh.translate(context, source);
        QVERIFY2(!t.isEmpty() && t != QLatin1String(source), source);
    }
}

// Records the URLs QDesktopServices::openUrl was asked to open (a file: handler for tests).
class UrlRecorder : public QObject {
    Q_OBJECT
public:
    QList<QUrl> opened;
public slots:
    void open(const QUrl &url) { opened << url; }
};

// Edge 6: the chat keeps most of the width — the profiler dock takes a bounded share at the default
// size; the preset chips wrap (every chip whole, at its size) with two panes and at 1024×700;
// adding panes never grows the window past the screen; the sidebar keeps its width when the undo
// bar appears.
void TestSharpEdges::edge6_layoutLeavesTheChatItsRoom() {
    // The default size (no saved geometry).
    QTRY_VERIFY(m_window->profilerDock()->isVisible());
    const QRect screen = m_window->screen()->availableGeometry();
    QVERIFY2(m_window->width() <= screen.width() && m_window->height() <= screen.height(),
             qPrintable(QStringLiteral("%1×%2 on a %3×%4 screen").arg(m_window->width()).arg(m_window->height())
                            .arg(screen.width()).arg(screen.height())));
    QCOMPARE(m_window->size(), QSize(1280, 800));
    const int dock = m_window->profilerDock()->width(), chat = pane()->width();
    QVERIFY2(dock <= 0.36 * m_window->width(),
             qPrintable(QStringLiteral("profiler %1 of %2 px").arg(dock).arg(m_window->width())));
    QVERIFY2(chat >= dock, qPrintable(QStringLiteral("chat %1 px, profiler %2 px").arg(chat).arg(dock)));

    // Every chip of every pane whole and at its own size, at 1024×700 with two panes.
    m_window->resize(1024, 700);
    m_window->addPane();
    QTest::qWait(50);
    const auto chipsWhole = [](ChatPane *p) {
        auto *bar = p->findChild<PresetBar *>();
        if (!bar || bar->presets().isEmpty()) return QStringLiteral("no preset bar");
        for (const Preset &preset : bar->presets()) {
            QToolButton *chip = bar->chip(preset.id);
            if (!chip->isVisible()) return QStringLiteral("%1 hidden").arg(preset.name);
            if (chip->width() < chip->sizeHint().width())
                return QStringLiteral("%1 squeezed to %2 of %3 px").arg(preset.name).arg(chip->width()).arg(chip->sizeHint().width());
            if (!bar->rect().contains(chip->geometry()))
                return QStringLiteral("%1 outside its bar").arg(preset.name);
            if (!chip->visibleRegion().boundingRect().size().isValid() ||
                chip->visibleRegion().boundingRect().size() != chip->size())
                return QStringLiteral("%1 partly clipped").arg(preset.name);
        }
        return QString();
    };
    for (ChatPane *p : m_window->panes()) QTRY_COMPARE(chipsWhole(p), QString());

    // More panes: the window stays on the screen (and at the size the user gave it).
    for (int i = 0; i < 3; ++i) m_window->addPane();
    QTest::qWait(50);
    QVERIFY2(m_window->width() <= std::max(1024, screen.width()) && m_window->width() <= 1024,
             qPrintable(QStringLiteral("the window grew to %1 px").arg(m_window->width())));
    while (m_window->panes().size() > 1) {
        m_window->closeCurrentPane();
        QApplication::processEvents();
    }

    // The sidebar keeps its width when a deleted conversation's undo bar appears.
    const qint64 conv = conversationWith(QStringLiteral("A conversation with a rather long title that goes on and on"),
                                         QStringLiteral("question"));
    m_window->sidebar()->selectConversation(conv);
    QTest::qWait(50);
    const int sidebar = m_window->sidebar()->width();
    m_window->sidebar()->deleteCurrent();
    QTRY_VERIFY(m_window->sidebar()->undoBar()->isVisible());
    QTest::qWait(50);
    QCOMPARE(m_window->sidebar()->width(), sidebar);
}

// Edge 7: the profiler agrees with itself — a new model drops the old model's token strip; a click
// on a message's header moves the heatmap to that message as well as the strip; without figures
// (a remote server) phases and device memory read "not available", not 0; Compare drops a message
// of a conversation no longer open; tooltips say in words what a figure means before its formula;
// the expert axis' labels never run together.
void TestSharpEdges::edge7_profilerIsConsistent() {
    ProfilerPanel *panel = m_window->profilerPanel();
    panel->setCurrentTab(ProfilerPanel::Tab::Routing);
    QTRY_VERIFY(panel->isVisible());
    const qint64 first = *m_store->createConversation(QStringLiteral("First"));
    m_window->sidebar()->selectConversation(first);
    pane()->setConversation(first);
    QSignalSpy done(m_session.get(), &EngineSession::replyFinished);
    for (const QString &q : {QStringLiteral("one"), QStringLiteral("two")}) {
        pane()->send(q);
        QVERIFY(done.wait(30000));
        QTRY_VERIFY(!pane()->isGenerating());
    }
    panel->refresh();
    QTRY_VERIFY(panel->routingView()->stripPositions() > 0);

    // Another model: the last reply's strip (moe-shared's layers) is no longer shown.
    QSignalSpy loaded(m_session.get(), &EngineSession::modelLoaded);
    m_session->loadModel(QStringLiteral(ES_TEST_DATA_DIR "/moe-sharded"));
    QVERIFY(loaded.wait(30000));
    panel->refresh();
    QTRY_COMPARE(panel->routingView()->stripPositions(), 0);
    QVERIFY(panel->shownProfile().moeLayers.isEmpty());

    // A click on the first reply's header: the heatmap shows that message, not the live window.
    const QList<Message> path = m_store->activePath(first);
    const qint64 reply1 = path[1].id, reply2 = path[3].id;
    QCOMPARE(panel->routingView()->source(), RoutingView::Source::LiveWindow);
    bool clicked = false;
    for (MessageWidget *w : pane()->findChildren<MessageWidget *>())
        if (w->messageId() == reply1) {
            QTest::mouseClick(w, Qt::LeftButton, {}, QPoint(w->width() / 2, 5));
            clicked = true;
        }
    QVERIFY(clicked);
    QTRY_COMPARE(panel->selectedMessage(), std::optional<qint64>(reply1));
    QTRY_COMPARE(panel->routingView()->source(), RoutingView::Source::SelectedMessage);
    QVERIFY2(panel->routingView()->caption().contains(QStringLiteral("#%1").arg(reply1)),
             qPrintable(panel->routingView()->caption()));
    QVERIFY(panel->routingView()->stripPositions() > 0); // the stored message keeps its own strip

    // Compare: a pair picked in "First" goes when another conversation is shown.
    const qint64 second = *m_store->createConversation(QStringLiteral("Second"));
    panel->setCompareMessages(reply1, reply2);
    m_window->sidebar()->selectConversation(second);
    emit m_window->sidebar()->conversationSelected(second);
    QCOMPARE(pane()->conversationId(), std::optional<qint64>(second));
    for (const QString &q : {QStringLiteral("three"), QStringLiteral("four")}) {
        pane()->send(q);
        QVERIFY(done.wait(30000));
        QTRY_VERIFY(!pane()->isGenerating());
    }
    panel->setCurrentTab(ProfilerPanel::Tab::Compare);
    panel->refresh();
    QVERIFY(panel->compareA() && panel->compareB());
    for (const std::optional<qint64> side : {panel->compareA(), panel->compareB()})
        QCOMPARE(m_store->message(*side)->conversationId, second);

    // Expert axis labels of moe-sharded's shape (12 routed + 2 shared experts) in a narrow page
    // with a large font (a high-DPI or large-text desktop): clear of each other.
    RoutingView narrow;
    QCustomPlot *plot = narrow.heatmapPlot();
    QFont large = plot->xAxis->tickLabelFont();
    large.setPixelSize(16);
    plot->xAxis->setTickLabelFont(large);
    narrow.resize(330, 600);
    narrow.show();
    QVERIFY(QTest::qWaitForWindowExposed(&narrow));
    RoutingMatrix sharded;
    sharded.layers = {1, 2, 3};
    sharded.nExperts = 12;
    sharded.counts = QList<quint64>(3 * 12, 5);
    narrow.showMatrix(sharded, 4, 2, QStringLiteral("moe-sharded"));
    QTest::qWait(50);
    plot->replot();
    const auto ticker = qSharedPointerDynamicCast<QCPAxisTickerText>(plot->xAxis->ticker());
    QVERIFY(ticker);
    const QFontMetrics fm(plot->xAxis->tickLabelFont());
    QStringList labels;
    double lastRight = -1e9;
    for (auto it = ticker->ticks().cbegin(); it != ticker->ticks().cend(); ++it) {
        const double x = plot->xAxis->coordToPixel(it.key());
        const double w = fm.horizontalAdvance(it.value());
        QVERIFY2(x - w / 2 >= lastRight + 2, qPrintable(QStringLiteral("\"%1\" runs into the label before it at "
                                                                       "%2 px wide")
                                                            .arg(it.value())
                                                            .arg(plot->axisRect()->width())));
        lastRight = x + w / 2;
        labels << it.value();
    }
    QVERIFY(labels.contains(QStringLiteral("0")));
    QVERIFY(labels.contains(QStringLiteral("S0")));

    // Nothing measured (a remote server's reply and memory): "not available", not 0.
    MessageProfile remote;
    remote.tokenTimesUs = {1000, 2000, 3000};
    remote.ttftUs = 1000;
    panel->latencyView()->showReply(remote, 99, false);
    const QString latency = panel->latencyView()->summary();
    QVERIFY2(latency.contains(QStringLiteral("not available")) && !latency.contains(QStringLiteral("0%")),
             qPrintable(latency));
    panel->memoryView()->addSample(MemoryView{}, 1.0);
    const QString memory = panel->memoryView()->summary();
    QVERIFY2(memory.contains(QStringLiteral("not available")) && !memory.contains(QStringLiteral(" 0 total")),
             qPrintable(memory));

    // Tooltips: a sentence in words first, formulas after.
    const auto inWords = [](const QString &tip) {
        const QString first = tip.section(QLatin1Char('\n'), 0, 0);
        static const QRegularExpression formula(QStringLiteral("[=/Σ#→‖·]"));
        return !first.contains(formula) && first.split(QLatin1Char(' '), Qt::SkipEmptyParts).size() >= 4;
    };
    QStringList formulaOnly;
    for (QWidget *w : panel->findChildren<QWidget *>())
        if (!w->toolTip().isEmpty() && !inWords(w->toolTip())) formulaOnly << w->toolTip();
    const QTableWidget *table = panel->routingView()->balanceTable();
    for (int c = 0; c < table->columnCount(); ++c)
        if (!inWords(table->horizontalHeaderItem(c)->toolTip())) formulaOnly << table->horizontalHeaderItem(c)->toolTip();
    QVERIFY2(formulaOnly.isEmpty(), qPrintable(formulaOnly.join(QStringLiteral("\n---\n"))));
}

// Edge 8: exports say where they went — "Saved to …" in the status bar with Open and Show folder;
// the save dialog opens in the last export folder (else Documents) with a name made of the
// conversation's title and date; a report names the backend, device, driver and model hash.
void TestSharpEdges::edge8_exportsSayWhereTheyWent() {
    QTemporaryDir out;
    const qint64 conv = *m_store->createConversation(QStringLiteral("Rivers: of/the world?"));
    m_window->sidebar()->selectConversation(conv);
    pane()->setConversation(conv);
    QSignalSpy done(m_session.get(), &EngineSession::replyFinished);
    pane()->send(QStringLiteral("name a river"));
    QVERIFY(done.wait(30000));
    QTRY_VERIFY(!pane()->isGenerating());
    const QString date = m_store->conversation(conv)->updatedAt.toLocalTime().date().toString(Qt::ISODate);

    // The dialog: Documents (nothing exported yet) and the title's name with the date.
    QAction *markdown = menuAction(m_window.get(), {QStringLiteral("File"), QStringLiteral("Export conversation"),
                                                    QStringLiteral("As Markdown")});
    QVERIFY(markdown);
    const QString documents = QStandardPaths::writableLocation(QStandardPaths::DocumentsLocation);
    QVERIFY(QDir().mkpath(documents));
    QString dialogDir, dialogFile;
    bool save = true;
    QTimer poll;
    poll.setInterval(20);
    QObject::connect(&poll, &QTimer::timeout, this, [&] {
        auto *d = qobject_cast<QFileDialog *>(QApplication::activeModalWidget());
        if (!d) return;
        dialogDir = d->directory().absolutePath();
        dialogFile = d->selectedFiles().value(0);
        if (!save) return d->reject();
        d->setDirectory(out.path()); // the suggested name, in another folder
        static_cast<QDialog *>(d)->accept(); // QFileDialog::accept, protected there
    });
    poll.start();
    markdown->trigger();
    poll.stop();
    QCOMPARE(dialogDir, QDir(documents).absolutePath());
    QCOMPARE(QFileInfo(dialogFile).fileName(), QStringLiteral("Rivers of the world %1.md").arg(date));
    const QString firstPath = out.filePath(QFileInfo(dialogFile).fileName());
    QVERIFY(QFileInfo::exists(firstPath));

    // Saved to …, with Open and Show folder.
    ExportMenu *exports = m_window->exportMenu();
    QWidget *notice = exports->savedNotice();
    QVERIFY(notice);
    QVERIFY(notice->isVisible());
    QVERIFY(m_window->statusBar()->isAncestorOf(notice));
    bool said = false;
    for (QLabel *l : notice->findChildren<QLabel *>()) said = said || l->text() == QStringLiteral("Saved to ") + firstPath;
    QVERIFY(said);
    UrlRecorder urls;
    QDesktopServices::setUrlHandler(QStringLiteral("file"), &urls, "open");
    for (QToolButton *b : notice->findChildren<QToolButton *>()) b->click();
    QDesktopServices::unsetUrlHandler(QStringLiteral("file"));
    QCOMPARE(urls.opened, (QList<QUrl>{QUrl::fromLocalFile(firstPath), QUrl::fromLocalFile(out.path())}));

    // The next dialog opens where the last export went.
    save = false;
    poll.start();
    markdown->trigger();
    poll.stop();
    QCOMPARE(dialogDir, QDir(out.path()).absolutePath());

    // A report names the machine and the model.
    const QString html = out.filePath(QStringLiteral("report.html"));
    QVERIFY2(exports->exportReport(false, QStringLiteral("html"), html), qPrintable(exports->lastError()));
    QFile f(html);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QString text = QString::fromUtf8(f.readAll());
    QVERIFY2(!text.contains(QStringLiteral("not recorded")), qPrintable(text.left(4000)));
    QVERIFY(text.contains(m_session->modelInfo().backend.toHtmlEscaped()));
    QVERIFY(text.contains(QStringLiteral("fnv1a64:")));
}

ES_DESKTOP_QTEST_MAIN(TestSharpEdges)
#include "test_sharp_edges.moc"
