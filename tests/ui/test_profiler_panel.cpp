// The profiler panel's widgets (offscreen): fed telemetry and stored profiles, the charts hold
// what they should (QCPColorMap cells read back, graph and bar data, balance table, block map,
// per-layer JS divergence); the timer runs only while the panel is visible and idle ticks draw
// nothing; a stored profile with absurd counts is shown bounded by its arrays. Against the real
// engine on the tiny MoE model: a reply is followed live, and the profile stored with the message
// equals the one shown (live and after selecting it again).
#include "chat_pane.h"
#include "chat_store.h"
#include "compare_view.h"
#include "composer.h"
#include "engine_session.h"
#include "latency_stats.h"
#include "latency_view.h"
#include "main_window.h"
#include "memory_usage_view.h"
#include "message_widget.h"
#include "profile_recorder.h"
#include "profiler_panel.h"
#include "routing_view.h"

#include <QDockWidget>
#include <QSignalSpy>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QtTest>

#include <qcustomplot.h>

#include <cmath>

using namespace es;

namespace {

bool near(double a, double b, double tol = 1e-9) {
    return std::abs(a - b) <= tol * std::max(1.0, std::abs(b));
}

// Layers 1 and 2 of a 3-layer model are MoE with 4 experts (layer 0 dense).
TelemetryView sampleTelemetry() {
    TelemetryView t;
    t.valid = true;
    t.nSteps = 10;
    t.moeLayers = {1, 2};
    t.nExperts = 4;
    t.nExpertsUsed = 2;
    t.expertTokensWindow = {2, 6, 0, 2, /*layer 2*/ 1, 1, 1, 1};
    t.expertTokens = t.expertTokensWindow;
    t.windowSteps = 5;
    MemoryView &m = t.memory;
    m.weightsBytes = 1000;
    m.kvBlockBytes = 100;
    m.kvBlocksTotal = 10;
    m.kvBlocksUsed = 3;
    m.kvBlocksFree = 7;
    m.kvBlocksCached = 5;
    m.allocReserved = 80;
    m.allocInUse = 50;
    m.deviceTotal = 1 << 20;
    m.deviceFree = 4000;
    m.fragmentation = 0.25;
    m.kvWaste = 0.125;
    return t;
}

// The same profile shape ChatPane stores: 2 prompt positions + 2 generated, layers 1 and 2.
MessageProfile sampleProfile(int variant) {
    MessageProfile p;
    p.ttftUs = 4000 + variant;
    p.tokenTimesUs = {4000, 5000, 7000, 7500};
    p.durationUs = 8000;
    p.nPromptTokens = 2;
    p.phases = {1, 2, 3, 0.5, 0.25};
    p.nSteps = 5;
    p.nLayers = 3;
    p.nExperts = 4;
    p.nSharedExperts = 1;
    p.k = 2;
    p.moeLayers = {1, 2};
    if (variant == 0) {
        p.traceIds = {0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3};
        p.traceWeights = {0.75f, 0.25f, 0.5f, 0.5f, 0.25f, 0.75f, 0.5f, 0.5f, 0.625f, 0.375f, 0.875f, 0.125f};
    } else if (variant == 1) {
        p.traceIds = {2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1};
        p.traceWeights = QList<float>(12, 0.5f);
    } else { // the prompt routed like variant 1, the reply (position 2) like variant 0
        p.traceIds = {2, 3, 0, 1, 2, 3, 0, 1, 0, 1, 2, 3};
        p.traceWeights = QList<float>(12, 0.5f);
    }
    p.routing = routingFromTrace(p.traceIds, p.moeLayers, p.k, p.nExperts);
    return p;
}

double cell(QCPColorMap *map, int x, int y) { return map->data()->cell(x, y); }

} // namespace

class TestProfilerPanel : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void cleanup();
    void heatmapAndBalanceFromTelemetry();
    void memoryChartsFromTelemetry();
    void timerOnlyWhileVisibleAndIdleTicksDrawNothing();
    void selectedMessageLatencyAndStrip();
    void compareShowsPerLayerDivergence();
    void hostileStoredProfileIsBounded();
    void storedProfileEqualsLive();
    void concurrentRepliesShareSteps();

