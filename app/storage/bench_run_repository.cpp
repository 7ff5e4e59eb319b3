// BenchRunRepository: reads and writes the bench_runs table.
#include "bench_run_repository.h"

#include "store_connection.h"
#include "store_sql.h"

#include <QSqlError>

namespace es {

std::optional<qint64> BenchRunRepository::addBenchRun(const QJsonObject &json) {
    if (!m_connection.checkThread()) return std::nullopt;
    QSqlQuery q(m_connection.db());
    if (!run(q, QStringLiteral("INSERT INTO bench_runs (created_at, json) VALUES (?, ?)"),
             {m_connection.nowMs(), jsonText(json)})) {
        m_connection.fail(tr("Could not save the benchmark run"), q.lastError().text());
        return std::nullopt;
    }
    return q.lastInsertId().toLongLong();
}

QList<BenchRun> BenchRunRepository::benchRuns() const {
    QList<BenchRun> out;
    if (!m_connection.checkThread()) return out;
    QSqlQuery q(m_connection.db());
    if (!run(q, QStringLiteral(
                    "SELECT id, created_at, json FROM bench_runs ORDER BY created_at DESC, id DESC"))) {
        m_connection.fail(tr("Could not read the benchmark runs"), q.lastError().text());
        return out;
    }
    while (q.next()) out.append({q.value(0).toLongLong(), fromMs(q.value(1)), jsonObject(q.value(2))});
    return out;
}

} // namespace es
