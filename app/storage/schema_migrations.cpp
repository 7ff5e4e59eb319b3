// Schema steps of the chat database. The first release builds its schema in three steps (core
// tables; measurements; full-text search) so that the upgrade path, backups and per-step
// transactions are exercised by the tests from day one; v4 adds the profiler's per-message
// profiles, v5 their steps and memory samples, v6 the chat's context controls. Frozen once
// released: add v7, never edit v1..v6. Times are
// INTEGER ms since the epoch (UTC); JSON columns are checked valid.
#include "schema_migrations.h"

#include <QSqlError>
#include <QSqlQuery>

namespace es::schema {
namespace {

// Qt's SQLite driver runs only the first statement of a string, so each step is a list.
bool execAll(QSqlDatabase &db, std::initializer_list<const char *> statements, QString *error) {
    for (const char *sql : statements) {
        QSqlQuery q(db);
        if (!q.exec(QString::fromUtf8(sql))) {
            *error = q.lastError().text() + QStringLiteral(" [in: ") +
                     QString::fromUtf8(sql).simplified().left(80) + QStringLiteral("]");
            return false;
        }
    }
    return true;
}

// v1: conversations, the message tree, presets.
// - AUTOINCREMENT on conversations and messages: ids are never reused, so an undo snapshot
//   can always be reinserted with its own ids.
// - current_leaf_id is deferred: restoring a conversation inserts the row before its messages.
// - parent_id cascades: deleting a message deletes its subtree (a branch), never orphans one.
// - seed holds the uint64 seed's bit pattern as a signed int64.
// - presets.builtin_key is the built-in flag: NULL for user presets, a stable key otherwise.
bool migrateToV1(QSqlDatabase &db, QString *error) {
    return execAll(db,
                   {
                       R"(CREATE TABLE conversations (
                            id INTEGER PRIMARY KEY AUTOINCREMENT,
                            title TEXT NOT NULL DEFAULT '',
                            created_at INTEGER NOT NULL,
                            updated_at INTEGER NOT NULL,
                            pinned INTEGER NOT NULL DEFAULT 0 CHECK (pinned IN (0, 1)),
                            current_leaf_id INTEGER REFERENCES messages (id) ON DELETE SET NULL
                                DEFERRABLE INITIALLY DEFERRED,
                            settings TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(settings))))",
                       R"(CREATE TABLE messages (
                            id INTEGER PRIMARY KEY AUTOINCREMENT,
                            conversation_id INTEGER NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
                            parent_id INTEGER REFERENCES messages (id) ON DELETE CASCADE,
                            role TEXT NOT NULL CHECK (role IN ('system', 'user', 'assistant')),
                            content TEXT NOT NULL DEFAULT '',
                            created_at INTEGER NOT NULL,
                            state TEXT NOT NULL DEFAULT 'complete'
                                CHECK (state IN ('complete', 'partial', 'failed')),
                            finish_reason TEXT NOT NULL DEFAULT '',
                            model_name TEXT NOT NULL DEFAULT '',
                            model_hash TEXT NOT NULL DEFAULT '',
                            precision TEXT NOT NULL DEFAULT '',
                            sampling TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(sampling)),
                            seed INTEGER))",
                       "CREATE INDEX messages_by_conversation ON messages (conversation_id, parent_id)",
                       "CREATE INDEX messages_by_parent ON messages (parent_id)",
                       "CREATE INDEX messages_partial ON messages (state) WHERE state = 'partial'",
                       "CREATE INDEX conversations_by_leaf ON conversations (current_leaf_id)",
                       "CREATE INDEX conversations_by_recency ON conversations (pinned DESC, updated_at DESC)",
                       R"(CREATE TABLE presets (
                            id INTEGER PRIMARY KEY AUTOINCREMENT,
                            name TEXT NOT NULL,
                            prefix TEXT NOT NULL DEFAULT '',
                            system_prompt TEXT NOT NULL DEFAULT '',
                            sampling TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(sampling)),
                            position INTEGER NOT NULL DEFAULT 0,
                            builtin_key TEXT UNIQUE))",
                   },
                   error);
}

