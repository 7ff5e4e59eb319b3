// Device helpers shared by the .cu files: BF16/FP8 widening and narrowing of raw bits, warp
// reductions, and the launch-check idiom. Included by device code only (never by plain C++).
#pragma once

#include "kernels/kernel_common.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <utility>

namespace es {

__device__ __forceinline__ float bf16_to_f(uint16_t h) { return __uint_as_float(uint32_t(h) << 16); }
__device__ __forceinline__ float bf16_lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }
__device__ __forceinline__ uint16_t f_to_bf16(float f) {
    return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}

__device__ __forceinline__ float fp8_to_f(uint8_t v) {
    const __half_raw h = __nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(v), __NV_E4M3);
    return __half2float(__half(h));
}
// Two E4M3 values packed little-endian in 16 bits → (low, high) as floats (exact).
__device__ __forceinline__ float2 fp8x2_to_f2(uint32_t v16) {
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(v16 & 0xffffu), __NV_E4M3);
    return __half22float2(__half2(h));
}
__device__ __forceinline__ uint8_t f_to_fp8(float f) {
    return uint8_t(__nv_cvt_float_to_fp8(f, __NV_SATFINITE, __NV_E4M3));
}
// Either FP8 encoding (kernel_common.h's fp8_format), saturating, round to nearest even: the
// host's float_to_fp8(f, F) bit for bit. The pair form packs a in the low byte, b in the high.
template <fp8_format F>
__device__ __forceinline__ uint8_t f_to_fp8_as(float f) {
    return uint8_t(__nv_cvt_float_to_fp8(f, __NV_SATFINITE, F == fp8_format::e4m3 ? __NV_E4M3 : __NV_E5M2));
}
template <fp8_format F>
__device__ __forceinline__ uint32_t f2_to_fp8x2_as(float a, float b) {
    return uint32_t(__nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE,
                                             F == fp8_format::e4m3 ? __NV_E4M3 : __NV_E5M2));
}

// FP8 KV cache elements (kernel_common.h's kv_format): the host's kv_store_fp8 / kv_read_fp8 bit
// for bit. kv_read_fp8x4: four E4M3 bytes (little-endian in w) → four BF16 of fp8 · scale, two per
// word in the same order; kv_read_fp8x16: 16 bytes → 16 BF16 (lo: elements 0–7, hi: 8–15).
__device__ __forceinline__ uint8_t kv_store_fp8_d(float x, float scale) { return f_to_fp8(x / scale); }
// (lo, hi) → BF16x2, each rounded to nearest even (one cvt.rn.bf16x2.f32), lo in the low half.
__device__ __forceinline__ uint32_t f2_to_bf16x2(float lo, float hi) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return uint32_t(__bfloat16_as_ushort(h.x)) | (uint32_t(__bfloat16_as_ushort(h.y)) << 16);
}
__device__ __forceinline__ uint2 kv_read_fp8x4(uint32_t w, float scale) {
    const float2 a = fp8x2_to_f2(w & 0xffffu), b = fp8x2_to_f2(w >> 16);
    return make_uint2(f2_to_bf16x2(a.x * scale, a.y * scale), f2_to_bf16x2(b.x * scale, b.y * scale));
}
__device__ __forceinline__ void kv_read_fp8x16(const uint4 &raw, float scale, uint4 &lo, uint4 &hi) {
    const uint2 a = kv_read_fp8x4(raw.x, scale), b = kv_read_fp8x4(raw.y, scale),
                c = kv_read_fp8x4(raw.z, scale), d = kv_read_fp8x4(raw.w, scale);
    lo = make_uint4(a.x, a.y, b.x, b.y);
    hi = make_uint4(c.x, c.y, d.x, d.y);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// A logit as a 64-bit key whose unsigned order is "greater value, or equal value and lower id":
// the value's order-preserving bits above ~id. NaN is key 0 (never a candidate, below every
// value, −inf included); −0 is keyed as +0 (they tie, as in the sampler's comparisons).
// topk_logits and the greedy pick of the head's GEMV (gemv.cuh: gemv_pick) order by it.
__device__ __forceinline__ unsigned long long logit_key(float v, int64_t id) {
    if (isnan(v)) return 0ull;
    unsigned u = __float_as_uint(v);
    if ((u & 0x7fffffffu) == 0) u = 0;
    const unsigned ord = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return (static_cast<unsigned long long>(ord) << 32) | (0xffffffffu - unsigned(id));
}
// The id a key was made from; −1 for key 0 (no value).
__device__ __forceinline__ int32_t logit_key_id(unsigned long long k) {
    return (k >> 32) == 0 ? -1 : int32_t(0xffffffffu - unsigned(k & 0xffffffffu));
}

__device__ __forceinline__ float silu_f(float g) { return g / (1.0f + expf(-g)); }

__host__ __device__ inline bool aligned16(const void *p) {
    return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

inline unsigned ceil_div_u(int64_t a, int64_t b) { return unsigned((a + b - 1) / b); }

// ---- thread-block clusters (compute capability 9.0) ---------------------------------------------
// A block may touch a peer's shared memory only once the peer has started. Kernels that push into
// their peers' shared memory before their first full cluster barrier arrive here at their start
// (cluster_started_arrive) and wait just before the first push (cluster_started_wait): every
// thread of the cluster calls both, once. By then the peers have long started, so the wait costs
// nothing on the critical path. No-ops below 9.0.
__device__ __forceinline__ void cluster_started_arrive() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
#endif
}
__device__ __forceinline__ void cluster_started_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
#endif
}

