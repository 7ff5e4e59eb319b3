// SPDX-License-Identifier: GPL-3.0-or-later
// handoff_bench: what one kernel boundary of the decode chain costs, three ways. A chain of K
// one-token GEMVs (n × n FP8-sized byte weights, one warp a row, each kernel's input the previous
// one's output) captured in a CUDA graph and replayed:
//   plain     stream order (no programmatic launch)
//   pdl       programmatic launch: every block loads its weights into registers, then
//             griddepcontrol.wait, then lets the next kernel launch (kernels/kernel_common.cuh:
//             pdl_enter)
//   counters  programmatic launch; block 0 waits as above, every other block lets the next
//             kernel launch at once and waits for a counter of the previous kernel's blocks
//             (block_count_add / block_count_wait), so "two launches back has finished" still
//             holds through block 0
// and each with 4 or 8 warps a block and its weights in registers, asked of L2, or loaded after
// the wait. Prints µs a kernel for each and checks that the toy chains' outputs agree bit for bit.
// Built with -DHANDOFF_WITH_ES against es_kernels, the engine's own GEMV (launch_gemv) runs in the
// same kind of chain at the 0.3B's and the 21B-A3B's shapes, and `handoff_bench head [launches
// [replays]]` times the LM head's GEMV against a read-only stream of its bytes (head_main below).
// `handoff_bench ramp [launches [replays]]` times read-only streams of 2–512 MB a launch (ramp_main),
// `handoff_bench experts [replays]` the routed gate/up's access pattern as a pure read (experts_main),
// `handoff_bench front [replays]` moe_front with and without its shared rows against pure reads
// of their bytes (front_main).
// Usage: handoff_bench [K [replays]] | handoff_bench head|ramp [launches [replays]] | handoff_bench
// experts|front [replays]. Built on a machine with the CUDA toolkit, it runs on the GPU machine
// as it is (cudart linked statically; cuBLASLt is not needed by what it calls):
//   nvcc -O3 -std=c++17 -arch=sm_90a -DHANDOFF_WITH_ES -Ikernels -o handoff_bench tools/handoff_bench.cu \
//        build/cuda/kernels/libes_kernels.a build/cuda/kernels/libes_kernel_refs.a -lcublasLt -lgomp
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#ifdef HANDOFF_WITH_ES
#include "kernels/gemv.cuh"
#include "kernels/kernel_common.cuh"
#include "kernels/moe_front.cuh"
#include "kernels/moe_gate_up_gemv.cuh"
#endif

#define CHECK(x)                                                                                             \
    do {                                                                                                     \
        cudaError_t e_ = (x);                                                                                \
        if (e_ != cudaSuccess) {                                                                             \
            std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));         \
            std::exit(1);                                                                                    \
        }                                                                                                    \
    } while (0)

// A launch of grid × block threads on s, with programmatic stream serialization when pdl (cfg.attrs
// points into the object, so it is neither copied nor moved).
struct launch_config {
    cudaLaunchAttribute attr{};
    cudaLaunchConfig_t cfg{};
    launch_config(dim3 grid, dim3 block, cudaStream_t s, bool pdl) {
        attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attr.val.programmaticStreamSerializationAllowed = 1;
        cfg.gridDim = grid;
        cfg.blockDim = block;
        cfg.stream = s;
        cfg.attrs = &attr;
        cfg.numAttrs = pdl ? 1 : 0;
    }
    launch_config(const launch_config &) = delete;
    launch_config &operator=(const launch_config &) = delete;
};

__device__ __forceinline__ void grid_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void grid_release() {
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// One GEMV of the chain: y[r] = tanh(4e-4 · Σ_c (w[r][c] − 128) · x[c]), n rows of n bytes, a warp a row.
// Each lane holds n / 32 bytes of its row (n = 1024: two 16-byte vectors).
// WMODE: 0 the lane's weights into registers before the wait, 1 asked of L2 before the wait
// (prefetch.global.L2) and loaded after it, 2 loaded after the wait only.
template <int MODE, int VECS, int WARPS, int WMODE>
__global__ void __launch_bounds__(32 * WARPS)
    chain_gemv(const uint8_t *__restrict__ w, const float *x, float *y, int n, const unsigned *wait_count,
               unsigned wait_target, unsigned *done_count) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int row = blockIdx.x * WARPS + warp;
    uint4 wv[VECS];
    const uint4 *wr = reinterpret_cast<const uint4 *>(w + size_t(row) * n);
    if (WMODE == 0)
#pragma unroll
        for (int v = 0; v < VECS; ++v) wv[v] = __ldcs(wr + v * 32 + lane);
    if (WMODE == 1)
        for (int off = lane * 128; off < n; off += 32 * 128)
            asm volatile("prefetch.global.L2 [%0];" ::"l"(w + size_t(row) * n + off));
    if (MODE == 1 || (MODE == 2 && blockIdx.x == 0)) grid_wait();
    if (MODE != 0) grid_release();
    if (MODE == 2 && blockIdx.x != 0 && wait_count) {
        if (threadIdx.x == 0)
            for (;;) {
                unsigned c;
                asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(c) : "l"(wait_count) : "memory");
                if (c >= wait_target) break;
                __nanosleep(32);
            }
        __syncthreads();
    }
    if (WMODE != 0)
