// ChatStore and ConversationListModel: schema creation; migration from every earlier schema
// (frozen copies of each old schema live here, KDE Elisa style) with backups; conversations, the
// message tree, streaming replies and delete + undo, the context controls (system prompt, overflow
// policy, messages left out), continuing a reply and deleting one message with its branch; the integrity-check recovery path; crash
// safety (this binary re-runs itself as a child that is SIGKILLed mid-reply); the list model under
// QAbstractItemModelTester. Profiles, search and presets have their own suites
// (test_chat_store_profiles/_search/_presets.cpp). In-memory databases unless files are the point.
#include "chat_store.h"
#include "chat_store_test_support.h"
#include "conversation_list_model.h"
#include "reply_writer.h"

#include <QAbstractItemModelTester>
#include <QFile>
#include <QJsonArray>
#include <QProcess>
#include <QRandomGenerator>
#include <QRegularExpression>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QThread>
#include <QtTest>

#include <cstdio>

using namespace es;
using namespace es_test;

namespace {

const char *const kCrashChildFlag = "--crash-child";

// ---- Frozen schemas ------------------------------------------------------------------------------
// Copies of every released schema step, as shipped. Never edit these; when a v7 is added, add
// kSchemaV6Additions (a copy of v6's statements) and a "from v6" row to migrate_data().

const QStringList kSchemaV1 = {
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
    "PRAGMA user_version = 1",
};

const QStringList kSchemaV2Additions = {
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
    "PRAGMA user_version = 2",
};

const QStringList kSchemaV3Additions = {
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
    "PRAGMA user_version = 3",
};

// Data as an app at schema v1 would have written it: a pinned conversation whose first answer
// was regenerated twice (the last regeneration still streaming when the app died), a second
// empty conversation, and a user preset.
const QStringList kSchemaV4Additions = {
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
    "PRAGMA user_version = 4",
};

const QStringList kDataV1 = {
    R"(INSERT INTO conversations (id, title, created_at, updated_at, pinned, current_leaf_id, settings)
       VALUES (1, '旧的对话 old chat', 1000, 5000, 1, 3,
               '{"sampling":{"temperature":0.5,"seed":"18446744073709551615"},"preset_id":7,"window":"left"}'),
              (2, 'second', 1500, 1600, 0, NULL, '{}'))",
    R"(INSERT INTO messages (id, conversation_id, parent_id, role, content, created_at, state, finish_reason,
                             model_name, model_hash, precision, sampling, seed)
       VALUES (1, 1, NULL, 'user', '什么是混合专家模型？', 1100, 'complete', '', '', '', '', '{}', NULL),
              (2, 1, 1, 'assistant', '混合专家模型把前馈层换成多个专家网络，由路由器为每个词元挑选专家。',
               1200, 'complete', 'stop', 'ERNIE-4.5-0.3B', 'sha256:abc', 'bf16', '{"temperature":0.8}', 42),
              (3, 1, 1, 'assistant', 'A regenerated answer about sparse experts.', 1300, 'complete', 'length',
               'ERNIE-4.5-0.3B', 'sha256:abc', 'fp8-e4m3', '{"temperature":0.3,"top_p":0.8}', -1),
              (4, 1, 1, 'assistant', 'half an answer about gating', 1400, 'partial', '', 'ERNIE-4.5-0.3B', '', '',
               '{}', NULL))",
    R"(INSERT INTO presets (id, name, prefix, system_prompt, sampling, position, builtin_key)
       VALUES (1, 'My preset', '【我的】', 'Be brief.', '{"temperature":0.7}', 0, NULL))",
};

const QStringList kDataV2Additions = {
    R"(INSERT INTO message_metrics (message_id, ttft_ms, n_prompt_tokens, n_output_tokens, prefill_tok_s,
                                    decode_tok_s, itl_ms, token_times_ms, stop_reason, peak_memory_bytes)
       VALUES (2, 12.5, 20, 3, 800.0, 55.5, X'0000803F00000040', X'0000484100006041', 'eos', 123456789))",
    "INSERT INTO message_routing (message_id, layer, expert_counts) VALUES (2, 1, X'0100000002000000')",
    R"(INSERT INTO bench_runs (id, created_at, json) VALUES (1, 1700, '{"decode_tok_s":99}'))",
};

const QStringList kSchemaV5Additions = {
    "ALTER TABLE message_profiles ADD COLUMN steps BLOB",
    "ALTER TABLE message_profiles ADD COLUMN memory_samples BLOB",
    "PRAGMA user_version = 5",
};

const QStringList kSchemaV6Additions = {
    "ALTER TABLE conversations ADD COLUMN system_prompt TEXT NOT NULL DEFAULT ''",
    R"(ALTER TABLE conversations ADD COLUMN overflow_policy TEXT NOT NULL DEFAULT 'keep-last'
                            CHECK (overflow_policy IN ('refuse', 'drop-oldest', 'keep-last')))",
    "ALTER TABLE messages ADD COLUMN dropped_messages INTEGER NOT NULL DEFAULT 0",
    "PRAGMA user_version = 6",
};

// A profile as v4 stored it: token times {1500, 3000} µs, one MoE layer, no trace; no steps or
// memory samples exist before v5, and the profile must stay readable after the migration.
const QStringList kDataV4Additions = {
    R"(INSERT INTO message_profiles (message_id, ttft_us, duration_us, token_times, n_prompt_tokens, attention_ms,
                                     n_steps, memory_peak_bytes, n_layers, n_experts, top_k, moe_layers)
       VALUES (2, 1500, 9000, X'01B817B817', 20, 2.5, 3, 4096, 2, 4, 2, X'01000000'))",
};


bool execAll(const RawDb &db, const QStringList &statements, QString *error) {
    for (const QString &sql : statements)
        if (!db.exec(sql, error)) return false;
    return true;
}


// The child half of crashSafety(): writes a finished exchange, then streams a reply with a
// checkpoint every few milliseconds, reporting each committed checkpoint on stdout, until the
// parent kills it.
int runCrashChild(const QString &path) {
    ChatStore store;
    const OpenResult r = store.open(path);
    if (!r.ok()) {
        std::fprintf(stderr, "open failed: %s\n", qPrintable(r.message));
        return 2;
    }
    const auto conversation = store.createConversation(QStringLiteral("崩溃测试 crash test"));
    const auto u1 = store.addMessage(*conversation, std::nullopt, MessageRole::User, QStringLiteral("第一个问题"));
    const auto a1 = store.beginPartialReply(*conversation, *u1, sampleGeneration());
    store.updatePartialReply(*a1, QStringLiteral("第一个回答的前半"));
    if (!store.finishReply(*a1, QStringLiteral("第一个回答，已经完成。"), QStringLiteral("stop"), sampleMetrics(),
                           sampleRouting()))
        return 3;
    const auto u2 = store.addMessage(*conversation, *a1, MessageRole::User, QStringLiteral("second question"));
    const auto partial = store.beginPartialReply(*conversation, *u2, sampleGeneration());
    if (!partial) return 4;
    std::printf("FINISHED %lld %lld %lld %lld %lld\n", qlonglong(*conversation), qlonglong(*u1), qlonglong(*a1),
                qlonglong(*u2), qlonglong(*partial));
    std::fflush(stdout);
    for (int k = 1;; ++k) {
        if (!store.updatePartialReply(*partial, crashCheckpointText(k))) return 5;
        std::printf("CHECKPOINT %d\n", k);
        std::fflush(stdout);
        QThread::msleep(5);
    }
}

} // namespace

