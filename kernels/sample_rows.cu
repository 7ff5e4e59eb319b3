// sample_rows on the device (sample_rows.cuh). A row is drawn by a cluster of kClusterBlocks
// blocks (one block below compute capability 9.0); each of its warps owns a contiguous segment of
// ids, and every pass a thread makes visits the same ids in the same order, so a thread reads back
// only the weights it wrote itself. Cluster-wide results (the max, the masses, the histograms of
// the radix selection) go through each block's shared memory and the cluster barrier; every
// exchange slot is double-buffered, so one barrier per exchange suffices.
#include "kernels/kernel_common.cuh"
#include "kernels/sample_rows.cuh"

#include <cooperative_groups.h>

#include <map>
#include <mutex>

namespace es {
namespace {

namespace cg = cooperative_groups;
using u64 = unsigned long long;

constexpr int kThreads = 512, kWarps = kThreads / 32, kBuckets = 256;
constexpr int kClusterBlocks = 8;
constexpr int kLoadBatch = 8; // the first pass's loads in flight a lane

// A warp's segment for V ids over CS blocks (a multiple of 32), and the shared memory the SMEM
// variant caches a block's logits and weights in.
__host__ __device__ inline int64_t segment(int64_t V, int CS) {
    return ((V + CS * kWarps - 1) / (CS * kWarps) + 31) / 32 * 32;
}
inline size_t cache_bytes(int64_t V, int CS) { return size_t(2 * kWarps * segment(V, CS)) * 4; }
constexpr size_t k_max_cache_bytes = 160u << 10;

struct histogram {
    unsigned cnt[kBuckets];
    unsigned key_hi[kBuckets], key_lo[kBuckets]; // the bucket's largest key's halves (apart)
};

struct sample_smem {
    histogram hist[2];   // the radix pass's histogram, by exchange parity
    u64 xs[2];           // the block's value in a cluster reduction, by exchange parity
    u64 warp_red[kWarps];
    u64 warp_mass[kWarps]; // each warp's kept mass (the draw's segments)
    u64 sel_key, sel_cnt_above, sel_bucket_cnt, sel_bucket;
    u64 pick; // the drawn id's key (the block holding it)
};

template <int CS> __device__ __forceinline__ void cl_sync() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if constexpr (CS > 1) {
        cg::this_cluster().sync(); // release/acquire at cluster scope: global writes too
        return;
    }
#endif
    __syncthreads();
}
template <int CS, class T> __device__ __forceinline__ T *cl_peer(T *p, unsigned rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if constexpr (CS > 1) return cg::this_cluster().map_shared_rank(p, rank);
#endif
    return p;
}
template <int CS> __device__ __forceinline__ unsigned cl_rank() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if constexpr (CS > 1) return cg::this_cluster().block_rank();
#endif
    return 0;
}

__device__ __forceinline__ u64 warp_max(u64 x) {
    for (int o = 16; o; o >>= 1) x = max(x, __shfl_xor_sync(~0u, x, o));
    return x;
}
__device__ __forceinline__ u64 warp_sum(u64 x) {
    for (int o = 16; o; o >>= 1) x += __shfl_xor_sync(~0u, x, o);
    return x;
}
__device__ __forceinline__ u64 warp_inclusive_sum(u64 x, int lane) {
    for (int o = 1; o < 32; o <<= 1) {
        const u64 y = __shfl_up_sync(~0u, x, o);
        if (lane >= o) x += y;
    }
    return x;
}

// One row's state, the same in every thread of its cluster.
struct row_ctx {
    const float *L;
    float *W;
    float *sl, *sw;        // SMEM: the block's logits (cleaned) and weights, by local index
    int64_t V, seg, first; // the warp's segment: ids [first, first + seg)
    int64_t local0;        // the local index of the warp's first id
    float max, t, min_p;
    int lane, warp;
};

