// How two float vectors are compared everywhere in the engine, its self-test, its tests and
// `expertscope-cli eval`: normalized mean squared error against a reference, cosine similarity,
// and the KL divergence of two logits rows. Sums in double, in index order, so a figure is the
// same wherever it is computed.
#pragma once

#include <span>
#include <vector>

namespace es {

// NMSE as an accumulator over many rows: Σ(a − ref)² / Σ ref² (Σ(a − ref)² when the reference is
// all zero, so identical zero vectors give 0).
struct nmse_accumulator {
    double num = 0.0, den = 0.0;
    void add(std::span<const float> a, std::span<const float> ref);
    double value() const { return den > 0 ? num / den : num; }
};

// NMSE of `a` against `ref`; +inf when their sizes differ.
double nmse(std::span<const float> a, std::span<const float> ref);
inline double nmse(const std::vector<float> &a, const std::vector<float> &ref) {
    return nmse(std::span<const float>(a), std::span<const float>(ref));
}

// a·b / (|a| |b|); 1 when both are zero, 0 when only one is.
double cosine_similarity(std::span<const float> a, std::span<const float> b);

// KL(softmax(p) ‖ softmax(q)) of two logits rows of one size, in nats, clamped at 0 (rounding can
// make it a hair negative). Non-finite logits give +inf unless both rows hold the same −inf.
double kl_divergence_logits(std::span<const float> p, std::span<const float> q);

} // namespace es
