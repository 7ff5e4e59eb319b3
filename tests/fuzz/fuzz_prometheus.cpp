// A /metrics answer of any bytes (a remote server's, read by the app): parsePrometheusText()
// never crashes, counts what it could not read, and names the first problem when there is one.
#include "fuzz_support.h"
#include "prometheus_text.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    using namespace es;
    const PromExposition e =
        parsePrometheusText(QByteArray(reinterpret_cast<const char *>(data), qsizetype(size)));
    ES_FUZZ_CHECK(e.malformedLines >= 0);
    ES_FUZZ_CHECK((e.malformedLines == 0) == e.firstError.isEmpty());
    for (const PromSample &s : e.samples) {
        ES_FUZZ_CHECK(!s.name.isEmpty());
        (void)e.sum(s.name, s.labels);
        (void)e.family(s.name);
    }
    return 0;
}
