// The ERNIE-4.5 text checkpoints the Download dialog and `expertscope-cli models --available`
// offer, with figures computed from their shapes (model_config_for_shape, the shapes `bench
// --shape` runs), and the will-it-fit verdict at each weight precision for this machine — the
// engine's own estimate (engine::estimate_memory), the one the Model menu asks before a load.
#pragma once

#include "engine/model/model_config.h"
#include "engine/runtime/engine.h"

#include <filesystem>
#include <string>
#include <vector>

namespace es::models {

struct catalogue_entry {
    std::string repo_id; // baidu/ERNIE-4.5-0.3B-PT
    std::string kind;    // "dense" or "MoE"; "base" checkpoints are pre-trained only
    bool base = false;   // -Base-PT: pre-trained, not post-trained for chat
    model_config config;
    int64_t params = 0, active_params = 0;
    uint64_t download_bytes = 0; // the weights as the hub stores them (BF16, routers F32); the
                                 // repo's exact size comes with its file list
    bool multi_gpu = false;      // more than one GPU holds: this engine runs a model on one device
};
std::vector<catalogue_entry> ernie_catalogue();

// Bytes of a checkpoint of this config as the hub stores ERNIE-4.5: BF16 tensors, the MoE
// router's gate and score-correction bias F32.
uint64_t hub_checkpoint_bytes(const model_config &c);

struct fit_verdict {
    std::string precision; // "BF16" or "FP8"
    bool ok = false;       // false: no estimate (summary says why)
    bool fits = false;
    memory_estimate estimate;
    std::string summary; // the estimate's one line, or the reason there is none
};
// The estimate at BF16 and at FP8 weights where the model would load (base's backend choice; on
// the CPU the precision is emulated, as the app runs it there), from a config (a model not yet
// downloaded) or from a model folder.
std::vector<fit_verdict> fit_at_each_precision(const model_config &c, const engine_params &base = {});
std::vector<fit_verdict> fit_at_each_precision(const std::filesystem::path &dir,
                                               const engine_params &base = {});

} // namespace es::models