class TestChatStore : public QObject {
    Q_OBJECT

private:
    QTemporaryDir m_dir;
    int m_fileCounter = 0;
    QString freshPath() { return m_dir.filePath(QStringLiteral("chats-%1.sqlite").arg(++m_fileCounter)); }

private Q_SLOTS:
    void initTestCase() { QVERIFY(m_dir.isValid()); }

    // ---- Schema ----------------------------------------------------------------------------------

    void createsSchema() {
        const QString path = freshPath();
        {
            ChatStore store;
            const OpenResult r = store.open(path);
            QVERIFY2(r.status == OpenResult::Status::Created, qPrintable(r.message));
            QCOMPARE(r.fromVersion, 0);
            QCOMPARE(r.toVersion, ChatStore::latestSchemaVersion());
            QVERIFY(r.backupPath.isEmpty());
            QCOMPARE(store.schemaVersion(), ChatStore::latestSchemaVersion());
            const QVariantMap d = store.diagnostics();
            QCOMPARE(d.value(QStringLiteral("journal_mode")).toString(), QStringLiteral("wal"));
            QCOMPARE(d.value(QStringLiteral("foreign_keys")).toInt(), 1);
            QCOMPARE(d.value(QStringLiteral("synchronous")).toInt(), 1); // NORMAL
            QCOMPARE(store.presets().size(), 2);
        }
        QVERIFY(!QFile::exists(path + QStringLiteral(".bak-v0")));
        {
            RawDb raw(path);
            QVERIFY(raw.ok());
            const QMap<QString, QString> schema = raw.schema();
            for (const char *table : {"conversations", "messages", "message_metrics", "message_routing", "presets",
                                      "bench_runs", "messages_fts", "conversations_fts"})
                QVERIFY2(schema.contains(QLatin1String(table)), table);
            QVERIFY(schema.value(QStringLiteral("messages_fts")).contains(QLatin1String("trigram")));
        }
        // Reopening changes nothing: no migration, no second copy of the built-in presets.
        ChatStore again;
        const OpenResult r = again.open(path);
        QVERIFY2(r.status == OpenResult::Status::Opened, qPrintable(r.message));
        QVERIFY(r.message.isEmpty());
        QCOMPARE(again.presets().size(), 2);
    }

    void inMemory() {
        auto store = memoryStore();
        QVERIFY(store->isOpen());
        QCOMPARE(store->schemaVersion(), ChatStore::latestSchemaVersion());
        QCOMPARE(store->diagnostics().value(QStringLiteral("foreign_keys")).toInt(), 1);
    }

    // ---- Migrations --------------------------------------------------------------------------------

    void migrate_data() {
        QTest::addColumn<int>("fromVersion");
        QTest::newRow("from v0 (new file)") << 0;
        QTest::newRow("from v1") << 1;
        QTest::newRow("from v2") << 2;
        QTest::newRow("from v3") << 3;
        QTest::newRow("from v4") << 4;
        QTest::newRow("from v5") << 5;
        QTest::newRow("from v6") << 6;
    }

