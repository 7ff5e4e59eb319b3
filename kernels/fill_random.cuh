// fill_random: deterministic uniform BF16 values for benchmark weights, generated on the GPU so
// billions of values never cross PCIe. Element i is mean + (2u − 1)·half_range with
// u = (splitmix64(seed ^ i·φ) >> 40) / 2^24; the CPU twin gives identical bits.
#pragma once

#include "kernels/kernel_common.h"

namespace es {

struct fill_random_params {
    bf16_t *out = nullptr; // [n]
    int64_t n = 0;
    uint64_t seed = 0;
    float mean = 0.0f, half_range = 1.0f;
};

inline uint64_t fill_random_hash(uint64_t seed, uint64_t i) {
    uint64_t z = seed ^ (i * 0x9e3779b97f4a7c15ull);
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void fill_random_ref(const fill_random_params &p);
#ifdef ES_KERNELS_HAVE_LAUNCHERS
cudaError_t launch_fill_random(const fill_random_params &p, cudaStream_t stream);
#endif

} // namespace es
