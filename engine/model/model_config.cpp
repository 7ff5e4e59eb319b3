// Reads config.json of ERNIE-4.5 checkpoints into model_config with HF transformers' defaults
// (Ernie4_5Config / Ernie4_5_MoeConfig) for absent keys, and validates the result: positive,
// consistent sizes and bounded totals, so nothing is allocated for an absurd or broken config.
// A key that is present with JSON null counts as absent except where HF gives null a meaning
// (num_key_value_heads, head_dim, pad_token_id).
#include "engine/model/model_config.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <sstream>

namespace es {

using json = nlohmann::json;

namespace {

[[noreturn]] void fail(const std::string &msg) { throw load_error(msg); }

// Limits for "absurd" configs, checked before any size is multiplied or allocated.
constexpr int64_t k_max_vocab = 4'000'000;
constexpr int64_t k_max_embd = 65536;
constexpr int64_t k_max_layers = 1024;
constexpr int64_t k_max_heads = 1024;
constexpr int64_t k_max_head_dim = 1024;
constexpr int64_t k_max_ff = 1'000'000;
constexpr int64_t k_max_experts = 4096;
constexpr int64_t k_max_expert_id = 32767; // router ids are stored as int16
constexpr double k_max_params = 2e12;

constexpr const char *k_supported_archs = "Ernie4_5ForCausalLM, Ernie4_5_ForCausalLM, "
                                          "Ernie4_5_MoeForCausalLM; or model_type ernie4_5, ernie4_5_moe";

std::string describe(const json &v) {
    std::string d = v.dump();
    if (d.size() > 40) d = d.substr(0, 37) + "...";
    return std::string(v.type_name()) + " " + d;
}

// Typed access to the top-level keys of config.json with errors that name the key.
class config_reader {
public:
    config_reader(const json &j, std::string file) : m_j(j), m_file(std::move(file)) {}

    [[noreturn]] void bad(const std::string &key, const char *expected) const {
        fail(m_file + ": key '" + key + "' is " + describe(m_j.at(key)) + ", expected " + expected);
    }
    bool present(const std::string &key) const { return m_j.contains(key) && !m_j.at(key).is_null(); }
    bool is_null(const std::string &key) const { return m_j.contains(key) && m_j.at(key).is_null(); }

