// Latency aggregations for the profiler: ITL from token times, percentiles, decode tok/s and
// tok/s over time, and engine time per phase from step records. Pure functions; definitions
// as in the metrics table of ARCHITECTURE.md:
//   TTFT = submit → first token; ITL = gap between consecutive tokens of one request;
//   decode tok/s = (n_out − 1) / (t_last − t_first).
#pragma once

#include "session_types.h"
#include "storage_types.h"

#include <QList>

namespace es {

// Percentile q ∈ [0, 1] of sorted values by linear interpolation between closest ranks: rank
// h = (n − 1)·q, value = x[⌊h⌋] + (h − ⌊h⌋)·(x[⌊h⌋+1] − x[⌊h⌋]) (Hyndman–Fan type 7, numpy's
// default "linear", Excel's PERCENTILE.INC). NaN for no values.
double percentileSorted(const QList<double> &sorted, double q);

struct Percentiles {
    int n = 0;
    double p50 = 0, p90 = 0, p99 = 0; // NaN when n = 0
};
Percentiles percentiles(QList<double> values);

QList<double> interTokenLatenciesMs(const QList<qint64> &tokenTimesUs); // n − 1 gaps, ms
double decodeTokensPerSecond(const QList<qint64> &tokenTimesUs);        // NaN with < 2 tokens or no time

// tok/s over time of one reply: time from the first token cut into bins of binUs; each bin's
// rate is the tokens after the first whose time falls in (start, end] divided by the bin length
// (the last bin: up to the last token, so a partial bin is not diluted). tS is the bin's end,
// seconds since the first token.
// At most kMaxRateBins bins: a longer span gets wider bins (stored times may be anything).
struct RatePoint {
    double tS = 0;
    double tokensPerSecond = 0;
};
inline constexpr qint64 kMaxRateBins = 10'000;
QList<RatePoint> throughputSeries(const QList<qint64> &tokenTimesUs, qint64 binUs);

// Engine time per phase of one step whose phases were measured (StepView::phasesTimed):
// attention; MoE routed; MoE shared; dense MLP; sampling = the LM head + the sampler; other = the
// step's duration minus those (scheduling, embedding, transfers, emit), never negative.
PhaseTimes stepPhases(const StepView &step);
// The phases of the steps whose phases were measured (the others have only a duration).
PhaseTimes sumPhases(const QList<StepView> &steps);
void accumulate(PhaseTimes &into, const PhaseTimes &add);

} // namespace es
