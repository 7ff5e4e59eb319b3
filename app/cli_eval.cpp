// expertscope-cli eval: what a weight precision costs, measured. The same model is loaded twice —
// a baseline (the checkpoint's exact values on the CPU, or BF16/FP8 weights on the chosen
// backend) and the precision under test — and both compute teacher-forced logits and router
// decisions over the same tokens (a text file's, or seeded random ids). Reported: KL divergence of
// the next-token distributions (baseline ‖ test; mean, p99, max), top-1 agreement, logits NMSE,
// and per MoE layer the overlap of the routed expert sets (|S_base ∩ S_test| / k) and how often
// the sets are identical — the article's "FP8 barely changes routing" as figures.
#include "cli_commands.h"

#include "engine/backend/backend.h"
#include "engine/core/compare.h"
#include "engine/runtime/model.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

namespace es::cli {

namespace {

struct side {
    std::string label;
    std::unique_ptr<model> m;
};

// test_side: the side under test, which takes --kv-cache (the baseline keeps BF16 KV).
result<side> load_side(const std::string &dir, const std::string &precision, const common_opts &o,
                       bool need_tok, bool test_side) {
    model_load_params lp;
    lp.need_tokenizer = need_tok;
    lp.n_threads = o.threads;
    side s;
    if (precision == "exact") { // the reference: the checkpoint's values, fp32, on the CPU
        lp.kind = backend_kind::cpu;
        s.label = "exact (cpu, fp32)";
    } else {
        lp.kind = o.backend == "cuda" ? backend_kind::cuda : o.backend == "auto" ? backend_kind::automatic : backend_kind::cpu;
        lp.precision = precision == "fp8" ? weight_precision::fp8 : weight_precision::bf16;
        lp.activations = to_activation_format(o.activations);
        lp.fp8 = to_fp8_policy(o);
        lp.emulate_precision_on_cpu = true;
        if (test_side) lp.kv_cache = to_kv_cache_dtype(o.kv_cache);
        if (!test_side) lp.fp8.scales = scale_layout::channel; // as the KV cache: the tested side's alone
        if (!lp.fp8.is_default() && lp.kind == backend_kind::cpu)
            return error{"--fp8-head / --bf16-attn-out / --fp8-scales block128: the CPU's emulation rounds "
                         "the default policy's linears only; use --backend cuda"};
    }
    auto m = load_model(dir, lp);
    if (!m) return m.err();
    if (s.label.empty())
        s.label = precision +
                  (lp.precision == weight_precision::fp8 && lp.fp8.scales == scale_layout::block128
                       ? ", block128 scales"
                       : "") +
                  (lp.kv_cache == kv_cache_dtype::fp8 ? ", fp8 KV" : "") + " (" + (*m)->be->name() + ")";
    s.m = std::move(*m);
    return s;
}

} // namespace

int cmd_eval(const eval_opts &e, const common_opts &o) {
    if (e.precision == e.baseline && o.kv_cache != "fp8" &&
        !(e.precision == "fp8" && o.fp8_scales == "block128"))
        return fail("eval: --precision and --baseline are the same (" + e.precision +
                    "); with --kv-cache fp8 that measures the FP8 KV cache alone, with fp8 and --fp8-scales "
                    "block128 the block scales against per-channel ones");
    const bool from_text = !e.text_file.empty();
    auto base = load_side(e.model_dir, e.baseline, o, from_text, false);
    if (!base) return fail(base.message());
    auto test = load_side(e.model_dir, e.precision, o, false, true);
    if (!test) return fail(test.message());
    const model_config &c = base->m->config;

    // The tokens: the text's (split into windows of --ctx) or seeded random ids.
    std::vector<std::vector<int32_t>> windows;
    const int64_t ctx = std::min<int64_t>(e.ctx, c.n_ctx_train);
    if (from_text) {
        if (!base->m->tok) return fail("eval: --text needs the model's tokenizer (" + e.model_dir + " has none)");
        std::ifstream f(e.text_file);
        if (!f) return fail("eval: cannot read --text " + e.text_file);
        std::stringstream ss;
        ss << f.rdbuf();
        std::vector<int32_t> ids = base->m->tok->encode(ss.str());
        if (ids.size() < 2) return fail("eval: " + e.text_file + " holds fewer than 2 tokens");
        for (size_t i = 0; i < ids.size() && int64_t(windows.size()) < e.windows; i += size_t(ctx))
            windows.emplace_back(ids.begin() + long(i), ids.begin() + long(std::min(ids.size(), i + size_t(ctx))));
    } else {
        std::mt19937_64 rng(e.seed);
        std::uniform_int_distribution<int32_t> pick(0, int32_t(c.n_vocab - 1));
        for (int64_t w = 0; w < e.windows; ++w) {
            std::vector<int32_t> ids(static_cast<size_t>(ctx));
            for (auto &id : ids) id = pick(rng);
            windows.push_back(std::move(ids));
        }
    }

    std::vector<double> kl;
    int64_t top1_same = 0, n_pos = 0;
    nmse_accumulator logits_nmse; // the test side against the baseline
    std::vector<int32_t> moe_layers;
    std::vector<double> overlap_sum, identical;
    int64_t k = 0, n_route = 0;
    for (const auto &ids : windows) {
        forward_output fb, ft;
        if (auto s = forward_sequence(*base->m->be, ids, fb); !s) return fail("eval: baseline: " + s.message());
        if (auto s = forward_sequence(*test->m->be, ids, ft); !s) return fail("eval: " + e.precision + ": " + s.message());
        const int64_t V = c.n_vocab, n = int64_t(ids.size());
        for (int64_t t = 0; t < n; ++t) {
            const float *a = &fb.logits[size_t(t * V)], *b = &ft.logits[size_t(t * V)];
            const std::span<const float> ra(a, size_t(V)), rb(b, size_t(V));
            kl.push_back(kl_divergence_logits(ra, rb));
            top1_same += std::max_element(a, a + V) - a == std::max_element(b, b + V) - b;
            logits_nmse.add(rb, ra);
        }
        n_pos += n;
        // Router: the same slots on both sides.
        const routing_record &rb = fb.routing, &rt = ft.routing;
        if (!rb.moe_layers.empty() && rb.moe_layers == rt.moe_layers && rb.n_expert_used == rt.n_expert_used) {
            moe_layers = rb.moe_layers;
            k = rb.n_expert_used;
            overlap_sum.resize(moe_layers.size(), 0.0);
            identical.resize(moe_layers.size(), 0.0);
            for (size_t m = 0; m < moe_layers.size(); ++m)
                for (int64_t t = 0; t < n; ++t) {
                    std::vector<int16_t> sa(rb.ids[m].begin() + t * k, rb.ids[m].begin() + (t + 1) * k);
                    std::vector<int16_t> sb(rt.ids[m].begin() + t * k, rt.ids[m].begin() + (t + 1) * k);
                    std::sort(sa.begin(), sa.end());
                    std::sort(sb.begin(), sb.end());
                    std::vector<int16_t> both;
                    std::set_intersection(sa.begin(), sa.end(), sb.begin(), sb.end(), std::back_inserter(both));
                    overlap_sum[m] += double(both.size()) / double(k);
                    identical[m] += sa == sb;
                }
            n_route += n;
        }
    }

    double kl_mean = 0.0;
    for (double d : kl) kl_mean += d;
    kl_mean /= double(std::max<size_t>(kl.size(), 1));
    const double kl_p99 = percentile(kl, 99), kl_max = kl.empty() ? 0.0 : *std::max_element(kl.begin(), kl.end());
    const double top1 = n_pos ? double(top1_same) / double(n_pos) : 0.0;
    const double nmse = logits_nmse.value();

    std::printf("eval: %s\n  baseline  %s\n  test      %s\n  tokens    %lld positions in %zu windows (%s)\n",
                e.model_dir.c_str(), base->label.c_str(), test->label.c_str(), (long long)n_pos, windows.size(),
                from_text ? e.text_file.c_str() : ("random ids, seed " + std::to_string(e.seed)).c_str());
    std::printf("\n| metric | value |\n|---|---|\n");
    std::printf("| KL(baseline ‖ test), mean | %.3e nats |\n| KL p99 | %.3e nats |\n| KL max | %.3e nats |\n", kl_mean,
                kl_p99, kl_max);
    std::printf("| top-1 agreement | %.2f%% |\n| logits NMSE | %.3e |\n", 100.0 * top1, nmse);
    nlohmann::json j;
    j["model"] = e.model_dir;
    j["baseline"] = base->label;
    j["test"] = test->label;
    j["positions"] = n_pos;
    j["kl_mean"] = kl_mean;
    j["kl_p99"] = kl_p99;
    j["kl_max"] = kl_max;
    j["top1_agreement"] = top1;
    j["logits_nmse"] = nmse;
    if (n_route > 0) {
        std::printf("\n| layer | expert-set overlap | identical sets |\n|---|---|---|\n");
        double ov = 0.0, id = 0.0;
        for (size_t m = 0; m < moe_layers.size(); ++m) {
            std::printf("| %d | %.2f%% | %.2f%% |\n", moe_layers[m], 100.0 * overlap_sum[m] / double(n_route),
                        100.0 * identical[m] / double(n_route));
            j["router"].push_back({{"layer", moe_layers[m]},
                                   {"overlap", overlap_sum[m] / double(n_route)},
                                   {"identical", identical[m] / double(n_route)}});
            ov += overlap_sum[m];
            id += identical[m];
        }
        const double denom = double(n_route) * double(moe_layers.size());
        std::printf("| all | %.2f%% | %.2f%% |\n", 100.0 * ov / denom, 100.0 * id / denom);
        j["router_overlap"] = ov / denom;
        j["router_identical"] = id / denom;
    }
    if (!e.out_json.empty()) {
        std::ofstream f(e.out_json);
        f << j.dump(2) << "\n";
        if (!f) return fail("eval: cannot write " + e.out_json);
    }
    return 0;
}

} // namespace es::cli