    void migrate() {
        QFETCH(int, fromVersion);
        QVERIFY2(fromVersion < ChatStore::latestSchemaVersion(), "add the frozen schema of the new version");
        const QString path = freshPath();
        QByteArray oldFile;
        if (fromVersion > 0) {
            RawDb raw(path);
            QVERIFY(raw.ok());
            QString error;
            QVERIFY2(execAll(raw, kSchemaV1, &error), qPrintable(error));
            QVERIFY2(execAll(raw, kDataV1, &error), qPrintable(error));
            if (fromVersion >= 2) {
                QVERIFY2(execAll(raw, kSchemaV2Additions, &error), qPrintable(error));
                QVERIFY2(execAll(raw, kDataV2Additions, &error), qPrintable(error));
            }
            if (fromVersion >= 3) QVERIFY2(execAll(raw, kSchemaV3Additions, &error), qPrintable(error));
            if (fromVersion >= 4) {
                QVERIFY2(execAll(raw, kSchemaV4Additions, &error), qPrintable(error));
                QVERIFY2(execAll(raw, kDataV4Additions, &error), qPrintable(error));
            }
            if (fromVersion >= 5) QVERIFY2(execAll(raw, kSchemaV5Additions, &error), qPrintable(error));
            if (fromVersion >= 6) QVERIFY2(execAll(raw, kSchemaV6Additions, &error), qPrintable(error));
            QCOMPARE(raw.scalar(QStringLiteral("PRAGMA user_version")).toInt(), fromVersion);
        }

        ChatStore store;
        const OpenResult r = store.open(path);
        QVERIFY2(r.ok(), qPrintable(r.message));
        QCOMPARE(r.fromVersion, fromVersion);
        QCOMPARE(r.toVersion, ChatStore::latestSchemaVersion());
        QCOMPARE(store.schemaVersion(), ChatStore::latestSchemaVersion());
        if (fromVersion == 0) {
            QCOMPARE(r.status, OpenResult::Status::Created);
            QVERIFY(r.backupPath.isEmpty());
            QCOMPARE(store.conversations().size(), 0);
            return;
        }
        QCOMPARE(r.status, OpenResult::Status::Migrated);
        QVERIFY2(r.message.contains(QStringLiteral("v%1").arg(fromVersion)), qPrintable(r.message));

        // The backup is the untouched old database.
        const QString backup = path + QStringLiteral(".bak-v%1").arg(fromVersion);
        QCOMPARE(r.backupPath, backup);
        QVERIFY(QFile::exists(backup));
        {
            RawDb old(backup);
            QVERIFY(old.ok());
            QCOMPARE(old.scalar(QStringLiteral("PRAGMA user_version")).toInt(), fromVersion);
            QCOMPARE(old.scalar(QStringLiteral("SELECT count(*) FROM messages")).toInt(), 4);
            QCOMPARE(old.scalar(QStringLiteral("SELECT state FROM messages WHERE id = 4")).toString(),
                     QStringLiteral("partial"));
        }

        // The data survived, field by field.
        const QList<Conversation> list = store.conversations();
        QCOMPARE(titles(list), (QStringList{QStringLiteral("旧的对话 old chat"), QStringLiteral("second")}));
        const Conversation &c = list.first();
        QCOMPARE(c.id, 1);
        QCOMPARE(c.createdAt.toMSecsSinceEpoch(), 1000);
        QCOMPARE(c.updatedAt.toMSecsSinceEpoch(), 5000);
        QVERIFY(c.pinned);
        QCOMPARE(c.currentLeafId, std::optional<qint64>(3));
        QCOMPARE(c.settings.sampling.temperature, std::optional<double>(0.5));
        QCOMPARE(c.settings.sampling.seed, std::optional<quint64>(18446744073709551615ull));
        QCOMPARE(c.settings.presetId, std::optional<qint64>(7));
        QCOMPARE(c.settings.extra.value(QStringLiteral("window")).toString(), QStringLiteral("left"));
        // v6: no system prompt of its own, the policy that keeps an old long chat usable, and no
        // message left anything out.
        QCOMPARE(c.systemPrompt, QString());
        QCOMPARE(c.overflowPolicy, OverflowPolicy::KeepSystemAndLast);
        QCOMPARE(store.message(2)->droppedMessages, 0);
        QCOMPARE(ids(store.activePath(1)), (QList<qint64>{1, 3}));
        const SiblingInfo sib = store.siblings(3);
        QCOMPARE(sib.ids, (QList<qint64>{2, 3, 4}));
        QCOMPARE(sib.index, 1);
        const Message m2 = *store.message(2);
        QCOMPARE(m2.generation.modelName, QStringLiteral("ERNIE-4.5-0.3B"));
        QCOMPARE(m2.generation.seed, std::optional<quint64>(42));
        QCOMPARE(m2.finishReason, QStringLiteral("stop"));
        QCOMPARE(store.message(3)->generation.seed, std::optional<quint64>(~quint64(0)));
        QCOMPARE(store.message(3)->generation.sampling.topP, std::optional<double>(0.8));
        // The reply a v1 app left streaming was recovered, and is now searchable.
        QCOMPARE(r.recoveredReplies, 1);
        const Message m4 = *store.message(4);
        QCOMPARE(m4.state, MessageState::Failed);
        QCOMPARE(m4.finishReason, QStringLiteral("interrupted"));
        QCOMPARE(m4.content, QStringLiteral("half an answer about gating"));
        QCOMPARE(titles(store.search(QStringLiteral("gating"))), QStringList{QStringLiteral("旧的对话 old chat")});
        // The search index was backfilled with the old text and titles.
        const QList<SearchHit> hits = store.search(QStringLiteral("路由器"));
        QCOMPARE(titles(hits), QStringList{QStringLiteral("旧的对话 old chat")});
        QCOMPARE(hits.first().messageId, std::optional<qint64>(2));
        QCOMPARE(titles(store.search(QStringLiteral("old chat"))), QStringList{QStringLiteral("旧的对话 old chat")});
        // User preset kept in its place; built-ins added after it.
        const QList<Preset> presets = store.presets();
        QCOMPARE(presets.size(), 3);
        QCOMPARE(presets.at(0).name, QStringLiteral("My preset"));
        QCOMPARE(presets.at(0).sampling.temperature, std::optional<double>(0.7));
        QCOMPARE(presets.at(1).builtinKey, QStringLiteral("technical"));
        QCOMPARE(presets.at(2).builtinKey, QStringLiteral("creative"));

        if (fromVersion >= 2) {
            const std::optional<MessageMetrics> mm = store.metrics(2);
            QVERIFY(mm);
            QCOMPARE(mm->ttftMs, std::optional<double>(12.5));
            QCOMPARE(mm->nOutputTokens, std::optional<int>(3));
            QCOMPARE(mm->itlMs, (QList<float>{1.0f, 2.0f}));
            QCOMPARE(mm->tokenTimesMs, (QList<float>{12.5f, 14.0f}));
            QCOMPARE(mm->peakMemoryBytes, std::optional<qint64>(123456789));
            QCOMPARE(store.routing(2), (QList<LayerRouting>{{1, {1, 2}}}));
            QCOMPARE(store.benchRuns().size(), 1);
            QCOMPARE(store.benchRuns().first().json.value(QStringLiteral("decode_tok_s")).toInt(), 99);
        }

        // v4: messages from before have no profile; a reply finished now stores one. v5: a v4
        // profile stays readable, with no steps and no memory samples.
        if (fromVersion >= 4) {
            const std::optional<MessageProfile> old = store.profile(2);
            QVERIFY2(old, qPrintable(store.lastError()));
            QCOMPARE(old->ttftUs, std::optional<qint64>(1500));
            QCOMPARE(old->tokenTimesUs, (QList<qint64>{1500, 3000}));
            QCOMPARE(old->phases.attentionMs, 2.5);
            QCOMPARE(old->moeLayers, QList<int>{1});
            QVERIFY(old->steps.isEmpty());
            QVERIFY(old->memory.isEmpty());
            // v6: a profile from before: every step timed (on the host), no shared phase, no timeline.
            QCOMPARE(old->nStepsTimed, -1);
            QCOMPARE(old->phases.moeSharedMs, 0.0);
            QVERIFY(old->timeline.isEmpty());
        } else {
            QVERIFY(!store.profile(2));
        }
        QVERIFY(!store.profile(3));

        // New writes work on the migrated file (foreign keys on: a bad parent is refused).
        const auto next = store.addMessage(1, 3, MessageRole::User, QStringLiteral("follow-up"));
        QVERIFY(next);
        QVERIFY(*next > 4);
        QVERIFY(!store.addMessage(2, 3, MessageRole::User, QStringLiteral("wrong tree")));
        const auto reply = store.beginPartialReply(1, *next, sampleGeneration());
        QVERIFY(reply);
        QVERIFY2(store.finishReply(*reply, QStringLiteral("profiled"), QStringLiteral("stop"), sampleMetrics(), {},
                                   sampleProfile()),
                 qPrintable(store.lastError()));
        QCOMPARE(*store.profile(*reply), sampleProfile());
        store.close();

        // A migrated database has exactly the schema of a new one: the frozen copies above match
        // what schema_migrations.cpp shipped.
        const QString fresh = freshPath();
        {
            ChatStore s;
            QVERIFY(s.open(fresh).ok());
        }
        RawDb migrated(path), created(fresh);
        QCOMPARE(migrated.schema(), created.schema());
    }

    // Each step commits on its own: when v3 fails, v2 stays applied and nothing of v3 is left.
    void migrationFailureKeepsCompletedSteps() {
        const QString path = freshPath();
        {
            RawDb raw(path);
            QString error;
            QVERIFY2(execAll(raw, kSchemaV1, &error), qPrintable(error));
            QVERIFY2(execAll(raw, kDataV1, &error), qPrintable(error));
            // Something in the way of v3's first statement.
            QVERIFY(raw.exec(QStringLiteral("CREATE TABLE messages_fts (x)")));
        }
        ChatStore store;
        const OpenResult r = store.open(path);
        QCOMPARE(r.status, OpenResult::Status::Failed);
        QVERIFY2(r.message.contains(QLatin1String("v3")) && r.message.contains(QLatin1String("messages_fts")),
                 qPrintable(r.message));
        QVERIFY2(r.message.contains(QLatin1String(".bak-v1")), qPrintable(r.message));
        QVERIFY(!store.isOpen());
        QVERIFY(QFile::exists(path + QStringLiteral(".bak-v1")));
        RawDb raw(path);
        QCOMPARE(raw.scalar(QStringLiteral("PRAGMA user_version")).toInt(), 2);
        QCOMPARE(raw.scalar(QStringLiteral("SELECT count(*) FROM sqlite_schema WHERE name = 'message_metrics'")).toInt(),
                 1);
        QCOMPARE(raw.scalar(QStringLiteral("SELECT count(*) FROM sqlite_schema WHERE name = 'conversations_fts'")).toInt(),
                 0);
        QCOMPARE(raw.scalar(QStringLiteral("SELECT count(*) FROM messages")).toInt(), 4);
    }

