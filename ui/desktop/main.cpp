// expertscope: the desktop app. Opens the store, starts the engine session, shows the window,
// reopens the last model (unless the last session crashed). Options:
//   --model DIR        open this model folder
//   --backend B        auto | cuda | cpu (default: the last choice when it can run here — else
//                      auto, and the status bar says why — else auto)
//   --help, -h         the options; like --version, answered without a display
//   --version, -v      version, commit, Qt and CUDA versions, backends (and why CUDA is not
//                      usable, when it is not); answered before any window system is touched
//   --demo-prompt T, --screenshot FILE, --screenshot-after-ms N   send T once the model is loaded,
//                      grab the window N ms after the first tokens, save FILE and quit (docs).
//                      --demo-prompt may be repeated: the prompts go one after another and the
//                      screenshot waits for the last one's tokens.
//   --profiler-tab P   show the profiler dock on page P: routing | compare | latency | memory
//   --lang L           interface language, zh_CN | en (default: the one chosen in Preferences, else
//                      the system's; LANGUAGE honored)
//   --smoke-test       once the model is loaded, send one message in a new conversation, wait for
//                      the reply, print one line and exit: 0 with a reply, 1 at once on any
//                      failure (smoke_test.h; the package test runs it offscreen in a fresh Debian
//                      root)
//   --connect URL      chat with the OpenAI-compatible server at URL instead of a local model
//                      (its first model, or --served-model NAME; key from EXPERTSCOPE_API_KEY)
#include "app_settings.h"
#include "app_startup.h"
#include "appearance.h"
#include "chat_pane.h"
#include "chat_store.h"
#include "composer.h"
#include "conversation_sidebar.h"
#include "engine/cuda/cuda_loader.h"
#include "engine_session.h"
#include "es_build_info.h"
#include "instance_lock.h"
#include "main_window.h"
#include "profiler_panel.h"
#include "smoke_test.h"
#include "translations.h"

#include <QApplication>
#include <QCommandLineParser>
#include <QDockWidget>
#include <QLockFile>
#include <QMessageBox>
#include <QSocketNotifier>
#include <QStatusBar>
#include <QTimer>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

namespace {

// --help needs no display either: it is answered by a QCoreApplication.
bool wantsHelp(int argc, char **argv) {
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--") == 0) return false;
        if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0 ||
            std::strcmp(argv[i], "--help-all") == 0)
            return true;
    }
    return false;
}

// --version needs no display: it is answered before QApplication exists (which would need one).
bool wantsVersion(int argc, char **argv) {
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--") == 0) return false;
        if (std::strcmp(argv[i], "--version") == 0 || std::strcmp(argv[i], "-v") == 0) return true;
    }
    return false;
}

// The --version text; before QApplication exists it also names the Qt the app was built with.
void printVersion(bool beforeApplication) {
    if (beforeApplication)
        std::printf("expertscope %s (commit %s)\nQt %s (built with %s)\n%s", ES_VERSION, ES_GIT_COMMIT,
                    qVersion(), QT_VERSION_STR, es::cuda_version_lines().c_str());
    else
        std::printf("expertscope %s (commit %s)\nQt %s\n%s", ES_VERSION, ES_GIT_COMMIT, qVersion(),
                    es::cuda_version_lines().c_str());
}

// Names the settings, the store's folder and the desktop entry go by.
void setApplicationIdentity() {
    QApplication::setOrganizationName("ExpertScope");
    QApplication::setApplicationName("ExpertScope");
    QApplication::setApplicationVersion(ES_VERSION);
    // Wayland app id and the desktop entry's name (icon and grouping in docks and task bars).
    QGuiApplication::setDesktopFileName(QStringLiteral("invalid.example.expertscope"));
}

// The command line (see the file's opening comment); --help lists the options in the order they
// are added here.
struct CommandLine {
    CommandLine() {
        parser.setApplicationDescription("Chat with ERNIE-4.5 models and see inside them while they answer.");
        parser.addHelpOption();
        parser.addOptions({version, model, backend, demoPrompt, screenshot, shotDelay});
        parser.addOption(profilerTab);
        parser.addOption(lang);
        parser.addOption(smokeTest);
        parser.addOptions({connectUrl, servedModel});
    }

