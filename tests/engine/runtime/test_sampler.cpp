// es::sampler and sampling_params::validate(): greedy (ties → lowest id), per-seed determinism,
// the filters (top-k, top-p, min-p) against the softmax they should keep, computed here in double
// from the logits, checked empirically over many draws; temperature spreading the draws; the
// repetition / presence / frequency penalties, read back from the logits the sampler modifies in
// place (greedy path) and by making a seen token lose to another; validate()'s messages; and
// sample_candidates() against sample() on the same logits and seeds (same token whenever it
// decides, "insufficient" exactly in the cases sampler.h names, the RNG untouched then).
#include "engine/runtime/sampler.h"

#include <QtTest>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>
#include <random>

using ids_t = std::vector<int32_t>;
using logits_t = std::vector<float>;
Q_DECLARE_METATYPE(ids_t)
Q_DECLARE_METATYPE(logits_t)

namespace {

es::sampling_params params(float temperature, uint64_t seed = 1234) {
    es::sampling_params p;
    p.temperature = temperature;
    p.seed = seed;
    return p;
}

int32_t sample_once(es::sampler &s, logits_t logits, const ids_t &prompt = {}, const ids_t &output = {}) {
    return s.sample(logits, prompt, output); // on a copy: sample() modifies the logits
}

// Counts of n draws from the same logits.
std::vector<int> draw_counts(const es::sampling_params &p, const logits_t &logits, int n) {
    es::sampler s(p);
    std::vector<int> counts(logits.size(), 0);
    for (int i = 0; i < n; ++i) {
        const int32_t id = sample_once(s, logits);
        if (id < 0 || id >= int32_t(logits.size())) return {};
        ++counts[size_t(id)];
    }
    return counts;
}

std::vector<double> softmax(const logits_t &logits, double temperature) {
    const double mx = *std::max_element(logits.begin(), logits.end());
    std::vector<double> p(logits.size());
    double sum = 0;
    for (size_t i = 0; i < logits.size(); ++i) sum += p[i] = std::exp((logits[i] - mx) / temperature);
    for (double &x : p) x /= sum;
    return p;
}

double entropy(const std::vector<int> &counts) {
    const double n = std::accumulate(counts.begin(), counts.end(), 0.0);
    double h = 0;
    for (int c : counts)
        if (c > 0) h -= c / n * std::log(c / n);
    return h;
}

int32_t argmax(const logits_t &l) { return int32_t(std::max_element(l.begin(), l.end()) - l.begin()); }

// Deterministic pseudo-random logits in [-4, 4), with ties when `ties` is set.
logits_t test_logits(int n, uint32_t seed, bool ties) {
    std::mt19937 rng(seed);
    logits_t l(static_cast<size_t>(n));
    for (float &x : l) x = std::uniform_real_distribution<float>(-4.0f, 4.0f)(rng);
    if (ties && n >= 4)
        l[size_t(n - 1)] = l[size_t(n / 2)] = l[1] = *std::max_element(l.begin(), l.end()) + 1.0f;
    return l;
}

// A backend's candidates for a row (kernels/topk_logits.cuh, computed here by brute force): the
// top n non-NaN (value, id), values descending and ids ascending among ties, id −1 past the end;
// the row sum in double scaled by `sum_scale` (a GPU's sum differs from the sampler's mass).
struct cand_row {
    ids_t ids;
    logits_t logits;
    double sum = 0.0;
};
cand_row make_candidates(const logits_t &l, int n, float temperature, double sum_scale = 1.0) {
    ids_t all;
    for (size_t v = 0; v < l.size(); ++v)
        if (!std::isnan(l[v])) all.push_back(int32_t(v));
    std::stable_sort(all.begin(), all.end(),
                     [&](int32_t a, int32_t b) { return l[size_t(a)] > l[size_t(b)]; });
    cand_row c;
    for (int j = 0; j < n; ++j) {
        c.ids.push_back(size_t(j) < all.size() ? all[size_t(j)] : -1);
        c.logits.push_back(size_t(j) < all.size() ? l[size_t(all[size_t(j)])] : -INFINITY);
    }
    const double mx = all.empty() ? -INFINITY : l[size_t(all[0])];
    if (temperature > 0 && std::isfinite(mx))
        for (int32_t v : all) c.sum += std::exp((double(l[size_t(v)]) - mx) / double(temperature));
    c.sum *= sum_scale;
    return c;
}

// A vocabulary of n with mass ∝ (1 + rank)^(−a / T) over a shuffled id order; quarter-step
// rounding makes ties.
logits_t zipf_logits(int n, double a, uint32_t seed) {
    std::mt19937 rng(seed);
    ids_t perm(static_cast<size_t>(n));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    logits_t l(static_cast<size_t>(n));
    for (int r = 0; r < n; ++r)
        l[size_t(perm[size_t(r)])] = float(std::round(-a * std::log(1.0 + r) * 4.0) / 4.0);
    return l;
}

} // namespace

