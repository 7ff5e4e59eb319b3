// ProfilerPanel: the right-hand profiler (MainWindow's dock) — Routing, Compare, Latency and
// Memory pages fed from EngineSession's telemetry, the ProfileRecorder's reply profiles and the
// ChatStore's stored ones. One QTimer (20 Hz) refreshes only the page on screen and only while
// the panel is visible; replots are queued; nothing here runs per token. What the Latency page
// and the routing strip show: the selected message's stored profile, else the reply streaming
// now, else the reply that finished last (exactly the profile that was stored with it).
#pragma once

#include "compare_view.h"
#include "routing_stats.h"
#include "session_types.h"
#include "storage_types.h"

#include <QElapsedTimer>
#include <QHash>
#include <QPointer>
#include <QTimer>
#include <QWidget>

#include <functional>
#include <optional>

class QTabWidget;

namespace es {

using TokenHighlight = QHash<qint64, QList<QPair<int, int>>>;

class ChatStore;
class EngineSession;
class LatencyView;
class MemoryUsageView;
class ProfileRecorder;
class RoutingView;

class ProfilerPanel : public QWidget {
    Q_OBJECT
public:
    enum class Tab { Routing = 0, Compare = 1, Latency = 2, Memory = 3 };

    ProfilerPanel(ChatStore *store, EngineSession *session, QWidget *parent = nullptr);
    ~ProfilerPanel() override;

    Tab currentTab() const;
    void setCurrentTab(Tab tab);
    static std::optional<Tab> tabFromName(const QString &name); // routing | compare | latency | memory

    // Which conversation "whole conversation" and "TTFT per message" refer to (MainWindow: the
    // current pane's). Without one, those views are empty.
    void setConversationProvider(std::function<std::optional<qint64>()> provider);
    // The conversations open in the window's panes: Compare shows only their replies (the
    // latest of the current one and of the pane that answered with it). Without it, Compare
    // keeps to the current conversation (or, without one either, any conversation).
    void setOpenConversationsProvider(std::function<QList<qint64>()> provider);

    // The timer runs at 20 Hz and slows towards 10 Hz when its ticks (refresh + replots) would
    // take more than kCpuBudget of the GUI thread, so a slow machine's engine keeps its CPU.
    static constexpr int kFastMs = 50, kSlowMs = 100;
    static constexpr double kCpuBudget = 0.03;
    int refreshIntervalMs() const { return m_timer.interval(); }
    bool isRefreshing() const { return m_timer.isActive(); }
    int refreshCount() const { return m_refreshCount; }     // ticks that did work (tests, bench)
    double refreshBusyMs() const { return m_busyNs / 1e6; } // time spent inside refresh() (bench)

    MessageProfile shownProfile() const;
    bool showsLiveReply() const { return !m_selected && m_liveKey != 0; }
    // The pages show a request the app's server answered (the latest, when nothing else is shown).
    bool showsServedRequest() const { return !m_selected && m_liveKey == 0 && m_finishedKey != 0 && m_finishedServed; }
    std::optional<qint64> selectedMessage() const { return m_selected; }
    std::optional<qint64> compareA() const { return m_compareA; }
    std::optional<qint64> compareB() const { return m_compareB; }