__device__ __forceinline__ float load_logit(const row_ctx &c, int64_t v) { return sampling_clean(__ldcg(c.L + v)); }
// Id v's logit and weight in the passes after the weights are known: from shared memory (SMEM: a
// block's ids fit there) or from global memory; i is v's offset in the warp's segment.
template <bool SMEM> __device__ __forceinline__ float pass_logit(const row_ctx &c, int64_t v, int64_t i) {
    if constexpr (SMEM) return c.sl[c.local0 + i];
    return load_logit(c, v);
}
template <bool SMEM> __device__ __forceinline__ float pass_weight(const row_ctx &c, int64_t v, int64_t i) {
    if constexpr (SMEM) return c.sw[c.local0 + i];
    return c.W[v];
}
__device__ __forceinline__ u64 kept_mass(const row_ctx &c, float w) {
    return w >= c.min_p ? sampling_mass_of(w) : 0ull;
}

// A reduction over the cluster (max or sum) of one value per thread; every thread gets it.
template <int CS, bool Max> __device__ u64 cluster_reduce(u64 x, sample_smem &sm, int &par, const row_ctx &c) {
    x = Max ? warp_max(x) : warp_sum(x);
    if (c.lane == 0) sm.warp_red[c.warp] = x;
    __syncthreads();
    if (threadIdx.x == 0) {
        u64 a = sm.warp_red[0];
        for (int w = 1; w < kWarps; ++w) a = Max ? max(a, sm.warp_red[w]) : a + sm.warp_red[w];
        sm.xs[par] = a;
    }
    cl_sync<CS>();
    u64 r = 0;
    for (unsigned k = 0; k < unsigned(CS); ++k) {
        const u64 b = *cl_peer<CS>(&sm.xs[par], k);
        r = Max ? max(r, b) : r + b;
    }
    par ^= 1;
    return r;
}

// The k-th largest key of the row (top-k's threshold), 8 bits a pass, most significant first;
// stops as soon as the chosen bucket holds one id (its key is then the bucket's max, kept as two
// 32-bit maxima: with one id in the bucket both halves are that id's). Counts and maxima are
// 32-bit shared-memory atomics, one per group of a warp's lanes that share a bucket.
template <int CS, bool SMEM>
__device__ u64 radix_select_kth(const row_ctx &c, sample_smem &sm, int &par, u64 k) {
    u64 prefix = 0, cnt_above = 0;
    for (int d = 0; d < 8; ++d) {
        const int shift = 56 - 8 * d;
        histogram &h = sm.hist[par];
        for (int b = threadIdx.x; b < kBuckets; b += kThreads) {
            h.cnt[b] = 0;
            h.key_hi[b] = 0;
            h.key_lo[b] = 0;
        }
        __syncthreads();
        for (int64_t i = 0; i < c.seg; i += 32) {
            const int64_t v = c.first + i + c.lane;
            unsigned b = kBuckets; // not a candidate
            u64 key = 0;
            if (v < c.V) {
                key = sampling_key(pass_logit<SMEM>(c, v, i + c.lane), v);
                if (d == 0 || (key >> (shift + 8)) == (prefix >> (shift + 8))) b = unsigned(key >> shift) & (kBuckets - 1);
            }
            const unsigned grp = __match_any_sync(~0u, b);
            if (b < kBuckets) {
                const unsigned k_hi = __reduce_max_sync(grp, unsigned(key >> 32));
                const unsigned k_lo = __reduce_max_sync(grp, unsigned(key));
                if (c.lane == __ffs(grp) - 1) {
                    atomicAdd(&h.cnt[b], unsigned(__popc(grp)));
                    atomicMax(&h.key_hi[b], k_hi);
                    atomicMax(&h.key_lo[b], k_lo);
                }
            }
        }
        cl_sync<CS>();
        if (c.warp == 0) {
            // Lane l holds buckets 255 − 8l … 248 − 8l (descending), summed over the cluster.
            u64 cn[8], lane_c = 0;
            for (int j = 0; j < 8; ++j) {
                const int b = kBuckets - 1 - 8 * c.lane - j;
                cn[j] = 0;
                for (unsigned r = 0; r < unsigned(CS); ++r) cn[j] += cl_peer<CS>(&sm.hist[par], r)->cnt[b];
                lane_c += cn[j];
            }
            const u64 inc_c = warp_inclusive_sum(lane_c, c.lane);
            const u64 rem = k - cnt_above;
            const unsigned hit = __ballot_sync(~0u, inc_c >= rem);
            // hit is never 0: k < V.
            const int owner = hit ? __ffs(hit) - 1 : 31;
            if (c.lane == owner) {
                u64 run_c = inc_c - lane_c;
                int j = 0;
                for (; j < 7; ++j) {
                    if (run_c + cn[j] >= rem) break;
                    run_c += cn[j];
                }
                const int b = kBuckets - 1 - 8 * c.lane - j;
                unsigned hi = 0, lo = 0;
                for (unsigned r = 0; r < unsigned(CS); ++r) {
                    const histogram *ph = cl_peer<CS>(&sm.hist[par], r);
                    hi = max(hi, ph->key_hi[b]);
                    lo = max(lo, ph->key_lo[b]);
                }
                sm.sel_bucket = u64(b);
                sm.sel_bucket_cnt = cn[j];
                sm.sel_cnt_above = run_c;
                sm.sel_key = (u64(hi) << 32) | lo;
            }
        }
        __syncthreads();
        prefix |= sm.sel_bucket << shift;
        cnt_above += sm.sel_cnt_above;
        const u64 bucket_cnt = sm.sel_bucket_cnt, bucket_key = sm.sel_key;
        par ^= 1;
        __syncthreads(); // sel_* are rewritten by the next pass's warp 0
        if (bucket_cnt <= 1) return bucket_cnt == 1 ? bucket_key : prefix;
    }
    return prefix;
}

