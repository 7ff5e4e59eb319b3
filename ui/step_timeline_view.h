// One engine step's launches on a time axis (the step timeline of a step timed on the device):
// each launch a bar as wide as its time and as high as the bytes per second it read, coloured by
// phase, against the device's measured read bandwidth; hovering a bar names the launch, its
// layer, time, bytes and share of the peak. Empty (with a line saying why) where no step was
// timed on a device: the CPU, a remote server, or no step yet.
#pragma once

#include "storage_types.h"

#include <QWidget>

class QCustomPlot;
class QCPGraph;
class QCPItemStraightLine;
class QLabel;

namespace es {

class StepTimelineView : public QWidget {
    Q_OBJECT
public:
    explicit StepTimelineView(QWidget *parent = nullptr);

    // Draws t (the same step again: nothing to do). whyEmpty is shown when t is empty.
    void showTimeline(const StepTimeline &t, const QString &whyEmpty = {});
    const StepTimeline &timeline() const { return m_timeline; }
    QString caption() const;
    // The launch at time x (µs on the step's axis), or -1.
    int opAt(double xUs) const;
    // What the tooltip over launch i says.
    QString describe(int i) const;

    // The phase names, in es::step_phase order, as the charts label them.
    static QString phaseName(int phase);

protected:
    bool eventFilter(QObject *watched, QEvent *event) override;

private:
    QLabel *m_caption = nullptr;
    QCustomPlot *m_plot = nullptr;
    QCPGraph *m_graphs[6] = {};
    QCPItemStraightLine *m_peak = nullptr;
    StepTimeline m_timeline;
    QString m_why; // the line shown while there is no timeline
    bool m_shown = false;
};

} // namespace es