    RoutingView *routingView() const { return m_routing; }
    TokenHighlight tokenHighlight() const { return m_tokenHighlight; }
    CompareView *compareView() const { return m_compare; }
    LatencyView *latencyView() const { return m_latency; }
    MemoryUsageView *memoryView() const { return m_memory; }

public slots:
    // Shows a stored message's profile (MainWindow connects ChatPane::messageSelected here).
    // The next reply that starts streaming takes the view back to live.
    void selectMessage(qint64 messageId);
    void setCompareMessages(std::optional<qint64> a, std::optional<qint64> b);
    // One refresh tick (the timer calls it; tests may too).
    void refresh();
    // Tests: use this telemetry instead of the session's (a fed view stays until cleared).
    void feedTelemetry(const es::TelemetryView &telemetry);
    void clearFedTelemetry();

signals:
    void shownProfileChanged();
    // Relayed from the routing page (RoutingView::interventionRequested).
    void interventionRequested(int layer, int expert, bool force);
    // The tokens the chat highlights: per message id, the byte ranges [from, to) of its text
    // (UTF-8) of the reply tokens routed to the routing page's highlighted expert; empty: none.
    void tokenHighlightChanged(const es::TokenHighlight &ranges);

protected:
    void showEvent(QShowEvent *event) override;
    void hideEvent(QHideEvent *event) override;

private:
    struct Shown {
        MessageProfile profile;
        quint64 key = 0;
        bool live = false;
        bool served = false; // a request the app's server answered
    };
    Shown shown() const;
    TelemetryView currentTelemetry() const;
    void onReplyRecorded(quint64 requestId, const es::MessageProfile &profile);
    void refreshRouting(const TelemetryView &t, bool engineChanged);
    void refreshCompare();
    void refreshLatency();
    void reloadConversation();
    void updateTokenHighlight();
    QList<qint64> shownMessages() const; // the stored replies the routing page stands for
    void refreshCoActivation();
    void pickLatestPair();
    QList<qint64> compareConversations() const;
    void dropClosedCompareSides();
    CompareView::Side compareSide(qint64 messageId) const;

    QPointer<ChatStore> m_store;
    QPointer<EngineSession> m_session;
    ProfileRecorder *m_recorder = nullptr;
    std::function<std::optional<qint64>()> m_conversationProvider;
    std::function<QList<qint64>()> m_openConversationsProvider;
    QTabWidget *m_tabs = nullptr;
    RoutingView *m_routing = nullptr;
    CompareView *m_compare = nullptr;
    LatencyView *m_latency = nullptr;
    MemoryUsageView *m_memory = nullptr;
    QTimer m_timer;
    QElapsedTimer m_clock;
    std::optional<TelemetryView> m_fed;

    // What is shown.
    std::optional<qint64> m_selected;
    MessageProfile m_selectedProfile;
    quint64 m_liveKey = 0; // the request streaming now (0: none)
    MessageProfile m_liveProfile;
    bool m_liveStale = false;  // the engine moved on since m_liveProfile was read
    quint64 m_finishedKey = 0; // the reply that finished last
    MessageProfile m_finishedProfile;
    bool m_finishedServed = false; // … a request the app's server answered (LocalServer)
    std::optional<qint64> m_compareA, m_compareB;
    TokenHighlight m_tokenHighlight;
    int m_drawnCoVersion = -1, m_drawnCoLayer = -2, m_drawnCoSource = -1;
    bool m_compareAuto = true; // A/B follow the latest two replies until the user picks

    // Versions of the inputs and what each page drew, so idle ticks draw nothing.
    int m_shownVersion = 0, m_conversationVersion = 0;
    int m_drawnRoutingVersion = -1, m_drawnConversationVersion = -1, m_drawnStripVersion = -1;
    int m_drawnLatencyVersion = -1, m_drawnTtftVersion = -1, m_drawnLiveTtft = -2;
    quint64 m_drawnStripKey = ~quint64(0), m_drawnLatencyKey = ~quint64(0),
            m_drawnTtftSelection = ~quint64(0);
    int m_drawnRoutingSource = -1;
    quint64 m_lastSteps = ~quint64(0);
    bool m_compareDirty = true, m_conversationDirty = true, m_routingDirty = true;
    std::optional<qint64> m_conversation;
    RoutingMatrix m_conversationMatrix;
    QList<double> m_ttft;
    QList<qint64> m_ttftIds;
    double m_lastMemoryS = -1;
    int m_drawCount = 0, m_refreshCount = 0;
    qint64 m_busyNs = 0;
    double m_tickCostMs = 0;      // moving average of one tick's refresh + replot time
    double m_costSinceTickMs = 0; // refresh + replots since the last tick began
    qint64 m_replotStartNs = 0;
    QElapsedTimer m_replotClock;
    void adaptInterval();
};

} // namespace es
