// moe_gate_up_gemv (see moe_gate_up_gemv.cuh): grid (n_ff_exp / 4, slots); one warp per
// (slot, f) streams the expert's gate row f and up row f once (lane_dot2: 16-byte loads of both
// rows interleaved, four in flight) against the token's activations (L1-resident), reduces by shuffles, and
// lane 0 writes silu(g)·u. Only the n_tokens·n_expert_used selected (token, expert) rows are read.
// With the fused norm (norm on): 256-thread blocks, grid (n_ff_exp / 8R, slots), each warp R rows
// f in turn (the block's norm amortized over 8R rows): R = 2, or 3 where two would need more than
// one wave (the 21B-A3B's dense 12,288-row MLP: 768 blocks at two rows a warp, ~1.45 waves at the
// four blocks an SM its registers allow; 512 at three); the
// rows of a dense MLP (ids null: known before the wait; of one over the L2 cap, each row's
// leading part: kernel_common.h, l2_prefetch_max_bytes) and their scales start moving into L2
// before pdl_wait, then every block normalizes its token's residual row into shared memory
// (block_rms_norm_to_smem, under the weights' fetch) and reads the activations from there; the
// first block of each token also stores the normalized row to norm.out when it is set.
#include "kernels/fp8_tile_major.cuh"
#include "kernels/kernel_common.cuh"
#include "kernels/moe_gate_up_gemv.cuh"
#include "kernels/moe_gate_up_mma.cuh"
#include "kernels/moe_router_device.cuh"

#include <atomic>

