// OpenAI request validation follows the API reference and vLLM's checks: unknown fields are
// ignored (clients send many), known fields must have the documented type and range.
#include "openai_protocol.h"

#include <algorithm>
#include <cmath>

namespace es::server {

using nlohmann::json;

json error_json(const api_error &e) {
    json err = {{"message", e.message}, {"type", e.type}, {"param", nullptr}, {"code", nullptr}};
    if (!e.param.empty()) err["param"] = e.param;
    if (!e.code.empty()) err["code"] = e.code;
    return json{{"error", err}};
}

namespace {

api_error bad(const std::string &param, const std::string &msg, const std::string &code = "") {
    api_error e;
    e.status = 400;
    e.param = param;
    e.message = msg;
    e.code = code;
    return e;
}

const char *type_name(const json &v) {
    if (v.is_null()) return "null";
    if (v.is_boolean()) return "a boolean";
    if (v.is_number()) return "a number";
    if (v.is_string()) return "a string";
    if (v.is_array()) return "an array";
    return "an object";
}

// Reads an optional number field; nullopt when absent or null.
std::optional<api_error> get_number(const json &b, const char *key, double lo, double hi, std::optional<double> &out,
                                    bool lo_open = false) {
    auto it = b.find(key);
    if (it == b.end() || it->is_null()) return std::nullopt;
    if (!it->is_number()) return bad(key, std::string("'") + key + "' must be a number, not " + type_name(*it));
    const double v = it->get<double>();
    if (!std::isfinite(v) || v < lo || v > hi || (lo_open && v == lo)) {
        char buf[160];
        std::snprintf(buf, sizeof buf, "'%s' is %g; it must be in %c%g, %g]", key, v, lo_open ? '(' : '[', lo, hi);
        return bad(key, buf);
    }
    out = v;
    return std::nullopt;
}

std::optional<api_error> get_int(const json &b, const char *key, int64_t lo, int64_t hi, std::optional<int64_t> &out) {
    auto it = b.find(key);
    if (it == b.end() || it->is_null()) return std::nullopt;
    int64_t v = 0;
    if (it->is_number_integer()) {
        if (it->is_number_unsigned() && it->get<uint64_t>() > uint64_t(INT64_MAX))
            return bad(key, std::string("'") + key + "' is out of range");
        v = it->get<int64_t>();
    } else if (it->is_number_float() && std::isfinite(it->get<double>()) && it->get<double>() == std::floor(it->get<double>()) &&
               std::fabs(it->get<double>()) < 9e18) {
        v = int64_t(it->get<double>());
    } else {
        return bad(key, std::string("'") + key + "' must be an integer, not " + type_name(*it));
    }
    if (v < lo || v > hi)
        return bad(key, std::string("'") + key + "' is " + std::to_string(v) + "; it must be in [" + std::to_string(lo) +
                            ", " + std::to_string(hi) + "]");
    out = v;
    return std::nullopt;
}

std::optional<api_error> get_bool(const json &b, const char *key, bool &out) {
    auto it = b.find(key);
    if (it == b.end() || it->is_null()) return std::nullopt;
    if (!it->is_boolean()) return bad(key, std::string("'") + key + "' must be a boolean, not " + type_name(*it));
    out = it->get<bool>();
    return std::nullopt;
}

std::optional<api_error> parse_messages(const json &b, std::vector<chat_message> &out) {
    auto it = b.find("messages");
    if (it == b.end() || it->is_null()) return bad("messages", "'messages' is required");
    if (!it->is_array()) return bad("messages", std::string("'messages' must be an array, not ") + type_name(*it));
    if (it->empty()) return bad("messages", "'messages' must contain at least one message");
    for (size_t i = 0; i < it->size(); ++i) {
        const json &m = (*it)[i];
        const std::string p = "messages[" + std::to_string(i) + "]";
        if (!m.is_object()) return bad(p, p + " must be an object");
        auto r = m.find("role");
        if (r == m.end() || !r->is_string()) return bad(p + ".role", p + ".role must be a string");
        chat_message cm;
        const std::string role = r->get<std::string>();
        if (role == "system" || role == "developer") cm.role = chat_role::system;
        else if (role == "user") cm.role = chat_role::user;
        else if (role == "assistant") cm.role = chat_role::assistant;
        else return bad(p + ".role", p + ".role '" + role + "' is not one of system, developer, user, assistant");
        auto c = m.find("content");
        if (c == m.end() || c->is_null()) {
            if (cm.role != chat_role::assistant) return bad(p + ".content", p + ".content is required");
        } else if (c->is_string()) {
            cm.content = c->get<std::string>();
        } else if (c->is_array()) {
            for (size_t k = 0; k < c->size(); ++k) {
                const json &part = (*c)[k];
                const std::string pp = p + ".content[" + std::to_string(k) + "]";
                if (!part.is_object() || !part.contains("type") || !part["type"].is_string())
                    return bad(pp, pp + " must be an object with a 'type'");
                if (part["type"] != "text")
                    return bad(pp + ".type", pp + ".type '" + part["type"].get<std::string>() +
                                                 "' is not supported (only text parts)");
                if (!part.contains("text") || !part["text"].is_string()) return bad(pp + ".text", pp + ".text must be a string");
                cm.content += part["text"].get<std::string>();
            }
        } else {
            return bad(p + ".content", p + ".content must be a string or an array of text parts");
        }
        out.push_back(std::move(cm));
    }
    return std::nullopt;
}

std::optional<api_error> parse_prompt(const json &b, const model_limits &lim, completion_request &r) {
    auto it = b.find("prompt");
    if (it == b.end() || it->is_null()) return bad("prompt", "'prompt' is required");
    const json *p = &*it;
    // A list of one prompt (string or ids) is accepted; batches of several are not.
    if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) p = &(*p)[0];
    if (p->is_string()) {
        r.prompt_text = p->get<std::string>();
        if (r.prompt_text.empty()) return bad("prompt", "'prompt' is empty");
        return std::nullopt;
    }
    if (p->is_array()) {
        if (p->empty()) return bad("prompt", "'prompt' is empty");
        for (const json &t : *p) {
            if (!t.is_number_integer()) return bad("prompt", "'prompt' must be a string, or an array of token ids (integers); several prompts are not supported");
            // An unsigned value is compared (and named) as unsigned: 2^63 and above would turn
            // negative as int64_t. dump() writes the number as the client sent it.
            const bool in_range = t.is_number_unsigned() ? t.get<uint64_t>() < uint64_t(std::max<int64_t>(lim.n_vocab, 0))
                                                         : t.get<int64_t>() >= 0 && t.get<int64_t>() < lim.n_vocab;
            if (!in_range)
                return bad("prompt", "token id " + t.dump() + " is outside the vocabulary [0, " +
                                         std::to_string(lim.n_vocab) + ")");
            r.prompt_ids.push_back(int32_t(t.get<int64_t>()));
        }
        r.prompt_is_ids = true;
        return std::nullopt;
    }
    return bad("prompt", std::string("'prompt' must be a string or an array of token ids, not ") + type_name(*p));
}

} // namespace

