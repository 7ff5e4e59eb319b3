// RoutingView: the profiler's Routing page — a layer × expert heatmap of token share
// (QCPColorMap; live sliding window, the selected message, or the whole conversation), the
// per-layer balance figures beside it (imbalance, normalized entropy, dead experts), and the
// token × layer strip of one reply, where hovering a token lists its top-k experts and weights
// per layer. Dense layers and shared experts are drawn grey and labelled. It only draws what it
// is given (ProfilerPanel decides what and when); colour-map cells are updated in place.
#pragma once

#include "routing_stats.h"

#include <QWidget>

class QCPColorMap;
class QCPColorScale;
class QCPItemStraightLine;
class QCPItemText;
class QComboBox;
class QCustomPlot;
class QLabel;
class QTableWidget;

namespace es {

class RoutingView : public QWidget {
    Q_OBJECT
public:
    enum class Source { LiveWindow, SelectedMessage, Conversation };
    Q_ENUM(Source)

    explicit RoutingView(QWidget *parent = nullptr);

    Source source() const;
    void setSource(Source source);

    // Heatmap + balance table. nLayers: all model layers (rows; those without a matrix row are
    // dense); nSharedExperts: grey columns after the routed experts. Replot is queued.
    void showMatrix(const RoutingMatrix &matrix, int nLayers, int nSharedExperts, const QString &caption);
    // The token strip of a reply; key identifies it (a new key redraws from scratch, the same
    // key only adds the new positions).
    void showStrip(const MessageProfile &profile, quint64 key);
    void clearStrip();

    // Hover text of a strip position: the token's top-k experts and weights per MoE layer.
    QString tokenDetails(int position) const;

    // For tests and screenshots.
    QCPColorMap *heatmap() const { return m_map; }
    QCPColorMap *strip() const { return m_strip; }
    QTableWidget *balanceTable() const { return m_table; }
    QCustomPlot *heatmapPlot() const { return m_plot; }
    QCustomPlot *stripPlot() const { return m_stripPlot; }
    int stripPositions() const { return m_stripPositions; }
    QString caption() const;

    // The routed expert under a heatmap point (plot pixels) as (layer, expert); {-1, -1} off a
    // routed expert of a MoE layer.
    QPair<int, int> expertAt(const QPoint &pixel) const;

signals:
    void sourceChanged(es::RoutingView::Source source);
    // From the heatmap's context menu: try the conversation without (force: with) this expert.
    void interventionRequested(int layer, int expert, bool force);

private:
    void onStripHover(QMouseEvent *event);
    void setLayerTicks(int nLayers, const QList<int> &moeLayers);

    QComboBox *m_source = nullptr;
    QLabel *m_caption = nullptr;
    QCustomPlot *m_plot = nullptr;
    QCPColorMap *m_map = nullptr;
    QCPColorScale *m_scale = nullptr;
    QCPItemText *m_sharedLabel = nullptr;
    QTableWidget *m_table = nullptr;
    QCustomPlot *m_stripPlot = nullptr;
    QCPColorMap *m_strip = nullptr;
    QCPItemStraightLine *m_promptEnd = nullptr;
    QLabel *m_tokenLabel = nullptr;
    int m_shapeExperts = -1, m_shapeShared = -1, m_shapeLayers = -1; // heatmap shape drawn
    QList<int> m_shapeMoe;
    MessageProfile m_stripProfile;
    quint64 m_stripKey = 0;
    int m_stripPositions = 0, m_stripCapacity = 0, m_stripRows = 0;
};

} // namespace es
