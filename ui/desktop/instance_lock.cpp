// The single-instance lock (see instance_lock.h). Its messages are translated in the context
// "InstanceLock".
#include "instance_lock.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QLockFile>
#include <QStorageInfo>
#include <QSysInfo>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

namespace es {

namespace {

QString native(const QString &path) { return QDir::toNativeSeparators(path); }

// The program a process runs, as QLockFile records it: the file name of /proc/<pid>/exe. Empty
// when it cannot be read (another user's process).
QString processName(qint64 pid) {
    QString exe = QFile::symLinkTarget(QStringLiteral("/proc/%1/exe").arg(pid));
    exe.remove(QLatin1String(" (deleted)")); // a binary replaced by an upgrade still runs
    return QFileInfo(exe).fileName();
}

// QLockFile's own test for a live holder: the process exists (on this host) and runs the program
// the lock names. A reused pid running something else means the lock is stale.
bool holderIsRunning(qint64 pid, const QString &hostname, const QString &appname) {
    if (pid <= 0) return false;
    if (!hostname.isEmpty() && hostname != QSysInfo::machineHostName()) return true; // cannot tell: assume so
    if (::kill(pid_t(pid), 0) != 0 && errno != EPERM) return false;
    const QString name = processName(pid);
    return name.isEmpty() || appname.isEmpty() || name == appname;
}

} // namespace

QString describeDataFolderError(const QString &folder, int error, qint64 bytesFree) {
    const QString where = native(folder);
    switch (error) {
    case EACCES:
    case EPERM:
        return QCoreApplication::translate(
                   "InstanceLock",
                   "The data folder %1 is not writable (permission denied). ExpertScope keeps its "
                   "conversations there: give your user write access to it, or set XDG_DATA_HOME to a "
                   "writable folder.")
            .arg(where);
    case EROFS:
        return QCoreApplication::translate(
                   "InstanceLock",
                   "The data folder %1 is not writable: it is on a read-only file system. ExpertScope keeps "
                   "its conversations there: set XDG_DATA_HOME to a folder on a writable disk.")
            .arg(where);
    case ENOSPC:
        if (bytesFree >= 0)
            return QCoreApplication::translate(
                       "InstanceLock",
                       "The disk that holds the data folder %1 is full (%2 KiB free). Free some space and "
                       "start ExpertScope again.")
                .arg(where)
                .arg(bytesFree / 1024);
        return QCoreApplication::translate(
                   "InstanceLock",
                   "The disk that holds the data folder %1 is full. Free some space and start ExpertScope "
                   "again.")
            .arg(where);
    case EDQUOT:
        return QCoreApplication::translate(
                   "InstanceLock",
                   "Your disk quota for the data folder %1 is used up. Free some space and start ExpertScope "
                   "again.")
            .arg(where);
    case ENOENT:
    case ENOTDIR:
        return QCoreApplication::translate("InstanceLock",
                                           "The data folder %1 does not exist and could not be created.")
            .arg(where);
    default:
        return QCoreApplication::translate("InstanceLock", "Could not write in the data folder %1: %2.")
            .arg(where, QString::fromLocal8Bit(std::strerror(error)));
    }
}

QString dataFolderWriteProblem(const QString &folder) {
    const QByteArray probe = QFile::encodeName(QDir(folder).filePath(
        QStringLiteral(".expertscope-write-test-%1").arg(QCoreApplication::applicationPid())));
    // As the lock file is made: create it, then write a little (a full disk fails here, not at
    // the create, while inodes remain).
    const int fd = ::open(probe.constData(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    int error = fd < 0 ? errno : 0;
    if (fd >= 0) {
        const char bytes[256] = {};
        if (::write(fd, bytes, sizeof bytes) != ssize_t(sizeof bytes)) error = errno ? errno : ENOSPC;
        if (::fsync(fd) != 0 && !error && errno != EINVAL) error = errno;
        ::close(fd);
        ::unlink(probe.constData());
    }
    if (!error) return {};
    const QStorageInfo storage(folder);
    return describeDataFolderError(folder, error, storage.isValid() ? storage.bytesAvailable() : -1);
}

InstanceLockResult acquireInstanceLock(QLockFile &lock, const QString &lockPath) {
    InstanceLockResult result;
    lock.setStaleLockTime(0); // held for the app's lifetime: only a dead holder makes it stale
    if (lock.tryLock(200)) {
        result.outcome = InstanceLockResult::Outcome::Acquired;
        return result;
    }
    const QLockFile::LockError error = lock.error();
    qint64 pid = 0;
    QString hostname, appname;
    const bool known = lock.getLockInfo(&pid, &hostname, &appname);
    if (error == QLockFile::LockFailedError && known && holderIsRunning(pid, hostname, appname)) {
        result.outcome = InstanceLockResult::Outcome::AlreadyRunning;
        result.holderPid = pid;
        result.message = QCoreApplication::translate(
                             "InstanceLock", "ExpertScope is already running (process %1 holds the lock %2).")
                             .arg(pid)
                             .arg(native(lockPath));
        return result;
    }
    // Not a live instance: no lock file can be written, or a stale one could not be removed. The
    // folder says why.
    result.message = dataFolderWriteProblem(QFileInfo(lockPath).absolutePath());
    if (!result.message.isEmpty()) return result;
    if (error == QLockFile::LockFailedError)
        result.message =
            QCoreApplication::translate(
                "InstanceLock",
                "The lock %1 was left by process %2, which is no longer running, and could not be "
                "removed. Delete it and start ExpertScope again.")
                .arg(native(lockPath))
                .arg(pid);
    else
        result.message =
            QCoreApplication::translate("InstanceLock", "Could not create the lock %1 in the data folder.")
                .arg(native(lockPath));
    return result;
}

} // namespace es
