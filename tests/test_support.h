// Test helpers for the weight-file layer: an in-test safetensors writer (well-formed files from
// a tensor list, or raw header text for malformed ones) and a tiny ERNIE-4.5 model folder writer
// (config.json + model.safetensors or shards + index) with deterministic random BF16 weights.
// Header-only; tests that include it link nlohmann_json.
#pragma once

#include "engine/core/dtype.h"
#include "engine/model/model_config.h"

#include <QByteArray>
#include <QDir>
#include <QFile>
#include <QString>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace es_test {

using json = nlohmann::json;

struct st_tensor {
    std::string name;
    std::string dtype = "BF16"; // safetensors spelling
    std::vector<int64_t> shape;
    QByteArray data; // raw little-endian bytes
};

inline QByteArray le_u64(uint64_t v) {
    QByteArray b(8, '\0');
    for (int i = 0; i < 8; ++i) b[i] = char((v >> (8 * i)) & 0xff);
    return b;
}

// A file whose header is exactly `header` (any text, valid or not) followed by `data`.
inline QByteArray safetensors_raw(const std::string &header, const QByteArray &data = {}) {
    return le_u64(header.size()) + QByteArray::fromStdString(header) + data;
}

// A well-formed file: tensors laid out back to back in the given order (no alignment padding,
// so later tensors are usually unaligned, as real files may be).
inline QByteArray safetensors_bytes(const std::vector<st_tensor> &tensors,
                                    const std::map<std::string, std::string> &metadata = {}) {
    json header = json::object();
    if (!metadata.empty()) header["__metadata__"] = metadata;
    QByteArray data;
    for (const st_tensor &t : tensors) {
        const int64_t begin = data.size();
        data += t.data;
        header[t.name] = {
            {"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {begin, int64_t(data.size())}}};
    }
    return safetensors_raw(header.dump(), data);
}

inline bool write_file(const QString &path, const QByteArray &bytes) {
    QFile f(path);
    if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate)) return false;
    return f.write(bytes) == bytes.size();
}

inline QByteArray f32_bytes(const std::vector<float> &v) {
    return QByteArray(reinterpret_cast<const char *>(v.data()), qsizetype(v.size() * 4));
}

inline QByteArray u16_bytes(const std::vector<uint16_t> &v) {
    QByteArray b;
    for (uint16_t h : v) {
        b += char(h & 0xff);
        b += char(h >> 8);
    }
    return b;
}

inline int64_t n_elements(const std::vector<int64_t> &shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
}

