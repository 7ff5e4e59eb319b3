// attention, decode path (see attention.cuh; launch_attention picks it when attention_decode_ok
// holds): tiles of at most 8 (token, q head) rows of one KV head — one token per sequence and up
// to 8 q heads per KV head — and head_dim 64, 128 or 256, a compile-time constant here so that
// index arithmetic is shifts and every inner loop unrolls (the general kernel spent ~3,500
// instructions per warp on a 32-key chunk, at ~6 cycles each: decode attention is latency-bound).
//
// Grid (tile, KV head, split); 128 threads. Split s takes a contiguous run of 32-key chunks.
// Before its programmatic-launch wait a block reads what no kernel of this step writes — the
// tiles, positions and block tables, and its first chunk's K/V rows of keys older than the
// sequence's first token in the batch — so only q and this step's K/V rows are loaded after it.
// Per chunk: one block-table lookup per key, then the chunk's K (row stride head_dim + 2, so lane
// j reading key j hits distinct banks) and V staged in shared memory with 16-byte loads, all of a
// thread's issued before its stores (an FP8 cache: 16 elements a load, widened to BF16 as stored,
// so half the loads and the same shared layout). Warp w owns rows w and w + 4 (both computed even when the
// second does not exist: the warps run side by side, so this costs no latency). Lane j scores key
// j against both rows (fp32, two partial sums per row), online softmax per row (warp max, running
// max m and sum l), then o += p_j · v_j with lane owning head_dim/32 consecutive dims and p_j
// broadcast by shuffle, over all 32 keys unrolled (keys past the row's position have p = 0 and
// zero V). One split writes o / l in BF16. Several write (o, m, l) to `partial`, and the last
// block of the (tile, KV head) to finish — a counter bumped after a fence, as moe_router — merges
// them: m = max m_s, l = Σ l_s·e^(m_s − m), o = Σ o_s·e^(m_s − m) / l, and re-arms the counter.
#include "attention.cuh"
#include "kernel_common.cuh"

