// attention, decode path (see attention.cuh; launch_attention picks it when attention_decode_ok
// holds): tiles of at most 8 (token, q head) rows of one KV head — one token per sequence and up
// to 8 q heads per KV head — and head_dim 64, 128 or 256, a compile-time constant here so that
// index arithmetic is shifts and every inner loop unrolls.
//
// Grid (tile, KV head, split); 128 threads. Split s takes a contiguous run of 32-key chunks.
// Before its programmatic-launch wait a block reads what no kernel of this step writes — the
// tiles, positions and block tables, and its first chunk's K/V rows of keys older than the
// sequence's first token in the batch — so only q and this step's K/V rows are loaded after it.
// Per chunk: one block-table lookup per key, then the chunk's K and V staged in shared memory
// (BF16, row stride head_dim + 8: 16-byte rows whose fragment loads hit distinct banks) with
// 16-byte loads, all of a thread's issued before its stores (an FP8 cache: 16 elements a load,
// widened to BF16 as stored, so half the loads and the same shared layout). The loop is
// pipelined: chunk c + 1's rows load into registers while chunk c is computed, and chunk c + 2's
// lookups with them, so a long split is bound by the arithmetic and barriers, not by two memory
// round trips a chunk.
//
// The arithmetic is on tensor cores (mma.sync m16n8k16, BF16 in, fp32 accumulate), the tile's ≤ 8
// rows as the top half of the 16-row A operand (the bottom half is zero and never stored): warp w
// scores keys 8w … 8w+7 against every row (S = Q·Kᵀ over head_dim/16 k-steps, two accumulator
// chains), the scores go to shared memory, warp w then runs the online softmax of rows w and
// w + 4 with lane j on key j (fp32; warp max and sum; running max m and sum l per row) and writes
// the chunk's P in BF16 and each row's rescale factor e^(m_old − m_new); finally warp w rescales
// and accumulates O += P·V for its head_dim/4 output columns (V's B fragments by transposed
// ldmatrix). P rounded to BF16 as the MMA operand is flash-attention's choice too; the sum l is of
// the fp32 values. The CUDA-core version this replaces spent ~1,100 dependent instructions per
// warp and chunk at head_dim 128 (≈ 3 µs with one block per SM); this one ≈ 100.
//
// One split writes o / l in BF16. Several merge their states: m = max m_s, l = Σ l_s·e^(m_s − m),
// o = Σ o_s·e^(m_s − m) / l, folded in split order. On compute capability 9.0 the splits of a
// (tile, KV head) are one thread-block cluster (CL): each block leaves its (o, m, l) in its shared
// memory, a cluster barrier publishes them, every block merges its share of the rows' columns
// reading its peers' shared memory, and each thread arrives at a second barrier as soon as its
// reads are in, its block waiting on it only before leaving (a block's memory must outlive its
// peers' reads). Otherwise (or when the cluster does not fit) every split writes (o, m, l) to
// `partial` and the last block of the (tile, KV head) to finish — a counter bumped after a fence,
// as moe_router — merges them and re-arms the counter: a fence, an atomic and a load of the
// partials, one after another, on the step's critical path. All fold with the same arithmetic
// (merge_fold), so they give the same bits.
//
// The cluster merge as pushes instead (PUSH, a measuring aid): each block stores its state into
// the blocks that merge it, one barrier publishes the stores, every block folds from its own
// memory and none waits for its peers to finish. It needs a receive buffer of its own (a peer may
// push while the block still stages K; over K itself, behind a barrier that the staging is done,
// the barrier costs what the buffer saves), 4.6 KB more a block at head_dim 128. On the H200 the
// pushes shorten the 21B-A3B's step by about 0.5% and lengthen the 0.3B's by about 2%: its
// fused-norm q/k/v GEMV's shared memory leaves the larger block no room beside it, so the pulls
// with the early arrival are the default (docs/benchmarks.md, designs tried).
#include "kernels/attention.cuh"
#include "kernels/kernel_common.cuh"
#include "kernels/mma.cuh"

#include <atomic>

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#include <cooperative_groups.h>
#endif