class TestSampler : public QObject {
    Q_OBJECT

private slots:
    void candidatesMatchSample_data();
    void candidatesMatchSample();
    void candidatesSpecialRows();
    void greedy_data();
    void greedy();
    void seedDeterminism_data();
    void seedDeterminism();
    void differentSeedsDiffer();
    void topK1EqualsGreedy_data();
    void topK1EqualsGreedy();
    void topPTinyEqualsGreedy_data();
    void topPTinyEqualsGreedy();
    void drawsFollowFilteredSoftmax_data();
    void drawsFollowFilteredSoftmax();
    void minPExcludes_data();
    void minPExcludes();
    void temperatureSpreads();
    void repetitionPenalty_data();
    void repetitionPenalty();
    void repetitionPenaltyFlipsChoice_data();
    void repetitionPenaltyFlipsChoice();
    void presenceFrequencyPenalties_data();
    void presenceFrequencyPenalties();
    void validate_data();
    void validate();
    void walkOrderPastSortedPrefix_data();
    void walkOrderPastSortedPrefix();
};

// sampler.h's step 4 with top-p off and more than k_sorted_walk ids kept: the walk is the first
// k_sorted_walk in the order "logit descending, ties → lower id", then the other kept ids
// ascending — here against that rule written out directly, over many seeds (draws far into the
// tail included), with min-p and a top-k above the prefix.
void TestSampler::walkOrderPastSortedPrefix_data() {
    QTest::addColumn<int>("n_vocab");
    QTest::addColumn<float>("spread");
    QTest::addColumn<float>("min_p");
    QTest::addColumn<int>("top_k");
    QTest::newRow("flat_5000") << 5000 << 0.3f << 0.0f << 0;
    QTest::newRow("peaked_5000") << 5000 << 3.0f << 0.0f << 0;
    QTest::newRow("flat_min_p") << 3000 << 0.3f << 0.2f << 0;
    QTest::newRow("top_k_above_prefix") << 3000 << 0.5f << 0.0f << 500;
    QTest::newRow("top_k_large") << 20000 << 0.3f << 0.0f << 10000;
}

void TestSampler::walkOrderPastSortedPrefix() {
    QFETCH(int, n_vocab);
    QFETCH(float, spread);
    QFETCH(float, min_p);
    QFETCH(int, top_k);
    std::mt19937 g(11);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    logits_t row(static_cast<size_t>(n_vocab));
    for (auto &x : row) x = std::round(nd(g) * spread * 16.0f) / 16.0f; // ties
    const float T = 0.8f;
    int tail_draws = 0;
    for (uint64_t seed = 1; seed <= 120; ++seed) {
        es::sampling_params sp;
        sp.temperature = T;
        sp.min_p = min_p;
        sp.top_k = top_k;
        sp.seed = seed;
        es::sampler smp(sp);
        logits_t work = row;
        const int32_t got = smp.sample(work, {}, {});
        // The rule, written out.
        const float mx = *std::max_element(row.begin(), row.end());
        std::vector<float> w(row.size());
        ids_t kept;
        for (int v = 0; v < n_vocab; ++v) {
            w[size_t(v)] = std::exp((row[size_t(v)] - mx) / T);
            if (w[size_t(v)] >= min_p) kept.push_back(v);
        }
        auto before = [&](int a, int b) { return row[size_t(a)] > row[size_t(b)] || (row[size_t(a)] == row[size_t(b)] && a < b); };
        if (top_k > 0 && top_k < int(kept.size())) {
            std::sort(kept.begin(), kept.end(), before);
            kept.resize(size_t(top_k));
            std::sort(kept.begin(), kept.end());
        }
        double mass = 0.0;
        for (int v : kept) mass += w[size_t(v)];
        ids_t walk = kept;
        std::sort(walk.begin(), walk.end(), before);
        std::sort(walk.begin() + std::min<size_t>(walk.size(), es::k_sorted_walk), walk.end());
        std::mt19937_64 rng(seed);
        const double r = std::uniform_real_distribution<double>(0.0, 1.0)(rng) * mass;
        double cum = 0.0;
        int32_t want = walk.back();
        for (size_t i = 0; i < walk.size(); ++i) {
            cum += w[size_t(walk[i])];
            if (r < cum) {
                want = walk[i];
                tail_draws += i >= size_t(es::k_sorted_walk);
                break;
            }
        }
        QCOMPARE(got, want);
    }
    QVERIFY2(tail_draws > 0, "no draw reached past the sorted prefix");
}

void TestSampler::greedy_data() {
    QTest::addColumn<logits_t>("logits");
    QTest::addColumn<float>("temperature");
    QTest::addColumn<int>("expected");
    QTest::newRow("one_token") << logits_t{0.5f} << 0.0f << 0;
    QTest::newRow("max_first") << logits_t{3, 1, 2} << 0.0f << 0;
    QTest::newRow("max_last") << logits_t{1, 2, 3} << 0.0f << 2;
    QTest::newRow("max_middle_negative") << logits_t{-5, -1, -3} << 0.0f << 1;
    QTest::newRow("tie_lowest_id") << logits_t{1, 7, 3, 7, 7} << 0.0f << 1;
    QTest::newRow("all_equal") << logits_t{2, 2, 2, 2} << 0.0f << 0;
    QTest::newRow("minus_infinity_masked") << logits_t{-INFINITY, -INFINITY, 0.0f} << 0.0f << 2;
    QTest::newRow("temperature_below_1e-5") << logits_t{1, 2, 9, 3} << 1e-6f << 2;
    QTest::newRow("large_vocab_tie") << [] {
        logits_t l(5000, -1.0f);
        l[4999] = l[1234] = 10.0f;
        return l;
    }() << 0.0f << 1234;
}

