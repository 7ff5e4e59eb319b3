// StoreConnection and StoreTransaction. Each connection gets its own Qt SQL connection name, so
// several stores (tests, a second window) never share a QSqlDatabase.
#include "store_connection.h"

#include <QAtomicInteger>
#include <QDateTime>
#include <QDir>
#include <QFileInfo>
#include <QSqlError>
#include <QSqlQuery>
#include <QThread>

Q_LOGGING_CATEGORY(lcStorage, "es.storage", QtInfoMsg)

namespace es {

namespace {
QAtomicInteger<quint64> g_connectionCounter;
} // namespace

StoreConnection::StoreConnection()
    : m_connectionName(QStringLiteral("es.chat_store.%1").arg(g_connectionCounter.fetchAndAddRelaxed(1))),
      m_nowMs([] { return QDateTime::currentMSecsSinceEpoch(); }) {}

StoreConnection::~StoreConnection() { close(); }

bool StoreConnection::open(const QString &path, QString *error) {
    if (!QSqlDatabase::isDriverAvailable(QStringLiteral("QSQLITE"))) {
        *error = tr("Qt's SQLite driver (QSQLITE) is not installed.");
        return false;
    }
    if (path != kMemoryDatabasePath) QDir().mkpath(QFileInfo(path).absolutePath());
    m_db = QSqlDatabase::addDatabase(QStringLiteral("QSQLITE"), m_connectionName);
    m_db.setDatabaseName(path);
    // Another process (a second window, a backup tool) may hold the lock briefly.
    m_db.setConnectOptions(QStringLiteral("QSQLITE_BUSY_TIMEOUT=5000"));
    if (!m_db.open()) {
        *error = m_db.lastError().text();
        close();
        return false;
    }
    return true;
}

void StoreConnection::close() {
    if (m_db.isValid()) m_db.close();
    m_db = QSqlDatabase();
    if (QSqlDatabase::contains(m_connectionName)) QSqlDatabase::removeDatabase(m_connectionName);
}

bool StoreConnection::checkThread() const {
    // The connection belongs to the thread that opened it (Qt SQL's rule, and GPT4All's bug).
    Q_ASSERT_X(!m_thread || QThread::currentThread() == m_thread, "ChatStore",
               "used from a thread other than the one that opened it");
    if (m_thread && QThread::currentThread() != m_thread) {
        m_lastError = tr("The chat store was used from the wrong thread.");
        qCCritical(lcStorage).noquote() << m_lastError;
        return false;
    }
    if (!m_db.isOpen()) {
        m_lastError = tr("The chat database is not open.");
        return false;
    }
    return true;
}

bool StoreConnection::fail(const QString &what, const QString &sqliteError) const {
    m_lastError = sqliteError.isEmpty() ? what : what + QStringLiteral(": ") + sqliteError;
    qCWarning(lcStorage).noquote() << m_lastError;
    return false;
}

void StoreConnection::notifyConversationsChanged() const {
    if (m_notifier.conversationsChanged) m_notifier.conversationsChanged();
}

void StoreConnection::notifyMessagesChanged(qint64 conversationId) const {
    if (m_notifier.messagesChanged) m_notifier.messagesChanged(conversationId);
}

void StoreConnection::notifyPresetsChanged() const {
    if (m_notifier.presetsChanged) m_notifier.presetsChanged();
}

// ---- StoreTransaction ---------------------------------------------------------------------------

StoreTransaction::StoreTransaction(const StoreConnection &connection) : m_connection(connection) {
    QSqlQuery q(m_connection.db());
    m_active = q.exec(QStringLiteral("BEGIN IMMEDIATE"));
    if (!m_active) m_connection.fail(tr("Could not start a transaction"), q.lastError().text());
}

StoreTransaction::~StoreTransaction() {
    if (!m_active) return;
    QSqlQuery q(m_connection.db());
    q.exec(QStringLiteral("ROLLBACK"));
}

bool StoreTransaction::commit() {
    QSqlQuery q(m_connection.db());
    if (!q.exec(QStringLiteral("COMMIT")))
        return m_connection.fail(tr("Could not commit a transaction"), q.lastError().text());
    m_active = false;
    return true;
}

} // namespace es