#pragma unroll
        for (int v = 0; v < VECS; ++v) wv[v] = __ldcs(wr + v * 32 + lane);
    float acc = 0.0f;
#pragma unroll
    for (int v = 0; v < VECS; ++v) {
        const int c0 = (v * 32 + lane) * 16;
        const uint8_t *b = reinterpret_cast<const uint8_t *>(&wv[v]);
        const float4 *xs = reinterpret_cast<const float4 *>(x + c0);
#pragma unroll
        for (int q = 0; q < 4; ++q) {
            const float4 xv = xs[q];
            acc += (float(b[4 * q]) - 128.0f) * xv.x + (float(b[4 * q + 1]) - 128.0f) * xv.y +
                   (float(b[4 * q + 2]) - 128.0f) * xv.z + (float(b[4 * q + 3]) - 128.0f) * xv.w;
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) y[row] = tanhf(acc * 4e-4f);
    if (MODE == 2) {
        __syncthreads();
        if (threadIdx.x == 0) {
            __threadfence();
            atomicAdd(done_count, 1u);
        }
    }
}

struct Chain {
    int n, k;
    uint8_t *w;
    float *act; // (k + 1) · n
    unsigned *counts;
};

template <int MODE, int WARPS, int WMODE>
void launch_chain(const Chain &c, cudaStream_t s) {
    constexpr int VECS = 2; // n = 1024
    const unsigned blocks = unsigned(c.n / WARPS);
    if (MODE == 2) CHECK(cudaMemsetAsync(c.counts, 0, sizeof(unsigned) * c.k, s));
    for (int i = 0; i < c.k; ++i) {
        const launch_config lc(dim3(blocks), dim3(32 * WARPS), s, MODE != 0 && i > 0);
        const uint8_t *w = c.w + size_t(i) * c.n * c.n;
        const float *x = c.act + size_t(i) * c.n;
        float *y = c.act + size_t(i + 1) * c.n;
        const unsigned *wc = i > 0 ? c.counts + (i - 1) : nullptr;
        CHECK(cudaLaunchKernelEx(&lc.cfg, chain_gemv<MODE, VECS, WARPS, WMODE>, w, x, y, c.n, wc, blocks,
                                 c.counts + i));
    }
}

__global__ void fill(uint8_t *w, size_t n, uint32_t seed) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
         i += size_t(gridDim.x) * blockDim.x) {
        uint32_t h = uint32_t(i) * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        w[i] = uint8_t(h);
    }
}

// The launches `enqueue` makes on s, captured into an instantiated graph.
template <typename F>
cudaGraphExec_t capture(cudaStream_t s, F &&enqueue) {
    cudaGraph_t g;
    cudaGraphExec_t exec;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    enqueue();
    CHECK(cudaStreamEndCapture(s, &g));
    CHECK(cudaGraphInstantiate(&exec, g, 0));
    CHECK(cudaGraphDestroy(g));
    return exec;
}

// Milliseconds of `reps` replays of exec back to back (after `warm` untimed ones).
float time_replays(cudaGraphExec_t exec, cudaStream_t s, int warm, int reps, cudaEvent_t e0, cudaEvent_t e1) {
    for (int i = 0; i < warm; ++i) CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaEventRecord(e0, s));
    for (int i = 0; i < reps; ++i) CHECK(cudaGraphLaunch(exec, s));
    CHECK(cudaEventRecord(e1, s));
    CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, e0, e1));
    return ms;
}

#ifdef HANDOFF_WITH_ES
// The engine's own one-token GEMV (kernels/gemv.cu) in the same kind of chain: K launches of
// launch_gemv, FP8 weights [n, k] (scales 1), a constant BF16 input, each launch adding into one
// fp32 output (no y_ready: the previous launch writes it) — so only the kernel's own hand-off
// and work are measured, as the toy chain's.
struct EsChain {
    int64_t n, k;
    int count;
    uint8_t *w;
    float *scale, *y;
    uint16_t *x;
};
// PRE: 1 sets the register preload's floor to 0 for these launches (gemv.cuh:
// set_gemv_preload_min_bytes), so any matrix whose row share fits takes it.
template <int64_t N, int64_t K, int PRE = 0>
void launch_es_chain(const Chain &c, cudaStream_t s) {
    static EsChain e{};
    if (!e.w) {
        e = {N, K, c.k, nullptr, nullptr, nullptr, nullptr};
        CHECK(cudaMalloc(&e.w, size_t(e.count) * N * K));
        CHECK(cudaMalloc(&e.scale, sizeof(float) * N));
        CHECK(cudaMalloc(&e.y, sizeof(float) * N));
        CHECK(cudaMalloc(&e.x, 2 * K));
        CHECK(cudaMemset(e.y, 0, sizeof(float) * N));
        fill<<<1024, 256>>>(e.w, size_t(e.count) * N * K, 777u);
        std::vector<float> one(N, 1.0f / 64);
        CHECK(cudaMemcpy(e.scale, one.data(), sizeof(float) * N, cudaMemcpyHostToDevice));
        std::vector<uint16_t> xb(K, 0x3c00); // bf16 0.0078125
        CHECK(cudaMemcpy(e.x, xb.data(), 2 * K, cudaMemcpyHostToDevice));
        CHECK(cudaDeviceSynchronize());
    }
    es::set_programmatic_launch(true);
    const int64_t floor = es::gemv_preload_min_bytes();
    if (PRE) es::set_gemv_preload_min_bytes(0);
    for (int i = 0; i < e.count; ++i) {
        es::gemv_params p;
        p.x = reinterpret_cast<const es::bf16_t *>(e.x);
        p.ldx = K;
        p.w = e.w + size_t(i) * N * K;
        p.wfmt = es::weight_format::fp8_e4m3;
        p.w_scale = e.scale;
        p.y = e.y;
        p.ldy = N;
        p.n_tokens = 1;
        p.n = N;
        p.k = K;
        p.accumulate = true;
        p.k_splits = 1;
        CHECK(es::launch_gemv(p, s));
    }
    es::set_gemv_preload_min_bytes(floor);
}
#endif

