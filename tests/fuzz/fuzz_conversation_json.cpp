// An exported conversation of any bytes (File ▸ Import conversation, `expertscope-cli import
// --chat`): parseConversationJson() refuses it naming the problem, or the conversation imports
// into a store, and exporting it, importing that and exporting again gives the same bytes (the
// round trip docs/reports.md promises). What imports also exports as Markdown and makes a
// conversation report in every format, each of a size bounded by the input, never by the counts
// a profile claims (a profile whose counts disagree with its arrays does not import).
#include "chat_store.h"
#include "conversation_export.h"
#include "fuzz_qt_app.h"
#include "fuzz_support.h"
#include "report_data.h"
#include "report_writers.h"

#include <QBuffer>

namespace {

QByteArray export_json(const es::ChatStore &store, qint64 id) {
    QByteArray out;
    QBuffer buf(&out);
    buf.open(QIODevice::WriteOnly);
    QString error;
    ES_FUZZ_CHECK(es::report::writeConversationJson(store, id, buf, &error));
    return out;
}

// Every report format and the Markdown export; each at most a few MiB for at most 16 KiB of input
// (the charts' SVG and the profile's arrays, never a count's worth of cells or bins).
void write_reports(const es::ChatStore &store, qint64 id) {
    using namespace es::report;
    constexpr qsizetype k_max_output = 16 << 20;
    QString error;
    QByteArray md;
    QBuffer mdBuf(&md);
    mdBuf.open(QIODevice::WriteOnly);
    ES_FUZZ_CHECK(writeConversationMarkdown(store, id, mdBuf, &error));
    ES_FUZZ_CHECK(md.size() < k_max_output);
    const std::optional<Report> r = conversationReport(store, id, &error);
    if (!r) return; // no measured reply on the active branch
    for (auto write : {writeHtml, writeJson, writeCsv, writeTrace}) {
        QByteArray out;
        QBuffer buf(&out);
        buf.open(QIODevice::WriteOnly);
        ES_FUZZ_CHECK(write(*r, buf, &error));
        ES_FUZZ_CHECK(!out.isEmpty() && out.size() < k_max_output);
    }
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    es::fuzz::make_qt_app();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    using namespace es;
    static ChatStore *store = [] {
        auto *s = new ChatStore;
        ES_FUZZ_CHECK(s->open(":memory:").ok());
        return s;
    }();
    const QByteArray json(reinterpret_cast<const char *>(data), qsizetype(size));
    QString error;
    const auto id = report::importConversationJson(*store, json, &error);
    if (!id) {
        ES_FUZZ_CHECK(!error.isEmpty());
        return 0;
    }
    write_reports(*store, *id);
    const QByteArray first = export_json(*store, *id);
    const auto id2 = report::importConversationJson(*store, first, &error);
    if (!id2) std::fprintf(stderr, "re-import failed: %s\n", qPrintable(error));
    ES_FUZZ_CHECK(id2.has_value());
    const QByteArray second = export_json(*store, *id2);
    ES_FUZZ_CHECK(first == second);
    ES_FUZZ_CHECK(store->deleteConversation(*id).has_value() && store->deleteConversation(*id2).has_value());
    return 0;
}