// ---- programmatic dependent launch (kernel_common.h) -------------------------------------------
// pdl_wait: blocks until every kernel this one may overlap has finished and its writes are
// visible; call it before the first access to memory another kernel writes or reads (a no-op
// when the kernel was launched normally). pdl_release: lets the next kernel on the stream be
// launched now (it still waits in its own pdl_wait for this one to finish).
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_release() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
// Starts moving the 128-byte line holding p from device memory into L2 (no register result).
__device__ __forceinline__ void prefetch_l2(const void *p) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

// This translation unit's copy of the launch-timeline buffer (kernel_common.h: set_kernel_timeline).
namespace {
__device__ unsigned long long *g_kernel_timeline = nullptr;
__host__ cudaError_t set_this_unit_kernel_timeline(unsigned long long *buf) {
    return cudaMemcpyToSymbol(g_kernel_timeline, &buf, sizeof buf);
}
struct kernel_timeline_registrar {
    kernel_timeline_registrar() { register_kernel_timeline_setter(&set_this_unit_kernel_timeline); }
};
const kernel_timeline_registrar g_kernel_timeline_registrar;
} // namespace

__device__ __forceinline__ unsigned long long global_timer_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// The usual opening of a kernel: wait for the previous kernel, then let the next one launch.
// Block (0, 0, 0)'s thread 0 records the wait's start and end while a timeline is set.
__device__ __forceinline__ void pdl_enter() {
    unsigned long long *tl = nullptr, ready = 0;
    if (threadIdx.x + threadIdx.y + threadIdx.z + blockIdx.x + blockIdx.y + blockIdx.z == 0) {
        tl = g_kernel_timeline;
        if (tl) ready = global_timer_ns();
    }
    pdl_wait();
    if (tl) {
        const unsigned long long released = global_timer_ns();
        const unsigned i = atomicAdd(reinterpret_cast<unsigned *>(tl), 1u);
        if (i < kernel_timeline_max) {
            tl[1 + 2 * i] = ready;
            tl[2 + 2 * i] = released;
        }
    }
    pdl_release();
}

// Counters between two kernels in flight together (programmatic launch: the consumer's blocks
// start only once every producer block has started, so a consumer block waiting for producer
// blocks cannot keep them from running). The producer block, its results written, adds n
// (every thread calls it: a barrier, then thread 0's fence and add, release); the consumer block
// waits until the counter reaches target (thread 0 polls with acquire loads, then a barrier, after
// which every thread's loads see what the producers wrote before their adds). A wait that never
// ends (a producer that does not count: a bug) prints the count it waited for and traps after
// ~2^24 polls (seconds), so it fails the launch with an error instead of hanging the process.
__device__ __forceinline__ void block_count_add(unsigned *c, unsigned n) {
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(c, n);
    }
}
__device__ __forceinline__ void block_count_wait(const unsigned *c, unsigned target) {
    if (threadIdx.x == 0)
        for (unsigned polls = 0;; ++polls) {
            unsigned v;
            asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(c) : "memory");
            if (v >= target) break;
            if (polls == (1u << 24)) { // ~10 s: a count nobody will make; say which, then stop
                printf("expertscope: block (%d, %d, %d) waited for a count of %u at %p, found %u; trapping\n",
                       blockIdx.x, blockIdx.y, blockIdx.z, target, static_cast<const void *>(c), v);
                __trap();
            }
            __nanosleep(64);
        }
    __syncthreads();
}