#ifdef HANDOFF_WITH_ES
// `handoff_bench head`: the LM head's one-token BF16 GEMV (n = 103,424 rows) as the engine runs it
// (launch_gemv: gemv_rows_kernel) against a read-only stream of the same bytes (the ceiling), each
// replayed as a graph of `count` launches back to back under programmatic launch.
// PDL: behind the programmatic-launch wait (as every decode kernel), the next launch let go at once.
template <bool PDL = false>
__global__ void __launch_bounds__(128) stream_read(const uint4 *w, size_t n_vec, unsigned *sink) {
    if (PDL) {
        grid_wait();
        grid_release();
    }
    uint32_t acc = 0;
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n_vec;
         i += size_t(gridDim.x) * blockDim.x) {
        const uint4 v = __ldcs(w + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x12345678u) sink[0] = acc; // keeps the loads
}

// Clears each BF16 element's top exponent bit: finite values below 2.
__global__ void mask_bf16(uint16_t *w, size_t n) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
        w[i] &= 0xbfffu;
}

// A stream, its timing events and the device's SM count, for the timed modes below.
struct timing {
    cudaStream_t s;
    cudaEvent_t e0, e1;
    int sms = 0;
    timing() {
        CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        CHECK(cudaEventCreate(&e0));
        CHECK(cudaEventCreate(&e1));
        CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    }
};

// `handoff_bench ramp [launches [replays]]`: what a read-only stream of S bytes gets when it is one
// launch of a chain, for the sizes of the decode step's launches (2–64 MB) and beyond: `launches`
// streams of S each over consecutive regions of a 2 GB buffer (no region in L2 when its turn
// comes), back to back in one graph, behind the programmatic-launch wait and in plain stream order.
int ramp_main(int count, int reps) {
    const timing tm;
    cudaStream_t s = tm.s;
    const cudaEvent_t e0 = tm.e0, e1 = tm.e1;
    const int sms = tm.sms;
    const size_t total = size_t(2) << 30;
    uint8_t *w;
    unsigned *sink;
    CHECK(cudaMalloc(&w, total));
    CHECK(cudaMalloc(&sink, 4));
    fill<<<1024, 256>>>(w, total, 7u);
    CHECK(cudaDeviceSynchronize());
    std::printf("| MB a launch | launches | order | us a launch | TB/s |\n|---:|---:|---|---:|---:|\n");
    for (double mb : {2.0, 4.0, 9.2, 16.0, 23.6, 32.0, 47.2, 64.0, 128.0, 256.0, 512.0}) {
        const size_t bytes = size_t(mb * 1e6) / 16 * 16;
        const int n = int(std::min<size_t>(size_t(count), total / bytes));
        for (int pdl = 0; pdl < 2; ++pdl) {
            auto launch_all = [&] {
                for (int i = 0; i < n; ++i) {
                    const uint4 *src = reinterpret_cast<const uint4 *>(w + size_t(i) * bytes);
                    const launch_config lc(dim3(unsigned(sms * 16)), dim3(128), s, pdl != 0);
                    CHECK(cudaLaunchKernelEx(&lc.cfg, pdl ? stream_read<true> : stream_read<false>, src,
                                             bytes / 16, sink));
                }
            };
            launch_all();
            CHECK(cudaStreamSynchronize(s));
            cudaGraphExec_t exec = capture(s, launch_all);
            double us = 0.0;
            const int rounds = 3;
            for (int r = 0; r < rounds; ++r) us += 1e3 * time_replays(exec, s, 1, reps, e0, e1) / reps / n / rounds;
            std::printf("| %.1f | %d | %s | %.2f | %.2f |\n", bytes / 1e6, n, pdl ? "programmatic" : "stream", us,
                        bytes / (us * 1e-6) / 1e12);
            CHECK(cudaGraphExecDestroy(exec));
        }
    }
    CHECK(cudaFree(w));
    CHECK(cudaFree(sink));
    return 0;
}