    std::optional<int64_t> opt_int(const std::string &key) const {
        if (!present(key)) return std::nullopt;
        const json &v = m_j.at(key);
        if (v.is_number_unsigned()) {
            if (v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
                bad(key, "an integer that fits 64 bits");
            return int64_t(v.get<uint64_t>());
        }
        if (!v.is_number_integer()) bad(key, "an integer");
        return v.get<int64_t>();
    }
    int64_t get_int(const std::string &key, int64_t def) const { return opt_int(key).value_or(def); }

    double get_double(const std::string &key, double def) const {
        if (!present(key)) return def;
        const json &v = m_j.at(key);
        if (!v.is_number()) bad(key, "a number");
        return v.get<double>();
    }
    bool get_bool(const std::string &key, bool def) const {
        if (!present(key)) return def;
        const json &v = m_j.at(key);
        if (!v.is_boolean()) bad(key, "true or false");
        return v.get<bool>();
    }
    std::optional<std::string> opt_string(const std::string &key) const {
        if (!present(key)) return std::nullopt;
        const json &v = m_j.at(key);
        if (!v.is_string()) bad(key, "a string");
        return v.get<std::string>();
    }
    const json &at(const std::string &key) const { return m_j.at(key); }
    const std::string &file() const { return m_file; }

private:
    const json &m_j;
    std::string m_file;
};

int32_t to_token_id(const config_reader &r, const std::string &key, int64_t v) {
    if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())
        fail(r.file() + ": key '" + key + "' (" + std::to_string(v) + ") does not fit a 32-bit token id");
    return int32_t(v);
}

// Reads rope_parameters {rope_theta, rope_type} (transformers >= 5) or the legacy top-level
// rope_theta and rope_scaling; only plain RoPE ("default") is implemented.
void read_rope(const config_reader &r, model_config &cfg) {
    const std::string &file = r.file();
    cfg.rope_theta = r.get_double("rope_theta", 500000.0);
    auto check_type = [&](const json &obj, const std::string &key) {
        for (const char *tk : {"rope_type", "type"}) {
            if (!obj.contains(tk) || obj.at(tk).is_null()) continue;
            const json &t = obj.at(tk);
            if (!t.is_string())
                fail(file + ": key '" + key + "." + tk + "' is " + describe(t) + ", expected a string");
            if (t.get<std::string>() != "default")
                fail(file + ": key '" + key + "." + tk + "': rope_type '" + t.get<std::string>() +
                     "' is not supported (only 'default' RoPE is implemented)");
        }
    };
    if (r.present("rope_parameters")) {
        const json &rp = r.at("rope_parameters");
        if (!rp.is_object()) r.bad("rope_parameters", "an object {rope_theta, rope_type}");
        check_type(rp, "rope_parameters");
        if (rp.contains("rope_theta") && !rp.at("rope_theta").is_null()) {
            if (!rp.at("rope_theta").is_number())
                fail(file + ": key 'rope_parameters.rope_theta' is " + describe(rp.at("rope_theta")) +
                     ", expected a number");
            cfg.rope_theta = rp.at("rope_theta").get<double>();
        }
    }
    if (r.present("rope_scaling")) {
        const json &rs = r.at("rope_scaling");
        if (!rs.is_object()) r.bad("rope_scaling", "null or an object");
        check_type(rs, "rope_scaling");
    }
}

model_config parse_impl(const std::string &text, const std::string &file) {
    const json j = json::parse(text, nullptr, false);
    if (j.is_discarded()) fail(file + ": not valid JSON");
    if (!j.is_object()) fail(file + ": expected a JSON object, found " + std::string(j.type_name()));
    const config_reader r(j, file);
    model_config cfg;

    // Architecture: architectures[0], else model_type.
    std::string arch;
    bool from_arch_list = false;
    if (r.present("architectures")) {
        const json &a = r.at("architectures");
        if (!a.is_array()) r.bad("architectures", "a list of strings");
        if (!a.empty()) {
            if (!a[0].is_string())
                fail(file + ": key 'architectures[0]' is " + describe(a[0]) + ", expected a string");
            arch = a[0].get<std::string>();
            from_arch_list = true;
        }
    }
    if (!from_arch_list) {
        auto mt = r.opt_string("model_type");
        if (!mt)
            fail(file + ": has neither 'architectures' nor 'model_type' (supported: " + k_supported_archs +
                 ")");
        arch = *mt;
    }
    if (from_arch_list && (arch == "Ernie4_5ForCausalLM" || arch == "Ernie4_5_ForCausalLM"))
        cfg.arch = model_arch::dense;
    else if (from_arch_list && arch == "Ernie4_5_MoeForCausalLM")
        cfg.arch = model_arch::moe;
    else if (!from_arch_list && arch == "ernie4_5")
        cfg.arch = model_arch::dense;
    else if (!from_arch_list && arch == "ernie4_5_moe")
        cfg.arch = model_arch::moe;
    else
        fail(file + ": unsupported architecture '" + arch + "' (supported: " + k_supported_archs + ")");
    cfg.arch_name = arch;
    const bool moe = cfg.arch == model_arch::moe;

    cfg.n_vocab = r.get_int("vocab_size", 103424);
    cfg.n_embd = r.get_int("hidden_size", moe ? 2560 : 1024);
    cfg.n_ff = r.get_int("intermediate_size", moe ? 12288 : 3072);
    cfg.n_layer = r.get_int("num_hidden_layers", moe ? 28 : 18);
    cfg.n_head = r.get_int("num_attention_heads", moe ? 20 : 16);
    // null means "as many as query heads" (multi-head attention).
    cfg.n_head_kv =
        r.is_null("num_key_value_heads") ? cfg.n_head : r.get_int("num_key_value_heads", moe ? 4 : 2);
    cfg.n_ctx_train = r.get_int("max_position_embeddings", 131072);
    cfg.rms_eps = r.get_double("rms_norm_eps", 1e-5);
    cfg.tie_word_embeddings = r.get_bool("tie_word_embeddings", true);

    // head_dim: dense defaults to 128 when absent; null (and MoE when absent) means hidden/heads.
    if (auto hd = r.opt_int("head_dim")) {
        cfg.head_dim = *hd;
    } else if (!moe && !r.is_null("head_dim")) {
        cfg.head_dim = 128;
    } else {
        if (cfg.n_head <= 0)
            fail(file + ": key 'num_attention_heads' (" + std::to_string(cfg.n_head) + ") must be positive");
        if (cfg.n_embd % cfg.n_head != 0)
            fail(file + ": 'head_dim' is absent and 'hidden_size' (" + std::to_string(cfg.n_embd) +
                 ") is not divisible by 'num_attention_heads' (" + std::to_string(cfg.n_head) + ")");
        cfg.head_dim = cfg.n_embd / cfg.n_head;
    }

    read_rope(r, cfg);

    if (auto act = r.opt_string("hidden_act"); act && *act != "silu")
        fail(file + ": key 'hidden_act' is '" + *act +
             "', expected 'silu' (the only activation implemented)");
    if (r.get_bool("use_bias", false))
        fail(file + ": use_bias=true is not supported (ERNIE-4.5 linears have no bias)");

    if (moe) {
        cfg.n_ff_exp = r.get_int("moe_intermediate_size", 1536);
        cfg.n_expert_used = r.get_int("moe_k", 6);
        cfg.n_expert = r.get_int("moe_num_experts", 64);
        cfg.n_expert_shared = r.get_int("moe_num_shared_experts", 2);
        cfg.moe_layer_start = r.get_int("moe_layer_start_index", 1);
        cfg.moe_layer_end = r.get_int("moe_layer_end_index", -1);
        if (cfg.moe_layer_end == -1) cfg.moe_layer_end = cfg.n_layer - 1;
        cfg.moe_layer_interval = r.get_int("moe_layer_interval", 1);
        cfg.moe_norm_min = r.get_double("moe_norm_min", 1e-12);
    }

    cfg.bos_id = to_token_id(r, "bos_token_id", r.get_int("bos_token_id", 1));
    cfg.pad_id =
        r.is_null("pad_token_id") ? -1 : to_token_id(r, "pad_token_id", r.get_int("pad_token_id", 0));
    if (r.present("eos_token_id")) {
        const json &e = r.at("eos_token_id");
        cfg.eos_ids.clear();
        if (e.is_number_integer()) {
            cfg.eos_ids.push_back(to_token_id(r, "eos_token_id", *r.opt_int("eos_token_id")));
        } else if (e.is_array() && !e.empty()) {
            for (const json &v : e) {
                if (!v.is_number_integer() ||
                    (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT32_MAX)))
                    r.bad("eos_token_id", "an integer or a non-empty list of integers");
                cfg.eos_ids.push_back(to_token_id(r, "eos_token_id", v.get<int64_t>()));
            }
        } else {
            r.bad("eos_token_id", "an integer or a non-empty list of integers");
        }
    }

