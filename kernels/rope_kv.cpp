// CPU twin of rope_kv (see rope_kv.cuh).
#include "kernels/rope_kv.cuh"

namespace es {

void rope_kv_ref(const rope_kv_params &p) {
    const int64_t hd = p.head_dim, half = hd / 2, qd = p.n_head * hd, kvd = p.n_head_kv * hd;
    for (int64_t t = 0; t < p.n_tokens; ++t) {
        const float *row = p.qkv + t * (qd + 2 * kvd);
        const int32_t pos = p.pos[t];
        const int64_t slot =
            int64_t(p.block_tables[int64_t(p.seq[t]) * p.bt_stride + pos / p.block_size]) * p.block_size +
            pos % p.block_size;
        for (int64_t h = 0; h < p.n_head + p.n_head_kv; ++h) {
            for (int64_t i = 0; i < half; ++i) {
                const float angle = float(pos) * p.inv_freq[i];
                const float c = std::cos(angle), s = std::sin(angle);
                const float a = row[h * hd + 2 * i], b = row[h * hd + 2 * i + 1];
                const float x0 = a * c - b * s, x1 = b * c + a * s;
                if (h < p.n_head) {
                    p.q_out[t * qd + h * hd + 2 * i] = float_to_bf16_bits(x0);
                    p.q_out[t * qd + h * hd + 2 * i + 1] = float_to_bf16_bits(x1);
                    continue;
                }
                const int64_t e = slot * kvd + (h - p.n_head) * hd + 2 * i;
                if (p.kv == kv_format::fp8_e4m3) {
                    static_cast<fp8_t *>(p.k_cache)[e] = kv_store_fp8(x0, p.k_scale);
                    static_cast<fp8_t *>(p.k_cache)[e + 1] = kv_store_fp8(x1, p.k_scale);
                } else {
                    static_cast<bf16_t *>(p.k_cache)[e] = float_to_bf16_bits(x0);
                    static_cast<bf16_t *>(p.k_cache)[e + 1] = float_to_bf16_bits(x1);
                }
            }
        }
        for (int64_t j = 0; j < kvd; ++j) {
            const float x = row[qd + kvd + j];
            if (p.kv == kv_format::fp8_e4m3)
                static_cast<fp8_t *>(p.v_cache)[slot * kvd + j] = kv_store_fp8(x, p.v_scale);
            else
                static_cast<bf16_t *>(p.v_cache)[slot * kvd + j] = float_to_bf16_bits(x);
        }
    }
}

} // namespace es
