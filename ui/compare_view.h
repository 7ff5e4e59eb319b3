// CompareView: the profiler's Compare page — the routing of two messages side by side (e.g. the
// same question under 【技术解析模式】 and 【创意写作模式】, or FP8 vs BF16) as two layer × expert
// share heatmaps on one colour scale, and the per-layer Jensen–Shannon divergence between them as
// bars (natural log, 0 … ln 2). It draws what ProfilerPanel gives it and asks for the selected
// message through signals; it never reads the store itself.
#pragma once

#include "routing_stats.h"

#include <QWidget>

class QCheckBox;
class QCPBars;
class QCPColorMap;
class QCustomPlot;
class QLabel;
class QPushButton;
class QTextBrowser;

namespace es {

class CompareView : public QWidget {
    Q_OBJECT
public:
    struct Side {
        QString title; // e.g. "#12 【技术解析模式】 What is…"
        QString text;  // the reply's text (the changed words are shown)
        RoutingMatrix matrix;
        int nLayers = 0, nSharedExperts = 0;
        bool isEmpty() const { return matrix.isEmpty(); }
    };

    explicit CompareView(QWidget *parent = nullptr);

    void showPair(const Side &a, const Side &b);
    QList<LayerDivergence> divergences() const { return m_divergences; }

    QCPColorMap *heatmapA() const { return m_mapA; }
    QCPColorMap *heatmapB() const { return m_mapB; }
    QCPBars *divergenceBars() const { return m_bars; }
    QCustomPlot *divergencePlot() const { return m_jsPlot; }
    QString summary() const;
    // The texts' diff as shown (B against A) and its one-line count.
    QString textDiffHtml() const { return m_diffHtml; }
    QString textSummary() const;
    // "Reply tokens only": compare the routing of the generated positions, not prompt + reply.
    bool replyTokensOnly() const;
    void setReplyTokensOnly(bool on);

signals:
    void useSelectedAsA();
    void useSelectedAsB();
    void swapRequested();
    void replyTokensOnlyChanged(bool on);

private:
    void fillMap(QCustomPlot *plot, QCPColorMap *map, const Side &side, double maxShare);

    QLabel *m_titleA = nullptr, *m_titleB = nullptr, *m_summary = nullptr, *m_textSummary = nullptr;
    QTextBrowser *m_text = nullptr;
    QString m_diffHtml;
    QCheckBox *m_replyOnly = nullptr;
    QCustomPlot *m_plotA = nullptr, *m_plotB = nullptr, *m_jsPlot = nullptr;
    QCPColorMap *m_mapA = nullptr, *m_mapB = nullptr;
    QCPBars *m_bars = nullptr;
    QList<LayerDivergence> m_divergences;
};

} // namespace es
