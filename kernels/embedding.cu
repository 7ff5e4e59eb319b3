// embedding: out[t, :] = float(table[tokens[t], :]). One block per token (exact widening, so
// the result equals the CPU twin bit for bit). Rows of a multiple of 4 elements (table 8-byte,
// out 16-byte aligned) go through block_widen_bf16_row (kernel_common.cuh), a thread's loads
// issued together before its stores; others one element at a time. (A plain loop's loads waited
// on each store before them: 4 dependent rounds at the 0.3B's width, 10 at the 21B-A3B's, in the
// first launch of every decode step.)
#include "kernels/embedding.cuh"
#include "kernels/kernel_common.cuh"

namespace es {

__global__ void embedding_kernel(embedding_params p) {
    pdl_enter();
    const int64_t t = blockIdx.x;
    const uint16_t *row = p.table + int64_t(p.tokens[t]) * p.n_embd;
    float *out = p.out + t * p.n_embd;
    for (int64_t i = threadIdx.x; i < p.n_embd; i += blockDim.x) out[i] = bf16_to_f(row[i]);
}

__global__ void embedding_vec_kernel(embedding_params p) {
    pdl_enter();
    const int64_t t = blockIdx.x;
    block_widen_bf16_row(p.table + int64_t(p.tokens[t]) * p.n_embd, p.n_embd, p.out + t * p.n_embd);
}

cudaError_t launch_embedding(const embedding_params &p, cudaStream_t stream) {
    if (p.n_tokens <= 0) return cudaSuccess;
    if (p.n_embd % 4 == 0 && (reinterpret_cast<uintptr_t>(p.table) & 7u) == 0 && aligned16(p.out))
        return launch_decode<embedding_vec_kernel>(unsigned(p.n_tokens), 256, 0, stream, p);
    return launch_decode<embedding_kernel>(unsigned(p.n_tokens), 256, 0, stream, p);
}

} // namespace es
