// attention (see attention.cuh): two kernels. launch_attention runs attention_prefill_kernel
// (tensor cores, below) when attention_uses_tensor_cores(p), else attention_kernel:
//
// attention_kernel: CUDA cores, flash-style over KV chunks of 32 positions.
// Grid: (query tile, KV head × head chunk of ≤ 32 q heads, KV split); block: 4 warps. A tile's
// rows ((token, q head) pairs, ≤ 32) are dealt round-robin to the warps, ≤ 8 each, and a warp
// works on all its rows at once (register blocking: one K or V element read from shared memory
// serves every row, and the rows' sums are independent, so the FMAs pipeline). The block stages q
// (fp32) and a chunk of K (row stride head_dim+2 so lane j reading key j hits distinct banks) and
// V (BF16) in shared memory, 16-byte loads all issued before the stores (one block-table lookup
// per key first). Per chunk and row: lane j scores key j (fp32 dot, masked beyond the
// row's position), online softmax (running max m and sum l, fp32, rescale by e^(m_old − m_new)),
// then o[d] += p_j · v_j[d] with lane owning d = lane + 32·i, p_j broadcast by shuffle. Without
// KV splits the block writes o / l in BF16; with splits it writes (o, m, l) and
// attention_combine_kernel merges the splits: m = max m_s, l = Σ l_s·e^(m_s − m),
// o = Σ o_s·e^(m_s − m) / l.
#include "kernels/attention.cuh"
#include "kernels/kernel_common.cuh"
#include "kernels/mma.cuh"

#include <climits>

