// CompareView (see compare_view.h). Both heatmaps share one colour range so equal colours mean
// equal shares; dense layers and shared experts are grey, as on the Routing page.
#include "compare_view.h"

#include "flow_layout.h"
#include "profiler_charts.h"
#include "text_diff.h"

#include <QCheckBox>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>
#include <QTextBrowser>
#include <QVBoxLayout>

#include <qcustomplot.h>

#include <cmath>

namespace es {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

QCPColorMap *addMap(QCustomPlot *plot) {
    plot->yAxis->setRangeReversed(true);
    auto *map = new QCPColorMap(plot->xAxis, plot->yAxis);
    map->setInterpolate(false);
    map->setTightBoundary(false);
    map->setGradient(charts::shareGradient());
    return map;
}
} // namespace

CompareView::CompareView(QWidget *parent) : QWidget(parent) {
    auto *layout = new QVBoxLayout(this);
    layout->setContentsMargins(2, 2, 2, 2);
    // The buttons wrap onto a second row in a narrow dock instead of widening it.
    auto *buttonRow = new QWidget(this);
    auto *buttons = new FlowLayout(buttonRow, 6);
    auto *a = new QPushButton(tr("Selected → A"), this);
    auto *b = new QPushButton(tr("Selected → B"), this);
    auto *swap = new QPushButton(tr("Swap"), this);
    a->setToolTip(tr("Compare the message selected in the chat (click a message's header) as A"));
    b->setToolTip(tr("Compare the message selected in the chat as B"));
    buttons->addWidget(a);
    buttons->addWidget(b);
    buttons->addWidget(swap);
    m_replyOnly = new QCheckBox(tr("Reply tokens only"), this);
    m_replyOnly->setToolTip(tr("Count only the positions the model generated, not the prompt. A mode prefix "
                               "changes the prompt itself; this shows whether it also steers the experts "
                               "of the answer."));
    buttons->addWidget(m_replyOnly);
    connect(m_replyOnly, &QCheckBox::toggled, this, &CompareView::replyTokensOnlyChanged);
    layout->addWidget(buttonRow);
    connect(a, &QPushButton::clicked, this, &CompareView::useSelectedAsA);
    connect(b, &QPushButton::clicked, this, &CompareView::useSelectedAsB);
    connect(swap, &QPushButton::clicked, this, &CompareView::swapRequested);

    auto *grid = new QGridLayout;
    m_titleA = new QLabel(tr("A: none — select a message"), this);
    m_titleB = new QLabel(tr("B: none — select a message"), this);
    for (QLabel *l : {m_titleA, m_titleB}) {
        charts::fixLines(l, 2);
        l->setTextFormat(Qt::PlainText);
    }
    m_plotA = charts::makePlot(this);
    m_plotB = charts::makePlot(this);
    m_plotA->yAxis->setLabel(tr("layer"));
    m_plotA->xAxis->setLabel(tr("expert"));
    m_plotB->xAxis->setLabel(tr("expert"));
    m_mapA = addMap(m_plotA);
    m_mapB = addMap(m_plotB);
    const QString tip =
        ProfilerDefinitions::expertLoad() + QLatin1Char('\n') + ProfilerDefinitions::sharedAndDense();
    m_plotA->setToolTip(tip);
    m_plotB->setToolTip(tip);
    grid->addWidget(m_titleA, 0, 0);
    grid->addWidget(m_titleB, 0, 1);
    grid->addWidget(m_plotA, 1, 0);
    grid->addWidget(m_plotB, 1, 1);
    layout->addLayout(grid, 3);

    m_jsPlot = charts::makePlot(this);
    m_jsPlot->xAxis->setLabel(tr("layer"));
    m_jsPlot->yAxis->setLabel(tr("JS divergence (nats)"));
    m_jsPlot->yAxis->setRange(0, kJensenShannonMax * 1.12);
    m_bars = new QCPBars(m_jsPlot->xAxis, m_jsPlot->yAxis);
    m_bars->setWidth(0.7);
    m_bars->setBrush(QColor(70, 110, 190));
    m_bars->setPen(Qt::NoPen);
    auto *cap = new QCPItemStraightLine(m_jsPlot);
    cap->point1->setCoords(0, kJensenShannonMax);
    cap->point2->setCoords(1, kJensenShannonMax);
    cap->setPen(QPen(Qt::gray, 1, Qt::DashLine));
    auto *capText = new QCPItemText(m_jsPlot);
    capText->position->setCoords(0, kJensenShannonMax);
    capText->position->setType(QCPItemPosition::ptPlotCoords);
    capText->setPositionAlignment(Qt::AlignLeft | Qt::AlignBottom);
    capText->setText(tr("ln 2 (disjoint)"));
    capText->setFont(m_jsPlot->xAxis->tickLabelFont());
    capText->setColor(Qt::gray);
    m_jsPlot->setToolTip(ProfilerDefinitions::jensenShannon());
    layout->addWidget(m_jsPlot, 2);
    m_summary = new QLabel(this);
    m_summary->setToolTip(ProfilerDefinitions::jensenShannon());
    layout->addWidget(m_summary);

    // The replies' words: what B says that A does not (yellow), what only A says (struck out).
    m_textSummary = new QLabel(this);
    m_textSummary->setWordWrap(true);
    layout->addWidget(m_textSummary);
    m_text = new QTextBrowser(this);
    m_text->setOpenLinks(false);
    m_text->setToolTip(tr("B's reply against A's, word by word: yellow — only in B; struck out — only in A"));
    layout->addWidget(m_text, 2);
}

