// The desktop app's single-instance lock (a QLockFile next to the database) and what to say when
// it cannot be taken. QLockFile reports LockFailedError both when another live process holds the
// lock and when a stale one (its process gone) could not be removed — a read-only folder or a full
// disk leave it in place — and PermissionError / UnknownError when no lock file can be written at
// all. Only a lock whose process is alive (on this host, the program named in the lock) means
// "already running"; every other failure is named for what it is, by trying to write in the folder
// and reading the system's answer: the folder is not writable (which folder, and why), the disk is
// full, the folder is missing. Qt Core only; tested by tests/ui/desktop/test_instance_lock.cpp.
#pragma once

#include <QCoreApplication>
#include <QString>

class QLockFile;

namespace es {

struct InstanceLockResult {
    enum class Outcome {
        Acquired,       // this process holds the lock
        AlreadyRunning, // a live instance holds it: not an error, the user started a second copy
        Failed,         // a real failure: message says what is wrong; the app exits non-zero
    };
    Outcome outcome = Outcome::Failed;
    QString message;      // one or two sentences for the user (empty when acquired)
    qint64 holderPid = 0; // AlreadyRunning: the running instance
};

// Takes `lock` (a lock on lockPath, which the caller keeps for the app's lifetime), waiting up to
// 200 ms for a holder that is just exiting. A stale lock is taken over.
InstanceLockResult acquireInstanceLock(QLockFile &lock, const QString &lockPath);

// Why nothing can be written in `folder`, in words naming the folder; empty when a file can be
// created and written there. Creates (and removes) a small probe file.
QString dataFolderWriteProblem(const QString &folder);

// The sentence for a write in `folder` that failed with errno `error` (EACCES/EPERM, EROFS,
// ENOSPC/EDQUOT, ENOENT/ENOTDIR, others with the system's text). bytesFree < 0: unknown.
QString describeDataFolderError(const QString &folder, int error, qint64 bytesFree = -1);

} // namespace es
