// The kernels' CPU twins (kernels/*.cpp), which the self-test uses as references for the GPU:
// each against an independent computation or an invariant (FP8 codes round-trip, RoPE keeps
// norms, attention over one key returns its value, an FP8 KV cache stores E4M3 of x / scale and
// attention over it equals attention over the dequantized BF16 cache, the attention kernel choice
// follows its rule, router ties go to the lower id, the grouped prefill expert path equals the
// per-token decode path, the fused decode kernels (norm_in, moe_front, the shared-expert slot)
// equal their parts run one after the other), then the twin model (the CUDA backend's
// numerics emulated on the CPU) against the CPU backend on every reference checkpoint. Plain C++:
// runs without a GPU or a CUDA toolkit.
#include "engine/core/compare.h"
#include "engine/cuda/cuda_twin_model.h"
#include "engine/model/npy.h"
#include "engine/model/safetensors.h"
#include "engine/runtime/model.h"

#include "kernels/act_quantize.cuh"
#include "kernels/argmax.cuh"
#include "kernels/attention.cuh"
#include "kernels/embedding.cuh"
#include "kernels/fill_random.cuh"
#include "kernels/fp8_dequantize.cuh"
#include "kernels/fp8_quantize.cuh"
#include "kernels/fp8_tile_major.cuh"
#include "kernels/gemm_lt.cuh"
#include "kernels/gemv.cuh"
#include "kernels/moe_combine.cuh"
#include "kernels/moe_down_gemv.cuh"
#include "kernels/moe_front.cuh"
#include "kernels/moe_gate_up_gemv.cuh"
#include "kernels/moe_grouped_gemm.cuh"
#include "kernels/moe_plan.cuh"
#include "kernels/moe_router.cuh"
#include "kernels/rms_norm.cuh"
#include "kernels/rope_kv.cuh"
#include "kernels/silu_mul.cuh"
#include "kernels/topk_logits.cuh"

#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QtTest>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

namespace {

std::mt19937 g_rng(7);

std::vector<es::bf16_t> rand_bf16(size_t n, float lo = -1.0f, float hi = 1.0f) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<es::bf16_t> v(n);
    for (auto &x : v) x = es::float_to_bf16_bits(d(g_rng));
    return v;
}

using es::nmse;

} // namespace

// moe_plan over ids (their slots, E experts) and grouped-GEMM params reading through it; the
// caller sets the operands (a, lda, a_row_div, w, k, n, glu, outputs).
struct grouped_case {
    std::vector<int32_t> counts, off, toff, sorted;
    es::moe_grouped_gemm_params p;
};
grouped_case grouped_over(const std::vector<int32_t> &ids, int64_t E) {
    grouped_case c;
    const int64_t S = int64_t(ids.size());
    c.counts.resize(size_t(E));
    c.off.resize(size_t(E + 1));
    c.toff.resize(size_t(E + 1));
    c.sorted.resize(size_t(S));
    es::moe_plan_ref({ids.data(), S, E, es::moe_grouped_gemm_tile_rows, c.counts.data(), c.off.data(),
                      c.toff.data(), c.sorted.data()});
    c.p.sorted_slots = c.sorted.data();
    c.p.offsets = c.off.data();
    c.p.tile_offsets = c.toff.data();
    c.p.n_expert = E;
    c.p.max_tiles = es::moe_plan_max_tiles(S, E, es::moe_grouped_gemm_tile_rows);
    return c;
}
// grouped_over with the gate/up GLU's operands: x [T, H] read by the slots (K a token), the stack
// w [E, 2F, H] with its per-row scales (FP8) or none (BF16), SiLU(gate)·up into out [S, F].
grouped_case grouped_glu_over(const std::vector<int32_t> &ids, int64_t E, const es::bf16_t *x, int64_t H, int64_t K,
                              const void *w, es::weight_format fmt, const float *w_scale, int64_t F,
                              es::bf16_t *out) {
    grouped_case c = grouped_over(ids, E);
    c.p.a = x;
    c.p.lda = H;
    c.p.a_row_div = K;
    c.p.w = w;
    c.p.wfmt = fmt;
    c.p.w_scale = w_scale;
    c.p.k = H;
    c.p.n = F;
    c.p.glu = true;
    c.p.out_act = out;
    c.p.ldo = F;
    return c;
}

class TestKernelTwins : public QObject {
    Q_OBJECT
private slots:
    void fp8RoundTrip();
    void fp8Rounding_data();
    void fp8Rounding();
    void bf16Rounding();
    void fp8E5m2RoundTrip();
    void fp8E5m2Rounding_data();
    void fp8E5m2Rounding();
    void fp8NearestCode();
    void actQuantizeRows();
    void gemmLtFp8();
    void rmsNorm();
    void ropeKeepsNorms();
    void attentionOneKey();
    void ropeKvFp8();
    void attentionFp8Kv();
    void attentionTiles();
    void attentionKernelChoice();
    void routerTiesAndBias();
    void gemvFp8Scale();
    void fp8BlockScales();
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
    void argmaxTies();
    void gemvPick();
    void topkLogits_data();
    void topkLogits();
    void fillRandom();
    void fp8QuantizeRows();
    void twinModel_data();
    void twinModel();
    void twinModelActivationSteps();
    void twinModelRoutedFp8();
    void twinModelBlockScales();
};

void TestKernelTwins::fp8RoundTrip() {
    for (int c = 0; c < 256; ++c) {
        if ((c & 0x7f) == 0x7f) continue; // NaN codes
        const float v = es::fp8_e4m3_to_float(es::fp8_t(c));
        QCOMPARE(int(es::float_to_fp8_e4m3(v)), c);
    }
    QCOMPARE(es::fp8_e4m3_to_float(0x7e), 448.0f);
    QCOMPARE(es::fp8_e4m3_to_float(0x01), std::ldexp(1.0f, -9));
    QVERIFY(std::isnan(es::fp8_e4m3_to_float(0x7f)));
}

void TestKernelTwins::fp8Rounding_data() {
    QTest::addColumn<float>("in");
    QTest::addColumn<int>("code");
    QTest::newRow("saturate +") << 500.0f << 0x7e;
    QTest::newRow("saturate -") << -1e9f << 0xfe;
    QTest::newRow("just below 448") << 447.0f << 0x7e;
    QTest::newRow("tie to even 1.0625") << 1.0625f << 0x38;        // between 1.0 (m=0) and 1.125 (m=1): even
    QTest::newRow("tie to even 1.1875") << 1.1875f << 0x3a;        // between 1.125 (m=1) and 1.25 (m=2): even
    QTest::newRow("subnormal 3·2^-9") << 3.0f * std::ldexp(1.0f, -9) << 0x03;
    QTest::newRow("half smallest → 0") << std::ldexp(1.0f, -10) << 0x00;
    QTest::newRow("rounds up to min normal") << 7.6f * std::ldexp(1.0f, -9) << 0x08;
    QTest::newRow("NaN") << NAN << 0x7f;
}

void TestKernelTwins::fp8Rounding() {
    QFETCH(float, in);
    QFETCH(int, code);
    QCOMPARE(int(es::float_to_fp8_e4m3(in)), code);
}

void TestKernelTwins::bf16Rounding() {
    QCOMPARE(es::float_to_bf16_bits(1.0f), es::bf16_t(0x3f80));
    // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1.0).
    QCOMPARE(es::float_to_bf16_bits(1.0f + std::ldexp(1.0f, -8)), es::bf16_t(0x3f80));
    QCOMPARE(es::float_to_bf16_bits(1.0f + 3 * std::ldexp(1.0f, -8)), es::bf16_t(0x3f82));
}

