// The ERNIE-4.5 chat template (the hub's tokenizer_config.json), rendered in C++:
//   "<|begin_of_sentence|>" then per message
//     system    → "{content}\n"
//     user      → "User: {content}\n"
//     assistant → "Assistant: {content}<|end_of_sentence|>"
//   and, with a generation prompt, "Assistant: " at the end. Continuing the final message (an
//   assistant reply cut at its token limit) leaves that message open — no end-of-sentence and
//   no generation prompt — so the model carries on with the same reply (Hugging Face's
//   continue_final_message).
#pragma once

#include <string>
#include <vector>

namespace es {

enum class chat_role { system, user, assistant };

struct chat_message {
    chat_role role = chat_role::user;
    std::string content;
};

std::string render_chat(const std::vector<chat_message> &messages, bool add_generation_prompt = true,
                        bool continue_final_message = false);

} // namespace es