namespace es {
namespace {

constexpr int k_chunk = 32, k_rows = 32, k_max_rows = 2 * 4; // k_rows: the partial buffer's row stride

template <int HD>
size_t decode_smem_bytes() {
    return size_t(k_max_rows) * HD * 4 + size_t(k_chunk) * (HD + 2) * 2 + size_t(k_chunk) * HD * 2;
}

// F8: E4M3 pools (attention.cuh); a 16-byte load brings 16 elements instead of 8, widened to BF16
// (fp8 · scale) as they are staged, so shared memory and everything after it are as for BF16.
template <int HD, bool F8>
__global__ void __launch_bounds__(128) attention_decode_kernel(attention_params p) {
    // HV: q's 16-byte vectors per head row; EPV, LV: K/V elements per 16-byte load and loads per row.
    constexpr int HALF = HD / 2, HV = HD / 8, DPL = HD / 32, EPV = F8 ? 16 : 8, LV = HD / EPV,
                  ES = F8 ? 1 : 2, ITEMS = k_chunk * LV / 128;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    float *qs = reinterpret_cast<float *>(smem_raw);                   // [8][HD] fp32
    uint16_t *ks = reinterpret_cast<uint16_t *>(qs + k_max_rows * HD); // [32][HD + 2]
    uint16_t *vs = ks + k_chunk * (HD + 2);                            // [32][HD]
    __shared__ int64_t key_slot[k_chunk];
    __shared__ int row_pos[k_max_rows];
    __shared__ int64_t row_off[k_max_rows];
    __shared__ bool s_last;

    // Everything up to pdl_enter reads only the batch's inputs and keys of earlier steps (no kernel
    // of this step writes them), so it overlaps the previous kernel: the rows' positions, the first
    // chunk's block-table lookups and its K/V rows older than this step.
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int group = int(p.n_head / p.n_head_kv), kvh = blockIdx.y;
    const int t0 = __ldg(p.tiles + 2 * blockIdx.x), nt = __ldg(p.tiles + 2 * blockIdx.x + 1);
    const int n_rows = nt * group; // ≤ 8: attention_decode_ok
    const int64_t qd = p.n_head * HD, kvd = p.n_head_kv * HD;
    const int split = blockIdx.z, n_splits = gridDim.z;
    if (tid < n_rows) {
        const int64_t t = t0 + tid / group, h = int64_t(kvh) * group + tid % group;
        row_pos[tid] = __ldg(p.pos + t);
        row_off[tid] = t * qd + h * HD;
    }
    // Keys before the sequence's first token in this batch were written by earlier forward passes.
    const int seq0 = __ldg(p.seq + t0);
    int t_first = t0;
    while (t_first > 0 && __ldg(p.seq + t_first - 1) == seq0) --t_first;
    const int old_end = __ldg(p.pos + t_first);
    __syncthreads();
    int kv_len = 0;
    for (int r = 0; r < n_rows; ++r) kv_len = max(kv_len, row_pos[r] + 1);

    const int n_chunks = (kv_len + k_chunk - 1) / k_chunk, per_split = (n_chunks + n_splits - 1) / n_splits;
    const int c_begin = split * per_split, c_end = min(n_chunks, c_begin + per_split);
    const int32_t *bt = p.block_tables + int64_t(seq0) * p.bt_stride;
    const int bs = int(p.block_size);
    uint4 kb[ITEMS], vb[ITEMS];
    // Loads this thread's items of chunk c: the keys in [lo, hi) (others keep their values).
    // `fresh`: keys this step wrote, read after the wait through L2 (ld.global.cg): the
    // read-only path may still hold a line an older key's pre-wait load brought in, which shares
    // it when a row is shorter than 128 bytes (FP8, head_dim 64, one KV head).
    auto load_items = [&](int c0, int lo, int hi, bool fresh) {
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            const int idx = tid + i * 128, j = idx / LV, cc = idx % LV;
            const int64_t slot = key_slot[j];
            if (slot >= 0 && c0 + j >= lo && c0 + j < hi) {
                const int64_t base = (slot * kvd + int64_t(kvh) * HD + cc * EPV) * ES; // bytes
                const uint4 *kp = reinterpret_cast<const uint4 *>(static_cast<const uint8_t *>(p.k_cache) + base);
                const uint4 *vp = reinterpret_cast<const uint4 *>(static_cast<const uint8_t *>(p.v_cache) + base);
                kb[i] = fresh ? __ldcg(kp) : __ldg(kp);
                vb[i] = fresh ? __ldcg(vp) : __ldg(vp);
            }
        }
    };
    auto lookup_slots = [&](int c0) {
        if (tid < k_chunk) {
            const int key = c0 + tid;
            key_slot[tid] = key < kv_len ? int64_t(__ldg(bt + key / bs)) * bs + key % bs : -1;
        }
    };
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) kb[i] = vb[i] = make_uint4(0, 0, 0, 0);
    if (c_begin < c_end) {
        lookup_slots(c_begin * k_chunk);
        __syncthreads();
        load_items(c_begin * k_chunk, 0, old_end, false);
    }
    pdl_enter();

    for (int idx = tid; idx < n_rows * HV; idx += 128) {
        const int r = idx / HV, c = idx % HV;
        const uint4 v = __ldg(reinterpret_cast<const uint4 *>(p.q + row_off[r] + c * 8));
        float4 *dst = reinterpret_cast<float4 *>(qs + r * HD + c * 8);
        dst[0] = make_float4(bf16_lo(v.x), bf16_hi(v.x), bf16_lo(v.y), bf16_hi(v.y));
        dst[1] = make_float4(bf16_lo(v.z), bf16_hi(v.z), bf16_lo(v.w), bf16_hi(v.w));
    }

    const int r0 = warp, r1 = warp + 4;
    const bool has0 = r0 < n_rows, has1 = r1 < n_rows;
    const int pos0 = has0 ? row_pos[r0] : -1, pos1 = has1 ? row_pos[r1] : -1;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f, o0[DPL], o1[DPL];
#pragma unroll
    for (int i = 0; i < DPL; ++i) o0[i] = o1[i] = 0.0f;

    for (int c = c_begin; c < c_end; ++c) {
        const int c0 = c * k_chunk;
        if (c == c_begin) {
            load_items(c0, old_end, kv_len, true); // this step's keys (written by the previous kernel)
        } else {
            __syncthreads(); // the previous chunk is no longer being read
            lookup_slots(c0);
            __syncthreads();
#pragma unroll
            for (int i = 0; i < ITEMS; ++i) kb[i] = vb[i] = make_uint4(0, 0, 0, 0);
            load_items(c0, 0, kv_len, true);
        }
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            const int idx = tid + i * 128, j = idx / LV, cc = idx % LV;
            uint32_t *kd =
                reinterpret_cast<uint32_t *>(ks + j * (HD + 2) + cc * EPV); // rows are 4-byte aligned
            if constexpr (F8) {
                uint4 k_lo, k_hi, v_lo, v_hi;
                kv_read_fp8x16(kb[i], p.k_scale, k_lo, k_hi);
                kv_read_fp8x16(vb[i], p.v_scale, v_lo, v_hi);
                kd[0] = k_lo.x;
                kd[1] = k_lo.y;
                kd[2] = k_lo.z;
                kd[3] = k_lo.w;
                kd[4] = k_hi.x;
                kd[5] = k_hi.y;
                kd[6] = k_hi.z;
                kd[7] = k_hi.w;
                uint4 *vd = reinterpret_cast<uint4 *>(vs + j * HD + cc * EPV);
                vd[0] = v_lo;
                vd[1] = v_hi;
            } else {
                kd[0] = kb[i].x;
                kd[1] = kb[i].y;
                kd[2] = kb[i].z;
                kd[3] = kb[i].w;
                *reinterpret_cast<uint4 *>(vs + j * HD + cc * 8) = vb[i];
            }
        }
        __syncthreads();
        if (!has0) continue; // warp-uniform

