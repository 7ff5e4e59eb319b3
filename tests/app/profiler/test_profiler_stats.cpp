// The profiler's aggregations against values worked out by hand (the arithmetic is in the
// comments): expert shares, imbalance / balancedness / normalized entropy / dead experts,
// Jensen–Shannon divergence (natural log, ≤ ln 2), percentiles (linear between closest ranks),
// ITL, decode tok/s, tok/s over time, phase sums, memory figures, the KV block map, routing
// counts and the token strip from a trace, and the MessageProfile made from a ReplyProfile; none
// of them sized by a count or a time span as it comes.
#include "latency_stats.h"
#include "memory_series.h"
#include "profile_recorder.h"
#include "routing_stats.h"

#include <QtTest>

#include <cmath>
#include <limits>

using namespace es;

namespace {
bool near(double a, double b, double tol = 1e-9) {
    return std::abs(a - b) <= tol * std::max(1.0, std::abs(b));
}
} // namespace

#define QNEAR(a, b)                                                                                          \
    QVERIFY2(near((a), (b)), qPrintable(QStringLiteral("%1 vs %2").arg((a), 0, 'g', 17).arg((b), 0, 'g', 17)))

class TestProfilerStats : public QObject {
    Q_OBJECT
private slots:
    void shares() {
        // {2, 6, 0, 2}: Σ = 10 → 0.2, 0.6, 0, 0.2.
        const QList<double> s = expertShares({2, 6, 0, 2});
        QCOMPARE(s, (QList<double>{0.2, 0.6, 0.0, 0.2}));
        QCOMPARE(expertShares({0, 0, 0}), (QList<double>{0, 0, 0}));
        QVERIFY(expertShares({}).isEmpty());
    }

    void balance_data() {
        QTest::addColumn<QList<quint64>>("counts");
        QTest::addColumn<double>("imbalance");
        QTest::addColumn<double>("balancedness");
        QTest::addColumn<double>("entropy");
        QTest::addColumn<int>("dead");
        // mean 2.5, max 6 → 2.4 and 1/2.4; H = −(2·0.2 ln 0.2 + 0.6 ln 0.6)
        //   = 2·0.3218875825 + 0.3064953744 = 0.9502705394; / ln 4 (1.3862943611) = 0.6854752972.
        QTest::newRow("skewed, one dead")
            << QList<quint64>{2, 6, 0, 2} << 2.4 << 1.0 / 2.4 << 0.68547529722 << 1;
        QTest::newRow("even") << QList<quint64>{3, 3, 3, 3} << 1.0 << 1.0 << 1.0 << 0;
        // One expert takes all: max/mean = 5/1.25 = 4 = E; entropy 0; three dead.
        QTest::newRow("one expert takes all") << QList<quint64>{0, 5, 0, 0} << 4.0 << 0.25 << 0.0 << 3;
        // Two experts of eight, 1:1 (top-2 always the same pair): H = ln 2, / ln 8 = 1/3.
        QTest::newRow("top-2 pair of 8")
            << QList<quint64>{7, 7, 0, 0, 0, 0, 0, 0} << 4.0 << 0.25 << 1.0 / 3.0 << 6;
        // Six experts (not a power of two): {1, 2, 3, 0, 0, 0}, Σ 6, mean 1, max 3;
        //   H = −(1/6 ln 1/6 + 1/3 ln 1/3 + 1/2 ln 1/2) = 0.2986265782 + 0.3662040962 + 0.3465735903
        //     = 1.0114042647; / ln 6 (1.7917594692) = 0.5644754679.
        QTest::newRow("six experts") << QList<quint64>{1, 2, 3, 0, 0, 0} << 3.0 << 1.0 / 3.0 << 0.56447546787
                                     << 3;
    }
    void balance() {
        QFETCH(QList<quint64>, counts);
        QFETCH(double, imbalance);
        QFETCH(double, balancedness);
        QFETCH(double, entropy);
        QFETCH(int, dead);
        const LayerBalance b = layerBalance(counts);
        QNEAR(b.imbalance, imbalance);
        QNEAR(b.balancedness, balancedness);
        QVERIFY2(near(b.entropy, entropy, 1e-10), qPrintable(QString::number(b.entropy, 'g', 17)));
        QCOMPARE(b.deadExperts, dead);
    }
    void balanceUndefined() {
        const LayerBalance b = layerBalance({0, 0, 0});
        QCOMPARE(b.total, quint64(0));
        QCOMPARE(b.deadExperts, 3);
        QVERIFY(std::isnan(b.imbalance) && std::isnan(b.entropy) && std::isnan(b.balancedness));
        QCOMPARE(layerBalance({4}).entropy, 0.0); // one expert: nothing to spread over
    }