// Called by every thread once the block's results are written: true in every thread of the last
// of n_blocks blocks to arrive at *counter (bumped after a fence, so the others' writes are
// visible to it). The caller resets the counter for the next launch.
__device__ __forceinline__ bool block_arrives_last(unsigned *counter, unsigned n_blocks) {
    __shared__ bool s_last;
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence(); // this block's results are visible before the counter says so
        s_last = atomicAdd(counter, 1u) == n_blocks - 1;
    }
    __syncthreads();
    const bool last = s_last;
    if (last) __threadfence();
    return last;
}

// Launches kernel<<<grid, block, smem, stream>>>(args…), with the programmatic-serialization
// attribute when programmatic_launch() is on and, when carveout ≥ 0 (and no ES_CUDA_CARVEOUT aid
// is set), that shared-memory carveout as a launch attribute (it takes precedence over the
// kernel's own; graphs keep it per node); with `cluster` other than 1×1×1, thread-block clusters of
// that shape (compute capability 9.0; the caller checks they fit: cluster_fits). Returns the
// launch error.
template <typename... Params, typename... Args>
cudaError_t launch_kernel_ex(int carveout, dim3 cluster, void (*kernel)(Params...), dim3 grid, dim3 block,
                             size_t smem, cudaStream_t stream, Args &&...args) {
    cudaLaunchAttribute attr[3];
    unsigned n = 0;
    if (programmatic_launch()) {
        attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr[n++].val.programmaticStreamSerializationAllowed = 1;
    }
    if (kernel_carveout() >= 0)
        apply_kernel_carveout(reinterpret_cast<const void *>(kernel));
    else if (carveout >= 0) {
        attr[n].id = cudaLaunchAttributePreferredSharedMemoryCarveout;
        attr[n++].val.sharedMemCarveout = unsigned(carveout);
    }
    if (cluster.x * cluster.y * cluster.z > 1) {
        attr[n].id = cudaLaunchAttributeClusterDimension;
        attr[n].val.clusterDim.x = cluster.x;
        attr[n].val.clusterDim.y = cluster.y;
        attr[n++].val.clusterDim.z = cluster.z;
    }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = n;
    return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

template <typename... Params, typename... Args>
cudaError_t launch_kernel_carveout(int carveout, void (*kernel)(Params...), dim3 grid, dim3 block,
                                   size_t smem, cudaStream_t stream, Args &&...args) {
    return launch_kernel_ex(carveout, dim3(1, 1, 1), kernel, grid, block, smem, stream,
                            std::forward<Args>(args)...);
}

template <typename... Params, typename... Args>
cudaError_t launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                          Args &&...args) {
    return launch_kernel_carveout(-1, kernel, grid, block, smem, stream, std::forward<Args>(args)...);
}

// launch_kernel for a kernel of a decode step (every kernel a step of ≤ 8 tokens launches, and
// the small kernels prefill shares with it): with the step's shared-memory carveout,
// decode_carveout() (kernel_common.h), so that all of a step's kernels ask for one L1/shared split
// — an SM must drain before it changes splits, and every change stalls the programmatic-launch
// overlap (ncu's launch__shared_mem_config_size: left to itself the driver picks 32 KB for the
// kernels without shared memory and 132 KB for attention_decode). Which split, measured on the
// H200 with every kernel at one split (ES_CUDA_CARVEOUT; docs/benchmarks.md, designs tried): at
// 64 KB one-token steps are 1.1–1.3% shorter than at 32 KB (decode attention's ~22 KB block then
// fits beside a few of the q/k/v GEMV's 5 KB blocks and starts its loads before the wait early;
// at 228 KB the L1 is too small for the head GEMV's and the gate/up's activations), prefill of
// 512 tokens of the 21B-A3B 13% faster than with the driver's choice, and 8-token steps of the
// 0.3B 3% slower than at 32 KB. Hence 64 KB for one token and for more than 8, 32 KB for 2–8
// (decode_carveout_for_tokens).
template <auto Kernel, typename... Args>
cudaError_t launch_decode(dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args &&...args) {
    return launch_kernel_carveout(decode_carveout(), Kernel, grid, block, smem, stream,
                                  std::forward<Args>(args)...);
}
// The same in thread-block clusters of shape `cluster` (launch_kernel_ex).
template <auto Kernel, typename... Args>
cudaError_t launch_decode_clusters(dim3 cluster, dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                                   Args &&...args) {
    return launch_kernel_ex(decode_carveout(), cluster, Kernel, grid, block, smem, stream,
                            std::forward<Args>(args)...);
}

} // namespace es

