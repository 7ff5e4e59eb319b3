// Edit ▸ Preferences on the real main window (offscreen), against the real engine on the tiny
// model: the shortcut opens the dialog; theme and chat font size apply at once — the palette
// reaches the chat's code blocks and the profiler's charts, both ways; an engine change reloads
// the model; Cancel leaves QSettings as it was; a data folder that cannot be written is refused
// by name; Restore Defaults restores them; the settings survive a new window, and the default
// sampling reaches a reply. Settings live in a temporary home (QStandardPaths test mode).
// ES_SCREENSHOT_DIR=<dir> saves the dialog and the dark main window there.
#include "app_settings.h"
#include "appearance.h"
#include "chat_pane.h"
#include "chat_store.h"
#include "composer.h"
#include "conversation_sidebar.h"
#include "engine_session.h"
#include "main_window.h"
#include "message_widget.h"
#include "preferences_dialog.h"
#include "profiler_panel.h"
#include "sampling_controls.h"
#include "settings_keys.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QDockWidget>
#include <QDoubleSpinBox>
#include <QElapsedTimer>
#include <QLineEdit>
#include <QMenuBar>
#include <QMessageBox>
#include <QPushButton>
#include <QSettings>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTabWidget>
#include <QTemporaryDir>
#include <QTextBlock>
#include <QTextBrowser>
#include <QTimer>
#include <QtTest>

#include <qcustomplot.h>

#include <functional>

using namespace es;

namespace {

void saveGrab(QWidget *w, const QString &fileName) {
    const QString dir = qEnvironmentVariable("ES_SCREENSHOT_DIR");
    if (dir.isEmpty()) return;
    QVERIFY(w->grab().save(dir + u'/' + fileName));
}

// Every key and value of the app's QSettings.
QMap<QString, QVariant> snapshot() {
    QSettings s;
    QMap<QString, QVariant> all;
    for (const QString &k : s.allKeys()) all.insert(k, s.value(k));
    return all;
}

template <class T> T *child(QWidget *w, const char *name) {
    T *found = w->findChild<T *>(QLatin1String(name));
    if (!found) qWarning("no %s named %s", T::staticMetaObject.className(), name);
    return found;
}

void choose(QComboBox *box, const QString &key) { box->setCurrentIndex(box->findData(key)); }

void press(PreferencesDialog *d, QDialogButtonBox::StandardButton which) {
    d->findChild<QDialogButtonBox *>()->button(which)->click();
}

// Answers the next message box within 10 s: records its text and closes it.
class MessageBoxCatcher : public QObject {
public:
    MessageBoxCatcher() {
        m_clock.start();
        m_timer.setInterval(20);
        connect(&m_timer, &QTimer::timeout, this, [this] {
            if (auto *box = qobject_cast<QMessageBox *>(QApplication::activeModalWidget())) {
                text = box->text();
                box->close();
                m_timer.stop();
            } else if (m_clock.elapsed() > 10000) {
                m_timer.stop();
            }
        });
        m_timer.start();
    }
    QString text;

private:
    QTimer m_timer;
    QElapsedTimer m_clock;
};

bool darkColor(const QColor &c) { return c.lightness() < 128; }

// What a chart paints behind everything (a corner of its rendering, outside the axes).
QColor plotBackground(QCustomPlot *p) { return p->toPixmap(120, 80).toImage().pixelColor(1, 1); }

} // namespace

class TestSettingsDialog : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void init();
    void cleanup();
    void shortcutOpensTheDialog();
    void themeAndFontSizeApplyLive();
    void engineChangeReloadsTheModel();
    void cancelLeavesSettingsUntouched();
    void invalidDataFolderIsRefused();
    void restoreDefaults();
    void settingsSurviveANewWindow();

private:
    // Opens the dialog with the Preferences shortcut and runs act on it; the dialog is closed
    // (rejected) after act if act left it open. False when no dialog came within 10 s.
    bool withDialog(const std::function<void(PreferencesDialog *)> &act);
    void newWindow();
    qint64 conversationWithCode();
    void sendAndWait(const QString &text);

    QTemporaryDir m_home;
    std::unique_ptr<ChatStore> m_store;
    std::unique_ptr<EngineSession> m_session;
    std::unique_ptr<MainWindow> m_window;
};

