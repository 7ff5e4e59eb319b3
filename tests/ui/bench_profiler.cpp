// Benchmark, not a test (CTest label "bench"): what the profiler panel costs. The real window,
// offscreen, generates the same reply (fixed seed, fresh conversation each time) with the
// profiler dock hidden and visible on each page, alternating within one run so drift in the
// machine's load hits every condition alike; reports decode tok/s per condition and its ratio
// to hidden, and the GUI event loop's latency while generating: the lateness of a chain of 1 ms
// single-shot timers. ES_BENCH_ROUNDS (default 4) and ES_BENCH_TOKENS (default 256) size the
// run, ES_BENCH_THREADS sets the engine's threads, ES_BENCH_MODEL another model folder,
// ES_BENCH_STRICT=1 fails when a visible panel costs 5% or more, ES_BENCH_OUT writes the Markdown
// table to a file.
#include "chat_pane.h"
#include "chat_store.h"
#include "engine_session.h"
#include "latency_stats.h"
#include "main_window.h"
#include "profiler_panel.h"

#include <QDockWidget>
#include <QElapsedTimer>
#include <QFile>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTimer>
#include <QtTest>

#include <qcustomplot.h>

#include <algorithm>

#include <sys/resource.h>

using namespace es;

namespace {

// Re-arms a 1 ms single-shot timer as soon as it fires and records how late each one was.
class LoopProbe : public QObject {
public:
    void start() {
        m_late.clear();
        m_running = true;
        arm();
    }
    void stop() { m_running = false; }
    const QList<double> &lateMs() const { return m_late; }

private:
    void arm() {
        m_clock.start();
        QTimer::singleShot(1, Qt::PreciseTimer, this, [this] {
            m_late.append(std::max(0.0, m_clock.nsecsElapsed() / 1e6 - 1.0));
            if (m_running) arm();
        });
    }
    QElapsedTimer m_clock;
    QList<double> m_late;
    bool m_running = false;
};

struct Condition {
    QString name;
    bool visible = false;
    ProfilerPanel::Tab tab = ProfilerPanel::Tab::Routing;
    QList<double> tokS;
    QList<double> lateMs;
    QList<double> guiCpu;     // GUI thread CPU time / wall time while generating
    QList<double> replot;     // time inside QCustomPlot::replot / wall time
    QList<double> ticks;      // time inside ProfilerPanel::refresh / wall time
    QList<double> intervalMs; // the panel's refresh interval at the end of each reply
    int tokens = 0;
};

double median(QList<double> v) { return percentiles(std::move(v)).p50; }

// CPU time of the calling thread (the GUI thread), ms.
double threadCpuMs() {
    rusage u{};
    getrusage(RUSAGE_THREAD, &u);
    return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e3 + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e3;
}

int envInt(const char *name, int fallback) {
    bool ok = false;
    const int v = qEnvironmentVariableIntValue(name, &ok);
    return ok && v > 0 ? v : fallback;
}

} // namespace

class BenchProfiler : public QObject {
    Q_OBJECT
private slots:
    void decodeWithPanelVisibleVsHidden();

private:
    QTemporaryDir m_home;
};

