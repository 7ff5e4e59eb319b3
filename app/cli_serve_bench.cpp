// expertscope-cli serve-bench: synthetic load through the real engine (thread, scheduler,
// prefix cache), at several concurrency levels in one run, so throughput is reported against the
// single-request baseline measured the same way. Output follows `vllm bench serve`.
#include "cli_commands.h"
#include "es_build_info.h"

#include "engine/runtime/engine.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>

namespace es::cli {
namespace {

struct level_result {
    int32_t concurrency = 0, n_ok = 0;
    double duration_s = 0.0, output_tps = 0.0, total_tps = 0.0, req_per_s = 0.0, hit_rate = 0.0;
    int64_t in_tokens = 0, out_tokens = 0;
    std::vector<double> ttft_ms, itl_ms, e2e_ms;
    // The level's decode steps (no prompt tokens): those timed per phase and the others.
    int64_t n_decode = 0, n_timed = 0;
    double untimed_ms = 0.0, timed_wall_ms = 0.0; // their mean wall time
    phase_times timed;                            // the timed ones' mean phases (total_ms: the GPU's time for the step)
    nlohmann::json timeline;                      // the latest step timed on the device, its launches
};

// The decode steps of a level from the telemetry ring (steps after `from`): what the timed ones'
// phases measured on the device add up to, against the untimed steps' wall time (what a decode
// step costs when nothing is measured).
void phase_figures(level_result &lr, const telemetry_snapshot &t, uint64_t from) {
    double untimed = 0.0, wall = 0.0;
    int64_t n_untimed = 0;
    for (const step_record &r : t.recent_steps) {
        if (r.step < from || r.n_prefill_tokens > 0 || r.n_decode_tokens == 0) continue;
        ++lr.n_decode;
        if (!r.phases_timed) {
            untimed += r.duration_ms;
            ++n_untimed;
            continue;
        }
        ++lr.n_timed;
        wall += r.duration_ms;
        phase_times &p = lr.timed;
        p.attention_ms += r.attention_ms, p.moe_ms += r.moe_ms, p.moe_shared_ms += r.moe_shared_ms;
        p.dense_ms += r.dense_ms, p.head_ms += r.head_ms, p.other_ms += r.other_ms;
        p.total_ms += r.phases_on_device ? r.device_ms : r.duration_ms;
        p.on_device = p.on_device || r.phases_on_device;
    }
    if (n_untimed) lr.untimed_ms = untimed / double(n_untimed);
    if (lr.n_timed) {
        const double n = double(lr.n_timed);
        phase_times &p = lr.timed;
        for (double *v : {&p.attention_ms, &p.moe_ms, &p.moe_shared_ms, &p.dense_ms, &p.head_ms, &p.other_ms, &p.total_ms})
            *v /= n;
        lr.timed_wall_ms = wall / n;
    }
}

} // namespace

int cmd_serve_bench(const serve_bench_opts &o, const common_opts &common) {
    engine_params ep;
    ep.load.kind = common.backend == "cuda" ? backend_kind::cuda
                   : common.backend == "auto" ? backend_kind::automatic
                                              : backend_kind::cpu;
    ep.load.precision = common.precision == "fp8" ? weight_precision::fp8 : weight_precision::bf16;
    ep.load.kv_cache = to_kv_cache_dtype(common.kv_cache);
    ep.load.fp8 = to_fp8_policy(common);
    ep.load.n_threads = common.threads;
    ep.load.need_tokenizer = false;
    ep.max_num_seqs = *std::max_element(o.concurrency.begin(), o.concurrency.end());
    ep.max_batched_tokens = o.max_batched_tokens;
    ep.gpu_memory_utilization = common.gpu_memory_utilization;
    if (o.phase_timing >= 0) ep.phase_timing_every = o.phase_timing;
    // Every step of a level stays in the ring for phase_figures (a level of --requests ×
    // --output-len decode steps at concurrency 1).
    ep.telemetry_ring = int32_t(std::clamp<int64_t>(int64_t(o.requests) * (o.output_len + 2) + 64, 512, 1 << 20));
    engine eng(ep);
    std::string what;
    status st = ok_status();
    if (!o.shape.empty()) {
        auto cfg = bench_shape_config(o.shape, o.layers);
        if (!cfg) return fail(cfg.message());
        std::fprintf(stderr, "building random weights of %s…\n", o.shape.c_str());
        st = eng.load_random_model(*cfg, 42).get();
        what = o.shape + (o.layers > 0 ? " (" + std::to_string(o.layers) + " layers)" : "");
    } else {
        st = eng.load_model(o.model_dir).get();
        what = o.model_dir;
    }
    if (!st) return fail(st.message());
    const auto info = *eng.info();
    const int64_t V = info.config.n_vocab;
    if (int64_t(o.prompt_len) + o.output_len >= info.config.n_ctx_train)
        return fail("--prompt-len + --output-len exceed the model's context of " + std::to_string(info.config.n_ctx_train));
    // An expert intervention for every request (the expert lab's path through the engine).
    auto iv = to_routing_intervention(common);
    if (!iv) return fail(iv.message());
    if (!iv->empty()) {
        if (auto s = check_routing_intervention(*iv, info.config); !s) return fail(s.message());
        std::fprintf(stderr, "every request under the expert intervention: %s\n",
                     describe_routing_intervention(*iv).c_str());
    }
    const auto routing = iv->empty() ? nullptr : std::make_shared<const routing_intervention>(*iv);

    std::mt19937_64 rng(o.seed);
    std::uniform_int_distribution<int32_t> tok(3, int32_t(V - 1));
    std::vector<level_result> results;
    for (int32_t conc : o.concurrency) {
        // Fresh prompts per level (same shared prefix), so levels do not warm each other's cache
        // beyond the shared prefix itself.
        std::vector<int32_t> prefix(size_t(o.shared_prefix));
        for (auto &t : prefix) t = tok(rng);
        std::vector<request_params> reqs(size_t(o.requests));
        for (auto &r : reqs) {
            r.prompt_ids = prefix;
            while (int32_t(r.prompt_ids.size()) < o.prompt_len) r.prompt_ids.push_back(tok(rng));
            r.sampling.temperature = o.temperature;
            r.sampling.top_p = o.top_p;
            r.sampling.seed = o.seed + uint64_t(&r - reqs.data()); // reproducible, a stream per request
            r.sampling.max_tokens = o.output_len;
            r.sampling.stop_ids.clear(); // ignore eos: every request generates output_len tokens
            r.routing = routing;
        }
        const auto t_before = eng.telemetry();
        const uint64_t first_step = t_before ? t_before->n_steps : 0;
        level_result lr;
        lr.concurrency = conc;
        const auto t0 = std::chrono::steady_clock::now();
        std::vector<std::shared_ptr<request_stream>> in_flight;
        size_t next = 0;
        auto top_up = [&] {
            while (int32_t(in_flight.size()) < conc && next < reqs.size()) in_flight.push_back(eng.submit(reqs[next++]));
        };
        top_up();
        while (!in_flight.empty()) {
            for (size_t i = 0; i < in_flight.size();) {
                request_event ev;
                bool finished = false;
                while (in_flight[i]->try_pop(ev))
                    if (ev.kind != event_kind::token) {
                        finished = true;
                        if (ev.kind == event_kind::failed) return fail("request failed: " + ev.error);
                    }
                if (!finished) {
                    ++i;
                    continue;
                }
                const request_metrics m = in_flight[i]->metrics();
                ++lr.n_ok;
                lr.in_tokens += m.n_prompt_tokens;
                lr.out_tokens += int64_t(m.token_times_us.size());
                lr.ttft_ms.push_back(m.ttft_ms());
                for (size_t k = 1; k < m.token_times_us.size(); ++k)
                    lr.itl_ms.push_back((m.token_times_us[k] - m.token_times_us[k - 1]) / 1000.0);
                lr.e2e_ms.push_back((m.t_finish_us - m.t_submit_us) / 1000.0);
                in_flight.erase(in_flight.begin() + long(i));
                top_up();
            }
            std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
        lr.duration_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const auto t_after = eng.telemetry();
        const uint64_t q = t_after->prefix_queries - t_before->prefix_queries, h = t_after->prefix_hits - t_before->prefix_hits;
        phase_figures(lr, *t_after, first_step);
        if (!t_after->timeline.empty() && t_after->timeline_step >= first_step) {
            lr.timeline = {{"step", t_after->timeline_step}, {"read_bw", t_after->device_read_bandwidth}};
            for (const op_time &op : t_after->timeline)
                lr.timeline["ops"].push_back({op.name, int(op.phase), op.layer, op.start_us, op.dur_us, op.bytes, op.shared});
        }
        lr.hit_rate = q ? double(h) / double(q) : 0.0;
        lr.output_tps = double(lr.out_tokens) / lr.duration_s;
        lr.total_tps = double(lr.in_tokens + lr.out_tokens) / lr.duration_s;
        lr.req_per_s = double(lr.n_ok) / lr.duration_s;
        results.push_back(lr);

        std::printf("============ Serving Benchmark Result ============\n");
        std::printf("%-40s %s\n", "Model:", what.c_str());
        std::printf("%-40s %s\n", "Backend:", info.backend_name.c_str());
        std::printf("%-40s %d\n", "Successful requests:", lr.n_ok);
        std::printf("%-40s %d\n", "Maximum request concurrency:", conc);
        std::printf("%-40s %.2f\n", "Benchmark duration (s):", lr.duration_s);
        std::printf("%-40s %lld\n", "Total input tokens:", (long long)lr.in_tokens);
        std::printf("%-40s %lld\n", "Total generated tokens:", (long long)lr.out_tokens);
        std::printf("%-40s %.2f\n", "Request throughput (req/s):", lr.req_per_s);
        std::printf("%-40s %.2f\n", "Output token throughput (tok/s):", lr.output_tps);
        std::printf("%-40s %.2f\n", "Total Token throughput (tok/s):", lr.total_tps);
        std::printf("%-40s %.1f%%\n", "Prefix cache hit rate (blocks):", 100.0 * lr.hit_rate);
        std::printf("---------------Time to First Token----------------\n");
        std::printf("%-40s %.2f\n%-40s %.2f\n%-40s %.2f\n", "Mean TTFT (ms):", mean(lr.ttft_ms), "Median TTFT (ms):",
                    percentile(lr.ttft_ms, 50), "P99 TTFT (ms):", percentile(lr.ttft_ms, 99));
        std::printf("---------------Inter-token Latency----------------\n");
        std::printf("%-40s %.2f\n%-40s %.2f\n%-40s %.2f\n", "Mean ITL (ms):", mean(lr.itl_ms), "Median ITL (ms):",
                    percentile(lr.itl_ms, 50), "P99 ITL (ms):", percentile(lr.itl_ms, 99));
        if (lr.n_timed > 0) {
            const phase_times &p = lr.timed;
            std::printf("---------------Phases of the timed decode steps----\n");
            std::printf("%-40s %lld of %lld\n", "Decode steps timed per phase:", (long long)lr.n_timed,
                        (long long)lr.n_decode);
            std::printf("%-40s %.3f / %.3f / %.3f / %.3f / %.3f / %.3f\n",
                        "attn / MoE / shared / dense / head / other:", p.attention_ms, p.moe_ms, p.moe_shared_ms,
                        p.dense_ms, p.head_ms, p.other_ms);
            std::printf("%-40s %.3f (%s)\n", "Phase sum (ms):", p.sum_ms(),
                        p.on_device ? "on the device" : "on the host");
            if (lr.untimed_ms > 0)
                std::printf("%-40s %.3f; phase sum / that = %.3f; timed step's wall / that = %.3f\n",
                            "Untimed decode step, mean wall (ms):", lr.untimed_ms, p.sum_ms() / lr.untimed_ms,
                            lr.timed_wall_ms / lr.untimed_ms);
        }
        std::printf("==================================================\n\n");
        std::fflush(stdout);
    }

    const double base = results.front().output_tps;
    std::printf("| concurrency | output tok/s | × concurrency %d | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms | prefix hits |\n",
                results.front().concurrency);
    std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (const auto &r : results)
        std::printf("| %d | %.1f | %.2f | %.1f | %.1f | %.2f | %.2f | %.0f%% |\n", r.concurrency, r.output_tps,
                    r.output_tps / base, percentile(r.ttft_ms, 50), percentile(r.ttft_ms, 99), percentile(r.itl_ms, 50),
                    percentile(r.itl_ms, 99), 100.0 * r.hit_rate);

    if (!o.out_json.empty()) {
        nlohmann::json j = {{"model", what}, {"backend", info.backend_name}, {"requests", o.requests},
                            {"prompt_len", o.prompt_len}, {"output_len", o.output_len},
                            {"shared_prefix", o.shared_prefix}, {"version", ES_VERSION}, {"commit", ES_GIT_COMMIT}};
        for (const auto &r : results)
            j["levels"].push_back({{"concurrency", r.concurrency}, {"duration_s", r.duration_s},
                                   {"output_tokens_per_s", r.output_tps}, {"total_tokens_per_s", r.total_tps},
                                   {"ratio_vs_first", r.output_tps / base}, {"ttft_p50_ms", percentile(r.ttft_ms, 50)},
                                   {"ttft_p99_ms", percentile(r.ttft_ms, 99)}, {"itl_p50_ms", percentile(r.itl_ms, 50)},
                                   {"itl_p99_ms", percentile(r.itl_ms, 99)}, {"prefix_hit_rate", r.hit_rate},
                                   {"decode_steps", r.n_decode}, {"decode_steps_timed", r.n_timed},
                                   {"untimed_decode_step_ms", r.untimed_ms},
                                   {"timed_decode_phases_ms",
                                    {{"attention", r.timed.attention_ms}, {"moe", r.timed.moe_ms},
                                     {"moe_shared", r.timed.moe_shared_ms}, {"dense", r.timed.dense_ms},
                                     {"head", r.timed.head_ms}, {"other", r.timed.other_ms},
                                     {"sum", r.timed.sum_ms()}}},
                                   {"step_timeline", r.timeline}});
        std::ofstream f(o.out_json);
        f << j.dump(2) << "\n";
        if (!f) return fail("cannot write " + o.out_json);
    }
    return 0;
}

} // namespace es::cli