namespace es {
namespace {

std::atomic<bool> g_cluster_merge{true}; // set_attention_cluster_merge

// The split merge's step: split state (m, l, o[0..7]) folded into the running (M, L, acc) — online,
// in split order, with every rounding pinned (no contraction left to the compiler), so the cluster
// and counter merges agree bit for bit. A split that saw no key of the row (l = 0) is skipped.
__device__ __forceinline__ void merge_fold(float &M, float &L, float (&acc)[8], float m, float l,
                                           const float (&o)[8]) {
    if (!(l > 0.0f)) return;
    const float m_new = fmaxf(M, m), a = expf(M - m_new), b = expf(m - m_new);
    L = __fmaf_rn(L, a, __fmul_rn(l, b));
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[i] = __fmaf_rn(acc[i], a, __fmul_rn(o[i], b));
    M = m_new;
}

// The merged row's eight columns, acc / L, as BF16 at dst (16-byte aligned).
__device__ __forceinline__ void merge_store(uint16_t *dst, const float (&acc)[8], float L) {
    const float inv = 1.0f / L;
    *reinterpret_cast<uint4 *>(dst) =
        make_uint4(pack_bf16x2(acc[0] * inv, acc[1] * inv), pack_bf16x2(acc[2] * inv, acc[3] * inv),
                   pack_bf16x2(acc[4] * inv, acc[5] * inv), pack_bf16x2(acc[6] * inv, acc[7] * inv));
}

// One merge item (a row's eight columns) of S splits, stored at dst: the splits' states loaded four
// at a time — load(u, m, l, o) fills split u's, wherever the merge keeps them — and folded in
// split order (merge_fold); last_loaded() runs once the last group's loads are issued.
template <typename Load, typename Last>
__device__ __forceinline__ void merge_item(int S, uint16_t *dst, Load load, Last last_loaded) {
    float M = -INFINITY, L = 0.0f, acc[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) acc[k] = 0.0f;
    for (int s0 = 0; s0 < S; s0 += 4) {
        float ml[4][2], ov[4][8];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
            ml[u][0] = -INFINITY;
            ml[u][1] = 0.0f;
            if (s0 + u < S) load(s0 + u, ml[u][0], ml[u][1], ov[u]);
        }
        if (s0 + 4 >= S) last_loaded();
#pragma unroll
        for (int u = 0; u < 4; ++u)
            if (s0 + u < S) merge_fold(M, L, acc, ml[u][0], ml[u][1], ov[u]);
    }
    merge_store(dst, acc, L);
}

// Eight floats from two 16-byte loads (16-byte aligned; generic addressing: a peer's shared memory too).
__device__ __forceinline__ void load8(const float *src, float (&o)[8]) {
    const float4 a = reinterpret_cast<const float4 *>(src)[0], b = reinterpret_cast<const float4 *>(src)[1];
    o[0] = a.x, o[1] = a.y, o[2] = a.z, o[3] = a.w, o[4] = b.x, o[5] = b.y, o[6] = b.z, o[7] = b.w;
}

constexpr int k_chunk = 32, k_rows = 32, k_max_rows = 2 * 4; // k_rows: the partial buffer's row stride

// Shared rows (Q, K, V) in BF16 elements: 16-byte aligned, and 8 consecutive rows' 16-byte pieces
// in distinct banks (the stride is 4 words past a multiple of 32).
template <int HD>
constexpr int row_stride() {
    return HD + 8;
}

template <int HD>
__host__ __device__ constexpr size_t decode_smem_bytes() {
    return size_t(k_max_rows + 2 * k_chunk) * row_stride<HD>() * 2;
}
// The push merge's receive buffer after the staging buffers (CL, PUSH): [S][J][8] floats, S·J <
// n_rows·HD/8 + S ≤ HD + 16 items of 32 bytes.
template <int HD>
constexpr size_t merge_recv_bytes() {
    return size_t(HD + 16) * 32;
}

// F8: E4M3 pools (attention.cuh); a 16-byte load brings 16 elements instead of 8, widened to BF16
// (fp8 · scale) as they are staged, so shared memory and everything after it are as for BF16.
// PUSH (CL only): the merge by pushes into the merging blocks, or (off, the default) by pulls from
// the peers (above; set_attention_merge_push).
template <int HD, bool F8, bool CL, bool PUSH = false>
__global__ void __launch_bounds__(128, 1) attention_decode_kernel(attention_params p) {
    // RS: shared row stride; EPV, LV: K/V elements per 16-byte load and loads per row; KSTEPS: the
    // QK MMA's k-steps; NT: the 8-column output tiles per warp in P·V.
    constexpr int RS = row_stride<HD>(), EPV = F8 ? 16 : 8, LV = HD / EPV, ES = F8 ? 1 : 2,
                  ITEMS = k_chunk * LV / 128, KSTEPS = HD / 16, NT = HD / 32;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    uint16_t *qs = reinterpret_cast<uint16_t *>(smem_raw); // [8][RS]
    uint16_t *ks = qs + k_max_rows * RS;                    // [32][RS]
    uint16_t *vs = ks + k_chunk * RS;                       // [32][RS]
    __shared__ float s_s[k_max_rows][k_chunk];             // the chunk's scores
    __shared__ __align__(16) uint16_t p_s[k_max_rows][k_chunk + 8]; // its P in BF16 (stride: no conflicts)
    __shared__ float corr_s[k_max_rows], m_s[k_max_rows], l_s[k_max_rows];
    __shared__ int64_t key_slot[2][k_chunk]; // chunk c's cache slots in key_slot[c % 2]
    __shared__ int row_pos[k_max_rows];
    __shared__ int64_t row_off[k_max_rows];

    // Everything up to pdl_enter reads only the batch's inputs and keys of earlier steps (no kernel
    // of this step writes them), so it overlaps the previous kernel: the rows' positions, the first
    // chunk's block-table lookups and its K/V rows older than this step.
    if constexpr (CL && PUSH) cluster_started_arrive(); // the merge pushes into peers (below)
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, t = lane % 4;
    // The loads before the wait form a chain of round trips to memory (decode's is on the step's
    // critical path whenever the previous kernel is short): one-token tiles (max_tile_tokens 1)
    // are tile = token, without reading the plan; the token's position, its sequence and the
    // sequence of the token before are read together, and only a sequence with several tokens
    // in the batch walks back to its first one.
    const int group = int(p.n_head / p.n_head_kv), kvh = blockIdx.y;
    const bool one = p.max_tile_tokens == 1;
    const int t0 = one ? int(blockIdx.x) : __ldg(p.tiles + 2 * blockIdx.x),
              nt = one ? 1 : __ldg(p.tiles + 2 * blockIdx.x + 1);
    const int n_rows = nt * group; // ≤ 8: attention_decode_ok
    const int64_t qd = p.n_head * HD, kvd = p.n_head_kv * HD;
    const int split = blockIdx.z, n_splits = gridDim.z;
    const int seq0 = __ldg(p.seq + t0), seq_before = t0 > 0 ? __ldg(p.seq + t0 - 1) : -1, pos0 = __ldg(p.pos + t0);
    if (tid < n_rows) {
        const int64_t t = t0 + tid / group, h = int64_t(kvh) * group + tid % group;
        row_pos[tid] = t == t0 ? pos0 : __ldg(p.pos + t);
        row_off[tid] = t * qd + h * HD;
    }
    // Keys before the sequence's first token in this batch were written by earlier forward passes.
    int old_end = pos0;
    if (seq_before == seq0) {
        int t_first = t0 - 1;
        while (t_first > 0 && __ldg(p.seq + t_first - 1) == seq0) --t_first;
        old_end = __ldg(p.pos + t_first);
    }
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
        const int64_t *slots = key_slot[(c0 / k_chunk) % 2];
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            const int idx = tid + i * 128, j = idx / LV, cc = idx % LV;
            const int64_t slot = slots[j];
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
            key_slot[(c0 / k_chunk) % 2][tid] = key < kv_len ? int64_t(__ldg(bt + key / bs)) * bs + key % bs : -1;
        }
    };
