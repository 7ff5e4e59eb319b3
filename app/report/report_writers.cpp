// Report writers (see report_writers.h). HTML is built as text with every user string through
// toHtmlEscaped(); charts go in as base64 SVG data URIs, so the file needs nothing beside it. The
// PDF is the same HTML laid out by QTextDocument (which paginates and numbers the pages) with the
// charts as 2× raster images, because QTextDocument cannot draw SVG.
#include "report_writers.h"

#include "latency_stats.h"
#include "report_charts.h"
#include "routing_stats.h"

#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QPainter>
#include <QPdfWriter>
#include <QSaveFile>
#include <QTextDocument>
#include <QUrl>

#include <cmath>

namespace es::report {

namespace {

const QSize kChartSize(760, 320);
const int kPdfChartWidth = 560; // the text width of an A4 page with 15 mm margins, in QTextDocument's pixels

QString esc(const QString &s) { return s.toHtmlEscaped(); }

QString fmt(double v, int prec = 2, const QString &unit = {}) {
    if (!std::isfinite(v)) return QStringLiteral("—");
    return QString::number(v, 'f', prec) + (unit.isEmpty() ? QString() : QStringLiteral(" ") + unit);
}

QString bytes(qint64 b) {
    if (b <= 0) return QStringLiteral("—");
    if (b >= (qint64(1) << 30)) return QString::number(b / 1073741824.0, 'f', 2) + QStringLiteral(" GiB");
    return QString::number(b / 1048576.0, 'f', 1) + QStringLiteral(" MiB");
}

QJsonValue num(double v) { return std::isfinite(v) ? QJsonValue(v) : QJsonValue(QJsonValue::Null); }

QJsonValue seedJson(const std::optional<quint64> &s) {
    if (!s) return QJsonValue(QJsonValue::Null);
    if (*s <= (quint64(1) << 53)) return QJsonValue(qint64(*s));
    return QString::number(*s);
}

QString orNone(const QString &s) { return s.isEmpty() ? QStringLiteral("not recorded") : s; }

QString row(const QString &k, const QString &vEscaped) {
    return QStringLiteral("<tr><th>%1</th><td>%2</td></tr>\n").arg(esc(k), vEscaped);
}

const char *kCss = R"(
body { font-family: "DejaVu Sans", Arial, sans-serif; font-size: 10pt; color: #1a1a1a; max-width: 900px; margin: 24px auto; padding: 0 16px; }
h1 { font-size: 18pt; margin-bottom: 2px; }
h2 { font-size: 13pt; border-bottom: 1px solid #999; padding-bottom: 2px; margin-top: 22px; }
table { border-collapse: collapse; margin: 6px 0 10px 0; }
th, td { border: 1px solid #bbb; padding: 3px 8px; text-align: left; vertical-align: top; }
td.n { text-align: right; font-family: "DejaVu Sans Mono", monospace; }
th { background: #f0f0f0; font-weight: bold; }
.meta { color: #555; }
.msg { border-left: 3px solid #999; margin: 6px 0; padding: 2px 8px; }
.msg.user { border-color: #1f77b4; } .msg.assistant { border-color: #2ca02c; } .msg.system { border-color: #888; }
.who { font-weight: bold; } .when { color: #666; font-size: 9pt; }
.text { white-space: pre-wrap; font-family: "DejaVu Sans Mono", monospace; font-size: 9pt; }
figure { margin: 10px 0 16px 0; } figcaption { color: #444; font-size: 9pt; }
dt { font-weight: bold; margin-top: 4px; }
)";

QString provenanceTable(const Report &r) {
    const Provenance &p = r.provenance;
    QString t = QStringLiteral("<table>\n");
    t += row(QStringLiteral("Report written by"),
             esc(QStringLiteral("ExpertScope %1 (commit %2)").arg(p.appVersion, p.appCommit)));
    if (!p.runVersion.isEmpty() || !p.runCommit.isEmpty())
        t += row(QStringLiteral("Measured by"),
                 esc(QStringLiteral("ExpertScope %1 (commit %2)").arg(p.runVersion, p.runCommit)));
    t += row(QStringLiteral("Engine / backend"), esc(orNone(p.backend)));
    t += row(QStringLiteral("Device (GPU / CPU)"), esc(orNone(p.device)));
    if (r.benchMachine.contains(QStringLiteral("host_cpu")))
        t +=
            row(QStringLiteral("Host CPU"), esc(r.benchMachine.value(QStringLiteral("host_cpu")).toString()));
    t += row(QStringLiteral("Driver"), esc(orNone(p.driver)));
    t += row(QStringLiteral("Model"), esc(orNone(p.modelName)));
    t += row(QStringLiteral("Model content hash"), esc(orNone(p.modelHash)));
    t += row(QStringLiteral("Precision policy"), esc(orNone(p.precision)));
    t += row(QStringLiteral("Sampling parameters"),
             esc(p.sampling.isEmpty()
                     ? QStringLiteral("the model's defaults")
                     : QString::fromUtf8(QJsonDocument(p.sampling).toJson(QJsonDocument::Compact))));
    // Never a result without the change that produced it: the router's intervention, or none.
    const ExpertIntervention iv =
        ExpertIntervention::fromJson(p.sampling.value(QStringLiteral("intervention")).toObject());
    t += row(QStringLiteral("Expert intervention"),
             esc(iv.isEmpty() ? QStringLiteral("none (the model's own routing)") : iv.summary()));
    t += row(QStringLiteral("Seed"), esc(p.seed ? QString::number(*p.seed) : QStringLiteral("not recorded")));
    t += row(QStringLiteral("Source"), esc(p.source));
    return t + QStringLiteral("</table>\n");
}

QString summaryTables(const Report &r, const ReportSummary &s) {
    QString t = QStringLiteral("<table>\n");
    auto n = [](const QString &v) { return QStringLiteral("<span>%1</span>").arg(v); };
    t += row(QStringLiteral("Requests"), n(QString::number(s.nRequests)));
    t += row(QStringLiteral("Prompt tokens (cached)"),
             n(QStringLiteral("%1 (%2)").arg(s.nPromptTokens).arg(s.nCachedPromptTokens)));
    t += row(QStringLiteral("Prefix-cache hit rate"),
             n(std::isfinite(s.prefixCacheHitRate) ? fmt(100 * s.prefixCacheHitRate, 1, QStringLiteral("%"))
                                                   : QStringLiteral("—")));
    t += row(QStringLiteral("Generated tokens"), n(QString::number(s.nOutputTokens)));
    t += row(QStringLiteral("TTFT p50 / p90 / p99"),
             n(QStringLiteral("%1 / %2 / %3 ms").arg(fmt(s.ttftP50Ms), fmt(s.ttftP90Ms), fmt(s.ttftP99Ms))));
    t += row(QStringLiteral("ITL p50 / p90 / p99"),
             n(QStringLiteral("%1 / %2 / %3 ms (%4 gaps)")
                   .arg(fmt(s.itlP50Ms, 3), fmt(s.itlP90Ms, 3), fmt(s.itlP99Ms, 3))
                   .arg(s.nItl)));
    t += row(QStringLiteral("Decode tok/s"), n(fmt(s.decodeTokS, 1)));
    t += row(QStringLiteral("Peak memory"), n(bytes(s.peakMemoryBytes)));
    t += row(QStringLiteral("Engine steps"), n(QString::number(s.nSteps)));
    t += QStringLiteral("</table>\n");

    const double total = s.phases.totalMs();
    if (total > 0) {
        t += QStringLiteral(
            "<h3>Engine time by phase</h3>\n<table><tr><th>phase</th><th>ms</th><th>share</th></tr>\n");
        const std::pair<const char *, double> ph[] = {{"attention", s.phases.attentionMs},
                                                      {"MoE routed", s.phases.moeMs},
                                                      {"MoE shared", s.phases.moeSharedMs},
                                                      {"dense", s.phases.denseMs},
                                                      {"head and sampling", s.phases.samplingMs},
                                                      {"other", s.phases.otherMs}};
        for (const auto &[name, ms] : ph)
            t += QStringLiteral("<tr><td>%1</td><td class=\"n\">%2</td><td class=\"n\">%3</td></tr>\n")
                     .arg(QLatin1String(name), fmt(ms, 2), fmt(100 * ms / total, 1, QStringLiteral("%")));
        t += QStringLiteral("</table>\n");
        if (s.phases.attentionMs + s.phases.moeMs + s.phases.denseMs == 0)
            t += QStringLiteral("<p class=\"meta\">No step of these replies was timed per phase (a remote server "
                                "reports none), so the engine's time is counted under “other”.</p>\n");
        else if (s.nStepsTimed < s.nSteps)
            t += QStringLiteral("<p class=\"meta\">Timed on the GPU in %1 of the %2 steps (one in 64 and each "
                                "reply's first two, or every step with “Time every step”); each reply's phases are "
                                "those steps' scaled to the time of all its steps.</p>\n")
                     .arg(s.nStepsTimed)
                     .arg(s.nSteps);
    }
    if (!r.bench.isEmpty()) {
        t += QStringLiteral(
            "<h3>Benchmark results</h3>\n<table><tr><th>test</th><th>tok/s</th><th>ms/token</th>"
            "<th>roofline tok/s</th><th>MBU</th></tr>\n");
        for (const BenchRow &b : r.bench) {
            const double tokens = b.tokensPerSecond * b.seconds;
            t +=
                QStringLiteral(
                    "<tr><td>%1</td><td class=\"n\">%2</td><td class=\"n\">%3</td><td class=\"n\">%4</td>"
                    "<td class=\"n\">%5</td></tr>\n")
                    .arg(esc(b.test), fmt(b.tokensPerSecond, 1),
                         tokens > 0 ? fmt(1000 * b.seconds / tokens, 3) : QStringLiteral("—"),
                         b.rooflineTokensPerSecond ? fmt(*b.rooflineTokensPerSecond, 1) : QStringLiteral("—"),
                         b.mbu ? fmt(100 * *b.mbu, 0, QStringLiteral("%")) : QStringLiteral("—"));
        }
        t += QStringLiteral("</table>\n");
        if (!r.benchMachine.isEmpty()) {
            t += QStringLiteral("<table>\n");
            for (auto it = r.benchMachine.constBegin(); it != r.benchMachine.constEnd(); ++it)
                t += row(it.key(),
                         esc(it.value().isString() ? it.value().toString()
                                                   : QString::number(it.value().toDouble(), 'f', 0)));
            t += QStringLiteral("</table>\n");
        }
    }
    if (r.requests.size() > 1 || r.kind != QLatin1String("message")) {
        t += QStringLiteral("<h3>Requests</h3>\n<table width=\"100%\"><tr><th>request</th><th>prompt "
                            "(cached)</th><th>generated</th>"
                            "<th>TTFT ms</th><th>decode tok/s</th><th>peak memory</th><th>steps</th></tr>\n");
        for (const ReportRequest &q : r.requests) {
            const MessageProfile &p = q.profile;
            t +=
                QStringLiteral("<tr><td>%1</td><td class=\"n\">%2 (%3)</td><td class=\"n\">%4</td><td "
                               "class=\"n\">%5</td>"
                               "<td class=\"n\">%6</td><td class=\"n\">%7</td><td class=\"n\">%8</td></tr>\n")
                    .arg(esc(q.label))
                    .arg(p.nPromptTokens)
                    .arg(p.nCachedPromptTokens)
                    .arg(p.tokenTimesUs.size())
                    .arg(p.ttftUs ? fmt(*p.ttftUs / 1000.0) : QStringLiteral("—"),
                         fmt(decodeTokensPerSecond(p.tokenTimesUs), 1), bytes(p.memoryPeakBytes))
                    .arg(p.nSteps);
        }
        t += QStringLiteral("</table>\n");
    }
    if (!s.layers.isEmpty()) {
        t += QStringLiteral(
            "<h3>Expert balance per MoE layer</h3>\n<table><tr><th>layer</th><th>token slots</th>"
            "<th>imbalance (max/mean)</th><th>entropy</th><th>dead experts</th></tr>\n");
        for (const LayerSummary &l : s.layers)
            t += QStringLiteral("<tr><td class=\"n\">%1</td><td class=\"n\">%2</td><td "
                                "class=\"n\">%3</td><td class=\"n\">%4</td>"
                                "<td class=\"n\">%5</td></tr>\n")
                     .arg(l.layer)
                     .arg(l.tokens)
                     .arg(fmt(l.imbalance, 3), fmt(l.entropy, 3))
                     .arg(l.deadExperts);
        t += QStringLiteral("</table>\n");
    }
    return t;
}

// forPdf: charts as <img src="chart:KEY"> resources (the caller adds the images) and no <figure>.
QString buildHtml(const Report &r, bool forPdf) {
    const ReportSummary s = summarize(r);
    QString h;
    h.reserve(64 * 1024);
    h += QStringLiteral(
             "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>%1</title>\n"
             "<meta name=\"generator\" content=\"ExpertScope %2\">\n<style>%3</style>\n</head>\n<body>\n")
             .arg(esc(QStringLiteral("ExpertScope report: ") + r.title), esc(r.provenance.appVersion),
                  QLatin1String(kCss));
    h += QStringLiteral(
             "<h1>%1</h1>\n<p class=\"meta\">ExpertScope profiling report (%2) · written %3 UTC</p>\n")
             .arg(esc(r.title), esc(r.kind),
                  r.generatedAt.toUTC().toString(QStringLiteral("yyyy-MM-dd HH:mm:ss")));
    h += QStringLiteral("<h2>Reproducibility</h2>\n") + provenanceTable(r);
    if (!r.excerpt.isEmpty()) {
        h += QStringLiteral("<h2>Conversation excerpt</h2>\n");
        if (r.excerptOmitted > 0)
            h += QStringLiteral("<p class=\"meta\">%1 earlier messages of the branch are not shown.</p>\n")
                     .arg(r.excerptOmitted);
        for (const ExcerptMessage &m : r.excerpt) {
            const QString when = m.createdAt.toUTC().toString(QStringLiteral("yyyy-MM-dd HH:mm:ss"));
            if (forPdf) // QTextDocument has no borders on divs: a one-cell table carries the colour bar
                h += QStringLiteral(
                         "<p><b>%1</b> <span class=\"when\">%2 UTC</span></p>\n<p class=\"text\">%3%4</p>\n")
                         .arg(esc(m.role), when, esc(m.text),
                              m.truncated ? QStringLiteral(" […]") : QString());
            else
                h += QStringLiteral("<div class=\"msg %1\"><span class=\"who\">%1</span> <span "
                                    "class=\"when\">%2 UTC</span>"
                                    "<div class=\"text\">%3%4</div></div>\n")
                         .arg(esc(m.role), when, esc(m.text),
                              m.truncated ? QStringLiteral(" […]") : QString());
        }
    }
    h += QStringLiteral("<h2>Summary</h2>\n") + summaryTables(r, s);
    const QList<Chart> charts = chartsFor(r);
    if (!charts.isEmpty()) {
        h += forPdf ? QStringLiteral("<h2 style=\"page-break-before: always\">Charts</h2>\n")
                    : QStringLiteral("<h2>Charts</h2>\n");
        for (Chart c : charts) {
            if (forPdf) {
                h += QStringLiteral("<p><img src=\"chart:%1\" width=\"%2\" height=\"%3\"></p>\n<p "
                                    "class=\"meta\">%4</p>\n")
                         .arg(chartKey(c))
                         .arg(kPdfChartWidth)
                         .arg(kPdfChartWidth * kChartSize.height() / kChartSize.width())
                         .arg(esc(chartCaption(c)));
            } else {
                h += QStringLiteral("<figure><img alt=\"%1\" width=\"%2\" height=\"%3\" "
                                    "src=\"data:image/svg+xml;base64,%4\">"
                                    "<figcaption>%5</figcaption></figure>\n")
                         .arg(esc(chartTitle(c)))
                         .arg(kChartSize.width())
                         .arg(kChartSize.height())
                         .arg(QString::fromLatin1(chartSvg(c, r, kChartSize).toBase64()),
                              esc(chartCaption(c)));
            }
        }
    }
    h += QStringLiteral("<h2>Metric definitions</h2>\n<dl>\n");
    for (const auto &[name, def] : metricDefinitions())
        h += QStringLiteral("<dt>%1</dt><dd>%2</dd>\n").arg(esc(name), esc(def));
    h += QStringLiteral("</dl>\n<p class=\"meta\">Raw series: export the same report as JSON (schema "
                        "expertscope-report-v1), CSV or a Perfetto trace.</p>\n</body>\n</html>\n");
    return h;
}

bool writeAll(QIODevice &out, const QByteArray &data, QString *error) {
    if (out.write(data) != data.size()) {
        *error = QStringLiteral("Could not write the report: %1").arg(out.errorString());
        return false;
    }
    return true;
}

QString csvField(const QString &s) {
    if (!s.contains(QLatin1Char(',')) && !s.contains(QLatin1Char('"')) && !s.contains(QLatin1Char('\n')) &&
        !s.contains(QLatin1Char('\r')))
        return s;
    QString q = s;
    q.replace(QLatin1Char('"'), QStringLiteral("\"\""));
    return QLatin1Char('"') + q + QLatin1Char('"');
}

} // namespace

std::optional<Format> formatFromName(const QString &name) {
    const QString n = name.toLower();
    if (n == QLatin1String("html")) return Format::Html;
    if (n == QLatin1String("pdf")) return Format::Pdf;
    if (n == QLatin1String("json")) return Format::Json;
    if (n == QLatin1String("csv")) return Format::Csv;
    if (n == QLatin1String("trace")) return Format::Trace;
    return std::nullopt;
}

QString formatName(Format f) {
    switch (f) {
    case Format::Html:
        return QStringLiteral("html");
    case Format::Pdf:
        return QStringLiteral("pdf");
    case Format::Json:
        return QStringLiteral("json");
    case Format::Csv:
        return QStringLiteral("csv");
    case Format::Trace:
        return QStringLiteral("trace");
    }
    return {};
}

QString formatSuffix(Format f) {
    return f == Format::Trace ? QStringLiteral(".trace.json") : QLatin1Char('.') + formatName(f);
}

QString reportHtml(const Report &r) { return buildHtml(r, false); }

bool writeHtml(const Report &r, QIODevice &out, QString *error) {
    return writeAll(out, reportHtml(r).toUtf8(), error);
}

bool writePdf(const Report &r, QIODevice &out, QString *error) {
    QTextDocument doc;
    doc.setDefaultFont(QFont(QStringLiteral("DejaVu Sans"), 9));
    for (Chart c : chartsFor(r))
        doc.addResource(QTextDocument::ImageResource, QUrl(QStringLiteral("chart:") + chartKey(c)),
                        chartImage(c, r, kChartSize, 2.0));
    doc.setHtml(buildHtml(r, true));
    QPdfWriter pdf(&out);
    pdf.setPageSize(QPageSize(QPageSize::A4));
    pdf.setPageMargins(QMarginsF(15, 15, 15, 15), QPageLayout::Millimeter);
    pdf.setResolution(300);
    pdf.setTitle(QStringLiteral("ExpertScope report: ") + r.title);
    pdf.setCreator(QStringLiteral("ExpertScope %1").arg(r.provenance.appVersion));
    // Laid out at the page's text width in 96-dpi pixels (what the chart widths and the 100% tables
    // are relative to), less a footer line for the page number; each page is then drawn scaled to
    // the writer's resolution.
    constexpr double kFooter = 22;
    const QRectF page = pdf.pageLayout().paintRectPixels(96);
    doc.setPageSize(QSizeF(page.width(), page.height() - kFooter));
    const int pages = doc.pageCount();
    QPainter p;
    if (!p.begin(&pdf)) {
        *error = QStringLiteral("Could not start the PDF: %1").arg(out.errorString());
        return false;
    }
    const double scale = pdf.resolution() / 96.0;
    p.scale(scale, scale);
    for (int i = 0; i < pages; ++i) {
        if (i > 0) pdf.newPage();
        const QRectF body(0, i * doc.pageSize().height(), doc.pageSize().width(), doc.pageSize().height());
        p.save();
        p.translate(0, -body.top());
        doc.drawContents(&p, body);
        p.restore();
        QFont footer(QStringLiteral("DejaVu Sans"));
        footer.setPixelSize(10); // pixels of the 96-dpi layout (points would be scaled twice)
        p.setFont(footer);
        p.setPen(QColor(90, 90, 90));
        p.drawText(QRectF(0, page.height() - kFooter + 6, page.width(), kFooter - 6),
                   Qt::AlignRight | Qt::AlignVCenter, QStringLiteral("%1 / %2").arg(i + 1).arg(pages));
        p.drawText(QRectF(0, page.height() - kFooter + 6, page.width() * 0.8, kFooter - 6),
                   Qt::AlignLeft | Qt::AlignVCenter,
                   QFontMetricsF(footer).elidedText(QStringLiteral("ExpertScope report: ") + r.title,
                                                    Qt::ElideRight, page.width() * 0.8));
    }
    p.end();
    if (!out.isOpen() || (out.size() == 0 && !out.isSequential())) {
        *error = QStringLiteral("Could not write the PDF: %1").arg(out.errorString());
        return false;
    }
    return true;
}

QJsonObject reportJson(const Report &r) {
    const Provenance &p = r.provenance;
    QJsonObject prov{
        {QStringLiteral("app_version"), p.appVersion}, {QStringLiteral("app_commit"), p.appCommit},
        {QStringLiteral("run_version"), p.runVersion}, {QStringLiteral("run_commit"), p.runCommit},
        {QStringLiteral("backend"), p.backend},        {QStringLiteral("device"), p.device},
        {QStringLiteral("driver"), p.driver},          {QStringLiteral("model_name"), p.modelName},
        {QStringLiteral("model_hash"), p.modelHash},   {QStringLiteral("precision"), p.precision},
        {QStringLiteral("sampling"), p.sampling},      {QStringLiteral("seed"), seedJson(p.seed)},
        {QStringLiteral("source"), p.source}};
    QJsonArray excerpt;
    for (const ExcerptMessage &m : r.excerpt)
        excerpt.append(
            QJsonObject{{QStringLiteral("role"), m.role},
                        {QStringLiteral("created_at"), m.createdAt.toUTC().toString(Qt::ISODateWithMs)},
                        {QStringLiteral("text"), m.text},
                        {QStringLiteral("truncated"), m.truncated}});
    const ReportSummary s = summarize(r);
    QJsonArray layers;
    for (const LayerSummary &l : s.layers)
        layers.append(QJsonObject{{QStringLiteral("layer"), l.layer},
                                  {QStringLiteral("token_slots"), qint64(l.tokens)},
                                  {QStringLiteral("imbalance"), num(l.imbalance)},
                                  {QStringLiteral("entropy"), num(l.entropy)},
                                  {QStringLiteral("dead_experts"), l.deadExperts}});
    auto pct = [&](double a, double b, double c) {
        return QJsonObject{{QStringLiteral("p50"), num(a)},
                           {QStringLiteral("p90"), num(b)},
                           {QStringLiteral("p99"), num(c)}};
    };
    QJsonObject itl = pct(s.itlP50Ms, s.itlP90Ms, s.itlP99Ms);
    itl.insert(QStringLiteral("n"), s.nItl);
    QJsonObject summary{
        {QStringLiteral("requests"), s.nRequests},
        {QStringLiteral("prompt_tokens"), s.nPromptTokens},
        {QStringLiteral("cached_prompt_tokens"), s.nCachedPromptTokens},
        {QStringLiteral("output_tokens"), s.nOutputTokens},
        {QStringLiteral("steps"), s.nSteps},
        {QStringLiteral("ttft_ms"), pct(s.ttftP50Ms, s.ttftP90Ms, s.ttftP99Ms)},
        {QStringLiteral("itl_ms"), itl},
        {QStringLiteral("decode_tokens_per_s"), num(s.decodeTokS)},
        {QStringLiteral("prefix_cache_hit_rate"), num(s.prefixCacheHitRate)},
        {QStringLiteral("peak_memory_bytes"), s.peakMemoryBytes},
        {QStringLiteral("phases_ms"), QJsonObject{{QStringLiteral("attention"), s.phases.attentionMs},
                                                  {QStringLiteral("moe"), s.phases.moeMs},
                                                  {QStringLiteral("moe_shared"), s.phases.moeSharedMs},
                                                  {QStringLiteral("dense"), s.phases.denseMs},
                                                  {QStringLiteral("sampling"), s.phases.samplingMs},
                                                  {QStringLiteral("other"), s.phases.otherMs}}},
        {QStringLiteral("layers"), layers}};
    QJsonArray requests;
    for (const ReportRequest &q : r.requests) {
        QJsonObject o{{QStringLiteral("label"), q.label},
                      {QStringLiteral("message_id"),
                       q.messageId > 0 ? QJsonValue(q.messageId) : QJsonValue(QJsonValue::Null)},
                      {QStringLiteral("offset_us"), q.offsetUs},
                      {QStringLiteral("profile"), profileToJson(q.profile)}};
        if (q.metrics) o.insert(QStringLiteral("metrics"), metricsToJson(*q.metrics));
        requests.append(o);
    }
    QJsonObject root{{QStringLiteral("format"), QStringLiteral("expertscope.report")},
                     {QStringLiteral("version"), 1},
                     {QStringLiteral("kind"), r.kind},
                     {QStringLiteral("title"), r.title},
                     {QStringLiteral("generated_at"), r.generatedAt.toUTC().toString(Qt::ISODateWithMs)},
                     {QStringLiteral("provenance"), prov},
                     {QStringLiteral("excerpt"), excerpt},
                     {QStringLiteral("excerpt_omitted"), r.excerptOmitted},
                     {QStringLiteral("summary"), summary},
                     {QStringLiteral("requests"), requests}};
    if (r.kind == QLatin1String("bench")) {
        QJsonArray results;
        for (const BenchRow &b : r.bench) {
            QJsonObject o{{QStringLiteral("test"), b.test},
                          {QStringLiteral("tokens_per_s"), b.tokensPerSecond},
                          {QStringLiteral("seconds"), b.seconds}};
            if (b.rooflineTokensPerSecond)
                o.insert(QStringLiteral("roofline_tokens_per_s"), *b.rooflineTokensPerSecond);
            if (b.mbu) o.insert(QStringLiteral("mbu"), *b.mbu);
            results.append(o);
        }
        root.insert(QStringLiteral("bench"), QJsonObject{{QStringLiteral("results"), results},
                                                         {QStringLiteral("machine"), r.benchMachine}});
    }
    return root;
}

bool writeJson(const Report &r, QIODevice &out, QString *error) {
    return writeAll(out, QJsonDocument(reportJson(r)).toJson(QJsonDocument::Indented), error);
}

bool writeCsv(const Report &r, QIODevice &out, QString *error) {
    QByteArray b = "request,series,index,time_us,value\n";
    auto line = [&](const QString &req, const char *series, qint64 index, const QString &time,
                    const QString &value) {
        b += csvField(req).toUtf8() + ',' + series + ',' + QByteArray::number(index) + ',' + time.toUtf8() +
             ',' + value.toUtf8() + '\n';
    };
    auto line2 = [&](const QString &req, const QString &series, qint64 index, const QString &time,
                     const QString &value) {
        b += csvField(req).toUtf8() + ',' + series.toUtf8() + ',' + QByteArray::number(index) + ',' +
             time.toUtf8() + ',' + value.toUtf8() + '\n';
    };
    for (const ReportRequest &q : r.requests) {
        const MessageProfile &p = q.profile;
        const QString &L = q.label;
        for (qsizetype i = 0; i < p.tokenTimesUs.size(); ++i)
            line(L, "token_time_us", i, QString::number(p.tokenTimesUs[i]),
                 QString::number(p.tokenTimesUs[i]));
        const QList<double> itl = interTokenLatenciesMs(p.tokenTimesUs);
        for (qsizetype i = 0; i < itl.size(); ++i)
            line(L, "itl_ms", i + 1, QString::number(p.tokenTimesUs[i + 1]),
                 QString::number(itl[i], 'g', 10));
        const QList<RatePoint> rate = throughputSeries(p.tokenTimesUs, 250000);
        const qint64 t0 = p.tokenTimesUs.isEmpty() ? 0 : p.tokenTimesUs.first();
        for (qsizetype i = 0; i < rate.size(); ++i)
            line(L, "tokens_per_s", i, QString::number(t0 + qRound64(rate[i].tS * 1e6)),
                 QString::number(rate[i].tokensPerSecond, 'g', 10));
        for (qsizetype i = 0; i < p.steps.size(); ++i) {
            const ProfileStep &s = p.steps[i];
            const QString t = QString::number(s.tStartUs);
            line(L, "step_duration_us", i, t, QString::number(s.durationUs));
            line(L, "step_attention_us", i, t, QString::number(s.attentionUs));
            line(L, "step_moe_us", i, t, QString::number(s.moeUs));
            line(L, "step_dense_us", i, t, QString::number(s.denseUs));
            line(L, "step_sampling_us", i, t, QString::number(s.samplingUs));
            line(L, "step_prefill_tokens", i, t, QString::number(s.nPrefillTokens));
            line(L, "step_decode_tokens", i, t, QString::number(s.nDecodeTokens));
            line(L, "step_seqs", i, t, QString::number(s.nSeqs));
        }
        for (qsizetype i = 0; i < p.memory.size(); ++i) {
            line(L, "memory_in_use_bytes", i, QString::number(p.memory[i].tUs),
                 QString::number(p.memory[i].inUseBytes));
            line(L, "kv_blocks_used", i, QString::number(p.memory[i].tUs),
                 QString::number(p.memory[i].kvBlocksUsed));
        }
        for (const LayerRouting &lr : p.routing)
            for (qsizetype e = 0; e < lr.expertCounts.size(); ++e)
                line2(L, QStringLiteral("expert_tokens_L%1").arg(lr.layer), e, QString(),
                      QString::number(lr.expertCounts[e]));
    }
    return writeAll(out, b, error);
}

bool writeTrace(const Report &r, QIODevice &out, QString *error) {
    QJsonArray ev;
    const int pid = 1;
    auto meta = [&](const char *name, int tid, const QString &value) {
        ev.append(QJsonObject{{QStringLiteral("ph"), QStringLiteral("M")},
                              {QStringLiteral("pid"), pid},
                              {QStringLiteral("tid"), tid},
                              {QStringLiteral("name"), QLatin1String(name)},
                              {QStringLiteral("args"), QJsonObject{{QStringLiteral("name"), value}}}});
    };
    auto span = [&](const QString &name, const char *cat, int tid, double ts, double dur,
                    const QJsonObject &args = {}) {
        QJsonObject o{{QStringLiteral("ph"), QStringLiteral("X")},
                      {QStringLiteral("pid"), pid},
                      {QStringLiteral("tid"), tid},
                      {QStringLiteral("name"), name},
                      {QStringLiteral("cat"), QLatin1String(cat)},
                      {QStringLiteral("ts"), ts},
                      {QStringLiteral("dur"), std::max(0.0, dur)}};
        if (!args.isEmpty()) o.insert(QStringLiteral("args"), args);
        ev.append(o);
    };
    auto counter = [&](const QString &name, double ts, const QJsonObject &args) {
        ev.append(QJsonObject{{QStringLiteral("ph"), QStringLiteral("C")},
                              {QStringLiteral("pid"), pid},
                              {QStringLiteral("name"), name},
                              {QStringLiteral("ts"), ts},
                              {QStringLiteral("args"), args}});
    };
    meta("process_name", 0, QStringLiteral("ExpertScope: ") + r.title);
    for (qsizetype i = 0; i < r.requests.size(); ++i) {
        const ReportRequest &q = r.requests[i];
        const MessageProfile &p = q.profile;
        const double base = double(q.offsetUs);
        const int reqTid = int(2 * i + 1), stepTid = int(2 * i + 2);
        meta("thread_name", reqTid, q.label);
        meta("thread_name", stepTid, q.label + QStringLiteral(" · engine steps"));
        // Request spans: queue = submit → its first step; prefill = → first token; decode = → finish.
        const double first = p.steps.isEmpty() ? 0.0 : double(std::max<qint64>(0, p.steps.first().tStartUs));
        const double ttft = p.ttftUs ? double(*p.ttftUs) : double(p.durationUs);
        span(QStringLiteral("request"), "request", reqTid, base, double(p.durationUs),
             QJsonObject{{QStringLiteral("prompt_tokens"), p.nPromptTokens},
                         {QStringLiteral("cached_prompt_tokens"), p.nCachedPromptTokens},
                         {QStringLiteral("generated_tokens"), p.tokenTimesUs.size()},
                         {QStringLiteral("preemptions"), p.nPreemptions}});
        if (first > 0) span(QStringLiteral("queue"), "request", reqTid, base, first);
        span(QStringLiteral("prefill"), "request", reqTid, base + first, ttft - first);
        if (p.ttftUs)
            span(QStringLiteral("decode"), "request", reqTid, base + ttft, double(p.durationUs) - ttft);
        // Steps, with their phases laid end to end inside (the engine reports sums per step, not order).
        for (const ProfileStep &s : p.steps) {
            const double t0 = base + double(s.tStartUs);
            span(QStringLiteral("step"), "step", stepTid, t0, double(s.durationUs),
                 QJsonObject{{QStringLiteral("seqs"), s.nSeqs},
                             {QStringLiteral("prefill_tokens"), s.nPrefillTokens},
                             {QStringLiteral("decode_tokens"), s.nDecodeTokens}});
            const qint64 other =
                std::max<qint64>(0, s.durationUs - s.attentionUs - s.moeUs - s.denseUs - s.samplingUs);
            const std::pair<const char *, qint64> ph[] = {{"attention", s.attentionUs},
                                                          {"moe", s.moeUs},
                                                          {"dense", s.denseUs},
                                                          {"sampling", s.samplingUs},
                                                          {"other", other}};
            double at = t0;
            for (const auto &[name, us] : ph) {
                if (us <= 0) continue;
                span(QLatin1String(name), "phase", stepTid, at, double(us));
                at += double(us);
            }
        }
        // Counters: memory, tok/s, per-layer expert load (imbalance and top share of the counts so far).
        for (const ProfileMemorySample &m : p.memory) {
            counter(QStringLiteral("memory in use (bytes)"), base + double(m.tUs),
                    QJsonObject{{QStringLiteral("bytes"), m.inUseBytes}});
            counter(QStringLiteral("KV blocks in use"), base + double(m.tUs),
                    QJsonObject{{QStringLiteral("blocks"), m.kvBlocksUsed}});
        }
        if (p.memory.isEmpty() && p.memoryPeakBytes > 0)
            counter(QStringLiteral("memory in use (bytes)"), base,
                    QJsonObject{{QStringLiteral("bytes"), p.memoryPeakBytes}});
        const qint64 t0tok = p.tokenTimesUs.isEmpty() ? 0 : p.tokenTimesUs.first();
        for (const RatePoint &pt : throughputSeries(p.tokenTimesUs, 250000))
            counter(QStringLiteral("tok/s"), base + double(t0tok) + pt.tS * 1e6,
                    QJsonObject{{QStringLiteral("tokens_per_s"), pt.tokensPerSecond}});
        const int nMoe = int(p.moeLayers.size());
        const int nPos = p.tracePositions();
        // counts is sized nMoe × n_experts: only for a shape inside the limits (storage_types.h).
        if (nMoe > 0 && p.k > 0 && p.nExperts > 0 && nPos > 0 && nMoe <= kMaxProfileLayers &&
            p.nExperts <= kMaxProfileExperts) {
            // Trace positions: the prompt, then one per generated token (the last token is not computed).
            const int firstGen = std::max(0, nPos - int(p.tokenTimesUs.size()) + 1);
            const int nGen = nPos - firstGen;
            const int every = std::max(1, nGen / 256); // at most ≈256 samples per layer
            QList<quint64> counts(qsizetype(nMoe) * p.nExperts, 0);
            for (int pos = 0; pos < nPos; ++pos) {
                for (int m = 0; m < nMoe; ++m)
                    for (int j = 0; j < p.k; ++j) {
                        const int id = p.traceIds[(qsizetype(pos) * nMoe + m) * p.k + j];
                        if (id >= 0 && id < p.nExperts) ++counts[qsizetype(m) * p.nExperts + id];
                    }
                const int gen = pos - firstGen; // this position's output is generated token gen + 1
                if (pos < firstGen || (gen % every != 0 && pos != nPos - 1)) continue;
                const qsizetype ti = std::min<qsizetype>(gen, p.tokenTimesUs.size() - 1);
                const double ts = base + double(p.tokenTimesUs[ti]);
                for (int m = 0; m < nMoe; ++m) {
                    const LayerBalance lb = layerBalance(counts.mid(qsizetype(m) * p.nExperts, p.nExperts));
                    counter(QStringLiteral("expert load L%1").arg(p.moeLayers[m]), ts,
                            QJsonObject{{QStringLiteral("imbalance"), num(lb.imbalance)},
                                        {QStringLiteral("entropy"), num(lb.entropy)}});
                }
            }
        } else {
            for (const LayerRouting &lr : p.routing) {
                QList<quint64> c;
                for (quint32 x : lr.expertCounts) c.append(x);
                const LayerBalance lb = layerBalance(c);
                counter(QStringLiteral("expert load L%1").arg(lr.layer), base + double(p.durationUs),
                        QJsonObject{{QStringLiteral("imbalance"), num(lb.imbalance)},
                                    {QStringLiteral("entropy"), num(lb.entropy)}});
            }
        }
    }
    const QJsonObject root{{QStringLiteral("traceEvents"), ev},
                           {QStringLiteral("displayTimeUnit"), QStringLiteral("ms")},
                           {QStringLiteral("otherData"),
                            QJsonObject{{QStringLiteral("format"), QStringLiteral("expertscope.trace")},
                                        {QStringLiteral("version"), 1},
                                        {QStringLiteral("title"), r.title},
                                        {QStringLiteral("app_version"), r.provenance.appVersion},
                                        {QStringLiteral("app_commit"), r.provenance.appCommit}}}};
    return writeAll(out, QJsonDocument(root).toJson(QJsonDocument::Compact), error);
}

bool writeFileAtomically(const QString &path, const std::function<bool(QIODevice &, QString *)> &write,
                         QString *error) {
    QSaveFile f(path);
    if (!f.open(QIODevice::WriteOnly)) {
        *error = QStringLiteral("Could not open %1 for writing: %2").arg(path, f.errorString());
        return false;
    }
    if (!write(f, error)) {
        f.cancelWriting();
        return false;
    }
    if (!f.commit()) {
        *error = QStringLiteral("Could not save %1: %2").arg(path, f.errorString());
        return false;
    }
    return true;
}

bool exportReport(const Report &r, Format format, const QString &path, QString *error) {
    return writeFileAtomically(
        path,
        [&](QIODevice &out, QString *err) {
            switch (format) {
            case Format::Html:
                return writeHtml(r, out, err);
            case Format::Pdf:
                return writePdf(r, out, err);
            case Format::Json:
                return writeJson(r, out, err);
            case Format::Csv:
                return writeCsv(r, out, err);
            case Format::Trace:
                return writeTrace(r, out, err);
            }
            return false;
        },
        error);
}

} // namespace es::report
