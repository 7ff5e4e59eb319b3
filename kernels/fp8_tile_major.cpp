// CPU twin of fp8_tile_major (see fp8_tile_major.cuh).
#include "fp8_tile_major.cuh"

#include <cstring>

namespace es {

void fp8_tile_major_ref(const fp8_tile_major_params &p) {
    if (!fp8_tile_major_ok(p.n_ff, p.n_embd)) return;
    const int64_t F = p.n_ff, H = p.n_embd, per = 2 * F * H;
    for (int64_t e = 0; e < p.n_expert; ++e)
        for (int64_t row = 0; row < 2 * F; ++row)
            for (int64_t col = 0; col < H; col += 16)
                std::memcpy(p.dst + e * per + fp8_tile_major_offset(row, col, F, H),
                            p.src + e * per + row * H + col, 16);
}

void fp8_tile_major_inverse_ref(const fp8_tile_major_params &p) {
    if (!fp8_tile_major_ok(p.n_ff, p.n_embd)) return;
    const int64_t F = p.n_ff, H = p.n_embd, per = 2 * F * H;
    for (int64_t e = 0; e < p.n_expert; ++e)
        for (int64_t row = 0; row < 2 * F; ++row)
            for (int64_t col = 0; col < H; col += 16)
                std::memcpy(p.dst + e * per + row * H + col,
                            p.src + e * per + fp8_tile_major_offset(row, col, F, H), 16);
}

} // namespace es