void TestSettingsDialog::initTestCase() {
    QVERIFY(m_home.isValid());
    qputenv("HOME", m_home.path().toUtf8());
    qunsetenv("XDG_CONFIG_HOME");
    qunsetenv("GTK_THEME");
    QStandardPaths::setTestModeEnabled(true); // QSettings and the data folder under the temporary home
    QCoreApplication::setOrganizationName("ExpertScopeTests");
    QCoreApplication::setApplicationName("test_settings_dialog");
    // The desktop's look is captured before the first theme change; Fusion is the same everywhere.
    QApplication::setStyle(QStringLiteral("Fusion"));
}

void TestSettingsDialog::init() {
    QSettings().clear();
    Appearance::apply(AppSettings::load()); // every case starts with the defaults on screen
    m_store = std::make_unique<ChatStore>();
    QVERIFY(m_store->open(":memory:").ok());
    m_session = std::make_unique<EngineSession>(EngineSessionOptions{.backend = "cpu", .defaultMaxTokens = 12});
    QSignalSpy loaded(m_session.get(), &EngineSession::modelLoaded);
    m_session->loadModel(QStringLiteral(ES_TEST_DATA_DIR) + "/moe-shared");
    QVERIFY(loaded.wait(30000));
    newWindow();
}

void TestSettingsDialog::newWindow() {
    m_window = std::make_unique<MainWindow>(m_store.get(), m_session.get());
    m_window->resize(1400, 860);
    m_window->show();
    QApplication::setActiveWindow(m_window.get());
    QVERIFY(QTest::qWaitForWindowActive(m_window.get()));
}

void TestSettingsDialog::cleanup() {
    m_window.reset();
    m_session.reset();
    m_store.reset();
}

bool TestSettingsDialog::withDialog(const std::function<void(PreferencesDialog *)> &act) {
    QAction *action = nullptr;
    for (QAction *a : m_window->findChildren<QAction *>())
        if (a->menuRole() == QAction::PreferencesRole) action = a;
    if (!action) return false;
    QApplication::setActiveWindow(m_window.get()); // the shortcut goes to the active window
    if (!QTest::qWaitForWindowActive(m_window.get())) return false;
    bool ran = false;
    QElapsedTimer clock;
    clock.start();
    QTimer poll;
    poll.setInterval(20);
    connect(&poll, &QTimer::timeout, this, [&] {
        auto *dialog = qobject_cast<PreferencesDialog *>(QApplication::activeModalWidget());
        if (!dialog) {
            if (clock.elapsed() > 10000) poll.stop();
            return;
        }
        poll.stop();
        ran = true;
        act(dialog);
        if (dialog->isVisible()) dialog->reject();
    });
    poll.start();
    QTest::keySequence(m_window.get(), action->shortcut()); // returns when the dialog has closed
    poll.stop();
    return ran;
}

qint64 TestSettingsDialog::conversationWithCode() {
    const qint64 conv = *m_store->createConversation("Routing in code");
    const qint64 q = *m_store->addMessage(conv, std::nullopt, MessageRole::User, "How does a router pick experts?");
    m_store->addMessage(conv, q, MessageRole::Assistant,
                        "It scores every expert and keeps the best *k*:\n\n```python\n"
                        "scores = softmax(x @ w_gate)\ntop = scores.topk(k)\n```\n\nThe rest see nothing of the token.");
    m_window->sidebar()->selectConversation(conv);
    m_window->currentPane()->setConversation(conv);
    return conv;
}

void TestSettingsDialog::sendAndWait(const QString &text) {
    ChatPane *pane = m_window->currentPane();
    QSignalSpy done(m_session.get(), &EngineSession::replyFinished);
    pane->composer()->setText(text);
    pane->composer()->editor()->setFocus();
    QTest::keyClick(pane->composer()->editor(), Qt::Key_Return);
    QVERIFY(done.wait(30000));
    QTRY_VERIFY(!pane->isGenerating());
}

void TestSettingsDialog::shortcutOpensTheDialog() {
    QAction *action = nullptr;
    for (QAction *a : m_window->findChildren<QAction *>())
        if (a->menuRole() == QAction::PreferencesRole) action = a;
    QVERIFY(action);
    // The platform's Preferences key, or Ctrl+, where the platform has none.
    const QList<QKeySequence> platform = QKeySequence::keyBindings(QKeySequence::Preferences);
    QCOMPARE(action->shortcut(), platform.isEmpty() ? QKeySequence(Qt::CTRL | Qt::Key_Comma) : platform.first());
    QString title;
    QVERIFY(withDialog([&](PreferencesDialog *d) {
        title = d->windowTitle();
        QVERIFY(child<QComboBox>(d, "backendCombo"));
        // The engine fields show the session as it runs.
        QCOMPARE(child<QComboBox>(d, "backendCombo")->currentData().toString(), QString("cpu"));
    }));
    QCOMPARE(title, QString("Preferences"));
}

