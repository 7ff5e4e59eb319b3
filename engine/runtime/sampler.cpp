// Sampler (see sampler.h for the arithmetic both paths share).
#include "engine/runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

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
    : m_p(p),
      m_seed(p.seed ? *p.seed : std::random_device{}() * 0x9e3779b97f4a7c15ull ^ std::random_device{}()),
      m_rng(m_seed) {}

namespace {
// Step 2's weight: one expression for both paths.
inline float weight(float l, float mx, float t) { return std::exp((l - mx) / t); }
inline bool higher(float la, int32_t a, float lb, int32_t b) { return la > lb || (la == lb && a < b); }
} // namespace

bool sampler::has_penalties() const {
    return m_p.repetition_penalty != 1.0f || m_p.presence_penalty != 0.0f || m_p.frequency_penalty != 0.0f;
}

float sampler::sum_temperature() const { return greedy() ? 0.0f : m_p.temperature; }

void sampler::prepare_penalties(std::span<const int32_t> prompt, std::span<const int32_t> output) {
    m_seen.clear();
    m_counts.clear();
    if (m_p.repetition_penalty != 1.0f) {
        m_seen.assign(prompt.begin(), prompt.end());
        m_seen.insert(m_seen.end(), output.begin(), output.end());
        std::sort(m_seen.begin(), m_seen.end());
        m_seen.erase(std::unique(m_seen.begin(), m_seen.end()), m_seen.end());
    }
    if (m_p.presence_penalty != 0.0f || m_p.frequency_penalty != 0.0f) {
        m_tmp.assign(output.begin(), output.end());
        std::sort(m_tmp.begin(), m_tmp.end());
        for (size_t i = 0; i < m_tmp.size();) {
            size_t j = i;
            while (j < m_tmp.size() && m_tmp[j] == m_tmp[i]) ++j;
            m_counts.emplace_back(m_tmp[i], int32_t(j - i));
            i = j;
        }
    }
}

// Step 1's penalties on logit l of token id (prepare_penalties ran).
float sampler::penalized(int32_t id, float l) const {
    if (!m_seen.empty() && std::binary_search(m_seen.begin(), m_seen.end(), id))
        l = l > 0 ? l / m_p.repetition_penalty : l * m_p.repetition_penalty;
    if (!m_counts.empty()) {
        auto it = std::lower_bound(m_counts.begin(), m_counts.end(), std::make_pair(id, 0));
        if (it != m_counts.end() && it->first == id)
            l -= m_p.presence_penalty + m_p.frequency_penalty * float(it->second);
    }
    return l;
}

