// The CPU GEMM's weight types (engine/cpu/cpu_gemm.h) on every kernel this machine runs:
// BF16 and E4M3 weights give exactly the bits of the fp32 GEMM on the widened matrix (ragged
// sizes, every tile edge and the vector tail), every E4M3 code decodes to the quantizer's own
// value, the result stays batch- and thread-invariant, and weight_matrix encodes as the GPU
// stores weights (BF16 rounding; E4M3 through fp8_quantize's twin).
#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/cpu_gemm.h"
#include "engine/cpu/cpu_weights.h"
#include "kernels/fp8_quantize.cuh"

#include <omp.h>

#include <QtTest>

#include <cmath>
#include <cstring>
#include <random>

using namespace es;
using cpu::weight_type;
using cpu::weights_view;

namespace {

// Random weights of one type, [N, K], and their fp32 widening.
struct typed_weights {
    weight_type type;
    int64_t N = 0, K = 0;
    std::vector<uint8_t> data;
    std::vector<float> scale, wide;
    weights_view view() const { return {type, data.data(), scale.empty() ? nullptr : scale.data()}; }
};

typed_weights random_weights(weight_type t, int64_t N, int64_t K, std::mt19937 &rng) {
    typed_weights w{t, N, K, {}, {}, {}};
    w.data.resize(size_t(N * K) * cpu::weight_type_bytes(t));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int64_t i = 0; i < N * K; ++i) {
        if (t == weight_type::f32) {
            const float v = normal(rng);
            std::memcpy(&w.data[size_t(i) * 4], &v, 4);
        } else if (t == weight_type::bf16) {
            const bf16_t b = float_to_bf16_bits(normal(rng) * 0.05f);
            std::memcpy(&w.data[size_t(i) * 2], &b, 2);
        } else {
            uint8_t c = uint8_t(rng());
            if ((c & 0x7f) == 0x7f) c ^= 1; // no NaN codes here (one NaN poisons a whole dot product)
            w.data[size_t(i)] = c;
        }
    }
    if (t == weight_type::e4m3) {
        w.scale.resize(size_t(N));
        std::uniform_real_distribution<float> u(1e-4f, 2.0f);
        for (float &s : w.scale) s = u(rng);
    }
    w.wide.resize(size_t(N * K));
    for (int64_t r = 0; r < N; ++r) cpu::widen_row(w.view(), K, r, &w.wide[size_t(r * K)]);
    return w;
}

std::vector<float> random_x(int64_t M, int64_t K, std::mt19937 &rng) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(size_t(M * K));
    for (float &v : x) v = normal(rng);
    return x;
}

bool same_bits(const std::vector<float> &a, const std::vector<float> &b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

} // namespace

class TestCpuGemm : public QObject {
    Q_OBJECT
private slots:
    void compactTypesGiveTheFp32Bits_data();
    void compactTypesGiveTheFp32Bits();
    void everyE4m3CodeDecodesAsTheQuantizer_data();
    void everyE4m3CodeDecodesAsTheQuantizer();
    void rowsDoNotDependOnTheBatchOrThreads_data() { compactTypesGiveTheFp32Bits_data(); }
    void rowsDoNotDependOnTheBatchOrThreads();
    void weightMatrixEncodesAsTheGpu();
};

void TestCpuGemm::compactTypesGiveTheFp32Bits_data() {
    QTest::addColumn<QString>("kernel");
    QTest::addColumn<int>("type");
    for (const char *k : cpu::gemm_kernels_here())
        for (weight_type t : {weight_type::bf16, weight_type::e4m3})
            QTest::newRow((std::string(k) + " " + cpu::weight_type_name(t)).c_str()) << QString(k) << int(t);
}

