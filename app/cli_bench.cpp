// expertscope-cli bench: prefill (ppN) and decode (tgN) speed at batch 1 on random weights of a
// real shape (or a model folder), with this machine's memory bandwidth measured in the same run
// so decode speed is reported against its roofline (MBU). On the CPU, --precision says how the
// weights are held: bf16 (random weights as a BF16 checkpoint's), fp8 (the linears as E4M3 codes
// with per-channel scales, as the GPU holds them) or fp32 (the baseline). Output: a Markdown
// table, optional JSON.
#include "cli_commands.h"

#include "app/models/provenance.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/model/model_config.h"
#include "engine/runtime/model.h"

#include <nlohmann/json.hpp>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>

namespace es::cli {
namespace {

using clock_t_ = std::chrono::steady_clock;

double seconds_since(clock_t_::time_point t0) {
    return std::chrono::duration<double>(clock_t_::now() - t0).count();
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
}

// Read bandwidth of a 1 GiB buffer with all threads, best of 5 (bytes/s).
double measure_read_bandwidth(int threads) {
    const size_t n = (size_t(1) << 30) / sizeof(float);
    std::vector<float> buf(n, 1.0f);
    double best = 0.0;
    for (int rep = 0; rep < 5; ++rep) {
        const auto t0 = clock_t_::now();
        // Blocks of 1024 floats summed with a SIMD reduction (independent lanes), so the loop is
        // bound by memory, not by the latency of one chain of additions.
        float total = 0.0f;
        const size_t n_blocks = n / 1024;
#pragma omp parallel for reduction(+ : total) num_threads(threads) schedule(static)
        for (size_t blk = 0; blk < n_blocks; ++blk) {
            const float *p = buf.data() + blk * 1024;
            float s = 0.0f;
#pragma omp simd reduction(+ : s)
            for (size_t i = 0; i < 1024; ++i) s += p[i];
            total += s;
        }
        const double s = seconds_since(t0);
        if (total != float(n) && total < 0) std::printf("%f", total); // keep the loop
        best = std::max(best, double(n * sizeof(float)) / s);
    }
    return best;
}

} // namespace

result<model_config> bench_shape_config(const std::string &shape, int32_t layers) {
    auto c = model_config_for_shape(shape);
    if (!c) return c.err();
    model_config cfg = *c;
    if (layers > 0) {
        cfg.n_layer = layers;
        cfg.moe_layer_end = std::min(cfg.moe_layer_end, cfg.n_layer - 1);
        if (cfg.moe_layer_start > cfg.moe_layer_end) cfg.moe_layer_start = cfg.moe_layer_end;
    }
    if (auto s = validate_model_config(cfg); !s) return s.err();
    return cfg;
}

int cmd_bench(const bench_opts &o, const common_opts &common) {
    if (common.backend == "cuda" && common.precision == "fp32")
        return fail(
            "bench: --precision fp32 is the CPU backend's (the CUDA backend holds bf16 or fp8 weights)");
    if (common.backend == "cuda") return cmd_bench_cuda(o, common);
    if (!o.batch.empty() || !o.depth.empty() || o.profile || o.timeline)
        return fail("bench: --batch, --depth, --profile and --timeline are measured on the CUDA backend; use "
                    "--backend cuda");
    if (common.kv_cache == "fp8")
        return fail("bench: --kv-cache fp8 is a CUDA backend option (the CPU backend keeps fp32 KV); use "
                    "--backend cuda");
    model_config cfg;
    std::unique_ptr<model> loaded;
    std::unique_ptr<backend> random_be;
    backend *be = nullptr;
    std::string what;
    cpu_backend_params cp;
    cp.n_threads = common.threads;
    cp.widen_to_fp32 = common.precision == "fp32";
    if (common.precision == "fp8") cp.rounding = cpu_weight_rounding::fp8_e4m3;
    if (!o.shape.empty()) {
        auto c = bench_shape_config(o.shape, o.layers);
        if (!c) return fail(c.message());
        cfg = *c;
        std::fprintf(stderr, "building random %s weights of %s (%lld layers)…\n", common.precision.c_str(),
                     o.shape.c_str(), (long long)cfg.n_layer);
        auto b = make_cpu_backend_random(cfg, 42, cp);
        if (!b) return fail(b.message());
        random_be = std::move(*b);
        be = random_be.get();
        what = o.shape + (o.layers > 0 ? " (" + std::to_string(o.layers) + " layers)" : "");
    } else {
        if (common.precision == "fp32")
            return fail("bench --model: the checkpoint's weights are held as they come (BF16 stays BF16); "
                        "--precision fp32 is for --shape");
        model_load_params lp;
        lp.n_threads = common.threads;
        lp.need_tokenizer = false;
        lp.emulate_precision_on_cpu = common.precision == "fp8";
        lp.precision = common.precision == "fp8" ? weight_precision::fp8 : weight_precision::bf16;
        auto m = load_model(o.model_dir, lp);
        if (!m) return fail(m.message());
        loaded = std::move(*m);
        be = loaded->be.get();
        cfg = be->config();
        what = o.model_dir;
    }
    const int threads = common.threads > 0 ? common.threads : omp_get_max_threads();

    const int32_t max_pp = *std::max_element(o.pp.begin(), o.pp.end());
    const int64_t n_ctx = std::min<int64_t>(cfg.n_ctx_train, std::max<int64_t>(max_pp, o.tg) + 1);
    if (auto s = be->init_kv_cache({16, int32_t((n_ctx + 15) / 16)}); !s) return fail(s.message());
    batch b;
    b.seqs.resize(1);
    for (int32_t i = 0; i < int32_t((n_ctx + 15) / 16); ++i) b.seqs[0].block_table.push_back(i);
    forward_output out;
    auto fill = [&](int32_t n, int32_t pos0) {
        b.tokens.resize(size_t(n));
        b.pos.resize(size_t(n));
        b.seq.assign(size_t(n), 0);
        for (int32_t i = 0; i < n; ++i) {
            b.tokens[i] = int32_t((uint32_t(i + pos0) * 2654435761u) % uint32_t(cfg.n_vocab));
            b.pos[i] = pos0 + i;
        }
        b.logits_rows = {n - 1};
    };

    nlohmann::json results = nlohmann::json::array();
    std::printf("\n| model | backend | test | tok/s | ms/token | roofline tok/s | MBU |\n|---|---|---|---:|---:|---:|---:|\n");
    for (int32_t pp : o.pp) {
        if (pp <= 0 || pp > n_ctx) return fail("--pp " + std::to_string(pp) + " is outside the context");
        std::vector<double> times;
        fill(pp, 0);
        if (auto s = be->forward(b, out); !s) return fail(s.message()); // warm-up
        for (int r = 0; r < o.reps; ++r) {
            const auto t0 = clock_t_::now();
            if (auto s = be->forward(b, out); !s) return fail(s.message());
            times.push_back(seconds_since(t0));
        }
        const double t = median(times), tps = pp / t;
        std::printf("| %s | %s | pp%d | %.1f | %.3f | | |\n", what.c_str(), be->name().c_str(), pp, tps, 1000.0 * t / pp);
        results.push_back({{"test", "pp" + std::to_string(pp)}, {"tokens_per_s", tps}, {"seconds", t}});
    }

    // Decode from an empty context, one token per step, as llama-bench's tg.
    const double bw = measure_read_bandwidth(threads);
    const double bytes = cpu_decode_weight_bytes(*be);
    std::vector<double> runs;
    for (int r = 0; r < o.reps; ++r) {
        const auto t0 = clock_t_::now();
        for (int32_t i = 0; i < o.tg; ++i) {
            fill(1, i);
            if (auto s = be->forward(b, out); !s) return fail(s.message());
        }
        runs.push_back(seconds_since(t0));
    }
    const double t = median(runs), tps = o.tg / t, roof = bw / bytes, mbu = tps * bytes / bw;
    std::printf("| %s | %s | tg%d | %.1f | %.3f | %.1f | %.0f%% |\n", what.c_str(), be->name().c_str(), o.tg, tps,
                1000.0 * t / o.tg, roof, 100.0 * mbu);
    std::printf(
        "\nmemory read bandwidth (measured, %d threads): %.1f GB/s; decode reads %.1f MB/token (the weights "
        "a token touches, as held)\n",
        threads, bw / 1e9, bytes / 1e6);
    results.push_back({{"test", "tg" + std::to_string(o.tg)}, {"tokens_per_s", tps}, {"seconds", t},
                       {"roofline_tokens_per_s", roof}, {"mbu", mbu}});

    if (!o.out_json.empty())
        return write_bench_json(o, what, *be, results,
                                {{"precision", common.precision},
                                 {"device", models::cpu_model_name()},
                                 {"driver", ""},
                                 {"threads", threads},
                                 {"read_bandwidth_bytes_per_s", bw},
                                 {"decode_bytes_per_token", bytes}});
    return 0;
}

} // namespace es::cli