        // Scores of key c0 + lane against rows r0 and r1 (r0's q again when r1 does not exist).
        const uint32_t *kr = reinterpret_cast<const uint32_t *>(ks + lane * (HD + 2));
        const float2 *qa = reinterpret_cast<const float2 *>(qs + r0 * HD);
        const float2 *qb = reinterpret_cast<const float2 *>(qs + (has1 ? r1 : r0) * HD);
        float sa0 = 0.0f, sa1 = 0.0f, sb0 = 0.0f, sb1 = 0.0f;
#pragma unroll
        for (int d2 = 0; d2 < HALF; d2 += 2) {
            const uint32_t w0 = kr[d2], w1 = kr[d2 + 1];
            const float k0 = bf16_lo(w0), k1 = bf16_hi(w0), k2 = bf16_lo(w1), k3 = bf16_hi(w1);
            const float2 a0 = qa[d2], a1 = qa[d2 + 1], b0 = qb[d2], b1 = qb[d2 + 1];
            sa0 += a0.x * k0 + a0.y * k1;
            sa1 += a1.x * k2 + a1.y * k3;
            sb0 += b0.x * k0 + b0.y * k1;
            sb1 += b1.x * k2 + b1.y * k3;
        }
        const int key = c0 + lane;
        float pa = 0.0f, pb = 0.0f;
        {
            const float sv = key <= pos0 ? (sa0 + sa1) * p.scale : -INFINITY;
            const float m_new = fmaxf(m0, warp_max(sv));
            if (m_new != -INFINITY) { // else no key is visible to this row yet: nothing changes
                pa = sv == -INFINITY ? 0.0f : expf(sv - m_new);
                const float corr = expf(m0 - m_new); // m0 = −inf: 0
                l0 = l0 * corr + warp_sum(pa);
#pragma unroll
                for (int i = 0; i < DPL; ++i) o0[i] *= corr;
                m0 = m_new;
            }
        }
        {
            const float sv = key <= pos1 ? (sb0 + sb1) * p.scale : -INFINITY;
            const float m_new = fmaxf(m1, warp_max(sv));
            if (m_new != -INFINITY) {
                pb = sv == -INFINITY ? 0.0f : expf(sv - m_new);
                const float corr = expf(m1 - m_new);
                l1 = l1 * corr + warp_sum(pb);
#pragma unroll
                for (int i = 0; i < DPL; ++i) o1[i] *= corr;
                m1 = m_new;
            }
        }
        const uint16_t *vrow = vs + lane * DPL;
#pragma unroll
        for (int j = 0; j < k_chunk; ++j) {
            const float pja = __shfl_sync(0xffffffffu, pa, j), pjb = __shfl_sync(0xffffffffu, pb, j);
            float v[DPL];
            if constexpr (DPL == 2) {
                const uint32_t u = *reinterpret_cast<const uint32_t *>(vrow + j * HD);
                v[0] = bf16_lo(u);
                v[1] = bf16_hi(u);
            } else if constexpr (DPL == 4) {
                const uint2 u = *reinterpret_cast<const uint2 *>(vrow + j * HD);
                v[0] = bf16_lo(u.x);
                v[1] = bf16_hi(u.x);
                v[2] = bf16_lo(u.y);
                v[3] = bf16_hi(u.y);
            } else {
                const uint4 u = *reinterpret_cast<const uint4 *>(vrow + j * HD);
                const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    v[2 * i] = bf16_lo(w[i]);
                    v[2 * i + 1] = bf16_hi(w[i]);
                }
            }
#pragma unroll
            for (int i = 0; i < DPL; ++i) {
                o0[i] += pja * v[i];
                o1[i] += pjb * v[i];
            }
        }
    }

    auto store_out = [&](int r, const float *o, float inv) {
        uint16_t *dst = p.out + row_off[r] + lane * DPL;
#pragma unroll
        for (int i = 0; i < DPL; ++i) dst[i] = f_to_bf16(o[i] * inv);
    };
    if (n_splits == 1) {
        if (has0) store_out(r0, o0, 1.0f / l0);
        if (has1) store_out(r1, o1, 1.0f / l1);
        return;
    }
    const int64_t slot_base = (int64_t(blockIdx.x) * gridDim.y + kvh) * n_splits;
    auto store_partial = [&](int r, const float *o, float m, float l) {
        float *part = p.partial + ((slot_base + split) * k_rows + r) * (HD + 2);
#pragma unroll
        for (int i = 0; i < DPL; ++i) part[lane * DPL + i] = o[i];
        if (lane == 0) {
            part[HD] = m;
            part[HD + 1] = l;
        }
    };
    if (has0) store_partial(r0, o0, m0, l0);
    if (has1) store_partial(r1, o1, m1, l1);
    __threadfence(); // this block's partials are visible before the counter says so
    __syncthreads();
    unsigned *counter = p.counters + int64_t(blockIdx.x) * gridDim.y + kvh;
    if (tid == 0) s_last = atomicAdd(counter, 1u) == unsigned(n_splits - 1);
    __syncthreads();
    if (!s_last) return;
    __threadfence();
    if (tid == 0) *counter = 0; // re-armed for the next launch
    for (int r = warp; r < n_rows; r += 4) {
        float ms = -INFINITY, ls = 0.0f;
        if (lane < n_splits) { // n_splits ≤ 32: lane s reads split s
            const float *part = p.partial + ((slot_base + lane) * k_rows + r) * (HD + 2);
            ms = __ldcg(part + HD);
            ls = __ldcg(part + HD + 1);
        }
        const float M = warp_max(ls > 0.0f ? ms : -INFINITY);
        const float coef = ls > 0.0f ? expf(ms - M) : 0.0f;
        const float L = warp_sum(ls * coef);
        float acc[DPL];
#pragma unroll
        for (int i = 0; i < DPL; ++i) acc[i] = 0.0f;
#pragma unroll 4
        for (int s = 0; s < n_splits; ++s) {
            const float cs = __shfl_sync(0xffffffffu, coef, s);
            const float *part = p.partial + ((slot_base + s) * k_rows + r) * (HD + 2) + lane * DPL;
#pragma unroll
            for (int i = 0; i < DPL; ++i) acc[i] += cs * __ldcg(part + i); // splits with no key: o = 0
        }
        store_out(r, acc, 1.0f / L);
    }
}

