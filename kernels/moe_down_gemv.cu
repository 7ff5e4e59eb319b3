// moe_down_gemv (see moe_down_gemv.cuh): grid (n_embd, n_tokens); the four warps of the block
// of (t, n) each read a quarter of row n of every chosen expert's down matrix (up to 8 choices
// with their 16-byte loads issued together: one round trip for the 21B-A3B's 1,536-wide rows in
// FP8) and dot it with that slot's activations; thread 0 sums the quarters in order, scales,
// weights and sums in choice order (fp32) and adds the total into y. (One warp per (t, n), with
// three dependent load rounds, streamed at ~1.3 TB/s on the H200.)
#include "kernels/kernel_common.cuh"
#include "kernels/moe_down_gemv.cuh"

#include <type_traits>

namespace es {
namespace {

constexpr int k_max_used = 8; // choices handled with interleaved loads; more fall back to a loop
constexpr int k_warps = 4;    // warps per output element, each a quarter of the row

// BLK: 128×128 block scales, each 16-byte vector's product times its block's (no row scale).
template <bool FP8, bool VEC, bool BLK = false>
__global__ void __launch_bounds__(128) moe_down_gemv_kernel(moe_down_gemv_params p) {
    static_assert(!BLK || (FP8 && VEC), "block scales: FP8 weights, 16-byte vectors");
    pdl_enter();
    __shared__ float red[k_warps][k_max_used];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t n = blockIdx.x, t = blockIdx.y;
    const int64_t K = p.n_expert_used, F = p.n_ff_exp, H = p.n_embd;
    const unsigned char *w = static_cast<const unsigned char *>(p.w);
    const int64_t row_bytes = F * (FP8 ? 1 : 2);
    // This warp's quarter of the row (a multiple of the vector width, so vectors stay aligned).
    constexpr int E = VEC ? vec_elems<FP8> : 1;
    int64_t chunk = (F + k_warps - 1) / k_warps;
    chunk = (chunk + E - 1) / E * E;
    const int64_t kb = warp * chunk, ke = min(F, kb + chunk);
    if (K <= k_max_used) {
        // The choices' scales and weights now, in flight with the rows (read after the barrier).
        __shared__ float s_scale[k_max_used], s_weight[k_max_used];
        if (threadIdx.x < K) {
            const int64_t e = p.ids[t * K + threadIdx.x];
            s_scale[threadIdx.x] = FP8 && !BLK ? p.w_scale[e * H + n] : 1.0f;
            s_weight[threadIdx.x] = p.weights[t * K + threadIdx.x];
        }
        // All choices at once: their weight rows' loads are independent, so they overlap.
        const unsigned char *rows[k_max_used];
        const uint16_t *acts[k_max_used];
        const float *bs[k_max_used]; // BLK: the rows' block scales
        float acc[k_max_used];
#pragma unroll
        for (int j = 0; j < k_max_used; ++j) {
            const int64_t jj = j < K ? j : 0, ej = p.ids[t * K + jj];
            rows[j] = w + (ej * H + n) * row_bytes;
            bs[j] = BLK ? p.w_scale + fp8_stack_scale_index(ej, n, 0, H, F, scale_layout::block128) : nullptr;
            acts[j] = p.act + (t * K + jj) * F;
            acc[j] = 0.0f;
        }
        if constexpr (VEC) {
#pragma unroll 2
            for (int64_t kk = kb + int64_t(lane) * E; kk < ke; kk += 32 * E) {
                uint4 wq[k_max_used];
#pragma unroll
                for (int j = 0; j < k_max_used; ++j)
                    if (j < K) wq[j] = __ldcs(reinterpret_cast<const uint4 *>(rows[j]) + kk / E);
#pragma unroll
                for (int j = 0; j < k_max_used; ++j)
                    if (j < K) acc[j] += blk_scaled<BLK>(bs[j], kk, dot_vec<FP8>(wq[j], acts[j] + kk));
            }
        } else {
            for (int64_t kk = kb + lane; kk < ke; kk += 32)
#pragma unroll
                for (int j = 0; j < k_max_used; ++j)
                    if (j < K) acc[j] += wval<FP8>(rows[j], kk) * bf16_to_f(acts[j][kk]);
        }
#pragma unroll
        for (int j = 0; j < k_max_used; ++j) {
            const float v = warp_sum(acc[j]);
            if (lane == 0) red[warp][j] = v;
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            float total = 0.0f;
            for (int j = 0; j < K; ++j) {
                float v = 0.0f;
#pragma unroll
                for (int q = 0; q < k_warps; ++q) v += red[q][j]; // quarters in order
                if (FP8) v *= s_scale[j];
                total += s_weight[j] * v;
            }
            p.y[t * H + n] += total;
        }
    } else {
        // Many choices: one at a time, the warps' quarters summed the same way.
        float total = 0.0f;
        for (int64_t j = 0; j < K; ++j) {
            const int64_t e = p.ids[t * K + j], row = e * H + n;
            const float *bsr =
                BLK ? p.w_scale + fp8_stack_scale_index(e, n, 0, H, F, scale_layout::block128) : nullptr;
            const float v = warp_sum(lane_dot<FP8, VEC, false, BLK>(
                w + row * row_bytes, p.act + (t * K + j) * F, kb, ke, lane, bsr));
            __syncthreads(); // red[] of the previous choice is read
            if (lane == 0) red[warp][0] = v;
            __syncthreads();
            if (threadIdx.x == 0) {
                float s = 0.0f;
                for (int q = 0; q < k_warps; ++q) s += red[q][0];
                if (FP8 && !BLK) s *= p.w_scale[row];
                total += p.weights[t * K + j] * s;
            }
        }
        if (threadIdx.x == 0) p.y[t * H + n] += total;
    }
}

// lane_dot over a whole row with the activations read through L2 (__ldcg), for activations a
// kernel two launches back wrote, read before pdl_wait: the same products and order as lane_dot.
template <bool FP8>
__device__ __forceinline__ float dot_vec_l2x(const uint4 w, const uint16_t *x) {
    const uint4 x0 = __ldcg(reinterpret_cast<const uint4 *>(x));
    return dot_vec_loaded<FP8>(w, x0, FP8 ? __ldcg(reinterpret_cast<const uint4 *>(x + 8)) : x0);
}

template <bool FP8, bool VEC, bool BLK = false>
__device__ __forceinline__ float lane_dot_l2x(const void *w_row, const uint16_t *x, int64_t K, int lane,
                                              const float *bs = nullptr) {
    float acc = 0.0f;
    if constexpr (VEC) {
        constexpr int E = vec_elems<FP8>;
        const uint4 *wv = static_cast<const uint4 *>(w_row);
        int64_t kk = int64_t(lane) * E;
        for (; kk + 3 * 32 * E < K; kk += 4 * 32 * E) {
            const uint4 a = __ldcs(wv + kk / E), b = __ldcs(wv + kk / E + 32), c = __ldcs(wv + kk / E + 64),
                        d = __ldcs(wv + kk / E + 96);
            acc += blk_scaled<BLK>(bs, kk, dot_vec_l2x<FP8>(a, x + kk)) +
                   blk_scaled<BLK>(bs, kk + 32 * E, dot_vec_l2x<FP8>(b, x + kk + 32 * E)) +
                   blk_scaled<BLK>(bs, kk + 64 * E, dot_vec_l2x<FP8>(c, x + kk + 64 * E)) +
                   blk_scaled<BLK>(bs, kk + 96 * E, dot_vec_l2x<FP8>(d, x + kk + 96 * E));
        }
        for (; kk < K; kk += 32 * E)
            acc += blk_scaled<BLK>(bs, kk, dot_vec_l2x<FP8>(__ldcs(wv + kk / E), x + kk));
    } else {
        for (int64_t kk = lane; kk < K; kk += 32) acc += wval<FP8>(w_row, kk) * bf16_to_f(__ldcg(x + kk));
    }
    return acc;
}

// Per-slot mode's wait (moe_down_gemv.cuh: slot_rows_done): without counters every block waits
// for the previous kernel; with them only block (0, 0) does, the others let the next kernel
// launch, and a routed block (slot s ≥ 0) then waits for its slot's rows.
__device__ __forceinline__ void slot_enter(const moe_down_gemv_params &p, int64_t s) {
    if (!p.slot_rows_done || (blockIdx.x == 0 && blockIdx.y == 0))
        pdl_enter();
    else
        pdl_release();
    if (p.slot_rows_done && s >= 0) block_count_wait(p.slot_rows_done + s, unsigned(p.n_ff_exp));
}

// Both per-slot kernels' shared-experts rows: rows [n0, n0 + nr) of token blockIdx.y's shared
// slot on one warp, one after another (0 ≤ nr ≤ MAXR; 0: rows past n_embd). With sh_ready
// everything runs before the wait (moe_down_gemv.cuh), the activations read through L2;
// otherwise the rows head for L2, the block waits, then the rows run.
template <bool FP8, bool VEC, bool BLK, int MAXR>
__device__ __forceinline__ void shared_slot_rows(const moe_down_gemv_params &p, int64_t n0, int nr, int lane) {
    const int64_t t = blockIdx.y, H = p.n_embd, F = p.n_ff_sh, row_bytes = F * (FP8 ? 1 : 2);
    const unsigned char *w = static_cast<const unsigned char *>(p.sh_w) + n0 * row_bytes;
    const uint16_t *x = p.sh_act + t * F;
    auto row = [&](int r, auto l2x) {
        const int64_t n = n0 + r;
        const float scale = FP8 && !BLK ? __ldg(p.sh_w_scale + n) : 1.0f;
        const float *bs = BLK ? p.sh_w_scale + fp8_scale_index(n, 0, F, scale_layout::block128) : nullptr;
        float v;
        if constexpr (decltype(l2x)::value)
            v = warp_sum(lane_dot_l2x<FP8, VEC, BLK>(w + r * row_bytes, x, F, lane, bs));
        else
            v = warp_sum(lane_dot<FP8, VEC, false, BLK>(w + r * row_bytes, x, 0, F, lane, bs));
        if (lane == 0) p.y_shared[t * H + n] = v * scale;
    };
    auto rows = [&](auto l2x) {
        if constexpr (MAXR == 1) {
            if (nr > 0) row(0, l2x);
        } else {
#pragma unroll 1
            for (int r = 0; r < nr; ++r) row(r, l2x);
        }
    };
    if (p.sh_ready) {
        rows(std::true_type{});
        slot_enter(p, -1);
        return;
    }
    for (int64_t b = int64_t(lane) * 128; b < nr * row_bytes; b += 32 * 128) prefetch_l2(w + b);
    slot_enter(p, -1);
    rows(std::false_type{});
}

// Per-slot mode (y_slots set): grid (n_embd / 4, slots); one warp per (slot, n) streams row n of
// the slot's expert (lane_dot: 16-byte loads, four in flight) and writes the scaled product;
// moe_combine then adds the slots into the residual. Many small independent warps, as
// moe_gate_up_gemv, instead of one block gathering every choice of (t, n). With the shared
// experts (sh_w set) the grid has n_tokens more rows, first (scheduled first): their weights are
// known, so their rows head for L2 and their scales load before pdl_wait; with sh_ready (the
// activations written two launches back) the whole shared slot runs before the wait.
template <bool FP8, bool VEC, bool BLK = false>
__global__ void __launch_bounds__(128) moe_down_rows_kernel(moe_down_gemv_params p) {
    static_assert(!BLK || (FP8 && VEC), "block scales: FP8 weights, 16-byte vectors");
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t n = int64_t(blockIdx.x) * 4 + warp, H = p.n_embd;
    const int64_t n_sh = p.sh_w ? p.n_tokens : 0; // leading grid rows of the shared experts
    if (int64_t(blockIdx.y) < n_sh) {
        shared_slot_rows<FP8, VEC, BLK, 1>(p, n, n < H ? 1 : 0, lane);
        return;
    }
    slot_enter(p, int64_t(blockIdx.y) - n_sh);
    const int64_t s = int64_t(blockIdx.y) - n_sh;
    if (n >= H) return;
    const int64_t F = p.n_ff_exp, e = p.ids[s], row = e * H + n;
    const float scale = FP8 && !BLK ? __ldg(p.w_scale + row) : 1.0f;
    const float *bs =
        BLK ? p.w_scale + fp8_stack_scale_index(e, n, 0, H, F, scale_layout::block128) : nullptr;
    const unsigned char *w = static_cast<const unsigned char *>(p.w) + row * F * (FP8 ? 1 : 2);
    const float v = warp_sum(lane_dot<FP8, VEC, true, BLK>(w, p.act + s * F, 0, F, lane, bs));
    if (lane == 0) p.y_slots[s * H + n] = v * scale;
}

// Both per-slot kernels read the routed activations by plain loads (dot_vec's and lane_dot's XS):
// with slot counters the gate/up kernel writes them while this one runs, and only the coherent
// path is ordered by block_count_wait's acquire (the read-only __ldg path is not; on the H200 the
// two measured the same).
//
// Per-slot mode with rows per warp (rows_per_warp = R > 1, moe_down_gemv.cuh; on the H200, in the
// 21B-A3B's decode step, this launch's share of a layer is 10.8 µs at R = 1, 8.4–8.8 at R = 2 and
// 5.4–5.6 at R = 4, but the routed gate/up before it, whose tail it overlaps, grows by 3.5 and 5 µs:
// the step is 1,786 µs at R = 1, 1,741 at R = 2, 1,769 at R = 4 — hence the default, 2):
// grid (n_embd / (4·R), slots + shared rows), each warp R consecutive n of one slot. Routed rows:
// with NV > 0 (16-byte rows of at most NV vectors per lane: the 21B-A3B's 1,536-wide FP8 rows are
// 3), every vector of the R rows is loaded before the first product (R·NV uint4 per lane; rows past
// n_embd load row n0 again and store nothing); otherwise (NV = 0: longer or unaligned rows) the R
// rows go one after another through lane_dot. (NV = 4 spilled a few bytes at R = 4, so it is not
// instantiated: 4 vectors per lane take the NV = 0 path.) Each row's products and sums are
// lane_dot's in its order (steps of four vectors while all four lie in the row, then one at a
// time), then the same warp_sum and scale: the output is bit-identical to R = 1 (the twin does not
// change). The shared rows (known before the wait) run R = 1's code row after row, their L2
// prefetches first.
template <bool FP8, bool VEC, int R, int NV>
__global__ void __launch_bounds__(128) moe_down_rows_r_kernel(moe_down_gemv_params p) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t n0 = (int64_t(blockIdx.x) * 4 + warp) * R, H = p.n_embd;
    const int64_t n_sh = p.sh_w ? p.n_tokens : 0; // leading grid rows of the shared experts
    if (int64_t(blockIdx.y) < n_sh) {
        shared_slot_rows<FP8, VEC, false, R>(p, n0, int(max(int64_t(0), min(int64_t(R), H - n0))), lane);
        return;
    }
    slot_enter(p, int64_t(blockIdx.y) - n_sh);
    const int64_t s = int64_t(blockIdx.y) - n_sh;
    if (n0 >= H) return;
    const int64_t F = p.n_ff_exp, row_bytes = F * (FP8 ? 1 : 2), row0 = int64_t(p.ids[s]) * H + n0;
    const unsigned char *w = static_cast<const unsigned char *>(p.w) + row0 * row_bytes;
    const uint16_t *x = p.act + s * F;
    if constexpr (VEC && NV > 0) {
        float scale[R];
#pragma unroll
        for (int r = 0; r < R; ++r) scale[r] = FP8 ? __ldg(p.w_scale + row0 + (n0 + r < H ? r : 0)) : 1.0f;
        constexpr int E = vec_elems<FP8>;
        const int64_t nvec = F / E; // vectors per row; this lane's i-th is lane + 32·i
        uint4 wq[R][NV];
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const uint4 *wv = reinterpret_cast<const uint4 *>(w + (n0 + r < H ? r : 0) * row_bytes);
#pragma unroll
            for (int i = 0; i < NV; ++i) wq[r][i] = __ldcs(wv + (lane + 32 * i < nvec ? lane + 32 * i : 0));
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
            float a = 0.0f;
#pragma unroll
            for (int i = 0; i < NV; i += 4) {
                const int64_t kk = int64_t(lane + 32 * i) * E;
                if (i + 3 < NV && lane + 32 * (i + 3) < nvec) { // lane_dot's step of four
                    a += dot_vec<FP8, true>(wq[r][i], x + kk) +
                         dot_vec<FP8, true>(wq[r][i + 1], x + kk + 32 * E) +
                         dot_vec<FP8, true>(wq[r][i + 2], x + kk + 64 * E) +
                         dot_vec<FP8, true>(wq[r][i + 3], x + kk + 96 * E);
                } else { // its steps of one
#pragma unroll
                    for (int j = i; j < i + 4 && j < NV; ++j)
                        if (lane + 32 * j < nvec)
                            a += dot_vec<FP8, true>(wq[r][j], x + int64_t(lane + 32 * j) * E);
                }
            }
            if (n0 + r >= H) break;
            a = warp_sum(a);
            if (lane == 0) p.y_slots[s * H + n0 + r] = a * scale[r];
        }
    } else {
        const int nr = int(min(int64_t(R), H - n0));
#pragma unroll 1
        for (int r = 0; r < nr; ++r) {
            const float scale = FP8 ? __ldg(p.w_scale + row0 + r) : 1.0f;
            const float v = warp_sum(lane_dot<FP8, VEC, true>(w + r * row_bytes, x, 0, F, lane));
            if (lane == 0) p.y_slots[s * H + n0 + r] = v * scale;
        }
    }
}