// Each of `variants` graphs of `layers` launches (launch(v, l) enqueues layer l of variant v; one
// eager pass first), replayed `reps` times in each of five rounds, the variants alternating: µs a
// launch, per variant.
template <typename F>
std::vector<double> time_layer_variants(int variants, int layers, int reps, const timing &tm, F &&launch) {
    constexpr int max_variants = 16;
    if (variants > max_variants) {
        std::fprintf(stderr, "time_layer_variants: at most %d variants\n", max_variants);
        std::exit(1);
    }
    cudaGraphExec_t exec[max_variants] = {};
    for (int v = 0; v < variants; ++v) {
        for (int l = 0; l < layers; ++l) launch(v, l);
        CHECK(cudaStreamSynchronize(tm.s));
        auto all_layers = [&launch, v, layers] {
            for (int l = 0; l < layers; ++l) launch(v, l);
        };
        exec[v] = capture(tm.s, all_layers);
    }
    std::vector<double> us(size_t(variants), 0.0);
    const int rounds = 5;
    for (int r = 0; r < rounds; ++r)
        for (int v = 0; v < variants; ++v)
            us[size_t(v)] +=
                1e3 * time_replays(exec[v], tm.s, 2, reps, tm.e0, tm.e1) / reps / layers / rounds;
    for (int v = 0; v < variants; ++v) CHECK(cudaGraphExecDestroy(exec[v]));
    return us;
}

// `handoff_bench experts [replays]`: the routed gate/up's access pattern as a pure read, against
// streams of the same bytes. A layer's six routed experts are six random 7.86 MB regions (96 tiles
// of 80 KB: the FP8 tile-major gate/up stack of the 21B-A3B, 16 f a tile) of that layer's 64; 27
// layers, each launch one layer (no tile in L2 when its turn comes), behind the programmatic-launch
// wait, the expert ids read after it (as the kernel reads moe_front's). Variants:
//   tile D    576 blocks of 4 warps, a block a tile, warp w its chunks w, w + 4, … of 2 KB (lane l
//             its 16 bytes at r·512 + 16·l of each, r < 4), D chunks' loads issued together
//             (moe_gate_up_mma.cuh's order with TM; D = 1 is its ring of one chunk ahead)
//   stream6   the same six regions read by a grid-stride loop, 16 blocks an SM
//   contig    one contiguous 47.2 MB region, the same loop (ramp's reference)
//   engine    the engine's routed gate/up (launch_moe_gate_up_gemv: tensor cores, tile-major, one
//             token), without and with its slot counters, on the same bytes as FP8
constexpr int64_t k_ex_tile = 80 * 1024, k_ex_tiles = 96, k_ex_bytes = k_ex_tile * k_ex_tiles, k_ex_n = 64,
                  k_ex_used = 6, k_ex_layers = 27;
template <int D>
__global__ void __launch_bounds__(128)
    experts_tile_read(const uint8_t *layer, const int *ids, unsigned *sink) {
    grid_wait();
    grid_release();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int e = ids[blockIdx.x / k_ex_tiles];
    const uint4 *t =
        reinterpret_cast<const uint4 *>(layer + (e * k_ex_tiles + blockIdx.x % k_ex_tiles) * k_ex_tile);
    uint32_t acc = 0;
    constexpr int chunks = int(k_ex_tile / 2048) / 4; // a warp's: 10
    for (int c0 = 0; c0 < chunks; c0 += D) {
        uint4 v[D][4];
#pragma unroll
        for (int d = 0; d < D; ++d)
#pragma unroll
            for (int r = 0; r < 4; ++r)
                v[d][r] = c0 + d < chunks ? __ldcs(t + ((c0 + d) * 4 + warp) * 128 + r * 32 + lane)
                                          : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int d = 0; d < D; ++d)
#pragma unroll
            for (int r = 0; r < 4; ++r) acc ^= v[d][r].x ^ v[d][r].y ^ v[d][r].z ^ v[d][r].w;
    }
    if (acc == 0x12345678u) sink[0] = acc;
}
__global__ void __launch_bounds__(128)
    experts_stream_read(const uint8_t *layer, const int *ids, int n_regions, unsigned *sink) {
    grid_wait();
    grid_release();
    __shared__ const uint4 *base[k_ex_used];
    if (threadIdx.x < n_regions)
        base[threadIdx.x] =
            reinterpret_cast<const uint4 *>(layer + (ids ? ids[threadIdx.x] : 0) * k_ex_bytes);
    __syncthreads();
    const size_t per = (ids ? k_ex_bytes : k_ex_bytes * k_ex_used) / 16, n = per * n_regions;
    uint32_t acc = 0;
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
         i += size_t(gridDim.x) * blockDim.x) {
        const uint4 v = __ldcs(base[i / per] + i % per);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x12345678u) sink[0] = acc;
}

