// expertscope-cli bench --backend cuda: prefill (ppN) and decode (tgN) at batch 1 on the CUDA
// backend, with random weights of a real shape built on the GPU (or a model folder), reported in
// cli_bench.cpp's table format. MBU = tok/s × weight bytes a decode step reads ÷ this device's
// read bandwidth, measured before the runs (cuda_backend::measure_read_bandwidth). Times are wall-clock around
// forward(), which includes the input upload and the logits download (pp: the full row); decode
// steps ask for what the engine asks for and take each token as it does (row_sampling.h). tg is
// greedy decode as the engine runs it on the GPU (overlapped steps: each submitted before the
// previous one is finished, its token fed from that step's pick on the GPU); "tg serial" the same
// tokens one forward() at a time; "tg sampled" the same overlapped decode with each token drawn on
// the GPU (--temperature, --top-p; engine/core/sampling.h); batched decode one forward() a step,
// pseudo-random tokens. The backend comes from the CUDA module
// (cuda_loader.h); without a usable GPU the command fails with the reason.
#include "cli_commands.h"

#include "app/models/provenance.h"
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

// The MBU denominator when this device's bandwidth cannot be measured (too little free memory):
// an H200's read-only streaming bandwidth, and the summary line says it was not measured.
constexpr double k_fallback_read_bw = 4.55e12; // bytes/s

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
}

// The CUDA backend's parameters from the options every command shares.
cuda_backend_params backend_params(const common_opts &common) {
    cuda_backend_params cp;
    cp.precision = common.precision == "fp8" ? weight_precision::fp8 : weight_precision::bf16;
    cp.activations = to_activation_format(common.activations);
    cp.fp8 = to_fp8_policy(common);
    cp.kv_cache = to_kv_cache_dtype(common.kv_cache);
    return cp;
}

// The backend under test: random weights of --shape built on the GPU, or --model loaded onto the
// CUDA backend (`loaded` or `random_be` owns it). `what` names it in every row; load_s is how long
// building or loading took.
struct bench_target {
    std::unique_ptr<model> loaded;
    std::unique_ptr<backend> random_be;
    backend *be = nullptr;
    cuda_backend *cb = nullptr;
    std::string what;
    double load_s = 0.0;
};

result<bench_target> open_target(const es_cuda_module_v1 &cuda, const bench_opts &o, const common_opts &common,
                                 const cuda_backend_params &cp) {
    bench_target t;
    const auto t_load = std::chrono::steady_clock::now();
    if (!o.shape.empty()) {
        auto c = bench_shape_config(o.shape, o.layers);
        if (!c) return c.err();
        std::fprintf(stderr, "building random %s weights of %s (%lld layers) on the GPU…\n", common.precision.c_str(),
                     o.shape.c_str(), (long long)c->n_layer);
        auto b = cuda.make_backend_random(*c, 42, cp);
        if (!b) return b.err();
        t.random_be = std::move(*b);
        t.be = t.random_be.get();
        t.what = o.shape + (o.layers > 0 ? " (" + std::to_string(o.layers) + " layers)" : "");
    } else {
        model_load_params lp;
        lp.kind = backend_kind::cuda;
        lp.precision = cp.precision;
        lp.activations = cp.activations;
        lp.fp8 = cp.fp8;
        lp.kv_cache = cp.kv_cache;
        lp.need_tokenizer = false;
        auto m = load_model(o.model_dir, lp);
        if (!m) return m.err();
        t.loaded = std::move(*m);
        t.be = t.loaded->be.get();
        t.what = o.model_dir;
    }
    t.load_s = seconds_since(t_load);
    t.cb = cuda.as_cuda_backend(t.be);
    if (!t.cb) return error{"bench --backend cuda: the loaded backend is not the CUDA backend"};
    return t;
}

// The decode rows' samplers, both seeded with 1: greedy, and the sampled row's.
sampling_params greedy_sampling() {
    sampling_params p;
    p.temperature = 0.0f;
    p.seed = 1;
    return p;
}
sampling_params bench_sampling(float temperature, float top_p) {
    sampling_params p;
    p.temperature = temperature;
    p.top_p = top_p;
    p.seed = 1;
    return p;
}

// What the rows share: the backend, the one-sequence batch and its context, the forward output,
// the decode samplers, and the tokens picked over every row. Decode steps ask as the engine does
// (request_sampling) and take the token as it does (token_of_row): greedy (one candidate, picked
// in the head's GEMV), and for the "sampled" row a draw on the GPU.
struct bench_runner {
    bench_runner(backend &backend_, const sampling_params &sampled_)
        : be(backend_), cfg(backend_.config()), sampled_params(sampled_) {
        b.seqs.resize(1);
    }

