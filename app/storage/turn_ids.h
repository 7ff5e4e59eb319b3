// The rows a chat turn begins with (ChatStore::beginTurn and beginEditedTurn): the user's message
// and the partial assistant reply to it, written in one transaction, so a crash leaves both or
// neither and never a question without its reply.
#pragma once

#include "storage_types.h"

namespace es {

struct TurnIds {
    qint64 conversationId = 0;
    qint64 userMessageId = 0;
    qint64 replyId = 0; // state 'partial', the conversation's current leaf
};

// A conversation that a turn creates in its own transaction (ChatStore::beginTurnInNewConversation).
struct NewConversation {
    QString title;
    ConversationSettings settings;
    QString systemPrompt;
    OverflowPolicy overflowPolicy = OverflowPolicy::KeepSystemAndLast;
};

} // namespace es
