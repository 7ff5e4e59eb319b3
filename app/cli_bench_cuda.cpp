// expertscope-cli bench --backend cuda: prefill (ppN) and decode (tgN) at batch 1 on the CUDA
// backend, with random weights of a real shape built on the GPU (or a model folder), reported in
// cli_bench.cpp's table format. MBU = tok/s × weight bytes a decode step reads ÷ 4.55 TB/s (the
// H200's read-only streaming bandwidth, measured; docs/benchmarks.md). Times are wall-clock around
// forward(), which includes the input upload and the logits download (pp: the full row); decode
// steps ask for the engine's logit candidates and pick each token from them with a greedy
// sampler, as a user's decode step does. tg is greedy decode as the engine runs it on the GPU
// (overlapped steps: each submitted before the previous one is finished, its token fed from that
// step's pick on the GPU); "tg serial" the same tokens one forward() at a time; "tg sampled" one
// forward() at a time with the chat's default sampler (temperature 0.8: no overlap); batched
// decode one forward() a step, pseudo-random tokens. The backend comes from the CUDA module
// (cuda_loader.h); without a usable GPU the command fails with the reason.
#include "cli_commands.h"

#include "engine/core/switches.h"
#include "engine/cuda/cuda_loader.h"
#include "engine/cuda/cuda_module_abi.h"
#include "engine/runtime/row_sampling.h"
#include "engine/runtime/model.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

namespace es::cli {

namespace {

constexpr double k_h200_read_bw = 4.55e12; // bytes/s

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
}

} // namespace