private:
    std::unique_ptr<ProfilerPanel> makePanel();
    QTemporaryDir m_home;
    std::unique_ptr<ChatStore> m_store;
    std::unique_ptr<EngineSession> m_session;
    std::unique_ptr<MainWindow> m_window;
    std::unique_ptr<ProfilerPanel> m_panel;
};

void TestProfilerPanel::initTestCase() {
    qputenv("HOME", m_home.path().toUtf8());
    QCoreApplication::setOrganizationName("ExpertScopeTests");
    QCoreApplication::setApplicationName("test_profiler_panel");
}

void TestProfilerPanel::cleanup() {
    m_panel.reset();
    m_window.reset();
    m_session.reset();
    m_store.reset();
}

std::unique_ptr<ProfilerPanel> TestProfilerPanel::makePanel() {
    m_store = std::make_unique<ChatStore>();
    if (!m_store->open(":memory:").ok()) return nullptr;
    m_session =
        std::make_unique<EngineSession>(EngineSessionOptions{.backend = "cpu"}); // no model: fed data only
    auto panel = std::make_unique<ProfilerPanel>(m_store.get(), m_session.get());
    panel->resize(520, 800);
    return panel;
}

void TestProfilerPanel::heatmapAndBalanceFromTelemetry() {
    m_panel = makePanel();
    QVERIFY(m_panel);
    m_panel->feedTelemetry(sampleTelemetry());
    m_panel->show();
    QVERIFY(QTest::qWaitForWindowExposed(m_panel.get()));
    m_panel->setCurrentTab(ProfilerPanel::Tab::Routing);
    m_panel->refresh();
    RoutingView *r = m_panel->routingView();
    QCOMPARE(r->source(), RoutingView::Source::LiveWindow);
    QCPColorMap *map = r->heatmap();
    QCOMPARE(map->data()->keySize(), 4);   // experts (no shared experts known without a model)
    QCOMPARE(map->data()->valueSize(), 3); // layers 0..2
    // Layer 1: counts {2, 6, 0, 2} → shares 0.2, 0.6, 0, 0.2. Layer 2 even: 0.25 each.
    QVERIFY(near(cell(map, 0, 1), 0.2));
    QVERIFY(near(cell(map, 1, 1), 0.6));
    QCOMPARE(cell(map, 2, 1), 0.0);
    for (int e = 0; e < 4; ++e) QVERIFY(near(cell(map, e, 2), 0.25));
    for (int e = 0; e < 4; ++e) QVERIFY(std::isnan(cell(map, e, 0))); // dense layer
    QVERIFY(r->caption().contains(QLatin1String("5 steps")));
    // Balance beside it: imbalance 6/2.5 = 2.40, entropy 0.685, 1 dead; layer 0 dense.
    QTableWidget *table = r->balanceTable();
    QCOMPARE(table->rowCount(), 3);
    QCOMPARE(table->item(0, 0)->text(), QStringLiteral("dense"));
    QCOMPARE(table->item(1, 0)->text(), QStringLiteral("2.40"));
    QCOMPARE(table->item(1, 1)->text(), QStringLiteral("0.685"));
    QCOMPARE(table->item(1, 2)->text(), QStringLiteral("1"));
    QCOMPARE(table->item(2, 0)->text(), QStringLiteral("1.00"));
    QCOMPARE(table->item(2, 1)->text(), QStringLiteral("1.000"));
    QVERIFY(!r->heatmapPlot()->toolTip().isEmpty());
    QVERIFY(r->heatmapPlot()->toolTip().contains(QStringLiteral("share = c / Σc")));

    // New counts are written into the same cells (the map is not rebuilt).
    TelemetryView t = sampleTelemetry();
    t.nSteps = 11;
    t.expertTokensWindow = {0, 0, 0, 4, 4, 0, 0, 0};
    QCPColorMapData *before = map->data();
    m_panel->feedTelemetry(t);
    m_panel->refresh();
    QCOMPARE(map->data(), before);
    QCOMPARE(cell(map, 3, 1), 1.0);
    QCOMPARE(cell(map, 0, 2), 1.0);
    QCOMPARE(table->item(1, 2)->text(), QStringLiteral("3"));
    QCOMPARE(table->item(1, 0)->text(), QStringLiteral("4.00"));
}