void TestSettingsDialog::themeAndFontSizeApplyLive() {
    m_window->profilerDock()->show();
    sendAndWait("Which experts answer this?"); // data on the profiler's charts
    conversationWithCode();
    QTRY_COMPARE(m_window->currentPane()->messageWidgets().size(), 2);
    auto *body = m_window->currentPane()->messageWidgets().at(1)->findChild<QTextBrowser *>();
    QVERIFY(body);
    const auto codeShade = [body]() -> QColor {
        for (QTextBlock b = body->document()->begin(); b.isValid(); b = b.next())
            if (b.blockFormat().hasProperty(QTextFormat::BlockCodeFence)) return b.blockFormat().background().color();
        return {};
    };
    const auto codeSize = [body]() -> double {
        for (QTextBlock b = body->document()->begin(); b.isValid(); b = b.next())
            if (b.blockFormat().hasProperty(QTextFormat::BlockCodeFence)) return b.begin().fragment().charFormat().fontPointSize();
        return 0;
    };
    QVERIFY(codeShade().isValid());
    QVERIFY(!darkColor(codeShade()));
    const int before = m_window->currentPane()->messageWidgets().first()->font().pointSize();

    QVERIFY(withDialog([&](PreferencesDialog *d) {
        choose(child<QComboBox>(d, "themeCombo"), "dark");
        child<QSpinBox>(d, "fontSizeSpin")->setValue(before + 5);
        press(d, QDialogButtonBox::Apply);
        // Applied while the dialog is still open, and the dialog itself turns dark.
        QVERIFY(darkColor(d->palette().color(QPalette::Window)));
        saveGrab(d, "settings-dialog.png");
        d->findChild<QTabWidget *>()->setCurrentIndex(2);
        saveGrab(d, "settings-dialog-interface.png");
        press(d, QDialogButtonBox::Ok);
    }));
    QCOMPARE(QSettings().value(settings_keys::kTheme).toString(), QString("dark"));
    QCOMPARE(QSettings().value(settings_keys::kChatFontSize).toInt(), before + 5);
    // The window, the chat's messages and code blocks, and the message box.
    QVERIFY(darkColor(m_window->palette().color(QPalette::Window)));
    for (MessageWidget *w : m_window->currentPane()->messageWidgets()) {
        QCOMPARE(w->font().pointSize(), before + 5);
        QVERIFY(darkColor(w->palette().color(QPalette::Base)));
    }
    QCOMPARE(m_window->currentPane()->composer()->editor()->font().pointSize(), before + 5);
    QVERIFY2(darkColor(codeShade()), qPrintable(codeShade().name()));
    QCOMPARE(codeSize(), double(before + 5)); // code follows the chat font size too
    QVERIFY(codeShade() != body->palette().color(QPalette::Base)); // still apart from the prose
    // Every chart of the profiler: background, axes, grid and tick labels; colour scales too.
    const QList<QCustomPlot *> plots = m_window->profilerPanel()->findChildren<QCustomPlot *>();
    QVERIFY(plots.size() >= 4);
    int scales = 0;
    for (QCustomPlot *p : plots) {
        p->ensurePolished(); // a page not shown yet is coloured when it is
        QVERIFY(darkColor(plotBackground(p)));
        QVERIFY(!darkColor(p->xAxis->tickLabelColor()));
        QVERIFY(!darkColor(p->yAxis->basePen().color()));
        QVERIFY(!darkColor(p->xAxis->labelColor()));
        for (QCPLayoutElement *e : p->plotLayout()->elements(true))
            if (auto *scale = qobject_cast<QCPColorScale *>(e)) {
                ++scales;
                QVERIFY(!darkColor(scale->axis()->tickLabelColor()));
            }
    }
    QVERIFY(scales >= 1); // the routing heatmap's
    if (!qEnvironmentVariableIsEmpty("ES_SCREENSHOT_DIR")) {
        m_window->profilerPanel()->setCurrentTab(ProfilerPanel::Tab::Routing);
        QTest::qWait(300); // the panel's refresh timer draws the page
        saveGrab(m_window.get(), "app-dark.png");
    }

    // And back to light, live as well.
    QVERIFY(withDialog([&](PreferencesDialog *d) {
        choose(child<QComboBox>(d, "themeCombo"), "light");
        child<QSpinBox>(d, "fontSizeSpin")->setValue(before);
        press(d, QDialogButtonBox::Ok);
    }));
    QVERIFY(!darkColor(m_window->palette().color(QPalette::Window)));
    QVERIFY(!darkColor(codeShade()));
    QCOMPARE(m_window->currentPane()->messageWidgets().first()->font().pointSize(), before);
    for (QCustomPlot *p : plots) {
        QVERIFY(!darkColor(plotBackground(p)));
        QVERIFY(darkColor(p->xAxis->tickLabelColor()));
    }
}