    auto st = validate_model_config(cfg);
    if (!st) fail(file + ": " + st.message());
    return cfg;
}

// Weights of one configuration, in T (double for the absurdity check, int64 once bounded).
template <typename T>
T count_params(const model_config &c, bool active) {
    const T H = T(c.n_embd);
    T n = T(c.n_vocab) * H;                            // embed_tokens
    if (!c.tie_word_embeddings) n += T(c.n_vocab) * H; // lm_head
    n += H;                                            // final norm
    for (int64_t il = 0; il < c.n_layer; ++il) {
        n += 2 * H;                                        // attention and ffn norms
        n += T(c.q_dim()) * H * 2 + T(c.kv_dim()) * H * 2; // q, o; k, v
        if (c.is_moe_layer(il)) {
            const T per_expert = 3 * T(c.n_ff_exp) * H;
            n += T(c.n_expert) * H + T(c.n_expert); // router + score correction bias
            n += (active ? T(c.n_expert_used) : T(c.n_expert)) * per_expert;
            n += T(c.n_expert_shared) * per_expert; // one shared MLP of width n_ff_exp * n_shared
        } else {
            n += 3 * T(c.n_ff) * H;
        }
    }
    return n;
}

std::string kv(const char *key, int64_t v) {
    return std::string("'") + key + "' (" + std::to_string(v) + ")";
}

} // namespace

bool model_config::is_moe_layer(int64_t il) const {
    if (arch != model_arch::moe || moe_layer_interval < 1) return false;
    return (il + 1) % moe_layer_interval == 0 && il >= moe_layer_start && il <= moe_layer_end;
}