int experts_main(int reps) {
    const timing tm;
    cudaStream_t s = tm.s;
    const int sms = tm.sms;
    const size_t per_layer = size_t(k_ex_bytes) * k_ex_n, total = per_layer * k_ex_layers;
    uint8_t *w;
    int *ids;
    unsigned *sink;
    CHECK(cudaMalloc(&w, total));
    CHECK(cudaMalloc(&ids, sizeof(int) * k_ex_used * k_ex_layers));
    CHECK(cudaMalloc(&sink, 4));
    fill<<<4096, 256>>>(w, total, 11u);
    std::vector<int> h(k_ex_used * k_ex_layers);
    uint32_t x = 12345u;
    for (int l = 0; l < k_ex_layers; ++l)
        for (int j = 0; j < k_ex_used; ++j)
            for (;;) {
                x = x * 1664525u + 1013904223u;
                const int e = int((x >> 8) % k_ex_n);
                if (std::find(&h[l * k_ex_used], &h[l * k_ex_used + j], e) == &h[l * k_ex_used + j]) {
                    h[l * k_ex_used + j] = e;
                    break;
                }
            }
    CHECK(cudaMemcpy(ids, h.data(), sizeof(int) * h.size(), cudaMemcpyHostToDevice));
    // The engine's kernel: one token's activations, unit scales, its outputs and slot counters.
    const int64_t H = 2560, F = k_ex_bytes / (2 * H);
    uint16_t *xa, *act;
    float *scale;
    unsigned *counters;
    CHECK(cudaMalloc(&xa, 2 * H));
    CHECK(cudaMalloc(&act, 2 * F * k_ex_used));
    CHECK(cudaMalloc(&scale, sizeof(float) * 2 * F * k_ex_n));
    CHECK(cudaMalloc(&counters, sizeof(unsigned) * k_ex_used));
    CHECK(cudaMemset(counters, 0, sizeof(unsigned) * k_ex_used));
    {
        std::vector<uint16_t> xb(H);
        for (int64_t i = 0; i < H; ++i) xb[i] = uint16_t(0x3f80 + (i % 64)); // BF16 1.0 … 1.5
        CHECK(cudaMemcpy(xa, xb.data(), 2 * H, cudaMemcpyHostToDevice));
        std::vector<float> one(2 * F * k_ex_n, 1.0f / 64);
        CHECK(cudaMemcpy(scale, one.data(), sizeof(float) * one.size(), cudaMemcpyHostToDevice));
    }
    es::set_programmatic_launch(true);
    CHECK(cudaDeviceSynchronize());
    auto launch = [&](int v, int l) {
        launch_config lc(dim3(1), dim3(128), s, true);
        cudaLaunchConfig_t &cfg = lc.cfg;
        const uint8_t *layer = w + size_t(l) * per_layer;
        const int *li = ids + l * k_ex_used;
        cfg.gridDim = dim3(unsigned(v < 4 || v >= 8 ? k_ex_used * k_ex_tiles : sms * 16));
        if (v == 8) { // the pure read again, 5 blocks an SM at most (the engine kernel's registers)
            cfg.dynamicSmemBytes = 40 * 1024;
            CHECK(cudaLaunchKernelEx(&cfg, experts_tile_read<1>, layer, li, sink));
            return;
        }
        if (v == 9) { // … 4 blocks an SM at most
            cfg.dynamicSmemBytes = 50 * 1024;
            CHECK(cudaLaunchKernelEx(&cfg, experts_tile_read<1>, layer, li, sink));
            return;
        }
        if (v >= 6) {
            es::moe_gate_up_gemv_params p;
            p.x = reinterpret_cast<const es::bf16_t *>(xa);
            p.ids = li;
            p.w = layer;
            p.wfmt = es::weight_format::fp8_e4m3;
            p.w_scale = scale;
            p.act = reinterpret_cast<es::bf16_t *>(act);
            p.n_tokens = 1;
            p.n_embd = H;
            p.n_expert_used = k_ex_used;
            p.n_ff_exp = F;
            p.mma = 1;
            p.w_tile_major = true;
            p.slot_rows_done = v == 7 ? counters : nullptr;
            CHECK(es::launch_moe_gate_up_gemv(p, s));
            return;
        }
        switch (v) {
        case 0:
            CHECK(cudaLaunchKernelEx(&cfg, experts_tile_read<1>, layer, li, sink));
            break;
        case 1:
            CHECK(cudaLaunchKernelEx(&cfg, experts_tile_read<2>, layer, li, sink));
            break;
        case 2:
            CHECK(cudaLaunchKernelEx(&cfg, experts_tile_read<5>, layer, li, sink));
            break;
        case 3:
            CHECK(cudaLaunchKernelEx(&cfg, experts_tile_read<10>, layer, li, sink));
            break;
        case 4:
            CHECK(cudaLaunchKernelEx(&cfg, experts_stream_read, layer, li, int(k_ex_used), sink));
            break;
        default:
            CHECK(cudaLaunchKernelEx(&cfg, experts_stream_read, layer, (const int *)nullptr, 1, sink));
            break;
        }
    };
    const char *names[10] = {"tile, D = 1",
                             "tile, D = 2",
                             "tile, D = 5",
                             "tile, D = 10 (all at once)",
                             "stream6 (the six regions, grid-stride)",
                             "contig (one 47.2 MB region)",
                             "engine: moe_gate_up_gemv (mma, tile-major)",
                             "engine: the same, slot counters on",
                             "tile, D = 1, 40 KB of shared memory a block (5 blocks an SM)",
                             "tile, D = 1, 50 KB of shared memory a block (4 blocks an SM)"};
    constexpr int V = 10;
    CHECK(cudaFuncSetAttribute(experts_tile_read<1>, cudaFuncAttributeMaxDynamicSharedMemorySize, 50 * 1024));
    const std::vector<double> us = time_layer_variants(V, int(k_ex_layers), reps, tm, launch);
    std::printf(
        "| routed gate/up pattern (27 layers, 6 of 64 experts, %.1f MB a launch) | us a launch | TB/s "
        "|\n|---|---:|---:|\n",
        k_ex_bytes * k_ex_used / 1e6);
    for (int v = 0; v < V; ++v)
        std::printf("| %s | %.2f | %.2f |\n", names[v], us[v],
                    k_ex_bytes * k_ex_used / (us[v] * 1e-6) / 1e12);
    CHECK(cudaFree(w));
    CHECK(cudaFree(ids));
    CHECK(cudaFree(sink));
    CHECK(cudaFree(xa));
    CHECK(cudaFree(act));
    CHECK(cudaFree(scale));
    CHECK(cudaFree(counters));
    return 0;
}

