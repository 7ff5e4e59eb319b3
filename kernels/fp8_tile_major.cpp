// CPU twin of fp8_tile_major (see fp8_tile_major.cuh).
#include "kernels/fp8_tile_major.cuh"

#include <cstring>
#include <stdexcept>
#include <string>

namespace es {
namespace {

// Every 16-byte vector of the stack between its row-major place and its tile-major one.
void permute(const fp8_tile_major_params &p, bool to_tile_major) {
    fp8_tile_major_check(p.n_ff, p.n_embd);
    const int64_t F = p.n_ff, H = p.n_embd, per = 2 * F * H;
    for (int64_t e = 0; e < p.n_expert; ++e)
        for (int64_t row = 0; row < 2 * F; ++row)
            for (int64_t col = 0; col < H; col += 16) {
                const int64_t rm = e * per + row * H + col,
                              tm = e * per + fp8_tile_major_offset(row, col, F, H);
                std::memcpy(p.dst + (to_tile_major ? tm : rm), p.src + (to_tile_major ? rm : tm), 16);
            }
}

} // namespace

void fp8_tile_major_check(int64_t n_ff, int64_t n_embd) {
    if (!fp8_tile_major_ok(n_ff, n_embd))
        throw std::invalid_argument(
            "a tile-major FP8 stack needs n_ff % 16 == 0 and n_embd % 64 == 0, not n_ff " +
            std::to_string(n_ff) + ", n_embd " + std::to_string(n_embd));
}

void fp8_tile_major_ref(const fp8_tile_major_params &p) { permute(p, true); }
void fp8_tile_major_inverse_ref(const fp8_tile_major_params &p) { permute(p, false); }

std::vector<fp8_t> fp8_tile_major_undone(const void *tiled, int64_t n_expert, int64_t n_ff, int64_t n_embd) {
    std::vector<fp8_t> rm(size_t(n_expert * 2 * n_ff * n_embd));
    fp8_tile_major_inverse_ref({static_cast<const fp8_t *>(tiled), rm.data(), n_expert, n_ff, n_embd});
    return rm;
}

} // namespace es
