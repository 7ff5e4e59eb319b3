// The OpenAI wire format, Qt-free and free of HTTP: request bodies of /v1/chat/completions and
// /v1/completions parsed and validated into engine terms, and the JSON of answers, stream chunks
// and errors. Every rejection is an api_error carrying the HTTP status and an OpenAI-style body
// ({"error":{"message","type","param","code"}}); nothing here throws past its functions.
#pragma once

#include "engine/model/chat_template.h"
#include "engine/runtime/sampler.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace es::server {

struct api_error {
    int status = 400;
    std::string message;
    std::string type = "invalid_request_error";
    std::string param;  // empty: null
    std::string code;   // empty: null
};
nlohmann::json error_json(const api_error &e);

// What the parser needs to know about the served model.
struct model_limits {
    std::string served_name;
    int64_t n_ctx = 0;            // max_position_embeddings
    int64_t n_vocab = 0;
    int64_t max_prompt_tokens = 0; // 0: only the context bounds the prompt
    sampling_params defaults;     // the model's generation_config.json defaults
};

enum class api_kind { chat, completion };

struct completion_request {
    api_kind kind = api_kind::chat;
    std::string model;
    bool stream = false, include_usage = false;
    std::vector<chat_message> messages;   // chat
    std::string prompt_text;              // completion with a text prompt
    std::vector<int32_t> prompt_ids;      // completion with a token-id prompt
    bool prompt_is_ids = false;
    sampling_params sampling;             // max_tokens == 0: until the context ends
    bool max_tokens_given = false;
};

// Parses and validates a request body. The prompt length is checked later (after tokenizing).
std::optional<api_error> parse_request(const std::string &body, api_kind kind, const model_limits &lim,
                                       completion_request &out);

// The longest prompt the limits allow: the context less one (room for a token), or
// max_prompt_tokens when that is smaller.
int64_t max_prompt_length(const model_limits &lim);

// Checks the tokenized prompt against the limits and fills in max_tokens when absent.
// at_least: n_prompt is a lower bound (from the text's bytes, or an encoding stopped early),
// and the message says "at least".
std::optional<api_error> check_prompt_length(int64_t n_prompt, const model_limits &lim, completion_request &r,
                                             bool at_least = false);

// Answers. `id` is "chatcmpl-…" or "cmpl-…"; created is Unix seconds.
struct usage_counts {
    int64_t prompt_tokens = 0, completion_tokens = 0;
};
nlohmann::json usage_json(const usage_counts &u);
nlohmann::json full_response(const completion_request &r, const std::string &id, int64_t created,
                             const std::string &text, const std::string &finish_reason, const usage_counts &u);
// One stream chunk; finish_reason empty: null. role_only: the chat stream's first chunk.
nlohmann::json stream_chunk(const completion_request &r, const std::string &id, int64_t created,
                            const std::string &text, const std::string &finish_reason, bool role_only = false);
nlohmann::json usage_chunk(const completion_request &r, const std::string &id, int64_t created, const usage_counts &u);
std::string sse(const nlohmann::json &j);   // "data: {...}\n\n"

} // namespace es::server