    status size_context(int64_t positions);
    void fill(int32_t n, int32_t pos0);
    // The sampling of the one-sequence batch's row after `drawn` tokens (the last one fed when
    // `fed`), asked for in b.
    sampled_row ask(sampler &smp, int32_t drawn, bool fed);
    status pick(const sampled_row &row);
    status decode_run(int32_t n, int32_t pos0 = 0) { return decode_run_with(greedy, n, pos0); }
    status decode_run_with(sampler &smp, int32_t n, int32_t pos0);
    status prefill_context(int32_t n, int32_t chunk);
    status decode_serial(int32_t n);
    result<double> batched_step(batch &bb, int32_t n_seqs, int32_t n_per_seq, int32_t pos0);

    backend &be;
    const model_config &cfg;
    batch b;
    int64_t n_ctx = 0;
    forward_output out;
    sampling_params greedy_params = greedy_sampling();
    sampler greedy{greedy_params};
    sampling_params sampled_params;
    sampler sampled{sampled_params};
    std::vector<float> row_scratch;
    std::vector<int32_t> drawn_ids; // stand-ins for the tokens drawn so far (sampler::spec's output)
    int64_t picked = 0;
    // The device's read bandwidth in bytes/s (cuda_backend::measure_read_bandwidth), the MBU and
    // roofline denominator; read_bw_measured false: the fallback figure.
    double read_bw = k_fallback_read_bw;
    bool read_bw_measured = false;
};

// Each test gets a context of its own size, as llama-bench gives each test n_prompt + n_gen
// positions: the pp tests max(pp) + 1, the tg test tg + 1 (one KV cache and block table of that
// length; the workspace keeps its largest size), so that tg128 does not decode with the block
// tables of a 2,049-position context sized for pp2048.
status bench_runner::size_context(int64_t positions) {
    n_ctx = std::min<int64_t>(cfg.n_ctx_train, positions);
    const int32_t n_blocks = int32_t((n_ctx + 15) / 16);
    if (auto s = be.init_kv_cache({16, n_blocks}); !s) return s;
    b.seqs[0].block_table.clear();
    for (int32_t i = 0; i < n_blocks; ++i) b.seqs[0].block_table.push_back(i);
    return ok_status();
}

// n pseudo-random tokens at positions pos0…, logits of the last one only.
void bench_runner::fill(int32_t n, int32_t pos0) {
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
}

sampled_row bench_runner::ask(sampler &smp, int32_t drawn, bool fed) {
    drawn_ids.assign(size_t(drawn), 0);
    if (fed && drawn > 0) drawn_ids.back() = -1;
    sampled_row row{&smp, {}, drawn_ids, 0};
    request_sampling(be, b, std::span<const sampled_row>(&row, 1));
    return row;
}

status bench_runner::pick(const sampled_row &row) {
    auto id = token_of_row(be, out, 0, row, row_scratch);
    if (!id) return id.err();
    ++picked;
    return ok_status();
}

// Decode as the engine runs it where the backend overlaps steps (engine_params::overlap): each
// step submitted before the one before it is finished, its token that step's pick or draw, fed on
// the GPU (backend::submit); the host reads the same token when the step finishes. The first
// step's token is the pseudo-random one; the run's tokens are the same every run (greedy, or
// drawn from the sampler's fixed seed).
status bench_runner::decode_run_with(sampler &smp, int32_t n, int32_t pos0) {
    sampled_row row;
    for (int32_t i = 0; i < n; ++i) {
        fill(1, pos0 + i);
        if (i > 0) b.tokens[0] = -1; // row 0 of the step before
        const sampled_row asked = ask(smp, i, i > 0);
        if (auto s = be.submit(b); !s) return s;
        if (i > 0) {
            if (auto s = be.finish(out); !s) return s;
            if (auto s = pick(row); !s) return s;
        }
        row = asked;
    }
    if (n > 0) {
        if (auto s = be.finish(out); !s) return s;
        if (auto s = pick(row); !s) return s;
    }
    return ok_status();
}

// Positions [0, n) of the sequence written by prefill steps of at most `chunk` tokens, as the
// engine's token budget cuts a long prompt.
status bench_runner::prefill_context(int32_t n, int32_t chunk) {
    for (int32_t p = 0; p < n; p += chunk) {
        fill(std::min(chunk, n - p), p);
        if (auto s = be.forward(b, out); !s) return s;
    }
    return ok_status();
}

// The same greedy decode one step at a time (forward(), the token picked on the host and given
// as the next step's): the host's part of every step on the critical path.
status bench_runner::decode_serial(int32_t n) {
    int32_t token = -1;
    for (int32_t i = 0; i < n; ++i) {
        fill(1, i);
        if (i > 0) b.tokens[0] = token;
        const sampled_row row = ask(greedy, i, false);
        if (auto s = be.forward(b, out); !s) return s;
        auto id = token_of_row(be, out, 0, row, row_scratch);
        if (!id) return id.err();
        token = *id;
        ++picked;
    }
    return ok_status();
}

