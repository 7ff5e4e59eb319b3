// The ERNIE-4.5 checkpoint catalogue and the will-it-fit verdicts (model_catalogue.h).
#include "app/models/model_catalogue.h"

namespace es::models {

namespace {

template <typename Estimate>
std::vector<fit_verdict> verdicts(const engine_params &base, Estimate estimate) {
    std::vector<fit_verdict> out;
    for (const weight_precision precision : {weight_precision::bf16, weight_precision::fp8}) {
        engine_params p = base;
        p.load.precision = precision;
        p.load.emulate_precision_on_cpu = true;
        fit_verdict v;
        v.precision = precision == weight_precision::fp8 ? "FP8" : "BF16";
        auto e = estimate(p);
        if (e) {
            v.ok = true;
            v.fits = e->fits;
            v.estimate = *e;
            v.summary = e->summary;
        } else {
            v.summary = e.message();
        }
        out.push_back(std::move(v));
    }
    return out;
}

} // namespace

uint64_t hub_checkpoint_bytes(const model_config &c) {
    // Every parameter in BF16, then the routers' two extra bytes a weight (F32) and their bias.
    const uint64_t moe_layers = uint64_t(c.n_moe_layers());
    return uint64_t(c.n_params()) * 2 + moe_layers * uint64_t(c.n_expert) * (uint64_t(c.n_embd) * 2 + 4);
}

std::vector<catalogue_entry> ernie_catalogue() {
    struct row {
        const char *repo, *shape;
        bool base, multi_gpu;
    };
    const row rows[] = {
        {"baidu/ERNIE-4.5-0.3B-PT", "ernie-4.5-0.3b", false, false},
        {"baidu/ERNIE-4.5-0.3B-Base-PT", "ernie-4.5-0.3b", true, false},
        {"baidu/ERNIE-4.5-21B-A3B-PT", "ernie-4.5-21b-a3b", false, false},
        {"baidu/ERNIE-4.5-21B-A3B-Base-PT", "ernie-4.5-21b-a3b", true, false},
        {"baidu/ERNIE-4.5-300B-A47B-PT", "ernie-4.5-300b-a47b", false, true},
    };
    std::vector<catalogue_entry> out;
    for (const row &r : rows) {
        auto c = model_config_for_shape(r.shape);
        if (!c) continue; // the shapes are built in and valid
        catalogue_entry e;
        e.repo_id = r.repo;
        e.config = *c;
        e.kind = c->arch == model_arch::moe ? "MoE" : "dense";
        e.base = r.base;
        e.multi_gpu = r.multi_gpu;
        e.params = c->n_params();
        e.active_params = c->n_params_active();
        e.download_bytes = hub_checkpoint_bytes(*c);
        out.push_back(std::move(e));
    }
    return out;
}

std::vector<fit_verdict> fit_at_each_precision(const model_config &c, const engine_params &base) {
    return verdicts(base, [&](const engine_params &p) { return engine::estimate_memory(c, p); });
}

std::vector<fit_verdict> fit_at_each_precision(const std::filesystem::path &dir, const engine_params &base) {
    return verdicts(base, [&](const engine_params &p) { return engine::estimate_memory(dir, p); });
}

} // namespace es::models
