// The MoE kernels' CPU twins (kernels/*.cpp), which the self-test uses as references for the GPU:
// router ties go to the lower id, the grouped prefill expert path equals the per-token decode
// path, 128×128 block scales and the tile-major layout read to the values they stand for, the
// grouped GEMM's FP8 activations to the bits of its BF16 ones, and the fused decode kernels
// (norm_in, moe_front, the shared-expert slot) equal their parts run one after the other. Plain
// C++: runs without a GPU or a CUDA toolkit.
#include "kernel_twin_support.h"

#include "kernels/fp8_dequantize.cuh"
#include "kernels/fp8_quantize.cuh"
#include "kernels/fp8_tile_major.cuh"
#include "kernels/gemv.cuh"
#include "kernels/moe_combine.cuh"
#include "kernels/moe_down_gemv.cuh"
#include "kernels/moe_front.cuh"
#include "kernels/moe_gate_up_gemv.cuh"
#include "kernels/moe_grouped_gemm.cuh"
#include "kernels/moe_plan.cuh"
#include "kernels/moe_reroute.cuh"
#include "kernels/moe_router.cuh"
#include "kernels/rms_norm.cuh"
#include "kernels/silu_mul.cuh"

#include <QtTest>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <stdexcept>

using namespace es_test;

class TestKernelTwinsMoe : public QObject {
    Q_OBJECT
private slots:
    void routerTiesAndBias();
    void rerouteUnderTheModelsRuleIsTheRouter();
    void rerouteRules();
    void moeBlockScales();
    void moeGroupedEqualsDecodePath_data();
    void moeGroupedEqualsDecodePath();
    void fp8TileMajor();
    void moeGroupedFp8Activations_data();
    void moeGroupedFp8Activations();
    void planEdgeCases();
    void fusedNormInputs();
    void moeFrontEqualsParts_data();
    void moeFrontEqualsParts();
    void sharedSlotEqualsSharedLinear();
};

void TestKernelTwinsMoe::routerTiesAndBias() {
    const int64_t H = 4, E = 6, K = 3;
    std::vector<es::bf16_t> x = {es::float_to_bf16_bits(1.0f), 0, 0, 0};
    std::vector<float> w(E * H, 0.0f), bias(E, 0.0f);
    w[5 * H] = 2.0f; // expert 5 has the largest p
    bias[3] = 1.0f;  // expert 3 is promoted by the bias only
    std::vector<int32_t> ids(K);
    std::vector<float> wts(K);
    es::moe_router_params p{x.data(), w.data(), bias.data(), ids.data(), wts.data(), 1, H, E, K, 1e-12f};
    es::moe_router_ref(p);
    // 3 (biased), 5 (largest p), then the tie among 0,1,2,4 goes to the lowest id.
    QCOMPARE(ids, (std::vector<int32_t>{3, 5, 0}));
    const double e2 = std::exp(2.0), sum = 5.0 + e2;
    const double p3 = 1.0 / sum, p5 = e2 / sum, p0 = 1.0 / sum, denom = p3 + p5 + p0;
    QVERIFY(std::fabs(wts[0] - p3 / denom) < 1e-6); // weights use the unbiased p
    QVERIFY(std::fabs(wts[1] - p5 / denom) < 1e-6);
    QVERIFY(std::fabs(wts[0] + wts[1] + wts[2] - 1.0f) < 1e-6);
}

// The MoE twins with 128×128 block scales, each expert its own grid (fp8_stack_scale_index):
// against the dequantized weights computed here independently in double (block magnitudes that
// differ by powers of two, so a scale read from the wrong block or expert is far off), and the
// grouped GEMM's block path exactly equal to its BF16 path on fp8_dequantize's weights.
// moe_reroute under a rule of the model's k, nothing forced or disabled and the bias as it is:
// the router's choices, weights and margins bit for bit, from the logits the router leaves.
void TestKernelTwinsMoe::rerouteUnderTheModelsRuleIsTheRouter() {
    for (const auto &[T, H, E, K] : {std::array<int64_t, 4>{7, 40, 8, 2}, std::array<int64_t, 4>{5, 64, 64, 6},
                                     std::array<int64_t, 4>{3, 32, 160, 8}}) {
        const auto x = rand_bf16(size_t(T * H), -2, 2);
        const auto w = rand_f32(size_t(E * H), -0.2f, 0.2f), bias = rand_f32(size_t(E), -0.02f, 0.02f);
        std::vector<int32_t> ids(static_cast<size_t>(T * K)), ids2(static_cast<size_t>(T * K));
        std::vector<float> wts(static_cast<size_t>(T * K)), wts2(static_cast<size_t>(T * K)),
            logits(static_cast<size_t>(T * E)), m(static_cast<size_t>(T)), m2(static_cast<size_t>(T));
        es::moe_router_params r{x.data(), w.data(), bias.data(), ids.data(), wts.data(), T, H, E, K, 1e-12f};
        r.margins = m.data();
        r.logits = logits.data();
        es::moe_router_ref(r);
        std::vector<int32_t> rule(size_t(es::moe_reroute_rule_words(E)));
        es::moe_reroute_fill_rule(rule.data(), E, int32_t(K), nullptr, 0, nullptr, 1.0f);
        const std::vector<int32_t> token_rule(size_t(T), 0);
        es::moe_reroute_params p;
        p.logits = logits.data();
        p.bias = bias.data();
        p.rules = rule.data();
        p.token_rule = token_rule.data();
        p.ids = ids2.data();
        p.weights = wts2.data();
        p.margins = m2.data();
        p.n_tokens = T;
        p.n_expert = E;
        p.K = K;
        p.n_rules = 1;
        es::moe_reroute_ref(p);
        QCOMPARE(ids2, ids);
        QVERIFY(std::memcmp(wts2.data(), wts.data(), wts.size() * 4) == 0);
        QVERIFY(std::memcmp(m2.data(), m.data(), m.size() * 4) == 0);
        for (int64_t t = 0; t < T; ++t) { // the margin is the k-th minus the (k+1)-th score
            std::vector<float> s(static_cast<size_t>(E));
            float mx = -INFINITY, sum = 0.0f;
            for (int64_t e = 0; e < E; ++e) mx = std::max(mx, logits[size_t(t * E + e)]);
            for (int64_t e = 0; e < E; ++e) sum += std::exp(logits[size_t(t * E + e)] - mx);
            for (int64_t e = 0; e < E; ++e) s[size_t(e)] = std::exp(logits[size_t(t * E + e)] - mx) / sum + bias[size_t(e)];
            std::sort(s.begin(), s.end(), std::greater<>());
            QVERIFY(std::abs(m[size_t(t)] - (s[size_t(K - 1)] - s[size_t(K)])) < 1e-6f);
        }
    }
}