    void jensenShannon_data() {
        QTest::addColumn<QList<double>>("p");
        QTest::addColumn<QList<double>>("q");
        QTest::addColumn<double>("js");
        QTest::newRow("equal") << QList<double>{1, 2, 3} << QList<double>{2, 4, 6} << 0.0;
        QTest::newRow("disjoint = ln 2") << QList<double>{1, 0} << QList<double>{0, 1} << std::log(2.0);
        // P = (½, ½), Q = (1, 0), M = (¾, ¼):
        //   KL(P‖M) = ½ ln(⅔) + ½ ln 2 = −0.2027325541 + 0.3465735903 = 0.1438410362
        //   KL(Q‖M) = ln(4/3) = 0.2876820725;  JS = ½(0.1438410362 + 0.2876820725) = 0.2157615543.
        QTest::newRow("half vs one") << QList<double>{2, 2} << QList<double>{3, 0} << 0.21576155433;
        // Counts as they come from routing (normalized inside): (3,1,0,0) vs (0,1,3,0):
        //   P = (¾,¼,0,0), Q = (0,¼,¾,0), M = (⅜,¼,⅜,0):
        //   KL(P‖M) = ¾ ln 2 + ¼ ln 1 = 0.5198603854 = KL(Q‖M); JS = 0.5198603854.
        QTest::newRow("routing counts")
            << QList<double>{3, 1, 0, 0} << QList<double>{0, 1, 3, 0} << 0.75 * std::log(2.0);
    }
    void jensenShannon() {
        QFETCH(QList<double>, p);
        QFETCH(QList<double>, q);
        QFETCH(double, js);
        QVERIFY2(near(es::jensenShannon(p, q), js, 1e-10),
                 qPrintable(QString::number(es::jensenShannon(p, q), 'g', 17)));
        QVERIFY2(near(es::jensenShannon(q, p), js, 1e-10), "symmetric");
        QVERIFY(es::jensenShannon(p, q) <= kJensenShannonMax);
    }
    void jensenShannonUndefined() {
        QVERIFY(std::isnan(es::jensenShannon({0, 0}, {1, 0})));
        QVERIFY(std::isnan(es::jensenShannon({1}, {1, 0})));
    }
    void jensenShannonPerLayer() {
        // b lists the same layers in the other order; layer 5 exists only in a.
        RoutingMatrix a{{1, 2, 5}, 2, {1, 0, 1, 1, 4, 4}};
        RoutingMatrix b{{2, 1}, 2, {2, 2, 0, 1}};
        const QList<LayerDivergence> d = es::jensenShannonPerLayer(a, b);
        QCOMPARE(d.size(), 2);
        QCOMPARE(d[0].layer, 1);
        QNEAR(d[0].js, std::log(2.0)); // (1,0) vs (0,1)
        QCOMPARE(d[1].layer, 2);
        QCOMPARE(d[1].js, 0.0); // (1,1) vs (2,2)
    }

