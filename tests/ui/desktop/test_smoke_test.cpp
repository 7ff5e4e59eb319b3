// --smoke-test fails at once, with the reason, instead of waiting out its time limit: as a class
// (ui/desktop/smoke_test.cpp) against a real pane and engine on the tiny model — a send the store
// refuses, a send that starts no reply, a load that fails — and passes when a reply comes; then
// the expertscope binary end to end, offscreen, in a home of its own: a store that cannot save the
// message, a lock held by a live process ("already running"), a read-only data folder and a full
// disk with a stale lock (tmpfs mounts in a private namespace, `unshare -rm`; skipped where the
// system allows none) — each exits 1 promptly with the reason on stderr.
#include "chat_pane.h"
#include "chat_store.h"
#include "engine_session.h"
#include "smoke_test.h"

#include <QDir>
#include <QLockFile>
#include <QProcess>
#include <QSignalSpy>
#include <QSqlDatabase>
#include <QSqlError>
#include <QSqlQuery>
#include <QTemporaryDir>
#include <QtTest>

#include <sys/wait.h>
#include <unistd.h>

using namespace es;

namespace {

const QString kModel = QStringLiteral(ES_TEST_DATA_DIR "/moe-shared");
// What a full disk does to the message's INSERT, simulated by a trigger.
const QString kRefuseMessages = QStringLiteral("CREATE TRIGGER no_room BEFORE INSERT ON messages "
                                               "BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END");
// Far below the smoke test's 300 s: a failure must not wait for it.
constexpr int kPromptMs = 60000;

bool execSql(const QString &path, const QString &sql) {
    bool ok = false;
    {
        QSqlDatabase db = QSqlDatabase::addDatabase(QStringLiteral("QSQLITE"), QStringLiteral("raw"));
        db.setDatabaseName(path);
        ok = db.open() && QSqlQuery(db).exec(sql);
        db.close();
    }
    QSqlDatabase::removeDatabase(QStringLiteral("raw"));
    return ok;
}

// A database at path that refuses every new message.
bool makeRefusingStore(const QString &path) {
    {
        ChatStore store;
        if (!store.open(path).ok()) return false;
    }
    return execSql(path, kRefuseMessages);
}

qint64 deadPid() {
    const pid_t pid = fork();
    if (pid == 0) _exit(0);
    int status = 0;
    waitpid(pid, &status, 0);
    return pid;
}

bool privateMountsAvailable() {
    QProcess p;
    p.start(QStringLiteral("unshare"), {QStringLiteral("-rm"), QStringLiteral("true")});
    return p.waitForFinished(10000) && p.exitStatus() == QProcess::NormalExit && p.exitCode() == 0;
}

struct AppRun {
    int exitCode = -1;
    bool finished = false;
    QString out, err;
};

} // namespace

class TestSmokeTest : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void init();
    void refusedSendEndsAtOnce();
    void sendWithoutAModelEndsAtOnce();
    void failedLoadEndsAtOnce();
    void passesWithAReply();
    void appFailsAtOnceWhenTheMessageCannotBeSaved();
    void appSaysAlreadyRunningForALiveLock();
    void appNamesAReadOnlyDataFolder();
    void appNamesAFullDisk();

private:
    // expertscope --smoke-test with `prefix` (a wrapper command, or none) in this test's home.
    AppRun runApp(const QStringList &prefix = {});
    QString dataFolder() const { return m_home.filePath(QStringLiteral("data/ExpertScope/ExpertScope")); }
    // The binary inside a private namespace, its data folder a 64 KiB tmpfs holding a stale lock,
    // then made read-only ("ro") or filled ("full").
    AppRun runAppOnTmpfs(const QString &mode);

    QTemporaryDir m_dir;
    QTemporaryDir m_home;
    std::unique_ptr<EngineSession> m_session;
};

void TestSmokeTest::initTestCase() {
    QVERIFY(m_dir.isValid());
    QVERIFY(m_home.isValid());
    qputenv("HOME", m_home.path().toUtf8()); // the panes' QSettings stay out of the real home
    m_session =
        std::make_unique<EngineSession>(EngineSessionOptions{.backend = "cpu", .defaultMaxTokens = 8});
    QSignalSpy loaded(m_session.get(), &EngineSession::modelLoaded);
    m_session->loadModel(kModel);
    QVERIFY(loaded.wait(30000));
}