// One step of n_seqs sequences in bb, n_per_seq pseudo-random tokens each from pos0, a greedy
// pick per sequence; the seconds from forward() to the last pick.
result<double> bench_runner::batched_step(batch &bb, int32_t n_seqs, int32_t n_per_seq, int32_t pos0) {
    bb.tokens.clear();
    bb.pos.clear();
    bb.seq.clear();
    bb.logits_rows.clear();
    std::vector<sampled_row> rows;
    for (int32_t q = 0; q < n_seqs; ++q) {
        for (int32_t i = 0; i < n_per_seq; ++i) {
            bb.tokens.push_back(int32_t((uint32_t(pos0 + i + 7919 * q) * 2654435761u) % uint32_t(cfg.n_vocab)));
            bb.pos.push_back(pos0 + i);
            bb.seq.push_back(q);
        }
        bb.logits_rows.push_back(int32_t(bb.tokens.size()) - 1);
        rows.push_back(sampled_row{&greedy, {}, {}, int32_t(bb.tokens.size()) - 1});
    }
    request_sampling(be, bb, rows);
    const auto t0 = std::chrono::steady_clock::now();
    if (auto s = be.forward(bb, out); !s) return s.err();
    for (int32_t q = 0; q < n_seqs; ++q) {
        auto id = token_of_row(be, out, q, rows[size_t(q)], row_scratch);
        if (!id) return id.err();
        ++picked;
    }
    return seconds_since(t0);
}

// One row per --pp length: a warm-up forward() (workspace, cuBLASLt plans), then the median of
// --reps timed ones.
status run_prefill_rows(bench_runner &r, const bench_opts &o, const std::string &what, nlohmann::json &results) {
    for (int32_t pp : o.pp) {
        if (pp <= 0 || pp > r.n_ctx) return error{"--pp " + std::to_string(pp) + " is outside the context"};
        std::vector<double> times;
        r.fill(pp, 0);
        if (auto s = r.be.forward(r.b, r.out); !s) return s; // warm-up (workspace, cuBLASLt plans)
        for (int rep = 0; rep < o.reps; ++rep) {
            const auto t0 = std::chrono::steady_clock::now();
            if (auto s = r.be.forward(r.b, r.out); !s) return s;
            times.push_back(seconds_since(t0));
        }
        const double t = median(times), tps = pp / t;
        std::printf("| %s | %s | pp%d | %.1f | %.4f | | |\n", what.c_str(), r.be.name().c_str(), pp, tps, 1000.0 * t / pp);
        std::fflush(stdout);
        results.push_back({{"test", "pp" + std::to_string(pp)}, {"tokens_per_s", tps}, {"seconds", t}});
    }
    return ok_status();
}

// The tg row's figures: the weight bytes a decode step reads, the median run, its roofline and
// MBU, the GPU's and the host's shares of its steps, and the last step's graph replayed alone.
struct tg_figures {
    double bytes = 0.0;
    double t = 0.0, tps = 0.0, roof = 0.0, mbu = 0.0;
    double gpu_mean_us = 0.0;
    forward_host_times host{};
    double replay_us = 0.0;
};

// Decode from an empty context, one token per step, as llama-bench's tg (warm-up run first: the
// first steps of a new shape run eagerly, then as a CUDA graph).
result<tg_figures> run_tg_row(bench_runner &r, cuda_backend &cb, const bench_opts &o, const std::string &what) {
    if (o.tg > r.cfg.n_ctx_train) return error{"--tg " + std::to_string(o.tg) + " is outside the context"};
    if (auto s = r.size_context(int64_t(o.tg) + 1); !s) return s.err();
    tg_figures f;
    f.bytes = cb.decode_weight_bytes();
    std::vector<double> runs;
    cb.launched_graphs_replay_us(0); // count the graphs of the timed runs only
    for (int rep = 0; rep < o.reps + 1; ++rep) {
        cb.host_times(true);
        const auto t0 = std::chrono::steady_clock::now();
        if (auto s = r.decode_run(o.tg); !s) return s.err();
        if (rep > 0) runs.push_back(seconds_since(t0));
        if (rep > 0) f.host += cb.host_times(true);
        else cb.launched_graphs_replay_us(0);
    }
    // The GPU's share of those steps: every graph they replayed, timed alone with the inputs it
    // ran with, weighted by its steps (positions 0-31 replay the graph of one KV split, 32-63 of
    // two, …); the rest of a token's wall time is the host's and the transfers'.
    f.gpu_mean_us = cb.launched_graphs_replay_us(50);
    f.t = median(runs);
    f.tps = o.tg / f.t;
    f.roof = r.read_bw / f.bytes;
    f.mbu = f.tps * f.bytes / r.read_bw;
    std::printf("| %s | %s | tg%d | %.1f | %.4f | %.1f | %.1f%% |\n", what.c_str(), r.be.name().c_str(), o.tg, f.tps,
                1000.0 * f.t / o.tg, f.roof, 100.0 * f.mbu);
    // The same step's GPU time alone: the last decode step's graph replayed back to back.
    f.replay_us = cb.graph_replay_us(200);
    return f;
}