namespace es {
namespace {

constexpr int k_warps = 4, k_rows = 32, k_chunk = 32;

size_t attention_smem_bytes(int64_t hd) {
    return size_t(k_rows) * size_t(hd) * 4 + size_t(k_chunk) * size_t(hd + 2) * 2 +
           size_t(k_chunk) * size_t(hd) * 2;
}

// A thread's DPL 16-byte pieces of the chunk's K and V rows (EPP elements of ES bytes a piece,
// `pieces` a row; piece idx = tid + 128·i is key idx / pieces), all loads issued before any use;
// zero past the sequence's keys (key_slot < 0) and past the chunk.
template <int DPL, int EPP, int ES>
__device__ __forceinline__ void load_kv_pieces(const attention_params &p, const int64_t *key_slot, int pieces,
                                               int64_t kvd, int kvh, int hd, int tid, uint4 (&kb)[DPL],
                                               uint4 (&vb)[DPL]) {
#pragma unroll
    for (int i = 0; i < DPL; ++i) {
        const int idx = tid + i * 128;
        kb[i] = vb[i] = make_uint4(0, 0, 0, 0);
        if (idx < k_chunk * pieces) {
            const int64_t slot = key_slot[idx / pieces];
            if (slot >= 0) {
                const int64_t off = (slot * kvd + int64_t(kvh) * hd + (idx % pieces) * EPP) * ES;
                kb[i] = __ldg(reinterpret_cast<const uint4 *>(static_cast<const uint8_t *>(p.k_cache) + off));
                vb[i] = __ldg(reinterpret_cast<const uint4 *>(static_cast<const uint8_t *>(p.v_cache) + off));
            }
        }
    }
}

// RPW: rows per warp the registers are sized for (2 when a tile has at most 8 rows, as in
// decode with up to 8 q heads per KV head; 8 otherwise) — unrolled loops over unused rows cost
// issue slots, and decode is latency-bound.
template <int DPL, int RPW>
__global__ void __launch_bounds__(128) attention_kernel(attention_params p) {
    constexpr int k_rows_per_warp = RPW;
    pdl_enter();
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __shared__ int row_pos[k_rows];
    __shared__ int64_t key_slot[k_chunk];
    __shared__ int tile_max_pos;
    const int hd = int(p.head_dim), half = hd / 2;
    float *qs = reinterpret_cast<float *>(smem_raw);
    uint16_t *ks = reinterpret_cast<uint16_t *>(qs + k_rows * hd);
    uint16_t *vs = ks + k_chunk * (hd + 2);

    const int group = int(p.n_head / p.n_head_kv), n_hchunks = (group + 31) / 32;
    const int kvh = blockIdx.y / n_hchunks, hc = blockIdx.y % n_hchunks;
    const int h_begin = kvh * group + hc * 32, n_heads = min(32, group - hc * 32);
    const int t0 = p.tiles[2 * blockIdx.x], nt = p.tiles[2 * blockIdx.x + 1];
    const int n_rows = nt * n_heads;
    const int64_t qd = p.n_head * hd, kvd = p.n_head_kv * hd;
    const int32_t *bt = p.block_tables + int64_t(p.seq[t0]) * p.bt_stride;
    const int bs = int(p.block_size);
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int split = blockIdx.z, n_splits = gridDim.z;

    const int hv = hd / 8; // 16-byte vectors per head row
    const bool vec = hd % 8 == 0;
    if (vec) {
        // Every load of this thread first, then the stores: the loads are in flight together.
        constexpr int QV = k_rows * DPL * 32 / 8 / 128;
        uint4 qb[QV];
#pragma unroll
        for (int i = 0; i < QV; ++i) {
            const int idx = tid + i * 128;
            if (idx < n_rows * hv) {
                const int r = idx / hv, c = idx % hv;
                const int64_t t = t0 + r / n_heads, h = h_begin + r % n_heads;
                qb[i] = __ldg(reinterpret_cast<const uint4 *>(p.q + t * qd + h * hd + c * 8));
            }
        }
#pragma unroll
        for (int i = 0; i < QV; ++i) {
            const int idx = tid + i * 128;
            if (idx < n_rows * hv) {
                const int r = idx / hv, c = idx % hv;
                float4 *dst = reinterpret_cast<float4 *>(qs + r * hd + c * 8);
                dst[0] = make_float4(bf16_lo(qb[i].x), bf16_hi(qb[i].x), bf16_lo(qb[i].y), bf16_hi(qb[i].y));
                dst[1] = make_float4(bf16_lo(qb[i].z), bf16_hi(qb[i].z), bf16_lo(qb[i].w), bf16_hi(qb[i].w));
            }
        }
    } else {
        for (int idx = tid; idx < n_rows * hd; idx += blockDim.x) {
            const int r = idx / hd, d = idx % hd;
            const int64_t t = t0 + r / n_heads, h = h_begin + r % n_heads;
            qs[r * hd + d] = bf16_to_f(p.q[t * qd + h * hd + d]);
        }
    }
    if (tid < n_rows) row_pos[tid] = p.pos[t0 + tid / n_heads];
    if (tid == 0) {
        int mp = 0;
        for (int i = 0; i < nt; ++i) mp = max(mp, p.pos[t0 + i]);
        tile_max_pos = mp;
    }
    __syncthreads();
    const int kv_len = tile_max_pos + 1;
    // This warp's rows: warp, warp + 4, … (n_mine of them; uniform across the warp).
    // (At most RPW: the launcher sizes RPW from max_tile_tokens, so more would be its error.)
    const int n_mine = min(RPW, n_rows > warp ? (n_rows - warp + k_warps - 1) / k_warps : 0);

    float m[k_rows_per_warp], l[k_rows_per_warp], o[k_rows_per_warp][DPL];
    int my_pos[k_rows_per_warp];
#pragma unroll
    for (int rr = 0; rr < k_rows_per_warp; ++rr) {
        m[rr] = -INFINITY;
        l[rr] = 0.0f;
        my_pos[rr] = rr < n_mine ? row_pos[warp + rr * k_warps] : -1;
#pragma unroll
        for (int i = 0; i < DPL; ++i) o[rr][i] = 0.0f;
    }

    for (int c0 = split * k_chunk; c0 < kv_len; c0 += k_chunk * n_splits) {
        __syncthreads(); // the previous chunk is no longer read
        // The chunk's cache slots first (one block-table lookup per key), then its K and V rows.
        if (tid < k_chunk) {
            const int key = c0 + tid;
            key_slot[tid] = key < kv_len ? int64_t(bt[key / bs]) * bs + key % bs : -1;
        }
        __syncthreads();
        const bool f8 = p.kv == kv_format::fp8_e4m3;
        if (DPL >= 2 && f8 && hd % 16 == 0) {
            // FP8 pools: 16 elements per 16-byte load, widened to BF16 as staged (same layout; head
            // dims ≤ 32 take the pairwise path below, which keeps that instance free of spills).
            const int hv16 = hd / 16;
            uint4 kb[DPL], vb[DPL];
            load_kv_pieces<DPL, 16, 1>(p, key_slot, hv16, kvd, kvh, hd, tid, kb, vb);
#pragma unroll
            for (int i = 0; i < DPL; ++i) {
                const int idx = tid + i * 128;
                if (idx < k_chunk * hv16) {
                    const int j = idx / hv16, c = idx % hv16;
                    uint4 k_lo, k_hi, v_lo, v_hi;
                    kv_read_fp8x16(kb[i], p.k_scale, k_lo, k_hi);
                    kv_read_fp8x16(vb[i], p.v_scale, v_lo, v_hi);
                    uint32_t *kd = reinterpret_cast<uint32_t *>(ks + j * (hd + 2) + c * 16);
                    kd[0] = k_lo.x;
                    kd[1] = k_lo.y;
                    kd[2] = k_lo.z;
                    kd[3] = k_lo.w;
                    kd[4] = k_hi.x;
                    kd[5] = k_hi.y;
                    kd[6] = k_hi.z;
                    kd[7] = k_hi.w;
                    uint4 *vd = reinterpret_cast<uint4 *>(vs + j * hd + c * 16);
                    vd[0] = v_lo;
                    vd[1] = v_hi;
                }
            }
        } else if (f8) {
            for (int idx = tid; idx < k_chunk * half; idx += blockDim.x) {
                const int j = idx / half, d2 = idx % half;
                const int64_t slot = key_slot[j];
                uint32_t kw = 0, vw = 0;
                if (slot >= 0) {
                    const int64_t base = slot * kvd + int64_t(kvh) * hd + 2 * d2;
                    kw = kv_read_fp8x4(*reinterpret_cast<const uint16_t *>(
                                           static_cast<const uint8_t *>(p.k_cache) + base),
                                       p.k_scale)
                             .x;
                    vw = kv_read_fp8x4(*reinterpret_cast<const uint16_t *>(
                                           static_cast<const uint8_t *>(p.v_cache) + base),
                                       p.v_scale)
                             .x;
                }
                *reinterpret_cast<uint32_t *>(ks + j * (hd + 2) + 2 * d2) = kw;
                *reinterpret_cast<uint32_t *>(vs + j * hd + 2 * d2) = vw;
            }
        } else if (vec) {
            // 16-byte loads, all of this thread's issued before any store (DPL ≥ hd/32 of each).
            uint4 kb[DPL], vb[DPL];
            load_kv_pieces<DPL, 8, 2>(p, key_slot, hv, kvd, kvh, hd, tid, kb, vb);
#pragma unroll
            for (int i = 0; i < DPL; ++i) {
                const int idx = tid + i * 128;
                if (idx < k_chunk * hv) {
                    const int j = idx / hv, c = idx % hv;
                    uint32_t *kd =
                        reinterpret_cast<uint32_t *>(ks + j * (hd + 2) + c * 8); // 4-byte aligned rows
                    kd[0] = kb[i].x;
                    kd[1] = kb[i].y;
                    kd[2] = kb[i].z;
                    kd[3] = kb[i].w;
                    *reinterpret_cast<uint4 *>(vs + j * hd + c * 8) = vb[i];
                }
            }
        } else {
            for (int idx = tid; idx < k_chunk * half; idx += blockDim.x) {
                const int j = idx / half, d2 = idx % half;
                const int64_t slot = key_slot[j];
                uint32_t kw = 0, vw = 0;
                if (slot >= 0) {
                    const int64_t base = slot * kvd + int64_t(kvh) * hd + 2 * d2;
                    kw = *reinterpret_cast<const uint32_t *>(static_cast<const bf16_t *>(p.k_cache) + base);
                    vw = *reinterpret_cast<const uint32_t *>(static_cast<const bf16_t *>(p.v_cache) + base);
                }
                *reinterpret_cast<uint32_t *>(ks + j * (hd + 2) + 2 * d2) = kw;
                *reinterpret_cast<uint32_t *>(vs + j * hd + 2 * d2) = vw;
            }
        }
        __syncthreads();
        if (n_mine == 0) continue;

        // Scores of key c0 + lane against all of this warp's rows.
        float s[k_rows_per_warp];
#pragma unroll
        for (int rr = 0; rr < k_rows_per_warp; ++rr) s[rr] = 0.0f;
        const uint32_t *kr = reinterpret_cast<const uint32_t *>(ks + lane * (hd + 2));
#pragma unroll 2
        for (int d2 = 0; d2 < half; ++d2) {
            const uint32_t w = kr[d2];
            const float k0 = bf16_lo(w), k1 = bf16_hi(w);
#pragma unroll
            for (int rr = 0; rr < k_rows_per_warp; ++rr)
                if (rr < n_mine) {
                    const float2 qv =
                        *reinterpret_cast<const float2 *>(qs + (warp + rr * k_warps) * hd + 2 * d2);
                    s[rr] += qv.x * k0 + qv.y * k1;
                }
        }
        float pj[k_rows_per_warp];
#pragma unroll
        for (int rr = 0; rr < k_rows_per_warp; ++rr) {
            pj[rr] = 0.0f;
            if (rr >= n_mine) continue;
            const float sv = c0 + lane <= my_pos[rr] ? s[rr] * p.scale : -INFINITY;
            const float m_new = fmaxf(m[rr], warp_max(sv));
            if (m_new == -INFINITY) continue; // no key of this chunk is visible to this row yet
            pj[rr] = sv == -INFINITY ? 0.0f : expf(sv - m_new);
            const float corr = expf(m[rr] - m_new);
            l[rr] = l[rr] * corr + warp_sum(pj[rr]);
#pragma unroll
            for (int i = 0; i < DPL; ++i) o[rr][i] *= corr;
            m[rr] = m_new;
        }
        const int j_end = min(k_chunk, kv_len - c0);
        for (int j = 0; j < j_end; ++j) {
            float v[DPL];
#pragma unroll
            for (int i = 0; i < DPL; ++i) {
                const int d = lane + 32 * i;
                v[i] = d < hd ? bf16_to_f(vs[j * hd + d]) : 0.0f;
            }
#pragma unroll
            for (int rr = 0; rr < k_rows_per_warp; ++rr)
                if (rr < n_mine) {
                    const float pv = __shfl_sync(0xffffffffu, pj[rr], j);
#pragma unroll
                    for (int i = 0; i < DPL; ++i) o[rr][i] += pv * v[i];
                }
        }
    }

    const int64_t slot_base = (int64_t(blockIdx.x) * gridDim.y + blockIdx.y) * n_splits + split;
#pragma unroll
    for (int rr = 0; rr < k_rows_per_warp; ++rr) {
        if (rr >= n_mine) continue;
        const int r = warp + rr * k_warps;
        if (n_splits > 1) {
            float *part = p.partial + (slot_base * k_rows + r) * (hd + 2);
#pragma unroll
            for (int i = 0; i < DPL; ++i) {
                const int d = lane + 32 * i;
                if (d < hd) part[d] = o[rr][i];
            }
            if (lane == 0) {
                part[hd] = m[rr];
                part[hd + 1] = l[rr];
            }
            continue;
        }
        const int64_t t = t0 + r / n_heads, h = h_begin + r % n_heads;
        const float inv = 1.0f / l[rr];
#pragma unroll
        for (int i = 0; i < DPL; ++i) {
            const int d = lane + 32 * i;
            if (d < hd) p.out[t * qd + h * hd + d] = f_to_bf16(o[rr][i] * inv);
        }
    }
}

// One warp per row of a tile: merges the kv_splits partial states (splits that saw no key have
// l = 0 and m = −inf and drop out).
__global__ void __launch_bounds__(256) attention_combine_kernel(attention_params p, int blocks_y) {
    pdl_enter();
    const int hd = int(p.head_dim), group = int(p.n_head / p.n_head_kv), n_hchunks = (group + 31) / 32;
    const int kvh = blockIdx.y / n_hchunks, hc = blockIdx.y % n_hchunks;
    const int h_begin = kvh * group + hc * 32, n_heads = min(32, group - hc * 32);
    const int t0 = p.tiles[2 * blockIdx.x], nt = p.tiles[2 * blockIdx.x + 1];
    const int n_rows = nt * n_heads, S = int(p.kv_splits);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t qd = p.n_head * hd;
    __shared__ float coef_sm[8][32]; // per warp: the splits' weights (lanes ≥ hd must not shuffle)
    for (int r = warp; r < n_rows; r += blockDim.x / 32) {
        const int64_t base = (int64_t(blockIdx.x) * blocks_y + blockIdx.y) * S;
        float ms = -INFINITY, ls = 0.0f;
        // S ≤ 32 (the launcher checks): lane s holds split s.
        if (lane < S) {
            const float *part = p.partial + ((base + lane) * k_rows + r) * (hd + 2);
            ms = part[hd];
            ls = part[hd + 1];
        }
        const float M = warp_max(ls > 0.0f ? ms : -INFINITY);
        const float coef = ls > 0.0f ? expf(ms - M) : 0.0f;
        const float L = warp_sum(ls * coef);
        coef_sm[warp][lane] = coef;
        __syncwarp();
        const int64_t t = t0 + r / n_heads, h = h_begin + r % n_heads;
        // Splits that saw no key wrote o = 0 and have coef 0, so no branch: the loads of
        // several splits are in flight together.
        for (int d = lane; d < hd; d += 32) {
            float acc = 0.0f;
#pragma unroll 4
            for (int s = 0; s < S; ++s)
                acc += coef_sm[warp][s] * p.partial[((base + s) * k_rows + r) * (hd + 2) + d];
            p.out[t * qd + h * hd + d] = f_to_bf16(acc / L);
        }
        __syncwarp(); // coef_sm is rewritten for the next row
    }
}

template <int DPL, int RPW>
cudaError_t launch_dpl_rpw(const attention_params &p, cudaStream_t stream) {
    const size_t smem = attention_smem_bytes(p.head_dim);
    if (smem > 48 * 1024) {
        const cudaError_t e = cudaFuncSetAttribute(attention_kernel<DPL, RPW>,
                                                   cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
        if (e != cudaSuccess) return e;
    }
    const int64_t group = p.n_head / p.n_head_kv;
    const unsigned blocks_y = unsigned(p.n_head_kv * ((group + 31) / 32));
    const dim3 grid(unsigned(p.n_tiles), blocks_y, unsigned(p.kv_splits));
    if (const cudaError_t e = launch_kernel(attention_kernel<DPL, RPW>, grid, 128, smem, stream, p);
        e != cudaSuccess)
        return e;
    if (p.kv_splits <= 1) return cudaSuccess;
    return launch_kernel(attention_combine_kernel, dim3(unsigned(p.n_tiles), blocks_y), 256, 0, stream, p,
                         int(blocks_y));
}

template <int DPL>
cudaError_t launch_dpl(const attention_params &p, cudaStream_t stream) {
    const int64_t group = p.n_head / p.n_head_kv, heads = group < 32 ? group : 32;
    const int64_t tile_tokens = p.max_tile_tokens > 0 ? p.max_tile_tokens : p.n_tokens;
    if (tile_tokens * heads <= 2 * k_warps) return launch_dpl_rpw<DPL, 2>(p, stream);
    return launch_dpl_rpw<DPL, k_rows / k_warps>(p, stream);
}

// ---- tensor-core path (prefill) ----------------------------------------------------------------
// attention_prefill_kernel: flash-attention-2 on mma.sync m16n8k16 (BF16 in, fp32 accumulate).
// A CTA (4 warps) takes k_tc_tiles consecutive planner tiles (≤ 32 rows each) of one KV head: CTA
// row r belongs to tile r / 32, local row lr = r % 32 is (token first + lr / group, q head
// kvh·group + lr % group), rows past the tile's count·group are padding (never stored). Warp w
// owns rows 16w…16w+15 (all of tile w / 2). The group's q heads share every K/V tile staged in
// shared memory (GQA reuse: 64 rows = 8 tokens × 8 heads for the 0.3B model, against 1 head × 64
// tokens relying on L2, this reads each K/V tile into shared memory once for 8 heads).
// Tiles of one CTA that belong to different sequences are run as separate passes (rows of the
// other sequence idle); in a prefill chunk both tiles are of the same sequence.
// Per pass: Q rows → shared once (cp.async, zero for padding; read by ldmatrix per 16-wide d
// step, which keeps the kernel within 255 registers without spills); KV tiles of 64 keys over
// [0, max pos + 1) of the pass (tiles above the last row's diagonal are never loaded),
// double-buffered with cp.async, each key's slot through the block table (any block_size ≥ 1;
// keys past the end are zero-filled). Per KV tile and warp: S = Q·Kᵀ (16 × 64, ldmatrix of K),
// scores × scale·log2e, masked (key > the row's own pos → −inf) only when the tile reaches past
// the warp's lowest position, online softmax in fp32 (running max m and thread-partial sum l,
// rescale by 2^(m_old − m_new)), P rounded to BF16 as the A operand of O += P·V (ldmatrix.trans
// of V). A warp skips tiles that start past its rows' highest position.
// Output o / l in BF16. CTAs are issued latest tiles first (they have the most keys).
constexpr int k_tc_tiles = 2, k_tc_warps = 2 * k_tc_tiles, k_tc_rows = 16 * k_tc_warps,
              k_tc_threads = 32 * k_tc_warps;
constexpr int k_tc_keys = 64;
constexpr float k_log2e = 1.4426950408889634f;

// BF16 pools: Q + two K/V stages. FP8 pools: Q + one BF16 K/V stage + two raw E4M3 K/V stages.
constexpr size_t tc_smem_bytes(int hd, bool f8) {
    return f8 ? size_t(k_tc_rows + 2 * k_tc_keys) * size_t(hd + 8) * 2 + size_t(4 * k_tc_keys) * size_t(hd)
              : size_t(k_tc_rows + 4 * k_tc_keys) * size_t(hd + 8) * 2;
}

__device__ __forceinline__ int warp_max_i(int v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ int warp_min_i(int v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// F8: E4M3 pools. cp.async brings a tile's raw bytes (double-buffered as for BF16); after it lands
// the block widens it (fp8 · scale → BF16) into the single BF16 stage the MMAs read.
template <int HD, bool F8>
__global__ void __launch_bounds__(k_tc_threads, 2) attention_prefill_kernel(attention_params p) {
    pdl_enter();
    static_assert(HD % 16 == 0 && (k_tc_rows * HD / 8) % k_tc_threads == 0 && k_tc_threads % (HD / 8) == 0 &&
                  k_tc_keys % (k_tc_threads / (HD / 8)) == 0);
    // Shared row stride in elements: consecutive rows 16 bytes apart in the banks, so the 8 rows of
    // an ldmatrix matrix hit distinct banks.
    constexpr int LD = HD + 8;
    constexpr int CH = HD / 8; // 16-byte chunks per row
    extern __shared__ __align__(16) unsigned char smem_raw[];
    uint16_t *const qs = reinterpret_cast<uint16_t *>(smem_raw); // [k_tc_rows][LD]
    uint16_t *const ks = qs + k_tc_rows * LD;                    // [2][k_tc_keys][LD]
    uint16_t *const vs = ks + (F8 ? 1 : 2) * k_tc_keys * LD;     // [2 (F8: 1)][k_tc_keys][LD]
    uint8_t *const kraw =
        reinterpret_cast<uint8_t *>(vs + (F8 ? 1 : 2) * k_tc_keys * LD); // F8: [2][k_tc_keys][HD]
    uint8_t *const vraw = kraw + 2 * k_tc_keys * HD;
    __shared__ int warp_top[k_tc_warps];

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, tig = lane % 4;
    // ldmatrix.x4: lane supplies row lane % 8 of 8×8 matrix lane / 8.
    const int lm_mat = lane / 8, lm_row = lane % 8;
    const int n_kv = int(p.n_head_kv), group = int(p.n_head / p.n_head_kv);
    const int kvh = int(blockIdx.x % unsigned(n_kv));
    const int n_ctas = int(gridDim.x / unsigned(n_kv));
    const int tile0 = (n_ctas - 1 - int(blockIdx.x / unsigned(n_kv))) * k_tc_tiles; // latest tiles first
    const int n_mine = min(k_tc_tiles, int(p.n_tiles) - tile0);
    const int64_t qd = p.n_head * HD, kvd = p.n_head_kv * HD;
    const int bs = int(p.block_size);
    const float scale_log2 = p.scale * k_log2e;

    // This thread's two rows: lr0 = (warp % 2)·16 + g and lr0 + 8 of tile my_tile.
    const int my_tile = warp / 2, lr0 = (warp % 2) * 16 + g, lr1 = lr0 + 8;
    int first = 0, rows = 0;
    if (my_tile < n_mine) {
        first = p.tiles[2 * (tile0 + my_tile)];
        rows = p.tiles[2 * (tile0 + my_tile) + 1] * group;
    }
    const int tok0 = first + lr0 / group, tok1 = first + lr1 / group;
    const int head0 = kvh * group + lr0 % group, head1 = kvh * group + lr1 % group;
    const int pos0 = lr0 < rows ? p.pos[tok0] : -1, pos1 = lr1 < rows ? p.pos[tok1] : -1;

    unsigned done = 0;
    const unsigned all = (1u << n_mine) - 1u;
    while (done != all) {
        // This pass: the not-yet-done tiles of the sequence of the first one left.
        const int lead = __ffs(int(~done)) - 1;
        const int seq = p.seq[p.tiles[2 * (tile0 + lead)]];
        unsigned active = 0;
        for (int i = lead; i < n_mine; ++i)
            if (!((done >> i) & 1u) && p.seq[p.tiles[2 * (tile0 + i)]] == seq) active |= 1u << i;
        done |= active;
        const int32_t *bt = p.block_tables + int64_t(seq) * p.bt_stride;
        const bool mine = (active >> my_tile) & 1u;
        const int pr0 = mine ? pos0 : -1, pr1 = mine ? pos1 : -1;
        const int w_top = warp_max_i(max(pr0, pr1)); // −1: no row of this warp in the pass
        const int w_low = warp_min_i(min(pr0 < 0 ? INT_MAX : pr0, pr1 < 0 ? INT_MAX : pr1));

        __syncthreads(); // the previous pass no longer reads warp_top or the staged tiles
        if (lane == 0) warp_top[warp] = w_top;

            // Q rows of the pass (padding and rows of other passes zero).
#pragma unroll
        for (int i = 0; i < k_tc_rows * CH / k_tc_threads; ++i) {
            const int idx = tid + i * k_tc_threads, r = idx / CH, c = idx % CH, t = r / 32, lr = r % 32;
            const bf16_t *src = p.q;
            bool ok = false;
            if ((active >> t) & 1u) {
                const int tf = p.tiles[2 * (tile0 + t)], tr = p.tiles[2 * (tile0 + t) + 1] * group;
                ok = lr < tr;
                if (ok)
                    src =
                        p.q + int64_t(tf + lr / group) * qd + int64_t(kvh * group + lr % group) * HD + c * 8;
            }
            cp_async16(qs + r * LD + c * 8, src, ok);
        }
        __syncthreads(); // warp_top complete
        int top = -1;
#pragma unroll
        for (int w = 0; w < k_tc_warps; ++w) top = max(top, warp_top[w]);
        // top ≥ 0 (a tile has ≥ 1 token); keys past the pass's highest position are never loaded.
        const int kv_len = top + 1, n_kt = (kv_len + k_tc_keys - 1) / k_tc_keys;

        // K/V tile kt → stage: thread tid copies 16-byte chunk tid % CHN of keys tid / CHN + STEP·i
        // (BF16: 8 elements a chunk into rows of LD; F8: the tile's raw bytes, 16 a chunk, rows of
        // HD). The block and offset of its first key by one division, then stepped (no division
        // per key).
        auto load_kv = [&](int kt, int stage) {
            constexpr int EPC = F8 ? 16 : 8, ES = F8 ? 1 : 2, CHN = HD / EPC, STEP = k_tc_threads / CHN,
                          DLD = F8 ? HD : LD; // elements a chunk, bytes an element, chunks a row, …
            unsigned char *kd = F8 ? kraw + stage * k_tc_keys * HD
                                   : reinterpret_cast<unsigned char *>(ks + stage * k_tc_keys * LD),
                          *vd = F8 ? vraw + stage * k_tc_keys * HD
                                   : reinterpret_cast<unsigned char *>(vs + stage * k_tc_keys * LD);
            const int c = tid % CHN, j0 = tid / CHN, key0 = kt * k_tc_keys + j0;
            int blk = key0 / bs, off = key0 - blk * bs;
#pragma unroll
            for (int i = 0; i < k_tc_keys / STEP; ++i) {
                const int j = j0 + i * STEP;
                const bool ok = key0 + i * STEP < kv_len;
                const unsigned char *ksrc = static_cast<const unsigned char *>(p.k_cache),
                                    *vsrc = static_cast<const unsigned char *>(p.v_cache);
                if (ok) {
                    const int64_t e = ((int64_t(bt[blk]) * bs + off) * kvd + int64_t(kvh) * HD + c * EPC) * ES;
                    ksrc += e;
                    vsrc += e;
                }
                cp_async16(kd + (j * DLD + c * EPC) * ES, ksrc, ok);
                cp_async16(vd + (j * DLD + c * EPC) * ES, vsrc, ok);
                for (off += STEP; off >= bs; off -= bs) ++blk;
            }
        };
        load_kv(0, 0);
        cp_async_commit(); // group: Q + KV tile 0

        float o[HD / 8][4], m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
#pragma unroll
        for (int i = 0; i < HD / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;

        for (int kt = 0; kt < n_kt; ++kt) {
            // Tile kt + 1 into the stage that the sync ending iteration kt − 1 freed; the group is
            // committed even when empty, so wait_group 1 always means "tile kt (and Q) landed".
            if (kt + 1 < n_kt) load_kv(kt + 1, (kt + 1) & 1);
            cp_async_commit();
            cp_async_wait<1>(); // this thread's copies of tile kt …
            __syncthreads();    // … and every thread's
            if constexpr (F8) { // raw stage kt & 1 → the BF16 stage (read by the sync ending kt − 1)
                constexpr int CHR = HD / 16;
                const uint8_t *kr = kraw + (kt & 1) * k_tc_keys * HD, *vr = vraw + (kt & 1) * k_tc_keys * HD;
#pragma unroll
                for (int i = 0; i < k_tc_keys * CHR / k_tc_threads; ++i) {
                    const int idx = tid + i * k_tc_threads, j = idx / CHR, c = idx % CHR;
                    uint4 lo, hi;
                    kv_read_fp8x16(*reinterpret_cast<const uint4 *>(kr + j * HD + c * 16), p.k_scale, lo, hi);
                    reinterpret_cast<uint4 *>(ks + j * LD + c * 16)[0] = lo;
                    reinterpret_cast<uint4 *>(ks + j * LD + c * 16)[1] = hi;
                    kv_read_fp8x16(*reinterpret_cast<const uint4 *>(vr + j * HD + c * 16), p.v_scale, lo, hi);
                    reinterpret_cast<uint4 *>(vs + j * LD + c * 16)[0] = lo;
                    reinterpret_cast<uint4 *>(vs + j * LD + c * 16)[1] = hi;
                }
                __syncthreads();
            }
            const int k0 = kt * k_tc_keys;
            if (k0 <= w_top) { // warp-uniform: some row of this warp sees a key of this tile
                const int st = F8 ? 0 : (kt & 1);
                const uint16_t *kst = ks + st * k_tc_keys * LD, *vst = vs + st * k_tc_keys * LD;
                // S = Q·Kᵀ: s[n] is keys k0 + 8n … + 7. K by ldmatrix, matrices (keys +0, d +0),
                // (+0, +8), (+8, +0), (+8, +8): b0, b1 of n-tile 2·n2, then of 2·n2 + 1.
                float s[k_tc_keys / 8][4];
#pragma unroll
                for (int n = 0; n < k_tc_keys / 8; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
                for (int kk = 0; kk < HD / 16; ++kk) {
                    // A: Q rows warp·16 … + 15, d 16·kk … + 15; matrices (rows +0, d +0), (+8, +0),
                    // (+0, +8), (+8, +8) are a0 … a3.
                    uint32_t qf[4];
                    ldsm_x4(qf,
                            qs + (warp * 16 + (lm_mat & 1) * 8 + lm_row) * LD + kk * 16 + (lm_mat >> 1) * 8);
#pragma unroll
                    for (int n2 = 0; n2 < k_tc_keys / 16; ++n2) {
                        uint32_t b[4];
                        ldsm_x4(b, kst + (n2 * 16 + (lm_mat >> 1) * 8 + lm_row) * LD + kk * 16 +
                                       (lm_mat & 1) * 8);
                        mma_bf16(s[2 * n2], qf, b[0], b[1]);
                        mma_bf16(s[2 * n2 + 1], qf, b[2], b[3]);
                    }
                }
                // s[n][0, 1]: row lr0, keys k0 + 8n + 2·tig + {0, 1}; s[n][2, 3]: row lr1, same keys.
                const bool masked = k0 + k_tc_keys - 1 > w_low;
                float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
                for (int n = 0; n < k_tc_keys / 8; ++n)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        float v = s[n][e] * scale_log2;
                        if (masked && k0 + 8 * n + 2 * tig + (e & 1) > (e < 2 ? pr0 : pr1)) v = -INFINITY;
                        s[n][e] = v;
                        (e < 2 ? mx0 : mx1) = fmaxf(e < 2 ? mx0 : mx1, v);
                    }
                // A row's 64 scores are spread over the 4 lanes of its quad.
                mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
                mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
                mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
                mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
                const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
                // A row that has seen no visible key yet keeps m = −inf: subtract 0 so 2^(−inf) = 0.
                const float mu0 = mn0 == -INFINITY ? 0.0f : mn0, mu1 = mn1 == -INFINITY ? 0.0f : mn1;
                const float c0 = exp2f(m0 - mu0), c1 = exp2f(m1 - mu1);
                m0 = mn0;
                m1 = mn1;
                float rs0 = 0.0f, rs1 = 0.0f;
#pragma unroll
                for (int n = 0; n < k_tc_keys / 8; ++n) {
                    s[n][0] = exp2f(s[n][0] - mu0);
                    s[n][1] = exp2f(s[n][1] - mu0);
                    s[n][2] = exp2f(s[n][2] - mu1);
                    s[n][3] = exp2f(s[n][3] - mu1);
                    rs0 += s[n][0] + s[n][1];
                    rs1 += s[n][2] + s[n][3];
                }
                l0 = l0 * c0 + rs0;
                l1 = l1 * c1 + rs1;
#pragma unroll
                for (int i = 0; i < HD / 8; ++i) {
                    o[i][0] *= c0;
                    o[i][1] *= c0;
                    o[i][2] *= c1;
                    o[i][3] *= c1;
                }
                // O += P·V over 16-key steps: the S accumulators of n-tiles 2j, 2j + 1 are P's A fragment;
                // V by ldmatrix.trans, matrices (keys +0, d +0), (+8, +0), (+0, +8), (+8, +8).
#pragma unroll
                for (int j = 0; j < k_tc_keys / 16; ++j) {
                    const uint32_t a[4] = {pack_bf16x2(s[2 * j][0], s[2 * j][1]),
                                           pack_bf16x2(s[2 * j][2], s[2 * j][3]),
                                           pack_bf16x2(s[2 * j + 1][0], s[2 * j + 1][1]),
                                           pack_bf16x2(s[2 * j + 1][2], s[2 * j + 1][3])};
#pragma unroll
                    for (int d2 = 0; d2 < HD / 16; ++d2) {
                        uint32_t b[4];
                        ldsm_x4_t(b, vst + (j * 16 + (lm_mat & 1) * 8 + lm_row) * LD + d2 * 16 +
                                         (lm_mat >> 1) * 8);
                        mma_bf16(o[2 * d2], a, b[0], b[1]);
                        mma_bf16(o[2 * d2 + 1], a, b[2], b[3]);
                    }
                }
            }
            __syncthreads(); // stage kt & 1 (and, after the last tile, Q) may be overwritten
        }

        // l: the quad's partial sums; o[i][0, 1]: row lr0, d = 8i + 2·tig + {0, 1}; o[i][2, 3]: row lr1.
        l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
        l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
        l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
        l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
        if (pr0 >= 0) {
            const float inv = 1.0f / l0;
            uint16_t *dst = p.out + int64_t(tok0) * qd + int64_t(head0) * HD + 2 * tig;
#pragma unroll
            for (int i = 0; i < HD / 8; ++i)
                *reinterpret_cast<uint32_t *>(dst + 8 * i) = pack_bf16x2(o[i][0] * inv, o[i][1] * inv);
        }
        if (pr1 >= 0) {
            const float inv = 1.0f / l1;
            uint16_t *dst = p.out + int64_t(tok1) * qd + int64_t(head1) * HD + 2 * tig;
#pragma unroll
            for (int i = 0; i < HD / 8; ++i)
                *reinterpret_cast<uint32_t *>(dst + 8 * i) = pack_bf16x2(o[i][2] * inv, o[i][3] * inv);
        }
    }
}

template <int HD, bool F8>
cudaError_t launch_prefill_kv(const attention_params &p, cudaStream_t stream) {
    constexpr size_t smem = tc_smem_bytes(HD, F8);
    if constexpr (smem > 48 * 1024) {
        const cudaError_t e = cudaFuncSetAttribute(attention_prefill_kernel<HD, F8>,
                                                   cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
        if (e != cudaSuccess) return e;
    }
    const int64_t ctas = (p.n_tiles + k_tc_tiles - 1) / k_tc_tiles;
    return launch_kernel(attention_prefill_kernel<HD, F8>, dim3(unsigned(ctas * p.n_head_kv)), k_tc_threads,
                         smem, stream, p);
}

} // namespace

cudaError_t launch_attention(const attention_params &p, cudaStream_t stream) {
    if (p.n_tiles <= 0) return cudaSuccess;
    if (p.head_dim % 2 != 0 || p.head_dim > attention_max_head_dim || p.n_head_kv <= 0 ||
        p.n_head % p.n_head_kv != 0 || p.kv_splits < 1 || p.kv_splits > attention_max_kv_splits ||
        (p.kv_splits > 1 && !p.partial))
        return cudaErrorInvalidValue;
    if (p.path == attention_path::automatic && attention_decode_ok(p))
        return launch_attention_decode(p, stream);
    if (p.kv_splits > attention_general_max_kv_splits) return cudaErrorInvalidValue; // its merge: a lane a split
    if (attention_uses_tensor_cores(p))
        return p.kv == kv_format::fp8_e4m3 ? (p.head_dim == 64 ? launch_prefill_kv<64, true>(p, stream)
                                                               : launch_prefill_kv<128, true>(p, stream))
                                           : (p.head_dim == 64 ? launch_prefill_kv<64, false>(p, stream)
                                                               : launch_prefill_kv<128, false>(p, stream));
    if (p.path == attention_path::tensor_core)
        return cudaErrorNotSupported; // forced on a shape it cannot run
    if (p.head_dim <= 32) return launch_dpl<1>(p, stream);
    if (p.head_dim <= 64) return launch_dpl<2>(p, stream);
    if (p.head_dim <= 128) return launch_dpl<4>(p, stream);
    return launch_dpl<8>(p, stream);
}

} // namespace es