void TestSettingsDialog::engineChangeReloadsTheModel() {
    QCOMPARE(m_session->modelInfo().precision, QString("fp32"));
    QSignalSpy loaded(m_session.get(), &EngineSession::modelLoaded);
    QVERIFY(withDialog([&](PreferencesDialog *d) {
        choose(child<QComboBox>(d, "precisionCombo"), "fp8");
        child<QSpinBox>(d, "threadsSpin")->setValue(1);
        press(d, QDialogButtonBox::Ok);
    }));
    QVERIFY(loaded.count() == 1 || loaded.wait(30000));
    QCOMPARE(m_session->modelInfo().precision, QString("fp8-e4m3 (emulated)"));
    QCOMPARE(m_session->options().threads, 1);
    QCOMPARE(QSettings().value(settings_keys::kPrecision).toString(), QString("fp8"));
    QCOMPARE(QSettings().value(settings_keys::kThreads).toInt(), 1);
    QVERIFY(m_window->statusText().contains("fp8"));
    // The Model menu's check follows the change.
    for (QMenu *menu : m_window->menuBar()->findChildren<QMenu *>()) {
        if (menu->title() != "&Precision") continue;
        emit menu->aboutToShow();
        for (QAction *a : menu->actions())
            if (a->isChecked()) QVERIFY2(a->text().startsWith("FP8"), qPrintable(a->text()));
    }
    // Nothing engine-related changed: no reload.
    loaded.clear();
    QVERIFY(withDialog([&](PreferencesDialog *d) {
        choose(child<QComboBox>(d, "themeCombo"), "light");
        press(d, QDialogButtonBox::Ok);
    }));
    QVERIFY(!loaded.wait(300));
    QVERIFY(m_session->isModelLoaded());
}

void TestSettingsDialog::cancelLeavesSettingsUntouched() {
    QSettings().setValue(settings_keys::kChatFontSize, 11);
    QSettings().setValue(settings_keys::kTheme, "light");
    const QMap<QString, QVariant> before = snapshot();
    const QColor window = QApplication::palette().color(QPalette::Window);
    QTemporaryDir elsewhere;
    QVERIFY(withDialog([&](PreferencesDialog *d) {
        choose(child<QComboBox>(d, "themeCombo"), "dark");
        choose(child<QComboBox>(d, "languageCombo"), "zh_CN");
        choose(child<QComboBox>(d, "precisionCombo"), "bf16");
        child<QSpinBox>(d, "fontSizeSpin")->setValue(20);
        child<QSpinBox>(d, "gpuShareSpin")->setValue(50);
        child<QLineEdit>(d, "dataFolderEdit")->setText(elsewhere.path());
        child<QCheckBox>(d, "temperatureCheck")->setChecked(true);
        child<QDoubleSpinBox>(d, "temperatureSpin")->setValue(0.2);
        press(d, QDialogButtonBox::Cancel);
        QVERIFY(!d->isVisible());
    }));
    QCOMPARE(snapshot(), before);
    QCOMPARE(QApplication::palette().color(QPalette::Window), window);
    QCOMPARE(m_session->options().precision, QString("auto"));
}

void TestSettingsDialog::invalidDataFolderIsRefused() {
    QTemporaryDir dir;
    const QString file = dir.filePath("not-a-folder");
    QFile f(file);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.close();
    // Each refusal names the field; a folder that can be written to (or made) passes.
    QVERIFY(PreferencesDialog::checkDataFolder(file).startsWith("Data folder:"));
    QVERIFY(PreferencesDialog::checkDataFolder(file + "/below").contains("cannot be created"));
    QVERIFY(PreferencesDialog::checkDataFolder("relative/path").contains("not a full path"));
    QCOMPARE(PreferencesDialog::checkDataFolder(dir.path()), QString());
    QCOMPARE(PreferencesDialog::checkDataFolder(dir.filePath("new/sub")), QString());
    QCOMPARE(PreferencesDialog::checkDataFolder(QString()), QString()); // the default folder

    const QMap<QString, QVariant> before = snapshot();
    QString refused;
    bool stayedOpen = false;
    QVERIFY(withDialog([&](PreferencesDialog *d) {
        child<QLineEdit>(d, "dataFolderEdit")->setText(file + "/conversations");
        choose(child<QComboBox>(d, "themeCombo"), "dark"); // not saved either: nothing is
        MessageBoxCatcher catcher;
        press(d, QDialogButtonBox::Ok);
        refused = catcher.text;
        stayedOpen = d->isVisible();
        QCOMPARE(d->focusWidget(), child<QLineEdit>(d, "dataFolderEdit")); // the field refused
        QCOMPARE(d->findChild<QTabWidget *>()->currentIndex(), 3);        // on its page
        press(d, QDialogButtonBox::Cancel);
    }));
    QVERIFY2(refused.startsWith("Data folder:") && refused.contains("cannot be created"), qPrintable(refused));
    QVERIFY(stayedOpen);
    QCOMPARE(snapshot(), before);
    QVERIFY(!darkColor(QApplication::palette().color(QPalette::Window)));
}