// Decode after a context, as llama-bench's -d: for each --depth N, positions [0, N) prefilled
// (chunks of 2,048 tokens), then --tg greedy tokens decoded as the engine runs them (overlapped
// steps), the median of --reps runs over the same positions. A step at position p reads the
// weights and the KV cache of positions [0, p], so the roofline counts the weights and the KV
// bytes of the run's mean position.
status run_depth_rows(bench_runner &r, cuda_backend &cb, const bench_opts &o, const std::string &what,
                      nlohmann::json &results) {
    constexpr int32_t k_chunk = 2048;
    const double kv_per_position = double(r.be.kv_block_bytes()) / 16.0;
    for (const int32_t depth : o.depth) {
        if (depth < 0 || int64_t(depth) + o.tg + 1 > r.cfg.n_ctx_train)
            return error{"--depth " + std::to_string(depth) + " with --tg " + std::to_string(o.tg) +
                         " is outside the model's context of " + std::to_string(r.cfg.n_ctx_train) + " tokens"};
        if (auto s = r.size_context(int64_t(depth) + o.tg + 1); !s) return s;
        if (auto s = r.prefill_context(depth, k_chunk); !s) return s;
        std::vector<double> runs;
        for (int rep = 0; rep < o.reps + 1; ++rep) { // the first run captures the graphs
            const auto t0 = std::chrono::steady_clock::now();
            if (auto s = r.decode_run(o.tg, depth); !s) return s;
            if (rep > 0) runs.push_back(seconds_since(t0));
        }
        const double t = median(runs), tps = o.tg / t;
        const double bytes = cb.decode_weight_bytes() + kv_per_position * (double(depth) + 0.5 * (o.tg + 1));
        const double roof = r.read_bw / bytes, mbu = tps * bytes / r.read_bw;
        const std::string test = "tg" + std::to_string(o.tg) + " @ d" + std::to_string(depth);
        std::printf("| %s | %s | %s | %.1f | %.4f | %.1f | %.1f%% |\n", what.c_str(), r.be.name().c_str(), test.c_str(),
                    tps, 1000.0 * t / o.tg, roof, 100.0 * mbu);
        std::fflush(stdout);
        results.push_back({{"test", test},
                           {"depth", depth},
                           {"tokens_per_s", tps},
                           {"seconds", t},
                           {"bytes_per_token", bytes},
                           {"roofline_tokens_per_s", roof},
                           {"mbu", mbu}});
    }
    return ok_status();
}

// A decode row's median run and its tokens per second.
struct row_timing {
    double t = 0.0, tps = 0.0;
};

// The same decode step by step (the baseline of the overlap, same run).
result<row_timing> run_serial_row(bench_runner &r, const bench_opts &o, const std::string &what,
                                  const tg_figures &tg) {
    std::vector<double> serial_runs;
    for (int rep = 0; rep < o.reps + 1; ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        if (auto s = r.decode_serial(o.tg); !s) return s.err();
        if (rep > 0) serial_runs.push_back(seconds_since(t0));
    }
    row_timing f;
    f.t = median(serial_runs);
    f.tps = o.tg / f.t;
    std::printf("| %s | %s | tg%d serial | %.1f | %.4f | %.1f | %.1f%% |\n", what.c_str(), r.be.name().c_str(), o.tg,
                f.tps, 1000.0 * f.t / o.tg, tg.roof, 100.0 * f.tps * tg.bytes / r.read_bw);
    return f;
}

// The sampled row: its token count and timing.
struct sampled_figures {
    int32_t tokens = 0;
    row_timing timing;
};

// The same overlapped decode with each token drawn on the GPU by the sampled row's sampler
// (--temperature, --top-p), the same number of tokens as tg.
result<sampled_figures> run_sampled_row(bench_runner &r, const bench_opts &o, const std::string &what,
                                        const tg_figures &tg) {
    sampled_figures f;
    f.tokens = o.tg;
    std::vector<double> sampled_runs;
    for (int rep = 0; rep < o.reps + 1; ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        if (auto s = r.decode_run_with(r.sampled, f.tokens, 0); !s) return s.err();
        if (rep > 0) sampled_runs.push_back(seconds_since(t0));
    }
    f.timing.t = median(sampled_runs);
    f.timing.tps = f.tokens / f.timing.t;
    std::printf("| %s | %s | tg%d sampled (T %.2g, top-p %.2g) | %.1f | %.4f | %.1f | %.1f%% |\n", what.c_str(),
                r.be.name().c_str(), f.tokens, double(r.sampled_params.temperature), double(r.sampled_params.top_p),
                f.timing.tps, 1000.0 * f.timing.t / f.tokens, tg.roof, 100.0 * f.timing.tps * tg.bytes / r.read_bw);
    return f;
}

