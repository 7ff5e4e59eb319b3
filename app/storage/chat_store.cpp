// ChatStore implementation. Multi-statement mutations run inside Transaction (BEGIN IMMEDIATE,
// rolled back unless committed); a single statement relies on SQLite's implicit transaction.
// Signals are emitted only after a commit, so a listener never sees uncommitted state.
#include "chat_store.h"

#include "presets.h"
#include "schema_migrations.h"

#include <QAtomicInteger>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonDocument>
#include <QLoggingCategory>
#include <QRegularExpression>
#include <QSet>
#include <QSqlError>
#include <QSqlQuery>
#include <QThread>

#include <algorithm>

Q_LOGGING_CATEGORY(lcStorage, "es.storage", QtInfoMsg)

namespace es {

namespace {

const QLatin1String kMemoryPath(":memory:");

// Column lists shared by every SELECT that builds a value type (readConversation/readMessage
// read them in this order).
const QLatin1String kConversationColumns("c.id, c.title, c.created_at, c.updated_at, c.pinned, "
                                         "c.current_leaf_id, c.settings");
const QLatin1String kMessageColumns("m.id, m.conversation_id, m.parent_id, m.role, m.content, m.created_at, "
                                    "m.state, m.finish_reason, m.model_name, m.model_hash, m.precision, "
                                    "m.sampling, m.seed");
const QLatin1String kPresetColumns("id, name, prefix, system_prompt, sampling, position, builtin_key");

// The FTS snippet/highlight markers: control characters that chat text does not contain.
const QChar kMarkOpen(0x01);
const QChar kMarkClose(0x02);

QVariant nullable(const std::optional<qint64> &v) { return v ? QVariant(*v) : QVariant(); }
QVariant nullable(const std::optional<int> &v) { return v ? QVariant(*v) : QVariant(); }
QVariant nullable(const std::optional<double> &v) { return v ? QVariant(*v) : QVariant(); }
QVariant seedVariant(const std::optional<quint64> &v) { return v ? QVariant(qint64(*v)) : QVariant(); }

QString jsonText(const QJsonObject &o) { return QString::fromUtf8(QJsonDocument(o).toJson(QJsonDocument::Compact)); }
QJsonObject jsonObject(const QVariant &v) { return QJsonDocument::fromJson(v.toString().toUtf8()).object(); }

QDateTime fromMs(const QVariant &v) { return QDateTime::fromMSecsSinceEpoch(v.toLongLong(), Qt::UTC); }

template <typename T>
std::optional<T> optionalValue(const QVariant &v) {
    if (v.isNull()) return std::nullopt;
    return v.value<T>();
}

Conversation readConversation(const QSqlQuery &q) {
    Conversation c;
    c.id = q.value(0).toLongLong();
    c.title = q.value(1).toString();
    c.createdAt = fromMs(q.value(2));
    c.updatedAt = fromMs(q.value(3));
    c.pinned = q.value(4).toInt() != 0;
    c.currentLeafId = optionalValue<qint64>(q.value(5));
    c.settings = ConversationSettings::fromJson(jsonObject(q.value(6)));
    return c;
}

Message readMessage(const QSqlQuery &q) {
    Message m;
    m.id = q.value(0).toLongLong();
    m.conversationId = q.value(1).toLongLong();
    m.parentId = optionalValue<qint64>(q.value(2));
    m.role = messageRoleFromString(q.value(3).toString()).value_or(MessageRole::User);
    m.content = q.value(4).toString();
    m.createdAt = fromMs(q.value(5));
    m.state = messageStateFromString(q.value(6).toString()).value_or(MessageState::Failed);
    m.finishReason = q.value(7).toString();
    m.generation.modelName = q.value(8).toString();
    m.generation.modelHash = q.value(9).toString();
    m.generation.precision = q.value(10).toString();
    m.generation.sampling = SamplingParams::fromJson(jsonObject(q.value(11)));
    if (!q.value(12).isNull()) m.generation.seed = quint64(q.value(12).toLongLong());
    return m;
}

Preset readPreset(const QSqlQuery &q) {
    Preset p;
    p.id = q.value(0).toLongLong();
    p.name = q.value(1).toString();
    p.prefix = q.value(2).toString();
    p.systemPrompt = q.value(3).toString();
    p.sampling = SamplingParams::fromJson(jsonObject(q.value(4)));
    p.position = q.value(5).toInt();
    p.builtinKey = q.value(6).toString();
    return p;
}

// Removes the FTS markers from s, recording where the marked spans are in the result.
QString stripMarkers(const QString &s, QList<TextRange> *ranges) {
    QString out;
    out.reserve(s.size());
    int open = -1;
    for (QChar ch : s) {
        if (ch == kMarkOpen) {
            open = int(out.size());
        } else if (ch == kMarkClose) {
            if (open >= 0 && out.size() > open) {
                // Adjacent trigram matches come back as separate spans; merge them.
                if (!ranges->isEmpty() && ranges->last().start + ranges->last().length == open)
                    ranges->last().length += int(out.size()) - open;
                else
                    ranges->append({open, int(out.size()) - open});
            }
            open = -1;
        } else {
            out.append(ch);
        }
    }
    return out;
}

// Every case-insensitive occurrence of each term in s, sorted and merged.
QList<TextRange> findTerms(const QString &s, const QStringList &terms) {
    QList<TextRange> found;
    for (const QString &t : terms)
        for (qsizetype at = s.indexOf(t, 0, Qt::CaseInsensitive); at >= 0;
             at = s.indexOf(t, at + t.size(), Qt::CaseInsensitive))
            found.append({int(at), int(t.size())});
    std::sort(found.begin(), found.end(), [](const TextRange &a, const TextRange &b) { return a.start < b.start; });
    QList<TextRange> merged;
    for (const TextRange &r : found) {
        if (!merged.isEmpty() && r.start <= merged.last().start + merged.last().length)
            merged.last().length = std::max(merged.last().length, r.start + r.length - merged.last().start);
        else
            merged.append(r);
    }
    return merged;
}

// A window of text around the first match, like FTS5's snippet(), for the LIKE path.
QString makeSnippet(const QString &text, const QStringList &terms, QList<TextRange> *highlights) {
    constexpr int kBefore = 16, kAfter = 48;
    const QList<TextRange> all = findTerms(text, terms);
    const int first = all.isEmpty() ? 0 : all.first().start;
    qsizetype start = std::max(0, first - kBefore);
    qsizetype end = std::min<qsizetype>(text.size(), first + kAfter);
    // Never cut a surrogate pair in half.
    if (start > 0 && text.at(start).isLowSurrogate()) --start;
    if (end < text.size() && text.at(end).isLowSurrogate()) ++end;
    const QString ellipsis = QStringLiteral("…");
    QString snippet = (start > 0 ? ellipsis : QString()) + text.mid(start, end - start) +
                      (end < text.size() ? ellipsis : QString());
    const int shift = (start > 0 ? int(ellipsis.size()) : 0) - int(start);
    for (const TextRange &r : all) {
        if (r.start < start || r.start + r.length > end) continue;
        highlights->append({r.start + shift, r.length});
    }
    return snippet;
}

QString likePattern(const QString &term) {
    QString escaped = term;
    escaped.replace(QLatin1Char('\\'), QLatin1String("\\\\"));
    escaped.replace(QLatin1Char('%'), QLatin1String("\\%"));
    escaped.replace(QLatin1Char('_'), QLatin1String("\\_"));
    return QLatin1Char('%') + escaped + QLatin1Char('%');
}

// SQLite primary result codes that mean "this file is damaged", as opposed to busy, locked,
// read-only or I/O errors, after which the file must not be moved aside.
bool isCorruptionCode(const QSqlError &e) {
    const int code = e.nativeErrorCode().toInt() & 0xff;
    return code == 11 /* SQLITE_CORRUPT */ || code == 26 /* SQLITE_NOTADB */;
}

QAtomicInteger<quint64> g_connectionCounter;

} // namespace

// ---- Transaction ---------------------------------------------------------------------------------

// BEGIN IMMEDIATE takes the write lock up front, so a transaction never fails half-way with
// SQLITE_BUSY on its first write. Rolls back on destruction unless committed. Declare it before
// the queries it covers, so they are finished before the rollback.
class ChatStore::Transaction {
public:
    explicit Transaction(ChatStore &store) : m_store(store) {
        QSqlQuery q(m_store.m_db);
        m_active = q.exec(QStringLiteral("BEGIN IMMEDIATE"));
        if (!m_active) m_store.fail(tr("Could not start a transaction"), q.lastError().text());
    }
    ~Transaction() {
        if (!m_active) return;
        QSqlQuery q(m_store.m_db);
        q.exec(QStringLiteral("ROLLBACK"));
    }
    bool ok() const { return m_active; }
    bool commit() {
        QSqlQuery q(m_store.m_db);
        if (!q.exec(QStringLiteral("COMMIT")))
            return m_store.fail(tr("Could not commit a transaction"), q.lastError().text());
        m_active = false;
        return true;
    }

private:
    static QString tr(const char *s) { return ChatStore::tr(s); }
    ChatStore &m_store;
    bool m_active = false;
};

// ---- Small query helper ----------------------------------------------------------------------------

namespace {
// Prepares sql, binds values in order and executes; on failure the query's lastError() tells.
// A null QString binds as SQL NULL in Qt SQL; text columns are NOT NULL, so it becomes ''.
// (Nullable columns are bound from std::optional through nullable(), never from a QString.)
bool run(QSqlQuery &q, const QString &sql, const QVariantList &values = {}) {
    if (!q.prepare(sql)) return false;
    for (const QVariant &v : values) {
        if (v.typeId() == QMetaType::QString && v.toString().isNull())
            q.addBindValue(QStringLiteral(""));
        else
            q.addBindValue(v);
    }
    return q.exec();
}
} // namespace

// ---- Opening ---------------------------------------------------------------------------------------

ChatStore::ChatStore(QObject *parent)
    : QObject(parent),
      m_connectionName(QStringLiteral("es.chat_store.%1").arg(g_connectionCounter.fetchAndAddRelaxed(1))),
      m_nowMs([] { return QDateTime::currentMSecsSinceEpoch(); }) {}

ChatStore::~ChatStore() { close(); }

int ChatStore::latestSchemaVersion() { return schema::latestVersion(); }

bool ChatStore::checkThread() const {
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

bool ChatStore::fail(const QString &what, const QString &sqliteError) const {
    m_lastError = sqliteError.isEmpty() ? what : what + QStringLiteral(": ") + sqliteError;
    qCWarning(lcStorage).noquote() << m_lastError;
    return false;
}

qint64 ChatStore::nowMs() const { return m_nowMs(); }

bool ChatStore::isOpen() const { return m_db.isValid() && m_db.isOpen(); }

bool ChatStore::openConnection(const QString &path, QString *error) {
    if (!QSqlDatabase::isDriverAvailable(QStringLiteral("QSQLITE"))) {
        *error = tr("Qt's SQLite driver (QSQLITE) is not installed.");
        return false;
    }
    if (path != kMemoryPath) QDir().mkpath(QFileInfo(path).absolutePath());
    m_db = QSqlDatabase::addDatabase(QStringLiteral("QSQLITE"), m_connectionName);
    m_db.setDatabaseName(path);
    // Another process (a second window, a backup tool) may hold the lock briefly.
    m_db.setConnectOptions(QStringLiteral("QSQLITE_BUSY_TIMEOUT=5000"));
    if (!m_db.open()) {
        *error = m_db.lastError().text();
        closeConnection();
        return false;
    }
    return true;
}

void ChatStore::closeConnection() {
    if (m_db.isValid()) m_db.close();
    m_db = QSqlDatabase();
    if (QSqlDatabase::contains(m_connectionName)) QSqlDatabase::removeDatabase(m_connectionName);
}

void ChatStore::close() {
    if (m_thread && QThread::currentThread() != m_thread)
        qCCritical(lcStorage) << "ChatStore closed from a thread other than the one that opened it";
    closeConnection();
    m_thread = nullptr;
    m_path.clear();
}

// Empty when the file is sound, else the first problem in words (the full list goes to the
// log). *corrupt tells damage (move the file aside) from other failures such as a lock or a
// permission problem (leave the file alone). Runs the full check, not quick_check: it is the one
// chance to notice damage before writing to the file, and chat databases are small.
QString ChatStore::integrityProblem(bool *corrupt) {
    *corrupt = false;
    QSqlQuery q(m_db);
    if (!q.exec(QStringLiteral("PRAGMA integrity_check(100)"))) {
        *corrupt = isCorruptionCode(q.lastError());
        const QString why = q.lastError().databaseText();
        return why.isEmpty() ? q.lastError().text() : why;
    }
    QStringList problems;
    while (q.next())
        for (const QString &line : q.value(0).toString().split(QLatin1Char('\n'), Qt::SkipEmptyParts))
            if (!line.startsWith(QLatin1String("***"))) problems.append(line.trimmed());
    if (problems == QStringList{QStringLiteral("ok")}) return {};
    *corrupt = true;
    qCWarning(lcStorage).noquote() << "integrity check of" << m_path << "failed:" << problems.join(QLatin1String("; "));
    QString first = problems.value(0, tr("the integrity check returned nothing"));
    if (problems.size() > 1) first += tr(", and %n more problem(s)", nullptr, int(problems.size() - 1));
    return first;
}

bool ChatStore::applyConnectionPragmas(QString *error) {
    QSqlQuery q(m_db);
    if (!q.exec(QStringLiteral("PRAGMA journal_mode = WAL")) || !q.next()) {
        *error = q.lastError().text();
        return false;
    }
    const QString mode = q.value(0).toString();
    if (mode != QLatin1String("wal") && m_path != kMemoryPath) {
        *error = tr("could not switch to WAL mode (journal_mode is %1)").arg(mode);
        return false;
    }
    q.finish();
    if (!q.exec(QStringLiteral("PRAGMA synchronous = NORMAL"))) {
        *error = q.lastError().text();
        return false;
    }
    // Off while migrating (SQLite's documented procedure for schema changes); migrate() checks
    // foreign_key_check before each commit and switches enforcement on afterwards.
    if (!q.exec(QStringLiteral("PRAGMA foreign_keys = OFF"))) {
        *error = q.lastError().text();
        return false;
    }
    return true;
}

OpenResult ChatStore::open(const QString &path) {
    OpenResult result;
    close();
    m_thread = QThread::currentThread();
    m_path = path;
    const bool inMemory = path == kMemoryPath;
    QString error;
    auto failed = [&](const QString &message) {
        closeConnection();
        m_thread = nullptr;
        m_path.clear();
        result.status = OpenResult::Status::Failed;
        result.message = message;
        m_lastError = message;
        qCWarning(lcStorage).noquote() << message;
        return result;
    };

    if (!openConnection(path, &error))
        return failed(tr("Could not open the chat database %1: %2").arg(path, error));

    bool recovered = false;
    if (!inMemory) {
        bool corrupt = false;
        const QString problem = integrityProblem(&corrupt);
        if (!problem.isEmpty() && !corrupt)
            return failed(tr("Could not read the chat database %1: %2").arg(path, problem));
        if (corrupt) {
            closeConnection();
            const QString stamp = QDateTime::currentDateTime().toString(QStringLiteral("yyyyMMdd-HHmmss"));
            QString aside = path + QLatin1Char('.') + stamp + QStringLiteral(".corrupt");
            for (int n = 2; QFileInfo::exists(aside); ++n)
                aside = path + QLatin1Char('.') + stamp + QLatin1Char('-') + QString::number(n) +
                        QStringLiteral(".corrupt");
            if (!QFile::rename(path, aside))
                return failed(tr("The chat database %1 is damaged (%2) and could not be moved aside; "
                                 "it was left as it is.")
                                  .arg(path, problem));
            // The -wal file belongs to the broken database; keep them together so the copy
            // opens as SQLite saw it. The -shm index is rebuilt from the WAL.
            if (QFileInfo::exists(path + QStringLiteral("-wal")))
                QFile::rename(path + QStringLiteral("-wal"), aside + QStringLiteral("-wal"));
            QFile::remove(path + QStringLiteral("-shm"));
            if (!openConnection(path, &error))
                return failed(tr("Could not create a new chat database %1: %2").arg(path, error));
            recovered = true;
            result.corruptCopyPath = aside;
            result.message = tr("The chat database was damaged (%1). It was moved to %2 and a new, empty "
                                "database was started. Conversations may be recoverable from the damaged "
                                "copy with “sqlite3 <copy> .recover”.")
                                 .arg(problem, QDir::toNativeSeparators(aside));
        }
    }

    // Refusals first: setting WAL mode below already rewrites the file header.
    if (!checkSchemaVersion(&result)) return failed(result.message);
    if (!applyConnectionPragmas(&error))
        return failed(tr("Could not set up the chat database %1: %2").arg(path, error));
    if (!migrate(&result)) return failed(result.message);
    {
        QSqlQuery q(m_db);
        if (!q.exec(QStringLiteral("PRAGMA foreign_keys = ON")))
            return failed(tr("Could not enable foreign keys: %1").arg(q.lastError().text()));
    }
    if (!refreshBuiltinPresets())
        return failed(tr("Could not set up the built-in presets: %1").arg(m_lastError));
    const int interrupted = recoverPartialReplies();
    if (interrupted < 0) return failed(tr("Could not recover interrupted replies: %1").arg(m_lastError));
    result.recoveredReplies = interrupted;
    result.toVersion = schema::latestVersion();
    if (recovered) {
        result.status = OpenResult::Status::RecoveredFromCorruption;
    } else if (interrupted > 0 && result.message.isEmpty()) {
        result.message = tr("%n reply(ies) cut off when ExpertScope last closed were kept as they were.",
                            nullptr, interrupted);
    }
    qCDebug(lcStorage).noquote() << "opened" << path << "schema" << result.toVersion;
    return result;
}

// Reads user_version and refuses, without writing anything, a database this build must not
// touch: one from a newer build, or a foreign SQLite file.
bool ChatStore::checkSchemaVersion(OpenResult *result) {
    QSqlQuery q(m_db);
    if (!q.exec(QStringLiteral("PRAGMA user_version")) || !q.next()) {
        result->message = tr("Could not read the schema version: %1").arg(q.lastError().text());
        return false;
    }
    const int version = q.value(0).toInt();
    q.finish();
    const int latest = schema::latestVersion();
    result->fromVersion = version;
    result->toVersion = version;
    if (version > latest) {
        result->message = tr("The chat database %1 was written by a newer ExpertScope (schema v%2; this "
                             "version reads up to v%3). It was left untouched.")
                              .arg(m_path)
                              .arg(version)
                              .arg(latest);
        return false;
    }
    if (version == 0) {
        if (!q.exec(QStringLiteral("SELECT count(*) FROM sqlite_schema WHERE name NOT LIKE 'sqlite_%'")) ||
            !q.next()) {
            result->message = tr("Could not read the database schema: %1").arg(q.lastError().text());
            return false;
        }
        if (q.value(0).toInt() > 0) {
            result->message = tr("%1 is not an ExpertScope chat database (it has tables but no schema "
                                 "version). It was left untouched.")
                                  .arg(m_path);
            return false;
        }
    }
    return true;
}

bool ChatStore::migrate(OpenResult *result) {
    const int version = result->fromVersion;
    if (version == schema::latestVersion()) {
        if (result->status != OpenResult::Status::RecoveredFromCorruption) result->status = OpenResult::Status::Opened;
        return true;
    }
    if (version > 0 && m_path != kMemoryPath) {
        // A consistent copy (VACUUM INTO reads one snapshot, WAL included) before any change.
        QSqlQuery q(m_db);
        const QString backup = m_path + QStringLiteral(".bak-v") + QString::number(version);
        QFile::remove(backup);
        if (!run(q, QStringLiteral("VACUUM INTO ?"), {backup})) {
            result->message = tr("Could not back up the chat database to %1 before upgrading it: %2. "
                                 "It was not upgraded.")
                                  .arg(backup, q.lastError().text());
            return false;
        }
        result->backupPath = backup;
    }

    int current = version;
    for (const schema::Migration &step : schema::migrations()) {
        if (step.version <= current) continue;
        QString error;
        {
            Transaction t(*this);
            bool ok = t.ok();
            if (!ok) error = m_lastError;
            ok = ok && step.apply(m_db, &error);
            if (ok) {
                QSqlQuery check(m_db);
                if (!check.exec(QStringLiteral("PRAGMA foreign_key_check"))) {
                    error = check.lastError().text();
                    ok = false;
                } else if (check.next()) {
                    error = tr("foreign key check failed in table %1").arg(check.value(0).toString());
                    ok = false;
                }
            }
            if (ok) {
                QSqlQuery set(m_db);
                ok = set.exec(QStringLiteral("PRAGMA user_version = %1").arg(step.version));
                if (!ok) error = set.lastError().text();
            }
            if (ok) {
                ok = t.commit();
                if (!ok) error = m_lastError;
            }
            if (!ok) {
                result->message = tr("Upgrading the chat database to schema v%1 (%2) failed: %3. The "
                                     "database was left at schema v%4.")
                                      .arg(step.version)
                                      .arg(QString::fromUtf8(step.summary), error)
                                      .arg(current);
                if (!result->backupPath.isEmpty())
                    result->message += QLatin1Char(' ') + tr("A backup is at %1.").arg(result->backupPath);
                return false;
            }
        }
        current = step.version;
        qCDebug(lcStorage).noquote() << "migrated" << m_path << "to schema" << current;
    }
    result->toVersion = current;
    if (version > 0) qCInfo(lcStorage).noquote() << "upgraded" << m_path << "from schema" << version << "to" << current;
    if (result->status != OpenResult::Status::RecoveredFromCorruption)
        result->status = version == 0 ? OpenResult::Status::Created : OpenResult::Status::Migrated;
    if (version > 0 && result->message.isEmpty())
        result->message = tr("The chat database was upgraded from schema v%1 to v%2; the previous version "
                             "was saved as %3.")
                              .arg(version)
                              .arg(current)
                              .arg(result->backupPath.isEmpty() ? tr("(no copy: in memory)")
                                                                : QDir::toNativeSeparators(result->backupPath));
    return true;
}

int ChatStore::schemaVersion() const {
    if (!checkThread()) return -1;
    QSqlQuery q(m_db);
    if (!q.exec(QStringLiteral("PRAGMA user_version")) || !q.next()) return -1;
    return q.value(0).toInt();
}

QVariantMap ChatStore::diagnostics() const {
    QVariantMap out;
    if (!checkThread()) return out;
    QSqlQuery q(m_db);
    for (const char *pragma : {"journal_mode", "foreign_keys", "synchronous", "user_version"}) {
        if (q.exec(QStringLiteral("PRAGMA %1").arg(QLatin1String(pragma))) && q.next())
            out.insert(QLatin1String(pragma), q.value(0));
    }
    if (q.exec(QStringLiteral("SELECT sqlite_version()")) && q.next())
        out.insert(QStringLiteral("sqlite_version"), q.value(0));
    return out;
}

// Built-ins are owned by the code: their text is refreshed at every open (so a new release's
// wording reaches existing users), their position is the user's.
bool ChatStore::refreshBuiltinPresets() {
    Transaction t(*this);
    if (!t.ok()) return false;
    bool changed = false;
    for (const Preset &p : builtinPresets()) {
        QSqlQuery q(m_db);
        const QVariantList values = {p.name, p.prefix, p.systemPrompt, jsonText(p.sampling.toJson()), p.builtinKey};
        if (!run(q, QStringLiteral("UPDATE presets SET name = ?, prefix = ?, system_prompt = ?, sampling = ? "
                                   "WHERE builtin_key = ?"),
                 values))
            return fail(tr("Could not update a built-in preset"), q.lastError().text());
        if (q.numRowsAffected() == 1) continue;
        if (!run(q,
                 QStringLiteral("INSERT INTO presets (name, prefix, system_prompt, sampling, builtin_key, position) "
                                "VALUES (?, ?, ?, ?, ?, (SELECT coalesce(max(position) + 1, 0) FROM presets))"),
                 values))
            return fail(tr("Could not add a built-in preset"), q.lastError().text());
        changed = true;
    }
    if (!t.commit()) return false;
    if (changed) emit presetsChanged();
    return true;
}

// ---- Conversations ----------------------------------------------------------------------------------

std::optional<qint64> ChatStore::createConversation(const QString &title, const ConversationSettings &settings) {
    if (!checkThread()) return std::nullopt;
    QSqlQuery q(m_db);
    const qint64 now = nowMs();
    if (!run(q, QStringLiteral("INSERT INTO conversations (title, created_at, updated_at, settings) VALUES (?, ?, ?, ?)"),
             {title, now, now, jsonText(settings.toJson())})) {
        fail(tr("Could not create a conversation"), q.lastError().text());
        return std::nullopt;
    }
    const qint64 id = q.lastInsertId().toLongLong();
    emit conversationsChanged();
    return id;
}

bool ChatStore::renameConversation(qint64 id, const QString &title) {
    if (!checkThread()) return false;
    QSqlQuery q(m_db);
    // Renaming does not touch updated_at: the list order follows conversation activity.
    if (!run(q, QStringLiteral("UPDATE conversations SET title = ? WHERE id = ?"), {title, id}))
        return fail(tr("Could not rename conversation %1").arg(id), q.lastError().text());
    if (q.numRowsAffected() != 1) return fail(tr("There is no conversation %1").arg(id), {});
    emit conversationsChanged();
    return true;
}

bool ChatStore::setPinned(qint64 id, bool pinned) {
    if (!checkThread()) return false;
    QSqlQuery q(m_db);
    if (!run(q, QStringLiteral("UPDATE conversations SET pinned = ? WHERE id = ?"), {pinned ? 1 : 0, id}))
        return fail(tr("Could not pin conversation %1").arg(id), q.lastError().text());
    if (q.numRowsAffected() != 1) return fail(tr("There is no conversation %1").arg(id), {});
    emit conversationsChanged();
    return true;
}

bool ChatStore::setConversationSettings(qint64 id, const ConversationSettings &settings) {
    if (!checkThread()) return false;
    QSqlQuery q(m_db);
    if (!run(q, QStringLiteral("UPDATE conversations SET settings = ? WHERE id = ?"), {jsonText(settings.toJson()), id}))
        return fail(tr("Could not save the settings of conversation %1").arg(id), q.lastError().text());
    if (q.numRowsAffected() != 1) return fail(tr("There is no conversation %1").arg(id), {});
    emit conversationsChanged();
    return true;
}

std::optional<Conversation> ChatStore::conversation(qint64 id) const {
    if (!checkThread()) return std::nullopt;
    QSqlQuery q(m_db);
    if (!run(q, QStringLiteral("SELECT %1 FROM conversations c WHERE c.id = ?").arg(kConversationColumns), {id})) {
        fail(tr("Could not read conversation %1").arg(id), q.lastError().text());
        return std::nullopt;
    }
    if (!q.next()) {
        fail(tr("There is no conversation %1").arg(id), {});
        return std::nullopt;
    }
    return readConversation(q);
}

QList<Conversation> ChatStore::conversations() const {
    QList<Conversation> out;
    if (!checkThread()) return out;
    QSqlQuery q(m_db);
    if (!run(q, QStringLiteral("SELECT %1 FROM conversations c ORDER BY c.pinned DESC, c.updated_at DESC, c.id DESC")
                    .arg(kConversationColumns))) {
        fail(tr("Could not list conversations"), q.lastError().text());
        return out;
    }
    while (q.next()) out.append(readConversation(q));
    return out;
}

QList<Message> ChatStore::messagesOf(qint64 conversationId) const {
    QList<Message> out;
    QSqlQuery q(m_db);
    if (!run(q, QStringLiteral("SELECT %1 FROM messages m WHERE m.conversation_id = ? ORDER BY m.id").arg(kMessageColumns),
             {conversationId})) {
        fail(tr("Could not read the messages of conversation %1").arg(conversationId), q.lastError().text());
        return out;
    }
    while (q.next()) out.append(readMessage(q));
    return out;
}

std::optional<ConversationSnapshot> ChatStore::deleteConversation(qint64 id) {
    if (!checkThread()) return std::nullopt;
    ConversationSnapshot snapshot;
    {
        Transaction t(*this);
        if (!t.ok()) return std::nullopt;
        const std::optional<Conversation> c = conversation(id);
        if (!c) return std::nullopt;
        snapshot.conversation = *c;
        snapshot.messages = messagesOf(id);
        for (const Message &m : std::as_const(snapshot.messages)) {
            if (std::optional<MessageMetrics> mm = metrics(m.id)) snapshot.metrics.insert(m.id, *mm);
            const QList<LayerRouting> r = routing(m.id);
            if (!r.isEmpty()) snapshot.routing.insert(m.id, r);
            if (std::optional<MessageProfile> p = profile(m.id)) snapshot.profiles.insert(m.id, *p);
        }
        QSqlQuery q(m_db);
        // Messages, metrics and routing go with it (ON DELETE CASCADE); the FTS triggers fire.
        if (!run(q, QStringLiteral("DELETE FROM conversations WHERE id = ?"), {id})) {
            fail(tr("Could not delete conversation %1").arg(id), q.lastError().text());
            return std::nullopt;
        }
        if (!t.commit()) return std::nullopt;
    }
    emit conversationsChanged();
    emit messagesChanged(id);
    return snapshot;
}

bool ChatStore::restoreConversation(const ConversationSnapshot &snapshot) {
    if (!checkThread()) return false;
    const Conversation &c = snapshot.conversation;
    {
        Transaction t(*this);
        if (!t.ok()) return false;
        QSqlQuery q(m_db);
        // The leaf is set last: it references a message not inserted yet.
        if (!run(q, QStringLiteral("INSERT INTO conversations (id, title, created_at, updated_at, pinned, settings) "
                                   "VALUES (?, ?, ?, ?, ?, ?)"),
                 {c.id, c.title, c.createdAt.toMSecsSinceEpoch(), c.updatedAt.toMSecsSinceEpoch(), c.pinned ? 1 : 0,
                  jsonText(c.settings.toJson())}))
            return fail(tr("Could not restore conversation %1").arg(c.id), q.lastError().text());
        QList<Message> messages = snapshot.messages;
        std::sort(messages.begin(), messages.end(), [](const Message &a, const Message &b) { return a.id < b.id; });
        for (const Message &m : std::as_const(messages)) {
            if (!run(q,
                     QStringLiteral("INSERT INTO messages (id, conversation_id, parent_id, role, content, created_at, "
                                    "state, finish_reason, model_name, model_hash, precision, sampling, seed) "
                                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
                     {m.id, c.id, nullable(m.parentId), messageRoleName(m.role), m.content, m.createdAt.toMSecsSinceEpoch(),
                      messageStateName(m.state), m.finishReason, m.generation.modelName, m.generation.modelHash,
                      m.generation.precision, jsonText(m.generation.sampling.toJson()), seedVariant(m.generation.seed)}))
                return fail(tr("Could not restore message %1").arg(m.id), q.lastError().text());
        }
        for (auto it = snapshot.metrics.cbegin(); it != snapshot.metrics.cend(); ++it) {
            const MessageMetrics &mm = it.value();
            if (!run(q,
                     QStringLiteral("INSERT INTO message_metrics (message_id, ttft_ms, n_prompt_tokens, "
                                    "n_output_tokens, prefill_tok_s, decode_tok_s, itl_ms, token_times_ms, "
                                    "stop_reason, peak_memory_bytes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
                     {it.key(), nullable(mm.ttftMs), nullable(mm.nPromptTokens), nullable(mm.nOutputTokens),
                      nullable(mm.prefillTokS), nullable(mm.decodeTokS), encodeFloat32(mm.itlMs),
                      encodeFloat32(mm.tokenTimesMs), mm.stopReason, nullable(mm.peakMemoryBytes)}))
                return fail(tr("Could not restore the metrics of message %1").arg(it.key()), q.lastError().text());
        }
        for (auto it = snapshot.routing.cbegin(); it != snapshot.routing.cend(); ++it) {
            for (const LayerRouting &r : it.value()) {
                if (!run(q,
                         QStringLiteral("INSERT INTO message_routing (message_id, layer, expert_counts) "
                                        "VALUES (?, ?, ?)"),
                         {it.key(), r.layer, encodeUInt32(r.expertCounts)}))
                    return fail(tr("Could not restore the routing of message %1").arg(it.key()),
                                q.lastError().text());
            }
        }
        for (auto it = snapshot.profiles.cbegin(); it != snapshot.profiles.cend(); ++it)
            if (!writeProfile(it.key(), it.value(), false)) return false; // routing restored above
        if (!run(q, QStringLiteral("UPDATE conversations SET current_leaf_id = ? WHERE id = ?"),
                 {nullable(c.currentLeafId), c.id}))
            return fail(tr("Could not restore conversation %1").arg(c.id), q.lastError().text());
        if (!t.commit()) return false;
    }
    emit conversationsChanged();
    emit messagesChanged(c.id);
    return true;
}

std::optional<qint64> ChatStore::importConversation(const ConversationSnapshot &snapshot) {
    if (!checkThread()) return std::nullopt;
    const Conversation &c = snapshot.conversation;
    qint64 newId = 0;
    {
        Transaction t(*this);
        if (!t.ok()) return std::nullopt;
        QSqlQuery q(m_db);
        if (!run(q,
                 QStringLiteral("INSERT INTO conversations (title, created_at, updated_at, pinned, settings) "
                                "VALUES (?, ?, ?, ?, ?)"),
                 {c.title, c.createdAt.toMSecsSinceEpoch(), c.updatedAt.toMSecsSinceEpoch(), c.pinned ? 1 : 0,
                  jsonText(c.settings.toJson())})) {
            fail(tr("Could not import the conversation \"%1\"").arg(c.title), q.lastError().text());
            return std::nullopt;
        }
        newId = q.lastInsertId().toLongLong();
        QHash<qint64, qint64> ids; // snapshot id → new id
        ids.reserve(snapshot.messages.size());
        for (const Message &m : snapshot.messages) {
            std::optional<qint64> parent;
            if (m.parentId) {
                auto it = ids.constFind(*m.parentId);
                if (it == ids.constEnd()) {
                    fail(tr("Message %1 of the imported conversation names parent %2, which does not come "
                            "before it")
                             .arg(m.id)
                             .arg(*m.parentId),
                         {});
                    return std::nullopt;
                }
                parent = *it;
            }
            if (ids.contains(m.id)) {
                fail(tr("The imported conversation has two messages with id %1").arg(m.id), {});
                return std::nullopt;
            }
            if (!run(q,
                     QStringLiteral(
                         "INSERT INTO messages (conversation_id, parent_id, role, content, created_at, "
                         "state, finish_reason, model_name, model_hash, precision, sampling, seed) "
                         "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
                     {newId, nullable(parent), messageRoleName(m.role), m.content,
                      m.createdAt.toMSecsSinceEpoch(), messageStateName(m.state), m.finishReason,
                      m.generation.modelName, m.generation.modelHash, m.generation.precision,
                      jsonText(m.generation.sampling.toJson()), seedVariant(m.generation.seed)})) {
                fail(tr("Could not import message %1").arg(m.id), q.lastError().text());
                return std::nullopt;
            }
            ids.insert(m.id, q.lastInsertId().toLongLong());
        }
        for (auto it = snapshot.metrics.cbegin(); it != snapshot.metrics.cend(); ++it) {
            const MessageMetrics &mm = it.value();
            if (!ids.contains(it.key()) ||
                !run(q,
                     QStringLiteral("INSERT INTO message_metrics (message_id, ttft_ms, n_prompt_tokens, "
                                    "n_output_tokens, prefill_tok_s, decode_tok_s, itl_ms, token_times_ms, "
                                    "stop_reason, peak_memory_bytes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
                     {ids.value(it.key()), nullable(mm.ttftMs), nullable(mm.nPromptTokens),
                      nullable(mm.nOutputTokens), nullable(mm.prefillTokS), nullable(mm.decodeTokS),
                      encodeFloat32(mm.itlMs), encodeFloat32(mm.tokenTimesMs), mm.stopReason,
                      nullable(mm.peakMemoryBytes)})) {
                fail(tr("Could not import the metrics of message %1").arg(it.key()), q.lastError().text());
                return std::nullopt;
            }
        }
        for (auto it = snapshot.routing.cbegin(); it != snapshot.routing.cend(); ++it) {
            for (const LayerRouting &r : it.value()) {
                if (!ids.contains(it.key()) ||
                    !run(q,
                         QStringLiteral("INSERT INTO message_routing (message_id, layer, expert_counts) "
                                        "VALUES (?, ?, ?)"),
                         {ids.value(it.key()), r.layer, encodeUInt32(r.expertCounts)})) {
                    fail(tr("Could not import the routing of message %1").arg(it.key()),
                         q.lastError().text());
                    return std::nullopt;
                }
            }
        }
        for (auto it = snapshot.profiles.cbegin(); it != snapshot.profiles.cend(); ++it) {
            if (!ids.contains(it.key())) {
                fail(tr("The imported profile of message %1 belongs to no message").arg(it.key()), {});
                return std::nullopt;
            }
            if (!writeProfile(ids.value(it.key()), it.value(), false)) return std::nullopt;
        }
        std::optional<qint64> leaf;
        if (c.currentLeafId) {
            if (!ids.contains(*c.currentLeafId)) {
                fail(tr("The imported conversation's current message %1 is not one of its messages")
                         .arg(*c.currentLeafId),
                     {});
                return std::nullopt;
            }
            leaf = ids.value(*c.currentLeafId);
        }
        if (!run(q, QStringLiteral("UPDATE conversations SET current_leaf_id = ? WHERE id = ?"),
                 {nullable(leaf), newId})) {
            fail(tr("Could not import the conversation \"%1\"").arg(c.title), q.lastError().text());
            return std::nullopt;
        }
        if (!t.commit()) return std::nullopt;
    }
    emit conversationsChanged();
    emit messagesChanged(newId);
    return newId;
}

bool ChatStore::forEachMessage(qint64 conversationId,
                               const std::function<bool(const Message &)> &visit) const {
    if (!checkThread()) return false;
    QSqlQuery q(m_db);
    q.setForwardOnly(true); // rows are fetched as they are read, none kept
    if (!run(q,
             QStringLiteral("SELECT %1 FROM messages m WHERE m.conversation_id = ? ORDER BY m.id")
                 .arg(kMessageColumns),
             {conversationId}))
        return fail(tr("Could not read the messages of conversation %1").arg(conversationId),
                    q.lastError().text());
    while (q.next())
        if (!visit(readMessage(q))) return false;
    return true;
}

int ChatStore::messageCount(qint64 conversationId) const {
    if (!checkThread()) return 0;
    QSqlQuery q(m_db);
    if (!run(q, QStringLiteral("SELECT count(*) FROM messages WHERE conversation_id = ?"),
             {conversationId}) ||
        !q.next()) {
        fail(tr("Could not count the messages of conversation %1").arg(conversationId), q.lastError().text());
        return 0;
    }
    return q.value(0).toInt();
}

bool ChatStore::touchConversation(qint64 conversationId) {
    QSqlQuery q(m_db);
    if (!run(q, QStringLiteral("UPDATE conversations SET updated_at = ? WHERE id = ?"), {nowMs(), conversationId}))
        return fail(tr("Could not update conversation %1").arg(conversationId), q.lastError().text());
    return true;
}

// ---- Search -------------------------------------------------------------------------------------------

QList<SearchHit> ChatStore::search(const QString &text, int limit) const {
    if (!checkThread()) return {};
    const QStringList terms = text.split(QRegularExpression(QStringLiteral("\\s+")), Qt::SkipEmptyParts);
    if (terms.isEmpty() || limit <= 0) return {};
    // The trigram index can answer a term only if it has at least three characters.
    const bool indexable =
        std::all_of(terms.cbegin(), terms.cend(), [](const QString &t) { return t.toUcs4().size() >= 3; });
    return indexable ? searchFts(terms, limit) : searchLike(terms, limit);
}

namespace {
// Gathers hits per conversation; score: lower is better, title matches count double, and a
// conversation matching in both its title and its text ranks above one matching in either.
struct HitAccumulator {
    struct Entry {
        double titleScore = 0, messageScore = 0;
        bool inTitle = false, inMessage = false;
        SearchHit hit;
    };
    QHash<qint64, Entry> entries;

    void addTitle(qint64 conversationId, double score, const QList<TextRange> &highlights) {
        Entry &e = entries[conversationId];
        e.inTitle = true;
        e.titleScore = 2.0 * score;
        e.hit.titleHighlights = highlights;
    }
    // Messages arrive best first; only the best one per conversation gives the snippet.
    void addMessage(qint64 conversationId, qint64 messageId, double score, const QString &snippet,
                    const QList<TextRange> &highlights) {
        Entry &e = entries[conversationId];
        if (e.inMessage) return;
        e.inMessage = true;
        e.messageScore = score;
        e.hit.messageId = messageId;
        e.hit.snippet = snippet;
        e.hit.snippetHighlights = highlights;
    }
};
} // namespace

QList<SearchHit> ChatStore::searchFts(const QStringList &terms, int limit) const {
    QStringList quoted;
    for (QString t : terms) quoted.append(QLatin1Char('"') + t.replace(QLatin1Char('"'), QLatin1String("\"\"")) + QLatin1Char('"'));
    const QString match = quoted.join(QLatin1Char(' ')); // implicit AND of phrases

    HitAccumulator acc;
    QSqlQuery q(m_db);
    if (!run(q,
             QStringLiteral("SELECT rowid, bm25(conversations_fts), highlight(conversations_fts, 0, char(1), char(2)) "
                            "FROM conversations_fts WHERE conversations_fts MATCH ? ORDER BY rank LIMIT ?"),
             {match, limit})) {
        fail(tr("Search failed"), q.lastError().text());
        return {};
    }
    while (q.next()) {
        QList<TextRange> ranges;
        stripMarkers(q.value(2).toString(), &ranges);
        acc.addTitle(q.value(0).toLongLong(), q.value(1).toDouble(), ranges);
    }
    // Enough message hits that `limit` conversations are found even when one has many.
    if (!run(q,
             QStringLiteral("SELECT m.conversation_id, m.id, bm25(messages_fts), "
                            "snippet(messages_fts, 0, char(1), char(2), '…', 40) "
                            "FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid "
                            "WHERE messages_fts MATCH ? ORDER BY bm25(messages_fts) LIMIT ?"),
             {match, limit * 20})) {
        fail(tr("Search failed"), q.lastError().text());
        return {};
    }
    while (q.next()) {
        QList<TextRange> ranges;
        const QString snippet = stripMarkers(q.value(3).toString(), &ranges);
        acc.addMessage(q.value(0).toLongLong(), q.value(1).toLongLong(), q.value(2).toDouble(), snippet, ranges);
    }

    QList<SearchHit> hits;
    for (auto it = acc.entries.begin(); it != acc.entries.end(); ++it) {
        const std::optional<Conversation> c = conversation(it.key());
        if (!c) continue;
        SearchHit hit = it.value().hit;
        hit.conversation = *c;
        hit.score = it.value().titleScore + it.value().messageScore;
        hits.append(hit);
    }
    std::sort(hits.begin(), hits.end(), [](const SearchHit &a, const SearchHit &b) {
        if (a.score != b.score) return a.score < b.score;
        return a.conversation.updatedAt > b.conversation.updatedAt;
    });
    if (hits.size() > limit) hits.resize(limit);
    return hits;
}

QList<SearchHit> ChatStore::searchLike(const QStringList &terms, int limit) const {
    // No relevance score without the index: a title match counts -2, a message match -1, and
    // ties go to the most recently updated conversation.
    QStringList titleWhere, contentWhere;
    QVariantList patterns;
    for (const QString &t : terms) {
        titleWhere.append(QStringLiteral("title LIKE ? ESCAPE '\\'"));
        contentWhere.append(QStringLiteral("content LIKE ? ESCAPE '\\'"));
        patterns.append(likePattern(t));
    }
    HitAccumulator acc;
    QSqlQuery q(m_db);
    if (!run(q, QStringLiteral("SELECT id, title FROM conversations WHERE %1").arg(titleWhere.join(QLatin1String(" AND "))),
             patterns)) {
        fail(tr("Search failed"), q.lastError().text());
        return {};
    }
    while (q.next()) acc.addTitle(q.value(0).toLongLong(), -1.0, findTerms(q.value(1).toString(), terms));
    QVariantList values = patterns;
    values.append(limit * 20);
    if (!run(q,
             QStringLiteral("SELECT conversation_id, id, content FROM messages WHERE state <> 'partial' AND %1 "
                            "ORDER BY id DESC LIMIT ?")
                 .arg(contentWhere.join(QLatin1String(" AND "))),
             values)) {
        fail(tr("Search failed"), q.lastError().text());
        return {};
    }
    while (q.next()) {
        QList<TextRange> ranges;
        const QString snippet = makeSnippet(q.value(2).toString(), terms, &ranges);
        acc.addMessage(q.value(0).toLongLong(), q.value(1).toLongLong(), -1.0, snippet, ranges);
    }
    QList<SearchHit> hits;
    for (auto it = acc.entries.begin(); it != acc.entries.end(); ++it) {
        const std::optional<Conversation> c = conversation(it.key());
        if (!c) continue;
        SearchHit hit = it.value().hit;
        hit.conversation = *c;
        hit.score = it.value().titleScore + it.value().messageScore;
        hits.append(hit);
    }
    std::sort(hits.begin(), hits.end(), [](const SearchHit &a, const SearchHit &b) {
        if (a.score != b.score) return a.score < b.score;
        return a.conversation.updatedAt > b.conversation.updatedAt;
    });
    if (hits.size() > limit) hits.resize(limit);
    return hits;
}

// ---- Messages -----------------------------------------------------------------------------------------

std::optional<qint64> ChatStore::conversationOf(qint64 messageId) const {
    QSqlQuery q(m_db);
    if (!run(q, QStringLiteral("SELECT conversation_id FROM messages WHERE id = ?"), {messageId}) || !q.next()) {
        fail(tr("There is no message %1").arg(messageId), q.lastError().text());
        return std::nullopt;
    }
    return q.value(0).toLongLong();
}

std::optional<qint64> ChatStore::insertMessage(qint64 conversationId, std::optional<qint64> parentId, MessageRole role,
                                               const QString &content, MessageState state,
                                               const GenerationInfo &generation) {
    qint64 id = 0;
    {
        Transaction t(*this);
        if (!t.ok()) return std::nullopt;
        if (parentId) {
            const std::optional<qint64> parentConversation = conversationOf(*parentId);
            if (!parentConversation) return std::nullopt;
            if (*parentConversation != conversationId) {
                fail(tr("Message %1 belongs to another conversation").arg(*parentId), {});
                return std::nullopt;
            }
        }
        QSqlQuery q(m_db);
        if (!run(q,
                 QStringLiteral("INSERT INTO messages (conversation_id, parent_id, role, content, created_at, state, "
                                "model_name, model_hash, precision, sampling, seed) "
                                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
                 {conversationId, nullable(parentId), messageRoleName(role), content, nowMs(), messageStateName(state),
                  generation.modelName, generation.modelHash, generation.precision,
                  jsonText(generation.sampling.toJson()), seedVariant(generation.seed)})) {
            fail(tr("Could not add a message to conversation %1").arg(conversationId), q.lastError().text());
            return std::nullopt;
        }
        id = q.lastInsertId().toLongLong();
        if (!run(q, QStringLiteral("UPDATE conversations SET current_leaf_id = ?, updated_at = ? WHERE id = ?"),
                 {id, nowMs(), conversationId})) {
            fail(tr("Could not update conversation %1").arg(conversationId), q.lastError().text());
            return std::nullopt;
        }
        if (q.numRowsAffected() != 1) {
            fail(tr("There is no conversation %1").arg(conversationId), {});
            return std::nullopt;
        }
        if (!t.commit()) return std::nullopt;
    }
    emit messagesChanged(conversationId);
    emit conversationsChanged();
    return id;
}

std::optional<qint64> ChatStore::addMessage(qint64 conversationId, std::optional<qint64> parentId, MessageRole role,
                                            const QString &content, const GenerationInfo &generation) {
    if (!checkThread()) return std::nullopt;
    return insertMessage(conversationId, parentId, role, content, MessageState::Complete, generation);
}

std::optional<Message> ChatStore::message(qint64 id) const {
    if (!checkThread()) return std::nullopt;
    QSqlQuery q(m_db);
    if (!run(q, QStringLiteral("SELECT %1 FROM messages m WHERE m.id = ?").arg(kMessageColumns), {id})) {
        fail(tr("Could not read message %1").arg(id), q.lastError().text());
        return std::nullopt;
    }
    if (!q.next()) {
        fail(tr("There is no message %1").arg(id), {});
        return std::nullopt;
    }
    return readMessage(q);
}

bool ChatStore::setCurrentLeaf(qint64 conversationId, qint64 messageId) {
    if (!checkThread()) return false;
    QSqlQuery q(m_db);
    // Switching branches does not touch updated_at: browsing is not activity.
    if (!run(q, QStringLiteral("UPDATE conversations SET current_leaf_id = ? WHERE id = ? AND EXISTS "
                               "(SELECT 1 FROM messages WHERE id = ? AND conversation_id = ?)"),
             {messageId, conversationId, messageId, conversationId}))
        return fail(tr("Could not select message %1").arg(messageId), q.lastError().text());
    if (q.numRowsAffected() != 1)
        return fail(tr("Message %1 is not in conversation %2").arg(messageId).arg(conversationId), {});
    emit messagesChanged(conversationId);
    return true;
}

bool ChatStore::selectBranch(qint64 messageId) {
    if (!checkThread()) return false;
    const std::optional<qint64> conversationId = conversationOf(messageId);
    if (!conversationId) return false;
    qint64 leaf = messageId;
    QSqlQuery q(m_db);
    for (;;) {
        if (!run(q, QStringLiteral("SELECT max(id) FROM messages WHERE parent_id = ?"), {leaf}) || !q.next())
            return fail(tr("Could not follow the branch of message %1").arg(messageId), q.lastError().text());
        if (q.value(0).isNull()) break;
        leaf = q.value(0).toLongLong();
    }
    return setCurrentLeaf(*conversationId, leaf);
}

QList<Message> ChatStore::pathTo(qint64 messageId) const {
    QList<Message> out;
    if (!checkThread()) return out;
    QSqlQuery q(m_db);
    if (!run(q,
             QStringLiteral("WITH RECURSIVE path (id, depth) AS (SELECT ?, 0 UNION ALL "
                            "SELECT parent.parent_id, path.depth + 1 FROM messages parent JOIN path ON parent.id = path.id "
                            "WHERE parent.parent_id IS NOT NULL) "
                            "SELECT %1 FROM path JOIN messages m ON m.id = path.id ORDER BY path.depth DESC")
                 .arg(kMessageColumns),
             {messageId})) {
        fail(tr("Could not read the path to message %1").arg(messageId), q.lastError().text());
        return out;
    }
    while (q.next()) out.append(readMessage(q));
    return out;
}

QList<Message> ChatStore::activePath(qint64 conversationId) const {
    const std::optional<Conversation> c = conversation(conversationId);
    if (!c || !c->currentLeafId) return {};
    return pathTo(*c->currentLeafId);
}

QList<Message> ChatStore::children(qint64 messageId) const {
    QList<Message> out;
    if (!checkThread()) return out;
    QSqlQuery q(m_db);
    if (!run(q, QStringLiteral("SELECT %1 FROM messages m WHERE m.parent_id = ? ORDER BY m.id").arg(kMessageColumns),
             {messageId})) {
        fail(tr("Could not read the replies to message %1").arg(messageId), q.lastError().text());
        return out;
    }
    while (q.next()) out.append(readMessage(q));
    return out;
}

SiblingInfo ChatStore::siblings(qint64 messageId) const {
    SiblingInfo info;
    const std::optional<Message> m = message(messageId);
    if (!m) return info;
    QSqlQuery q(m_db);
    // `parent_id IS ?` also matches NULL: roots are siblings of each other.
    if (!run(q, QStringLiteral("SELECT id FROM messages WHERE conversation_id = ? AND parent_id IS ? ORDER BY id"),
             {m->conversationId, nullable(m->parentId)})) {
        fail(tr("Could not read the siblings of message %1").arg(messageId), q.lastError().text());
        return info;
    }
    while (q.next()) info.ids.append(q.value(0).toLongLong());
    info.index = int(info.ids.indexOf(messageId));
    return info;
}

std::optional<qint64> ChatStore::editAndResend(qint64 userMessageId, const QString &newContent) {
    const std::optional<Message> original = message(userMessageId);
    if (!original) return std::nullopt;
    if (original->role != MessageRole::User) {
        fail(tr("Message %1 is not a user message").arg(userMessageId), {});
        return std::nullopt;
    }
    return insertMessage(original->conversationId, original->parentId, MessageRole::User, newContent,
                         MessageState::Complete, {});
}

std::optional<qint64> ChatStore::regenerate(qint64 assistantMessageId, const GenerationInfo &generation) {
    const std::optional<Message> original = message(assistantMessageId);
    if (!original) return std::nullopt;
    if (original->role != MessageRole::Assistant || !original->parentId) {
        fail(tr("Message %1 is not an assistant reply").arg(assistantMessageId), {});
        return std::nullopt;
    }
    return insertMessage(original->conversationId, original->parentId, MessageRole::Assistant, QString(),
                         MessageState::Partial, generation);
}

// ---- Streaming replies -----------------------------------------------------------------------------------

std::optional<qint64> ChatStore::beginPartialReply(qint64 conversationId, qint64 parentId,
                                                   const GenerationInfo &generation) {
    if (!checkThread()) return std::nullopt;
    return insertMessage(conversationId, parentId, MessageRole::Assistant, QString(), MessageState::Partial, generation);
}

bool ChatStore::updatePartialReply(qint64 messageId, const QString &text) {
    if (!checkThread()) return false;
    QSqlQuery q(m_db);
    if (!run(q, QStringLiteral("UPDATE messages SET content = ? WHERE id = ? AND state = 'partial'"), {text, messageId}))
        return fail(tr("Could not save the reply so far"), q.lastError().text());
    if (q.numRowsAffected() != 1) return fail(tr("Message %1 is not a reply in progress").arg(messageId), {});
    return true;
}

bool ChatStore::endPartialReply(qint64 messageId, const QString &text, MessageState state, const QString &finishReason,
                                const MessageMetrics *metrics, const QList<LayerRouting> *routing,
                                const MessageProfile *profile) {
    if (!checkThread()) return false;
    qint64 conversationId = 0;
    {
        Transaction t(*this);
        if (!t.ok()) return false;
        const std::optional<qint64> owner = conversationOf(messageId);
        if (!owner) return false;
        conversationId = *owner;
        QSqlQuery q(m_db);
        if (!run(q, QStringLiteral("UPDATE messages SET content = ?, state = ?, finish_reason = ? "
                                   "WHERE id = ? AND state = 'partial'"),
                 {text, messageStateName(state), finishReason, messageId}))
            return fail(tr("Could not save reply %1").arg(messageId), q.lastError().text());
        if (q.numRowsAffected() != 1) return fail(tr("Message %1 is not a reply in progress").arg(messageId), {});
        if (metrics) {
            const MessageMetrics &mm = *metrics;
            if (!run(q,
                     QStringLiteral("INSERT OR REPLACE INTO message_metrics (message_id, ttft_ms, n_prompt_tokens, "
                                    "n_output_tokens, prefill_tok_s, decode_tok_s, itl_ms, token_times_ms, "
                                    "stop_reason, peak_memory_bytes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
                     {messageId, nullable(mm.ttftMs), nullable(mm.nPromptTokens), nullable(mm.nOutputTokens),
                      nullable(mm.prefillTokS), nullable(mm.decodeTokS), encodeFloat32(mm.itlMs),
                      encodeFloat32(mm.tokenTimesMs), mm.stopReason, nullable(mm.peakMemoryBytes)}))
                return fail(tr("Could not save the metrics of reply %1").arg(messageId), q.lastError().text());
        }
        if (routing) {
            if (!run(q, QStringLiteral("DELETE FROM message_routing WHERE message_id = ?"), {messageId}))
                return fail(tr("Could not save the routing of reply %1").arg(messageId), q.lastError().text());
            for (const LayerRouting &r : *routing) {
                if (!run(q,
                         QStringLiteral("INSERT INTO message_routing (message_id, layer, expert_counts) VALUES (?, ?, ?)"),
                         {messageId, r.layer, encodeUInt32(r.expertCounts)}))
                    return fail(tr("Could not save the routing of reply %1").arg(messageId), q.lastError().text());
            }
        }
        if (profile && !writeProfile(messageId, *profile, !routing || routing->isEmpty())) return false;
        if (!touchConversation(conversationId)) return false;
        if (!t.commit()) return false;
    }
    emit messagesChanged(conversationId);
    emit conversationsChanged();
    return true;
}

bool ChatStore::finishReply(qint64 messageId, const QString &text, const QString &finishReason,
                            const MessageMetrics &metrics, const QList<LayerRouting> &routing) {
    return endPartialReply(messageId, text, MessageState::Complete, finishReason, &metrics, &routing);
}

bool ChatStore::finishReply(qint64 messageId, const QString &text, const QString &finishReason,
                            const MessageMetrics &metrics, const QList<LayerRouting> &routing,
                            const MessageProfile &profile) {
    return endPartialReply(messageId, text, MessageState::Complete, finishReason, &metrics, &routing, &profile);
}

bool ChatStore::failReply(qint64 messageId, const QString &text, const QString &reason) {
    return endPartialReply(messageId, text, MessageState::Failed, reason, nullptr, nullptr);
}

bool ChatStore::failReply(qint64 messageId, const QString &text, const QString &reason, const MessageMetrics &metrics,
                          const MessageProfile &profile) {
    const QList<LayerRouting> none;
    return endPartialReply(messageId, text, MessageState::Failed, reason, &metrics, &none, &profile);
}

int ChatStore::recoverPartialReplies() {
    if (!checkThread()) return -1;
    QSet<qint64> touched;
    int n = 0;
    {
        Transaction t(*this);
        if (!t.ok()) return -1;
        QSqlQuery q(m_db);
        if (!run(q, QStringLiteral("SELECT DISTINCT conversation_id FROM messages WHERE state = 'partial'"))) {
            fail(tr("Could not look for interrupted replies"), q.lastError().text());
            return -1;
        }
        while (q.next()) touched.insert(q.value(0).toLongLong());
        // Leaving 'partial' adds the text to the search index (see the FTS triggers).
        if (!run(q, QStringLiteral("UPDATE messages SET state = 'failed', finish_reason = 'interrupted' "
                                   "WHERE state = 'partial'"))) {
            fail(tr("Could not mark interrupted replies"), q.lastError().text());
            return -1;
        }
        n = q.numRowsAffected();
        if (!t.commit()) return -1;
    }
    for (qint64 id : std::as_const(touched)) emit messagesChanged(id);
    if (n > 0) emit conversationsChanged();
    return n;
}

std::optional<MessageMetrics> ChatStore::metrics(qint64 messageId) const {
    if (!checkThread()) return std::nullopt;
    QSqlQuery q(m_db);
    if (!run(q,
             QStringLiteral("SELECT ttft_ms, n_prompt_tokens, n_output_tokens, prefill_tok_s, decode_tok_s, itl_ms, "
                            "token_times_ms, stop_reason, peak_memory_bytes FROM message_metrics WHERE message_id = ?"),
             {messageId})) {
        fail(tr("Could not read the metrics of message %1").arg(messageId), q.lastError().text());
        return std::nullopt;
    }
    if (!q.next()) return std::nullopt;
    MessageMetrics mm;
    mm.ttftMs = optionalValue<double>(q.value(0));
    mm.nPromptTokens = optionalValue<int>(q.value(1));
    mm.nOutputTokens = optionalValue<int>(q.value(2));
    mm.prefillTokS = optionalValue<double>(q.value(3));
    mm.decodeTokS = optionalValue<double>(q.value(4));
    mm.itlMs = decodeFloat32(q.value(5).toByteArray());
    mm.tokenTimesMs = decodeFloat32(q.value(6).toByteArray());
    mm.stopReason = q.value(7).toString();
    mm.peakMemoryBytes = optionalValue<qint64>(q.value(8));
    return mm;
}

QList<LayerRouting> ChatStore::routing(qint64 messageId) const {
    QList<LayerRouting> out;
    if (!checkThread()) return out;
    QSqlQuery q(m_db);
    if (!run(q, QStringLiteral("SELECT layer, expert_counts FROM message_routing WHERE message_id = ? ORDER BY layer"),
             {messageId})) {
        fail(tr("Could not read the routing of message %1").arg(messageId), q.lastError().text());
        return out;
    }
    while (q.next()) out.append({q.value(0).toInt(), decodeUInt32(q.value(1).toByteArray())});
    return out;
}

// ---- Profiles (schema v4) --------------------------------------------------------------------------------------

namespace {
const QLatin1String
    kProfileColumns("ttft_us, duration_us, token_times, n_prompt_tokens, n_cached_prompt_tokens, "
                    "n_preemptions, attention_ms, moe_ms, dense_ms, sampling_ms, other_ms, n_steps, "
                    "n_steps_missed, max_batch_seqs, memory_peak_bytes, kv_blocks_peak, n_layers, "
                    "n_experts, n_shared_experts, top_k, moe_layers, routing_trace, steps, "
                    "memory_samples");

QByteArray encodeLayers(const QList<int> &layers) {
    if (layers.isEmpty()) return QByteArray(""); // a zero-length BLOB, not NULL (dense models)
    QList<quint32> v;
    for (int l : layers) v.append(quint32(l));
    return encodeUInt32(v);
}
} // namespace

bool ChatStore::writeProfile(qint64 messageId, const MessageProfile &p, bool writeRouting) {
    QSqlQuery q(m_db);
    const QByteArray trace = encodeRoutingTrace(p.traceIds, p.traceWeights, p.nExperts);
    if (!run(q,
             QStringLiteral(
                 "INSERT OR REPLACE INTO message_profiles (message_id, %1) "
                 "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
                 .arg(kProfileColumns),
             {messageId,
              nullable(p.ttftUs),
              p.durationUs,
              encodeTokenTimes(p.tokenTimesUs),
              p.nPromptTokens,
              p.nCachedPromptTokens,
              p.nPreemptions,
              p.phases.attentionMs,
              p.phases.moeMs,
              p.phases.denseMs,
              p.phases.samplingMs,
              p.phases.otherMs,
              p.nSteps,
              p.nStepsMissed,
              p.maxBatchSeqs,
              p.memoryPeakBytes,
              p.kvBlocksPeak,
              p.nLayers,
              p.nExperts,
              p.nSharedExperts,
              p.k,
              encodeLayers(p.moeLayers),
              trace.isEmpty() ? QVariant(QMetaType(QMetaType::QByteArray)) : QVariant(trace),
              encodeProfileSteps(p.steps),
              encodeMemorySamples(p.memory)}))
        return fail(tr("Could not save the profile of message %1").arg(messageId), q.lastError().text());
    if (!writeRouting) return true;
    if (!run(q, QStringLiteral("DELETE FROM message_routing WHERE message_id = ?"), {messageId}))
        return fail(tr("Could not save the routing of message %1").arg(messageId), q.lastError().text());
    for (const LayerRouting &r : p.routing)
        if (!run(q, QStringLiteral("INSERT INTO message_routing (message_id, layer, expert_counts) VALUES (?, ?, ?)"),
                 {messageId, r.layer, encodeUInt32(r.expertCounts)}))
            return fail(tr("Could not save the routing of message %1").arg(messageId), q.lastError().text());
    return true;
}

bool ChatStore::saveProfile(qint64 messageId, const MessageProfile &profile) {
    if (!checkThread()) return false;
    std::optional<qint64> conversationId;
    {
        Transaction t(*this);
        if (!t.ok()) return false;
        conversationId = conversationOf(messageId);
        if (!conversationId) return false;
        if (!writeProfile(messageId, profile, true)) return false;
        if (!t.commit()) return false;
    }
    emit messagesChanged(*conversationId);
    return true;
}

std::optional<MessageProfile> ChatStore::profile(qint64 messageId) const {
    if (!checkThread()) return std::nullopt;
    QSqlQuery q(m_db);
    if (!run(q, QStringLiteral("SELECT %1 FROM message_profiles WHERE message_id = ?").arg(kProfileColumns),
             {messageId})) {
        fail(tr("Could not read the profile of message %1").arg(messageId), q.lastError().text());
        return std::nullopt;
    }
    if (!q.next()) return std::nullopt;
    MessageProfile p;
    p.ttftUs = optionalValue<qint64>(q.value(0));
    p.durationUs = q.value(1).toLongLong();
    const std::optional<QList<qint64>> times = decodeTokenTimes(q.value(2).toByteArray());
    p.nPromptTokens = q.value(3).toInt();
    p.nCachedPromptTokens = q.value(4).toInt();
    p.nPreemptions = q.value(5).toInt();
    p.phases = {q.value(6).toDouble(), q.value(7).toDouble(), q.value(8).toDouble(), q.value(9).toDouble(),
                q.value(10).toDouble()};
    p.nSteps = q.value(11).toInt();
    p.nStepsMissed = q.value(12).toInt();
    p.maxBatchSeqs = q.value(13).toInt();
    p.memoryPeakBytes = q.value(14).toLongLong();
    p.kvBlocksPeak = q.value(15).toInt();
    p.nLayers = q.value(16).toInt();
    p.nExperts = q.value(17).toInt();
    p.nSharedExperts = q.value(18).toInt();
    p.k = q.value(19).toInt();
    for (quint32 l : decodeUInt32(q.value(20).toByteArray())) p.moeLayers.append(int(l));
    const bool traceOk = decodeRoutingTrace(q.value(21).toByteArray(), &p.traceIds, &p.traceWeights);
    const auto steps = decodeProfileSteps(q.value(22).toByteArray());
    const auto memory = decodeMemorySamples(q.value(23).toByteArray());
    if (!times || !traceOk || !steps || !memory) {
        fail(tr("The stored profile of message %1 is damaged").arg(messageId), {});
        return std::nullopt;
    }
    p.tokenTimesUs = *times;
    p.steps = *steps;
    p.memory = *memory;
    p.routing = routing(messageId);
    return p;
}

// ---- Presets ------------------------------------------------------------------------------------------------

QList<Preset> ChatStore::presets() const {
    QList<Preset> out;
    if (!checkThread()) return out;
    QSqlQuery q(m_db);
    if (!run(q, QStringLiteral("SELECT %1 FROM presets ORDER BY position, id").arg(kPresetColumns))) {
        fail(tr("Could not read the presets"), q.lastError().text());
        return out;
    }
    while (q.next()) out.append(readPreset(q));
    return out;
}

std::optional<Preset> ChatStore::preset(qint64 id) const {
    if (!checkThread()) return std::nullopt;
    QSqlQuery q(m_db);
    if (!run(q, QStringLiteral("SELECT %1 FROM presets WHERE id = ?").arg(kPresetColumns), {id}) || !q.next()) {
        fail(tr("There is no preset %1").arg(id), q.lastError().text());
        return std::nullopt;
    }
    return readPreset(q);
}

std::optional<qint64> ChatStore::createPreset(const Preset &p) {
    if (!checkThread()) return std::nullopt;
    if (p.name.trimmed().isEmpty()) {
        fail(tr("A preset needs a name"), {});
        return std::nullopt;
    }
    QSqlQuery q(m_db);
    if (!run(q,
             QStringLiteral("INSERT INTO presets (name, prefix, system_prompt, sampling, position) "
                            "VALUES (?, ?, ?, ?, (SELECT coalesce(max(position) + 1, 0) FROM presets))"),
             {p.name, p.prefix, p.systemPrompt, jsonText(p.sampling.toJson())})) {
        fail(tr("Could not add preset %1").arg(p.name), q.lastError().text());
        return std::nullopt;
    }
    const qint64 id = q.lastInsertId().toLongLong();
    emit presetsChanged();
    return id;
}

bool ChatStore::updatePreset(const Preset &p) {
    if (!checkThread()) return false;
    if (p.name.trimmed().isEmpty()) return fail(tr("A preset needs a name"), {});
    QSqlQuery q(m_db);
    if (!run(q, QStringLiteral("UPDATE presets SET name = ?, prefix = ?, system_prompt = ?, sampling = ? "
                               "WHERE id = ? AND builtin_key IS NULL"),
             {p.name, p.prefix, p.systemPrompt, jsonText(p.sampling.toJson()), p.id}))
        return fail(tr("Could not save preset %1").arg(p.name), q.lastError().text());
    if (q.numRowsAffected() != 1)
        return fail(tr("Preset %1 does not exist or is built in (built-in presets cannot be changed; duplicate "
                       "one instead)")
                        .arg(p.id),
                    {});
    emit presetsChanged();
    return true;
}

bool ChatStore::deletePreset(qint64 id) {
    if (!checkThread()) return false;
    QSqlQuery q(m_db);
    if (!run(q, QStringLiteral("DELETE FROM presets WHERE id = ? AND builtin_key IS NULL"), {id}))
        return fail(tr("Could not delete preset %1").arg(id), q.lastError().text());
    if (q.numRowsAffected() != 1)
        return fail(tr("Preset %1 does not exist or is built in (built-in presets cannot be deleted)").arg(id), {});
    emit presetsChanged();
    return true;
}

bool ChatStore::reorderPresets(const QList<qint64> &orderedIds) {
    if (!checkThread()) return false;
    {
        Transaction t(*this);
        if (!t.ok()) return false;
        QSet<qint64> existing;
        for (const Preset &p : presets()) existing.insert(p.id);
        const QSet<qint64> given(orderedIds.cbegin(), orderedIds.cend());
        if (given != existing || qsizetype(given.size()) != orderedIds.size())
            return fail(tr("The new preset order must list every preset exactly once"), {});
        QSqlQuery q(m_db);
        for (qsizetype i = 0; i < orderedIds.size(); ++i) {
            if (!run(q, QStringLiteral("UPDATE presets SET position = ? WHERE id = ?"), {int(i), orderedIds[i]}))
                return fail(tr("Could not reorder the presets"), q.lastError().text());
        }
        if (!t.commit()) return false;
    }
    emit presetsChanged();
    return true;
}

QByteArray ChatStore::exportPresets(const QList<qint64> &ids) const {
    QList<Preset> chosen;
    for (const Preset &p : presets())
        if (ids.isEmpty() || ids.contains(p.id)) chosen.append(p);
    return exportPresetsJson(chosen);
}

std::optional<PresetImportResult> ChatStore::importPresets(const QByteArray &json) {
    if (!checkThread()) return std::nullopt;
    QString error;
    const std::optional<QList<Preset>> parsed = parsePresetsJson(json, &error);
    if (!parsed) {
        fail(tr("Could not import presets"), error);
        return std::nullopt;
    }
    PresetImportResult result;
    {
        Transaction t(*this);
        if (!t.ok()) return std::nullopt;
        QList<Preset> known = presets();
        auto sameContent = [](const Preset &a, const Preset &b) {
            return a.name == b.name && a.prefix == b.prefix && a.systemPrompt == b.systemPrompt &&
                   a.sampling == b.sampling;
        };
        QSqlQuery q(m_db);
        for (const Preset &p : *parsed) {
            // Importing the same file twice must not double the preset bar.
            if (std::any_of(known.cbegin(), known.cend(), [&](const Preset &k) { return sameContent(k, p); })) {
                ++result.skippedDuplicates;
                continue;
            }
            if (!run(q,
                     QStringLiteral("INSERT INTO presets (name, prefix, system_prompt, sampling, position) "
                                    "VALUES (?, ?, ?, ?, (SELECT coalesce(max(position) + 1, 0) FROM presets))"),
                     {p.name, p.prefix, p.systemPrompt, jsonText(p.sampling.toJson())})) {
                fail(tr("Could not import preset %1").arg(p.name), q.lastError().text());
                return std::nullopt;
            }
            result.importedIds.append(q.lastInsertId().toLongLong());
            known.append(p);
        }
        if (!t.commit()) return std::nullopt;
    }
    if (!result.importedIds.isEmpty()) emit presetsChanged();
    return result;
}

// ---- Benchmarks ------------------------------------------------------------------------------------------------

std::optional<qint64> ChatStore::addBenchRun(const QJsonObject &json) {
    if (!checkThread()) return std::nullopt;
    QSqlQuery q(m_db);
    if (!run(q, QStringLiteral("INSERT INTO bench_runs (created_at, json) VALUES (?, ?)"), {nowMs(), jsonText(json)})) {
        fail(tr("Could not save the benchmark run"), q.lastError().text());
        return std::nullopt;
    }
    return q.lastInsertId().toLongLong();
}

QList<BenchRun> ChatStore::benchRuns() const {
    QList<BenchRun> out;
    if (!checkThread()) return out;
    QSqlQuery q(m_db);
    if (!run(q, QStringLiteral("SELECT id, created_at, json FROM bench_runs ORDER BY created_at DESC, id DESC"))) {
        fail(tr("Could not read the benchmark runs"), q.lastError().text());
        return out;
    }
    while (q.next()) out.append({q.value(0).toLongLong(), fromMs(q.value(1)), jsonObject(q.value(2))});
    return out;
}

} // namespace es
