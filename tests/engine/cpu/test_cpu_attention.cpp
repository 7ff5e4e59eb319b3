// The CPU backend's attention kernel (engine/cpu/cpu_attention.h): softmax(scale · q · Kᵀ) · V
// of every head of a GQA group against a double-precision evaluation of the definition, with
// keys and values scattered through row pointers (the paged cache), on head sizes that take the
// tiled path and ones that do not; and each head's output is the same bits whether it is
// computed alone or with its group (no element depends on its tile).
#include "engine/cpu/cpu_attention.h"

#include <QtTest>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

using namespace es;

namespace {

struct problem {
    int64_t G, hd, n;
    std::vector<float> q, pool, scores, out;
    std::vector<const float *> k_rows, v_rows;
};

// Keys and values of n positions in a pool of 2n + 3 rows, in a shuffled order.
problem make_problem(int64_t G, int64_t hd, int64_t n, std::mt19937 &rng) {
    problem p{G, hd, n, {}, {}, {}, {}, {}, {}};
    std::normal_distribution<float> normal(0.0f, 1.0f);
    p.q.resize(size_t(G * hd));
    for (float &v : p.q) v = normal(rng);
    const int64_t rows = 2 * n + 3;
    p.pool.resize(size_t(rows * hd));
    for (float &v : p.pool) v = normal(rng);
    std::vector<int64_t> order(static_cast<size_t>(rows));
    for (int64_t i = 0; i < rows; ++i) order[size_t(i)] = i;
    std::shuffle(order.begin(), order.end(), rng);
    for (int64_t j = 0; j < n; ++j) {
        p.k_rows.push_back(&p.pool[size_t(order[size_t(2 * j)] * hd)]);
        p.v_rows.push_back(&p.pool[size_t(order[size_t(2 * j + 1)] * hd)]);
    }
    p.scores.assign(size_t(G * n), 0.0f);
    p.out.assign(size_t(G * hd), -1.0f);
    return p;
}

void run(problem &p, float scale) {
    cpu::attend_group(p.q.data(), p.G, p.hd, p.k_rows.data(), p.v_rows.data(), p.n, scale, p.scores.data(),
                      p.out.data());
}

} // namespace

class TestCpuAttention : public QObject {
    Q_OBJECT
private slots:
    void matchesTheDefinition();
    void headsDoNotDependOnTheirGroup();
};

void TestCpuAttention::matchesTheDefinition() {
    std::mt19937 rng(7);
    int cases = 0;
    for (int64_t hd : {8, 12, 16, 48, 128, 160})
        for (int64_t G : {1, 3, 8})
            for (int64_t n : {1, 2, 5, 17, 64}) {
                problem p = make_problem(G, hd, n, rng);
                const float scale = 1.0f / std::sqrt(float(hd));
                run(p, scale);
                for (int64_t g = 0; g < G; ++g) {
                    std::vector<double> s(static_cast<size_t>(n));
                    double mx = -1e300, sum = 0.0;
                    for (int64_t j = 0; j < n; ++j) {
                        double d = 0.0;
                        for (int64_t i = 0; i < hd; ++i) d += double(p.q[size_t(g * hd + i)]) * p.k_rows[j][i];
                        s[size_t(j)] = d * scale;
                        mx = std::max(mx, s[size_t(j)]);
                    }
                    for (double &v : s) sum += (v = std::exp(v - mx));
                    for (int64_t i = 0; i < hd; ++i) {
                        double want = 0.0;
                        for (int64_t j = 0; j < n; ++j) want += s[size_t(j)] / sum * p.v_rows[j][i];
                        const double got = p.out[size_t(g * hd + i)];
                        QVERIFY2(std::fabs(got - want) <= 1e-5 * (1.0 + std::fabs(want)),
                                 qPrintable(QString("hd %1 G %2 n %3 head %4 column %5: %6, want %7 (%8 path)")
                                                .arg(hd)
                                                .arg(G)
                                                .arg(n)
                                                .arg(g)
                                                .arg(i)
                                                .arg(got)
                                                .arg(want)
                                                .arg(cpu::attention_kernel_name(hd))));
                    }
                }
                ++cases;
            }
    QCOMPARE(cases, 6 * 3 * 5);
}

void TestCpuAttention::headsDoNotDependOnTheirGroup() {
    std::mt19937 rng(11);
    for (int64_t hd : {16, 128, 160, 12})
        for (int64_t n : {1, 6, 33}) {
            problem group = make_problem(7, hd, n, rng);
            run(group, 0.125f);
            for (int64_t g = 0; g < group.G; ++g) {
                problem alone = group;
                alone.G = 1;
                alone.q.assign(group.q.begin() + g * hd, group.q.begin() + (g + 1) * hd);
                alone.scores.assign(size_t(n), 0.0f);
                alone.out.assign(size_t(hd), -1.0f);
                run(alone, 0.125f);
                QVERIFY2(std::memcmp(alone.out.data(), &group.out[size_t(g * hd)], size_t(hd) * sizeof(float)) == 0,
                         qPrintable(QString("hd %1 n %2 head %3").arg(hd).arg(n).arg(g)));
            }
        }
}

QTEST_APPLESS_MAIN(TestCpuAttention)
#include "test_cpu_attention.moc"