    void routingMatrix() {
        TelemetryView t;
        t.valid = true;
        t.moeLayers = {1, 2};
        t.nExperts = 3;
        t.expertTokens = {1, 2, 3, 4, 5, 6};
        t.expertTokensWindow = {0, 1, 0, 1, 0, 0};
        const RoutingMatrix total = RoutingMatrix::fromTelemetry(t, false);
        QCOMPARE(total.row(1), (QList<quint64>{4, 5, 6}));
        QCOMPARE(total.total(), quint64(21));
        QCOMPARE(RoutingMatrix::fromTelemetry(t, true).total(), quint64(2));
        t.expertTokensWindow = {1}; // inconsistent sizes: nothing, never out of bounds
        QVERIFY(RoutingMatrix::fromTelemetry(t, true).isEmpty());

        RoutingMatrix sum = RoutingMatrix::fromLayerRouting({{1, {1, 0, 0}}}, 3);
        sum.add(RoutingMatrix::fromLayerRouting({{2, {0, 0, 5}}, {1, {2, 2, 2}}}, 3));
        QCOMPARE(sum.layers, (QList<int>{1, 2}));
        QCOMPARE(sum.counts, (QList<quint64>{3, 2, 2, 0, 0, 5}));

        // Never sized by a count as it comes: experts and layers bounded, a layer twice or
        // outside the bound is no row; telemetry of a shape beyond any model's is not drawn.
        const RoutingMatrix huge = RoutingMatrix::fromLayerRouting(
            {{1, {1}}, {1, {7}}, {-1, {1}}, {kMaxProfileLayers, {1}}, {3, {2}}}, 1000000);
        QCOMPARE(huge.nExperts, kMaxProfileExperts);
        QCOMPARE(huge.layers, (QList<int>{1, 3}));
        QCOMPARE(huge.counts.size(), qsizetype(2) * kMaxProfileExperts);
        t.nExperts = kMaxProfileExperts + 1;
        t.expertTokens = QList<quint64>(qsizetype(2) * t.nExperts, 1);
        QVERIFY(RoutingMatrix::fromTelemetry(t, false).isEmpty());
        QVERIFY(routingFromTrace({0, 1}, {1}, 1, 1000000).isEmpty());
    }

    void routingFromTraceAndStrip() {
        // 2 MoE layers (1, 2), k = 2, 4 experts; positions: p0 prefix-cached, p1, p2.
        MessageProfile p;
        p.moeLayers = {1, 2};
        p.k = 2;
        p.nExperts = 4;
        p.nPromptTokens = 2;
        p.traceIds = {-1, -1, -1, -1, /*p1*/ 0, 1, 2, 3, /*p2*/ 2, 0, 3, 1};
        p.traceWeights = {0, 0, 0, 0, 0.3f, 0.7f, 0.5f, 0.5f, 0.1f, 0.9f, 0.25f, 0.75f};
        QCOMPARE(p.tracePositions(), 3);
        // Layer 1 counts: p1 {0,1}, p2 {2,0} → e0 2, e1 1, e2 1. Layer 2: p1 {2,3}, p2 {3,1} → e1 1, e2 1,
        // e3 2.
        const QList<LayerRouting> r = routingFromTrace(p.traceIds, p.moeLayers, p.k, p.nExperts);
        QCOMPARE(r, (QList<LayerRouting>{{1, {2, 1, 1, 0}}, {2, {0, 1, 1, 2}}}));
        const RoutingStrip s = routingStrip(p);
        QCOMPARE(s.nPositions, 3);
        QCOMPARE(s.nPromptPositions, 2);
        QCOMPARE(s.at(0, 0), -1); // prefix cache
        QCOMPARE(s.at(1, 0), 1);  // 0.7 > 0.3
        QCOMPARE(s.at(1, 1), 2);  // tie 0.5 / 0.5 → lower id
        QCOMPARE(s.at(2, 0), 0);
        QCOMPARE(s.at(2, 1), 1);
        const QList<QList<ExpertChoice>> c = tokenRouting(p, 2);
        QCOMPARE(c.size(), 2);
        QCOMPARE(c[0][0].expert, 0);
        QCOMPARE(c[0][0].weight, 0.9f);
        QCOMPARE(c[0][1].expert, 2);
        QCOMPARE(c[1][0].expert, 1);
        QVERIFY(tokenRouting(p, 0)[0].isEmpty());
        QVERIFY(tokenRouting(p, 3).isEmpty());
        // Margins: none recorded, then one per position and layer.
        QVERIFY(tokenMargins(p, 1).isEmpty());
        p.traceMargins = {NAN, NAN, 0.25f, 0.5f, 0.0f, 0.125f};
        QCOMPARE(tokenMargins(p, 2), (QList<float>{0.0f, 0.125f}));
        QVERIFY(std::isnan(tokenMargins(p, 0)[0]));
        QVERIFY(tokenMargins(p, 3).isEmpty());
        // Positions routed to an expert: layer 1 expert 0 at p1 and p2; layer 2 expert 3 at p1, p2;
        // from the reply on (position 2) only p2; a layer without a row has none.
        QCOMPARE(positionsRoutedTo(p, 1, 0), (QList<int>{1, 2}));
        QCOMPARE(positionsRoutedTo(p, 2, 3), (QList<int>{1, 2}));
        QCOMPARE(positionsRoutedTo(p, 2, 0), QList<int>{});
        QCOMPARE(positionsRoutedTo(p, 1, 0, 2), QList<int>{2});
        QCOMPARE(positionsRoutedTo(p, 0, 0), QList<int>{});
    }

