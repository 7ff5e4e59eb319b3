// ChatStore: the app's SQLite database (conversations, the message tree, metrics, routing,
// presets, benchmark runs) behind value-type calls. It opens and migrates the file and hands each
// call to a repository (*_repository.h) on its one connection; no SQL leaves es_storage.
// Invariants: the connection is used only on the thread that opened it (GPT4All's cross-thread
// bug; asserted in debug builds); every mutation is one transaction; schema changes only through
// schema_migrations.cpp, keyed on PRAGMA user_version and tested from every old version (KDE Elisa).
#pragma once

#include "storage_types.h"
#include "turn_ids.h"

#include <QObject>
#include <QVariantMap>

#include <functional>
#include <memory>
#include <optional>

namespace es {

class BenchRunRepository;
class ConversationRepository;
class PresetRepository;
class ProfileRepository;
class SearchRepository;
class StoreConnection;

// What open() did, in words the GUI can show as they are.
struct OpenResult {
    enum class Status {
        Created,                 // a new, empty database
        Opened,                  // an existing database at the latest schema
        Migrated,                // an existing database upgraded fromVersion → toVersion
        RecoveredFromCorruption, // the file failed its integrity check: moved aside, started fresh
        Failed,                  // not opened; message says why; the store stays closed
    };
    Status status = Status::Failed;
    QString message;         // one or two sentences for the user; empty when nothing happened worth saying
    QString corruptCopyPath; // RecoveredFromCorruption: where the broken file now is
    QString backupPath;      // Migrated: the copy taken before migrating
    int fromVersion = 0;
    int toVersion = 0;
    int recoveredReplies = 0; // replies left 'partial' by a crash, now marked interrupted
    bool ok() const { return status != Status::Failed; }
};

// How open() treats a file that is not an intact ExpertScope database.
struct OpenOptions {
    // true for the app's own data file: a damaged one is moved aside and a fresh database started
    // (the user is told where the copy is). false for a path a command was given: such a file is
    // refused and left exactly as it was.
    bool moveDamagedAside = true;
};

class ChatStore : public QObject {
    Q_OBJECT
public:
    explicit ChatStore(QObject *parent = nullptr);
    ~ChatStore() override;

    // ---- Opening -----------------------------------------------------------------------------
    // Opens (creating if needed) the database at path; ":memory:" gives a private in-memory one
    // (tests). Steps: integrity check (on failure the file and its -wal are renamed to
    // "<path>.corrupt-<yyyyMMdd-HHmmss>" and a fresh database is created: the user keeps the
    // broken copy for `sqlite3 … .recover`, the app keeps working); WAL, foreign_keys=ON,
    // synchronous=NORMAL (a killed process loses nothing committed; a power cut may lose the
    // last transactions but never corrupts); migrations, each in its own transaction, after a
    // backup "<path>.bak-v<N>" (VACUUM INTO) of a non-empty database at version N; built-in
    // presets refreshed; replies left 'partial' by a crash marked interrupted.
    // Assumes no other process is writing the same file (the app is single-instance): the
    // partial-reply recovery would otherwise interrupt another instance's reply.
    // With options.moveDamagedAside false, a file that fails the integrity check (a text file, a
    // damaged database) is refused instead, untouched.
    // Call on the thread that will use the store; the connection stays on that thread.
    OpenResult open(const QString &path, const OpenOptions &options = {});
    void close();
    bool isOpen() const;
    QString path() const { return m_path; }
    // The last failure of any call, as a sentence with SQLite's own message appended.
    QString lastError() const;
    int schemaVersion() const;
    static int latestSchemaVersion();
    // journal_mode, foreign_keys, synchronous, sqlite_version, user_version: for an About box
    // and for tests.
    QVariantMap diagnostics() const;
    // Tests only: the clock used for created_at/updated_at (ms since the epoch).
    void setClockForTesting(std::function<qint64()> nowMs);

