// moe_router (see moe_router.cuh). Grid (expert pairs, tokens), 256 threads: warps 4i..4i+3 of
// block b compute the logit of expert 2b + i, each over a quarter of n_embd (float4 loads, four
// in flight, shuffle reduction, the quarters summed in order) into the logits scratch, so the
// 655 KB router of a 21B-A3B layer is read by many SMs at once, and its rows are loaded (into
// registers: a whole row up to n_embd 3,072) before the kernel waits for its predecessor (one
// block per token was latency-bound at ~15 µs; eight experts per block, one warp each, at ~18 µs
// with five dependent load rounds per warp). The last block of a token to finish (a counter
// bumped after a fence) then does the rest for that token with one warp (no block barriers):
// softmax (max, then e^(l−max) · (1/sum), as the CPU), k rounds of a warp arg-max over p + bias
// with the tie rule "greater, or equal and lower id", and the renormalized weights. With norm_in, every block
// first normalizes its token's residual row into shared memory (block_rms_norm_to_smem) and block 0 of the
// token stores it to norm.out. The device code is shared with moe_front (moe_router_device.cuh).
#include "moe_router.cuh"
#include "moe_router_device.cuh"

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
    router_tail_warp(p.logits + t * E, p.bias, E, K, p.norm_min, p.ids + t * K, p.weights + t * K, sm, lane);
}

cudaError_t launch_moe_router(const moe_router_params &p, cudaStream_t stream) {
    if (p.n_tokens <= 0) return cudaSuccess;
    if (p.n_expert <= 0 || p.n_expert > moe_router_max_experts || p.n_expert_used <= 0 ||
        p.n_expert_used > p.n_expert || !p.logits || !p.counters)
        return cudaErrorInvalidValue;
    const dim3 grid(unsigned((p.n_expert + k_experts_per_block - 1) / k_experts_per_block),
                    unsigned(p.n_tokens));
    if (p.norm.on()) {
        if (!p.norm.weight || !moe_router_norm_ok(p)) return cudaErrorInvalidValue;
        return launch_kernel(moe_router_kernel<true>, grid, 256, tail_bytes(p) + size_t(p.n_embd) * 2, stream,
                             p);
    }
    const size_t smem = size_t(2 * p.n_expert + p.n_expert_used) * sizeof(float);
    return launch_kernel(moe_router_kernel<false>, grid, 256, smem, stream, p);
}

} // namespace es
