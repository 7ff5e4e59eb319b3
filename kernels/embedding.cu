// embedding: out[t, :] = float(table[tokens[t], :]). One block per token (exact widening, so
// the result equals the CPU twin bit for bit). Rows of a multiple of 8 elements, 16-byte aligned,
// take 16-byte loads, each thread's (up to U) issued together before its stores; others one
// element at a time. The scalar loop's loads waited on each store before them (ptxas cannot tell
// the row from the output): 4 dependent rounds at the 0.3B's width, 10 at the 21B-A3B's, in the
// first launch of every decode step.
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

constexpr int k_embedding_vec_u = 4; // 16-byte vectors a thread in flight: 8,192 elements a round

__global__ void embedding_vec_kernel(embedding_params p) {
    pdl_enter();
    const int64_t t = blockIdx.x, nv = p.n_embd / 8, nthr = blockDim.x;
    const uint4 *row = reinterpret_cast<const uint4 *>(p.table + int64_t(p.tokens[t]) * p.n_embd);
    float4 *out = reinterpret_cast<float4 *>(p.out + t * p.n_embd);
    for (int64_t i0 = threadIdx.x; i0 < nv; i0 += k_embedding_vec_u * nthr) {
        uint4 v[k_embedding_vec_u];
#pragma unroll
        for (int u = 0; u < k_embedding_vec_u; ++u)
            if (i0 + u * nthr < nv) v[u] = __ldg(row + i0 + u * nthr);
#pragma unroll
        for (int u = 0; u < k_embedding_vec_u; ++u) {
            const int64_t i = i0 + u * nthr;
            if (i >= nv) break;
            out[2 * i] = make_float4(bf16_lo(v[u].x), bf16_hi(v[u].x), bf16_lo(v[u].y), bf16_hi(v[u].y));
            out[2 * i + 1] = make_float4(bf16_lo(v[u].z), bf16_hi(v[u].z), bf16_lo(v[u].w), bf16_hi(v[u].w));
        }
    }
}

cudaError_t launch_embedding(const embedding_params &p, cudaStream_t stream) {
    if (p.n_tokens <= 0) return cudaSuccess;
    if (p.n_embd % 8 == 0 && aligned16(p.table) && aligned16(p.out))
        return launch_kernel(embedding_vec_kernel, unsigned(p.n_tokens), 256, 0, stream, p);
    return launch_kernel(embedding_kernel, unsigned(p.n_tokens), 256, 0, stream, p);
}

} // namespace es
