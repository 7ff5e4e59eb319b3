// The FP8 routed gate/up GEMV's row tile on tensor cores (device code of moe_gate_up_gemv.cu's
// mma kernel, decode's default for FP8 routed experts; the host includes nothing of it).
#pragma once

#include "kernels/kernel_common.cuh"
#include "kernels/moe_gate_up_gemv.cuh"

namespace es {

// FP8 on tensor cores (norm off, per-channel scales, n_embd % 64 == 0): the CUDA-core kernel
// spends about 3.6 instructions per weight (E4M3 → f16 → f32, the BF16 activation widened, an
// FMA), which with the loads left the FP8 decode GEMVs issue-bound rather than bandwidth-bound.
// Here a block takes RT·8 rows f of one slot as RT m16n8k16 row tiles (the default RT = 2: 16
// rows) — tile r's A rows 0–7 are gate rows f0+8r … f0+8r+7 and rows 8–15 the up rows of the same
// f — and its W warps split n_embd in 64-column chunks (chunk c to warp c % W), each warp's loads
// D chunks ahead of its products (moe_gate_up_gemv_params: mma_shape). Lane (g, q) = (lane / 4,
// lane % 4) loads 16 bytes of its 2·RT rows (gate and up of f0+g, f0+8+g, …) at column 64c + 16q
// and converts them (cvt.rn.f16x2.e4m3x2, exact) into the A fragments of four k-steps: the k order
// inside a step is a permutation shared with B (mma.cuh's layout: A's column pair 2q, 2q+1 of step
// j ↔ columns 64c + 16q + 4j + {0, 1}, pair 2q+8, 2q+9 ↔ + {2, 3}), and B holds the token's
// activations at those columns, the same in all eight columns, BF16 → f16 in the lane (exact for
// |x| in [2⁻¹⁴, 65504], the range of normalized activations; smaller values keep f16's subnormal
// precision). Products are exact, sums fp32, one conversion of the activations serves every row
// tile. The warps' partial sums meet in shared memory.
constexpr int k_mma_chunk = 64;

__device__ __forceinline__ void e4m3x4_to_f16x2(uint32_t v, uint32_t &lo, uint32_t &hi) {
    asm("{\n .reg .b16 a, b;\n mov.b32 {a, b}, %2;\n cvt.rn.f16x2.e4m3x2 %0, a;\n cvt.rn.f16x2.e4m3x2 %1, "
        "b;\n}\n"
        : "=r"(lo), "=r"(hi)
        : "r"(v));
}
__device__ __forceinline__ uint32_t bf16x2_to_f16x2(uint32_t v) {
    const __half2 h = __floats2half2_rn(bf16_lo(v), bf16_hi(v));
    return *reinterpret_cast<const uint32_t *>(&h);
}
__device__ __forceinline__ void mma_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// One 64-column chunk of one row tile: the lane's 16 gate bytes wg and up bytes wu, its 16
// activations xb (f16 pairs).
__device__ __forceinline__ void mma_chunk(float (&d)[4], const uint4 &wg, const uint4 &wu,
                                          const uint32_t (&xb)[8]) {
    const uint32_t g4[4] = {wg.x, wg.y, wg.z, wg.w}, u4[4] = {wu.x, wu.y, wu.z, wu.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        uint32_t a[4];
        e4m3x4_to_f16x2(g4[j], a[0], a[2]); // gate row: columns 4j, 4j+1 | 4j+2, 4j+3
        e4m3x4_to_f16x2(u4[j], a[1], a[3]); // up row
        mma_f16(d, a, xb[2 * j], xb[2 * j + 1]);
    }
}

// The block's tiles, one after another (tile i: slot i / T, rows f0 = 8·RT·(i % T) …, T = ⌈F / 8·RT⌉
// tiles a slot; block b takes tiles b, b + G, …): RT row tiles of 8 f each (RT = 2: the 16 rows
// above), W warps splitting n_embd in 64-column chunks (chunk c to warp c % W; every warp takes
// ⌈chunks / W⌉ of each tile, those past the end zeros, so all warps reach each tile's end
// together), and each warp's loads D chunks ahead of its products in a ring of registers that
// runs on across the block's tiles (the next tile's first chunks are on their way while this one's
// sums are combined). part: the block's shared [2][W][8·RT][2] (tile j's partial sums in buffer
// j % 2: one barrier a tile). Tile sums are the same for every D and G: each warp adds its chunks
// in order, the warps' parts are added in warp order.
// TM: the stack tile-major (fp8_tile_major.cuh; RT = 2, F % 16 == 0): chunk c of a tile is one
// contiguous block of NW·512 bytes, the warp's load r its 512 bytes at r·512, lane l's 16 at 16·l,
// so every warp load takes 512 contiguous bytes instead of 64 bytes of 8 rows: on the H200 the
// 21B-A3B's routed gate/up about 14% shorter a layer, its decode step about 1.8%
// (docs/benchmarks.md).
template <int W, int RT, int D, bool TM = false>
__device__ __forceinline__ void gate_up_mma_tiles(const moe_gate_up_gemv_params &p,
                                                  float (*part)[W][8 * RT][2]) {
    constexpr int R = 8 * RT, NW = 2 * RT; // rows f a tile; 16-byte weight vectors a lane loads a chunk
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
    const int64_t F = p.n_ff_exp, H = p.n_embd;
    // The tile list's arithmetic in 32 bits (launch_mma: fewer than 2³¹ tiles): the first tile's
    // slot, and so its expert id and its first loads, wait on these divisions — in 64 bits each
    // is a ~70-instruction emulation (0.3 µs of a 14 µs launch on the H200).
    const unsigned per_slot = unsigned((F + R - 1) / R), n_used = unsigned(p.n_expert_used),
                   n = unsigned(p.n_tokens) * n_used * per_slot;
    const unsigned tiles = blockIdx.x < n ? (n - blockIdx.x + gridDim.x - 1) / gridDim.x : 0u;
    const int nch = int(H / k_mma_chunk), cnt = (nch + W - 1) / W; // chunks a warp takes of each tile
    constexpr int64_t cv = k_mma_chunk / 16, cx = k_mma_chunk / 8; // uint4 per chunk: weights, x
    const unsigned char *w = static_cast<const unsigned char *>(p.w);
    // The load cursor: chunk lc of the block's tile lj, whose rows (gate and up of each row tile;
    // past F: row F - 1, unused) and activations rows / xg point at.
    int64_t lj = 0;
    int lc = 0;
    const uint4 *rows[NW];
    const uint4 *xg = nullptr;
    // Warp 0's lanes < R copy the scales of their gate and up rows of tile j into sc[j % 2] when
    // the cursor reaches the tile (cp.async: no registers held; the cursor runs at most one tile
    // ahead of the products, D ≤ cnt), so the tile's end does not wait on a load from memory.
    __shared__ float sc[2][R][2];
    auto aim = [&](int64_t j) {
        const unsigned i = blockIdx.x + unsigned(j) * gridDim.x, s = i / per_slot;
        const int64_t f0 = int64_t(i - s * per_slot) * R, e = p.ids ? p.ids[s] : 0, t = s / n_used;
        if (warp == 0 && lane < R) { // one group a tile for each of these lanes, empty past F
            if (f0 + lane < F) {
                const float *ws = p.w_scale + e * 2 * F + f0 + lane;
                const unsigned d = unsigned(__cvta_generic_to_shared(&sc[j & 1][lane][0]));
                asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n"
                             "cp.async.ca.shared.global [%2], [%3], 4;\n" ::"r"(d),
                             "l"(ws), "r"(d + 4), "l"(ws + F)
                             : "memory");
            }
            asm volatile("cp.async.commit_group;\n" ::: "memory");
        }
        if constexpr (TM) { // the tile's 2·R rows' bytes, from byte 2·f0·H of the expert's
            static_assert(!TM || RT == 2, "the tile-major layout's tiles are 16 rows");
            rows[0] = reinterpret_cast<const uint4 *>(w + (e * 2 * F + 2 * f0) * H) + lane;
        } else {
#pragma unroll
            for (int r = 0; r < RT; ++r) {
                const int64_t f = f0 + 8 * r + g < F ? f0 + 8 * r + g : F - 1;
                rows[2 * r] = reinterpret_cast<const uint4 *>(w + (e * 2 * F + f) * H + 16 * q);
                rows[2 * r + 1] = reinterpret_cast<const uint4 *>(w + (e * 2 * F + F + f) * H + 16 * q);
            }
        }
        xg = reinterpret_cast<const uint4 *>(p.x + t * H + 16 * q);
    };
    uint4 bw[D][NW], bx[D][2];
    auto load = [&](int d) { // the cursor's chunk into ring slot d, then the cursor on
        const int64_t c = warp + int64_t(lc) * W;
        if (lj < tiles && c < nch) {
#pragma unroll
            for (int r = 0; r < NW; ++r)
                bw[d][r] = TM ? __ldcs(rows[0] + (c * NW + r) * 32) : __ldcs(rows[r] + c * cv);
            bx[d][0] = xg[c * cx];
            bx[d][1] = xg[c * cx + 1];
        } else {
#pragma unroll
            for (int r = 0; r < NW; ++r) bw[d][r] = make_uint4(0u, 0u, 0u, 0u);
            bx[d][0] = bx[d][1] = make_uint4(0u, 0u, 0u, 0u);
        }
        if (++lc == cnt) {
            lc = 0;
            if (++lj < tiles) aim(lj);
        }
    };
    if (tiles > 0) aim(0);
#pragma unroll
    for (int d = 0; d < D; ++d) load(d);
    float acc[RT][4] = {};
    // Tile j's sums: every warp's to part, then warp 0 adds them, scales, and stores SiLU(gate)·up.
    auto finish = [&](int64_t j) {
        const int b = int(j & 1);
        // Column 0: acc[r][0] is the gate of row 8r + g, acc[r][2] its up (all eight columns equal).
        if (q == 0) {
#pragma unroll
            for (int r = 0; r < RT; ++r) {
                part[b][warp][8 * r + g][0] = acc[r][0];
                part[b][warp][8 * r + g][1] = acc[r][2];
            }
        }
        __syncthreads();
        const unsigned i = blockIdx.x + unsigned(j) * gridDim.x, s = i / per_slot;
        const int64_t f0 = int64_t(i - s * per_slot) * R;
        if (warp == 0) { // the tile's rows are warp 0's to write and to count
            if (lane < R && f0 + lane < F) {
                float gs = 0.0f, us = 0.0f;
#pragma unroll
                for (int k = 0; k < W; ++k) {
                    gs += part[b][k][lane][0];
                    us += part[b][k][lane][1];
                }
                // This tile's copies are in; the next tile's group, when the cursor has aimed at
                // it already, may still be on its way.
                if (lj > j && lj < tiles)
                    asm volatile("cp.async.wait_group 1;\n" ::: "memory");
                else
                    asm volatile("cp.async.wait_all;\n" ::: "memory");
                gs *= sc[b][lane][0];
                us *= sc[b][lane][1];
                p.act[s * F + f0 + lane] = f_to_bf16(silu_f(gs) * us);
            }
            if (p.slot_rows_done) {
                __syncwarp();
                if (lane == 0) {
                    __threadfence();
                    atomicAdd(p.slot_rows_done + s, unsigned(min(int64_t(R), F - f0)));
                }
            }
        }
#pragma unroll
        for (int r = 0; r < RT; ++r) acc[r][0] = acc[r][1] = acc[r][2] = acc[r][3] = 0.0f;
    };
    // Every warp has the same count of items (tiles · cnt), so the block-wide barriers in finish are
    // reached by all warps at the same unrolled place.
    const int64_t total = tiles * cnt;
    int cc = 0;
    int64_t cj = 0;
    for (int64_t it0 = 0; it0 < total; it0 += D) {
#pragma unroll
        for (int d = 0; d < D; ++d) {
            if (it0 + d < total) {
                uint4 cw[NW];
#pragma unroll
                for (int r = 0; r < NW; ++r) cw[r] = bw[d][r];
                const uint4 x0 = bx[d][0], x1 = bx[d][1];
                load(d); // the chunk D ahead into the slot just emptied, before this one's products
                const uint32_t xb[8] = {bf16x2_to_f16x2(x0.x), bf16x2_to_f16x2(x0.y), bf16x2_to_f16x2(x0.z),
                                        bf16x2_to_f16x2(x0.w), bf16x2_to_f16x2(x1.x), bf16x2_to_f16x2(x1.y),
                                        bf16x2_to_f16x2(x1.z), bf16x2_to_f16x2(x1.w)};
#pragma unroll
                for (int r = 0; r < RT; ++r) mma_chunk(acc[r], cw[2 * r], cw[2 * r + 1], xb);
                if (++cc == cnt) {
                    cc = 0;
                    finish(cj++);
                }
            }
        }
    }
}

} // namespace es