std::optional<api_error> parse_request(const std::string &body, api_kind kind, const model_limits &lim,
                                       completion_request &r) {
    r = completion_request{};
    r.kind = kind;
    json b;
    try {
        b = json::parse(body);
    } catch (const json::exception &e) { // parse_error, and out_of_range for a number like 1e999
        return bad("", std::string("the body is not valid JSON: ") + e.what());
    }
    if (!b.is_object()) return bad("", std::string("the body must be a JSON object, not ") + type_name(b));

    if (auto it = b.find("model"); it != b.end() && !it->is_null()) {
        if (!it->is_string()) return bad("model", std::string("'model' must be a string, not ") + type_name(*it));
        r.model = it->get<std::string>();
        if (r.model != lim.served_name) {
            api_error e;
            e.status = 404;
            e.param = "model";
            e.code = "model_not_found";
            e.message = "The model '" + r.model + "' does not exist; this server serves '" + lim.served_name + "'";
            return e;
        }
    } else {
        r.model = lim.served_name;  // lenient, like llama.cpp's server: absent means the served one
    }

    if (kind == api_kind::chat) {
        if (auto e = parse_messages(b, r.messages)) return e;
    } else {
        if (auto e = parse_prompt(b, lim, r)) return e;
    }

    if (auto e = get_bool(b, "stream", r.stream)) return e;
    if (auto it = b.find("stream_options"); it != b.end() && !it->is_null()) {
        if (!it->is_object()) return bad("stream_options", "'stream_options' must be an object");
        if (auto e = get_bool(*it, "include_usage", r.include_usage)) {
            e->param = "stream_options.include_usage";
            return e;
        }
    }

    std::optional<int64_t> n;
    if (auto e = get_int(b, "n", 1, 1 << 20, n)) return e;
    if (n && *n != 1) return bad("n", "only n = 1 is supported");
    std::optional<int64_t> best_of;
    if (auto e = get_int(b, "best_of", 1, 1 << 20, best_of)) return e;
    if (best_of && *best_of != 1) return bad("best_of", "only best_of = 1 is supported");
    if (auto it = b.find("logprobs"); it != b.end() && !it->is_null() && !(it->is_boolean() && !it->get<bool>()))
        return bad("logprobs", "'logprobs' is not supported");
    if (auto it = b.find("echo"); it != b.end() && it->is_boolean() && it->get<bool>())
        return bad("echo", "'echo' is not supported");

    sampling_params &s = r.sampling;
    s = lim.defaults;
    s.seed.reset();
    std::optional<double> d;
    if (auto e = get_number(b, "temperature", 0.0, 100.0, d)) return e;
    if (d) s.temperature = float(*d);
    d.reset();
    if (auto e = get_number(b, "top_p", 0.0, 1.0, d, true)) return e;
    if (d) s.top_p = float(*d);
    d.reset();
    if (auto e = get_number(b, "min_p", 0.0, 1.0, d)) return e;
    if (d) s.min_p = float(*d);
    d.reset();
    if (auto e = get_number(b, "presence_penalty", -2.0, 2.0, d)) return e;
    if (d) s.presence_penalty = float(*d);
    d.reset();
    if (auto e = get_number(b, "frequency_penalty", -2.0, 2.0, d)) return e;
    if (d) s.frequency_penalty = float(*d);
    d.reset();
    if (auto e = get_number(b, "repetition_penalty", 0.0, 100.0, d, true)) return e;
    if (d) s.repetition_penalty = float(*d);
    std::optional<int64_t> i;
    if (auto e = get_int(b, "top_k", -1, 1 << 30, i)) return e;
    if (i) s.top_k = *i < 0 ? 0 : int32_t(*i);  // vLLM: -1 means off
    i.reset();
    if (auto e = get_int(b, "seed", INT64_MIN, INT64_MAX, i)) return e;
    if (i) s.seed = uint64_t(*i);
    i.reset();
    // max_completion_tokens is the newer name; either one, the former wins when both are set.
    if (auto e = get_int(b, "max_tokens", 1, 1 << 30, i)) return e;
    std::optional<int64_t> mct;
    if (auto e = get_int(b, "max_completion_tokens", 1, 1 << 30, mct)) return e;
    if (mct) i = mct;
    r.max_tokens_given = i.has_value();
    s.max_tokens = i ? int32_t(*i) : 0;
    bool ignore_eos = false;  // vLLM extension, used by benchmarks
    if (auto e = get_bool(b, "ignore_eos", ignore_eos)) return e;
    if (ignore_eos) s.stop_ids.clear();

    s.stop_strings.clear();
    if (auto it = b.find("stop"); it != b.end() && !it->is_null()) {
        if (it->is_string()) {
            if (!it->get<std::string>().empty()) s.stop_strings.push_back(it->get<std::string>());
        } else if (it->is_array()) {
            for (const json &x : *it) {
                if (!x.is_string()) return bad("stop", "'stop' must be a string or an array of strings");
                if (!x.get<std::string>().empty()) s.stop_strings.push_back(x.get<std::string>());
            }
        } else {
            return bad("stop", std::string("'stop' must be a string or an array of strings, not ") + type_name(*it));
        }
    }
    return std::nullopt;
}