    void refusesNewerSchema() {
        const QString path = freshPath();
        {
            RawDb raw(path);
            QVERIFY(raw.exec(QStringLiteral("CREATE TABLE future (x)")));
            QVERIFY(raw.exec(QStringLiteral("PRAGMA user_version = 99")));
        }
        QFile f(path);
        QVERIFY(f.open(QIODevice::ReadOnly));
        const QByteArray before = f.readAll();
        f.close();
        ChatStore store;
        const OpenResult r = store.open(path);
        QCOMPARE(r.status, OpenResult::Status::Failed);
        QVERIFY2(r.message.contains(QLatin1String("newer")), qPrintable(r.message));
        QVERIFY(!store.isOpen());
        QVERIFY(f.open(QIODevice::ReadOnly));
        QCOMPARE(f.readAll(), before);
    }

    void refusesForeignDatabase() {
        const QString path = freshPath();
        {
            RawDb raw(path);
            QVERIFY(raw.exec(QStringLiteral("CREATE TABLE somebody_elses (x)")));
        }
        ChatStore store;
        const OpenResult r = store.open(path);
        QCOMPARE(r.status, OpenResult::Status::Failed);
        QVERIFY2(r.message.contains(QLatin1String("not an ExpertScope")), qPrintable(r.message));
        RawDb raw(path);
        QCOMPARE(raw.scalar(QStringLiteral("SELECT count(*) FROM sqlite_schema")).toInt(), 1);
    }

    // ---- Integrity check ------------------------------------------------------------------------------

    void integrityFailure_data() {
        QTest::addColumn<QString>("damage");
        QTest::newRow("random bytes") << QStringLiteral("random");
        QTest::newRow("text file") << QStringLiteral("text");
        QTest::newRow("damaged b-tree pages") << QStringLiteral("pages");
    }

    void integrityFailure() {
        QFETCH(QString, damage);
        const QString path = freshPath();
        QByteArray broken;
        if (damage == QLatin1String("random")) {
            broken.resize(16384);
            QRandomGenerator rng(7);
            for (char &b : broken) b = char(rng.bounded(256));
        } else if (damage == QLatin1String("text")) {
            broken = "This is not a database, just some notes.\n";
        } else {
            {
                ChatStore store;
                QVERIFY(store.open(path).ok());
                const qint64 c = *store.createConversation(QStringLiteral("to be damaged"));
                std::optional<qint64> parent;
                for (int i = 0; i < 200; ++i)
                    parent = store.addMessage(c, parent, MessageRole::User, QString(300, QChar(u'字')));
            } // closing checkpoints the WAL into the file
            QFile f(path);
            QVERIFY(f.open(QIODevice::ReadOnly));
            broken = f.readAll();
            QVERIFY(broken.size() > 8 * 4096);
            for (qsizetype i = 2 * 4096; i < 6 * 4096; ++i) broken[i] = char(0xA5);
        }
        {
            QFile f(path);
            QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
            f.write(broken);
        }

        // A path a command was given: refused, and the file left exactly as it was.
        {
            ChatStore refusing;
            OpenOptions options;
            options.moveDamagedAside = false;
            const OpenResult refused = refusing.open(path, options);
            QCOMPARE(refused.status, OpenResult::Status::Failed);
            QVERIFY2(refused.message.contains(QLatin1String("not an intact ExpertScope database")) &&
                         refused.message.contains(QLatin1String("left as it is")),
                     qPrintable(refused.message));
            QVERIFY(!refusing.isOpen());
            QFile f(path);
            QVERIFY(f.open(QIODevice::ReadOnly));
            QCOMPARE(f.readAll(), broken);
            const QStringList siblings = QFileInfo(path).dir().entryList({QFileInfo(path).fileName() + "*"}, QDir::Files);
            QCOMPARE(siblings, QStringList{QFileInfo(path).fileName()});
        }

        // The app's own data file: moved aside, and a fresh database started.
        ChatStore store;
        const OpenResult r = store.open(path);
        qInfo().noquote() << r.message;
        QCOMPARE(r.status, OpenResult::Status::RecoveredFromCorruption);
        QVERIFY(r.ok());
        QVERIFY2(r.message.contains(QLatin1String("damaged")), qPrintable(r.message));
        QVERIFY2(r.message.contains(QDir::toNativeSeparators(r.corruptCopyPath)), qPrintable(r.message));
        QVERIFY2(QRegularExpression(QStringLiteral("\\.\\d{8}-\\d{6}(-\\d+)?\\.corrupt$"))
                     .match(r.corruptCopyPath)
                     .hasMatch(),
                 qPrintable(r.corruptCopyPath));
        // The broken file is kept, byte for byte.
        QFile aside(r.corruptCopyPath);
        QVERIFY(aside.open(QIODevice::ReadOnly));
        QCOMPARE(aside.readAll(), broken);
        // And the app goes on with a fresh database.
        QCOMPARE(store.schemaVersion(), ChatStore::latestSchemaVersion());
        QCOMPARE(store.conversations().size(), 0);
        QCOMPARE(store.presets().size(), 2);
        QVERIFY(store.createConversation(QStringLiteral("after recovery")));
    }

    // ---- Conversations ----------------------------------------------------------------------------------

    void conversationList() {
        auto s = memoryStore();
        QSignalSpy changed(s.get(), &ChatStore::conversationsChanged);
        const qint64 a = *s->createConversation(QStringLiteral("a"));
        const qint64 b = *s->createConversation(QStringLiteral("b"));
        const qint64 c = *s->createConversation(QStringLiteral("c"));
        QCOMPARE(titles(s->conversations()), (QStringList{"c", "b", "a"}));
        s->addMessage(a, std::nullopt, MessageRole::User, QStringLiteral("activity moves a up"));
        QCOMPARE(titles(s->conversations()), (QStringList{"a", "c", "b"}));
        QVERIFY(s->setPinned(b, true));
        QCOMPARE(titles(s->conversations()), (QStringList{"b", "a", "c"}));
        QVERIFY(s->renameConversation(c, QStringLiteral("c renamed")));
        QCOMPARE(titles(s->conversations()), (QStringList{"b", "a", "c renamed"})); // renaming is not activity
        QVERIFY(s->setPinned(b, false));
        QCOMPARE(titles(s->conversations()), (QStringList{"a", "c renamed", "b"}));
        QVERIFY(changed.count() >= 7);
        QVERIFY(!s->renameConversation(999, QStringLiteral("nobody")));
        QVERIFY2(s->lastError().contains(QLatin1String("999")), qPrintable(s->lastError()));

        ConversationSettings settings;
        settings.sampling.temperature = 0.2;
        settings.sampling.topK = 5;
        settings.sampling.stopStrings = {QStringLiteral("</s>")};
        settings.presetId = 2;
        settings.extra.insert(QStringLiteral("pane"), 1);
        QVERIFY(s->setConversationSettings(c, settings));
        QCOMPARE(s->conversation(c)->settings, settings);
        QVERIFY(s->addBenchRun(QJsonObject{{QStringLiteral("ttft_ms"), 12}}));
        QCOMPARE(s->benchRuns().size(), 1);
    }

    void samplingJson_data() {
        QTest::addColumn<QJsonObject>("json");
        QTest::newRow("empty") << QJsonObject{};
        QTest::newRow("all fields")
            << QJsonObject{{"temperature", 0.3}, {"top_p", 0.8},   {"top_k", 40},      {"min_p", 0.05},
                           {"repetition_penalty", 1.1}, {"presence_penalty", 0.5}, {"frequency_penalty", 0.25},
                           {"max_tokens", 512}, {"seed", 123}, {"stop", QJsonArray{"\n\n", "User:"}}};
        QTest::newRow("seed 2^53 as number") << QJsonObject{{"seed", 9007199254740992.0}};
        QTest::newRow("seed 2^64-1 as string") << QJsonObject{{"seed", "18446744073709551615"}};
    }

