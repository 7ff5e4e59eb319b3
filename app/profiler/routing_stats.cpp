// Routing aggregations (see routing_stats.h). Natural logarithms throughout, so the entropy is
// divided by ln E and the Jensen–Shannon divergence is bounded by ln 2.
#include "routing_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace es {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

double klTerm(double p, double m) { return p > 0 ? p * std::log(p / m) : 0.0; } // 0·ln 0 = 0
} // namespace

quint64 RoutingMatrix::total() const { return std::accumulate(counts.begin(), counts.end(), quint64(0)); }

void RoutingMatrix::add(const RoutingMatrix &other) {
    if (other.isEmpty()) return;
    if (isEmpty()) {
        *this = other;
        return;
    }
    if (other.nExperts != nExperts) return; // a different model: not addable
    for (int r = 0; r < other.rows(); ++r) {
        int mine = rowOfLayer(other.layers[r]);
        if (mine < 0) {
            layers.append(other.layers[r]);
            counts.append(QList<quint64>(nExperts, 0));
            mine = rows() - 1;
        }
        for (int e = 0; e < nExperts; ++e)
            counts[qsizetype(mine) * nExperts + e] += other.counts[qsizetype(r) * nExperts + e];
    }
}

RoutingMatrix RoutingMatrix::fromTelemetry(const TelemetryView &t, bool window) {
    RoutingMatrix m;
    const QList<quint64> &src = window ? t.expertTokensWindow : t.expertTokens;
    // A remote server's figures are outside input: a shape beyond any model's is not drawn.
    if (t.nExperts <= 0 || t.nExperts > kMaxProfileExperts || t.moeLayers.size() > kMaxProfileLayers ||
        src.size() != t.moeLayers.size() * t.nExperts)
        return m;
    m.layers = t.moeLayers;
    m.nExperts = t.nExperts;
    m.counts = src;
    return m;
}

RoutingMatrix RoutingMatrix::fromLayerRouting(const QList<LayerRouting> &routing, int nExperts) {
    RoutingMatrix m;
    if (nExperts <= 0)
        for (const LayerRouting &r : routing)
            nExperts =
                std::max(nExperts, int(std::min<qsizetype>(r.expertCounts.size(), kMaxProfileExperts)));
    // The matrix is sized rows × nExperts: both bounded (storage_types.h), whatever the caller's
    // count or the stored rows say; a layer outside the limit or listed twice is not a row.
    nExperts = std::min(nExperts, kMaxProfileExperts);
    if (nExperts <= 0) return m;
    m.nExperts = nExperts;
    for (const LayerRouting &r : routing) {
        if (r.layer < 0 || r.layer >= kMaxProfileLayers || m.layers.contains(r.layer)) continue;
        m.layers.append(r.layer);
        for (int e = 0; e < nExperts; ++e) m.counts.append(e < r.expertCounts.size() ? r.expertCounts[e] : 0);
    }
    return m;
}

QList<double> expertShares(const QList<quint64> &counts) {
    const quint64 total = std::accumulate(counts.begin(), counts.end(), quint64(0));
    QList<double> s(counts.size(), 0.0);
    if (total == 0) return s;
    for (qsizetype e = 0; e < counts.size(); ++e) s[e] = double(counts[e]) / double(total);
    return s;
}

LayerBalance layerBalance(const QList<quint64> &counts) {
    LayerBalance b;
    const qsizetype n = counts.size();
    b.total = std::accumulate(counts.begin(), counts.end(), quint64(0));
    b.deadExperts = int(std::count(counts.begin(), counts.end(), quint64(0)));
    if (n == 0 || b.total == 0) {
        b.imbalance = b.balancedness = b.entropy = kNaN;
        return b;
    }
    const double mean = double(b.total) / double(n);
    const double max = double(*std::max_element(counts.begin(), counts.end()));
    b.imbalance = max / mean;
    b.balancedness = mean / max;
    double h = 0;
    for (quint64 c : counts)
        if (c > 0) {
            const double s = double(c) / double(b.total);
            h -= s * std::log(s);
        }
    b.entropy = n > 1 ? h / std::log(double(n)) : 0.0; // one expert: nothing to spread over
    return b;
}