// Each kind of rule: disabled experts never chosen and out of the softmax, forced ones first in
// their order, a smaller or larger k with the padding (first id, weight 0), the bias scaled.
void TestKernelTwinsMoe::rerouteRules() {
    const int64_t T = 6, E = 8, K = 5;
    const auto logits = rand_f32(size_t(T * E), -3.0f, 3.0f), bias = rand_f32(size_t(E), -0.05f, 0.05f);
    const int64_t words = es::moe_reroute_rule_words(E);
    std::vector<int32_t> rules(static_cast<size_t>(3 * words));
    const uint8_t disabled[E] = {1, 0, 0, 1, 0, 0, 0, 0};
    const int32_t forced[] = {6, 2};
    es::moe_reroute_fill_rule(rules.data(), E, 3, nullptr, 0, disabled, 1.0f);
    es::moe_reroute_fill_rule(rules.data() + words, E, 5, forced, 2, nullptr, 0.0f);
    es::moe_reroute_fill_rule(rules.data() + 2 * words, E, 2, forced, 2, nullptr, 1.0f);
    const std::vector<int32_t> token_rule = {0, 1, 2, 0, 1, 2};
    std::vector<int32_t> ids(static_cast<size_t>(T * K));
    std::vector<float> wts(static_cast<size_t>(T * K)), m(static_cast<size_t>(T));
    es::moe_reroute_params p;
    p.logits = logits.data();
    p.bias = bias.data();
    p.rules = rules.data();
    p.token_rule = token_rule.data();
    p.ids = ids.data();
    p.weights = wts.data();
    p.margins = m.data();
    p.n_tokens = T;
    p.n_expert = E;
    p.K = K;
    p.n_rules = 3;
    es::moe_reroute_ref(p);
    for (int64_t t = 0; t < T; ++t) {
        const int32_t *id = &ids[size_t(t * K)];
        const float *wt = &wts[size_t(t * K)];
        const int rule = token_rule[size_t(t)];
        const int64_t k = rule == 0 ? 3 : rule == 1 ? 5 : 2;
        // p over the experts a rule leaves in the softmax; the expected order by score.
        std::vector<double> prob(size_t(E), 0.0);
        double sum = 0.0;
        for (int64_t e = 0; e < E; ++e)
            if (!(rule == 0 && disabled[e])) sum += prob[size_t(e)] = std::exp(double(logits[size_t(t * E + e)]));
        for (auto &v : prob) v /= sum;
        std::vector<int32_t> want;
        if (rule != 0) want = {6, 2};
        std::vector<int32_t> rest;
        for (int32_t e = 0; e < E; ++e)
            if (!(rule == 0 && disabled[e]) && std::find(want.begin(), want.end(), e) == want.end()) rest.push_back(e);
        const double scale = rule == 1 ? 0.0 : 1.0;
        std::sort(rest.begin(), rest.end(), [&](int32_t a, int32_t b) {
            return prob[size_t(a)] + scale * bias[size_t(a)] > prob[size_t(b)] + scale * bias[size_t(b)];
        });
        while (int64_t(want.size()) < k) want.push_back(rest[want.size() - (rule != 0 ? 2 : 0)]);
        double chosen = 0.0;
        for (int64_t j = 0; j < k; ++j) chosen += prob[size_t(want[size_t(j)])];
        for (int64_t j = 0; j < K; ++j) {
            if (j < k) {
                QCOMPARE(id[j], want[size_t(j)]);
                QVERIFY(std::abs(wt[j] - prob[size_t(want[size_t(j)])] / chosen) < 1e-5);
            } else {
                QCOMPARE(id[j], id[0]); // padding
                QCOMPARE(wt[j], 0.0f);
            }
        }
        QCOMPARE(std::isnan(m[size_t(t)]), rule == 2); // every place of rule 2 forced
        if (rule != 2) QVERIFY(m[size_t(t)] >= 0.0f);
    }
}