    void samplingJson() {
        QFETCH(QJsonObject, json);
        QCOMPARE(SamplingParams::fromJson(json).toJson(), json);
    }

    // A seed the JSON cannot mean (negative, 2^64 and beyond: the cast was undefined) is no seed.
    void seedOutOfRange() {
        QCOMPARE(seedFromJson(QJsonValue(-1.0)), std::nullopt);
        QCOMPARE(seedFromJson(QJsonValue(18446744073709551616.0)), std::nullopt);
        QCOMPARE(seedFromJson(QJsonValue(1e300)), std::nullopt);
        QCOMPARE(seedFromJson(QJsonValue(QStringLiteral("x"))), std::nullopt);
        QCOMPARE(seedFromJson(QJsonValue(7.0)), std::optional<quint64>(7));
        QCOMPARE(seedFromJson(QJsonValue(QStringLiteral("18446744073709551615"))),
                 std::optional<quint64>(18446744073709551615ull));
        QVERIFY(!SamplingParams::fromJson(QJsonObject{{"seed", 1e30}}).seed);
    }

    // ---- The message tree --------------------------------------------------------------------------------

    void treeBranching() {
        auto s = memoryStore();
        const qint64 c = *s->createConversation(QStringLiteral("tree"));
        QVERIFY(s->activePath(c).isEmpty());
        const qint64 u1 = *s->addMessage(c, std::nullopt, MessageRole::User, QStringLiteral("question"));
        const qint64 a1 = *s->addMessage(c, u1, MessageRole::Assistant, QStringLiteral("answer 1"), sampleGeneration());
        QCOMPARE(ids(s->activePath(c)), (QList<qint64>{u1, a1}));
        QCOMPARE(s->message(a1)->generation, sampleGeneration());

        // Regenerate: a sibling reply, streamed, becomes the active branch.
        const qint64 a2 = *s->regenerate(a1, sampleGeneration());
        QCOMPARE(s->message(a2)->state, MessageState::Partial);
        QCOMPARE(s->message(a2)->parentId, std::optional<qint64>(u1));
        QVERIFY(s->finishReply(a2, QStringLiteral("answer 2"), QStringLiteral("stop")));
        QCOMPARE(ids(s->activePath(c)), (QList<qint64>{u1, a2}));
        SiblingInfo sib = s->siblings(a2);
        QCOMPARE(sib.ids, (QList<qint64>{a1, a2}));
        QCOMPARE(sib.index, 1);
        QCOMPARE(s->siblings(a1).index, 0);
        QCOMPARE(ids(s->children(u1)), (QList<qint64>{a1, a2}));
        const qint64 u2 = *s->addMessage(c, a2, MessageRole::User, QStringLiteral("follow-up"));
        const qint64 a3 = *s->addMessage(c, u2, MessageRole::Assistant, QStringLiteral("answer 3"));
        QCOMPARE(ids(s->activePath(c)), (QList<qint64>{u1, a2, u2, a3}));
        QCOMPARE(ids(s->pathTo(u2)), (QList<qint64>{u1, a2, u2}));

        // Edit and resend the first question: a new root beside it; the old tree stays.
        const qint64 e1 = *s->editAndResend(u1, QStringLiteral("question, edited"));
        QCOMPARE(s->message(e1)->parentId, std::nullopt);
        QCOMPARE(s->message(e1)->content, QStringLiteral("question, edited"));
        QCOMPARE(ids(s->activePath(c)), (QList<qint64>{e1}));
        sib = s->siblings(e1);
        QCOMPARE(sib.ids, (QList<qint64>{u1, e1}));
        QCOMPARE(sib.index, 1);
        const qint64 b1 = *s->beginPartialReply(c, e1, sampleGeneration());
        QVERIFY(s->finishReply(b1, QStringLiteral("answer to the edit"), QStringLiteral("stop")));
        QCOMPARE(ids(s->activePath(c)), (QList<qint64>{e1, b1}));

        // Editing a later question: sibling under the same parent.
        const qint64 e2 = *s->editAndResend(u2, QStringLiteral("follow-up, edited"));
        QCOMPARE(s->message(e2)->parentId, std::optional<qint64>(a2));
        QCOMPARE(s->siblings(e2).ids, (QList<qint64>{u2, e2}));
        QCOMPARE(ids(s->activePath(c)), (QList<qint64>{u1, a2, e2}));

        // `< 1/2 >` switching: the branch's newest leaf becomes current.
        QVERIFY(s->selectBranch(u1));
        QCOMPARE(ids(s->activePath(c)), (QList<qint64>{u1, a2, e2}));
        QVERIFY(s->selectBranch(u2));
        QCOMPARE(ids(s->activePath(c)), (QList<qint64>{u1, a2, u2, a3}));
        QVERIFY(s->selectBranch(a1));
        QCOMPARE(ids(s->activePath(c)), (QList<qint64>{u1, a1}));
        QVERIFY(s->selectBranch(e1));
        QCOMPARE(ids(s->activePath(c)), (QList<qint64>{e1, b1}));
        QVERIFY(s->setCurrentLeaf(c, a3));
        QCOMPARE(ids(s->activePath(c)), (QList<qint64>{u1, a2, u2, a3}));

        // Wrong-kind and cross-conversation requests are refused with a reason.
        QVERIFY(!s->editAndResend(a1, QStringLiteral("x")));
        QVERIFY(!s->regenerate(u1, {}));
        const qint64 other = *s->createConversation(QStringLiteral("other"));
        QVERIFY(!s->setCurrentLeaf(other, a1));
        QVERIFY(!s->addMessage(other, a1, MessageRole::User, QStringLiteral("x")));
        QVERIFY2(s->lastError().contains(QLatin1String("another conversation")), qPrintable(s->lastError()));
        QCOMPARE(s->siblings(424242).index, -1);
    }

    void streamingReply() {
        auto s = memoryStore();
        const qint64 c = *s->createConversation(QStringLiteral("stream"));
        const qint64 u = *s->addMessage(c, std::nullopt, MessageRole::User, QStringLiteral("q"));
        QVERIFY(!s->updatePartialReply(u, QStringLiteral("not a partial"))); // a finished message is never rewritten
        QCOMPARE(s->message(u)->content, QStringLiteral("q"));
        const qint64 a = *s->beginPartialReply(c, u, sampleGeneration());
        for (int k = 1; k <= 3; ++k) QVERIFY(s->updatePartialReply(a, crashCheckpointText(k)));
        QCOMPARE(s->message(a)->content, crashCheckpointText(3));
        QCOMPARE(s->message(a)->state, MessageState::Partial);
        QVERIFY(s->search(QStringLiteral("chunk3")).isEmpty()); // streaming text is not indexed
        QVERIFY(s->finishReply(a, QStringLiteral("final text chunk"), QStringLiteral("length"), sampleMetrics(),
                               sampleRouting()));
        const Message m = *s->message(a);
        QCOMPARE(m.state, MessageState::Complete);
        QCOMPARE(m.finishReason, QStringLiteral("length"));
        QCOMPARE(*s->metrics(a), sampleMetrics());
        QCOMPARE(s->routing(a), sampleRouting());
        QCOMPARE(titles(s->search(QStringLiteral("final text"))), QStringList{QStringLiteral("stream")});
        QVERIFY(!s->finishReply(a, QStringLiteral("twice"), QStringLiteral("stop")));
        QVERIFY(!s->updatePartialReply(a, QStringLiteral("after the end")));
        QCOMPARE(s->message(a)->content, QStringLiteral("final text chunk"));

        const qint64 f = *s->regenerate(a, sampleGeneration());
        QVERIFY(s->updatePartialReply(f, QStringLiteral("before the error")));
        QVERIFY(s->failReply(f, QStringLiteral("before the error"), QStringLiteral("error: out of memory")));
        QCOMPARE(s->message(f)->state, MessageState::Failed);
        QCOMPARE(s->message(f)->finishReason, QStringLiteral("error: out of memory"));
        QVERIFY(!s->metrics(f));
    }

