// CPU twin of rope_kv (see rope_kv.cuh).
#include "rope_kv.cuh"

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
                bf16_t *dst = h < p.n_head ? p.q_out + t * qd + h * hd : p.k_cache + slot * kvd + (h - p.n_head) * hd;
                dst[2 * i] = float_to_bf16_bits(x0);
                dst[2 * i + 1] = float_to_bf16_bits(x1);
            }
        }
        for (int64_t j = 0; j < kvd; ++j) p.v_cache[slot * kvd + j] = float_to_bf16_bits(row[qd + kvd + j]);
    }
}

} // namespace es
