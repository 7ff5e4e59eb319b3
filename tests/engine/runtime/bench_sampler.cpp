// Benchmark, not a test (CTest label "bench"): what a full-row draw costs the host sampler on a
// 103,424-token vocabulary (the ERNIE-4.5 tokenizer's), the fallback sample_output_row takes when
// a backend's 64 candidates cannot decide. The chat's default sampler (temperature 0.8, top-p
// off: the draw walks its first k_sorted_walk sorted, then by id) against top-p 0.9999 (a walk
// sorted all the way: the baseline, a draw that sorts the vocabulary) in the same run,
// alternating, on a flat row (random weights' logits: the draw lands deep in the vocabulary) and a
// peaked one. ES_BENCH_ROUNDS (default 20) sets the draws per condition.
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
    std::printf("| row | top-p | ms a draw | × sorted walk |\n|---|---:|---:|---:|\n");
    for (float spread : {0.3f, 3.0f}) {
        std::vector<float> row(V);
        for (auto &x : row) x = nd(g) * spread;
        double ms[2] = {0.0, 0.0};
        for (int r = 0; r < rounds; ++r)
            for (int c = 0; c < 2; ++c) {
                es::sampling_params sp;
                sp.temperature = 0.8f;
                sp.top_p = c == 0 ? 1.0f : 0.9999f;
                sp.seed = uint64_t(r + 1);
                es::sampler s(sp);
                std::vector<float> work = row;
                const auto t0 = std::chrono::steady_clock::now();
                const int32_t id = s.sample(work, {}, {});
                ms[c] += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
                QVERIFY(id >= 0 && id < V);
            }
        for (int c = 0; c < 2; ++c)
            std::printf("| %s | %s | %.2f | %.2f |\n", spread < 1.0f ? "flat (N(0, 0.3))" : "peaked (N(0, 3))",
                        c == 0 ? "1 (off)" : "0.9999", ms[c] / rounds, ms[c] / ms[1]);
    }
}

QTEST_GUILESS_MAIN(BenchSampler)
#include "bench_sampler.moc"