// Deterministic small random BF16 values in [-0.1, 0.1) (splitmix64).
inline QByteArray random_bf16(int64_t n, uint64_t &state) {
    std::vector<uint16_t> v(static_cast<size_t>(n));
    for (auto &h : v) {
        uint64_t z = (state += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        const float u = float(z >> 40) / float(1ull << 24);
        h = es::f32_to_bf16((u - 0.5f) * 0.2f);
    }
    return u16_bytes(v);
}

// Tiny shapes that exercise everything: head_dim * n_head (64) != hidden (32), GQA 4/2,
// MoE layers 1.. with 4 experts, top-2, one shared expert.
inline json tiny_config(bool moe) {
    json c = {
        {"architectures", {moe ? "Ernie4_5_MoeForCausalLM" : "Ernie4_5ForCausalLM"}},
        {"model_type", moe ? "ernie4_5_moe" : "ernie4_5"},
        {"vocab_size", 64},
        {"hidden_size", 32},
        {"intermediate_size", 48},
        {"num_hidden_layers", moe ? 3 : 2},
        {"num_attention_heads", 4},
        {"num_key_value_heads", 2},
        {"head_dim", 16},
        {"max_position_embeddings", 256},
        {"rms_norm_eps", 1e-5},
        {"rope_theta", 500000.0},
        {"tie_word_embeddings", true},
        {"use_bias", false},
        {"hidden_act", "silu"},
        {"bos_token_id", 1},
        {"eos_token_id", 2},
        {"pad_token_id", 0},
    };
    if (moe) {
        c["moe_num_experts"] = 4;
        c["moe_k"] = 2;
        c["moe_intermediate_size"] = 16;
        c["moe_num_shared_experts"] = 1;
        c["moe_layer_start_index"] = 1;
        c["moe_layer_end_index"] = -1;
        c["moe_layer_interval"] = 1;
    }
    return c;
}

// Every tensor the hub checkpoint of `cfg` holds, with random BF16 data.
inline std::vector<st_tensor> model_tensor_list(const es::model_config &cfg, uint64_t seed = 1) {
    std::vector<st_tensor> out;
    auto add = [&](const std::string &name, std::vector<int64_t> shape, const std::string &dtype = "BF16") {
        st_tensor t{name, dtype, shape, {}};
        if (dtype == "BF16") {
            t.data = random_bf16(n_elements(shape), seed);
        } else {
            t.data = QByteArray(
                qsizetype(n_elements(shape) * int64_t(es::dtype_size(*es::dtype_from_name(dtype)))), '\0');
        }
        out.push_back(std::move(t));
    };
    const int64_t H = cfg.n_embd;
    add("model.embed_tokens.weight", {cfg.n_vocab, H});
    add("model.norm.weight", {H});
    if (!cfg.tie_word_embeddings) add("lm_head.weight", {cfg.n_vocab, H});
    for (int64_t il = 0; il < cfg.n_layer; ++il) {
        const std::string p = "model.layers." + std::to_string(il) + ".";
        add(p + "input_layernorm.weight", {H});
        add(p + "post_attention_layernorm.weight", {H});
        add(p + "self_attn.q_proj.weight", {cfg.q_dim(), H});
        add(p + "self_attn.k_proj.weight", {cfg.kv_dim(), H});
        add(p + "self_attn.v_proj.weight", {cfg.kv_dim(), H});
        add(p + "self_attn.o_proj.weight", {H, cfg.q_dim()});
        if (!cfg.is_moe_layer(il)) {
            add(p + "mlp.gate_proj.weight", {cfg.n_ff, H});
            add(p + "mlp.up_proj.weight", {cfg.n_ff, H});
            add(p + "mlp.down_proj.weight", {H, cfg.n_ff});
            continue;
        }
        add(p + "mlp.gate.weight", {cfg.n_expert, H}, "F32");
        add(p + "mlp.moe_statics.e_score_correction_bias", {1, cfg.n_expert}, "F32");
        for (int64_t e = 0; e < cfg.n_expert; ++e) {
            const std::string q = p + "mlp.experts." + std::to_string(e) + ".";
            add(q + "gate_proj.weight", {cfg.n_ff_exp, H});
            add(q + "up_proj.weight", {cfg.n_ff_exp, H});
            add(q + "down_proj.weight", {H, cfg.n_ff_exp});
        }
        if (cfg.n_expert_shared > 0) {
            const int64_t S = cfg.n_ff_exp * cfg.n_expert_shared;
            add(p + "mlp.shared_experts.gate_proj.weight", {S, H});
            add(p + "mlp.shared_experts.up_proj.weight", {S, H});
            add(p + "mlp.shared_experts.down_proj.weight", {H, S});
        }
    }
    return out;
}

// Writes config.json and the tensors into dir: model.safetensors when n_shards == 1, else
// model-0000i-of-0000n.safetensors shards (tensors split in order) and the index.
inline bool write_model_dir(const QString &dir, const json &config, const std::vector<st_tensor> &tensors,
                            int n_shards = 1) {
    QDir().mkpath(dir);
    if (!write_file(dir + "/config.json", QByteArray::fromStdString(config.dump(2)))) return false;
    if (n_shards <= 1)
        return write_file(dir + "/model.safetensors", safetensors_bytes(tensors, {{"format", "pt"}}));
    json weight_map = json::object();
    int64_t total = 0;
    const size_t per = (tensors.size() + size_t(n_shards) - 1) / size_t(n_shards);
    for (int s = 0; s < n_shards; ++s) {
        const std::string name = QString("model-%1-of-%2.safetensors")
                                     .arg(s + 1, 5, 10, QChar('0'))
                                     .arg(n_shards, 5, 10, QChar('0'))
                                     .toStdString();
        std::vector<st_tensor> part;
        for (size_t i = size_t(s) * per; i < std::min(tensors.size(), size_t(s + 1) * per); ++i) {
            part.push_back(tensors[i]);
            weight_map[tensors[i].name] = name;
            total += tensors[i].data.size();
        }
        if (!write_file(dir + "/" + QString::fromStdString(name),
                        safetensors_bytes(part, {{"format", "pt"}})))
            return false;
    }
    const json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    return write_file(dir + "/model.safetensors.index.json", QByteArray::fromStdString(index.dump(2)));
}

// A complete tiny model folder for `config` (parsed with the engine's own parser for shapes).
inline bool write_tiny_model(const QString &dir, const json &config, int n_shards = 1, uint64_t seed = 1) {
    auto cfg = es::parse_model_config(config.dump());
    if (!cfg) return false;
    return write_model_dir(dir, config, model_tensor_list(*cfg, seed), n_shards);
}

} // namespace es_test
