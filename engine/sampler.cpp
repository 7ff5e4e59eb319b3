// Sampler (see sampler.h).
#include "sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace es {

std::string sampling_params::validate() const {
    if (!(temperature >= 0.0f) || temperature > 100.0f) return "temperature must be in [0, 100]";
    if (top_k < 0) return "top_k must be >= 0";
    if (!(top_p > 0.0f && top_p <= 1.0f)) return "top_p must be in (0, 1]";
    if (!(min_p >= 0.0f && min_p <= 1.0f)) return "min_p must be in [0, 1]";
    if (!(repetition_penalty > 0.0f)) return "repetition_penalty must be > 0";
    if (!std::isfinite(presence_penalty) || !std::isfinite(frequency_penalty)) return "penalties must be finite";
    if (max_tokens < 0) return "max_tokens must be >= 0";
    return {};
}

sampler::sampler(const sampling_params &p)
    : m_p(p), m_seed(p.seed ? *p.seed : std::random_device{}() * 0x9e3779b97f4a7c15ull ^ std::random_device{}()),
      m_rng(m_seed) {}

int32_t sampler::sample(std::span<float> logits, std::span<const int32_t> prompt, std::span<const int32_t> output) {
    const int32_t n = int32_t(logits.size());
    // Penalties.
    if (m_p.repetition_penalty != 1.0f) {
        auto penalize = [&](int32_t id) {
            if (id < 0 || id >= n) return;
            float &l = logits[id];
            l = l > 0 ? l / m_p.repetition_penalty : l * m_p.repetition_penalty;
        };
        // Each distinct token once.
        std::vector<int32_t> seen(prompt.begin(), prompt.end());
        seen.insert(seen.end(), output.begin(), output.end());
        std::sort(seen.begin(), seen.end());
        seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
        for (int32_t id : seen) penalize(id);
    }
    if (m_p.presence_penalty != 0.0f || m_p.frequency_penalty != 0.0f) {
        m_counts.assign(size_t(n), 0);
        for (int32_t id : output)
            if (id >= 0 && id < n) ++m_counts[id];
        for (int32_t id = 0; id < n; ++id)
            if (m_counts[id] > 0) logits[id] -= m_p.presence_penalty + m_p.frequency_penalty * float(m_counts[id]);
    }
    // Greedy: highest logit, lowest id on ties.
    if (m_p.temperature <= 1e-5f) return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());

    // Softmax at temperature.
    const float mx = *std::max_element(logits.begin(), logits.end());
    float sum = 0.0f;
    for (float &l : logits) {
        l = std::exp((l - mx) / m_p.temperature);
        sum += l;
    }
    for (float &l : logits) l /= sum;
    // Candidates sorted by probability (stable on ids).
    m_idx.resize(size_t(n));
    std::iota(m_idx.begin(), m_idx.end(), 0);
    const float pmax = 1.0f / sum; // probability of the top token after normalization (exp(0)/sum)
    int32_t keep = n;
    if (m_p.min_p > 0.0f) {
        const float cut = m_p.min_p * pmax;
        keep = int32_t(std::partition(m_idx.begin(), m_idx.end(), [&](int32_t i) { return logits[i] >= cut; }) -
                       m_idx.begin());
    }
    auto higher = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
    if (m_p.top_k > 0 && m_p.top_k < keep) {
        std::partial_sort(m_idx.begin(), m_idx.begin() + m_p.top_k, m_idx.begin() + keep, higher);
        keep = m_p.top_k;
    } else if (m_p.top_p < 1.0f) {
        // Top-p needs only the sorted head that holds top_p of the mass: sort a growing prefix
        // instead of the whole vocabulary (a full sort of 100k ids per token dominated small
        // models). The kept set and its order are the same as with a full sort.
        float all = 0.0f;
        for (int32_t i = 0; i < keep; ++i) all += logits[m_idx[i]];
        for (int32_t w = std::min(keep, 256);; w = std::min(keep, w * 8)) {
            std::partial_sort(m_idx.begin(), m_idx.begin() + w, m_idx.begin() + keep, higher);
            float head = 0.0f;
            for (int32_t i = 0; i < w; ++i) head += logits[m_idx[i]];
            if (w == keep || head >= m_p.top_p * all) break;
        }
    }
    // Otherwise every kept token is a candidate: they are drawn from in the order they are in.
    if (m_p.top_p < 1.0f) {
        float total = 0.0f;
        for (int32_t i = 0; i < keep; ++i) total += logits[m_idx[i]];
        float cum = 0.0f;
        int32_t k = 0;
        while (k < keep) {
            cum += logits[m_idx[k++]];
            if (cum >= m_p.top_p * total) break;
        }
        keep = std::max(k, 1);
    }
    float total = 0.0f;
    for (int32_t i = 0; i < keep; ++i) total += logits[m_idx[i]];
    const double r = std::uniform_real_distribution<double>(0.0, 1.0)(m_rng) * total;
    double cum = 0.0;
    for (int32_t i = 0; i < keep; ++i) {
        cum += logits[m_idx[i]];
        if (r < cum) return m_idx[i];
    }
    return m_idx[keep - 1];
}

} // namespace es