// tg with and without the routing record (0 for both without MoE layers).
struct telemetry_figures {
    double tps_traced = 0.0, tps_untraced = 0.0;
};

// Telemetry's cost: the same decode without the routing record (MoE models), reps interleaved
// with recording ones so drift affects both alike. Recording stays on afterwards.
result<telemetry_figures> measure_telemetry(bench_runner &r, cuda_backend &cb, const bench_opts &o) {
    telemetry_figures f;
    if (r.cfg.n_expert <= 0) return f;
    std::vector<double> on, off;
    for (int rep = 0; rep < o.reps; ++rep)
        for (bool rec : {false, true}) {
            cb.set_record_routing(rec);
            const auto t0 = std::chrono::steady_clock::now();
            if (auto s = r.decode_run(o.tg); !s) return s.err();
            (rec ? on : off).push_back(seconds_since(t0));
        }
    cb.set_record_routing(true);
    f.tps_traced = o.tg / median(on);
    f.tps_untraced = o.tg / median(off);
    return f;
}

// Every figure of the decode rows, for the summary lines and the JSON.
struct decode_figures {
    tg_figures tg;
    row_timing serial;
    sampled_figures sampled;
    telemetry_figures telemetry;
};

// One batch size's figures: TTFT, the inter-token latencies' p50 and p99 and their sum, and the
// decode tokens per second over every sequence.
struct batch_figures {
    double ttft = 0.0, itl_p50 = 0.0, itl_p99 = 0.0, itl_sum = 0.0, tps = 0.0;
};

constexpr int32_t k_batch_prompt = 128; // tokens of each sequence's prompt in the batched rows

// B sequences, each prefilled with a 128-token prompt in one step (that step's time is every
// sequence's TTFT), then decoding together, one token per sequence per step (a step's time is
// each sequence's inter-token latency). Warm-up pass first, then a timed pass over the same
// positions (CUDA graphs are captured for steps of up to 8 tokens).
result<batch_figures> measure_batch(bench_runner &r, const bench_opts &o, int32_t B) {
    const int64_t len = std::min<int64_t>(r.cfg.n_ctx_train, k_batch_prompt + o.tg);
    if (len < k_batch_prompt + o.tg) return error{"--batch: a 128-token prompt plus --tg exceeds the context"};
    const int32_t per_seq = int32_t((len + 15) / 16);
    if (auto s = r.be.init_kv_cache({16, per_seq * B}); !s) return s.err();
    batch bb;
    bb.seqs.resize(size_t(B));
    for (int32_t q = 0; q < B; ++q)
        for (int32_t i = 0; i < per_seq; ++i) bb.seqs[size_t(q)].block_table.push_back(q * per_seq + i);
    std::vector<double> ttft, itl;
    for (int pass = 0; pass < 2; ++pass) {
        auto t = r.batched_step(bb, B, k_batch_prompt, 0);
        if (!t) return t.err();
        if (pass == 1) ttft.push_back(*t);
        for (int32_t i = 0; i < o.tg; ++i) {
            auto d = r.batched_step(bb, B, 1, k_batch_prompt + i);
            if (!d) return d.err();
            if (pass == 1) itl.push_back(*d);
        }
    }
    batch_figures f;
    for (double d : itl) f.itl_sum += d;
    f.ttft = ttft.front();
    f.itl_p50 = percentile(itl, 50);
    f.itl_p99 = percentile(itl, 99);
    f.tps = double(B) * double(itl.size()) / f.itl_sum;
    return f;
}

