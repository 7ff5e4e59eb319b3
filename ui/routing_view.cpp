// RoutingView (see routing_view.h). Cells hold the share c/Σc of each MoE layer's row, so a row
// sums to 1 and an evenly balanced layer is 1/E everywhere; the colour range is fixed at
// [0, max(2/E, largest share)] so "even" keeps its colour while the data changes.
#include "routing_view.h"

#include "profiler_charts.h"

#include <QComboBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QKeyEvent>
#include <QLabel>
#include <QMenu>
#include <QSplitter>
#include <QTableWidget>
#include <QToolTip>
#include <QVBoxLayout>

#include <qcustomplot.h>

#include <cmath>

namespace es {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

QString fmt(double v, int decimals) {
    return std::isnan(v) ? QStringLiteral("–") : QString::number(v, 'f', decimals);
}
} // namespace

RoutingView::RoutingView(QWidget *parent) : QWidget(parent) {
    auto *layout = new QVBoxLayout(this);
    layout->setContentsMargins(2, 2, 2, 2);
    auto *top = new QHBoxLayout;
    m_source = new QComboBox(this);
    m_source->addItem(tr("Live (recent engine steps)"), int(Source::LiveWindow));
    m_source->addItem(tr("Selected message"), int(Source::SelectedMessage));
    m_source->addItem(tr("Whole conversation"), int(Source::Conversation));
    m_source->setToolTip(
        tr("What the heatmap counts: the engine's sliding window of recent steps, the selected (or "
           "latest) reply, or every finished reply of the current conversation's active branch"));
    m_caption = new QLabel(this);
    charts::fixLines(m_caption, 2);
    top->addWidget(m_source);
    top->addWidget(m_caption, 1);
    layout->addLayout(top);

    auto *split = new QSplitter(Qt::Vertical, this);
    auto *upper = new QWidget(split);
    auto *upperLayout = new QHBoxLayout(upper);
    upperLayout->setContentsMargins(0, 0, 0, 0);

    m_plot = charts::makePlot(upper);
    m_plot->xAxis->setLabel(tr("expert"));
    m_plot->yAxis->setLabel(tr("layer"));
    m_plot->yAxis->setRangeReversed(true); // layer 0 at the top, as in the model
    m_map = new QCPColorMap(m_plot->xAxis, m_plot->yAxis);
    m_map->setInterpolate(false);
    m_map->setTightBoundary(false);
    m_scale = new QCPColorScale(m_plot);
    m_scale->setType(QCPAxis::atRight);
    m_scale->setBarWidth(8);
    m_scale->axis()->setLabel(tr("token share"));
    m_scale->axis()->setTickLabelFont(m_plot->xAxis->tickLabelFont());
    m_scale->axis()->setLabelFont(m_plot->xAxis->labelFont());
    m_plot->plotLayout()->addElement(0, 1, m_scale);
    m_map->setColorScale(m_scale);
    m_map->setGradient(charts::shareGradient()); // after setColorScale, which adopts the scale's gradient
    auto *group = new QCPMarginGroup(m_plot);
    m_plot->axisRect()->setMarginGroup(QCP::msBottom | QCP::msTop, group);
    m_scale->setMarginGroup(QCP::msBottom | QCP::msTop, group);
    m_sharedLabel = new QCPItemText(m_plot);
    m_sharedLabel->setPositionAlignment(Qt::AlignHCenter | Qt::AlignBottom);
    m_sharedLabel->setText(tr("shared"));
    m_sharedLabel->setFont(m_plot->xAxis->tickLabelFont());
    m_sharedLabel->setClipToAxisRect(false);
    m_sharedLabel->setVisible(false);
    m_plot->setToolTip(ProfilerDefinitions::expertLoad() + QLatin1Char('\n') +
                       ProfilerDefinitions::sharedAndDense());
    // Narrow docks: the plot and the table give up width (the table scrolls) rather than widen
    // the dock past its share of the window.
    m_plot->setMinimumSize(220, 120); // the axes and the colour scale take about 90 of it
    upperLayout->addWidget(m_plot, 3);

    m_table = new QTableWidget(0, 3, upper);
    m_table->setHorizontalHeaderLabels({tr("max/mean"), tr("H/ln E"), tr("dead")});
    m_table->horizontalHeaderItem(0)->setToolTip(
        tr("Imbalance: how much busier the busiest expert is than the average one; 1 is perfectly even.\n"
           "max(c)/mean(c)"));
    m_table->horizontalHeaderItem(1)->setToolTip(
        tr("Spread: how evenly the tokens are spread over all experts; 1 is perfectly even, near 0 is one "
           "expert taking nearly everything.\nnormalized entropy H(share)/ln E"));
    m_table->horizontalHeaderItem(2)->setToolTip(
        tr("Dead experts: how many experts of the layer received no token at all.\n#{c = 0}"));
    m_table->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_table->setSelectionMode(QAbstractItemView::NoSelection);
    m_table->verticalHeader()->setDefaultSectionSize(18);
    m_table->setToolTip(ProfilerDefinitions::imbalance());
    QFont small = m_table->font();
    small.setPointSizeF(std::max(6.0, small.pointSizeF() - 1.0));
    m_table->setFont(small);
    m_table->horizontalHeader()->setFont(small);
    m_table->verticalHeader()->setFont(small);
    m_table->horizontalHeader()->setMinimumSectionSize(20);
    // Fixed widths: ResizeToContents would measure every cell on each update (20 Hz).
    const QFontMetrics fm(small);
    for (int c = 0; c < 3; ++c)
        m_table->setColumnWidth(c, std::max(fm.horizontalAdvance(m_table->horizontalHeaderItem(c)->text()),
                                            fm.horizontalAdvance(QStringLiteral("00.000"))) +
                                       10);
    m_table->horizontalHeader()->setSectionResizeMode(QHeaderView::Fixed);
    m_table->setHorizontalScrollBarPolicy(Qt::ScrollBarAsNeeded);
    m_table->setSizeAdjustPolicy(QAbstractScrollArea::AdjustToContents);
    m_table->setSizePolicy(QSizePolicy::Maximum, QSizePolicy::Expanding);
    m_table->setMinimumWidth(80);
    upperLayout->addWidget(m_table, 1);

    auto *lower = new QWidget(split);
    auto *lowerLayout = new QVBoxLayout(lower);
    lowerLayout->setContentsMargins(0, 0, 0, 0);
    m_stripPlot = charts::makePlot(lower);
    m_stripPlot->xAxis->setLabel(tr("token position (prompt | reply)"));
    m_stripPlot->xAxis->setTicker(charts::integerTicker());
    m_stripPlot->yAxis->setLabel(tr("MoE layer"));
    m_stripPlot->yAxis->setRangeReversed(true);
    m_strip = new QCPColorMap(m_stripPlot->xAxis, m_stripPlot->yAxis);
    m_strip->setInterpolate(false);
    m_strip->setTightBoundary(false);
    m_promptEnd = new QCPItemStraightLine(m_stripPlot);
    m_promptEnd->setPen(QPen(Qt::black, 1.5, Qt::DashLine));
    m_promptEnd->setVisible(false);
    m_stripPlot->setToolTip(
        tr("Each cell is the expert that weighed most for that token in that layer; its colour stands for "
           "the expert.\nHover a token for its top-k experts and weights per layer, and the router's margin."));
    connect(m_stripPlot, &QCustomPlot::mouseMove, this, &RoutingView::onStripHover);
    m_tokenLabel = new QLabel(tr("Hover a token to see its experts."), lower);
    m_tokenLabel->setWordWrap(true);
    m_tokenLabel->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred); // wraps to the dock's width
    m_tokenLabel->setTextInteractionFlags(Qt::TextSelectableByMouse);
    lowerLayout->addWidget(m_stripPlot, 1);
    lowerLayout->addWidget(m_tokenLabel);

    // Chosen together: the pairs of experts one layer sends the same tokens to most.
    auto *co = new QWidget(split);
    auto *coLayout = new QVBoxLayout(co);
    coLayout->setContentsMargins(0, 0, 0, 0);
    auto *coTop = new QHBoxLayout;
    auto *coTitle = new QLabel(tr("Chosen together in"), co);
    m_coLayer = new QComboBox(co);
    m_coLayer->setToolTip(tr("The MoE layer whose expert pairs are listed"));
    m_coCaption = new QLabel(co);
    m_coCaption->setWordWrap(true);
    coTop->addWidget(coTitle);
    coTop->addWidget(m_coLayer);
    coTop->addWidget(m_coCaption, 1);
    coLayout->addLayout(coTop);
    m_pairs = new QTableWidget(0, 3, co);
    m_pairs->setObjectName(QStringLiteral("coActivationPairs"));
    m_pairs->setHorizontalHeaderLabels({tr("experts"), tr("tokens together"), tr("lift")});
    m_pairs->horizontalHeaderItem(0)->setToolTip(tr("Two experts the router chose for the same token"));
    m_pairs->horizontalHeaderItem(1)->setToolTip(
        tr("How many tokens were sent to both experts in this layer, and their share of the tokens"));
    m_pairs->horizontalHeaderItem(2)->setToolTip(
        tr("How much more often the two were chosen together than if the router picked them "
           "independently; above 1 they go together.\nP(a and b) / (P(a) · P(b))"));
    m_pairs->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_pairs->setSelectionMode(QAbstractItemView::NoSelection);
    m_pairs->verticalHeader()->setVisible(false);
    m_pairs->verticalHeader()->setDefaultSectionSize(18);
    m_pairs->setFont(small);
    m_pairs->horizontalHeader()->setFont(small);
    m_pairs->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
    m_pairs->setToolTip(tr("Which experts this layer's router picks together for the same token, most "
                           "often first"));
    // As narrow as the dock: the columns share whatever width there is.
    m_pairs->horizontalHeader()->setMinimumSectionSize(20);
    m_pairs->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Expanding);
    m_coCaption->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
    coLayout->addWidget(m_pairs, 1);
    connect(m_coLayer, &QComboBox::currentIndexChanged, this, [this] { emit coActivationLayerChanged(coActivationLayer()); });

    split->addWidget(upper);
    split->addWidget(lower);
    split->addWidget(co);
    split->setStretchFactor(0, 3);
    split->setStretchFactor(1, 2);
    split->setStretchFactor(2, 1);
    layout->addWidget(split, 1);

    // Left click on a routed expert: the chat highlights the tokens it took (again, or Esc: off).
    m_highlightRect = new QCPItemRect(m_plot);
    m_highlightRect->setPen(QPen(palette().color(QPalette::Highlight), 2.5));
    m_highlightRect->setBrush(Qt::NoBrush);
    m_highlightRect->setVisible(false);
    m_plot->setFocusPolicy(Qt::ClickFocus);
    connect(m_plot, &QCustomPlot::mousePress, this, [this](QMouseEvent *event) {
        if (event->button() != Qt::LeftButton) return;
        const auto [layer, expert] = expertAt(event->position().toPoint());
        if (layer < 0) return;
        if (m_highlight == qMakePair(layer, expert))
            clearHighlightedExpert();
        else
            setHighlightedExpert(layer, expert);
    });

    connect(m_source, &QComboBox::currentIndexChanged, this, [this] { emit sourceChanged(source()); });

    // Right-click a routed expert: the expert lab, with that expert disabled or forced.
    m_plot->setContextMenuPolicy(Qt::CustomContextMenu);
    connect(m_plot, &QWidget::customContextMenuRequested, this, [this](const QPoint &pos) {
        const auto [layer, expert] = expertAt(pos);
        if (layer < 0) return;
        QMenu menu(this);
        menu.addAction(tr("Disable expert %1 of layer %2 in this conversation…").arg(expert).arg(layer), this,
                       [this, layer = layer, expert = expert] { emit interventionRequested(layer, expert, false); });
        menu.addAction(tr("Force expert %1 of layer %2 in this conversation…").arg(expert).arg(layer), this,
                       [this, layer = layer, expert = expert] { emit interventionRequested(layer, expert, true); });
        menu.exec(m_plot->mapToGlobal(pos));
    });
}

