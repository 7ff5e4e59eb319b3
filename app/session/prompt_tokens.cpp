// PromptTokenizer (see prompt_tokens.h).
#include "prompt_tokens.h"

#include "engine/runtime/engine.h"

namespace es {

namespace {

chat_role toRole(MessageRole role) {
    return role == MessageRole::System      ? chat_role::system
           : role == MessageRole::Assistant ? chat_role::assistant
                                            : chat_role::user;
}

// render_chat's text for `messages` without the begin-of-sentence token it always starts with.
std::string renderPart(const std::vector<chat_message> &messages, bool generationPrompt) {
    static const std::string bos = render_chat({}, false);
    return render_chat(messages, generationPrompt).substr(bos.size());
}

} // namespace

PromptTokenizer::PromptTokenizer(std::shared_ptr<const tokenizer> tok) : m_tok(std::move(tok)) {}

int PromptTokenizer::count(const std::string &text) const {
    return m_tok && !text.empty() ? int(m_tok->encode(text).size()) : 0;
}

int PromptTokenizer::requestTokens(const ChatRequest &request) const {
    request_params r;
    for (const ChatTurn &t : request.messages) r.messages.push_back({toRole(t.role), t.content.toStdString()});
    r.system_prompt = request.systemPrompt.toStdString();
    r.preset_prefix = request.presetPrefix.toStdString();
    r.continue_final_message = request.continueLastReply;
    return count(render_request_prompt(r));
}

int PromptTokenizer::frameTokens() const { return count(render_chat({}, true)); }

int PromptTokenizer::systemTokens(const QString &systemPrompt) const {
    if (systemPrompt.isEmpty()) return 0;
    return count(renderPart({{chat_role::system, systemPrompt.toStdString()}}, false));
}

int PromptTokenizer::messageTokens(MessageRole role, const QString &content) const {
    return count(renderPart({{toRole(role), content.toStdString()}}, false));
}

int PromptTokenizer::newTurnTokens(const QString &text) const {
    return count(renderPart({{chat_role::user, text.toStdString()}}, true));
}

int PromptTokenizer::historyTokens(const QString &systemPrompt, const QList<ChatTurn> &turns) const {
    std::vector<chat_message> msgs;
    if (!systemPrompt.isEmpty()) msgs.push_back({chat_role::system, systemPrompt.toStdString()});
    for (const ChatTurn &t : turns) msgs.push_back({toRole(t.role), t.content.toStdString()});
    return count(render_chat(msgs, false));
}

} // namespace es
