// expertscope-cli report / import (built only where Qt is: they use es_report and es_storage).
// report: a profiling report of a stored message, conversation or bench run, or of a
// `bench --json` file, in html|pdf|json|csv|trace; a conversation also as markdown|chat-json.
// import: a conversation JSON (as exported) or a bench JSON into the database.
#include "cli_commands.h"

#include "chat_store.h"
#include "conversation_export.h"
#include "report_data.h"
#include "report_writers.h"

#include <QFile>
#include <QGuiApplication>
#include <QJsonDocument>
#include <QJsonObject>

#include <cstdio>
#include <memory>

namespace es::cli {
namespace {

// Qt's own warnings as one "warning:" line each; the runtime-directory notice (a headless machine
// has no XDG_RUNTIME_DIR, and the CLI does not need one) is dropped.
void qtMessage(QtMsgType type, const QMessageLogContext &, const QString &msg) {
    if (type == QtDebugMsg || type == QtInfoMsg || msg.contains(QLatin1String("XDG_RUNTIME_DIR"))) return;
    std::fprintf(stderr, "warning: %s\n", qPrintable(msg));
}

// Painting text needs a QGuiApplication; without a display the offscreen platform serves.
std::unique_ptr<QGuiApplication> makeApp() {
    qInstallMessageHandler(qtMessage);
    if (qEnvironmentVariableIsEmpty("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
    static int argc = 1;
    static char name[] = "expertscope-cli";
    static char *argv[] = {name, nullptr};
    return std::make_unique<QGuiApplication>(argc, argv);
}

std::string s(const QString &q) { return q.toStdString(); }

bool openStore(ChatStore &store, const std::string &db, std::string *error) {
    if (!QFile::exists(QString::fromStdString(db))) {
        *error = "no database at " + db;
        return false;
    }
    OpenOptions options;
    options.moveDamagedAside = false; // a path the user gave: refuse a file that is not a database
    const OpenResult r = store.open(QString::fromStdString(db), options);
    if (!r.ok()) {
        *error = "cannot open " + db + ": " + s(r.message);
        return false;
    }
    return true;
}

std::optional<QJsonObject> readJsonFile(const std::string &path, std::string *error) {
    QFile f(QString::fromStdString(path));
    if (!f.open(QIODevice::ReadOnly)) {
        *error = "cannot read " + path + ": " + s(f.errorString());
        return std::nullopt;
    }
    QJsonParseError pe;
    const QByteArray bytes = f.readAll();
    const QJsonDocument d = QJsonDocument::fromJson(bytes, &pe);
    if (pe.error != QJsonParseError::NoError || !d.isObject()) {
        *error = path + " is not a JSON object" +
                 (pe.error != QJsonParseError::NoError
                      ? ": " + s(pe.errorString()) + " at byte " + std::to_string(pe.offset)
                      : "");
        return std::nullopt;
    }
    // A bench JSON is stored as it is (`import --bench-json`): no text in it may be half a character.
    if (const std::optional<LoneSurrogate> lone = findLoneSurrogate(d, bytes)) {
        char unit[8];
        std::snprintf(unit, sizeof unit, "%04x", unsigned(lone->unit));
        *error = path + ": " +
                 (lone->path.isEmpty() ? "byte " + std::to_string(lone->byteOffset)
                                       : (lone->inKey ? "a key of \"" : "\"") + s(lone->path) + "\"") +
                 " holds a lone UTF-16 surrogate (\\u" + unit + "), which is not text";
        return std::nullopt;
    }
    return d.object();
}

} // namespace

int cmd_report(const report_opts &o) {
    auto app = makeApp();
    const QString out = QString::fromStdString(o.out), format = QString::fromStdString(o.format);
    const bool chatFormat = format == QLatin1String("markdown") || format == QLatin1String("chat-json");
    const std::optional<report::Format> f = report::formatFromName(format);
    if (!f && !chatFormat)
        return fail("--format must be html, pdf, json, csv, trace, markdown or chat-json, not " + o.format);
    if (chatFormat && o.conversation <= 0)
        return fail("--format " + o.format + " exports a conversation: give --conversation ID");
    std::string err;
    QString error;
    std::optional<report::Report> r;
    if (!o.bench_json.empty()) {
        const auto j = readJsonFile(o.bench_json, &err);
        if (!j) return fail(err);
        r = report::benchReport(*j, QString::fromStdString(o.bench_json), &error);
    } else {
        if (o.db.empty()) return fail("report needs --db FILE (or --bench-json FILE)");
        ChatStore store;
        if (!openStore(store, o.db, &err)) return fail(err);
        // Progress on stderr for long conversations, about every 5%.
        int lastPct = -1;
        const report::ProgressFn progress = [&](qint64 done, qint64 total) {
            const int pct = total > 0 ? int(100 * done / total) : 100;
            if (total >= 2000 && pct / 5 != lastPct / 5) std::fprintf(stderr, "\r%3d%%", pct), lastPct = pct;
            return true;
        };
        if (chatFormat) {
            const bool ok =
                format == QLatin1String("markdown")
                    ? report::exportConversationMarkdown(store, o.conversation, out, &error, progress)
                    : report::exportConversationJson(store, o.conversation, out, &error, progress);
            if (lastPct >= 0) std::fprintf(stderr, "\n");
            if (!ok) return fail(s(error));
            std::printf("wrote %s\n", o.out.c_str());
            return 0;
        }
        if (o.message > 0)
            r = report::messageReport(store, o.message, &error);
        else if (o.conversation > 0)
            r = report::conversationReport(store, o.conversation, &error, progress);
        else if (o.bench > 0)
            r = report::benchRunReport(store, o.bench, &error);
        else
            return fail("report needs one of --conversation, --message, --bench or --bench-json");
        if (lastPct >= 0) std::fprintf(stderr, "\n");
    }
    if (!r) return fail(s(error));
    if (!report::exportReport(*r, *f, out, &error)) return fail(s(error));
    std::printf("wrote %s\n", o.out.c_str());
    return 0;
}

int cmd_import(const import_opts &o) {
    auto app = makeApp();
    ChatStore store;
    // Creates the database if needed; a file that is not one is refused and left as it is.
    OpenOptions options;
    options.moveDamagedAside = false;
    const OpenResult opened = store.open(QString::fromStdString(o.db), options);
    if (!opened.ok()) return fail("cannot open " + o.db + ": " + s(opened.message));
    QString error;
    if (!o.chat.empty()) {
        QFile f(QString::fromStdString(o.chat));
        if (!f.open(QIODevice::ReadOnly)) return fail("cannot read " + o.chat + ": " + s(f.errorString()));
        const std::optional<qint64> id = report::importConversationJson(store, f.readAll(), &error);
        if (!id) return fail(o.chat + ": " + s(error));
        std::printf("conversation %lld\n", (long long)*id);
        return 0;
    }
    std::string err;
    const auto j = readJsonFile(o.bench_json, &err);
    if (!j) return fail(err);
    if (!report::benchReport(*j, QString::fromStdString(o.bench_json), &error)) return fail(s(error));
    const std::optional<qint64> id = store.addBenchRun(*j);
    if (!id) return fail(s(store.lastError()));
    std::printf("bench %lld\n", (long long)*id);
    return 0;
}

} // namespace es::cli
