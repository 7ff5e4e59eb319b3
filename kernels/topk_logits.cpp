// CPU twin of topk_logits (see topk_logits.cuh), and the scratch size its launcher needs.
#include "kernels/topk_logits.cuh"

#include <algorithm>
#include <vector>

namespace es {

namespace {
// The launcher's chunking (topk_logits.cu): one block sorts topk_chunk values.
constexpr int64_t topk_chunk = 2048;
} // namespace

size_t topk_logits_scratch_bytes(int64_t n_rows, int64_t n_vocab, int32_t n_top) {
    const int64_t blocks = (n_vocab + topk_chunk - 1) / topk_chunk;
    // Per row and block: n_top keys (8 bytes), its max (padded to 8) and its sum (double).
    return size_t(n_rows * blocks) * (size_t(std::max(n_top, 1)) * 8 + 16);
}

void topk_logits_ref(const topk_logits_params &p) {
    std::vector<int32_t> idx;
    for (int64_t r = 0; r < p.n_rows; ++r) {
        const float *x = p.logits + r * p.n_vocab;
        idx.clear();
        float mx = -INFINITY;
        for (int64_t v = 0; v < p.n_vocab; ++v)
            if (!std::isnan(x[v])) {
                idx.push_back(int32_t(v));
                mx = std::max(mx, x[v]);
            }
        const size_t n = std::min(idx.size(), size_t(p.n_top));
        std::partial_sort(idx.begin(), idx.begin() + long(n), idx.end(),
                          [&](int32_t a, int32_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
        for (int32_t j = 0; j < p.n_top; ++j) {
            p.ids[r * p.n_top + j] = size_t(j) < n ? idx[size_t(j)] : -1;
            p.values[r * p.n_top + j] = size_t(j) < n ? x[idx[size_t(j)]] : -INFINITY;
        }
        p.row_max[r] = mx;
        const float t = p.temperatures ? p.temperatures[r] : 0.0f;
        double sum = 0.0;
        if (t > 0.0f && std::isfinite(mx))
            for (int64_t v = 0; v < p.n_vocab; ++v)
                if (!std::isnan(x[v])) sum += std::exp((double(x[v]) - double(mx)) / double(t));
        p.row_sum[r] = sum;
    }
}

} // namespace es
