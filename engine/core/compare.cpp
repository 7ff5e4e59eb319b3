// compare.h: every sum in double, in index order.
#include "engine/core/compare.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace es {

void nmse_accumulator::add(std::span<const float> a, std::span<const float> ref) {
    const size_t n = std::min(a.size(), ref.size());
    for (size_t i = 0; i < n; ++i) {
        const double d = double(a[i]) - double(ref[i]);
        num += d * d;
        den += double(ref[i]) * double(ref[i]);
    }
}

double nmse(std::span<const float> a, std::span<const float> ref) {
    if (a.size() != ref.size()) return std::numeric_limits<double>::infinity();
    nmse_accumulator acc;
    acc.add(a, ref);
    return acc.value();
}

double cosine_similarity(std::span<const float> a, std::span<const float> b) {
    double ab = 0, aa = 0, bb = 0;
    const size_t n = std::min(a.size(), b.size());
    for (size_t i = 0; i < n; ++i) {
        ab += double(a[i]) * b[i];
        aa += double(a[i]) * a[i];
        bb += double(b[i]) * b[i];
    }
    return aa > 0 && bb > 0 ? ab / std::sqrt(aa * bb) : (aa == bb ? 1.0 : 0.0);
}

namespace {
// log softmax of x into out, in double.
void log_softmax(std::span<const float> x, std::vector<double> &out) {
    double mx = -std::numeric_limits<double>::infinity();
    for (float v : x) mx = std::max(mx, double(v));
    double sum = 0.0;
    for (float v : x) sum += std::exp(double(v) - mx);
    const double lse = mx + std::log(sum);
    out.resize(x.size());
    for (size_t i = 0; i < x.size(); ++i) out[i] = double(x[i]) - lse;
}
} // namespace

double kl_divergence_logits(std::span<const float> p, std::span<const float> q) {
    if (p.size() != q.size()) return std::numeric_limits<double>::infinity();
    std::vector<double> lp, lq;
    log_softmax(p, lp);
    log_softmax(q, lq);
    double d = 0.0;
    for (size_t i = 0; i < lp.size(); ++i) {
        const double w = std::exp(lp[i]);
        if (w == 0.0) continue; // 0 · log(0 / q) = 0
        d += w * (lp[i] - lq[i]);
    }
    return std::isnan(d) ? std::numeric_limits<double>::infinity() : std::max(0.0, d);
}

} // namespace es
