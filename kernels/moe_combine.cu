// moe_combine (see moe_combine.cuh): grid (tokens, 1, n_embd / 256), one thread per (t, i):
// every load of a token is in flight at once (one block per token striding over n_embd waited on
// ten load round trips). With x_ready the residual is read before pdl_wait. With the norm (NORM),
// a token's blocks are one thread-block cluster: each block reduces its part of the row's sum of
// squares and stores it into every block's shared memory, a cluster barrier publishes the parts,
// and every block adds them in rank order (the same sum in all of them) and writes its elements
// normalized.
#include "kernels/kernel_common.cuh"
#include "kernels/moe_combine.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#include <cooperative_groups.h>
#endif

namespace es {
namespace {

constexpr int k_threads = 256;

template <bool NORM>
__global__ void __launch_bounds__(k_threads) moe_combine_kernel(moe_combine_params p) {
    if constexpr (NORM) cluster_started_arrive(); // the norm pushes into peers (below)
    const int64_t t = blockIdx.x, K = p.n_expert_used, H = p.n_embd,
                  i = int64_t(blockIdx.z) * blockDim.x + threadIdx.x;
    const float x_early = p.x_ready && i < H ? __ldcg(p.x + t * H + i) : 0.0f;
    const float w = NORM && i < H ? bf16_to_f(p.norm_weight[i]) : 0.0f; // a weight: before the wait
    pdl_enter();
    if (p.reset && blockIdx.x == 0 && blockIdx.z == 0)
        for (int64_t r = threadIdx.x; r < p.n_reset; r += blockDim.x) p.reset[r] = 0;
    float acc = 0.0f;
    if (i < H) {
        acc = p.x_ready ? x_early : p.x[t * H + i];
        if (p.y_shared) acc += p.y_shared[t * H + i];
        for (int64_t j = 0; j < K; ++j) acc += p.weights[t * K + j] * p.y[(t * K + j) * H + i];
        p.x[t * H + i] = acc;
    }
    if constexpr (NORM) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
        __shared__ float red[k_threads / 32], parts[16]; // parts[r]: block r's sum (pushed by it)
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
        const float v = warp_sum(acc * acc);
        if (lane == 0) red[warp] = v;
        __syncthreads();
        namespace cg = cooperative_groups;
        cg::cluster_group cluster = cg::this_cluster();
        cluster_started_wait(); // every peer has started (it arrived at its start)
        if (warp == 0) {
            const float b = warp_sum(lane < k_threads / 32 ? red[lane] : 0.0f);
            if (lane < int(gridDim.z)) *cluster.map_shared_rank(&parts[blockIdx.z], lane) = b;
        }
        cluster.sync(); // every block's part in every block's shared memory
        float ss = 0.0f;
        for (unsigned r = 0; r < gridDim.z; ++r) ss += parts[r];
        const float scale = 1.0f / sqrtf(ss / float(H) + p.norm_eps);
        if (i < H) p.norm_out[t * H + i] = f_to_bf16(w * (acc * scale));
#else
        __trap(); // launch_moe_combine launches the norm only where clusters exist
#endif
    }
}

} // namespace

bool moe_combine_norm_ok(const moe_combine_params &p) {
    const unsigned blocks = ceil_div_u(p.n_embd, k_threads);
    return p.n_embd > 0 && blocks <= 16 && p.norm_weight && p.norm_out &&
           cluster_fits(reinterpret_cast<const void *>(moe_combine_kernel<true>), int(blocks), k_threads, 0);
}

cudaError_t launch_moe_combine(const moe_combine_params &p, cudaStream_t stream) {
    if (p.n_tokens <= 0 || p.n_embd <= 0) return cudaSuccess;
    const dim3 grid(unsigned(p.n_tokens), 1, ceil_div_u(p.n_embd, k_threads));
    if (p.norm_out) {
        if (!moe_combine_norm_ok(p)) return cudaErrorInvalidValue;
        return launch_decode_clusters<moe_combine_kernel<true>>(dim3(1, 1, grid.z), grid, k_threads, 0,
                                                                stream, p);
    }
    return launch_decode<moe_combine_kernel<false>>(grid, k_threads, 0, stream, p);
}

} // namespace es