namespace es {
namespace {

// Fused norm: warps per block; each warp takes R rows f in turn (2, or 3 where two would leave
// the grid more than one wave: launch_norm), amortizing the block's norm.
constexpr int k_norm_warps = 8;
constexpr int k_norm_v = 3; // norm-weight slots per thread loaded before the wait: n_embd ≤ 3,072

// One warp's row f of slot s (BLK: 128×128 block scales, lane_dot2's, no row scale).
template <bool FP8, bool VEC, bool BLK>
__device__ __forceinline__ void moe_gate_up_row(const moe_gate_up_gemv_params &p, int64_t f, int64_t s, int lane) {
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

// One warp per row; with slot_rows_done every block reports its rows (moe_gate_up_gemv.cuh).
template <bool FP8, bool VEC, bool BLK = false>
__global__ void __launch_bounds__(128) moe_gate_up_gemv_kernel(moe_gate_up_gemv_params p) {
    pdl_enter();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t f = int64_t(blockIdx.x) * 4 + warp, s = blockIdx.y;
    if (f < p.n_ff_exp) moe_gate_up_row<FP8, VEC, BLK>(p, f, s, lane);
    if (p.slot_rows_done)
        block_count_add(p.slot_rows_done + s, unsigned(min(int64_t(4), p.n_ff_exp - int64_t(blockIdx.x) * 4)));
}

template <bool FP8, bool VEC, bool BLK, int R>
__global__ void __launch_bounds__(k_norm_warps * 32) moe_gate_up_gemv_norm_kernel(moe_gate_up_gemv_params p) {
    extern __shared__ __align__(16) uint16_t xs[]; // [n_embd] this token's normalized row
    __shared__ float red[32];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t s = blockIdx.y, t = s / p.n_expert_used, F = p.n_ff_exp, H = p.n_embd;
    const int64_t f0 = (int64_t(blockIdx.x) * k_norm_warps + warp) * R;
    const unsigned char *w = static_cast<const unsigned char *>(p.w);
    const int64_t row_bytes = H * (FP8 ? 1 : 2);
    float gs[R], us[R];
    if (!p.ids) {
        // Expert 0: the rows are known, and no kernel writes weights, so they head for L2 while
        // the previous kernel finishes (their leading pre_l2_fraction: the L2 cap).
        const int64_t pre_bytes =
            p.pre_l2_fraction >= 1.0f ? row_bytes : int64_t(float(row_bytes) * p.pre_l2_fraction);
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const int64_t f = f0 + r;
            if (f < F) {
                for (int64_t b = int64_t(lane) * 128; b < pre_bytes; b += 32 * 128) {
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
    if (p.slot_rows_done) {
        constexpr int64_t rows = int64_t(k_norm_warps) * R; // this block's, before the end of F
        block_count_add(p.slot_rows_done + s, unsigned(min(rows, F - int64_t(blockIdx.x) * rows)));
    }
}

// FP8 on tensor cores (moe_gate_up_gemv.cuh: mma, mma_shape): block b takes tiles b, b + G, … of
// the slot-major list (moe_gate_up_mma.cuh: gate_up_mma_tiles). The default shape is held to
// five blocks an SM (≤ 102 registers), so the 21B-A3B's 576 tiles stay one wave on 132 SMs.
template <int W, int RT, int D, bool TM>
__global__ void __launch_bounds__(W * 32, W == 4 && RT == 2 && D == 1 ? 5 : 1)
    moe_gate_up_mma_kernel(moe_gate_up_gemv_params p) {
    __shared__ float part[2][W][8 * RT][2];
    pdl_enter();
    gate_up_mma_tiles<W, RT, D, TM>(p, part);
}

template <int W, int RT, int D, bool TM>
cudaError_t launch_mma(const moe_gate_up_gemv_params &p, int64_t slots, cudaStream_t stream) {
    const int64_t n = slots * ((p.n_ff_exp + 8 * RT - 1) / (8 * RT));
    if (n >= (int64_t(1) << 31)) return cudaErrorInvalidValue; // gate_up_mma_tiles counts tiles in 32 bits
    int64_t grid = (n + p.mma - 1) / p.mma;
    if (p.mma_shape.wave)
        if (const unsigned wave = resident_blocks(
                reinterpret_cast<const void *>(moe_gate_up_mma_kernel<W, RT, D, TM>), W * 32, 0))
            grid = std::min<int64_t>(n, wave);
    return launch_decode<moe_gate_up_mma_kernel<W, RT, D, TM>>(unsigned(grid), W * 32, 0, stream, p);
}

// The instances: (warps, row tiles, depth, tile-major weights). Of twenty shapes measured on the
// H200 every other one is slower than the default (docs/benchmarks.md, designs tried); these are
// kept as aids.
#define ES_MMA_SHAPES(X)                                                                                     \
    X(4, 2, 1, false) X(4, 2, 2, false) X(8, 2, 1, false) X(4, 1, 1, false) X(4, 2, 1, true)

cudaError_t launch_mma_shape(const moe_gate_up_gemv_params &p, int64_t slots, cudaStream_t stream) {
    const auto &m = p.mma_shape;
#define ES_MMA_CASE(W, RT, D, TM)                                                                            \
    if (m.warps == W && m.tiles == RT && m.depth == D && p.w_tile_major == TM)                               \
        return launch_mma<W, RT, D, TM>(p, slots, stream);
    ES_MMA_SHAPES(ES_MMA_CASE)
#undef ES_MMA_CASE
    return cudaErrorInvalidValue;
}

// The fused-norm kernel at R = 2 rows a warp, or 3 where two would leave the grid more than one
// resident wave and three do not (the 21B-A3B's dense 12,288-row MLP: 768 blocks of two rows a
// warp against 528 resident at four an SM, 512 of three).
std::atomic<int> g_norm_rows{0}; // set_moe_gate_up_norm_rows: 0 chooses

template <bool FP8, bool VEC, bool BLK>
cudaError_t launch_norm(const moe_gate_up_gemv_params &p_in, int64_t slots, cudaStream_t stream) {
    moe_gate_up_gemv_params p = p_in;
    p.pre_l2_fraction = l2_prefetch_fraction(2 * p.n_ff_exp * p.n_embd * (FP8 ? 1 : 2));
    const size_t smem = size_t(p.n_embd) * 2;
    constexpr unsigned threads = k_norm_warps * 32;
    const auto blocks = [&](int r) { return int64_t(ceil_div_u(p.n_ff_exp, k_norm_warps * r)) * slots; };
    const unsigned wave = resident_blocks(
        reinterpret_cast<const void *>(moe_gate_up_gemv_norm_kernel<FP8, VEC, BLK, 3>), threads, smem);
    const int forced = g_norm_rows.load(std::memory_order_relaxed);
    if (forced == 3 || (forced == 0 && wave > 0 && blocks(2) > int64_t(wave) && blocks(3) <= int64_t(wave)))
        return launch_decode<moe_gate_up_gemv_norm_kernel<FP8, VEC, BLK, 3>>(
            dim3(ceil_div_u(p.n_ff_exp, k_norm_warps * 3), unsigned(slots)), threads, smem, stream, p);
    return launch_decode<moe_gate_up_gemv_norm_kernel<FP8, VEC, BLK, 2>>(
        dim3(ceil_div_u(p.n_ff_exp, k_norm_warps * 2), unsigned(slots)), threads, smem, stream, p);
}

// Block scales (FP8 only, the vector path only).
cudaError_t launch_blk(const moe_gate_up_gemv_params &p, int64_t slots, cudaStream_t stream) {
    if (p.n_embd % 16 != 0 || !aligned16(p.w)) return cudaErrorInvalidValue;
    if (p.norm.on()) return launch_norm<true, true, true>(p, slots, stream);
    if (!aligned16(p.x)) return cudaErrorInvalidValue;
    return launch_decode<moe_gate_up_gemv_kernel<true, true, true>>(
        dim3(ceil_div_u(p.n_ff_exp, 4), unsigned(slots)), 128, 0, stream, p);
}

template <bool FP8>
cudaError_t launch_fmt(const moe_gate_up_gemv_params &p, int64_t slots, cudaStream_t stream) {
    if constexpr (FP8) {
        if (p.w_layout == scale_layout::block128) return launch_blk(p, slots, stream);
        if (p.mma > 0 && !p.norm.on() && p.n_embd % k_mma_chunk == 0 && aligned16(p.w) && aligned16(p.x))
            return launch_mma_shape(p, slots, stream);
    }
    if (p.w_tile_major) return cudaErrorInvalidValue; // only the tensor-core kernel reads that layout
    const bool vec_w = p.n_embd % (FP8 ? 16 : 8) == 0 && aligned16(p.w);
    if (p.norm.on())
        return vec_w ? launch_norm<FP8, true, false>(p, slots, stream)
                     : launch_norm<FP8, false, false>(p, slots, stream);
    const dim3 grid(ceil_div_u(p.n_ff_exp, 4), unsigned(slots));
    if (vec_w && aligned16(p.x))
        return launch_decode<moe_gate_up_gemv_kernel<FP8, true>>(grid, 128, 0, stream, p);
    return launch_decode<moe_gate_up_gemv_kernel<FP8, false>>(grid, 128, 0, stream, p);
}

} // namespace

void set_moe_gate_up_norm_rows(int rows) { g_norm_rows.store(rows == 2 || rows == 3 ? rows : 0); }

bool moe_gate_up_mma_shape_ok(const moe_gate_up_gemv_params::mma_shape_t &m, bool tile_major) {
#define ES_MMA_CASE(W, RT, D, TM)                                                                            \
    if (m.warps == W && m.tiles == RT && m.depth == D && tile_major == TM) return true;
    ES_MMA_SHAPES(ES_MMA_CASE)
#undef ES_MMA_CASE
    return false;
}

cudaError_t launch_moe_gate_up_gemv(const moe_gate_up_gemv_params &p, cudaStream_t stream) {
    const int64_t slots = p.n_tokens * p.n_expert_used;
    if (slots <= 0 || p.n_ff_exp <= 0) return cudaSuccess;
    const bool fp8 = p.wfmt == weight_format::fp8_e4m3;
    if (fp8 && !p.w_scale) return cudaErrorInvalidValue;
    if (p.norm.on() && (!p.norm.weight || !moe_gate_up_gemv_norm_ok(p))) return cudaErrorInvalidValue;
    if (p.w_tile_major &&
        (!fp8 || p.w_layout != scale_layout::channel || !fp8_tile_major_ok(p.n_ff_exp, p.n_embd)))
        return cudaErrorInvalidValue;
    return fp8 ? launch_fmt<true>(p, slots, stream) : launch_fmt<false>(p, slots, stream);
}

} // namespace es