// `handoff_bench front [replays]`: decode's moe_front (norm, router, shared experts' gate/up) at
// the 21B-A3B's widths, 27 launches of one layer each (its own router and shared weights, none in
// L2 when its turn comes) behind the programmatic-launch wait, against pure reads of its bytes:
//   front          the engine's launch_moe_front, one token, FP8 shared rows (2 · 3,072 × 2,560)
//   router only    the same without shared experts (n_ff_sh = 0): the router's chain alone
//   read 16.4 MB   a grid-stride read of the launch's weight bytes (shared rows + fp32 router)
//   read 0.66 MB   … of the router's bytes alone
// The difference between "router only" and its read is what the router's chain costs beyond its
// bytes; "front" against "router only" is what the shared rows add to it.
__global__ void fill_f32(float *w, size_t n, uint32_t seed, float scale) {
    for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
         i += size_t(gridDim.x) * blockDim.x) {
        uint32_t h = uint32_t(i) * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        w[i] = scale * (float(h & 0xffffu) / 32768.0f - 1.0f);
    }
}

int front_main(int reps) {
    const timing tm;
    cudaStream_t s = tm.s;
    const int sms = tm.sms;
    constexpr int L = 27;
    const int64_t H = 2560, E = 64, K = 6, Fsh = 3072;
    // One region a layer: its shared rows, then its fp32 router (16-byte aligned), so one read
    // launch can take both.
    const size_t sh_bytes = size_t(2 * Fsh) * H, r_floats = size_t(E) * H, stride = sh_bytes + 4 * r_floats;
    uint8_t *blob;
    float *sh_scale, *bias, *x, *logits, *wts;
    uint16_t *norm_w, *xn, *sh_act;
    int32_t *ids;
    unsigned *counter, *sink;
    CHECK(cudaMalloc(&blob, stride * L));
    CHECK(cudaMalloc(&sh_scale, sizeof(float) * 2 * Fsh));
    CHECK(cudaMalloc(&bias, sizeof(float) * E));
    CHECK(cudaMalloc(&x, sizeof(float) * H));
    CHECK(cudaMalloc(&logits, sizeof(float) * E));
    CHECK(cudaMalloc(&wts, sizeof(float) * K));
    CHECK(cudaMalloc(&norm_w, 2 * H));
    CHECK(cudaMalloc(&xn, 2 * H));
    CHECK(cudaMalloc(&sh_act, 2 * Fsh));
    CHECK(cudaMalloc(&ids, sizeof(int32_t) * K));
    CHECK(cudaMalloc(&counter, sizeof(unsigned)));
    CHECK(cudaMalloc(&sink, 4));
    CHECK(cudaMemset(counter, 0, sizeof(unsigned)));
    CHECK(cudaMemset(bias, 0, sizeof(float) * E));
    auto sh = [&](int l) { return blob + stride * l; };
    auto router = [&](int l) { return reinterpret_cast<float *>(blob + stride * l + sh_bytes); };
    for (int l = 0; l < L; ++l) {
        fill<<<1024, 256>>>(sh(l), sh_bytes, 21u + l);
        fill_f32<<<256, 256>>>(router(l), r_floats, 22u + l, 0.05f);
    }
    fill_f32<<<16, 256>>>(x, size_t(H), 23u, 1.0f);
    {
        std::vector<float> sc(2 * Fsh, 1.0f / 256);
        CHECK(cudaMemcpy(sh_scale, sc.data(), sizeof(float) * sc.size(), cudaMemcpyHostToDevice));
        std::vector<uint16_t> one(H, 0x3f80); // BF16 1.0
        CHECK(cudaMemcpy(norm_w, one.data(), 2 * H, cudaMemcpyHostToDevice));
    }
    es::set_programmatic_launch(true);
    CHECK(cudaDeviceSynchronize());
    auto launch = [&](int v, int l) {
        if (v < 2) {
            es::moe_front_params p;
            p.norm.x = x;
            p.norm.weight = reinterpret_cast<const es::bf16_t *>(norm_w);
            p.norm.eps = 1e-5f;
            p.norm.out = reinterpret_cast<es::bf16_t *>(xn);
            p.router_w = router(l);
            p.bias = bias;
            p.ids = ids;
            p.weights = wts;
            p.n_expert = E;
            p.n_expert_used = K;
            p.logits = logits;
            p.counter = counter;
            p.sh_w = sh(l);
            p.sh_wfmt = es::weight_format::fp8_e4m3;
            p.sh_w_scale = sh_scale;
            p.sh_act = reinterpret_cast<es::bf16_t *>(sh_act);
            p.n_ff_sh = v == 0 ? Fsh : 0;
            p.n_tokens = 1;
            p.n_embd = H;
            CHECK(es::launch_moe_front(p, s));
            return;
        }
        const launch_config lc(dim3(unsigned(sms * 16)), dim3(128), s, true);
        if (v == 2)
            CHECK(cudaLaunchKernelEx(&lc.cfg, stream_read<true>, reinterpret_cast<const uint4 *>(sh(l)),
                                     stride / 16, sink));
        else
            CHECK(cudaLaunchKernelEx(&lc.cfg, stream_read<true>, reinterpret_cast<const uint4 *>(router(l)),
                                     r_floats / 4, sink));
    };
    const char *names[4] = {"front (router + shared gate/up, 16.4 MB)", "router only (n_ff_sh = 0, 0.66 MB)",
                            "read of its 16.4 MB", "read of the router's 0.66 MB"};
    constexpr int V = 4;
    const std::vector<double> us = time_layer_variants(V, L, reps, tm, launch);
    std::printf("| moe_front, 21B-A3B widths, one token (27 layers) | us a layer |\n|---|---:|\n");
    for (int v = 0; v < V; ++v) std::printf("| %s | %.2f |\n", names[v], us[v]);
    for (void *ptr : {(void *)blob, (void *)sh_scale, (void *)bias, (void *)x, (void *)logits, (void *)wts,
                      (void *)norm_w, (void *)xn, (void *)sh_act, (void *)ids, (void *)counter, (void *)sink})
        CHECK(cudaFree(ptr));
    return 0;
}