void RoutingView::setHighlightedExpert(int layer, int expert) {
    const QPair<int, int> h = layer < 0 ? qMakePair(-1, -1) : qMakePair(layer, expert);
    if (h == m_highlight) return;
    m_highlight = h;
    m_highlightRect->setVisible(h.first >= 0);
    if (h.first >= 0) {
        m_highlightRect->topLeft->setCoords(expert - 0.5, layer - 0.5);
        m_highlightRect->bottomRight->setCoords(expert + 0.5, layer + 0.5);
    }
    charts::queueReplot(m_plot);
    emit highlightedExpertChanged(h.first, h.second);
}

void RoutingView::keyPressEvent(QKeyEvent *event) {
    if (event->key() == Qt::Key_Escape && m_highlight.first >= 0) {
        clearHighlightedExpert();
        event->accept();
        return;
    }
    QWidget::keyPressEvent(event);
}

int RoutingView::coActivationLayer() const { return m_coLayer->currentData().isValid() ? m_coLayer->currentData().toInt() : -1; }

void RoutingView::setCoActivationLayers(const QList<int> &moeLayers) {
    QList<int> shown;
    for (int i = 0; i < m_coLayer->count(); ++i) shown << m_coLayer->itemData(i).toInt();
    if (shown == moeLayers) return;
    const int keep = coActivationLayer();
    QSignalBlocker block(m_coLayer);
    m_coLayer->clear();
    for (int l : moeLayers) m_coLayer->addItem(tr("layer %1").arg(l), l);
    const int at = m_coLayer->findData(keep);
    m_coLayer->setCurrentIndex(at >= 0 ? at : 0);
}

