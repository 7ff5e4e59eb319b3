// StepTimelineView (see step_timeline_view.h). Each phase is one graph whose bars are drawn as a
// filled step line with NaN gaps between launches, so a step of a few hundred launches is six
// graphs, not hundreds of items.
#include "step_timeline_view.h"

#include "profiler_charts.h"

#include <QHelpEvent>
#include <QLabel>
#include <QToolTip>
#include <QVBoxLayout>

#include <qcustomplot.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace es {

namespace {
const QColor kPhaseColors[6] = {QColor(70, 120, 200), QColor(220, 120, 40), QColor(240, 180, 60),
                                QColor(120, 170, 90), QColor(160, 90, 170), QColor(150, 150, 150)};

double gbPerS(const TimelineOp &o) { return o.durUs > 0 ? o.bytes / (o.durUs * 1e3) : 0.0; }
} // namespace

QString StepTimelineView::phaseName(int phase) {
    switch (phase) {
    case 0: return tr("attention");
    case 1: return tr("MoE routed");
    case 2: return tr("MoE shared");
    case 3: return tr("dense");
    case 4: return tr("head and sampling");
    default: return tr("other");
    }
}

StepTimelineView::StepTimelineView(QWidget *parent) : QWidget(parent) {
    auto *layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    m_caption = new QLabel(this);
    charts::fixLines(m_caption, 2);
    layout->addWidget(m_caption);
    m_plot = charts::makePlot(this);
    m_plot->xAxis->setLabel(tr("µs from the step's first launch"));
    m_plot->yAxis->setLabel(tr("GB/s read"));
    m_plot->legend->setVisible(true);
    m_plot->legend->setFont(m_plot->xAxis->tickLabelFont());
    m_plot->axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignTop | Qt::AlignRight);
    for (int p = 0; p < 6; ++p) {
        m_graphs[p] = m_plot->addGraph();
        m_graphs[p]->setName(phaseName(p));
        m_graphs[p]->setPen(QPen(kPhaseColors[p].darker(130), 0.5));
        m_graphs[p]->setBrush(kPhaseColors[p]);
        m_graphs[p]->setLineStyle(QCPGraph::lsLine);
        m_graphs[p]->setAdaptiveSampling(false); // the bars' corners are the data
    }
    m_peak = new QCPItemStraightLine(m_plot);
    m_peak->setPen(QPen(QColor(200, 30, 30), 1, Qt::DashLine));
    m_peak->setVisible(false);
    m_plot->installEventFilter(this);
    m_plot->setToolTip(QString()); // per bar, from the event filter
    layout->addWidget(m_plot, 1);
    showTimeline({}, tr("No step timed on the GPU yet."));
}

QString StepTimelineView::caption() const { return m_caption->text(); }

