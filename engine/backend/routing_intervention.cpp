// Expert interventions (routing_intervention.h): parsing, checking against a model, the per-layer
// view the backends apply.
#include "engine/backend/routing_intervention.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <sstream>

namespace es {

namespace {

std::string trim(const std::string &s) {
    const size_t a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t");
    return a == std::string::npos ? std::string() : s.substr(a, b - a + 1);
}

// A non-negative decimal integer below 2^31, the whole of `s`.
bool parse_index(const std::string &s, int32_t &out) {
    if (s.empty() || s.size() > 10) return false;
    int64_t v = 0;
    const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || ptr != s.data() + s.size() || v < 0 || v > INT32_MAX) return false;
    out = int32_t(v);
    return true;
}

std::string ref_text(const expert_ref &r) {
    return (r.layer < 0 ? std::string("*") : std::to_string(r.layer)) + ":" + std::to_string(r.expert);
}

bool applies(const expert_ref &r, int32_t layer) { return r.layer < 0 || r.layer == layer; }

} // namespace

result<std::vector<expert_ref>> parse_expert_refs(const std::string &text, const std::string &what) {
    std::vector<expert_ref> out;
    std::stringstream ss(text);
    std::string item;
    while (std::getline(ss, item, ',')) {
        item = trim(item);
        if (item.empty()) continue;
        const size_t colon = item.find(':');
        expert_ref r;
        const std::string l = colon == std::string::npos ? "" : trim(item.substr(0, colon)),
                          e = colon == std::string::npos ? "" : trim(item.substr(colon + 1));
        const bool layer_ok = l == "*" ? (r.layer = -1, true) : parse_index(l, r.layer);
        if (colon == std::string::npos || !layer_ok || !parse_index(e, r.expert))
            return error{what + ": '" + item +
                                "' is not LAYER:EXPERT (a layer index or *, a colon, an expert index; e.g. 3:5 or *:5)"};
        if (std::find(out.begin(), out.end(), r) == out.end()) out.push_back(r);
    }
    return out;
}

result<routing_intervention> make_routing_intervention(const std::string &disabled, const std::string &forced,
                                                       int32_t top_k, float bias_scale,
                                                       const std::string &disabled_what,
                                                       const std::string &forced_what) {
    auto d = parse_expert_refs(disabled, disabled_what);
    if (!d) return d.err();
    auto f = parse_expert_refs(forced, forced_what);
    if (!f) return f.err();
    return routing_intervention{std::move(*d), std::move(*f), top_k, bias_scale};
}

std::string format_expert_refs(const std::vector<expert_ref> &refs) {
    std::string s;
    for (const auto &r : refs) s += (s.empty() ? "" : ",") + ref_text(r);
    return s;
}

status check_routing_intervention(const routing_intervention &iv, const model_config &cfg) {
    if (iv.empty()) return ok_status();
    if (cfg.arch != model_arch::moe || cfg.n_moe_layers() == 0)
        return error{"expert interventions need a mixture-of-experts model; this one has no MoE layers"};
    if (!std::isfinite(iv.bias_scale))
        return error{"the correction-bias scale must be a finite number"};
    if (iv.top_k < 0 || iv.top_k > cfg.n_expert)
        return error{"top-k " + std::to_string(iv.top_k) + " is outside 1…" + std::to_string(cfg.n_expert) +
                            " (the model's experts)"};
    auto check_ref = [&](const expert_ref &r, const char *kind) -> status {
        if (r.layer >= 0 && (r.layer >= cfg.n_layer || !cfg.is_moe_layer(r.layer)))
            return error{std::string(kind) + " expert " + ref_text(r) + ": layer " + std::to_string(r.layer) +
                                (r.layer >= cfg.n_layer ? " does not exist (the model has " +
                                                              std::to_string(cfg.n_layer) + " layers)"
                                                        : " is a dense layer, not a MoE layer")};
        if (r.expert >= cfg.n_expert)
            return error{std::string(kind) + " expert " + ref_text(r) + ": the model has " +
                                std::to_string(cfg.n_expert) + " experts (0…" + std::to_string(cfg.n_expert - 1) +
                                ")"};
        return ok_status();
    };
    for (const auto &r : iv.disabled)
        if (auto s = check_ref(r, "disabled"); !s) return s;
    for (const auto &r : iv.forced)
        if (auto s = check_ref(r, "forced"); !s) return s;
    for (int32_t il = 0; il < int32_t(cfg.n_layer); ++il) {
        if (!cfg.is_moe_layer(il)) continue;
        const layer_routing lr = routing_for_layer(iv, il, cfg.n_expert, cfg.n_expert_used);
        for (int32_t e : lr.forced)
            if (lr.disabled[size_t(e)])
                return error{"expert " + std::to_string(il) + ":" + std::to_string(e) +
                                    " is both disabled and forced"};
        const int64_t left = cfg.n_expert - std::count(lr.disabled.begin(), lr.disabled.end(), uint8_t(1));
        if (int64_t(lr.forced.size()) > lr.k)
            return error{"layer " + std::to_string(il) + " has " + std::to_string(lr.forced.size()) +
                                " forced experts but selects only " + std::to_string(lr.k) + " (raise top-k)"};
        if (lr.k > left)
            return error{"layer " + std::to_string(il) + " selects " + std::to_string(lr.k) +
                                " experts but only " + std::to_string(left) + " are not disabled"};
    }
    return ok_status();
}

std::string describe_routing_intervention(const routing_intervention &iv) {
    if (iv.empty()) return "none";
    std::vector<std::string> parts;
    auto list = [](const std::vector<expert_ref> &refs) {
        std::string s;
        for (const auto &r : refs) s += (s.empty() ? "" : ", ") + ref_text(r);
        return s;
    };
    if (!iv.disabled.empty()) parts.push_back("disable " + list(iv.disabled));
    if (!iv.forced.empty()) parts.push_back("force " + list(iv.forced));
    if (iv.top_k > 0) parts.push_back("top-k " + std::to_string(iv.top_k));
    if (iv.bias_scale != 1.0f) {
        std::ostringstream os;
        os << "bias × " << iv.bias_scale;
        parts.push_back(os.str());
    }
    std::string s;
    for (const auto &p : parts) s += (s.empty() ? "" : "; ") + p;
    return s;
}

layer_routing routing_for_layer(const routing_intervention &iv, int32_t layer, int64_t n_expert, int64_t moe_k) {
    layer_routing lr;
    lr.disabled.assign(size_t(n_expert), 0);
    for (const auto &r : iv.disabled)
        if (applies(r, layer) && r.expert < n_expert) lr.disabled[size_t(r.expert)] = 1;
    for (const auto &r : iv.forced)
        if (applies(r, layer) && r.expert < n_expert &&
            std::find(lr.forced.begin(), lr.forced.end(), r.expert) == lr.forced.end())
            lr.forced.push_back(r.expert);
    lr.k = iv.top_k > 0 ? iv.top_k : int32_t(moe_k);
    lr.bias_scale = iv.bias_scale;
    return lr;
}

} // namespace es
