// expertscope-cli routing: do mode prefixes steer the experts? Runs two prompt sets through the
// engine (each line of a file is one user message, rendered with the chat template), counts the
// routed expert token slots per MoE layer from each request's routing trace, and prints per layer
// the Jensen–Shannon divergence (natural log, 0 … ln 2) between the two sets' expert shares.
#include "cli_commands.h"

#include "engine/runtime/engine.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

namespace es::cli {
namespace {

result<std::vector<std::string>> read_lines(const std::string &path) {
    std::ifstream f(path);
    if (!f) return error{path + ": cannot open the prompts file"};
    std::vector<std::string> out;
    for (std::string line; std::getline(f, line);) {
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (!line.empty()) out.push_back(line);
    }
    if (out.empty()) return error{path + ": no prompts (expected one user message per line)"};
    return out;
}

double kl(const std::vector<double> &p, const std::vector<double> &m) {
    double s = 0.0;
    for (size_t i = 0; i < p.size(); ++i)
        if (p[i] > 0.0) s += p[i] * std::log(p[i] / m[i]);
    return s;
}

double js_divergence(const std::vector<double> &p, const std::vector<double> &q) {
    std::vector<double> m(p.size());
    for (size_t i = 0; i < p.size(); ++i) m[i] = 0.5 * (p[i] + q[i]);
    return 0.5 * kl(p, m) + 0.5 * kl(q, m);
}

} // namespace

int cmd_routing(const routing_opts &o, const common_opts &common) {
    if (common.backend == "cuda") return fail("routing --backend cuda: use the CPU backend (the routing is the same)");
    auto a = read_lines(o.prompts_a);
    if (!a) return fail(a.message());
    auto b = read_lines(o.prompts_b);
    if (!b) return fail(b.message());

    engine_params ep;
    ep.load.n_threads = common.threads;
    ep.enable_prefix_caching = false; // every position computed, so every position is traced
    engine eng(ep);
    if (status st = eng.load_model(o.model_dir).get(); !st) return fail(st.message());
    const model_config cfg = eng.info()->config;
    const int64_t n_moe = cfg.n_moe_layers(), E = cfg.n_expert, K = cfg.n_expert_used;
    if (n_moe == 0) return fail(o.model_dir + "/config.json: not an MoE model (no routed experts to count)");
    std::vector<int64_t> layer_of;
    for (int64_t il = 0; il < cfg.n_layer; ++il)
        if (cfg.is_moe_layer(il)) layer_of.push_back(il);

    // counts[set][moe slot][expert]
    std::vector<std::vector<std::vector<int64_t>>> counts(2, std::vector<std::vector<int64_t>>(n_moe, std::vector<int64_t>(E, 0)));
    int64_t tokens[2] = {0, 0};
    for (int set = 0; set < 2; ++set) {
        const auto &prompts = set == 0 ? *a : *b;
        const std::string &system = set == 0 ? o.system_a : o.system_b;
        std::vector<std::shared_ptr<request_stream>> streams;
        for (const auto &p : prompts) {
            request_params r;
            r.messages = {chat_message{chat_role::user, p}};
            r.system_prompt = system;
            r.sampling = eng.model_defaults();
            r.sampling.temperature = 0.0f;
            r.sampling.max_tokens = o.max_tokens;
            streams.push_back(eng.submit(std::move(r)));
        }
        for (auto &s : streams) {
            request_event ev;
            while (!s->done() || s->try_pop(ev)) {
                if (!s->wait_pop(ev, std::chrono::milliseconds(200))) continue;
                if (ev.kind == event_kind::failed) return fail("routing: a request failed: " + ev.error);
            }
            const request_metrics m = s->metrics();
            if (m.n_moe_layers != n_moe || m.k != K) return fail("routing: unexpected trace shape from the engine");
            const int64_t n_pos = int64_t(m.trace.size()) / (n_moe * K);
            const int64_t first = o.generated_only ? m.n_prompt_tokens : 0;
            for (int64_t p = first; p < n_pos; ++p) {
                bool counted = false;
                for (int64_t l = 0; l < n_moe; ++l)
                    for (int64_t j = 0; j < K; ++j) {
                        const int e = m.trace[size_t((p * n_moe + l) * K + j)];
                        if (e < 0 || e >= E) continue;
                        ++counts[set][size_t(l)][size_t(e)];
                        counted = true;
                    }
                tokens[set] += counted;
            }
        }
    }

    nlohmann::json j;
    j["model"] = o.model_dir;
    j["prompts_a"] = o.prompts_a;
    j["prompts_b"] = o.prompts_b;
    j["n_prompts"] = {a->size(), b->size()};
    j["tokens"] = {tokens[0], tokens[1]};
    j["max_tokens"] = o.max_tokens;
    j["generated_only"] = o.generated_only;
    j["log"] = "natural (JS <= ln 2 = 0.6931)";
    std::printf("routing: %zu prompts (A: %s, %lld tokens) vs %zu prompts (B: %s, %lld tokens), %s positions\n",
                a->size(), o.prompts_a.c_str(), (long long)tokens[0], b->size(), o.prompts_b.c_str(),
                (long long)tokens[1], o.generated_only ? "generated" : "prompt + generated");
    std::printf("%-6s %-8s  %s\n", "layer", "JS", "expert shares A | B (%)");
    double sum = 0.0;
    for (int64_t l = 0; l < n_moe; ++l) {
        std::vector<double> p(static_cast<size_t>(E)), q(static_cast<size_t>(E));
        int64_t ta = 0, tb = 0;
        for (int64_t e = 0; e < E; ++e) ta += counts[0][size_t(l)][size_t(e)], tb += counts[1][size_t(l)][size_t(e)];
        for (int64_t e = 0; e < E; ++e) {
            p[size_t(e)] = ta ? double(counts[0][size_t(l)][size_t(e)]) / double(ta) : 0.0;
            q[size_t(e)] = tb ? double(counts[1][size_t(l)][size_t(e)]) / double(tb) : 0.0;
        }
        const double js = (ta && tb) ? js_divergence(p, q) : 0.0;
        sum += js;
        std::string sa, sb;
        for (int64_t e = 0; e < E; ++e) {
            char buf[16];
            std::snprintf(buf, sizeof buf, "%s%.0f", e ? " " : "", 100.0 * p[size_t(e)]);
            sa += buf;
            std::snprintf(buf, sizeof buf, "%s%.0f", e ? " " : "", 100.0 * q[size_t(e)]);
            sb += buf;
        }
        std::printf("%-6lld %-8.4f  %s | %s\n", (long long)layer_of[size_t(l)], js, sa.c_str(), sb.c_str());
        j["layers"].push_back({{"layer", layer_of[size_t(l)]}, {"js", js},
                               {"counts_a", counts[0][size_t(l)]}, {"counts_b", counts[1][size_t(l)]}});
    }
    std::printf("mean JS over %lld MoE layers: %.4f (max ln 2 = 0.6931)\n", (long long)n_moe, sum / double(n_moe));
    j["mean_js"] = sum / double(n_moe);
    if (!o.out_json.empty()) {
        std::ofstream f(o.out_json);
        if (!f) return fail(o.out_json + ": cannot write");
        f << j.dump(2) << "\n";
    }
    return 0;
}

} // namespace es::cli