    void coActivation() {
        // 1 MoE layer (3), k = 3, 5 experts; positions: p0 prefix-cached, p1 {0,1,2}, p2 {0,1,3},
        // p3 {0,1,2}, p4 {4,2,−1 (an intervention's smaller k)}.
        MessageProfile p;
        p.moeLayers = {3};
        p.k = 3;
        p.nExperts = 5;
        p.traceIds = {-1, -1, -1, 0, 1, 2, 1, 0, 3, 2, 0, 1, 4, 2, -1};
        p.traceWeights = QList<float>(p.traceIds.size(), 0.3f);
        const CoActivation c = es::coActivation(p, 3);
        QCOMPARE(c.layer, 3);
        QCOMPARE(c.nExperts, 5);
        QCOMPARE(c.positions, 4u); // p0 is not counted
        // Pairs by hand: p1 01 02 12; p2 01 03 13; p3 01 02 12; p4 24.
        // → 01: 3, 02: 2, 12: 2, 03: 1, 13: 1, 24: 1; the rest 0. Diagonal: e0 3, e1 3, e2 3, e3 1, e4 1.
        QCOMPARE(c.at(0, 1), 3u);
        QCOMPARE(c.at(1, 0), 3u);
        QCOMPARE(c.at(0, 2), 2u);
        QCOMPARE(c.at(1, 2), 2u);
        QCOMPARE(c.at(0, 3), 1u);
        QCOMPARE(c.at(1, 3), 1u);
        QCOMPARE(c.at(2, 4), 1u);
        QCOMPARE(c.at(3, 4), 0u);
        QCOMPARE(c.at(0, 4), 0u);
        QCOMPARE((QList<quint64>{c.at(0, 0), c.at(1, 1), c.at(2, 2), c.at(3, 3), c.at(4, 4)}),
                 (QList<quint64>{3, 3, 3, 1, 1}));
        // Top pairs: 01 (3), then 02 and 12 (2 each, lower ids first), 03, 13, 24.
        // lift(0,1) = (3/4) / ((3/4)(3/4)) = 4/3; lift(2,4) = (1/4) / ((3/4)(1/4)) = 4/3;
        // lift(0,3) = (1/4) / ((3/4)(1/4)) = 4/3; lift(0,2) = (2/4) / ((3/4)(3/4)) = 8/9.
        const QList<ExpertPair> top = topPairs(c, 3);
        QCOMPARE(top.size(), 3);
        QCOMPARE((QList<int>{top[0].a, top[0].b, top[1].a, top[1].b, top[2].a, top[2].b}),
                 (QList<int>{0, 1, 0, 2, 1, 2}));
        QCOMPARE(top[0].count, 3u);
        QNEAR(top[0].lift, 4.0 / 3.0);
        QNEAR(top[1].lift, 8.0 / 9.0);
        QCOMPARE(topPairs(c, 10).size(), 6);
        // From position 2 on: p2, p3, p4 → 01: 2, 02: 1.
        const CoActivation later = es::coActivation(p, 3, 2);
        QCOMPARE(later.positions, 3u);
        QCOMPARE(later.at(0, 1), 2u);
        QCOMPARE(later.at(0, 2), 1u);
        // Adding: the counts of both; another layer's is not added.
        CoActivation sum = c;
        sum.add(later);
        QCOMPARE(sum.positions, 7u);
        QCOMPARE(sum.at(0, 1), 5u);
        sum.add(es::coActivation(p, 1)); // no such layer in the trace: an empty matrix of layer 1
        QCOMPARE(sum.positions, 7u);
        QVERIFY(es::coActivation(p, 1).positions == 0);
    }