template <int CS, bool SMEM>
__global__ void __launch_bounds__(kThreads) sample_rows_kernel(const sample_rows_params p) {
    __shared__ sample_smem sm;
    extern __shared__ float sample_cache[]; // SMEM: [kWarps · seg] logits, then as many weights
    pdl_enter();
    const unsigned rank = cl_rank<CS>();
    const int64_t row = int64_t(blockIdx.x) / CS, V = p.n_vocab;
    const row_sampling s = p.rows[row];
    float *L = p.logits + row * V;
    row_ctx c;
    c.L = L;
    c.W = p.scratch + row * V;
    c.V = V;
    c.lane = int(threadIdx.x) % 32;
    c.warp = int(threadIdx.x) / 32;
    c.seg = segment(V, CS);
    c.first = (int64_t(rank) * kWarps + c.warp) * c.seg;
    c.local0 = int64_t(c.warp) * c.seg;
    c.sl = sample_cache;
    c.sw = sample_cache + kWarps * c.seg;
    c.t = s.temperature;
    c.min_p = s.min_p;
    int par = 0;

    // 1. Penalties, in place; every block sees them after the barrier.
    if (sampling_has_penalties(s)) {
        const auto *e = reinterpret_cast<const penalty_entry *>(s.penalties);
        const int32_t extra = s.extra_token >= 0 ? p.tokens[s.extra_token] : -1;
        for (int64_t i = int64_t(rank) * kThreads + threadIdx.x; i < s.n_penalties; i += int64_t(CS) * kThreads) {
            const penalty_entry pe = e[i];
            if (pe.id < 0 || pe.id >= V) continue;
            L[pe.id] = sampling_penalized(L[pe.id], pe.count + (pe.id == extra ? 1 : 0), s);
        }
        if (rank == 0 && threadIdx.x == 0 && extra >= 0 && extra < V) {
            int32_t a = 0, b = s.n_penalties; // first entry with id ≥ extra
            while (a < b) {
                const int32_t m = (a + b) / 2;
                if (e[m].id < extra) a = m + 1;
                else b = m;
            }
            if (a == s.n_penalties || e[a].id != extra) L[extra] = sampling_penalized(L[extra], 1, s);
        }
        cl_sync<CS>();
    }

    // 2. The max and the top.
    // The row comes from global memory in batches of kLoadBatch loads a lane, all in flight
    // together (one at a time, each waits a memory round trip).
    u64 best = 0;
    for (int64_t i0 = 0; i0 < c.seg; i0 += 32 * kLoadBatch) {
        float l[kLoadBatch];
#pragma unroll
        for (int u = 0; u < kLoadBatch; ++u) {
            const int64_t i = i0 + 32 * u, v = c.first + i + c.lane;
            l[u] = i < c.seg && v < V ? __ldcg(c.L + v) : -INFINITY;
        }
#pragma unroll
        for (int u = 0; u < kLoadBatch; ++u) {
            const int64_t i = i0 + 32 * u, v = c.first + i + c.lane;
            if (i < c.seg && v < V) {
                const float x = sampling_clean(l[u]);
                if constexpr (SMEM) c.sl[c.local0 + i + c.lane] = x;
                best = max(best, u64(sampling_key(x, v)));
            }
        }
    }
    const u64 top = cluster_reduce<CS, true>(best, sm, par, c);
    c.max = sampling_key_logit(top);
    auto write = [&](int32_t id) {
        p.ids[row] = id;
        if (p.values) p.values[row] = load_logit(c, id);
        if (p.row_max) p.row_max[row] = c.max;
    };
    if (!(c.t > sampling_greedy_temperature) || !isfinite(c.max)) {
        if (rank == 0 && threadIdx.x == 0) write(sampling_key_id(top));
        cl_sync<CS>(); // no block leaves while a peer may still read its shared memory
        return;
    }

    // 3. Weights (kept for the passes below) and the mass min-p keeps, per warp.
    u64 acc = 0;
    for (int64_t i = 0; i < c.seg; i += 32) {
        const int64_t v = c.first + i + c.lane;
        if (v < V) {
            const float w = sampling_weight(pass_logit<SMEM>(c, v, i + c.lane), c.max, c.t);
            if constexpr (SMEM) c.sw[c.local0 + i + c.lane] = w;
            else c.W[v] = w;
            acc += kept_mass(c, w);
        }
    }
    {
        const u64 wm = warp_sum(acc);
        if (c.lane == 0) sm.warp_mass[c.warp] = wm;
    }
    bool segments_current = true; // warp_mass holds the mass of S (below) by warp
    u64 lo = 0;                   // kept: key ≥ lo

    // 5. Top-k over every id.
    if (s.top_k > 0 && s.top_k < V) {
        lo = radix_select_kth<CS, SMEM>(c, sm, par, u64(s.top_k));
        segments_current = false;
    }
    // 6–7. The draw, in rounds over a shrinking set S of kept ids (S₀ = every kept id): the block,
    // then the warp, then the id whose cumulative mass holds r; with top-p, accepted when the
    // kept mass above it is under the target, else S keeps only the ids above it.
    const bool top_p = s.top_p < 1.0f;
    const u64 random = sampling_random(s.seed, s.counter);
    u64 target = 0, s_lo = lo; // S = {kept, key ≥ s_lo}
    for (int round = 0; round < sampling_max_rounds; ++round) {
        if (!segments_current) {
            u64 a = 0;
            for (int64_t i = 0; i < c.seg; i += 32) {
                const int64_t v = c.first + i + c.lane;
                if (v < V && sampling_key(pass_logit<SMEM>(c, v, i + c.lane), v) >= s_lo)
                    a += kept_mass(c, pass_weight<SMEM>(c, v, i + c.lane));
            }
            const u64 wm = warp_sum(a);
            if (c.lane == 0) sm.warp_mass[c.warp] = wm;
        }
        segments_current = false;
        __syncthreads();
        if (threadIdx.x == 0) {
            u64 a = 0;
            for (int w = 0; w < kWarps; ++w) a += sm.warp_mass[w];
            sm.xs[par] = a;
        }
        cl_sync<CS>();
        u64 base = 0, mine = 0, mass = 0;
        for (unsigned k = 0; k < unsigned(CS); ++k) {
            const u64 b = *cl_peer<CS>(&sm.xs[par], k);
            if (k < rank) base += b;
            if (k == rank) mine = b;
            mass += b;
        }
        par ^= 1;
        // Round ≥ 1 starts with S = {kept ids above the rejected draw}, whose mass reached the
        // target (else that draw would have been accepted), so it holds the top-p set.
        if (round == 0 && top_p) target = sampling_target(s.top_p, mass);
        const u64 r = sampling_mulhi(sampling_round_random(random, round), mass);
        if (r >= base && r - base < mine) {
            u64 wb = base;
            int owner = kWarps - 1;
            for (int w = 0; w < kWarps; ++w) {
                if (r - wb < sm.warp_mass[w]) {
                    owner = w;
                    break;
                }
                wb += sm.warp_mass[w];
            }
            if (c.warp == owner) {
                for (int64_t i = 0; i < c.seg; i += 32) {
                    const int64_t v = c.first + i + c.lane;
                    u64 q = 0, key = 0;
                    if (v < V) {
                        key = sampling_key(pass_logit<SMEM>(c, v, i + c.lane), v);
                        if (key >= s_lo) q = kept_mass(c, pass_weight<SMEM>(c, v, i + c.lane));
                    }
                    const u64 inc = warp_inclusive_sum(q, c.lane);
                    const unsigned hit = __ballot_sync(~0u, r - wb < inc);
                    if (hit) {
                        if (c.lane == __ffs(hit) - 1) sm.pick = key;
                        break;
                    }
                    wb += __shfl_sync(~0u, inc, 31);
                }
            }
        }
        if (!top_p) {
            __syncthreads();
            if (r >= base && r - base < mine && threadIdx.x == 0) write(sampling_key_id(sm.pick));
            cl_sync<CS>(); // no block leaves while a peer may still read its shared memory
            return;
        }
        // Every block learns the drawn key (the holder's slot; the others hold 0).
        __syncthreads();
        if (threadIdx.x == 0) sm.xs[par] = (r >= base && r - base < mine) ? sm.pick : 0;
        cl_sync<CS>();
        u64 drawn = 0;
        for (unsigned k = 0; k < unsigned(CS); ++k) drawn = max(drawn, *cl_peer<CS>(&sm.xs[par], k));
        par ^= 1;
        // The kept mass above the drawn id: its warps' shares are the next round's segments.
        u64 a = 0;
        for (int64_t i = 0; i < c.seg; i += 32) {
            const int64_t v = c.first + i + c.lane;
            if (v < V && sampling_key(pass_logit<SMEM>(c, v, i + c.lane), v) > drawn)
                a += kept_mass(c, pass_weight<SMEM>(c, v, i + c.lane));
        }
        const u64 wm = warp_sum(a);
        if (c.lane == 0) sm.warp_mass[c.warp] = wm;
        const u64 above = cluster_reduce<CS, false>(a, sm, par, c);
        if (above < target) {
            if (rank == 0 && threadIdx.x == 0) write(sampling_key_id(drawn));
            cl_sync<CS>();
            return;
        }
        s_lo = drawn + 1;
        segments_current = true;
    }
    // Every round rejected (sampling_max_rounds): the top, which the top-p set always holds.
    if (rank == 0 && threadIdx.x == 0) write(sampling_key_id(top));
    cl_sync<CS>(); // no block leaves while a peer may still read its shared memory
}