// The batched decode table, one row per --batch size ("× first": tok/s against the first size's).
status run_batched_rows(bench_runner &r, const bench_opts &o, const std::string &what, nlohmann::json &results) {
    std::printf("\n| model | backend | batch | TTFT ms | ITL p50 ms | ITL p99 ms | decode tok/s | × first |\n"
                "|---|---|---:|---:|---:|---:|---:|---:|\n");
    double tps1 = 0.0;
    for (int32_t B : o.batch) {
        auto f = measure_batch(r, o, B);
        if (!f) return f.err();
        if (tps1 == 0.0) tps1 = f->tps;
        std::printf("| %s | %s | %d | %.2f | %.3f | %.3f | %.1f | %.2f |\n", what.c_str(), r.be.name().c_str(), B,
                    1000.0 * f->ttft, 1000.0 * f->itl_p50, 1000.0 * f->itl_p99, f->tps,
                    tps1 > 0 ? f->tps / tps1 : 0.0);
        std::fflush(stdout);
        results.push_back({{"test", "batch" + std::to_string(B)},
                           {"batch", B},
                           {"prompt_tokens", k_batch_prompt},
                           {"decode_tokens", o.tg},
                           {"ttft_s", f->ttft},
                           {"itl_p50_s", f->itl_p50},
                           {"itl_p99_s", f->itl_p99},
                           {"tokens_per_s", f->tps},
                           {"seconds", f->itl_sum}});
    }
    return ok_status();
}

// What the decode figures include: how each step's token was picked, and the count of tokens
// picked and of full rows fetched over every row.
void print_sampling_note(const bench_runner &r) {
    if (r.be.supports_candidates())
        std::printf("decode figures (tg, telemetry, batched) include sampling: greedy, one logit candidate per row "
                    "from the GPU (a one-row step's picked in the head's GEMV); tg, sampled and telemetry overlap "
                    "steps (each submitted before the one before it finished, its token fed on the GPU), \"serial\" "
                    "and batched do not; \"sampled\": temperature %.2g, top-p %.2g, each token drawn on the GPU "
                    "(sample_rows); %lld tokens picked\n",
                    double(r.sampled_params.temperature), double(r.sampled_params.top_p), (long long)r.picked);
    else
        std::printf("decode figures (tg, telemetry, batched) include sampling: full logits rows; %lld tokens picked\n",
                    (long long)r.picked);
}

// The lines under the tables: weights, memory and graphs, ignored switches, the FP8 policy, what
// the decode figures include, telemetry's cost, and a tg token's GPU and host time.
void print_summary(const bench_runner &r, cuda_backend &cb, const cuda_backend_params &cp, const bench_opts &o,
                   double load_s, const cuda_memory_report &mem, const decode_figures &f) {
    const tg_figures &tg = f.tg;
    std::printf("\ndecode reads %.1f MB of weights per token; MBU against %.2f TB/s%s; weights built in %.1f s\n"
                "GPU memory: %s\nCUDA graphs: %s\n",
                tg.bytes / 1e6, r.read_bw / 1e12,
                r.read_bw_measured ? " (this device's read bandwidth, measured)" : " (not measured: an H200's figure)", load_s, mem.to_string().c_str(), cb.graph_status().c_str());
    for (const std::string &n : ignored_switches())
        std::printf("%s is set but ignored: it changes results, which only developer builds allow\n", n.c_str());
    if (cp.precision == weight_precision::fp8)
        std::printf(
            "FP8 activations of steps above 8 tokens: %s%s%s; head %s, attention output %s; scales per %s\n",
            activation_format_name(cb.activations()), cb.activation_note().empty() ? "" : " — ",
            cb.activation_note().c_str(), cp.fp8.head ? "E4M3" : "BF16", cp.fp8.attn_out ? "E4M3" : "BF16",
            cp.fp8.scales == scale_layout::block128 ? "128x128 block" : "output channel");
    print_sampling_note(r);
    if (f.telemetry.tps_untraced > 0.0)
        std::printf("telemetry (routing record of every MoE layer): tg%d %.1f tok/s with, %.1f without (%+.2f%%)\n", o.tg,
                    f.telemetry.tps_traced, f.telemetry.tps_untraced,
                    100.0 * (f.telemetry.tps_traced / f.telemetry.tps_untraced - 1.0));
    if (tg.replay_us > 0.0)
        std::printf("decode step at position %d: %.1f µs on the GPU (its graph replayed alone, %.0f tok/s, MBU %.1f%%)\n",
                    o.tg - 1, tg.replay_us, 1e6 / tg.replay_us, 100.0 * tg.bytes / (tg.replay_us * 1e-6) / r.read_bw);
    if (tg.gpu_mean_us > 0.0 && tg.host.forwards > 0) {
        // A token of tg: its wall time against the GPU time of the graphs the steps replayed.
        const double wall_us = 1e6 * tg.t / o.tg, n = double(tg.host.forwards);
        std::printf("tg%d a token: %.1f µs wall, %.1f µs on the GPU (the run's graphs replayed alone, weighted by their "
                    "steps: %.0f tok/s), %.1f µs the host's share; in forward(): prep %.2f, upload call %.2f, launch "
                    "call %.2f, download call %.2f, wait %.2f, unpack %.2f µs (%lld graph steps)\n",
                    o.tg, wall_us, tg.gpu_mean_us, 1e6 / tg.gpu_mean_us, wall_us - tg.gpu_mean_us, tg.host.prep_us / n,
                    tg.host.upload_us / n, tg.host.launch_us / n, tg.host.download_us / n, tg.host.wait_us / n,
                    tg.host.unpack_us / n, (long long)tg.host.forwards);
    }
}

