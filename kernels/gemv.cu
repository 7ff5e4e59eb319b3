// gemv (see gemv.cuh). One warp per output row n, 4 rows per block; each warp streams its weight
// row once (16-byte loads per lane, up to four in flight, evict-first) and multiplies it with up to MT
// tokens' activations (MT = 1, 2, 4 or 8; more tokens run as more grid rows). Lanes keep MT fp32
// partial sums, reduced by shuffles; lane 0 applies the FP8 scale and writes, adds, or (split-K)
// atomically adds. Under programmatic launch the row slice (of a matrix over the L2 cap, its
// leading part: kernel_common.h, l2_prefetch_max_bytes) is prefetched into L2 before the
// kernel waits for its predecessor (one token, a lane's share of at most six 16-byte vectors of
// a matrix of at least 4 MB: loaded into registers instead). Rows whose size or alignment does
// not allow 16-byte vectors take a scalar path. The fused variants (gemv.cuh) normalize the block's input
// rows into shared memory after the wait (the weights are already on their way; the norm weight was staged
// there before it) and/or rotate q/k pairs in the epilogue: four rows per block are two whole pairs.
#include "kernels/gemv.cuh"
#include "kernels/kernel_common.cuh"

#include <algorithm>
#include <atomic>

namespace es {
namespace {

constexpr int k_rows_per_block = 4;
constexpr int64_t k_rows_head = gemv_pick_min_rows; // one-token GEMVs of at least this many rows: gemv_rows_kernel

// The fused epilogue of the q|k|v projection (gemv.cuh: rope): the block's four rows are two
// rotation pairs of one q or k head (or four v elements). Before the kernel waits, lane m < mt of
// each warp looks up token m's cache slot and, for its warp's pair, the rotation's sin/cos (inputs
// and weights, which no kernel writes — except a decode graph's input copy just before layer 0's
// GEMV: then after the wait, rope_inputs_after_wait); after the dot products each warp leaves its row's
// outputs in ep[warp][m], and warps 0 and 2 rotate their pair, one lane per token.
struct rope_lane {
    int64_t t = 0, slot = 0;
    float sn = 0.0f, cs = 1.0f;
};

__device__ __forceinline__ rope_lane rope_prepare(const gemv_params &p, int64_t n, int64_t m0, int mt, int lane) {
    rope_lane l;
    const rope_kv_params &r = p.rope;
    if (lane >= mt || n >= p.n) return l;
    const int64_t hd = r.head_dim, qd = r.n_head * hd;
    l.t = m0 + lane;
    const int32_t pos = __ldg(r.pos + l.t);
    if (n >= qd) // k or v: the token's cache slot
        l.slot = int64_t(__ldg(r.block_tables + int64_t(__ldg(r.seq + l.t)) * r.bt_stride + pos / r.block_size)) *
                     r.block_size +
                 pos % r.block_size;
    if (n < qd + r.n_head_kv * hd) sincosf(float(pos) * __ldg(r.inv_freq + (n % hd) / 2), &l.sn, &l.cs);
    return l;
}

__device__ __forceinline__ void rope_epilogue(const gemv_params &p, const float (*ep)[8], const rope_lane &l,
                                              int64_t n, int mt, int warp, int lane) {
    const rope_kv_params &r = p.rope;
    const int64_t hd = r.head_dim, qd = r.n_head * hd, kvd = r.n_head_kv * hd;
    if (lane >= mt || n >= p.n) return;
    if (n < qd + kvd) { // a rotation pair: even warps own it
        if (warp % 2) return;
        const float a = ep[warp][lane], b = ep[warp + 1][lane];
        const float x0 = a * l.cs - b * l.sn, x1 = b * l.cs + a * l.sn;
        if (n >= qd && r.kv == kv_format::fp8_e4m3) { // k' into an FP8 cache
            uint8_t *dst = static_cast<uint8_t *>(r.k_cache) + l.slot * kvd + (n - qd);
            dst[0] = kv_store_fp8_d(x0, r.k_scale);
            dst[1] = kv_store_fp8_d(x1, r.k_scale);
            return;
        }
        uint16_t *dst =
            n < qd ? r.q_out + l.t * qd + n : static_cast<uint16_t *>(r.k_cache) + l.slot * kvd + (n - qd);
        dst[0] = f_to_bf16(x0);
        dst[1] = f_to_bf16(x1);
        return;
    }
    const int64_t e = l.slot * kvd + (n - qd - kvd);
    if (r.kv == kv_format::fp8_e4m3)
        static_cast<uint8_t *>(r.v_cache)[e] = kv_store_fp8_d(ep[warp][lane], r.v_scale);
    else
        static_cast<uint16_t *>(r.v_cache)[e] = f_to_bf16(ep[warp][lane]);
}

// NORM: the block first normalizes its mt input rows into shared memory (norm_in); ROPE: the
// rope_kv epilogue instead of writing y; BLK: FP8 weights with 128×128 block scales, applied to
// each 16-byte vector's partial product (a vector never straddles blocks). All three need VEC.
// PRE (one token, no split, a lane's share of the row ≤ k_pre_vectors, a matrix of at least
// gemv_preload_min_bytes()): the lane loads its whole share into registers before the wait instead of
// asking L2 for it, so after the wait only the activations travel. What it saves is the matrix's
// trip from L2 to the SMs after the wait; measured on the H200 (docs/benchmarks.md, designs
// tried): the 21B-A3B's o_proj (6.5 MB) 1 µs faster a layer, the 0.3B's o_proj and down (2 and
// 3 MB) together 2 µs slower a step, so the floor sits between them.
constexpr int k_pre_vectors = 6;
std::atomic<int64_t> g_pre_min_bytes{int64_t(4) << 20}; // set_gemv_preload_min_bytes
template <bool FP8, int MT, bool VEC, bool NORM = false, bool ROPE = false, bool BLK = false,
          bool PRE = false>
__global__ void __launch_bounds__(128) gemv_kernel(gemv_params p) {
    static_assert(VEC || (!NORM && !ROPE && !BLK), "the fusions and block scales take the vector path");
    static_assert(FP8 || !BLK, "block scales are FP8's");
    static_assert(!PRE || (MT == 1 && VEC && !NORM && !BLK), "the preload: one token, rows without the norm");
    extern __shared__ __align__(16) unsigned char gemv_smem[];
    __shared__ float red[NORM ? 32 * MT : 1];
    __shared__ float ep[ROPE ? 4 : 1][8];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t n = int64_t(blockIdx.x) * k_rows_per_block + warp;
    // Fused kernels keep every warp to the end (block barriers); others leave early.
    if (!NORM && !ROPE && n >= p.n) return;
    const bool has_row = n < p.n;
    const int64_t m0 = int64_t(blockIdx.y) * MT;
    const int mt = int(p.n_tokens - m0 < MT ? p.n_tokens - m0 : MT);
    constexpr int E = VEC ? vec_elems<FP8> : 1;
    const int splits = gridDim.z;
    int64_t chunk = (p.k + splits - 1) / splits;
    chunk = (chunk + 32 * E - 1) / (32 * E) * (32 * E);
    const int64_t kb = int64_t(blockIdx.z) * chunk, ke = min(p.k, kb + chunk);
    const int64_t nr = has_row ? n : 0; // rows past the end (fused kernels) read row 0, write nothing
    const unsigned char *w_row = static_cast<const unsigned char *>(p.w) + nr * p.k * (FP8 ? 1 : 2);
    // No kernel writes weights: this warp's slice of its row starts moving into L2 while the
    // previous kernel finishes (programmatic launch), before the wait for the activations.
    constexpr int64_t line = FP8 ? 128 : 64; // elements per 128-byte line
    uint4 pre[PRE ? k_pre_vectors : 1];
    if constexpr (PRE) {
#pragma unroll
        for (int i = 0; i < k_pre_vectors; ++i) {
            const int64_t kk = kb + (int64_t(lane) + 32 * i) * E;
            if (kk < ke) pre[i] = __ldcs(reinterpret_cast<const uint4 *>(w_row) + kk / E);
        }
    } else if (has_row) { // the row's slice, or its leading pre_l2_fraction (the L2 cap)
        const int64_t pe = p.pre_l2_fraction >= 1.0f ? ke : kb + int64_t(float(ke - kb) * p.pre_l2_fraction);
        for (int64_t kk = kb + lane * line; kk < pe; kk += 32 * line) prefetch_l2(w_row + kk * (FP8 ? 1 : 2));
    }
    const float scale = FP8 && !BLK ? __ldg(p.w_scale + nr) : 1.0f; // a weight too: loaded before the wait
    const float *bscale = p.w_scale + (nr / fp8_block) * ((p.k + fp8_block - 1) / fp8_block); // BLK: this row's
    // The fusions' other inputs are weights or uploaded inputs too (gemv.cuh): before the wait.
    // The norm weight goes to shared memory, not registers (kernel_common.cuh: norm_weight_stage).
    if constexpr (NORM) norm_weight_stage(p.norm.weight, p.k, reinterpret_cast<uint16_t *>(gemv_smem));
    rope_lane rl;
    if constexpr (ROPE)
        if (!p.rope_inputs_after_wait) rl = rope_prepare(p, n, m0, mt, lane);
    float prev[MT]; // y_ready: the values accumulated into, read before the wait (gemv.cuh)
    const bool early = !ROPE && p.accumulate && p.y_ready && splits == 1 && has_row && lane == 0;
#pragma unroll
    for (int m = 0; m < MT; ++m) prev[m] = early && m < mt ? __ldcg(p.y + (m0 + m) * p.ldy + n) : 0.0f;
    pdl_enter();
    if constexpr (ROPE)
        if (p.rope_inputs_after_wait) rl = rope_prepare(p, n, m0, mt, lane);

    const uint16_t *x = p.x + m0 * p.ldx;
    int64_t ldx = p.ldx;
    if constexpr (NORM) {
        uint16_t *xs = reinterpret_cast<uint16_t *>(gemv_smem);
        bool embedded = false;
        if constexpr (MT == 1)  // the embedding folded in (one token: gemv_fusion_ok): the norm reads
            if (p.embd_table) { // the table's row, widened; block 0 writes it to the residual stream
                const uint16_t *row = p.embd_table + int64_t(p.embd_tokens[m0]) * p.k;
                if (blockIdx.x == 0 && blockIdx.z == 0) block_widen_bf16_row(row, p.k, p.embd_out + m0 * p.k);
                block_rms_norm_staged<1>(bf16_row{row}, 1, p.k, p.norm.eps, xs, red);
                embedded = true;
            }
        if (!embedded) block_rms_norm_staged<MT>(p.norm.x + m0 * p.k, p.k, mt, p.k, p.norm.eps, xs, red);
        if (p.norm.out && blockIdx.x == 0 && blockIdx.z == 0)
            for (int64_t i = threadIdx.x; i < mt * p.k; i += blockDim.x) p.norm.out[m0 * p.k + i] = xs[i];
        x = xs;
        ldx = p.k;
    }

    float acc[MT];
#pragma unroll
    for (int m = 0; m < MT; ++m) acc[m] = 0.0f;
    if constexpr (PRE) {
#pragma unroll
        for (int i = 0; i < k_pre_vectors; ++i) {
            const int64_t kk = kb + (int64_t(lane) + 32 * i) * E;
            if (kk < ke) acc[0] += dot_vec<FP8>(pre[i], x + kk);
        }
    } else if constexpr (VEC) {
        const uint4 *wv = reinterpret_cast<const uint4 *>(w_row);
        int64_t kk = kb + int64_t(lane) * E;
        // U weight vectors in flight per lane (more for few tokens, where registers are free).
        constexpr int U = MT <= 2 ? 4 : 2;
        for (; kk + (U - 1) * 32 * E < ke; kk += U * 32 * E) {
            uint4 wq[U];
#pragma unroll
            for (int u = 0; u < U; ++u) wq[u] = __ldcs(wv + kk / E + u * 32);
#pragma unroll
            for (int u = 0; u < U; ++u) {
                const float bs = BLK ? __ldg(bscale + (kk + u * 32 * E) / fp8_block) : 1.0f;
#pragma unroll
                for (int m = 0; m < MT; ++m)
                    if (m < mt) {
                        const float d = dot_vec<FP8, NORM>(wq[u], x + m * ldx + kk + u * 32 * E);
                        acc[m] += BLK ? bs * d : d;
                    }
            }
        }
        for (; kk < ke; kk += 32 * E) {
            const uint4 a = __ldcs(wv + kk / E);
            const float bs = BLK ? __ldg(bscale + kk / fp8_block) : 1.0f;
#pragma unroll
            for (int m = 0; m < MT; ++m)
                if (m < mt) {
                    const float d = dot_vec<FP8, NORM>(a, x + m * ldx + kk);
                    acc[m] += BLK ? bs * d : d;
                }
        }
    } else {
        for (int64_t kk = kb + lane; kk < ke; kk += 32) {
            const float wf = wval<FP8>(w_row, kk);
#pragma unroll
            for (int m = 0; m < MT; ++m)
                if (m < mt) acc[m] += wf * bf16_to_f(x[m * ldx + kk]);
        }
    }
    if constexpr (ROPE) {
#pragma unroll
        for (int m = 0; m < MT; ++m) {
            const float v = warp_sum(acc[m]) * scale;
            if (lane == 0) ep[warp][m] = v;
        }
        __syncthreads();
        rope_epilogue(p, ep, rl, n, mt, warp, lane);
        return;
    }
    if (!has_row) return;
#pragma unroll
    for (int m = 0; m < MT; ++m) {
        const float v = warp_sum(acc[m]) * scale;
        if (lane == 0 && m < mt) {
            float *dst = p.y + (m0 + m) * p.ldy + n;
            if (splits > 1)
                atomicAdd(dst, v);
            else
                *dst = early ? prev[m] + v : p.accumulate ? *dst + v : v;
        }
    }
}

// One token, very many rows (the LM head: 103,424): each warp takes RW consecutive rows, their
// loads interleaved, so a warp has RW times the bytes in flight (one row per warp streams the
// BF16 head at ~2.3 TB/s, its 25,856 blocks costing more than the bytes). Persistent: the grid is
// one wave (resident_blocks) and warp w takes row groups w, w + W, … (W the grid's warps), since a
// block per group of rows leaves a partial last wave and pays for the blocks' scheduling. On the
// H200 the BF16 heads (212 and 530 MB) stream within 2–4% of a read-only stream of the same bytes
// (tools/handoff_bench.cu head). Same per-row arithmetic and order as gemv_kernel with MT = 1:
// the same bits.
// BLK: 128×128 block scales (the RW rows share a row block: 128 is a multiple of RW).
// PICK (gemv.cuh: gemv_pick): after its rows, as without the pick, each warp re-reads the values
// it wrote (a lane an element, one round trip), reduces their logit_keys by shuffles and stores
// the largest in warp_keys[warp]; launch_gemv_pick_finish reduces those. The loop itself is the
// one without the pick: keeping lane 0's largest key inside the loop makes it stream the
// 21B-A3B's FP8 head in 77.5 µs instead of 68.8 (the self-test's timing rows; docs/benchmarks.md,
// designs tried). What the pick replaces is topk_logits' chain of two phases after the head
// (~13 µs of a decode step).
template <bool FP8, int RW, bool BLK = false, bool PICK = false>
__global__ void __launch_bounds__(128) gemv_rows_kernel(gemv_params p) {
    static_assert(128 % RW == 0, "a warp's rows in one scale block");
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t groups = (p.n + RW - 1) / RW, stride = int64_t(gridDim.x) * k_rows_per_block;
    const int64_t g0 = int64_t(blockIdx.x) * k_rows_per_block + warp;
    int64_t g = g0;
    if (g >= groups) {
        if constexpr (PICK)
            if (lane == 0) p.pick.warp_keys[g0] = 0ull; // no rows: no candidate
        return;
    }
    constexpr int E = vec_elems<FP8>;
    const int64_t row_bytes = p.k * (FP8 ? 1 : 2), kb_per_row = (p.k + fp8_block - 1) / fp8_block;
    float scale[RW];
#pragma unroll
    for (int r = 0; r < RW; ++r) // the first group's, a weight: before the wait
        scale[r] = FP8 && !BLK && g * RW + r < p.n ? __ldg(p.w_scale + g * RW + r) : 1.0f;
    pdl_enter();
    for (bool first = true; g < groups; g += stride, first = false) {
        const int64_t n0 = g * RW;
        const unsigned char *w = static_cast<const unsigned char *>(p.w) + n0 * row_bytes;
        if (!first)
#pragma unroll
            for (int r = 0; r < RW; ++r)
                scale[r] = FP8 && !BLK && n0 + r < p.n ? __ldg(p.w_scale + n0 + r) : 1.0f;
        const float *bscale = p.w_scale + (n0 / fp8_block) * kb_per_row;
        float acc[RW];
#pragma unroll
        for (int r = 0; r < RW; ++r) acc[r] = 0.0f;
#pragma unroll 2
        for (int64_t kk = int64_t(lane) * E; kk < p.k; kk += 32 * E) {
            uint4 wq[RW];
#pragma unroll
            for (int r = 0; r < RW; ++r)
                if (n0 + r < p.n) wq[r] = __ldcs(reinterpret_cast<const uint4 *>(w + r * row_bytes) + kk / E);
            const float bs = BLK ? __ldg(bscale + kk / fp8_block) : 1.0f;
#pragma unroll
            for (int r = 0; r < RW; ++r)
                if (n0 + r < p.n) {
                    const float d = dot_vec<FP8>(wq[r], p.x + kk);
                    acc[r] += BLK ? bs * d : d;
                }
        }
#pragma unroll
        for (int r = 0; r < RW; ++r) {
            const float v = warp_sum(acc[r]) * scale[r];
            if (lane == 0 && n0 + r < p.n) {
                float *dst = p.y + n0 + r;
                *dst = p.accumulate ? *dst + v : v;
            }
        }
    }
    if constexpr (PICK) {
        __syncwarp(); // lane 0's stores, then every lane's loads of them
        const int64_t n_groups = (groups - g0 + stride - 1) / stride, items = n_groups * RW;
        unsigned long long key = 0ull;
        for (int64_t j = lane; j < items; j += 32) {
            const int64_t row = (g0 + (j / RW) * stride) * RW + j % RW;
            if (row < p.n) key = max(key, logit_key(__ldcg(p.y + row), row));
        }
#pragma unroll
        for (int o = 16; o > 0; o /= 2) key = max(key, __shfl_xor_sync(0xffffffffu, key, o));
        if (lane == 0) p.pick.warp_keys[g0] = key;
    }
}

// The rows kernel's grid: a block per four row groups, at most one wave.
template <bool FP8, int RW, bool BLK = false, bool PICK = false>
unsigned rows_grid(const gemv_params &p) {
    const unsigned need = ceil_div_u(p.n, int64_t(k_rows_per_block) * RW),
                   wave = resident_blocks(
                       reinterpret_cast<const void *>(gemv_rows_kernel<FP8, RW, BLK, PICK>), 128, 0);
    return wave > 0 ? std::min(need, wave) : need;
}

template <bool FP8, int RW, bool BLK = false, bool PICK = false>
cudaError_t launch_rows(const gemv_params &p, cudaStream_t stream) {
    const unsigned grid = rows_grid<FP8, RW, BLK, PICK>(p);
    if (PICK && uint64_t(grid) * k_rows_per_block > p.pick.warp_keys_cap) return cudaErrorInvalidValue;
    return launch_decode<gemv_rows_kernel<FP8, RW, BLK, PICK>>(grid, 128, 0, stream, p);
}

// The pick's last part (gemv.cuh: launch_gemv_pick_finish): the largest of the rows kernel's
// n_keys warp keys, each of 512 threads its share (the 21B-A3B's 4,224 keys: eight or nine loads
// a thread in flight together; 256 threads would take two rounds, and the launch's share of a
// decode step is then ~1.5 µs longer), then shuffles and shared memory; the id, the value re-read
// from y (−0 stays −0), the row max (the same) and a zero sum.
constexpr unsigned k_pick_finish_threads = 512;

__global__ void __launch_bounds__(k_pick_finish_threads)
    gemv_pick_finish_kernel(gemv_params p, unsigned n_keys) {
    pdl_enter();
    const gemv_pick &pk = p.pick;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    unsigned long long key = 0ull;
#pragma unroll 8
    for (unsigned i = threadIdx.x; i < n_keys; i += blockDim.x) key = max(key, __ldcg(pk.warp_keys + i));
#pragma unroll
    for (int o = 16; o > 0; o /= 2) key = max(key, __shfl_xor_sync(0xffffffffu, key, o));
    __shared__ unsigned long long s_key[k_pick_finish_threads / 32];
    if (lane == 0) s_key[warp] = key;
    __syncthreads();
    if (threadIdx.x == 0) {
#pragma unroll
        for (unsigned i = 0; i < k_pick_finish_threads / 32; ++i) key = max(key, s_key[i]);
        const int32_t id = logit_key_id(key);
        const float v = id < 0 ? -INFINITY : __ldcg(p.y + id);
        *pk.id = id;
        *pk.value = v;
        *pk.row_max = v;
        *pk.row_sum = 0.0;
    }
}

template <bool FP8, int RW, bool BLK = false>
cudaError_t launch_rows_pick(const gemv_params &p, cudaStream_t stream) {
    return p.pick.on() ? launch_rows<FP8, RW, BLK, true>(p, stream) : launch_rows<FP8, RW, BLK>(p, stream);
}

bool block_scaled(const gemv_params &p) {
    return p.wfmt == weight_format::fp8_e4m3 && p.w_layout == scale_layout::block128;
}

// Whether a one-token launch of p loads its rows into registers before the wait (PRE above).
template <bool FP8>
bool preloads(const gemv_params &p, const dim3 &grid) {
    return grid.z == 1 && p.n_tokens == 1 && p.k <= int64_t(k_pre_vectors) * 32 * vec_elems<FP8> &&
           p.n * p.k * (FP8 ? 1 : 2) >= g_pre_min_bytes.load(std::memory_order_relaxed);
}

template <bool FP8, int MT>
cudaError_t launch_mt(const gemv_params &p, bool vec, dim3 grid, cudaStream_t stream) {
    if constexpr (FP8)
        if (block_scaled(p))
            return launch_decode<gemv_kernel<FP8, MT, true, false, false, true>>(grid, 128, 0, stream, p);
    if constexpr (MT == 1)
        if (vec && preloads<FP8>(p, grid))
            return launch_decode<gemv_kernel<FP8, 1, true, false, false, false, true>>(grid, 128, 0, stream,
                                                                                       p);
    if (vec) return launch_decode<gemv_kernel<FP8, MT, true>>(grid, 128, 0, stream, p);
    return launch_decode<gemv_kernel<FP8, MT, false>>(grid, 128, 0, stream, p);
}

template <bool FP8, int MT, bool BLK>
cudaError_t launch_fused_blk(const gemv_params &p, dim3 grid, size_t smem, cudaStream_t stream) {
    if (!p.norm.on()) { // rope_on alone: the input rows already normalized (BF16 x)
        if constexpr (MT == 1 && !BLK)
            if (preloads<FP8>(p, grid))
                return launch_decode<gemv_kernel<FP8, 1, true, false, true, false, true>>(grid, 128, 0,
                                                                                          stream, p);
        return launch_decode<gemv_kernel<FP8, MT, true, false, true, BLK>>(grid, 128, 0, stream, p);
    }
    if (p.rope_on) {
        return launch_decode<gemv_kernel<FP8, MT, true, true, true, BLK>>(grid, 128, smem, stream, p);
    }
    return launch_decode<gemv_kernel<FP8, MT, true, true, false, BLK>>(grid, 128, smem, stream, p);
}

template <bool FP8, int MT>
cudaError_t launch_fused_mt(const gemv_params &p, dim3 grid, size_t smem, cudaStream_t stream) {
    if constexpr (FP8)
        if (block_scaled(p)) return launch_fused_blk<FP8, MT, true>(p, grid, smem, stream);
    return launch_fused_blk<FP8, MT, false>(p, grid, smem, stream);
}

template <bool FP8>
cudaError_t launch_fused(const gemv_params &p, int mt, dim3 grid, size_t smem, cudaStream_t stream) {
    switch (mt) {
    case 1:
        return launch_fused_mt<FP8, 1>(p, grid, smem, stream);
    case 2:
        return launch_fused_mt<FP8, 2>(p, grid, smem, stream);
    case 4:
        return launch_fused_mt<FP8, 4>(p, grid, smem, stream);
    default:
        return launch_fused_mt<FP8, 8>(p, grid, smem, stream);
    }
}

template <bool FP8>
cudaError_t launch_fmt(const gemv_params &p, int mt, bool vec, dim3 grid, cudaStream_t stream) {
    switch (mt) {
    case 1:
        return launch_mt<FP8, 1>(p, vec, grid, stream);
    case 2:
        return launch_mt<FP8, 2>(p, vec, grid, stream);
    case 4:
        return launch_mt<FP8, 4>(p, vec, grid, stream);
    default:
        return launch_mt<FP8, 8>(p, vec, grid, stream);
    }
}

} // namespace

void set_gemv_preload_min_bytes(int64_t bytes) { g_pre_min_bytes.store(std::max<int64_t>(0, bytes)); }
int64_t gemv_preload_min_bytes() { return g_pre_min_bytes.load(std::memory_order_relaxed); }

cudaError_t launch_gemv_pick_finish(const gemv_params &p, cudaStream_t stream) {
    if (!gemv_pick_ok(p)) return cudaErrorInvalidValue;
    constexpr int RW = 4;
    const bool fp8 = p.wfmt == weight_format::fp8_e4m3;
    const unsigned grid = block_scaled(p) ? rows_grid<true, RW, true, true>(p)
                          : fp8           ? rows_grid<true, RW, false, true>(p)
                                          : rows_grid<false, RW, false, true>(p);
    return launch_decode<gemv_pick_finish_kernel>(1, k_pick_finish_threads, 0, stream, p,
                                                  grid * unsigned(k_rows_per_block));
}

cudaError_t launch_gemv(const gemv_params &p, cudaStream_t stream) {
    if (p.n_tokens <= 0 || p.n <= 0) return cudaSuccess;
    if (p.k <= 0 || (p.wfmt == weight_format::fp8_e4m3 && !p.w_scale)) return cudaErrorInvalidValue;
    const bool fp8 = p.wfmt == weight_format::fp8_e4m3;
    const int64_t E = fp8 ? 16 : 8;
    const bool fused = p.norm.on() || p.rope_on;
    if (fused && !gemv_fusion_ok(p)) return cudaErrorInvalidValue;
    const bool vec = fused || (p.k % E == 0 && p.ldx % 8 == 0 && aligned16(p.w) && aligned16(p.x));
    // Block scales need the vector path (a 16-element vector inside one 128-column block).
    if (block_scaled(p) && !vec) return cudaErrorInvalidValue;
    if (p.pick.on() && !gemv_pick_ok(p)) return cudaErrorInvalidValue;
    if (!fused && p.n_tokens == 1 && vec && p.n >= k_rows_head && p.k_splits <= 1) {
        constexpr int RW = 4;
        if (block_scaled(p)) return launch_rows_pick<true, RW, true>(p, stream);
        return fp8 ? launch_rows_pick<true, RW>(p, stream) : launch_rows_pick<false, RW>(p, stream);
    }
    const int mt = p.n_tokens >= 8 ? 8 : p.n_tokens >= 5 ? 8 : p.n_tokens >= 3 ? 4 : int(p.n_tokens);
    const unsigned gx = ceil_div_u(p.n, k_rows_per_block), gy = ceil_div_u(p.n_tokens, mt);
    int splits = p.rope_on ? 1 : p.k_splits;
    if (splits <= 0) {
        // Fill about 132 SMs × 48 warps; each split keeps ≥ 4 vector steps per lane.
        const int64_t warps = int64_t(gx) * k_rows_per_block * gy, target = 132 * 48;
        const int64_t max_splits = std::max<int64_t>(1, p.k / (32 * E * 4));
        splits = warps * 2 >= target ? 1 : int(std::min<int64_t>(target / warps, max_splits));
        splits = std::max(1, std::min(splits, 64));
    }
    if (splits > 1 && !p.accumulate && !p.rope_on) {
        const cudaError_t e =
            cudaMemset2DAsync(p.y, size_t(p.ldy) * 4, 0, size_t(p.n) * 4, size_t(p.n_tokens), stream);
        if (e != cudaSuccess) return e;
    }
    const dim3 grid(gx, gy, unsigned(splits));
    gemv_params q = p;
    q.pre_l2_fraction = l2_prefetch_fraction(p.n * p.k * (fp8 ? 1 : 2));
    if (fused) {
        const size_t smem = p.norm.on() ? size_t(gemv_norm_smem_bytes(mt, p.k)) : 0;
        return fp8 ? launch_fused<true>(q, mt, grid, smem, stream)
                   : launch_fused<false>(q, mt, grid, smem, stream);
    }
    return fp8 ? launch_fmt<true>(q, mt, vec, grid, stream) : launch_fmt<false>(q, mt, vec, grid, stream);
}

} // namespace es
