// Binds the tensors of a weight_store to the roles the forward pass needs, following the
// hub's tensor names (see ARCHITECTURE.md). Every required tensor must be present with the
// expected shape ([out, in] for linears) and a float dtype; "model.mtp_*" tensors are skipped;
// other unexpected tensors are reported as warnings.
#pragma once

#include "engine/model/model_config.h"
#include "engine/model/safetensors.h"

#include <string>
#include <vector>

namespace es {

struct layer_tensors {
    const tensor_view *attn_norm = nullptr;   // [n_embd]
    const tensor_view *ffn_norm = nullptr;    // [n_embd]
    const tensor_view *wq = nullptr;          // [n_head*head_dim, n_embd]
    const tensor_view *wk = nullptr;          // [n_head_kv*head_dim, n_embd]
    const tensor_view *wv = nullptr;          // [n_head_kv*head_dim, n_embd]
    const tensor_view *wo = nullptr;          // [n_embd, n_head*head_dim]
    bool is_moe = false;
    // dense MLP
    const tensor_view *ffn_gate = nullptr;    // [n_ff, n_embd]
    const tensor_view *ffn_up = nullptr;      // [n_ff, n_embd]
    const tensor_view *ffn_down = nullptr;    // [n_embd, n_ff]
    // MoE
    const tensor_view *ffn_gate_inp = nullptr;      // router [n_expert, n_embd], f32 or bf16
    const tensor_view *ffn_exp_probs_b = nullptr;   // e_score_correction_bias [1, n_expert] (or [n_expert])
    std::vector<const tensor_view *> ffn_gate_exps; // n_expert × [n_ff_exp, n_embd]
    std::vector<const tensor_view *> ffn_up_exps;   // n_expert × [n_ff_exp, n_embd]
    std::vector<const tensor_view *> ffn_down_exps; // n_expert × [n_embd, n_ff_exp]
    const tensor_view *ffn_gate_shexp = nullptr;    // [n_ff_exp*n_expert_shared, n_embd] when shared experts
    const tensor_view *ffn_up_shexp = nullptr;
    const tensor_view *ffn_down_shexp = nullptr;    // [n_embd, n_ff_exp*n_expert_shared]
};

struct model_tensors {
    const tensor_view *tok_embd = nullptr;     // [n_vocab, n_embd]
    const tensor_view *output_norm = nullptr;  // [n_embd]
    const tensor_view *output = nullptr;       // lm_head [n_vocab, n_embd]; == tok_embd when tied
    std::vector<layer_tensors> layers;
    std::vector<std::string> warnings;         // unexpected tensors, etc.
};

result<model_tensors> bind_model_tensors(const model_config &cfg, const weight_store &store);

} // namespace es