void RoutingView::showCoActivation(const CoActivation &c, const QString &caption) {
    m_coCaption->setText(caption);
    const QList<ExpertPair> top = topPairs(c, 8);
    m_pairs->setRowCount(int(top.size()));
    for (int r = 0; r < int(top.size()); ++r) {
        const ExpertPair &p = top[r];
        const QString cells[3] = {tr("e%1 + e%2").arg(p.a).arg(p.b),
                                  tr("%1 (%2%)").arg(p.count).arg(100.0 * double(p.count) / double(c.positions), 0, 'f', 0),
                                  QString::number(p.lift, 'f', 2)};
        for (int col = 0; col < 3; ++col) {
            if (!m_pairs->item(r, col)) m_pairs->setItem(r, col, new QTableWidgetItem);
            m_pairs->item(r, col)->setText(cells[col]);
        }
    }
}

QPair<int, int> RoutingView::expertAt(const QPoint &pixel) const {
    const int expert = int(std::lround(m_plot->xAxis->pixelToCoord(pixel.x())));
    const int layer = int(std::lround(m_plot->yAxis->pixelToCoord(pixel.y())));
    if (expert < 0 || expert >= m_shapeExperts || !m_shapeMoe.contains(layer)) return {-1, -1};
    return {layer, expert};
}