    QCommandLineParser parser;
    QCommandLineOption version{QStringList{"v", "version"},
                               "Print the version, commit, Qt version and backends, then exit."};
    QCommandLineOption model{"model", "Open this model folder.", "dir"};
    QCommandLineOption backend{"backend", "auto | cuda | cpu.", "name"};
    QCommandLineOption demoPrompt{"demo-prompt", "Send this prompt once the model is loaded.", "text"};
    QCommandLineOption screenshot{"screenshot", "Save a screenshot of the window to this PNG and quit.", "file"};
    QCommandLineOption shotDelay{"screenshot-after-ms", "Delay after the first tokens (default 1500).", "ms", "1500"};
    QCommandLineOption profilerTab{"profiler-tab",
                                   "Show the profiler on this page: routing | compare | latency | memory.", "page"};
    QCommandLineOption lang{"lang", "Interface language: zh_CN | en (default: the one chosen in Preferences, else "
                                    "the system's).",
                            "code"};
    QCommandLineOption smokeTest{"smoke-test", "Send one message once the model is loaded, wait for the reply, exit "
                                               "0 when one came, 1 otherwise."};
    QCommandLineOption connectUrl{"connect",
                                  "Chat with the OpenAI-compatible server at this URL (API key from "
                                  "EXPERTSCOPE_API_KEY).",
                                  "url"};
    QCommandLineOption servedModel{"served-model", "With --connect: the model id (default: the server's first).",
                                   "name"};
};

// One instance per user: the store recovers replies left 'partial' when it opens, which would cut
// off a second window's reply in progress. Returns the exit code when the app must not go on: 0
// when a live instance holds the lock (the user is told; the smoke test fails with 1), 1 when the
// lock cannot be taken (a read-only data folder, a full disk: the message says which).
std::optional<int> lockSingleInstance(QLockFile &lock, const QString &lockPath, bool smokeTest) {
    const es::InstanceLockResult locked = es::acquireInstanceLock(lock, lockPath);
    if (locked.outcome == es::InstanceLockResult::Outcome::Acquired) return std::nullopt;
    const bool running = locked.outcome == es::InstanceLockResult::Outcome::AlreadyRunning;
    if (smokeTest) {
        std::fprintf(stderr, "expertscope: smoke test failed: %s\n", qPrintable(locked.message));
        return 1;
    }
    if (running) {
        QMessageBox::information(nullptr, QObject::tr("ExpertScope"), locked.message);
        return 0;
    }
    std::fprintf(stderr, "expertscope: %s\n", qPrintable(locked.message));
    QMessageBox::critical(nullptr, QObject::tr("ExpertScope"), locked.message);
    return 1;
}

// A store that did not open ends the app (1): a dialog, or for the smoke test a line on stderr
// and no dialog that would wait for a click.
void reportStoreFailure(const es::OpenResult &opened, const QString &databasePath, bool smokeTest) {
    if (smokeTest) {
        std::fprintf(stderr, "expertscope: smoke test failed: the database %s could not be opened: %s\n",
                     qPrintable(databasePath), qPrintable(opened.message));
        return;
    }
    QMessageBox::critical(nullptr, QObject::tr("ExpertScope"),
                          QObject::tr("The conversation database could not be opened:\n%1").arg(opened.message));
}

// The engine's options as stored (Preferences, the Model menu): --backend, else the last choice
// (auto) when it can run here, else auto with *notice saying why.
es::EngineSessionOptions sessionOptions(const CommandLine &cli, const es::AppSettings &settings, QString *notice) {
    es::EngineSessionOptions options = settings.engineOptions({});
    options.backend = cli.parser.isSet(cli.backend) ? cli.parser.value(cli.backend)
                                                    : es::EngineSession::usableSavedBackend(settings.backend, notice);
    return options;
}

// --smoke-test, before the window exists: a model to open that is a model. The window would report
// a folder that is not one in a dialog; the smoke test says it and stops. False after the line on
// stderr.
bool smokeTestHasModel(const es::StartupPlan &plan, const es::EngineSessionOptions &options) {
    if (plan.modelToOpen.isEmpty()) {
        std::fprintf(stderr,
                     "expertscope: smoke test failed: no model to open (no --model, no default model "
                     "under %s)\n",
                     qPrintable(QCoreApplication::applicationDirPath() + "/../share/expertscope/models/default"));
        return false;
    }
    const es::MemoryEstimateView estimate = es::EngineSession::estimate(plan.modelToOpen, options);
    if (!estimate.ok) {
        std::fprintf(stderr, "expertscope: smoke test failed: %s: %s\n", qPrintable(plan.modelToOpen),
                     qPrintable(estimate.message));
        return false;
    }
    return true;
}