// Whether clusters of kClusterBlocks blocks of this kernel with `smem` dynamic bytes can run here.
template <bool SMEM> bool sample_clusters_fit(size_t smem) {
    static std::mutex mutex;
    static std::map<std::pair<int, size_t>, bool> known;
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return false;
    std::lock_guard lock(mutex);
    const auto key = std::make_pair(dev, smem);
    if (auto it = known.find(key); it != known.end()) return it->second;
    const void *k = reinterpret_cast<const void *>(sample_rows_kernel<kClusterBlocks, SMEM>);
    bool ok = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)) == cudaSuccess;
    if (ok) {
        cudaLaunchAttribute attr[1];
        attr[0].id = cudaLaunchAttributeClusterDimension;
        attr[0].val.clusterDim.x = kClusterBlocks;
        attr[0].val.clusterDim.y = 1;
        attr[0].val.clusterDim.z = 1;
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3(kClusterBlocks, 1, 1);
        cfg.blockDim = dim3(kThreads, 1, 1);
        cfg.dynamicSmemBytes = smem;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        int clusters = 0;
        ok = cudaOccupancyMaxActiveClusters(&clusters, sample_rows_kernel<kClusterBlocks, SMEM>, &cfg) == cudaSuccess &&
             clusters > 0;
    }
    (void)cudaGetLastError(); // a refusal means "no": the launcher takes one block a row
    known.emplace(key, ok);
    return ok;
}

