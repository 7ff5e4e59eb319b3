// StoreConnection: the one SQLite connection that ChatStore and its repositories share, with the
// thread it belongs to, the last error, the clock and the change notifications; StoreTransaction
// is the transaction helper every multi-statement mutation uses.
// Invariants: the connection is used only on the thread that opened it (checkThread); a failure
// is recorded in lastError() before the call returns; notifications are sent only after a commit.
// Internal to es_storage; callers outside it use ChatStore.
#pragma once

#include <QCoreApplication>
#include <QLoggingCategory>
#include <QSqlDatabase>
#include <QString>

#include <functional>

class QThread;

Q_DECLARE_LOGGING_CATEGORY(lcStorage)

namespace es {

// The path that opens a private in-memory database (tests).
inline constexpr QLatin1String kMemoryDatabasePath(":memory:");

// What the repositories report after a commit; ChatStore turns each call into its signal.
struct ChangeNotifier {
    std::function<void()> conversationsChanged;
    std::function<void(qint64 conversationId)> messagesChanged;
    std::function<void()> presetsChanged;
};

class StoreConnection {
    // Messages share ChatStore's translation context.
    Q_DECLARE_TR_FUNCTIONS(es::ChatStore)
public:
    StoreConnection();
    ~StoreConnection();
    StoreConnection(const StoreConnection &) = delete;
    StoreConnection &operator=(const StoreConnection &) = delete;

    // Opens the SQLite file at path (kMemoryDatabasePath: in memory) with no setup beyond the
    // busy timeout; on failure *error says why and the connection stays closed.
    bool open(const QString &path, QString *error);
    void close();
    bool isOpen() const { return m_db.isValid() && m_db.isOpen(); }
    const QSqlDatabase &db() const { return m_db; }

    // The thread the connection belongs to (nullptr while none is bound).
    void setThread(QThread *thread) { m_thread = thread; }
    QThread *thread() const { return m_thread; }
    // True when called on the connection's thread with the connection open; else records why not.
    bool checkThread() const;

    // Records (and logs) a failure: what, with SQLite's message appended when there is one.
    // Returns false, so a caller can `return fail(…)`.
    bool fail(const QString &what, const QString &sqliteError) const;
    QString lastError() const { return m_lastError; }

    qint64 nowMs() const { return m_nowMs(); }
    void setClock(std::function<qint64()> nowMs) { m_nowMs = std::move(nowMs); }

    void setNotifier(ChangeNotifier notifier) { m_notifier = std::move(notifier); }
    void notifyConversationsChanged() const;
    void notifyMessagesChanged(qint64 conversationId) const;
    void notifyPresetsChanged() const;

private:
    QString m_connectionName;
    QSqlDatabase m_db;
    QThread *m_thread = nullptr;
    mutable QString m_lastError;
    std::function<qint64()> m_nowMs;
    ChangeNotifier m_notifier;
};

// BEGIN IMMEDIATE takes the write lock up front, so a transaction never fails half-way with
// SQLITE_BUSY on its first write. Rolls back on destruction unless committed. Declare it before
// the queries it covers, so they are finished before the rollback.
class StoreTransaction {
    Q_DECLARE_TR_FUNCTIONS(es::ChatStore)
public:
    explicit StoreTransaction(const StoreConnection &connection);
    ~StoreTransaction();
    StoreTransaction(const StoreTransaction &) = delete;
    StoreTransaction &operator=(const StoreTransaction &) = delete;
    bool ok() const { return m_active; }
    bool commit();

private:
    const StoreConnection &m_connection;
    bool m_active = false;
};

} // namespace es
