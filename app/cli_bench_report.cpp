// The part of `bench --json` that makes a bench run a first-class report input (format_version
// 2, read by app/report): one instrumented request — a prefill of the first --pp length, then
// --tg decode steps after it — with each step's time and phase times, every token's time, the
// expert counts per MoE layer and the memory in use; plus the machine and the model's identity.
// Qt-free like the rest of the CLI; the fields are documented in docs/reports.md.
#include "cli_commands.h"
#include "es_build_info.h"

#include "app/models/provenance.h"
#include "engine/backend/backend.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

namespace es::cli {
namespace {

using clock_t_ = std::chrono::steady_clock;

int64_t us_since(clock_t_::time_point t0) {
    return std::chrono::duration_cast<std::chrono::microseconds>(clock_t_::now() - t0).count();
}
int64_t us(double ms) { return int64_t(ms * 1000.0 + 0.5); }

} // namespace


result<nlohmann::json> bench_request_profile(backend &be, int32_t pp, int32_t tg) {
    const model_config &cfg = be.config();
    // tg tokens: the prefill yields the first, tg − 1 decode steps the rest.
    const int64_t n_pos = std::min<int64_t>(cfg.n_ctx_train, int64_t(pp) + tg - 1);
    if (pp <= 0 || n_pos < pp)
        return error{"bench: the instrumented request's prompt does not fit the context"};
    const int32_t n_blocks = int32_t((n_pos + 15) / 16);
    if (auto s = be.init_kv_cache({16, n_blocks}); !s) return s.err();
    batch b;
    b.seqs.resize(1);
    for (int32_t i = 0; i < n_blocks; ++i) b.seqs[0].block_table.push_back(i);
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
    const size_t block_bytes = be.kv_block_bytes();
    const int64_t weights = int64_t(be.weights_bytes());
    std::vector<int32_t> moe_layers;
    std::vector<std::vector<uint32_t>> counts;
    nlohmann::json steps = nlohmann::json::array(), memory = nlohmann::json::array(),
                   times = nlohmann::json::array();
    forward_output out;
    const auto t0 = clock_t_::now();
    memory.push_back({{"t_us", 0}, {"in_use_bytes", weights}, {"kv_blocks_used", 0}});
    int64_t ttft = 0;
    const int32_t n_decode = int32_t(n_pos - pp);
    for (int32_t i = 0; i <= n_decode; ++i) {
        const bool prefill = i == 0;
        const int32_t n = prefill ? pp : 1, pos0 = prefill ? 0 : pp + i - 1;
        fill(n, pos0);
        const int64_t start = us_since(t0);
        if (auto s = be.forward(b, out); !s) return s.err();
        const int64_t end = us_since(t0);
        const phase_times &ph = out.phases;
        steps.push_back({{"t_start_us", start},
                         {"duration_us", end - start},
                         {"n_seqs", 1},
                         {"n_prefill_tokens", prefill ? n : 0},
                         {"n_decode_tokens", prefill ? 0 : 1},
                         {"attention_us", us(ph.attention_ms)},
                         {"moe_us", us(ph.moe_ms)},
                         {"dense_us", us(ph.dense_ms + ph.head_ms)},
                         {"sampling_us", 0}});
        times.push_back(end);
        if (prefill) ttft = end;
        const int64_t blocks = (int64_t(pos0) + n + 15) / 16;
        if (memory.back()["kv_blocks_used"].get<int64_t>() != blocks) // a sample when the figure changes
            memory.push_back({{"t_us", end},
                              {"in_use_bytes", weights + blocks * int64_t(block_bytes)},
                              {"kv_blocks_used", blocks}});
        const routing_record &r = out.routing;
        if (moe_layers.empty()) {
            moe_layers = r.moe_layers;
            counts.assign(moe_layers.size(), std::vector<uint32_t>(size_t(cfg.n_expert), 0));
        }
        for (size_t m = 0; m < r.ids.size() && m < counts.size(); ++m)
            for (int16_t id : r.ids[m])
                if (id >= 0 && id < cfg.n_expert) ++counts[m][size_t(id)];
    }
    nlohmann::json routing = nlohmann::json::array();
    for (size_t m = 0; m < moe_layers.size(); ++m)
        routing.push_back({{"layer", moe_layers[m]}, {"expert_counts", counts[m]}});
    const int64_t duration = times.empty() ? 0 : times.back().get<int64_t>();
    return nlohmann::json{{"label", "pp" + std::to_string(pp) + " + tg" + std::to_string(n_decode + 1)},
                          {"prompt_tokens", pp},
                          {"cached_prompt_tokens", 0},
                          {"ttft_us", ttft},
                          {"duration_us", duration},
                          {"token_times_us", times},
                          {"steps", steps},
                          {"memory", memory},
                          {"n_layers", cfg.n_layer},
                          {"n_experts", cfg.n_expert},
                          {"n_shared_experts", cfg.n_expert_shared},
                          {"k", cfg.n_expert_used},
                          {"moe_layers", moe_layers},
                          {"routing", routing}};
}

int write_bench_json(const bench_opts &o, const std::string &what, backend &be, const nlohmann::json &results,
                     nlohmann::json extra) {
    auto request = bench_request_profile(be, o.pp.front(), o.tg);
    if (!request) return fail(request.message());
    const std::string name =
        o.shape.empty() ? std::filesystem::path(o.model_dir + "/.").lexically_normal().parent_path().filename().string()
                        : o.shape;
    nlohmann::json j = {{"format", "expertscope.bench"},
                        {"format_version", 2},
                        {"model", what},
                        {"model_name", name},
                        {"model_hash", models::model_content_hash(o.model_dir)},
                        {"seed", o.shape.empty() ? nlohmann::json() : nlohmann::json(42)},
                        {"backend", be.name()},
                        {"weights_bytes", be.weights_bytes()},
                        {"version", ES_VERSION},
                        {"commit", ES_GIT_COMMIT},
                        {"results", results},
                        {"request", *request}};
    j.update(extra);
    std::ofstream f(o.out_json);
    f << j.dump(2) << "\n";
    if (!f) return fail("cannot write " + o.out_json);
    return 0;
}

} // namespace es::cli
