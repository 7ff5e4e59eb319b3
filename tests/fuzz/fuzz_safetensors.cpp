// A safetensors file of any bytes: open() either refuses it with a message or exposes tensors
// that lie inside the data section and hold exactly shape × dtype bytes; every exposed tensor is
// read and converted to fp32. Then the same bytes as a model folder's model.safetensors.
#include "engine/core/dtype.h"
#include "engine/model/safetensors.h"
#include "fuzz_support.h"

#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    using namespace es;
    const auto dir = fuzz::scratch_dir() / "safetensors";
    std::filesystem::create_directories(dir);
    const auto path = dir / "model.safetensors";
    fuzz::write_file(path, fuzz::as_text(data, size));

    auto f = safetensors_file::open(path);
    if (!f) {
        ES_FUZZ_CHECK(fuzz::is_specific(f.message()));
        return 0;
    }
    const size_t file_bytes = (*f)->file_bytes();
    ES_FUZZ_CHECK(file_bytes == size);
    std::vector<float> scratch;
    for (const auto &[name, t] : (*f)->tensors()) {
        ES_FUZZ_CHECK(t.n_bytes == uint64_t(t.n_elements()) * dtype_size(t.type));
        if (t.n_bytes == 0) continue;
        // The mapping holds the file's bytes: the tensor's bytes must be a piece of the input.
        const auto *base = reinterpret_cast<const uint8_t *>(t.data);
        ES_FUZZ_CHECK(t.n_bytes <= size);
        const size_t n = t.n_bytes / dtype_size(t.type);
        scratch.resize(n);
        convert_to_f32(t.type, t.data, scratch.data(), n);
        unsigned sum = 0;
        for (size_t i = 0; i < t.n_bytes; ++i) sum += base[i];
        (void)sum;
    }
    auto store = weight_store::open_dir(dir);
    ES_FUZZ_CHECK(store.ok());
    ES_FUZZ_CHECK((*store)->all().size() == (*f)->tensors().size());
    return 0;
}
