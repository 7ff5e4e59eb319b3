// Shared pieces of the profiler's QCustomPlot charts: a plot set up the same way everywhere
// (small fonts, no interaction that would fight the refresh timer), the colour gradients, and
// the metric definitions shown in tooltips — worded exactly as the metrics table of
// ARCHITECTURE.md ("Metric definitions"), the one source of truth for tooltips, reports and docs.
#pragma once

#include <QCoreApplication>
#include <QSharedPointer>
#include <QString>

class QCustomPlot;
class QCPAxisTicker;
class QCPAxisTickerText;
class QCPColorGradient;
class QLabel;
class QWidget;

namespace es {

class ProfilerDefinitions {
    Q_DECLARE_TR_FUNCTIONS(ProfilerDefinitions)
public:
    static QString ttft();
    static QString itl();
    static QString decodeTokS();
    static QString expertLoad();
    static QString imbalance();
    static QString vram();
    static QString fragmentation();
    static QString jensenShannon();
    static QString percentiles();
    static QString phases();
    static QString kvBlockMap();
    static QString sharedAndDense();
};

namespace charts {

// The plot follows its palette: background, axes, grid, tick labels, legend and default-coloured
// texts take their colours from it when it is first shown and whenever the palette changes (a
// theme switched while the app runs), so a dark theme reaches the charts too.
QCustomPlot *makePlot(QWidget *parent);
// The palette colours onto plot's background, axes (colour scales' included), grids, legends and
// the texts still in the previous palette's text colour; data colours stay. Does not replot.
void applyPalette(QCustomPlot *plot);
QCPColorGradient shareGradient();            // token share, 0 → light, high → dark; NaN grey
QCPColorGradient categoricalGradient(int n); // n distinct hues for expert ids; NaN grey
QString bytes(qint64 b);                     // "1.5 GiB"
// Ticks on whole numbers only (token positions, reply numbers): never "757.5".
QSharedPointer<QCPAxisTicker> integerTicker();
// The expert axis of a layer × expert heatmap: every 1st, 2nd, 4th or 8th routed expert by
// count, then the shared experts at the same step, labelled sharedFormat.arg(s) ("S0", …).
// Where the step is more than one, a routed tick within one step of "S0" is left out, so
// "10" and "S0" of 12 + 1 experts, or "S0" and "S1" of 64 + 2, do not run into each other.
// minStep: at least this step (a narrow plot's, so the labels do not run together).
QSharedPointer<QCPAxisTickerText> expertTicker(int nExperts, int nShared, const QString &sharedFormat,
                                               int minStep = 1);
// The plot's x axis as an expert axis (expertTicker) whose step also keeps every label clear of
// its neighbours at the plot's width, recomputed whenever the plot is resized.
void setExpertAxis(QCustomPlot *plot, int nExperts, int nShared, const QString &sharedFormat);
// replot(rpQueuedReplot) when the plot is on screen; a hidden plot is left stale (QCustomPlot
// would still render its buffers) and replotStale() catches up when its page is shown.
void queueReplot(QCustomPlot *plot);
// A word-wrapped label whose text changes every tick, kept at a fixed height of `lines` lines so
// a new text never re-lays out the page around it.
void fixLines(QLabel *label, int lines);
void replotStale(QWidget *root);

} // namespace charts
} // namespace es