RoutingView::Source RoutingView::source() const { return Source(m_source->currentData().toInt()); }

void RoutingView::setSource(Source s) { m_source->setCurrentIndex(m_source->findData(int(s))); }

QString RoutingView::caption() const { return m_caption->text(); }

void RoutingView::setLayerTicks(int nLayers, const QList<int> &moeLayers) {
    QSharedPointer<QCPAxisTickerText> ticks(new QCPAxisTickerText);
    const int every = nLayers > 32 ? 4 : nLayers > 16 ? 2 : 1;
    for (int l = 0; l < nLayers; ++l) {
        const bool dense = !moeLayers.contains(l);
        if (dense)
            ticks->addTick(l, tr("L%1 dense").arg(l));
        else if (l % every == 0)
            ticks->addTick(l, tr("L%1").arg(l));
    }
    m_plot->yAxis->setTicker(ticks);
}

void RoutingView::showMatrix(const RoutingMatrix &m, int nLayers, int nShared, const QString &caption) {
    m_caption->setText(caption);
    int maxLayer = -1;
    for (int l : m.layers) maxLayer = std::max(maxLayer, l);
    // The map, its ticks and the table are sized by these: bounded whatever the source claims
    // (storage_types.h); a layer beyond the bound is not drawn.
    nLayers = std::clamp(std::max(nLayers, maxLayer + 1), 0, kMaxProfileLayers);
    nShared = std::clamp(nShared, 0, kMaxProfileExperts);
    const int nExperts = std::clamp(m.nExperts, 0, kMaxProfileExperts);
    const int nx = std::max(1, nExperts + nShared), ny = std::max(1, nLayers);
    if (nExperts != m_shapeExperts || nShared != m_shapeShared || nLayers != m_shapeLayers ||
        m.layers != m_shapeMoe) {
        // Shape changed (another model): resize once; otherwise every update is in place.
        m_shapeExperts = nExperts;
        m_shapeShared = nShared;
        m_shapeLayers = nLayers;
        m_shapeMoe = m.layers;
        m_map->data()->setSize(nx, ny);
        m_map->data()->setRange(QCPRange(0, nx - 1), QCPRange(0, ny - 1));
        m_plot->xAxis->setRange(-0.5, nx - 0.5);
        m_plot->yAxis->setRange(-0.5, ny - 0.5);
        m_plot->yAxis->setRangeReversed(true);
        setLayerTicks(nLayers, m.layers);
        if (m_highlight.first >= 0 && (!m.layers.contains(m_highlight.first) || m_highlight.second >= nExperts))
            clearHighlightedExpert();
        charts::setExpertAxis(m_plot, nExperts, nShared, tr("S%1"));
        m_sharedLabel->setVisible(nShared > 0);
        m_sharedLabel->position->setType(QCPItemPosition::ptPlotCoords);
        m_sharedLabel->position->setCoords(nExperts + (nShared - 1) / 2.0, -0.5);
        m_table->setRowCount(nLayers);
        QStringList vlabels;
        for (int l = 0; l < nLayers; ++l) {
            vlabels << tr("L%1").arg(l);
            for (int c = 0; c < 3; ++c)
                if (!m_table->item(l, c)) m_table->setItem(l, c, new QTableWidgetItem);
        }
        m_table->setVerticalHeaderLabels(vlabels);
    }
    double maxShare = nExperts > 0 ? 2.0 / nExperts : 1.0;
    for (int l = 0; l < nLayers; ++l) {
        const int r = m.rowOfLayer(l);
        if (r < 0) {
            for (int x = 0; x < nx; ++x) m_map->data()->setCell(x, l, kNaN);
            m_table->item(l, 0)->setText(tr("dense"));
            m_table->item(l, 1)->setText(QString());
            m_table->item(l, 2)->setText(QString());
            continue;
        }
        const QList<quint64> row = m.row(r);
        const QList<double> share = expertShares(row);
        for (int e = 0; e < nExperts; ++e) {
            m_map->data()->setCell(e, l, share[e]);
            maxShare = std::max(maxShare, share[e]);
        }
        for (int s = 0; s < nShared; ++s) m_map->data()->setCell(nExperts + s, l, kNaN);
        const LayerBalance b = layerBalance(row);
        m_table->item(l, 0)->setText(fmt(b.imbalance, 2));
        m_table->item(l, 1)->setText(fmt(b.entropy, 3));
        m_table->item(l, 2)->setText(b.total == 0 ? QStringLiteral("–") : QString::number(b.deadExperts));
    }
    m_map->setDataRange(QCPRange(0, std::min(1.0, maxShare)));
    charts::queueReplot(m_plot);
}