void TestProfilerPanel::memoryChartsFromTelemetry() {
    m_panel = makePanel();
    QVERIFY(m_panel);
    m_panel->feedTelemetry(sampleTelemetry());
    m_panel->setCurrentTab(ProfilerPanel::Tab::Memory);
    m_panel->show();
    QVERIFY(QTest::qWaitForWindowExposed(m_panel.get()));
    m_panel->refresh();
    MemoryUsageView *m = m_panel->memoryView();
    // One sample per quarter second at most.
    QTRY_VERIFY(m->stackGraph(0)->data()->size() >= 2);
    const auto first = m->stackGraph(0)->data()->constBegin();
    QCOMPARE(first->value, 1000.0);                                   // weights
    QCOMPARE(m->stackGraph(1)->data()->constBegin()->value, 2000.0);  // + KV pool (10 × 100)
    QCOMPARE(m->stackGraph(2)->data()->constBegin()->value, 2080.0);  // + workspace reserved
    QCOMPARE(m->stackGraph(3)->data()->constBegin()->value, 2080.0);  // + other: no device parts (CPU)
    QCOMPARE(m->stackGraph(4)->data()->constBegin()->value, 6080.0);  // + device free
    QCOMPARE(m->kvInUseGraph()->data()->constBegin()->value, 1300.0); // weights + 3 blocks in use
    QCOMPARE(m->fragmentationGraph()->data()->constBegin()->value, 0.25);
    QCOMPARE(m->kvWasteGraph()->data()->constBegin()->value, 0.125);
    // Block map: 3 used, 5 − 3 = 2 cached (free with a prefix), 5 free.
    QCPColorMap *blocks = m->blockMap();
    QCOMPARE(blocks->data()->keySize(), 10);
    const double expected[10] = {0, 0, 0, 1, 1, 2, 2, 2, 2, 2};
    for (int i = 0; i < 10; ++i) QCOMPARE(blocks->data()->cell(i, 0), expected[i]);
    QVERIFY(m->summary().contains(QLatin1String("3 used / 2 cached / 5 free")));
    QVERIFY(m->summary().contains(QLatin1String("fragmentation 0.250")));

    // A device's figures with the backend's allocations named: what the device holds beyond
    // weights, KV pool and workspace is its own band ("other"), and each part is listed.
    TelemetryView gpu = sampleTelemetry();
    gpu.memory.deviceTotal = 10000;
    gpu.memory.deviceFree = 6000; // 4000 in use: 1000 + 1000 + 80 ours, 1920 other
    gpu.memory.deviceParts = {{QStringLiteral("weights"), 1000},
                              {QStringLiteral("KV pool"), 1000},
                              {QStringLiteral("workspace"), 80},
                              {QStringLiteral("cuBLASLt workspace"), 512}};
    m->clear();
    m->addSample(gpu.memory, 1.0);
    QCOMPARE(m->stackGraph(3)->data()->constBegin()->value, 4000.0); // + other = total − free
    QCOMPARE(m->stackGraph(4)->data()->constBegin()->value, 10000.0); // + free = the device
    QVERIFY2(m->summary().contains(QLatin1String("cuBLASLt workspace")), qPrintable(m->summary()));

    // A pool mapped on demand growing, then given back: the KV band follows its memory, "other"
    // stays what it is, the block map shows the top without memory and the summary the capacity.
    TelemetryView grow = gpu;
    grow.memory.kvCapacityBytes = 1000;
    grow.memory.kvBlockStates = QByteArray::fromHex("00000001020202030303");
    const double kv[3] = {300, 700, 0};
    m->clear();
    for (int i = 0; i < 3; ++i) {
        grow.memory.kvMappedBytes = qint64(kv[i]);
        grow.memory.deviceParts[1].second = qint64(kv[i]);
        grow.memory.deviceFree = 6000 + 1000 - qint64(kv[i]);
        grow.memory.kvNote = QStringLiteral("mapped on demand");
        m->addSample(grow.memory, 1.0 + i);
    }
    auto at = [&](int graph, int i) { return (m->stackGraph(graph)->data()->constBegin() + i)->value; };
    for (int i = 0; i < 3; ++i) {
        QCOMPARE(at(1, i) - at(0, i), kv[i]);            // the KV band: the pool's memory now
        QCOMPARE(at(3, i) - at(2, i), 1920.0);           // "other" unchanged
        QCOMPARE(at(4, i), 10000.0);                     // the device
    }
    QCOMPARE(blocks->data()->cell(9, 0), 3.0); // no memory
    QVERIFY2(m->summary().contains(QLatin1String("of a 1000 B pool")), qPrintable(m->summary()));
    QVERIFY2(m->summary().contains(QLatin1String("KV pool: mapped on demand")), qPrintable(m->summary()));
}