int64_t max_prompt_length(const model_limits &lim) {
    const int64_t by_context = std::max<int64_t>(0, lim.n_ctx - 1);
    return lim.max_prompt_tokens > 0 ? std::min(lim.max_prompt_tokens, by_context) : by_context;
}

std::optional<api_error> check_prompt_length(int64_t n_prompt, const model_limits &lim, completion_request &r,
                                             bool at_least) {
    const std::string param = r.kind == api_kind::chat ? "messages" : "prompt";
    const std::string has = std::string("the prompt has ") + (at_least ? "at least " : "") + std::to_string(n_prompt) + " tokens";
    if (n_prompt <= 0) return bad(param, "the prompt is empty");
    if (lim.max_prompt_tokens > 0 && n_prompt > lim.max_prompt_tokens)
        return bad(param, has + "; this server accepts at most " + std::to_string(lim.max_prompt_tokens),
                   "context_length_exceeded");
    if (n_prompt >= lim.n_ctx)
        return bad(param, "This model's maximum context length is " + std::to_string(lim.n_ctx) + " tokens; " + has,
                   "context_length_exceeded");
    const int64_t room = lim.n_ctx - n_prompt;
    if (!r.max_tokens_given) {
        r.sampling.max_tokens = int32_t(room);
    } else if (r.sampling.max_tokens > room) {
        return bad(r.kind == api_kind::chat ? "max_completion_tokens" : "max_tokens",
                   "This model's maximum context length is " + std::to_string(lim.n_ctx) + " tokens; you requested " +
                       std::to_string(n_prompt + r.sampling.max_tokens) + " tokens (" + std::to_string(n_prompt) +
                       " in the prompt, " + std::to_string(r.sampling.max_tokens) + " for the completion)",
                   "context_length_exceeded");
    }
    const std::string why = r.sampling.validate();
    if (!why.empty()) return bad("", why);
    return std::nullopt;
}

