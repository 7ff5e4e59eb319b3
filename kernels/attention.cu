// attention (see attention.cuh), flash-style over KV chunks of 32 positions.
// Grid: (query tile, KV head × head chunk of ≤ 32 q heads); block: 4 warps. A tile's rows
// ((token, q head) pairs, ≤ 32) are dealt round-robin to the warps (≤ 8 rows each). The block
// stages q (fp32) and a chunk of K (row stride head_dim+2 so lane j reading key j hits distinct
// banks) and V (BF16) in shared memory. Per row and chunk: lane j scores key j (fp32 dot, masked
// beyond the row's position), online softmax (running max m and sum l, fp32, rescale by
// exp(m_old − m_new)), then o[d] += p_j · v_j[d] with lane owning d = lane + 32·i, p_j broadcast
// by shuffle. Output o / l rounded to BF16.
#include "attention.cuh"
#include "kernel_common.cuh"

namespace es {
namespace {

constexpr int k_warps = 4, k_rows = 32, k_rows_per_warp = k_rows / k_warps, k_chunk = 32;

size_t attention_smem_bytes(int64_t hd) {
    return size_t(k_rows) * size_t(hd) * 4 + size_t(k_chunk) * size_t(hd + 2) * 2 + size_t(k_chunk) * size_t(hd) * 2;
}

template <int DPL>
__global__ void __launch_bounds__(128) attention_kernel(attention_params p) {
    extern __shared__ __align__(16) unsigned char smem_raw[];
    __shared__ int row_pos[k_rows];
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

    for (int idx = tid; idx < n_rows * hd; idx += blockDim.x) {
        const int r = idx / hd, d = idx % hd;
        const int64_t t = t0 + r / n_heads, h = h_begin + r % n_heads;
        qs[r * hd + d] = bf16_to_f(p.q[t * qd + h * hd + d]);
    }
    if (tid < n_rows) row_pos[tid] = p.pos[t0 + tid / n_heads];
    if (tid == 0) {
        int mp = 0;
        for (int i = 0; i < nt; ++i) mp = max(mp, p.pos[t0 + i]);
        tile_max_pos = mp;
    }
    __syncthreads();
    const int kv_len = tile_max_pos + 1;

    float m[k_rows_per_warp], l[k_rows_per_warp], o[k_rows_per_warp][DPL];
    int my_pos[k_rows_per_warp];
#pragma unroll
    for (int rr = 0; rr < k_rows_per_warp; ++rr) {
        m[rr] = -INFINITY;
        l[rr] = 0.0f;
        const int r = warp + rr * k_warps;
        my_pos[rr] = r < n_rows ? row_pos[r] : -1;
#pragma unroll
        for (int i = 0; i < DPL; ++i) o[rr][i] = 0.0f;
    }

    for (int c0 = 0; c0 < kv_len; c0 += k_chunk) {
        __syncthreads(); // the previous chunk is no longer read
        for (int idx = tid; idx < k_chunk * half; idx += blockDim.x) {
            const int j = idx / half, d2 = idx % half, key = c0 + j;
            uint32_t kw = 0, vw = 0;
            if (key < kv_len) {
                const int64_t slot = int64_t(bt[key / bs]) * bs + key % bs;
                const int64_t base = slot * kvd + int64_t(kvh) * hd + 2 * d2;
                kw = *reinterpret_cast<const uint32_t *>(p.k_cache + base);
                vw = *reinterpret_cast<const uint32_t *>(p.v_cache + base);
            }
            *reinterpret_cast<uint32_t *>(ks + j * (hd + 2) + 2 * d2) = kw;
            *reinterpret_cast<uint32_t *>(vs + j * hd + 2 * d2) = vw;
        }
        __syncthreads();
#pragma unroll
        for (int rr = 0; rr < k_rows_per_warp; ++rr) {
            const int r = warp + rr * k_warps;
            if (r >= n_rows) continue; // uniform across the warp
            const bool valid = c0 + lane <= my_pos[rr];
            float s = -INFINITY;
            if (valid) {
                const float *qr = qs + r * hd;
                const uint32_t *kr = reinterpret_cast<const uint32_t *>(ks + lane * (hd + 2));
                float acc = 0.0f;
#pragma unroll 4
                for (int d2 = 0; d2 < half; ++d2) {
                    const uint32_t w = kr[d2];
                    acc += qr[2 * d2] * bf16_lo(w) + qr[2 * d2 + 1] * bf16_hi(w);
                }
                s = acc * p.scale;
            }
            const float cmax = warp_max(s);
            if (cmax == -INFINITY) continue; // no key of this chunk is visible to this row
            const float m_new = fmaxf(m[rr], cmax);
            const float pj = valid ? expf(s - m_new) : 0.0f;
            const float corr = expf(m[rr] - m_new);
            l[rr] = l[rr] * corr + warp_sum(pj);
#pragma unroll
            for (int i = 0; i < DPL; ++i) o[rr][i] *= corr;
#pragma unroll 4
            for (int j = 0; j < k_chunk; ++j) {
                const float pv = __shfl_sync(0xffffffffu, pj, j);
                const uint16_t *vr = vs + j * hd;
#pragma unroll
                for (int i = 0; i < DPL; ++i) {
                    const int d = lane + 32 * i;
                    if (d < hd) o[rr][i] += pv * bf16_to_f(vr[d]);
                }
            }
            m[rr] = m_new;
        }
    }
#pragma unroll
    for (int rr = 0; rr < k_rows_per_warp; ++rr) {
        const int r = warp + rr * k_warps;
        if (r >= n_rows) continue;
        const int64_t t = t0 + r / n_heads, h = h_begin + r % n_heads;
        const float inv = 1.0f / l[rr];
#pragma unroll
        for (int i = 0; i < DPL; ++i) {
            const int d = lane + 32 * i;
            if (d < hd) p.out[t * qd + h * hd + d] = f_to_bf16(o[rr][i] * inv);
        }
    }
}

template <int DPL>
cudaError_t launch_dpl(const attention_params &p, cudaStream_t stream) {
    const size_t smem = attention_smem_bytes(p.head_dim);
    if (smem > 48 * 1024) {
        const cudaError_t e =
            cudaFuncSetAttribute(attention_kernel<DPL>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
        if (e != cudaSuccess) return e;
    }
    const int64_t group = p.n_head / p.n_head_kv;
    const dim3 grid(unsigned(p.n_tiles), unsigned(p.n_head_kv * ((group + 31) / 32)));
    attention_kernel<DPL><<<grid, 128, smem, stream>>>(p);
    return cudaGetLastError();
}

} // namespace

cudaError_t launch_attention(const attention_params &p, cudaStream_t stream) {
    if (p.n_tiles <= 0) return cudaSuccess;
    if (p.head_dim % 2 != 0 || p.head_dim > attention_max_head_dim || p.n_head_kv <= 0 ||
        p.n_head % p.n_head_kv != 0)
        return cudaErrorInvalidValue;
    if (p.head_dim <= 32) return launch_dpl<1>(p, stream);
    if (p.head_dim <= 64) return launch_dpl<2>(p, stream);
    if (p.head_dim <= 128) return launch_dpl<4>(p, stream);
    return launch_dpl<8>(p, stream);
}

} // namespace es