void TestProfilerPanel::timerOnlyWhileVisibleAndIdleTicksDrawNothing() {
    m_panel = makePanel();
    QVERIFY(m_panel);
    m_panel->feedTelemetry(sampleTelemetry());
    QVERIFY(!m_panel->isRefreshing()); // never shown
    m_panel->show();
    QVERIFY(QTest::qWaitForWindowExposed(m_panel.get()));
    QVERIFY(m_panel->isRefreshing());
    QVERIFY(m_panel->refreshIntervalMs() >= 33 && m_panel->refreshIntervalMs() <= 100); // 10–30 Hz
    m_panel->refresh();
    m_panel->setCurrentTab(ProfilerPanel::Tab::Routing);
    m_panel->refresh();
    const int drawn = m_panel->refreshCount();
    for (int i = 0; i < 5; ++i) m_panel->refresh(); // same telemetry, nothing selected: no drawing
    QCOMPARE(m_panel->refreshCount(), drawn);
    m_panel->hide();
    QVERIFY(!m_panel->isRefreshing());
}

void TestProfilerPanel::selectedMessageLatencyAndStrip() {
    m_panel = makePanel();
    QVERIFY(m_panel);
    const qint64 c = *m_store->createConversation("profiled");
    const qint64 u = *m_store->addMessage(c, std::nullopt, MessageRole::User, "【技术解析模式】q");
    const qint64 a = *m_store->beginPartialReply(c, u, {});
    MessageMetrics mm;
    mm.ttftMs = 4.0;
    QVERIFY(m_store->finishReply(a, "answer", "stop", mm, {}, sampleProfile(0)));
    m_panel->setConversationProvider([c]() -> std::optional<qint64> { return c; });
    m_panel->show();
    QVERIFY(QTest::qWaitForWindowExposed(m_panel.get()));
    m_panel->selectMessage(a);
    QCOMPARE(m_panel->shownProfile(), sampleProfile(0));

    m_panel->setCurrentTab(ProfilerPanel::Tab::Latency);
    m_panel->refresh();
    LatencyView *l = m_panel->latencyView();
    // Tokens at 4, 5, 7, 7.5 ms → ITL 1, 2, 0.5 ms at tokens 2..4.
    QCOMPARE(l->itlGraph()->data()->size(), 3);
    auto it = l->itlGraph()->data()->constBegin();
    QCOMPARE(it->key, 2.0);
    QCOMPARE(it->value, 1.0);
    ++it;
    QCOMPARE(it->value, 2.0);
    ++it;
    QCOMPARE(it->value, 0.5);
    // p50 of {0.5, 1, 2} = 1; p90: rank 1.8 → 1 + 0.8 = 1.8; p99: 1.98.
    QVERIFY(near(l->itlPercentiles().p50, 1.0));
    QVERIFY(near(l->itlPercentiles().p90, 1.8));
    QVERIFY(near(l->itlPercentiles().p99, 1.98));
    // attention, MoE routed, MoE shared, dense, head and sampling, other.
    QCOMPARE(l->phaseBars()->data()->size(), 6);
    QCOMPARE(l->phaseBars()->data()->at(3)->value, 3.0); // dense
    QCOMPARE(l->phaseBars()->data()->at(2)->value, 0.0); // MoE shared: not in a profile from before v6
    QCOMPARE(l->ttftBars()->data()->size() + 0, 0);      // the selected reply is the highlighted bar
    QVERIFY(l->rateGraph()->data()->size() >= 2);
    QVERIFY(l->summary().contains(QLatin1String("TTFT 4.0 ms")));

    m_panel->setCurrentTab(ProfilerPanel::Tab::Routing);
    RoutingView *r = m_panel->routingView();
    r->setSource(RoutingView::Source::SelectedMessage);
    m_panel->refresh();
    // Heatmap of the message: 4 routed experts + 1 shared column (grey), layer 0 dense.
    QCOMPARE(r->heatmap()->data()->keySize(), 5);
    QVERIFY(std::isnan(cell(r->heatmap(), 4, 1)));
    // Layer 1 ids over 3 positions: {0,1},{0,1},{0,1} → shares 0.5, 0.5.
    QVERIFY(near(cell(r->heatmap(), 0, 1), 0.5));
    QVERIFY(near(cell(r->heatmap(), 1, 1), 0.5));
    // Strip: top-1 per position and layer (position 1, layer 1: weights 0.25/0.75 → expert 1).
    QCOMPARE(r->stripPositions(), 3);
    QCOMPARE(cell(r->strip(), 0, 0), 0.0);
    QCOMPARE(cell(r->strip(), 1, 0), 1.0);
    QCOMPARE(cell(r->strip(), 1, 1), 2.0); // tie 0.5/0.5 → lower id
    const QString hover = r->tokenDetails(2);
    QVERIFY2(hover.contains(QStringLiteral("L1: e0 0.625 · e1 0.375")), qPrintable(hover));
    QVERIFY2(hover.contains(QStringLiteral("L2: e2 0.875 · e3 0.125")), qPrintable(hover));
    QVERIFY(hover.startsWith(QLatin1String("Reply token 1")));
}

