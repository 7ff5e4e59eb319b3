// PromptTokenizer: a chat's prompt counted in the loaded model's tokens, rendered exactly as the
// engine renders it (es::render_request_prompt: the chat template, the system prompt first).
// EngineSession hands one out per loaded model; it holds the model's tokenizer (shared, read-only)
// and may be used from any thread, so a long history can be counted off the GUI thread.
// The template's special tokens (<|begin_of_sentence|>, <|end_of_sentence|>) are single ids and
// the text between them is encoded on its own, so counts add up exactly across them: a history
// that ends with a reply, plus a new user message and the generation prompt.
#pragma once

#include "session_types.h"

#include <QString>

#include <memory>

namespace es {

class tokenizer;

class PromptTokenizer {
public:
    explicit PromptTokenizer(std::shared_ptr<const tokenizer> tok);

    // The tokens the engine's prompt for `request` has (what it reports as prompt tokens).
    int requestTokens(const ChatRequest &request) const;
    // The parts, for the overflow policy: begin of sentence + generation prompt; the system
    // prompt's line (0 when empty); one message as the template renders it inside a prompt.
    // Their sum is the request's count up to a token or two where plain text meets plain text.
    int frameTokens() const;
    int systemTokens(const QString &systemPrompt) const;
    int messageTokens(MessageRole role, const QString &content) const;
    // A new user message with the generation prompt after a history that ends with a reply.
    int newTurnTokens(const QString &text) const;
    // The prompt before a new user message: begin of sentence, system prompt, the turns (no
    // generation prompt). Plus newTurnTokens, the request's count when turns end with a reply.
    int historyTokens(const QString &systemPrompt, const QList<ChatTurn> &turns) const;

private:
    int count(const std::string &text) const;
    std::shared_ptr<const tokenizer> m_tok;
};

} // namespace es
