// CPU twin of copy_bytes (see copy_bytes.cuh).
#include "copy_bytes.cuh"

#include <cstring>

namespace es {

void copy_bytes_ref(const copy_bytes_params &p) {
    if (p.bytes) std::memcpy(p.dst, p.src, p.bytes);
}

} // namespace es
