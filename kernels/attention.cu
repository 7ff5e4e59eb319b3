// attention (see attention.cuh), flash-style over KV chunks of 32 positions.
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
#include "attention.cuh"
#include "kernel_common.cuh"

namespace es {
namespace {

constexpr int k_warps = 4, k_rows = 32, k_chunk = 32;

size_t attention_smem_bytes(int64_t hd) {
    return size_t(k_rows) * size_t(hd) * 4 + size_t(k_chunk) * size_t(hd + 2) * 2 + size_t(k_chunk) * size_t(hd) * 2;
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
        if (vec) {
            // 16-byte loads, all of this thread's issued before any store (DPL ≥ hd/32 of each).
            uint4 kb[DPL], vb[DPL];
#pragma unroll
            for (int i = 0; i < DPL; ++i) {
                const int idx = tid + i * 128;
                kb[i] = vb[i] = make_uint4(0, 0, 0, 0);
                if (idx < k_chunk * hv) {
                    const int64_t slot = key_slot[idx / hv];
                    if (slot >= 0) {
                        const int64_t base = slot * kvd + int64_t(kvh) * hd + (idx % hv) * 8;
                        kb[i] = __ldg(reinterpret_cast<const uint4 *>(p.k_cache + base));
                        vb[i] = __ldg(reinterpret_cast<const uint4 *>(p.v_cache + base));
                    }
                }
            }
#pragma unroll
            for (int i = 0; i < DPL; ++i) {
                const int idx = tid + i * 128;
                if (idx < k_chunk * hv) {
                    const int j = idx / hv, c = idx % hv;
                    uint32_t *kd = reinterpret_cast<uint32_t *>(ks + j * (hd + 2) + c * 8); // 4-byte aligned rows
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
                    kw = *reinterpret_cast<const uint32_t *>(p.k_cache + base);
                    vw = *reinterpret_cast<const uint32_t *>(p.v_cache + base);
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
                    const float2 qv = *reinterpret_cast<const float2 *>(qs + (warp + rr * k_warps) * hd + 2 * d2);
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
        const cudaError_t e =
            cudaFuncSetAttribute(attention_kernel<DPL, RPW>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
        if (e != cudaSuccess) return e;
    }
    const int64_t group = p.n_head / p.n_head_kv;
    const unsigned blocks_y = unsigned(p.n_head_kv * ((group + 31) / 32));
    const dim3 grid(unsigned(p.n_tiles), blocks_y, unsigned(p.kv_splits));
    if (const cudaError_t e = launch_kernel(attention_kernel<DPL, RPW>, grid, 128, smem, stream, p); e != cudaSuccess)
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

} // namespace

cudaError_t launch_attention(const attention_params &p, cudaStream_t stream) {
    if (p.n_tiles <= 0) return cudaSuccess;
    if (p.head_dim % 2 != 0 || p.head_dim > attention_max_head_dim || p.n_head_kv <= 0 ||
        p.n_head % p.n_head_kv != 0 || p.kv_splits < 1 || p.kv_splits > 32 || (p.kv_splits > 1 && !p.partial))
        return cudaErrorInvalidValue;
    if (attention_decode_ok(p)) return launch_attention_decode(p, stream);
    if (p.head_dim <= 32) return launch_dpl<1>(p, stream);
    if (p.head_dim <= 64) return launch_dpl<2>(p, stream);
    if (p.head_dim <= 128) return launch_dpl<4>(p, stream);
    return launch_dpl<8>(p, stream);
}

} // namespace es
