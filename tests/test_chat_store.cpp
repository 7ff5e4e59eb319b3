// ChatStore and ConversationListModel: schema creation; migration from every earlier schema
// (frozen copies of each old schema live here, KDE Elisa style) with backups; FTS search over
// titles and text, Chinese included; the message tree; delete + undo; presets; the integrity-check
// recovery path; crash safety (this binary re-runs itself as a child that is SIGKILLed mid-reply);
// the list model under QAbstractItemModelTester. In-memory databases unless files are the point.
#include "chat_store.h"
#include "conversation_list_model.h"
#include "presets.h"

#include <QAbstractItemModelTester>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QProcess>
#include <QRandomGenerator>
#include <QRegularExpression>
#include <QSignalSpy>
#include <QSqlError>
#include <QSqlQuery>
#include <QTemporaryDir>
#include <QThread>
#include <QtTest>

#include <cstdio>
#include <limits>

using namespace es;

// Readable QCOMPARE failures for the store's enums (found by argument-dependent lookup).
namespace es {
char *toString(MessageState s) { return qstrdup(qPrintable(messageStateName(s))); }
char *toString(MessageRole r) { return qstrdup(qPrintable(messageRoleName(r))); }
char *toString(OpenResult::Status s) { return qstrdup(QByteArray::number(int(s)).constData()); }
} // namespace es

namespace {

const char *const kCrashChildFlag = "--crash-child";

// ---- Frozen schemas ------------------------------------------------------------------------------
// Copies of every released schema step, as shipped. Never edit these; when a v6 is added, add
// kSchemaV5Additions (a copy of v5's statements) and a "from v5" row to migrate_data().

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

// A profile as v4 stored it: token times {1500, 3000} µs, one MoE layer, no trace; no steps or
// memory samples exist before v5, and the profile must stay readable after the migration.
const QStringList kDataV4Additions = {
    R"(INSERT INTO message_profiles (message_id, ttft_us, duration_us, token_times, n_prompt_tokens, attention_ms,
                                     n_steps, memory_peak_bytes, n_layers, n_experts, top_k, moe_layers)
       VALUES (2, 1500, 9000, X'01B817B817', 20, 2.5, 3, 4096, 2, 4, 2, X'01000000'))",
};

// ---- Raw database access for setting up and inspecting files -------------------------------------

class RawDb {
public:
    explicit RawDb(const QString &path) : m_name(QStringLiteral("raw.%1").arg(++s_counter)) {
        QSqlDatabase db = QSqlDatabase::addDatabase(QStringLiteral("QSQLITE"), m_name);
        db.setDatabaseName(path);
        m_ok = db.open();
    }
    ~RawDb() {
        {
            QSqlDatabase db = QSqlDatabase::database(m_name, false);
            db.close();
        }
        QSqlDatabase::removeDatabase(m_name);
    }
    bool ok() const { return m_ok; }
    QSqlDatabase db() const { return QSqlDatabase::database(m_name, false); }
    bool exec(const QString &sql, QString *error = nullptr) const {
        QSqlQuery q(db());
        if (q.exec(sql)) return true;
        if (error) *error = q.lastError().text() + QStringLiteral(" in ") + sql.simplified().left(60);
        return false;
    }
    QVariant scalar(const QString &sql) const {
        QSqlQuery q(db());
        if (!q.exec(sql) || !q.next()) return QVariant();
        return q.value(0);
    }
    // name → normalized CREATE statement of every table, index, trigger and virtual table.
    QMap<QString, QString> schema() const {
        QMap<QString, QString> out;
        QSqlQuery q(db());
        q.exec(QStringLiteral("SELECT name, sql FROM sqlite_schema WHERE sql IS NOT NULL ORDER BY name"));
        while (q.next()) out.insert(q.value(0).toString(), q.value(1).toString().simplified());
        return out;
    }

private:
    static inline int s_counter = 0;
    QString m_name;
    bool m_ok = false;
};

bool execAll(const RawDb &db, const QStringList &statements, QString *error) {
    for (const QString &sql : statements)
        if (!db.exec(sql, error)) return false;
    return true;
}

