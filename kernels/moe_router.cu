// moe_router (see moe_router.cuh). Grid (expert pairs, tokens), 256 threads: warps 4i..4i+3 of
// block b compute the logit of expert 2b + i, each over a quarter of n_embd (float4 loads, four
// in flight, shuffle reduction, the quarters summed in order) into the logits scratch, so the
// 655 KB router of a 21B-A3B layer is read by many SMs at once, and its rows are loaded (into
// registers: a whole row up to n_embd 3,072) before the kernel waits for its predecessor (one
// block per token is latency-bound at ~15 µs; eight experts per block, one warp each, at ~18 µs
// with five dependent load rounds per warp). The last block of a token to finish (a counter
// bumped after a fence) then does the rest for that token with one warp (no block barriers):
// softmax (max, then e^(l−max) · (1/sum), as the CPU), k rounds of a warp arg-max over p + bias
// with the tie rule "greater, or equal and lower id", and the renormalized weights. With norm_in, every block
// first normalizes its token's residual row into shared memory (block_rms_norm_to_smem) and block 0 of the
// token stores it to norm.out. The device code is shared with moe_front (moe_router_device.cuh).
// Steps of tiles_min_tokens and more take moe_router_tiles_kernel below instead (32 tokens a block).
#include "kernels/moe_router.cuh"
#include "kernels/moe_router_device.cuh"

