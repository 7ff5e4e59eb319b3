// What a profiling report shows, gathered once from its source (a stored message, a stored
// conversation, a bench run's JSON) and then written in any format by report_writers.h. The
// figures themselves are computed by es_profiler (percentiles, shares, imbalance), never here.
// Also the JSON form of a MessageProfile, shared by the report JSON and the conversation JSON.
#pragma once

#include "storage_types.h"

#include <QDateTime>
#include <QJsonArray>
#include <QJsonObject>
#include <QList>
#include <QString>

#include <functional>
#include <optional>

namespace es {
class ChatStore;
}

namespace es::report {

// Called with (done, total) as work advances; returning false cancels. May be empty.
using ProgressFn = std::function<bool(qint64 done, qint64 total)>;

// How the figures were made: enough to reproduce the run.
struct Provenance {
    QString appVersion, appCommit; // the build that wrote the report
    QString runVersion, runCommit; // the build that measured (bench JSON); empty: same as the app
    QString backend;               // engine build / backend ("cpu", "cuda:0 NVIDIA H200")
    QString device, driver;
    QString modelName, modelHash, precision;
    QJsonObject sampling; // SamplingParams JSON of the (last) reply
    std::optional<quint64> seed;
    QString source; // where the data came from, in words
};

// One request: a stored reply, or a bench run's instrumented request.
struct ReportRequest {
    QString label;        // "message 12", "pp512 + tg128"
    qint64 messageId = 0; // 0 for a bench request
    qint64 offsetUs = 0;  // start relative to the report's first request (trace timeline)
    MessageProfile profile;
    std::optional<MessageMetrics> metrics;
};

struct ExcerptMessage {
    QString role; // "user", "assistant", "system"
    QDateTime createdAt;
    QString text; // as stored (escaped only when written)
    bool truncated = false;
};

struct BenchRow {
    QString test;
    double tokensPerSecond = 0, seconds = 0;
    std::optional<double> rooflineTokensPerSecond, mbu;
};

struct Report {
    QString kind; // "message" | "conversation" | "bench"
    QString title;
    QDateTime generatedAt;
    Provenance provenance;
    QList<ExcerptMessage> excerpt; // the conversation excerpt (the active branch, bounded)
    int excerptOmitted = 0;        // earlier messages not shown
    QList<ReportRequest> requests;
    QList<BenchRow> bench;
    QJsonObject benchMachine; // threads, bandwidth, … of a bench run, as given
};

// Builders. Each returns nullopt with *error set to a sentence naming what is missing.
std::optional<Report> messageReport(const ChatStore &store, qint64 messageId, QString *error);
std::optional<Report> conversationReport(const ChatStore &store, qint64 conversationId, QString *error,
                                         const ProgressFn &progress = {});
// `bench --json` output (format_version 2 has the instrumented request; 1 only the table).
std::optional<Report> benchReport(const QJsonObject &bench, const QString &source, QString *error);
std::optional<Report> benchRunReport(const ChatStore &store, qint64 benchRunId, QString *error);

// The summary tables, computed with es_profiler.
struct LayerSummary {
    int layer = 0;
    quint64 tokens = 0;
    double imbalance = 0, entropy = 0;
    int deadExperts = 0;
};
struct ReportSummary {
    int nRequests = 0, nOutputTokens = 0, nPromptTokens = 0, nCachedPromptTokens = 0, nSteps = 0;
    double ttftP50Ms = 0, ttftP90Ms = 0, ttftP99Ms = 0; // NaN when none
    int nItl = 0;
    double itlP50Ms = 0, itlP90Ms = 0, itlP99Ms = 0; // NaN when none
    double decodeTokS = 0;                           // over all requests' decode spans; NaN when none
    double prefixCacheHitRate = 0;                   // cached / prompt tokens; NaN with no prompt
    qint64 peakMemoryBytes = 0;
    PhaseTimes phases;
    int nStepsTimed = 0; // of nSteps, whose phases were timed (the rest scaled from them)
    QList<LayerSummary> layers;
};
ReportSummary summarize(const Report &r);

// MessageProfile ⇄ JSON (schema: docs/schemas/; exact round trip: integers stay integers, the
// float16 weights and float metrics come back bit-identical).
QJsonObject profileToJson(const MessageProfile &p);
std::optional<MessageProfile> profileFromJson(const QJsonObject &o, QString *error);
QJsonObject metricsToJson(const MessageMetrics &m);
std::optional<MessageMetrics> metricsFromJson(const QJsonObject &o, QString *error);

// Metric definitions printed in every report (name, definition).
QList<std::pair<QString, QString>> metricDefinitions();

} // namespace es::report