#pragma unroll
    for (int i = 0; i < ITEMS; ++i) kb[i] = vb[i] = make_uint4(0, 0, 0, 0);
    if (c_begin < c_end) {
        lookup_slots(c_begin * k_chunk);
        if (c_begin + 1 < c_end) lookup_slots((c_begin + 1) * k_chunk);
        __syncthreads();
        load_items(c_begin * k_chunk, 0, old_end, false);
    }
    pdl_enter();
    // This step's keys of the first chunk (written by the previous kernel): in flight with q's.
    if (c_begin < c_end) load_items(c_begin * k_chunk, old_end, kv_len, true);

    // q rows in BF16 as they are; rows past the tile's are zero (their scores are never used).
    for (int idx = tid; idx < k_max_rows * (HD / 8); idx += 128) {
        const int r = idx / (HD / 8), c = idx % (HD / 8);
        uint4 v = make_uint4(0, 0, 0, 0);
        if (r < n_rows) v = __ldg(reinterpret_cast<const uint4 *>(p.q + row_off[r] + c * 8));
        *reinterpret_cast<uint4 *>(qs + r * RS + c * 8) = v;
    }

    // Softmax state of the rows this warp owns (w and w + 4); O fragments of its output columns.
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f}, o[NT][4];
#pragma unroll
    for (int j = 0; j < NT; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;

    // Software-pipelined: chunk c's K/V arrive in registers while chunk c − 1 is computed, and
    // chunk c + 1's cache slots are looked up while chunk c's rows load, so a chunk costs its
    // arithmetic and barriers rather than two memory round trips.
    for (int c = c_begin; c < c_end; ++c) {
        const int c0 = c * k_chunk;
        if (c != c_begin) __syncthreads(); // the previous chunk is no longer being read
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            const int idx = tid + i * 128, j = idx / LV, cc = idx % LV;
            uint4 *kd = reinterpret_cast<uint4 *>(ks + j * RS + cc * EPV);
            uint4 *vd = reinterpret_cast<uint4 *>(vs + j * RS + cc * EPV);
            if constexpr (F8) {
                kv_read_fp8x16(kb[i], p.k_scale, kd[0], kd[1]);
                kv_read_fp8x16(vb[i], p.v_scale, vd[0], vd[1]);
            } else {
                kd[0] = kb[i];
                vd[0] = vb[i];
            }
        }
        __syncthreads();
        // The next chunk's rows into the registers just stored (its slots were looked up a chunk
        // ago, behind the barrier above), and the slots of the one after it into the buffer the
        // loads issued a chunk ago have finished reading.
        if (c + 1 < c_end) {
#pragma unroll
            for (int i = 0; i < ITEMS; ++i) kb[i] = vb[i] = make_uint4(0, 0, 0, 0);
            load_items(c0 + k_chunk, 0, kv_len, true);
            if (c + 2 < c_end) lookup_slots(c0 + 2 * k_chunk);
        }

        // S = Q·Kᵀ for keys 8·warp … 8·warp + 7 (rows g; the A operand's rows g + 8 are zero).
        {
            const uint32_t *qrow = reinterpret_cast<const uint32_t *>(qs + g * RS);
            const uint32_t *krow = reinterpret_cast<const uint32_t *>(ks + (8 * warp + g) * RS);
            float s0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, s1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
            for (int kk = 0; kk < KSTEPS; ++kk) {
                const uint32_t a[4] = {qrow[kk * 8 + t], 0u, qrow[kk * 8 + 4 + t], 0u};
                mma_bf16(kk % 2 ? s1 : s0, a, krow[kk * 8 + t], krow[kk * 8 + 4 + t]);
            }
            s_s[g][8 * warp + 2 * t] = s0[0] + s1[0];
            s_s[g][8 * warp + 2 * t + 1] = s0[1] + s1[1];
        }
        __syncthreads();

        // Online softmax of rows warp and warp + 4, lane = key (masked past the row's position;
        // rows past the tile's see no key), the two rows' warp reductions interleaved.
        {
            const int key = c0 + lane;
            float sv[2], mx[2], pv[2], sm[2], corr[2];
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = warp + 4 * h;
                sv[h] = r < n_rows && key <= row_pos[r] ? s_s[r][lane] * p.scale : -INFINITY;
                mx[h] = sv[h];
            }
#pragma unroll
            for (int off = 16; off > 0; off >>= 1)
#pragma unroll
                for (int h = 0; h < 2; ++h) mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], off));
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const float m_new = fmaxf(m_run[h], mx[h]); // −inf: no key visible to the row yet
                pv[h] = sv[h] == -INFINITY ? 0.0f : expf(sv[h] - m_new);
                corr[h] = m_new == -INFINITY ? 1.0f : expf(m_run[h] - m_new); // m_run = −inf: 0
                m_run[h] = m_new;
                sm[h] = pv[h];
            }
