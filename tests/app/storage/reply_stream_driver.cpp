// reply_stream_driver: the child process of test_reply_crash, and the benchmark of saving a
// streaming reply. It runs the app's storage path without a window: ChatStore (open with its
// recovery, beginTurn / beginTurnInNewConversation / beginEditedTurn / regenerate) and a
// ReplyWriter fed from a 10 ms pump at --rate tokens/s, the way EngineSession's timer hands the
// chat pane its text. Turns follow one another until --max-seconds; it reports on stdout what it
// did and when (t: CLOCK_MONOTONIC in µs, the parent's clock too):
//   O t recovered            the store is open (recovered: replies open() marked interrupted)
//   B t kind                 a turn's transaction is about to start (new | send | edit | regen)
//   T t conv user reply n    it committed (user 0 for regen); n tokens will be streamed
//   P t reply n              tokens [0, n) of the reply are produced (reported before the writer
//                            gets them, so the store never holds text that was not reported)
//   S t reply chars          the writer committed a save of that many characters
//   F t reply n              the reply finished (committed) with its n tokens
// Each line is one write(2): a kill never leaves half a line.
//   reply_stream_driver --db FILE [--seed N] [--rate TOK_PER_S] [--user-chars N] [--max-seconds S]
//   reply_stream_driver --db FILE --bench SECONDS [--rate TOK_PER_S]
//     one reply streamed for SECONDS into a new conversation; prints the time spent saving it per
//     second of streaming (docs/benchmarks.md, "Saving a streaming reply").
#include "chat_store.h"
#include "reply_stream_protocol.h"
#include "reply_writer.h"

#include <QCommandLineParser>
#include <QCoreApplication>
#include <QElapsedTimer>
#include <QTimer>

#include <cerrno>
#include <cstdio>
#include <memory>
#include <random>
#include <unistd.h>

using namespace es;
using es_test::monotonicUs;
using es_test::streamText;

namespace {

// "<tag> <t> <fields…>\n" in one write(2).
void report(const char *tag, std::initializer_list<qint64> fields, const char *word = nullptr) {
    QByteArray line = QByteArray(tag) + ' ' + QByteArray::number(monotonicUs());
    if (word) line += QByteArray(" ") + word;
    for (qint64 f : fields) line += ' ' + QByteArray::number(f);
    line += '\n';
    for (qsizetype off = 0; off < line.size();) {
        const ssize_t n = ::write(STDOUT_FILENO, line.constData() + off, size_t(line.size() - off));
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) _exit(3);
        off += n;
    }
}

[[noreturn]] void die(const QString &what) {
    std::fprintf(stderr, "reply_stream_driver: %s\n", qPrintable(what));
    std::fflush(stderr);
    _exit(1);
}

struct Options {
    QString db;
    quint64 seed = 1;
    int rate = 2000;     // tokens per second
    int userChars = 200; // length of each user message (long ones make the turn's transaction long)
    int maxSeconds = 20;
    int benchSeconds = 0;
};

class Driver : public QObject {
public:
    Driver(ChatStore &store, const Options &options)
        : m_store(store), m_options(options), m_rng(options.seed) {
        m_pump.setTimerType(Qt::PreciseTimer);
        m_pump.setInterval(10);
        connect(&m_pump, &QTimer::timeout, this, &Driver::pump);
    }

    void startTurns() { nextTurn(); }

    void startBench() {
        m_bench = true;
        const std::optional<TurnIds> t = m_store.beginTurnInNewConversation(
            {QStringLiteral("bench"), {}}, QStringLiteral("Write a lot."), {});
        if (!t) die(m_store.lastError());
        stream(t->replyId, m_options.rate * m_options.benchSeconds);
        m_benchClock.start();
        connect(&m_second, &QTimer::timeout, this, [this] { benchSecond(); });
        m_second.start(1000);
    }

private:
    enum class Kind { New, Send, Edit, Regen };

    QString userText() {
        QString text = QStringLiteral("问题 %1: ").arg(++m_turns);
        while (text.size() < m_options.userChars)
            text += QStringLiteral("请解释专家路由 explain expert routing ");
        return text.left(std::max<qsizetype>(m_options.userChars, 1));
    }

