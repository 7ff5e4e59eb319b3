// The FP8 routed gate/up GEMV's row tile on tensor cores (device code of moe_gate_up_gemv.cu's
// mma kernel, decode's default for FP8 routed experts since session 13; the host includes nothing
// of it). Written in session 6, ported onto the slot counters in session 9 (branch moe-experts).
#pragma once

#include "kernel_common.cuh"
#include "moe_gate_up_gemv.cuh"

namespace es {

// FP8 on tensor cores (norm off, per-channel scales, n_embd % 64 == 0): the CUDA-core kernel
// spends about 3.6 instructions per weight (E4M3 → f16 → f32, the BF16 activation widened, an
// FMA), which with the loads left the FP8 decode GEMVs issue-bound rather than bandwidth-bound.
// Here a block takes 16 rows f of one slot as two m16n8k16 row tiles — tile r's A rows 0–7 are gate
// rows f0+8r … f0+8r+7 and rows 8–15 the up rows of the same f — and k_mma_warps warps split
// n_embd in 64-column chunks (chunk c to warp c % k_mma_warps), the next chunk's loads issued
// before this one's products. Lane (g, q) = (lane / 4, lane % 4) loads 16 bytes of its four rows
// (gate and up of f0+g and f0+8+g) at column 64c + 16q and converts them (cvt.rn.f16x2.e4m3x2,
// exact) into the A fragments of four k-steps: the k order inside a step is a permutation shared
// with B (mma.cuh's layout: A's column pair 2q, 2q+1 of step j ↔ columns 64c + 16q + 4j + {0, 1},
// pair 2q+8, 2q+9 ↔ + {2, 3}), and B holds the token's activations at those columns, the same in all
// eight columns, BF16 → f16 in the lane (exact for |x| in [2⁻¹⁴, 65504], the range of normalized
// activations; smaller values keep f16's subnormal precision). Products are exact, sums fp32, one
// conversion of the activations serves both tiles. The warps' partial sums meet in shared memory.
constexpr int k_mma_warps = 4, k_mma_rows = 16, k_mma_chunk = 64;

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

// Rows [f0, f0 + k_mma_rows) of slot s (moe_gate_up_gemv_params: FP8, per-channel scales, norm
// off, n_embd % k_mma_chunk == 0, 16-byte aligned weights and x), by all k_mma_warps warps of the
// block; part: the block's shared [k_mma_warps][k_mma_rows][2]. Ends with a block barrier behind it
// only for the partial sums' reads: the caller synchronizes before reusing part.
__device__ __forceinline__ void gate_up_mma_tile(const moe_gate_up_gemv_params &p, int64_t s, int64_t f0,
                                                 float (*part)[k_mma_rows][2]) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
    const int64_t t = s / p.n_expert_used, F = p.n_ff_exp, H = p.n_embd;
    const int64_t e = p.ids ? p.ids[s] : 0;
    const unsigned char *w = static_cast<const unsigned char *>(p.w);
    const uint4 *rows[4]; // gate and up of tile 0, gate and up of tile 1 (past F: row F - 1, unused)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int64_t f = f0 + 8 * r + g < F ? f0 + 8 * r + g : F - 1;
        rows[2 * r] = reinterpret_cast<const uint4 *>(w + (e * 2 * F + f) * H + 16 * q);
        rows[2 * r + 1] = reinterpret_cast<const uint4 *>(w + (e * 2 * F + F + f) * H + 16 * q);
    }
    const uint4 *xg = reinterpret_cast<const uint4 *>(p.x + t * H + 16 * q);
    const int nch = int(H / k_mma_chunk), cnt = (nch - warp + k_mma_warps - 1) / k_mma_warps;
    constexpr int64_t cv = k_mma_chunk / 16, cx = k_mma_chunk / 8; // uint4 per chunk: weights, x
    uint4 nw[4], nx[2];
    auto load = [&](int i) {
        const int64_t c = warp + int64_t(i) * k_mma_warps;
#pragma unroll
        for (int r = 0; r < 4; ++r) nw[r] = __ldcs(rows[r] + c * cv);
        nx[0] = xg[c * cx];
        nx[1] = xg[c * cx + 1];
    };
    if (cnt > 0) load(0);
    float d0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, d1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int i = 0; i < cnt; ++i) {
        const uint4 w0 = nw[0], w1 = nw[1], w2 = nw[2], w3 = nw[3], x0 = nx[0], x1 = nx[1];
        if (i + 1 < cnt) load(i + 1); // the next chunk's loads before this one's products
        const uint32_t xb[8] = {bf16x2_to_f16x2(x0.x), bf16x2_to_f16x2(x0.y), bf16x2_to_f16x2(x0.z),
                                bf16x2_to_f16x2(x0.w), bf16x2_to_f16x2(x1.x), bf16x2_to_f16x2(x1.y),
                                bf16x2_to_f16x2(x1.z), bf16x2_to_f16x2(x1.w)};
        mma_chunk(d0, w0, w1, xb);
        mma_chunk(d1, w2, w3, xb);
    }
    if (q == 0) { // column 0: d[0] the gate of row g, d[2] its up (all eight columns are equal)
        part[warp][g][0] = d0[0];
        part[warp][g][1] = d0[2];
        part[warp][8 + g][0] = d1[0];
        part[warp][8 + g][1] = d1[2];
    }
    __syncthreads();
    if (warp == 0 && lane < k_mma_rows && f0 + lane < F) {
        const int64_t f = f0 + lane, g_row = e * 2 * F + f;
        float gs = 0.0f, us = 0.0f;
#pragma unroll
        for (int k = 0; k < k_mma_warps; ++k) {
            gs += part[k][lane][0];
            us += part[k][lane][1];
        }
        gs *= __ldg(p.w_scale + g_row);
        us *= __ldg(p.w_scale + g_row + F);
        p.act[s * F + f] = f_to_bf16(silu_f(gs) * us);
    }
}

} // namespace es
