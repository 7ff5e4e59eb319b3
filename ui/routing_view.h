// RoutingView: the profiler's Routing page — a layer × expert heatmap of token share
// (QCPColorMap; live sliding window, the selected message, or the whole conversation), the
// per-layer balance figures beside it (imbalance, normalized entropy, dead experts), and the
// token × layer strip of one reply, where hovering a token lists its top-k experts and weights
// per layer with the router's margin. Dense layers and shared experts are drawn grey and
// labelled. A left click on a routed expert's cell marks it and asks for the tokens it took to be
// highlighted in the chat (a second click or Esc clears it); a right click opens the expert lab.
// Below, "chosen together": the expert pairs one layer routes the same tokens to most (from the
// reply or conversation shown). It only draws what it is given (ProfilerPanel decides what and
// when); colour-map cells are updated in place.
#pragma once

#include "routing_stats.h"

#include <QWidget>

class QCPColorMap;
class QCPColorScale;
class QCPItemRect;
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

    // Hover text of a strip position: the token's top-k experts and weights per MoE layer, and
    // how narrowly the last of them won (the router's margin) where it was recorded.
    QString tokenDetails(int position) const;

    // The expert whose tokens the chat highlights ({-1, -1}: none). Setting it marks its cell and
    // emits highlightedExpertChanged when it changes.
    QPair<int, int> highlightedExpert() const { return m_highlight; }
    void setHighlightedExpert(int layer, int expert);
    void clearHighlightedExpert() { setHighlightedExpert(-1, -1); }

    // "Chosen together": the MoE layer it shows (the combo's), and its figures.
    int coActivationLayer() const;
    void setCoActivationLayers(const QList<int> &moeLayers); // keeps the chosen layer when listed
    void showCoActivation(const CoActivation &c, const QString &caption);
    QTableWidget *pairsTable() const { return m_pairs; }

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
    // A left click on an expert's cell (layer −1: cleared by a second click or Esc).
    void highlightedExpertChanged(int layer, int expert);
    void coActivationLayerChanged(int layer);

protected:
    void keyPressEvent(QKeyEvent *event) override;

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
    QCPItemRect *m_highlightRect = nullptr;
    QPair<int, int> m_highlight{-1, -1};
    QComboBox *m_coLayer = nullptr;
    QLabel *m_coCaption = nullptr;
    QTableWidget *m_pairs = nullptr;
    int m_shapeExperts = -1, m_shapeShared = -1, m_shapeLayers = -1; // heatmap shape drawn
    QList<int> m_shapeMoe;
    MessageProfile m_stripProfile;
    quint64 m_stripKey = 0;
    int m_stripPositions = 0, m_stripCapacity = 0, m_stripRows = 0;
};

} // namespace es