void TestProfilerPanel::compareShowsPerLayerDivergence() {
    m_panel = makePanel();
    QVERIFY(m_panel);
    const qint64 c = *m_store->createConversation("compare");
    const qint64 u1 =
        *m_store->addMessage(c, std::nullopt, MessageRole::User, "【技术解析模式】same question");
    const qint64 a1 = *m_store->beginPartialReply(c, u1, {});
    QVERIFY(m_store->finishReply(a1, "x", "stop", {}, {}, sampleProfile(0)));
    const qint64 u2 = *m_store->addMessage(c, a1, MessageRole::User, "【创意写作模式】same question");
    const qint64 a2 = *m_store->beginPartialReply(c, u2, {});
    QVERIFY(m_store->finishReply(a2, "y", "stop", {}, {}, sampleProfile(1)));
    m_panel->setCurrentTab(ProfilerPanel::Tab::Compare);
    m_panel->show();
    QVERIFY(QTest::qWaitForWindowExposed(m_panel.get()));
    m_panel->refresh();
    // Until the user picks, A and B are the latest two replies.
    QCOMPARE(m_panel->compareA(), std::optional<qint64>(a1));
    QCOMPARE(m_panel->compareB(), std::optional<qint64>(a2));
    // Layer 1: A uses experts {0,1} evenly, B {2,3} evenly → disjoint, ln 2. Layer 2: A {2,3},
    // B {0,1} → ln 2 as well.
    CompareView *cv = m_panel->compareView();
    QCOMPARE(cv->divergences().size(), 2);
    for (const LayerDivergence &d : cv->divergences()) QVERIFY(near(d.js, std::log(2.0)));
    QCOMPARE(cv->divergenceBars()->data()->size(), 2);
    QVERIFY(near(cv->divergenceBars()->data()->at(0)->value, std::log(2.0)));
    QVERIFY(near(cell(cv->heatmapA(), 0, 1), 0.5));
    QVERIFY(near(cell(cv->heatmapB(), 2, 1), 0.5));
    QVERIFY(cv->summary().contains(QLatin1String("100.0% of ln 2")));
    // Comparing a message with itself: 0 everywhere.
    m_panel->setCompareMessages(a1, a1);
    for (const LayerDivergence &d : cv->divergences()) QCOMPARE(d.js, 0.0);

    // "Reply tokens only": a3's prompt was routed like a2's, its reply like a1's.
    const qint64 u3 = *m_store->addMessage(c, a2, MessageRole::User, "third");
    const qint64 a3 = *m_store->beginPartialReply(c, u3, {});
    QVERIFY(m_store->finishReply(a3, "z", "stop", {}, {}, sampleProfile(2)));
    QCOMPARE(replyRouting(sampleProfile(2)), replyRouting(sampleProfile(0)));
    QCOMPARE(replyRouting(sampleProfile(0)).at(0).expertCounts, (QList<quint32>{1, 1, 0, 0}));
    m_panel->setCompareMessages(a1, a3);
    for (const LayerDivergence &d : cv->divergences()) QVERIFY(d.js > 0.1);
    QVERIFY(cv->summary().contains(QLatin1String("prompt and reply")));
    cv->setReplyTokensOnly(true);
    QCOMPARE(cv->divergences().size(), 2);
    for (const LayerDivergence &d : cv->divergences()) QVERIFY(near(d.js, 0.0));
    QVERIFY(cv->summary().contains(QLatin1String("reply tokens only")));
    QVERIFY(near(cell(cv->heatmapB(), 0, 1), 0.5)); // a3's reply: experts {0, 1} in layer 1
    cv->setReplyTokensOnly(false);
    for (const LayerDivergence &d : cv->divergences()) QVERIFY(d.js > 0.1);
}