void TestKernelTwinsMoe::moeBlockScales() {
    const auto L = es::scale_layout::block128;
    const auto f8 = es::weight_format::fp8_e4m3;
    const int64_t T = 3, H = 272, E = 3, K = 2, F = 144, S = T * K;
    // rows × k matrices per expert, block (rb, cb) of expert e scaled by 2^((e + rb + 2cb) % 5).
    auto make = [&](int64_t rows, int64_t k, std::vector<es::fp8_t> &q, std::vector<float> &sc) {
        auto w = rand_bf16(static_cast<size_t>(E * rows * k), -0.1f, 0.1f);
        for (int64_t e = 0; e < E; ++e)
            for (int64_t r = 0; r < rows; ++r)
                for (int64_t c = 0; c < k; ++c) {
                    es::bf16_t &v = w[size_t((e * rows + r) * k + c)];
                    v = es::float_to_bf16_bits(es::bf16_bits_to_float(v) *
                                               float(1 << ((e + r / 128 + 2 * (c / 128)) % 5)));
                }
        const int64_t cnt = es::fp8_scale_count(rows, k, L);
        q.resize(w.size());
        sc.resize(static_cast<size_t>(E * cnt));
        for (int64_t e = 0; e < E; ++e)
            es::fp8_quantize_ref(
                {w.data() + e * rows * k, q.data() + e * rows * k, sc.data() + e * cnt, rows, k, L});
    };
    std::vector<es::fp8_t> qgu, qdn;
    std::vector<float> sgu, sdn;
    make(2 * F, H, qgu, sgu);
    make(H, F, qdn, sdn);
    auto wval = [&](const std::vector<es::fp8_t> &q, const std::vector<float> &sc, int64_t e, int64_t r,
                    int64_t c, int64_t rows, int64_t k) {
        const int64_t cnt = es::fp8_scale_count(rows, k, L);
        return double(es::fp8_e4m3_to_float(q[size_t((e * rows + r) * k + c)])) *
               sc[size_t(e * cnt + (r / 128) * ((k + 127) / 128) + c / 128)];
    };
    auto x = rand_bf16(static_cast<size_t>(T * H));
    std::vector<int32_t> ids{0, 2, 1, 0, 2, 1};
    std::vector<float> wts{0.25f, 0.75f, 0.5f, 0.5f, 1.0f, 0.125f};
    std::vector<es::bf16_t> act(static_cast<size_t>(S * F));
    es::moe_gate_up_gemv_params g{x.data(), ids.data(), qgu.data(), f8, sgu.data(), act.data(), T, H, K, F};
    g.w_layout = L;
    es::moe_gate_up_gemv_ref(g);
    for (int64_t s = 0; s < S; ++s)
        for (int64_t f = 0; f < F; ++f) {
            double gv = 0.0, uv = 0.0, mag = 0.0;
            for (int64_t c = 0; c < H; ++c) {
                const double xv = es::bf16_bits_to_float(x[size_t((s / K) * H + c)]);
                gv += wval(qgu, sgu, ids[s], f, c, 2 * F, H) * xv;
                uv += wval(qgu, sgu, ids[s], F + f, c, 2 * F, H) * xv;
                mag += std::fabs(wval(qgu, sgu, ids[s], f, c, 2 * F, H) * xv);
            }
            const double want = gv / (1.0 + std::exp(-gv)) * uv,
                         got = es::bf16_bits_to_float(act[size_t(s * F + f)]);
            QVERIFY2(
                std::fabs(got - want) <= 1e-2 * std::fabs(want) + 1e-4 * mag * (std::fabs(uv) + mag),
                qPrintable(QString("gate/up slot %1 row %2: %3 vs %4").arg(s).arg(f).arg(got).arg(want)));
        }
    std::vector<float> y(static_cast<size_t>(T * H), 0.0f), y_slots(static_cast<size_t>(S * H));
    es::moe_down_gemv_params d{act.data(), ids.data(), wts.data(), qdn.data(), f8, sdn.data(),
                               y.data(),   T,          H,          K,          F};
    d.w_layout = L;
    es::moe_down_gemv_ref(d);
    es::moe_down_gemv_params d2 = d;
    d2.y = nullptr;
    d2.y_slots = y_slots.data();
    es::moe_down_gemv_ref(d2);
    for (int64_t t = 0; t < T; ++t)
        for (int64_t n = 0; n < H; ++n) {
            double want = 0.0, mag = 0.0;
            for (int64_t j = 0; j < K; ++j) {
                double v = 0.0;
                for (int64_t f = 0; f < F; ++f) {
                    const double p = wval(qdn, sdn, ids[t * K + j], n, f, H, F) *
                                     es::bf16_bits_to_float(act[size_t((t * K + j) * F + f)]);
                    v += p;
                    mag += std::fabs(p);
                }
                QVERIFY(std::fabs(y_slots[size_t((t * K + j) * H + n)] - v) <= 1e-5 * (mag + 1e-6));
                want += wts[size_t(t * K + j)] * v;
            }
            QVERIFY(std::fabs(y[size_t(t * H + n)] - want) <= 1e-5 * (mag + 1e-6));
        }
    // The grouped GEMM: bf16(e4m3 · block scale) weights, fp8_dequantize's, then the BF16 product.
    const grouped_case gc = grouped_over(ids, E);
    std::vector<es::bf16_t> dgu(qgu.size()), ddn(qdn.size());
    for (int64_t e = 0; e < E; ++e) {
        const int64_t cg = es::fp8_scale_count(2 * F, H, L), cd = es::fp8_scale_count(H, F, L);
        es::fp8_dequantize_ref(
            {qgu.data() + e * 2 * F * H, sgu.data() + e * cg, dgu.data() + e * 2 * F * H, 2 * F, H, L});
        es::fp8_dequantize_ref(
            {qdn.data() + e * H * F, sdn.data() + e * cd, ddn.data() + e * H * F, H, F, L});
    }
    for (const bool glu : {true, false}) {
        es::moe_grouped_gemm_params gg = gc.p;
        gg.a = glu ? x.data() : act.data();
        gg.lda = glu ? H : F;
        gg.a_row_div = glu ? K : 1;
        gg.k = glu ? H : F;
        gg.n = glu ? F : H;
        gg.glu = glu;
        gg.ldo = gg.n;
        std::vector<es::bf16_t> o_blk(static_cast<size_t>(S * gg.n)), o_bf(o_blk.size());
        std::vector<float> f_blk(static_cast<size_t>(S * gg.n)), f_bf(f_blk.size());
        es::moe_grouped_gemm_params b = gg;
        b.w = glu ? static_cast<const void *>(qgu.data()) : qdn.data();
        b.wfmt = f8;
        b.w_scale = glu ? sgu.data() : sdn.data();
        b.w_layout = L;
        b.out_act = glu ? o_blk.data() : nullptr;
        b.out_f32 = glu ? nullptr : f_blk.data();
        es::moe_grouped_gemm_ref(b);
        gg.w = glu ? dgu.data() : ddn.data();
        gg.wfmt = es::weight_format::bf16;
        gg.out_act = glu ? o_bf.data() : nullptr;
        gg.out_f32 = glu ? nullptr : f_bf.data();
        es::moe_grouped_gemm_ref(gg);
        if (glu)
            QCOMPARE(o_blk, o_bf);
        else
            QCOMPARE(f_blk, f_bf);
    }
}