    // ---- Conversations -----------------------------------------------------------------------
    std::optional<qint64> createConversation(const QString &title, const ConversationSettings &settings = {});
    bool renameConversation(qint64 id, const QString &title);
    bool setPinned(qint64 id, bool pinned);
    bool setConversationSettings(qint64 id, const ConversationSettings &settings);
    // The conversation's own system prompt ("" for none) and its overflow policy (schema v6).
    // Neither touches updated_at.
    bool setSystemPrompt(qint64 id, const QString &systemPrompt);
    bool setOverflowPolicy(qint64 id, OverflowPolicy policy);
    std::optional<Conversation> conversation(qint64 id) const;
    // Pinned first, then most recently updated first (ties: newer id first).
    QList<Conversation> conversations() const;
    // Deletes the conversation with its messages, metrics and routing, and returns all of it so
    // restoreConversation() can undo the delete exactly (same ids, times, tree and leaf).
    std::optional<ConversationSnapshot> deleteConversation(qint64 id);
    bool restoreConversation(const ConversationSnapshot &snapshot);
    // Adds a copy of a conversation under new ids (an import): snapshot ids only link its parts
    // (parents before children, i.e. messages in id order); times, titles, state, metrics,
    // routing and profiles are kept as given. One transaction. Returns the new conversation id.
    std::optional<qint64> importConversation(const ConversationSnapshot &snapshot);
    // Calls visit for each message of the conversation in id order (parents before children),
    // reading one row at a time so a long conversation is never held in memory; visit returns
    // false to stop early. Returns false on a database error (lastError) or when stopped.
    bool forEachMessage(qint64 conversationId, const std::function<bool(const Message &)> &visit) const;
    int messageCount(qint64 conversationId) const;

    // Conversations whose title or message text contains every whitespace-separated term
    // (case-insensitive for Latin letters), best first. Substring semantics, so Chinese works
    // without word segmentation; terms of one or two characters use a slower scan (LIKE), since
    // the trigram index needs three. Messages still streaming are not searched.
    QList<SearchHit> search(const QString &text, int limit = 50) const;

    // ---- Messages (a tree per conversation) ----------------------------------------------------
    // Adds a complete message under parentId (nullopt: a root) and makes it the current leaf.
    // parentId must belong to the same conversation. Returns the new id.
    std::optional<qint64> addMessage(qint64 conversationId, std::optional<qint64> parentId, MessageRole role,
                                     const QString &content, const GenerationInfo &generation = {});
    std::optional<Message> message(qint64 id) const;
    bool setCurrentLeaf(qint64 conversationId, qint64 messageId);
    // Makes the branch through messageId active: the leaf becomes the newest descendant reached
    // by following the most recent child at each step (the `< 2/3 >` switcher calls this).
    bool selectBranch(qint64 messageId);
    // Root → current leaf of the conversation (the messages a pane shows and the prompt).
    QList<Message> activePath(qint64 conversationId) const;
    // Root → messageId.
    QList<Message> pathTo(qint64 messageId) const;
    QList<Message> children(qint64 messageId) const;
    // The message and its siblings (same conversation and parent), oldest first.
    SiblingInfo siblings(qint64 messageId) const;
    // Edit-and-resend without a reply: a new user message beside userMessageId (same parent) holding
    // the edited text, made current leaf. The original and its replies stay as a sibling branch.
    // The app uses beginEditedTurn, which begins the reply in the same transaction.
    std::optional<qint64> editAndResend(qint64 userMessageId, const QString &newContent);
    // Regenerate: begins a new partial assistant reply beside assistantMessageId (same parent).
    // One row, so one transaction: it is the whole turn.
    std::optional<qint64> regenerate(qint64 assistantMessageId, const GenerationInfo &generation);
    // Deletes a message and every message below it (its branch), with their metrics, routing and
    // profiles, in one transaction. When the active leaf was among them the active branch moves
    // to the newest remaining sibling's branch, else to the parent (none: the conversation is
    // empty). A reply still streaming in that branch must be ended first (its writer would fail).
    bool deleteMessage(qint64 messageId);

    // ---- Turns: what the app writes when the user sends ----------------------------------------------
    // Each adds the user's message and begins the 'partial' assistant reply to it (the new current
    // leaf, reply's generation info attached) in ONE transaction: a crash leaves both rows or
    // neither, never a question without its reply row.
    // The user's message under parentId (nullopt: a root) of an existing conversation.
    std::optional<TurnIds> beginTurn(qint64 conversationId, std::optional<qint64> parentId,
                                     const QString &text, const GenerationInfo &reply);
    // The first turn of a new conversation: the conversation is created in the same transaction.
    std::optional<TurnIds> beginTurnInNewConversation(const NewConversation &conversation,
                                                      const QString &text, const GenerationInfo &reply);
    // Edit-and-resend: the edited text as a new user message beside userMessageId (same parent),
    // with its reply begun. The original and its replies stay as a sibling branch.
    std::optional<TurnIds> beginEditedTurn(qint64 userMessageId, const QString &newContent,
                                           const GenerationInfo &reply);