void RoutingView::clearStrip() {
    m_stripKey = 0;
    m_stripPositions = m_stripCapacity = m_stripRows = 0;
    m_stripProfile = {};
    m_strip->data()->clear();
    m_promptEnd->setVisible(false);
    charts::queueReplot(m_stripPlot);
}

void RoutingView::showStrip(const MessageProfile &p, quint64 key) {
    const RoutingStrip s = routingStrip(p);
    const int rows = int(s.layers.size());
    if (rows == 0 || s.nPositions == 0) {
        if (m_stripPositions != 0 || m_stripKey != key) clearStrip();
        m_stripKey = key;
        m_stripProfile = p;
        return;
    }
    int from = m_stripPositions;
    if (key != m_stripKey || rows != m_stripRows || s.nPositions < m_stripPositions) {
        from = 0;
        m_stripKey = key;
        m_stripRows = rows;
        m_stripCapacity = 0;
        m_strip->setGradient(charts::categoricalGradient(p.nExperts));
        m_strip->setDataRange(QCPRange(0, std::max(1, p.nExperts - 1)));
        QSharedPointer<QCPAxisTickerText> ticks(new QCPAxisTickerText);
        for (int r = 0; r < rows; ++r) ticks->addTick(r, tr("L%1").arg(s.layers[r]));
        m_stripPlot->yAxis->setTicker(ticks);
    }
    if (s.nPositions > m_stripCapacity) {
        // Grow by doubling so a streaming reply resizes the map O(log n) times; between
        // resizes new positions are written into the cells in place.
        m_stripCapacity = std::max(64, s.nPositions * 2);
        m_strip->data()->setSize(m_stripCapacity, rows);
        m_strip->data()->setRange(QCPRange(0, m_stripCapacity - 1), QCPRange(0, rows - 1));
        m_strip->data()->fill(kNaN);
        from = 0;
    }
    for (int pos = from; pos < s.nPositions; ++pos)
        for (int r = 0; r < rows; ++r) {
            const int e = s.at(pos, r);
            m_strip->data()->setCell(pos, r, e < 0 ? kNaN : double(e));
        }
    m_stripPositions = s.nPositions;
    m_stripProfile = p;
    // A long conversation's prompt would squeeze the reply into a sliver: show the reply with a
    // little of the prompt before it (the whole strip is still there, and hover works anywhere).
    const int reply = s.nPositions - s.nPromptPositions;
    const int firstShown =
        s.nPromptPositions > 2 * std::max(reply, 32) ? s.nPromptPositions - std::max(16, reply / 4) : 0;
    m_stripPlot->xAxis->setRange(firstShown - 0.5, s.nPositions - 0.5);
    m_stripPlot->yAxis->setRange(-0.5, rows - 0.5);
    m_stripPlot->yAxis->setRangeReversed(true);
    m_promptEnd->setVisible(s.nPromptPositions > 0 && s.nPromptPositions < s.nPositions);
    m_promptEnd->point1->setCoords(s.nPromptPositions - 0.5, 0);
    m_promptEnd->point2->setCoords(s.nPromptPositions - 0.5, 1);
    charts::queueReplot(m_stripPlot);
}