    GenerationInfo generation() {
        GenerationInfo g;
        g.modelName = QStringLiteral("crash-test");
        g.precision = QStringLiteral("bf16");
        g.seed = m_rng() >> 11;
        return g;
    }

    int below(int n) { return int(m_rng() % quint64(n)); }

    std::optional<TurnIds> beginTurn() {
        if (!m_conversation) {
            const QList<Conversation> existing = m_store.conversations();
            if (!existing.isEmpty()) m_conversation = existing.first().id;
        }
        Kind kind = Kind::New;
        if (m_conversation) {
            const int r = below(100);
            kind = r < 15 ? Kind::New : r < 70 ? Kind::Send : r < 85 ? Kind::Edit : Kind::Regen;
        }
        QList<Message> users, replies;
        if (m_conversation)
            for (const Message &m : m_store.activePath(*m_conversation))
                (m.role == MessageRole::User ? users : replies).append(m);
        if (kind == Kind::Edit && users.isEmpty()) kind = Kind::Send;
        if (kind == Kind::Regen && replies.isEmpty()) kind = Kind::Send;
        switch (kind) {
        case Kind::New: {
            const QString text = userText();
            report("B", {}, "new");
            std::optional<TurnIds> t = m_store.beginTurnInNewConversation(
                {QStringLiteral("对话 %1").arg(m_turns), {}}, text, generation());
            if (t) m_conversation = t->conversationId;
            return t;
        }
        case Kind::Send: {
            const QString text = userText();
            const std::optional<Conversation> c = m_store.conversation(*m_conversation);
            if (!c) die(m_store.lastError());
            report("B", {}, "send");
            return m_store.beginTurn(*m_conversation, c->currentLeafId, text, generation());
        }
        case Kind::Edit: {
            const QString text = userText();
            const qint64 original = users[below(int(users.size()))].id;
            report("B", {}, "edit");
            return m_store.beginEditedTurn(original, text, generation());
        }
        case Kind::Regen: {
            const qint64 original = replies[below(int(replies.size()))].id;
            report("B", {}, "regen");
            const std::optional<qint64> reply = m_store.regenerate(original, generation());
            if (!reply) return std::nullopt;
            return TurnIds{*m_conversation, 0, *reply};
        }
        }
        return std::nullopt;
    }

    void nextTurn() {
        const std::optional<TurnIds> t = beginTurn();
        if (!t) die(QStringLiteral("the turn failed: ") + m_store.lastError());
        const int tokens = 100 + below(2901);
        report("T", {t->conversationId, t->userMessageId, t->replyId, tokens});
        stream(t->replyId, tokens);
    }

    void stream(qint64 replyId, int tokens) {
        m_writer = std::make_unique<ReplyWriter>(&m_store, replyId);
        if (!m_bench)
            connect(m_writer.get(), &ReplyWriter::checkpointSaved, this, [replyId](qsizetype chars) {
                report("S", {replyId, chars});
            });
        connect(m_writer.get(), &ReplyWriter::checkpointFailed, this, [](const QString &e) { die(e); });
        m_planned = tokens;
        m_produced = 0;
        m_turnClock.start();
        m_pump.start();
    }

