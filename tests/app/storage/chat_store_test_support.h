// Helpers shared by the ChatStore suites (test_chat_store*.cpp): readable QCOMPARE output for
// the store's enums, raw SQLite access for setting up and inspecting files, the sample metrics,
// routing, profile and generation the suites store and compare, and an in-memory store with a
// clock that never repeats. Header-only; each suite includes it once.
#pragma once

#include "chat_store.h"

#include <QDebug>
#include <QSqlDatabase>
#include <QSqlError>
#include <QSqlQuery>
#include <QString>
#include <QStringList>

#include <memory>

// Readable QCOMPARE failures for the store's enums (found by argument-dependent lookup).
namespace es {
inline char *toString(MessageState s) { return qstrdup(qPrintable(messageStateName(s))); }
inline char *toString(MessageRole r) { return qstrdup(qPrintable(messageRoleName(r))); }
inline char *toString(OpenResult::Status s) { return qstrdup(QByteArray::number(int(s)).constData()); }
} // namespace es

namespace es_test {

using namespace es;

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

inline QStringList titles(const QList<SearchHit> &hits) {
    QStringList out;
    for (const SearchHit &h : hits) out.append(h.conversation.title);
    return out;
}

inline QStringList titles(const QList<Conversation> &list) {
    QStringList out;
    for (const Conversation &c : list) out.append(c.title);
    return out;
}

inline QList<qint64> ids(const QList<Message> &path) {
    QList<qint64> out;
    for (const Message &m : path) out.append(m.id);
    return out;
}

inline QString crashCheckpointText(int k) {
    QString text;
    for (int i = 1; i <= k; ++i) text += QStringLiteral("片段%1 chunk%1 ").arg(i);
    return text;
}

inline MessageMetrics sampleMetrics() {
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

inline QList<LayerRouting> sampleRouting() { return {{1, {3, 0, 1, 0}}, {3, {0, 2, 2, 0}}}; }

// A profile as ProfileRecorder makes one: two MoE layers (1 and 3) of a 4-layer model with four
// routed experts, top-2, one shared expert; three positions (two prompt, one reply), the first
// from the prefix cache (ids −1); weights already float16-exact.
inline MessageProfile sampleProfile() {
    MessageProfile p;
    p.ttftUs = 31250;
    p.durationUs = 95000;
    p.tokenTimesUs = {31250, 51750, 72750, 92500};
    p.nPromptTokens = 2;
    p.nCachedPromptTokens = 1;
    p.nPreemptions = 1;
    p.phases = {12.5, 40.25, 7.125, 1.5, 3.0625, 0.875};
    p.nSteps = 6;
    p.nStepsTimed = 2; // of the 6 (schema v6), the latest one's launches:
    p.timeline = {4, 3.3e12,
                  {{QStringLiteral("moe_front"), 1, 1, 0.0, 2.5, 1.5e6, 0.25},
                   {QStringLiteral("attention"), 0, 3, 2.5, 4.0, 0.0, 0.0}}};
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

inline GenerationInfo sampleGeneration() {
    GenerationInfo g;
    g.modelName = QStringLiteral("ERNIE-4.5-0.3B-PT");
    g.modelHash = QStringLiteral("sha256:0123");
    g.precision = QStringLiteral("bf16");
    g.sampling.temperature = 0.7;
    g.sampling.topK = 20;
    g.seed = quint64(0xFFFFFFFFFFFFFFF0ull); // above INT64_MAX: stored as its bit pattern
    return g;
}

// A store on a private in-memory database with a clock that advances 1 s per reading, so the
// list order never depends on two events landing in the same millisecond.
inline std::unique_ptr<ChatStore> memoryStore() {
    auto store = std::make_unique<ChatStore>();
    auto clock = std::make_shared<qint64>(1'700'000'000'000);
    store->setClockForTesting([clock] { return *clock += 1000; });
    const OpenResult r = store->open(QStringLiteral(":memory:"));
    if (r.status != OpenResult::Status::Created) qWarning() << "open failed:" << r.message;
    return store;
}

} // namespace es_test
