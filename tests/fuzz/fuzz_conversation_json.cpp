// An exported conversation of any bytes (File ▸ Import conversation, `expertscope-cli import
// --chat`): parseConversationJson() refuses it naming the problem, or the conversation imports
// into a store, and exporting it, importing that and exporting again gives the same bytes (the
// round trip docs/reports.md promises).
#include "chat_store.h"
#include "conversation_export.h"
#include "fuzz_qt_app.h"
#include "fuzz_support.h"

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
    const QByteArray first = export_json(*store, *id);
    const auto id2 = report::importConversationJson(*store, first, &error);
    if (!id2) std::fprintf(stderr, "re-import failed: %s\n", qPrintable(error));
    ES_FUZZ_CHECK(id2.has_value());
    const QByteArray second = export_json(*store, *id2);
    ES_FUZZ_CHECK(first == second);
    ES_FUZZ_CHECK(store->deleteConversation(*id).has_value() && store->deleteConversation(*id2).has_value());
    return 0;
}