    void pump() {
        const qint64 reply = m_writer->replyId();
        const int due =
            int(std::min<qint64>(m_planned, m_turnClock.nsecsElapsed() * m_options.rate / 1'000'000'000));
        if (due > m_produced) {
            if (!m_bench) report("P", {reply, due});
            m_writer->append(streamText(reply, m_produced, due));
            m_produced = due;
        }
        if (m_produced < m_planned) return;
        m_pump.stop();
        if (m_bench) return benchDone();
        MessageMetrics metrics;
        metrics.nOutputTokens = m_planned;
        if (!m_writer->finish(QStringLiteral("stop"), metrics, {})) die(m_store.lastError());
        report("F", {reply, m_planned});
        m_writer.reset();
        QTimer::singleShot(0, this, [this] { nextTurn(); });
    }

    void benchSecond() {
        if (!m_writer) return;
        const ReplyWriter::Stats s = m_writer->stats();
        std::printf(
            "second %2d: text %7.1f KiB, %2d saves, %6.2f ms saving (%.2f%% of the second), longest so far "
            "%.2f ms\n",
            ++m_benchSeconds, double(m_writer->text().toUtf8().size()) / 1024, s.saves - m_lastStats.saves,
            double(s.saveNs - m_lastStats.saveNs) / 1e6, double(s.saveNs - m_lastStats.saveNs) / 1e7,
            double(s.maxSaveNs) / 1e6);
        std::fflush(stdout);
        m_lastStats = s;
    }

    void benchDone() {
        m_second.stop();
        const double seconds = double(m_benchClock.nsecsElapsed()) / 1e9;
        const ReplyWriter::Stats s = m_writer->stats();
        QElapsedTimer finish;
        finish.start();
        if (!m_writer->finish(QStringLiteral("length"), {}, {})) die(m_store.lastError());
        const double finishMs = double(finish.nsecsElapsed()) / 1e6;
        std::printf(
            "%d tok/s for %.1f s: %d tokens, %.1f KiB of text (UTF-8); %d saves, %.1f ms saving in all = "
            "%.2f ms per second of streaming (%.3f%%), longest save %.2f ms; the final write %.2f ms\n",
            m_options.rate, seconds, m_planned, double(m_writer->text().toUtf8().size()) / 1024, s.saves,
            double(s.saveNs) / 1e6, double(s.saveNs) / 1e6 / seconds, double(s.saveNs) / 1e7 / seconds,
            double(s.maxSaveNs) / 1e6, finishMs);
        std::fflush(stdout);
        QCoreApplication::exit(0);
    }

    ChatStore &m_store;
    Options m_options;
    std::mt19937_64 m_rng;
    std::optional<qint64> m_conversation;
    int m_turns = 0;
    std::unique_ptr<ReplyWriter> m_writer;
    QTimer m_pump;
    QElapsedTimer m_turnClock;
    int m_planned = 0;
    int m_produced = 0;
    bool m_bench = false;
    QElapsedTimer m_benchClock;
    QTimer m_second; // the benchmark's per-second lines
    int m_benchSeconds = 0;
    ReplyWriter::Stats m_lastStats;
};

Options parseOptions(const QCoreApplication &app) {
    QCommandLineParser p;
    const QCommandLineOption db("db", "The database file.", "file");
    const QCommandLineOption seed("seed", "Seed of the turn choices.", "n", "1");
    const QCommandLineOption rate("rate", "Tokens per second.", "n", "2000");
    const QCommandLineOption userChars("user-chars", "Characters per user message.", "n", "200");
    const QCommandLineOption maxSeconds("max-seconds", "Stop after this long.", "s", "20");
    const QCommandLineOption bench("bench", "Stream one reply this long and print the time spent saving it.",
                                   "s");
    p.addOptions({db, seed, rate, userChars, maxSeconds, bench});
    p.process(app);
    Options o;
    o.db = p.value(db);
    o.seed = p.value(seed).toULongLong();
    o.rate = p.value(rate).toInt();
    o.userChars = p.value(userChars).toInt();
    o.maxSeconds = p.value(maxSeconds).toInt();
    o.benchSeconds = p.value(bench).toInt();
    if (o.db.isEmpty() || o.rate <= 0) die(QStringLiteral("usage: --db FILE [--rate N>0] …"));
    return o;
}

} // namespace

int main(int argc, char **argv) {
    QCoreApplication app(argc, argv);
    const Options options = parseOptions(app);
    ChatStore store;
    const OpenResult opened = store.open(options.db);
    if (!opened.ok()) die(opened.message);
    Driver driver(store, options);
    if (options.benchSeconds > 0) {
        driver.startBench();
    } else {
        report("O", {opened.recoveredReplies});
        driver.startTurns();
        QTimer::singleShot(options.maxSeconds * 1000, &app, [] { QCoreApplication::exit(0); });
    }
    return app.exec();
}
