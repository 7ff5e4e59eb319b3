// expertscope: the desktop app. Opens the store, starts the engine session, shows the window,
// reopens the last model (unless the last session crashed). Options:
//   --model DIR        open this model folder
//   --backend B        auto | cuda | cpu (default: the last choice, else auto)
//   --version          version, commit, Qt version, backends
//   --demo-prompt T, --screenshot FILE, --screenshot-after-ms N   send T once the model is loaded,
//                      grab the window N ms after the first tokens, save FILE and quit (docs).
//                      --demo-prompt may be repeated: the prompts go one after another and the
//                      screenshot waits for the last one's tokens.
//   --profiler-tab P   show the profiler dock on page P: routing | compare | latency | memory
//   --lang L           interface language, zh_CN | en (default: the system's; LANGUAGE honored)
#include "app_startup.h"
#include "chat_pane.h"
#include "chat_store.h"
#include "composer.h"
#include "engine_session.h"
#include "main_window.h"
#include "profiler_panel.h"
#include "translations.h"

#include <QApplication>
#include <QCommandLineParser>
#include <QDockWidget>
#include <QLockFile>
#include <QMessageBox>
#include <QSettings>
#include <QStatusBar>
#include <QTimer>

#include <cstdio>

int main(int argc, char **argv) {
    QApplication app(argc, argv);
    QApplication::setOrganizationName("ExpertScope");
    QApplication::setApplicationName("ExpertScope");
    QApplication::setApplicationVersion(ES_VERSION);

    QCommandLineParser cli;
    cli.setApplicationDescription("Chat with ERNIE-4.5 models and see inside them while they answer.");
    cli.addHelpOption();
    QCommandLineOption version({"v", "version"}, "Print the version, commit, Qt version and backends, then exit.");
    QCommandLineOption model("model", "Open this model folder.", "dir");
    QCommandLineOption backend("backend", "auto | cuda | cpu.", "name");
    QCommandLineOption demoPrompt("demo-prompt", "Send this prompt once the model is loaded.", "text");
    QCommandLineOption screenshot("screenshot", "Save a screenshot of the window to this PNG and quit.", "file");
    QCommandLineOption shotDelay("screenshot-after-ms", "Delay after the first tokens (default 1500).", "ms", "1500");
    cli.addOptions({version, model, backend, demoPrompt, screenshot, shotDelay});
    QCommandLineOption profilerTab("profiler-tab", "Show the profiler on this page: routing | compare | latency | memory.",
                                   "page");
    cli.addOption(profilerTab);
    QCommandLineOption lang("lang", "Interface language: zh_CN | en (default: the system's).", "code");
    cli.addOption(lang);
    cli.process(app);
    es::installTranslations(app, cli.value(lang));
    if (cli.isSet(version)) {
        std::printf("expertscope %s (%s)\nQt %s\nbackends: cpu%s\n", ES_VERSION, ES_GIT_COMMIT, qVersion(),
#if ES_HAVE_CUDA
                    ", cuda (used when a usable NVIDIA GPU is present)"
#else
                    " (this build has no CUDA backend)"
#endif
        );
        return 0;
    }

    const es::StartupPlan plan = es::planStartup(cli.value(model));
    // One instance per user: the store recovers replies left 'partial' when it opens, which
    // would cut off a second window's reply in progress.
    QLockFile lock(plan.databasePath + ".lock");
    lock.setStaleLockTime(0);
    if (!lock.tryLock(200)) {
        QMessageBox::information(nullptr, QObject::tr("ExpertScope"),
                                 QObject::tr("ExpertScope is already running (the lock %1 is held).")
                                     .arg(plan.databasePath + ".lock"));
        return 0;
    }
    es::ChatStore store;
    const es::OpenResult opened = store.open(plan.databasePath);
    if (!opened.ok()) {
        QMessageBox::critical(nullptr, QObject::tr("ExpertScope"),
                              QObject::tr("The conversation database could not be opened:\n%1").arg(opened.message));
        return 1;
    }
    es::markSessionRunning();

    QSettings settings;
    es::EngineSessionOptions options;
    options.backend = cli.isSet(backend) ? cli.value(backend) : settings.value("engine/backend", "auto").toString();
    options.precision = settings.value("engine/precision", "auto").toString();
    es::EngineSession session(options);
    es::MainWindow window(&store, &session);
    window.show();
    if (!opened.message.isEmpty()) window.statusBar()->showMessage(opened.message, 15000);
    if (!plan.notice.isEmpty()) window.statusBar()->showMessage(plan.notice, 15000);
    if (opened.status == es::OpenResult::Status::RecoveredFromCorruption)
        QMessageBox::warning(&window, QObject::tr("Database recovered"), opened.message);
    if (!plan.modelToOpen.isEmpty()) window.loadModelFolder(plan.modelToOpen, /*askWhenTooBig=*/false);

    // Documentation screenshots: send a prompt, grab the window mid-reply, quit.
    if (cli.isSet(profilerTab)) {
        const std::optional<es::ProfilerPanel::Tab> tab = es::ProfilerPanel::tabFromName(cli.value(profilerTab));
        if (!tab) {
            std::fprintf(stderr, "expertscope: --profiler-tab: expected routing, compare, latency or memory, got \"%s\"\n",
                         qPrintable(cli.value(profilerTab)));
            return 2;
        }
        window.profilerDock()->show();
        window.profilerPanel()->setCurrentTab(*tab);
    }
    // Prompts still to send (several --demo-prompt: one after another, each when the last ended).
    auto pendingPrompts = std::make_shared<QStringList>(cli.values(demoPrompt));
    if (cli.isSet(demoPrompt)) {
        auto sendNext = [&window, pendingPrompts] {
            if (!pendingPrompts->isEmpty()) window.currentPane()->send(pendingPrompts->takeFirst());
        };
        QObject::connect(&session, &es::EngineSession::modelLoaded, &window, sendNext);
        QObject::connect(&session, &es::EngineSession::replyFinished, &window,
                         [sendNext] { QTimer::singleShot(0, sendNext); });
    }
    if (cli.isSet(screenshot)) {
        const QString file = cli.value(screenshot);
        const int delay = cli.value(shotDelay).toInt();
        auto *shot = new QTimer(&window);
        shot->setSingleShot(true);
        QObject::connect(shot, &QTimer::timeout, &window, [&window, file] {
            window.grab().save(file);
            window.close();
        });
        QObject::connect(&session, &es::EngineSession::tokensGenerated, shot, [shot, delay, pendingPrompts] {
            if (!shot->isActive() && pendingPrompts->isEmpty()) shot->start(delay);
        });
        QObject::connect(&session, &es::EngineSession::modelLoadFailed, &window, [&window] { window.close(); });
    }

    const int rc = app.exec();
    es::markCleanExit();
    return rc;
}
