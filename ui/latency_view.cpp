// LatencyView (see latency_view.h). Percentiles are recomputed from the reply's gaps at each
// refresh (a sort of at most a few thousand values at ≤ 30 Hz); the graphs' data containers are
// appended to or overwritten in place, never recreated.
#include "latency_view.h"

#include "profiler_charts.h"
#include "step_timeline_view.h"

#include <QCheckBox>
#include <QGridLayout>
#include <QLabel>
#include <QVBoxLayout>

#include <qcustomplot.h>

#include <cmath>

namespace es {

LatencyView::LatencyView(QWidget *parent) : QWidget(parent) {
    auto *layout = new QVBoxLayout(this);
    layout->setContentsMargins(2, 2, 2, 2);
    m_summary = new QLabel(tr("No reply yet."), this);
    charts::fixLines(m_summary, 4);
    m_summary->setToolTip(ProfilerDefinitions::ttft() + QLatin1Char('\n') + ProfilerDefinitions::itl() +
                          QLatin1Char('\n') + ProfilerDefinitions::decodeTokS() + QLatin1Char('\n') +
                          ProfilerDefinitions::percentiles());
    layout->addWidget(m_summary);

    m_itlPlot = charts::makePlot(this);
    m_itlPlot->xAxis->setLabel(tr("token of the reply"));
    m_itlPlot->xAxis->setTicker(charts::integerTicker());
    m_itlPlot->yAxis->setLabel(tr("ITL (ms)"));
    m_itlGraph = m_itlPlot->addGraph();
    m_itlGraph->setPen(QPen(QColor(40, 90, 170), 1));
    m_itlGraph->setLineStyle(QCPGraph::lsStepLeft);
    const QColor pColors[3] = {QColor(30, 140, 60), QColor(220, 140, 0), QColor(200, 30, 30)};
    const char *pNames[3] = {"p50", "p90", "p99"};
    for (int i = 0; i < 3; ++i) {
        m_pLines[i] = new QCPItemStraightLine(m_itlPlot);
        m_pLines[i]->setPen(QPen(pColors[i], 1, Qt::DashLine));
        m_pLines[i]->setVisible(false);
        m_pTexts[i] = new QCPItemText(m_itlPlot);
        m_pTexts[i]->setColor(pColors[i]);
        m_pTexts[i]->setFont(m_itlPlot->xAxis->tickLabelFont());
        m_pTexts[i]->setPositionAlignment(Qt::AlignRight | Qt::AlignBottom);
        m_pTexts[i]->position->setTypeX(QCPItemPosition::ptAxisRectRatio);
        m_pTexts[i]->position->setTypeY(QCPItemPosition::ptPlotCoords);
        m_pTexts[i]->setText(QLatin1String(pNames[i]));
        m_pTexts[i]->setVisible(false);
    }
    m_itlPlot->setToolTip(ProfilerDefinitions::itl() + QLatin1Char('\n') +
                          ProfilerDefinitions::percentiles());
    layout->addWidget(m_itlPlot, 3);

    m_ratePlot = charts::makePlot(this);
    m_ratePlot->xAxis->setLabel(tr("seconds since the first token"));
    m_ratePlot->yAxis->setLabel(tr("tok/s"));
    m_rateGraph = m_ratePlot->addGraph();
    m_rateGraph->setPen(QPen(QColor(120, 60, 160), 1.5));
    m_rateGraph->setBrush(QColor(120, 60, 160, 40));
    m_ratePlot->setToolTip(ProfilerDefinitions::decodeTokS());
    layout->addWidget(m_ratePlot, 2);

    auto *row = new QGridLayout;
    m_ttftPlot = charts::makePlot(this);
    m_ttftPlot->xAxis->setLabel(tr("reply in the conversation"));
    m_ttftPlot->yAxis->setLabel(tr("TTFT (ms)"));
    m_ttftBars = new QCPBars(m_ttftPlot->xAxis, m_ttftPlot->yAxis);
    m_ttftBars->setBrush(QColor(90, 150, 200));
    m_ttftBars->setPen(Qt::NoPen);
    m_ttftCurrent = new QCPBars(m_ttftPlot->xAxis, m_ttftPlot->yAxis);
    m_ttftCurrent->setBrush(QColor(230, 120, 40));
    m_ttftCurrent->setPen(Qt::NoPen);
    m_ttftPlot->xAxis->setTicker(charts::integerTicker());
    m_ttftPlot->setToolTip(ProfilerDefinitions::ttft() + QLatin1Char('\n') +
                           tr("Orange: the reply shown above."));
    m_phasePlot = charts::makePlot(this);
    m_phasePlot->yAxis->setLabel(tr("ms"));
    m_phaseBars = new QCPBars(m_phasePlot->xAxis, m_phasePlot->yAxis);
    m_phaseBars->setBrush(QColor(100, 160, 110));
    m_phaseBars->setPen(Qt::NoPen);
    QSharedPointer<QCPAxisTickerText> phaseTicks(new QCPAxisTickerText);
    // The bars in es::step_phase order: attention, MoE routed, MoE shared, dense, head and sampling, other.
    for (int i = 0; i < 6; ++i) phaseTicks->addTick(i, StepTimelineView::phaseName(i));
    m_phasePlot->xAxis->setTicker(phaseTicks);
    m_phasePlot->xAxis->setTickLabelRotation(40);
    m_phasePlot->xAxis->setRange(-0.6, 5.6);
    m_phaseBars->setData({0, 1, 2, 3, 4, 5}, {0, 0, 0, 0, 0, 0}, true);
    m_phasePlot->setToolTip(ProfilerDefinitions::phases());
    row->addWidget(m_ttftPlot, 0, 0);
    row->addWidget(m_phasePlot, 0, 1);
    layout->addLayout(row, 2);

    m_detailed = new QCheckBox(tr("Time every step"), this);
    m_detailed->setToolTip(
        tr("On the GPU the engine times one step in 64 per phase (and each reply's first two): the median "
           "decode step is unchanged. On, every step is timed: each waits for the one before it and for its "
           "timeline, so decoding is slower while it is on. The CPU times every step anyway."));
    connect(m_detailed, &QCheckBox::toggled, this, &LatencyView::detailedProfilingToggled);
    layout->addWidget(m_detailed);
    m_timeline = new StepTimelineView(this);
    layout->addWidget(m_timeline, 0);
}

void LatencyView::showTimeline(const StepTimeline &t, const QString &whyEmpty) {
    m_timeline->showTimeline(t, whyEmpty);
    // An empty timeline is one line: its room goes to the charts above.
    if (auto *box = qobject_cast<QVBoxLayout *>(layout())) box->setStretchFactor(m_timeline, t.isEmpty() ? 0 : 3);
}

QString LatencyView::summary() const { return m_summary->text(); }

void LatencyView::clearReply() {
    m_key = 0;
    m_itlValues.clear();
    m_itl = {};
    m_itlMax = 0;
    m_itlGraph->data()->clear();
    m_rateGraph->data()->clear();
    for (int i = 0; i < 3; ++i) {
        m_pLines[i]->setVisible(false);
        m_pTexts[i]->setVisible(false);
    }
    m_summary->setText(tr("No reply yet."));
    for (QCustomPlot *p : {m_itlPlot, m_ratePlot}) charts::queueReplot(p);
}

void LatencyView::showReply(const MessageProfile &p, quint64 key, bool live, bool served) {
    const QList<qint64> &t = p.tokenTimesUs;
    const qsizetype nGaps = std::max<qsizetype>(0, t.size() - 1);
    if (key != m_key || nGaps < m_itlValues.size()) {
        m_key = key;
        m_itlValues.clear();
        m_itlMax = 0;
        m_itlGraph->data()->clear();
    }
    // Token i (1-based) arrived ITL ms after token i−1: x = i, only the new ones are added.
    for (qsizetype i = m_itlValues.size() + 1; i <= nGaps; ++i) {
        const double gap = double(t[i] - t[i - 1]) / 1000.0;
        m_itlValues.append(gap);
        m_itlMax = std::max(m_itlMax, gap);
        m_itlGraph->data()->add(QCPGraphData(double(i + 1), gap));
    }
    m_itl = percentiles(m_itlValues);
    const double pv[3] = {m_itl.p50, m_itl.p90, m_itl.p99};
    for (int i = 0; i < 3; ++i) {
        const bool ok = m_itl.n > 0 && !std::isnan(pv[i]);
        m_pLines[i]->setVisible(ok);
        m_pTexts[i]->setVisible(ok);
        if (!ok) continue;
        m_pLines[i]->point1->setCoords(0, pv[i]);
        m_pLines[i]->point2->setCoords(1, pv[i]);
        m_pTexts[i]->position->setCoords(0.99 - 0.08 * (2 - i), pv[i]);
    }
    m_itlPlot->xAxis->setRange(0.5, std::max<double>(2, double(t.size()) + 0.5));
    m_itlPlot->yAxis->setRange(0, std::max(1.0, m_itlMax * 1.1));

    // tok/s over time: a handful of quarter-second bins, rewritten in place.
    const QList<RatePoint> rate = throughputSeries(t, kRateBinUs);
    QList<QCPGraphData> pts;
    pts.reserve(rate.size() + 1);
    double maxRate = 1;
    if (!rate.isEmpty()) pts.append(QCPGraphData(0, rate.first().tokensPerSecond));
    for (const RatePoint &r : rate) {
        pts.append(QCPGraphData(r.tS, r.tokensPerSecond));
        maxRate = std::max(maxRate, r.tokensPerSecond);
    }
    m_rateGraph->data()->set(QVector<QCPGraphData>(pts.begin(), pts.end()), true);
    m_ratePlot->xAxis->setRange(0, std::max(0.5, rate.isEmpty() ? 0.0 : rate.last().tS));
    m_ratePlot->yAxis->setRange(0, maxRate * 1.15);

    const PhaseTimes &ph = p.phases;
    m_phaseBars->data()->set({{0, ph.attentionMs},
                              {1, ph.moeMs},
                              {2, ph.moeSharedMs},
                              {3, ph.denseMs},
                              {4, ph.samplingMs},
                              {5, ph.otherMs}},
                             true);
    m_phasePlot->yAxis->setRange(
        0, std::max({1.0, ph.attentionMs, ph.moeMs, ph.moeSharedMs, ph.denseMs, ph.samplingMs, ph.otherMs}) * 1.15);
    // The phase bars grow slowly while a reply streams: redraw them when the total moved by 5%
    // (or the reply changed or ended), not on every tick.
    const bool phasesMoved =
        key != m_phaseKey || !live || std::abs(ph.totalMs() - m_phaseDrawnMs) > 0.05 * m_phaseDrawnMs;
    if (phasesMoved) {
        m_phaseKey = key;
        m_phaseDrawnMs = ph.totalMs();
    }

    const double tokS = decodeTokensPerSecond(t);
    const double total = ph.totalMs();
    auto pct = [total](double v) { return total > 0 ? 100.0 * v / total : 0.0; };
    const QString head =
        tr("%1 %2 tokens · TTFT %3 ms · ITL p50 %4 / p90 %5 / p99 %6 ms · %7 tok/s")
            .arg(served ? tr("Served over HTTP:") : live ? tr("Streaming:") : tr("Reply:"))
            .arg(t.size())
            .arg(p.ttftUs ? QString::number(*p.ttftUs / 1000.0, 'f', 1) : QStringLiteral("–"))
            .arg(std::isnan(m_itl.p50) ? QStringLiteral("–") : QString::number(m_itl.p50, 'f', 2))
            .arg(std::isnan(m_itl.p90) ? QStringLiteral("–") : QString::number(m_itl.p90, 'f', 2))
            .arg(std::isnan(m_itl.p99) ? QStringLiteral("–") : QString::number(m_itl.p99, 'f', 2))
            .arg(std::isnan(tokS) ? QStringLiteral("–") : QString::number(tokS, 'f', 1));
    QString phases;
    if (p.nStepsTimed == 0 || total <= 0) {
        // No engine time measured (a remote server's reply: the API reports none; or no step of
        // this reply timed): say so, not 0%.
        phases = p.nSteps > 0 ? tr("phases: not measured in this reply's %1 steps").arg(p.nSteps)
                              : tr("phases: not available (no engine steps were measured for this reply)");
    } else {
        phases = tr("phases: attention %1%, MoE routed %2%, MoE shared %3%, dense %4%, head and sampling %5%, "
                    "other %6% of %7 ms over %8 steps")
                     .arg(pct(ph.attentionMs), 0, 'f', 0)
                     .arg(pct(ph.moeMs), 0, 'f', 0)
                     .arg(pct(ph.moeSharedMs), 0, 'f', 0)
                     .arg(pct(ph.denseMs), 0, 'f', 0)
                     .arg(pct(ph.samplingMs), 0, 'f', 0)
                     .arg(pct(ph.otherMs), 0, 'f', 0)
                     .arg(total, 0, 'f', 1)
                     .arg(p.nSteps);
        if (p.nStepsTimed > 0)
            phases += tr(" (%1 of them timed on the device, scaled to all)").arg(p.nStepsTimed);
    }
    m_summary->setText(head + QStringLiteral(" · ") + phases);
    charts::queueReplot(m_itlPlot);
    charts::queueReplot(m_ratePlot);
    if (phasesMoved) charts::queueReplot(m_phasePlot);
}

void LatencyView::showTtft(const QList<double> &ttftMs, int current) {
    QVector<QCPBarsData> all, cur;
    double maxV = 1;
    for (int i = 0; i < ttftMs.size(); ++i) {
        if (std::isnan(ttftMs[i])) continue;
        (i == current ? cur : all).append(QCPBarsData(i + 1, ttftMs[i]));
        maxV = std::max(maxV, ttftMs[i]);
    }
    m_ttftBars->data()->set(all, true);
    m_ttftCurrent->data()->set(cur, true);
    m_ttftPlot->xAxis->setRange(0.4, std::max<double>(1, ttftMs.size()) + 0.6);
    m_ttftPlot->yAxis->setRange(0, maxV * 1.15);
    charts::queueReplot(m_ttftPlot);
}

} // namespace es
