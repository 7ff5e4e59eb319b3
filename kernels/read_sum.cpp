// CPU twin of read_sum (see read_sum.cuh).
#include "kernels/read_sum.cuh"

#include <cstring>

namespace es {

void read_sum_ref(const read_sum_params &p) {
    unsigned x = 0;
    const auto *b = static_cast<const unsigned char *>(p.src);
    for (size_t i = 0; i + 4 <= p.bytes; i += 4) {
        unsigned w;
        std::memcpy(&w, b + i, 4);
        x ^= w;
    }
    *p.out ^= x;
}

} // namespace es