void TestSampler::greedy() {
    QFETCH(logits_t, logits);
    QFETCH(float, temperature);
    QFETCH(int, expected);
    es::sampler s(params(temperature));
    for (int i = 0; i < 20; ++i) QCOMPARE(sample_once(s, logits), expected);
}

void TestSampler::seedDeterminism_data() {
    QTest::addColumn<qulonglong>("seed");
    QTest::addColumn<int>("top_k");
    QTest::addColumn<float>("top_p");
    QTest::addColumn<float>("min_p");
    QTest::newRow("seed_0") << 0ull << 0 << 1.0f << 0.0f;
    QTest::newRow("seed_42") << 42ull << 0 << 1.0f << 0.0f;
    QTest::newRow("seed_max") << ~0ull << 0 << 1.0f << 0.0f;
    QTest::newRow("filters_on") << 7ull << 20 << 0.9f << 0.05f;
}

// Same seed, same logits → the same sequence of draws; the sampler reports the seed it used.
void TestSampler::seedDeterminism() {
    QFETCH(qulonglong, seed);
    QFETCH(int, top_k);
    QFETCH(float, top_p);
    QFETCH(float, min_p);
    es::sampling_params p = params(1.0f, seed);
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    es::sampler a(p), b(p);
    QCOMPARE(a.seed(), uint64_t(seed));
    std::vector<logits_t> logits;
    for (uint32_t i = 0; i < 7; ++i) logits.push_back(test_logits(64, i, false));
    int distinct = 0;
    std::vector<bool> seen(64, false);
    for (int i = 0; i < 1000; ++i) {
        const logits_t &l = logits[size_t(i % 7)];
        const int32_t x = sample_once(a, l), y = sample_once(b, l);
        QCOMPARE(x, y);
        if (!seen[size_t(x)]) ++distinct, seen[size_t(x)] = true;
    }
    QVERIFY2(distinct > 3, "the draws must not be constant"); // the test would prove nothing
}

void TestSampler::differentSeedsDiffer() {
    const logits_t flat(100, 0.0f);
    for (uint64_t seed = 1; seed <= 5; ++seed) {
        es::sampler a(params(1.0f, seed)), b(params(1.0f, seed + 1000));
        int differ = 0;
        for (int i = 0; i < 500; ++i) differ += sample_once(a, flat) != sample_once(b, flat);
        QVERIFY2(differ > 400,
                 qPrintable(QString("seed %1: only %2 of 500 draws differ").arg(seed).arg(differ)));
    }
    // Without a seed each sampler picks its own.
    es::sampling_params p;
    p.seed.reset();
    QVERIFY(es::sampler(p).seed() != es::sampler(p).seed());
}

void TestSampler::topK1EqualsGreedy_data() {
    QTest::addColumn<logits_t>("logits");
    QTest::newRow("one_token") << logits_t{1.0f};
    QTest::newRow("two_tokens_close") << logits_t{1.0f, 1.001f};
    QTest::newRow("tie_at_top") << logits_t{3, 5, 5, 1};
    QTest::newRow("random_64") << test_logits(64, 1, false);
    QTest::newRow("random_64_ties") << test_logits(64, 2, true);
    QTest::newRow("random_1000") << test_logits(1000, 3, false);
}

void TestSampler::topK1EqualsGreedy() {
    QFETCH(logits_t, logits);
    for (float t : {0.5f, 1.0f, 5.0f}) {
        es::sampling_params p = params(t, 99);
        p.top_k = 1;
        es::sampler s(p);
        for (int i = 0; i < 100; ++i) QCOMPARE(sample_once(s, logits), argmax(logits));
    }
}

void TestSampler::topPTinyEqualsGreedy_data() { topK1EqualsGreedy_data(); }

void TestSampler::topPTinyEqualsGreedy() {
    QFETCH(logits_t, logits);
    for (float t : {0.5f, 1.0f, 5.0f}) {
        es::sampling_params p = params(t, 99);
        p.top_p = 1e-6f;
        es::sampler s(p);
        for (int i = 0; i < 100; ++i) QCOMPARE(sample_once(s, logits), argmax(logits));
    }
}

