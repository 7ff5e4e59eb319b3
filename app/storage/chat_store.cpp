// ChatStore: opening (integrity check, connection settings, migrations, recovery) and the calls
// it hands to the repositories. Signals are emitted only after a commit, so a listener never sees
// uncommitted state: the repositories report changes through StoreConnection's notifier.
#include "chat_store.h"

#include "bench_run_repository.h"
#include "conversation_repository.h"
#include "preset_repository.h"
#include "profile_repository.h"
#include "schema_migrations.h"
#include "search_repository.h"
#include "store_connection.h"
#include "store_sql.h"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QSqlError>
#include <QSqlQuery>
#include <QThread>

namespace es {

namespace {

// SQLite primary result codes that mean "this file is damaged", as opposed to busy, locked,
// read-only or I/O errors, after which the file must not be moved aside.
bool isCorruptionCode(const QSqlError &e) {
    const int code = e.nativeErrorCode().toInt() & 0xff;
    return code == 11 /* SQLITE_CORRUPT */ || code == 26 /* SQLITE_NOTADB */;
}

} // namespace

// ---- Opening ---------------------------------------------------------------------------------------

ChatStore::ChatStore(QObject *parent)
    : QObject(parent), m_connection(std::make_unique<StoreConnection>()),
      m_profiles(std::make_unique<ProfileRepository>(*m_connection)),
      m_conversations(std::make_unique<ConversationRepository>(*m_connection, *m_profiles)),
      m_search(std::make_unique<SearchRepository>(*m_connection, *m_conversations)),
      m_presets(std::make_unique<PresetRepository>(*m_connection)),
      m_benchRuns(std::make_unique<BenchRunRepository>(*m_connection)) {
    m_connection->setNotifier({[this] { emit conversationsChanged(); },
                               [this](qint64 conversationId) { emit messagesChanged(conversationId); },
                               [this] { emit presetsChanged(); }});
}

ChatStore::~ChatStore() { close(); }

int ChatStore::latestSchemaVersion() { return schema::latestVersion(); }

bool ChatStore::isOpen() const { return m_connection->isOpen(); }

QString ChatStore::lastError() const { return m_connection->lastError(); }

void ChatStore::setClockForTesting(std::function<qint64()> nowMs) { m_connection->setClock(std::move(nowMs)); }

void ChatStore::close() {
    if (m_connection->thread() && QThread::currentThread() != m_connection->thread())
        qCCritical(lcStorage) << "ChatStore closed from a thread other than the one that opened it";
    m_connection->close();
    m_connection->setThread(nullptr);
    m_path.clear();
}

// Empty when the file is sound, else the first problem in words (the full list goes to the
// log). *corrupt tells damage (move the file aside) from other failures such as a lock or a
// permission problem (leave the file alone). Runs the full check, not quick_check: it is the one
// chance to notice damage before writing to the file, and chat databases are small.
QString ChatStore::integrityProblem(bool *corrupt) {
    *corrupt = false;
    QSqlQuery q(m_connection->db());
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
    QSqlQuery q(m_connection->db());
    if (!q.exec(QStringLiteral("PRAGMA journal_mode = WAL")) || !q.next()) {
        *error = q.lastError().text();
        return false;
    }
    const QString mode = q.value(0).toString();
    if (mode != QLatin1String("wal") && m_path != kMemoryDatabasePath) {
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

OpenResult ChatStore::open(const QString &path, const OpenOptions &options) {
    OpenResult result;
    close();
    m_connection->setThread(QThread::currentThread());
    m_path = path;
    const bool inMemory = path == kMemoryDatabasePath;
    QString error;
    auto failed = [&](const QString &message) {
        m_connection->close();
        m_connection->setThread(nullptr);
        m_path.clear();
        result.status = OpenResult::Status::Failed;
        result.message = message;
        m_connection->fail(message, {});
        return result;
    };

    if (!m_connection->open(path, &error))
        return failed(tr("Could not open the chat database %1: %2").arg(path, error));

    bool recovered = false;
    if (!inMemory) {
        bool corrupt = false;
        const QString problem = integrityProblem(&corrupt);
        if (!problem.isEmpty() && !corrupt)
            return failed(tr("Could not read the chat database %1: %2").arg(path, problem));
        if (corrupt && !options.moveDamagedAside)
            return failed(tr("%1 is not an intact ExpertScope database (%2); it was left as it is.").arg(path, problem));
        if (corrupt) {
            m_connection->close();
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
            if (!m_connection->open(path, &error))
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
        QSqlQuery q(m_connection->db());
        if (!q.exec(QStringLiteral("PRAGMA foreign_keys = ON")))
            return failed(tr("Could not enable foreign keys: %1").arg(q.lastError().text()));
    }
    if (!m_presets->refreshBuiltinPresets())
        return failed(tr("Could not set up the built-in presets: %1").arg(m_connection->lastError()));
    const int interrupted = m_conversations->recoverPartialReplies();
    if (interrupted < 0)
        return failed(tr("Could not recover interrupted replies: %1").arg(m_connection->lastError()));
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
    QSqlQuery q(m_connection->db());
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
    if (version > 0 && m_path != kMemoryDatabasePath) {
        // A consistent copy (VACUUM INTO reads one snapshot, WAL included) before any change.
        QSqlQuery q(m_connection->db());
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
    QSqlDatabase db = m_connection->db(); // the same connection (a handle the steps take by reference)
    for (const schema::Migration &step : schema::migrations()) {
        if (step.version <= current) continue;
        QString error;
        {
            StoreTransaction t(*m_connection);
            bool ok = t.ok();
            if (!ok) error = m_connection->lastError();
            ok = ok && step.apply(db, &error);
            if (ok) {
                QSqlQuery check(m_connection->db());
                if (!check.exec(QStringLiteral("PRAGMA foreign_key_check"))) {
                    error = check.lastError().text();
                    ok = false;
                } else if (check.next()) {
                    error = tr("foreign key check failed in table %1").arg(check.value(0).toString());
                    ok = false;
                }
            }
            if (ok) {
                QSqlQuery set(m_connection->db());
                ok = set.exec(QStringLiteral("PRAGMA user_version = %1").arg(step.version));
                if (!ok) error = set.lastError().text();
            }
            if (ok) {
                ok = t.commit();
                if (!ok) error = m_connection->lastError();
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
    if (!m_connection->checkThread()) return -1;
    QSqlQuery q(m_connection->db());
    if (!q.exec(QStringLiteral("PRAGMA user_version")) || !q.next()) return -1;
    return q.value(0).toInt();
}

QVariantMap ChatStore::diagnostics() const {
    QVariantMap out;
    if (!m_connection->checkThread()) return out;
    QSqlQuery q(m_connection->db());
    for (const char *pragma : {"journal_mode", "foreign_keys", "synchronous", "user_version"}) {
        if (q.exec(QStringLiteral("PRAGMA %1").arg(QLatin1String(pragma))) && q.next())
            out.insert(QLatin1String(pragma), q.value(0));
    }
    if (q.exec(QStringLiteral("SELECT sqlite_version()")) && q.next())
        out.insert(QStringLiteral("sqlite_version"), q.value(0));
    return out;
}

// ---- Conversations ----------------------------------------------------------------------------------

std::optional<qint64> ChatStore::createConversation(const QString &title, const ConversationSettings &settings) {
    return m_conversations->createConversation(title, settings);
}

bool ChatStore::renameConversation(qint64 id, const QString &title) {
    return m_conversations->renameConversation(id, title);
}

bool ChatStore::setPinned(qint64 id, bool pinned) { return m_conversations->setPinned(id, pinned); }

bool ChatStore::setConversationSettings(qint64 id, const ConversationSettings &settings) {
    return m_conversations->setConversationSettings(id, settings);
}

bool ChatStore::setSystemPrompt(qint64 id, const QString &systemPrompt) {
    return m_conversations->setSystemPrompt(id, systemPrompt);
}

bool ChatStore::setOverflowPolicy(qint64 id, OverflowPolicy policy) {
    return m_conversations->setOverflowPolicy(id, policy);
}

std::optional<Conversation> ChatStore::conversation(qint64 id) const { return m_conversations->conversation(id); }

QList<Conversation> ChatStore::conversations() const { return m_conversations->conversations(); }

std::optional<ConversationSnapshot> ChatStore::deleteConversation(qint64 id) {
    return m_conversations->deleteConversation(id);
}

bool ChatStore::restoreConversation(const ConversationSnapshot &snapshot) {
    return m_conversations->restoreConversation(snapshot);
}

std::optional<qint64> ChatStore::importConversation(const ConversationSnapshot &snapshot) {
    return m_conversations->importConversation(snapshot);
}

bool ChatStore::forEachMessage(qint64 conversationId, const std::function<bool(const Message &)> &visit) const {
    return m_conversations->forEachMessage(conversationId, visit);
}

int ChatStore::messageCount(qint64 conversationId) const { return m_conversations->messageCount(conversationId); }

QList<SearchHit> ChatStore::search(const QString &text, int limit) const { return m_search->search(text, limit); }

// ---- Messages -----------------------------------------------------------------------------------------

std::optional<qint64> ChatStore::addMessage(qint64 conversationId, std::optional<qint64> parentId,
                                            MessageRole role, const QString &content,
                                            const GenerationInfo &generation) {
    return m_conversations->addMessage(conversationId, parentId, role, content, generation);
}

std::optional<Message> ChatStore::message(qint64 id) const { return m_conversations->message(id); }

bool ChatStore::setCurrentLeaf(qint64 conversationId, qint64 messageId) {
    return m_conversations->setCurrentLeaf(conversationId, messageId);
}

bool ChatStore::selectBranch(qint64 messageId) { return m_conversations->selectBranch(messageId); }

QList<Message> ChatStore::activePath(qint64 conversationId) const {
    return m_conversations->activePath(conversationId);
}

QList<Message> ChatStore::pathTo(qint64 messageId) const { return m_conversations->pathTo(messageId); }

QList<Message> ChatStore::children(qint64 messageId) const { return m_conversations->children(messageId); }

SiblingInfo ChatStore::siblings(qint64 messageId) const { return m_conversations->siblings(messageId); }

std::optional<qint64> ChatStore::editAndResend(qint64 userMessageId, const QString &newContent) {
    return m_conversations->editAndResend(userMessageId, newContent);
}

std::optional<qint64> ChatStore::regenerate(qint64 assistantMessageId, const GenerationInfo &generation) {
    return m_conversations->regenerate(assistantMessageId, generation);
}

// ---- Turns ----------------------------------------------------------------------------------------------

std::optional<TurnIds> ChatStore::beginTurn(qint64 conversationId, std::optional<qint64> parentId,
                                            const QString &text, const GenerationInfo &reply) {
    return m_conversations->beginTurn(conversationId, {}, parentId, text, reply);
}

std::optional<TurnIds> ChatStore::beginTurnInNewConversation(const NewConversation &conversation,
                                                             const QString &text,
                                                             const GenerationInfo &reply) {
    return m_conversations->beginTurn(std::nullopt, conversation, std::nullopt, text, reply);
}

std::optional<TurnIds> ChatStore::beginEditedTurn(qint64 userMessageId, const QString &newContent,
                                                  const GenerationInfo &reply) {
    return m_conversations->beginEditedTurn(userMessageId, newContent, reply);
}

// ---- Streaming replies -----------------------------------------------------------------------------------

std::optional<qint64> ChatStore::beginPartialReply(qint64 conversationId, qint64 parentId,
                                                   const GenerationInfo &generation) {
    return m_conversations->beginPartialReply(conversationId, parentId, generation);
}

bool ChatStore::deleteMessage(qint64 messageId) { return m_conversations->deleteMessage(messageId); }

bool ChatStore::reopenReply(qint64 messageId) { return m_conversations->reopenReply(messageId); }

bool ChatStore::setDroppedMessages(qint64 messageId, int dropped) {
    return m_conversations->setDroppedMessages(messageId, dropped);
}

bool ChatStore::updatePartialReply(qint64 messageId, const QString &text) {
    return m_conversations->updatePartialReply(messageId, text);
}

bool ChatStore::finishReply(qint64 messageId, const QString &text, const QString &finishReason,
                            const MessageMetrics &metrics, const QList<LayerRouting> &routing) {
    return m_conversations->endPartialReply(messageId, text, MessageState::Complete, finishReason, &metrics,
                                            &routing);
}

bool ChatStore::finishReply(qint64 messageId, const QString &text, const QString &finishReason,
                            const MessageMetrics &metrics, const QList<LayerRouting> &routing,
                            const MessageProfile &profile) {
    return m_conversations->endPartialReply(messageId, text, MessageState::Complete, finishReason, &metrics,
                                            &routing, &profile);
}

bool ChatStore::failReply(qint64 messageId, const QString &text, const QString &reason) {
    return m_conversations->endPartialReply(messageId, text, MessageState::Failed, reason, nullptr, nullptr);
}

bool ChatStore::failReply(qint64 messageId, const QString &text, const QString &reason,
                          const MessageMetrics &metrics, const MessageProfile &profile) {
    const QList<LayerRouting> none;
    return m_conversations->endPartialReply(messageId, text, MessageState::Failed, reason, &metrics, &none,
                                            &profile);
}

int ChatStore::recoverPartialReplies() { return m_conversations->recoverPartialReplies(); }

// ---- Metrics, routing and profiles ---------------------------------------------------------------------

std::optional<MessageMetrics> ChatStore::metrics(qint64 messageId) const { return m_profiles->metrics(messageId); }

QList<LayerRouting> ChatStore::routing(qint64 messageId) const { return m_profiles->routing(messageId); }

bool ChatStore::saveProfile(qint64 messageId, const MessageProfile &profile) {
    return m_profiles->saveProfile(messageId, profile);
}

std::optional<MessageProfile> ChatStore::profile(qint64 messageId) const { return m_profiles->profile(messageId); }

// ---- Presets ------------------------------------------------------------------------------------------------

QList<Preset> ChatStore::presets() const { return m_presets->presets(); }

std::optional<Preset> ChatStore::preset(qint64 id) const { return m_presets->preset(id); }

std::optional<qint64> ChatStore::createPreset(const Preset &preset) { return m_presets->createPreset(preset); }

bool ChatStore::updatePreset(const Preset &preset) { return m_presets->updatePreset(preset); }

bool ChatStore::deletePreset(qint64 id) { return m_presets->deletePreset(id); }

bool ChatStore::reorderPresets(const QList<qint64> &orderedIds) { return m_presets->reorderPresets(orderedIds); }

QByteArray ChatStore::exportPresets(const QList<qint64> &ids) const { return m_presets->exportPresets(ids); }

std::optional<PresetImportResult> ChatStore::importPresets(const QByteArray &json) {
    return m_presets->importPresets(json);
}

// ---- Benchmarks ------------------------------------------------------------------------------------------------

std::optional<qint64> ChatStore::addBenchRun(const QJsonObject &json) { return m_benchRuns->addBenchRun(json); }

QList<BenchRun> ChatStore::benchRuns() const { return m_benchRuns->benchRuns(); }

} // namespace es