QStringList titles(const QList<SearchHit> &hits) {
    QStringList out;
    for (const SearchHit &h : hits) out.append(h.conversation.title);
    return out;
}

QStringList titles(const QList<Conversation> &list) {
    QStringList out;
    for (const Conversation &c : list) out.append(c.title);
    return out;
}

QList<qint64> ids(const QList<Message> &path) {
    QList<qint64> out;
    for (const Message &m : path) out.append(m.id);
    return out;
}

QString crashCheckpointText(int k) {
    QString text;
    for (int i = 1; i <= k; ++i) text += QStringLiteral("片段%1 chunk%1 ").arg(i);
    return text;
}

MessageMetrics sampleMetrics() {
    MessageMetrics mm;
    mm.ttftMs = 31.25;
    mm.nPromptTokens = 17;
    mm.nOutputTokens = 4;
    mm.prefillTokS = 1234.5;
    mm.decodeTokS = 48.0;
    mm.itlMs = {20.5f, 21.0f, 19.75f};
    mm.tokenTimesMs = {31.25f, 51.75f, 72.75f, 92.5f};
    mm.stopReason = QStringLiteral("eos");
    mm.peakMemoryBytes = qint64(3) << 32;
    return mm;
}

QList<LayerRouting> sampleRouting() { return {{1, {3, 0, 1, 0}}, {3, {0, 2, 2, 0}}}; }

// A profile as ProfileRecorder makes one: two MoE layers (1 and 3) of a 4-layer model with four
// routed experts, top-2, one shared expert; three positions (two prompt, one reply), the first
// from the prefix cache (ids −1); weights already float16-exact.
MessageProfile sampleProfile() {
    MessageProfile p;
    p.ttftUs = 31250;
    p.durationUs = 95000;
    p.tokenTimesUs = {31250, 51750, 72750, 92500};
    p.nPromptTokens = 2;
    p.nCachedPromptTokens = 1;
    p.nPreemptions = 1;
    p.phases = {12.5, 40.25, 7.125, 1.5, 3.0625};
    p.nSteps = 6;
    p.nStepsMissed = 0;
    p.maxBatchSeqs = 2;
    p.memoryPeakBytes = (qint64(5) << 32) + 12345;
    p.kvBlocksPeak = 3;
    p.nLayers = 4;
    p.nExperts = 4;
    p.nSharedExperts = 1;
    p.k = 2;
    p.moeLayers = {1, 3};
    p.traceIds = {-1, -1, -1, -1, 0, 2, 1, 2, 0, 3, 2, 1};
    p.traceWeights = {0, 0, 0, 0, 0.75f, 0.25f, 0.5f, 0.5f, 0.625f, 0.375f, 0.875f, 0.125f};
    p.routing = {{1, {2, 0, 1, 1}}, {3, {0, 2, 2, 0}}};
    p.steps = {{-20, 30000, 1, 2, 0, 11000, 9000, 3000, 500},
               {30500, 20000, 2, 0, 2, 4000, 12000, 1000, 250}};
    p.memory = {
        {0, (qint64(5) << 32), 2}, {31000, (qint64(5) << 32) + 12345, 3}, {90000, (qint64(5) << 32), 2}};
    return p;
}