int head_main(int count, int reps) {
    const int64_t n = 103424;
    const timing tm;
    cudaStream_t s = tm.s;
    const cudaEvent_t e0 = tm.e0, e1 = tm.e1;
    const int sms = tm.sms;
    es::set_programmatic_launch(true);
    std::printf("| head (BF16, %lld rows) | k | MB | variant | us a launch | TB/s | x engine "
                "|\n|---|---:|---:|---|---:|---:|---:|\n",
                (long long)n);
    for (int64_t k : {int64_t(1024), int64_t(2560)}) {
        const size_t bytes = size_t(n) * k * 2;
        uint8_t *w;
        uint16_t *x;
        float *y;
        unsigned *sink;
        CHECK(cudaMalloc(&w, bytes));
        CHECK(cudaMalloc(&x, 2 * k));
        CHECK(cudaMalloc(&y, 4 * n));
        CHECK(cudaMalloc(&sink, 4));
        fill<<<1024, 256>>>(w, bytes, 99u);
        mask_bf16<<<1024, 256>>>(reinterpret_cast<uint16_t *>(w), bytes / 2); // no Inf or NaN
        std::vector<uint16_t> xb(k);
        for (int64_t i = 0; i < k; ++i) xb[i] = uint16_t(0x3c00 + (i % 64));
        CHECK(cudaMemcpy(x, xb.data(), 2 * k, cudaMemcpyHostToDevice));
        es::gemv_params p;
        p.x = reinterpret_cast<const es::bf16_t *>(x);
        p.ldx = k;
        p.w = w;
        p.wfmt = es::weight_format::bf16;
        p.y = y;
        p.ldy = n;
        p.n_tokens = 1;
        p.n = n;
        p.k = k;
        p.k_splits = 1;
        auto launch = [&](int v) {
            if (v == 0) {
                CHECK(es::launch_gemv(p, s));
            } else {
                stream_read<<<sms * 16, 128, 0, s>>>(reinterpret_cast<const uint4 *>(w), bytes / 16, sink);
                CHECK(cudaGetLastError());
            }
        };
        const char *names[2] = {"launch_gemv (gemv_rows_kernel)", "read-only stream (the ceiling)"};
        double us[2] = {0, 0};
        cudaGraphExec_t exec[2];
        for (int v = 0; v < 2; ++v) {
            launch(v);
            CHECK(cudaStreamSynchronize(s));
            exec[v] = capture(s, [&] {
                for (int i = 0; i < count; ++i) launch(v);
            });
        }
        const int rounds = 5;
        for (int r = 0; r < rounds; ++r)
            for (int v = 0; v < 2; ++v)
                us[v] += 1e3 * time_replays(exec[v], s, 1, reps, e0, e1) / reps / count / rounds;
        for (int v = 0; v < 2; ++v)
            std::printf("| | %lld | %.1f | %s | %.2f | %.2f | %.3f |\n", (long long)k, bytes / 1e6, names[v],
                        us[v], bytes / (us[v] * 1e-6) / 1e12, us[v] / us[0]);
        for (int v = 0; v < 2; ++v) CHECK(cudaGraphExecDestroy(exec[v]));
        CHECK(cudaFree(w));
        CHECK(cudaFree(x));
        CHECK(cudaFree(y));
        CHECK(cudaFree(sink));
    }
    return 0;
}
#endif

