// The dense kernels' CPU twins (kernels/*.cpp), which the self-test uses as references for the
// GPU: each against an independent computation or an invariant (FP8 codes round-trip, RoPE keeps
// norms, attention over one key returns its value, an FP8 KV cache stores E4M3 of x / scale and
// attention over it equals attention over the dequantized BF16 cache, the attention kernel choice
// follows its rule, block scales dequantize to the GEMV's product, the greedy pick and the top-k
// candidates equal a brute force). Plain C++: runs without a GPU or a CUDA toolkit.
#include "kernel_twin_support.h"

#include "kernels/act_quantize.cuh"
#include "kernels/argmax.cuh"
#include "kernels/attention.cuh"
#include "kernels/fill_random.cuh"
#include "kernels/fp8_dequantize.cuh"
#include "kernels/fp8_quantize.cuh"
#include "kernels/gemm_lt.cuh"
#include "kernels/gemv.cuh"
#include "kernels/rms_norm.cuh"
#include "kernels/rope_kv.cuh"
#include "kernels/topk_logits.cuh"

#include <QtTest>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

using namespace es_test;

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
    void gemvFp8Scale();
    void fp8BlockScales();
    void argmaxTies();
    void gemvPick();
    void topkLogits_data();
    void topkLogits();
    void fillRandom();
    void fp8QuantizeRows();
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

QTEST_GUILESS_MAIN(TestKernelTwins)
#include "test_kernel_twins.moc"