void TestSampler::drawsFollowFilteredSoftmax_data() {
    QTest::addColumn<logits_t>("logits");
    QTest::addColumn<float>("temperature");
    QTest::addColumn<int>("top_k");
    QTest::addColumn<float>("top_p");
    QTest::addColumn<std::vector<double>>("expected"); // probabilities worked out by hand
    const logits_t l = {std::log(0.5f), std::log(0.25f), std::log(0.125f), std::log(0.125f)};
    QTest::newRow("plain") << l << 1.0f << 0 << 1.0f << std::vector<double>{0.5, 0.25, 0.125, 0.125};
    QTest::newRow("temperature_2") << l << 2.0f << 0 << 1.0f << [] {
        const double s = std::sqrt(0.5) + 0.5 + 2 * std::sqrt(0.125);
        return std::vector<double>{std::sqrt(0.5) / s, 0.5 / s, std::sqrt(0.125) / s, std::sqrt(0.125) / s};
    }();
    QTest::newRow("top_k_2") << l << 1.0f << 2 << 1.0f << std::vector<double>{2.0 / 3, 1.0 / 3, 0, 0};
    // Ties in top-k: of the two 0.125 tokens the lower id is kept.
    QTest::newRow("top_k_3_tie") << l << 1.0f << 3 << 1.0f
                                 << std::vector<double>{0.5 / 0.875, 0.25 / 0.875, 0.125 / 0.875, 0};
    QTest::newRow("top_k_larger_than_vocab")
        << l << 1.0f << 10 << 1.0f << std::vector<double>{0.5, 0.25, 0.125, 0.125};
    // top_p keeps the smallest head whose mass reaches p: 0.5 + 0.25 = 0.75 ≥ 0.7.
    QTest::newRow("top_p_0.7") << l << 1.0f << 0 << 0.7f << std::vector<double>{2.0 / 3, 1.0 / 3, 0, 0};
    QTest::newRow("top_p_0.8") << l << 1.0f << 0 << 0.8f
                               << std::vector<double>{0.5 / 0.875, 0.25 / 0.875, 0.125 / 0.875, 0};
    QTest::newRow("top_p_0.4") << l << 1.0f << 0 << 0.4f << std::vector<double>{1, 0, 0, 0};
    QTest::newRow("top_k_then_top_p")
        << l << 1.0f << 3 << 0.8f << std::vector<double>{2.0 / 3, 1.0 / 3, 0, 0};
}

void TestSampler::drawsFollowFilteredSoftmax() {
    QFETCH(logits_t, logits);
    QFETCH(float, temperature);
    QFETCH(int, top_k);
    QFETCH(float, top_p);
    QFETCH(std::vector<double>, expected);
    es::sampling_params p = params(temperature, 5);
    p.top_k = top_k;
    p.top_p = top_p;
    const int n = 20000;
    const std::vector<int> counts = draw_counts(p, logits, n);
    QCOMPARE(counts.size(), logits.size());
    for (size_t i = 0; i < counts.size(); ++i) {
        const double f = double(counts[i]) / n;
        if (expected[i] == 0)
            QVERIFY2(counts[i] == 0, qPrintable(QString("token %1 drawn %2 times").arg(i).arg(counts[i])));
        // 5 standard deviations of a binomial frequency.
        const double tol = 5 * std::sqrt(expected[i] * (1 - expected[i]) / n) + 1e-9;
        QVERIFY2(std::abs(f - expected[i]) <= tol,
                 qPrintable(QString("token %1: frequency %2, expected %3").arg(i).arg(f).arg(expected[i])));
    }
}

void TestSampler::minPExcludes_data() {
    QTest::addColumn<logits_t>("logits");
    QTest::addColumn<float>("temperature");
    QTest::addColumn<float>("min_p");
    QTest::newRow("min_p_0.1") << test_logits(32, 11, false) << 1.0f << 0.1f;
    QTest::newRow("min_p_0.3") << test_logits(32, 12, false) << 1.0f << 0.3f;
    QTest::newRow("min_p_0.05_hot") << test_logits(32, 13, false) << 2.0f << 0.05f; // after temperature
    QTest::newRow("min_p_0.5_cold") << test_logits(32, 14, false) << 0.7f << 0.5f;
    QTest::newRow("min_p_1_tie") << logits_t{1, 4, 4, 2} << 1.0f << 1.0f; // only the tied maxima
    QTest::newRow("min_p_1_single") << logits_t{1, 4, 3, 2} << 1.0f << 1.0f;
}

// min_p keeps exactly the tokens with p >= min_p * p_max (p after temperature): excluded tokens
// never appear and every kept one does, over many draws.
void TestSampler::minPExcludes() {
    QFETCH(logits_t, logits);
    QFETCH(float, temperature);
    QFETCH(float, min_p);
    const std::vector<double> prob = softmax(logits, temperature);
    const double pmax = *std::max_element(prob.begin(), prob.end());
    es::sampling_params p = params(temperature, 17);
    p.min_p = min_p;
    const int n = 15000;
    const std::vector<int> counts = draw_counts(p, logits, n);
    QCOMPARE(counts.size(), logits.size());
    double kept_mass = 0;
    int n_kept = 0;
    // Tokens within float rounding of the threshold are left out of the check, except the
    // maxima themselves (exactly at the cut when min_p is 1), which must always be kept.
    auto unsure = [&](size_t i) { return prob[i] != pmax && std::abs(prob[i] - min_p * pmax) < 1e-5 * pmax; };
    for (size_t i = 0; i < prob.size(); ++i)
        if (!unsure(i) && prob[i] >= min_p * pmax) kept_mass += prob[i], ++n_kept;
    QVERIFY2(n_kept >= 1 && n_kept < int(prob.size()), "the row must exclude some tokens");
    for (size_t i = 0; i < prob.size(); ++i) {
        if (unsure(i)) continue;
        const QString msg = QString("token %1 (p %2, cut %3) drawn %4 times")
                                .arg(i)
                                .arg(prob[i])
                                .arg(min_p * pmax)
                                .arg(counts[i]);
        if (prob[i] != pmax && prob[i] < min_p * pmax) {
            QVERIFY2(counts[i] == 0, qPrintable(msg));
        } else {
            const double want = prob[i] / kept_mass;
            QVERIFY2(std::abs(double(counts[i]) / n - want) <= 5 * std::sqrt(want * (1 - want) / n) + 1e-9,
                     qPrintable(msg));
        }
    }
}

