// topk_logits (see topk_logits.cuh). Grid (ceil(n_vocab / 2048), n_rows), 1024 threads: block b of
// row r loads values [2048 b, 2048 b + 2048) as 64-bit keys (order-preserving bits of the value
// above ~id, so one unsigned comparison is "greater value, or equal value and lower id"; NaN and
// padding are key 0, −0 is keyed as +0), reduces its max and Σ exp((l − max_b)/T) in double, sorts
// the keys (bitonic, shared memory) and writes its first n_top to the scratch. The last block of
// the row to finish (a counter bumped after a fence, reset by that block) merges: the row max,
// the sum Σ_b sum_b · exp((max_b − max)/T) in double (a fixed tree order: deterministic), and the
// top n_top of the blocks' sorted lists: τ = the largest of the blocks' n_top-th keys bounds the
// answer from below (τ's block alone holds n_top keys ≥ τ), so only keys ≥ τ (a prefix of each
// list, usually 1–2 × n_top keys in all) are gathered and sorted; when they overflow the
// 4096-key buffer (rows with fewer than n_top values per block), repeated bitonic sorts of
// (current top, next lists) do it. Values are re-read from the row (exact, −0 stays −0).
#include "kernel_common.cuh"
#include "topk_logits.cuh"

namespace es {

namespace {
constexpr int k_threads = 1024;
constexpr int k_chunk = 2048;      // values per block in the first phase (topk_logits.cpp agrees)
constexpr int k_merge_keys = 4096; // the merge buffer

struct block_partial {
    double sum;
    float max;
    float pad;
};

__device__ __forceinline__ unsigned long long make_key(float v, int64_t id) {
    if (isnan(v)) return 0ull;
    unsigned u = __float_as_uint(v);
    if ((u & 0x7fffffffu) == 0) u = 0; // −0 and +0 tie, as in the sampler's comparisons
    const unsigned ord = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return (static_cast<unsigned long long>(ord) << 32) | (0xffffffffu - unsigned(id));
}

__device__ __forceinline__ int32_t key_id(unsigned long long k) {
    return (k >> 32) == 0 ? -1 : int32_t(0xffffffffu - unsigned(k & 0xffffffffu));
}

// Sorts keys[0, n) descending; n is a power of two, every thread of the block calls it after a
// block barrier, and it ends with one. Pair t of a stage with distance j ≤ 32 lies in the 64 keys
// [64·(t/32), +64), which only warp t/32 touches in such stages: between two of them a __syncwarp
// (which orders the warp's shared-memory accesses) replaces the block barrier — about 20 of a
// 2048-key sort's 66 stages need one.
__device__ void block_sort_desc(unsigned long long *keys, int n) {
    for (int k = 2; k <= n; k <<= 1)
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int t = threadIdx.x; t < n / 2; t += blockDim.x) {
                const int i = 2 * j * (t / j) + (t % j), l = i + j;
                const unsigned long long a = keys[i], b = keys[l];
                const bool desc = (i & k) == 0;
                if (desc ? a < b : a > b) {
                    keys[i] = b;
                    keys[l] = a;
                }
            }
            const int next_j = j > 1 ? j >> 1 : k; // the next stage's distance (k doubles after j = 1)
            if (j <= 32 && next_j <= 32 && !(k == n && j == 1))
                __syncwarp();
            else
                __syncthreads();
        }
}

__device__ float block_max(float v, float *red) {
    v = warp_max(v);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < int(blockDim.x / 32) ? red[lane] : -INFINITY;
        v = warp_max(v);
        if (lane == 0) red[32] = v;
    }
    __syncthreads();
    return red[32];
}

__device__ unsigned long long block_max_u64(unsigned long long v, unsigned long long *red) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < int(blockDim.x / 32) ? red[lane] : 0ull;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, o));
        if (lane == 0) red[32] = v;
    }
    __syncthreads();
    return red[32];
}

__device__ double block_sum_d(double v, double *red) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < int(blockDim.x / 32) ? red[lane] : 0.0;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0) red[32] = v;
    }
    __syncthreads();
    return red[32];
}
} // namespace