    void recoversPartialRepliesOnOpen() {
        const QString path = freshPath();
        qint64 partial = 0;
        {
            ChatStore s;
            QVERIFY(s.open(path).ok());
            const qint64 c = *s.createConversation(QStringLiteral("left streaming"));
            const qint64 u = *s.addMessage(c, std::nullopt, MessageRole::User, QStringLiteral("q"));
            partial = *s.beginPartialReply(c, u, {});
            QVERIFY(s.updatePartialReply(partial, QStringLiteral("interrupted words")));
        } // closed without finishing, as a crash would
        ChatStore s;
        const OpenResult r = s.open(path);
        QCOMPARE(r.status, OpenResult::Status::Opened);
        QCOMPARE(r.recoveredReplies, 1);
        QVERIFY2(!r.message.isEmpty(), "the user is told a reply was cut off");
        const Message m = *s.message(partial);
        QCOMPARE(m.state, MessageState::Failed);
        QCOMPARE(m.finishReason, QStringLiteral("interrupted"));
        QCOMPARE(m.content, QStringLiteral("interrupted words"));
        QCOMPARE(titles(s.search(QStringLiteral("interrupted words"))), QStringList{QStringLiteral("left streaming")});
        QCOMPARE(s.recoverPartialReplies(), 0);
    }

    // ---- Delete and undo ------------------------------------------------------------------------------------

    void deleteAndUndo() {
        auto s = memoryStore();
        const qint64 keep = *s->createConversation(QStringLiteral("keep me"));
        ConversationSettings settings;
        settings.sampling.temperature = 0.4;
        settings.extra.insert(QStringLiteral("note"), QStringLiteral("x"));
        const qint64 c = *s->createConversation(QStringLiteral("删除 then undo"), settings);
        QVERIFY(s->setPinned(c, true));
        QVERIFY(s->setSystemPrompt(c, QStringLiteral("你是专家。")));
        QVERIFY(s->setOverflowPolicy(c, OverflowPolicy::Refuse));
        const qint64 u = *s->addMessage(c, std::nullopt, MessageRole::User, QStringLiteral("撤销删除的问题"));
        const qint64 a1 = *s->beginPartialReply(c, u, sampleGeneration());
        QVERIFY(s->setDroppedMessages(a1, 2));
        QVERIFY(s->finishReply(a1, QStringLiteral("first answer"), QStringLiteral("stop"), sampleMetrics(),
                               sampleRouting()));
        const qint64 a2 = *s->regenerate(a1, sampleGeneration());
        QVERIFY(s->updatePartialReply(a2, QStringLiteral("streaming when deleted")));
        QVERIFY(s->setCurrentLeaf(c, a1));
        const Conversation before = *s->conversation(c);
        const QList<Message> messagesBefore = s->activePath(c) + QList<Message>{*s->message(a2)};

        QSignalSpy changed(s.get(), &ChatStore::conversationsChanged);
        const std::optional<ConversationSnapshot> snapshot = s->deleteConversation(c);
        QVERIFY(snapshot);
        QCOMPARE(changed.count(), 1);
        QCOMPARE(snapshot->conversation, before);
        QCOMPARE(snapshot->messages.size(), 3);
        QCOMPARE(snapshot->metrics.size(), 1);
        QCOMPARE(snapshot->routing.value(a1), sampleRouting());
        QVERIFY(!s->conversation(c));
        QVERIFY(!s->message(u));
        QVERIFY(!s->metrics(a1));
        QVERIFY(s->routing(a1).isEmpty());
        QVERIFY(s->search(QStringLiteral("撤销删除")).isEmpty());
        QCOMPARE(titles(s->conversations()), QStringList{QStringLiteral("keep me")});

        // New rows never take the deleted ids, so the undo can always put them back.
        const qint64 newer = *s->createConversation(QStringLiteral("newer"));
        QVERIFY(newer > c);
        const qint64 newerMessage = *s->addMessage(newer, std::nullopt, MessageRole::User, QStringLiteral("m"));
        QVERIFY(newerMessage > a2);

        QVERIFY2(s->restoreConversation(*snapshot), qPrintable(s->lastError()));
        QCOMPARE(*s->conversation(c), before);
        QCOMPARE(s->activePath(c), messagesBefore.mid(0, 2));
        QCOMPARE(*s->message(a2), messagesBefore.at(2));
        QCOMPARE(*s->metrics(a1), sampleMetrics());
        QCOMPARE(s->routing(a1), sampleRouting());
        QCOMPARE(titles(s->search(QStringLiteral("撤销删除"))), QStringList{QStringLiteral("删除 then undo")});
        QCOMPARE(titles(s->conversations()).first(), QStringLiteral("删除 then undo")); // pinned
        // Exact: deleting again yields the same snapshot.
        const std::optional<ConversationSnapshot> again = s->deleteConversation(c);
        QVERIFY(again);
        QVERIFY(*again == *snapshot);
        QVERIFY(s->restoreConversation(*again));
        QVERIFY(!s->restoreConversation(*again)); // already there
        QVERIFY(s->conversation(keep));
        // The restored partial reply streams on (the pane that was writing it may still be).
        QVERIFY(s->updatePartialReply(a2, QStringLiteral("continued")));
    }

    // ---- Context controls, continue, delete one message (schema v6) ----------------------------------------------

    void contextControls() {
        auto s = memoryStore();
        const qint64 c = *s->createConversation(QStringLiteral("ctx"));
        QCOMPARE(s->conversation(c)->systemPrompt, QString());
        QCOMPARE(s->conversation(c)->overflowPolicy, OverflowPolicy::KeepSystemAndLast);
        const QDateTime updated = s->conversation(c)->updatedAt;
        QVERIFY(s->setSystemPrompt(c, QStringLiteral("Be brief.")));
        QVERIFY(s->setOverflowPolicy(c, OverflowPolicy::DropOldest));
        QCOMPARE(s->conversation(c)->systemPrompt, QStringLiteral("Be brief."));
        QCOMPARE(s->conversation(c)->overflowPolicy, OverflowPolicy::DropOldest);
        QCOMPARE(s->conversation(c)->updatedAt, updated); // settings are not chat activity
        QVERIFY(!s->setSystemPrompt(c + 100, QStringLiteral("x")));
        QVERIFY(s->lastError().contains(QString::number(c + 100)));
        // A new conversation takes both from its first turn.
        NewConversation created;
        created.title = QStringLiteral("new");
        created.systemPrompt = QStringLiteral("Answer in French.");
        created.overflowPolicy = OverflowPolicy::Refuse;
        const TurnIds t = *s->beginTurnInNewConversation(created, QStringLiteral("hi"), sampleGeneration());
        QCOMPARE(s->conversation(t.conversationId)->systemPrompt, QStringLiteral("Answer in French."));
        QCOMPARE(s->conversation(t.conversationId)->overflowPolicy, OverflowPolicy::Refuse);
        // What a reply's prompt left out is kept with it.
        QCOMPARE(s->message(t.replyId)->droppedMessages, 0);
        QVERIFY(s->setDroppedMessages(t.replyId, 4));
        QCOMPARE(s->message(t.replyId)->droppedMessages, 4);
    }