    void percentiles_data() {
        QTest::addColumn<QList<double>>("values");
        QTest::addColumn<double>("p50");
        QTest::addColumn<double>("p90");
        QTest::addColumn<double>("p99");
        // 1..10 (given shuffled): rank (n−1)q = 4.5 → 5.5; 8.1 → 9 + 0.1 = 9.1; 8.91 → 9.91.
        QTest::newRow("1..10") << QList<double>{7, 1, 10, 3, 5, 2, 9, 4, 8, 6} << 5.5 << 9.1 << 9.91;
        QTest::newRow("one value") << QList<double>{7} << 7.0 << 7.0 << 7.0;
        // {10, 20}: 0.5 → 15; 0.9 → 19; 0.99 → 19.9.
        QTest::newRow("two values") << QList<double>{20, 10} << 15.0 << 19.0 << 19.9;
        // {1, 1, 1, 100}: 1.5 → 1; 2.7 → 1 + 0.7·99 = 70.3; 2.97 → 1 + 0.97·99 = 97.03.
        QTest::newRow("one outlier") << QList<double>{1, 100, 1, 1} << 1.0 << 70.3 << 97.03;
    }
    void percentiles() {
        QFETCH(QList<double>, values);
        QFETCH(double, p50);
        QFETCH(double, p90);
        QFETCH(double, p99);
        const Percentiles p = es::percentiles(values);
        QCOMPARE(p.n, int(values.size()));
        QNEAR(p.p50, p50);
        QNEAR(p.p90, p90);
        QNEAR(p.p99, p99);
    }
    void percentilesEmpty() {
        const Percentiles p = es::percentiles({});
        QCOMPARE(p.n, 0);
        QVERIFY(std::isnan(p.p50) && std::isnan(p.p99));
    }

    void itlAndTokensPerSecond() {
        // Tokens at 0, 1, 3, 3.5 ms → gaps 1, 2, 0.5 ms; decode tok/s = 3 / 3.5 ms = 857.142857….
        const QList<qint64> t = {0, 1000, 3000, 3500};
        QCOMPARE(interTokenLatenciesMs(t), (QList<double>{1.0, 2.0, 0.5}));
        QNEAR(decodeTokensPerSecond(t), 3.0 / 0.0035);
        QVERIFY(interTokenLatenciesMs({5}).isEmpty());
        QVERIFY(std::isnan(decodeTokensPerSecond({5})));
        QVERIFY(std::isnan(decodeTokensPerSecond({5, 5})));
    }

    void throughputOverTime() {
        // First token at 0; others at 0.1, 0.2, 0.25, 0.6 s; bins of 0.25 s over a 0.6 s span:
        //   (0, 0.25]: 3 tokens → 12 tok/s; (0.25, 0.5]: 0 → 0; (0.5, 0.6]: 1 token / 0.1 s → 10.
        const QList<RatePoint> r = throughputSeries({0, 100000, 200000, 250000, 600000}, 250000);
        QCOMPARE(r.size(), 3);
        QNEAR(r[0].tS, 0.25);
        QNEAR(r[0].tokensPerSecond, 12.0);
        QNEAR(r[1].tS, 0.5);
        QCOMPARE(r[1].tokensPerSecond, 0.0);
        QNEAR(r[2].tS, 0.6);
        QNEAR(r[2].tokensPerSecond, 10.0);
        // The series integrates back to n − 1 tokens.
        QNEAR(r[0].tokensPerSecond * 0.25 + r[1].tokensPerSecond * 0.25 + r[2].tokensPerSecond * 0.1, 4.0);
        QVERIFY(throughputSeries({1}, 1000).isEmpty());
        // Times years apart (a damaged row) make at most kMaxRateBins wider bins, still counting
        // every token; times whose difference overflows make none.
        const QList<RatePoint> years = throughputSeries({0, 10, 20, 315'360'000'000'000}, 250000);
        QVERIFY(!years.isEmpty() && years.size() <= kMaxRateBins);
        QNEAR(years.last().tS, 315'360'000.0);
        QVERIFY(
            throughputSeries({std::numeric_limits<qint64>::min(), std::numeric_limits<qint64>::max()}, 250000)
                .isEmpty());
        QCOMPARE(
            interTokenLatenciesMs({std::numeric_limits<qint64>::min(), std::numeric_limits<qint64>::max()})
                .size(),
            1);
    }