namespace es {

namespace {
constexpr int k_experts_per_block = 2; // × k_router_warps_per_expert warps = 256 threads

size_t tail_bytes(const moe_router_params &p) {
    return (size_t(2 * p.n_expert + p.n_expert_used) * sizeof(float) + 15) / 16 * 16;
}
} // namespace

template <bool NI>
__global__ void __launch_bounds__(256) moe_router_kernel(moe_router_params p) {
    extern __shared__ __align__(16) float sm[];
    __shared__ float red[32];
    const int64_t t = blockIdx.y, H = p.n_embd, E = p.n_expert, K = p.n_expert_used;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

    const int64_t e = int64_t(blockIdx.x) * k_experts_per_block + warp / k_router_warps_per_expert;
    const int quarter = warp % k_router_warps_per_expert;
    const void *xin = NI ? static_cast<const void *>(p.norm.x) : p.x;
    const bool vec = (H % 4) == 0 && (reinterpret_cast<uintptr_t>(p.w) & 15u) == 0 &&
                     (NI || (reinterpret_cast<uintptr_t>(xin) & 7u) == 0);
    // The router's weights are never written by a kernel: this lane's share of its quarter is
    // loaded (the first k_router_pre float4s into registers, the rest towards L2) while the
    // previous kernel finishes.
    float4 pre[k_router_pre];
    if (vec && e < E) router_preload_quarter(p.w + e * H, H, quarter, lane, pre);
    constexpr int NV = NI ? 3 : 0; // norm-weight slots per thread loaded before the wait
    norm_weight_regs<NV> nwr;
    if constexpr (NI) norm_weight_preload<NV>(p.norm.weight, H, nwr);
    pdl_enter();
    const uint16_t *x = NI ? nullptr : p.x + t * H;
    if constexpr (NI) {
        // The token's normalized row, after the tail's scratch.
        uint16_t *xs = reinterpret_cast<uint16_t *>(sm + (2 * E + K + 3) / 4 * 4);
        __shared__ float nred[32];
        block_rms_norm_to_smem<1, NV>(p.norm.x + t * H, H, 1, p.norm.weight, nwr, H, p.norm.eps, xs, nred);
        if (blockIdx.x == 0 && p.norm.out) block_store_rows(xs, p.norm.out + t * H, 1, H);
        x = xs;
    }
    float acc[1] = {0.0f};
    if (e < E) router_lane_quarter<1, NI>(p.w + e * H, x, H, 1, H, quarter, lane, vec, pre, acc);
    const float v = warp_sum(acc[0]);
    if (lane == 0) red[warp] = v;
    __syncthreads();
    if (quarter == 0 && lane == 0 && e < E) {
        float s = 0.0f;
        for (int q = 0; q < k_router_warps_per_expert; ++q) s += red[warp + q];
        p.logits[t * E + e] = s;
    }
    if (!block_arrives_last(&p.counters[t], gridDim.x)) return;
    if (warp != 0) return;            // one warp from here: no block barriers on the tail's latency path
    if (lane == 0) p.counters[t] = 0; // ready for the next launch
    router_tail_warp(p.logits + t * E, p.bias, E, K, p.norm_min, p.ids + t * K, p.weights + t * K,
                     p.margins ? p.margins + t : nullptr, sm, lane);
}

// Steps of many tokens (prefill): the kernel above reads the whole router once per token (655 KB
// of L2 a token on the 21B-A3B: 288 µs a layer at 2,048 tokens, 11% of the prefill). Here a
// block of 256 threads takes k_tile_tokens tokens × k_tile_experts experts, one logit a thread
// (thread i: token i / 8, expert i % 8), through chunks of k_tile_chunk columns staged in shared
// memory (the tokens' BF16 rows and the experts' fp32 rows, each read from L2 once a block, all of
// a chunk's loads issued before any is stored; rows padded so that neither operand's loads
// conflict), each logit summed in column order, four columns a step: 103 µs a layer at 2,048
// tokens on the H200 (a warp an expert, its tokens' activations read through L1 by all eight
// warps of the block, is slower: 89 µs a layer already at 512 tokens). The last block of
// a token group to finish does the tails, one token a warp at a time (router_tail_warp, as the
// kernel above), in the staging buffers' space. Unnormalized input only (prefill normalizes in its
// own launch), the vector path's alignment, up to k_tile_max_experts and 64 experts used.
constexpr int k_tile_tokens = 32, k_tile_experts = 8, k_tile_chunk = 256;
constexpr int k_tile_xs_stride = k_tile_chunk + 4; // BF16 elements a staged token row (+8 bytes)
constexpr int k_tile_ws_stride = k_tile_chunk + 4; // floats a staged expert row (+16 bytes)
constexpr int k_tile_smem_floats = k_tile_tokens * k_tile_xs_stride / 2 + k_tile_experts * k_tile_ws_stride;
constexpr int64_t k_tile_max_experts = 256;
static_assert(k_tile_tokens * k_tile_experts == 256, "one logit a thread");

__host__ __device__ inline int64_t tile_tail_floats(int64_t E, int64_t K) { return (2 * E + K + 3) / 4 * 4; }

__global__ void __launch_bounds__(256) moe_router_tiles_kernel(moe_router_params p) {
    __shared__ __align__(16) float sm[k_tile_smem_floats];
    uint16_t *xs = reinterpret_cast<uint16_t *>(sm);       // [k_tile_tokens][k_tile_xs_stride]
    float *ws = sm + k_tile_tokens * k_tile_xs_stride / 2; // [k_tile_experts][k_tile_ws_stride]
    const int64_t H = p.n_embd, E = p.n_expert, K = p.n_expert_used;
    const int tid = threadIdx.x, tt = tid / k_tile_experts, te = tid % k_tile_experts;
    const int64_t t0 = int64_t(blockIdx.y) * k_tile_tokens, e0 = int64_t(blockIdx.x) * k_tile_experts;
    const int mt = int(min(int64_t(k_tile_tokens), p.n_tokens - t0)),
              me = int(min(int64_t(k_tile_experts), E - e0));
    pdl_enter();
    float acc = 0.0f;
    for (int64_t c0 = 0; c0 < H; c0 += k_tile_chunk) {
        const int kc4 = int(min(int64_t(k_tile_chunk), H - c0)) / 4; // 4-column groups of this chunk
        // Every load of the chunk issued before any is stored: the tokens' columns 8 bytes a load,
        // the experts' 16 (unit u: row u / cg, column group u % cg).
        constexpr int cg = k_tile_chunk / 4, nx = k_tile_tokens * cg / 256, nw = k_tile_experts * cg / 256;
        uint2 xv[nx];
        float4 wv[nw];
#pragma unroll
        for (int j = 0; j < nx; ++j) {
            const int u = tid + 256 * j, r = u / cg, c = u % cg;
            xv[j] = r < mt && c < kc4 ? __ldg(reinterpret_cast<const uint2 *>(p.x + (t0 + r) * H + c0) + c)
                                      : make_uint2(0u, 0u);
        }
#pragma unroll
        for (int j = 0; j < nw; ++j) {
            const int u = tid + 256 * j, r = u / cg, c = u % cg;
            wv[j] = r < me && c < kc4 ? __ldg(reinterpret_cast<const float4 *>(p.w + (e0 + r) * H + c0) + c)
                                      : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
#pragma unroll
        for (int j = 0; j < nx; ++j) {
            const int u = tid + 256 * j;
            *reinterpret_cast<uint2 *>(xs + (u / cg) * k_tile_xs_stride + 4 * (u % cg)) = xv[j];
        }
#pragma unroll
        for (int j = 0; j < nw; ++j) {
            const int u = tid + 256 * j;
            *reinterpret_cast<float4 *>(ws + (u / cg) * k_tile_ws_stride + 4 * (u % cg)) = wv[j];
        }
        __syncthreads();
        const uint2 *xr = reinterpret_cast<const uint2 *>(xs + tt * k_tile_xs_stride);
        const float4 *wr = reinterpret_cast<const float4 *>(ws + te * k_tile_ws_stride);
#pragma unroll 4
        for (int c = 0; c < kc4; ++c) {
            const float4 a = wr[c];
            const uint2 b = xr[c];
            acc += a.x * bf16_lo(b.x) + a.y * bf16_hi(b.x) + a.z * bf16_lo(b.y) + a.w * bf16_hi(b.y);
        }
        __syncthreads();
    }
    if (tt < mt && te < me) p.logits[(t0 + tt) * E + e0 + te] = acc;
    if (!block_arrives_last(&p.counters[blockIdx.y], gridDim.x)) return;
    if (tid == 0) p.counters[blockIdx.y] = 0; // ready for the next launch
    const int warp = tid / 32, lane = tid % 32;
    float *tail = sm + warp * tile_tail_floats(E, K); // the staging buffers are free (barrier above)
    for (int m = warp; m < mt; m += 8) {
        const int64_t t = t0 + m;
        router_tail_warp(p.logits + t * E, p.bias, E, K, p.norm_min, p.ids + t * K, p.weights + t * K,
                         p.margins ? p.margins + t : nullptr, tail, lane);
        __syncwarp();
    }
}
static_assert(8 * ((2 * k_tile_max_experts + 64 + 3) / 4 * 4) <= k_tile_smem_floats,
              "the tails of eight warps fit the staging buffers (up to 64 experts used)");

cudaError_t launch_moe_router(const moe_router_params &p, cudaStream_t stream) {
    if (p.n_tokens <= 0) return cudaSuccess;
    if (p.n_expert <= 0 || p.n_expert > moe_router_max_experts || p.n_expert_used <= 0 ||
        p.n_expert_used > p.n_expert || !p.logits || !p.counters)
        return cudaErrorInvalidValue;
    const dim3 grid(unsigned((p.n_expert + k_experts_per_block - 1) / k_experts_per_block),
                    unsigned(p.n_tokens));
    if (p.norm.on()) {
        if (!p.norm.weight || !moe_router_norm_ok(p)) return cudaErrorInvalidValue;
        return launch_decode<moe_router_kernel<true>>(grid, 256, tail_bytes(p) + size_t(p.n_embd) * 2, stream,
                                                      p);
    }
    if (p.tiles_min_tokens > 0 && p.n_tokens >= p.tiles_min_tokens && p.n_expert <= k_tile_max_experts &&
        p.n_expert_used <= 64 && p.n_embd % 4 == 0 && (reinterpret_cast<uintptr_t>(p.w) & 15u) == 0 &&
        (reinterpret_cast<uintptr_t>(p.x) & 7u) == 0) {
        const dim3 tiles(unsigned((p.n_expert + k_tile_experts - 1) / k_tile_experts),
                         unsigned((p.n_tokens + k_tile_tokens - 1) / k_tile_tokens));
        return launch_kernel(moe_router_tiles_kernel, tiles, 256, 0, stream, p);
    }
    const size_t smem = size_t(2 * p.n_expert + p.n_expert_used) * sizeof(float);
    return launch_decode<moe_router_kernel<false>>(grid, 256, smem, stream, p);
}

} // namespace es
