// ContextFitter (see context_fit.h).
#include "context_fit.h"

#include <QLocale>

#include <algorithm>

namespace es {

ContextBudget contextBudget(int contextLength, qint64 kvTokens, int maxTokens) {
    ContextBudget b;
    if (contextLength <= 0) return b;
    b.limit = kvTokens > 0 ? int(std::min<qint64>(contextLength, kvTokens)) : contextLength;
    b.replyReserve = std::clamp(maxTokens, 1, std::max(1, b.limit / 4));
    return b;
}

int PromptSizes::total() const {
    int n = frameTokens + systemTokens;
    for (int t : messageTokens) n += t;
    return n;
}

namespace {

QString tokens(int n) { return QLocale().toString(n); }

} // namespace

ContextFit ContextFitter::fit(const PromptSizes &sizes, const ContextBudget &budget, OverflowPolicy policy) {
    ContextFit f;
    const int n = int(sizes.messageTokens.size());
    f.promptTokens = sizes.total();
    f.sendSystem = sizes.systemTokens > 0;
    if (budget.limit <= 0 || f.promptTokens <= budget.promptLimit()) return f;

    const auto refuse = [&](const QString &why) {
        ContextFit r;
        r.fits = false;
        r.refusal = why;
        r.sendSystem = f.sendSystem;
        r.promptTokens = f.promptTokens;
        return r;
    };
    const QString room = tr("the context of %1 tokens leaves %2 for the prompt once %3 are kept for the reply")
                             .arg(tokens(budget.limit), tokens(budget.promptLimit()), tokens(budget.replyReserve));
    if (policy == OverflowPolicy::Refuse)
        return refuse(tr("This conversation needs %1 tokens, but %2. Choose “Drop oldest” or “Keep system prompt "
                         "and last turns” for this conversation, or start a new one.")
                          .arg(tokens(f.promptTokens), room));

    // The sent messages start with a user message, at the latest the one of the last exchange.
    int lastStart = n - 1;
    for (int i = n - 1; i >= 0; --i)
        if (sizes.roles.value(i) == MessageRole::User) {
            lastStart = i;
            break;
        }
    QList<int> suffix(n + 1, 0); // tokens of messages [i, n)
    for (int i = n - 1; i >= 0; --i) suffix[i] = suffix[i + 1] + sizes.messageTokens[i];

    const bool keepSystem = policy == OverflowPolicy::KeepSystemAndLast;
    // DropOldest: the system prompt is the oldest message, so it goes first.
    if (!keepSystem && sizes.systemTokens > 0 && sizes.frameTokens + suffix[0] <= budget.promptLimit()) {
        f.sendSystem = false;
        f.promptTokens = sizes.frameTokens + suffix[0];
        return f;
    }
    const int system = keepSystem ? sizes.systemTokens : 0;
    for (int start = 1; start <= lastStart; ++start) {
        if (start < lastStart && sizes.roles.value(start) != MessageRole::User) continue;
        const int total = sizes.frameTokens + system + suffix[start];
        if (total > budget.promptLimit()) continue;
        f.sendSystem = keepSystem && sizes.systemTokens > 0;
        f.firstMessage = start;
        f.droppedMessages = start;
        f.promptTokens = total;
        return f;
    }
    const int minimum = sizes.frameTokens + system + suffix[std::max(0, lastStart)];
    return refuse(keepSystem && sizes.systemTokens > 0
                      ? tr("The last message with the system prompt needs %1 tokens, but %2. Shorten the "
                           "message or the system prompt.")
                            .arg(tokens(minimum), room)
                      : tr("The last message needs %1 tokens, but %2. Shorten the message.").arg(tokens(minimum), room));
}

QString ContextFitter::droppedNote(int droppedMessages) {
    if (droppedMessages <= 0) return {};
    return tr("%n earlier message(s) were left out to fit the context.", nullptr, droppedMessages);
}

} // namespace es