// The tile-major layout of FP8 gate/up stacks (fp8_tile_major.cuh): the offset function is a
// bijection of 16-byte vectors onto each expert's bytes and keeps a vector's 16 bytes in order;
// the twin and its inverse undo each other; the gate/up GEMV and the grouped GEMM twins read a
// tile-major stack to the same bits as the row-major one.
void TestKernelTwinsMoe::fp8TileMajor() {
    QVERIFY(es::fp8_tile_major_ok(16, 64));
    QVERIFY(!es::fp8_tile_major_ok(24, 64));
    QVERIFY(!es::fp8_tile_major_ok(16, 48));
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, es::fp8_tile_major_check(24, 64));
    {
        const int64_t F = 48, H = 192;
        std::vector<int> hit(static_cast<size_t>(2 * F * H / 16), 0);
        for (int64_t row = 0; row < 2 * F; ++row)
            for (int64_t col = 0; col < H; col += 16) {
                const int64_t off = es::fp8_tile_major_offset(row, col, F, H);
                QCOMPARE(off % 16, int64_t(0));
                QCOMPARE(es::fp8_tile_major_offset(row, col + 5, F, H), off + 5);
                ++hit[static_cast<size_t>(off / 16)];
            }
        for (int h : hit) QCOMPARE(h, 1);
        // Row 8 of tile 0's gate, columns 64…79: vector 2 of chunk 1, lane 4·0 + 0.
        QCOMPARE(es::fp8_tile_major_offset(8, 64, F, H), int64_t(2048 + 2 * 512));
        // Up row of f = 17 (tile 1, g = 1), columns 16…31: tile 1, chunk 0, vector 1, lane 4 + 1.
        QCOMPARE(es::fp8_tile_major_offset(F + 17, 16, F, H), int64_t(32 * H + 512 + 5 * 16));
    }
    const int64_t T = 3, H = 128, E = 4, K = 2, F = 32, S = T * K;
    auto x = rand_bf16(static_cast<size_t>(T * H));
    auto wgu = rand_bf16(static_cast<size_t>(E * 2 * F * H), -0.2f, 0.2f);
    std::vector<es::fp8_t> q(wgu.size()), tm(wgu.size()), back(wgu.size());
    std::vector<float> sc(static_cast<size_t>(E * 2 * F));
    es::fp8_quantize_ref({wgu.data(), q.data(), sc.data(), E * 2 * F, H});
    es::fp8_tile_major_ref({q.data(), tm.data(), E, F, H});
    QVERIFY(tm != q);
    es::fp8_tile_major_inverse_ref({tm.data(), back.data(), E, F, H});
    QCOMPARE(back, q);
    const std::vector<int32_t> ids{1, 3, 0, 1, 3, 2};
    std::vector<es::bf16_t> a_rm(static_cast<size_t>(S * F)), a_tm(a_rm.size());
    es::moe_gate_up_gemv_params g{
        x.data(), ids.data(), q.data(), es::weight_format::fp8_e4m3, sc.data(), a_rm.data(), T, H, K, F};
    es::moe_gate_up_gemv_ref(g);
    g.w = tm.data();
    g.act = a_tm.data();
    g.w_tile_major = true;
    es::moe_gate_up_gemv_ref(g);
    QCOMPARE(a_tm, a_rm);
    std::vector<es::bf16_t> b_rm(static_cast<size_t>(S * F)), b_tm(b_rm.size());
    grouped_case gc =
        grouped_glu_over(ids, E, x.data(), H, K, q.data(), es::weight_format::fp8_e4m3, sc.data(), F, b_rm.data());
    es::moe_grouped_gemm_params &gg = gc.p;
    es::moe_grouped_gemm_ref(gg);
    gg.w = tm.data();
    gg.w_tile_major = true;
    gg.out_act = b_tm.data();
    es::moe_grouped_gemm_ref(gg);
    QCOMPARE(b_tm, b_rm);
    QCOMPARE(b_rm, a_rm); // the grouped GEMM's per-slot arithmetic is the GEMV's
}