namespace es {

// ---- weight-row dot products shared by the GEMV-style kernels ----------------------------------
// A "vector" step moves 16 bytes of weights per lane: 8 BF16 or 16 FP8 values.
template <bool FP8>
inline constexpr int vec_elems = FP8 ? 16 : 8;

template <bool FP8>
__device__ __forceinline__ float wval(const void *w_row, int64_t k) {
    if constexpr (FP8)
        return fp8_to_f(static_cast<const uint8_t *>(w_row)[k]);
    else
        return bf16_to_f(static_cast<const uint16_t *>(w_row)[k]);
}

// 16 bytes of activations: through the read-only cache from global memory, or (XS) a plain load,
// which also reads shared memory (the fused-norm kernels stage the normalized row there).
template <bool XS>
__device__ __forceinline__ uint4 load_x16(const uint16_t *x) {
    if constexpr (XS)
        return *reinterpret_cast<const uint4 *>(x);
    else
        return __ldg(reinterpret_cast<const uint4 *>(x));
}

// Σ over one 16-byte weight vector times the matching BF16 activations, loaded: x0 the first
// eight, x1 (FP8 only: sixteen weights) the next eight.
template <bool FP8>
__device__ __forceinline__ float dot_vec_loaded(const uint4 w, const uint4 x0, const uint4 x1) {
    if constexpr (!FP8) {
        return bf16_lo(w.x) * bf16_lo(x0.x) + bf16_hi(w.x) * bf16_hi(x0.x) + bf16_lo(w.y) * bf16_lo(x0.y) +
               bf16_hi(w.y) * bf16_hi(x0.y) + bf16_lo(w.z) * bf16_lo(x0.z) + bf16_hi(w.z) * bf16_hi(x0.z) +
               bf16_lo(w.w) * bf16_lo(x0.w) + bf16_hi(w.w) * bf16_hi(x0.w);
    } else {
        const uint32_t wp[4] = {w.x, w.y, w.z, w.w};
        const uint32_t xp[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
        float acc = 0.0f;
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const float2 a = fp8x2_to_f2(wp[i] & 0xffffu), b = fp8x2_to_f2(wp[i] >> 16);
            acc += a.x * bf16_lo(xp[2 * i]) + a.y * bf16_hi(xp[2 * i]) + b.x * bf16_lo(xp[2 * i + 1]) +
                   b.y * bf16_hi(xp[2 * i + 1]);
        }
        return acc;
    }
}

// The same with the activations at x (16-byte aligned), loaded as load_x16<XS>.
template <bool FP8, bool XS = false>
__device__ __forceinline__ float dot_vec(const uint4 w, const uint16_t *x) {
    const uint4 x0 = load_x16<XS>(x);
    return dot_vec_loaded<FP8>(w, x0, FP8 ? load_x16<XS>(x + 8) : x0);
}

// This lane's share of dot(w_row[kb:ke], x[kb:ke]); the caller reduces across the warp.
// VEC needs 16-byte aligned rows and kb, ke multiples of vec_elems<FP8>. Four weight vectors
// are loaded before use so several 16-byte loads are in flight per lane.
// BLK (FP8, VEC): 128×128 block scales, bs the row's scales (bs[c / 128]: fp8_scale_index), each
// 16-byte vector's product times its block's scale (a vector never straddles two blocks); the
// caller then applies no row scale.
template <bool BLK>
__device__ __forceinline__ float blk_scaled(const float *bs, int64_t kk, float d) {
    if constexpr (BLK)
        return __ldg(bs + kk / fp8_block) * d;
    else
        return d;
}

template <bool FP8, bool VEC, bool XS = false, bool BLK = false>
__device__ __forceinline__ float lane_dot(const void *w_row, const uint16_t *x, int64_t kb, int64_t ke,
                                          int lane, const float *bs = nullptr) {
    static_assert(!BLK || (FP8 && VEC), "block scales: FP8 weights, 16-byte vectors");
    float acc = 0.0f;
    if constexpr (VEC) {
        constexpr int E = vec_elems<FP8>;
        const uint4 *wv = static_cast<const uint4 *>(w_row);
        int64_t kk = kb + int64_t(lane) * E;
        for (; kk + 3 * 32 * E < ke; kk += 4 * 32 * E) {
            const uint4 a = __ldcs(wv + kk / E), b = __ldcs(wv + kk / E + 32), c = __ldcs(wv + kk / E + 64),
                        d = __ldcs(wv + kk / E + 96);
            if constexpr (BLK)
                acc += blk_scaled<BLK>(bs, kk, dot_vec<FP8, XS>(a, x + kk)) +
                       blk_scaled<BLK>(bs, kk + 32 * E, dot_vec<FP8, XS>(b, x + kk + 32 * E)) +
                       blk_scaled<BLK>(bs, kk + 64 * E, dot_vec<FP8, XS>(c, x + kk + 64 * E)) +
                       blk_scaled<BLK>(bs, kk + 96 * E, dot_vec<FP8, XS>(d, x + kk + 96 * E));
            else
                acc += dot_vec<FP8, XS>(a, x + kk) + dot_vec<FP8, XS>(b, x + kk + 32 * E) +
                       dot_vec<FP8, XS>(c, x + kk + 64 * E) + dot_vec<FP8, XS>(d, x + kk + 96 * E);
        }
        for (; kk < ke; kk += 32 * E)
            acc += blk_scaled<BLK>(bs, kk, dot_vec<FP8, XS>(__ldcs(wv + kk / E), x + kk));
    } else {
        for (int64_t kk = kb + lane; kk < ke; kk += 32) acc += wval<FP8>(w_row, kk) * bf16_to_f(x[kk]);
    }
    return acc;
}

} // namespace es