// bench --timeline: the last decode graph once more with each kernel's release time recorded; a
// kernel's share of the step is the next release minus its own; "early" is how long before its
// release its pre-wait work (weight prefetch, …) was done.
void print_timeline(cuda_backend &cb, int32_t tg) {
    const auto rows = cb.graph_timeline();
    if (rows.empty()) {
        std::printf("\ntimeline: not recorded (no decode graph, or recording failed)\n");
        return;
    }
    std::printf("\ntimeline of the decode step at position %d (one replay, µs from the first release):\n\n"
                "| # | launch | released | share | early |\n|---:|---|---:|---:|---:|\n",
                tg - 1);
    for (size_t i = 0; i < rows.size(); ++i) {
        const double share = i + 1 < rows.size() ? rows[i + 1].released_us - rows[i].released_us : 0.0;
        std::printf("| %zu | %s | %.2f | %.2f | %.2f |\n", i, rows[i].name.c_str(), rows[i].released_us, share,
                    rows[i].released_us - rows[i].ready_us);
    }
}

// The GPU time per launch name since profiling was turned on, per step of `steps`.
void print_profile(cuda_backend &cb, const char *what, double steps, double wall_s) {
    const auto rows = cb.profile();
    double total = 0.0;
    for (const auto &r : rows) total += r.total_ms;
    std::printf("\nprofile, %s: kernels %.1f µs per step, wall %.1f µs per step (eager launches)\n"
                "| kernel | µs per step | launches per step | share |\n|---|---:|---:|---:|\n",
                what, 1000.0 * total / steps, 1e6 * wall_s / steps);
    for (const auto &r : rows)
        std::printf("| %s | %.1f | %.0f | %.1f%% |\n", r.name.c_str(), 1000.0 * r.total_ms / steps,
                    double(r.calls) / steps, 100.0 * r.total_ms / std::max(total, 1e-9));
}

// bench --profile: GPU time per launch name (events around each launch; graphs off meanwhile)
// for one prefill of the first --pp length and for up to 32 serial decode steps from position 0.
status run_profile(bench_runner &r, cuda_backend &cb, const bench_opts &o, int32_t max_pp) {
    const int32_t pp = o.pp.front();
    if (auto s = r.size_context(int64_t(max_pp) + 1); !s) return s;
    r.fill(pp, 0);
    cb.set_profiling(true);
    auto t0 = std::chrono::steady_clock::now();
    if (auto s = r.be.forward(r.b, r.out); !s) return s;
    print_profile(cb, ("pp" + std::to_string(pp)).c_str(), 1.0, seconds_since(t0));
    const int32_t steps = std::min<int32_t>(32, o.tg);
    cb.set_profiling(true);
    t0 = std::chrono::steady_clock::now();
    if (auto s = r.decode_serial(steps); !s) return s;
    print_profile(cb, ("decode, " + std::to_string(steps) + " steps from position 0").c_str(), double(steps),
                  seconds_since(t0));
    cb.set_profiling(false);
    return ok_status();
}

// The decode rows' results, after the prefill and batched ones: serial, tg, sampled.
void add_decode_results(nlohmann::json &results, const bench_runner &r, const bench_opts &o, const decode_figures &f) {
    const tg_figures &tg = f.tg;
    results.push_back({{"test", "tg" + std::to_string(o.tg) + " serial"}, {"tokens_per_s", f.serial.tps}, {"seconds", f.serial.t}});
    results.push_back({{"test", "tg" + std::to_string(o.tg)},
                       {"tokens_per_s", tg.tps},
                       {"seconds", tg.t},
                       {"roofline_tokens_per_s", tg.roof},
                       {"mbu", tg.mbu},
                       {"graph_replay_us", tg.replay_us},
                       {"gpu_us_per_token", tg.gpu_mean_us},
                       {"tokens_per_s_with_routing_record", f.telemetry.tps_traced},
                       {"tokens_per_s_without_routing_record", f.telemetry.tps_untraced},
                       {"sampling", r.be.supports_candidates() ? "gpu_candidates_greedy" : "full_row_greedy"},
                       {"candidates_per_row", r.be.supports_candidates() ? 1 : 0}});
    results.push_back({{"test", "tg" + std::to_string(f.sampled.tokens) + " sampled"},
                       {"tokens_per_s", f.sampled.timing.tps},
                       {"seconds", f.sampled.timing.t},
                       {"temperature", r.sampled_params.temperature},
                       {"top_p", r.sampled_params.top_p},
                       {"sampling", r.be.supports_sampling() ? "gpu_draw" : "full_row"}});
}

