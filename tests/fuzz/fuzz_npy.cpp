// A .npy file of any bytes: read_npy_f32() refuses it with a message or returns an array whose
// element count is the product of its shape.
#include "engine/model/npy.h"
#include "fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    using namespace es;
    const auto path = fuzz::scratch_dir() / "array.npy";
    fuzz::write_file(path, fuzz::as_text(data, size));
    auto a = read_npy_f32(path);
    if (!a) {
        ES_FUZZ_CHECK(fuzz::is_specific(a.message()));
        return 0;
    }
    uint64_t n = 1;
    for (int64_t d : a->shape) {
        ES_FUZZ_CHECK(d >= 0);
        n *= uint64_t(d);
    }
    ES_FUZZ_CHECK(n == a->data.size());
    ES_FUZZ_CHECK(a->data.size() * sizeof(float) <= size);
    return 0;
}
