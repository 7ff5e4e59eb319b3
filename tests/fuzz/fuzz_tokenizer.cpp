// Text of any bytes through the tokenizer of the reference checkpoints: encode() gives ids in
// the vocabulary, at least bytes / max_token_bytes() of them, and stopped early a prefix of
// them; the streaming detokenizer, fed those ids one at a time, yields exactly
// decode()'s text; and any ids at all (out of range too) decode and stream without a crash.
#include "engine/model/chat_template.h"
#include "engine/model/tokenizer.h"
#include "fuzz_support.h"

#include <algorithm>
#include <memory>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    using namespace es;
    static const std::unique_ptr<tokenizer> tok = [] {
        auto t = tokenizer::load(std::filesystem::path(ES_FUZZ_DATA_DIR) / "tokenizer");
        if (!t) {
            std::fprintf(stderr, "fuzz_tokenizer: %s\n", t.message().c_str());
            std::abort();
        }
        return std::move(t).value();
    }();
    const std::string text(fuzz::as_text(data, size));
    const int32_t n_vocab = tok->n_vocab();

    const std::string chat = render_chat({{chat_role::user, text}});
    const auto ids = tok->encode(chat);
    for (int32_t id : ids) ES_FUZZ_CHECK(id >= 0 && id < n_vocab);
    ES_FUZZ_CHECK(ids.size() * tok->max_token_bytes() >= chat.size());
    const auto head = tok->encode(chat, ids.size() / 2);
    ES_FUZZ_CHECK(head.size() > ids.size() / 2 || head.size() == ids.size());
    ES_FUZZ_CHECK(head.size() <= ids.size() && std::equal(head.begin(), head.end(), ids.begin()));
    const std::string whole = tok->decode(ids);
    detokenizer stream(*tok);
    std::string streamed;
    for (int32_t id : ids) streamed += stream.push(id);
    streamed += stream.flush();
    ES_FUZZ_CHECK(streamed == whole);

    // The bytes as ids: 16-bit values, some beyond the vocabulary and some negative.
    std::vector<int32_t> raw;
    for (size_t i = 0; i + 1 < size; i += 2)
        raw.push_back(int32_t(int16_t(data[i] | data[i + 1] << 8)) % (n_vocab + 8));
    (void)tok->decode(raw);
    detokenizer stream2(*tok);
    for (int32_t id : raw) {
        (void)stream2.push(id);
        (void)tok->token_text(id);
        (void)tok->piece(id);
        (void)tok->is_special(id);
    }
    (void)stream2.flush();
    return 0;
}
