// The report's charts, painted once with QPainter so one drawing serves every target: SVG for the
// HTML (QSvgGenerator), raster images for the PDF (QImage, placed by QTextDocument), or any other
// paint device. Only labels the code makes are drawn (layer numbers, request labels): never user
// text. GUI-thread or any thread with a QGuiApplication (fonts).
#pragma once

#include "report_data.h"

#include <QByteArray>
#include <QImage>
#include <QList>
#include <QRectF>
#include <QSize>

class QPainter;

namespace es::report {

enum class Chart { Routing, Itl, Memory, Phases };

QList<Chart> chartsFor(const Report &r); // the charts with data to draw, in report order
QString chartTitle(Chart c);
QString chartKey(Chart c);     // "routing", "itl", "memory", "phases"
QString chartCaption(Chart c); // one sentence under the chart

void drawChart(QPainter &p, const QRectF &rect, Chart c, const Report &r);
QByteArray chartSvg(Chart c, const Report &r, QSize size);            // a standalone SVG document
QImage chartImage(Chart c, const Report &r, QSize size, qreal scale); // size in logical pixels

} // namespace es::report
