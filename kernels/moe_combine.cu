// moe_combine (see moe_combine.cuh): grid (n_embd / 256, tokens), one thread per (t, i): every
// load of a token is in flight at once (one block per token striding over n_embd waited on ten
// load round trips). With x_ready the residual is read before pdl_wait.
#include "kernel_common.cuh"
#include "moe_combine.cuh"

namespace es {

__global__ void __launch_bounds__(256) moe_combine_kernel(moe_combine_params p) {
    const int64_t t = blockIdx.y, K = p.n_expert_used, H = p.n_embd,
                  i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    const float x_early = p.x_ready && i < H ? __ldcg(p.x + t * H + i) : 0.0f;
    pdl_enter();
    if (p.reset && blockIdx.x == 0 && blockIdx.y == 0)
        for (int64_t r = threadIdx.x; r < p.n_reset; r += blockDim.x) p.reset[r] = 0;
    if (i >= H) return;
    float acc = p.x_ready ? x_early : p.x[t * H + i];
    if (p.y_shared) acc += p.y_shared[t * H + i];
    for (int64_t j = 0; j < K; ++j) acc += p.weights[t * K + j] * p.y[(t * K + j) * H + i];
    p.x[t * H + i] = acc;
}

cudaError_t launch_moe_combine(const moe_combine_params &p, cudaStream_t stream) {
    if (p.n_tokens <= 0 || p.n_embd <= 0) return cudaSuccess;
    return launch_decode<moe_combine_kernel>(dim3(ceil_div_u(p.n_embd, 256), unsigned(p.n_tokens)), 256, 0,
                                             stream, p);
}

} // namespace es