void TestSampler::temperatureSpreads() {
    const logits_t l = test_logits(24, 21, false);
    double last = -1;
    for (float t : {0.25f, 0.5f, 1.0f, 2.0f, 4.0f}) {
        const double h = entropy(draw_counts(params(t, 3), l, 8000));
        QVERIFY2(h > last + 0.05,
                 qPrintable(QString("entropy %1 at temperature %2 after %3").arg(h).arg(t).arg(last)));
        last = h;
    }
    QVERIFY(last < std::log(24.0) + 1e-9);
}

void TestSampler::repetitionPenalty_data() {
    QTest::addColumn<logits_t>("logits");
    QTest::addColumn<float>("penalty");
    QTest::addColumn<ids_t>("prompt");
    QTest::addColumn<ids_t>("output");
    QTest::addColumn<logits_t>("expected");
    const logits_t l = {2.0f, -1.0f, 0.0f, 4.0f, -3.0f};
    QTest::newRow("none_seen") << l << 2.0f << ids_t{} << ids_t{} << l;
    QTest::newRow("positive_divided") << l << 2.0f << ids_t{0} << ids_t{} << logits_t{1.0f, -1, 0, 4, -3};
    QTest::newRow("negative_multiplied") << l << 2.0f << ids_t{} << ids_t{1} << logits_t{2, -2.0f, 0, 4, -3};
    QTest::newRow("zero_unchanged") << l << 2.0f << ids_t{2} << ids_t{} << l;
    QTest::newRow("prompt_and_output")
        << l << 2.0f << ids_t{3, 4} << ids_t{0} << logits_t{1.0f, -1, 0, 2.0f, -6.0f};
    QTest::newRow("repeats_penalized_once")
        << l << 2.0f << ids_t{3, 3, 3} << ids_t{3, 3} << logits_t{2, -1, 0, 2.0f, -3};
    QTest::newRow("below_one_boosts")
        << l << 0.5f << ids_t{0, 1} << ids_t{} << logits_t{4.0f, -0.5f, 0, 4, -3};
    QTest::newRow("ids_out_of_range_ignored") << l << 2.0f << ids_t{-1, 5, 99} << ids_t{} << l;
    QTest::newRow("penalty_one_is_off") << l << 1.0f << ids_t{0, 1, 3} << ids_t{4} << l;
}

// Greedy path: the penalized logits are left in place, so they can be read back exactly.
void TestSampler::repetitionPenalty() {
    QFETCH(logits_t, logits);
    QFETCH(float, penalty);
    QFETCH(ids_t, prompt);
    QFETCH(ids_t, output);
    QFETCH(logits_t, expected);
    es::sampling_params p = params(0.0f);
    p.repetition_penalty = penalty;
    es::sampler s(p);
    const int32_t id = s.sample(logits, prompt, output);
    QCOMPARE(logits, expected);
    QCOMPARE(id, argmax(expected));
}

void TestSampler::repetitionPenaltyFlipsChoice_data() {
    QTest::addColumn<logits_t>("logits");
    QTest::addColumn<ids_t>("seen");
    QTest::addColumn<int>("before");
    QTest::addColumn<int>("after");
    // 2.0 / 1.5 = 1.33 < 1.5
    QTest::newRow("positive_seen_drops") << logits_t{2.0f, 1.5f, 0.0f} << ids_t{0} << 0 << 1;
    // -1.0 * 1.5 = -1.5 < -1.2
    QTest::newRow("negative_seen_drops") << logits_t{-1.0f, -1.2f, -9.0f} << ids_t{0} << 0 << 1;
    // both seen: 2.0/1.5 = 1.33 vs 1.9/1.5 = 1.27: the order holds
    QTest::newRow("both_seen_order_holds") << logits_t{2.0f, 1.9f, 0.0f} << ids_t{0, 1} << 0 << 0;
}

// The seen token loses to another it beat without the penalty, under greedy and under top_k=1
// sampling at temperature 1.
void TestSampler::repetitionPenaltyFlipsChoice() {
    QFETCH(logits_t, logits);
    QFETCH(ids_t, seen);
    QFETCH(int, before);
    QFETCH(int, after);
    for (bool greedy : {true, false}) {
        es::sampling_params p = params(greedy ? 0.0f : 1.0f);
        if (!greedy) p.top_k = 1;
        es::sampler plain(p);
        QCOMPARE(sample_once(plain, logits, seen, {}), before);
        p.repetition_penalty = 1.5f;
        es::sampler penalized(p);
        QCOMPARE(sample_once(penalized, logits, seen, {}), after);
        QCOMPARE(sample_once(penalized, logits, {}, seen), after); // output counts as seen too
    }
}