// Ragged M, N, K (tile edges, a K tail below and above one vector, K below the vector width),
// with and without accumulation: the same bits as the f32 GEMM on the widened weights.
void TestCpuGemm::compactTypesGiveTheFp32Bits() {
    QFETCH(QString, kernel);
    QFETCH(int, type);
    const std::string kn = kernel.toStdString();
    std::mt19937 rng(1234);
    int cases = 0;
    for (int64_t M : {1, 2, 3, 5, 17, 67})
        for (int64_t N : {1, 3, 4, 5, 33, 70})
            for (int64_t K : {1, 7, 8, 15, 16, 17, 31, 33, 100, 257}) {
                const typed_weights w = random_weights(weight_type(type), N, K, rng);
                const std::vector<float> x = random_x(M, K, rng);
                for (bool acc : {false, true}) {
                    std::vector<float> y0(size_t(M * N), 0.25f), y1 = y0;
                    cpu::gemm_nt_with(kn.c_str(), x.data(), M,
                                      weights_view{weight_type::f32, w.wide.data(), nullptr}, N, K, y0.data(),
                                      acc);
                    cpu::gemm_nt_with(kn.c_str(), x.data(), M, w.view(), N, K, y1.data(), acc);
                    QVERIFY2(
                        same_bits(y0, y1),
                        qPrintable(QString("M %1 N %2 K %3 accumulate %4").arg(M).arg(N).arg(K).arg(acc)));
                    ++cases;
                }
            }
    QCOMPARE(cases, 6 * 6 * 10 * 2);
}

void TestCpuGemm::everyE4m3CodeDecodesAsTheQuantizer_data() {
    QTest::addColumn<QString>("kernel");
    for (const char *k : cpu::gemm_kernels_here()) QTest::newRow(k) << QString(k);
}

// One row holding every code but the NaNs, read through one-hot rows of x: row i of the result
// is code i's value times the scale, exactly (±0 compare equal: the sum adds +0). A NaN weight's
// row gives NaN, as in fp32, and leaves the other rows alone.
void TestCpuGemm::everyE4m3CodeDecodesAsTheQuantizer() {
    QFETCH(QString, kernel);
    const std::string kn = kernel.toStdString();
    std::vector<uint8_t> codes;
    for (int c = 0; c < 256; ++c)
        if ((c & 0x7f) != 0x7f) codes.push_back(uint8_t(c));
    const int64_t K = int64_t(codes.size());
    for (float scale : {1.0f, 0.0123f, 3.0e-3f / 448.0f}) {
        std::vector<float> x(size_t(K * K), 0.0f);
        for (int64_t i = 0; i < K; ++i) x[size_t(i * K + i)] = 1.0f;
        std::vector<float> y(static_cast<size_t>(K));
        cpu::gemm_nt_with(kn.c_str(), x.data(), K, weights_view{weight_type::e4m3, codes.data(), &scale}, 1,
                          K, y.data(), false);
        for (int64_t i = 0; i < K; ++i)
            QVERIFY2(y[size_t(i)] == fp8_e4m3_to_float(codes[size_t(i)]) * scale,
                     qPrintable(QString("code 0x%1 at scale %2: %3")
                                    .arg(codes[size_t(i)], 2, 16, QChar('0'))
                                    .arg(double(scale))
                                    .arg(double(y[size_t(i)]))));
    }
    for (float nan : {NAN, -NAN}) {
        const int64_t N = 3, cols = 37;
        std::vector<float> w(size_t(N * cols), 0.25f), x(static_cast<size_t>(cols), 1.0f);
        w[size_t(cols + 20)] = nan; // row 1
        cpu::weight_matrix q(weight_type::e4m3, N, cols);
        q.set_rows(0, N, w.data());
        std::vector<float> wide = w, y(static_cast<size_t>(N)), y32(static_cast<size_t>(N));
        round_cpu_weights(wide.data(), N, cols, cpu_weight_rounding::fp8_e4m3);
        cpu::gemm_nt_with(kn.c_str(), x.data(), 1, q.view(), N, cols, y.data(), false);
        cpu::gemm_nt_with(kn.c_str(), x.data(), 1, weights_view{weight_type::f32, wide.data(), nullptr}, N,
                          cols, y32.data(), false);
        QVERIFY(std::isnan(y[1]) && std::isnan(y32[1]));
        QCOMPARE(y[0], y32[0]);
        QCOMPARE(y[2], y32[2]);
    }
}