namespace es {

// lane_dot for two weight rows against the same activations, their loads interleaved (twice the
// bytes in flight per lane): the gate and up rows of one expert.
// BLK: block scales as lane_dot's, bs0 / bs1 the two rows' scales.
template <bool FP8, bool VEC, bool XS = false, bool BLK = false>
__device__ __forceinline__ float2 lane_dot2(const void *w0, const void *w1, const uint16_t *x, int64_t kb,
                                            int64_t ke, int lane, const float *bs0 = nullptr,
                                            const float *bs1 = nullptr) {
    static_assert(!BLK || (FP8 && VEC), "block scales: FP8 weights, 16-byte vectors");
    float a0 = 0.0f, a1 = 0.0f;
    if constexpr (VEC) {
        constexpr int E = vec_elems<FP8>;
        const uint4 *v0 = static_cast<const uint4 *>(w0), *v1 = static_cast<const uint4 *>(w1);
        int64_t kk = kb + int64_t(lane) * E;
        for (; kk + 32 * E < ke; kk += 2 * 32 * E) {
            const uint4 a = __ldcs(v0 + kk / E), b = __ldcs(v0 + kk / E + 32), c = __ldcs(v1 + kk / E),
                        d = __ldcs(v1 + kk / E + 32);
            if constexpr (BLK) {
                a0 += blk_scaled<BLK>(bs0, kk, dot_vec<FP8, XS>(a, x + kk)) +
                      blk_scaled<BLK>(bs0, kk + 32 * E, dot_vec<FP8, XS>(b, x + kk + 32 * E));
                a1 += blk_scaled<BLK>(bs1, kk, dot_vec<FP8, XS>(c, x + kk)) +
                      blk_scaled<BLK>(bs1, kk + 32 * E, dot_vec<FP8, XS>(d, x + kk + 32 * E));
            } else {
                a0 += dot_vec<FP8, XS>(a, x + kk) + dot_vec<FP8, XS>(b, x + kk + 32 * E);
                a1 += dot_vec<FP8, XS>(c, x + kk) + dot_vec<FP8, XS>(d, x + kk + 32 * E);
            }
        }
        for (; kk < ke; kk += 32 * E) {
            const uint4 a = __ldcs(v0 + kk / E), c = __ldcs(v1 + kk / E);
            a0 += blk_scaled<BLK>(bs0, kk, dot_vec<FP8, XS>(a, x + kk));
            a1 += blk_scaled<BLK>(bs1, kk, dot_vec<FP8, XS>(c, x + kk));
        }
    } else {
        for (int64_t kk = kb + lane; kk < ke; kk += 32) {
            const float xv = bf16_to_f(x[kk]);
            a0 += wval<FP8>(w0, kk) * xv;
            a1 += wval<FP8>(w1, kk) * xv;
        }
    }
    return make_float2(a0, a1);
}

} // namespace es

