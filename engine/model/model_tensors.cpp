// Binds hub tensor names (docs ernie45.md "Tensor names") to the roles of model_tensors, checking
// each required tensor's presence, shape ([out, in] for linears) and dtype (F32/F16/BF16) against
// the config. "model.mtp_*" / "mtp*" (multi-token prediction) are skipped; any other tensor
// left unbound becomes a warning, never an error.
#include "engine/model/model_tensors.h"

#include <set>

namespace es {

namespace {

[[noreturn]] void fail(const std::string &msg) { throw load_error(msg); }

constexpr size_t k_max_listed_warnings = 20;

std::string shape_str(const std::vector<int64_t> &s) {
    tensor_view t;
    t.shape = s;
    return t.shape_str();
}

class binder {
public:
    explicit binder(const weight_store &store) : m_store(store) {}

    // A required tensor with one of the accepted shapes; `what` explains the layout in messages.
    const tensor_view *need(const std::string &name, const std::vector<std::vector<int64_t>> &shapes,
                            const char *what) {
        const tensor_view *t = m_store.find(name);
        if (!t) fail(m_store.source() + ": missing tensor '" + name + "'");
        check(*t, shapes, what);
        m_used.insert(name);
        return t;
    }

    void check(const tensor_view &t, const std::vector<std::vector<int64_t>> &shapes,
               const char *what) const {
        bool shape_ok = false;
        for (const auto &s : shapes) shape_ok = shape_ok || t.shape == s;
        if (!shape_ok) {
            std::string expected = shape_str(shapes[0]);
            for (size_t i = 1; i < shapes.size(); ++i) expected += " or " + shape_str(shapes[i]);
            fail(t.file + ": tensor '" + t.name + "' has shape " + t.shape_str() + ", expected " + expected +
                 " (" + what + ")");
        }
        switch (t.type) {
        case dtype::f32:
        case dtype::f16:
        case dtype::bf16:
            break;
        case dtype::f8_e4m3:
        case dtype::f8_e5m2:
            fail(t.file + ": tensor '" + t.name + "' has dtype " + std::string(dtype_name(t.type)) +
                 "; FP8 weight files are not supported yet (expected F32, F16 or BF16)");
        }
    }

    void mark_used(const std::string &name) { m_used.insert(name); }
    bool used(const std::string &name) const { return m_used.count(name) != 0; }

private:
    const weight_store &m_store;
    std::set<std::string> m_used;
};

bool is_mtp(const std::string &name) { return name.rfind("model.mtp", 0) == 0 || name.rfind("mtp", 0) == 0; }

model_tensors bind_impl(const model_config &cfg, const weight_store &store) {
    binder b(store);
    model_tensors mt;
    const int64_t H = cfg.n_embd, V = cfg.n_vocab;
    const char *lin = "[out, in]";
    const char *vec = "[n_embd]";

    mt.tok_embd = b.need("model.embed_tokens.weight", {{V, H}}, "[vocab, hidden]");
    mt.output_norm = b.need("model.norm.weight", {{H}}, vec);
    if (cfg.tie_word_embeddings) {
        mt.output = mt.tok_embd;
        if (store.find("lm_head.weight")) {
            b.mark_used("lm_head.weight");
            mt.warnings.push_back(
                "lm_head.weight is present but tie_word_embeddings is true; the output head "
                "uses model.embed_tokens.weight (as transformers does)");
        }
    } else {
        mt.output = b.need("lm_head.weight", {{V, H}}, "[vocab, hidden]");
    }

    mt.layers.resize(size_t(cfg.n_layer));
    for (int64_t il = 0; il < cfg.n_layer; ++il) {
        layer_tensors &L = mt.layers[size_t(il)];
        const std::string p = "model.layers." + std::to_string(il) + ".";
        L.attn_norm = b.need(p + "input_layernorm.weight", {{H}}, vec);
        L.ffn_norm = b.need(p + "post_attention_layernorm.weight", {{H}}, vec);
        L.wq = b.need(p + "self_attn.q_proj.weight", {{cfg.q_dim(), H}}, lin);
        L.wk = b.need(p + "self_attn.k_proj.weight", {{cfg.kv_dim(), H}}, lin);
        L.wv = b.need(p + "self_attn.v_proj.weight", {{cfg.kv_dim(), H}}, lin);
        L.wo = b.need(p + "self_attn.o_proj.weight", {{H, cfg.q_dim()}}, lin);
        L.is_moe = cfg.is_moe_layer(il);
        if (!L.is_moe) {
            L.ffn_gate = b.need(p + "mlp.gate_proj.weight", {{cfg.n_ff, H}}, lin);
            L.ffn_up = b.need(p + "mlp.up_proj.weight", {{cfg.n_ff, H}}, lin);
            L.ffn_down = b.need(p + "mlp.down_proj.weight", {{H, cfg.n_ff}}, lin);
            continue;
        }
        const int64_t E = cfg.n_expert, F = cfg.n_ff_exp;
        L.ffn_gate_inp = b.need(p + "mlp.gate.weight", {{E, H}}, "router [n_expert, n_embd]");
        L.ffn_exp_probs_b =
            b.need(p + "mlp.moe_statics.e_score_correction_bias", {{1, E}, {E}}, "one bias per expert");
        L.ffn_gate_exps.resize(size_t(E));
        L.ffn_up_exps.resize(size_t(E));
        L.ffn_down_exps.resize(size_t(E));
        for (int64_t e = 0; e < E; ++e) {
            const std::string q = p + "mlp.experts." + std::to_string(e) + ".";
            L.ffn_gate_exps[size_t(e)] = b.need(q + "gate_proj.weight", {{F, H}}, lin);
            L.ffn_up_exps[size_t(e)] = b.need(q + "up_proj.weight", {{F, H}}, lin);
            L.ffn_down_exps[size_t(e)] = b.need(q + "down_proj.weight", {{H, F}}, lin);
        }
        if (cfg.n_expert_shared > 0) {
            const int64_t S = F * cfg.n_expert_shared;
            L.ffn_gate_shexp = b.need(p + "mlp.shared_experts.gate_proj.weight", {{S, H}}, lin);
            L.ffn_up_shexp = b.need(p + "mlp.shared_experts.up_proj.weight", {{S, H}}, lin);
            L.ffn_down_shexp = b.need(p + "mlp.shared_experts.down_proj.weight", {{H, S}}, lin);
        }
    }

    size_t n_unexpected = 0;
    for (const auto &[name, t] : store.all()) {
        if (b.used(name) || is_mtp(name)) continue;
        if (++n_unexpected <= k_max_listed_warnings)
            mt.warnings.push_back(t->file + ": unexpected tensor '" + name + "' " + t->shape_str() +
                                  " (ignored)");
    }
    if (n_unexpected > k_max_listed_warnings)
        mt.warnings.push_back("... and " + std::to_string(n_unexpected - k_max_listed_warnings) +
                              " more unexpected tensors (ignored)");
    return mt;
}

} // namespace

result<model_tensors> bind_model_tensors(const model_config &cfg, const weight_store &store) {
    return catch_errors([&]() -> model_tensors { return bind_impl(cfg, store); });
}

} // namespace es