// The rows-per-warp kernel whose NV holds every vector of this lane's routed rows, when one does.
template <bool FP8, int R>
cudaError_t launch_rows_r(const moe_down_gemv_params &p, bool vec, cudaStream_t stream) {
    const dim3 grid(ceil_div_u(p.n_embd, 4 * R),
                    unsigned(p.n_tokens * p.n_expert_used + (p.sh_w ? p.n_tokens : 0)));
    const int64_t nv = vec ? (p.n_ff_exp / vec_elems<FP8> + 31) / 32 : 0; // vectors per lane per row
    if (!vec) return launch_decode<moe_down_rows_r_kernel<FP8, false, R, 0>>(grid, 128, 0, stream, p);
    if (nv <= 2) return launch_decode<moe_down_rows_r_kernel<FP8, true, R, 2>>(grid, 128, 0, stream, p);
    if (nv <= 3) return launch_decode<moe_down_rows_r_kernel<FP8, true, R, 3>>(grid, 128, 0, stream, p);
    return launch_decode<moe_down_rows_r_kernel<FP8, true, R, 0>>(grid, 128, 0, stream, p);
}

} // namespace

cudaError_t launch_moe_down_gemv(const moe_down_gemv_params &p, cudaStream_t stream) {
    if (p.n_tokens <= 0 || p.n_embd <= 0) return cudaSuccess;
    const bool fp8 = p.wfmt == weight_format::fp8_e4m3;
    if (fp8 && !p.w_scale) return cudaErrorInvalidValue;
    if (p.rows_per_warp != 0 && p.rows_per_warp != 1 && p.rows_per_warp != 2 && p.rows_per_warp != 4)
        return cudaErrorInvalidValue;
    if (p.slot_rows_done && (!p.y_slots || (p.sh_w && !p.sh_ready))) return cudaErrorInvalidValue;
    bool vec = p.n_ff_exp % (fp8 ? 16 : 8) == 0 && aligned16(p.w) && aligned16(p.act);
    const bool blk = fp8 && p.w_layout == scale_layout::block128;
    if (p.y_slots) {
        if (p.sh_w) {
            if (!p.sh_act || !p.y_shared || p.n_ff_sh <= 0 || (fp8 && !p.sh_w_scale))
                return cudaErrorInvalidValue;
            vec = vec && p.n_ff_sh % (fp8 ? 16 : 8) == 0 && aligned16(p.sh_w) && aligned16(p.sh_act);
        }
        if (blk && !vec) return cudaErrorInvalidValue; // block scales: the vector path only
        int rpw = p.rows_per_warp;
        if (rpw == 0) { // the default: two rows where their loads fit in registers together
            const int64_t nv = (p.n_ff_exp / (fp8 ? 16 : 8) + 31) / 32; // vectors per lane per row
            rpw = vec && nv <= 3 ? 2 : 1;
        }
        if (!blk && rpw == 2)
            return fp8 ? launch_rows_r<true, 2>(p, vec, stream) : launch_rows_r<false, 2>(p, vec, stream);
        if (!blk && rpw == 4)
            return fp8 ? launch_rows_r<true, 4>(p, vec, stream) : launch_rows_r<false, 4>(p, vec, stream);
        const dim3 grid(ceil_div_u(p.n_embd, 4),
                        unsigned(p.n_tokens * p.n_expert_used + (p.sh_w ? p.n_tokens : 0)));
        if (blk) return launch_decode<moe_down_rows_kernel<true, true, true>>(grid, 128, 0, stream, p);
        if (fp8) {
            if (vec) return launch_decode<moe_down_rows_kernel<true, true>>(grid, 128, 0, stream, p);
            return launch_decode<moe_down_rows_kernel<true, false>>(grid, 128, 0, stream, p);
        }
        if (vec) return launch_decode<moe_down_rows_kernel<false, true>>(grid, 128, 0, stream, p);
        return launch_decode<moe_down_rows_kernel<false, false>>(grid, 128, 0, stream, p);
    }
    const dim3 grid(unsigned(p.n_embd), unsigned(p.n_tokens));
    if (blk && !vec) return cudaErrorInvalidValue;
    if (blk) return launch_decode<moe_down_gemv_kernel<true, true, true>>(grid, 128, 0, stream, p);
    if (fp8) {
        if (vec) return launch_decode<moe_down_gemv_kernel<true, true>>(grid, 128, 0, stream, p);
        return launch_decode<moe_down_gemv_kernel<true, false>>(grid, 128, 0, stream, p);
    }
    if (vec) return launch_decode<moe_down_gemv_kernel<false, true>>(grid, 128, 0, stream, p);
    return launch_decode<moe_down_gemv_kernel<false, false>>(grid, 128, 0, stream, p);
}

} // namespace es
