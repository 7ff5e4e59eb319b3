// es::sampler and sampling_params::validate(): greedy (ties → lowest id), per-seed determinism,
// the filters (top-k, top-p, min-p) against the softmax they should keep, computed here in double
// from the logits, checked empirically over many draws; temperature spreading the draws; the
// repetition / presence / frequency penalties, read back from the logits the sampler modifies in
// place (greedy path) and by making a seen token lose to another; validate()'s messages; the draw
// against kernels/sample_rows.cuh's definition written out by sorting (exactly the same token);
// the draw a function of (seed, draw index) alone; spec()'s penalty lists and fed token; and
// sampling_exp against std::exp.
#include "engine/runtime/sampler.h"

#include <QtTest>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>
#include <cstring>
#include <random>
#include <span>

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

int32_t sample_once(es::sampler &s, logits_t logits, const ids_t &prompt, const ids_t &output) {
    return s.sample(logits, prompt, output); // on a copy: sample() modifies the logits
}

// Counts of n draws from the same logits: draw i follows i earlier tokens (the draw's counter; the
// tokens' values matter only with penalties, which these draws have none of).
std::vector<int> draw_counts(const es::sampling_params &p, const logits_t &logits, int n) {
    es::sampler s(p);
    std::vector<int> counts(logits.size(), 0);
    const ids_t earlier(static_cast<size_t>(n), 0);
    for (int i = 0; i < n; ++i) {
        logits_t l = logits;
        const int32_t id = s.sample(l, {}, std::span<const int32_t>(earlier).first(size_t(i)));
        if (id < 0 || id >= int32_t(logits.size())) return {};
        ++counts[size_t(id)];
    }
    return counts;
}

// Draw i of a sequence (i earlier tokens, no penalties).
int32_t draw_at(es::sampler &s, const logits_t &logits, int i) {
    const ids_t earlier(static_cast<size_t>(i), 0);
    logits_t l = logits;
    return s.sample(l, {}, earlier);
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

// kernels/sample_rows.cuh's draw written out directly: every id sorted by (logit descending, id
// ascending); top-k and the top-p set cut along that order; then the rounds of step 7, each
// drawing ids ascending from S and accepting a draw inside the top-p set. NaN is −inf.
int32_t reference_draw(logits_t l, const es::sampling_params &p, uint64_t seed, uint64_t counter) {
    const int32_t n = int32_t(l.size());
    for (float &x : l)
        if (std::isnan(x)) x = -INFINITY;
    ids_t order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), 0);
    auto zero = [](float x) { return x == 0.0f ? 0.0f : x; }; // −0 ties with +0
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return zero(l[size_t(a)]) > zero(l[size_t(b)]); });
    const float mx = zero(l[size_t(order[0])]);
    if (p.temperature <= es::sampling_greedy_temperature || !std::isfinite(mx)) return order[0];
    std::vector<uint64_t> q(static_cast<size_t>(n));
    std::vector<int32_t> rank(static_cast<size_t>(n));
    for (int32_t i = 0; i < n; ++i) rank[size_t(order[size_t(i)])] = i;
    for (int32_t v = 0; v < n; ++v) {
        const float w = es::sampling_weight(zero(l[size_t(v)]), mx, p.temperature);
        q[size_t(v)] = w >= p.min_p ? es::sampling_mass_of(w) : 0;
        if (p.top_k > 0 && rank[size_t(v)] >= p.top_k) q[size_t(v)] = 0; // outside top-k: never drawn
    }
    uint64_t total = 0;
    for (uint64_t x : q) total += x;
    int32_t p_end = n; // the top-p set: ranks [0, p_end)
    if (p.top_p < 1.0f) {
        const uint64_t target = es::sampling_target(p.top_p, total);
        uint64_t cum = 0;
        for (int32_t i = 0; i < n; ++i) {
            cum += q[size_t(order[size_t(i)])];
            if (cum >= target) {
                p_end = i + 1;
                break;
            }
        }
    }
    int32_t s_rank = n; // S: ranks [0, s_rank)
    const uint64_t random = es::sampling_random(seed, counter);
    for (int round = 0; round < es::sampling_max_rounds; ++round) {
        uint64_t mass = 0;
        for (int32_t v = 0; v < n; ++v)
            if (rank[size_t(v)] < s_rank) mass += q[size_t(v)];
        const uint64_t r = es::sampling_mulhi(es::sampling_round_random(random, round), mass);
        uint64_t cum = 0;
        int32_t drawn = -1;
        for (int32_t v = 0; v < n && drawn < 0; ++v)
            if (rank[size_t(v)] < s_rank && (cum += q[size_t(v)]) > r) drawn = v;
        if (drawn < 0) return -1;
        if (rank[size_t(drawn)] < p_end) return drawn;
        s_rank = rank[size_t(drawn)];
    }
    return order[0];
}

} // namespace