    void phases() {
        StepView a;
        a.phasesTimed = true;
        a.durationMs = 10;
        a.attentionMs = 3;
        a.moeMs = 3.5;
        a.moeSharedMs = 0.5;
        a.denseMs = 1;
        a.headMs = 0.5;
        a.sampleMs = 0.7;
        // head and sampling = 0.5 + 0.7; other = 10 − (3 + 3.5 + 0.5 + 1 + 1.2) = 0.8.
        const PhaseTimes p = stepPhases(a);
        QNEAR(p.moeSharedMs, 0.5);
        QNEAR(p.denseMs, 1.0);
        QNEAR(p.samplingMs, 1.2);
        QNEAR(p.otherMs, 0.8);
        StepView b;
        b.phasesTimed = true;
        b.durationMs = 1;
        b.attentionMs = 2; // timers can overlap: other is never negative
        StepView untimed; // a step measured only as a whole (the GPU's unsampled steps)
        untimed.durationMs = 50;
        const PhaseTimes sum = sumPhases({a, b, untimed});
        QNEAR(sum.attentionMs, 5.0);
        QNEAR(sum.otherMs, 0.8);
        QNEAR(sum.totalMs(), 12.0);
    }

    // A reply whose phases were timed on a sample of its steps: the sample's phases scaled to the
    // time of all its steps, and how many were timed; all timed: -1 (every step).
    void sampledPhasesScaled() {
        ReplyProfile r;
        r.requestId = 1;
        r.tSubmitUs = 0;
        r.tFinishUs = 100;
        ReplyEngineStats st;
        st.nSteps = 8;
        st.nStepsTimed = 2;
        st.stepMs = 40;
        st.timedMs = 10;
        st.phases.attentionMs = 4;
        st.phases.moeSharedMs = 1;
        st.phases.otherMs = 5;
        st.timeline.step = 6;
        st.timeline.ops = {{QStringLiteral("attention"), 0, 3, 0, 2, 1000, 0}};
        MessageProfile p = makeMessageProfile(r, {}, st);
        QNEAR(p.phases.attentionMs, 16.0);
        QNEAR(p.phases.moeSharedMs, 4.0);
        QNEAR(p.phases.totalMs(), 40.0);
        QCOMPARE(p.nStepsTimed, 2);
        QCOMPARE(p.timeline, st.timeline);
        st.nStepsTimed = 8;
        st.timedMs = 40;
        p = makeMessageProfile(r, {}, st);
        QNEAR(p.phases.attentionMs, 4.0);
        QCOMPARE(p.nStepsTimed, -1);
    }

