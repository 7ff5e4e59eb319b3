// A request body of any bytes to /v1/chat/completions and /v1/completions: parse_request()
// refuses it with an api_error whose JSON serializes, or accepts a request that renders (chat
// template), passes or fails the prompt-length check with a serializable error, and whose
// answer and stream chunks serialize the way the server writes them (invalid UTF-8 replaced).
#include "engine/model/chat_template.h"
#include "fuzz_support.h"
#include "openai_protocol.h"

namespace {

std::string dump(const nlohmann::json &j) {
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void check_error(const es::server::api_error &e) {
    ES_FUZZ_CHECK(e.status >= 400 && e.status < 600);
    ES_FUZZ_CHECK(!e.message.empty());
    ES_FUZZ_CHECK(!dump(es::server::error_json(e)).empty());
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    using namespace es::server;
    const std::string body(es::fuzz::as_text(data, size));
    model_limits lim;
    lim.served_name = "ernie-4.5";
    lim.n_ctx = 4096;
    lim.n_vocab = 3000;
    for (api_kind kind : {api_kind::chat, api_kind::completion}) {
        completion_request r;
        if (auto e = parse_request(body, kind, lim, r)) {
            check_error(*e);
            continue;
        }
        int64_t n_prompt = 0;
        if (kind == api_kind::chat) {
            n_prompt = int64_t(es::render_chat(r.messages).size());
        } else {
            n_prompt = r.prompt_is_ids ? int64_t(r.prompt_ids.size()) : int64_t(r.prompt_text.size());
            for (int32_t id : r.prompt_ids) ES_FUZZ_CHECK(id >= 0 && id < lim.n_vocab);
        }
        if (auto e = check_prompt_length(n_prompt, lim, r)) {
            check_error(*e);
            continue;
        }
        ES_FUZZ_CHECK(r.sampling.validate().empty());
        ES_FUZZ_CHECK(r.sampling.max_tokens > 0 && n_prompt + r.sampling.max_tokens <= lim.n_ctx);
        const usage_counts u{n_prompt, 1};
        (void)dump(full_response(r, "chatcmpl-1", 0, "text", "stop", u));
        (void)sse(stream_chunk(r, "chatcmpl-1", 0, "text", "", true));
        (void)sse(usage_chunk(r, "chatcmpl-1", 0, u));
    }
    return 0;
}
