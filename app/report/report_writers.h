// Writers of a Report (report_data.h) in every export format, and exportReport(), which writes
// one atomically (QSaveFile: a failed or cancelled export leaves any older file untouched).
// Formats and fields are documented in docs/reports.md; the JSON follows
// docs/schemas/expertscope-report-v1.schema.json. User text (prompts, replies, titles) is escaped
// in HTML and PDF and quoted in CSV; it is never interpreted. Needs a QGuiApplication (fonts)
// for HTML and PDF; call on the thread that owns it.
#pragma once

#include "report_data.h"

#include <QIODevice>
#include <QString>

#include <optional>

namespace es::report {

enum class Format { Html, Pdf, Json, Csv, Trace };
std::optional<Format> formatFromName(const QString &name); // "html" | "pdf" | "json" | "csv" | "trace"
QString formatName(Format f);
QString formatSuffix(Format f); // ".html", ".pdf", ".json", ".csv", ".trace.json"

QString reportHtml(const Report &r); // the self-contained HTML document
QJsonObject reportJson(const Report &r);
bool writeHtml(const Report &r, QIODevice &out, QString *error);
bool writePdf(const Report &r, QIODevice &out, QString *error); // A4, paginated, page numbers
bool writeJson(const Report &r, QIODevice &out, QString *error);
bool writeCsv(const Report &r, QIODevice &out,
              QString *error); // long format: request,series,index,time_us,value
bool writeTrace(const Report &r, QIODevice &out,
                QString *error); // Trace Event JSON (Perfetto, chrome://tracing)

bool exportReport(const Report &r, Format f, const QString &path, QString *error);

// Writes path atomically: write() fills the QSaveFile; returning false (an error or a cancel)
// discards everything. error gets the reason (write()'s or the file system's).
bool writeFileAtomically(const QString &path, const std::function<bool(QIODevice &, QString *)> &write,
                         QString *error);

} // namespace es::report
