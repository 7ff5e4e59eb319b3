// Report charts (see report_charts.h): an axis frame with "nice" ticks, then one function per
// chart. Colours follow the profiler panel (phases) and a sequential blue → red ramp for load.
#include "report_charts.h"

#include "latency_stats.h"
#include "routing_stats.h"

#include <QBuffer>
#include <QPainter>
#include <QPainterPath>
#include <QSvgGenerator>

#include <cmath>

namespace es::report {

namespace {

const QColor kSeries[] = {QColor(31, 119, 180),  QColor(255, 127, 14),  QColor(44, 160, 44),
                          QColor(214, 39, 40),   QColor(148, 103, 189), QColor(140, 86, 75),
                          QColor(227, 119, 194), QColor(127, 127, 127)};
// A step's phases (ProfileStep: MoE routed and shared together) and a reply's (PhaseTimes).
const QColor kPhaseColors[] = {QColor(31, 119, 180), QColor(255, 127, 14), QColor(44, 160, 44),
                               QColor(148, 103, 189), QColor(190, 190, 190)};
const char *const kPhaseNames[] = {"attention", "MoE", "dense", "head and sampling", "other"};
const QColor kReplyPhaseColors[] = {QColor(31, 119, 180), QColor(255, 127, 14), QColor(255, 187, 120),
                                    QColor(44, 160, 44),  QColor(148, 103, 189), QColor(190, 190, 190)};
const char *const kReplyPhaseNames[] = {"attention", "MoE routed", "MoE shared", "dense", "head and sampling", "other"};

QFont font(int px, bool bold = false) {
    QFont f(QStringLiteral("DejaVu Sans"));
    f.setPixelSize(px);
    f.setBold(bold);
    return f;
}

double niceStep(double range, int target) {
    if (!(range > 0) || !std::isfinite(range)) return 1;
    const double raw = range / target, mag = std::pow(10.0, std::floor(std::log10(raw))), f = raw / mag;
    return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag;
}

QString tickLabel(double v) {
    if (v == 0) return QStringLiteral("0");
    const double a = std::fabs(v);
    if (a >= 1e6 || a < 1e-3) return QString::number(v, 'g', 3);
    QString t = QString::number(v, 'f', a >= 100 ? 0 : a >= 10 ? 1 : a >= 1 ? 2 : 3);
    if (t.contains(QLatin1Char('.')))
        t.remove(QRegularExpression(QStringLiteral("\\.?0+$"))); // 2.50 → 2.5, never 100 → 1
    return t;
}

// A plot area with axes, ticks and labels; maps data to pixels.
struct Frame {
    QRectF plot;
    double x0 = 0, x1 = 1, y0 = 0, y1 = 1;
    double px(double x) const { return plot.left() + (x - x0) / (x1 - x0) * plot.width(); }
    double py(double y) const { return plot.bottom() - (y - y0) / (y1 - y0) * plot.height(); }
};

Frame drawFrame(QPainter &p, const QRectF &r, double x0, double x1, double y0, double y1,
                const QString &xLabel, const QString &yLabel) {
    Frame f;
    if (!(x1 > x0)) x1 = x0 + 1;
    if (!(y1 > y0)) y1 = y0 + 1;
    const double ys = niceStep(y1 - y0, 5);
    y1 = std::ceil(y1 / ys) * ys;
    f.plot = r.adjusted(58, 30, -16, -40);
    f.x0 = x0, f.x1 = x1, f.y0 = y0, f.y1 = y1;
    p.setFont(font(11));
    p.setPen(QPen(QColor(225, 225, 225), 1));
    for (double y = y0; y <= y1 + ys * 1e-6; y += ys)
        p.drawLine(QPointF(f.plot.left(), f.py(y)), QPointF(f.plot.right(), f.py(y)));
    p.setPen(QPen(Qt::black, 1));
    p.drawLine(f.plot.bottomLeft(), f.plot.bottomRight());
    p.drawLine(f.plot.bottomLeft(), f.plot.topLeft());
    for (double y = y0; y <= y1 + ys * 1e-6; y += ys)
        p.drawText(QRectF(r.left(), f.py(y) - 8, 52, 16), Qt::AlignRight | Qt::AlignVCenter, tickLabel(y));
    const double xs = niceStep(x1 - x0, 8);
    for (double x = std::ceil(x0 / xs) * xs; x <= x1 + xs * 1e-6; x += xs) {
        p.drawLine(QPointF(f.px(x), f.plot.bottom()), QPointF(f.px(x), f.plot.bottom() + 4));
        p.drawText(QRectF(f.px(x) - 30, f.plot.bottom() + 5, 60, 14), Qt::AlignHCenter | Qt::AlignTop,
                   tickLabel(x));
    }
    p.drawText(QRectF(f.plot.left(), r.bottom() - 18, f.plot.width(), 16), Qt::AlignHCenter, xLabel);
    p.save();
    p.translate(r.left() + 10, f.plot.center().y());
    p.rotate(-90);
    p.drawText(QRectF(-f.plot.height() / 2, -8, f.plot.height(), 16), Qt::AlignCenter, yLabel);
    p.restore();
    return f;
}

void drawTitle(QPainter &p, const QRectF &r, const QString &title) {
    p.setPen(Qt::black);
    p.setFont(font(13, true));
    p.drawText(QRectF(r.left() + 8, r.top() + 4, r.width() - 16, 20), Qt::AlignLeft | Qt::AlignVCenter,
               title);
}

void drawLegend(QPainter &p, const QRectF &r, const QList<std::pair<QString, QColor>> &items) {
    p.setFont(font(11));
    const QFontMetricsF fm(p.font());
    double x = r.right() - 16;
    for (qsizetype i = items.size() - 1; i >= 0; --i) {
        const double w = fm.horizontalAdvance(items[i].first) + 22;
        x -= w;
        p.fillRect(QRectF(x, r.top() + 9, 12, 10), items[i].second);
        p.setPen(Qt::black);
        p.drawText(QRectF(x + 15, r.top() + 4, w - 15, 20), Qt::AlignLeft | Qt::AlignVCenter, items[i].first);
    }
}

QColor loadColor(double rel) { // 0 → pale, 1 (even) → blue, ≥ 2 → red
    auto mix = [](QColor a, QColor b, double t) {
        t = std::clamp(t, 0.0, 1.0);
        return QColor::fromRgbF(a.redF() + (b.redF() - a.redF()) * t,
                                a.greenF() + (b.greenF() - a.greenF()) * t,
                                a.blueF() + (b.blueF() - a.blueF()) * t);
    };
    const QColor lo(247, 251, 255), mid(66, 146, 198), hi(203, 24, 29);
    return rel <= 1 ? mix(lo, mid, rel) : mix(mid, hi, rel - 1);
}

RoutingMatrix reportRouting(const Report &r) {
    RoutingMatrix m;
    for (const ReportRequest &q : r.requests)
        m.add(RoutingMatrix::fromLayerRouting(q.profile.routing, q.profile.nExperts));
    return m;
}

void drawRouting(QPainter &p, const QRectF &r, const Report &rep) {
    const RoutingMatrix m = reportRouting(rep);
    const int rows = m.rows(), cols = m.nExperts;
    const QRectF area = r.adjusted(58, 30, -90, -40);
    // At most one cell per pixel: with more experts (or layers) than that, a cell stands for
    // several and shows the most loaded of them, so the drawing's size is the chart's, not the
    // model's (an SVG rectangle per expert and layer would grow without bound).
    const int colsPerCell = std::max(1, int(std::ceil(cols / std::max(1.0, std::floor(area.width())))));
    const int rowsPerCell = std::max(1, int(std::ceil(rows / std::max(1.0, std::floor(area.height())))));
    const int cellCols = (cols + colsPerCell - 1) / colsPerCell,
              cellRows = (rows + rowsPerCell - 1) / rowsPerCell;
    QList<double> load(qsizetype(cellRows) * cellCols, 0.0); // share × E: 1 is an even split
    for (int row = 0; row < rows; ++row) {
        const QList<double> share = expertShares(m.row(row));
        for (int e = 0; e < cols; ++e) {
            double &cell = load[qsizetype(row / rowsPerCell) * cellCols + e / colsPerCell];
            cell = std::max(cell, share[e] * cols);
        }
    }
    const double cw = area.width() / cellCols, ch = area.height() / cellRows;
    p.setFont(font(11));
    for (int row = 0; row < cellRows; ++row) {
        for (int c = 0; c < cellCols; ++c)
            p.fillRect(QRectF(area.left() + c * cw, area.top() + row * ch, cw + 0.3, ch + 0.3),
                       loadColor(load[qsizetype(row) * cellCols + c]));
        p.setPen(Qt::black);
        if (cellRows <= 32 || row % ((cellRows + 31) / 32) == 0)
            p.drawText(QRectF(r.left(), area.top() + row * ch, 52, ch), Qt::AlignRight | Qt::AlignVCenter,
                       QStringLiteral("L%1").arg(m.layers.at(row * rowsPerCell)));
    }
    p.setPen(QPen(Qt::black, 1));
    p.drawRect(area);
    const int every = std::max(1, int(std::ceil(cellCols / 16.0)));
    for (int c = 0; c < cellCols; c += every)
        p.drawText(QRectF(area.left() + c * cw - 10, area.bottom() + 3, cw + 20, 14), Qt::AlignHCenter,
                   QString::number(c * colsPerCell));
    p.drawText(QRectF(area.left(), r.bottom() - 18, area.width(), 16), Qt::AlignHCenter,
               QStringLiteral("expert (routed experts; shared experts see every token)"));
    // Colour bar: load relative to an even split (share × E).
    const QRectF bar(area.right() + 18, area.top(), 14, area.height());
    for (int i = 0; i < 100; ++i)
        p.fillRect(QRectF(bar.left(), bar.bottom() - (i + 1) * bar.height() / 100, bar.width(),
                          bar.height() / 100 + 0.5),
                   loadColor(2.0 * (i + 0.5) / 100));
    p.drawRect(bar);
    for (double v : {0.0, 1.0, 2.0})
        p.drawText(QRectF(bar.right() + 3, bar.bottom() - v / 2 * bar.height() - 8, 40, 16),
                   Qt::AlignLeft | Qt::AlignVCenter,
                   v == 2.0 ? QStringLiteral("≥2×") : QStringLiteral("%1×").arg(v));
}

void drawItl(QPainter &p, const QRectF &r, const Report &rep) {
    QList<QList<double>> series;
    QList<double> all;
    double maxY = 0;
    int maxX = 1;
    for (const ReportRequest &q : rep.requests) {
        series.append(interTokenLatenciesMs(q.profile.tokenTimesUs));
        all.append(series.last());
        for (double v : series.last()) maxY = std::max(maxY, v);
        maxX = std::max(maxX, int(series.last().size()));
    }
    const Percentiles pc = percentiles(all);
    // Outliers (a preempted or prefill-shared step) would flatten the rest: cap at 1.5 × p99.
    const double cap = std::isfinite(pc.p99) ? std::min(maxY, std::max(pc.p99 * 1.5, pc.p50 * 3)) : maxY;
    const Frame f = drawFrame(p, r, 1, maxX, 0, cap, QStringLiteral("token (after the first)"),
                              QStringLiteral("ITL (ms)"));
    p.save();
    p.setClipRect(f.plot.adjusted(-1, -1, 1, 1));
    p.setRenderHint(QPainter::Antialiasing);
    for (qsizetype s = 0; s < series.size(); ++s) {
        QPainterPath path;
        for (qsizetype i = 0; i < series[s].size(); ++i) {
            const QPointF pt(f.px(double(i + 1)), f.py(std::min(series[s][i], cap)));
            if (i == 0)
                path.moveTo(pt);
            else
                path.lineTo(pt);
        }
        p.setPen(QPen(kSeries[s % 8], 1.2));
        p.drawPath(path);
    }
    for (auto [v, name] : {std::pair{pc.p50, "p50"}, std::pair{pc.p99, "p99"}}) {
        if (!std::isfinite(v)) continue;
        p.setPen(QPen(Qt::black, 1, Qt::DashLine));
        p.drawLine(QPointF(f.plot.left(), f.py(v)), QPointF(f.plot.right(), f.py(v)));
        p.setFont(font(10));
        p.drawText(QRectF(f.plot.right() - 120, f.py(v) - 15, 116, 14), Qt::AlignRight,
                   QStringLiteral("%1 %2 ms").arg(QLatin1String(name)).arg(v, 0, 'f', 2));
    }
    p.restore();
    if (series.size() > 1 && series.size() <= 8) {
        QList<std::pair<QString, QColor>> items;
        for (qsizetype s = 0; s < series.size(); ++s) items.append({rep.requests[s].label, kSeries[s % 8]});
        drawLegend(p, r, items);
    }
}

void drawMemory(QPainter &p, const QRectF &r, const Report &rep) {
    double maxT = 0, maxB = 0;
    bool haveSeries = false;
    for (const ReportRequest &q : rep.requests) {
        for (const ProfileMemorySample &m : q.profile.memory) {
            maxT = std::max(maxT, (q.offsetUs + m.tUs) / 1e6);
            maxB = std::max(maxB, m.inUseBytes / 1048576.0);
            haveSeries = true;
        }
        maxB = std::max(maxB, q.profile.memoryPeakBytes / 1048576.0);
        maxT = std::max(maxT, (q.offsetUs + q.profile.durationUs) / 1e6);
    }
    const Frame f =
        drawFrame(p, r, 0, maxT, 0, maxB * 1.05, QStringLiteral("time (s)"), QStringLiteral("in use (MiB)"));
    p.save();
    p.setRenderHint(QPainter::Antialiasing);
    for (qsizetype s = 0; s < rep.requests.size(); ++s) {
        const ReportRequest &q = rep.requests[s];
        const QColor c = kSeries[s % 8];
        if (haveSeries && !q.profile.memory.isEmpty()) {
            QPainterPath path;
            double lastY = 0;
            for (qsizetype i = 0; i < q.profile.memory.size(); ++i) {
                const ProfileMemorySample &m = q.profile.memory[i];
                const double x = f.px((q.offsetUs + m.tUs) / 1e6), y = f.py(m.inUseBytes / 1048576.0);
                if (i == 0)
                    path.moveTo(x, y);
                else
                    path.lineTo(x, lastY), path.lineTo(x, y); // a step: the figure holds until it changes
                lastY = y;
            }
            path.lineTo(f.px((q.offsetUs + q.profile.durationUs) / 1e6), lastY);
            p.setPen(QPen(c, 1.5));
            p.drawPath(path);
        } else if (q.profile.memoryPeakBytes > 0) {
            // Profiles from before schema v5 have only the peak: a bar over the request's span.
            const double y = f.py(q.profile.memoryPeakBytes / 1048576.0);
            p.setPen(QPen(c, 2));
            p.drawLine(QPointF(f.px(q.offsetUs / 1e6), y),
                       QPointF(f.px((q.offsetUs + q.profile.durationUs) / 1e6), y));
        }
    }
    p.restore();
}

// One request with its steps: a stacked column per step (ms). Decode steps set the scale; taller
// steps (a prefill) are cut at the top edge and labelled with their length.
void drawStepPhases(QPainter &p, const QRectF &r, const MessageProfile &prof) {
    const QList<ProfileStep> &steps = prof.steps;
    QList<double> durations;
    for (const ProfileStep &s : steps) durations.append(s.durationUs / 1000.0);
    const Percentiles pc = percentiles(durations);
    double maxMs = 0;
    for (double d : durations) maxMs = std::max(maxMs, d);
    const double cap = std::min(maxMs, std::max(pc.p90 * 2.0, pc.p50 * 4.0));
    const Frame f =
        drawFrame(p, r, 0, double(steps.size()), 0, cap, QStringLiteral("engine step"), QStringLiteral("ms"));
    const double w = std::max(0.5, f.plot.width() / steps.size());
    p.setFont(font(10));
    for (qsizetype i = 0; i < steps.size(); ++i) {
        const ProfileStep &s = steps[i];
        const qint64 other =
            std::max<qint64>(0, s.durationUs - s.attentionUs - s.moeUs - s.denseUs - s.samplingUs);
        const double v[5] = {s.attentionUs / 1000.0, s.moeUs / 1000.0, s.denseUs / 1000.0,
                             s.samplingUs / 1000.0, other / 1000.0};
        double at = 0;
        const double x = f.px(double(i));
        for (int k = 0; k < 5; ++k) {
            const double y0 = f.py(std::min(at, f.y1)), y1 = f.py(std::min(at + v[k], f.y1));
            p.fillRect(QRectF(x, y1, w * 0.9, y0 - y1), kPhaseColors[k]);
            at += v[k];
        }
        if (at > f.y1 * 1.001) {
            p.setPen(Qt::black);
            p.drawText(QRectF(x + w + 2, f.plot.top(), 160, 14), Qt::AlignLeft | Qt::AlignTop,
                       QStringLiteral("↑ %1 ms%2")
                           .arg(at, 0, 'f', 1)
                           .arg(s.nPrefillTokens > 0 ? QStringLiteral(" (prefill)") : QString()));
        }
    }
    QList<std::pair<QString, QColor>> items;
    for (int k = 0; k < 5; ++k) items.append({QLatin1String(kPhaseNames[k]), kPhaseColors[k]});
    drawLegend(p, r, items);
}

void drawPhases(QPainter &p, const QRectF &r, const Report &rep) {
    if (rep.requests.size() == 1 && rep.requests.first().profile.steps.size() >= 2)
        return drawStepPhases(p, r, rep.requests.first().profile);
    QList<std::pair<QString, PhaseTimes>> bars;
    if (rep.requests.size() <= 20) {
        for (const ReportRequest &q : rep.requests) bars.append({q.label, q.profile.phases});
    } else {
        PhaseTimes all;
        for (const ReportRequest &q : rep.requests) accumulate(all, q.profile.phases);
        bars.append({QStringLiteral("all %1 requests").arg(rep.requests.size()), all});
    }
    double maxMs = 0;
    for (const auto &b : bars) maxMs = std::max(maxMs, b.second.totalMs());
    const QRectF area = r.adjusted(110, 30, -16, -40);
    const double xs = niceStep(maxMs, 6), x1 = std::max(xs, std::ceil(maxMs / xs) * xs);
    auto px = [&](double ms) { return area.left() + ms / x1 * area.width(); };
    p.setFont(font(11));
    const double bh = std::min(26.0, area.height() / bars.size());
    for (qsizetype i = 0; i < bars.size(); ++i) {
        const PhaseTimes &t = bars[i].second;
        const double v[6] = {t.attentionMs, t.moeMs, t.moeSharedMs, t.denseMs, t.samplingMs, t.otherMs};
        double at = 0;
        const double y = area.top() + i * bh + bh * 0.15;
        for (int k = 0; k < 6; ++k) {
            p.fillRect(QRectF(px(at), y, px(at + v[k]) - px(at), bh * 0.7), kReplyPhaseColors[k]);
            at += v[k];
        }
        p.setPen(Qt::black);
        p.drawText(QRectF(r.left(), y, 104, bh * 0.7), Qt::AlignRight | Qt::AlignVCenter, bars[i].first);
    }
    p.setPen(QPen(Qt::black, 1));
    p.drawLine(area.bottomLeft(), area.bottomRight());
    for (double x = 0; x <= x1 + xs * 1e-6; x += xs) {
        p.drawLine(QPointF(px(x), area.bottom()), QPointF(px(x), area.bottom() + 4));
        p.drawText(QRectF(px(x) - 30, area.bottom() + 5, 60, 14), Qt::AlignHCenter, tickLabel(x));
    }
    p.drawText(QRectF(area.left(), r.bottom() - 18, area.width(), 16), Qt::AlignHCenter,
               QStringLiteral("engine time during the request (ms)"));
    QList<std::pair<QString, QColor>> items;
    for (int k = 0; k < 6; ++k) items.append({QLatin1String(kReplyPhaseNames[k]), kReplyPhaseColors[k]});
    drawLegend(p, r, items);
}

} // namespace

QList<Chart> chartsFor(const Report &r) {
    QList<Chart> out;
    bool routing = false, itl = false, memory = false, phases = false;
    for (const ReportRequest &q : r.requests) {
        routing |= !q.profile.routing.isEmpty() && q.profile.nExperts > 0;
        itl |= q.profile.tokenTimesUs.size() >= 2;
        memory |= !q.profile.memory.isEmpty() || q.profile.memoryPeakBytes > 0;
        phases |= q.profile.phases.totalMs() > 0;
    }
    if (routing) out.append(Chart::Routing);
    if (itl) out.append(Chart::Itl);
    if (memory) out.append(Chart::Memory);
    if (phases) out.append(Chart::Phases);
    return out;
}

QString chartTitle(Chart c) {
    switch (c) {
    case Chart::Routing:
        return QStringLiteral("Routing: expert load per MoE layer");
    case Chart::Itl:
        return QStringLiteral("Inter-token latency");
    case Chart::Memory:
        return QStringLiteral("Memory in use");
    case Chart::Phases:
        return QStringLiteral("Engine time by phase");
    }
    return {};
}

QString chartKey(Chart c) {
    switch (c) {
    case Chart::Routing:
        return QStringLiteral("routing");
    case Chart::Itl:
        return QStringLiteral("itl");
    case Chart::Memory:
        return QStringLiteral("memory");
    case Chart::Phases:
        return QStringLiteral("phases");
    }
    return {};
}

QString chartCaption(Chart c) {
    switch (c) {
    case Chart::Routing:
        return QStringLiteral(
            "Each cell is an expert's share of its layer's token slots times the number of experts: "
            "1× is an even split, 0 an unused expert. All positions the requests computed (prompt and "
            "output). Where a model has more experts or layers than the chart has pixels, a cell stands "
            "for several and shows the most loaded.");
    case Chart::Itl:
        return QStringLiteral(
            "Gap between consecutive tokens of each request; the dashed lines are the p50 and p99 "
            "over all requests (values above 1.5 × p99 are drawn at the top edge).");
    case Chart::Memory:
        return QStringLiteral(
            "Weights + KV blocks in use + workspace in use while each request ran. Profiles stored "
            "before schema v5 have only their peak, drawn as a level line over the request.");
    case Chart::Phases:
        return QStringLiteral(
            "Engine time split by phase: per step for a single request (steps much longer than the "
            "rest, such as a prefill, are cut at the top and labelled), per request otherwise.");
    }
    return {};
}

void drawChart(QPainter &p, const QRectF &rect, Chart c, const Report &r) {
    p.save();
    p.fillRect(rect, Qt::white);
    drawTitle(p, rect, chartTitle(c));
    switch (c) {
    case Chart::Routing:
        drawRouting(p, rect, r);
        break;
    case Chart::Itl:
        drawItl(p, rect, r);
        break;
    case Chart::Memory:
        drawMemory(p, rect, r);
        break;
    case Chart::Phases:
        drawPhases(p, rect, r);
        break;
    }
    p.restore();
}

QByteArray chartSvg(Chart c, const Report &r, QSize size) {
    QByteArray out;
    QBuffer buf(&out);
    buf.open(QIODevice::WriteOnly);
    QSvgGenerator gen;
    gen.setOutputDevice(&buf);
    gen.setSize(size);
    gen.setViewBox(QRect(QPoint(0, 0), size));
    gen.setTitle(chartTitle(c));
    gen.setDescription(chartCaption(c));
    QPainter p(&gen);
    drawChart(p, QRectF(QPointF(0, 0), size), c, r);
    p.end();
    return out;
}

QImage chartImage(Chart c, const Report &r, QSize size, qreal scale) {
    QImage img(size * scale, QImage::Format_RGB32);
    img.setDevicePixelRatio(scale);
    img.fill(Qt::white);
    QPainter p(&img);
    p.setRenderHint(QPainter::Antialiasing);
    p.setRenderHint(QPainter::TextAntialiasing);
    drawChart(p, QRectF(QPointF(0, 0), size), c, r);
    p.end();
    return img;
}

} // namespace es::report
