// The chat's context control without widgets: ContextFitter (which messages are sent under each
// overflow policy, refusals naming the sizes, the budget) as a pure function, and PromptTokenizer
// against the real tokenizer and engine of the tiny model: its parts add up to the prompt, and its
// count of a request is the prompt-token count the engine reports for it. Continuing a reply
// leaves it open in the prompt.
#include "context_fit.h"
#include "engine_session.h"
#include "prompt_tokens.h"

#include <QSignalSpy>
#include <QtTest>

using namespace es;

namespace {

constexpr auto U = MessageRole::User;
constexpr auto A = MessageRole::Assistant;

// frame 2, system s, messages of the given sizes alternating user/assistant.
PromptSizes sizes(int system, const QList<int> &messages) {
    PromptSizes p;
    p.frameTokens = 2;
    p.systemTokens = system;
    p.messageTokens = messages;
    for (qsizetype i = 0; i < messages.size(); ++i) p.roles.push_back(i % 2 == 0 ? U : A);
    return p;
}

ContextBudget budget(int limit, int reserve) { return {limit, reserve}; }

} // namespace

class TestContextFit : public QObject {
    Q_OBJECT
private slots:
    void everythingFitsIsSentWhole();
    void refuseNamesTheSizes();
    void keepSystemDropsWholeOldestExchanges();
    void dropOldestDropsTheSystemPromptFirst();
    void lastExchangeAloneTooLongIsRefused();
    void continuingKeepsTheRepliesQuestion();
    void unknownContextSendsEverything();
    void budgetReservesForTheReply();
    void droppedNoteCountsMessages();
    void promptPartsAddUp();
    void countIsTheEnginesPromptCount();
};

void TestContextFit::everythingFitsIsSentWhole() {
    const ContextFit f = ContextFitter::fit(sizes(5, {10, 20, 10}), budget(100, 20), OverflowPolicy::Refuse);
    QVERIFY(f.fits);
    QCOMPARE(f.firstMessage, 0);
    QCOMPARE(f.droppedMessages, 0);
    QVERIFY(f.sendSystem);
    QCOMPARE(f.promptTokens, 47);
    // Exactly at the prompt's limit still fits.
    QVERIFY(ContextFitter::fit(sizes(5, {10, 20, 10}), budget(67, 20), OverflowPolicy::Refuse).fits);
}

void TestContextFit::refuseNamesTheSizes() {
    const ContextFit f = ContextFitter::fit(sizes(5, {10, 20, 10}), budget(60, 20), OverflowPolicy::Refuse);
    QVERIFY(!f.fits);
    QCOMPARE(f.promptTokens, 47);
    QVERIFY2(f.refusal.contains("47") && f.refusal.contains("60") && f.refusal.contains("40") &&
                 f.refusal.contains("20"),
             qPrintable(f.refusal));
}

void TestContextFit::keepSystemDropsWholeOldestExchanges() {
    // 2 + 5 + [10 20] [10 20] [10 20] 10 = 107; the prompt may hold 60.
    const PromptSizes p = sizes(5, {10, 20, 10, 20, 10, 20, 10});
    const ContextFit f = ContextFitter::fit(p, budget(80, 20), OverflowPolicy::KeepSystemAndLast);
    QVERIFY(f.fits);
    QVERIFY(f.sendSystem);
    QCOMPARE(f.firstMessage, 4); // starts with a user message: two whole exchanges left out
    QCOMPARE(f.droppedMessages, 4);
    QCOMPARE(f.promptTokens, 2 + 5 + 10 + 20 + 10);
    // A little more room keeps one more exchange, never half of one.
    const ContextFit g = ContextFitter::fit(p, budget(100, 20), OverflowPolicy::KeepSystemAndLast);
    QCOMPARE(g.firstMessage, 2);
    QCOMPARE(g.promptTokens, 2 + 5 + 10 + 20 + 10 + 20 + 10);
}

void TestContextFit::dropOldestDropsTheSystemPromptFirst() {
    const PromptSizes p = sizes(30, {10, 20, 10});
    // Without the system prompt everything else fits (2 + 40 ≤ 45).
    ContextFit f = ContextFitter::fit(p, budget(65, 20), OverflowPolicy::DropOldest);
    QVERIFY(f.fits);
    QVERIFY(!f.sendSystem);
    QCOMPARE(f.firstMessage, 0);
    QCOMPARE(f.droppedMessages, 0);
    QCOMPARE(f.promptTokens, 42);
    // Less room: the oldest exchange goes too.
    f = ContextFitter::fit(p, budget(30, 10), OverflowPolicy::DropOldest);
    QVERIFY(f.fits);
    QVERIFY(!f.sendSystem);
    QCOMPARE(f.firstMessage, 2);
    QCOMPARE(f.promptTokens, 12);
    // The other policy keeps the system prompt and drops the exchange instead.
    f = ContextFitter::fit(p, budget(65, 20), OverflowPolicy::KeepSystemAndLast);
    QVERIFY(f.fits);
    QVERIFY(f.sendSystem);
    QCOMPARE(f.firstMessage, 2);
    QCOMPARE(f.promptTokens, 42);
}

void TestContextFit::lastExchangeAloneTooLongIsRefused() {
    const PromptSizes p = sizes(5, {10, 20, 50});
    for (OverflowPolicy policy : {OverflowPolicy::DropOldest, OverflowPolicy::KeepSystemAndLast}) {
        const ContextFit f = ContextFitter::fit(p, budget(60, 20), policy);
        QVERIFY(!f.fits);
        QVERIFY2(f.refusal.contains("40"), qPrintable(f.refusal)); // the room for the prompt
    }
    // Keeping the system prompt can be what makes it too long.
    QVERIFY(!ContextFitter::fit(sizes(30, {10, 20, 10}), budget(60, 20), OverflowPolicy::KeepSystemAndLast).fits);
    QVERIFY(ContextFitter::fit(sizes(30, {10, 20, 10}), budget(60, 20), OverflowPolicy::DropOldest).fits);
}