namespace es {

// ---- RMSNorm fused into a consumer kernel ------------------------------------------------------
// The fused-norm kernels (gemv's norm_in and the MoE decode kernels) normalize their input rows
// themselves instead of reading a separate rms_norm kernel's output: every block stages
//   out[m][i] = bf16(w[i] · (x[m][i] · 1/sqrt(mean(x[m]²) + eps)))      (rms_norm's arithmetic)
// for its mt ≤ MT rows in shared memory. Measured on the H200: a fusion pays only when it shortens
// the chain of dependent memory round trips after pdl_wait, so the norm weight is loaded BEFORE
// the wait: into registers (norm_weight_preload: thread i holds float4 slots i, i + nthr, … up to
// V of them; a single row then stays in registers between the sum of squares and the scaling: the
// MoE decode kernels) or into the shared memory the rows are normalized into (norm_weight_stage +
// block_rms_norm_staged: gemv's fused norm, where the registers cost occupancy).
// block_rms_norm_to_smem is called by every thread of the block after pdl_wait and ends with a
// barrier. Needs H % 4 == 0, x and ldx 16-byte aligned, w 8-byte aligned; red holds 32·MT floats.
// The sum of squares is in a different order from rms_norm's, so a value can round to the
// neighbouring BF16 (the twins normalize with rms_norm_ref: tolerances cover it).
template <int V>
struct norm_weight_regs {
    uint2 w[V > 0 ? V : 1];
};

template <int V>
__device__ __forceinline__ void norm_weight_preload(const uint16_t *w, int64_t H, norm_weight_regs<V> &r) {
    const int64_t n4 = H / 4;
#pragma unroll
    for (int j = 0; j < V; ++j) {
        const int64_t i = threadIdx.x + int64_t(j) * blockDim.x;
        if (i < n4) r.w[j] = __ldg(reinterpret_cast<const uint2 *>(w) + i);
    }
}

__device__ __forceinline__ uint2 norm_scale4(uint2 wb, float4 v, float scale) {
    const float o0 = bf16_lo(wb.x) * (v.x * scale), o1 = bf16_hi(wb.x) * (v.y * scale),
                o2 = bf16_lo(wb.y) * (v.z * scale), o3 = bf16_hi(wb.y) * (v.w * scale);
    return make_uint2(uint32_t(f_to_bf16(o0)) | (uint32_t(f_to_bf16(o1)) << 16),
                      uint32_t(f_to_bf16(o2)) | (uint32_t(f_to_bf16(o3)) << 16));
}

// Every thread's partial sums of squares of MT rows → each row's 1/sqrt(mean + eps) in every
// thread (a barrier inside; red holds 32·MT floats).
template <int MT>
__device__ __forceinline__ void block_rms_scales(const float (&ss)[MT], int64_t H, float eps, float *red,
                                                 float (&scale)[MT]) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
#pragma unroll
    for (int m = 0; m < MT; ++m) {
        const float v = warp_sum(ss[m]);
        if (lane == 0) red[m * 32 + warp] = v;
    }
    __syncthreads();
#pragma unroll
    for (int m = 0; m < MT; ++m) {
        const float v = warp_sum(lane < nw ? red[m * 32 + lane] : 0.0f);
        scale[m] = 1.0f / sqrtf(v / float(H) + eps);
    }
}