void TestKernelTwins::fp8E5m2RoundTrip() {
    for (int c = 0; c < 256; ++c) {
        if (((c >> 2) & 0x1f) == 0x1f) continue; // infinities and NaNs
        const float v = es::fp8_e5m2_to_float(es::fp8_t(c));
        QCOMPARE(int(es::float_to_fp8_e5m2(v)), c);
        QCOMPARE(int(es::float_to_fp8(v, es::fp8_format::e5m2)), c);
    }
    QCOMPARE(es::fp8_e5m2_to_float(0x7b), 57344.0f);
    QCOMPARE(es::fp8_e5m2_to_float(0x04), std::ldexp(1.0f, -14));
    QCOMPARE(es::fp8_e5m2_to_float(0x01), std::ldexp(1.0f, -16));
    QCOMPARE(es::fp8_e5m2_to_float(0xfc), -INFINITY);
    QVERIFY(std::isnan(es::fp8_e5m2_to_float(0x7d)));
    QCOMPARE(es::fp8_format_max(es::fp8_format::e5m2), 57344.0f);
}

void TestKernelTwins::fp8E5m2Rounding_data() {
    QTest::addColumn<float>("in");
    QTest::addColumn<int>("code");
    QTest::newRow("saturate +") << 70000.0f << 0x7b;
    QTest::newRow("infinity saturates") << -INFINITY << 0xfb;
    QTest::newRow("just below the overflow tie") << 61439.0f << 0x7b;
    QTest::newRow("overflow tie saturates") << 61440.0f << 0x7b;
    QTest::newRow("tie to even 1.125") << 1.125f << 0x3c; // between 1.0 (m=0) and 1.25 (m=1): even
    QTest::newRow("tie to even 1.375") << 1.375f << 0x3e; // between 1.25 (m=1) and 1.5 (m=2): even
    QTest::newRow("above the tie") << 1.126f << 0x3d;
    QTest::newRow("subnormal 3·2^-17 → 2·2^-16") << 3.0f * std::ldexp(1.0f, -17) << 0x02;
    QTest::newRow("half smallest → 0") << std::ldexp(1.0f, -17) << 0x00;
    QTest::newRow("negative zero") << -0.0f << 0x80;
    QTest::newRow("rounds up to min normal") << 3.6f * std::ldexp(1.0f, -16) << 0x04;
    QTest::newRow("NaN") << NAN << 0x7f;
}

void TestKernelTwins::fp8E5m2Rounding() {
    QFETCH(float, in);
    QFETCH(int, code);
    QCOMPARE(int(es::float_to_fp8_e5m2(in)), code);
}

// Both host conversions against an independent definition: the nearest finite code by search,
// ties to the code with an even last bit, beyond the largest code + half a step saturated.
void TestKernelTwins::fp8NearestCode() {
    for (auto f : {es::fp8_format::e4m3, es::fp8_format::e5m2}) {
        std::vector<std::pair<float, int>> codes; // positive finite values, ascending
        for (int c = 0; c < 128; ++c) {
            const float v = es::fp8_to_float(es::fp8_t(c), f);
            if (std::isfinite(v)) codes.push_back({v, c});
        }
        const float top = codes.back().first, half_step = (top - codes[codes.size() - 2].first) / 2;
        auto nearest = [&](float a) {
            if (a >= top + half_step)
                return codes.back().second; // saturation (the tie too: the even neighbour is out of range)
            int best = 0;
            for (size_t i = 1; i < codes.size(); ++i) {
                const float d = std::fabs(codes[i].first - a), db = std::fabs(codes[best].first - a);
                if (d < db || (d == db && (codes[i].second & 1) == 0)) best = int(i);
            }
            return codes[best].second;
        };
        std::mt19937 g(11);
        std::uniform_real_distribution<float> e(-20.0f, 17.0f), m(1.0f, 2.0f);
        for (int i = 0; i < 20000; ++i) {
            // Random magnitudes over the whole range, and every third one a midpoint between codes.
            float a = std::ldexp(m(g), int(e(g)));
            if (i % 3 == 0) {
                const size_t j = size_t(g() % (codes.size() - 1));
                a = (codes[j].first + codes[j + 1].first) / 2;
            }
            const int want = nearest(a);
            QCOMPARE(int(es::float_to_fp8(a, f)), want);
            QCOMPARE(int(es::float_to_fp8(-a, f)), want | 0x80);
        }
    }
}

void TestKernelTwins::actQuantizeRows() {
    for (auto f : {es::fp8_format::e4m3, es::fp8_format::e5m2}) {
        const int64_t K = 13, ld = 16, M = 4;
        const float fmax = es::fp8_format_max(f);
        std::vector<es::bf16_t> x(size_t(M * ld), es::float_to_bf16_bits(NAN)); // NaN padding: never read
        auto set = [&](int64_t r, int64_t i, float v) { x[size_t(r * ld + i)] = es::float_to_bf16_bits(v); };
        for (int64_t i = 0; i < K; ++i) {
            set(0, i, i % 2 ? -0.0f : 0.0f);                      // zero row: scale 1
            set(1, i, i == 4 ? -6.0f : 0.25f * float(i % 5 - 2)); // amax 6 at a negative value
            set(2, i, 1e-39f * float(i + 1));                     // BF16 subnormals
            set(3, i, i == 0 ? fmax : 1.0625f + float(i));        // scale exactly 1
        }
        std::vector<es::fp8_t> q(size_t(M * K));
        std::vector<float> s(static_cast<size_t>(M));
        es::act_quantize_params p;
        p.x = x.data();
        p.ldx = ld;
        p.q = q.data();
        p.scale = s.data();
        p.m = M;
        p.k = K;
        p.fmt = f;
        es::act_quantize_ref(p);
        QCOMPARE(s[0], 1.0f);
        for (int64_t i = 0; i < K; ++i) QCOMPARE(int(q[size_t(i)]), i % 2 ? 0x80 : 0x00);
        QCOMPARE(s[1], 6.0f / fmax);
        QCOMPARE(int(q[size_t(K + 4)]), f == es::fp8_format::e4m3 ? 0xfe : 0xfb); // -amax → -max code
        QCOMPARE(s[3], 1.0f);
        for (int64_t r = 1; r < M; ++r) {
            QVERIFY(s[size_t(r)] > 0.0f && std::isfinite(s[size_t(r)]));
            const float rel = f == es::fp8_format::e4m3 ? 1.0f / 16 : 1.0f / 8; // half a mantissa step
            const float sub = f == es::fp8_format::e4m3 ? 0x1p-10f : 0x1p-17f;  // half the subnormal step
            for (int64_t i = 0; i < K; ++i) {
                const float v = es::bf16_bits_to_float(x[size_t(r * ld + i)]);
                const float back = es::fp8_to_float(q[size_t(r * K + i)], f) * s[size_t(r)];
                QVERIFY2(std::fabs(back - v) <= std::fabs(v) * rel + sub * s[size_t(r)] * 1.0001f,
                         qPrintable(QString("row %1 col %2: %3 → %4").arg(r).arg(i).arg(v).arg(back)));
            }
        }
        // Ties at scale 1: 1.0625 + i for i = 1 is 2.0625, between 2.0 and 2.25 (E4M3): 2.0; E5M2: 2.0.
        QCOMPARE(es::fp8_to_float(q[size_t(3 * K + 1)], f), 2.0f);
    }
}