int64_t model_config::n_moe_layers() const {
    int64_t n = 0;
    for (int64_t il = 0; il < n_layer; ++il) n += is_moe_layer(il) ? 1 : 0;
    return n;
}

int64_t model_config::n_params() const { return count_params<int64_t>(*this, false); }
int64_t model_config::n_params_active() const { return count_params<int64_t>(*this, true); }

int64_t model_config::kv_bytes_per_token(size_t elem_bytes) const {
    return 2 * n_layer * kv_dim() * int64_t(elem_bytes);
}

status validate_model_config(const model_config &c) {
    auto err = [](const std::string &m) -> status { return error{m}; };
    auto in_range = [&](const char *key, int64_t v, int64_t lo, int64_t hi) -> std::optional<status> {
        if (v < lo) return err("key " + kv(key, v) + " must be at least " + std::to_string(lo));
        if (v > hi) return err("key " + kv(key, v) + " is absurd (limit " + std::to_string(hi) + ")");
        return std::nullopt;
    };
    const struct {
        const char *key;
        int64_t v, hi;
    } sizes[] = {
        {"vocab_size", c.n_vocab, k_max_vocab},
        {"hidden_size", c.n_embd, k_max_embd},
        {"num_hidden_layers", c.n_layer, k_max_layers},
        {"num_attention_heads", c.n_head, k_max_heads},
        {"num_key_value_heads", c.n_head_kv, k_max_heads},
        {"head_dim", c.head_dim, k_max_head_dim},
        {"intermediate_size", c.n_ff, k_max_ff},
        {"max_position_embeddings", c.n_ctx_train, std::numeric_limits<int32_t>::max()},
    };
    for (const auto &s : sizes)
        if (auto e = in_range(s.key, s.v, 1, s.hi)) return *e;
    if (c.n_head % c.n_head_kv != 0)
        return err("key " + kv("num_attention_heads", c.n_head) + " is not divisible by " +
                   kv("num_key_value_heads", c.n_head_kv));
    if (c.head_dim % 2 != 0)
        return err("key " + kv("head_dim", c.head_dim) + " must be even (RoPE rotates pairs)");
    if (!(c.rope_theta > 0) || !std::isfinite(c.rope_theta))
        return err("key 'rope_theta' (" + std::to_string(c.rope_theta) +
                   ") must be a positive finite number");
    if (!(c.rms_eps > 0) || !std::isfinite(c.rms_eps))
        return err("key 'rms_norm_eps' (" + std::to_string(c.rms_eps) + ") must be a positive finite number");

    if (c.arch == model_arch::moe) {
        if (auto e = in_range("moe_num_experts", c.n_expert, 1, std::min(k_max_experts, k_max_expert_id)))
            return *e;
        if (auto e = in_range("moe_intermediate_size", c.n_ff_exp, 1, k_max_ff)) return *e;
        if (c.n_expert_used < 1 || c.n_expert_used > c.n_expert)
            return err("key " + kv("moe_k", c.n_expert_used) + " must be in [1, " +
                       kv("moe_num_experts", c.n_expert) + "]");
        if (auto e = in_range("moe_num_shared_experts", c.n_expert_shared, 0, k_max_experts)) return *e;
        if (c.n_ff_exp * c.n_expert_shared > k_max_ff)
            return err("shared expert width " + std::to_string(c.n_ff_exp * c.n_expert_shared) +
                       " (moe_intermediate_size x moe_num_shared_experts) is absurd (limit " +
                       std::to_string(k_max_ff) + ")");
        if (c.moe_layer_start < 0 || c.moe_layer_start >= c.n_layer)
            return err("key " + kv("moe_layer_start_index", c.moe_layer_start) + " must be in [0, " +
                       kv("num_hidden_layers", c.n_layer) + ")");
        if (c.moe_layer_end < c.moe_layer_start || c.moe_layer_end >= c.n_layer)
            return err("key " + kv("moe_layer_end_index", c.moe_layer_end) + " must be -1 or in [" +
                       kv("moe_layer_start_index", c.moe_layer_start) + ", " +
                       kv("num_hidden_layers", c.n_layer) + ")");
        if (c.moe_layer_interval < 1)
            return err("key " + kv("moe_layer_interval", c.moe_layer_interval) + " must be at least 1");
        if (!(c.moe_norm_min > 0) || !std::isfinite(c.moe_norm_min))
            return err("key 'moe_norm_min' (" + std::to_string(c.moe_norm_min) +
                       ") must be a positive finite number");
    }

    auto check_id = [&](const char *key, int64_t id, bool allow_none) -> std::optional<status> {
        if (allow_none && id == -1) return std::nullopt;
        if (id < 0 || id >= c.n_vocab)
            return err("key " + kv(key, id) + " must be in [0, " + kv("vocab_size", c.n_vocab) + ")" +
                       (allow_none ? " or -1" : ""));
        return std::nullopt;
    };
    if (auto e = check_id("bos_token_id", c.bos_id, false)) return *e;
    if (auto e = check_id("pad_token_id", c.pad_id, true)) return *e;
    if (c.eos_ids.empty())
        return err("key 'eos_token_id' is empty; expected at least one end-of-sequence id");
    for (int32_t id : c.eos_ids)
        if (auto e = check_id("eos_token_id", id, false)) return *e;

    // Every size is bounded above, so the double count cannot overflow and is exact enough.
    const double n = count_params<double>(c, false);
    if (n > k_max_params) {
        std::ostringstream s;
        s << "the config describes " << n / 1e9 << "B parameters; more than the limit of "
          << k_max_params / 1e9 << "B is refused as absurd";
        return err(s.str());
    }
    return ok_status();
}