// bench --json: the results with the CUDA backend's own fields (device, driver, the precision in
// effect, bandwidth, bytes per token, memory in use).
int write_cuda_bench_json(const bench_opts &o, const common_opts &common, const cuda_backend_params &cp,
                          const bench_target &t, const nlohmann::json &results, double bytes,
                          const cuda_memory_report &mem, double read_bw, bool read_bw_measured) {
    const weight_precision prec = cp.precision;
    const int driver = cuda_status().driver_version; // CUDA version the driver supports
    return write_bench_json(
        o, t.what, *t.be, results,
        {{"device", t.be->name()},
         {"host_cpu", models::cpu_model_name()},
         {"driver", driver > 0 ? "driver for CUDA " + cuda_version_string(driver) : std::string("unknown")},
         {"precision", common.precision},
         // in effect after the runs (bf16 when cuBLASLt refused the FP8 GEMM)
         {"activations", prec == weight_precision::fp8 ? activation_format_name(t.cb->activations()) : "bf16"},
         {"fp8_head", prec == weight_precision::fp8 && cp.fp8.head},
         {"fp8_attn_out", prec == weight_precision::fp8 && cp.fp8.attn_out},
         {"fp8_scales", prec == weight_precision::fp8 ? scale_layout_name(cp.fp8.scales) : "none"},
         {"kv_cache", kv_cache_dtype_name(cp.kv_cache)},
         {"read_bandwidth_bytes_per_s", read_bw},
         {"read_bandwidth_measured", read_bw_measured},
         {"decode_bytes_per_token", bytes},
         {"vram_used_bytes", mem.device_total_bytes - mem.device_free_bytes}});
}

// The decode rows in order (tg, serial, sampled, telemetry); a failure ends them.
result<decode_figures> run_decode_rows(bench_runner &r, cuda_backend &cb, const bench_opts &o, const std::string &what) {
    decode_figures f;
    auto tg = run_tg_row(r, cb, o, what);
    if (!tg) return tg.err();
    f.tg = *tg;
    auto serial = run_serial_row(r, o, what, f.tg);
    if (!serial) return serial.err();
    f.serial = *serial;
    auto sampled = run_sampled_row(r, o, what, f.tg);
    if (!sampled) return sampled.err();
    f.sampled = *sampled;
    auto telemetry = measure_telemetry(r, cb, o);
    if (!telemetry) return telemetry.err();
    f.telemetry = *telemetry;
    return f;
}

} // namespace

int cmd_bench_cuda(const bench_opts &o, const common_opts &common) {
    const cuda_status_info &st = cuda_status();
    if (!st.available) return fail("bench --backend cuda: the CUDA backend cannot run here: " + st.reason);
    auto mod = cuda_module();
    if (!mod) return fail(mod.message());
    const cuda_backend_params cp = backend_params(common);
    auto opened = open_target(**mod, o, common, cp);
    if (!opened) return fail(opened.message());
    const bench_target target = std::move(*opened);
    cuda_backend &cb = *target.cb;
    bench_runner r(*target.be, bench_sampling(o.temperature, o.top_p));
    if (const double bw = cb.measure_read_bandwidth(); bw > 0.0) {
        r.read_bw = bw;
        r.read_bw_measured = true;
    }

    const int32_t max_pp = *std::max_element(o.pp.begin(), o.pp.end());
    if (auto s = r.size_context(int64_t(max_pp) + 1); !s) return fail(s.message());
    nlohmann::json results = nlohmann::json::array();
    std::printf("\n| model | backend | test | tok/s | ms/token | roofline tok/s | MBU |\n|---|---|---|---:|---:|---:|---:|\n");
    if (auto s = run_prefill_rows(r, o, target.what, results); !s) return fail(s.message());
    auto decode = run_decode_rows(r, cb, o, target.what);
    if (!decode) return fail(decode.message());
    if (!o.depth.empty()) {
        if (auto s = run_depth_rows(r, cb, o, target.what, results); !s) return fail(s.message());
    }
    if (!o.batch.empty()) {
        if (auto s = run_batched_rows(r, o, target.what, results); !s) return fail(s.message());
    }

    const cuda_memory_report mem = cb.memory_report();
    print_summary(r, cb, cp, o, target.load_s, mem, *decode);
    if (o.timeline) print_timeline(cb, o.tg);
    if (o.profile) {
        if (auto s = run_profile(r, cb, o, max_pp); !s) return fail(s.message());
    }
    add_decode_results(results, r, o, *decode);
    if (!o.out_json.empty()) return write_cuda_bench_json(o, common, cp, target, results, decode->tg.bytes, mem, r.read_bw,
                                                           r.read_bw_measured);
    return 0;
}

} // namespace es::cli
