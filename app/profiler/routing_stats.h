// Routing aggregations for the profiler: expert load matrices (live window, one message, a whole
// conversation), per-layer balance figures, Jensen–Shannon divergence between two routing
// distributions, and the per-token × layer strip of a reply. Pure functions over value types,
// no widgets; definitions exactly as in the metrics table of ARCHITECTURE.md:
//   share = c / Σc; imbalance = max(c)/mean(c); balancedness = mean/max;
//   entropy = H(share)/ln E (natural log, so 1 means uniform); dead experts = #{c = 0}.
#pragma once

#include "session_types.h"
#include "storage_types.h"

#include <QList>
#include <QString>

namespace es {

// Expert token-slot counts c[l][e] of the MoE layers. Dense layers have no row.
struct RoutingMatrix {
    QList<int> layers;     // model layer index of each row
    int nExperts = 0;      // routed experts (shared experts see every token: not counted)
    QList<quint64> counts; // [row * nExperts + e]

    int rows() const { return int(layers.size()); }
    bool isEmpty() const { return layers.isEmpty() || nExperts <= 0; }
    QList<quint64> row(int r) const { return counts.mid(qsizetype(r) * nExperts, nExperts); }
    int rowOfLayer(int layer) const { return int(layers.indexOf(layer)); }
    quint64 total() const;
    // Adds other's counts row by row (matching layers; rows this matrix lacks are appended).
    void add(const RoutingMatrix &other);
    bool operator==(const RoutingMatrix &) const = default;

    // Both bounded by storage_types.h's limits, whatever their source says: telemetry of a shape
    // beyond them (a remote server's) gives an empty matrix; routing rows give at most
    // kMaxProfileLayers distinct rows of at most kMaxProfileExperts experts.
    static RoutingMatrix fromTelemetry(const TelemetryView &t,
                                       bool window); // window: the live sliding window
    static RoutingMatrix fromLayerRouting(const QList<LayerRouting> &routing, int nExperts);
};

// Balance of one layer's counts. Undefined figures (no tokens) are NaN.
struct LayerBalance {
    quint64 total = 0;
    double imbalance = 0;    // max(c) / mean(c), 1 = perfectly even, E = one expert takes all
    double balancedness = 0; // mean(c) / max(c), in (0, 1]
    double entropy = 0;      // H(share) / ln E, in [0, 1]
    int deadExperts = 0;     // #{c = 0}
};

QList<double> expertShares(const QList<quint64> &counts); // c / Σc; all 0 when Σc = 0
LayerBalance layerBalance(const QList<quint64> &counts);

// Jensen–Shannon divergence, natural log, of two distributions given as non-negative weights
// (normalized here): JS(P‖Q) = ½ KL(P‖M) + ½ KL(Q‖M), M = ½(P + Q), 0·ln 0 = 0. Symmetric,
// 0 for equal distributions, at most ln 2 ≈ 0.693 (disjoint supports). NaN when either is all 0
// or the sizes differ.
double jensenShannon(const QList<double> &p, const QList<double> &q);
inline constexpr double kJensenShannonMax = 0.69314718055994530942; // ln 2
// Per layer present in both (a's row order); NaN where a layer has no tokens in either.
struct LayerDivergence {
    int layer = 0;
    double js = 0;
};
QList<LayerDivergence> jensenShannonPerLayer(const RoutingMatrix &a, const RoutingMatrix &b);

// Routing counts per MoE layer from a reply's trace (positions the reply computed; prefix-cached
// positions, id −1, are not counted): what EngineSession reports as the reply's routing.
// firstPosition > 0 skips the trace's first positions (e.g. the prompt: replyRouting).
QList<LayerRouting> routingFromTrace(const QList<qint16> &ids, const QList<int> &moeLayers, int k,
                                     int nExperts, int firstPosition = 0);
// The routing counts of a reply's generated positions only (the trace after the prompt): what
// the answer itself was routed through, without the prompt (which a mode prefix changes).
QList<LayerRouting> replyRouting(const MessageProfile &profile);

// The token × MoE-layer strip of a reply: for each trace position and MoE layer, the expert with
// the largest gate weight (ties: lower id), or −1 for a prefix-cached position.
struct RoutingStrip {
    int nPositions = 0;       // prompt + generated positions in the trace
    int nPromptPositions = 0; // the first nPromptPositions are the prompt
    QList<int> layers;        // model layer of each strip row
    QList<int> top1;          // [position * layers.size() + row]
    int at(int position, int row) const { return top1[qsizetype(position) * layers.size() + row]; }
};
RoutingStrip routingStrip(const MessageProfile &profile);

// One position's choices per MoE layer, best weight first.
struct ExpertChoice {
    int expert = -1;
    float weight = 0;
};
QList<QList<ExpertChoice>> tokenRouting(const MessageProfile &profile, int position); // [row][choice]
// The router's margin at a position, per MoE layer (MessageProfile::traceMargins); NaN where it
// was not recorded. Empty when the profile has no margins at all.
QList<float> tokenMargins(const MessageProfile &profile, int position);

// The trace positions at or after firstPosition whose choices in model layer `layer` include
// `expert` (ascending). Empty for a layer without a trace row.
QList<int> positionsRoutedTo(const MessageProfile &profile, int layer, int expert, int firstPosition = 0);

// Expert co-activation in one MoE layer: how often two routed experts were chosen for the same
// token. Each position's distinct choices count once per unordered pair, so with top-k routing a
// position adds k(k−1)/2 pairs; the diagonal counts the positions that chose the expert at all.
struct CoActivation {
    int layer = -1;
    int nExperts = 0;
    quint64 positions = 0;   // positions of the trace counted (prefix-cached ones are not)
    QList<quint64> counts;   // [a * nExperts + b], symmetric
    quint64 at(int a, int b) const { return counts.value(qsizetype(a) * nExperts + b); }
    void add(const CoActivation &other); // same layer and shape; otherwise ignored
};
CoActivation coActivation(const MessageProfile &profile, int layer, int firstPosition = 0);

// The pairs chosen together most often, most first (ties: the lower ids first); lift = how much
// more often than if the two were chosen independently: P(a,b) / (P(a)·P(b)) over the positions.
struct ExpertPair {
    int a = 0, b = 0;  // a < b
    quint64 count = 0;
    double lift = 0;
};
QList<ExpertPair> topPairs(const CoActivation &c, int n);

} // namespace es