double jensenShannon(const QList<double> &p, const QList<double> &q) {
    if (p.size() != q.size() || p.isEmpty()) return kNaN;
    const double sp = std::accumulate(p.begin(), p.end(), 0.0);
    const double sq = std::accumulate(q.begin(), q.end(), 0.0);
    if (!(sp > 0) || !(sq > 0)) return kNaN;
    double js = 0;
    for (qsizetype i = 0; i < p.size(); ++i) {
        const double a = p[i] / sp, b = q[i] / sq, m = 0.5 * (a + b);
        js += 0.5 * klTerm(a, m) + 0.5 * klTerm(b, m);
    }
    return std::clamp(js, 0.0, kJensenShannonMax); // rounding can step a hair outside
}

QList<LayerDivergence> jensenShannonPerLayer(const RoutingMatrix &a, const RoutingMatrix &b) {
    QList<LayerDivergence> out;
    if (a.nExperts != b.nExperts) return out;
    for (int r = 0; r < a.rows(); ++r) {
        const int rb = b.rowOfLayer(a.layers[r]);
        if (rb < 0) continue;
        QList<double> p, q;
        for (quint64 c : a.row(r)) p.append(double(c));
        for (quint64 c : b.row(rb)) q.append(double(c));
        out.append({a.layers[r], jensenShannon(p, q)});
    }
    return out;
}

QList<LayerRouting> routingFromTrace(const QList<qint16> &ids, const QList<int> &moeLayers, int k,
                                     int nExperts, int firstPosition) {
    QList<LayerRouting> out;
    const int nMoe = int(moeLayers.size());
    if (nMoe <= 0 || k <= 0 || nExperts <= 0) return out;
    if (nMoe > kMaxProfileLayers || nExperts > kMaxProfileExperts) return out; // not a model's shape
    for (int m = 0; m < nMoe; ++m) out.append({moeLayers[m], QList<quint32>(nExperts, 0)});
    const qsizetype perPos = qsizetype(nMoe) * k;
    for (qsizetype i = qsizetype(std::max(0, firstPosition)) * perPos; i < ids.size(); ++i) {
        const int e = ids[i];
        if (e < 0 || e >= nExperts) continue;
        out[int((i % perPos) / k)].expertCounts[e] += 1;
    }
    return out;
}

QList<LayerRouting> replyRouting(const MessageProfile &p) {
    return routingFromTrace(p.traceIds, p.moeLayers, p.k, p.nExperts, std::min(p.nPromptTokens, p.tracePositions()));
}

RoutingStrip routingStrip(const MessageProfile &p) {
    RoutingStrip s;
    const int nMoe = int(p.moeLayers.size());
    s.layers = p.moeLayers;
    s.nPositions = p.tracePositions();
    s.nPromptPositions = std::min(p.nPromptTokens, s.nPositions);
    s.top1.resize(qsizetype(s.nPositions) * nMoe, -1);
    for (int pos = 0; pos < s.nPositions; ++pos)
        for (int m = 0; m < nMoe; ++m) {
            const qsizetype base = (qsizetype(pos) * nMoe + m) * p.k;
            int best = -1;
            float bestW = -1;
            for (int j = 0; j < p.k; ++j) {
                const int e = p.traceIds[base + j];
                const float w = base + j < p.traceWeights.size() ? p.traceWeights[base + j] : 0.f;
                if (e < 0) continue;
                if (w > bestW || (w == bestW && e < best)) {
                    best = e;
                    bestW = w;
                }
            }
            s.top1[qsizetype(pos) * nMoe + m] = best;
        }
    return s;
}