template <int MT, int V>
__device__ __forceinline__ void block_rms_norm_to_smem(const float *x, int64_t ldx, int mt, const uint16_t *w,
                                                       const norm_weight_regs<V> &wr, int64_t H, float eps,
                                                       uint16_t *out, float *red) {
    const int tid = threadIdx.x, nthr = blockDim.x, warp = tid / 32, lane = tid % 32, nw = nthr / 32;
    const int64_t n4 = H / 4;
    if (MT == 1 && V > 0 && n4 <= int64_t(V) * nthr) {
        // One row, in registers: one pass over memory.
        float4 v[V > 0 ? V : 1];
        float ss = 0.0f;
#pragma unroll
        for (int j = 0; j < V; ++j) {
            const int64_t i = tid + int64_t(j) * nthr;
            if (i < n4) {
                v[j] = reinterpret_cast<const float4 *>(x)[i];
                ss += v[j].x * v[j].x + v[j].y * v[j].y + v[j].z * v[j].z + v[j].w * v[j].w;
            }
        }
        ss = warp_sum(ss);
        if (lane == 0) red[warp] = ss;
        __syncthreads();
        const float scale = 1.0f / sqrtf(warp_sum(lane < nw ? red[lane] : 0.0f) / float(H) + eps);
#pragma unroll
        for (int j = 0; j < V; ++j) {
            const int64_t i = tid + int64_t(j) * nthr;
            if (i < n4) reinterpret_cast<uint2 *>(out)[i] = norm_scale4(wr.w[j], v[j], scale);
        }
        __syncthreads();
        return;
    }
    float ss[MT];
#pragma unroll
    for (int m = 0; m < MT; ++m) ss[m] = 0.0f;
    for (int64_t i = tid; i < n4; i += nthr)
#pragma unroll
        for (int m = 0; m < MT; ++m)
            if (m < mt) {
                const float4 v = reinterpret_cast<const float4 *>(x + m * ldx)[i];
                ss[m] += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
            }
    float scale[MT];
    block_rms_scales<MT>(ss, H, eps, red, scale);
    auto put = [&](int64_t i, uint2 wb) {
#pragma unroll
        for (int m = 0; m < MT; ++m)
            if (m < mt)
                reinterpret_cast<uint2 *>(out + m * H)[i] =
                    norm_scale4(wb, reinterpret_cast<const float4 *>(x + m * ldx)[i], scale[m]);
    };
#pragma unroll
    for (int j = 0; j < V; ++j) { // the preloaded slots (compile-time register indices)
        const int64_t i = tid + int64_t(j) * nthr;
        if (i < n4) put(i, wr.w[j]);
    }
    for (int64_t i = tid + int64_t(V) * nthr; i < n4; i += nthr) put(i, __ldg(reinterpret_cast<const uint2 *>(w) + i));
    __syncthreads();
}

// The norm weight staged in the output buffer instead of registers (the kernel's shared memory
// for its normalized rows is at least H BF16 long): before the wait every thread copies its share of
// w into out[0, H) — 16-byte cp.async where w is 16-byte aligned and H % 8 == 0, else 8-byte
// loads and stores — and keeps nothing in registers across the wait; block_rms_norm_staged then
// reads the weight of element group i from out[i] and writes the normalized rows over it (the
// same thread reads and writes group i; the sum of squares' barrier orders the copies before).
// Frees the registers norm_weight_preload holds: the fused q|k|v GEMV went from 96 registers (5
// blocks an SM, 1.36 waves of the 21B-A3B's 896 blocks) to 63 (one wave); H200, 21B-A3B decode
// step 1,741 → 1,701 µs (that launch 7.85 → 6.10 µs a layer), 0.3B unchanged (403 → 402 µs).
__device__ __forceinline__ void norm_weight_stage(const uint16_t *w, int64_t H, uint16_t *out) {
    if (H % 8 == 0 && (reinterpret_cast<uintptr_t>(w) & 15) == 0) {
        for (int64_t i = threadIdx.x; i < H / 8; i += blockDim.x) {
            const uint32_t dst = static_cast<uint32_t>(__cvta_generic_to_shared(out + i * 8));
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(w + i * 8) : "memory");
        }
        asm volatile("cp.async.commit_group;\n" ::: "memory");
    } else {
        for (int64_t i = threadIdx.x; i < H / 4; i += blockDim.x)
            reinterpret_cast<uint2 *>(out)[i] = __ldg(reinterpret_cast<const uint2 *>(w) + i);
    }
}

// The rows a staged norm reads: src(m, i) is element group i (4 values) of row m as fp32.
struct f32_rows { // fp32 rows with a leading dimension
    const float *x;
    int64_t ldx;
    __device__ __forceinline__ float4 operator()(int m, int64_t i) const {
        return reinterpret_cast<const float4 *>(x + m * ldx)[i];
    }
};
struct bf16_row { // one BF16 row (an embedding table's), widened exactly
    const uint16_t *row;
    __device__ __forceinline__ float4 operator()(int, int64_t i) const {
        const uint2 v = __ldg(reinterpret_cast<const uint2 *>(row) + i);
        return make_float4(bf16_lo(v.x), bf16_hi(v.x), bf16_lo(v.y), bf16_hi(v.y));
    }
};

