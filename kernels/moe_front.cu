// moe_front (see moe_front.cuh). One grid of 256-thread blocks: blocks [0, nr) are the router's
// (two experts per block, four warps per expert, each a quarter of the fp32 row: moe_router's
// arithmetic, moe_router_device.cuh), the others the shared experts' gate/up rows (one row f
// per warp: gate row f and up row f streamed together, 16-byte loads, four in flight, against
// every token). Before pdl_wait each warp loads its router quarter into registers (up to 768
// floats; the rest towards L2) or sends its gate and up rows towards L2 and loads their FP8
// scales; after it, every block normalizes the token rows
// into shared memory (block_rms_norm_to_smem, under the weights' fetch) and block 0 stores them
// to norm.out for the routed experts' kernel. The last router block to finish (a counter) runs
// the tail on one warp per token. The router's ~11 µs of latency overlaps the shared experts'
// weight streaming instead of preceding it, and the rms_norm launch is gone.
#include "kernels/moe_front.cuh"
#include "kernels/moe_router_device.cuh"

namespace es {
namespace {

constexpr int k_threads = 256, k_warps = k_threads / 32;
constexpr int k_experts_per_block = k_warps / k_router_warps_per_expert;
constexpr int k_norm_v = 3; // norm-weight slots per thread loaded before the wait: n_embd ≤ 3,072

// This lane's share of the gate and up dots of one row pair against mt ≤ MT token rows in shared
// memory (xs + m·H): lane_dot2's loads, the activations of every token per weight vector.
// BLK: 128×128 block scales (bs0, bs1: the rows' scales), per 16-byte vector as lane_dot2's.
template <bool FP8, bool VEC, int MT, bool BLK = false>
__device__ __forceinline__ void lane_dot2_rows(const void *w0, const void *w1, const uint16_t *xs, int64_t H,
                                               int mt, int lane, float (&a0)[MT], float (&a1)[MT],
                                               const float *bs0 = nullptr, const float *bs1 = nullptr) {
    static_assert(!BLK || (FP8 && VEC), "block scales: FP8 weights, 16-byte vectors");
#pragma unroll
    for (int m = 0; m < MT; ++m) a0[m] = a1[m] = 0.0f;
    if constexpr (VEC) {
        constexpr int E = vec_elems<FP8>;
        const uint4 *v0 = static_cast<const uint4 *>(w0), *v1 = static_cast<const uint4 *>(w1);
        int64_t kk = int64_t(lane) * E;
        // Two vector pairs in flight per lane; BLK one (its scales' registers: the two-pair loop
        // spilled under the four-blocks-per-SM register limit).
        if constexpr (!BLK)
            for (; kk + 32 * E < H; kk += 2 * 32 * E) {
                const uint4 a = __ldcs(v0 + kk / E), b = __ldcs(v0 + kk / E + 32), c = __ldcs(v1 + kk / E),
                            d = __ldcs(v1 + kk / E + 32);
#pragma unroll
                for (int m = 0; m < MT; ++m)
                    if (m < mt) {
                        const uint16_t *x = xs + m * H + kk;
                        a0[m] += dot_vec<FP8, true>(a, x) + dot_vec<FP8, true>(b, x + 32 * E);
                        a1[m] += dot_vec<FP8, true>(c, x) + dot_vec<FP8, true>(d, x + 32 * E);
                    }
            }
        for (; kk < H; kk += 32 * E) {
            const uint4 a = __ldcs(v0 + kk / E), c = __ldcs(v1 + kk / E);
            const float s0 = BLK ? __ldg(bs0 + kk / fp8_block) : 1.0f,
                        s1 = BLK ? __ldg(bs1 + kk / fp8_block) : 1.0f;
#pragma unroll
            for (int m = 0; m < MT; ++m)
                if (m < mt) {
                    const float d0 = dot_vec<FP8, true>(a, xs + m * H + kk),
                                d1 = dot_vec<FP8, true>(c, xs + m * H + kk);
                    a0[m] += BLK ? s0 * d0 : d0;
                    a1[m] += BLK ? s1 * d1 : d1;
                }
        }
    } else {
        for (int64_t kk = lane; kk < H; kk += 32) {
            const float g = wval<FP8>(w0, kk), u = wval<FP8>(w1, kk);
#pragma unroll
            for (int m = 0; m < MT; ++m)
                if (m < mt) {
                    const float xv = bf16_to_f(xs[m * H + kk]);
                    a0[m] += g * xv;
                    a1[m] += u * xv;
                }
        }
    }
}

// Four blocks per SM (≤ 64 registers): the 21B-A3B's 416 blocks then fit one wave on 132 SMs
// (three per SM, at the ~80 registers ptxas picks otherwise, would leave a second wave; the price
// is a 16-byte spill in the FP8 four-token variant).
template <bool FP8, bool VEC, int MT, bool BLK = false>
__global__ void __launch_bounds__(k_threads, 4) moe_front_kernel(moe_front_params p, unsigned nr) {
    extern __shared__ __align__(16) unsigned char smem[];
    uint16_t *xs = reinterpret_cast<uint16_t *>(smem); // [mt, H] normalized rows; the tail reuses it
    __shared__ float red[32 * MT];
    __shared__ float part[k_warps][MT];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, mt = int(p.n_tokens);
    const int64_t H = p.n_embd, E = p.n_expert, K = p.n_expert_used, F = p.n_ff_sh;
    const bool router = blockIdx.x < nr;

    // Weights first (no kernel writes them): they move while the previous kernel finishes.
    const int64_t e = int64_t(blockIdx.x) * k_experts_per_block + warp / k_router_warps_per_expert;
    const int quarter = warp % k_router_warps_per_expert;
    const bool rvec = H % 4 == 0 && aligned16(p.router_w);
    const int64_t f = (int64_t(blockIdx.x) - nr) * k_warps + warp, row_bytes = H * (FP8 ? 1 : 2);
    const unsigned char *wg = static_cast<const unsigned char *>(p.sh_w) + f * row_bytes,
                        *wu = static_cast<const unsigned char *>(p.sh_w) + (F + f) * row_bytes;
    float gs = 1.0f, us = 1.0f;
    float4 pre[k_router_pre];
    if (router) {
        if (rvec && e < E) router_preload_quarter(p.router_w + e * H, H, quarter, lane, pre);
    } else if (f < F) {
        for (int64_t b = int64_t(lane) * 128; b < row_bytes; b += 32 * 128) {
            prefetch_l2(wg + b);
            prefetch_l2(wu + b);
        }
        if (FP8 && !BLK) {
            gs = __ldg(p.sh_w_scale + f);
            us = __ldg(p.sh_w_scale + F + f);
        }
    }
    norm_weight_regs<k_norm_v> nwr; // the norm weight too (kernel_common.cuh)
    norm_weight_preload<k_norm_v>(p.norm.weight, H, nwr);
    pdl_enter();
    block_rms_norm_to_smem<MT, k_norm_v>(p.norm.x, H, mt, p.norm.weight, nwr, H, p.norm.eps, xs, red);
    if (blockIdx.x == 0) block_store_rows(xs, p.norm.out, mt, H);

    if (router) {
        float acc[MT];
        if (e < E)
            router_lane_quarter<MT, true>(p.router_w + e * H, xs, H, mt, H, quarter, lane, rvec, pre, acc);
        else
#pragma unroll
            for (int m = 0; m < MT; ++m) acc[m] = 0.0f;
#pragma unroll
        for (int m = 0; m < MT; ++m) {
            const float v = warp_sum(acc[m]);
            if (lane == 0) part[warp][m] = v;
        }
        __syncthreads();
        if (quarter == 0 && lane == 0 && e < E)
            for (int m = 0; m < mt; ++m) {
                float s = 0.0f;
                for (int q = 0; q < k_router_warps_per_expert; ++q) s += part[warp + q][m]; // in order
                p.logits[m * E + e] = s;
            }
        // (Its opening barrier also ends every read of xs: the tail may reuse the memory.)
        if (!block_arrives_last(p.counter, nr)) return;
        if (warp >= mt) return;                     // one warp per token from here: no block barriers
        if (warp == 0 && lane == 0) *p.counter = 0; // ready for the next launch
        float *sm = reinterpret_cast<float *>(smem) + warp * (2 * E + K);
        router_tail_warp(p.logits + warp * E, p.bias, E, K, p.norm_min, p.ids + warp * K,
                         p.weights + warp * K, p.margins ? p.margins + warp : nullptr, sm, lane);
        return;
    }
    if (f >= F) return;
    float g[MT], u[MT];
    if constexpr (BLK)
        lane_dot2_rows<FP8, VEC, MT, true>(
            wg, wu, xs, H, mt, lane, g, u, p.sh_w_scale + fp8_scale_index(f, 0, H, scale_layout::block128),
            p.sh_w_scale + fp8_scale_index(F + f, 0, H, scale_layout::block128));
    else
        lane_dot2_rows<FP8, VEC, MT>(wg, wu, xs, H, mt, lane, g, u);
#pragma unroll
    for (int m = 0; m < MT; ++m) {
        const float gv = warp_sum(g[m]) * gs, uv = warp_sum(u[m]) * us;
        if (lane == 0 && m < mt) p.sh_act[m * F + f] = f_to_bf16(silu_f(gv) * uv);
    }
}

template <bool FP8, bool VEC, bool BLK = false>
cudaError_t launch_vec(const moe_front_params &p, dim3 grid, size_t smem, unsigned nr, cudaStream_t stream) {
    switch (moe_front_rows(p.n_tokens)) {
    case 1:
        // Batch-1 decode: the decode carveout (kernel_common.cuh) holds four of its ≤ 6 KB blocks
        // beside the neighbouring kernels' blocks. More rows keep the driver's choice (three 20 KB
        // blocks an SM in 64 KB would leave the 21B-A3B's 416 blocks a second wave).
        return launch_decode<moe_front_kernel<FP8, VEC, 1, BLK>>(grid, k_threads, smem, stream, p, nr);
    case 2:
        return launch_kernel(moe_front_kernel<FP8, VEC, 2, BLK>, grid, k_threads, smem, stream, p, nr);
    default:
        return launch_kernel(moe_front_kernel<FP8, VEC, 4, BLK>, grid, k_threads, smem, stream, p, nr);
    }
}

} // namespace

cudaError_t launch_moe_front(const moe_front_params &p, cudaStream_t stream) {
    if (!moe_front_supported(p) || !p.router_w || !p.bias || !p.ids || !p.weights || !p.logits || !p.counter)
        return cudaErrorInvalidValue;
    const bool fp8 = p.sh_wfmt == weight_format::fp8_e4m3;
    if (p.n_ff_sh > 0 && (!p.sh_w || !p.sh_act || (fp8 && !p.sh_w_scale))) return cudaErrorInvalidValue;
    const unsigned nr = unsigned((p.n_expert + k_experts_per_block - 1) / k_experts_per_block);
    const dim3 grid(nr + ceil_div_u(p.n_ff_sh, k_warps));
    const size_t smem = moe_front_smem_bytes(p);
    const bool vec = p.n_embd % (fp8 ? 16 : 8) == 0 && aligned16(p.sh_w);
    if (fp8 && p.sh_w_layout == scale_layout::block128) {
        if (!vec && p.n_ff_sh > 0) return cudaErrorInvalidValue; // block scales: the vector path only
        return launch_vec<true, true, true>(p, grid, smem, nr, stream);
    }
    if (fp8)
        return vec ? launch_vec<true, true>(p, grid, smem, nr, stream)
                   : launch_vec<true, false>(p, grid, smem, nr, stream);
    return vec ? launch_vec<false, true>(p, grid, smem, nr, stream)
               : launch_vec<false, false>(p, grid, smem, nr, stream);
}

} // namespace es
