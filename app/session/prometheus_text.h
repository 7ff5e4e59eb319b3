// Prometheus text exposition format (version 0.0.4) parsed on the client side: what the remote
// endpoint reads from a server's GET /metrics (ExpertScope's own server, vLLM, SGLang…). Debian
// has no C++ library that parses this format (prometheus-cpp only writes it), so this is a small
// parser of the documented grammar: `# HELP` / `# TYPE` lines, other comments, and samples
// `name{label="value",…} value [timestamp]` with escaped label values and ±Inf / NaN.
// A malformed line stops nothing: it is counted and the first one is kept for the message.
#pragma once

#include <QByteArray>
#include <QHash>
#include <QList>
#include <QPair>
#include <QString>

#include <optional>

namespace es {

struct PromSample {
    QString name;                          // e.g. "vllm:num_requests_running"
    QList<QPair<QString, QString>> labels; // as written, escapes resolved
    double value = 0;
    std::optional<qint64> timestampMs;
    QString label(const QString &key) const; // empty when absent
};

struct PromExposition {
    QList<PromSample> samples;     // in the order exposed
    QHash<QString, QString> types; // family → counter | gauge | histogram | summary | untyped
    int malformedLines = 0;
    QString firstError; // "line N: what was wrong", empty when none

    bool has(const QString &name) const;
    // The sum over every sample of `name` whose labels include all of `match` (e.g. the
    // per-model series of one family). Empty when no sample matches.
    std::optional<double> sum(const QString &name, const QList<QPair<QString, QString>> &match = {}) const;
    QList<PromSample> family(const QString &name) const;
};

PromExposition parsePrometheusText(const QByteArray &text);

} // namespace es
