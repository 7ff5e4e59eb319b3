// CPU twin of fill_random (see fill_random.cuh).
#include "kernels/fill_random.cuh"

namespace es {

void fill_random_ref(const fill_random_params &p) {
    for (int64_t i = 0; i < p.n; ++i) {
        const float u = float(fill_random_hash(p.seed, uint64_t(i)) >> 40) * (1.0f / 16777216.0f);
        const float a = 2.0f * u, b = a - 1.0f, c = b * p.half_range, v = p.mean + c;
        p.out[i] = float_to_bf16_bits(v);
    }
}

} // namespace es