// --smoke-test: its verdict is one line (stdout when it passed, stderr when not) and the exit code.
// Armed before the window exists: a failed load must end the run before the window's error
// dialog (connected later) could wait for a click; app.exit ends that dialog's loop too.
std::unique_ptr<es::SmokeTest> armSmokeTest(QApplication &app, es::EngineSession &session) {
    auto smoke = std::make_unique<es::SmokeTest>(&session);
    QObject::connect(smoke.get(), &es::SmokeTest::finished, &app, [&app](int rc, const QString &line) {
        std::fprintf(rc == 0 ? stdout : stderr, "expertscope: %s\n", qPrintable(line));
        std::fflush(rc == 0 ? stdout : stderr);
        app.exit(rc);
    });
    return smoke;
}

// --smoke-test, once the window exists: the message goes to its pane when the model is loaded.
void sendSmokeTestWhenLoaded(es::SmokeTest &smoke, es::EngineSession &session, es::MainWindow &window) {
    QObject::connect(&session, &es::EngineSession::modelLoaded, &smoke,
                     [&smoke, &window](const es::SessionModelInfo &) { smoke.send(window.currentPane()); });
    QObject::connect(&smoke, &es::SmokeTest::finished, &window, [&window](int rc) {
        if (rc == 0) window.close(); // saves the window's state, as a user's close would
    });
}

// The window's first state: the welcome conversation (first run only), what opening the store and
// planning the start-up have to say, and a dialog when the store was rebuilt (none for the smoke
// test, which nobody watches).
void showStartupState(es::MainWindow &window, const std::optional<qint64> &welcome, const es::OpenResult &opened,
                      const es::StartupPlan &plan, bool smokeTest) {
    if (welcome) {
        window.sidebar()->selectConversation(*welcome);
        window.currentPane()->setConversation(*welcome);
    }
    window.show();
    if (!opened.message.isEmpty()) window.statusBar()->showMessage(opened.message, 15000);
    if (!plan.notice.isEmpty()) window.statusBar()->showMessage(plan.notice, 15000);
    if (opened.status == es::OpenResult::Status::RecoveredFromCorruption && !smokeTest)
        QMessageBox::warning(&window, QObject::tr("Database recovered"), opened.message);
}

// --connect URL (key from EXPERTSCOPE_API_KEY), else the planned model, if any.
void openModelOrEndpoint(es::MainWindow &window, const CommandLine &cli, const es::StartupPlan &plan) {
    if (cli.parser.isSet(cli.connectUrl))
        window.connectToEndpoint({es::normalizeBaseUrl(cli.parser.value(cli.connectUrl)),
                                  qEnvironmentVariable("EXPERTSCOPE_API_KEY"), cli.parser.value(cli.servedModel)});
    else if (!plan.modelToOpen.isEmpty())
        window.loadModelFolder(plan.modelToOpen, /*askWhenTooBig=*/false);
}

// --profiler-tab: the profiler dock shown on that page. False, after a line on stderr, for a page
// that does not exist.
bool showProfilerTab(es::MainWindow &window, const CommandLine &cli) {
    if (!cli.parser.isSet(cli.profilerTab)) return true;
    const std::optional<es::ProfilerPanel::Tab> tab = es::ProfilerPanel::tabFromName(cli.parser.value(cli.profilerTab));
    if (!tab) {
        std::fprintf(stderr, "expertscope: --profiler-tab: expected routing, compare, latency or memory, got \"%s\"\n",
                     qPrintable(cli.parser.value(cli.profilerTab)));
        return false;
    }
    window.profilerDock()->show();
    window.profilerPanel()->setCurrentTab(*tab);
    return true;
}

// Documentation screenshots: send the --demo-prompt texts one after another (each when the last
// reply ended), grab the window --screenshot-after-ms after the tokens of the last one begin,
// save it to --screenshot and quit (also when the model fails to load).
void armDemo(es::EngineSession &session, es::MainWindow &window, const CommandLine &cli) {
    // Prompts still to send.
    auto pendingPrompts = std::make_shared<QStringList>(cli.parser.values(cli.demoPrompt));
    if (cli.parser.isSet(cli.demoPrompt)) {
        auto sendNext = [&window, pendingPrompts] {
            if (!pendingPrompts->isEmpty()) window.currentPane()->send(pendingPrompts->takeFirst());
        };
        QObject::connect(&session, &es::EngineSession::modelLoaded, &window, sendNext);
        QObject::connect(&session, &es::EngineSession::replyFinished, &window,
                         [sendNext] { QTimer::singleShot(0, sendNext); });
    }
    if (!cli.parser.isSet(cli.screenshot)) return;
    const QString file = cli.parser.value(cli.screenshot);
    const int delay = cli.parser.value(cli.shotDelay).toInt();
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

// SIGTERM and SIGINT (kill, a logout, Ctrl+C in a terminal) end the app as the Quit command does:
// the handler only writes a byte to a pipe; on the GUI thread every window closes (the main
// window saves its state, dialogs are rejected), the event loop ends, and main() records the
// clean exit and saves a reply in progress as stopped while the panes go.
int g_signalPipe[2] = {-1, -1};

void onQuitSignal(int) {
    const char byte = 1;
    [[maybe_unused]] const ssize_t n = ::write(g_signalPipe[1], &byte, 1);
}

void quitOnSignals(QApplication &app) {
    if (::pipe2(g_signalPipe, O_CLOEXEC | O_NONBLOCK) != 0) return;
    auto *notifier = new QSocketNotifier(g_signalPipe[0], QSocketNotifier::Read, &app);
    QObject::connect(notifier, &QSocketNotifier::activated, &app, [&app] {
        char buffer[16];
        while (::read(g_signalPipe[0], buffer, sizeof buffer) > 0) {
        }
        QApplication::closeAllWindows();
        app.quit();
    });
    struct sigaction action {};
    action.sa_handler = onQuitSignal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &action, nullptr);
    sigaction(SIGINT, &action, nullptr);
}

