// MemoryUsageView (see memory_usage_view.h). The stack is four cumulative graphs, each filled
// down to the one below (QCustomPlot's channel fill), in GiB; "free" can be left out of the stack
// because on the CPU backend it is the machine's RAM and would flatten everything else. The KV
// band is the pool's memory now: a pool mapped on demand widens as requests need blocks and
// narrows when its top is given back.
#include "memory_usage_view.h"

#include "profiler_charts.h"

#include <QCheckBox>
#include <QLabel>
#include <QStringList>
#include <QVBoxLayout>

#include <qcustomplot.h>

namespace es {

namespace {
constexpr int kMapCols = 64;

// Byte axis: steps are round numbers of KiB/MiB/GiB (powers of 1024), labels say the unit.
class BytesTicker : public QCPAxisTicker {
protected:
    double getTickStep(const QCPRange &range) override {
        double unit = 1;
        while (range.size() / unit >= 2048) unit *= 1024;
        return cleanMantissa(range.size() / unit / (mTickCount + 1e-10)) * unit;
    }
    QString getTickLabel(double tick, const QLocale &, QChar, int) override {
        return charts::bytes(qint64(tick));
    }
};
} // namespace

// The device's memory accounted for: the backend's allocations by purpose, and what the device
// reports in use beyond them (the CUDA context's own, other processes'). Empty on the CPU.
QString MemoryUsageView::deviceAccounting(const MemoryView &m, const MemorySample &s) {
    const QString kv = m.kvNote.isEmpty() ? QString() : tr(" · KV pool: %1").arg(m.kvNote);
    if (m.deviceParts.isEmpty() || m.deviceTotal <= 0) return kv;
    QStringList parts;
    for (const auto &[name, bytes] : m.deviceParts)
        if (bytes > 0) parts << QStringLiteral("%1 %2").arg(name, charts::bytes(bytes));
    return tr(" · on the device: %1; in use beyond them %2 (the CUDA context, other processes)")
               .arg(parts.join(QStringLiteral(", ")), charts::bytes(s.other)) +
           kv;
}

MemoryUsageView::MemoryUsageView(QWidget *parent) : QWidget(parent) {
    auto *layout = new QVBoxLayout(this);
    layout->setContentsMargins(2, 2, 2, 2);
    m_summary = new QLabel(tr("No model loaded."), this);
    charts::fixLines(m_summary, 4);
    m_summary->setToolTip(ProfilerDefinitions::vram() + QLatin1Char('\n') +
                          ProfilerDefinitions::fragmentation());
    layout->addWidget(m_summary);

    m_stackPlot = charts::makePlot(this);
    m_stackPlot->xAxis->setLabel(tr("seconds"));
    m_stackPlot->yAxis->setTicker(QSharedPointer<QCPAxisTicker>(new BytesTicker));
    const QColor colors[5] = {QColor(70, 110, 190), QColor(230, 120, 40), QColor(150, 90, 170),
                              QColor(150, 150, 150), QColor(190, 220, 190)};
    const QString names[5] = {tr("weights"), tr("KV cache"), tr("workspace"), tr("other (libraries, context, other processes)"),
                              tr("free")};
    for (int i = 0; i < 5; ++i) {
        m_stack[i] = m_stackPlot->addGraph();
        m_stack[i]->setName(names[i]);
        m_stack[i]->setPen(QPen(colors[i].darker(120), 1));
        QColor fill = colors[i];
        fill.setAlpha(170);
        m_stack[i]->setBrush(fill);
        if (i > 0) m_stack[i]->setChannelFillGraph(m_stack[i - 1]);
    }
    // KV blocks actually in use, as a line inside the KV pool's band.
    m_kvUsed = m_stackPlot->addGraph();
    m_kvUsed->setName(tr("KV in use"));
    m_kvUsed->setPen(QPen(QColor(160, 60, 0), 1.5, Qt::DashLine));
    m_stackPlot->legend->setVisible(true);
    m_stackPlot->legend->setFont(m_stackPlot->xAxis->tickLabelFont());
    m_stackPlot->axisRect()->insetLayout()->setInsetAlignment(0, Qt::AlignLeft | Qt::AlignTop);
    m_stackPlot->setToolTip(ProfilerDefinitions::vram());
    layout->addWidget(m_stackPlot, 3);
    m_includeFree = new QCheckBox(tr("Stack free memory on top"), this);
    m_includeFree->setChecked(true);
    m_includeFree->setToolTip(
        tr("Free device memory as the top band. With the CPU backend it is the machine's "
           "available RAM, which would flatten everything else, so it starts unticked there."));
    connect(m_includeFree, &QCheckBox::toggled, this, [this](bool on) {
        m_stack[4]->setVisible(on);
        m_stack[4]->removeFromLegend();
        if (on) m_stack[4]->addToLegend();
        m_maxBytes = 0;
        const QCPGraph *top = m_stack[on ? 4 : 3];
        for (auto it = top->data()->constBegin(); it != top->data()->constEnd(); ++it)
            m_maxBytes = std::max(m_maxBytes, it->value);
        m_stackPlot->yAxis->setRange(0, std::max(1.0, m_maxBytes * 1.08));
        charts::queueReplot(m_stackPlot);
    });
    layout->addWidget(m_includeFree);

    m_ratioPlot = charts::makePlot(this);
    m_ratioPlot->yAxis->setRange(0, 1.05);
    m_ratioPlot->yAxis->setLabel(tr("ratio"));
    m_frag = m_ratioPlot->addGraph();
    m_frag->setName(tr("fragmentation"));
    m_frag->setPen(QPen(QColor(200, 40, 40), 1.5));
    m_waste = m_ratioPlot->addGraph();
    m_waste->setName(tr("KV waste"));
    m_waste->setPen(QPen(QColor(40, 140, 60), 1.5));
    m_ratioPlot->legend->setVisible(true);
    m_ratioPlot->legend->setFont(m_ratioPlot->xAxis->tickLabelFont());
    m_ratioPlot->setToolTip(ProfilerDefinitions::fragmentation());
    m_ratioPlot->setMinimumHeight(90);
    layout->addWidget(m_ratioPlot, 1);

    m_blockPlot = charts::makePlot(this);
    m_blockPlot->xAxis->setVisible(false);
    m_blockPlot->yAxis->setVisible(false);
    m_blockPlot->yAxis->setRangeReversed(true);
    m_blocks = new QCPColorMap(m_blockPlot->xAxis, m_blockPlot->yAxis);
    m_blocks->setInterpolate(false);
    m_blocks->setTightBoundary(false);
    QCPColorGradient g;
    g.clearColorStops();
    // Four levels over [0, 3]: used, cached, free, unmapped (a pool mapped on demand: no memory).
    g.setColorStopAt(0.0, QColor(220, 80, 40));        // used
    g.setColorStopAt(1.0 / 3.0, QColor(70, 120, 200)); // cached
    g.setColorStopAt(2.0 / 3.0, QColor(200, 200, 200)); // free
    g.setColorStopAt(1.0, QColor(245, 245, 245));       // unmapped
    g.setLevelCount(4);
    g.setNanHandling(QCPColorGradient::nhTransparent);
    m_blocks->setGradient(g);
    m_blocks->setDataRange(QCPRange(0, 3));
    m_blockPlot->setToolTip(ProfilerDefinitions::kvBlockMap());
    auto *legend = new QLabel(tr("KV block map: <span style='color:#dc5028'>■</span> in use "
                                 "<span style='color:#4678c8'>■</span> cached (free, reusable prefix) "
                                 "<span style='color:#b4b4b4'>■</span> free "
                                 "<span style='color:#dcdcdc'>□</span> no memory (mapped when needed)"),
                              this);
    legend->setToolTip(ProfilerDefinitions::kvBlockMap());
    legend->setWordWrap(true);
    layout->addWidget(legend);
    layout->addWidget(m_blockPlot, 2);
}

void MemoryUsageView::setIncludeFree(bool include) { m_includeFree->setChecked(include); }

QString MemoryUsageView::summary() const { return m_summary->text(); }

void MemoryUsageView::clear() {
    for (QCPGraph *g : m_stack) g->data()->clear();
    m_kvUsed->data()->clear();
    m_frag->data()->clear();
    m_waste->data()->clear();
    m_maxBytes = 0;
}

void MemoryUsageView::addSample(const MemoryView &m, double tS) {
    const MemorySample s = memorySample(m, tS);
    const double v[5] = {double(s.weights), double(s.weights + s.kvCache),
                         double(s.weights + s.kvCache + s.workspace),
                         double(s.weights + s.kvCache + s.workspace + s.other),
                         double(s.weights + s.kvCache + s.workspace + s.other + s.free)};
    for (int i = 0; i < 5; ++i) {
        m_stack[i]->data()->add(QCPGraphData(tS, v[i]));
        m_stack[i]->data()->removeBefore(tS - kWindowS);
    }
    m_kvUsed->data()->add(QCPGraphData(tS, double(s.weights + s.kvInUse)));
    m_kvUsed->data()->removeBefore(tS - kWindowS);
    m_frag->data()->add(QCPGraphData(tS, s.fragmentation));
    m_waste->data()->add(QCPGraphData(tS, s.kvWaste));
    m_frag->data()->removeBefore(tS - kWindowS);
    m_waste->data()->removeBefore(tS - kWindowS);
    m_maxBytes = std::max(m_maxBytes, m_stack[4]->visible() ? v[4] : v[3]);
    const double t0 = m_stack[0]->data()->isEmpty() ? tS : m_stack[0]->data()->constBegin()->key;
    m_stackPlot->xAxis->setRange(t0, std::max(t0 + 1, tS));
    m_stackPlot->yAxis->setRange(0, std::max(1.0, m_maxBytes * 1.08));
    m_ratioPlot->xAxis->setRange(t0, std::max(t0 + 1, tS));

    m_lastMap = kvBlockMap(m);
    const int cells = int(m_lastMap.cells.size());
    const int cols = std::min(kMapCols, std::max(1, cells));
    const int rows = std::max(1, (cells + cols - 1) / cols);
    if (m_blocks->data()->keySize() != cols || m_blocks->data()->valueSize() != rows) {
        m_blocks->data()->setSize(cols, rows);
        m_blocks->data()->setRange(QCPRange(0, cols - 1), QCPRange(0, rows - 1));
        m_blockPlot->xAxis->setRange(-0.5, cols - 0.5);
        m_blockPlot->yAxis->setRange(-0.5, rows - 0.5);
        m_blockPlot->yAxis->setRangeReversed(true);
    }
    for (int c = 0; c < cols * rows; ++c)
        m_blocks->data()->setCell(c % cols, c / cols,
                                  c < cells ? double(int(m_lastMap.cells[c]))
                                            : std::numeric_limits<double>::quiet_NaN());

    const qint64 used = memoryInUse(m);
    // A source without memory figures (a remote server's metrics have none): not available, not 0.
    if (used == 0 && m.deviceTotal == 0) {
        m_summary->setText(tr("Memory figures are not available from this source (a remote server reports none)."));
        for (QCustomPlot *p : {m_stackPlot, m_ratioPlot, m_blockPlot}) charts::queueReplot(p);
        return;
    }
    m_summary->setText(tr("In use %1 (weights %2, KV %3 of %4 mapped, of a %17 pool, workspace %5) · device total %6, "
                          "free %7 · allocator reserved %8, "
                          "in use %9, largest free %10 · fragmentation %11 · KV waste %12 · KV blocks %13 "
                          "used / %14 cached / %15 free "
                          "(%16 per cell)")
                           .arg(charts::bytes(used), charts::bytes(s.weights), charts::bytes(s.kvInUse),
                                charts::bytes(s.kvCache), charts::bytes(m.allocInUse),
                                m.deviceTotal > 0 ? charts::bytes(m.deviceTotal) : tr("not available"),
                                m.deviceTotal > 0 ? charts::bytes(m.deviceFree) : tr("not available"),
                                charts::bytes(m.allocReserved), charts::bytes(m.allocInUse))
                           .arg(charts::bytes(m.allocLargestFree))
                           .arg(m.fragmentation, 0, 'f', 3)
                           .arg(m.kvWaste, 0, 'f', 3)
                           .arg(m_lastMap.used)
                           .arg(m_lastMap.cached)
                           .arg(m_lastMap.free)
                           .arg(m_lastMap.blocksPerCell)
                           .arg(charts::bytes(s.kvCapacity)) +
                       deviceAccounting(m, s));
    for (QCustomPlot *p : {m_stackPlot, m_ratioPlot, m_blockPlot}) charts::queueReplot(p);
}

} // namespace es
