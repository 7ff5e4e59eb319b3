// Sampler (see sampler.h; the draw's arithmetic is engine/core/sampling.h's).
#include "engine/runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace es {

std::string sampling_params::validate() const {
    if (!(temperature >= 0.0f) || temperature > 100.0f) return "temperature must be in [0, 100]";
    if (top_k < 0) return "top_k must be >= 0";
    if (!(top_p > 0.0f && top_p <= 1.0f)) return "top_p must be in (0, 1]";
    if (!(min_p >= 0.0f && min_p <= 1.0f)) return "min_p must be in [0, 1]";
    if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty))
        return "repetition_penalty must be > 0 and finite";
    if (!std::isfinite(presence_penalty) || !std::isfinite(frequency_penalty))
        return "penalties must be finite";
    if (max_tokens < 0) return "max_tokens must be >= 0";
    return {};
}

sampler::sampler(const sampling_params &p)
    : m_p(p), m_seed(p.seed ? *p.seed : std::random_device{}() * 0x9e3779b97f4a7c15ull ^ std::random_device{}()) {}

bool sampler::has_penalties() const {
    return m_p.repetition_penalty != 1.0f || m_p.presence_penalty != 0.0f || m_p.frequency_penalty != 0.0f;
}

row_sampling sampler::spec(std::span<const int32_t> prompt, std::span<const int32_t> output, int32_t input_index,
                           std::vector<penalty_entry> &penalties) const {
    row_sampling s;
    s.temperature = greedy() ? 0.0f : m_p.temperature;
    s.top_p = m_p.top_p;
    s.min_p = m_p.min_p;
    s.top_k = m_p.top_k;
    s.repetition = m_p.repetition_penalty;
    s.presence = m_p.presence_penalty;
    s.frequency = m_p.frequency_penalty;
    s.seed = m_seed;
    s.counter = output.size(); // the tokens drawn before this one, a fed one included
    s.penalties = penalties.size();
    if (!output.empty() && output.back() < 0) {
        s.extra_token = input_index;
        output = output.first(output.size() - 1);
    }
    if (!has_penalties()) return s;
    // The distinct ids of prompt (when the repetition penalty reads it) and output, ascending,
    // each with its count in the output.
    const size_t first = penalties.size();
    if (m_p.repetition_penalty != 1.0f)
        for (int32_t id : prompt)
            if (id >= 0) penalties.push_back({id, 0});
    for (int32_t id : output)
        if (id >= 0) penalties.push_back({id, 1});
    auto begin = penalties.begin() + std::ptrdiff_t(first);
    std::sort(begin, penalties.end(), [](const penalty_entry &a, const penalty_entry &b) { return a.id < b.id; });
    auto out = begin;
    for (auto it = begin; it != penalties.end();) {
        penalty_entry e{it->id, 0};
        for (; it != penalties.end() && it->id == e.id; ++it) e.count += it->count;
        *out++ = e;
    }
    penalties.erase(out, penalties.end());
    s.n_penalties = int32_t(penalties.size() - first);
    return s;
}

int32_t sampler::sample(std::span<float> logits, std::span<const int32_t> prompt, std::span<const int32_t> output) {
    if (logits.empty()) return 0;
    m_pen.clear();
    row_sampling s = spec(prompt, output, -1, m_pen);
    s.extra_token = -1; // every token is known here
    s.penalties = reinterpret_cast<uint64_t>(m_pen.data());
    return sampling_draw(logits.data(), int64_t(logits.size()), s, nullptr);
}

} // namespace es