// A stored profile that claims a million layers, experts and shared experts and a top-k of a
// million, with MoE layers outside any model and token times ten years apart (an older build's
// row, or a hand edit): every page shows it bounded by what is there and by the limits, at once.
void TestProfilerPanel::hostileStoredProfileIsBounded() {
    m_panel = makePanel();
    QVERIFY(m_panel);
    const qint64 c = *m_store->createConversation("hostile");
    const qint64 u = *m_store->addMessage(c, std::nullopt, MessageRole::User, "q");
    const qint64 a = *m_store->beginPartialReply(c, u, {});
    MessageProfile p = sampleProfile(0);
    p.nLayers = p.nExperts = p.nSharedExperts = p.k = 1000000;
    p.moeLayers = {1, 2, 5000, -1};
    p.tokenTimesUs = {4000, 5000, 315'360'000'000'000};
    QVERIFY(m_store->finishReply(a, "answer", "stop", {}, {}, p)); // the store keeps what it is given
    QCOMPARE(m_store->profile(a)->nExperts, 1000000);
    m_panel->setConversationProvider([c]() -> std::optional<qint64> { return c; });
    m_panel->show();
    QVERIFY(QTest::qWaitForWindowExposed(m_panel.get()));
    m_panel->selectMessage(a);
    const MessageProfile shown = m_panel->shownProfile();
    QCOMPARE(shown.nExperts, 4); // the routing rows' length
    QCOMPARE(shown.nLayers, kMaxProfileLayers);
    QCOMPARE(shown.nSharedExperts, kMaxProfileExperts);
    QCOMPARE(shown.moeLayers, (QList<int>{1, 2}));
    QVERIFY(shown.traceIds.isEmpty()); // recorded with k = 2, it does not fit the claimed k

    m_panel->setCurrentTab(ProfilerPanel::Tab::Routing);
    RoutingView *r = m_panel->routingView();
    r->setSource(RoutingView::Source::SelectedMessage);
    m_panel->refresh();
    QCOMPARE(r->heatmap()->data()->keySize(), 4 + kMaxProfileExperts);
    QCOMPARE(r->heatmap()->data()->valueSize(), kMaxProfileLayers);
    QCOMPARE(r->balanceTable()->rowCount(), kMaxProfileLayers);
    QVERIFY(near(cell(r->heatmap(), 0, 1), 0.5)); // layer 1: experts {0, 1}, as stored
    QCOMPARE(r->stripPositions(), 0);
    r->setSource(RoutingView::Source::Conversation); // the stored routing rows (no model loaded)
    m_panel->refresh();
    QCOMPARE(r->heatmap()->data()->keySize(), 4);
    QCOMPARE(r->heatmap()->data()->valueSize(), 3);
    QVERIFY(near(cell(r->heatmap(), 0, 1), 0.5));

    m_panel->setCurrentTab(ProfilerPanel::Tab::Latency);
    m_panel->refresh();
    LatencyView *l = m_panel->latencyView();
    QCOMPARE(l->itlGraph()->data()->size(), 2);
    QVERIFY(l->rateGraph()->data()->size() <= kMaxRateBins + 1); // ten years of quarter seconds: no

    m_panel->setCompareMessages(a, a);
    m_panel->setCurrentTab(ProfilerPanel::Tab::Compare);
    m_panel->refresh();
    CompareView *cv = m_panel->compareView();
    QVERIFY(cv->heatmapA()->data()->keySize() <= 4 + kMaxProfileExperts);
    QCOMPARE(cv->heatmapA()->data()->valueSize(), kMaxProfileLayers);
    QCOMPARE(cv->divergences().size(), 2);
}