void TestKernelTwins::gemmLtFp8() {
    QVERIFY(es::gemm_lt_fp8_dims_ok(16, 16));
    QVERIFY(es::gemm_lt_fp8_dims_ok(2560, 1024));
    QVERIFY(!es::gemm_lt_fp8_dims_ok(16, 40));
    QVERIFY(!es::gemm_lt_fp8_dims_ok(200, 32));
    const int64_t M = 5, N = 16, K = 32, lda = 48;
    auto w = rand_bf16(size_t(N * K)), x = rand_bf16(size_t(M * lda));
    std::vector<es::fp8_t> wq(w.size()), aq(size_t(M * lda));
    std::vector<float> ws(static_cast<size_t>(N)), as(static_cast<size_t>(M));
    es::fp8_quantize_ref({w.data(), wq.data(), ws.data(), N, K});
    es::act_quantize_params q;
    q.x = x.data();
    q.ldx = lda;
    q.q = aq.data();
    q.scale = as.data();
    q.m = M;
    q.k = K;
    q.fmt = es::fp8_format::e5m2;
    es::act_quantize_ref(q); // dense [M, K] codes
    std::vector<float> y(size_t(M * N), 0.5f);
    es::gemm_lt_fp8_params p;
    p.a = aq.data();
    p.lda = K;
    p.a_scale = as.data();
    p.a_fmt = es::fp8_format::e5m2;
    p.w = wq.data();
    p.ldw = K;
    p.w_scale = ws.data();
    p.y = y.data();
    p.ldy = N;
    p.m = M;
    p.n = N;
    p.k = K;
    p.accumulate = true;
    es::gemm_lt_fp8_ref(p);
    for (int64_t m = 0; m < M; ++m)
        for (int64_t n = 0; n < N; ++n) {
            double want = 0.5;
            for (int64_t k = 0; k < K; ++k)
                want += double(es::fp8_e5m2_to_float(aq[size_t(m * K + k)])) * as[size_t(m)] *
                        double(es::fp8_e4m3_to_float(wq[size_t(n * K + k)])) * ws[size_t(n)];
            QVERIFY(std::fabs(y[size_t(m * N + n)] - want) <= 1e-5 * (1.0 + std::fabs(want)));
        }
}

void TestKernelTwins::rmsNorm() {
    const int64_t H = 40;
    std::vector<float> x(H), d(H);
    for (int64_t i = 0; i < H; ++i) {
        x[i] = float(i) * 0.1f - 2.0f;
        d[i] = 0.5f;
    }
    const auto w = rand_bf16(static_cast<size_t>(H), 0.5f, 1.5f);
    std::vector<es::bf16_t> out(H);
    std::vector<float> x2 = x;
    es::rms_norm_params p;
    p.x = x2.data();
    p.delta = d.data();
    p.weight = w.data();
    p.out = out.data();
    p.n_rows = 1;
    p.n_embd = H;
    p.eps = 1e-5f;
    es::rms_norm_ref(p);
    double ss = 0.0;
    for (int64_t i = 0; i < H; ++i) ss += double(x[i] + 0.5f) * (x[i] + 0.5f);
    const double scale = 1.0 / std::sqrt(ss / H + 1e-5);
    for (int64_t i = 0; i < H; ++i) {
        QCOMPARE(x2[i], x[i] + 0.5f);
        const double want = double(es::bf16_bits_to_float(w[i])) * (x[i] + 0.5) * scale;
        QVERIFY(std::fabs(es::bf16_bits_to_float(out[i]) - want) <= 0.01 * std::fabs(want) + 1e-6);
    }
}

void TestKernelTwins::ropeKeepsNorms() {
    const int64_t nh = 2, nkv = 1, hd = 16, T = 3, qd = nh * hd, kvd = nkv * hd;
    std::vector<float> qkv(static_cast<size_t>(T * (qd + 2 * kvd)));
    std::uniform_real_distribution<float> u(-1, 1);
    for (auto &v : qkv) v = u(g_rng);
    std::vector<int32_t> pos = {0, 5, 1000}, seq = {0, 0, 0}, bt(64);
    std::iota(bt.begin(), bt.end(), 0);
    std::vector<float> inv(hd / 2);
    for (int64_t i = 0; i < hd / 2; ++i) inv[i] = 1.0f / std::pow(500000.0f, float(2 * i) / float(hd));
    std::vector<es::bf16_t> q(static_cast<size_t>(T * qd)), k(static_cast<size_t>(64 * 16 * kvd)), v(k.size());
    es::rope_kv_params p{qkv.data(), pos.data(), seq.data(), bt.data(), 64, inv.data(), q.data(), k.data(), v.data(),
                         T, nh, nkv, hd, 16};
    es::rope_kv_ref(p);
    for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < nh; ++h)
            for (int64_t i = 0; i < hd / 2; ++i) {
                const float a = qkv[t * (qd + 2 * kvd) + h * hd + 2 * i], b = qkv[t * (qd + 2 * kvd) + h * hd + 2 * i + 1];
                const float x0 = es::bf16_bits_to_float(q[t * qd + h * hd + 2 * i]);
                const float x1 = es::bf16_bits_to_float(q[t * qd + h * hd + 2 * i + 1]);
                QVERIFY(std::fabs(std::hypot(x0, x1) - std::hypot(a, b)) <= 0.01f * std::hypot(a, b) + 1e-6f);
                if (pos[t] == 0) QCOMPARE(x0, es::round_bf16(a)); // angle 0: identity
            }
    // K and V land in slot pos (block table is the identity here).
    QCOMPARE(es::bf16_bits_to_float(v[static_cast<size_t>(1000) * kvd]), es::round_bf16(qkv[2 * (qd + 2 * kvd) + qd + kvd]));
}

void TestKernelTwins::attentionOneKey() {
    // Position 0 sees only key 0: the output is V[0] whatever the scores.
    const int64_t nh = 4, nkv = 2, hd = 8, kvd = nkv * hd;
    auto q = rand_bf16(static_cast<size_t>(nh * hd)), k = rand_bf16(static_cast<size_t>(16 * kvd)), v = rand_bf16(static_cast<size_t>(16 * kvd));
    std::vector<int32_t> pos = {0}, seq = {0}, bt = {0}, tiles = {0, 1};
    std::vector<es::bf16_t> out(static_cast<size_t>(nh * hd));
    es::attention_params p;
    p.q = q.data();
    p.k_cache = k.data();
    p.v_cache = v.data();
    p.pos = pos.data();
    p.seq = seq.data();
    p.block_tables = bt.data();
    p.bt_stride = 1;
    p.tiles = tiles.data();
    p.n_tiles = 1;
    p.out = out.data();
    p.n_tokens = 1;
    p.n_head = nh;
    p.n_head_kv = nkv;
    p.head_dim = hd;
    p.block_size = 16;
    p.scale = 0.3f;
    es::attention_ref(p);
    for (int64_t h = 0; h < nh; ++h)
        for (int64_t d = 0; d < hd; ++d) QCOMPARE(out[h * hd + d], v[(h / 2) * hd + d]);
}