void TestContextFit::continuingKeepsTheRepliesQuestion() {
    // The last message is the reply being continued: its user message is sent with it.
    const PromptSizes p = sizes(0, {10, 20, 10, 20});
    const ContextFit f = ContextFitter::fit(p, budget(50, 10), OverflowPolicy::DropOldest);
    QVERIFY(f.fits);
    QCOMPARE(f.firstMessage, 2);
    QCOMPARE(p.roles[f.firstMessage], U);
    QVERIFY(!ContextFitter::fit(p, budget(40, 10), OverflowPolicy::DropOldest).fits);
}

void TestContextFit::unknownContextSendsEverything() {
    const ContextFit f = ContextFitter::fit(sizes(5, {1000, 1000}), budget(0, 0), OverflowPolicy::Refuse);
    QVERIFY(f.fits);
    QCOMPARE(f.droppedMessages, 0);
}

void TestContextFit::budgetReservesForTheReply() {
    ContextBudget b = contextBudget(4096, 0, 1024);
    QCOMPARE(b.limit, 4096);
    QCOMPARE(b.replyReserve, 1024);
    b = contextBudget(4096, 1024, 1024); // the KV cache holds less than the context
    QCOMPARE(b.limit, 1024);
    QCOMPARE(b.replyReserve, 256); // at most a quarter
    b = contextBudget(256, 0, 0);
    QCOMPARE(b.replyReserve, 1); // room for one token at least: the engine's own rule
    QCOMPARE(contextBudget(0, 0, 10).limit, 0);
}

void TestContextFit::droppedNoteCountsMessages() {
    QVERIFY(ContextFitter::droppedNote(0).isEmpty());
    QVERIFY(ContextFitter::droppedNote(3).contains("3"));
}

void TestContextFit::promptPartsAddUp() {
    auto session = std::make_unique<EngineSession>(EngineSessionOptions{.backend = "cpu"});
    QVERIFY(!session->promptTokenizer());
    QSignalSpy loaded(session.get(), &EngineSession::modelLoaded);
    session->loadModel(QStringLiteral(ES_TEST_DATA_DIR) + "/moe-shared");
    QVERIFY(loaded.wait(30000));
    const std::shared_ptr<const PromptTokenizer> tok = session->promptTokenizer();
    QVERIFY(tok);
    QCOMPARE(session->modelInfo().contextLength, 4096);
    QVERIFY(session->modelInfo().kvTokens > 0);

    ChatRequest r;
    r.systemPrompt = "You are terse.";
    r.messages = {{U, "Hello there, how are experts routed?"}, {A, "By a gate over the hidden state."}};
    const QString draft = "And the shared expert?";
    const int history = tok->historyTokens(r.systemPrompt, r.messages);
    r.messages.push_back({U, draft});
    const int whole = tok->requestTokens(r);
    // Exact across the end-of-sentence token: history + the new turn is the whole prompt.
    QCOMPARE(history + tok->newTurnTokens(draft), whole);
    // The parts the policy sums are close (plain text meets plain text inside an exchange).
    int parts = tok->frameTokens() + tok->systemTokens(r.systemPrompt);
    for (const ChatTurn &t : r.messages) parts += tok->messageTokens(t.role, t.content);
    QVERIFY2(qAbs(parts - whole) <= 2 * r.messages.size(), qPrintable(QString("%1 vs %2").arg(parts).arg(whole)));
    // A longer draft is more tokens; no system prompt, none of its tokens.
    QVERIFY(tok->newTurnTokens(draft + " And more words here.") > tok->newTurnTokens(draft));
    QCOMPARE(tok->systemTokens(QString()), 0);
    // Continuing the last reply: no end-of-sentence and no generation prompt, so fewer tokens
    // than closing it and asking for a new reply.
    ChatRequest c;
    c.messages = {{U, "Hi"}, {A, "Hello, th"}};
    ChatRequest closed = c;
    c.continueLastReply = true;
    QVERIFY(tok->requestTokens(c) < tok->requestTokens(closed));
}

void TestContextFit::countIsTheEnginesPromptCount() {
    auto session = std::make_unique<EngineSession>(EngineSessionOptions{.backend = "cpu"});
    QSignalSpy loaded(session.get(), &EngineSession::modelLoaded);
    session->loadModel(QStringLiteral(ES_TEST_DATA_DIR) + "/moe-shared");
    QVERIFY(loaded.wait(30000));
    const auto tok = session->promptTokenizer();
    for (bool continuing : {false, true}) {
        ChatRequest r;
        r.systemPrompt = "Answer in one word.";
        r.messages = {{U, "What routes tokens?"}, {A, "The gate."}, {U, "【技术解析模式】And then?"}};
        if (continuing) r.messages.push_back({A, "Then the top"});
        r.continueLastReply = continuing;
        r.sampling.maxTokens = 2;
        r.sampling.temperature = 0.0;
        QSignalSpy done(session.get(), &EngineSession::replyFinished);
        const quint64 id = session->submit(r);
        QVERIFY(done.wait(30000));
        QCOMPARE(done.first().at(0).toULongLong(), id);
        const auto metrics = done.first().at(2).value<MessageMetrics>();
        QCOMPARE(metrics.nPromptTokens.value_or(-1), tok->requestTokens(r));
    }
}

QTEST_GUILESS_MAIN(TestContextFit)
#include "test_context_fit.moc"