// A BF16 row of n elements (n % 4 == 0, row 8-byte and out 16-byte aligned) widened exactly into
// out by the block: 4 elements a load, a thread's U loads of a round issued together before its
// stores (a loop of load-store pairs waits on each store: ptxas cannot tell the row from out).
// The embedding kernel's rows and the embedding folded into layer 0's GEMV (gemv.cu).
__device__ __forceinline__ void block_widen_bf16_row(const uint16_t *row, int64_t n, float *out) {
    constexpr int U = 8; // 4,096 elements a round at 128 threads, 8,192 at 256
    const int64_t n4 = n / 4, nthr = blockDim.x;
    for (int64_t i0 = threadIdx.x; i0 < n4; i0 += U * nthr) {
        float4 v[U];
#pragma unroll
        for (int u = 0; u < U; ++u)
            if (i0 + u * nthr < n4) v[u] = bf16_row{row}(0, i0 + u * nthr);
#pragma unroll
        for (int u = 0; u < U; ++u)
            if (i0 + u * nthr < n4) reinterpret_cast<float4 *>(out)[i0 + u * nthr] = v[u];
    }
}

// After pdl_wait, by every thread (ends with a barrier): the rows of src normalized into out, the
// weight taken from out (norm_weight_stage). The first pass over the rows issues up to 8 loads
// per thread at once, the second, which finds them in L1, 4.
template <int MT, typename Rows>
__device__ __forceinline__ void block_rms_norm_staged(const Rows &src, int mt, int64_t H, float eps,
                                                      uint16_t *out, float *red) {
    constexpr int U = 8;
    const int tid = threadIdx.x, nthr = blockDim.x;
    const int64_t n4 = H / 4;
    asm volatile("cp.async.wait_all;\n" ::: "memory");
    float ss[MT];
#pragma unroll
    for (int m = 0; m < MT; ++m) ss[m] = 0.0f;
#pragma unroll
    for (int m = 0; m < MT; ++m) {
        if (m >= mt) break;
        for (int64_t i0 = tid; i0 < n4; i0 += int64_t(U) * nthr) {
            float4 v[U];
#pragma unroll
            for (int j = 0; j < U; ++j) {
                const int64_t i = i0 + int64_t(j) * nthr;
                v[j] = i < n4 ? src(m, i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
#pragma unroll
            for (int j = 0; j < U; ++j) ss[m] += v[j].x * v[j].x + v[j].y * v[j].y + v[j].z * v[j].z + v[j].w * v[j].w;
        }
    }
    float scale[MT];
    block_rms_scales<MT>(ss, H, eps, red, scale);
    constexpr int U2 = 4; // x is in L1 now: fewer loads at once, fewer registers
    for (int64_t i0 = tid; i0 < n4; i0 += int64_t(U2) * nthr) {
        uint2 wb[U2];
#pragma unroll
        for (int j = 0; j < U2; ++j) {
            const int64_t i = i0 + int64_t(j) * nthr;
            if (i < n4) wb[j] = reinterpret_cast<const uint2 *>(out)[i];
        }
#pragma unroll
        for (int m = MT - 1; m >= 0; --m) { // row 0 last: it overwrites the weight
            if (m >= mt) continue;
            float4 v[U2];
#pragma unroll
            for (int j = 0; j < U2; ++j) {
                const int64_t i = i0 + int64_t(j) * nthr;
                if (i < n4) v[j] = src(m, i);
            }
#pragma unroll
            for (int j = 0; j < U2; ++j) {
                const int64_t i = i0 + int64_t(j) * nthr;
                if (i < n4) reinterpret_cast<uint2 *>(out + m * H)[i] = norm_scale4(wb[j], v[j], scale[m]);
            }
        }
    }
    __syncthreads();
}

template <int MT>
__device__ __forceinline__ void block_rms_norm_staged(const float *x, int64_t ldx, int mt, int64_t H,
                                                      float eps, uint16_t *out, float *red) {
    block_rms_norm_staged<MT>(f32_rows{x, ldx}, mt, H, eps, out, red);
}

// Without preloaded weights (they are read after the wait).
template <int MT>
__device__ __forceinline__ void block_rms_norm_to_smem(const float *x, int64_t ldx, int mt, const uint16_t *w,
                                                       int64_t H, float eps, uint16_t *out, float *red) {
    const norm_weight_regs<0> none{};
    block_rms_norm_to_smem<MT, 0>(x, ldx, mt, w, none, H, eps, out, red);
}

} // namespace es