void TestSmokeTest::init() {
    // Each run of the app starts from an empty home (first run, no lock, no database).
    QDir(m_home.filePath(QStringLiteral("data"))).removeRecursively();
    QVERIFY(QDir().mkpath(dataFolder()));
}

void TestSmokeTest::refusedSendEndsAtOnce() {
    const QString path = m_dir.filePath(QStringLiteral("refusing.sqlite"));
    QVERIFY(makeRefusingStore(path));
    ChatStore store;
    QVERIFY(store.open(path).ok());
    ChatPane pane(&store, m_session.get());
    SmokeTest smoke(m_session.get());
    QSignalSpy finished(&smoke, &SmokeTest::finished);
    smoke.send(&pane);
    QCOMPARE(finished.count(), 1); // at once, not after 300 s
    QCOMPARE(finished.at(0).at(0).toInt(), 1);
    const QString line = finished.at(0).at(1).toString();
    QVERIFY2(line.startsWith(QLatin1String("smoke test failed: Could not save the message")),
             qPrintable(line));
    QVERIFY2(line.contains(QLatin1String("database or disk is full")), qPrintable(line));
    QCOMPARE(smoke.exitCode(), std::optional<int>(1));
    QVERIFY(!pane.isGenerating());
    QVERIFY(store.conversations().isEmpty()); // nothing half-written
}

void TestSmokeTest::sendWithoutAModelEndsAtOnce() {
    ChatStore store;
    QVERIFY(store.open(QStringLiteral(":memory:")).ok());
    EngineSession unloaded(EngineSessionOptions{.backend = "cpu"});
    ChatPane pane(&store, &unloaded);
    SmokeTest smoke(&unloaded);
    QSignalSpy finished(&smoke, &SmokeTest::finished);
    smoke.send(&pane);
    QCOMPARE(finished.count(), 1);
    QCOMPARE(finished.at(0).at(0).toInt(), 1);
    QCOMPARE(finished.at(0).at(1).toString(),
             QStringLiteral("smoke test failed: the message was not sent: no model is loaded"));
}

void TestSmokeTest::failedLoadEndsAtOnce() {
    EngineSession session(EngineSessionOptions{.backend = "cpu"});
    SmokeTest smoke(&session);
    QSignalSpy finished(&smoke, &SmokeTest::finished);
    session.loadModel(m_dir.filePath(QStringLiteral("no-such-model")));
    QVERIFY(finished.count() == 1 || finished.wait(kPromptMs));
    QCOMPARE(finished.at(0).at(0).toInt(), 1);
    QVERIFY2(finished.at(0).at(1).toString().contains(QLatin1String("did not load")),
             qPrintable(finished.at(0).at(1).toString()));
}

void TestSmokeTest::passesWithAReply() {
    ChatStore store;
    QVERIFY(store.open(QStringLiteral(":memory:")).ok());
    ChatPane pane(&store, m_session.get());
    SmokeTest smoke(m_session.get());
    QSignalSpy finished(&smoke, &SmokeTest::finished);
    smoke.send(&pane);
    QVERIFY(pane.isGenerating());
    QVERIFY(finished.wait(kPromptMs));
    QCOMPARE(finished.count(), 1);
    QVERIFY2(finished.at(0).at(0).toInt() == 0, qPrintable(finished.at(0).at(1).toString()));
    QVERIFY(finished.at(0).at(1).toString().startsWith(QLatin1String("smoke test passed: ")));
}