template <int HD, bool F8>
cudaError_t launch_hd_kv(const attention_params &p, cudaStream_t stream) {
    const dim3 grid(unsigned(p.n_tiles), unsigned(p.n_head_kv), unsigned(p.kv_splits));
    prefer_decode_carveout<attention_decode_kernel<HD, F8>>();
    return launch_kernel(attention_decode_kernel<HD, F8>, grid, 128, decode_smem_bytes<HD>(), stream, p);
}

template <int HD>
cudaError_t launch_hd(const attention_params &p, cudaStream_t stream) {
    return p.kv == kv_format::fp8_e4m3 ? launch_hd_kv<HD, true>(p, stream)
                                       : launch_hd_kv<HD, false>(p, stream);
}

} // namespace

bool attention_decode_ok(const attention_params &p) {
    const int64_t group = p.n_head_kv > 0 ? p.n_head / p.n_head_kv : 0;
    const int64_t tile_tokens = p.max_tile_tokens > 0 ? p.max_tile_tokens : p.n_tokens;
    return (p.head_dim == 64 || p.head_dim == 128 || p.head_dim == 256) && group >= 1 &&
           tile_tokens * group <= k_max_rows && p.kv_splits >= 1 && p.kv_splits <= 32 &&
           (p.kv_splits == 1 || (p.partial && p.counters));
}

cudaError_t launch_attention_decode(const attention_params &p, cudaStream_t stream) {
    if (!attention_decode_ok(p)) return cudaErrorInvalidValue;
    if (p.n_tiles <= 0) return cudaSuccess;
    switch (p.head_dim) {
    case 64:
        return launch_hd<64>(p, stream);
    case 128:
        return launch_hd<128>(p, stream);
    default:
        return launch_hd<256>(p, stream);
    }
}

} // namespace es