class TestSampler : public QObject {
    Q_OBJECT

private slots:
    void drawMatchesDefinition_data();
    void drawMatchesDefinition();
    void drawDependsOnSeedAndIndexOnly();
    void specListsPenaltiesAndFedToken();
    void fedTokenCountsAsOutput();
    void expMatchesStd();
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
};

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
    for (int i = 0; i < 20; ++i) QCOMPARE(draw_at(s, logits, i), expected);
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
        const int32_t x = draw_at(a, l, i), y = draw_at(b, l, i);
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
        for (int i = 0; i < 500; ++i) differ += draw_at(a, flat, i) != draw_at(b, flat, i);
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
        for (int i = 0; i < 100; ++i) QCOMPARE(draw_at(s, logits, i), argmax(logits));
    }
}

void TestSampler::topPTinyEqualsGreedy_data() { topK1EqualsGreedy_data(); }

void TestSampler::topPTinyEqualsGreedy() {
    QFETCH(logits_t, logits);
    for (float t : {0.5f, 1.0f, 5.0f}) {
        es::sampling_params p = params(t, 99);
        p.top_p = 1e-6f;
        es::sampler s(p);
        for (int i = 0; i < 100; ++i) QCOMPARE(draw_at(s, logits, i), argmax(logits));
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

void TestSampler::drawMatchesDefinition_data() {
    QTest::addColumn<logits_t>("logits");
    QTest::newRow("random_64") << test_logits(64, 31, false);
    QTest::newRow("random_64_ties") << test_logits(64, 32, true);
    QTest::newRow("quarter_steps_3000") << [] {
        logits_t l = test_logits(3000, 33, false);
        for (float &x : l) x = std::round(x * 4.0f) / 4.0f; // thousands of ties
        return l;
    }();
    QTest::newRow("flat_20000") << [] {
        std::mt19937 rng(34);
        std::normal_distribution<float> d(0.0f, 0.05f);
        logits_t l(20000);
        for (float &x : l) x = d(rng);
        return l;
    }();
    QTest::newRow("constant") << logits_t(500, 1.5f);
    QTest::newRow("nan_and_minus_inf") << [] {
        logits_t l = test_logits(300, 35, false);
        for (size_t v = 0; v < l.size(); v += 3) l[v] = v % 2 ? NAN : -INFINITY;
        return l;
    }();
    QTest::newRow("signed_zeros") << logits_t{-0.0f, 0.0f, -1.0f, -0.0f, 0.0f, -3.0f};
    QTest::newRow("plus_inf") << logits_t{1.0f, INFINITY, 2.0f, INFINITY};
    QTest::newRow("all_minus_inf") << logits_t(7, -INFINITY);
}

// The draw against sample_rows.cuh's definition written out by sorting: the same token, exactly,
// over parameter sets crossing every cut and 40 draw indices each.
void TestSampler::drawMatchesDefinition() {
    QFETCH(logits_t, logits);
    struct set {
        float t;
        int32_t k;
        float p, min_p;
    };
    const set sets[] = {{0.0f, 0, 1.0f, 0.0f},   {0.8f, 0, 1.0f, 0.0f},  {0.8f, 0, 0.8f, 0.0f},
                        {1.0f, 50, 1.0f, 0.0f},  {0.7f, 40, 0.9f, 0.05f}, {1.2f, 0, 1.0f, 0.1f},
                        {0.8f, 0, 1e-4f, 0.0f},  {0.8f, 1, 1.0f, 0.0f},  {2e-5f, 0, 1.0f, 0.0f},
                        {1.0f, 1000, 0.5f, 0.0f}, {3.0f, 7, 0.3f, 0.2f}};
    for (const set &st : sets) {
        es::sampling_params p = params(st.t, 77);
        p.top_k = st.k;
        p.top_p = st.p;
        p.min_p = st.min_p;
        es::sampler s(p);
        for (int i = 0; i < 40; ++i) {
            const int32_t want = reference_draw(logits, p, 77, uint64_t(i));
            QVERIFY2(want >= 0, "the reference found no token");
            const int32_t got = draw_at(s, logits, i);
            QVERIFY2(got == want, qPrintable(QString("T %1 top-k %2 top-p %3 min-p %4, draw %5: token %6, definition %7")
                                                 .arg(st.t)
                                                 .arg(st.k)
                                                 .arg(st.p)
                                                 .arg(st.min_p)
                                                 .arg(i)
                                                 .arg(got)
                                                 .arg(want)));
        }
    }
}

// A draw is a function of the seed and its index alone: the same index after different tokens (no
// penalties) gives the same token, and two samplers with the same seed agree at every index
// whichever order they are asked in.
void TestSampler::drawDependsOnSeedAndIndexOnly() {
    const logits_t l = test_logits(200, 41, false);
    es::sampler a(params(1.0f, 5)), b(params(1.0f, 5));
    const ids_t x = {1, 2, 3, 4}, y = {9, 9, 9, 9};
    for (int round = 0; round < 3; ++round) {
        logits_t la = l, lb = l;
        QCOMPARE(a.sample(la, {}, x), b.sample(lb, ids_t{7, 7}, y));
    }
    std::vector<int32_t> forward, backward(30);
    for (int i = 0; i < 30; ++i) forward.push_back(draw_at(a, l, i));
    for (int i = 29; i >= 0; --i) backward[size_t(i)] = draw_at(b, l, i);
    QCOMPARE(forward, backward);
}

// spec(): the counter is the number of tokens drawn before; the penalty list holds the distinct
// ids of prompt (repetition penalty only) and output, ascending, with their output counts; a
// placeholder (negative) last output token becomes the fed token, read from the batch.
void TestSampler::specListsPenaltiesAndFedToken() {
    es::sampling_params p = params(0.9f, 3);
    p.repetition_penalty = 1.2f;
    p.frequency_penalty = 0.5f;
    es::sampler s(p);
    std::vector<es::penalty_entry> pen = {{-5, -5}}; // an earlier row's entry stays
    const ids_t prompt = {7, 3, 7, 12}, output = {3, 5, 3, -1};
    const es::row_sampling r = s.spec(prompt, output, 9, pen);
    QCOMPARE(r.counter, uint64_t(4));
    QCOMPARE(r.extra_token, 9);
    QCOMPARE(r.penalties, uint64_t(1));
    QCOMPARE(r.n_penalties, 4);
    const std::vector<std::pair<int, int>> want = {{3, 2}, {5, 1}, {7, 0}, {12, 0}};
    for (int i = 0; i < 4; ++i) {
        QCOMPARE(pen[size_t(1 + i)].id, want[size_t(i)].first);
        QCOMPARE(pen[size_t(1 + i)].count, want[size_t(i)].second);
    }
    QCOMPARE(r.seed, uint64_t(3));
    QCOMPARE(r.temperature, 0.9f);
    // Without the repetition penalty the prompt is not listed; without penalties nothing is.
    p.repetition_penalty = 1.0f;
    pen.clear();
    const ids_t fives = {5, 5};
    QCOMPARE(es::sampler(p).spec(prompt, fives, 0, pen).n_penalties, 1);
    QCOMPARE(pen[0].count, 2);
    p.frequency_penalty = 0.0f;
    pen.clear();
    const es::row_sampling none = es::sampler(p).spec(prompt, fives, 0, pen);
    QCOMPARE(none.n_penalties, 0);
    QCOMPARE(none.extra_token, -1);
    QVERIFY(pen.empty());
}

// The fed token: a draw whose last output token is read from the batch gives the same token and
// the same penalized logits as the draw with that token known.
void TestSampler::fedTokenCountsAsOutput() {
    es::sampling_params p = params(0.8f, 11);
    p.repetition_penalty = 1.3f;
    p.presence_penalty = 0.4f;
    p.frequency_penalty = 0.3f;
    es::sampler s(p);
    const logits_t l = test_logits(300, 51, false);
    const ids_t prompt = {4, 8, 15}, known = {16, 23, 42, 8};
    for (int32_t fed : {8, 42, 99, 0}) { // listed in the output, in the prompt, neither, id 0
        ids_t output = known;
        output.push_back(fed);
        logits_t want_l = l;
        const int32_t want = s.sample(want_l, prompt, output);
        output.back() = -1;
        std::vector<es::penalty_entry> pen;
        es::row_sampling r = s.spec(prompt, output, 2, pen);
        r.penalties = reinterpret_cast<uint64_t>(pen.data());
        const std::vector<int32_t> batch_tokens = {1, 2, fed};
        logits_t got_l = l;
        const int32_t got = es::sampling_draw(got_l.data(), int64_t(l.size()), r, batch_tokens.data());
        QCOMPARE(got, want);
        QVERIFY(std::memcmp(got_l.data(), want_l.data(), l.size() * 4) == 0);
    }
}

// sampling_exp: within 2 ulp of the correctly rounded e^x over [−30, 0], e^0 = 1 exactly, 0 below.
void TestSampler::expMatchesStd() {
    QCOMPARE(es::sampling_exp(0.0f), 1.0f);
    QCOMPARE(es::sampling_exp(-0.0f), 1.0f);
    QCOMPARE(es::sampling_exp(-31.0f), 0.0f);
    QCOMPARE(es::sampling_exp(-INFINITY), 0.0f);
    QCOMPARE(es::sampling_exp(NAN), 0.0f);
    int64_t worst = 0;
    for (float x = -29.999f; x <= 0.0f; x += 0.000731f) {
        const float want = float(std::exp(double(x)));
        const float got = es::sampling_exp(x);
        int32_t a, b;
        std::memcpy(&a, &want, 4);
        std::memcpy(&b, &got, 4);
        worst = std::max<int64_t>(worst, std::abs(int64_t(a) - int64_t(b)));
    }
    QVERIFY2(worst <= 2, qPrintable(QString("worst error %1 ulp").arg(worst)));
}

QTEST_APPLESS_MAIN(TestSampler)
#include "test_sampler.moc"
