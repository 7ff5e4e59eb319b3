// topk_logits (see topk_logits.cuh). n_top ≤ 64 (the engine's case): topk64_kernel, further down,
// with its own description. Larger n_top: grid (ceil(n_vocab / 2048), n_rows), 1024 threads: block b of
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
#include "kernels/kernel_common.cuh"
#include "kernels/topk_logits.cuh"

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
        keys[j] = i < V ? logit_key(v[h], i) : 0ull;
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
    if (!block_arrives_last(&p.counters[r], unsigned(B))) return;

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
        const int32_t id = logit_key_id(keys[j]);
        p.ids[r * N + j] = id;
        p.values[r * N + j] = id < 0 ? -INFINITY : x[id];
    }
    if (tid == 0) {
        p.row_max[r] = M;
        p.row_sum[r] = S;
        p.counters[r] = 0; // re-armed for the next launch
    }
}

// ---- n_top ≤ 64: threshold, survivors, ranks --------------------------------------------------
// The engine's case (decode asks for 64 candidates per row, once per step). The cost of this
// kernel is a chain of dependent steps, not bandwidth: sorting networks over all 2,048 keys of a
// block (the previous version: ~200 dependent shuffle stages and ~20 µs per launch, most of it
// issue-bound selects on 64-bit keys) do far more than a top-64 needs. Here each step only looks
// at what can still be in the answer:
//  Phase 1, per block of 2,048 values (256 threads, eight each):
//   1. a lower bound t on the block's 64th key: each warp sorts its 32 lane maxima (keys, so
//      equal values order by id and ties cost nothing; 15 shuffle stages) and keeps the 8th, 16th
//      and 32nd largest; after one barrier t = max(min over warps of the 8th, the 4th largest of
//      the 16ths, the 2nd largest of the 32nds): each is met by 64 distinct keys (8 × 8, 4 × 16,
//      2 × 32 lanes);
//   2. the survivors (keys ≥ t; ~110 of 2,048 on average for random rows, at most ~190 in a host
//      emulation over normal and Gumbel rows, 64 for constant ones) go to shared memory through a
//      warp prefix sum and one shared atomic per warp; one barrier;
//   3. each survivor's rank = the number of survivors with a greater key (keys are unique: the id
//      is in them), counted by up to four threads per survivor over broadcast shared loads; one
//      barrier; rank < n_top → the block's sorted list in the scratch, at its rank.
//   The sum Σ exp((l − m_w)/T) is per warp relative to the warp's max m_w (no barrier before the
//   exps), rescaled by exp((m_w − m_b)/T) to the block max m_b after the first barrier.
//  Phase 2, the row's last block (the counter protocol of the general kernel): one round of loads
//   (every list key into registers, each block's max, sum and k-th key for k = ⌈n_top/B⌉);
//   t₂ = the ⌈n_top/k⌉-th largest of the blocks' k-th keys (each of that many lists holds k keys
//   ≥ t₂, so the answer lies in the keys ≥ t₂: usually ~110 of the 3,264), or τ = the largest of
//   the lists' last keys where that is larger (equal values over many blocks); survivors and ranks as
//   in phase 1, written as ids and values (the value decoded from the key; ±0 re-read from the row,
//   the key keeps no sign for zero).
//  Dependent steps for one row: phase 1 ~20 shuffle stages (warp max, then the sort) + ~12 (the
//  bound, the prefix sum), 5 barriers and ~60–200 pipelined broadcast shared loads; phase 2 ~10
//  shuffle stages, 4 barriers, ~B + 60–200 shared loads; plus the memory round trips (the row,
//  fence and counter, the partials) — against ~200 shuffle stages and ~20 barriers before.
// When survivors exceed 256 (loose bounds: e.g. a block's top values all in a few lanes of each
// warp, or in every other block; the selftest has such rows) or, in phase 2, there are more
// than 256 blocks or 4,096 list keys (a vocabulary past ~131k at n_top = 64), that phase
// falls back to the sorting networks below: a warp holds 64 keys two per lane and sorts them with
// shuffles, two sorted lists merge into the top 64 of their union by one bitonic step plus six
// clean-up stages, and a block's 8 warp lists merge in a three-level tree. Correct for any input,
// slower. Both paths write the same lists; the fallback is taken per block (phase 1) or per row
// (phase 2), a barrier-uniform condition.
constexpr int k_fast_threads = 256, k_fast_max_top = 64, k_fast_warps = k_fast_threads / 32;
constexpr int k_cap = 256;      // survivors ranked in shared memory
constexpr int k_list_regs = 16; // phase 2's list keys per thread (B · n_top ≤ 4,096)
static_assert(k_chunk == k_fast_threads * 8, "eight keys per thread");
static_assert(k_cap <= k_fast_threads && k_cap == 4 * 64,
              "one survivor per thread; the buffer doubles as 4 lists");