// The kernel launch_sample_rows takes for n_vocab ids (its blocks a row, where its ids live).
enum class sample_path { cluster_shared, block_shared, block_global };
sample_path pick_path(int64_t n_vocab) {
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        major = 0;
    }
    const size_t cl_bytes = cache_bytes(n_vocab, kClusterBlocks);
    if (major >= 9 && n_vocab >= int64_t(kClusterBlocks) * kThreads && cl_bytes <= k_max_cache_bytes &&
        sample_clusters_fit<true>(cl_bytes))
        return sample_path::cluster_shared;
    return cache_bytes(n_vocab, 1) <= k_max_cache_bytes ? sample_path::block_shared : sample_path::block_global;
}

} // namespace

std::string sample_rows_path(int64_t n_vocab) {
    switch (pick_path(n_vocab)) {
    case sample_path::cluster_shared: return "a cluster of 8 blocks a row, ids in shared memory";
    case sample_path::block_shared: return "one block a row, ids in shared memory";
    default: return "one block a row, ids in global memory";
    }
}

cudaError_t launch_sample_rows(const sample_rows_params &p, cudaStream_t stream) {
    if (p.n_rows <= 0) return cudaSuccess;
    if (p.n_vocab <= 0 || p.n_vocab >= (int64_t(1) << 23) || !p.logits || !p.rows || !p.ids || !p.scratch)
        return cudaErrorInvalidValue;
    const dim3 block(kThreads);
    const sample_path path = pick_path(p.n_vocab);
    // A cluster a row where the vocabulary is worth eight blocks, its ids cached in shared memory.
    if (path == sample_path::cluster_shared)
        return launch_kernel_ex(-1, dim3(kClusterBlocks, 1, 1), sample_rows_kernel<kClusterBlocks, true>,
                                dim3(unsigned(p.n_rows * kClusterBlocks)), block, cache_bytes(p.n_vocab, kClusterBlocks),
                                stream, p);
    // One block a row: cached where its ids fit, else read from global memory every pass.
    const size_t one_bytes = cache_bytes(p.n_vocab, 1);
    if (path == sample_path::block_shared) {
        static std::once_flag once;
        std::call_once(once, [] {
            cudaFuncSetAttribute(reinterpret_cast<const void *>(sample_rows_kernel<1, true>),
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, int(k_max_cache_bytes));
        });
        return launch_kernel(sample_rows_kernel<1, true>, dim3(unsigned(p.n_rows)), block, one_bytes, stream, p);
    }
    return launch_kernel(sample_rows_kernel<1, false>, dim3(unsigned(p.n_rows)), block, 0, stream, p);
}

} // namespace es