// Two replies computed together: every shared step is apportioned by tokens, so their phase
// times add up to the engine's time for those steps (whole-step attribution would count each
// shared step twice), and each reply counts exactly the steps that computed it.
void TestProfilerPanel::concurrentRepliesShareSteps() {
    m_session = std::make_unique<EngineSession>(EngineSessionOptions{.backend = "cpu", .defaultMaxTokens = 24});
    QSignalSpy loaded(m_session.get(), &EngineSession::modelLoaded);
    m_session->loadModel(QStringLiteral(ES_TEST_DATA_DIR) + "/moe-shared");
    QVERIFY(loaded.wait(30000));
    ProfileRecorder *rec = ProfileRecorder::forSession(m_session.get());
    QSignalSpy recorded(rec, &ProfileRecorder::replyRecorded);
    auto request = [](const QString &text) {
        ChatRequest r;
        r.messages = {{MessageRole::User, text}};
        r.sampling.temperature = 0.0;
        r.sampling.maxTokens = 24;
        return r;
    };
    const quint64 a = m_session->submit(request(QStringLiteral("first question, rather long so prefill takes a while")));
    const quint64 b = m_session->submit(request(QStringLiteral("second")));
    QTRY_COMPARE_WITH_TIMEOUT(recorded.count(), 2, 60000);
    const std::optional<MessageProfile> pa = rec->takeProfile(a), pb = rec->takeProfile(b);
    QVERIFY(pa && pb);
    // The telemetry ring still holds every step of both (a few dozen steps).
    const TelemetryView t = m_session->telemetry();
    double engineMs = 0;
    int stepsA = 0, stepsB = 0, shared = 0;
    for (const StepView &s : t.steps) {
        const bool inA = s.seqIds.contains(a), inB = s.seqIds.contains(b);
        if (!inA && !inB) continue;
        QCOMPARE(s.seqIds.size(), s.seqTokens.size());
        engineMs += stepPhases(s).totalMs();
        stepsA += inA;
        stepsB += inB;
        shared += inA && inB;
    }
    QVERIFY2(shared > 0, "the two replies never shared a step");
    QCOMPARE(pa->nSteps, stepsA);
    QCOMPARE(pb->nSteps, stepsB);
    QCOMPARE(pa->nStepsMissed + pb->nStepsMissed, 0);
    const double sum = pa->phases.totalMs() + pb->phases.totalMs();
    QVERIFY2(std::abs(sum - engineMs) <= 1e-6 * std::max(1.0, engineMs),
             qPrintable(QString("replies %1 ms, engine %2 ms").arg(sum).arg(engineMs)));
}