// One compare-exchange stage of a bitonic network over the warp's 64 keys (distance j, block
// size k: a run is descending where (element & k) == 0).
__device__ __forceinline__ void warp64_stage(unsigned long long &a, unsigned long long &b, int k, int j,
                                             int lane) {
    if (j == 1) {
        const bool desc = ((2 * lane) & k) == 0;
        const unsigned long long hi = max(a, b), lo = min(a, b);
        a = desc ? hi : lo;
        b = desc ? lo : hi;
        return;
    }
    const int lj = j >> 1; // elements 2·lane + h and their partners e ^ j sit lj lanes apart
    const unsigned long long pa = __shfl_xor_sync(0xffffffffu, a, lj),
                             pb = __shfl_xor_sync(0xffffffffu, b, lj);
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
__device__ __forceinline__ void warp64_merge(unsigned long long &a, unsigned long long &b,
                                             unsigned long long c, unsigned long long d, int lane) {
    const unsigned long long r0 = __shfl_sync(0xffffffffu, d, 31 - lane),
                             r1 = __shfl_sync(0xffffffffu, c, 31 - lane);
    a = max(a, r0);
    b = max(b, r1);
#pragma unroll
    for (int j = 32; j > 0; j >>= 1) warp64_stage(a, b, 64, j, lane);
}

// The block's 8 warp lists (in registers) → warp 0 holds the block's top 64. All threads call it.
__device__ __forceinline__ void block64_tree(unsigned long long &a, unsigned long long &b,
                                             unsigned long long (*lists)[64], int warp, int lane) {
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

__device__ __forceinline__ double warp_sum_d(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// e^a in double for a ≤ 0, branch-free (the library's exp branches to a slow path, which would
// keep the scheduler from interleaving the exps with the warp sort): a = n·ln2 + r, |r| ≤ ln2/2,
// e^r by its Taylor series to r^12 (remainder < 1e-14 relative), times 2^n made in the exponent
// bits. a < −700 (and NaN) give e^−700 ≈ 1e−304: next to the max's own 1 in the sum, nothing.
__device__ __forceinline__ double exp_nonpos(double a) {
    a = fmax(a, -700.0);
    const double n = rint(a * 1.4426950408889634);
    double r = fma(n, -6.93147180369123816490e-01, a); // ln 2, high part (n · it is exact)
    r = fma(n, -1.90821492927058770002e-10, r);        // ln 2, low part
    double e = 1.0 / 479001600.0;                      // 1/12!
    e = fma(e, r, 1.0 / 39916800.0);
    e = fma(e, r, 1.0 / 3628800.0);
    e = fma(e, r, 1.0 / 362880.0);
    e = fma(e, r, 1.0 / 40320.0);
    e = fma(e, r, 1.0 / 5040.0);
    e = fma(e, r, 1.0 / 720.0);
    e = fma(e, r, 1.0 / 120.0);
    e = fma(e, r, 1.0 / 24.0);
    e = fma(e, r, 1.0 / 6.0);
    e = fma(e, r, 0.5);
    e = fma(e, r, 1.0);
    e = fma(e, r, 1.0);
    return e * __longlong_as_double((long long)(int(n) + 1023) << 52);
}

// The value a key was made from (logit_key's inverse); ±0 share a key, so zero is re-read.
__device__ __forceinline__ float key_value(unsigned long long k, const float *x) {
    const unsigned ord = unsigned(k >> 32);
    if (ord == 0x80000000u) return x[logit_key_id(k)];
    return __uint_as_float((ord & 0x80000000u) ? (ord ^ 0x80000000u) : ~ord);
}

// Appends this thread's keys with keep[q] to cand (slots past k_cap are dropped; *count still
// counts them): a warp prefix sum of the per-thread counts and one shared atomic per warp. The
// order of the survivors is arbitrary (ranks do not depend on it). All lanes of the warp call it.
template <int Q>
__device__ __forceinline__ void append_survivors(const unsigned long long (&k)[Q], const bool (&keep)[Q],
                                                 unsigned long long *cand, int *count, int lane) {
    int n = 0;
#pragma unroll
    for (int q = 0; q < Q; ++q) n += keep[q] ? 1 : 0;
    int incl = n;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += y;
    }
    int base = 0;
    if (lane == 31 && incl > 0) base = atomicAdd(count, incl);
    int pos = __shfl_sync(0xffffffffu, base, 31) + incl - n;
#pragma unroll
    for (int q = 0; q < Q; ++q)
        if (keep[q]) {
            if (pos < k_cap) cand[pos] = k[q];
            ++pos;
        }
}

// For tid < S: the rank of cand[tid] among cand[0, S) (the number of greater keys; the keys are
// distinct, so the ranks are 0..S−1). S ≤ k_cap, the same in every thread; cand is complete (a
// barrier since its last write) and is not written here. Up to four threads count for one
// survivor, a warp's lanes reading the same key (a broadcast); one barrier.
__device__ __forceinline__ int rank_survivors(const unsigned long long *cand, unsigned *part, int S,
                                              int tid) {
    const int P = S <= 64 ? 4 : (S <= 128 ? 2 : 1), ni = k_fast_threads / P, i = tid % ni, p = tid / ni;
    const int chunk = (S + P - 1) / P, j0 = min(S, p * chunk), j1 = min(S, j0 + chunk);
    if (i < S) {
        const unsigned long long mine = cand[i];
        unsigned c = 0;
#pragma unroll 4
        for (int j = j0; j < j1; ++j) c += cand[j] > mine ? 1u : 0u;
        part[tid] = c;
    }
    __syncthreads();
    int rank = 0;
    if (tid < S)
        for (int q = 0; q < P; ++q) rank += int(part[q * ni + tid]);
    return rank;
}

__global__ void __launch_bounds__(k_fast_threads, 1) topk64_kernel(topk_logits_params p) {
    __shared__ unsigned long long s_buf[k_cap]; // survivors; the fallback's 4 lists of 64
    __shared__ unsigned s_part[k_fast_threads];
    __shared__ unsigned long long s_bound[3][k_fast_warps];
    __shared__ float s_wmax[k_fast_warps];
    __shared__ double s_wsum[k_fast_warps];
    __shared__ float redf[33];
    __shared__ double redd[33];
    __shared__ unsigned long long s_t2;
    __shared__ int s_count;
    auto *lists = reinterpret_cast<unsigned long long(*)[64]>(s_buf);
    pdl_enter();
    const int64_t r = blockIdx.y, V = p.n_vocab;
    const int N = p.n_top, B = int(gridDim.x), b = int(blockIdx.x), tid = threadIdx.x, warp = tid / 32,
              lane = tid % 32;
    const float *x = p.logits + r * V;
    const float T = p.temperatures ? p.temperatures[r] : 0.0f;
    const double inv_t = T > 0.0f ? 1.0 / double(T) : 0.0;
    const float inv_tf = float(fmin(inv_t, 3.0e38)); // finite: (m − m) · inv_tf is 0, not NaN
    auto *part_keys = static_cast<unsigned long long *>(p.scratch) + (r * B) * N;
    auto *part =
        reinterpret_cast<block_partial *>(static_cast<unsigned long long *>(p.scratch) + p.n_rows * B * N) +
        r * B;

    // Phase 1: eight values per thread (coalesced).
    if (tid == 0) s_count = 0;
    const int64_t begin = int64_t(b) * k_chunk;
    unsigned long long kq[8];
    float m = -INFINITY;
    unsigned long long srt = 0; // the lane's largest key (0: none), then the warp's sorted
    {
        float v[8];
#pragma unroll
        for (int q = 0; q < 8; ++q) {
            const int64_t i = begin + q * k_fast_threads + tid;
            v[q] = i < V ? __ldg(x + i) : NAN;
            kq[q] = i < V ? logit_key(v[q], i) : 0ull;
            if (!isnan(v[q])) m = fmaxf(m, v[q]);
            srt = max(srt, kq[q]);
        }
        m = warp_max(m);
        // Branch-free (one basic block with the sort below, so the scheduler can interleave the
        // exps with the sort's shuffles); what a row without a sum computes is dropped. The
        // lane's eight terms (each ≤ 1, relative to the warp's max) in fp32 with the fast exp
        // (relative error ~3e-7 where a term counts), their sum in double from here on: the FP64
        // exps were a seventh of this phase's instructions (ncu, docs/benchmarks.md).
        float sf = 0.0f;
#pragma unroll
        for (int q = 0; q < 8; ++q) {
            const float e = __expf((v[q] - m) * inv_tf);
            sf += isnan(v[q]) ? 0.0f : e;
        }
        double s = T > 0.0f && isfinite(m) ? double(sf) : 0.0;
        // The warp's lane maxima sorted descending (lane i: the (i+1)-th largest).
#pragma unroll
        for (int k = 2; k <= 32; k <<= 1)
#pragma unroll
            for (int j = k >> 1; j > 0; j >>= 1) {
                const unsigned long long o = __shfl_xor_sync(0xffffffffu, srt, j);
                srt = (((lane & j) == 0) == ((lane & k) == 0)) ? max(srt, o) : min(srt, o);
            }
        s = warp_sum_d(s);
        if (lane == 0) {
            s_wmax[warp] = m;
            s_wsum[warp] = s;
        }
    }
    if (lane == 7) s_bound[0][warp] = srt;
    if (lane == 15) s_bound[1][warp] = srt;
    if (lane == 31) s_bound[2][warp] = srt;
    __syncthreads();

    // t: lanes 8g..8g+7 hold group g's 8 values; the lane holding the kth largest of its group
    // (k = 8, 4, 2) offers it, and the largest offer wins. Every warp computes the same t.
    unsigned long long t;
    {
        const int g = lane >> 3, need = g == 0 ? 8 : (g == 1 ? 4 : 2);
        const unsigned long long mine = g < 3 ? s_bound[g][lane & 7] : 0ull;
        int gt = 0, ge = 1;
#pragma unroll
        for (int d = 1; d < 8; ++d) {
            const unsigned long long o = __shfl_sync(0xffffffffu, mine, (lane & ~7) | ((lane + d) & 7));
            gt += o > mine ? 1 : 0;
            ge += o >= mine ? 1 : 0;
        }
        t = g < 3 && gt < need && ge >= need ? mine : 0ull;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) t = max(t, __shfl_xor_sync(0xffffffffu, t, o));
    }
    {
        bool keep[8];
#pragma unroll
        for (int q = 0; q < 8; ++q) keep[q] = kq[q] != 0ull && kq[q] >= t;
        append_survivors(kq, keep, s_buf, &s_count, lane);
    }
    // The block's max and its sum rescaled to it (warp w's part in s_wsum[w], read after the
    // next barrier by thread 0).
    float mb = -INFINITY;
#pragma unroll
    for (int w = 0; w < k_fast_warps; ++w) mb = fmaxf(mb, s_wmax[w]);
    {
        const float mw = s_wmax[warp];
        const double sw = s_wsum[warp] * exp_nonpos((double(mw) - double(mb)) * inv_t);
        __syncwarp(); // every lane has read s_wsum[warp] before lane 0 replaces it
        if (lane == 0) s_wsum[warp] = T > 0.0f && isfinite(mb) && isfinite(mw) ? sw : 0.0;
    }
    __syncthreads();
    const int S = s_count;
    if (S <= k_cap) {
        const int rank = rank_survivors(s_buf, s_part, S, tid);
        if (tid < S && rank < N) part_keys[int64_t(b) * N + rank] = s_buf[tid];
        for (int j = S + tid; j < N; j += k_fast_threads) part_keys[int64_t(b) * N + j] = 0ull;
    } else {
        // Fallback: the warp's four groups of 64 sorted and merged, then the block's tree.
#pragma unroll
        for (int g = 0; g < 4; ++g) warp64_sort(kq[2 * g], kq[2 * g + 1], lane);
        warp64_merge(kq[0], kq[1], kq[2], kq[3], lane);
        warp64_merge(kq[4], kq[5], kq[6], kq[7], lane);
        warp64_merge(kq[0], kq[1], kq[4], kq[5], lane);
        unsigned long long ka = kq[0], kb = kq[1];
        block64_tree(ka, kb, lists, warp, lane);
        if (warp == 0) {
            if (2 * lane < N) part_keys[int64_t(b) * N + 2 * lane] = ka;
            if (2 * lane + 1 < N) part_keys[int64_t(b) * N + 2 * lane + 1] = kb;
        }
    }
    if (tid == 0) {
        double s = 0.0;
#pragma unroll
        for (int w = 0; w < k_fast_warps; ++w) s += s_wsum[w];
        part[b].sum = s;
        part[b].max = mb;
    }
    if (!block_arrives_last(&p.counters[r], unsigned(B))) return;

    // Phase 2 (the row's last block).
    auto list_at = [&](int li, int e) { return e < N ? __ldcg(&part_keys[int64_t(li) * N + e]) : 0ull; };
    // The lists' merge by sorting networks (the fallback): warp w folds every 8th list into its
    // own, then the block's tree; warp 0 writes the result. All threads call it.
    auto merge_lists = [&]() {
        unsigned long long ka = 0ull, kb = 0ull;
        constexpr int PL = 8; // lists a warp loads before merging
        for (int base = warp; base < B; base += k_fast_warps * PL) {
            unsigned long long c[PL], d[PL]; // all loads in flight before the first merge
#pragma unroll
            for (int q = 0; q < PL; ++q) {
                const int li = base + q * k_fast_warps;
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
                const int32_t id = logit_key_id(kk[h]);
                p.ids[r * N + j] = id;
                p.values[r * N + j] = id < 0 ? -INFINITY : x[id];
            }
        }
    };

    if (B > k_fast_threads || B * N > k_list_regs * k_fast_threads) {
        // Too many lists for one round of registers: the block max and sum by block reductions,
        // the merge by sorting networks.
        float M = -INFINITY;
        for (int i = tid; i < B; i += k_fast_threads) M = fmaxf(M, __ldcg(&part[i].max));
        M = block_max(M, redf);
        double S2 = 0.0;
        if (T > 0.0f && isfinite(M))
            for (int i = tid; i < B; i += k_fast_threads) {
                const float mbi = __ldcg(&part[i].max);
                if (isfinite(mbi)) S2 += __ldcg(&part[i].sum) * exp((double(mbi) - double(M)) * inv_t);
            }
        S2 = block_sum_d(S2, redd);
        merge_lists();
        if (tid == 0) {
            p.row_max[r] = M;
            p.row_sum[r] = S2;
            p.counters[r] = 0; // re-armed for the next launch
        }
        return;
    }

    // One round of loads: every list key, and block tid's max, sum and kth key.
    const int k = (N + B - 1) / B, need = (N + k - 1) / k; // need ≤ B lists of k keys: ≥ N keys
    unsigned long long kr[k_list_regs];
#pragma unroll
    for (int q = 0; q < k_list_regs; ++q) {
        const int i = q * k_fast_threads + tid;
        kr[q] = i < B * N ? __ldcg(&part_keys[i]) : 0ull;
    }
    float mbt = -INFINITY;
    double sbt = 0.0;
    unsigned long long cb = 0ull, tau = 0ull;
    if (tid < B) {
        mbt = __ldcg(&part[tid].max);
        sbt = __ldcg(&part[tid].sum);
        cb = __ldcg(&part_keys[int64_t(tid) * N + (k - 1)]);
        tau = __ldcg(&part_keys[int64_t(tid) * N + (N - 1)]);
        s_buf[tid] = cb;
    }
    if (tid == 0) {
        s_t2 = 0ull;
        s_count = 0;
    }
    {
        const float w = warp_max(mbt);
        if (lane == 0) s_wmax[warp] = w;
    }
    __syncthreads();
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < k_fast_warps; ++w) M = fmaxf(M, s_wmax[w]);
    {
        // cb qualifies when at least `need` lists have a kth key ≥ it; t₂ = the largest that does.
        // Also τ = the largest of the lists' last keys (its list alone holds N keys ≥ it): the
        // better bound when equal values spread over many blocks (the keys then order by id).
        unsigned long long bound = 0ull;
        if (tid < B) {
            int ge = 0;
            for (int i = 0; i < B; ++i) ge += s_buf[i] >= cb ? 1 : 0;
            bound = ge >= need ? max(cb, tau) : tau;
        }
        // The warp's largest, then one shared atomic a warp (a 64-bit shared atomicMax is a
        // compare-and-swap loop, B threads on one word would retry in turn).
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) bound = max(bound, __shfl_xor_sync(0xffffffffu, bound, o));
        if (lane == 0 && warp * 32 < B) atomicMax(&s_t2, bound);
    }
    {
        double c = 0.0;
        const double e = sbt * exp_nonpos((double(mbt) - double(M)) * inv_t);
        if (tid < B && T > 0.0f && isfinite(M) && isfinite(mbt)) c = e;
        c = warp_sum_d(c);
        if (lane == 0) s_wsum[warp] = c;
    }
    __syncthreads();
    {
        const unsigned long long t2 = s_t2;
        bool keep[k_list_regs];
#pragma unroll
        for (int q = 0; q < k_list_regs; ++q) keep[q] = kr[q] != 0ull && kr[q] >= t2;
        append_survivors(kr, keep, s_buf, &s_count, lane);
    }
    __syncthreads();
    const int S2 = s_count;
    if (S2 <= k_cap) {
        const int rank = rank_survivors(s_buf, s_part, S2, tid);
        if (tid < S2 && rank < N) {
            const unsigned long long key = s_buf[tid];
            p.ids[r * N + rank] = logit_key_id(key);
            p.values[r * N + rank] = key_value(key, x);
        }
        for (int j = S2 + tid; j < N; j += k_fast_threads) {
            p.ids[r * N + j] = -1;
            p.values[r * N + j] = -INFINITY;
        }
    } else {
        merge_lists();
    }
    if (tid == 0) {
        double s = 0.0;
#pragma unroll
        for (int w = 0; w < k_fast_warps; ++w) s += s_wsum[w];
        p.row_max[r] = M;
        p.row_sum[r] = s;
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
        return launch_decode<topk64_kernel>(dim3(blocks, unsigned(p.n_rows)), dim3(k_fast_threads), 0, stream,
                                            p);
    return launch_kernel(topk_logits_kernel, dim3(blocks, unsigned(p.n_rows)), dim3(k_threads), 0, stream, p);
}

} // namespace es