void TestSampler::presenceFrequencyPenalties_data() {
    QTest::addColumn<float>("presence");
    QTest::addColumn<float>("frequency");
    QTest::addColumn<ids_t>("prompt");
    QTest::addColumn<ids_t>("output");
    QTest::addColumn<logits_t>("expected");
    // logits {1, 1, 1, 1, 1}
    QTest::newRow("nothing_seen") << 0.5f << 0.25f << ids_t{} << ids_t{} << logits_t{1, 1, 1, 1, 1};
    QTest::newRow("presence_once_each")
        << 0.5f << 0.0f << ids_t{} << ids_t{1, 1, 1, 3} << logits_t{1, 0.5f, 1, 0.5f, 1};
    QTest::newRow("frequency_per_count")
        << 0.0f << 0.25f << ids_t{} << ids_t{1, 1, 1, 3} << logits_t{1, 0.25f, 1, 0.75f, 1};
    QTest::newRow("both") << 0.5f << 0.25f << ids_t{} << ids_t{1, 1, 1, 3}
                          << logits_t{1, 1 - 0.5f - 0.75f, 1, 1 - 0.5f - 0.25f, 1};
    QTest::newRow("prompt_not_counted")
        << 0.5f << 0.25f << ids_t{0, 2, 4} << ids_t{} << logits_t{1, 1, 1, 1, 1};
    QTest::newRow("negative_encourages") << -1.0f << 0.0f << ids_t{} << ids_t{4} << logits_t{1, 1, 1, 1, 2};
    QTest::newRow("ids_out_of_range_ignored")
        << 0.5f << 0.25f << ids_t{} << ids_t{-3, 5, 77} << logits_t{1, 1, 1, 1, 1};
}

// OpenAI style, over output tokens only: logit -= presence + frequency * count.
void TestSampler::presenceFrequencyPenalties() {
    QFETCH(float, presence);
    QFETCH(float, frequency);
    QFETCH(ids_t, prompt);
    QFETCH(ids_t, output);
    QFETCH(logits_t, expected);
    es::sampling_params p = params(0.0f);
    p.presence_penalty = presence;
    p.frequency_penalty = frequency;
    es::sampler s(p);
    logits_t l(5, 1.0f);
    const int32_t id = s.sample(l, prompt, output);
    QCOMPARE(l, expected);
    QCOMPARE(id, argmax(expected));
}

void TestSampler::validate_data() {
    QTest::addColumn<QString>("field");
    QTest::addColumn<double>("value");
    QTest::addColumn<QString>("error"); // a word the message must contain; empty: valid
    QTest::newRow("defaults") << "" << 0.0 << "";
    QTest::newRow("temperature_0_greedy") << "temperature" << 0.0 << "";
    QTest::newRow("temperature_negative") << "temperature" << -0.1 << "temperature";
    QTest::newRow("temperature_nan") << "temperature" << double(NAN) << "temperature";
    QTest::newRow("top_k_negative") << "top_k" << -1.0 << "top_k";
    QTest::newRow("top_p_0") << "top_p" << 0.0 << "top_p";
    QTest::newRow("top_p_above_1") << "top_p" << 1.01 << "top_p";
    QTest::newRow("top_p_1") << "top_p" << 1.0 << "";
    QTest::newRow("top_p_tiny") << "top_p" << 1e-6 << "";
    QTest::newRow("min_p_above_1") << "min_p" << 1.5 << "min_p";
    QTest::newRow("min_p_negative") << "min_p" << -0.1 << "min_p";
    QTest::newRow("min_p_1") << "min_p" << 1.0 << "";
    QTest::newRow("max_tokens_negative") << "max_tokens" << -1.0 << "max_tokens";
    QTest::newRow("max_tokens_0") << "max_tokens" << 0.0 << "";
    QTest::newRow("repetition_penalty_0") << "repetition_penalty" << 0.0 << "repetition_penalty";
    QTest::newRow("repetition_penalty_negative") << "repetition_penalty" << -1.0 << "repetition_penalty";
    QTest::newRow("repetition_penalty_below_1") << "repetition_penalty" << 0.5 << "";
    QTest::newRow("presence_infinite") << "presence_penalty" << double(INFINITY) << "penalt";
    QTest::newRow("frequency_nan") << "frequency_penalty" << double(NAN) << "penalt";
}

void TestSampler::validate() {
    QFETCH(QString, field);
    QFETCH(double, value);
    QFETCH(QString, error);
    es::sampling_params p;
    if (field == "temperature")
        p.temperature = float(value);
    else if (field == "top_k")
        p.top_k = int32_t(value);
    else if (field == "top_p")
        p.top_p = float(value);
    else if (field == "min_p")
        p.min_p = float(value);
    else if (field == "max_tokens")
        p.max_tokens = int32_t(value);
    else if (field == "repetition_penalty")
        p.repetition_penalty = float(value);
    else if (field == "presence_penalty")
        p.presence_penalty = float(value);
    else if (field == "frequency_penalty")
        p.frequency_penalty = float(value);
    else
        QVERIFY(field.isEmpty());
    const QString msg = QString::fromStdString(p.validate());
    if (error.isEmpty())
        QCOMPARE(msg, QString());
    else
        QVERIFY2(msg.contains(error), qPrintable("message: \"" + msg + "\""));
}

