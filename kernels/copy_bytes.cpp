// CPU twin of copy_bytes (see copy_bytes.cuh).
#include "kernels/copy_bytes.cuh"

#include <cstring>

namespace es {

void copy_bytes_ref(const copy_bytes_params &p) {
    if (p.bytes) std::memcpy(p.dst, p.src, p.bytes);
    auto *tokens = reinterpret_cast<int32_t *>(static_cast<unsigned char *>(p.dst) + p.fed_offset);
    for (int64_t i = 0; i < p.fed_n; ++i)
        if (tokens[i] < 0) tokens[i] = p.fed_ids[(-int64_t(tokens[i]) - 1) * p.fed_stride];
}

} // namespace es