#pragma unroll
            for (int off = 16; off > 0; off >>= 1)
#pragma unroll
                for (int h = 0; h < 2; ++h) sm[h] += __shfl_xor_sync(0xffffffffu, sm[h], off);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = warp + 4 * h;
                l_run[h] = l_run[h] * corr[h] + sm[h];
                p_s[r][lane] = f_to_bf16(pv[h]);
                if (lane == 0) corr_s[r] = corr[h];
            }
        }
        __syncthreads();

        // O = O·corr + P·V for this warp's columns: A = P (rows g), B = V by transposed ldmatrix
        // (lane i gives key i's row; the four matrices are keys 0–7, 8–15, 16–23, 24–31).
        {
            const uint32_t *prow = reinterpret_cast<const uint32_t *>(&p_s[g][0]);
            const uint32_t pa0[4] = {prow[t], 0u, prow[4 + t], 0u}, pa1[4] = {prow[8 + t], 0u, prow[12 + t], 0u};
            const float cr = corr_s[g];
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                o[j][0] *= cr;
                o[j][1] *= cr;
                uint32_t b[4];
                ldsm_x4_t(b, vs + lane * RS + (warp * NT + j) * 8);
                mma_bf16(o[j], pa0, b[0], b[1]);
                mma_bf16(o[j], pa1, b[2], b[3]);
            }
        }
    }

    if (lane == 0)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int r = warp + 4 * h;
            m_s[r] = m_run[h];
            l_s[r] = l_run[h];
        }
    __syncthreads();
    if (n_splits == 1) {
        if (g < n_rows) {
            const float inv = 1.0f / l_s[g];
#pragma unroll
            for (int j = 0; j < NT; ++j)
                *reinterpret_cast<uint32_t *>(p.out + row_off[g] + (warp * NT + j) * 8 + 2 * t) =
                    pack_bf16x2(o[j][0] * inv, o[j][1] * inv);
        }
        return;
    }
    constexpr int CPT = 8, TPR = HD / CPT; // the merge: columns per thread, threads per row
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if constexpr (CL && !PUSH) {
        // The cluster's blocks are the splits (cluster rank = split). o goes where K was staged
        // (no warp of this block reads it after the barrier above): [k_max_rows][HD] floats.
        float *os = reinterpret_cast<float *>(ks);
        if (g < n_rows)
#pragma unroll
            for (int j = 0; j < NT; ++j)
                *reinterpret_cast<float2 *>(os + g * HD + (warp * NT + j) * 8 + 2 * t) =
                    make_float2(o[j][0], o[j][1]);
        namespace cg = cooperative_groups;
        cg::cluster_group cluster = cg::this_cluster();
        cluster.sync(); // every split's o, m and l written, and visible across the cluster
        // Item i = (row, 8 columns) goes to block i mod S (at most one a thread), every split's
        // state loaded four at a time from its peers' shared memory; a thread arrives at the
        // cluster's second barrier once its last loads are in, and the block waits for it only
        // before it leaves (no block leaves while a peer may still read its shared memory).
        const int S = n_splits, i = split + S * tid;
        bool arrived = false;
        if (i < n_rows * TPR) {
            const int r = i / TPR, c0 = (i % TPR) * CPT;
            merge_item(
                S, p.out + row_off[r] + c0,
                [&](int u, float &m, float &l, float(&ov)[CPT]) {
                    m = *cluster.map_shared_rank(&m_s[r], u);
                    l = *cluster.map_shared_rank(&l_s[r], u);
                    load8(cluster.map_shared_rank(os + r * HD + c0, u), ov);
                },
                [&] { // the last loads: performed before the arrival (release)
                    asm volatile("barrier.cluster.arrive.release;" ::: "memory");
                    arrived = true;
                });
        }
        if (!arrived) asm volatile("barrier.cluster.arrive.release;" ::: "memory");
        asm volatile("barrier.cluster.wait.acquire;" ::: "memory");
        return;
    }
    if constexpr (CL && PUSH) {
        // The cluster's blocks are the splits (cluster rank = split). Each pushes its state to the
        // blocks that merge it: item i = (row, 8 columns) belongs to block i mod S, at slot i / S
        // of sender u's region of recv [S][J][8] floats (J = ⌈n_rows·TPR / S⌉ items a block,
        // merge_recv_bytes after the staging buffers: a peer may push while this block still
        // stages K), and every row's (m, l) goes to every block (ml_recv[u][r]). One cluster
        // barrier makes the stores visible (the blocks arrived at an earlier one at their start,
        // so that none pushes into a peer that has not started); each block then folds its own
        // items from its own shared memory, so none reads a peer's after the barrier and none
        // waits for the others to finish.
        __shared__ float2 ml_recv[16][k_max_rows];
        namespace cg = cooperative_groups;
        cg::cluster_group cluster = cg::this_cluster();
        const int S = n_splits, J = (n_rows * TPR + S - 1) / S;
        float *recv = reinterpret_cast<float *>(smem_raw + decode_smem_bytes<HD>());
        cluster_started_wait(); // every peer has started (it arrived at its start)
        if (g < n_rows)
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                const int c = (warp * NT + j) * 8 + 2 * t, i = g * TPR + c / CPT;
                float2 *dst = reinterpret_cast<float2 *>(recv + (split * J + i / S) * CPT + c % CPT);
                *cluster.map_shared_rank(dst, i % S) = make_float2(o[j][0], o[j][1]);
            }
        if (tid < n_rows * S)
            *cluster.map_shared_rank(&ml_recv[split][tid % n_rows], tid / n_rows) =
                make_float2(m_s[tid % n_rows], l_s[tid % n_rows]);
        cluster.sync(); // every split's pushes visible in the blocks that merge them
        // This block's items (at most one a thread: n_rows·TPR ≤ 256 items over S ≥ 2 blocks),
        // every split's state loaded at once (four at a time).
        for (int slot = tid; slot < J && split + S * slot < n_rows * TPR; slot += 128) {
            const int i = split + S * slot, r = i / TPR, c0 = (i % TPR) * CPT;
            merge_item(
                S, p.out + row_off[r] + c0,
                [&](int u, float &m, float &l, float(&ov)[CPT]) {
                    m = ml_recv[u][r].x;
                    l = ml_recv[u][r].y;
                    load8(recv + (u * J + slot) * CPT, ov);
                },
                [] {});
        }
        return;
    }
