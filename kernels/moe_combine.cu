// moe_combine (see moe_combine.cuh): one block per token, threads stride over n_embd.
#include "moe_combine.cuh"
#include "kernel_common.cuh"

namespace es {

__global__ void moe_combine_kernel(moe_combine_params p) {
    pdl_enter();
    const int64_t t = blockIdx.x, K = p.n_expert_used, H = p.n_embd;
    for (int64_t i = threadIdx.x; i < H; i += blockDim.x) {
        float acc = p.x[t * H + i];
        for (int64_t j = 0; j < K; ++j) acc += p.weights[t * K + j] * p.y[(t * K + j) * H + i];
        p.x[t * H + i] = acc;
    }
}

cudaError_t launch_moe_combine(const moe_combine_params &p, cudaStream_t stream) {
    if (p.n_tokens <= 0) return cudaSuccess;
    return launch_kernel(moe_combine_kernel, unsigned(p.n_tokens), 256, 0, stream, p);
}

} // namespace es
