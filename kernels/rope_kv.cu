// rope_kv (see rope_kv.cuh): one block per token; threads stride over the rotation pairs of all
// q and k heads (each thread one pair: one sincosf, two outputs), then over v's elements.
// sincosf (not __sincosf) keeps full accuracy at large angles (pos up to the model's context).
#include "rope_kv.cuh"
#include "kernel_common.cuh"

namespace es {

__global__ void rope_kv_kernel(rope_kv_params p) {
    pdl_enter();
    const int64_t t = blockIdx.x, hd = p.head_dim, half = hd / 2;
    const int64_t qd = p.n_head * hd, kvd = p.n_head_kv * hd;
    const float *row = p.qkv + t * (qd + 2 * kvd);
    const int32_t pos = p.pos[t];
    const int64_t slot = int64_t(p.block_tables[int64_t(p.seq[t]) * p.bt_stride + pos / p.block_size]) * p.block_size +
                         pos % p.block_size;
    uint16_t *kdst = p.k_cache + slot * kvd, *vdst = p.v_cache + slot * kvd;
    const int64_t n_pairs = (p.n_head + p.n_head_kv) * half;
    for (int64_t j = threadIdx.x; j < n_pairs; j += blockDim.x) {
        const int64_t h = j / half, i = j % half;
        float s, c;
        sincosf(float(pos) * p.inv_freq[i], &s, &c);
        const float a = row[h * hd + 2 * i], b = row[h * hd + 2 * i + 1];
        const float x0 = a * c - b * s, x1 = b * c + a * s;
        if (h < p.n_head) {
            p.q_out[t * qd + h * hd + 2 * i] = f_to_bf16(x0);
            p.q_out[t * qd + h * hd + 2 * i + 1] = f_to_bf16(x1);
        } else {
            const int64_t o = (h - p.n_head) * hd + 2 * i;
            kdst[o] = f_to_bf16(x0);
            kdst[o + 1] = f_to_bf16(x1);
        }
    }
    for (int64_t j = threadIdx.x; j < kvd; j += blockDim.x) vdst[j] = f_to_bf16(row[qd + kvd + j]);
}

cudaError_t launch_rope_kv(const rope_kv_params &p, cudaStream_t stream) {
    if (p.n_tokens <= 0) return cudaSuccess;
    if (p.head_dim % 2 != 0) return cudaErrorInvalidValue;
    return launch_kernel(rope_kv_kernel, unsigned(p.n_tokens), 128, 0, stream, p);
}

} // namespace es
