// ProfilerPanel (see profiler_panel.h). Every input bumps a version number (the shown profile,
// the conversation's stored figures, the compare pair) and each page remembers the versions it
// drew, so a tick with nothing new does no drawing; only the engine's step counter and the
// live reply change at generation speed, and they are read once per tick.
#include "profiler_panel.h"

#include "chat_store.h"
#include "compare_view.h"
#include "engine_session.h"
#include "latency_view.h"
#include "memory_usage_view.h"
#include "profile_recorder.h"
#include "profiler_charts.h"
#include "routing_view.h"

#include <QTabWidget>

#include <QVBoxLayout>

#include <qcustomplot.h>

#include <algorithm>
#include <cmath>

namespace es {

namespace {
constexpr quint64 kSelectedKeyBit = quint64(1) << 63; // keys of stored messages vs request ids
constexpr double kMemorySampleS = 0.25;
} // namespace

ProfilerPanel::ProfilerPanel(ChatStore *store, EngineSession *session, QWidget *parent)
    : QWidget(parent), m_store(store), m_session(session), m_recorder(ProfileRecorder::forSession(session)) {
    auto *layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    m_tabs = new QTabWidget(this);
    m_routing = new RoutingView(m_tabs);
    m_compare = new CompareView(m_tabs);
    m_latency = new LatencyView(m_tabs);
    m_memory = new MemoryUsageView(m_tabs);
    m_tabs->addTab(m_routing, tr("Routing"));
    m_tabs->addTab(m_compare, tr("Compare"));
    m_tabs->addTab(m_latency, tr("Latency"));
    connect(m_latency, &LatencyView::detailedProfilingToggled, this, [this](bool on) {
        if (m_session) m_session->setDetailedProfiling(on);
    });
    m_tabs->addTab(m_memory, tr("Memory"));
    m_tabs->setTabToolTip(0, tr("Which experts each layer routes tokens to"));
    m_tabs->setTabToolTip(
        1, tr("Two messages' routing side by side, with the per-layer Jensen–Shannon divergence"));
    m_tabs->setTabToolTip(2, tr("TTFT, inter-token latency, tok/s and engine time per phase"));
    m_tabs->setTabToolTip(
        3, tr("Weights, KV cache, workspace and free memory; fragmentation; the KV block map"));
    layout->addWidget(m_tabs);

    m_timer.setInterval(kFastMs);
    // Replot cost, measured, drives the refresh rate (adaptInterval).
    m_replotClock.start();
    for (QCustomPlot *plot : findChildren<QCustomPlot *>()) {
        connect(plot, &QCustomPlot::beforeReplot, this,
                [this] { m_replotStartNs = m_replotClock.nsecsElapsed(); });
        connect(plot, &QCustomPlot::afterReplot, this,
                [this] { m_costSinceTickMs += (m_replotClock.nsecsElapsed() - m_replotStartNs) / 1e6; });
    }
    connect(&m_timer, &QTimer::timeout, this, &ProfilerPanel::refresh);
    connect(m_tabs, &QTabWidget::currentChanged, this, [this] {
        charts::replotStale(m_tabs->currentWidget());
        refresh();
    });
    if (m_recorder)
        connect(m_recorder, &ProfileRecorder::replyRecorded, this, &ProfilerPanel::onReplyRecorded);
    if (m_store) {
        connect(m_store, &ChatStore::messagesChanged, this, [this] {
            m_conversationDirty = true;
            if (m_compareAuto) m_compareDirty = true;
        });
        connect(m_store, &ChatStore::conversationsChanged, this, [this] { m_conversationDirty = true; });
    }
    if (m_session) {
        connect(m_session, &EngineSession::modelLoaded, this, [this](const SessionModelInfo &info) {
            // The last reply was the previous model's: its strip and timings are no longer shown
            // as "the last reply" (a selected message keeps its own stored profile and shape).
            m_finishedKey = m_liveKey = 0;
            m_finishedProfile = m_liveProfile = {};
            ++m_shownVersion;
            m_memory->clear();
            m_memory->setIncludeFree(info.remoteUrl.isEmpty() &&
                                     !info.backend.startsWith(QLatin1String("cpu")));
            m_routingDirty = true;
            m_lastMemoryS = -1;
        });
        if (m_session->isModelLoaded())
            m_memory->setIncludeFree(!m_session->modelInfo().backend.startsWith(QLatin1String("cpu")));
    }
    connect(m_routing, &RoutingView::interventionRequested, this, &ProfilerPanel::interventionRequested);
    connect(m_routing, &RoutingView::highlightedExpertChanged, this, &ProfilerPanel::updateTokenHighlight);
    connect(m_routing, &RoutingView::coActivationLayerChanged, this, &ProfilerPanel::refreshCoActivation);
    connect(m_routing, &RoutingView::sourceChanged, this, [this] {
        m_routingDirty = true;
        refresh();
        updateTokenHighlight();
    });
    connect(m_compare, &CompareView::useSelectedAsA, this, [this] {
        if (m_selected) setCompareMessages(m_selected, m_compareB);
    });
    connect(m_compare, &CompareView::useSelectedAsB, this, [this] {
        if (m_selected) setCompareMessages(m_compareA, m_selected);
    });
    connect(m_compare, &CompareView::replyTokensOnlyChanged, this, [this] {
        m_compareDirty = true;
        refreshCompare();
    });
    connect(m_compare, &CompareView::swapRequested, this,
            [this] { setCompareMessages(m_compareB, m_compareA); });
    m_clock.start();
}

ProfilerPanel::~ProfilerPanel() = default;

ProfilerPanel::Tab ProfilerPanel::currentTab() const { return Tab(m_tabs->currentIndex()); }
void ProfilerPanel::setCurrentTab(Tab tab) { m_tabs->setCurrentIndex(int(tab)); }

std::optional<ProfilerPanel::Tab> ProfilerPanel::tabFromName(const QString &name) {
    const QString n = name.toLower();
    if (n == QLatin1String("routing")) return Tab::Routing;
    if (n == QLatin1String("compare")) return Tab::Compare;
    if (n == QLatin1String("latency")) return Tab::Latency;
    if (n == QLatin1String("memory")) return Tab::Memory;
    return std::nullopt;
}

void ProfilerPanel::setConversationProvider(std::function<std::optional<qint64>()> provider) {
    m_conversationProvider = std::move(provider);
    m_conversationDirty = true;
}

void ProfilerPanel::setOpenConversationsProvider(std::function<QList<qint64>()> provider) {
    m_openConversationsProvider = std::move(provider);
    m_compareDirty = true;
}

void ProfilerPanel::showEvent(QShowEvent *event) {
    QWidget::showEvent(event);
    m_timer.start();
    refresh();
    charts::replotStale(this);
}

void ProfilerPanel::hideEvent(QHideEvent *event) {
    QWidget::hideEvent(event);
    m_timer.stop(); // hidden: no telemetry reads, no drawing
}

void ProfilerPanel::feedTelemetry(const TelemetryView &t) {
    m_fed = t;
    m_lastSteps = ~quint64(0);
}

void ProfilerPanel::clearFedTelemetry() { m_fed.reset(); }

TelemetryView ProfilerPanel::currentTelemetry() const {
    if (m_fed) return *m_fed;
    return m_session ? m_session->telemetry() : TelemetryView{};
}

ProfilerPanel::Shown ProfilerPanel::shown() const {
    if (m_selected) return {m_selectedProfile, quint64(*m_selected) | kSelectedKeyBit, false};
    if (m_liveKey) return {m_liveProfile, m_liveKey, true};
    if (m_finishedKey) return {m_finishedProfile, m_finishedKey, false, m_finishedServed};
    return {};
}

MessageProfile ProfilerPanel::shownProfile() const { return shown().profile; }

void ProfilerPanel::selectMessage(qint64 messageId) {
    if (!m_store) return;
    m_selected = messageId;
    m_selectedProfile = m_store->profile(messageId).value_or(MessageProfile{});
    if (m_selectedProfile.routing.isEmpty())
        m_selectedProfile.routing = m_store->routing(messageId); // pre-v4 message
    // A stored profile may be an older build's or hand-edited: its counts are bounded by its
    // arrays before any page sizes a chart or a table by them.
    m_selectedProfile = boundedProfile(std::move(m_selectedProfile));
    ++m_shownVersion;
    // The heatmap follows the click too: the live window says nothing about this message.
    if (m_routing->source() == RoutingView::Source::LiveWindow) {
        QSignalBlocker block(m_routing);
        m_routing->setSource(RoutingView::Source::SelectedMessage);
        m_routingDirty = true;
    }
    emit shownProfileChanged();
    refresh();
    updateTokenHighlight();
}

void ProfilerPanel::setCompareMessages(std::optional<qint64> a, std::optional<qint64> b) {
    m_compareA = a;
    m_compareB = b;
    m_compareAuto = false;
    m_compareDirty = true;
    refresh();
}

void ProfilerPanel::onReplyRecorded(quint64 requestId, const MessageProfile &profile) {
    m_finishedKey = requestId;
    m_finishedProfile = profile;
    m_finishedServed = m_recorder && m_recorder->isServed(requestId);
    if (m_liveKey == requestId) {
        m_liveKey = 0;
        m_liveProfile = {};
    }
    ++m_shownVersion;
    if (m_compareAuto) m_compareDirty = true;
    emit shownProfileChanged();
    // The new reply is on screen once stored (ChatStore saves it on the same signal, before this).
    QMetaObject::invokeMethod(this, &ProfilerPanel::updateTokenHighlight, Qt::QueuedConnection);
}

void ProfilerPanel::refresh() {
    if (!m_session) return;
    adaptInterval();
    QElapsedTimer busy;
    busy.start();
    const TelemetryView t = currentTelemetry();
    const bool engineChanged = t.valid && t.nSteps != m_lastSteps;
    m_lastSteps = t.nSteps;
    const Tab tab = currentTab();

    // Follow the reply streaming now; a new reply takes the view back from a selected message.
    if (m_recorder && !m_fed) {
        const quint64 latest = m_recorder->latestRequest();
        if (latest != 0 && latest != m_finishedKey && m_recorder->activeRequests().contains(latest)) {
            if (latest != m_liveKey) {
                m_liveKey = latest;
                m_selected.reset();
                m_liveStale = true;
                emit shownProfileChanged();
            }
            if (engineChanged) m_liveStale = true;
            if (m_liveStale && (tab == Tab::Routing || tab == Tab::Latency)) {
                m_liveProfile = m_recorder->liveProfile(latest);
                m_liveStale = false;
                ++m_shownVersion;
            }
        }
    }
    if (m_conversationProvider) {
        const std::optional<qint64> c = m_conversationProvider();
        if (c != m_conversation) {
            m_conversationDirty = true;
            dropClosedCompareSides();
        }
    }

    const int before = m_drawCount;
    switch (tab) {
    case Tab::Routing:
        refreshRouting(t, engineChanged);
        break;
    case Tab::Compare:
        refreshCompare();
        break;
    case Tab::Latency:
        refreshLatency();
        break;
    case Tab::Memory:
        break;
    }
    // Memory history is kept whichever page is on screen (a few samples a second).
    const double now = m_clock.elapsed() / 1000.0;
    if (t.valid && (m_lastMemoryS < 0 || now - m_lastMemoryS >= kMemorySampleS)) {
        m_memory->addSample(t.memory, now);
        m_lastMemoryS = now;
        if (tab == Tab::Memory) ++m_drawCount;
    }
    if (m_drawCount != before) ++m_refreshCount;
    m_busyNs += busy.nsecsElapsed();
    m_costSinceTickMs += busy.nsecsElapsed() / 1e6;
}

// The last tick's cost (its refresh and the replots it queued, which ran after it) feeds a
// moving average; the interval is the one at which that average stays within the CPU budget.
void ProfilerPanel::adaptInterval() {
    m_tickCostMs = 0.8 * m_tickCostMs + 0.2 * m_costSinceTickMs;
    m_costSinceTickMs = 0;
    const int want = std::clamp(int(std::lround(m_tickCostMs / kCpuBudget)), kFastMs, kSlowMs);
    if (std::abs(want - m_timer.interval()) >= 10) m_timer.setInterval(want);
}

void ProfilerPanel::reloadConversation() {
    m_conversationDirty = false;
    m_conversation = m_conversationProvider ? m_conversationProvider() : std::nullopt;
    m_conversationMatrix = {};
    m_ttft.clear();
    m_ttftIds.clear();
    ++m_conversationVersion;
    if (!m_conversation || !m_store) return;
    const int nExperts = m_session ? m_session->modelInfo().nExperts : 0;
    for (const Message &m : m_store->activePath(*m_conversation)) {
        if (m.role != MessageRole::Assistant) continue;
        m_ttftIds << m.id;
        const std::optional<MessageMetrics> mm = m_store->metrics(m.id);
        m_ttft << (mm && mm->ttftMs ? *mm->ttftMs : std::numeric_limits<double>::quiet_NaN());
        const QList<LayerRouting> r = m_store->routing(m.id);
        if (!r.isEmpty()) m_conversationMatrix.add(RoutingMatrix::fromLayerRouting(r, nExperts));
    }
}

void ProfilerPanel::refreshRouting(const TelemetryView &t, bool engineChanged) {
    const SessionModelInfo info = m_session->modelInfo();
    const RoutingView::Source source = m_routing->source();
    const Shown s = shown();
    const bool sourceChanged = int(source) != m_drawnRoutingSource;
    switch (source) {
    case RoutingView::Source::LiveWindow:
        if (engineChanged || m_routingDirty || sourceChanged) {
            const RoutingMatrix m = RoutingMatrix::fromTelemetry(t, true);
            QString caption =
                tr("Live: the engine's last %1 steps, %2 token-slots").arg(t.windowSteps).arg(m.total());
            if (!info.remoteUrl.isEmpty())
                caption =
                    t.noExpertMetrics
                        ? tr("The server %1 does not expose expert metrics "
                             "(expertscope:expert_tokens_total), so its routing cannot be shown. "
                             "ExpertScope's own server does; vLLM and SGLang do not.")
                              .arg(info.remoteUrl)
                        : tr("Live: the server's last %1 s (%2 steps), %3 token-slots from all its clients")
                              .arg(t.windowSeconds, 0, 'f', 0)
                              .arg(t.windowSteps)
                              .arg(m.total());
            m_routing->showMatrix(m, info.nLayers, info.nSharedExperts, caption);
            ++m_drawCount;
        }
        break;
    case RoutingView::Source::SelectedMessage:
        if (m_routingDirty || sourceChanged || m_drawnRoutingVersion != m_shownVersion) {
            const MessageProfile &p = s.profile;
            const QString what = m_selected ? tr("Message #%1").arg(*m_selected)
                                 : s.live   ? tr("The reply streaming now")
                                 : s.served ? tr("The last request served over HTTP")
                                 : s.key    ? tr("The last reply")
                                            : tr("No message selected (click a message's header)");
            const RoutingMatrix m =
                RoutingMatrix::fromLayerRouting(p.routing, p.nExperts ? p.nExperts : info.nExperts);
            // A remote server's replies carry no per-request routing (the OpenAI API has none).
            const bool remoteReply = s.key && p.routing.isEmpty() && p.k == 0 && !info.remoteUrl.isEmpty();
            m_routing->showMatrix(
                m, p.nLayers ? p.nLayers : info.nLayers, p.nLayers ? p.nSharedExperts : info.nSharedExperts,
                remoteReply ? tr("%1: no routing recorded — a remote server's replies carry "
                                 "none (see Live for the server's expert metrics)")
                                  .arg(what)
                            : tr("%1: %2 token-slots").arg(what).arg(m.total()));
            m_drawnRoutingVersion = m_shownVersion;
            ++m_drawCount;
        }
        break;
    case RoutingView::Source::Conversation:
        if (m_conversationDirty) reloadConversation();
        if (m_routingDirty || sourceChanged || m_drawnConversationVersion != m_conversationVersion) {
            m_routing->showMatrix(m_conversationMatrix, info.nLayers, info.nSharedExperts,
                                  m_conversation
                                      ? tr("Conversation: %1 finished replies on the active branch, %2 "
                                           "token-slots")
                                            .arg(m_ttftIds.size())
                                            .arg(m_conversationMatrix.total())
                                      : tr("No conversation"));
            m_drawnConversationVersion = m_conversationVersion;
            ++m_drawCount;
        }
        break;
    }
    m_drawnRoutingSource = int(source);
    m_routingDirty = false;
    refreshCoActivation();
    if (s.key != m_drawnStripKey || m_drawnStripVersion != m_shownVersion) {
        if (s.key == 0)
            m_routing->clearStrip();
        else
            m_routing->showStrip(s.profile, s.key);
        m_drawnStripKey = s.key;
        m_drawnStripVersion = m_shownVersion;
        ++m_drawCount;
    }
}

void ProfilerPanel::refreshLatency() {
    const Shown s = shown();
    if (s.key != m_drawnLatencyKey || m_drawnLatencyVersion != m_shownVersion) {
        if (s.key == 0)
            m_latency->clearReply();
        else
            m_latency->showReply(s.profile, s.key, s.live, s.served);
        QString why;
        if (m_session && m_session->isRemote())
            why = tr("A remote server does not report its steps' launches.");
        else if (s.key != 0 && s.profile.nStepsTimed < 0)
            why = tr("The CPU times each step per phase as a whole; the step timeline is recorded on the GPU.");
        else
            why = tr("No step of this reply was timed on the GPU.");
        m_latency->showTimeline(s.profile.timeline, why);
        m_drawnLatencyKey = s.key;
        m_drawnLatencyVersion = m_shownVersion;
        ++m_drawCount;
    }
    if (m_conversationDirty) reloadConversation();
    // TTFT per reply of the conversation; the one streaming (still 'partial' in the store, so no
    // metrics yet) takes its live TTFT.
    const int liveTtft = s.live && s.profile.ttftUs ? int(*s.profile.ttftUs) : -1;
    if (m_drawnTtftVersion != m_conversationVersion || m_drawnTtftSelection != s.key ||
        m_drawnLiveTtft != liveTtft) {
        QList<double> ttft = m_ttft;
        int current = int(ttft.size()) - 1;
        if (m_selected) current = int(m_ttftIds.indexOf(*m_selected));
        if (s.live && !ttft.isEmpty() && std::isnan(ttft.last()) && liveTtft >= 0)
            ttft.last() = liveTtft / 1000.0;
        m_latency->showTtft(ttft, current);
        m_drawnTtftVersion = m_conversationVersion;
        m_drawnTtftSelection = s.key;
        m_drawnLiveTtft = liveTtft;
        ++m_drawCount;
    }
}

// The replies the routing page stands for: the whole conversation's on its active branch, else
// the selected message, else the current conversation's last reply (the one the strip shows
// once it is stored).
QList<qint64> ProfilerPanel::shownMessages() const {
    QList<qint64> ids;
    if (!m_store) return ids;
    const bool whole = m_routing->source() == RoutingView::Source::Conversation;
    if (m_selected && !whole) return {*m_selected};
    const std::optional<qint64> conv = m_conversationProvider ? m_conversationProvider() : std::nullopt;
    if (!conv) return ids;
    for (const Message &m : m_store->activePath(*conv))
        if (m.role == MessageRole::Assistant && m.state == MessageState::Complete) ids << m.id;
    if (!whole && !ids.isEmpty()) ids = {ids.last()};
    return ids;
}

// The highlighted expert's tokens in the shown replies: each reply token the model read back
// (trace position nPromptTokens + j is reply token j) and routed to that expert in that layer,
// as the byte range of its text.
void ProfilerPanel::updateTokenHighlight() {
    TokenHighlight ranges;
    const auto [layer, expert] = m_routing->highlightedExpert();
    if (layer >= 0 && m_store)
        for (qint64 id : shownMessages()) {
            const std::optional<MessageProfile> stored = m_store->profile(id);
            if (!stored) continue;
            const MessageProfile p = boundedProfile(*stored);
            if (p.tokenTextEnds.isEmpty()) continue;
            QList<QPair<int, int>> spans;
            for (int pos : positionsRoutedTo(p, layer, expert, p.nPromptTokens)) {
                const int j = pos - p.nPromptTokens;
                if (j >= p.tokenTextEnds.size()) break;
                const int from = j > 0 ? p.tokenTextEnds[j - 1] : 0, to = p.tokenTextEnds[j];
                if (to > from) spans.append({from, to});
            }
            ranges.insert(id, spans);
        }
    if (ranges == m_tokenHighlight) return;
    m_tokenHighlight = ranges;
    emit tokenHighlightChanged(m_tokenHighlight);
}

// "Chosen together" for the layer the page shows: the shown reply's whole trace (its prompt and
// reply), or with the whole conversation, the positions each of its replies generated.
void ProfilerPanel::refreshCoActivation() {
    const RoutingView::Source source = m_routing->source();
    const bool whole = source == RoutingView::Source::Conversation;
    const int version = whole ? m_conversationVersion : m_shownVersion;
    const MessageProfile shownP = whole ? MessageProfile{} : shown().profile;
    QList<int> layers = shownP.moeLayers;
    if (whole && m_session) layers = m_session->modelInfo().moeLayers;
    m_routing->setCoActivationLayers(layers);
    const int layer = m_routing->coActivationLayer();
    if (version == m_drawnCoVersion && layer == m_drawnCoLayer && int(source) == m_drawnCoSource) return;
    m_drawnCoVersion = version;
    m_drawnCoLayer = layer;
    m_drawnCoSource = int(source);
    CoActivation c;
    QString caption;
    if (whole) {
        bool first = true;
        int replies = 0;
        for (qint64 id : m_ttftIds)
            if (const std::optional<MessageProfile> p = m_store ? m_store->profile(id) : std::nullopt) {
                const CoActivation one = coActivation(boundedProfile(*p), layer, p->nPromptTokens);
                if (one.positions == 0) continue;
                if (first) c = one;
                else c.add(one);
                first = false;
                ++replies;
            }
        caption = tr("the tokens of %1 replies").arg(replies);
    } else {
        c = coActivation(shownP, layer);
        caption = shownP.traceIds.isEmpty() ? tr("no routing recorded") : tr("the shown reply's prompt and reply");
    }
    m_routing->showCoActivation(c, tr("%1 tokens: %2").arg(c.positions).arg(caption));
}

CompareView::Side ProfilerPanel::compareSide(qint64 messageId) const {
    CompareView::Side side;
    if (!m_store) return side;
    const std::optional<Message> msg = m_store->message(messageId);
    if (!msg) return side;
    const SessionModelInfo info = m_session ? m_session->modelInfo() : SessionModelInfo{};
    std::optional<MessageProfile> p = m_store->profile(messageId);
    if (p) p = boundedProfile(std::move(*p)); // as selectMessage: counts bounded by the arrays
    side.nLayers = p && p->nLayers ? p->nLayers : info.nLayers;
    side.nSharedExperts = p && p->nLayers ? p->nSharedExperts : info.nSharedExperts;
    const int nExperts = p && p->nExperts ? p->nExperts : info.nExperts;
    // Reply tokens only needs the trace (profiles); a message without one has no such view.
    const QList<LayerRouting> routing = m_compare->replyTokensOnly() ? (p ? replyRouting(*p) : QList<LayerRouting>{})
                                        : p                          ? p->routing
                                                                     : m_store->routing(messageId);
    side.matrix = RoutingMatrix::fromLayerRouting(routing, nExperts);
    QString question;
    if (msg->parentId)
        if (const std::optional<Message> parent = m_store->message(*msg->parentId))
            question = parent->content.simplified();
    if (question.size() > 60) question = question.left(59) + QStringLiteral("…");
    side.title = tr("#%1 “%2”").arg(messageId).arg(question);
    if (!msg->generation.precision.isEmpty()) side.title += QStringLiteral(" · ") + msg->generation.precision;
    if (const ExpertIntervention &iv = msg->generation.sampling.intervention; !iv.isEmpty())
        side.title += QStringLiteral(" · ") + tr("experts: %1").arg(iv.summary());
    side.text = msg->content;
    return side;
}

// The conversations Compare may show: those open in a pane (the current one first), else every
// conversation (a panel without a window), most recently updated first.
QList<qint64> ProfilerPanel::compareConversations() const {
    QList<Conversation> convs = m_store->conversations();
    std::stable_sort(convs.begin(), convs.end(),
                     [](const Conversation &a, const Conversation &b) { return a.updatedAt > b.updatedAt; });
    QList<qint64> ids;
    const std::optional<qint64> current = m_conversationProvider ? m_conversationProvider() : std::nullopt;
    if (current) ids << *current;
    if (m_openConversationsProvider) {
        const QList<qint64> open = m_openConversationsProvider();
        for (const Conversation &c : convs)
            if (open.contains(c.id) && !ids.contains(c.id)) ids << c.id;
        return ids;
    }
    if (current) return ids; // a current conversation and no list of the others: that one alone
    for (const Conversation &c : convs) ids << c.id;
    return ids;
}

// A side the user picked from a conversation no longer open goes: Compare follows the latest
// replies again.
void ProfilerPanel::dropClosedCompareSides() {
    if (m_compareAuto || !m_store) return;
    const QList<qint64> open = compareConversations();
    for (const std::optional<qint64> &side : {m_compareA, m_compareB}) {
        if (!side) continue;
        const std::optional<Message> m = m_store->message(*side);
        if (!m || !open.contains(m->conversationId)) {
            m_compareAuto = true;
            m_compareDirty = true;
            return;
        }
    }
}

// The newest two finished replies: the latest reply of each of the two most recently updated
// open conversations, the current one first (so "send to all panes" compares the panes), else
// the last two of the current one.
void ProfilerPanel::pickLatestPair() {
    m_compareA.reset();
    m_compareB.reset();
    if (!m_store) return;
    const QList<qint64> convs = compareConversations();
    QList<qint64> picked;
    QList<qint64> firstPath;
    for (int i = 0; i < convs.size() && i < 4 && picked.size() < 2; ++i) {
        QList<qint64> done;
        for (const Message &m : m_store->activePath(convs[i]))
            if (m.role == MessageRole::Assistant && m.state == MessageState::Complete) done << m.id;
        if (i == 0) firstPath = done;
        if (!done.isEmpty()) picked << done.last();
    }
    if (picked.size() < 2 && firstPath.size() >= 2)
        picked = {firstPath.last(), firstPath[firstPath.size() - 2]};
    if (picked.size() >= 1) m_compareB = picked[0];
    if (picked.size() >= 2) m_compareA = picked[1];
}

void ProfilerPanel::refreshCompare() {
    if (!m_compareDirty) return;
    m_compareDirty = false;
    if (m_compareAuto) pickLatestPair();
    m_compare->showPair(m_compareA ? compareSide(*m_compareA) : CompareView::Side{},
                        m_compareB ? compareSide(*m_compareB) : CompareView::Side{});
    ++m_drawCount;
}

} // namespace es
