// One loaded model: its config, tokenizer (optional), generation defaults and a backend holding
// the weights. load_model() is the single entry point the CLI, the runtime and the app use; it
// reads the checkpoint (model/) and chooses and builds the backend (cpu/, or cuda/'s module),
// which is why it sits above both backends.
#pragma once

#include "engine/backend/backend.h"
#include "engine/backend/precision.h"
#include "engine/model/model_config.h"
#include "engine/model/tokenizer.h"
#include "engine/runtime/sampler.h"

#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace es {

// automatic: the CUDA backend when its module loads and a usable GPU is present, else the CPU (the
// reason kept in model::backend_note); cuda: an error naming the reason when it cannot run here.
enum class backend_kind { cpu, cuda, automatic };

struct model_load_params {
    backend_kind kind = backend_kind::cpu;
    weight_precision precision = weight_precision::bf16;
    activation_format activations = activation_format::e4m3; // CUDA, FP8 weights only (see above)
    fp8_policy fp8;                                          // CUDA, FP8 weights only
    kv_cache_dtype kv_cache = kv_cache_dtype::bf16;          // CUDA only (see above)
    // The CPU backend keeps the checkpoint's exact values unless asked to emulate `precision`
    // (weights rounded as the GPU stores them; see cpu_weight_rounding).
    bool emulate_precision_on_cpu = false;
    int n_threads = 0;
    bool need_tokenizer = true;                             // logits need only config + weights
    std::function<void(const std::string &stage, float progress)> on_progress;
};

struct model {
    std::filesystem::path dir;
    model_config config;
    // null when not requested or absent; shared (read-only) with whoever counts prompts for it
    std::shared_ptr<const tokenizer> tok;
    sampling_params generation_defaults; // from generation_config.json (HF defaults otherwise)
    std::unique_ptr<backend> be;
    std::vector<std::string> warnings;
    std::string backend_note;            // "CUDA not used: <reason>" when automatic fell back to the CPU
};

result<std::unique_ptr<model>> load_model(const std::filesystem::path &dir, const model_load_params &p = {});

// Everything load_model checks before it builds the backend, without building it: config.json,
// the weights' files and headers against the config, generation_config.json, the tokenizer (when
// p.need_tokenizer) and whether the backend p.kind asks for can run here. Reads headers only, so
// a caller can reject a folder before it asks questions or unloads the model it has.
status check_model_folder(const std::filesystem::path &dir, const model_load_params &p = {});

// A model of the given shape with random weights and no tokenizer (benchmarks of real shapes).
result<std::unique_ptr<model>> make_random_model(const model_config &cfg, uint64_t seed, const model_load_params &p = {});

// generation_config.json → sampling defaults (temperature, top_p, top_k, repetition_penalty,
// eos ids). Absent file: HF ERNIE defaults (0.8 / 0.8 / 1.0).
result<sampling_params> load_generation_config(const std::filesystem::path &dir, const model_config &cfg);

} // namespace es
