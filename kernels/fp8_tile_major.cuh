// fp8_tile_major: an FP8 E4M3 gate/up stack [n_expert, 2·n_ff, n_embd] (each expert's n_ff gate
// rows, then its n_ff up rows; row-major) rewritten tile-major — the order in which decode's
// tensor-core gate/up (moe_gate_up_mma.cuh) reads it, so that every warp load takes 512
// contiguous bytes and a tile's rows one contiguous range, where the row-major stack gives each
// warp load 64 bytes of 8 rows (on the H200 the 21B-A3B's routed gate/up is about 14% shorter
// read this way; docs/benchmarks.md). Scales stay per row, unchanged.
//
// Within expert e's 2·n_ff·n_embd bytes: tile t (rows f = 16t … 16t + 15, gate and up) is the
// 32·n_embd bytes from 32t·n_embd; in it, 64-column chunk c the 2,048 bytes from 2,048c; in it,
// vector r (0: gate rows 16t … +7, 1: their up rows, 2: gate rows 16t + 8 … +15, 3: their up rows)
// the 512 bytes from 512r; in it, lane l = 4g + q the 16 bytes from 16l: row f = 16t + 8·(r / 2) + g
// (gate when r is even, up when odd), columns 64c + 16q … 64c + 16q + 15, in order.
// Needs n_ff % 16 == 0 and n_embd % 64 == 0 (fp8_tile_major_ok).
#pragma once

#include "kernels/kernel_common.h"

#include <vector>

namespace es {

inline bool fp8_tile_major_ok(int64_t n_ff, int64_t n_embd) {
    return n_ff > 0 && n_embd > 0 && n_ff % 16 == 0 && n_embd % 64 == 0;
}

// Byte offset, within one expert's 2·F·H bytes, of row `row` (gate rows 0 … F − 1, up rows F …
// 2F − 1), column `col` in the tile-major layout.
ES_HOST_DEVICE inline int64_t fp8_tile_major_offset(int64_t row, int64_t col, int64_t F, int64_t H) {
    const int64_t up = row >= F ? 1 : 0, f = row - up * F;
    const int64_t t = f / 16, fi = f % 16, r = 2 * (fi / 8) + up, g = fi % 8;
    const int64_t c = col / 64, q = (col % 64) / 16;
    return t * 32 * H + c * 2048 + r * 512 + (4 * g + q) * 16 + col % 16;
}

struct fp8_tile_major_params {
    const fp8_t *src = nullptr; // [n_expert, 2·n_ff, n_embd] row-major
    fp8_t *dst = nullptr;       // the same bytes tile-major (not src)
    int64_t n_expert = 0, n_ff = 0, n_embd = 0;
};

// The twins below and those that read the layout throw std::invalid_argument, naming the shape,
// where fp8_tile_major_ok does not hold (the launchers return cudaErrorInvalidValue).
void fp8_tile_major_check(int64_t n_ff, int64_t n_embd);
void fp8_tile_major_ref(const fp8_tile_major_params &p);
// The inverse: src tile-major, dst row-major.
void fp8_tile_major_inverse_ref(const fp8_tile_major_params &p);
// A row-major copy of a tile-major stack (the twins of the kernels that read the layout).
std::vector<fp8_t> fp8_tile_major_undone(const void *tiled, int64_t n_expert, int64_t n_ff, int64_t n_embd);
#ifdef ES_KERNELS_HAVE_LAUNCHERS
cudaError_t launch_fp8_tile_major(const fp8_tile_major_params &p, cudaStream_t stream);
#endif

} // namespace es
