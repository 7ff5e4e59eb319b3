// What reply_stream_driver and test_reply_crash share: the clock of the driver's reports (the
// parent's kill time is read from the same one), and the reply text: token i of reply r is a
// deterministic word (Chinese and Latin, a line break now and then), so the test rebuilds exactly
// what the driver produced from the counts it reported.
#pragma once

#include <QString>

#include <ctime>

namespace es_test {

// CLOCK_MONOTONIC in µs: one clock for every process on the machine.
inline qint64 monotonicUs() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return qint64(ts.tv_sec) * 1'000'000 + ts.tv_nsec / 1000;
}

inline QString streamToken(qint64 replyId, int i) {
    static const char *const kWords[] = {"专家",   "routing", "路由", "token",  "模型", "layer",
                                         "注意力", "the",     "门控", "expert", "缓存", "KV"};
    const quint64 h = quint64(replyId) * 0x9E3779B97F4A7C15ull + quint64(i) * 0xBF58476D1CE4E5B9ull;
    return QString::fromUtf8(kWords[(h >> 40) % 12]) + (i % 17 == 16 ? QLatin1Char('\n') : QLatin1Char(' '));
}

// Tokens [from, to) of reply replyId.
inline QString streamText(qint64 replyId, int from, int to) {
    QString out;
    for (int i = from; i < to; ++i) out += streamToken(replyId, i);
    return out;
}

} // namespace es_test