// A row's result is the same alone, inside a batch at any place, and at any thread count.
void TestCpuGemm::rowsDoNotDependOnTheBatchOrThreads() {
    QFETCH(QString, kernel);
    QFETCH(int, type);
    const std::string kn = kernel.toStdString();
    std::mt19937 rng(99);
    const int64_t M = 70, N = 45, K = 131;
    const typed_weights w = random_weights(weight_type(type), N, K, rng);
    const std::vector<float> x = random_x(M, K, rng);
    const int threads = omp_get_max_threads();
    std::vector<float> batched(size_t(M * N)), alone(static_cast<size_t>(N)), one_thread(size_t(M * N));
    cpu::gemm_nt_with(kn.c_str(), x.data(), M, w.view(), N, K, batched.data(), false);
    omp_set_num_threads(1);
    cpu::gemm_nt_with(kn.c_str(), x.data(), M, w.view(), N, K, one_thread.data(), false);
    omp_set_num_threads(threads);
    QVERIFY(same_bits(batched, one_thread));
    for (int64_t m = 0; m < M; m += 7) {
        cpu::gemm_nt_with(kn.c_str(), &x[size_t(m * K)], 1, w.view(), N, K, alone.data(), false);
        QVERIFY2(std::memcmp(alone.data(), &batched[size_t(m * N)], size_t(N) * sizeof(float)) == 0,
                 qPrintable(QString("row %1").arg(m)));
    }
}

// BF16 storage rounds as round_bf16; E4M3 storage holds fp8_quantize's codes and scales (from
// BF16), so its values are the CPU's fp8 rounding of the weights.
void TestCpuGemm::weightMatrixEncodesAsTheGpu() {
    const int64_t rows = 5, cols = 37;
    std::vector<float> w(size_t(rows * cols));
    for (size_t i = 0; i < w.size(); ++i) w[i] = std::sin(float(i) * 0.7f) * (i % 5 == 0 ? 30.0f : 0.01f);
    std::fill(w.begin() + cols, w.begin() + 2 * cols, 0.0f); // an all-zero row: scale 1

    cpu::weight_matrix b(weight_type::bf16, rows, cols), q(weight_type::e4m3, rows, cols);
    b.set_rows(0, 2, w.data()); // in two calls, as the loader fills fused matrices
    b.set_rows(2, rows - 2, &w[size_t(2 * cols)]);
    q.set_rows(0, rows, w.data());
    QCOMPARE(b.bytes(), size_t(rows * cols * 2));
    QCOMPARE(q.bytes(), size_t(rows * cols + rows * 4));
    QCOMPARE(q.bytes(), cpu::weight_matrix::bytes_for(weight_type::e4m3, rows, cols));

    std::vector<bf16_t> bits(w.size());
    for (size_t i = 0; i < w.size(); ++i) bits[i] = float_to_bf16_bits(w[i]);
    std::vector<fp8_t> codes(w.size());
    std::vector<float> scale(static_cast<size_t>(rows));
    fp8_quantize_ref({bits.data(), codes.data(), scale.data(), rows, cols});
    QCOMPARE(std::memcmp(q.view().data, codes.data(), codes.size()), 0);
    QCOMPARE(std::memcmp(q.view().scale, scale.data(), scale.size() * sizeof(float)), 0);

    std::vector<float> want_bf16 = w, want_fp8 = w, row(static_cast<size_t>(cols));
    round_cpu_weights(want_bf16.data(), rows, cols, cpu_weight_rounding::bf16);
    round_cpu_weights(want_fp8.data(), rows, cols, cpu_weight_rounding::fp8_e4m3);
    for (int64_t r = 0; r < rows; ++r) {
        b.widen_row(r, row.data());
        QCOMPARE(std::memcmp(row.data(), &want_bf16[size_t(r * cols)], size_t(cols) * sizeof(float)), 0);
        q.widen_row(r, row.data());
        QCOMPARE(std::memcmp(row.data(), &want_fp8[size_t(r * cols)], size_t(cols) * sizeof(float)), 0);
    }
}

QTEST_APPLESS_MAIN(TestCpuGemm)
#include "test_cpu_gemm.moc"
