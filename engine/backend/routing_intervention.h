// Expert interventions: a change to the MoE router's choice that a request carries (the expert
// lab). Identical on every backend; L is the decoder layer's index in the checkpoint
// (`model.layers.L`, from 0), E the routed expert's index.
//  - A disabled expert's router logit is −∞: its probability is 0, the others' softmax is taken
//    without it, and it is never selected, whatever its correction bias.
//  - Forced experts are selected first (in the order given); the remaining k − (number forced)
//    places go to the best of the others by the usual selection score p + s·bias (ties → the
//    lower id), where s is bias_scale (1: the model's bias, 0: none).
//  - The selected experts' weights are their softmax probabilities normalised over the selected
//    set, p / max(Σ p, moe_norm_min), exactly as without an intervention.
//  - top_k > 0 replaces the model's k (moe_k) in every MoE layer.
// An empty intervention changes nothing: the router computes exactly what it computes without one.
#pragma once

#include "engine/core/status.h"
#include "engine/model/model_config.h"

#include <cstdint>
#include <string>
#include <vector>

namespace es {

struct expert_ref {
    int32_t layer = -1; // checkpoint layer index; -1: every MoE layer
    int32_t expert = 0;
    bool operator==(const expert_ref &) const = default;
};

struct routing_intervention {
    std::vector<expert_ref> disabled;
    std::vector<expert_ref> forced;
    int32_t top_k = 0;        // 0: the model's moe_k
    float bias_scale = 1.0f;  // multiplies e_score_correction_bias in the selection score

    bool empty() const { return disabled.empty() && forced.empty() && top_k == 0 && bias_scale == 1.0f; }
    bool operator==(const routing_intervention &) const = default;
};

// "L:E,L:E,*:E" (L a layer index or * for every MoE layer) → expert_refs; an empty text gives
// none. Errors name the item and the option (`what`, e.g. "--disable-experts").
result<std::vector<expert_ref>> parse_expert_refs(const std::string &text, const std::string &what);
// An intervention from its parts as the CLI and the app hold them: the disabled and forced
// experts as parse_expert_refs texts (errors name them as disabled_what / forced_what), k, the
// bias scale. Not yet checked against a model (check_routing_intervention).
result<routing_intervention> make_routing_intervention(const std::string &disabled, const std::string &forced,
                                                       int32_t top_k, float bias_scale,
                                                       const std::string &disabled_what,
                                                       const std::string &forced_what);
// The inverse of parse_expert_refs ("3:5,*:1").
std::string format_expert_refs(const std::vector<expert_ref> &refs);

// Checks an intervention against a model: every layer is a MoE layer, every expert exists, no
// expert is both disabled and forced, k fits the experts left (per layer: forced ≤ k ≤ experts
// not disabled), the bias scale is finite. Errors name the offending item.
status check_routing_intervention(const routing_intervention &iv, const model_config &cfg);

// One line for reports and the CLI: "disable 3:5, *:1; force 2:0; top-k 4; bias × 0.5", or
// "none".
std::string describe_routing_intervention(const routing_intervention &iv);

// The intervention as it applies to one MoE layer.
struct layer_routing {
    std::vector<uint8_t> disabled;  // [n_expert] 1: disabled
    std::vector<int32_t> forced;    // in selection order, no duplicates
    int32_t k = 0;
    float bias_scale = 1.0f;
};
// The view of `iv` in checkpoint layer `layer` of a model with `n_expert` experts and k `moe_k`.
layer_routing routing_for_layer(const routing_intervention &iv, int32_t layer, int64_t n_expert, int64_t moe_k);

} // namespace es
