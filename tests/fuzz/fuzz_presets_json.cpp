// A presets file of any bytes (Presets ▸ Import): parsePresetsJson() refuses it naming the
// problem, or its presets export and parse back to themselves.
#include "fuzz_support.h"
#include "presets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    using namespace es;
    QString error;
    const auto presets =
        parsePresetsJson(QByteArray(reinterpret_cast<const char *>(data), qsizetype(size)), &error);
    if (!presets) {
        ES_FUZZ_CHECK(!error.isEmpty());
        return 0;
    }
    const auto again = parsePresetsJson(exportPresetsJson(*presets), &error);
    if (!again) std::fprintf(stderr, "re-parse failed: %s\n", qPrintable(error));
    ES_FUZZ_CHECK(again && *again == *presets);
    return 0;
}
