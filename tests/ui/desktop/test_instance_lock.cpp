// The single-instance lock's verdicts (ui/desktop/instance_lock.cpp) on real lock files: a free
// lock is taken; a lock held by a live process (this binary re-run as a child) is "already
// running"; the lock of a killed holder is taken over; a read-only data folder and a full disk —
// each with a stale lock in it, which QLockFile cannot remove and reports as LockFailedError —
// are failures that name the folder and the reason, never "already running"; and the errno →
// sentence mapping. The read-only folder and the full disk are tmpfs mounts in a private user and
// mount namespace (`unshare -rm`, this binary re-run inside); where the system allows none, those
// two cases are skipped (a non-root run still checks a chmod 0555 folder).
#include "instance_lock.h"

#include <QDir>
#include <QFile>
#include <QLockFile>
#include <QProcess>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QtTest>

#include <cerrno>
#include <cstdio>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace es;

namespace {

const char *const kHoldLock = "--hold-lock";    // child: hold the lock at argv[2] until killed
const char *const kInNamespace = "--namespace"; // child: argv[2] = read-only | full-disk, argv[3] = folder

const char *outcomeName(InstanceLockResult::Outcome o) {
    switch (o) {
    case InstanceLockResult::Outcome::Acquired:
        return "acquired";
    case InstanceLockResult::Outcome::AlreadyRunning:
        return "already-running";
    case InstanceLockResult::Outcome::Failed:
        return "failed";
    }
    return "?";
}

// A pid that belonged to a process that has exited (and was reaped): a stale lock's holder.
qint64 deadPid() {
    const pid_t pid = fork();
    if (pid == 0) _exit(0);
    int status = 0;
    waitpid(pid, &status, 0);
    return pid;
}

// A lock file as QLockFile writes it, for a process that is gone.
bool writeStaleLock(const QString &path) {
    QFile f(path);
    if (!f.open(QIODevice::WriteOnly)) return false;
    f.write(QByteArray::number(deadPid()) + "\nexpertscope\n\n");
    return f.flush();
}

int holdLock(const QString &path) {
    QLockFile lock(path);
    lock.setStaleLockTime(0);
    if (!lock.tryLock(1000)) return 2;
    std::printf("locked\n");
    std::fflush(stdout);
    QThread::sleep(60); // bounded: the parent kills it long before
    return 0;
}

// Inside `unshare -rm`: a tmpfs on folder, made read-only or full, with a stale lock in it; prints
// "<outcome> <message>".
int inNamespace(const QString &which, const QString &folder) {
    const QByteArray dir = QFile::encodeName(folder);
    if (mount("tmpfs", dir.constData(), "tmpfs", 0, "size=64k") != 0) {
        std::printf("setup mount: %s\n", std::strerror(errno));
        return 0;
    }
    const QString lockPath = folder + QStringLiteral("/expertscope.sqlite.lock");
    if (!writeStaleLock(lockPath)) {
        std::printf("setup stale lock\n");
        return 0;
    }
    if (which == QLatin1String("read-only")) {
        if (mount(nullptr, dir.constData(), nullptr, MS_REMOUNT | MS_RDONLY, nullptr) != 0) {
            std::printf("setup remount: %s\n", std::strerror(errno));
            return 0;
        }
    } else {
        QFile fill(folder + QStringLiteral("/fill"));
        if (!fill.open(QIODevice::WriteOnly)) return 3;
        const QByteArray block(4096, 'x');
        while (fill.write(block) == block.size() && fill.flush()) {
        }
    }
    QLockFile lock(lockPath);
    const InstanceLockResult r = acquireInstanceLock(lock, lockPath);
    std::printf("%s %s\n", outcomeName(r.outcome), qPrintable(r.message));
    return 0;
}

// Whether `unshare -rm` works here (user namespaces allowed, util-linux present).
bool privateMountsAvailable() {
    QProcess p;
    p.start(QStringLiteral("unshare"), {QStringLiteral("-rm"), QStringLiteral("true")});
    return p.waitForFinished(10000) && p.exitStatus() == QProcess::NormalExit && p.exitCode() == 0;
}

} // namespace

class TestInstanceLock : public QObject {
    Q_OBJECT
private slots:
    void initTestCase() { QVERIFY(m_dir.isValid()); }

    void freeLockIsAcquired() {
        const QString path = m_dir.filePath(QStringLiteral("free.lock"));
        QLockFile lock(path);
        const InstanceLockResult r = acquireInstanceLock(lock, path);
        QCOMPARE(outcomeName(r.outcome), "acquired");
        QVERIFY(r.message.isEmpty());
        QVERIFY(lock.isLocked());
    }

    void liveHolderIsAlreadyRunning() {
        const QString path = m_dir.filePath(QStringLiteral("held.lock"));
        QProcess holder;
        holder.start(QCoreApplication::applicationFilePath(), {QString::fromLatin1(kHoldLock), path});
        QVERIFY(holder.waitForStarted(10000));
        QVERIFY(holder.waitForReadyRead(10000));
        QCOMPARE(holder.readLine().trimmed(), QByteArray("locked"));

        QLockFile lock(path);
        const InstanceLockResult r = acquireInstanceLock(lock, path);
        QCOMPARE(outcomeName(r.outcome), "already-running");
        QCOMPARE(r.holderPid, qint64(holder.processId()));
        QVERIFY2(r.message.contains(QLatin1String("already running")), qPrintable(r.message));
        QVERIFY(!lock.isLocked());

        // Killed, it leaves its lock file behind: that lock is stale and is taken over.
        holder.kill();
        QVERIFY(holder.waitForFinished(10000));
        QVERIFY(QFile::exists(path));
        QLockFile again(path);
        const InstanceLockResult taken = acquireInstanceLock(again, path);
        QCOMPARE(outcomeName(taken.outcome), "acquired");
    }