int32_t sampler::sample(std::span<float> logits, std::span<const int32_t> prompt,
                        std::span<const int32_t> output) {
    const int32_t n = int32_t(logits.size());
    if (n == 0) return 0;
    prepare_penalties(prompt, output);
    for (int32_t id : m_seen)
        if (id >= 0 && id < n) logits[id] = penalized(id, logits[id]);
    for (const auto &[id, count] : m_counts)
        if (id >= 0 && id < n && !std::binary_search(m_seen.begin(), m_seen.end(), id))
            logits[id] = penalized(id, logits[id]);
    for (float &l : logits)
        if (std::isnan(l)) l = -INFINITY;
    const int32_t top = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    if (greedy() || !std::isfinite(logits[top])) return top;

    // 2. Weights, min-p (ids stay in id order), top-k.
    const float mx = logits[top], t = m_p.temperature;
    m_w.resize(size_t(n));
    m_idx.clear();
    for (int32_t i = 0; i < n; ++i) {
        m_w[size_t(i)] = weight(logits[i], mx, t);
        if (m_w[size_t(i)] >= m_p.min_p) m_idx.push_back(i);
    }
    int32_t keep = int32_t(m_idx.size()), sorted = 0; // m_idx[0, sorted) is in walk order
    auto before = [&](int32_t a, int32_t b) { return higher(logits[a], a, logits[b], b); };
    bool top_k_cut = false; // m_idx holds the top k, not every id that passed min-p
    if (m_p.top_k > 0 && m_p.top_k < keep) {
        std::partial_sort(m_idx.begin(), m_idx.begin() + m_p.top_k, m_idx.end(), before);
        keep = sorted = m_p.top_k;
        m_idx.resize(size_t(keep));
        top_k_cut = true;
    }
    // 3. The kept mass in id order.
    double mass = 0.0;
    if (sorted) {
        m_tmp.assign(m_idx.begin(), m_idx.end());
        std::sort(m_tmp.begin(), m_tmp.end());
        for (int32_t id : m_tmp) mass += m_w[size_t(id)];
    } else {
        for (int32_t id : m_idx) mass += m_w[size_t(id)];
    }
    // The walk order is produced on demand: a growing sorted prefix (a full sort of 100k ids per
    // token would dominate small models); the order is the same as with a full sort.
    auto sorted_upto = [&](int32_t need) {
        while (sorted < need) {
            const int32_t w = std::min(keep, std::max(sorted * 8, 256));
            std::partial_sort(m_idx.begin() + sorted, m_idx.begin() + w, m_idx.begin() + keep, before);
            sorted = w;
        }
    };
    double total = mass;
    if (m_p.top_p < 1.0f) {
        const double target = double(m_p.top_p) * mass;
        double cum = 0.0;
        int32_t k = 0;
        while (k < keep) {
            sorted_upto(k + 1);
            cum += m_w[size_t(m_idx[size_t(k++)])];
            if (cum >= target) break;
        }
        keep = k;
        total = cum;
    }
    // 4. The draw.
    const double r = std::uniform_real_distribution<double>(0.0, 1.0)(m_rng) * total;
    double cum = 0.0;
    if (m_p.top_p < 1.0f || keep <= k_sorted_walk) {
        for (int32_t i = 0; i < keep; ++i) {
            sorted_upto(i + 1);
            cum += m_w[size_t(m_idx[size_t(i)])];
            if (r < cum) return m_idx[size_t(i)];
        }
        sorted_upto(keep);
        return m_idx[size_t(keep - 1)];
    }
    // Top-p off and more than k_sorted_walk kept: the walk's first k_sorted_walk in the order of
    // step 2, then the other kept ids ascending (sampler.h) — a flat row's draw would otherwise
    // sort half the vocabulary (~20 ms for 103,424 logits; now ~1 ms).
    sorted_upto(k_sorted_walk);
    for (int32_t i = 0; i < k_sorted_walk; ++i) {
        cum += m_w[size_t(m_idx[size_t(i)])];
        if (r < cum) return m_idx[size_t(i)];
    }
    int32_t last = m_idx[size_t(k_sorted_walk - 1)];
    if (top_k_cut || keep - k_sorted_walk <= 4096) {
        // m_idx[0, keep) is the kept set (in some order past the sorted prefix): its tail ascending.
        m_tmp.assign(m_idx.begin() + k_sorted_walk, m_idx.begin() + keep);
        std::sort(m_tmp.begin(), m_tmp.end());
        for (int32_t id : m_tmp) {
            cum += m_w[size_t(id)];
            if (r < cum) return id;
            last = id;
        }
        return last;
    }
    // Every id with w ≥ min_p is kept: walk them ascending, the sorted prefix's skipped.
    m_mark.assign(size_t(n), 0);
    for (int32_t i = 0; i < k_sorted_walk; ++i) m_mark[size_t(m_idx[size_t(i)])] = 1;
    for (int32_t id = 0; id < n; ++id) {
        if (m_mark[size_t(id)] || !(m_w[size_t(id)] >= m_p.min_p)) continue;
        cum += m_w[size_t(id)];
        if (r < cum) return id;
        last = id;
    }
    return last;
}