// expect: "decides" (never insufficient), "insufficient" (always), "mixed" (both happen; an
// insufficient answer must then be needed: the full row's token lies outside the candidates, or
// the draw sits within the sum's tolerance of a boundary — allowed at most twice).
void TestSampler::candidatesMatchSample_data() {
    QTest::addColumn<float>("temperature");
    QTest::addColumn<int>("top_k");
    QTest::addColumn<float>("top_p");
    QTest::addColumn<float>("min_p");
    QTest::addColumn<float>("repetition");
    QTest::addColumn<float>("presence");
    QTest::addColumn<float>("frequency");
    QTest::addColumn<double>("zipf");
    QTest::addColumn<int>("n_top");
    QTest::addColumn<QString>("expect");
    QTest::newRow("greedy") << 0.0f << 0 << 1.0f << 0.0f << 1.0f << 0.0f << 0.0f << 1.2 << 64 << "decides";
    QTest::newRow("greedy_n1") << 0.0f << 0 << 1.0f << 0.0f << 1.0f << 0.0f << 0.0f << 1.2 << 1 << "decides";
    QTest::newRow("temperature_heavy_tail")
        << 1.0f << 0 << 1.0f << 0.0f << 1.0f << 0.0f << 0.0f << 1.2 << 64 << "mixed";
    QTest::newRow("temperature_peaked")
        << 0.8f << 0 << 1.0f << 0.0f << 1.0f << 0.0f << 0.0f << 3.0 << 64 << "mixed";
    QTest::newRow("top_p_0.5") << 1.0f << 0 << 0.5f << 0.0f << 1.0f << 0.0f << 0.0f << 1.2 << 64 << "decides";
    QTest::newRow("top_p_0.95_peaked")
        << 0.7f << 0 << 0.95f << 0.0f << 1.0f << 0.0f << 0.0f << 3.0 << 64 << "decides";
    QTest::newRow("top_p_0.99_tail") << 1.0f << 0 << 0.99f << 0.0f << 1.0f << 0.0f << 0.0f << 1.2 << 64
                                     << "insufficient";
    QTest::newRow("top_k_40") << 1.0f << 40 << 1.0f << 0.0f << 1.0f << 0.0f << 0.0f << 1.2 << 64 << "decides";
    QTest::newRow("top_k_64_eq_n") << 1.0f << 64 << 1.0f << 0.0f << 1.0f << 0.0f << 0.0f << 1.2 << 64
                                   << "decides";
    QTest::newRow("top_k_65_gt_n") << 1.0f << 65 << 1.0f << 0.0f << 1.0f << 0.0f << 0.0f << 1.2 << 64
                                   << "insufficient";
    QTest::newRow("top_k_20_top_p_0.8")
        << 0.9f << 20 << 0.8f << 0.0f << 1.0f << 0.0f << 0.0f << 1.2 << 64 << "decides";
    QTest::newRow("min_p_0.05") << 1.0f << 0 << 1.0f << 0.05f << 1.0f << 0.0f << 0.0f << 1.2 << 64
                                << "decides";
    QTest::newRow("min_p_0.001_tail")
        << 1.0f << 0 << 1.0f << 0.001f << 1.0f << 0.0f << 0.0f << 1.2 << 64 << "insufficient";
    QTest::newRow("min_p_top_p") << 1.0f << 0 << 0.9f << 0.02f << 1.0f << 0.0f << 0.0f << 1.2 << 64
                                 << "decides";
    QTest::newRow("greedy_repetition")
        << 0.0f << 0 << 1.0f << 0.0f << 1.3f << 0.0f << 0.0f << 1.2 << 64 << "decides";
    QTest::newRow("greedy_presence_frequency")
        << 0.0f << 0 << 1.0f << 0.0f << 1.0f << 0.4f << 0.3f << 1.2 << 64 << "decides";
    QTest::newRow("top_k_10_penalties")
        << 1.0f << 10 << 1.0f << 0.0f << 1.2f << 0.2f << 0.1f << 1.2 << 64 << "decides";
    QTest::newRow("temperature_penalties")
        << 1.0f << 0 << 1.0f << 0.0f << 1.2f << 0.0f << 0.0f << 1.2 << 64 << "insufficient";
    QTest::newRow("raising_repetition")
        << 0.0f << 0 << 1.0f << 0.0f << 0.8f << 0.0f << 0.0f << 1.2 << 64 << "insufficient";
    QTest::newRow("negative_presence")
        << 1.0f << 5 << 1.0f << 0.0f << 1.0f << -0.5f << 0.0f << 1.2 << 64 << "insufficient";
    QTest::newRow("complete_list_n_ge_v")
        << 1.0f << 0 << 1.0f << 0.0f << 1.2f << 0.1f << 0.0f << 1.2 << 256 << "decides";
}

