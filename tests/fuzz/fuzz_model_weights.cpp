// A model folder whose model.safetensors has any header in front of the reference checkpoint's
// data section (its config.json unchanged): tensors with other dtypes, shapes, offsets or names
// are refused naming the tensor, or the model loads and generates (load_and_generate).
#include "fuzz_model.h"

#include <cstring>
#include <fstream>
#include <iterator>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    using namespace es;
    static std::string payload; // the reference file's data section
    static const std::filesystem::path dir = [] {
        auto d = fuzz::scratch_dir() / "weights-dir";
        std::filesystem::create_directories(d);
        for (const char *f : {"config.json", "generation_config.json"})
            std::filesystem::create_symlink(fuzz::reference_checkpoint() / f, d / f);
        std::ifstream in(fuzz::reference_checkpoint() / "model.safetensors", std::ios::binary);
        const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        uint64_t n = 0;
        std::memcpy(&n, file.data(), 8);
        payload = file.substr(8 + n);
        return d;
    }();
    std::string file(8, '\0');
    const uint64_t n = size;
    std::memcpy(file.data(), &n, 8);
    file.append(reinterpret_cast<const char *>(data), size);
    file += payload;
    fuzz::write_file(dir / "model.safetensors", file);
    fuzz::load_and_generate(dir);
    return 0;
}