json usage_json(const usage_counts &u) {
    return {{"prompt_tokens", u.prompt_tokens},
            {"completion_tokens", u.completion_tokens},
            {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

namespace {
json finish_value(const std::string &f) { return f.empty() ? json(nullptr) : json(f); }
} // namespace

json full_response(const completion_request &r, const std::string &id, int64_t created, const std::string &text,
                   const std::string &finish_reason, const usage_counts &u) {
    json choice;
    if (r.kind == api_kind::chat)
        choice = {{"index", 0},
                  {"message", {{"role", "assistant"}, {"content", text}}},
                  {"logprobs", nullptr},
                  {"finish_reason", finish_value(finish_reason)}};
    else
        choice = {{"index", 0}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", finish_value(finish_reason)}};
    return {{"id", id},
            {"object", r.kind == api_kind::chat ? "chat.completion" : "text_completion"},
            {"created", created},
            {"model", r.model},
            {"choices", json::array({choice})},
            {"usage", usage_json(u)}};
}

json stream_chunk(const completion_request &r, const std::string &id, int64_t created, const std::string &text,
                  const std::string &finish_reason, bool role_only) {
    json choice;
    if (r.kind == api_kind::chat) {
        json delta = json::object();
        if (role_only) delta = {{"role", "assistant"}, {"content", ""}};
        else if (!text.empty()) delta["content"] = text;
        choice = {{"index", 0}, {"delta", delta}, {"logprobs", nullptr}, {"finish_reason", finish_value(finish_reason)}};
    } else {
        choice = {{"index", 0}, {"text", text}, {"logprobs", nullptr}, {"finish_reason", finish_value(finish_reason)}};
    }
    return {{"id", id},
            {"object", r.kind == api_kind::chat ? "chat.completion.chunk" : "text_completion"},
            {"created", created},
            {"model", r.model},
            {"choices", json::array({choice})}};
}

json usage_chunk(const completion_request &r, const std::string &id, int64_t created, const usage_counts &u) {
    return {{"id", id},
            {"object", r.kind == api_kind::chat ? "chat.completion.chunk" : "text_completion"},
            {"created", created},
            {"model", r.model},
            {"choices", json::array()},
            {"usage", usage_json(u)}};
}

std::string sse(const json &j) {
    return "data: " + j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

} // namespace es::server
