// Benchmark, not a test (CTest label "bench"): what a draw costs the CPU (sample_rows' twin, which
// the engine runs where the backend returns full rows) on a 103,424-token vocabulary (the ERNIE-4.5
// tokenizer's): temperature 0.8 with top-p off, top-p 0.8 (the chat's sampled default) and top-k
// 50, each against a greedy pick of the same row (the baseline, one pass over it) in the same run,
// alternating, on a flat row (random weights' logits) and a peaked one. ES_BENCH_ROUNDS (default
// 20) sets the draws per condition.
#include "engine/runtime/sampler.h"

#include <QtTest>

#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

class BenchSampler : public QObject {
    Q_OBJECT
private slots:
    void fullRowDraw();
};

void BenchSampler::fullRowDraw() {
    const int V = 103424;
    const int rounds = qEnvironmentVariableIsSet("ES_BENCH_ROUNDS") ? qEnvironmentVariableIntValue("ES_BENCH_ROUNDS") : 20;
    std::mt19937 g(1);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    struct condition {
        const char *name;
        float temperature, top_p;
        int32_t top_k;
    };
    const condition conds[] = {{"greedy", 0.0f, 1.0f, 0},
                               {"T 0.8", 0.8f, 1.0f, 0},
                               {"T 0.8, top-p 0.8", 0.8f, 0.8f, 0},
                               {"T 0.8, top-k 50", 0.8f, 1.0f, 50}};
    constexpr int n_conds = int(sizeof conds / sizeof conds[0]);
    std::printf("| row | sampler | ms a draw | × greedy |\n|---|---|---:|---:|\n");
    for (float spread : {0.3f, 3.0f}) {
        std::vector<float> row(V);
        for (auto &x : row) x = nd(g) * spread;
        double ms[n_conds] = {};
        for (int r = 0; r < rounds; ++r)
            for (int c = 0; c < n_conds; ++c) {
                es::sampling_params sp;
                sp.temperature = conds[c].temperature;
                sp.top_p = conds[c].top_p;
                sp.top_k = conds[c].top_k;
                sp.seed = uint64_t(r + 1);
                es::sampler s(sp);
                std::vector<float> work = row;
                const auto t0 = std::chrono::steady_clock::now();
                const int32_t id = s.sample(work, {}, {});
                ms[c] += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
                QVERIFY(id >= 0 && id < V);
            }
        for (int c = 0; c < n_conds; ++c)
            std::printf("| %s | %s | %.2f | %.1f |\n", spread < 1.0f ? "flat (N(0, 0.3))" : "peaked (N(0, 3))",
                        conds[c].name, ms[c] / rounds, ms[c] / ms[0]);
    }
}

QTEST_GUILESS_MAIN(BenchSampler)
#include "bench_sampler.moc"