std::optional<int32_t> sampler::sample_candidates(const logit_candidates &c, std::span<const int32_t> prompt,
                                                  std::span<const int32_t> output) {
    const int32_t slots = int32_t(std::min(c.ids.size(), c.logits.size()));
    int32_t n = 0; // valid entries
    while (n < slots && c.ids[size_t(n)] >= 0 && c.ids[size_t(n)] < c.n_vocab) ++n;
    if (c.n_vocab <= 0 || (n == 0 && slots == 0)) return std::nullopt;
    // A complete list (every non-NaN value of the row is in it): rebuild the row, NaN as −inf.
    if (n < slots || int64_t(n) >= c.n_vocab) {
        m_row.assign(size_t(c.n_vocab), -INFINITY);
        for (int32_t j = 0; j < n; ++j) m_row[size_t(c.ids[size_t(j)])] = c.logits[size_t(j)];
        return sample(m_row, prompt, output);
    }
    // An original +inf at the top stays the first +inf after any penalty: sample() returns it.
    if (c.logits[0] == INFINITY) return c.ids[0];
    const bool pen = has_penalties();
    if (m_p.repetition_penalty < 1.0f || m_p.presence_penalty < 0.0f || m_p.frequency_penalty < 0.0f)
        return std::nullopt;

    // 1. The penalized list in walk order; its certain prefix.
    const float theta = c.logits[size_t(n - 1)];
    m_idx.resize(size_t(n));
    m_w.resize(size_t(n));
    m_row.resize(size_t(n)); // penalized logits, by list slot
    if (pen) prepare_penalties(prompt, output);
    for (int32_t j = 0; j < n; ++j) {
        const float l = std::isnan(c.logits[size_t(j)]) ? -INFINITY : c.logits[size_t(j)];
        m_row[size_t(j)] = pen ? penalized(c.ids[size_t(j)], l) : l;
        if (std::isnan(m_row[size_t(j)])) m_row[size_t(j)] = -INFINITY;
        m_idx[size_t(j)] = j;
    }
    auto before = [&](int32_t a, int32_t b) {
        return higher(m_row[size_t(a)], c.ids[size_t(a)], m_row[size_t(b)], c.ids[size_t(b)]);
    };
    if (pen) std::sort(m_idx.begin(), m_idx.end(), before);
    int32_t certain = n;
    if (pen) {
        certain = 0;
        while (certain < n && m_row[size_t(m_idx[size_t(certain)])] > theta) ++certain;
    }
    if (certain == 0) return std::nullopt;
    auto id_at = [&](int32_t k) { return c.ids[size_t(m_idx[size_t(k)])]; };
    const float mx = m_row[size_t(m_idx[0])];
    if (mx == -INFINITY) return 0; // no penalties (else nothing is certain): the whole row is −inf/NaN
    if (greedy() || mx == INFINITY) return id_at(0);

    // 2. Weights (by walk position), min-p, top-k.
    const float t = m_p.temperature;
    for (int32_t k = 0; k < n; ++k) m_w[size_t(k)] = weight(m_row[size_t(m_idx[size_t(k)])], mx, t);
    int32_t certain_kept = 0; // weights fall along the walk: the min-p survivors are a prefix
    while (certain_kept < certain && m_w[size_t(certain_kept)] >= m_p.min_p) ++certain_kept;
    int32_t keep = -1; // the kept set as a walk prefix, when known
    if (m_p.top_k > 0 && m_p.top_k <= certain_kept)
        keep = m_p.top_k;
    else if (m_p.min_p > 0.0f && weight(theta, mx, t) < m_p.min_p)
        keep = m_p.top_k > 0 ? std::min(m_p.top_k, certain_kept) : certain_kept;

    // With top-p off, sample() walks its first k_sorted_walk in this order and the rest by id:
    // the list decides draws inside that prefix only.
    if (m_p.top_p >= 1.0f && keep > k_sorted_walk) return std::nullopt;
    std::mt19937_64 rng = m_rng;
    const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng);
    if (keep > 0) {
        // 3. Mass in id order, then top-p and the draw exactly as sample().
        m_tmp.resize(size_t(keep));
        for (int32_t k = 0; k < keep; ++k) m_tmp[size_t(k)] = k;
        std::sort(m_tmp.begin(), m_tmp.end(), [&](int32_t a, int32_t b) { return id_at(a) < id_at(b); });
        double mass = 0.0;
        for (int32_t k : m_tmp) mass += m_w[size_t(k)];
        double total = mass;
        if (m_p.top_p < 1.0f) {
            const double target = double(m_p.top_p) * mass;
            double cum = 0.0;
            int32_t k = 0;
            while (k < keep) {
                cum += m_w[size_t(k++)];
                if (cum >= target) break;
            }
            keep = k;
            total = cum;
        }
        const double r = u * total;
        double cum = 0.0;
        int32_t pick = keep - 1;
        for (int32_t i = 0; i < keep; ++i) {
            cum += m_w[size_t(i)];
            if (r < cum) {
                pick = i;
                break;
            }
        }
        m_rng = rng;
        return id_at(pick);
    }
    // The whole vocabulary is kept: the mass is the backend's sum, known within sum_tolerance.
    if (pen || m_p.min_p > 0.0f || (m_p.top_k > 0 && m_p.top_k < c.n_vocab) || c.sum_temperature != t ||
        !(c.sum > 0.0) || !std::isfinite(c.sum))
        return std::nullopt;
    const double lo = c.sum * (1.0 - sum_tolerance), hi = c.sum * (1.0 + sum_tolerance);
    // The first walk position whose cum reaches `target` (strict: r < cum; else cum ≥ target), or n.
    auto first_reaching = [&](double target, bool strict) {
        double cum = 0.0;
        for (int32_t k = 0; k < n; ++k) {
            cum += m_w[size_t(k)];
            if (strict ? target < cum : cum >= target) return k;
        }
        return n;
    };
    int32_t keep_p = -1;
    double total_lo = lo, total_hi = hi;
    if (m_p.top_p < 1.0f) {
        const int32_t a = first_reaching(double(m_p.top_p) * lo, false),
                      b = first_reaching(double(m_p.top_p) * hi, false);
        if (a != b || b == n) return std::nullopt;
        keep_p = a + 1;
        double cum = 0.0;
        for (int32_t k = 0; k < keep_p; ++k) cum += m_w[size_t(k)];
        total_lo = total_hi = cum;
    }
    const int32_t a = first_reaching(u * total_lo, true), b = first_reaching(u * total_hi, true);
    const int32_t n_draw = m_p.top_p < 1.0f ? n : std::min(n, k_sorted_walk); // (see above)
    if (a != b || b >= n_draw || (keep_p > 0 && b >= keep_p)) {
        if (keep_p > 0 && a == b && b >= keep_p) { // r ≥ the kept cum: sample() takes the last kept
            m_rng = rng;
            return id_at(keep_p - 1);
        }
        return std::nullopt;
    }
    m_rng = rng;
    return id_at(b);
}

} // namespace es