__global__ void __launch_bounds__(k_threads) topk_logits_kernel(topk_logits_params p) {
    __shared__ unsigned long long keys[k_merge_keys];
    __shared__ float redf[33];
    __shared__ double redd[33];
    __shared__ unsigned long long redk[33];
    __shared__ int s_count;
    __shared__ bool s_last;
    pdl_enter();
    const int64_t r = blockIdx.y, V = p.n_vocab;
    const int N = p.n_top, B = int(gridDim.x), b = int(blockIdx.x), tid = threadIdx.x;
    const float *x = p.logits + r * V;
    const float T = p.temperatures ? p.temperatures[r] : 0.0f;
    auto *part_keys = static_cast<unsigned long long *>(p.scratch) + (r * B) * N;
    auto *part =
        reinterpret_cast<block_partial *>(static_cast<unsigned long long *>(p.scratch) + p.n_rows * B * N) +
        r * B;

    // Phase 1: this block's chunk.
    const int64_t begin = int64_t(b) * k_chunk;
    float v[2];
    float m = -INFINITY;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        const int j = tid + h * k_threads;
        const int64_t i = begin + j;
        v[h] = i < V ? x[i] : NAN;
        keys[j] = i < V ? make_key(v[h], i) : 0ull;
        if (!isnan(v[h])) m = fmaxf(m, v[h]);
    }
    m = block_max(m, redf);
    double s = 0.0;
    if (T > 0.0f && isfinite(m)) {
#pragma unroll
        for (int h = 0; h < 2; ++h)
            if (!isnan(v[h])) s += exp((double(v[h]) - double(m)) / double(T));
    }
    s = block_sum_d(s, redd);
    block_sort_desc(keys, k_chunk);
    for (int j = tid; j < N; j += k_threads) part_keys[int64_t(b) * N + j] = j < k_chunk ? keys[j] : 0ull;
    if (tid == 0) {
        part[b].sum = s;
        part[b].max = m;
    }
    __syncthreads();
    if (tid == 0) {
        __threadfence(); // this block's partials are visible before the counter says so
        const unsigned done = atomicAdd(&p.counters[r], 1u);
        s_last = done == unsigned(B - 1);
    }
    __syncthreads();
    if (!s_last) return;
    __threadfence();

    // Phase 2 (the row's last block): max, sum, merge.
    float M = -INFINITY;
    for (int i = tid; i < B; i += k_threads) M = fmaxf(M, __ldcg(&part[i].max));
    M = block_max(M, redf);
    double S = 0.0;
    if (T > 0.0f && isfinite(M))
        for (int i = tid; i < B; i += k_threads) {
            const float mb = __ldcg(&part[i].max);
            if (isfinite(mb)) S += __ldcg(&part[i].sum) * exp((double(mb) - double(M)) / double(T));
        }
    S = block_sum_d(S, redd);

    unsigned long long tau = 0ull;
    for (int i = tid; i < B; i += k_threads) tau = max(tau, __ldcg(&part_keys[int64_t(i) * N + (N - 1)]));
    if (tid == 0) s_count = 0;
    tau = block_max_u64(tau, redk); // its barriers also publish s_count = 0
    for (int i = tid; i < B * N; i += k_threads) {
        const unsigned long long k = __ldcg(&part_keys[i]);
        if (k >= tau) {
            const int at = atomicAdd(&s_count, 1);
            if (at < k_merge_keys) keys[at] = k;
        }
    }
    __syncthreads();
    const int count = s_count; // >= N
    if (count <= k_merge_keys) {
        int n = 2;
        while (n < count) n <<= 1;
        for (int j = count + tid; j < n; j += k_threads) keys[j] = 0ull;
        __syncthreads();
        block_sort_desc(keys, n);
    } else {
        for (int j = tid; j < N; j += k_threads) keys[j] = __ldcg(&part_keys[j]);
        const int per_round = (k_merge_keys - N) / N;
        for (int first = 1; first < B; first += per_round) {
            const int n_lists = min(per_round, B - first), cnt = N * (1 + n_lists);
            int n = 2;
            while (n < cnt) n <<= 1;
            for (int j = N + tid; j < n; j += k_threads)
                keys[j] = j < cnt ? __ldcg(&part_keys[int64_t(first) * N + (j - N)]) : 0ull;
            __syncthreads();
            block_sort_desc(keys, n);
        }
        __syncthreads();
    }
    for (int j = tid; j < N; j += k_threads) {
        const int32_t id = key_id(keys[j]);
        p.ids[r * N + j] = id;
        p.values[r * N + j] = id < 0 ? -INFINITY : x[id];
    }
    if (tid == 0) {
        p.row_max[r] = M;
        p.row_sum[r] = S;
        p.counters[r] = 0; // re-armed for the next launch
    }
}

