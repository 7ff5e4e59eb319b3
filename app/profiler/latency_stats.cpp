// Latency aggregations (see latency_stats.h).
#include "latency_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace es {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
}

double percentileSorted(const QList<double> &x, double q) {
    if (x.isEmpty()) return kNaN;
    const double h = (double(x.size()) - 1.0) * std::clamp(q, 0.0, 1.0);
    const qsizetype lo = qsizetype(std::floor(h));
    const qsizetype hi = std::min<qsizetype>(lo + 1, x.size() - 1);
    return x[lo] + (h - double(lo)) * (x[hi] - x[lo]);
}

Percentiles percentiles(QList<double> values) {
    std::sort(values.begin(), values.end());
    return {int(values.size()), percentileSorted(values, 0.50), percentileSorted(values, 0.90),
            percentileSorted(values, 0.99)};
}

QList<double> interTokenLatenciesMs(const QList<qint64> &t) {
    QList<double> out;
    if (t.size() < 2) return out;
    out.reserve(t.size() - 1);
    // In doubles: exact for any real timestamps (< 2^53 µs), and no overflow for a damaged row's.
    for (qsizetype i = 1; i < t.size(); ++i) out.append((double(t[i]) - double(t[i - 1])) / 1000.0);
    return out;
}

double decodeTokensPerSecond(const QList<qint64> &t) {
    if (t.size() < 2 || t.last() <= t.first()) return kNaN;
    return double(t.size() - 1) / ((double(t.last()) - double(t.first())) / 1e6);
}

QList<RatePoint> throughputSeries(const QList<qint64> &t, qint64 binUs) {
    QList<RatePoint> out;
    if (t.size() < 2 || binUs <= 0) return out;
    const qint64 t0 = t.first();
    qint64 span = 0;
    if (__builtin_sub_overflow(t.last(), t0, &span)) return out; // not times of one reply
    // The bins are sized by the times, which a stored profile may hold anything in: at most
    // kMaxRateBins of them (40 minutes of decoding in the profiler's quarter seconds), wider beyond.
    if (span / binUs >= kMaxRateBins) binUs = span / kMaxRateBins + 1;
    const qint64 nBins = std::max<qint64>(1, span / binUs + (span % binUs > 0 ? 1 : 0));
    QList<int> n(nBins, 0);
    for (qsizetype i = 1; i < t.size(); ++i) {
        qint64 d = 0;
        if (__builtin_sub_overflow(t[i], t0, &d)) d = t[i] > t0 ? span : 0;
        const qint64 b = d <= 0 ? 0 : (d - 1) / binUs; // (start, end]
        ++n[std::min(b, nBins - 1)];
    }
    for (qint64 b = 0; b < nBins; ++b) {
        const qint64 end = b + 1 >= nBins ? span : (b + 1) * binUs; // the last bin ends at the last token
        const qint64 len = end - b * binUs;
        out.append({double(end) / 1e6, len > 0 ? double(n[b]) / (double(len) / 1e6) : 0.0});
    }
    return out;
}

PhaseTimes stepPhases(const StepView &s) {
    PhaseTimes p;
    p.attentionMs = s.attentionMs;
    p.moeMs = s.moeMs;
    p.moeSharedMs = s.moeSharedMs;
    p.denseMs = s.denseMs;
    p.samplingMs = s.headMs + s.sampleMs;
    p.otherMs = std::max(0.0, s.durationMs - (p.attentionMs + p.moeMs + p.moeSharedMs + p.denseMs + p.samplingMs));
    return p;
}

void accumulate(PhaseTimes &into, const PhaseTimes &add) {
    into.attentionMs += add.attentionMs;
    into.moeMs += add.moeMs;
    into.moeSharedMs += add.moeSharedMs;
    into.denseMs += add.denseMs;
    into.samplingMs += add.samplingMs;
    into.otherMs += add.otherMs;
}

PhaseTimes sumPhases(const QList<StepView> &steps) {
    PhaseTimes p;
    for (const StepView &s : steps)
        if (s.phasesTimed) accumulate(p, stepPhases(s));
    return p;
}

} // namespace es
