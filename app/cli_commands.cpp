// expertscope-cli info / logits / generate (see cli_commands.h).
#include "cli_commands.h"

#include "engine/core/switches.h"
#include "engine/model/chat_template.h"
#include "engine/model/model_tensors.h"
#include "engine/model/npy.h"
#include "engine/model/safetensors.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/model.h"

#include <nlohmann/json.hpp>

#include <charconv>
#include <algorithm>
#include <cstdio>
#include <iostream>

namespace es::cli {

int fail(const std::string &msg) {
    std::fprintf(stderr, "error: %s\n", msg.c_str());
    return 1;
}

double percentile(std::vector<double> v, double q) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    const double pos = q / 100.0 * double(v.size() - 1);
    const size_t lo = size_t(pos), hi = std::min(v.size() - 1, lo + 1);
    return v[lo] + (v[hi] - v[lo]) * (pos - double(lo));
}

double mean(const std::vector<double> &v) {
    double s = 0.0;
    for (double x : v) s += x;
    return v.empty() ? 0.0 : s / double(v.size());
}

namespace {

std::string human_bytes(double b) {
    const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (b >= 1024.0 && u < 4) {
        b /= 1024.0;
        ++u;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", b, units[u]);
    return buf;
}

result<std::vector<int32_t>> parse_ids(const std::string &text) {
    std::vector<int32_t> ids;
    size_t i = 0;
    while (i <= text.size()) {
        size_t j = text.find(',', i);
        if (j == std::string::npos) j = text.size();
        std::string part = text.substr(i, j - i);
        while (!part.empty() && part.front() == ' ') part.erase(part.begin());
        while (!part.empty() && part.back() == ' ') part.pop_back();
        int64_t v = 0;
        auto [p, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
        if (part.empty() || ec != std::errc() || p != part.data() + part.size() || v < 0 || v > INT32_MAX)
            return error{"--ids: '" + part + "' is not a token id (expected comma-separated non-negative integers)"};
        ids.push_back(int32_t(v));
        i = j + 1;
    }
    return ids;
}

backend_kind to_kind(const std::string &s) {
    return s == "cuda" ? backend_kind::cuda : s == "auto" ? backend_kind::automatic : backend_kind::cpu;
}

} // namespace

int cmd_switches(bool json) {
    const bool dev = developer_switches_enabled();
    if (json) {
        nlohmann::json rows = nlohmann::json::array();
        for (const switch_info &s : all_switches())
            rows.push_back({{"name", s.name},
                            {"type", s.type == switch_type::flag ? "flag" : s.type == switch_type::integer ? "integer" : "text"},
                            {"default", s.default_value},
                            {"meaning", s.meaning},
                            {"exact", s.exact},
                            {"honoured", s.exact || dev}});
        std::printf("%s\n", nlohmann::json{{"developer_build", dev}, {"switches", rows}}.dump(2).c_str());
        return 0;
    }
    std::printf("Runtime switches (environment variables). Exact ones change timing or placement only;\n"
                "the others are measuring aids that change results, honoured only in developer builds\n"
                "(this build: %s).\n\n",
                dev ? "developer, all honoured" : "release, result-changing switches ignored");
    for (const switch_info &s : all_switches())
        std::printf("%-32s %-8s %-7s default %s\n    %s\n", s.name,
                    s.type == switch_type::flag ? "flag" : s.type == switch_type::integer ? "integer" : "text",
                    s.exact ? "exact" : "changes", s.default_value, s.meaning);
    for (const std::string &n : ignored_switches())
        std::printf("\nset but ignored in this build: %s\n", n.c_str());
    return 0;
}

int cmd_info(const std::string &model_dir, bool json) {
    auto cfg = load_model_config(model_dir);
    if (!cfg) return fail(cfg.message());
    const model_config &c = *cfg;
    // Check the weight files too: info is the first thing to run on a new folder.
    std::string weights_status;
    size_t disk_bytes = 0, n_tensors = 0;
    std::vector<std::string> warnings;
    if (auto store = weight_store::open_dir(model_dir); !store) {
        weights_status = store.message();
    } else {
        disk_bytes = (*store)->total_bytes();
        n_tensors = (*store)->all().size();
        auto bound = bind_model_tensors(c, **store);
        weights_status = bound ? "ok" : bound.message();
        if (bound) warnings = bound->warnings;
    }
    const int64_t n_params = c.n_params(), n_active = c.n_params_active();
    // FP8: every linear in E4M3 (1 byte) with one fp32 scale per output row; embeddings,
    // norms and router stay BF16/fp32. Approximated here as linears at 1 byte, the rest at 2.
    const int64_t embd = c.n_vocab * c.n_embd * (c.tie_word_embeddings ? 1 : 2);
    const int64_t bytes_bf16 = n_params * 2, bytes_fp8 = (n_params - embd) + embd * 2;
    if (json) {
        nlohmann::json j = {
            {"architecture", c.arch_name}, {"moe", c.arch == model_arch::moe}, {"vocab_size", c.n_vocab},
            {"hidden_size", c.n_embd}, {"num_hidden_layers", c.n_layer}, {"num_attention_heads", c.n_head},
            {"num_key_value_heads", c.n_head_kv}, {"head_dim", c.head_dim}, {"intermediate_size", c.n_ff},
            {"max_position_embeddings", c.n_ctx_train}, {"rope_theta", c.rope_theta},
            {"tie_word_embeddings", c.tie_word_embeddings}, {"n_params", n_params}, {"n_params_active", n_active},
            {"bytes_bf16", bytes_bf16}, {"bytes_fp8", bytes_fp8}, {"kv_bytes_per_token_bf16", c.kv_bytes_per_token(2)},
            {"kv_bytes_per_token_fp8", c.kv_bytes_per_token(1)}, {"weights", weights_status},
            {"weights_disk_bytes", disk_bytes}, {"n_tensors", n_tensors}, {"warnings", warnings}};
        if (c.arch == model_arch::moe) {
            j["moe_num_experts"] = c.n_expert;
            j["moe_k"] = c.n_expert_used;
            j["moe_intermediate_size"] = c.n_ff_exp;
            j["moe_num_shared_experts"] = c.n_expert_shared;
            j["moe_layers"] = c.n_moe_layers();
        }
        std::cout << j.dump(2) << "\n";
    } else {
        std::printf("model            %s\n", model_dir.c_str());
        std::printf("architecture     %s (%s)\n", c.arch_name.c_str(), c.arch == model_arch::moe ? "MoE" : "dense");
        std::printf("layers           %lld, hidden %lld, heads %lld/%lld (q/kv), head_dim %lld\n", (long long)c.n_layer,
                    (long long)c.n_embd, (long long)c.n_head, (long long)c.n_head_kv, (long long)c.head_dim);
        std::printf("vocab            %lld, context %lld, rope_theta %g, %s head\n", (long long)c.n_vocab,
                    (long long)c.n_ctx_train, c.rope_theta, c.tie_word_embeddings ? "tied" : "untied");
        if (c.arch == model_arch::moe)
            std::printf("experts          %lld routed (top-%lld, width %lld) + %lld shared, %lld MoE layers, dense FFN %lld\n",
                        (long long)c.n_expert, (long long)c.n_expert_used, (long long)c.n_ff_exp,
                        (long long)c.n_expert_shared, (long long)c.n_moe_layers(), (long long)c.n_ff);
        else
            std::printf("ffn              %lld\n", (long long)c.n_ff);
        std::printf("parameters       %.3f M total, %.3f M active per token\n", n_params / 1e6, n_active / 1e6);
        std::printf("weights bytes    %s at BF16, %s at FP8 (linears E4M3, embeddings BF16)\n",
                    human_bytes(double(bytes_bf16)).c_str(), human_bytes(double(bytes_fp8)).c_str());
        std::printf("KV per token     %s at BF16, %s at FP8\n", human_bytes(double(c.kv_bytes_per_token(2))).c_str(),
                    human_bytes(double(c.kv_bytes_per_token(1))).c_str());
        std::printf("weight files     %s", weights_status.c_str());
        if (weights_status == "ok") std::printf(" (%zu tensors, %s)", n_tensors, human_bytes(double(disk_bytes)).c_str());
        std::printf("\n");
        for (const auto &w : warnings) std::printf("warning          %s\n", w.c_str());
    }
    return weights_status == "ok" ? 0 : 1;
}

result<routing_intervention> to_routing_intervention(const common_opts &o) {
    return make_routing_intervention(o.disable_experts, o.force_experts, o.moe_top_k, o.expert_bias_scale,
                                     "--disable-experts", "--force-experts");
}

status forward_sequence(backend &be, const std::vector<int32_t> &ids, forward_output &out,
                        std::shared_ptr<const routing_intervention> routing) {
    const int32_t bs = 16, n = int32_t(ids.size()), n_blocks = (n + bs - 1) / bs;
    if (auto s = be.init_kv_cache({bs, n_blocks}); !s) return s;
    batch b;
    b.tokens = ids;
    b.seqs.resize(1);
    b.seqs[0].routing = std::move(routing);
    for (int32_t i = 0; i < n_blocks; ++i) b.seqs[0].block_table.push_back(i);
    for (int32_t i = 0; i < n; ++i) {
        b.pos.push_back(i);
        b.seq.push_back(0);
        b.logits_rows.push_back(i);
    }
    return be.forward(b, out);
}

int cmd_logits(const std::string &model_dir, const std::string &ids_text, const std::string &out,
               const common_opts &o) {
    auto ids = parse_ids(ids_text);
    if (!ids) return fail(ids.message());
    auto iv = to_routing_intervention(o);
    if (!iv) return fail(iv.message());
    model_load_params lp;
    lp.kind = to_kind(o.backend);
    lp.precision = o.precision == "fp8" ? weight_precision::fp8 : weight_precision::bf16;
    lp.activations = to_activation_format(o.activations);
    lp.fp8 = to_fp8_policy(o);
    lp.kv_cache = to_kv_cache_dtype(o.kv_cache);
    lp.n_threads = o.threads;
    lp.need_tokenizer = false;
    auto m = load_model(model_dir, lp);
    if (!m) return fail(m.message());
    backend &be = *(*m)->be;
    const auto &c = be.config();
    const int64_t n = int64_t(ids->size());
    if (n > c.n_ctx_train)
        return fail("--ids: " + std::to_string(n) + " tokens exceed the model's context of " +
                    std::to_string(c.n_ctx_train));
    for (int32_t id : *ids)
        if (id >= c.n_vocab)
            return fail("--ids: token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                        std::to_string(c.n_vocab) + ")");
    if (!iv->empty()) {
        if (auto s = check_routing_intervention(*iv, c); !s) return fail(s.message());
        if (!be.supports_routing_interventions())
            return fail("expert interventions run on the CPU backend; the " + be.name() +
                        " backend's router does not apply them (use --backend cpu)");
    }
    forward_output fo;
    if (auto s = forward_sequence(be, *ids, fo, std::make_shared<const routing_intervention>(*iv)); !s)
        return fail(s.message());
    if (auto s = write_npy_f32(out, fo.logits.data(), {n, c.n_vocab}); !s) return fail(s.message());
    return 0;
}

int cmd_generate(const generate_opts &g, const common_opts &o) {
    auto iv = to_routing_intervention(o);
    if (!iv) return fail(iv.message());
    model_load_params lp;
    lp.kind = to_kind(o.backend);
    lp.precision = o.precision == "fp8" ? weight_precision::fp8 : weight_precision::bf16;
    lp.activations = to_activation_format(o.activations);
    lp.fp8 = to_fp8_policy(o);
    lp.kv_cache = to_kv_cache_dtype(o.kv_cache);
    lp.n_threads = o.threads;
    auto loaded = load_model(g.model_dir, lp);
    if (!loaded) return fail(loaded.message());
    model &m = **loaded;
    for (const auto &w : m.warnings) std::fprintf(stderr, "warning: %s\n", w.c_str());
    if (!m.backend_note.empty()) std::fprintf(stderr, "note: %s\n", m.backend_note.c_str());

    std::vector<int32_t> prompt;
    if (g.raw_ids) {
        auto ids = parse_ids(g.prompt);
        if (!ids) return fail(ids.message());
        prompt = *ids;
    } else {
        std::string text = g.prompt;
        if (g.chat) {
            std::vector<chat_message> msgs;
            if (!g.system.empty()) msgs.push_back({chat_role::system, g.system});
            msgs.push_back({chat_role::user, g.prompt});
            text = render_chat(msgs, true);
        }
        prompt = m.tok->encode(text);
    }
    if (prompt.empty()) return fail("the prompt is empty");

    sampling_params sp = m.generation_defaults;
    if (g.temperature) sp.temperature = *g.temperature;
    if (g.top_k) sp.top_k = *g.top_k;
    if (g.top_p) sp.top_p = *g.top_p;
    if (g.min_p) sp.min_p = *g.min_p;
    if (g.repetition_penalty) sp.repetition_penalty = *g.repetition_penalty;
    if (g.seed) sp.seed = *g.seed;
    sp.max_tokens = g.max_tokens;
    if (auto msg = sp.validate(); !msg.empty()) return fail("sampling parameters: " + msg);
    if (int64_t(prompt.size()) >= m.config.n_ctx_train)
        return fail("the prompt has " + std::to_string(prompt.size()) + " tokens but the model's context is " +
                    std::to_string(m.config.n_ctx_train) + " tokens");

    // The runtime the app and the server use: one request through the engine's step loop.
    engine_params ep;
    ep.load = lp;
    ep.max_num_seqs = 1;
    ep.gpu_memory_utilization = o.gpu_memory_utilization;
    const std::string backend_name = m.be->name();
    engine eng(ep);
    if (auto st = eng.load_model(std::move(*loaded)).get(); !st) return fail(st.message());
    request_params rp;
    rp.prompt_ids = prompt;
    rp.sampling = sp;
    if (!iv->empty()) {
        rp.routing = std::make_shared<const routing_intervention>(*iv);
        std::fprintf(stderr, "expert intervention: %s\n", describe_routing_intervention(*iv).c_str());
    }
    auto stream = eng.submit(std::move(rp));
    size_t n_out = 0;
    std::string finish_reason;
    for (request_event ev;;) {
        if (!stream->wait_pop(ev, std::chrono::milliseconds(100))) continue;
        if (ev.kind == event_kind::failed) return fail(ev.error);
        if (ev.kind == event_kind::finished) {
            finish_reason = ev.finish_reason;
            break;
        }
        n_out += ev.token_ids.size();
        std::fwrite(ev.text.data(), 1, ev.text.size(), stdout);
        std::fflush(stdout);
    }
    std::fputc('\n', stdout);
    std::fflush(stdout);
    const request_metrics rm = stream->metrics();
    const double ttft_ms = rm.ttft_ms();
    const double decode_s = n_out > 1 && rm.token_times_us.size() >= n_out
                                ? double(rm.token_times_us[n_out - 1] - rm.token_times_us[0]) / 1e6
                                : 0.0;
    std::fprintf(stderr,
                 "[%s] prompt %zu tokens, prefill %.1f tok/s | TTFT %.1f ms | %zu tokens, decode %.1f tok/s | "
                 "finish: %s | seed %llu\n",
                 backend_name.c_str(), prompt.size(), ttft_ms > 0 ? double(prompt.size()) / (ttft_ms / 1000.0) : 0.0,
                 ttft_ms, n_out, decode_s > 0 ? double(n_out - 1) / decode_s : 0.0, finish_reason.c_str(),
                 (unsigned long long)rm.seed);
    return 0;
}

} // namespace es::cli
