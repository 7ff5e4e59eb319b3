// generation_config.json of any text: load_generation_config() refuses it naming the file and
// the key, or gives sampling defaults that pass validate() and whose stop ids are token ids.
#include "engine/model/model_config.h"
#include "engine/runtime/model.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    using namespace es;
    static const model_config cfg = *model_config_for_shape("ernie-4.5-0.3b");
    const auto dir = fuzz::scratch_dir() / "generation";
    std::filesystem::create_directories(dir);
    fuzz::write_file(dir / "generation_config.json", fuzz::as_text(data, size));
    auto sp = load_generation_config(dir, cfg);
    if (!sp) {
        ES_FUZZ_CHECK(fuzz::is_specific(sp.message()));
        return 0;
    }
    ES_FUZZ_CHECK(sp->validate().empty());
    for (int32_t id : sp->stop_ids) ES_FUZZ_CHECK(id >= 0);
    return 0;
}