// Whether a crash would come while a model loads (app_startup.h: such a model is not reopened).
void recordModelLoads(es::EngineSession &session) {
    QObject::connect(&session, &es::EngineSession::modelLoadStarted, &session, [&session](const QString &dir) {
        if (!session.isRemote()) es::markModelLoading(dir);
    });
    QObject::connect(&session, &es::EngineSession::modelLoaded, &session, [] { es::markModelLoadEnded(); });
    QObject::connect(&session, &es::EngineSession::modelLoadFailed, &session, [] { es::markModelLoadEnded(); });
}

} // namespace

int main(int argc, char **argv) {
    if (wantsVersion(argc, argv)) {
        printVersion(/*beforeApplication=*/true);
        return 0;
    }
    if (wantsHelp(argc, argv)) {
        QCoreApplication core(argc, argv);
        QCoreApplication::setApplicationName("ExpertScope");
        QCoreApplication::setApplicationVersion(ES_VERSION);
        CommandLine help;
        help.parser.process(core); // prints the options and exits 0
        return 0;
    }
    QApplication app(argc, argv);
    setApplicationIdentity();
    CommandLine cli;
    cli.parser.process(app);
    const es::AppSettings settings = es::AppSettings::load();
    es::installTranslations(app, cli.parser.isSet(cli.lang) ? cli.parser.value(cli.lang) : settings.language);
    es::Appearance::apply(settings); // theme and chat font size, before any window exists
    if (cli.parser.isSet(cli.version)) { // "-v" inside a bundle of short options: answered above otherwise
        printVersion(/*beforeApplication=*/false);
        return 0;
    }
    const bool smokeTest = cli.parser.isSet(cli.smokeTest);

    const es::StartupPlan plan = es::planStartup(cli.parser.value(cli.model));
    QLockFile lock(plan.databasePath + ".lock");
    if (const std::optional<int> rc = lockSingleInstance(lock, plan.databasePath + ".lock", smokeTest)) return *rc;
    es::ChatStore store;
    const es::OpenResult opened = store.open(plan.databasePath);
    if (!opened.ok()) {
        reportStoreFailure(opened, plan.databasePath, smokeTest);
        return 1;
    }
    es::markSessionRunning();

    QString backendNotice;
    const es::EngineSessionOptions options = sessionOptions(cli, settings, &backendNotice);
    es::EngineSession session(options);
    recordModelLoads(session);
    quitOnSignals(app);
    std::unique_ptr<es::SmokeTest> smoke;
    if (smokeTest) {
        if (!smokeTestHasModel(plan, options)) {
            es::markCleanExit();
            return 1;
        }
        smoke = armSmokeTest(app, session);
    }
    const std::optional<qint64> welcome = es::createWelcomeConversation(store); // first run only
    es::MainWindow window(&store, &session);
    if (smoke) sendSmokeTestWhenLoaded(*smoke, session, window);
    showStartupState(window, welcome, opened, plan, smokeTest);
    if (!backendNotice.isEmpty()) window.statusBar()->showMessage(backendNotice, 15000);
    openModelOrEndpoint(window, cli, plan);
    if (!showProfilerTab(window, cli)) return 2;
    armDemo(session, window, cli);

    if (smoke && smoke->exitCode()) { // it ended before the event loop ran (a load that failed at once)
        es::markCleanExit();
        return *smoke->exitCode();
    }
    const int rc = app.exec();
    es::markCleanExit();
    return rc;
}
