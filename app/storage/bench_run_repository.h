// BenchRunRepository: the bench_runs table, one row per benchmark run with its JSON report as
// the bench wrote it. Invariant: rows are only added, never changed.
#pragma once

#include "storage_types.h"

#include <QCoreApplication>

#include <optional>

namespace es {

class StoreConnection;

class BenchRunRepository {
    Q_DECLARE_TR_FUNCTIONS(es::ChatStore)
public:
    explicit BenchRunRepository(StoreConnection &connection) : m_connection(connection) {}

    std::optional<qint64> addBenchRun(const QJsonObject &json);
    QList<BenchRun> benchRuns() const; // newest first

private:
    StoreConnection &m_connection;
};

} // namespace es