// rope_kv into an FP8 cache: each k' and v element is stored as the saturating E4M3 of x / scale
// (k' from the same rotation as ropeKeepsNorms), in the BF16 layout's slots at 1 byte each.
void TestKernelTwins::ropeKvFp8() {
    const int64_t nh = 2, nkv = 2, hd = 8, T = 3, qd = nh * hd, kvd = nkv * hd, row = qd + 2 * kvd;
    std::vector<float> qkv(static_cast<size_t>(T * row));
    std::uniform_real_distribution<float> u(-3, 3);
    for (auto &v : qkv) v = u(g_rng);
    qkv[size_t(2 * row + qd + kvd + 3)] = 1000.0f; // v / 1.5 = 667 > 448: saturates
    std::vector<int32_t> pos = {0, 7, 20}, seq = {0, 0, 0}, bt = {1, 0};
    std::vector<float> inv(hd / 2);
    for (int64_t i = 0; i < hd / 2; ++i) inv[i] = 1.0f / std::pow(10000.0f, float(2 * i) / float(hd));
    const int64_t bs = 16, pool = 2 * bs * kvd;
    std::vector<es::bf16_t> q(static_cast<size_t>(T * qd)), q16(q.size()), k16(static_cast<size_t>(pool)),
        v16(k16.size());
    std::vector<es::fp8_t> k8(static_cast<size_t>(pool), 0), v8(k8.size(), 0);
    es::rope_kv_params p{qkv.data(), pos.data(), seq.data(), bt.data(), 2,   inv.data(), q.data(),
                         k8.data(),  v8.data(),  T,          nh,        nkv, hd,         bs};
    p.kv = es::kv_format::fp8_e4m3;
    p.k_scale = 0.5f;
    p.v_scale = 1.5f;
    es::rope_kv_ref(p);
    es::rope_kv_params pb = p; // the BF16 cache: q must be the same
    pb.q_out = q16.data();
    pb.k_cache = k16.data();
    pb.v_cache = v16.data();
    pb.kv = es::kv_format::bf16;
    es::rope_kv_ref(pb);
    QVERIFY(q == q16);
    int64_t nonzero = 0;
    for (int64_t t = 0; t < T; ++t) {
        const int64_t slot = int64_t(bt[pos[t] / bs]) * bs + pos[t] % bs;
        const float *r = qkv.data() + t * row;
        for (int64_t h = 0; h < nkv; ++h)
            for (int64_t i = 0; i < hd / 2; ++i) {
                const float ang = float(pos[t]) * inv[i], c = std::cos(ang), sn = std::sin(ang);
                const float a = r[qd + h * hd + 2 * i], b = r[qd + h * hd + 2 * i + 1];
                const size_t e = size_t(slot * kvd + h * hd + 2 * i);
                QCOMPARE(int(k8[e]), int(es::float_to_fp8_e4m3((a * c - b * sn) / 0.5f)));
                QCOMPARE(int(k8[e + 1]), int(es::float_to_fp8_e4m3((b * c + a * sn) / 0.5f)));
            }
        for (int64_t j = 0; j < kvd; ++j) {
            const size_t e = size_t(slot * kvd + j);
            QCOMPARE(int(v8[e]), int(es::float_to_fp8_e4m3(r[qd + kvd + j] / 1.5f)));
            // Read back (fp8 · scale) within E4M3's half step of the value (16: 3 mantissa bits).
            const float back = es::bf16_bits_to_float(es::kv_read_fp8(v8[e], 1.5f)), x = r[qd + kvd + j];
            if (x < 448.0f * 1.5f) QVERIFY(std::fabs(back - x) <= std::fabs(x) / 16.0f + 1e-3f);
            nonzero += v8[e] != 0;
        }
    }
    QCOMPARE(nonzero, T * kvd);
    QCOMPARE(int(v8[size_t((int64_t(bt[1]) * bs + 20 % bs) * kvd + 3)]), 0x7e); // saturated to +448
    QCOMPARE(es::bf16_bits_to_float(es::kv_read_fp8(0x7e, 1.5f)), 672.0f);
    // Slots no token wrote stay empty (1 byte per element: no write spilled past its element).
    QCOMPARE(int(k8[size_t(bs * kvd + 10 * kvd)]), 0);
}

// Attention over an FP8 cache equals attention over the BF16 cache holding its dequantized values
// (BF16 of fp8 · scale), bit for bit, and depends on the scales (a wrong one changes the output).
void TestKernelTwins::attentionFp8Kv() {
    const int64_t nh = 6, nkv = 2, hd = 16, kvd = nkv * hd, bs = 4, n_blocks = 8;
    const int64_t pool = n_blocks * bs * kvd;
    auto q = rand_bf16(static_cast<size_t>(3 * nh * hd), -2, 2);
    std::uniform_real_distribution<float> u(-2, 2);
    std::vector<es::fp8_t> k8(static_cast<size_t>(pool)), v8(k8.size());
    const float ks = 0.75f, vs = 1.5f;
    for (auto &c : k8) c = es::kv_store_fp8(u(g_rng), ks);
    for (auto &c : v8) c = es::kv_store_fp8(u(g_rng), vs);
    std::vector<es::bf16_t> k16(k8.size()), v16(v8.size());
    for (size_t i = 0; i < k8.size(); ++i) {
        k16[i] = es::kv_read_fp8(k8[i], ks);
        v16[i] = es::kv_read_fp8(v8[i], vs);
    }
    std::vector<int32_t> pos = {9, 10, 11}, seq = {0, 0, 0}, bt = {5, 2, 7}, tiles = {0, 3};
    std::vector<es::bf16_t> out8(q.size()), out16(q.size()), out_wrong(q.size());
    es::attention_params p;
    p.q = q.data();
    p.pos = pos.data();
    p.seq = seq.data();
    p.block_tables = bt.data();
    p.bt_stride = 3;
    p.tiles = tiles.data();
    p.n_tiles = 1;
    p.n_tokens = 3;
    p.n_head = nh;
    p.n_head_kv = nkv;
    p.head_dim = hd;
    p.block_size = bs;
    p.scale = 0.25f;
    es::attention_params p16 = p;
    p16.k_cache = k16.data();
    p16.v_cache = v16.data();
    p16.out = out16.data();
    es::attention_ref(p16);
    p.k_cache = k8.data();
    p.v_cache = v8.data();
    p.kv = es::kv_format::fp8_e4m3;
    p.k_scale = ks;
    p.v_scale = vs;
    p.out = out8.data();
    es::attention_ref(p);
    QVERIFY(out8 == out16);
    p.out = out_wrong.data();
    p.v_scale = 1.0f;
    es::attention_ref(p);
    QVERIFY(out_wrong != out16);
    p.v_scale = vs;
    p.k_scale = 1.0f;
    es::attention_ref(p);
    QVERIFY(out_wrong != out16);
}

void TestKernelTwins::attentionTiles() {
    // Group 8 → 4 tokens per tile; tiles never cross a sequence.
    const std::vector<int32_t> seq = {0, 0, 0, 0, 0, 0, 1, 2, 2};
    const auto tiles = es::attention_tiles(seq.data(), int64_t(seq.size()), 8);
    QCOMPARE(tiles, (std::vector<int32_t>{0, 4, 4, 2, 6, 1, 7, 2}));
    const auto one = es::attention_tiles(seq.data(), int64_t(seq.size()), 40); // group ≥ 32: one token each
    QCOMPARE(int(one.size()), 2 * 9);
}

void TestKernelTwins::attentionKernelChoice() {
    // The rule launch_attention applies: the tensor-core kernel for prefill-like steps of the
    // shapes it supports, the CUDA-core kernel for decode and everything else; forcing works both ways.
    es::attention_params p; // null pointers count as aligned
    p.n_tokens = 2048;
    p.n_tiles = 2048 / 4; // tiles of 4 tokens (group 8)
    p.n_head = 16;
    p.n_head_kv = 2;
    p.head_dim = 128;
    QVERIFY(es::attention_uses_tensor_cores(p)); // 0.3B prefill
    p.n_tokens = 512 + 64;
    p.n_tiles = 512 / 4 + 64;
    QVERIFY(es::attention_uses_tensor_cores(p)); // a prefill chunk with 64 decode tokens
    p.n_tokens = 64;
    p.n_tiles = 64;
    QVERIFY(!es::attention_uses_tensor_cores(p)); // 64 decode tokens: 8 rows a tile
    p.n_tokens = 2048;
    p.n_tiles = (2048 + 5) / 6;
    p.n_head = 20;
    p.n_head_kv = 4;
    QVERIFY(es::attention_uses_tensor_cores(p)); // 21B-A3B: group 5, tiles of 6 tokens
    p.head_dim = 64;
    QVERIFY(es::attention_uses_tensor_cores(p));
    p.n_tokens = es::attention_tc_min_tokens - 1;
    p.n_tiles = 3;
    QVERIFY(!es::attention_uses_tensor_cores(p)); // decode-sized step
    p.path = es::attention_path::tensor_core;
    QVERIFY(es::attention_uses_tensor_cores(p));
    p.n_tokens = 2048;
    p.n_tiles = (2048 + 5) / 6;
    p.path = es::attention_path::cuda_core;
    QVERIFY(!es::attention_uses_tensor_cores(p));
    p.path = es::attention_path::automatic;
    p.kv_splits = 4;
    QVERIFY(!es::attention_uses_tensor_cores(p)); // split-KV is the CUDA-core kernel's
    p.kv_splits = 1;
    for (int64_t hd : {12, 32, 96, 256}) {
        p.head_dim = hd;
        QVERIFY(!es::attention_tc_supported(p));
    }
    p.head_dim = 128;
    p.n_head = 40;
    p.n_head_kv = 1;
    QVERIFY(!es::attention_tc_supported(p)); // group 40 > 32
    p.n_head = 16;
    p.n_head_kv = 2;
    p.block_size = 7;
    QVERIFY(es::attention_tc_supported(p)); // any block size
    std::vector<es::bf16_t> buf(16);
    p.q = buf.data() + 1; // 2-byte aligned only
    QVERIFY(!es::attention_tc_supported(p));
    p.path = es::attention_path::tensor_core;
    QVERIFY(!es::attention_uses_tensor_cores(p)); // forced on an unsupported shape: the launcher refuses
}