// ---- n_top ≤ 64: register sorting networks instead of shared-memory sorts ----------------------
// The kernel above spends ~30 µs per launch in block-wide bitonic sorts (66 barrier-separated
// stages of 2,048 keys, then the merge's sort), on every decode step's critical path. Only a
// top-64 is needed: here a warp holds 64 keys as two per lane (elements 2·lane and 2·lane + 1),
// sorts them with shuffles (no barriers), and two sorted lists merge into the top 64 of their
// union by one bitonic step (max of one list against the other reversed) plus six clean-up
// stages. Phase 1: each of 8 warps reduces its 256 keys to a sorted 64, the block's 8 lists merge
// in a tree (three barriers), and the block's first n_top keys go to the scratch. Phase 2 (the
// row's last block): each warp folds every 8th block list into its own, then the same tree.
constexpr int k_fast_threads = 256, k_fast_max_top = 64;
static_assert(k_chunk == k_fast_threads * 8, "eight keys per thread");

// One compare-exchange stage of a bitonic network over the warp's 64 keys (distance j, block
// size k: a run is descending where (element & k) == 0).
__device__ __forceinline__ void warp64_stage(unsigned long long &a, unsigned long long &b, int k, int j, int lane) {
    if (j == 1) {
        const bool desc = ((2 * lane) & k) == 0;
        const unsigned long long hi = max(a, b), lo = min(a, b);
        a = desc ? hi : lo;
        b = desc ? lo : hi;
        return;
    }
    const int lj = j >> 1; // elements 2·lane + h and their partners e ^ j sit lj lanes apart
    const unsigned long long pa = __shfl_xor_sync(0xffffffffu, a, lj), pb = __shfl_xor_sync(0xffffffffu, b, lj);
    const bool lower = (lane & lj) == 0, desc = ((2 * lane) & k) == 0;
    const bool keep_max = lower == desc;
    a = keep_max ? max(a, pa) : min(a, pa);
    b = keep_max ? max(b, pb) : min(b, pb);
}

__device__ __forceinline__ void warp64_sort(unsigned long long &a, unsigned long long &b, int lane) {
#pragma unroll
    for (int k = 2; k <= 64; k <<= 1)
#pragma unroll
        for (int j = k >> 1; j > 0; j >>= 1) warp64_stage(a, b, k, j, lane);
}

// (a, b) := the top 64 of the sorted lists (a, b) and (c, d), sorted.
__device__ __forceinline__ void warp64_merge(unsigned long long &a, unsigned long long &b, unsigned long long c,
                                             unsigned long long d, int lane) {
    const unsigned long long r0 = __shfl_sync(0xffffffffu, d, 31 - lane), r1 = __shfl_sync(0xffffffffu, c, 31 - lane);
    a = max(a, r0);
    b = max(b, r1);
#pragma unroll
    for (int j = 32; j > 0; j >>= 1) warp64_stage(a, b, 64, j, lane);
}

// The block's 8 warp lists (in registers) → warp 0 holds the block's top 64. All threads call it.
__device__ __forceinline__ void block64_tree(unsigned long long &a, unsigned long long &b, unsigned long long (*lists)[64],
                                             int warp, int lane) {
    for (int half = k_fast_threads / 64; half >= 1; half >>= 1) { // 4, 2, 1
        if (warp >= half && warp < 2 * half) {
            lists[warp - half][2 * lane] = a;
            lists[warp - half][2 * lane + 1] = b;
        }
        __syncthreads();
        if (warp < half) warp64_merge(a, b, lists[warp][2 * lane], lists[warp][2 * lane + 1], lane);
        __syncthreads();
    }
}

