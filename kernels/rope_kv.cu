// rope_kv (see rope_kv.cuh): grid (token, item blocks of 256): one thread per item, a rotation
// pair of a q or k head (one sincosf, two outputs) or one element of v, so the loads of a token
// are in flight together (one block per token striding over 1,152 pairs waited ~9 µs on nine
// load round trips).
// sincosf (not __sincosf) keeps full accuracy at large angles (pos up to the model's context).
#include "kernels/kernel_common.cuh"
#include "kernels/rope_kv.cuh"

namespace es {

__global__ void __launch_bounds__(256) rope_kv_kernel(rope_kv_params p) {
    pdl_enter();
    const int64_t t = blockIdx.x, hd = p.head_dim, half = hd / 2;
    const int64_t qd = p.n_head * hd, kvd = p.n_head_kv * hd;
    const int64_t n_pairs = (p.n_head + p.n_head_kv) * half;
    // One item per thread: a rotation pair (j < n_pairs) or one element of v.
    const int64_t j = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
    if (j >= n_pairs + kvd) return;
    const float *row = p.qkv + t * (qd + 2 * kvd);
    const int64_t h = j / half, i = j % half;
    if (j < n_pairs && h < p.n_head) { // q: no cache slot needed
        const int32_t pos = p.pos[t];
        const float a = row[h * hd + 2 * i], b = row[h * hd + 2 * i + 1], f = p.inv_freq[i];
        float sn, cs;
        sincosf(float(pos) * f, &sn, &cs);
        p.q_out[t * qd + h * hd + 2 * i] = f_to_bf16(a * cs - b * sn);
        p.q_out[t * qd + h * hd + 2 * i + 1] = f_to_bf16(b * cs + a * sn);
        return;
    }
    const int32_t pos = p.pos[t];
    const int64_t slot =
        int64_t(p.block_tables[int64_t(p.seq[t]) * p.bt_stride + pos / p.block_size]) * p.block_size +
        pos % p.block_size;
    if (j < n_pairs) {
        const float a = row[h * hd + 2 * i], b = row[h * hd + 2 * i + 1], f = p.inv_freq[i];
        float sn, cs;
        sincosf(float(pos) * f, &sn, &cs);
        const float k0 = a * cs - b * sn, k1 = b * cs + a * sn;
        const int64_t e = slot * kvd + (h - p.n_head) * hd + 2 * i;
        if (p.kv == kv_format::fp8_e4m3) {
            uint8_t *kdst = static_cast<uint8_t *>(p.k_cache) + e;
            kdst[0] = kv_store_fp8_d(k0, p.k_scale);
            kdst[1] = kv_store_fp8_d(k1, p.k_scale);
        } else {
            uint16_t *kdst = static_cast<uint16_t *>(p.k_cache) + e;
            kdst[0] = f_to_bf16(k0);
            kdst[1] = f_to_bf16(k1);
        }
    } else {
        const int64_t v = j - n_pairs;
        const float x = row[qd + kvd + v];
        if (p.kv == kv_format::fp8_e4m3)
            static_cast<uint8_t *>(p.v_cache)[slot * kvd + v] = kv_store_fp8_d(x, p.v_scale);
        else
            static_cast<uint16_t *>(p.v_cache)[slot * kvd + v] = f_to_bf16(x);
    }
}

cudaError_t launch_rope_kv(const rope_kv_params &p, cudaStream_t stream) {
    if (p.n_tokens <= 0) return cudaSuccess;
    if (p.head_dim % 2 != 0) return cudaErrorInvalidValue;
    const int64_t items = (p.n_head + p.n_head_kv) * (p.head_dim / 2) + p.n_head_kv * p.head_dim;
    return launch_decode<rope_kv_kernel>(dim3(unsigned(p.n_tokens), ceil_div_u(items, 256)), 256, 0, stream,
                                         p);
}

} // namespace es
