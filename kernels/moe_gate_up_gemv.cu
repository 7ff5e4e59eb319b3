// moe_gate_up_gemv (see moe_gate_up_gemv.cuh): grid (n_ff_exp / 4, slots); one warp per
// (slot, f) streams the expert's gate row f and up row f once (lane_dot2: 16-byte loads of both
// rows interleaved, four in flight) against the token's activations (L1-resident), reduces by shuffles, and
// lane 0 writes silu(g)·u. Only the n_tokens·n_expert_used selected (token, expert) rows are read.
// With the fused norm (norm on): 256-thread blocks, grid (n_ff_exp / 16, slots), each warp two
// rows f in turn (the block's norm amortized over 16 rows; the 21B-A3B's dense 12,288-row MLP is
// 768 blocks, one wave at six 5 KB blocks per SM in the decode carveout); the
// rows of a dense MLP (ids null: known before the wait) and their scales start moving into L2
// before pdl_wait, then every block normalizes its token's residual row into shared memory
// (block_rms_norm_to_smem, under the weights' fetch) and reads the activations from there; the
// first block of each token also stores the normalized row to norm.out when it is set.
#include "kernel_common.cuh"
#include "mma.cuh"
#include "moe_gate_up_gemv.cuh"
#include "moe_router_device.cuh"

