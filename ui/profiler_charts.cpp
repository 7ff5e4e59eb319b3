// Shared chart set-up and metric definitions (see profiler_charts.h).
#include "profiler_charts.h"

#include "storage_types.h"

#include <QEvent>
#include <QFontMetrics>
#include <QLabel>

#include <qcustomplot.h>

namespace es {

// Each definition is a plain sentence first (what the figure tells), then its exact definition.
QString ProfilerDefinitions::ttft() {
    return tr("Time to first token: how long the reply took to start.\n"
              "TTFT: request submitted → first generated token available (ms).");
}
QString ProfilerDefinitions::itl() {
    return tr("Inter-token latency: how long each next word piece of the reply took.\n"
              "ITL: gap between consecutive generated tokens of one request (ms); reported as p50/p90/p99.");
}
QString ProfilerDefinitions::decodeTokS() {
    return tr("Decode speed: how many tokens the reply produced per second once it had started.\n"
              "decode tok/s: (n_out − 1) / (t_last − t_first) per request; per step: tokens decoded / step "
              "time. Over time: the tokens after the first in each quarter-second bin / the bin's length.");
}
QString ProfilerDefinitions::expertLoad() {
    return tr("Expert load: how the tokens of each layer were shared out among its experts; a darker cell "
              "is an expert that took more of that layer's tokens.\n"
              "expert load: c[l][e] = token-slots routed to expert e in layer l over a window; share = c / Σc.");
}
QString ProfilerDefinitions::imbalance() {
    return tr("Balance: how evenly each layer spread its tokens over its experts, and how many experts it "
              "never used.\n"
              "imbalance: max(c)/mean(c) per layer; balancedness = mean/max; entropy H(share)/ln E; "
              "dead experts = #{c = 0}.");
}
QString ProfilerDefinitions::vram() {
    return tr("Memory: what the model's weights, the cached keys and values and the working buffers take, "
              "and what is left.\n"
              "VRAM: weights, KV pool (the memory it has mapped now, of its capacity), workspace, allocator "
              "reserved / in use / free, device total/free. With the CPU backend: the engine's own accounting "
              "and the machine's RAM.");
}
QString ProfilerDefinitions::fragmentation() {
    return tr("Fragmentation: how scattered the free memory is; KV waste: how much of the cache's blocks "
              "holds no token.\n"
              "fragmentation: 1 − largest free block / total free (0 when nothing is free); KV waste = 1 − "
              "tokens stored / (blocks used × block size).");
}
QString ProfilerDefinitions::jensenShannon() {
    return tr("Routing difference: how differently the two messages used the experts of each layer, from "
              "0 (the same) to the most (no expert in common).\n"
              "Jensen–Shannon divergence of the two messages' expert shares per layer: JS = ½ KL(P‖M) + ½ "
              "KL(Q‖M), M = ½(P + Q), natural log, so 0 (same routing) … ln 2 ≈ 0.693 (disjoint experts).");
}
QString ProfilerDefinitions::percentiles() {
    return tr("Percentiles: p50 is the typical gap, p90 and p99 the slow ones.\n"
              "Percentiles by linear interpolation between closest ranks: rank (n − 1)·q (numpy's default).");
}
QString ProfilerDefinitions::phases() {
    return tr("Where the engine spent its time while it computed this reply.\n"
              "Engine time per phase over the steps that computed the reply; a step shared with other replies "
              "counts in proportion to this reply's tokens in it: attention (norms, q/k/v, RoPE, KV write, "
              "attention, output projection), MoE routed (router, routed experts), MoE shared (shared experts), "
              "dense (dense MLP layers), head and sampling (the LM head and the sampler), other (scheduling, "
              "embedding, transfers, emitting text). On the GPU the phases are timed on the device in one step "
              "in 64 and each reply's first two (every step with \"Time every step\"), and scaled to the time "
              "of all the reply's steps.");
}
QString ProfilerDefinitions::kvBlockMap() {
    return tr("Which blocks of the key and value cache hold a conversation now, which keep a reusable prompt "
              "and which are free.\n"
              "KV block map: the paged KV cache's blocks (16 tokens each) in use, cached (free, holding a "
              "reusable prefix), free, and without memory (the top of a pool mapped on demand: mapped when "
              "requests need it, given back when they are done), one cell per block in pool order (where they "
              "lie, not only how many). A source that reports only counts (a remote server) is drawn grouped "
              "by state.");
}
QString ProfilerDefinitions::sharedAndDense() {
    return tr(
        "Grey rows are dense layers (no router); grey columns on the right are shared experts, which see "
        "every token and are not part of the routed share.");
}

namespace charts {

namespace {

// Re-colours its plot when the plot is first polished (the page has added its colour scales and
// texts by then) and on every palette change after.
class PaletteFollower : public QObject {
public:
    using QObject::QObject;

protected:
    bool eventFilter(QObject *watched, QEvent *event) override {
        const QEvent::Type t = event->type();
        if (t == QEvent::Polish || t == QEvent::PaletteChange || t == QEvent::ApplicationPaletteChange) {
            auto *plot = static_cast<QCustomPlot *>(watched);
            applyPalette(plot);
            if (t != QEvent::Polish) queueReplot(plot);
        }
        return false;
    }
};

void colourAxis(QCPAxis *a, const QColor &ink, const QColor &grid, const QColor &subGrid) {
    const QPen line(ink, 0);
    a->setBasePen(line);
    a->setTickPen(line);
    a->setSubTickPen(line);
    a->setTickLabelColor(ink);
    a->setLabelColor(ink);
    a->grid()->setPen(QPen(grid, 0, Qt::DotLine));
    a->grid()->setSubGridPen(QPen(subGrid, 0, Qt::DotLine));
    a->grid()->setZeroLinePen(Qt::NoPen);
}

} // namespace

void applyPalette(QCustomPlot *p) {
    const QPalette &pal = p->palette();
    const QColor ink = pal.color(QPalette::WindowText);
    QColor grid = ink, subGrid = ink;
    grid.setAlpha(70);
    subGrid.setAlpha(30);
    p->setBackground(pal.brush(QPalette::Base));
    for (QCPAxisRect *r : p->axisRects())
        for (QCPAxis *a : r->axes()) colourAxis(a, ink, grid, subGrid);
    for (QCPLayoutElement *e : p->plotLayout()->elements(true))
        if (auto *scale = qobject_cast<QCPColorScale *>(e)) colourAxis(scale->axis(), ink, grid, subGrid);
    QList<QCPLegend *> legends{p->legend};
    for (QCPAxisRect *r : p->axisRects())
        for (QCPLayoutElement *e : r->insetLayout()->elements(false))
            if (auto *legend = qobject_cast<QCPLegend *>(e); legend && !legends.contains(legend)) legends << legend;
    for (QCPLegend *legend : legends) {
        if (!legend) continue;
        legend->setBrush(pal.brush(QPalette::Base));
        legend->setBorderPen(QPen(pal.color(QPalette::Mid), 0));
        legend->setTextColor(ink);
    }
    // "No data" cells (dense layers, shared experts) in a grey between the palette's base and
    // text on a dark palette; the light grey the page chose on a light one.
    const bool dark = pal.color(QPalette::Base).lightness() < 128;
    for (int i = 0; i < p->plottableCount(); ++i) {
        auto *map = qobject_cast<QCPColorMap *>(p->plottable(i));
        if (!map) continue;
        QCPColorGradient g = map->gradient();
        if (!map->property("esLightNan").isValid()) map->setProperty("esLightNan", g.nanColor());
        g.setNanColor(dark ? QColor(88, 88, 94) : map->property("esLightNan").value<QColor>());
        map->setGradient(g);
    }
    // Texts in the last ink (QCustomPlot's black at first) follow; a text given a colour of its
    // own keeps it.
    const QColor lastInk = p->property("esInk").value<QColor>().isValid() ? p->property("esInk").value<QColor>()
                                                                          : QColor(Qt::black);
    for (int i = 0; i < p->itemCount(); ++i)
        if (auto *text = qobject_cast<QCPItemText *>(p->item(i)); text && text->color() == lastInk) text->setColor(ink);
    p->setProperty("esInk", ink);
}

QCustomPlot *makePlot(QWidget *parent) {
    auto *p = new QCustomPlot(parent);
    QFont f = p->font();
    f.setPointSizeF(std::max(6.0, f.pointSizeF() - 1.0));
    for (QCPAxis *a : {p->xAxis, p->yAxis, p->xAxis2, p->yAxis2}) {
        a->setTickLabelFont(f);
        a->setLabelFont(f);
    }
    // Antialiasing roughly doubles a replot's cost and buys little on bars, cells and step lines;
    // the panel replots up to 20 times a second while the engine wants the CPU.
    p->setNotAntialiasedElements(QCP::aeAll);
    p->setPlottingHint(QCP::phFastPolylines, true);
    p->setNoAntialiasingOnDrag(true);
    p->setInteractions({});
    p->setMinimumHeight(120);
    p->setMouseTracking(true);
    p->installEventFilter(new PaletteFollower(p));
    return p;
}

QCPColorGradient shareGradient() {
    QCPColorGradient g;
    g.clearColorStops();
    g.setColorStopAt(0.0, QColor(250, 250, 240));
    g.setColorStopAt(0.35, QColor(253, 174, 97));
    g.setColorStopAt(0.7, QColor(215, 48, 39));
    g.setColorStopAt(1.0, QColor(90, 10, 40));
    g.setNanHandling(QCPColorGradient::nhNanColor);
    g.setNanColor(QColor(200, 200, 200));
    return g;
}

QCPColorGradient categoricalGradient(int n) {
    QCPColorGradient g;
    g.clearColorStops();
    n = std::clamp(n, 2, kMaxProfileExperts); // one stop per expert: never more than a model has
    for (int i = 0; i < n; ++i) {
        // Golden-angle hues: neighbouring ids get distant colours.
        const int hue = int(std::fmod(i * 137.508, 360.0));
        g.setColorStopAt(double(i) / double(n - 1),
                         QColor::fromHsv(hue, 170 + (i % 3) * 30, 230 - (i % 2) * 50));
    }
    g.setLevelCount(n);
    g.setNanHandling(QCPColorGradient::nhNanColor);
    g.setNanColor(QColor(225, 225, 225));
    return g;
}

void queueReplot(QCustomPlot *plot) {
    if (plot->isVisible()) {
        plot->setProperty("esStale", false);
        plot->replot(QCustomPlot::rpQueuedReplot);
    } else {
        plot->setProperty("esStale", true);
    }
}

void fixLines(QLabel *label, int lines) {
    label->setWordWrap(true);
    label->setAlignment(Qt::AlignLeft | Qt::AlignTop);
    label->setFixedHeight(label->fontMetrics().lineSpacing() * lines + 2 * label->margin() + 4);
    label->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Fixed);
}

void replotStale(QWidget *root) {
    for (QCustomPlot *p : root->findChildren<QCustomPlot *>())
        if (p->property("esStale").toBool() && p->isVisible()) {
            p->setProperty("esStale", false);
            p->replot(QCustomPlot::rpQueuedReplot);
        }
}

QSharedPointer<QCPAxisTicker> integerTicker() {
    QSharedPointer<QCPAxisTickerFixed> t(new QCPAxisTickerFixed);
    t->setTickStep(1);
    t->setScaleStrategy(QCPAxisTickerFixed::ssMultiples);
    return t;
}

QSharedPointer<QCPAxisTickerText> expertTicker(int nExperts, int nShared, const QString &sharedFormat,
                                               int minStep) {
    QSharedPointer<QCPAxisTickerText> t(new QCPAxisTickerText);
    const int every =
        std::max(std::max(1, minStep), nExperts > 32 ? 8 : nExperts > 16 ? 4 : nExperts > 8 ? 2 : 1);
    for (int e = 0; e < nExperts; e += every)
        if (nShared == 0 || every == 1 || nExperts - e > every) t->addTick(e, QString::number(e));
    for (int s = 0; s < nShared; s += every) t->addTick(nExperts + s, sharedFormat.arg(s));
    return t;
}

namespace {

// Keeps a plot's expert axis fitted to its width: the shape is kept in the plot's properties and
// every resize recomputes the step.
class ExpertAxisFitter : public QObject {
public:
    using QObject::QObject;
    static void apply(QCustomPlot *plot) {
        const int nExperts = plot->property("esExperts").toInt(), nShared = plot->property("esShared").toInt();
        const QString format = plot->property("esSharedFormat").toString();
        const int n = std::max(1, nExperts + nShared);
        // The axis rect's width after the next layout: the plot's width less its current margins.
        const int margins = plot->axisRect()->width() > 0 ? plot->width() - plot->axisRect()->width() : 100;
        const double perExpert = std::max(1, plot->width() - margins) / double(n);
        const QFontMetrics fm(plot->xAxis->tickLabelFont());
        int label = fm.horizontalAdvance(QString::number(std::max(0, nExperts - 1)));
        if (nShared > 0) label = std::max(label, fm.horizontalAdvance(format.arg(nShared - 1)));
        int step = 1;
        while (step < n && step * perExpert < label + fm.horizontalAdvance(QLatin1Char(' ')) * 2) step *= 2;
        if (plot->property("esExpertStep").toInt() == step && plot->xAxis->ticker()) return;
        plot->setProperty("esExpertStep", step);
        plot->xAxis->setTicker(expertTicker(nExperts, nShared, format, step));
        queueReplot(plot);
    }
    bool eventFilter(QObject *watched, QEvent *event) override {
        if (event->type() == QEvent::Resize)
            if (auto *plot = qobject_cast<QCustomPlot *>(watched)) apply(plot);
        return false;
    }
};

} // namespace

void setExpertAxis(QCustomPlot *plot, int nExperts, int nShared, const QString &sharedFormat) {
    plot->setProperty("esExperts", nExperts);
    plot->setProperty("esShared", nShared);
    plot->setProperty("esSharedFormat", sharedFormat);
    plot->setProperty("esExpertStep", 0);
    if (!plot->property("esExpertFitter").toBool()) {
        plot->installEventFilter(new ExpertAxisFitter(plot));
        plot->setProperty("esExpertFitter", true);
    }
    ExpertAxisFitter::apply(plot);
}

QString bytes(qint64 b) {
    if (b <= 0) return QStringLiteral("0");
    const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = double(b);
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        ++u;
    }
    return QStringLiteral("%1 %2").arg(v, 0, 'f', u == 0 ? 0 : 1).arg(QLatin1String(units[u]));
}

} // namespace charts
} // namespace es