    // ---- Streaming replies -----------------------------------------------------------------------
    // A new assistant message in state 'partial' under parentId, made current leaf.
    std::optional<qint64> beginPartialReply(qint64 conversationId, qint64 parentId, const GenerationInfo &generation);
    // Checkpoint: one UPDATE of the whole text so far (no index work: partial rows are not in the
    // FTS index). The app calls it through ReplyWriter (reply_writer.h), which saves what arrived
    // within ReplyWriter::kCheckpointInterval; a crash loses only what came after the last one.
    bool updatePartialReply(qint64 messageId, const QString &text);
    // Continue: a complete assistant reply becomes 'partial' again, its text kept, so that a
    // ReplyWriter can append to it and end it as any reply (a crash meanwhile marks it
    // interrupted with its text). Fails for any other message.
    bool reopenReply(qint64 messageId);
    // How many earlier messages of the branch the reply's prompt left out to fit the context.
    bool setDroppedMessages(qint64 messageId, int dropped);
    // Ends a partial reply: text, state 'complete', finish reason, metrics and routing, in one
    // transaction. Fails if the message is not partial (e.g. recovered after a crash).
    bool finishReply(qint64 messageId, const QString &text, const QString &finishReason,
                     const MessageMetrics &metrics = {}, const QList<LayerRouting> &routing = {});
    // The same, storing the reply's profile (message_profiles) in the same transaction. Its
    // routing counts go to message_routing when `routing` is empty.
    bool finishReply(qint64 messageId, const QString &text, const QString &finishReason,
                     const MessageMetrics &metrics, const QList<LayerRouting> &routing, const MessageProfile &profile);
    // Ends a partial reply as failed (engine error), keeping the text produced so far.
    bool failReply(qint64 messageId, const QString &text, const QString &reason);
    // The same, keeping what was measured until the failure (metrics, and the profile with its
    // routing counts) in the same transaction.
    bool failReply(qint64 messageId, const QString &text, const QString &reason, const MessageMetrics &metrics,
                   const MessageProfile &profile);
    // Marks every 'partial' message as failed with finish reason "interrupted", keeping the last
    // checkpointed text. open() calls it; returns how many it marked.
    int recoverPartialReplies();
    std::optional<MessageMetrics> metrics(qint64 messageId) const;
    QList<LayerRouting> routing(qint64 messageId) const;
    // Stores (replacing) a message's profile and its routing counts, in one transaction.
    bool saveProfile(qint64 messageId, const MessageProfile &profile);
    // The stored profile, routing counts included; nullopt when the message has none (a user
    // message, one from before schema v4) or its row cannot be decoded (lastError says so).
    std::optional<MessageProfile> profile(qint64 messageId) const;

    // ---- Presets ---------------------------------------------------------------------------------
    QList<Preset> presets() const; // by position
    std::optional<Preset> preset(qint64 id) const;
    // Adds a user preset at the end (preset.id, position and builtinKey are ignored).
    std::optional<qint64> createPreset(const Preset &preset);
    // Changes a user preset's name, prefix, prompt and sampling. Built-ins are read-only
    // (duplicate one with createPreset to change it).
    bool updatePreset(const Preset &preset);
    bool deletePreset(qint64 id); // user presets only
    // orderedIds must list every preset exactly once (built-ins included).
    bool reorderPresets(const QList<qint64> &orderedIds);
    // The format is documented in presets.h. ids empty: all presets, in order.
    QByteArray exportPresets(const QList<qint64> &ids = {}) const;
    std::optional<PresetImportResult> importPresets(const QByteArray &json);

    // ---- Benchmarks --------------------------------------------------------------------------------
    std::optional<qint64> addBenchRun(const QJsonObject &json);
    QList<BenchRun> benchRuns() const; // newest first

Q_SIGNALS:
    // After any change to the conversation list: created, renamed, pinned, deleted, restored,
    // or touched by a new or finished message (updated_at).
    void conversationsChanged();
    // After a change to a conversation's messages or current leaf (not emitted per checkpoint).
    void messagesChanged(qint64 conversationId);
    void presetsChanged();

private:
    QString integrityProblem(bool *corrupt);
    bool applyConnectionPragmas(QString *error);
    bool checkSchemaVersion(OpenResult *result);
    bool migrate(OpenResult *result);

    QString m_path;
    // Declared in dependency order: each repository holds references to those declared before it.
    std::unique_ptr<StoreConnection> m_connection;
    std::unique_ptr<ProfileRepository> m_profiles;
    std::unique_ptr<ConversationRepository> m_conversations;
    std::unique_ptr<SearchRepository> m_search;
    std::unique_ptr<PresetRepository> m_presets;
    std::unique_ptr<BenchRunRepository> m_benchRuns;
};

} // namespace es