void StepTimelineView::showTimeline(const StepTimeline &t, const QString &whyEmpty) {
    if (m_shown && t == m_timeline && (!t.isEmpty() || whyEmpty == m_why)) return;
    m_shown = true;
    m_timeline = t;
    m_why = whyEmpty;
    // Without a timeline only the line saying why: the chart's room goes to the charts above.
    m_plot->setVisible(!t.isEmpty());
    double endUs = 0, bytes = 0, peakGbS = 0, busyUs = 0;
    QVector<QCPGraphData> data[6];
    const double nan = std::numeric_limits<double>::quiet_NaN();
    for (const TimelineOp &o : t.ops) {
        const int p = std::clamp(o.phase, 0, 5);
        const double y = gbPerS(o);
        // A launch with no modelled bytes still shows: a sliver at the bottom.
        const double h = o.bytes > 0 ? y : 0.0;
        data[p] << QCPGraphData(o.startUs, 0) << QCPGraphData(o.startUs, h) << QCPGraphData(o.startUs + o.durUs, h)
                << QCPGraphData(o.startUs + o.durUs, 0) << QCPGraphData(o.startUs + o.durUs, nan);
        endUs = std::max(endUs, o.startUs + o.durUs);
        bytes += o.bytes;
        busyUs += o.durUs;
        peakGbS = std::max(peakGbS, y);
    }
    for (int p = 0; p < 6; ++p) m_graphs[p]->data()->set(data[p], true);
    const double peak = t.readBandwidth / 1e9;
    m_peak->setVisible(peak > 0 && !t.isEmpty());
    m_peak->point1->setCoords(0, peak);
    m_peak->point2->setCoords(1, peak);
    m_plot->xAxis->setRange(0, std::max(1.0, endUs));
    m_plot->yAxis->setRange(0, std::max({1.0, peak, peakGbS}) * 1.1);
    if (t.isEmpty()) {
        m_caption->setText(whyEmpty);
    } else {
        const double achieved = busyUs > 0 ? bytes / (busyUs * 1e3) : 0.0;
        m_caption->setText(
            tr("Step %1: %2 launches in %3 µs on the GPU; %4 MB read at %5 GB/s%6")
                .arg(t.step)
                .arg(t.ops.size())
                .arg(endUs, 0, 'f', 1)
                .arg(bytes / 1e6, 0, 'f', 1)
                .arg(achieved, 0, 'f', 0)
                .arg(peak > 0 ? tr(" (%1% of the measured %2 GB/s; dashed line)").arg(100.0 * achieved / peak, 0, 'f', 0).arg(peak, 0, 'f', 0)
                              : QString()));
    }
    charts::queueReplot(m_plot);
}

int StepTimelineView::opAt(double xUs) const {
    for (qsizetype i = 0; i < m_timeline.ops.size(); ++i) {
        const TimelineOp &o = m_timeline.ops[i];
        if (xUs >= o.startUs && xUs < o.startUs + std::max(o.durUs, 0.05)) return int(i);
    }
    return -1;
}

QString StepTimelineView::describe(int i) const {
    if (i < 0 || i >= m_timeline.ops.size()) return {};
    const TimelineOp &o = m_timeline.ops[i];
    QString s = tr("%1 — %2").arg(o.name, phaseName(o.phase));
    if (o.layer >= 0) s += tr(", layer %1").arg(o.layer);
    s += QLatin1Char('\n') + tr("%1 µs, from %2 µs").arg(o.durUs, 0, 'f', 2).arg(o.startUs, 0, 'f', 1);
    if (o.bytes > 0) {
        const double gb = gbPerS(o);
        s += QLatin1Char('\n') + tr("%1 read at %2 GB/s").arg(charts::bytes(qint64(o.bytes))).arg(gb, 0, 'f', 0);
        if (m_timeline.readBandwidth > 0)
            s += tr(" (%1% of the device's measured read bandwidth)").arg(100.0 * gb * 1e9 / m_timeline.readBandwidth, 0, 'f', 0);
        if (o.shared > 0 && o.shared < 1)
            s += QLatin1Char('\n') + tr("%1% of its bytes are the shared experts': its time is split so between the MoE phases")
                                         .arg(100.0 * o.shared, 0, 'f', 0);
    } else {
        s += QLatin1Char('\n') + tr("(its bytes are not modelled)");
    }
    return s;
}

bool StepTimelineView::eventFilter(QObject *watched, QEvent *event) {
    if (watched == m_plot && event->type() == QEvent::ToolTip) {
        auto *help = static_cast<QHelpEvent *>(event);
        const int i = opAt(m_plot->xAxis->pixelToCoord(help->pos().x()));
        if (i >= 0)
            QToolTip::showText(help->globalPos(), describe(i), m_plot);
        else
            QToolTip::showText(help->globalPos(),
                               tr("One engine step timed on the GPU: each bar a launch, as wide as its time and as "
                                  "high as the bytes per second it read; the dashed line is the device's measured "
                                  "read bandwidth."),
                               m_plot);
        return true;
    }
    return QWidget::eventFilter(watched, event);
}

} // namespace es
