// MemoryUsageView: the profiler's Memory page — a stacked area over time of weights, KV pool
// (the memory it has mapped: it grows and shrinks with demand where the backend maps it on
// demand), workspace and free memory; fragmentation and KV waste over time; the KV block map
// (used / cached / free / without memory); the device's total and free memory. ProfilerPanel
// adds a sample a few times a second; points are appended in place and those older than the
// window are dropped.
#pragma once

#include "memory_series.h"

#include <QWidget>

class QCheckBox;
class QCPColorMap;
class QCPGraph;
class QCustomPlot;
class QLabel;

namespace es {

class MemoryUsageView : public QWidget {
    Q_OBJECT
public:
    explicit MemoryUsageView(QWidget *parent = nullptr);

    // Adds one sample at tS (seconds, increasing) and redraws the block map and figures.
    void addSample(const MemoryView &memory, double tS);
    void clear();
    // Whether free device memory is the stack's top band (off by default for the CPU backend).
    void setIncludeFree(bool include);

    static constexpr double kWindowS = 300; // five minutes of history

    // For tests: graph 0 weights, 1 weights+KV, 2 +workspace, 3 +free (cumulative, stacked).
    QCPGraph *stackGraph(int i) const { return m_stack[i]; }
    QCPGraph *kvInUseGraph() const { return m_kvUsed; } // weights + KV blocks in use (a line)
    QCPGraph *fragmentationGraph() const { return m_frag; }
    QCPGraph *kvWasteGraph() const { return m_waste; }
    QCPColorMap *blockMap() const { return m_blocks; }
    QString summary() const;
    KvBlockMap lastBlockMap() const { return m_lastMap; }

private:
    static QString deviceAccounting(const MemoryView &m, const MemorySample &s);

    QLabel *m_summary = nullptr;
    QCheckBox *m_includeFree = nullptr;
    QCustomPlot *m_stackPlot = nullptr, *m_ratioPlot = nullptr, *m_blockPlot = nullptr;
    QCPGraph *m_stack[5] = {}; // weights, KV cache, workspace, other device memory, free
    QCPGraph *m_frag = nullptr, *m_waste = nullptr, *m_kvUsed = nullptr;
    QCPColorMap *m_blocks = nullptr;
    KvBlockMap m_lastMap;
    double m_maxBytes = 0;
};

} // namespace es