    void memory() {
        QNEAR(fragmentation(25, 100), 0.75);
        QCOMPARE(fragmentation(0, 0), 0.0);
        QCOMPARE(fragmentation(100, 100), 0.0);
        QNEAR(kvWaste(40, 3, 16), 1.0 - 40.0 / 48.0); // 3 blocks hold 48 slots, 40 used
        QCOMPARE(kvWaste(0, 0, 16), 0.0);
        MemoryView m;
        m.weightsBytes = 1000;
        m.kvBlockBytes = 100;
        m.kvBlocksTotal = 10;
        m.kvBlocksUsed = 3;
        m.kvBlocksCached = 5; // hashed blocks, in use or not: at least 2 are cached and free
        m.allocInUse = 50;
        m.allocReserved = 80;
        m.deviceFree = 7;
        QCOMPARE(memoryInUse(m), qint64(1000 + 300 + 50));
        const MemorySample s = memorySample(m, 1.5);
        QCOMPARE(s.kvCache, qint64(1000));
        QCOMPARE(s.kvInUse, qint64(300));
        QCOMPARE(s.workspace, qint64(80));
        QCOMPARE(s.free, qint64(7));
        const KvBlockMap map = kvBlockMap(m);
        QCOMPARE(map.used, 3);
        QCOMPARE(map.cached, 2);
        QCOMPARE(map.free, 5);
        using S = KvBlockState;
        QCOMPARE(map.cells, (QList<S>{S::Used, S::Used, S::Used, S::Cached, S::Cached, S::Free, S::Free,
                                      S::Free, S::Free, S::Free}));
        // 4 cells for 10 blocks: 3 per cell; [3, 6) holds 2 cached + 1 free → cached.
        const KvBlockMap coarse = kvBlockMap(m, 4);
        QCOMPARE(coarse.blocksPerCell, 3);
        QCOMPARE(coarse.cells, (QList<S>{S::Used, S::Cached, S::Free, S::Free}));
        // Per-block states (the local engine): exact counts, cells where the blocks lie.
        m.kvBlockStates = QByteArray::fromHex("02000102000001020202"); // 10 blocks
        const KvBlockMap exact = kvBlockMap(m);
        QCOMPARE(exact.used, 3);
        QCOMPARE(exact.cached, 2);
        QCOMPARE(exact.free, 5);
        QCOMPARE(exact.cells, (QList<S>{S::Free, S::Used, S::Cached, S::Free, S::Used, S::Used, S::Cached, S::Free,
                                        S::Free, S::Free}));
        // 3 per cell: {F,U,C} ties → used; {F,U,U} → used; {C,F,F} → free; {F} → free.
        QCOMPARE(kvBlockMap(m, 4).cells, (QList<S>{S::Used, S::Used, S::Free, S::Free}));
        // A stale state vector (wrong length) falls back to the counts.
        m.kvBlockStates.chop(1);
        QCOMPARE(kvBlockMap(m).cells, map.cells);

        // A pool mapped on demand: the band is its memory now, not its capacity; the top blocks
        // without memory are their own state in the map.
        m.kvBlockStates = QByteArray::fromHex("00010002020303030303"); // 10 blocks, 5 unmapped
        m.kvMappedBytes = 600; // (mapped in steps: a little more than its 5 blocks)
        m.kvCapacityBytes = 1000;
        const MemorySample g = memorySample(m, 2.0);
        QCOMPARE(g.kvCache, qint64(600));
        QCOMPARE(g.kvCapacity, qint64(1000));
        const KvBlockMap grown = kvBlockMap(m);
        QCOMPARE(grown.used, 2);
        QCOMPARE(grown.cached, 1);
        QCOMPARE(grown.free, 2);
        QCOMPARE(grown.unmapped, 5);
        QCOMPARE(grown.cells, (QList<S>{S::Used, S::Cached, S::Used, S::Free, S::Free, S::Unmapped, S::Unmapped,
                                        S::Unmapped, S::Unmapped, S::Unmapped}));
        // 3 per cell: {U,C,U} → used; {F,F,X} → free; {X,X,X} → unmapped; {X}.
        QCOMPARE(kvBlockMap(m, 4).cells, (QList<S>{S::Used, S::Free, S::Unmapped, S::Unmapped}));
        m.kvMappedBytes = 0; // all of it given back
        QCOMPARE(memorySample(m, 3.0).kvCache, qint64(0));
    }

    void profileFromReply() {
        ReplyProfile r;
        r.requestId = 7;
        r.tSubmitUs = 1000;
        r.tFirstTokenUs = 3000;
        r.tFinishUs = 6500;
        r.tokenTimesUs = {3000, 4000, 6000};
        r.nPromptTokens = 1;
        r.moeLayers = {1};
        r.nExperts = 4;
        r.k = 2;
        r.ids = {3, 1, 0, 3};
        r.weights = {0.7f, 0.3f, 0.6f, 0.4f};
        SessionModelInfo info;
        info.nLayers = 2;
        info.nExperts = 4;
        info.nSharedExperts = 1;
        ReplyEngineStats st;
        st.nSteps = 4;
        st.phases.moeMs = 2.5;
        st.memoryPeakBytes = 99;
        const MessageProfile p = makeMessageProfile(r, info, st);
        QCOMPARE(p.ttftUs, std::optional<qint64>(2000));
        QCOMPARE(p.tokenTimesUs, (QList<qint64>{2000, 3000, 5000})); // since submit
        QCOMPARE(p.durationUs, qint64(5500));
        QCOMPARE(p.nLayers, 2);
        QCOMPARE(p.nSharedExperts, 1);
        QCOMPARE(p.nSteps, 4);
        QCOMPARE(p.memoryPeakBytes, qint64(99));
        // float16 rounding: 0.7 → 0.7001953125, 0.3 → 0.300048828125, 0.6 → 0.60009765625, 0.4 →
        // 0.39990234375.
        QCOMPARE(p.traceWeights,
                 (QList<float>{0.7001953125f, 0.300048828125f, 0.60009765625f, 0.39990234375f}));
        QCOMPARE(p.routing, (QList<LayerRouting>{{1, {1, 1, 0, 2}}}));
    }
};

QTEST_GUILESS_MAIN(TestProfilerStats)
#include "test_profiler_stats.moc"