// v2: per-message measurements, routing summaries, benchmark runs. BLOBs are little-endian
// float32 (itl_ms, token_times_ms) and uint32 (expert_counts) arrays.
bool migrateToV2(QSqlDatabase &db, QString *error) {
    return execAll(db,
                   {
                       R"(CREATE TABLE message_metrics (
                            message_id INTEGER PRIMARY KEY REFERENCES messages (id) ON DELETE CASCADE,
                            ttft_ms REAL,
                            n_prompt_tokens INTEGER,
                            n_output_tokens INTEGER,
                            prefill_tok_s REAL,
                            decode_tok_s REAL,
                            itl_ms BLOB,
                            token_times_ms BLOB,
                            stop_reason TEXT NOT NULL DEFAULT '',
                            peak_memory_bytes INTEGER))",
                       R"(CREATE TABLE message_routing (
                            message_id INTEGER NOT NULL REFERENCES messages (id) ON DELETE CASCADE,
                            layer INTEGER NOT NULL,
                            expert_counts BLOB NOT NULL,
                            PRIMARY KEY (message_id, layer)) WITHOUT ROWID)",
                       R"(CREATE TABLE bench_runs (
                            id INTEGER PRIMARY KEY AUTOINCREMENT,
                            created_at INTEGER NOT NULL,
                            json TEXT NOT NULL CHECK (json_valid(json))))",
                   },
                   error);
}

// v3: FTS5 over message text and conversation titles, external-content tables kept in sync by
// triggers. The trigram tokenizer (SQLite >= 3.34) finds substrings, so Chinese text (which
// unicode61 would treat as one token per run of characters) is searchable; queries shorter
// than three characters fall back to LIKE in ChatStore::search.
// Rows in state 'partial' are not indexed: a streaming reply is rewritten every second and
// re-tokenizing it each time would make the checkpoint expensive. The triggers therefore index
// a message when it leaves 'partial' and only delete index entries that exist, which keeps
// the external-content index consistent (FTS5 'rebuild' would index partial rows too, so the
// backfill below selects explicitly).
bool migrateToV3(QSqlDatabase &db, QString *error) {
    return execAll(
        db,
        {
            R"(CREATE VIRTUAL TABLE messages_fts USING fts5 (
                 content, content = 'messages', content_rowid = 'id', tokenize = 'trigram'))",
            R"(CREATE VIRTUAL TABLE conversations_fts USING fts5 (
                 title, content = 'conversations', content_rowid = 'id', tokenize = 'trigram'))",
            R"(CREATE TRIGGER messages_fts_ai AFTER INSERT ON messages WHEN new.state <> 'partial' BEGIN
                 INSERT INTO messages_fts (rowid, content) VALUES (new.id, new.content);
               END)",
            R"(CREATE TRIGGER messages_fts_ad AFTER DELETE ON messages WHEN old.state <> 'partial' BEGIN
                 INSERT INTO messages_fts (messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
               END)",
            R"(CREATE TRIGGER messages_fts_au AFTER UPDATE OF content, state ON messages
               WHEN old.state <> 'partial' OR new.state <> 'partial' BEGIN
                 INSERT INTO messages_fts (messages_fts, rowid, content)
                   SELECT 'delete', old.id, old.content WHERE old.state <> 'partial';
                 INSERT INTO messages_fts (rowid, content)
                   SELECT new.id, new.content WHERE new.state <> 'partial';
               END)",
            R"(CREATE TRIGGER conversations_fts_ai AFTER INSERT ON conversations BEGIN
                 INSERT INTO conversations_fts (rowid, title) VALUES (new.id, new.title);
               END)",
            R"(CREATE TRIGGER conversations_fts_ad AFTER DELETE ON conversations BEGIN
                 INSERT INTO conversations_fts (conversations_fts, rowid, title) VALUES ('delete', old.id, old.title);
               END)",
            R"(CREATE TRIGGER conversations_fts_au AFTER UPDATE OF title ON conversations BEGIN
                 INSERT INTO conversations_fts (conversations_fts, rowid, title) VALUES ('delete', old.id, old.title);
                 INSERT INTO conversations_fts (rowid, title) VALUES (new.id, new.title);
               END)",
            "INSERT INTO messages_fts (rowid, content) SELECT id, content FROM messages WHERE state <> 'partial'",
            "INSERT INTO conversations_fts (rowid, title) SELECT id, title FROM conversations",
        },
        error);
}