    void continueReopensReply() {
        auto s = memoryStore();
        const qint64 c = *s->createConversation(QStringLiteral("continue"));
        const qint64 u = *s->addMessage(c, std::nullopt, MessageRole::User, QStringLiteral("q"));
        QVERIFY(!s->reopenReply(u)); // not a reply
        const qint64 a = *s->beginPartialReply(c, u, sampleGeneration());
        QVERIFY(!s->reopenReply(a)); // still streaming
        QVERIFY(s->finishReply(a, QStringLiteral("cut at the lim"), QStringLiteral("length"), sampleMetrics()));
        QCOMPARE(titles(s->search(QStringLiteral("cut at the"))), QStringList{QStringLiteral("continue")});
        QVERIFY2(s->reopenReply(a), qPrintable(s->lastError()));
        QCOMPARE(s->message(a)->state, MessageState::Partial);
        QCOMPARE(s->message(a)->content, QStringLiteral("cut at the lim"));
        QVERIFY(s->search(QStringLiteral("cut at the")).isEmpty()); // streaming again: not indexed
        // A writer picks up the stored text and appends to it.
        ReplyWriter w(s.get(), a, s->message(a)->content);
        w.append(QStringLiteral("it, and more"));
        QVERIFY(w.finish(QStringLiteral("stop"), sampleMetrics(), {}));
        QCOMPARE(s->message(a)->content, QStringLiteral("cut at the limit, and more"));
        QCOMPARE(s->message(a)->state, MessageState::Complete);
        QCOMPARE(s->message(a)->finishReason, QStringLiteral("stop"));
        QCOMPARE(titles(s->search(QStringLiteral("and more"))), QStringList{QStringLiteral("continue")});
        QCOMPARE(s->siblings(a).ids, QList<qint64>{a}); // the same message, no new branch
    }

    void deleteMessageMovesTheBranch() {
        auto s = memoryStore();
        const qint64 c = *s->createConversation(QStringLiteral("delete one"));
        const qint64 u1 = *s->addMessage(c, std::nullopt, MessageRole::User, QStringLiteral("q1"));
        const qint64 a1 = *s->addMessage(c, u1, MessageRole::Assistant, QStringLiteral("a1"));
        const qint64 u2 = *s->addMessage(c, a1, MessageRole::User, QStringLiteral("q2 删除"));
        const qint64 a2 = *s->beginPartialReply(c, u2, sampleGeneration());
        QVERIFY(s->finishReply(a2, QStringLiteral("a2"), QStringLiteral("stop"), sampleMetrics(), sampleRouting()));
        const qint64 b2 = *s->regenerate(a2, sampleGeneration()); // a sibling of a2, now the leaf
        QVERIFY(s->finishReply(b2, QStringLiteral("b2"), QStringLiteral("stop")));
        // Deleting the active reply: the branch moves to its newest remaining sibling.
        QSignalSpy changed(s.get(), &ChatStore::messagesChanged);
        QVERIFY2(s->deleteMessage(b2), qPrintable(s->lastError()));
        QCOMPARE(changed.count(), 1);
        QVERIFY(!s->message(b2));
        QCOMPARE(ids(s->activePath(c)), (QList<qint64>{u1, a1, u2, a2}));
        // Deleting a message in the middle takes its branch below it; the leaf moves to its parent.
        QVERIFY(s->deleteMessage(u2));
        QVERIFY(!s->message(a2));
        QVERIFY(!s->metrics(a2));
        QVERIFY(s->routing(a2).isEmpty());
        QVERIFY(s->search(QStringLiteral("q2 删除")).isEmpty());
        QCOMPARE(ids(s->activePath(c)), (QList<qint64>{u1, a1}));
        QCOMPARE(s->messageCount(c), 2);
        // A message off the active branch goes without moving it.
        const qint64 other = *s->editAndResend(u1, QStringLiteral("q1 edited"));
        QVERIFY(s->setCurrentLeaf(c, a1));
        QVERIFY(s->deleteMessage(other));
        QCOMPARE(ids(s->activePath(c)), (QList<qint64>{u1, a1}));
        // The root: the conversation is empty, and still there.
        QVERIFY(s->deleteMessage(u1));
        QCOMPARE(s->messageCount(c), 0);
        QCOMPARE(s->conversation(c)->currentLeafId, std::nullopt);
        QVERIFY(!s->deleteMessage(u1));
        QVERIFY(s->lastError().contains(QString::number(u1)));
    }

    // ---- Crash safety ------------------------------------------------------------------------------------------------

    void crashSafety() {
        const QString path = freshPath();
        QProcess child;
        child.setProcessChannelMode(QProcess::SeparateChannels);
        child.start(QCoreApplication::applicationFilePath(), {QString::fromLatin1(kCrashChildFlag), path});
        QVERIFY2(child.waitForStarted(10000), qPrintable(child.errorString()));

        QList<qint64> finishedIds;
        int lastCheckpoint = 0;
        QByteArray pending;
        auto readLines = [&] {
            pending += child.readAllStandardOutput();
            qsizetype nl;
            while ((nl = pending.indexOf('\n')) >= 0) {
                const QList<QByteArray> f = pending.left(nl).split(' ');
                pending.remove(0, nl + 1);
                if (f.value(0) == "FINISHED")
                    for (int i = 1; i < f.size(); ++i) finishedIds.append(f[i].toLongLong());
                else if (f.value(0) == "CHECKPOINT")
                    lastCheckpoint = std::max(lastCheckpoint, f.value(1).toInt());
            }
        };
        // Kill it mid-stream, after a few checkpoints.
        QElapsedTimer timer;
        timer.start();
        while (lastCheckpoint < 8 && timer.elapsed() < 30000 && child.state() == QProcess::Running) {
            child.waitForReadyRead(1000);
            readLines();
        }
        QVERIFY2(lastCheckpoint >= 8, qPrintable(QString::fromLocal8Bit(child.readAllStandardError())));
        child.kill(); // SIGKILL: no destructors, no close, no checkpoint of the WAL
        QVERIFY(child.waitForFinished(10000));
        QCOMPARE(child.exitStatus(), QProcess::CrashExit);
        readLines();
        QCOMPARE(finishedIds.size(), 5);
        QVERIFY2(QFile::exists(path + QStringLiteral("-wal")), "the killed writer left its WAL behind");

        ChatStore s;
        const OpenResult r = s.open(path);
        QCOMPARE(r.status, OpenResult::Status::Opened); // the integrity check passed
        QCOMPARE(r.recoveredReplies, 1);
        const qint64 conversation = finishedIds[0], u1 = finishedIds[1], a1 = finishedIds[2], u2 = finishedIds[3],
                     partial = finishedIds[4];
        QCOMPARE(ids(s.activePath(conversation)), (QList<qint64>{u1, a1, u2, partial}));
        // Finished messages are intact, metrics and routing included.
        QCOMPARE(s.message(u1)->content, QStringLiteral("第一个问题"));
        const Message answer = *s.message(a1);
        QCOMPARE(answer.content, QStringLiteral("第一个回答，已经完成。"));
        QCOMPARE(answer.state, MessageState::Complete);
        QCOMPARE(answer.generation, sampleGeneration());
        QCOMPARE(*s.metrics(a1), sampleMetrics());
        QCOMPARE(s.routing(a1), sampleRouting());
        QCOMPARE(s.message(u2)->content, QStringLiteral("second question"));
        // The partial reply holds the last checkpoint the child reported, or the one it committed
        // just before the kill and had no time to report.
        const Message recovered = *s.message(partial);
        qInfo() << "killed after checkpoint" << lastCheckpoint << "; recovered"
                << (recovered.content == crashCheckpointText(lastCheckpoint) ? "that one" : "the next one");
        QCOMPARE(recovered.state, MessageState::Failed);
        QCOMPARE(recovered.finishReason, QStringLiteral("interrupted"));
        QVERIFY2(recovered.content == crashCheckpointText(lastCheckpoint) ||
                     recovered.content == crashCheckpointText(lastCheckpoint + 1),
                 qPrintable(QStringLiteral("checkpoint %1, got: %2").arg(lastCheckpoint).arg(recovered.content.right(40))));
        QCOMPARE(titles(s.search(QStringLiteral("chunk1"))), QStringList{QStringLiteral("崩溃测试 crash test")});
        QCOMPARE(titles(s.search(QStringLiteral("已经完成"))), QStringList{QStringLiteral("崩溃测试 crash test")});
    }