#endif
    const int64_t slot_base = (int64_t(blockIdx.x) * gridDim.y + kvh) * n_splits;
    if (g < n_rows) {
        float *part = p.partial + ((slot_base + split) * k_rows + g) * (HD + 2);
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            part[(warp * NT + j) * 8 + 2 * t] = o[j][0];
            part[(warp * NT + j) * 8 + 2 * t + 1] = o[j][1];
        }
        if (warp == 0 && t == 0) {
            part[HD] = m_s[g];
            part[HD + 1] = l_s[g];
        }
    }
    unsigned *counter = p.counters + int64_t(blockIdx.x) * gridDim.y + kvh;
    if (!block_arrives_last(counter, unsigned(n_splits))) return;
    if (tid == 0) *counter = 0; // re-armed for the next launch
    // The merge in one round trip (per 4 splits): thread → (row, 8 consecutive columns), every
    // split's (m, l) and o for them loaded at once, folded in online (m = max, rescale by
    // e^(m_old − m_new)). Measured on the H200: a warp per row reading (m, l) first, then o, took
    // ~3 µs of a 6 µs decode attention.
    for (int r = tid / TPR; r < n_rows; r += 128 / TPR) {
        const int c0 = (tid % TPR) * CPT;
        merge_item(
            n_splits, p.out + row_off[r] + c0,
            [&](int u, float &m, float &l, float(&ov)[CPT]) { // (HD + 2)-float rows: 8-byte aligned
                const float *part = p.partial + ((slot_base + u) * k_rows + r) * (HD + 2);
                const float2 mlv = __ldcg(reinterpret_cast<const float2 *>(part + HD));
                m = mlv.x;
                l = mlv.y;
#pragma unroll
                for (int q = 0; q < CPT / 2; ++q) {
                    const float2 v = __ldcg(reinterpret_cast<const float2 *>(part + c0) + q);
                    ov[2 * q] = v.x;
                    ov[2 * q + 1] = v.y;
                }
            },
            [] {});
    }
}

