// LatencyView: the profiler's Latency page — TTFT per message of the conversation, the ITL of
// every token of the shown reply with its p50/p90/p99, tok/s over the reply's time, and the
// engine's time per phase (attention, MoE, dense GEMM, sampling, other). Fed by ProfilerPanel
// from a timer; a streaming reply's new tokens are appended to the ITL graph in place.
#pragma once

#include "latency_stats.h"

#include <QWidget>

class QCPBars;
class QCPGraph;
class QCPItemStraightLine;
class QCPItemText;
class QCustomPlot;
class QCheckBox;
class QLabel;

namespace es {

class StepTimelineView;

class LatencyView : public QWidget {
    Q_OBJECT
public:
    explicit LatencyView(QWidget *parent = nullptr);

    // The reply whose tokens are drawn; key identifies it (same key: only new tokens are added).
    // served: a request the app's server answered (the summary says so).
    void showReply(const MessageProfile &profile, quint64 key, bool live, bool served = false);
    void clearReply();
    // TTFT of each reply of the conversation, oldest first (NaN: none recorded).
    void showTtft(const QList<double> &ttftMs, int current);

    Percentiles itlPercentiles() const { return m_itl; }
    QString summary() const;
    QCPGraph *itlGraph() const { return m_itlGraph; }
    QCPGraph *rateGraph() const { return m_rateGraph; }
    QCPBars *ttftBars() const { return m_ttftBars; }
    QCPBars *phaseBars() const { return m_phaseBars; }
    // The step timeline below the charts (StepTimelineView::showTimeline).
    void showTimeline(const StepTimeline &t, const QString &whyEmpty);
    StepTimelineView *timelineView() const { return m_timeline; }
    QCheckBox *detailedBox() const { return m_detailed; }

    static constexpr qint64 kRateBinUs = 250'000; // tok/s bins of a quarter second

signals:
    // "Time every step" toggled: the engine times every step per phase while on.
    void detailedProfilingToggled(bool on);

private:
    QLabel *m_summary = nullptr;
    StepTimelineView *m_timeline = nullptr;
    QCheckBox *m_detailed = nullptr;
    QCustomPlot *m_itlPlot = nullptr, *m_ratePlot = nullptr, *m_ttftPlot = nullptr, *m_phasePlot = nullptr;
    QCPGraph *m_itlGraph = nullptr, *m_rateGraph = nullptr;
    QCPBars *m_ttftBars = nullptr, *m_ttftCurrent = nullptr, *m_phaseBars = nullptr;
    QCPItemStraightLine *m_pLines[3] = {};
    QCPItemText *m_pTexts[3] = {};
    QList<double> m_itlValues; // the shown reply's gaps (ms), for percentiles
    quint64 m_key = 0, m_phaseKey = 0;
    double m_phaseDrawnMs = 0;
    Percentiles m_itl;
    double m_itlMax = 0;
};

} // namespace es