QString CompareView::textSummary() const { return m_textSummary->text(); }

QString CompareView::summary() const { return m_summary->text(); }

bool CompareView::replyTokensOnly() const { return m_replyOnly->isChecked(); }

void CompareView::setReplyTokensOnly(bool on) { m_replyOnly->setChecked(on); }

void CompareView::fillMap(QCustomPlot *plot, QCPColorMap *map, const Side &side, double maxShare) {
    const RoutingMatrix &m = side.matrix;
    int maxLayer = -1;
    for (int l : m.layers) maxLayer = std::max(maxLayer, l);
    // Bounded as in RoutingView::showMatrix: the map and its ticks are sized by these.
    const int nLayers = std::clamp(std::max(side.nLayers, maxLayer + 1), 0, kMaxProfileLayers);
    const int nExperts = std::clamp(m.nExperts, 0, kMaxProfileExperts);
    const int nShared = std::clamp(side.nSharedExperts, 0, kMaxProfileExperts);
    const int nx = std::max(1, nExperts + nShared), ny = std::max(1, nLayers);
    if (map->data()->keySize() != nx || map->data()->valueSize() != ny) {
        map->data()->setSize(nx, ny);
        map->data()->setRange(QCPRange(0, nx - 1), QCPRange(0, ny - 1));
    }
    map->data()->fill(kNaN);
    for (int r = 0; r < m.rows(); ++r) {
        const QList<double> share = expertShares(m.row(r));
        for (int e = 0; e < nExperts; ++e) map->data()->setCell(e, m.layers[r], share[e]);
    }
    map->setDataRange(QCPRange(0, maxShare));
    plot->xAxis->setRange(-0.5, nx - 0.5);
    plot->yAxis->setRange(-0.5, ny - 0.5);
    plot->yAxis->setRangeReversed(true);
    QSharedPointer<QCPAxisTickerText> yt(new QCPAxisTickerText);
    for (int l = 0; l < nLayers; ++l)
        yt->addTick(l, m.layers.contains(l) ? tr("L%1").arg(l) : tr("L%1 dense").arg(l));
    plot->yAxis->setTicker(yt);
    charts::setExpertAxis(plot, nExperts, nShared, tr("S%1"));
    charts::queueReplot(plot);
}

void CompareView::showPair(const Side &a, const Side &b) {
    m_titleA->setText(a.isEmpty() ? tr("A: none — select a message and press “Selected → A”")
                                  : tr("A: %1").arg(a.title));
    m_titleB->setText(b.isEmpty() ? tr("B: none — select a message and press “Selected → B”")
                                  : tr("B: %1").arg(b.title));
    double maxShare = 0;
    for (const Side *s : {&a, &b})
        for (int r = 0; r < s->matrix.rows(); ++r)
            for (double v : expertShares(s->matrix.row(r))) maxShare = std::max(maxShare, v);
    const int nExperts = std::max(a.matrix.nExperts, b.matrix.nExperts);
    maxShare = std::min(1.0, std::max(maxShare, nExperts > 0 ? 2.0 / nExperts : 1.0));
    fillMap(m_plotA, m_mapA, a, maxShare);
    fillMap(m_plotB, m_mapB, b, maxShare);

    m_divergences =
        (a.isEmpty() || b.isEmpty()) ? QList<LayerDivergence>{} : jensenShannonPerLayer(a.matrix, b.matrix);
    QList<double> keys, values;
    double sum = 0;
    int n = 0;
    for (const LayerDivergence &d : std::as_const(m_divergences)) {
        if (std::isnan(d.js)) continue;
        keys << d.layer;
        values << d.js;
        sum += d.js;
        ++n;
    }
    m_bars->setData(keys, values, true);
    const int nLayers = std::min(std::max({a.nLayers, b.nLayers, keys.isEmpty() ? 0 : int(keys.last()) + 1}),
                                 kMaxProfileLayers);
    QSharedPointer<QCPAxisTickerText> xt(new QCPAxisTickerText);
    for (int l = 0; l < nLayers; ++l)
        xt->addTick(l, a.matrix.layers.contains(l) || b.matrix.layers.contains(l) ? tr("L%1").arg(l)
                                                                                  : tr("L%1\ndense").arg(l));
    m_jsPlot->xAxis->setTicker(xt);
    m_jsPlot->xAxis->setRange(-0.6, std::max(1, nLayers) - 0.4);
    charts::queueReplot(m_jsPlot);
    if (a.title.isEmpty() || b.title.isEmpty()) { // a side without a message
        m_diffHtml.clear();
        m_textSummary->setText(tr("Pick two replies to see which words changed."));
    } else {
        const TextDiff d = diffTexts(a.text, b.text);
        m_diffHtml = diffHtml(d);
        m_textSummary->setText(
            tr("Words: %1 of A's %2 kept in B (%3 in B)%4")
                .arg(d.unitsSame)
                .arg(d.unitsA)
                .arg(d.unitsB)
                .arg(d.truncated ? tr("; the long middle is compared as one block") : QString()));
    }
    m_text->setHtml(m_diffHtml);
    if (n == 0)
        m_summary->setText(tr("Pick two messages to compare their routing."));
    else
        m_summary->setText(tr("Mean JS divergence over %1 MoE layers: %2 nats (%3% of ln 2), %4")
                               .arg(n)
                               .arg(sum / n, 0, 'f', 4)
                               .arg(100.0 * sum / n / kJensenShannonMax, 0, 'f', 1)
                               .arg(replyTokensOnly() ? tr("reply tokens only") : tr("prompt and reply")));
}

} // namespace es
