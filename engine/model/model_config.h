// config.json of ERNIE-4.5 checkpoints (Ernie4_5ForCausalLM / Ernie4_5_ForCausalLM dense and
// Ernie4_5_MoeForCausalLM), with HF transformers' defaults where keys are absent, and
// validation that refuses inconsistent or absurd configs before anything is allocated.
#pragma once

#include "engine/core/status.h"

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace es {

enum class model_arch { dense, moe };

struct model_config {
    model_arch arch = model_arch::dense;
    std::string arch_name;          // architectures[0] as written
    int64_t n_vocab = 0;            // vocab_size
    int64_t n_embd = 0;             // hidden_size
    int64_t n_layer = 0;            // num_hidden_layers
    int64_t n_head = 0;             // num_attention_heads
    int64_t n_head_kv = 0;          // num_key_value_heads
    int64_t head_dim = 0;
    int64_t n_ff = 0;               // intermediate_size (dense MLP)
    int64_t n_ctx_train = 0;        // max_position_embeddings
    double rope_theta = 500000.0;
    double rms_eps = 1e-5;
    bool tie_word_embeddings = true;

    // MoE (arch == moe)
    int64_t n_expert = 0;           // moe_num_experts
    int64_t n_expert_used = 0;      // moe_k
    int64_t n_ff_exp = 0;           // moe_intermediate_size
    int64_t n_expert_shared = 0;    // moe_num_shared_experts
    int64_t moe_layer_start = 0;    // moe_layer_start_index
    int64_t moe_layer_end = 0;      // moe_layer_end_index, -1 resolved to n_layer - 1
    int64_t moe_layer_interval = 1;
    double moe_norm_min = 1e-12;

    int32_t bos_id = 1;
    std::vector<int32_t> eos_ids{2}; // eos_token_id (int or list)
    int32_t pad_id = 0;

    bool is_moe_layer(int64_t il) const;
    int64_t n_moe_layers() const;
    int64_t q_dim() const { return n_head * head_dim; }
    int64_t kv_dim() const { return n_head_kv * head_dim; }

    // Parameter counts and sizes (weights only; the head counted once when tied).
    int64_t n_params() const;
    int64_t n_params_active() const;    // per token: routed experts counted n_expert_used times
    int64_t kv_bytes_per_token(size_t elem_bytes) const; // K and V, all layers
};

// Parses and validates. Errors name config.json and the key: "config.json: key
// 'num_attention_heads' (20) is not divisible by 'num_key_value_heads' (3)".
result<model_config> parse_model_config(const std::string &json_text, const std::string &file_name = "config.json");
result<model_config> load_model_config(const std::filesystem::path &model_dir);

// Checks a config built in code (bench shapes); the same rules as for parsed files.
status validate_model_config(const model_config &cfg);

// Real shapes for benchmarks without weights and the download catalogue's figures:
// "ernie-4.5-0.3b", "ernie-4.5-21b-a3b", "ernie-4.5-300b-a47b".
result<model_config> model_config_for_shape(const std::string &shape_name);

} // namespace es