std::atomic<bool> g_merge_push{false}; // set_attention_merge_push

// Whether this launch merges its splits in a cluster (set_attention_cluster_merge, cluster_fits).
template <int HD, bool F8>
bool clustered_hd_kv(const attention_params &p) {
    if (p.kv_splits <= 1 || !g_cluster_merge.load(std::memory_order_relaxed)) return false;
    return g_merge_push.load(std::memory_order_relaxed)
               ? cluster_fits(reinterpret_cast<const void *>(attention_decode_kernel<HD, F8, true, true>),
                              int(p.kv_splits), 128, decode_smem_bytes<HD>() + merge_recv_bytes<HD>())
               : cluster_fits(reinterpret_cast<const void *>(attention_decode_kernel<HD, F8, true, false>),
                              int(p.kv_splits), 128, decode_smem_bytes<HD>());
}

template <int HD, bool F8>
cudaError_t launch_hd_kv(const attention_params &p, cudaStream_t stream) {
    const dim3 grid(unsigned(p.n_tiles), unsigned(p.n_head_kv), unsigned(p.kv_splits));
    const size_t smem = decode_smem_bytes<HD>();
    const dim3 cluster(1, 1, unsigned(p.kv_splits));
    if (clustered_hd_kv<HD, F8>(p))
        return g_merge_push.load(std::memory_order_relaxed)
                   ? launch_decode_clusters<attention_decode_kernel<HD, F8, true, true>>(
                         cluster, grid, 128, smem + merge_recv_bytes<HD>(), stream, p)
                   : launch_decode_clusters<attention_decode_kernel<HD, F8, true, false>>(cluster, grid, 128,
                                                                                          smem, stream, p);
    return launch_decode<attention_decode_kernel<HD, F8, false>>(grid, 128, smem, stream, p);
}

