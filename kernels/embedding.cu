// embedding: out[t, :] = float(table[tokens[t], :]). One block per token, threads stride over
// n_embd (exact widening, so the result equals the CPU twin bit for bit).
#include "embedding.cuh"
#include "kernel_common.cuh"

namespace es {

__global__ void embedding_kernel(embedding_params p) {
    pdl_enter();
    const int64_t t = blockIdx.x;
    const uint16_t *row = p.table + int64_t(p.tokens[t]) * p.n_embd;
    float *out = p.out + t * p.n_embd;
    for (int64_t i = threadIdx.x; i < p.n_embd; i += blockDim.x) out[i] = bf16_to_f(row[i]);
}

cudaError_t launch_embedding(const embedding_params &p, cudaStream_t stream) {
    if (p.n_tokens <= 0) return cudaSuccess;
    return launch_kernel(embedding_kernel, unsigned(p.n_tokens), 256, 0, stream, p);
}

} // namespace es