void TestSettingsDialog::restoreDefaults() {
    AppSettings changed;
    changed.theme = "dark";
    changed.chatFontSize = 15;
    changed.threads = 1;
    changed.language = "zh_CN";
    changed.sampling.temperature = 0.3;
    changed.sampling.maxTokens = 64;
    changed.save();
    QVERIFY(withDialog([&](PreferencesDialog *d) {
        QCOMPARE(d->settings().sampling.temperature, std::optional<double>(0.3));
        press(d, QDialogButtonBox::RestoreDefaults);
        QCOMPARE(child<QComboBox>(d, "themeCombo")->currentData().toString(), QString("system"));
        QCOMPARE(child<QComboBox>(d, "languageCombo")->currentData().toString(), QString());
        QVERIFY(child<QSpinBox>(d, "fontSizeSpin")->text().startsWith("System"));
        QVERIFY(child<QSpinBox>(d, "threadsSpin")->text().startsWith("All cores"));
        QVERIFY(!child<QCheckBox>(d, "temperatureCheck")->isChecked());
        press(d, QDialogButtonBox::Ok);
    }));
    const AppSettings stored = AppSettings::load();
    AppSettings defaults;
    defaults.backend = stored.backend; // the dialog showed (and kept) the engine as it ran
    QCOMPARE(stored.theme, QString("system"));
    QCOMPARE(stored.chatFontSize, 0);
    QCOMPARE(stored.threads, 0);
    QVERIFY(stored.language.isEmpty());
    QVERIFY(!QSettings().contains(settings_keys::kLanguage));
    QCOMPARE(stored.sampling, SamplingParams{});
    QVERIFY(stored == defaults);
}

void TestSettingsDialog::settingsSurviveANewWindow() {
    QTemporaryDir data;
    QVERIFY(withDialog([&](PreferencesDialog *d) {
        child<QSpinBox>(d, "fontSizeSpin")->setValue(15);
        choose(child<QComboBox>(d, "themeCombo"), "dark");
        child<QLineEdit>(d, "dataFolderEdit")->setText(data.path());
        child<QCheckBox>(d, "temperatureCheck")->setChecked(true);
        child<QDoubleSpinBox>(d, "temperatureSpin")->setValue(0.25);
        press(d, QDialogButtonBox::Ok);
    }));
    QCOMPARE(settings_keys::dataFolder(), QDir::cleanPath(data.path())); // where the next start opens the database
    // A new window (and, as at a start, the stored appearance applied before it) shows them all.
    m_window.reset();
    Appearance::apply(AppSettings::load());
    newWindow();
    QVERIFY(darkColor(m_window->palette().color(QPalette::Window)));
    QVERIFY(withDialog([&](PreferencesDialog *d) {
        QCOMPARE(child<QSpinBox>(d, "fontSizeSpin")->value(), 15);
        QCOMPARE(child<QComboBox>(d, "themeCombo")->currentData().toString(), QString("dark"));
        QCOMPARE(QDir::fromNativeSeparators(child<QLineEdit>(d, "dataFolderEdit")->text()), QDir::cleanPath(data.path()));
        QCOMPARE(d->settings().sampling.temperature, std::optional<double>(0.25));
    }));
    // The default sampling reaches a reply (and is stored with it) when nothing else sets it.
    sendAndWait("Hello");
    const Message reply = m_store->activePath(*m_window->currentPane()->conversationId()).last();
    QCOMPARE(reply.role, MessageRole::Assistant);
    QCOMPARE(reply.generation.sampling.temperature, std::optional<double>(0.25));
    QTRY_COMPARE(m_window->currentPane()->messageWidgets().last()->font().pointSize(), 15); // once shown
}

QTEST_MAIN(TestSettingsDialog)
#include "test_settings_dialog.moc"