QString RoutingView::tokenDetails(int position) const {
    const QList<QList<ExpertChoice>> choices = tokenRouting(m_stripProfile, position);
    if (choices.isEmpty()) return {};
    const int nPrompt = std::min(m_stripProfile.nPromptTokens, m_stripPositions);
    QStringList lines;
    lines << (position < nPrompt
                  ? tr("Prompt token %1").arg(position)
                  : tr("Reply token %1 (position %2)").arg(position - nPrompt + 1).arg(position));
    const QList<float> margins = tokenMargins(m_stripProfile, position);
    for (int r = 0; r < choices.size(); ++r) {
        QStringList parts;
        for (const ExpertChoice &c : choices[r]) parts << tr("e%1 %2").arg(c.expert).arg(c.weight, 0, 'f', 3);
        QString line = tr("L%1: %2")
                           .arg(m_stripProfile.moeLayers.value(r))
                           .arg(parts.isEmpty() ? tr("prefix cache") : parts.join(QStringLiteral(" · ")));
        if (!parts.isEmpty() && r < margins.size() && !std::isnan(margins[r]))
            line += QStringLiteral(" · ") + tr("margin %1").arg(margins[r], 0, 'f', 3);
        lines << line;
    }
    // The margin: the last chosen expert's router score over the best one left out.
    if (!margins.isEmpty())
        lines << tr("margin: how narrowly the last chosen expert beat the next one (router score, "
                    "probability + bias); near 0 the token almost went elsewhere");
    else if (!m_stripProfile.traceIds.isEmpty())
        lines << tr("margin: not recorded for this reply (it was stored before margins were recorded)");
    return lines.join(QLatin1Char('\n'));
}

void RoutingView::onStripHover(QMouseEvent *event) {
    if (m_stripPositions == 0) return;
    const int pos = int(std::lround(m_stripPlot->xAxis->pixelToCoord(event->position().x())));
    if (pos < 0 || pos >= m_stripPositions) return;
    const QString text = tokenDetails(pos);
    m_tokenLabel->setText(text);
    QToolTip::showText(event->globalPosition().toPoint(), text, m_stripPlot);
}

} // namespace es