void BenchProfiler::decodeWithPanelVisibleVsHidden() {
    qputenv("HOME", m_home.path().toUtf8());
    QCoreApplication::setOrganizationName("ExpertScopeTests");
    QCoreApplication::setApplicationName("bench_profiler");
    const int rounds = envInt("ES_BENCH_ROUNDS", 4);
    const int maxTokens = envInt("ES_BENCH_TOKENS", 256);

    ChatStore store;
    QVERIFY(store.open(":memory:").ok());
    // ES_BENCH_THREADS: the engine's CPU threads (default 0: all cores, as the app does).
    EngineSession session(EngineSessionOptions{
        .backend = "cpu", .threads = envInt("ES_BENCH_THREADS", 0), .defaultMaxTokens = maxTokens});
    QSignalSpy loaded(&session, &EngineSession::modelLoaded);
    const QString modelDir =
        qEnvironmentVariable("ES_BENCH_MODEL", QStringLiteral(ES_TEST_DATA_DIR "/moe-shared"));
    session.loadModel(modelDir);
    QVERIFY(loaded.wait(30000));
    MainWindow window(&store, &session);
    window.resize(1280, 800);
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    ProfilerPanel *panel = window.profilerPanel();
    ChatPane *pane = window.currentPane();

    QList<Condition> conditions = {
        {"hidden", false},
        {"visible: Routing (live heatmap + strip)", true, ProfilerPanel::Tab::Routing},
        {"visible: Latency", true, ProfilerPanel::Tab::Latency},
        {"visible: Memory", true, ProfilerPanel::Tab::Memory}};
    // ES_BENCH_ONLY=routing (etc.): hidden and that page only (for profiling the panel).
    if (const QString only = qEnvironmentVariable("ES_BENCH_ONLY"); !only.isEmpty())
        conditions.erase(
            std::remove_if(conditions.begin() + 1, conditions.end(),
                           [&](const Condition &c) { return !c.name.contains(only, Qt::CaseInsensitive); }),
            conditions.end());
    LoopProbe probe;
    // Time spent replotting (all the panel's plots), from QCustomPlot's before/after signals.
    double replotMs = 0;
    QElapsedTimer replotClock;
    for (QCustomPlot *plot : panel->findChildren<QCustomPlot *>()) {
        connect(plot, &QCustomPlot::beforeReplot, this, [&replotClock] { replotClock.start(); });
        connect(plot, &QCustomPlot::afterReplot, this, [&] { replotMs += replotClock.nsecsElapsed() / 1e6; });
    }
    const QString prompt =
        QStringLiteral("【技术解析模式】Explain how a mixture-of-experts router balances its experts.");
    for (int round = -1; round < rounds; ++round) { // round −1 warms caches and is not counted
        for (int i = 0; i < conditions.size(); ++i) {
            // Rotate the order each round so no condition always follows the same one.
            Condition &c = conditions[(i + std::max(0, round)) % conditions.size()];
            window.profilerDock()->setVisible(c.visible);
            if (c.visible) panel->setCurrentTab(c.tab);
            ConversationSettings settings;
            settings.sampling.maxTokens = maxTokens;
            settings.sampling.seed = 7;
            settings.sampling.temperature = 1.0;
            const qint64 conv = *store.createConversation(QStringLiteral("bench"), settings);
            pane->setConversation(conv);
            QTest::qWait(100); // let the dock settle (shown/hidden) before measuring
            QSignalSpy finished(&session, &EngineSession::replyFinished);
            probe.start();
            QElapsedTimer wall;
            wall.start();
            const double cpu0 = threadCpuMs();
            replotMs = 0;
            const double busy0 = panel->refreshBusyMs();
            pane->send(prompt);
            QVERIFY(finished.wait(120000));
            const double guiShare = (threadCpuMs() - cpu0) / std::max<qint64>(1, wall.elapsed());
            probe.stop();
            QTRY_VERIFY(!pane->isGenerating());
            const Message reply = store.activePath(conv).last();
            const std::optional<MessageMetrics> mm = store.metrics(reply.id);
            QVERIFY(mm && mm->decodeTokS);
            if (round < 0) continue;
            c.tokS.append(*mm->decodeTokS);
            c.lateMs.append(probe.lateMs());
            c.guiCpu.append(guiShare);
            c.replot.append(replotMs / std::max<qint64>(1, wall.elapsed()));
            c.ticks.append((panel->refreshBusyMs() - busy0) / std::max<qint64>(1, wall.elapsed()));
            c.intervalMs.append(panel->refreshIntervalMs());
            c.tokens = *mm->nOutputTokens;
        }
    }

    // "vs hidden" pairs each visible reply with the hidden reply of the same round (the rounds
    // rotate the order), so slow drift in the machine's load cancels; median and quartiles.
    QStringList lines;
    lines << QStringLiteral(
                 "| panel | decode tok/s, median [p25–p75] of %1 | vs hidden (paired per round), median "
                 "[p25–p75] | GUI thread CPU (panel ticks + replots) | refresh interval (ms) | event-loop "
                 "lateness p50 / p90 / p99 / max (ms) |")
                 .arg(rounds)
          << QStringLiteral("|---|---|---|---|---|---|");
    double worst = 1.0;
    const QList<double> &hidden = conditions[0].tokS;
    for (const Condition &c : std::as_const(conditions)) {
        QList<double> ratio;
        for (qsizetype r = 0; r < c.tokS.size() && r < hidden.size(); ++r) ratio << c.tokS[r] / hidden[r];
        QList<double> sortedTok = c.tokS, sortedRatio = ratio;
        std::sort(sortedTok.begin(), sortedTok.end());
        std::sort(sortedRatio.begin(), sortedRatio.end());
        const double ratioMedian = percentileSorted(sortedRatio, 0.5);
        const Percentiles late = percentiles(c.lateMs);
        const double maxLate = c.lateMs.isEmpty() ? 0 : *std::max_element(c.lateMs.begin(), c.lateMs.end());
        if (c.visible) worst = std::min(worst, ratioMedian);
        lines << QStringLiteral(
                     "| %1 | %2 [%3–%4] | %5 [%6–%7] | %8% (%9% + %10%) | %11 | %12 / %13 / %14 / %15 |")
                     .arg(c.name)
                     .arg(percentileSorted(sortedTok, 0.5), 0, 'f', 0)
                     .arg(percentileSorted(sortedTok, 0.25), 0, 'f', 0)
                     .arg(percentileSorted(sortedTok, 0.75), 0, 'f', 0)
                     .arg(ratioMedian, 0, 'f', 3)
                     .arg(percentileSorted(sortedRatio, 0.25), 0, 'f', 3)
                     .arg(percentileSorted(sortedRatio, 0.75), 0, 'f', 3)
                     .arg(100.0 * median(c.guiCpu), 0, 'f', 1)
                     .arg(100.0 * median(c.ticks), 0, 'f', 1)
                     .arg(100.0 * median(c.replot), 0, 'f', 1)
                     .arg(c.visible ? QString::number(median(c.intervalMs), 'f', 0) : QStringLiteral("–"))
                     .arg(late.p50, 0, 'f', 2)
                     .arg(late.p90, 0, 'f', 2)
                     .arg(late.p99, 0, 'f', 2)
                     .arg(maxLate, 0, 'f', 1);
    }
    lines << QStringLiteral("")
          << QStringLiteral("%1 tokens per reply, %2 rounds; worst visible/hidden median ratio %3 "
                            "(cost %4%).")
                 .arg(conditions[0].tokens)
                 .arg(rounds)
                 .arg(worst, 0, 'f', 3)
                 .arg(100.0 * (1.0 - worst), 0, 'f', 1);
    const QString table = lines.join(QLatin1Char('\n'));
    std::printf("\n%s\n\n", qPrintable(table));
    if (const QByteArray out = qgetenv("ES_BENCH_OUT"); !out.isEmpty()) {
        QFile f(QString::fromLocal8Bit(out));
        if (f.open(QIODevice::WriteOnly | QIODevice::Truncate)) f.write(table.toUtf8() + '\n');
    }
    if (qEnvironmentVariableIntValue("ES_BENCH_STRICT") == 1)
        QVERIFY2(
            worst >= 0.95,
            qPrintable(QStringLiteral("the visible panel costs %1%").arg(100.0 * (1.0 - worst), 0, 'f', 1)));
}

QTEST_MAIN(BenchProfiler)
#include "bench_profiler.moc"
