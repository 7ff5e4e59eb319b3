// A bench run's JSON of any bytes (`expertscope-cli report --bench-json`, `import --bench-json`):
// benchReport() refuses it naming the problem, or the report writes as HTML (with its SVG
// charts), JSON, CSV and a trace.
#include "fuzz_qt_app.h"
#include "fuzz_support.h"
#include "report_data.h"
#include "report_writers.h"

#include <QBuffer>
#include <QJsonDocument>
#include <QJsonObject>

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
    es::fuzz::make_qt_app();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    using namespace es::report;
    const QJsonDocument doc =
        QJsonDocument::fromJson(QByteArray(reinterpret_cast<const char *>(data), qsizetype(size)));
    if (!doc.isObject()) return 0;
    QString error;
    const auto r = benchReport(doc.object(), "fuzz.json", &error);
    if (!r) {
        ES_FUZZ_CHECK(!error.isEmpty());
        return 0;
    }
    for (auto write : {writeHtml, writeJson, writeCsv, writeTrace}) {
        QByteArray out;
        QBuffer buf(&out);
        buf.open(QIODevice::WriteOnly);
        ES_FUZZ_CHECK(write(*r, buf, &error));
        ES_FUZZ_CHECK(!out.isEmpty());
    }
    return 0;
}