__global__ void __launch_bounds__(k_fast_threads) topk64_kernel(topk_logits_params p) {
    __shared__ unsigned long long lists[4][64];
    __shared__ float redf[33];
    __shared__ double redd[33];
    __shared__ bool s_last;
    pdl_enter();
    const int64_t r = blockIdx.y, V = p.n_vocab;
    const int N = p.n_top, B = int(gridDim.x), b = int(blockIdx.x), tid = threadIdx.x, warp = tid / 32,
              lane = tid % 32;
    const float *x = p.logits + r * V;
    const float T = p.temperatures ? p.temperatures[r] : 0.0f;
    auto *part_keys = static_cast<unsigned long long *>(p.scratch) + (r * B) * N;
    auto *part =
        reinterpret_cast<block_partial *>(static_cast<unsigned long long *>(p.scratch) + p.n_rows * B * N) +
        r * B;

    // Phase 1: eight values per thread (coalesced), the warp's four groups of 64 sorted and merged.
    const int64_t begin = int64_t(b) * k_chunk;
    float v[8];
    unsigned long long kq[8];
    float m = -INFINITY;
#pragma unroll
    for (int q = 0; q < 8; ++q) {
        const int64_t i = begin + q * k_fast_threads + tid;
        v[q] = i < V ? __ldg(x + i) : NAN;
        kq[q] = i < V ? make_key(v[q], i) : 0ull;
        if (!isnan(v[q])) m = fmaxf(m, v[q]);
    }
#pragma unroll
    for (int g = 0; g < 4; ++g) warp64_sort(kq[2 * g], kq[2 * g + 1], lane);
    warp64_merge(kq[0], kq[1], kq[2], kq[3], lane);
    warp64_merge(kq[4], kq[5], kq[6], kq[7], lane);
    warp64_merge(kq[0], kq[1], kq[4], kq[5], lane);
    unsigned long long ka = kq[0], kb = kq[1];
    m = block_max(m, redf);
    double s = 0.0;
    if (T > 0.0f && isfinite(m)) {
#pragma unroll
        for (int q = 0; q < 8; ++q)
            if (!isnan(v[q])) s += exp((double(v[q]) - double(m)) / double(T));
    }
    s = block_sum_d(s, redd);
    block64_tree(ka, kb, lists, warp, lane);
    if (warp == 0) {
        if (2 * lane < N) part_keys[int64_t(b) * N + 2 * lane] = ka;
        if (2 * lane + 1 < N) part_keys[int64_t(b) * N + 2 * lane + 1] = kb;
    }
    if (tid == 0) {
        part[b].sum = s;
        part[b].max = m;
    }
    __syncthreads();
    if (tid == 0) {
        __threadfence(); // this block's partials are visible before the counter says so
        const unsigned done = atomicAdd(&p.counters[r], 1u);
        s_last = done == unsigned(B - 1);
    }
    __syncthreads();
    if (!s_last) return;
    __threadfence();

    // Phase 2 (the row's last block): max, sum (as the general kernel), and the lists' merge.
    float M = -INFINITY;
    for (int i = tid; i < B; i += k_fast_threads) M = fmaxf(M, __ldcg(&part[i].max));
    M = block_max(M, redf);
    double S = 0.0;
    if (T > 0.0f && isfinite(M))
        for (int i = tid; i < B; i += k_fast_threads) {
            const float mb = __ldcg(&part[i].max);
            if (isfinite(mb)) S += __ldcg(&part[i].sum) * exp((double(mb) - double(M)) / double(T));
        }
    S = block_sum_d(S, redd);
    auto list_at = [&](int li, int e) { return e < N ? __ldcg(&part_keys[int64_t(li) * N + e]) : 0ull; };
    ka = kb = 0ull;
    constexpr int W = k_fast_threads / 32, PL = 8; // warps; lists a warp loads before merging
    for (int base = warp; base < B; base += W * PL) {
        unsigned long long c[PL], d[PL]; // all loads in flight before the first merge
#pragma unroll
        for (int q = 0; q < PL; ++q) {
            const int li = base + q * W;
            c[q] = li < B ? list_at(li, 2 * lane) : 0ull;
            d[q] = li < B ? list_at(li, 2 * lane + 1) : 0ull;
        }
#pragma unroll
        for (int q = 0; q < PL; ++q) warp64_merge(ka, kb, c[q], d[q], lane);
    }
    block64_tree(ka, kb, lists, warp, lane);
    if (warp == 0) {
        const unsigned long long kk[2] = {ka, kb};
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int j = 2 * lane + h;
            if (j >= N) continue;
            const int32_t id = key_id(kk[h]);
            p.ids[r * N + j] = id;
            p.values[r * N + j] = id < 0 ? -INFINITY : x[id];
        }
    }
    if (tid == 0) {
        p.row_max[r] = M;
        p.row_sum[r] = S;
        p.counters[r] = 0; // re-armed for the next launch
    }
}

cudaError_t launch_topk_logits(const topk_logits_params &p, cudaStream_t stream) {
    if (p.n_rows <= 0) return cudaSuccess;
    if (p.n_top < 1 || p.n_top > topk_logits_max_top || p.n_vocab < 1 || p.n_vocab >= (int64_t(1) << 31) ||
        p.n_rows > 65535 || !p.scratch || !p.counters)
        return cudaErrorInvalidValue;
    const unsigned blocks = ceil_div_u(p.n_vocab, k_chunk);
    if (p.n_top <= k_fast_max_top)
        return launch_kernel(topk64_kernel, dim3(blocks, unsigned(p.n_rows)), dim3(k_fast_threads), 0, stream, p);
    return launch_kernel(topk_logits_kernel, dim3(blocks, unsigned(p.n_rows)), dim3(k_threads), 0, stream, p);
}

} // namespace es