void TestKernelTwinsMoe::moeGroupedFp8Activations_data() {
    QTest::addColumn<bool>("e5m2");
    QTest::newRow("e4m3") << false;
    QTest::newRow("e5m2") << true;
}

// The grouped GEMM's FP8-activation twin (a_q, a_scale) against its BF16 one on activations that
// are FP8 values (exact in BF16) with scale 1: the same products in the same order, so the same
// bits, for the gate/up GLU (token rows) and the down (slot rows).
void TestKernelTwinsMoe::moeGroupedFp8Activations() {
    QFETCH(bool, e5m2);
    const es::fp8_format fmt = e5m2 ? es::fp8_format::e5m2 : es::fp8_format::e4m3;
    const int64_t T = 5, H = 64, E = 4, K = 2, F = 48, S = T * K;
    std::mt19937 gen(7);
    auto codes = [&](size_t n) {
        std::vector<es::fp8_t> c(n);
        for (auto &v : c) {
            do v = es::fp8_t(gen() & 0xff);
            while (!std::isfinite(es::fp8_to_float(v, fmt)));
        }
        return c;
    };
    auto widen_codes = [&](const std::vector<es::fp8_t> &c) {
        std::vector<es::bf16_t> b(c.size());
        for (size_t i = 0; i < c.size(); ++i) b[i] = es::float_to_bf16_bits(es::fp8_to_float(c[i], fmt));
        return b;
    };
    const auto xq = codes(static_cast<size_t>(T * H)), eq = codes(static_cast<size_t>(S * F));
    const auto xb = widen_codes(xq), eb = widen_codes(eq);
    const std::vector<float> ones(static_cast<size_t>(S), 1.0f);
    auto wgu = rand_bf16(static_cast<size_t>(E * 2 * F * H), -0.2f, 0.2f),
         wdn = rand_bf16(static_cast<size_t>(E * H * F), -0.2f, 0.2f);
    std::vector<es::fp8_t> qgu(wgu.size()), qdn(wdn.size());
    std::vector<float> sgu(static_cast<size_t>(E * 2 * F)), sdn(static_cast<size_t>(E * H));
    es::fp8_quantize_ref({wgu.data(), qgu.data(), sgu.data(), E * 2 * F, H});
    es::fp8_quantize_ref({wdn.data(), qdn.data(), sdn.data(), E * H, F});
    const std::vector<int32_t> ids{1, 3, 0, 1, 3, 2, 2, 0, 1, 2};
    std::vector<es::bf16_t> gb(static_cast<size_t>(S * F)), gq(gb.size());
    grouped_case gc = grouped_glu_over(ids, E, xb.data(), H, K, qgu.data(), es::weight_format::fp8_e4m3,
                                       sgu.data(), F, gb.data());
    es::moe_grouped_gemm_ref(gc.p);
    gc.p.a = nullptr;
    gc.p.a_q = xq.data();
    gc.p.a_scale = ones.data();
    gc.p.a_fmt = fmt;
    gc.p.out_act = gq.data();
    es::moe_grouped_gemm_ref(gc.p);
    QCOMPARE(gq, gb);
    std::vector<float> yb(static_cast<size_t>(S * H)), yq(yb.size());
    grouped_case dc = grouped_over(ids, E);
    dc.p.a = eb.data();
    dc.p.lda = F;
    dc.p.a_row_div = 1;
    dc.p.w = qdn.data();
    dc.p.wfmt = es::weight_format::fp8_e4m3;
    dc.p.w_scale = sdn.data();
    dc.p.k = F;
    dc.p.n = H;
    dc.p.out_f32 = yb.data();
    dc.p.ldo = H;
    es::moe_grouped_gemm_ref(dc.p);
    dc.p.a = nullptr;
    dc.p.a_q = eq.data();
    dc.p.a_scale = ones.data();
    dc.p.a_fmt = fmt;
    dc.p.out_f32 = yq.data();
    es::moe_grouped_gemm_ref(dc.p);
    QCOMPARE(yq, yb);
    // The FP8-activation twin refuses weights it cannot take, by name.
    dc.p.wfmt = es::weight_format::bf16;
    QVERIFY_THROWS_EXCEPTION(std::invalid_argument, es::moe_grouped_gemm_ref(dc.p));
}

void TestKernelTwinsMoe::moeGroupedEqualsDecodePath_data() {
    QTest::addColumn<bool>("fp8");
    QTest::newRow("bf16") << false;
    QTest::newRow("fp8") << true;
}

