// The ERNIE-4.5 chat template of the hub's tokenizer_config.json, rendered without a Jinja
// engine: cls_token "<|begin_of_sentence|>", then system "{c}\n", user "User: {c}\n", assistant
// "Assistant: {c}<|end_of_sentence|>", and "Assistant: " when a generation prompt is wanted.
// tests/test_chat_template.cpp holds strings rendered by the Jinja template itself.
#include "engine/model/chat_template.h"

namespace es {

namespace {

constexpr const char *k_cls_token = "<|begin_of_sentence|>";
constexpr const char *k_sep_token = "<|end_of_sentence|>";

} // namespace

std::string render_chat(const std::vector<chat_message> &messages, bool add_generation_prompt,
                        bool continue_final_message) {
    const bool open_last =
        continue_final_message && !messages.empty() && messages.back().role == chat_role::assistant;
    std::string out = k_cls_token;
    for (size_t i = 0; i < messages.size(); ++i) {
        const chat_message &m = messages[i];
        switch (m.role) {
        case chat_role::system:
            out += m.content;
            out += '\n';
            break;
        case chat_role::user:
            out += "User: ";
            out += m.content;
            out += '\n';
            break;
        case chat_role::assistant:
            out += "Assistant: ";
            out += m.content;
            if (!(open_last && i + 1 == messages.size())) out += k_sep_token;
            break;
        }
    }
    if (add_generation_prompt && !open_last) out += "Assistant: ";
    return out;
}

} // namespace es