void TestKernelTwins::routerTiesAndBias() {
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

void TestKernelTwins::gemvFp8Scale() {
    const int64_t N = 3, K = 20;
    auto w = rand_bf16(static_cast<size_t>(N * K));
    auto x = rand_bf16(static_cast<size_t>(K));
    std::vector<es::fp8_t> q(w.size());
    std::vector<float> s(N), y(N), yd(N);
    es::fp8_quantize_params qp{w.data(), q.data(), s.data(), N, K};
    es::fp8_quantize_ref(qp);
    es::gemv_params p;
    p.x = x.data();
    p.ldx = K;
    p.w = q.data();
    p.wfmt = es::weight_format::fp8_e4m3;
    p.w_scale = s.data();
    p.y = y.data();
    p.ldy = N;
    p.n_tokens = 1;
    p.n = N;
    p.k = K;
    es::gemv_ref(p);
    for (int64_t n = 0; n < N; ++n) {
        double want = 0.0;
        for (int64_t k = 0; k < K; ++k)
            want += double(es::fp8_e4m3_to_float(q[n * K + k])) * s[n] * es::bf16_bits_to_float(x[k]);
        QVERIFY(std::fabs(y[n] - want) <= 1e-5 * (1.0 + std::fabs(want)));
    }
}

// 128×128 block scales: every block's largest magnitude maps to ±448, each scale is its own
// block's, and the GEMV twin equals the dequantized product (partial blocks in both dimensions).
void TestKernelTwins::fp8BlockScales() {
    const int64_t N = 300, K = 200, nkb = 2;
    auto w = rand_bf16(static_cast<size_t>(N * K));
    w[size_t(130 * K + 150)] = es::float_to_bf16_bits(-40.0f); // an outlier in block (1, 1) only
    auto x = rand_bf16(static_cast<size_t>(K));
    std::vector<es::fp8_t> q(w.size());
    const auto L = es::scale_layout::block128;
    QCOMPARE(es::fp8_scale_count(N, K, L), int64_t(3 * nkb));
    std::vector<float> s(size_t(es::fp8_scale_count(N, K, L))), y(N);
    es::fp8_quantize_params qp{w.data(), q.data(), s.data(), N, K, L};
    es::fp8_quantize_ref(qp);
    QCOMPARE(s[1 * nkb + 1], 40.0f / 448.0f);
    for (int64_t rb = 0; rb < 3; ++rb)
        for (int64_t cb = 0; cb < nkb; ++cb) {
            float amax = 0.0f, qmax = 0.0f;
            for (int64_t r = rb * 128; r < std::min<int64_t>(N, rb * 128 + 128); ++r)
                for (int64_t c = cb * 128; c < std::min<int64_t>(K, cb * 128 + 128); ++c) {
                    amax = std::max(amax, std::fabs(es::bf16_bits_to_float(w[size_t(r * K + c)])));
                    qmax = std::max(qmax, std::fabs(es::fp8_e4m3_to_float(q[size_t(r * K + c)])));
                    QCOMPARE(es::fp8_scale_index(r, c, K, L), rb * nkb + cb);
                }
            QCOMPARE(s[size_t(rb * nkb + cb)], amax / 448.0f);
            QCOMPARE(qmax, 448.0f);
        }
    es::gemv_params p;
    p.x = x.data();
    p.ldx = K;
    p.w = q.data();
    p.wfmt = es::weight_format::fp8_e4m3;
    p.w_scale = s.data();
    p.w_layout = L;
    p.y = y.data();
    p.ldy = N;
    p.n_tokens = 1;
    p.n = N;
    p.k = K;
    es::gemv_ref(p);
    std::vector<es::bf16_t> deq(w.size());
    es::fp8_dequantize_params dp{q.data(), s.data(), deq.data(), N, K, L};
    es::fp8_dequantize_ref(dp);
    for (int64_t n = 0; n < N; ++n) {
        double want = 0.0, dq = 0.0, mag = 0.0;
        for (int64_t k = 0; k < K; ++k) {
            const double wv = double(es::fp8_e4m3_to_float(q[size_t(n * K + k)])) * s[size_t(es::fp8_scale_index(n, k, K, L))];
            want += wv * es::bf16_bits_to_float(x[size_t(k)]);
            mag += std::fabs(wv * es::bf16_bits_to_float(x[size_t(k)]));
            dq += double(es::bf16_bits_to_float(deq[size_t(n * K + k)])) * es::bf16_bits_to_float(x[size_t(k)]);
        }
        QVERIFY(std::fabs(y[size_t(n)] - want) <= 1e-5 * (1.0 + mag));
        QVERIFY(std::fabs(dq - want) <= 1.0 / 256.0 * mag + 1e-9); // the dequantized copy: one BF16 rounding per weight
    }
}

// The MoE twins with 128×128 block scales, each expert its own grid (fp8_stack_scale_index):
// against the dequantized weights computed here independently in double (block magnitudes that
// differ by powers of two, so a scale read from the wrong block or expert is far off), and the
// grouped GEMM's block path exactly equal to its BF16 path on fp8_dequantize's weights.
void TestKernelTwins::moeBlockScales() {
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
void TestKernelTwins::fp8TileMajor() {
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

void TestKernelTwins::moeGroupedFp8Activations_data() {
    QTest::addColumn<bool>("e5m2");
    QTest::newRow("e4m3") << false;
    QTest::newRow("e5m2") << true;
}

// The grouped GEMM's FP8-activation twin (a_q, a_scale) against its BF16 one on activations that
// are FP8 values (exact in BF16) with scale 1: the same products in the same order, so the same
// bits, for the gate/up GLU (token rows) and the down (slot rows).
void TestKernelTwins::moeGroupedFp8Activations() {
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

void TestKernelTwins::moeGroupedEqualsDecodePath_data() {
    QTest::addColumn<bool>("fp8");
    QTest::newRow("bf16") << false;
    QTest::newRow("fp8") << true;
}

// Prefill path (plan → grouped GLU → grouped down → combine) == decode path (gate/up GEMV → down GEMV).
void TestKernelTwins::moeGroupedEqualsDecodePath() {
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

namespace {
std::vector<float> rand_f32(size_t n, float lo, float hi) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v(n);
    for (auto &x : v) x = d(g_rng);
    return v;
}
std::vector<es::bf16_t> rms_rows(std::vector<float> x, const std::vector<es::bf16_t> &w, int64_t T, int64_t H) {
    std::vector<es::bf16_t> out(static_cast<size_t>(T * H));
    es::rms_norm_params p;
    p.x = x.data();
    p.weight = w.data();
    p.out = out.data();
    p.n_rows = T;
    p.n_embd = H;
    es::rms_norm_ref(p);
    return out;
}
} // namespace

// A fused input norm (norm_in) gives what rms_norm then the kernel on its output gives, bit for
// bit, and stores the normalized rows where asked; the fused kernels' shape limits hold.
void TestKernelTwins::fusedNormInputs() {
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

void TestKernelTwins::moeFrontEqualsParts_data() {
    QTest::addColumn<bool>("fp8");
    QTest::addColumn<int>("tokens");
    QTest::newRow("bf16 T=1") << false << 1;
    QTest::newRow("fp8 T=3") << true << 3;
    QTest::newRow("fp8 T=4") << true << 4;
}

// moe_front == rms_norm, then the router, then the shared experts' gate/up GEMV with SiLU·up.
void TestKernelTwins::moeFrontEqualsParts() {
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
void TestKernelTwins::sharedSlotEqualsSharedLinear() {
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

void TestKernelTwins::planEdgeCases() {
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

void TestKernelTwins::argmaxTies() {
    std::vector<float> x = {1, 3, NAN, 3, -1, /* row 2 */ NAN, NAN, NAN, NAN, NAN};
    std::vector<int32_t> out(2);
    es::argmax_ref({x.data(), out.data(), 2, 5});
    QCOMPARE(out[0], 1);
    QCOMPARE(out[1], 0);
}

// gemv's greedy pick (gemv.cuh: gemv_pick): the twin writes y as without it, and the largest
// non-NaN value's id (ties → the lower id), that value and max, sum 0; gemv_pick_ok takes only
// the head's one-token, plain, large case.
void TestKernelTwins::gemvPick() {
    constexpr int64_t N = 6, K = 8;
    std::vector<es::bf16_t> x(K), w(N * K, es::float_to_bf16_bits(0.0f));
    for (int64_t k = 0; k < K; ++k) x[size_t(k)] = es::float_to_bf16_bits(1.0f);
    const float row_val[N] = {0.25f, 0.5f, -1.0f, 0.5f, 0.125f, 0.0f};
    for (int64_t n = 0; n < N; ++n)
        for (int64_t k = 0; k < K; ++k) w[size_t(n * K + k)] = es::float_to_bf16_bits(row_val[n]);
    w[size_t(4 * K + 2)] = es::float_to_bf16_bits(NAN); // row 4: NaN, never picked
    std::vector<float> y(N), y_plain(N);
    int32_t id = -7;
    float val = 0.0f, mx = 0.0f;
    double sum = -1.0;
    es::gemv_params p;
    p.x = x.data();
    p.ldx = K;
    p.w = w.data();
    p.y = y_plain.data();
    p.ldy = N;
    p.n_tokens = 1;
    p.n = N;
    p.k = K;
    es::gemv_ref(p);
    p.y = y.data();
    p.pick = {&id, &val, &mx, &sum, nullptr, 0};
    es::gemv_ref(p);
    QCOMPARE(std::memcmp(y.data(), y_plain.data(), y.size() * 4), 0);
    QCOMPARE(id, 1); // rows 1 and 3 tie at 4.0
    QCOMPARE(val, 4.0f);
    QCOMPARE(mx, 4.0f);
    QCOMPARE(sum, 0.0);
    // Every value NaN: no candidate.
    x[0] = es::float_to_bf16_bits(NAN);
    es::gemv_ref(p);
    QCOMPARE(id, -1);
    QCOMPARE(val, -INFINITY);
    QCOMPARE(mx, -INFINITY);
    // gemv_pick_ok: the head's case only (alignment as cudaMalloc gives it).
    std::vector<uint64_t> big(64);
    std::vector<unsigned long long> scratch(64);
    es::gemv_params h;
    h.x = reinterpret_cast<const es::bf16_t *>(big.data());
    h.ldx = 1024;
    h.w = big.data();
    h.y = reinterpret_cast<float *>(big.data());
    h.ldy = 103424;
    h.n_tokens = 1;
    h.n = 103424;
    h.k = 1024;
    h.pick = {&id, &val, &mx, &sum, scratch.data(), unsigned(scratch.size())};
    const bool aligned = (reinterpret_cast<uintptr_t>(big.data()) & 15u) == 0;
    QCOMPARE(es::gemv_pick_ok(h), aligned);
    es::gemv_params bad = h;
    bad.n_tokens = 2;
    QVERIFY(!es::gemv_pick_ok(bad));
    bad = h;
    bad.accumulate = true;
    QVERIFY(!es::gemv_pick_ok(bad));
    bad = h;
    bad.n = es::gemv_pick_min_rows - 1;
    QVERIFY(!es::gemv_pick_ok(bad));
    bad = h;
    bad.k_splits = 4;
    QVERIFY(!es::gemv_pick_ok(bad));
    bad = h;
    bad.pick.warp_keys = nullptr;
    QVERIFY(!es::gemv_pick_ok(bad));
    bad = h;
    bad.pick.warp_keys_cap = 0;
    QVERIFY(!es::gemv_pick_ok(bad));
}

// topk_logits' twin against a brute force: a stable sort of every non-NaN (value, id) by value
// (ids ascending among ties), and the sum in long double.
void TestKernelTwins::topkLogits_data() {
    QTest::addColumn<int>("rows");
    QTest::addColumn<int>("vocab");
    QTest::addColumn<int>("top");
    QTest::addColumn<QString>("kind");
    QTest::newRow("ties_v37_n8") << 2 << 37 << 8 << "ties";
    QTest::newRow("n_gt_v_v5_n8") << 1 << 5 << 8 << "random";
    QTest::newRow("nan_inf_rows_v300_n64") << 4 << 300 << 64 << "special";
    QTest::newRow("v103424_n1") << 1 << 103424 << 1 << "random";
    QTest::newRow("v103424_n64_ties") << 3 << 103424 << 64 << "ties";
    QTest::newRow("v103424_n256") << 2 << 103424 << 256 << "random";
}

void TestKernelTwins::topkLogits() {
    QFETCH(int, rows);
    QFETCH(int, vocab);
    QFETCH(int, top);
    QFETCH(QString, kind);
    std::mt19937 rng(uint32_t(rows * 7919 + vocab + top));
    std::normal_distribution<float> nd(0.0f, 3.0f);
    std::vector<float> x(static_cast<size_t>(rows) * size_t(vocab)), temps(static_cast<size_t>(rows));
    for (int r = 0; r < rows; ++r) {
        temps[size_t(r)] = r % 2 ? 0.7f : (r == 2 ? 0.0f : 1.3f);
        for (int v = 0; v < vocab; ++v) {
            float &e = x[size_t(r) * vocab + v];
            e = kind == "ties" ? float(int(nd(rng))) : nd(rng); // integers: many ties
            if (kind == "special") {
                if (r == 0 && v % 3 == 0) e = NAN;
                if (r == 1) e = v % 2 ? -INFINITY : NAN; // no finite value
                if (r == 2) e = NAN;                     // all NaN
                if (r == 3 && v % 5 == 0) e = -INFINITY;
                if (r == 3 && v == 7) e = -0.0f;
                if (r == 3 && v == 9) e = 0.0f;
            }
        }
    }
    std::vector<int32_t> ids(size_t(rows * top));
    std::vector<float> vals(static_cast<size_t>(rows * top)), mx(static_cast<size_t>(rows));
    std::vector<double> sums(static_cast<size_t>(rows));
    es::topk_logits_params p;
    p.logits = x.data();
    p.temperatures = temps.data();
    p.ids = ids.data();
    p.values = vals.data();
    p.row_max = mx.data();
    p.row_sum = sums.data();
    p.n_rows = rows;
    p.n_vocab = vocab;
    p.n_top = top;
    es::topk_logits_ref(p);
    for (int r = 0; r < rows; ++r) {
        const float *row = &x[size_t(r) * vocab];
        std::vector<int32_t> all;
        for (int v = 0; v < vocab; ++v)
            if (!std::isnan(row[v])) all.push_back(v);
        std::stable_sort(all.begin(), all.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
        float m = -INFINITY;
        for (int32_t v : all) m = std::max(m, row[v]);
        const QString where = QString("row %1").arg(r);
        QVERIFY2(mx[size_t(r)] == m || (std::isinf(m) && mx[size_t(r)] == m), qPrintable(where + ": max"));
        for (int j = 0; j < top; ++j) {
            const int32_t want = size_t(j) < all.size() ? all[size_t(j)] : -1;
            QVERIFY2(
                ids[size_t(r * top + j)] == want,
                qPrintable(
                    where +
                    QString(" slot %1: id %2, expected %3").arg(j).arg(ids[size_t(r * top + j)]).arg(want)));
            const float wv = want < 0 ? -INFINITY : row[want];
            QVERIFY2(std::memcmp(&vals[size_t(r * top + j)], &wv, 4) == 0, qPrintable(where + " value"));
        }
        long double s = 0;
        if (temps[size_t(r)] > 0 && std::isfinite(m))
            for (int32_t v : all)
                s += std::exp(((long double)row[v] - (long double)m) / (long double)temps[size_t(r)]);
        QVERIFY2(std::abs(double(s) - sums[size_t(r)]) <= 1e-12 * std::max(1.0, double(s)),
                 qPrintable(where + QString(": sum %1, expected %2").arg(sums[size_t(r)]).arg(double(s))));
    }
}

void TestKernelTwins::fillRandom() {
    std::vector<es::bf16_t> a(1000), b(1000);
    es::fill_random_ref({a.data(), 1000, 9, 1.0f, 0.5f});
    es::fill_random_ref({b.data(), 1000, 9, 1.0f, 0.5f});
    QCOMPARE(a, b);
    double mean = 0;
    for (auto h : a) {
        const float v = es::bf16_bits_to_float(h);
        QVERIFY(v >= 0.49f && v <= 1.51f);
        mean += v;
    }
    QVERIFY(std::fabs(mean / 1000 - 1.0) < 0.05);
}

void TestKernelTwins::fp8QuantizeRows() {
    const int64_t K = 8;
    std::vector<es::bf16_t> w(3 * K, 0);
    w[K + 2] = es::float_to_bf16_bits(-3.0f);
    w[K + 3] = es::float_to_bf16_bits(1.5f);
    for (int64_t i = 0; i < K; ++i) w[2 * K + i] = es::float_to_bf16_bits(float(i) - 3.5f);
    std::vector<es::fp8_t> q(w.size());
    std::vector<float> s(3);
    es::fp8_quantize_ref({w.data(), q.data(), s.data(), 3, K});
    QCOMPARE(s[0], 1.0f); // all-zero row
    QCOMPARE(s[1], 3.0f / 448.0f);
    QCOMPARE(int(q[K + 2]), 0xfe); // the row's amax maps to -448
    std::vector<es::bf16_t> back(w.size());
    es::fp8_dequantize_ref({q.data(), s.data(), back.data(), 3, K});
    QCOMPARE(es::bf16_bits_to_float(back[K + 2]), -3.0f);
    for (int64_t i = 0; i < K; ++i)
        QVERIFY(std::fabs(es::bf16_bits_to_float(back[2 * K + i]) - (float(i) - 3.5f)) <= 0.07f * 3.5f);
}

void TestKernelTwins::twinModel_data() {
    QTest::addColumn<QString>("dir");
    QTest::addColumn<bool>("fp8");
    QTest::addColumn<int>("act"); // es::activation_format
    QTest::addColumn<bool>("kv8"); // an FP8 KV cache
    const QDir data(ES_TEST_DATA_DIR);
    for (const QString &name : data.entryList(QDir::Dirs | QDir::NoDotAndDotDot, QDir::Name)) {
        if (!QFile::exists(data.filePath(name + "/ref_logits.npy"))) continue;
        QTest::newRow(qPrintable(name + " bf16"))
            << data.filePath(name) << false << int(es::activation_format::bf16) << false;
        for (auto a : {es::activation_format::bf16, es::activation_format::e4m3, es::activation_format::e5m2})
            QTest::newRow(qPrintable(name + " fp8 " + es::activation_format_name(a) + " act"))
                << data.filePath(name) << true << int(a) << false;
        QTest::newRow(qPrintable(name + " bf16, fp8 KV"))
            << data.filePath(name) << false << int(es::activation_format::bf16) << true;
        QTest::newRow(qPrintable(name + " fp8 e4m3 act, fp8 KV"))
            << data.filePath(name) << true << int(es::activation_format::e4m3) << true;
    }
}

// The CUDA backend's numerics, emulated, stay close to HF float32: BF16 activations cost a little
// (NMSE ≤ 5e-3), FP8 weights more (≤ 0.1, with E4M3 prefill activations too), E5M2 activations
// (two mantissa bits) more again (≤ 0.2: 0.03–0.1 on these models); a wrong layer order or layout
// would cost everything.
void TestKernelTwins::twinModel() {
    QFETCH(QString, dir);
    QFETCH(bool, fp8);
    QFETCH(int, act);
    QFETCH(bool, kv8);
    QFile f(dir + "/reference.json");
    QVERIFY(f.open(QIODevice::ReadOnly));
    std::vector<int32_t> prompt;
    for (const auto v : QJsonDocument::fromJson(f.readAll()).object()["prompt_ids"].toArray()) prompt.push_back(v.toInt());
    auto golden = es::read_npy_f32((dir + "/ref_logits.npy").toStdString());
    QVERIFY(golden.ok());
    auto cfg = es::load_model_config(dir.toStdString());
    QVERIFY(cfg.ok());
    auto store = es::weight_store::open_dir(dir.toStdString());
    QVERIFY(store.ok());
    auto bound = es::bind_model_tensors(*cfg, **store);
    QVERIFY(bound.ok());
    es::twin_options to;
    to.activations = es::activation_format(act);
    to.kv_cache = kv8 ? es::kv_cache_dtype::fp8 : es::kv_cache_dtype::bf16;
    auto logits = es::twin_forward_logits(*cfg, *bound, prompt,
                                          fp8 ? es::weight_precision::fp8 : es::weight_precision::bf16, to);
    QVERIFY2(logits.ok(), logits.ok() ? "" : logits.message().c_str());
    const double e = nmse(*logits, golden->data);
    qInfo("%s %s (%s activations%s): twin model NMSE vs HF %.3e", qPrintable(QDir(dir).dirName()),
          fp8 ? "fp8" : "bf16", es::activation_format_name(to.activations), kv8 ? ", fp8 KV" : "", e);
    const double limit = !fp8                                            ? (kv8 ? 5e-2 : 5e-3)
                         : to.activations == es::activation_format::e5m2 ? 0.2
                                                                         : 0.1;
    QVERIFY2(e <= limit, qPrintable(QString("NMSE %1").arg(e)));
    if (kv8) { // the option reaches the cache: the same run with a BF16 cache differs
        to.kv_cache = es::kv_cache_dtype::bf16;
        auto bf_kv = es::twin_forward_logits(*cfg, *bound, prompt,
                                             fp8 ? es::weight_precision::fp8 : es::weight_precision::bf16, to);
        QVERIFY(bf_kv.ok());
        QVERIFY(*bf_kv != *logits);
    }
}

// The twin changes the numerics only for the tokens of steps above the GEMV threshold (quantized
// activations where cuBLASLt's FP8 GEMM can take the shape, else BF16-dequantized weights): steps
// of ≤ 8 tokens give the same logits whatever the activation format, a prefill-sized step changes
// them (with FP8 activations, and with BF16 ones through the dequantized weights), and bad steps
// are an error.
void TestKernelTwins::twinModelActivationSteps() {
    const QString dir = QString(ES_TEST_DATA_DIR) + "/dense";
    QFile f(dir + "/reference.json");
    QVERIFY(f.open(QIODevice::ReadOnly));
    std::vector<int32_t> prompt;
    for (const auto v : QJsonDocument::fromJson(f.readAll()).object()["prompt_ids"].toArray())
        prompt.push_back(v.toInt());
    QVERIFY(prompt.size() > 2 * es::cuda_gemv_max_tokens);
    auto cfg = es::load_model_config(dir.toStdString());
    auto store = es::weight_store::open_dir(dir.toStdString());
    QVERIFY(cfg.ok() && store.ok());
    auto bound = es::bind_model_tensors(*cfg, **store);
    QVERIFY(bound.ok());
    auto run = [&](es::activation_format a, std::vector<int64_t> steps) {
        es::twin_options o;
        o.activations = a;
        o.steps = std::move(steps);
        return es::twin_forward_logits(*cfg, *bound, prompt, es::weight_precision::fp8, o);
    };
    const int64_t T = int64_t(prompt.size());
    auto bf = run(es::activation_format::bf16, std::vector<int64_t>(size_t(T), 1));
    auto bf_big = run(es::activation_format::bf16, {});
    auto small = run(es::activation_format::e4m3, std::vector<int64_t>(size_t(T), 1));
    auto big = run(es::activation_format::e4m3, {});
    auto mixed = run(es::activation_format::e4m3, {T - 3, 3});
    QVERIFY(bf.ok() && bf_big.ok() && small.ok() && big.ok() && mixed.ok());
    QVERIFY(*small == *bf);
    QVERIFY(*bf_big != *bf);
    QVERIFY(*big != *bf && *big != *bf_big);
    // The first T − 3 tokens' logits as in one big step (causal: later tokens do not matter).
    const size_t V = size_t(cfg->n_vocab), head = size_t(T - 3) * V;
    QVERIFY(std::equal(mixed->begin(), mixed->begin() + long(head), big->begin()));
    QVERIFY(!std::equal(mixed->begin() + long(head), mixed->end(), big->begin() + long(head)));
    QVERIFY(!run(es::activation_format::e4m3, {T - 1}).ok());
    QVERIFY(!run(es::activation_format::e4m3, {T, 0}).ok());
}

// The routed experts' FP8 activations in the twin (twin_options::grouped_fp8): taken in every
// step above the GEMV threshold, so such a step's logits change (and stay near the
// BF16-activation ones), while steps of GEMV size are the same bits as without the option.
void TestKernelTwins::twinModelRoutedFp8() {
    const std::string dir = std::string(ES_TEST_DATA_DIR) + "/moe-shared";
    auto cfg = es::load_model_config(dir);
    auto store = es::weight_store::open_dir(dir);
    QVERIFY(cfg.ok() && store.ok());
    auto bound = es::bind_model_tensors(*cfg, **store);
    QVERIFY(bound.ok());
    std::vector<int32_t> prompt(size_t(4 * es::cuda_gemv_max_tokens));
    std::mt19937 gen(11);
    for (auto &t : prompt) t = int32_t(gen() % uint32_t(cfg->n_vocab));
    auto run = [&](bool routed, std::vector<int64_t> steps) {
        es::twin_options o;
        o.activations = es::activation_format::e4m3;
        o.steps = std::move(steps);
        o.grouped_fp8 = routed;
        auto r = es::twin_forward_logits(*cfg, *bound, prompt, es::weight_precision::fp8, o);
        return r.ok() ? *r : std::vector<float>{};
    };
    const auto plain = run(false, {}), routed = run(true, {});
    QVERIFY(!plain.empty() && !routed.empty());
    QVERIFY(routed != plain);
    QVERIFY(nmse(routed, plain) < 5e-2);
    // Steps of GEMV size (BF16 activations everywhere): the option changes nothing.
    const std::vector<int64_t> small(4, es::cuda_gemv_max_tokens);
    QCOMPARE(run(true, small), run(false, small));
}

// --fp8-scales block128 in the twin: the models whose every k is a multiple of 16 (dense, and
// MoE with each expert its own block grid) run with one scale per 128×128 block, as close to HF
// as per-channel scales (≤ 0.1) yet different from them; prefill-sized steps take BF16
// activations whatever was asked (cuBLASLt's FP8 GEMM takes per-row scales only); shapes the
// kernels cannot take (k % 16) are an error naming the option.
void TestKernelTwins::twinModelBlockScales() {
    struct ref_model {
        std::vector<int32_t> prompt;
        std::vector<float> golden;
        es::model_config cfg;
        std::unique_ptr<es::weight_store> store;
        es::model_tensors t;
    };
    auto open = [](const QString &name, ref_model &m) {
        const QString dir = QString(ES_TEST_DATA_DIR) + "/" + name;
        QFile f(dir + "/reference.json");
        if (!f.open(QIODevice::ReadOnly)) return false;
        for (const auto v : QJsonDocument::fromJson(f.readAll()).object()["prompt_ids"].toArray())
            m.prompt.push_back(v.toInt());
        auto g = es::read_npy_f32((dir + "/ref_logits.npy").toStdString());
        auto cfg = es::load_model_config(dir.toStdString());
        auto store = es::weight_store::open_dir(dir.toStdString());
        if (!g.ok() || !cfg.ok() || !store.ok()) return false;
        m.golden = g->data;
        m.cfg = *cfg;
        m.store = std::move(*store);
        auto bound = es::bind_model_tensors(m.cfg, *m.store);
        if (!bound.ok()) return false;
        m.t = *bound;
        return true;
    };
    auto run = [](const ref_model &m, es::scale_layout l, es::activation_format a, bool head) {
        es::twin_options o;
        o.activations = a;
        o.fp8.scales = l;
        o.fp8.head = head;
        return es::twin_forward_logits(m.cfg, m.t, m.prompt, es::weight_precision::fp8, o);
    };
    for (const char *name : {"dense", "moe-shared", "moe-sharded"}) {
        ref_model m;
        QVERIFY(open(name, m));
        for (const bool head : {false, true}) {
            auto blk = run(m, es::scale_layout::block128, es::activation_format::e4m3, head);
            QVERIFY2(blk.ok(), blk.ok() ? "" : blk.message().c_str());
            auto blk_bf = run(m, es::scale_layout::block128, es::activation_format::bf16, head);
            auto ch = run(m, es::scale_layout::channel, es::activation_format::bf16, head);
            QVERIFY(blk_bf.ok() && ch.ok());
            const double e = nmse(*blk, m.golden), ec = nmse(*ch, m.golden);
            qInfo("%s fp8%s, block128 scales: twin model NMSE vs HF %.3e (per-channel scales %.3e)", name,
                  head ? " (head fp8)" : "", e, ec);
            QVERIFY2(e <= 0.1, qPrintable(QString("%1: NMSE %2").arg(name).arg(e)));
            QVERIFY(*blk == *blk_bf); // BF16 activations whatever was asked
            QVERIFY(*blk != *ch);     // the layout reaches the weights
        }
    }
    for (const char *name : {"dense-untied", "moe-odd"}) {
        ref_model m;
        QVERIFY(open(name, m));
        auto r = run(m, es::scale_layout::block128, es::activation_format::e4m3, false);
        QVERIFY2(!r.ok() && r.message().find("block128") != std::string::npos, name);
    }
}

QTEST_GUILESS_MAIN(TestKernelTwins)
#include "test_kernel_twins.moc"