AppRun TestSmokeTest::runApp(const QStringList &prefix) {
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert(QStringLiteral("HOME"), m_home.path());
    env.insert(QStringLiteral("XDG_DATA_HOME"), m_home.filePath(QStringLiteral("data")));
    env.insert(QStringLiteral("XDG_CONFIG_HOME"), m_home.filePath(QStringLiteral("config")));
    env.insert(QStringLiteral("XDG_CACHE_HOME"), m_home.filePath(QStringLiteral("cache")));
    env.insert(QStringLiteral("QT_QPA_PLATFORM"), QStringLiteral("offscreen"));
    const QStringList appArgs{QStringLiteral(ES_APP_PATH), QStringLiteral("--smoke-test"),
                              QStringLiteral("--model"),   kModel,
                              QStringLiteral("--backend"), QStringLiteral("cpu")};
    const QStringList command = prefix + appArgs;
    QProcess app;
    app.setProcessEnvironment(env);
    app.start(command.first(), command.mid(1));
    AppRun run;
    run.finished = app.waitForStarted(10000) && app.waitForFinished(kPromptMs);
    if (!run.finished) app.kill();
    app.waitForFinished(10000);
    run.exitCode = app.exitStatus() == QProcess::NormalExit ? app.exitCode() : -1;
    run.out = QString::fromLocal8Bit(app.readAllStandardOutput());
    run.err = QString::fromLocal8Bit(app.readAllStandardError());
    return run;
}

AppRun TestSmokeTest::runAppOnTmpfs(const QString &mode) {
    const QString script = QStringLiteral(
        "set -e\n"
        "mount -t tmpfs -o size=64k tmpfs \"$1\"\n"
        "printf '%s\\nexpertscope\\n\\n' \"$2\" > \"$1/expertscope.sqlite.lock\"\n"
        "if [ \"$3\" = ro ]; then mount -o remount,ro \"$1\"; else dd if=/dev/zero of=\"$1/fill\" bs=4096 "
        "2>/dev/null || true; fi\n"
        "shift 3\n"
        "exec \"$@\"\n");
    return runApp({QStringLiteral("unshare"), QStringLiteral("-rm"), QStringLiteral("sh"),
                   QStringLiteral("-c"), script, QStringLiteral("sh"), dataFolder(),
                   QString::number(deadPid()), mode});
}

void TestSmokeTest::appFailsAtOnceWhenTheMessageCannotBeSaved() {
    QVERIFY(makeRefusingStore(dataFolder() + QStringLiteral("/expertscope.sqlite")));
    const AppRun run = runApp();
    QVERIFY2(run.finished, "expertscope --smoke-test was still waiting after 60 s");
    QCOMPARE(run.exitCode, 1);
    QVERIFY2(run.err.contains(QLatin1String("smoke test failed: Could not save the message")),
             qPrintable(run.err));
    QVERIFY2(run.err.contains(QLatin1String("database or disk is full")), qPrintable(run.err));
}

void TestSmokeTest::appSaysAlreadyRunningForALiveLock() {
    // This process holds the lock: alive, and the program its lock names.
    const QString lockPath = dataFolder() + QStringLiteral("/expertscope.sqlite.lock");
    QLockFile lock(lockPath);
    QVERIFY(lock.tryLock(1000));
    const AppRun run = runApp();
    QVERIFY(run.finished);
    QCOMPARE(run.exitCode, 1); // the smoke test did not run
    QVERIFY2(run.err.contains(QStringLiteral("ExpertScope is already running (process %1 holds the lock %2)")
                                  .arg(QCoreApplication::applicationPid())
                                  .arg(lockPath)),
             qPrintable(run.err));
}

void TestSmokeTest::appNamesAReadOnlyDataFolder() {
    if (!privateMountsAvailable()) QSKIP("no private mount namespace (unshare -rm) here");
    const AppRun run = runAppOnTmpfs(QStringLiteral("ro"));
    QVERIFY(run.finished);
    QCOMPARE(run.exitCode, 1);
    QVERIFY2(run.err.contains(
                 QStringLiteral("The data folder %1 is not writable: it is on a read-only file system")
                     .arg(dataFolder())),
             qPrintable(run.err));
    QVERIFY2(!run.err.contains(QLatin1String("already running")), qPrintable(run.err));
}

void TestSmokeTest::appNamesAFullDisk() {
    if (!privateMountsAvailable()) QSKIP("no private mount namespace (unshare -rm) here");
    const AppRun run = runAppOnTmpfs(QStringLiteral("full"));
    QVERIFY(run.finished);
    QCOMPARE(run.exitCode, 1);
    QVERIFY2(
        run.err.contains(QStringLiteral("The disk that holds the data folder %1 is full").arg(dataFolder())),
        qPrintable(run.err));
    QVERIFY2(!run.err.contains(QLatin1String("already running")), qPrintable(run.err));
}

QTEST_MAIN(TestSmokeTest)
#include "test_smoke_test.moc"