int main(int argc, char **argv) {
#ifdef HANDOFF_WITH_ES
    if (argc > 1 && std::strcmp(argv[1], "ramp") == 0)
        return ramp_main(argc > 2 ? std::atoi(argv[2]) : 40, argc > 3 ? std::atoi(argv[3]) : 10);
    if (argc > 1 && std::strcmp(argv[1], "experts") == 0)
        return experts_main(argc > 2 ? std::atoi(argv[2]) : 20);
    if (argc > 1 && std::strcmp(argv[1], "front") == 0) return front_main(argc > 2 ? std::atoi(argv[2]) : 20);
    if (argc > 1 && std::strcmp(argv[1], "head") == 0)
        return head_main(argc > 2 ? std::atoi(argv[2]) : 20, argc > 3 ? std::atoi(argv[3]) : 20);
#endif
    Chain c{1024, argc > 1 ? std::atoi(argv[1]) : 180, nullptr, nullptr, nullptr};
    const int reps = argc > 2 ? std::atoi(argv[2]) : 200;
    const size_t wbytes = size_t(c.k) * c.n * c.n;
    CHECK(cudaMalloc(&c.w, wbytes));
    CHECK(cudaMalloc(&c.act, sizeof(float) * (c.k + 1) * c.n));
    CHECK(cudaMalloc(&c.counts, sizeof(unsigned) * c.k));
    fill<<<1024, 256>>>(c.w, wbytes, 12345u);
    std::vector<float> x0(c.n);
    for (int i = 0; i < c.n; ++i) x0[i] = float((i * 37) % 101 - 50) / 50.0f;
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0));
    CHECK(cudaEventCreate(&e1));
    struct Variant {
        const char *name;
        void (*launch)(const Chain &, cudaStream_t);
    };
    const Variant vars[] = {
        {"plain, 8 warps, weights in registers", launch_chain<0, 8, 0>},
        {"pdl, 8 warps, weights in registers", launch_chain<1, 8, 0>},
        {"counters, 8 warps, weights in registers", launch_chain<2, 8, 0>},
        {"pdl, 4 warps, weights in registers", launch_chain<1, 4, 0>},
        {"pdl, 8 warps, weights L2-prefetched", launch_chain<1, 8, 1>},
        {"pdl, 4 warps, weights L2-prefetched", launch_chain<1, 4, 1>},
        {"pdl, 8 warps, weights loaded after the wait", launch_chain<1, 8, 2>},
        {"pdl, 4 warps, weights loaded after the wait", launch_chain<1, 4, 2>},
#ifdef HANDOFF_WITH_ES
        {"es::launch_gemv FP8 1024 x 1024 (the 0.3B's o_proj)", launch_es_chain<1024, 1024>},
        {"es::launch_gemv FP8 1024 x 1024, registers", launch_es_chain<1024, 1024, 1>},
        {"es::launch_gemv FP8 1024 x 3072 (the 0.3B's down)", launch_es_chain<1024, 3072>},
        {"es::launch_gemv FP8 1024 x 3072, registers", launch_es_chain<1024, 3072, 1>},
        {"es::launch_gemv FP8 3072 x 1024 (a 3 MB matrix of short rows)", launch_es_chain<3072, 1024>},
        {"es::launch_gemv FP8 3072 x 1024, registers", launch_es_chain<3072, 1024, 1>},
        {"es::launch_gemv FP8 2560 x 2560 (the 21B-A3B's o_proj: registers)", launch_es_chain<2560, 2560>},
#endif
    };
    constexpr int nv = sizeof vars / sizeof vars[0], rounds = 5;
    std::vector<float> outs[nv];
    double us[nv][rounds];
    cudaGraphExec_t exec[nv];
    for (int m = 0; m < nv; ++m) {
        vars[m].launch(c, s); // once eagerly: set-up outside the capture, warm-up
        CHECK(cudaStreamSynchronize(s));
        exec[m] = capture(s, [&] { vars[m].launch(c, s); });
    }
    for (int r = 0; r < rounds; ++r)
        for (int m = 0; m < nv; ++m) {
            CHECK(cudaMemcpyAsync(c.act, x0.data(), sizeof(float) * c.n, cudaMemcpyHostToDevice, s));
            us[m][r] = 1e3 * time_replays(exec[m], s, 10, reps, e0, e1) / reps / c.k;
            outs[m].resize(c.n);
            CHECK(cudaMemcpy(outs[m].data(), c.act + size_t(c.k) * c.n, sizeof(float) * c.n,
                             cudaMemcpyDeviceToHost));
        }
    std::printf("chain of %d one-token GEMVs, %d x %d bytes (%.2f MB each); %d replays x %d rounds\n", c.k,
                c.n, c.n, c.n * double(c.n) / 1e6, reps, rounds);
    std::printf(
        "| variant | us a kernel (each round) | mean | x pdl, 8 warps, registers |\n|---|---|---:|---:|\n");
    double mean[nv];
    for (int m = 0; m < nv; ++m) {
        mean[m] = 0;
        for (int r = 0; r < rounds; ++r) mean[m] += us[m][r] / rounds;
    }
    bool same = true;
    for (int m = 0; m < nv; ++m) {
        std::printf("| %s |", vars[m].name);
        for (int r = 0; r < rounds; ++r) std::printf(" %.3f", us[m][r]);
        std::printf(" | %.3f | %.3f |\n", mean[m], mean[m] / mean[1]);
        if (std::strncmp(vars[m].name, "es::", 4) != 0)
            same = same && std::memcmp(outs[0].data(), outs[m].data(), sizeof(float) * c.n) == 0;
    }
    std::printf("outputs of the chains %s (y[0] = %g)\n", same ? "agree bit for bit" : "DIFFER", outs[0][0]);
    return same ? 0 : 1;
}