    void readOnlyFolderIsNotAlreadyRunning() {
        const QString folder = m_dir.filePath(QStringLiteral("read-only"));
        QVERIFY(QDir().mkpath(folder));
        if (privateMountsAvailable()) {
            const QString line = runInNamespace(QStringLiteral("read-only"), folder);
            QVERIFY2(line.startsWith(QLatin1String("failed ")), qPrintable(line));
            QVERIFY2(line.contains(QLatin1String("is not writable")) &&
                         line.contains(QLatin1String("read-only file system")),
                     qPrintable(line));
            QVERIFY2(line.contains(folder), qPrintable(line));
            return;
        }
        if (geteuid() == 0)
            QSKIP("neither a private mount namespace nor a non-root user: no read-only folder to try");
        // A folder without write permission, with a stale lock QLockFile cannot remove.
        QVERIFY(writeStaleLock(folder + QStringLiteral("/expertscope.sqlite.lock")));
        QVERIFY(QFile::setPermissions(folder, QFile::ReadOwner | QFile::ExeOwner));
        const QString path = folder + QStringLiteral("/expertscope.sqlite.lock");
        QLockFile lock(path);
        const InstanceLockResult r = acquireInstanceLock(lock, path);
        QFile::setPermissions(folder, QFile::ReadOwner | QFile::WriteOwner | QFile::ExeOwner);
        QCOMPARE(outcomeName(r.outcome), "failed");
        QVERIFY2(r.message.contains(QLatin1String("is not writable (permission denied)")),
                 qPrintable(r.message));
        QVERIFY2(r.message.contains(folder), qPrintable(r.message));
    }

    void fullDiskWithStaleLockIsNotAlreadyRunning() {
        if (!privateMountsAvailable())
            QSKIP("no private mount namespace (unshare -rm) here: no full disk to try");
        const QString folder = m_dir.filePath(QStringLiteral("full"));
        QVERIFY(QDir().mkpath(folder));
        const QString line = runInNamespace(QStringLiteral("full-disk"), folder);
        QVERIFY2(line.startsWith(QLatin1String("failed ")), qPrintable(line));
        QVERIFY2(line.contains(QLatin1String("is full (0 KiB free)")), qPrintable(line));
        QVERIFY2(line.contains(folder), qPrintable(line));
    }

    void errorsInWords() {
        const QString f = QStringLiteral("/data/ExpertScope");
        QVERIFY(describeDataFolderError(f, EACCES).contains(
            QLatin1String("/data/ExpertScope is not writable (permission denied)")));
        QVERIFY(describeDataFolderError(f, EROFS).contains(QLatin1String("read-only file system")));
        QVERIFY(describeDataFolderError(f, ENOSPC, 0).contains(QLatin1String("is full (0 KiB free)")));
        QVERIFY(describeDataFolderError(f, ENOSPC).contains(QLatin1String("is full.")));
        QVERIFY(describeDataFolderError(f, EDQUOT).contains(QLatin1String("quota")));
        QVERIFY(describeDataFolderError(f, ENOENT).contains(QLatin1String("does not exist")));
        QVERIFY(describeDataFolderError(f, EIO).contains(QString::fromLocal8Bit(std::strerror(EIO))));
        // A folder that can be written has no problem.
        QVERIFY(dataFolderWriteProblem(m_dir.path()).isEmpty());
        QVERIFY(QDir(m_dir.path())
                    .entryList(QDir::Files | QDir::Hidden)
                    .filter(QStringLiteral("write-test"))
                    .isEmpty());
    }

private:
    // This binary in a private namespace: the case's line ("<outcome> <message>").
    QString runInNamespace(const QString &which, const QString &folder) {
        QProcess child;
        child.start(QStringLiteral("unshare"),
                    {QStringLiteral("-rm"), QCoreApplication::applicationFilePath(),
                     QString::fromLatin1(kInNamespace), which, folder});
        if (!child.waitForFinished(30000)) return QStringLiteral("the child did not finish");
        const QString out = QString::fromLocal8Bit(child.readAllStandardOutput()).trimmed();
        return out + QString::fromLocal8Bit(child.readAllStandardError()).trimmed();
    }

    QTemporaryDir m_dir;
};

int main(int argc, char **argv) {
    QCoreApplication app(argc, argv);
    if (argc >= 3 && qstrcmp(argv[1], kHoldLock) == 0) return holdLock(QString::fromLocal8Bit(argv[2]));
    if (argc >= 4 && qstrcmp(argv[1], kInNamespace) == 0)
        return inNamespace(QString::fromLocal8Bit(argv[2]), QString::fromLocal8Bit(argv[3]));
    TestInstanceLock test;
    QTEST_SET_MAIN_SOURCE_PATH
    return QTest::qExec(&test, argc, argv);
}

#include "test_instance_lock.moc"
