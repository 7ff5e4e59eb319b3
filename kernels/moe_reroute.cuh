// moe_reroute: the MoE router's selection again, from its logits, under each token's routing rule
// (an expert intervention as it applies to one layer: engine/backend/routing_intervention.h).
// For token t under rule r = token_rule[t]:
//   logits of the rule's disabled experts → −∞;  p = softmax(logits) (the disabled at 0);
//   score = p + bias_scale · bias (the disabled never selected);
//   ids = the rule's forced experts in their order, then the best k − n_forced others by score
//         (ties → the lower id);  weights[j] = p[ids[j]] / max(Σ_j p[ids[j]], norm_min);
//   places k … K − 1 (K: the step's widest k): the token's first id with weight 0, so every kernel
//         after it keeps its fixed K places and the padding adds exactly nothing;
//   margin = the last free choice's score − the best score left out (NaN where every place was
//         forced or no expert was left out), as the CPU backend's routing record.
// A rule of the model's k, no forced or disabled expert and bias_scale 1 selects what moe_router
// selects. The CPU backend's router is the reference (moe_reroute_ref: the same rules).
#pragma once

#include "kernels/kernel_common.h"

namespace es {

// One rule's record in `rules`: moe_reroute_rule_words(E) int32 words —
//   [0] k, [1] n_forced, [2] bias_scale (float bits), [3] 0,
//   [4, 4 + E) the forced experts (the first n_forced used),
//   then E bytes, 1 where the expert is disabled (padded to whole words).
inline constexpr int64_t moe_reroute_rule_words(int64_t n_expert) { return 4 + n_expert + (n_expert + 3) / 4; }
inline constexpr int64_t moe_reroute_max_experts = 4096;

struct moe_reroute_params {
    const float *logits = nullptr;    // [n_tokens, n_expert] the router's logits (before softmax)
    const float *bias = nullptr;      // [n_expert] e_score_correction_bias
    const int32_t *rules = nullptr;   // [n_rules, moe_reroute_rule_words(n_expert)]
    const int32_t *token_rule = nullptr; // [n_tokens] each token's rule
    int32_t *ids = nullptr;           // [n_tokens, K] in selection order
    float *weights = nullptr;         // [n_tokens, K]
    float *margins = nullptr;         // [n_tokens], or null
    int64_t n_tokens = 0, n_expert = 0, K = 0, n_rules = 0;
    float norm_min = 1e-12f;
};

// Fills one rule record (rule: moe_reroute_rule_words(n_expert) words).
void moe_reroute_fill_rule(int32_t *rule, int64_t n_expert, int32_t k, const int32_t *forced, int32_t n_forced,
                           const uint8_t *disabled, float bias_scale);

void moe_reroute_ref(const moe_reroute_params &p);
#ifdef ES_KERNELS_HAVE_LAUNCHERS
cudaError_t launch_moe_reroute(const moe_reroute_params &p, cudaStream_t stream);
#endif

} // namespace es