void TestProfilerPanel::storedProfileEqualsLive() {
    m_store = std::make_unique<ChatStore>();
    QVERIFY(m_store->open(":memory:").ok());
    m_session =
        std::make_unique<EngineSession>(EngineSessionOptions{.backend = "cpu", .defaultMaxTokens = 200});
    QSignalSpy loaded(m_session.get(), &EngineSession::modelLoaded);
    m_session->loadModel(QStringLiteral(ES_TEST_DATA_DIR) + "/moe-shared");
    QVERIFY(loaded.wait(30000));
    m_window = std::make_unique<MainWindow>(m_store.get(), m_session.get());
    m_window->show();
    QVERIFY(QTest::qWaitForWindowExposed(m_window.get()));
    ProfilerPanel *panel = m_window->profilerPanel();
    QVERIFY(panel);
    QVERIFY(m_window->profilerDock()->isVisible());
    QVERIFY(panel->isRefreshing());
    panel->setCurrentTab(ProfilerPanel::Tab::Latency);

    ChatPane *pane = m_window->currentPane();
    QSignalSpy finished(m_session.get(), &EngineSession::replyFinished);
    QSignalSpy tokens(m_session.get(), &EngineSession::tokensGenerated);
    pane->send(QStringLiteral("【技术解析模式】What does a router do?"));
    QVERIFY(tokens.wait(10000));
    // While streaming, the panel follows the reply (live profile from the recorder).
    QTRY_VERIFY_WITH_TIMEOUT(panel->showsLiveReply() || finished.count() > 0, 5000);
    MessageProfile live;
    if (finished.count() == 0) {
        QTRY_VERIFY_WITH_TIMEOUT(!panel->shownProfile().tokenTimesUs.isEmpty() || finished.count() > 0, 5000);
        live = panel->shownProfile();
    }
    QVERIFY(finished.count() > 0 || finished.wait(60000));
    QTRY_VERIFY(!pane->isGenerating());

    const qint64 conv = *pane->conversationId();
    const Message reply = m_store->activePath(conv).last();
    QCOMPARE(reply.role, MessageRole::Assistant);
    const std::optional<MessageProfile> stored = m_store->profile(reply.id);
    QVERIFY2(stored, qPrintable(m_store->lastError()));
    // What the panel shows after the reply ended is exactly what was stored.
    QTRY_VERIFY(!panel->showsLiveReply());
    QCOMPARE(panel->shownProfile(), *stored);
    // …and what it showed while streaming was a prefix of it.
    qInfo("live view had %d of %d tokens", int(live.tokenTimesUs.size()), int(stored->tokenTimesUs.size()));
    if (!live.tokenTimesUs.isEmpty()) {
        QVERIFY(live.tokenTimesUs.size() <= stored->tokenTimesUs.size());
        QCOMPARE(live.tokenTimesUs, stored->tokenTimesUs.mid(0, live.tokenTimesUs.size()));
        QCOMPARE(live.traceIds, stored->traceIds.mid(0, live.traceIds.size()));
        QCOMPARE(live.ttftUs, stored->ttftUs);
    }
    // The stored profile agrees with the reply's metrics and the engine's counts.
    const MessageMetrics mm = *m_store->metrics(reply.id);
    QCOMPARE(stored->tokenTimesUs.size(), qsizetype(*mm.nOutputTokens));
    QVERIFY(std::abs(*stored->ttftUs / 1000.0 - *mm.ttftMs) < 1e-3);
    QCOMPARE(stored->routing, m_store->routing(reply.id));
    QCOMPARE(stored->moeLayers, (QList<int>{1, 2}));
    QCOMPARE(stored->nLayers, 3);
    QCOMPARE(stored->nSharedExperts, 1);
    QVERIFY(stored->nSteps > 0);
    QVERIFY(stored->phases.totalMs() > 0);
    QVERIFY(stored->memoryPeakBytes > 0);
    QCOMPARE(mm.peakMemoryBytes, std::optional<qint64>(stored->memoryPeakBytes));
    quint64 nSlots = 0;
    for (const LayerRouting &r : stored->routing)
        for (quint32 c : r.expertCounts) nSlots += c;
    QCOMPARE(nSlots, quint64(stored->tracePositions()) * 2 * 2); // every position, 2 layers, top-2

    // The latency chart holds exactly the stored gaps.
    panel->refresh();
    LatencyView *l = panel->latencyView();
    const QList<double> itl = interTokenLatenciesMs(stored->tokenTimesUs);
    QCOMPARE(l->itlGraph()->data()->size(), int(itl.size()));
    int i = 0;
    for (auto it = l->itlGraph()->data()->constBegin(); it != l->itlGraph()->data()->constEnd(); ++it, ++i)
        QCOMPARE(it->value, itl[i]);

    // Selecting the message (a click on its header) shows the stored profile again.
    MessageWidget *w = nullptr;
    QTRY_VERIFY(!pane->messageWidgets().isEmpty());
    for (MessageWidget *m : pane->messageWidgets())
        if (m->messageId() == reply.id) w = m;
    QVERIFY(w);
    QTRY_VERIFY(w->isVisible());
    QSignalSpy selected(pane, &ChatPane::messageSelected);
    QTest::mouseClick(w, Qt::LeftButton, {}, QPoint(4, 4));
    QCOMPARE(selected.count(), 1);
    QVERIFY(w->isSelected());
    QCOMPARE(panel->selectedMessage(), std::optional<qint64>(reply.id));
    QCOMPARE(panel->shownProfile(), *stored);
    panel->setCurrentTab(ProfilerPanel::Tab::Routing);
    panel->routingView()->setSource(RoutingView::Source::SelectedMessage);
    panel->refresh();
    QCOMPARE(panel->routingView()->stripPositions(), stored->tracePositions());
    const QList<double> share = expertShares(
        QList<quint64>(stored->routing[0].expertCounts.begin(), stored->routing[0].expertCounts.end()));
    for (int e = 0; e < 8; ++e) QVERIFY(near(cell(panel->routingView()->heatmap(), e, 1), share[e]));

    // Hiding the dock stops the panel's timer.
    m_window->profilerDock()->hide();
    QVERIFY(!panel->isRefreshing());
}

QTEST_MAIN(TestProfilerPanel)
#include "test_profiler_panel.moc"