// Prefill path (plan → grouped GLU → grouped down → combine) == decode path (gate/up GEMV → down GEMV).
void TestKernelTwinsMoe::moeGroupedEqualsDecodePath() {
    QFETCH(bool, fp8);
    const auto fmt = fp8 ? es::weight_format::fp8_e4m3 : es::weight_format::bf16;
    const int64_t T = 9, H = 24, E = 5, K = 2, F = 12, S = T * K;
    auto x = rand_bf16(static_cast<size_t>(T * H));
    auto wgu = rand_bf16(static_cast<size_t>(E * 2 * F * H), -0.2f, 0.2f), wdn = rand_bf16(static_cast<size_t>(E * H * F), -0.2f, 0.2f);
    std::vector<es::fp8_t> qgu(wgu.size()), qdn(wdn.size());
    std::vector<float> sgu(static_cast<size_t>(E * 2 * F)), sdn(static_cast<size_t>(E * H));
    es::fp8_quantize_ref({wgu.data(), qgu.data(), sgu.data(), E * 2 * F, H});
    es::fp8_quantize_ref({wdn.data(), qdn.data(), sdn.data(), E * H, F});
    const void *pgu = fp8 ? static_cast<const void *>(qgu.data()) : wgu.data();
    const void *pdn = fp8 ? static_cast<const void *>(qdn.data()) : wdn.data();
    std::vector<int32_t> ids(static_cast<size_t>(S));
    for (int64_t s = 0; s < S; ++s) ids[s] = int32_t((s * 3 + s / 2) % E);
    for (int64_t t = 0; t < T; ++t)
        if (ids[t * K] == ids[t * K + 1]) ids[t * K + 1] = (ids[t * K + 1] + 1) % E;
    std::vector<float> wts(static_cast<size_t>(S));
    for (auto &w : wts) w = std::uniform_real_distribution<float>(0, 1)(g_rng);

    // Decode path.
    std::vector<es::bf16_t> act(static_cast<size_t>(S * F));
    std::vector<float> y_dec(static_cast<size_t>(T * H), 0.0f);
    es::moe_gate_up_gemv_params g{x.data(), ids.data(), pgu, fmt, fp8 ? sgu.data() : nullptr, act.data(), T, H, K, F};
    es::moe_gate_up_gemv_ref(g);
    es::moe_down_gemv_params d{act.data(), ids.data(), wts.data(), pdn, fmt, fp8 ? sdn.data() : nullptr, y_dec.data(), T, H, K, F};
    es::moe_down_gemv_ref(d);

    // Prefill path.
    std::vector<es::bf16_t> act2(static_cast<size_t>(S * F));
    std::vector<float> ys(static_cast<size_t>(S * H)), y_pre(static_cast<size_t>(T * H), 0.0f);
    grouped_case plan = grouped_glu_over(ids, E, x.data(), H, K, pgu, fmt, fp8 ? sgu.data() : nullptr, F, act2.data());
    es::moe_grouped_gemm_params &gg = plan.p;
    es::moe_grouped_gemm_ref(gg);
    QCOMPARE(act2, act); // same per-slot arithmetic
    gg.a = act2.data();
    gg.lda = F;
    gg.a_row_div = 1;
    gg.w = pdn;
    gg.w_scale = fp8 ? sdn.data() : nullptr;
    gg.k = F;
    gg.n = H;
    gg.glu = false;
    gg.out_act = nullptr;
    gg.out_f32 = ys.data();
    gg.ldo = H;
    es::moe_grouped_gemm_ref(gg);
    es::moe_combine_ref({ys.data(), wts.data(), y_pre.data(), T, H, K});
    QVERIFY2(nmse(y_pre, y_dec) < 1e-12, qPrintable(QString("NMSE %1").arg(nmse(y_pre, y_dec))));
    // Decode's per-slot mode (y_slots) plus the combine: the grouped GEMM's slot products exactly,
    // and so the same sum.
    std::vector<float> y_slots(static_cast<size_t>(S * H)), y_rows(static_cast<size_t>(T * H), 0.0f);
    es::moe_down_gemv_params d2 = d;
    d2.y = nullptr;
    d2.y_slots = y_slots.data();
    es::moe_down_gemv_ref(d2);
    QCOMPARE(y_slots, ys);
    es::moe_combine_ref({y_slots.data(), wts.data(), y_rows.data(), T, H, K});
    QCOMPARE(y_rows, y_pre);
    // Decode's slot counters (moe_gate_up_gemv.cuh): the twin counts every row of every slot, and
    // the combine's reset zeroes them.
    std::vector<unsigned> slot_counts(static_cast<size_t>(T * K), 3u);
    es::moe_gate_up_gemv_params gc = g;
    std::vector<es::bf16_t> act_counted(act.size());
    gc.act = act_counted.data();
    gc.slot_rows_done = slot_counts.data();
    es::moe_gate_up_gemv_ref(gc);
    QCOMPARE(act_counted, act);
    for (unsigned c : slot_counts) QCOMPARE(c, unsigned(3 + F));
    es::moe_combine_params cr{y_slots.data(), wts.data(), y_rows.data(), T, H, K};
    cr.reset = slot_counts.data();
    cr.n_reset = T * K;
    es::moe_combine_ref(cr);
    for (unsigned c : slot_counts) QCOMPARE(c, 0u);
}