void TestSampler::candidatesMatchSample() {
    QFETCH(float, temperature);
    QFETCH(int, top_k);
    QFETCH(float, top_p);
    QFETCH(float, min_p);
    QFETCH(float, repetition);
    QFETCH(float, presence);
    QFETCH(float, frequency);
    QFETCH(double, zipf);
    QFETCH(int, n_top);
    QFETCH(QString, expect);
    const int vocab = n_top >= 256 ? 200 : 5000;
    int decided = 0, insufficient = 0, needless = 0;
    for (uint64_t seed = 1; seed <= 60; ++seed) {
        es::sampling_params p = params(temperature, seed);
        p.top_k = top_k;
        p.top_p = top_p;
        p.min_p = min_p;
        p.repetition_penalty = repetition;
        p.presence_penalty = presence;
        p.frequency_penalty = frequency;
        es::sampler full(p), cand(p);
        const logits_t l = zipf_logits(vocab, zipf, uint32_t(seed));
        // The prompt holds some of the top tokens, so penalties reorder the head.
        ids_t prompt, output;
        for (int r = 0; r < 6; ++r) prompt.push_back(int32_t((seed * 7 + r * 13) % vocab));
        prompt.push_back(argmax(l));
        for (int step = 0; step < 8; ++step) {
            const double scale = 1.0 + 3e-6 * double(int(seed % 3) - 1); // a GPU sum's error
            const cand_row c = make_candidates(l, n_top, cand.sum_temperature(), scale);
            es::logit_candidates lc;
            lc.ids = c.ids;
            lc.logits = c.logits;
            lc.sum = c.sum;
            lc.sum_temperature = cand.sum_temperature();
            lc.n_vocab = vocab;
            const int32_t want = sample_once(full, l, prompt, output);
            const std::optional<int32_t> got = cand.sample_candidates(lc, prompt, output);
            if (got) {
                ++decided;
                QVERIFY2(*got == want, qPrintable(QString("seed %1 step %2: candidates chose %3, sample() %4")
                                                      .arg(seed)
                                                      .arg(step)
                                                      .arg(*got)
                                                      .arg(want)));
            } else {
                ++insufficient;
                if (std::find(c.ids.begin(), c.ids.end(), want) != c.ids.end() && repetition == 1.0f &&
                    presence == 0.0f && frequency == 0.0f && top_k <= n_top && min_p == 0.0f && top_p == 1.0f)
                    ++needless;
                // The fallback: the same sampler on the full row stays in step with `full`.
                QCOMPARE(sample_once(cand, l, prompt, output), want);
            }
            output.push_back(want);
        }
    }
    if (expect == "decides")
        QVERIFY2(insufficient == 0, qPrintable(QString("%1 insufficient").arg(insufficient)));
    if (expect == "insufficient") QVERIFY2(decided == 0, qPrintable(QString("%1 decided").arg(decided)));
    if (expect == "mixed")
        QVERIFY2(decided > 0 && insufficient > 0,
                 qPrintable(QString("decided %1, insufficient %2").arg(decided).arg(insufficient)));
    QVERIFY2(needless <= 2,
             qPrintable(QString("%1 insufficient answers whose token was a candidate").arg(needless)));
}

// NaN, ±inf and all −inf rows, through both paths.
void TestSampler::candidatesSpecialRows() {
    const int n = 300;
    for (int kind = 0; kind < 5; ++kind)
        for (float t : {0.0f, 1.0f})
            for (uint64_t seed = 1; seed <= 10; ++seed) {
                logits_t l = zipf_logits(n, 1.2, uint32_t(seed));
                for (int v = 0; v < n; ++v) {
                    if (kind == 0 && v % 4 == 0) l[size_t(v)] = NAN;
                    if (kind == 1) l[size_t(v)] = v % 3 ? -INFINITY : NAN; // nothing finite
                    if (kind == 2 && (v == 17 || v == 250)) l[size_t(v)] = INFINITY;
                    if (kind == 3 && v % 2) l[size_t(v)] = -INFINITY;
                    if (kind == 4) l[size_t(v)] = v % 7 ? NAN : l[size_t(v)]; // fewer values than slots
                }
                es::sampling_params p = params(t, seed);
                es::sampler full(p), cand(p);
                const cand_row c = make_candidates(l, 64, cand.sum_temperature());
                es::logit_candidates lc;
                lc.ids = c.ids;
                lc.logits = c.logits;
                lc.sum = c.sum;
                lc.sum_temperature = cand.sum_temperature();
                lc.n_vocab = n;
                const int32_t want = sample_once(full, l);
                const auto got = cand.sample_candidates(lc, {}, {});
                if (got)
                    QVERIFY2(*got == want, qPrintable(QString("kind %1 T %2 seed %3: %4 vs %5")
                                                          .arg(kind)
                                                          .arg(t)
                                                          .arg(seed)
                                                          .arg(*got)
                                                          .arg(want)));
                if (kind == 1 || kind == 2 || kind == 4 || t == 0.0f)
                    QVERIFY2(got.has_value(),
                             qPrintable(QString("kind %1 T %2: insufficient").arg(kind).arg(t)));
            }
}

QTEST_APPLESS_MAIN(TestSampler)
#include "test_sampler.moc"