QList<QList<ExpertChoice>> tokenRouting(const MessageProfile &p, int position) {
    QList<QList<ExpertChoice>> out;
    const int nMoe = int(p.moeLayers.size());
    if (position < 0 || position >= p.tracePositions()) return out;
    for (int m = 0; m < nMoe; ++m) {
        QList<ExpertChoice> row;
        const qsizetype base = (qsizetype(position) * nMoe + m) * p.k;
        for (int j = 0; j < p.k; ++j)
            if (p.traceIds[base + j] >= 0)
                row.append({p.traceIds[base + j],
                            base + j < p.traceWeights.size() ? p.traceWeights[base + j] : 0.f});
        std::stable_sort(row.begin(), row.end(), [](const ExpertChoice &a, const ExpertChoice &b) {
            return a.weight > b.weight || (a.weight == b.weight && a.expert < b.expert);
        });
        out.append(row);
    }
    return out;
}

QList<float> tokenMargins(const MessageProfile &p, int position) {
    QList<float> out;
    const int nMoe = int(p.moeLayers.size());
    if (position < 0 || position >= p.tracePositions() ||
        p.traceMargins.size() != qsizetype(p.tracePositions()) * nMoe)
        return out;
    return p.traceMargins.mid(qsizetype(position) * nMoe, nMoe);
}

QList<int> positionsRoutedTo(const MessageProfile &p, int layer, int expert, int firstPosition) {
    QList<int> out;
    const int nMoe = int(p.moeLayers.size()), m = int(p.moeLayers.indexOf(layer));
    if (m < 0 || p.k <= 0) return out;
    for (int pos = std::max(0, firstPosition); pos < p.tracePositions(); ++pos) {
        const qsizetype base = (qsizetype(pos) * nMoe + m) * p.k;
        for (int j = 0; j < p.k; ++j)
            if (p.traceIds[base + j] == expert) {
                out.append(pos);
                break;
            }
    }
    return out;
}

void CoActivation::add(const CoActivation &o) {
    if (o.layer != layer || o.nExperts != nExperts || o.counts.size() != counts.size()) return;
    positions += o.positions;
    for (qsizetype i = 0; i < counts.size(); ++i) counts[i] += o.counts[i];
}

CoActivation coActivation(const MessageProfile &p, int layer, int firstPosition) {
    CoActivation c;
    c.layer = layer;
    const int nMoe = int(p.moeLayers.size()), m = int(p.moeLayers.indexOf(layer));
    c.nExperts = std::clamp(p.nExperts, 0, kMaxProfileExperts);
    c.counts.fill(0, qsizetype(c.nExperts) * c.nExperts);
    if (m < 0 || p.k <= 0 || c.nExperts == 0) return c;
    QList<int> chosen;
    for (int pos = std::max(0, firstPosition); pos < p.tracePositions(); ++pos) {
        const qsizetype base = (qsizetype(pos) * nMoe + m) * p.k;
        chosen.clear();
        for (int j = 0; j < p.k; ++j) {
            const int e = p.traceIds[base + j];
            if (e >= 0 && e < c.nExperts && !chosen.contains(e)) chosen.append(e);
        }
        if (chosen.isEmpty()) continue; // served by the prefix cache
        ++c.positions;
        for (qsizetype i = 0; i < chosen.size(); ++i) {
            c.counts[qsizetype(chosen[i]) * c.nExperts + chosen[i]] += 1;
            for (qsizetype j = i + 1; j < chosen.size(); ++j) {
                c.counts[qsizetype(chosen[i]) * c.nExperts + chosen[j]] += 1;
                c.counts[qsizetype(chosen[j]) * c.nExperts + chosen[i]] += 1;
            }
        }
    }
    return c;
}

QList<ExpertPair> topPairs(const CoActivation &c, int n) {
    QList<ExpertPair> pairs;
    for (int a = 0; a < c.nExperts; ++a)
        for (int b = a + 1; b < c.nExperts; ++b) {
            const quint64 ab = c.at(a, b);
            if (ab == 0) continue;
            const double pa = double(c.at(a, a)) / double(c.positions), pb = double(c.at(b, b)) / double(c.positions);
            pairs.append({a, b, ab, (double(ab) / double(c.positions)) / (pa * pb)});
        }
    std::stable_sort(pairs.begin(), pairs.end(),
                     [](const ExpertPair &x, const ExpertPair &y) { return x.count > y.count; });
    if (pairs.size() > n) pairs.resize(std::max(0, n));
    return pairs;
}

} // namespace es