namespace es {
namespace {

// Fused norm: warps per block and rows per warp, amortizing the block's norm.
constexpr int k_norm_warps = 8, k_norm_rows_per_warp = 2;
constexpr int k_norm_v = 3; // norm-weight slots per thread loaded before the wait: n_embd ≤ 3,072

// BLK: 128×128 block scales (lane_dot2's), no row scale.
template <bool FP8, bool VEC, bool BLK = false>
__global__ void __launch_bounds__(128) moe_gate_up_gemv_kernel(moe_gate_up_gemv_params p) {
    pdl_enter();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t f = int64_t(blockIdx.x) * 4 + warp, s = blockIdx.y;
    if (f >= p.n_ff_exp) return;
    const int64_t t = s / p.n_expert_used, e = p.ids ? p.ids[s] : 0, F = p.n_ff_exp, H = p.n_embd;
    const int64_t g_row = e * 2 * F + f, u_row = g_row + F;
    const unsigned char *w = static_cast<const unsigned char *>(p.w);
    const int64_t row_bytes = H * (FP8 ? 1 : 2);
    const uint16_t *x = p.x + t * H;
    // The scales' loads are in flight with the rows'.
    const float g_scale = FP8 && !BLK ? __ldg(p.w_scale + g_row) : 1.0f,
                u_scale = FP8 && !BLK ? __ldg(p.w_scale + u_row) : 1.0f;
    const float *bsg = BLK ? p.w_scale + fp8_stack_scale_index(e, f, 0, 2 * F, H, scale_layout::block128)
                           : nullptr,
                *bsu = BLK ? p.w_scale + fp8_stack_scale_index(e, F + f, 0, 2 * F, H, scale_layout::block128)
                           : nullptr;
    const float2 gu = lane_dot2<FP8, VEC, false, BLK>(w + g_row * row_bytes, w + u_row * row_bytes, x, 0, H,
                                                      lane, bsg, bsu);
    float g = warp_sum(gu.x), u = warp_sum(gu.y);
    if (lane == 0) {
        if (FP8) {
            g *= g_scale;
            u *= u_scale;
        }
        p.act[s * F + f] = f_to_bf16(silu_f(g) * u);
    }
}

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
    asm("{\n .reg .b16 a, b;\n mov.b32 {a, b}, %2;\n cvt.rn.f16x2.e4m3x2 %0, a;\n cvt.rn.f16x2.e4m3x2 %1, b;\n}\n"
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
__device__ __forceinline__ void mma_chunk(float (&d)[4], const uint4 &wg, const uint4 &wu, const uint32_t (&xb)[8]) {
    const uint32_t g4[4] = {wg.x, wg.y, wg.z, wg.w}, u4[4] = {wu.x, wu.y, wu.z, wu.w};
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        uint32_t a[4];
        e4m3x4_to_f16x2(g4[j], a[0], a[2]); // gate row: columns 4j, 4j+1 | 4j+2, 4j+3
        e4m3x4_to_f16x2(u4[j], a[1], a[3]); // up row
        mma_f16(d, a, xb[2 * j], xb[2 * j + 1]);
    }
}

__global__ void __launch_bounds__(k_mma_warps * 32) moe_gate_up_mma_kernel(moe_gate_up_gemv_params p) {
    __shared__ float part[k_mma_warps][k_mma_rows][2];
    pdl_enter();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, q = lane % 4;
    const int64_t s = blockIdx.y, t = s / p.n_expert_used, F = p.n_ff_exp, H = p.n_embd;
    const int64_t f0 = int64_t(blockIdx.x) * k_mma_rows;
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
    if (warp != 0 || lane >= k_mma_rows || f0 + lane >= F) return;
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

template <bool FP8, bool VEC, bool BLK = false>
__global__ void __launch_bounds__(k_norm_warps * 32) moe_gate_up_gemv_norm_kernel(moe_gate_up_gemv_params p) {
    extern __shared__ __align__(16) uint16_t xs[]; // [n_embd] this token's normalized row
    __shared__ float red[32];
    constexpr int R = k_norm_rows_per_warp;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t s = blockIdx.y, t = s / p.n_expert_used, F = p.n_ff_exp, H = p.n_embd;
    const int64_t f0 = (int64_t(blockIdx.x) * k_norm_warps + warp) * R;
    const unsigned char *w = static_cast<const unsigned char *>(p.w);
    const int64_t row_bytes = H * (FP8 ? 1 : 2);
    float gs[R], us[R];
    if (!p.ids) {
        // Expert 0: the rows are known, and no kernel writes weights, so they head for L2 while
        // the previous kernel finishes.
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const int64_t f = f0 + r;
            if (f < F) {
                for (int64_t b = int64_t(lane) * 128; b < row_bytes; b += 32 * 128) {
                    prefetch_l2(w + f * row_bytes + b);
                    prefetch_l2(w + (F + f) * row_bytes + b);
                }
                gs[r] = FP8 && !BLK ? __ldg(p.w_scale + f) : 1.0f;
                us[r] = FP8 && !BLK ? __ldg(p.w_scale + F + f) : 1.0f;
            }
        }
    }
    norm_weight_regs<k_norm_v> nwr; // the norm weight too (kernel_common.cuh)
    norm_weight_preload<k_norm_v>(p.norm.weight, H, nwr);
    pdl_enter();
    const int64_t e = p.ids ? p.ids[s] : 0;
    block_rms_norm_to_smem<1, k_norm_v>(p.norm.x + t * H, H, 1, p.norm.weight, nwr, H, p.norm.eps, xs, red);
    if (p.norm.out && blockIdx.x == 0 && s % p.n_expert_used == 0)
        block_store_rows(xs, p.norm.out + t * H, 1, H);
#pragma unroll
    for (int r = 0; r < R; ++r) {
        const int64_t f = f0 + r;
        if (f >= F) break;
        const int64_t g_row = e * 2 * F + f, u_row = g_row + F;
        if (p.ids) {
            gs[r] = FP8 && !BLK ? __ldg(p.w_scale + g_row) : 1.0f;
            us[r] = FP8 && !BLK ? __ldg(p.w_scale + u_row) : 1.0f;
        }
        const float *bsg = BLK ? p.w_scale + fp8_stack_scale_index(e, f, 0, 2 * F, H, scale_layout::block128)
                               : nullptr,
                    *bsu =
                        BLK ? p.w_scale + fp8_stack_scale_index(e, F + f, 0, 2 * F, H, scale_layout::block128)
                            : nullptr;
        const float2 gu = lane_dot2<FP8, VEC, true, BLK>(w + g_row * row_bytes, w + u_row * row_bytes, xs, 0,
                                                         H, lane, bsg, bsu);
        float g = warp_sum(gu.x), u = warp_sum(gu.y);
        if (lane == 0) {
            if (FP8) {
                g *= gs[r];
                u *= us[r];
            }
            p.act[s * F + f] = f_to_bf16(silu_f(g) * u);
        }
    }
}

// Block scales (FP8 only, the vector path only).
cudaError_t launch_blk(const moe_gate_up_gemv_params &p, int64_t slots, cudaStream_t stream) {
    if (p.n_embd % 16 != 0 || !aligned16(p.w)) return cudaErrorInvalidValue;
    if (p.norm.on()) {
        const dim3 grid(ceil_div_u(p.n_ff_exp, k_norm_warps * k_norm_rows_per_warp), unsigned(slots));
        prefer_decode_carveout<moe_gate_up_gemv_norm_kernel<true, true, true>>();
        return launch_kernel(moe_gate_up_gemv_norm_kernel<true, true, true>, grid, k_norm_warps * 32,
                             size_t(p.n_embd) * 2, stream, p);
    }
    if (!aligned16(p.x)) return cudaErrorInvalidValue;
    return launch_kernel(moe_gate_up_gemv_kernel<true, true, true>,
                         dim3(ceil_div_u(p.n_ff_exp, 4), unsigned(slots)), 128, 0, stream, p);
}

template <bool FP8>
cudaError_t launch_fmt(const moe_gate_up_gemv_params &p, int64_t slots, cudaStream_t stream) {
    if constexpr (FP8) {
        if (p.w_layout == scale_layout::block128) return launch_blk(p, slots, stream);
        if (!p.no_mma && !p.norm.on() && p.n_embd % k_mma_chunk == 0 && aligned16(p.w) &&
            aligned16(p.x))
            return launch_kernel(moe_gate_up_mma_kernel, dim3(ceil_div_u(p.n_ff_exp, k_mma_rows), unsigned(slots)),
                                 k_mma_warps * 32, 0, stream, p);
    }
    const bool vec_w = p.n_embd % (FP8 ? 16 : 8) == 0 && aligned16(p.w);
    if (p.norm.on()) {
        const dim3 grid(ceil_div_u(p.n_ff_exp, k_norm_warps * k_norm_rows_per_warp), unsigned(slots));
        const size_t smem = size_t(p.n_embd) * 2;
        const unsigned threads = k_norm_warps * 32;
        if (vec_w) {
            prefer_decode_carveout<moe_gate_up_gemv_norm_kernel<FP8, true>>();
            return launch_kernel(moe_gate_up_gemv_norm_kernel<FP8, true>, grid, threads, smem, stream, p);
        }
        prefer_decode_carveout<moe_gate_up_gemv_norm_kernel<FP8, false>>();
        return launch_kernel(moe_gate_up_gemv_norm_kernel<FP8, false>, grid, threads, smem, stream, p);
    }
    const dim3 grid(ceil_div_u(p.n_ff_exp, 4), unsigned(slots));
    if (vec_w && aligned16(p.x))
        return launch_kernel(moe_gate_up_gemv_kernel<FP8, true>, grid, 128, 0, stream, p);
    return launch_kernel(moe_gate_up_gemv_kernel<FP8, false>, grid, 128, 0, stream, p);
}

} // namespace

cudaError_t launch_moe_gate_up_gemv(const moe_gate_up_gemv_params &p, cudaStream_t stream) {
    const int64_t slots = p.n_tokens * p.n_expert_used;
    if (slots <= 0 || p.n_ff_exp <= 0) return cudaSuccess;
    const bool fp8 = p.wfmt == weight_format::fp8_e4m3;
    if (fp8 && !p.w_scale) return cudaErrorInvalidValue;
    if (p.norm.on() && (!p.norm.weight || !moe_gate_up_gemv_norm_ok(p))) return cudaErrorInvalidValue;
    return fp8 ? launch_fmt<true>(p, slots, stream) : launch_fmt<false>(p, slots, stream);
}

} // namespace es
