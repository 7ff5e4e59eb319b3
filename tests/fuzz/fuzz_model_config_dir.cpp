// A model folder whose config.json is any text, beside the reference checkpoint's weights: the
// config is refused, or the weights are refused for not matching it, or the model loads and
// generates (load_and_generate). Catches configs that pass validation but break the forward pass.
#include "fuzz_model.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    using namespace es;
    static const std::filesystem::path dir = [] {
        auto d = fuzz::scratch_dir() / "config-dir";
        std::filesystem::create_directories(d);
        for (const char *f : {"model.safetensors", "generation_config.json"})
            std::filesystem::create_symlink(fuzz::reference_checkpoint() / f, d / f);
        return d;
    }();
    fuzz::write_file(dir / "config.json", fuzz::as_text(data, size));
    fuzz::load_and_generate(dir);
    return 0;
}
