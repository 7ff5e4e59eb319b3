// What of a conversation is sent when it no longer fits the model's context: a pure function of
// the messages' token counts, the context and the conversation's overflow policy
// (OverflowPolicy, storage_types.h). The chat pane calls it when it builds a request; the
// composer's counter uses the same budget.
// Budget: a prompt may hold `limit − replyReserve` tokens, limit being the model's context
// (capped by the KV cache, which must hold prompt and reply), so every request leaves room for
// a reply. Messages are left out oldest first and in whole exchanges: what is sent always starts
// with a user message and ends with the message being answered (or the reply being continued,
// with the user message it answers).
#pragma once

#include "storage_types.h"

#include <QCoreApplication>
#include <QList>
#include <QString>

namespace es {

struct ContextBudget {
    int limit = 0;        // tokens prompt + reply may hold (0: unknown, everything is sent)
    int replyReserve = 0; // of those, kept free for the reply
    int promptLimit() const { return limit - replyReserve; }
};

// The budget for a model: its context (capped by the KV cache when kvTokens > 0) and a reserve
// of maxTokens for the reply, at most a quarter of the context and at least one token.
ContextBudget contextBudget(int contextLength, qint64 kvTokens, int maxTokens);

// The prompt's parts in tokens: the frame (begin of sentence and the generation prompt), the
// system prompt's line (0: none) and each message of the branch, oldest first, the last being
// the one answered or continued. roles has one entry per message.
struct PromptSizes {
    int frameTokens = 0;
    int systemTokens = 0;
    QList<int> messageTokens;
    QList<MessageRole> roles;
    int total() const;
};

struct ContextFit {
    bool fits = true;         // false: nothing is sent; refusal says why, with the sizes
    QString refusal;
    bool sendSystem = true;   // whether the system prompt is sent (DropOldest may leave it out)
    int firstMessage = 0;     // index of the first message sent
    int droppedMessages = 0;  // messages left out (the system prompt not counted)
    int promptTokens = 0;     // tokens of what is sent (the sum of its parts)
    bool operator==(const ContextFit &) const = default;
};

class ContextFitter {
    Q_DECLARE_TR_FUNCTIONS(es::ContextFitter)
public:
    // What is sent of `sizes` within `budget` under `policy`. Everything fits: all is sent.
    // Otherwise Refuse refuses; DropOldest leaves out the system prompt, then the oldest
    // exchanges; KeepSystemAndLast keeps the system prompt and leaves out the oldest exchanges.
    // When even the last exchange (with the system prompt, for KeepSystemAndLast) is over the
    // budget, every policy refuses.
    static ContextFit fit(const PromptSizes &sizes, const ContextBudget &budget, OverflowPolicy policy);
    // "3 earlier messages were left out to fit the context." ("" for none)
    static QString droppedNote(int droppedMessages);
};

} // namespace es
