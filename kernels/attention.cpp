// CPU twin of attention and the host-side tile plan (see attention.cuh).
#include "kernels/attention.cuh"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace es {

std::vector<int32_t> attention_tiles(const int32_t *seq, int64_t n_tokens, int64_t group) {
    const int64_t max_tokens = attention_tile_tokens(group);
    std::vector<int32_t> tiles;
    int64_t t = 0;
    while (t < n_tokens) {
        int64_t n = 1;
        while (t + n < n_tokens && n < max_tokens && seq[t + n] == seq[t]) ++n;
        tiles.push_back(int32_t(t));
        tiles.push_back(int32_t(n));
        t += n;
    }
    return tiles;
}

bool attention_tc_supported(const attention_params &p) {
    const auto a16 = [](const void *ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15u) == 0; };
    return p.kv_splits == 1 && (p.head_dim == 64 || p.head_dim == 128) && p.n_head_kv > 0 &&
           p.n_head % p.n_head_kv == 0 && p.n_head / p.n_head_kv <= 32 && p.block_size >= 1 && a16(p.q) &&
           a16(p.out) && a16(p.k_cache) && a16(p.v_cache);
}

bool attention_uses_tensor_cores(const attention_params &p) {
    switch (p.path) {
    case attention_path::cuda_core:
        return false;
    case attention_path::tensor_core:
        return attention_tc_supported(p);
    case attention_path::automatic:
        break;
    }
    // Prefill-like: enough tokens, and tiles averaging ≥ 16 rows (one MMA row block), which a
    // batch of many single decode tokens (tiles of `group` rows) is not.
    return p.n_tokens >= attention_tc_min_tokens && attention_tc_supported(p) &&
           p.n_tokens * (p.n_head / p.n_head_kv) >= 16 * p.n_tiles;
}

namespace {
// Element i of a K or V pool as the kernels read it (BF16, or FP8 widened: kv_read_fp8).
float kv_at(const void *pool, kv_format f, float scale, int64_t i) {
    return f == kv_format::bf16 ? bf16_bits_to_float(static_cast<const bf16_t *>(pool)[i])
                                : bf16_bits_to_float(kv_read_fp8(static_cast<const fp8_t *>(pool)[i], scale));
}
} // namespace

void attention_ref(const attention_params &p) {
    const int64_t hd = p.head_dim, qd = p.n_head * hd, kvd = p.n_head_kv * hd, group = p.n_head / p.n_head_kv;
    // Every (token, head) output on its own (OpenMP threads; each the same arithmetic alone).
#pragma omp parallel for collapse(2) schedule(dynamic)
    for (int64_t t = 0; t < p.n_tokens; ++t) {
        for (int64_t h = 0; h < p.n_head; ++h) {
            const int32_t *bt = p.block_tables + int64_t(p.seq[t]) * p.bt_stride;
            const int64_t n_ctx = int64_t(p.pos[t]) + 1;
            std::vector<float> scores(static_cast<size_t>(n_ctx)), o(static_cast<size_t>(hd));
            const int64_t kvh = h / group;
            const bf16_t *q = p.q + t * qd + h * hd;
            float mx = -INFINITY;
            for (int64_t j = 0; j < n_ctx; ++j) {
                const int64_t slot = int64_t(bt[j / p.block_size]) * p.block_size + j % p.block_size;
                const int64_t k = slot * kvd + kvh * hd;
                float s = 0.0f;
                for (int64_t d = 0; d < hd; ++d)
                    s += bf16_bits_to_float(q[d]) * kv_at(p.k_cache, p.kv, p.k_scale, k + d);
                scores[j] = s * p.scale;
                mx = std::max(mx, scores[j]);
            }
            float sum = 0.0f;
            for (int64_t j = 0; j < n_ctx; ++j) {
                scores[j] = std::exp(scores[j] - mx);
                sum += scores[j];
            }
            for (int64_t j = 0; j < n_ctx; ++j) {
                const int64_t slot = int64_t(bt[j / p.block_size]) * p.block_size + j % p.block_size;
                const int64_t v = slot * kvd + kvh * hd;
                for (int64_t d = 0; d < hd; ++d) o[d] += scores[j] * kv_at(p.v_cache, p.kv, p.v_scale, v + d);
            }
            for (int64_t d = 0; d < hd; ++d) p.out[t * qd + h * hd + d] = float_to_bf16_bits(o[d] / sum);
        }
    }
}

} // namespace es
