// CPU twin of moe_router (see moe_router.cuh); the same rules as the CPU backend's router.
#include "kernels/moe_router.cuh"
#include "kernels/rms_norm.cuh"

#include <algorithm>
#include <limits>
#include <numeric>
#include <vector>

namespace es {

bool moe_router_norm_ok(const moe_router_params &p) {
    const size_t tail = (size_t(2 * p.n_expert + p.n_expert_used) * sizeof(float) + 15) / 16 * 16;
    auto al = [](const void *q, uintptr_t a) { return (reinterpret_cast<uintptr_t>(q) & (a - 1)) == 0; };
    return p.n_embd > 0 && p.n_embd % 4 == 0 && tail + size_t(p.n_embd) * 2 <= 48 * 1024 &&
           al(p.norm.x, 16) && al(p.norm.weight, 8) && al(p.norm.out, 16);
}

void moe_router_ref(const moe_router_params &p) {
    const int64_t H = p.n_embd, E = p.n_expert, K = p.n_expert_used;
    std::vector<bf16_t> xn;
    if (p.norm.on()) xn = norm_in_ref(p.norm, p.n_tokens, H);
    const bf16_t *x = p.norm.on() ? xn.data() : p.x;
    std::vector<float> prob(static_cast<size_t>(E)), biased(static_cast<size_t>(E));
    std::vector<int32_t> order(static_cast<size_t>(E));
    for (int64_t t = 0; t < p.n_tokens; ++t) {
        for (int64_t e = 0; e < E; ++e) {
            float acc = 0.0f;
            for (int64_t i = 0; i < H; ++i) acc += p.w[e * H + i] * bf16_bits_to_float(x[t * H + i]);
            prob[e] = acc;
            if (p.logits) p.logits[t * E + e] = acc; // as the kernels leave them in their scratch
        }
        const float mx = *std::max_element(prob.begin(), prob.end());
        float sum = 0.0f;
        for (auto &v : prob) {
            v = std::exp(v - mx);
            sum += v;
        }
        const float inv = 1.0f / sum;
        for (int64_t e = 0; e < E; ++e) {
            prob[e] *= inv;
            biased[e] = prob[e] + p.bias[e];
        }
        std::iota(order.begin(), order.end(), 0);
        const int64_t sorted = std::min(K + (p.margins ? 1 : 0), E); // the (k+1)-th too for the margin
        std::partial_sort(order.begin(), order.begin() + sorted, order.end(), [&](int32_t a, int32_t b) {
            return biased[a] > biased[b] || (biased[a] == biased[b] && a < b);
        });
        if (p.margins)
            p.margins[t] = K < E ? biased[order[K - 1]] - biased[order[K]] : std::numeric_limits<float>::quiet_NaN();
        float chosen = 0.0f;
        for (int64_t j = 0; j < K; ++j) chosen += prob[order[j]];
        const float denom = std::max(chosen, p.norm_min);
        for (int64_t j = 0; j < K; ++j) {
            p.ids[t * K + j] = order[j];
            p.weights[t * K + j] = prob[order[j]] / denom;
        }
    }
}

} // namespace es