// A fused input norm (norm_in) gives what rms_norm then the kernel on its output gives, bit for
// bit, and stores the normalized rows where asked; the fused kernels' shape limits hold.
void TestKernelTwinsMoe::fusedNormInputs() {
    const int64_t T = 3, H = 40, E = 6, K = 2, F = 12;
    auto x = rand_f32(static_cast<size_t>(T * H), -3, 3);
    auto nw = rand_bf16(static_cast<size_t>(H), 0.5f, 1.5f);
    const auto xn = rms_rows(x, nw, T, H);
    es::norm_in ni;
    ni.x = x.data();
    ni.weight = nw.data();
    // Router.
    auto w = rand_f32(static_cast<size_t>(E * H), -0.5f, 0.5f), bias = rand_f32(static_cast<size_t>(E), -0.02f, 0.02f);
    std::vector<int32_t> ids_a(static_cast<size_t>(T * K)), ids_b(ids_a.size());
    std::vector<float> wts_a(ids_a.size()), wts_b(ids_a.size());
    es::moe_router_params r{xn.data(), w.data(), bias.data(), ids_a.data(), wts_a.data(), T, H, E, K, 1e-12f};
    es::moe_router_ref(r);
    std::vector<es::bf16_t> stored(xn.size());
    r.x = nullptr;
    r.ids = ids_b.data();
    r.weights = wts_b.data();
    r.norm = ni;
    r.norm.out = stored.data();
    es::moe_router_ref(r);
    QCOMPARE(ids_b, ids_a);
    QCOMPARE(wts_b, wts_a);
    QCOMPARE(stored, xn);
    // Dense gate/up (ids null: expert 0) against gemv + silu_mul.
    auto wgu = rand_bf16(static_cast<size_t>(2 * F * H), -0.2f, 0.2f);
    std::vector<es::bf16_t> act(static_cast<size_t>(T * F)), act2(act.size());
    es::moe_gate_up_gemv_params g{nullptr, nullptr, wgu.data(), es::weight_format::bf16, nullptr, act.data(), T, H, 1, F};
    g.norm = ni;
    es::moe_gate_up_gemv_ref(g);
    std::vector<float> gu(static_cast<size_t>(T * 2 * F));
    es::gemv_params gp;
    gp.x = xn.data();
    gp.ldx = H;
    gp.w = wgu.data();
    gp.y = gu.data();
    gp.ldy = 2 * F;
    gp.n_tokens = T;
    gp.n = 2 * F;
    gp.k = H;
    es::gemv_ref(gp);
    es::silu_mul_ref({gu.data(), act2.data(), T, F});
    QCOMPARE(act, act2);
    // Limits.
    QVERIFY(es::moe_gate_up_gemv_norm_ok(g));
    QVERIFY(es::moe_router_norm_ok(r));
    g.n_embd = 42; // not a multiple of 4
    QVERIFY(!es::moe_gate_up_gemv_norm_ok(g));
    g.n_embd = 32768; // the row does not fit 48 KB
    QVERIFY(!es::moe_gate_up_gemv_norm_ok(g));
    g.n_embd = H;
    g.norm.x = x.data() + 1; // misaligned
    QVERIFY(!es::moe_gate_up_gemv_norm_ok(g));
}

void TestKernelTwinsMoe::moeFrontEqualsParts_data() {
    QTest::addColumn<bool>("fp8");
    QTest::addColumn<int>("tokens");
    QTest::newRow("bf16 T=1") << false << 1;
    QTest::newRow("fp8 T=3") << true << 3;
    QTest::newRow("fp8 T=4") << true << 4;
}

// moe_front == rms_norm, then the router, then the shared experts' gate/up GEMV with SiLU·up.
void TestKernelTwinsMoe::moeFrontEqualsParts() {
    QFETCH(bool, fp8);
    QFETCH(int, tokens);
    const int64_t T = tokens, H = 48, E = 8, K = 3, F = 20;
    const auto fmt = fp8 ? es::weight_format::fp8_e4m3 : es::weight_format::bf16;
    auto x = rand_f32(static_cast<size_t>(T * H), -2, 2);
    auto nw = rand_bf16(static_cast<size_t>(H), 0.5f, 1.5f);
    auto rw = rand_f32(static_cast<size_t>(E * H), -0.5f, 0.5f), bias = rand_f32(static_cast<size_t>(E), -0.05f, 0.05f);
    auto wgu = rand_bf16(static_cast<size_t>(2 * F * H), -0.2f, 0.2f);
    std::vector<es::fp8_t> q(wgu.size());
    std::vector<float> sc(static_cast<size_t>(2 * F));
    es::fp8_quantize_ref({wgu.data(), q.data(), sc.data(), 2 * F, H});
    const void *pw = fp8 ? static_cast<const void *>(q.data()) : wgu.data();

    std::vector<es::bf16_t> xn(static_cast<size_t>(T * H)), act(static_cast<size_t>(T * F));
    std::vector<int32_t> ids(static_cast<size_t>(T * K));
    std::vector<float> wts(ids.size());
    es::moe_front_params p;
    p.norm.x = x.data();
    p.norm.weight = nw.data();
    p.norm.out = xn.data();
    p.router_w = rw.data();
    p.bias = bias.data();
    p.ids = ids.data();
    p.weights = wts.data();
    p.n_expert = E;
    p.n_expert_used = K;
    p.sh_w = pw;
    p.sh_wfmt = fmt;
    p.sh_w_scale = fp8 ? sc.data() : nullptr;
    p.sh_act = act.data();
    p.n_ff_sh = F;
    p.n_tokens = T;
    p.n_embd = H;
    QVERIFY(es::moe_front_supported(p));
    es::moe_front_ref(p);

    const auto xn2 = rms_rows(x, nw, T, H);
    QCOMPARE(xn, xn2);
    std::vector<int32_t> ids2(ids.size());
    std::vector<float> wts2(ids.size());
    es::moe_router_params r{xn2.data(), rw.data(), bias.data(), ids2.data(), wts2.data(), T, H, E, K, 1e-12f};
    es::moe_router_ref(r);
    QCOMPARE(ids, ids2);
    QCOMPARE(wts, wts2);
    std::vector<float> gu(static_cast<size_t>(T * 2 * F));
    es::gemv_params gp;
    gp.x = xn2.data();
    gp.ldx = H;
    gp.w = pw;
    gp.wfmt = fmt;
    gp.w_scale = fp8 ? sc.data() : nullptr;
    gp.y = gu.data();
    gp.ldy = 2 * F;
    gp.n_tokens = T;
    gp.n = 2 * F;
    gp.k = H;
    es::gemv_ref(gp);
    std::vector<es::bf16_t> act2(act.size());
    es::silu_mul_ref({gu.data(), act2.data(), T, F});
    QCOMPARE(act, act2);

    // What the fused kernel does not take.
    es::moe_front_params bad = p;
    bad.n_tokens = es::moe_front_max_tokens + 1;
    QVERIFY(!es::moe_front_supported(bad));
    bad = p;
    bad.n_embd = 46;
    QVERIFY(!es::moe_front_supported(bad));
    bad = p;
    bad.norm.out = nullptr; // the routed experts need the normalized rows
    QVERIFY(!es::moe_front_supported(bad));
    bad = p;
    bad.n_embd = 8192; // four rows of 16 KB exceed 48 KB of shared memory
    bad.n_tokens = 4;
    QVERIFY(!es::moe_front_supported(bad));
}

