// load_model(): config → weight files → tensor binding → backend → tokenizer. Every failure is
// an es::error that names the file, tensor or key.
#include "engine/runtime/model.h"

#include "engine/cpu/cpu_backend.h"
#include "engine/cuda/cuda_loader.h"
#include "engine/cuda/cuda_module_abi.h"
#include "engine/model/model_tensors.h"
#include "engine/model/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>

namespace es {

namespace {

// The CUDA module's table when the CUDA backend is to be used; null for the CPU (with the reason
// in *note when `automatic` fell back); an error naming the reason when `cuda` cannot be had.
result<const es_cuda_module_v1 *> cuda_table_for(const model_load_params &p, std::string *note) {
    // An FP8 KV cache is the CUDA backend's (the CPU backend keeps fp32 KV): asked for, it is not
    // dropped silently, since the KV budget and the numerics were chosen for it.
    const bool kv_fp8 = p.kv_cache == kv_cache_dtype::fp8;
    if (p.kind == backend_kind::cpu) {
        if (kv_fp8)
            return error{
                "an FP8 KV cache (--kv-cache fp8) needs the CUDA backend; the CPU backend keeps fp32 KV"};
        return nullptr;
    }
    const cuda_status_info &st = cuda_status();
    if (st.available) return cuda_module();
    if (p.kind == backend_kind::cuda) return error{"the CUDA backend cannot run here: " + st.reason};
    if (kv_fp8)
        return error{"an FP8 KV cache (--kv-cache fp8) needs the CUDA backend, which cannot run here: " +
                     st.reason};
    if (note) *note = "CUDA not used: " + st.reason;
    return nullptr;
}

cuda_backend_params cuda_params_from(const model_load_params &p, const std::function<void(float)> &progress) {
    cuda_backend_params cp;
    cp.precision = p.precision;
    cp.activations = p.activations;
    cp.fp8 = p.fp8;
    cp.kv_cache = p.kv_cache;
    cp.on_progress = progress;
    return cp;
}

} // namespace

result<sampling_params> load_generation_config(const std::filesystem::path &dir, const model_config &cfg) {
    sampling_params sp;
    sp.temperature = 0.8f;
    sp.top_p = 0.8f;
    sp.repetition_penalty = 1.0f;
    sp.stop_ids = cfg.eos_ids;
    const auto path = dir / "generation_config.json";
    std::ifstream f(path);
    if (!f) return sp;
    std::stringstream ss;
    ss << f.rdbuf();
    auto j = nlohmann::json::parse(ss.str(), nullptr, false);
    if (j.is_discarded() || !j.is_object()) return error{path.string() + ": not a JSON object"};
    auto num = [&](const char *key, float &dst) -> status {
        if (!j.contains(key) || j[key].is_null()) return ok_status();
        if (!j[key].is_number() || !(std::fabs(j[key].get<double>()) <= std::numeric_limits<float>::max()))
            return error{path.string() + ": key '" + key + "' must be a number"};
        dst = j[key].get<float>();
        return ok_status();
    };
    for (auto [k, d] : {std::pair{"temperature", &sp.temperature}, {"top_p", &sp.top_p},
                        {"repetition_penalty", &sp.repetition_penalty}}) {
        if (auto s = num(k, *d); !s) return s.err();
    }
    // Integers are taken only where they fit 32 bits (a wider one would wrap into another id).
    auto int32_of = [](const nlohmann::json &v) -> std::optional<int32_t> {
        if (!v.is_number_integer()) return std::nullopt;
        const int64_t x = v.is_number_unsigned() ? int64_t(std::min<uint64_t>(v.get<uint64_t>(), INT64_MAX))
                                                 : v.get<int64_t>();
        if (x < INT32_MIN || x > INT32_MAX) return std::nullopt;
        return int32_t(x);
    };
    if (j.contains("top_k") && j["top_k"].is_number_integer()) {
        const auto k = int32_of(j["top_k"]);
        if (!k) return error{path.string() + ": key 'top_k' is " + j["top_k"].dump() + ", beyond 32 bits"};
        sp.top_k = *k;
    }
    if (j.contains("eos_token_id")) {
        const auto &e = j["eos_token_id"];
        std::vector<int32_t> ids;
        auto add = [&](const nlohmann::json &x) -> status {
            if (!x.is_number_integer()) return ok_status(); // not an id: ignored, as before
            const auto id = int32_of(x);
            if (!id || *id < 0)
                return error{path.string() + ": 'eos_token_id' holds " + x.dump() + ", not a token id"};
            ids.push_back(*id);
            return ok_status();
        };
        if (e.is_array()) {
            for (const auto &x : e)
                if (auto s = add(x); !s) return s.err();
        } else if (auto s = add(e); !s) {
            return s.err();
        }
        for (int32_t id : ids)
            if (std::find(sp.stop_ids.begin(), sp.stop_ids.end(), id) == sp.stop_ids.end()) sp.stop_ids.push_back(id);
    }
    if (auto msg = sp.validate(); !msg.empty()) return error{path.string() + ": " + msg};
    return sp;
}

status check_model_folder(const std::filesystem::path &dir, const model_load_params &p) {
    if (!std::filesystem::is_directory(dir)) return error{"model folder not found: " + dir.string()};
    auto cfg = load_model_config(dir);
    if (!cfg) return cfg.err();
    auto store = weight_store::open_dir(dir);
    if (!store) return store.err();
    auto bound = bind_model_tensors(*cfg, **store);
    if (!bound) return bound.err();
    std::string note;
    if (auto cuda = cuda_table_for(p, &note); !cuda) return cuda.err();
    if (auto gen = load_generation_config(dir, *cfg); !gen) return gen.err();
    if (p.need_tokenizer) {
        auto tok = tokenizer::load(dir);
        if (!tok) return tok.err();
        if ((*tok)->n_vocab() > cfg->n_vocab)
            return error{"tokenizer in " + dir.string() + " has " + std::to_string((*tok)->n_vocab()) +
                         " tokens but config.json's vocab_size is " + std::to_string(cfg->n_vocab)};
    }
    return ok_status();
}

result<std::unique_ptr<model>> load_model(const std::filesystem::path &dir, const model_load_params &p) {
    auto progress = [&](const std::string &stage, float v) {
        if (p.on_progress) p.on_progress(stage, v);
    };
    if (!std::filesystem::is_directory(dir)) return error{"model folder not found: " + dir.string()};
    auto m = std::make_unique<model>();
    m->dir = dir;
    progress("config", 0.0f);
    auto cfg = load_model_config(dir);
    if (!cfg) return cfg.err();
    m->config = *cfg;

    progress("weights", 0.0f);
    auto store = weight_store::open_dir(dir);
    if (!store) return store.err();
    auto bound = bind_model_tensors(m->config, **store);
    if (!bound) return bound.err();
    m->warnings = bound->warnings;

    auto cuda = cuda_table_for(p, &m->backend_note);
    if (!cuda) return cuda.err();
    if (*cuda) {
        auto be = (*cuda)->make_backend(m->config, *bound,
                                        cuda_params_from(p, [&](float v) { progress("weights", v); }));
        if (!be) return be.err();
        m->be = std::move(*be);
    } else {
        cpu_backend_params cp;
        cp.n_threads = p.n_threads;
        if (p.emulate_precision_on_cpu)
            cp.rounding = p.precision == weight_precision::fp8 ? cpu_weight_rounding::fp8_e4m3 : cpu_weight_rounding::bf16;
        cp.on_progress = [&](float v) { progress("weights", v); };
        auto be = make_cpu_backend(m->config, *bound, cp);
        if (!be) return be.err();
        m->be = std::move(*be);
    }

    auto gen = load_generation_config(dir, m->config);
    if (!gen) return gen.err();
    m->generation_defaults = *gen;

    if (p.need_tokenizer) {
        progress("tokenizer", 0.0f);
        auto tok = tokenizer::load(dir);
        if (!tok) return tok.err();
        m->tok = std::move(*tok);
        if (m->tok->n_vocab() > m->config.n_vocab)
            return error{"tokenizer in " + dir.string() + " has " + std::to_string(m->tok->n_vocab()) +
                         " tokens but config.json's vocab_size is " + std::to_string(m->config.n_vocab)};
        for (int32_t id : m->tok->stop_ids())
            if (std::find(m->generation_defaults.stop_ids.begin(), m->generation_defaults.stop_ids.end(), id) ==
                m->generation_defaults.stop_ids.end())
                m->generation_defaults.stop_ids.push_back(id);
    }
    progress("done", 1.0f);
    return m;
}

result<std::unique_ptr<model>> make_random_model(const model_config &cfg, uint64_t seed, const model_load_params &p) {
    if (auto s = validate_model_config(cfg); !s) return s.err();
    auto m = std::make_unique<model>();
    auto cuda = cuda_table_for(p, &m->backend_note);
    if (!cuda) return cuda.err();
    m->config = cfg;
    if (*cuda) {
        auto be = (*cuda)->make_backend_random(cfg, seed, cuda_params_from(p, [&](float v) {
                                                   if (p.on_progress) p.on_progress("weights", v);
                                               }));
        if (!be) return be.err();
        m->be = std::move(*be);
    } else {
        cpu_backend_params cp;
        cp.n_threads = p.n_threads;
        if (p.on_progress) cp.on_progress = [&](float v) { p.on_progress("weights", v); };
        auto be = make_cpu_backend_random(cfg, seed, cp);
        if (!be) return be.err();
        m->be = std::move(*be);
    }
    m->generation_defaults.stop_ids = cfg.eos_ids;
    return m;
}

} // namespace es