result<model_config> parse_model_config(const std::string &json_text, const std::string &file_name) {
    return catch_errors([&]() -> model_config { return parse_impl(json_text, file_name); });
}

result<model_config> load_model_config(const std::filesystem::path &model_dir) {
    const std::filesystem::path p = model_dir / "config.json";
    std::ifstream in(p, std::ios::binary);
    if (!in) return error{"cannot read " + p.string() + ": " + std::strerror(errno)};
    std::ostringstream ss;
    ss << in.rdbuf();
    return parse_model_config(ss.str(), p.string());
}

result<model_config> model_config_for_shape(const std::string &shape_name) {
    model_config c;
    if (shape_name == "ernie-4.5-0.3b") {
        c.arch = model_arch::dense;
        c.arch_name = "Ernie4_5ForCausalLM";
        c.n_vocab = 103424;
        c.n_embd = 1024;
        c.n_layer = 18;
        c.n_head = 16;
        c.n_head_kv = 2;
        c.head_dim = 128;
        c.n_ff = 3072;
    } else if (shape_name == "ernie-4.5-21b-a3b") {
        c.arch = model_arch::moe;
        c.arch_name = "Ernie4_5_MoeForCausalLM";
        c.n_vocab = 103424;
        c.n_embd = 2560;
        c.n_layer = 28;
        c.n_head = 20;
        c.n_head_kv = 4;
        c.head_dim = 128;
        c.n_ff = 12288;
        c.n_expert = 64;
        c.n_expert_used = 6;
        c.n_ff_exp = 1536;
        c.n_expert_shared = 2;
        c.moe_layer_start = 1;
        c.moe_layer_end = 27;
        c.moe_layer_interval = 1;
    } else if (shape_name == "ernie-4.5-300b-a47b") {
        c.arch = model_arch::moe;
        c.arch_name = "Ernie4_5_MoeForCausalLM";
        c.n_vocab = 103424;
        c.n_embd = 8192;
        c.n_layer = 54;
        c.n_head = 64;
        c.n_head_kv = 8;
        c.head_dim = 128;
        c.n_ff = 28672;
        c.n_expert = 64;
        c.n_expert_used = 8;
        c.n_ff_exp = 3584;
        c.n_expert_shared = 0;
        c.moe_layer_start = 3;
        c.moe_layer_end = 53;
        c.moe_layer_interval = 1;
    } else {
        return error{"unknown model shape '" + shape_name +
                     "' (known: ernie-4.5-0.3b, ernie-4.5-21b-a3b, ernie-4.5-300b-a47b)"};
    }
    c.n_ctx_train = 131072;
    c.rope_theta = 500000.0;
    c.rms_eps = 1e-5;
    c.tie_word_embeddings = shape_name != "ernie-4.5-300b-a47b"; // the 300B has its own lm_head
    auto st = validate_model_config(c);
    if (!st) return st.err();
    return c;
}

} // namespace es