    // ---- Threads --------------------------------------------------------------------------------------------------------

    void refusesOtherThreads() {
#ifndef QT_NO_DEBUG
        QSKIP("debug builds assert instead (Q_ASSERT_X in ChatStore::checkThread)");
#else
        auto s = memoryStore();
        std::optional<qint64> fromWorker = 1;
        QTest::ignoreMessage(QtCriticalMsg, "The chat store was used from the wrong thread.");
        QThread *worker = QThread::create([&] { fromWorker = s->createConversation(QStringLiteral("wrong thread")); });
        worker->start();
        QVERIFY(worker->wait(10000));
        delete worker;
        QVERIFY(!fromWorker);
        QVERIFY(s->lastError().contains(QLatin1String("thread")));
        QCOMPARE(s->conversations().size(), 0);
#endif
    }

    // ---- The list model ---------------------------------------------------------------------------------------------------

    void listModel() {
        auto s = memoryStore();
        const qint64 a = *s->createConversation(QStringLiteral("alpha"));
        ConversationListModel model(s.get());
        QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
        auto rowTitles = [&model] {
            QStringList out;
            for (int i = 0; i < model.rowCount(); ++i)
                out.append(model.index(i).data(ConversationListModel::TitleRole).toString());
            return out;
        };
        QCOMPARE(rowTitles(), QStringList{"alpha"});
        const qint64 b = *s->createConversation(QStringLiteral("beta"));
        const qint64 c = *s->createConversation(QString());
        QCOMPARE(rowTitles(), (QStringList{"", "beta", "alpha"}));
        QCOMPARE(model.index(0).data(Qt::DisplayRole).toString(), QStringLiteral("New conversation"));
        QCOMPARE(model.index(1).data(ConversationListModel::IdRole).toLongLong(), b);
        QCOMPARE(model.rowOf(a), 2);

        // A persistent index follows its row through moves.
        const QPersistentModelIndex alpha = model.index(2);
        QSignalSpy moved(&model, &QAbstractItemModel::rowsMoved);
        s->addMessage(a, std::nullopt, MessageRole::User, QStringLiteral("alpha talks about 混合专家模型"));
        QCOMPARE(rowTitles(), (QStringList{"alpha", "", "beta"}));
        QCOMPARE(moved.count(), 1);
        QCOMPARE(alpha.row(), 0);
        QVERIFY(model.setData(model.index(2), true, ConversationListModel::PinnedRole));
        QCOMPARE(rowTitles(), (QStringList{"beta", "alpha", ""}));
        QVERIFY(model.index(0).data(ConversationListModel::PinnedRole).toBool());
        QCOMPARE(alpha.row(), 1);

        // Rename through the model (inline editing) changes data in place.
        QSignalSpy dataChanged(&model, &QAbstractItemModel::dataChanged);
        QVERIFY(model.setData(model.index(2), QStringLiteral("gamma"), Qt::EditRole));
        QCOMPARE(rowTitles(), (QStringList{"beta", "alpha", "gamma"}));
        QCOMPARE(dataChanged.count(), 1);
        QCOMPARE(s->conversation(c)->title, QStringLiteral("gamma"));

        // Search: hits only, with snippets; clearing the text brings the whole list back.
        model.setSearchText(QStringLiteral("混合专家"));
        QCOMPARE(rowTitles(), QStringList{"alpha"});
        QCOMPARE(alpha.row(), 0);
        QVERIFY(model.index(0).data(ConversationListModel::SnippetRole).toString().contains(QStringLiteral("混合专家")));
        QVERIFY(model.index(0).data(ConversationListModel::SnippetHtmlRole).toString().contains(
            QStringLiteral("<b>混合专家</b>")));
        model.setSearchText(QStringLiteral("gam"));
        QCOMPARE(rowTitles(), QStringList{"gamma"});
        QVERIFY(model.index(0).data(ConversationListModel::SnippetRole).toString().isEmpty());
        model.setSearchText(QString());
        QCOMPARE(rowTitles(), (QStringList{"beta", "alpha", "gamma"}));

        // Delete and undo.
        const std::optional<ConversationSnapshot> snap = s->deleteConversation(b);
        QCOMPARE(rowTitles(), (QStringList{"alpha", "gamma"}));
        QVERIFY(s->restoreConversation(*snap));
        QCOMPARE(rowTitles(), (QStringList{"beta", "alpha", "gamma"}));
        QCOMPARE(model.index(0).data(ConversationListModel::UpdatedAtRole).toDateTime(), snap->conversation.updatedAt);

        // Several changes at once (pins flipped, one row gone, one new) in one refresh.
        {
            const QSignalBlocker block(s.get());
            s->setPinned(b, false);
            s->setPinned(c, true);
            s->deleteConversation(a);
            s->createConversation(QStringLiteral("delta"));
        }
        model.refresh();
        QCOMPARE(rowTitles(), (QStringList{"gamma", "delta", "beta"}));
        QCOMPARE(model.roleNames().value(ConversationListModel::SnippetRole), QByteArray("snippet"));
    }
};

int main(int argc, char **argv) {
    QCoreApplication app(argc, argv);
    if (argc >= 3 && qstrcmp(argv[1], kCrashChildFlag) == 0) return runCrashChild(QString::fromLocal8Bit(argv[2]));
    TestChatStore test;
    QTEST_SET_MAIN_SOURCE_PATH
    return QTest::qExec(&test, argc, argv);
}

#include "test_chat_store.moc"
