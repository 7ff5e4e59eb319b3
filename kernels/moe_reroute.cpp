// CPU twin of moe_reroute (see moe_reroute.cuh): the CPU backend's router under an intervention.
#include "kernels/moe_reroute.cuh"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace es {

void moe_reroute_fill_rule(int32_t *rule, int64_t n_expert, int32_t k, const int32_t *forced, int32_t n_forced,
                           const uint8_t *disabled, float bias_scale) {
    const int64_t E = n_expert;
    std::fill(rule, rule + moe_reroute_rule_words(E), 0);
    rule[0] = k;
    rule[1] = n_forced;
    std::memcpy(&rule[2], &bias_scale, 4);
    std::copy(forced, forced + n_forced, rule + 4);
    if (disabled) std::memcpy(rule + 4 + E, disabled, size_t(E));
}

void moe_reroute_ref(const moe_reroute_params &p) {
    const int64_t E = p.n_expert, K = p.K, words = moe_reroute_rule_words(E);
    std::vector<float> prob(static_cast<size_t>(E)), score(static_cast<size_t>(E));
    std::vector<uint8_t> taken(static_cast<size_t>(E));
    for (int64_t t = 0; t < p.n_tokens; ++t) {
        const int32_t *rule = p.rules + int64_t(p.token_rule[t]) * words;
        const int64_t k = rule[0], n_forced = rule[1];
        float bias_scale;
        std::memcpy(&bias_scale, &rule[2], 4);
        const int32_t *forced = rule + 4;
        const uint8_t *disabled = reinterpret_cast<const uint8_t *>(rule + 4 + E);
        // The softmax without the disabled experts (their logit −∞), as the CPU backend's.
        float mx = -INFINITY;
        for (int64_t e = 0; e < E; ++e) {
            prob[size_t(e)] = disabled[e] ? -INFINITY : p.logits[t * E + e];
            mx = prob[size_t(e)] > mx ? prob[size_t(e)] : mx;
        }
        float sum = 0.0f;
        for (int64_t e = 0; e < E; ++e) {
            prob[size_t(e)] = std::exp(prob[size_t(e)] - mx);
            sum += prob[size_t(e)];
        }
        const float inv = 1.0f / sum;
        for (int64_t e = 0; e < E; ++e) {
            prob[size_t(e)] *= inv;
            score[size_t(e)] = bias_scale == 1.0f ? prob[size_t(e)] + p.bias[e] : prob[size_t(e)] + bias_scale * p.bias[e];
        }
        std::fill(taken.begin(), taken.end(), uint8_t(0));
        for (int64_t e = 0; e < E; ++e) taken[size_t(e)] = disabled[e];
        int32_t *ids = p.ids + t * K;
        float chosen = 0.0f, last_free = -INFINITY;
        for (int64_t j = 0; j < k; ++j) {
            int32_t best = -1;
            if (j < n_forced) {
                best = forced[j];
            } else {
                for (int64_t e = 0; e < E; ++e)
                    if (!taken[size_t(e)] && (best < 0 || score[size_t(e)] > score[size_t(best)])) best = int32_t(e);
                last_free = score[size_t(best)];
            }
            taken[size_t(best)] = 1;
            ids[j] = best;
            chosen += prob[size_t(best)];
        }
        const float denom = std::max(chosen, p.norm_min);
        for (int64_t j = 0; j < K; ++j) {
            if (j >= k) ids[j] = ids[0];
            p.weights[t * K + j] = j < k ? prob[size_t(ids[j])] / denom : 0.0f;
        }
        if (p.margins) {
            float best_left = -INFINITY;
            for (int64_t e = 0; e < E; ++e)
                if (!taken[size_t(e)]) best_left = std::max(best_left, score[size_t(e)]);
            p.margins[t] = k > n_forced && best_left > -INFINITY ? last_free - best_left
                                                                 : std::numeric_limits<float>::quiet_NaN();
        }
    }
}

} // namespace es