int cmd_bench_cuda(const bench_opts &o, const common_opts &common) {
    const cuda_status_info &st = cuda_status();
    if (!st.available) return fail("bench --backend cuda: the CUDA backend cannot run here: " + st.reason);
    auto mod = cuda_module();
    if (!mod) return fail(mod.message());
    const es_cuda_module_v1 &cuda = **mod;
    const weight_precision prec = common.precision == "fp8" ? weight_precision::fp8 : weight_precision::bf16;
    cuda_backend_params cp;
    cp.precision = prec;
    cp.activations = to_activation_format(common.activations);
    cp.fp8 = to_fp8_policy(common);
    cp.kv_cache = to_kv_cache_dtype(common.kv_cache);
    std::unique_ptr<model> loaded;
    std::unique_ptr<backend> random_be;
    backend *be = nullptr;
    std::string what;
    const auto t_load = std::chrono::steady_clock::now();
    if (!o.shape.empty()) {
        auto c = bench_shape_config(o.shape, o.layers);
        if (!c) return fail(c.message());
        std::fprintf(stderr, "building random %s weights of %s (%lld layers) on the GPU…\n", common.precision.c_str(),
                     o.shape.c_str(), (long long)c->n_layer);
        auto b = cuda.make_backend_random(*c, 42, cp);
        if (!b) return fail(b.message());
        random_be = std::move(*b);
        be = random_be.get();
        what = o.shape + (o.layers > 0 ? " (" + std::to_string(o.layers) + " layers)" : "");
    } else {
        model_load_params lp;
        lp.kind = backend_kind::cuda;
        lp.precision = prec;
        lp.activations = cp.activations;
        lp.fp8 = cp.fp8;
        lp.kv_cache = cp.kv_cache;
        lp.need_tokenizer = false;
        auto m = load_model(o.model_dir, lp);
        if (!m) return fail(m.message());
        loaded = std::move(*m);
        be = loaded->be.get();
        what = o.model_dir;
    }
    const double load_s = seconds_since(t_load);
    cuda_backend *cb = cuda.as_cuda_backend(be);
    if (!cb) return fail("bench --backend cuda: the loaded backend is not the CUDA backend");
    const model_config &cfg = be->config();

    // Each test gets a context of its own size, as llama-bench gives each test n_prompt + n_gen
    // positions: the pp tests max(pp) + 1, the tg test tg + 1 (one KV cache and block table of
    // that length; the workspace keeps its largest size), so that tg128 does not decode with the
    // block tables of a 2,049-position context sized for pp2048.
    const int32_t max_pp = *std::max_element(o.pp.begin(), o.pp.end());
    batch b;
    b.seqs.resize(1);
    int64_t n_ctx = 0;
    auto size_context = [&](int64_t positions) -> status {
        n_ctx = std::min<int64_t>(cfg.n_ctx_train, positions);
        const int32_t n_blocks = int32_t((n_ctx + 15) / 16);
        if (auto s = be->init_kv_cache({16, n_blocks}); !s) return s;
        b.seqs[0].block_table.clear();
        for (int32_t i = 0; i < n_blocks; ++i) b.seqs[0].block_table.push_back(i);
        return ok_status();
    };
    if (auto s = size_context(int64_t(max_pp) + 1); !s) return fail(s.message());
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
        b.top_n = 0;
        b.temperatures.clear();
    };
    // Decode steps: candidates requested as the engine does, the token picked from them: greedy
    // (one candidate, picked in the head's GEMV), and for the "sampled" row a chat's default
    // sampler (temperature 0.8 over the top-64 candidates and the row sum).
    sampling_params greedy_params;
    greedy_params.temperature = 0.0f;
    greedy_params.seed = 1;
    sampler greedy(greedy_params);
    sampling_params sampled_params;
    sampled_params.seed = 1;
    sampler sampled(sampled_params);
    std::vector<float> row_scratch;
    int64_t picked = 0, fetched_rows = 0; // tokens picked; of them, full rows fetched
    auto decode_with = [&](int32_t pos, sampler &smp) -> status {
        fill(1, pos);
        sampler *const smp_ptr = &smp;
        request_candidates(*be, b, std::span<sampler *const>(&smp_ptr, 1));
        if (auto s = be->forward(b, out); !s) return s;
        bool fetched = false;
        auto id = sample_output_row(*be, out, 0, smp, {}, {}, row_scratch, &fetched);
        if (!id) return id.err();
        ++picked;
        fetched_rows += fetched;
        return ok_status();
    };
    // Greedy decode as the engine runs it where the backend overlaps steps (engine_params::overlap):
    // each step submitted before the one before it is finished, its token that step's pick, fed
    // on the GPU (backend::submit); the host picks the same token from the step's candidate when it
    // finishes. The first step's token is the pseudo-random one; the run's tokens are the greedy
    // continuation, the same every run.
    auto decode_run = [&](int32_t n) -> status {
        sampler *const smp_ptr = &greedy;
        auto pick = [&]() -> status {
            auto id = sample_output_row(*be, out, 0, greedy, {}, {}, row_scratch);
            if (!id) return id.err();
            ++picked;
            return ok_status();
        };
        for (int32_t i = 0; i < n; ++i) {
            fill(1, i);
            if (i > 0) b.tokens[0] = -1; // row 0 of the step before
            request_candidates(*be, b, std::span<sampler *const>(&smp_ptr, 1));
            if (auto s = be->submit(b); !s) return s;
            if (i == 0) continue;
            if (auto s = be->finish(out); !s) return s;
            if (auto s = pick(); !s) return s;
        }
        if (n > 0) {
            if (auto s = be->finish(out); !s) return s;
            if (auto s = pick(); !s) return s;
        }
        return ok_status();
    };
    // The same greedy decode one step at a time (forward(), the token picked on the host and
    // given as the next step's): the host's part of every step on the critical path.
    auto decode_serial = [&](int32_t n) -> status {
        sampler *const smp_ptr = &greedy;
        int32_t token = -1;
        for (int32_t i = 0; i < n; ++i) {
            fill(1, i);
            if (i > 0) b.tokens[0] = token;
            request_candidates(*be, b, std::span<sampler *const>(&smp_ptr, 1));
            if (auto s = be->forward(b, out); !s) return s;
            auto id = sample_output_row(*be, out, 0, greedy, {}, {}, row_scratch);
            if (!id) return id.err();
            token = *id;
            ++picked;
        }
        return ok_status();
    };

    nlohmann::json results = nlohmann::json::array();
    std::printf("\n| model | backend | test | tok/s | ms/token | roofline tok/s | MBU |\n|---|---|---|---:|---:|---:|---:|\n");
    for (int32_t pp : o.pp) {
        if (pp <= 0 || pp > n_ctx) return fail("--pp " + std::to_string(pp) + " is outside the context");
        std::vector<double> times;
        fill(pp, 0);
        if (auto s = be->forward(b, out); !s) return fail(s.message()); // warm-up (workspace, cuBLASLt plans)
        for (int r = 0; r < o.reps; ++r) {
            const auto t0 = std::chrono::steady_clock::now();
            if (auto s = be->forward(b, out); !s) return fail(s.message());
            times.push_back(seconds_since(t0));
        }
        const double t = median(times), tps = pp / t;
        std::printf("| %s | %s | pp%d | %.1f | %.4f | | |\n", what.c_str(), be->name().c_str(), pp, tps, 1000.0 * t / pp);
        std::fflush(stdout);
        results.push_back({{"test", "pp" + std::to_string(pp)}, {"tokens_per_s", tps}, {"seconds", t}});
    }

    // Decode from an empty context, one token per step, as llama-bench's tg (warm-up run first:
    // the first steps of a new shape run eagerly, then as a CUDA graph).
    if (o.tg > cfg.n_ctx_train) return fail("--tg " + std::to_string(o.tg) + " is outside the context");
    if (auto s = size_context(int64_t(o.tg) + 1); !s) return fail(s.message());
    const double bytes = cb->decode_weight_bytes();
    std::vector<double> runs;
    cb->launched_graphs_replay_us(0); // count the graphs of the timed runs only
    forward_host_times host{};
    for (int r = 0; r < o.reps + 1; ++r) {
        cb->host_times(true);
        const auto t0 = std::chrono::steady_clock::now();
        if (auto s = decode_run(o.tg); !s) return fail(s.message());
        if (r > 0) runs.push_back(seconds_since(t0));
        if (r > 0) host += cb->host_times(true);
        else cb->launched_graphs_replay_us(0);
    }
    // The GPU's share of those steps: every graph they replayed, timed alone with the inputs it
    // ran with, weighted by its steps (positions 0-31 replay the graph of one KV split, 32-63 of
    // two, …); the rest of a token's wall time is the host's and the transfers'.
    const double gpu_mean_us = cb->launched_graphs_replay_us(50);
    const double t = median(runs), tps = o.tg / t, roof = k_h200_read_bw / bytes, mbu = tps * bytes / k_h200_read_bw;
    std::printf("| %s | %s | tg%d | %.1f | %.4f | %.1f | %.1f%% |\n", what.c_str(), be->name().c_str(), o.tg, tps,
                1000.0 * t / o.tg, roof, 100.0 * mbu);
    // The same step's GPU time alone: the last decode step's graph replayed back to back.
    const double replay_us = cb->graph_replay_us(200);
    // The same decode step by step (the baseline of the overlap, same run).
    std::vector<double> serial_runs;
    for (int r = 0; r < o.reps + 1; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        if (auto s = decode_serial(o.tg); !s) return fail(s.message());
        if (r > 0) serial_runs.push_back(seconds_since(t0));
    }
    const double t_serial = median(serial_runs), tps_serial = o.tg / t_serial;
    std::printf("| %s | %s | tg%d serial | %.1f | %.4f | %.1f | %.1f%% |\n", what.c_str(), be->name().c_str(), o.tg,
                tps_serial, 1000.0 * t_serial / o.tg, roof, 100.0 * tps_serial * bytes / k_h200_read_bw);
    // The same decode with the chat's default sampler (candidates and the row sum from the GPU),
    // over at most 32 tokens: on random weights' flat rows the 64 candidates hold too little of
    // the mass, so nearly every step fetches its full row and samples it on the host (about 1 ms
    // a draw on the 103,424-token vocabulary, the walk going by id past its sorted prefix:
    // tests/bench_sampler.cpp).
    const int32_t tg_sampled = std::min<int32_t>(o.tg, 32);
    const int64_t fetched_before = fetched_rows, picked_before = picked;
    std::vector<double> sampled_runs;
    for (int r = 0; r < o.reps + 1; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int32_t i = 0; i < tg_sampled; ++i)
            if (auto s = decode_with(i, sampled); !s) return fail(s.message());
        if (r > 0) sampled_runs.push_back(seconds_since(t0));
    }
    const double t_sampled = median(sampled_runs), tps_sampled = tg_sampled / t_sampled;
    std::printf("| %s | %s | tg%d sampled (%lld of %lld steps fetched the full row) | %.1f | %.4f | %.1f | %.1f%% |\n",
                what.c_str(), be->name().c_str(), tg_sampled, (long long)(fetched_rows - fetched_before),
                (long long)(picked - picked_before), tps_sampled, 1000.0 * t_sampled / tg_sampled, roof,
                100.0 * tps_sampled * bytes / k_h200_read_bw);
    // Telemetry's cost: the same decode without the routing record (MoE models), reps
    // interleaved with recording ones so drift affects both alike.
    double tps_untraced = 0.0, tps_traced = 0.0;
    if (cfg.n_expert > 0) {
        std::vector<double> on, off;
        for (int r = 0; r < o.reps; ++r)
            for (bool rec : {false, true}) {
                cb->set_record_routing(rec);
                const auto t0 = std::chrono::steady_clock::now();
                if (auto s = decode_run(o.tg); !s) return fail(s.message());
                (rec ? on : off).push_back(seconds_since(t0));
            }
        cb->set_record_routing(true);
        tps_traced = o.tg / median(on);
        tps_untraced = o.tg / median(off);
    }
    // Batched decode: B sequences, each prefilled with a 128-token prompt in one step (that step's
    // time is every sequence's TTFT), then decoding together, one token per sequence per step (a
    // step's time is each sequence's inter-token latency). Warm-up pass first, then a timed pass
    // over the same positions (CUDA graphs are captured for steps of up to 8 tokens).
    if (!o.batch.empty()) {
        constexpr int32_t prompt = 128;
        std::printf("\n| model | backend | batch | TTFT ms | ITL p50 ms | ITL p99 ms | decode tok/s | × first |\n"
                    "|---|---|---:|---:|---:|---:|---:|---:|\n");
        double tps1 = 0.0;
        for (int32_t B : o.batch) {
            const int64_t len = std::min<int64_t>(cfg.n_ctx_train, prompt + o.tg);
            if (len < prompt + o.tg) return fail("--batch: a 128-token prompt plus --tg exceeds the context");
            const int32_t per_seq = int32_t((len + 15) / 16);
            if (auto s = be->init_kv_cache({16, per_seq * B}); !s) return fail(s.message());
            batch bb;
            bb.seqs.resize(size_t(B));
            for (int32_t q = 0; q < B; ++q)
                for (int32_t i = 0; i < per_seq; ++i) bb.seqs[size_t(q)].block_table.push_back(q * per_seq + i);
            auto step = [&](int32_t n_per_seq, int32_t pos0) -> result<double> {
                bb.tokens.clear();
                bb.pos.clear();
                bb.seq.clear();
                bb.logits_rows.clear();
                std::vector<sampler *> row_samplers;
                for (int32_t q = 0; q < B; ++q) {
                    for (int32_t i = 0; i < n_per_seq; ++i) {
                        bb.tokens.push_back(int32_t((uint32_t(pos0 + i + 7919 * q) * 2654435761u) % uint32_t(cfg.n_vocab)));
                        bb.pos.push_back(pos0 + i);
                        bb.seq.push_back(q);
                    }
                    bb.logits_rows.push_back(int32_t(bb.tokens.size()) - 1);
                    row_samplers.push_back(&greedy);
                }
                request_candidates(*be, bb, row_samplers);
                const auto t0 = std::chrono::steady_clock::now();
                if (auto s = be->forward(bb, out); !s) return s.err();
                for (int32_t q = 0; q < B; ++q) {
                    bool fetched = false;
                    auto id = sample_output_row(*be, out, q, greedy, {}, {}, row_scratch, &fetched);
                    if (!id) return id.err();
                    ++picked;
                    fetched_rows += fetched;
                }
                return seconds_since(t0);
            };
            std::vector<double> ttft, itl;
            for (int pass = 0; pass < 2; ++pass) {
                auto t = step(prompt, 0);
                if (!t) return fail(t.message());
                if (pass == 1) ttft.push_back(*t);
                for (int32_t i = 0; i < o.tg; ++i) {
                    auto d = step(1, prompt + i);
                    if (!d) return fail(d.message());
                    if (pass == 1) itl.push_back(*d);
                }
            }
            double sum = 0.0;
            for (double d : itl) sum += d;
            const double p50 = percentile(itl, 50), p99 = percentile(itl, 99);
            const double tps_b = double(B) * double(itl.size()) / sum;
            if (tps1 == 0.0) tps1 = tps_b;
            std::printf("| %s | %s | %d | %.2f | %.3f | %.3f | %.1f | %.2f |\n", what.c_str(), be->name().c_str(), B,
                        1000.0 * ttft.front(), 1000.0 * p50, 1000.0 * p99, tps_b,
                        tps1 > 0 ? tps_b / tps1 : 0.0);
            std::fflush(stdout);
            results.push_back({{"test", "batch" + std::to_string(B)},
                               {"batch", B},
                               {"prompt_tokens", prompt},
                               {"decode_tokens", o.tg},
                               {"ttft_s", ttft.front()},
                               {"itl_p50_s", p50},
                               {"itl_p99_s", p99},
                               {"tokens_per_s", tps_b},
                               {"seconds", sum}});
        }
    }
    const cuda_memory_report mem = cb->memory_report();
    std::printf("\ndecode reads %.1f MB of weights per token; MBU against %.2f TB/s; weights built in %.1f s\n"
                "GPU memory: %s\nCUDA graphs: %s\n",
                bytes / 1e6, k_h200_read_bw / 1e12, load_s, mem.to_string().c_str(), cb->graph_status().c_str());
    for (const std::string &n : ignored_switches())
        std::printf("%s is set but ignored: it changes results, which only developer builds allow\n", n.c_str());
    if (prec == weight_precision::fp8)
        std::printf(
            "FP8 activations of steps above 8 tokens: %s%s%s; head %s, attention output %s; scales per %s\n",
            activation_format_name(cb->activations()), cb->activation_note().empty() ? "" : " — ",
            cb->activation_note().c_str(), cp.fp8.head ? "E4M3" : "BF16", cp.fp8.attn_out ? "E4M3" : "BF16",
            cp.fp8.scales == scale_layout::block128 ? "128x128 block" : "output channel");
    if (be->supports_candidates())
        std::printf("decode figures (tg, telemetry, batched) include sampling: greedy, one logit candidate per row "
                    "from the GPU (a one-row step's picked in the head's GEMV); tg and telemetry overlap steps "
                    "(each submitted before the one before it finished, its token fed on the GPU), \"serial\" and "
                    "batched do not; \"sampled\": temperature %.1f, top-%d candidates and the row sum from the GPU, "
                    "the full row fetched when they cannot decide (random weights' flat rows: nearly always); %lld "
                    "tokens picked, %lld full rows fetched\n",
                    double(sampled_params.temperature), int(k_sample_top_n), (long long)picked,
                    (long long)fetched_rows);
    else
        std::printf("decode figures (tg, telemetry, batched) include sampling: full logits rows; %lld tokens picked\n",
                    (long long)picked);
    if (tps_untraced > 0.0)
        std::printf("telemetry (routing record of every MoE layer): tg%d %.1f tok/s with, %.1f without (%+.2f%%)\n", o.tg,
                    tps_traced, tps_untraced, 100.0 * (tps_traced / tps_untraced - 1.0));
    if (replay_us > 0.0)
        std::printf("decode step at position %d: %.1f µs on the GPU (its graph replayed alone, %.0f tok/s, MBU %.1f%%)\n",
                    o.tg - 1, replay_us, 1e6 / replay_us, 100.0 * bytes / (replay_us * 1e-6) / k_h200_read_bw);
    if (gpu_mean_us > 0.0 && host.forwards > 0) {
        // A token of tg: its wall time against the GPU time of the graphs the steps replayed.
        const double wall_us = 1e6 * t / o.tg, n = double(host.forwards);
        std::printf("tg%d a token: %.1f µs wall, %.1f µs on the GPU (the run's graphs replayed alone, weighted by their "
                    "steps: %.0f tok/s), %.1f µs the host's share; in forward(): prep %.2f, upload call %.2f, launch "
                    "call %.2f, download call %.2f, wait %.2f, unpack %.2f µs (%lld graph steps)\n",
                    o.tg, wall_us, gpu_mean_us, 1e6 / gpu_mean_us, wall_us - gpu_mean_us, host.prep_us / n,
                    host.upload_us / n, host.launch_us / n, host.download_us / n, host.wait_us / n,
                    host.unpack_us / n, (long long)host.forwards);
    }
    if (o.timeline) {
        // The same graph once more with each kernel's release time recorded (bench --timeline):
        // a kernel's share of the step is the next release minus its own; "early" is how long
        // before its release its pre-wait work (weight prefetch, …) was done.
        const auto rows = cb->graph_timeline();
        if (rows.empty()) {
            std::printf("\ntimeline: not recorded (no decode graph, or recording failed)\n");
        } else {
            std::printf("\ntimeline of the decode step at position %d (one replay, µs from the first release):\n\n"
                        "| # | launch | released | share | early |\n|---:|---|---:|---:|---:|\n",
                        o.tg - 1);
            for (size_t i = 0; i < rows.size(); ++i) {
                const double share = i + 1 < rows.size() ? rows[i + 1].released_us - rows[i].released_us : 0.0;
                std::printf("| %zu | %s | %.2f | %.2f | %.2f |\n", i, rows[i].name.c_str(), rows[i].released_us,
                            share, rows[i].released_us - rows[i].ready_us);
            }
        }
    }
    if (o.profile) {
        // GPU time per launch name (events around each launch; graphs off meanwhile).
        auto print_profile = [&](const char *what, double steps, double wall_s) {
            const auto rows = cb->profile();
            double total = 0.0;
            for (const auto &r : rows) total += r.total_ms;
            std::printf("\nprofile, %s: kernels %.1f µs per step, wall %.1f µs per step (eager launches)\n"
                        "| kernel | µs per step | launches per step | share |\n|---|---:|---:|---:|\n",
                        what, 1000.0 * total / steps, 1e6 * wall_s / steps);
            for (const auto &r : rows)
                std::printf("| %s | %.1f | %.0f | %.1f%% |\n", r.name.c_str(), 1000.0 * r.total_ms / steps,
                            double(r.calls) / steps, 100.0 * r.total_ms / std::max(total, 1e-9));
        };
        const int32_t pp = o.pp.front();
        if (auto s = size_context(int64_t(max_pp) + 1); !s) return fail(s.message());
        fill(pp, 0);
        cb->set_profiling(true);
        auto t0 = std::chrono::steady_clock::now();
        if (auto s = be->forward(b, out); !s) return fail(s.message());
        print_profile(("pp" + std::to_string(pp)).c_str(), 1.0, seconds_since(t0));
        const int32_t steps = std::min<int32_t>(32, o.tg);
        cb->set_profiling(true);
        t0 = std::chrono::steady_clock::now();
        if (auto s = decode_serial(steps); !s) return fail(s.message());
        print_profile(("decode, " + std::to_string(steps) + " steps from position 0").c_str(), double(steps),
                      seconds_since(t0));
        cb->set_profiling(false);
    }
    results.push_back({{"test", "tg" + std::to_string(o.tg) + " serial"}, {"tokens_per_s", tps_serial}, {"seconds", t_serial}});
    results.push_back({{"test", "tg" + std::to_string(o.tg)},
                       {"tokens_per_s", tps},
                       {"seconds", t},
                       {"roofline_tokens_per_s", roof},
                       {"mbu", mbu},
                       {"graph_replay_us", replay_us},
                       {"gpu_us_per_token", gpu_mean_us},
                       {"tokens_per_s_with_routing_record", tps_traced},
                       {"tokens_per_s_without_routing_record", tps_untraced},
                       {"sampling", be->supports_candidates() ? "gpu_candidates_greedy" : "full_row_greedy"},
                       {"candidates_per_row", be->supports_candidates() ? 1 : 0},
                       {"full_rows_fetched", fetched_rows}});
    results.push_back({{"test", "tg" + std::to_string(tg_sampled) + " sampled"},
                       {"tokens_per_s", tps_sampled},
                       {"seconds", t_sampled},
                       {"temperature", sampled_params.temperature},
                       {"candidates_per_row", be->supports_candidates() ? k_sample_top_n : 0}});

    if (!o.out_json.empty()) {
        const int driver = cuda_status().driver_version; // CUDA version the driver supports
        return write_bench_json(
            o, what, *be, results,
            {{"device", be->name()},
             {"host_cpu", bench_device_name()},
             {"driver",
              driver > 0 ? "driver for CUDA " + cuda_version_string(driver) : std::string("unknown")},
             {"precision", common.precision},
             // in effect after the runs (bf16 when cuBLASLt refused the FP8 GEMM)
             {"activations",
              prec == weight_precision::fp8 ? activation_format_name(cb->activations()) : "bf16"},
             {"fp8_head", prec == weight_precision::fp8 && cp.fp8.head},
             {"fp8_attn_out", prec == weight_precision::fp8 && cp.fp8.attn_out},
             {"fp8_scales", prec == weight_precision::fp8 ? scale_layout_name(cp.fp8.scales) : "none"},
             {"kv_cache", kv_cache_dtype_name(cp.kv_cache)},
             {"read_bandwidth_bytes_per_s", k_h200_read_bw},
             {"decode_bytes_per_token", bytes},
             {"vram_used_bytes", mem.device_total_bytes - mem.device_free_bytes}});
    }
    return 0;
}

} // namespace es::cli