// v4: per-message profiles for the profiler (TTFT, every token's time, engine phase times over
// the reply, memory peak, the model's shape and the compact routing trace). The per-layer routing
// counts stay in message_routing. One row per assistant message, deleted with it. BLOB formats:
// message_profile_codec.cpp. No backfill: messages from before v4 have no profile.
bool migrateToV4(QSqlDatabase &db, QString *error) {
    return execAll(db,
                   {
                       R"(CREATE TABLE message_profiles (
                            message_id INTEGER PRIMARY KEY REFERENCES messages (id) ON DELETE CASCADE,
                            ttft_us INTEGER,
                            duration_us INTEGER NOT NULL DEFAULT 0,
                            token_times BLOB NOT NULL,
                            n_prompt_tokens INTEGER NOT NULL DEFAULT 0,
                            n_cached_prompt_tokens INTEGER NOT NULL DEFAULT 0,
                            n_preemptions INTEGER NOT NULL DEFAULT 0,
                            attention_ms REAL NOT NULL DEFAULT 0,
                            moe_ms REAL NOT NULL DEFAULT 0,
                            dense_ms REAL NOT NULL DEFAULT 0,
                            sampling_ms REAL NOT NULL DEFAULT 0,
                            other_ms REAL NOT NULL DEFAULT 0,
                            n_steps INTEGER NOT NULL DEFAULT 0,
                            n_steps_missed INTEGER NOT NULL DEFAULT 0,
                            max_batch_seqs INTEGER NOT NULL DEFAULT 0,
                            memory_peak_bytes INTEGER NOT NULL DEFAULT 0,
                            kv_blocks_peak INTEGER NOT NULL DEFAULT 0,
                            n_layers INTEGER NOT NULL DEFAULT 0,
                            n_experts INTEGER NOT NULL DEFAULT 0,
                            n_shared_experts INTEGER NOT NULL DEFAULT 0,
                            top_k INTEGER NOT NULL DEFAULT 0,
                            moe_layers BLOB NOT NULL,
                            routing_trace BLOB))",
                   },
                   error);
}

// v5: the steps of each profile (start, duration, batch, phase times) for the trace export, and
// its memory samples over time. NULL for profiles stored before v5: they stay readable with
// their aggregates (phase sums, memory peak). BLOB formats: message_profile_codec.cpp.
bool migrateToV5(QSqlDatabase &db, QString *error) {
    return execAll(db,
                   {
                       "ALTER TABLE message_profiles ADD COLUMN steps BLOB",
                       "ALTER TABLE message_profiles ADD COLUMN memory_samples BLOB",
                   },
                   error);
}

// v6: per-conversation context controls and what a reply's prompt left out. A conversation's own
// system prompt (without a preset) and its overflow policy — what a request does when the
// history outgrows the model's context: 'refuse', 'drop-oldest' (oldest messages first, the
// system prompt included) or 'keep-last' (the system prompt and the latest turns; the default,
// so an old long chat stays usable). messages.dropped_messages: earlier messages of the branch
// left out of that reply's prompt (0 for every message from before v6).
bool migrateToV6(QSqlDatabase &db, QString *error) {
    return execAll(db,
                   {
                       "ALTER TABLE conversations ADD COLUMN system_prompt TEXT NOT NULL DEFAULT ''",
                       R"(ALTER TABLE conversations ADD COLUMN overflow_policy TEXT NOT NULL DEFAULT 'keep-last'
                            CHECK (overflow_policy IN ('refuse', 'drop-oldest', 'keep-last')))",
                       "ALTER TABLE messages ADD COLUMN dropped_messages INTEGER NOT NULL DEFAULT 0",
                   },
                   error);
}

// v7: profiles whose phases were timed on a sample of the steps (on the GPU): the shared
// experts' phase, how many steps were timed (-1 for older rows: every step, on the host) and the
// step timeline of the latest one (JSON, message_profile_codec.cpp; NULL: none).
bool migrateToV7(QSqlDatabase &db, QString *error) {
    return execAll(db,
                   {
                       "ALTER TABLE message_profiles ADD COLUMN moe_shared_ms REAL NOT NULL DEFAULT 0",
                       "ALTER TABLE message_profiles ADD COLUMN n_steps_timed INTEGER NOT NULL DEFAULT -1",
                       "ALTER TABLE message_profiles ADD COLUMN step_timeline BLOB",
                   },
                   error);
}

} // namespace

const QList<Migration> &migrations() {
    static const QList<Migration> steps = {
        {1, "conversations, message tree, presets", &migrateToV1},
        {2, "message metrics, routing summaries, benchmark runs", &migrateToV2},
        {3, "full-text search (FTS5, trigram) over messages and titles", &migrateToV3},
        {4, "per-message profiles (token times, phase times, memory peak, routing trace)", &migrateToV4},
        {5, "per-step phase times and memory samples of each profile", &migrateToV5},
        {6, "per-conversation system prompt and overflow policy; messages left out of a prompt", &migrateToV6},
        {7, "sampled phase timing: shared experts, timed steps, the step timeline", &migrateToV7},
    };
    return steps;
}

int latestVersion() { return migrations().constLast().version; }

} // namespace es::schema