// The shared experts as one more slot of the per-slot down projection, added first by
// moe_combine, give bit for bit what an accumulating down GEMV then the routed combine give.
void TestKernelTwinsMoe::sharedSlotEqualsSharedLinear() {
    const int64_t T = 2, H = 24, E = 4, K = 2, F = 12, Fs = 20;
    auto wdn = rand_bf16(static_cast<size_t>(E * H * F), -0.2f, 0.2f), wsh = rand_bf16(static_cast<size_t>(H * Fs), -0.2f, 0.2f);
    std::vector<es::fp8_t> qdn(wdn.size()), qsh(wsh.size());
    std::vector<float> sdn(static_cast<size_t>(E * H)), ssh(static_cast<size_t>(H));
    es::fp8_quantize_ref({wdn.data(), qdn.data(), sdn.data(), E * H, F});
    es::fp8_quantize_ref({wsh.data(), qsh.data(), ssh.data(), H, Fs});
    auto act = rand_bf16(static_cast<size_t>(T * K * F)), sh_act = rand_bf16(static_cast<size_t>(T * Fs));
    std::vector<int32_t> ids = {1, 3, 0, 1};
    std::vector<float> wts = {0.7f, 0.3f, 0.55f, 0.45f};
    const auto x0 = rand_f32(static_cast<size_t>(T * H), -1, 1);
    for (bool fp8 : {false, true}) {
        const auto fmt = fp8 ? es::weight_format::fp8_e4m3 : es::weight_format::bf16;
        // Fused: routed slots + the shared slot, one combine.
        std::vector<float> ys(static_cast<size_t>((T * K + T) * H)), xa = x0;
        es::moe_down_gemv_params d;
        d.act = act.data();
        d.ids = ids.data();
        d.weights = wts.data();
        d.w = fp8 ? static_cast<const void *>(qdn.data()) : wdn.data();
        d.wfmt = fmt;
        d.w_scale = fp8 ? sdn.data() : nullptr;
        d.y_slots = ys.data();
        d.n_tokens = T;
        d.n_embd = H;
        d.n_expert_used = K;
        d.n_ff_exp = F;
        d.sh_w = fp8 ? static_cast<const void *>(qsh.data()) : wsh.data();
        d.sh_w_scale = fp8 ? ssh.data() : nullptr;
        d.sh_act = sh_act.data();
        d.y_shared = ys.data() + T * K * H;
        d.n_ff_sh = Fs;
        es::moe_down_gemv_ref(d);
        es::moe_combine_params cb{ys.data(), wts.data(), xa.data(), T, H, K};
        cb.y_shared = d.y_shared;
        es::moe_combine_ref(cb);
        // Separate: the shared down GEMV accumulating into x, then the routed slots and combine.
        std::vector<float> xb = x0;
        es::gemv_params gp;
        gp.x = sh_act.data();
        gp.ldx = Fs;
        gp.w = d.sh_w;
        gp.wfmt = fmt;
        gp.w_scale = d.sh_w_scale;
        gp.y = xb.data();
        gp.ldy = H;
        gp.n_tokens = T;
        gp.n = H;
        gp.k = Fs;
        gp.accumulate = true;
        es::gemv_ref(gp);
        std::vector<float> ys2(static_cast<size_t>(T * K * H));
        d.sh_w = nullptr;
        d.y_slots = ys2.data();
        es::moe_down_gemv_ref(d);
        es::moe_combine_ref({ys2.data(), wts.data(), xb.data(), T, H, K});
        QCOMPARE(xa, xb);
        QVERIFY(xa != x0);
    }
}

void TestKernelTwinsMoe::planEdgeCases() {
    const std::vector<int32_t> ids = {2, 0, 2, 2, 0, 3};
    std::vector<int32_t> c(5), off(6), toff(6), sorted(6);
    es::moe_plan_params p{ids.data(), 6, 5, 2, c.data(), off.data(), toff.data(), sorted.data()};
    es::moe_plan_ref(p);
    QCOMPARE(c, (std::vector<int32_t>{2, 0, 3, 1, 0}));
    QCOMPARE(off, (std::vector<int32_t>{0, 2, 2, 5, 6, 6}));
    QCOMPARE(toff, (std::vector<int32_t>{0, 1, 1, 3, 4, 4})); // tiles of 2 rows; empty experts take none
    QCOMPARE(sorted, (std::vector<int32_t>{1, 4, 0, 2, 3, 5}));
    QVERIFY(toff[5] <= es::moe_plan_max_tiles(6, 5, 2));
}

QTEST_GUILESS_MAIN(TestKernelTwinsMoe)
#include "test_kernel_twins_moe.moc"