template <int HD>
cudaError_t launch_hd(const attention_params &p, cudaStream_t stream) {
    return p.kv == kv_format::fp8_e4m3 ? launch_hd_kv<HD, true>(p, stream)
                                       : launch_hd_kv<HD, false>(p, stream);
}

template <int HD>
bool clustered_hd(const attention_params &p) {
    return p.kv == kv_format::fp8_e4m3 ? clustered_hd_kv<HD, true>(p) : clustered_hd_kv<HD, false>(p);
}

} // namespace

bool attention_decode_ok(const attention_params &p) {
    const int64_t group = p.n_head_kv > 0 ? p.n_head / p.n_head_kv : 0;
    const int64_t tile_tokens = p.max_tile_tokens > 0 ? p.max_tile_tokens : p.n_tokens;
    return (p.head_dim == 64 || p.head_dim == 128 || p.head_dim == 256) && group >= 1 &&
           tile_tokens * group <= k_max_rows && p.kv_splits >= 1 && p.kv_splits <= attention_max_kv_splits &&
           (p.kv_splits == 1 || (p.partial && p.counters));
}

void set_attention_cluster_merge(bool on) { g_cluster_merge.store(on, std::memory_order_relaxed); }
void set_attention_merge_push(bool on) { g_merge_push.store(on, std::memory_order_relaxed); }
bool attention_cluster_merge() { return g_cluster_merge.load(std::memory_order_relaxed); }

bool attention_decode_clustered(const attention_params &p) {
    if (!attention_decode_ok(p)) return false;
    switch (p.head_dim) {
    case 64:
        return clustered_hd<64>(p);
    case 128:
        return clustered_hd<128>(p);
    default:
        return clustered_hd<256>(p);
    }
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
