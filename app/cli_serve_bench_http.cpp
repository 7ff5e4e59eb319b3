// expertscope-cli serve-bench --url: the same synthetic load as serve-bench, sent as streaming
// /v1/completions requests (token-id prompts, ignore_eos, greedy) by `concurrency` client
// threads to a running server. TTFT and ITL are measured on the client, per SSE chunk, as
// `vllm bench serve` does; output follows its layout.
#include "cli_commands.h"

#include "engine/model/model_config.h"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <random>
#include <thread>

namespace es::cli {
namespace {

using clk = std::chrono::steady_clock;

struct one_result {
    bool ok = false;
    std::string error;
    int64_t prompt_tokens = 0, completion_tokens = 0;
    double ttft_ms = -1.0, e2e_ms = 0.0;
    std::vector<double> itl_ms;
};

one_result run_one(const std::string &url, const std::string &key, const std::string &model,
                   const std::vector<int32_t> &prompt, int32_t output_len) {
    one_result r;
    httplib::Client cli(url);
    cli.set_read_timeout(300, 0);
    cli.set_connection_timeout(10, 0);
    httplib::Headers h;
    if (!key.empty()) h.emplace("Authorization", "Bearer " + key);
    nlohmann::json body = {{"model", model}, {"prompt", prompt}, {"max_tokens", output_len}, {"temperature", 0},
                           {"ignore_eos", true}, {"stream", true}, {"stream_options", {{"include_usage", true}}}};
    const auto t0 = clk::now();
    auto last = t0;
    std::string buf;
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.headers = h;
    req.set_header("Content-Type", "application/json");
    req.body = body.dump();
    req.content_receiver = [&](const char *data, size_t n, uint64_t, uint64_t) {
            buf.append(data, n);
            size_t p;
            while ((p = buf.find("\n\n")) != std::string::npos) {
                std::string ev = buf.substr(0, p);
                buf.erase(0, p + 2);
                if (ev.rfind("data: ", 0) != 0) continue;
                ev.erase(0, 6);
                if (ev == "[DONE]") continue;
                auto j = nlohmann::json::parse(ev, nullptr, false);
                if (j.is_discarded()) continue;
                if (j.contains("error")) r.error = j["error"].value("message", "error");
                if (j.contains("usage") && j["usage"].is_object()) {
                    r.prompt_tokens = j["usage"].value("prompt_tokens", 0);
                    r.completion_tokens = j["usage"].value("completion_tokens", 0);
                }
                if (j.contains("choices") && !j["choices"].empty() && !j["choices"][0].value("text", "").empty()) {
                    const auto now = clk::now();
                    if (r.ttft_ms < 0) r.ttft_ms = std::chrono::duration<double, std::milli>(now - t0).count();
                    else r.itl_ms.push_back(std::chrono::duration<double, std::milli>(now - last).count());
                    last = now;
                }
            }
            return true;
        };
    auto res = cli.send(req);
    r.e2e_ms = std::chrono::duration<double, std::milli>(clk::now() - t0).count();
    if (!res) r.error = "HTTP error: " + httplib::to_string(res.error());
    else if (res->status != 200) r.error = "HTTP " + std::to_string(res->status) + ": " + res->body;
    r.ok = r.error.empty() && r.completion_tokens > 0;
    return r;
}

} // namespace

int cmd_serve_bench_http(const serve_bench_opts &o) {
    httplib::Client probe(o.url);
    probe.set_connection_timeout(5, 0);
    httplib::Headers h;
    if (!o.api_key.empty()) h.emplace("Authorization", "Bearer " + o.api_key);
    auto models = probe.Get("/v1/models", h);
    if (!models || models->status != 200) return fail("cannot list models at " + o.url + "/v1/models");
    auto mj = nlohmann::json::parse(models->body, nullptr, false);
    if (mj.is_discarded() || !mj.contains("data") || mj["data"].empty()) return fail("no model listed at " + o.url);
    const std::string model = mj["data"][0].value("id", "");
    int64_t n_vocab = 1000;  // the token ids of the synthetic prompts stay below this
    if (!o.model_dir.empty()) {
        auto cfg = load_model_config(o.model_dir);
        if (!cfg) return fail(cfg.message());
        n_vocab = cfg->n_vocab;
    }
    std::mt19937_64 rng(o.seed);
    std::uniform_int_distribution<int32_t> tok(3, int32_t(n_vocab - 1));
    nlohmann::json levels = nlohmann::json::array();
    std::vector<std::string> table;
    double base = 0.0;
    for (int32_t conc : o.concurrency) {
        std::vector<int32_t> prefix(size_t(o.shared_prefix));
        for (auto &t : prefix) t = tok(rng);
        std::vector<std::vector<int32_t>> prompts(size_t(o.requests));
        for (auto &p : prompts) {
            p = prefix;
            while (int32_t(p.size()) < o.prompt_len) p.push_back(tok(rng));
        }
        std::vector<one_result> results(prompts.size());
        std::atomic<size_t> next{0};
        const auto t0 = clk::now();
        std::vector<std::thread> workers;
        for (int32_t w = 0; w < conc; ++w)
            workers.emplace_back([&] {
                for (size_t i; (i = next.fetch_add(1)) < prompts.size();)
                    results[i] = run_one(o.url, o.api_key, model, prompts[i], o.output_len);
            });
        for (auto &w : workers) w.join();
        const double dur = std::chrono::duration<double>(clk::now() - t0).count();
        int n_ok = 0;
        int64_t in = 0, outt = 0;
        std::vector<double> ttft, itl, e2e, tpot;
        for (const auto &r : results) {
            if (!r.ok) {
                std::fprintf(stderr, "request failed: %s\n", r.error.c_str());
                continue;
            }
            ++n_ok;
            in += r.prompt_tokens;
            outt += r.completion_tokens;
            ttft.push_back(r.ttft_ms);
            e2e.push_back(r.e2e_ms);
            itl.insert(itl.end(), r.itl_ms.begin(), r.itl_ms.end());
            // Time per output token after the first, per request (vllm bench serve's TPOT).
            if (r.completion_tokens > 1)
                tpot.push_back((r.e2e_ms - r.ttft_ms) / double(r.completion_tokens - 1));
        }
        const double out_tps = outt / dur;
        if (base == 0.0) base = out_tps;
        std::printf("============ Serving Benchmark Result ============\n");
        std::printf("%-40s %s\n", "Endpoint:", (o.url + "/v1/completions (streaming)").c_str());
        std::printf("%-40s %s\n", "Model:", model.c_str());
        std::printf("%-40s %d\n", "Successful requests:", n_ok);
        std::printf("%-40s %d\n", "Maximum request concurrency:", conc);
        std::printf("%-40s %.2f\n", "Benchmark duration (s):", dur);
        std::printf("%-40s %lld\n", "Total input tokens:", (long long)in);
        std::printf("%-40s %lld\n", "Total generated tokens:", (long long)outt);
        std::printf("%-40s %.2f\n", "Request throughput (req/s):", n_ok / dur);
        std::printf("%-40s %.2f\n", "Output token throughput (tok/s):", out_tps);
        std::printf("%-40s %.2f\n", "Total Token throughput (tok/s):", (in + outt) / dur);
        std::printf("---------------Time to First Token----------------\n");
        std::printf("%-40s %.2f\n%-40s %.2f\n%-40s %.2f\n", "Mean TTFT (ms):", mean(ttft), "Median TTFT (ms):", percentile(ttft, 50),
                    "P99 TTFT (ms):", percentile(ttft, 99));
        std::printf("-----Time per Output Token (excl. 1st token)------\n");
        std::printf("%-40s %.2f\n%-40s %.2f\n%-40s %.2f\n", "Mean TPOT (ms):", mean(tpot),
                    "Median TPOT (ms):", percentile(tpot, 50), "P99 TPOT (ms):", percentile(tpot, 99));
        std::printf("---------------Inter-token Latency----------------\n");
        std::printf("%-40s %.2f\n%-40s %.2f\n%-40s %.2f\n", "Mean ITL (ms):", mean(itl), "Median ITL (ms):", percentile(itl, 50),
                    "P99 ITL (ms):", percentile(itl, 99));
        std::printf("==================================================\n\n");
        std::fflush(stdout);
        char row[256];
        std::snprintf(row, sizeof row,
                      "| %d | %d/%d | %.2f | %.1f | %.2f | %.1f | %.1f | %.1f | %.2f | %.2f | %.2f | %.2f | "
                      "%.2f | %.1f |",
                      conc, n_ok, int(results.size()), n_ok / dur, out_tps, out_tps / base, mean(ttft),
                      percentile(ttft, 50), percentile(ttft, 99), mean(tpot), percentile(tpot, 50), percentile(tpot, 99), percentile(itl, 50),
                      percentile(itl, 99), percentile(e2e, 50));
        table.push_back(row);
        levels.push_back({{"concurrency", conc},
                          {"ok", n_ok},
                          {"duration_s", dur},
                          {"output_tokens_per_s", out_tps},
                          {"requests_per_s", n_ok / dur},
                          {"ttft_mean_ms", mean(ttft)},
                          {"tpot_mean_ms", mean(tpot)},
                          {"tpot_p50_ms", percentile(tpot, 50)},
                          {"tpot_p99_ms", percentile(tpot, 99)},
                          {"itl_mean_ms", mean(itl)},
                          {"ttft_p50_ms", percentile(ttft, 50)},
                          {"ttft_p99_ms", percentile(ttft, 99)},
                          {"itl_p50_ms", percentile(itl, 50)},
                          {"itl_p99_ms", percentile(itl, 99)},
                          {"e2e_p50_ms", percentile(e2e, 50)}});
        if (n_ok != int(results.size())) return fail("some requests failed");
    }
    std::printf("| concurrency | ok | req/s | output tok/s | × first | TTFT mean ms | TTFT p50 ms | TTFT p99 "
                "ms | TPOT mean ms "
                "| TPOT p50 ms | TPOT p99 ms | ITL p50 ms | ITL p99 ms | E2E p50 ms |\n");
    std::printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    for (const auto &r : table) std::printf("%s\n", r.c_str());
    if (!o.out_json.empty()) {
        std::ofstream f(o.out_json);
        f << nlohmann::json{{"url", o.url}, {"model", model}, {"requests", o.requests}, {"prompt_len", o.prompt_len},
                            {"output_len", o.output_len}, {"levels", levels}}
                 .dump(2)
          << "\n";
        if (!f) return fail("cannot write " + o.out_json);
    }
    return 0;
}

} // namespace es::cli