GenerationInfo sampleGeneration() {
    GenerationInfo g;
    g.modelName = QStringLiteral("ERNIE-4.5-0.3B-PT");
    g.modelHash = QStringLiteral("sha256:0123");
    g.precision = QStringLiteral("bf16");
    g.sampling.temperature = 0.7;
    g.sampling.topK = 20;
    g.seed = quint64(0xFFFFFFFFFFFFFFF0ull); // above INT64_MAX: stored as its bit pattern
    return g;
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

    // A store on a private in-memory database with a clock that advances 1 s per reading, so the
    // list order never depends on two events landing in the same millisecond.
    std::unique_ptr<ChatStore> memoryStore() {
        auto store = std::make_unique<ChatStore>();
        auto clock = std::make_shared<qint64>(1'700'000'000'000);
        store->setClockForTesting([clock] { return *clock += 1000; });
        const OpenResult r = store->open(QStringLiteral(":memory:"));
        if (r.status != OpenResult::Status::Created) qWarning() << "open failed:" << r.message;
        return store;
    }

    // The search fixture: six conversations, one with a reply still streaming.
    void fillSearchFixture(ChatStore &s) {
        auto add = [&s](const QString &title, const QStringList &texts) {
            const qint64 c = *s.createConversation(title);
            std::optional<qint64> parent;
            bool user = true;
            for (const QString &t : texts) {
                parent = s.addMessage(c, parent, user ? MessageRole::User : MessageRole::Assistant, t);
                user = !user;
            }
            return std::pair{c, parent};
        };
        add(QStringLiteral("MoE routing notes"), {QStringLiteral("How does expert routing work in ERNIE?"),
                                                  QStringLiteral("Each token picks the top-k experts by router score.")});
        add(QStringLiteral("深度学习笔记"), {QStringLiteral("请解释混合专家模型的负载均衡"),
                                             QStringLiteral("负载均衡损失让每个专家处理的词元数量接近。")});
        add(QStringLiteral("Cooking"), {QStringLiteral("Recipe for 宫保鸡丁 please"),
                                        QStringLiteral("Stir-fry chicken with peanuts and chilies; 100% tasty_stuff.")});
        add(QStringLiteral("Empty chat"), {});
        const auto [streaming, question] =
            add(QStringLiteral("Streaming"), {QStringLiteral("Tell me something")});
        const auto partial = s.beginPartialReply(streaming, *question, {});
        s.updatePartialReply(*partial, QStringLiteral("secretpartialtext about routing"));
        add(QStringLiteral("Network notes"), {QStringLiteral("The routing table of the router.")});
    }

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

    // ---- Profiles (schema v4) ----------------------------------------------------------------------

    void profileCodecs_data() {
        QTest::addColumn<QList<qint64>>("times");
        QTest::newRow("none") << QList<qint64>{};
        QTest::newRow("one") << QList<qint64>{0};
        QTest::newRow("decode") << QList<qint64>{31250, 51750, 72750, 92500};
        QTest::newRow("clock step back") << QList<qint64>{100, 90, 5'000'000'000LL, 5'000'000'001LL};
    }
    void profileCodecs() {
        QFETCH(QList<qint64>, times);
        const QByteArray b = encodeTokenTimes(times);
        QCOMPARE(decodeTokenTimes(b), std::optional<QList<qint64>>(times));
        QVERIFY(!decodeTokenTimes(QByteArray()));
        QVERIFY(!decodeTokenTimes(QByteArray("\x02", 1)));        // unknown format
        QVERIFY(!decodeTokenTimes(QByteArray("\x01\x80", 2)));    // varint cut off

        // Traces: one byte per id up to 255 experts (−1 kept), two above; float16 weights exact.
        for (int nExperts : {4, 255, 300}) {
            const QList<qint16> ids = {-1, 0, 3, qint16(nExperts - 1)};
            const QList<float> w = {0.f, 0.5f, 0.2998046875f, 1.f};
            const QByteArray blob = encodeRoutingTrace(ids, w, nExperts);
            QList<qint16> ids2;
            QList<float> w2;
            QVERIFY(decodeRoutingTrace(blob, &ids2, &w2));
            QCOMPARE(ids2, ids);
            QCOMPARE(w2, w);
            QCOMPARE(blob.at(5), char(nExperts <= 255 ? 1 : 2));
            QByteArray damaged = blob;
            damaged.chop(3);
            QVERIFY(!decodeRoutingTrace(damaged, &ids2, &w2));
        }
        QList<qint16> ids;
        QList<float> w;
        QVERIFY(decodeRoutingTrace(QByteArray(), &ids, &w)); // no trace: a dense model
        QVERIFY(ids.isEmpty());
        QVERIFY(!decodeRoutingTrace(QByteArray("XXXX\x01\x01\0\0\0\0\0\0", 12), &ids, &w));
    }

    // v5 columns: steps and memory samples round-trip exactly; damaged BLOBs are refused.
    void profileStepCodecs() {
        const MessageProfile p = sampleProfile();
        QCOMPARE(decodeProfileSteps(encodeProfileSteps(p.steps)), std::optional<QList<ProfileStep>>(p.steps));
        QCOMPARE(decodeMemorySamples(encodeMemorySamples(p.memory)),
                 std::optional<QList<ProfileMemorySample>>(p.memory));
        QCOMPARE(decodeProfileSteps(QByteArray()), std::optional<QList<ProfileStep>>(QList<ProfileStep>{}));
        QCOMPARE(decodeMemorySamples(QByteArray()),
                 std::optional<QList<ProfileMemorySample>>(QList<ProfileMemorySample>{}));
        QByteArray cut = encodeProfileSteps(p.steps);
        cut.chop(1);
        QVERIFY(!decodeProfileSteps(cut));                        // a record cut short
        QVERIFY(!decodeMemorySamples(QByteArray("\x02\x00", 2))); // unknown format
    }

    // Found by tests/fuzz: extreme values round-trip (differences wrap, no signed overflow), a
    // count beyond int is refused, and a trace whose zlib length is damaged is refused before
    // qUncompress() would allocate it.
    void profileCodecsAtTheLimits() {
        constexpr qint64 lo = std::numeric_limits<qint64>::min(), hi = std::numeric_limits<qint64>::max();
        const QList<qint64> times = {hi, lo, 0, lo, hi};
        QCOMPARE(decodeTokenTimes(encodeTokenTimes(times)), std::optional<QList<qint64>>(times));
        const QList<ProfileStep> steps = {{lo, hi, 1, 2, 3, lo, hi, 0, -1}, {hi, lo, -4, 5, 6, 7, 8, 9, 10}};
        QCOMPARE(decodeProfileSteps(encodeProfileSteps(steps)), std::optional<QList<ProfileStep>>(steps));
        const QList<ProfileMemorySample> mem = {{hi, lo, 3}, {lo, hi, -3}};
        QCOMPARE(decodeMemorySamples(encodeMemorySamples(mem)),
                 std::optional<QList<ProfileMemorySample>>(mem));

        QByteArray wide("\x01", 1); // one step whose n_seqs (third field) is 2^40
        for (quint8 b : {0, 0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x20, 0, 0, 0, 0, 0, 0}) wide.append(char(b));
        QVERIFY(!decodeProfileSteps(wide));

        QByteArray trace = encodeRoutingTrace({1, 2}, {0.5f, 0.5f}, 8);
        trace[12] = char(0x7f); // after the 12-byte header, qCompress()'s big-endian length: ~2 GB
        QList<qint16> ids;
        QList<float> w;
        QVERIFY(!decodeRoutingTrace(trace, &ids, &w));
    }

    void profileStoredWithReply() {
        auto s = memoryStore();
        const qint64 c = *s->createConversation(QStringLiteral("profiled"));
        const qint64 u = *s->addMessage(c, std::nullopt, MessageRole::User, QStringLiteral("【技术解析模式】MoE?"));
        const qint64 a = *s->beginPartialReply(c, u, sampleGeneration());
        QVERIFY(!s->profile(a));
        // Routing passed beside the profile wins for message_routing (ChatPane passes both, equal).
        QVERIFY(s->finishReply(a, QStringLiteral("answer"), QStringLiteral("stop"), sampleMetrics(), {}, sampleProfile()));
        QCOMPARE(*s->profile(a), sampleProfile());
        QCOMPARE(s->routing(a), sampleProfile().routing);
        QCOMPARE(*s->metrics(a), sampleMetrics());

        // One transaction: a finish that fails (not partial any more) leaves no profile behind.
        const qint64 b = *s->regenerate(a, sampleGeneration());
        QVERIFY(s->finishReply(b, QStringLiteral("plain"), QStringLiteral("stop")));
        MessageProfile other = sampleProfile();
        other.ttftUs = 1;
        QVERIFY(!s->finishReply(b, QStringLiteral("again"), QStringLiteral("stop"), sampleMetrics(), {}, other));
        QVERIFY(!s->profile(b));

        // saveProfile replaces, routing included; a dense model's profile has no trace.
        MessageProfile dense;
        dense.ttftUs = 5;
        dense.tokenTimesUs = {5, 9};
        dense.nLayers = 2;
        QVERIFY(s->saveProfile(b, dense));
        QCOMPARE(*s->profile(b), dense);
        QVERIFY(s->routing(b).isEmpty());
        QVERIFY(!s->saveProfile(424242, dense)); // no such message
    }

    void profileSurvivesDeleteAndUndo() {
        auto s = memoryStore();
        const qint64 c = *s->createConversation(QStringLiteral("undo keeps profiles"));
        const qint64 u = *s->addMessage(c, std::nullopt, MessageRole::User, QStringLiteral("q"));
        const qint64 a = *s->beginPartialReply(c, u, sampleGeneration());
        QVERIFY(s->finishReply(a, QStringLiteral("answer"), QStringLiteral("stop"), sampleMetrics(), sampleRouting(),
                               sampleProfile()));
        const std::optional<ConversationSnapshot> snap = s->deleteConversation(c);
        QVERIFY(snap);
        QVERIFY(!s->profile(a));
        QCOMPARE(snap->profiles.size(), 1);
        QVERIFY(s->restoreConversation(*snap));
        MessageProfile expected = sampleProfile();
        expected.routing = sampleRouting(); // the routing argument was stored
        QCOMPARE(*s->profile(a), expected);
    }

    void damagedProfileReadsAsNone() {
        const QString path = freshPath();
        qint64 a = 0;
        {
            ChatStore s;
            QVERIFY(s.open(path).ok());
            const qint64 c = *s.createConversation(QStringLiteral("damaged"));
            const qint64 u = *s.addMessage(c, std::nullopt, MessageRole::User, QStringLiteral("q"));
            a = *s.beginPartialReply(c, u, {});
            QVERIFY(s.finishReply(a, QStringLiteral("x"), QStringLiteral("stop"), {}, {}, sampleProfile()));
        }
        {
            RawDb raw(path);
            QVERIFY(raw.exec(QStringLiteral("UPDATE message_profiles SET routing_trace = X'00112233'")));
        }
        ChatStore s;
        QVERIFY(s.open(path).ok());
        QVERIFY(!s.profile(a));
        QVERIFY2(s.lastError().contains(QLatin1String("damaged")), qPrintable(s.lastError()));
        QCOMPARE(s.message(a)->content, QStringLiteral("x")); // the message itself is fine
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
        const qint64 u = *s->addMessage(c, std::nullopt, MessageRole::User, QStringLiteral("撤销删除的问题"));
        const qint64 a1 = *s->beginPartialReply(c, u, sampleGeneration());
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

    // The FTS5 index must match its content tables after every kind of write (FTS5's own
    // integrity check against the external content; valid while no reply is streaming).
    void searchIndexStaysConsistent() {
        const QString path = freshPath();
        {
            ChatStore s;
            QVERIFY(s.open(path).ok());
            fillSearchFixture(s);
            const QList<Conversation> list = s.conversations();
            QVERIFY(s.renameConversation(list.first().id, QStringLiteral("renamed title")));
            const std::optional<ConversationSnapshot> snap = s.deleteConversation(list.last().id);
            QVERIFY(snap);
            QVERIFY(s.restoreConversation(*snap));
            QVERIFY(s.deleteConversation(snap->conversation.id));
            // Delete and restore the conversation whose reply is streaming (not indexed yet).
            const qint64 streaming = s.search(QStringLiteral("Streaming")).first().conversation.id;
            const std::optional<ConversationSnapshot> withPartial = s.deleteConversation(streaming);
            QVERIFY(withPartial);
            QVERIFY(s.restoreConversation(*withPartial));
            QCOMPARE(s.recoverPartialReplies(), 1); // its reply, now indexed
            QCOMPARE(titles(s.search(QStringLiteral("secretpartialtext"))), QStringList{QStringLiteral("Streaming")});
            QCOMPARE(titles(s.search(QStringLiteral("renamed"))), QStringList{QStringLiteral("renamed title")});
            QVERIFY(s.search(QStringLiteral("Network notes")).isEmpty());
        }
        RawDb raw(path);
        QString error;
        QVERIFY2(raw.exec(QStringLiteral("INSERT INTO messages_fts (messages_fts, rank) VALUES ('integrity-check', 1)"),
                          &error),
                 qPrintable(error));
        QVERIFY2(raw.exec(QStringLiteral(
                              "INSERT INTO conversations_fts (conversations_fts, rank) VALUES ('integrity-check', 1)"),
                          &error),
                 qPrintable(error));
    }

    // ---- Search ------------------------------------------------------------------------------------------------

    void search_data() {
        QTest::addColumn<QString>("query");
        QTest::addColumn<QStringList>("expected"); // titles, best first
        const QString moe = QStringLiteral("MoE routing notes"), zh = QStringLiteral("深度学习笔记"),
                      cooking = QStringLiteral("Cooking"), net = QStringLiteral("Network notes");
        QTest::newRow("title and text beat text only") << QString("routing") << QStringList{moe, net};
        QTest::newRow("case-insensitive") << QString("ROUTING") << QStringList{moe, net};
        QTest::newRow("two terms, both required") << QString("top-k experts") << QStringList{moe};
        QTest::newRow("title only") << QString("Cooking") << QStringList{cooking};
        QTest::newRow("Chinese substring in text") << QString("混合专家") << QStringList{zh};
        QTest::newRow("Chinese in the middle of a run") << QString("专家处理") << QStringList{zh};
        QTest::newRow("Chinese title") << QString("深度学习") << QStringList{zh};
        QTest::newRow("Chinese, two characters (scan)") << QString("专家") << QStringList{zh};
        QTest::newRow("Chinese title, two characters (scan)") << QString("笔记") << QStringList{zh};
        QTest::newRow("one character (scan)") << QString("鸡") << QStringList{cooking};
        QTest::newRow("mixed scripts") << QString("Recipe 宫保鸡丁") << QStringList{cooking};
        QTest::newRow("percent sign, indexed") << QString("100%") << QStringList{cooking};
        QTest::newRow("percent sign is literal (scan)") << QString("%") << QStringList{cooking};
        QTest::newRow("underscore is literal (scan)") << QString("_") << QStringList{cooking};
        QTest::newRow("quotes are literal") << QString("\"router\"") << QStringList{};
        QTest::newRow("FTS syntax is literal") << QString("NEAR(routing") << QStringList{};
        QTest::newRow("no match") << QString("zebra") << QStringList{};
        QTest::newRow("terms in different conversations") << QString("routing 宫保") << QStringList{};
        QTest::newRow("streaming text is not searched") << QString("secretpartialtext") << QStringList{};
        QTest::newRow("empty") << QString("   ") << QStringList{};
    }

    void search() {
        QFETCH(QString, query);
        QFETCH(QStringList, expected);
        auto s = memoryStore();
        fillSearchFixture(*s);
        const QList<SearchHit> hits = s->search(query);
        QCOMPARE(titles(hits), expected);
        const QStringList terms = query.split(QLatin1Char(' '), Qt::SkipEmptyParts);
        for (const SearchHit &h : hits) {
            QVERIFY(h.messageId || !h.titleHighlights.isEmpty());
            if (h.messageId) {
                QVERIFY2(!h.snippetHighlights.isEmpty(), qPrintable(h.snippet));
                const Message m = *s->message(*h.messageId);
                QCOMPARE(m.conversationId, h.conversation.id);
            }
            // Every highlighted span is one of the terms (case aside).
            auto check = [&terms](const QString &text, const QList<TextRange> &ranges) {
                for (const TextRange &r : ranges) {
                    const QString span = text.mid(r.start, r.length);
                    if (!terms.contains(span, Qt::CaseInsensitive)) return span;
                }
                return QString();
            };
            const QString badSnippet = check(h.snippet, h.snippetHighlights);
            QVERIFY2(badSnippet.isEmpty(), qPrintable(h.snippet + QStringLiteral(" | ") + badSnippet));
            const QString badTitle = check(h.conversation.title, h.titleHighlights);
            QVERIFY2(badTitle.isEmpty(), qPrintable(h.conversation.title + QStringLiteral(" | ") + badTitle));
        }
    }

    void searchSnippet() {
        auto s = memoryStore();
        const qint64 c = *s->createConversation(QStringLiteral("long"));
        QString text;
        for (int i = 0; i < 40; ++i) text += QStringLiteral("无关的句子%1。").arg(i);
        text += QStringLiteral("这里提到了混合专家路由。");
        for (int i = 0; i < 40; ++i) text += QStringLiteral("后面的句子%1。").arg(i);
        const qint64 m = *s->addMessage(c, std::nullopt, MessageRole::Assistant, text);
        for (const QString &query : {QStringLiteral("混合专家"), QStringLiteral("路由")}) {
            const QList<SearchHit> hits = s->search(query);
            QCOMPARE(hits.size(), 1);
            const SearchHit &h = hits.first();
            QCOMPARE(h.messageId, std::optional<qint64>(m));
            QVERIFY2(h.snippet.size() < 120, qPrintable(h.snippet));
            QVERIFY2(h.snippet.startsWith(QStringLiteral("…")) && h.snippet.endsWith(QStringLiteral("…")),
                     qPrintable(h.snippet));
            QCOMPARE(h.snippetHighlights.size(), 1);
            QCOMPARE(h.snippet.mid(h.snippetHighlights[0].start, h.snippetHighlights[0].length), query);
        }
    }

    // ---- Presets ---------------------------------------------------------------------------------------------------

    void builtinPresetsSeeded() {
        auto s = memoryStore();
        const QList<Preset> p = s->presets();
        QCOMPARE(p.size(), 2);
        QCOMPARE(p[0].prefix, QStringLiteral("【技术解析模式】"));
        QCOMPARE(p[0].builtinKey, QStringLiteral("technical"));
        QVERIFY(p[0].isBuiltin());
        QVERIFY(!p[0].systemPrompt.isEmpty());
        QVERIFY(qAbs(*p[0].sampling.temperature - 0.3) < 1e-9);
        QCOMPARE(p[1].prefix, QStringLiteral("【创意写作模式】"));
        QCOMPARE(p[1].builtinKey, QStringLiteral("creative"));
        QVERIFY(qAbs(*p[1].sampling.temperature - 0.9) < 1e-9);
        QCOMPARE(p[0].position, 0);
        QCOMPARE(p[1].position, 1);
        // Built-ins are read-only.
        Preset edited = p[0];
        edited.systemPrompt = QStringLiteral("changed");
        QVERIFY(!s->updatePreset(edited));
        QVERIFY(!s->deletePreset(p[0].id));
        QCOMPARE(s->presets(), p);
    }

    void presetCrud() {
        auto s = memoryStore();
        QSignalSpy changed(s.get(), &ChatStore::presetsChanged);
        const QList<Preset> builtins = s->presets();
        Preset mine;
        mine.name = QStringLiteral("代码审查");
        mine.prefix = QStringLiteral("【代码审查】");
        mine.systemPrompt = QStringLiteral("Review the code.");
        mine.sampling.temperature = 0.2;
        mine.sampling.maxTokens = 1024;
        const qint64 id = *s->createPreset(mine);
        QCOMPARE(s->presets().size(), 3);
        Preset stored = *s->preset(id);
        QCOMPARE(stored.position, 2);
        QVERIFY(!stored.isBuiltin());
        QCOMPARE(stored.sampling, mine.sampling);
        stored.name = QStringLiteral("代码审查 v2");
        stored.sampling.topP = 0.9;
        QVERIFY(s->updatePreset(stored));
        QCOMPARE(*s->preset(id), stored);
        QVERIFY(!s->createPreset(Preset{})); // a name is required

        // Reorder: the user's preset first, built-ins after.
        QVERIFY(s->reorderPresets({id, builtins[1].id, builtins[0].id}));
        QList<qint64> order;
        for (const Preset &p : s->presets()) order.append(p.id);
        QCOMPARE(order, (QList<qint64>{id, builtins[1].id, builtins[0].id}));
        QVERIFY(!s->reorderPresets({id, builtins[0].id}));                  // one missing
        QVERIFY(!s->reorderPresets({id, id, builtins[0].id, builtins[1].id})); // duplicate
        QVERIFY(!s->reorderPresets({id, builtins[1].id, builtins[0].id, 999}));

        QVERIFY(s->deletePreset(id));
        QCOMPARE(s->presets().size(), 2);
        QVERIFY(!s->deletePreset(id));
        QVERIFY(changed.count() >= 4);
    }

    void presetExportImportRoundTrip() {
        auto s = memoryStore();
        Preset a;
        a.name = QStringLiteral("Short");
        a.prefix = QStringLiteral("【短】");
        a.systemPrompt = QStringLiteral("答案不超过三句话。\n\"Quoted\" and \\backslashes\\.");
        a.sampling.temperature = 0.1;
        a.sampling.seed = ~quint64(0);
        a.sampling.stopStrings = {QStringLiteral("\n\n")};
        Preset b;
        b.name = QStringLiteral("Plain");
        const qint64 ida = *s->createPreset(a), idb = *s->createPreset(b);
        const QByteArray json = s->exportPresets({ida, idb});
        const QJsonObject root = QJsonDocument::fromJson(json).object();
        QCOMPARE(root.value(QStringLiteral("format")).toString(), QStringLiteral("expertscope.presets"));
        QCOMPARE(root.value(QStringLiteral("version")).toInt(), kPresetFormatVersion);
        QCOMPARE(root.value(QStringLiteral("presets")).toArray().size(), 2);

        auto other = memoryStore();
        const std::optional<PresetImportResult> imported = other->importPresets(json);
        QVERIFY2(imported, qPrintable(other->lastError()));
        QCOMPARE(imported->importedIds.size(), 2);
        QCOMPARE(imported->skippedDuplicates, 0);
        const QList<Preset> got = other->presets();
        QCOMPARE(got.size(), 4);
        for (int i = 0; i < 2; ++i) {
            const Preset &want = i == 0 ? a : b;
            const Preset &have = got[2 + i];
            QCOMPARE(have.name, want.name);
            QCOMPARE(have.prefix, want.prefix);
            QCOMPARE(have.systemPrompt, want.systemPrompt);
            QCOMPARE(have.sampling, want.sampling);
            QVERIFY(!have.isBuiltin());
        }
        // Export → import of everything is stable, and importing again adds nothing.
        QCOMPARE(other->exportPresets(imported->importedIds), json);
        const std::optional<PresetImportResult> again = other->importPresets(json);
        QVERIFY(again);
        QCOMPARE(again->importedIds.size(), 0);
        QCOMPARE(again->skippedDuplicates, 2);
        // Built-ins exported from one store are duplicates of the other's.
        QCOMPARE(other->importPresets(s->exportPresets())->skippedDuplicates, 4);
    }

    void presetImportErrors_data() {
        QTest::addColumn<QByteArray>("json");
        QTest::addColumn<QString>("mentions");
        QTest::newRow("not JSON") << QByteArray("{presets") << QString("JSON");
        QTest::newRow("array") << QByteArray("[]") << QString("object");
        QTest::newRow("wrong format") << QByteArray(R"({"format":"other","version":1,"presets":[]})") << QString("format");
        QTest::newRow("newer version") << QByteArray(R"({"format":"expertscope.presets","version":2,"presets":[]})")
                                       << QString("newer");
        QTest::newRow("version not a number")
            << QByteArray(R"({"format":"expertscope.presets","version":"1","presets":[]})") << QString("version");
        QTest::newRow("no presets") << QByteArray(R"({"format":"expertscope.presets","version":1})") << QString("presets");
        QTest::newRow("missing name")
            << QByteArray(R"({"format":"expertscope.presets","version":1,"presets":[{"name":"ok"},{"prefix":"x"}]})")
            << QString("Preset 2");
        QTest::newRow("prefix not a string")
            << QByteArray(R"({"format":"expertscope.presets","version":1,"presets":[{"name":"a","prefix":3}]})")
            << QString("prefix");
        QTest::newRow("sampling not an object")
            << QByteArray(R"({"format":"expertscope.presets","version":1,"presets":[{"name":"a","sampling":[]}]})")
            << QString("sampling");
    }

    void presetImportErrors() {
        QFETCH(QByteArray, json);
        QFETCH(QString, mentions);
        auto s = memoryStore();
        QVERIFY(!s->importPresets(json));
        QVERIFY2(s->lastError().contains(mentions), qPrintable(s->lastError()));
        QCOMPARE(s->presets().size(), 2); // nothing half-imported
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
