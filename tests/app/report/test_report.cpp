// es_report: the report JSON and the conversation JSON validate against their schemas in
// docs/schemas (python3-jsonschema); the trace is well-formed Trace Event JSON of the documented
// kinds; the PDF renders to pages with pdftoppm; hostile user text is escaped in HTML; conversation
// export → import → export is byte-identical; a 10,000-message export streams in bounded memory,
// reports progress and can be cancelled; bench JSON is a report input; the CLI's report command.
#include "chat_store.h"
#include "conversation_export.h"
#include "report_charts.h"
#include "report_data.h"
#include "report_writers.h"

#include <QBuffer>
#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QSet>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QtTest>

#include <malloc.h>

using namespace es;
using namespace es::report;

namespace {

const QString kSchemaDir = QStringLiteral(ES_SOURCE_DIR "/docs/schemas");

MessageProfile sampleProfile(int seed = 0) {
    MessageProfile p;
    p.ttftUs = 31250 + seed;
    p.durationUs = 95000;
    p.tokenTimesUs = {31250 + seed, 51750, 72750, 92500};
    p.nPromptTokens = 3;
    p.nCachedPromptTokens = 1;
    p.phases = {12.5, 40.25, 7.125, 1.5, 3.0625};
    p.nSteps = 2;
    p.maxBatchSeqs = 1;
    p.memoryPeakBytes = (qint64(5) << 30) + 12345;
    p.kvBlocksPeak = 3;
    p.nLayers = 4;
    p.nExperts = 4;
    p.nSharedExperts = 1;
    p.k = 2;
    p.moeLayers = {1, 3};
    // 6 positions: 3 prompt (the first from the prefix cache), then 3 generated.
    p.traceIds = {-1, -1, -1, -1, 0, 2, 1, 2, 0, 3, 2, 1, 0, 1, 1, 3, 2, 3, 0, 2, 1, 0, 3, 2};
    for (int i = 0; i < p.traceIds.size(); ++i)
        p.traceWeights.append(p.traceIds[i] < 0 ? 0.f : (i % 2 ? 0.25f : 0.75f));
    p.routing = {{1, {4, 3, 2, 1}}, {3, {1, 2, 4, 3}}};
    p.steps = {{50, 31000, 1, 2, 0, 11000, 9000, 3000, 500},
               {31500, 20000, 1, 0, 1, 4000, 12000, 1000, 250},
               {52000, 20000, 1, 0, 1, 4000, 12000, 1000, 250},
               {72800, 19000, 1, 0, 1, 4000, 11000, 1000, 250}};
    p.memory = {{0, qint64(5) << 30, 2}, {31000, (qint64(5) << 30) + 12345, 3}, {93000, qint64(5) << 30, 2}};
    return p;
}

MessageMetrics sampleMetrics() {
    MessageMetrics m;
    m.ttftMs = 31.25;
    m.nPromptTokens = 3;
    m.nOutputTokens = 4;
    m.decodeTokS = 49.4;
    m.itlMs = {20.5f, 21.0f, 19.75f};
    m.tokenTimesMs = {31.25f, 51.75f, 72.75f, 92.5f};
    m.stopReason = QStringLiteral("eos");
    m.peakMemoryBytes = 123456789;
    return m;
}

GenerationInfo sampleGeneration() {
    GenerationInfo g;
    g.modelName = QStringLiteral("ERNIE-4.5-21B-A3B-PT");
    g.modelHash = QStringLiteral("fnv1a64:0123456789abcdef");
    g.precision = QStringLiteral("bf16");
    g.sampling.temperature = 0.7;
    g.sampling.topK = 20;
    g.seed = quint64(0xFFFFFFFFFFFFFFF0ull);
    return g;
}

const QString kHostile = QStringLiteral("<script>alert('x')</script> & <img src=x onerror=alert(1)> \"q\"");

struct Sample {
    qint64 conversation = 0, user = 0, reply = 0, regen = 0;
};

// A conversation with a branch (regenerate), an edited user message, metrics, profiles,
// routing without a profile, Chinese text and hostile markup.
Sample fillStore(ChatStore &s) {
    Sample x;
    qint64 t = 1'700'000'000'000;
    s.setClockForTesting([&t] { return t += 1000; });
    ConversationSettings cs;
    cs.sampling.temperature = 0.5;
    cs.extra.insert(QStringLiteral("window"), QStringLiteral("left"));
    x.conversation = *s.createConversation(QStringLiteral("路由 ") + kHostile, cs);
    x.user = *s.addMessage(x.conversation, std::nullopt, MessageRole::User,
                           QStringLiteral("【技术解析模式】") + kHostile);
    x.reply = *s.beginPartialReply(x.conversation, x.user, sampleGeneration());
    s.finishReply(x.reply, QStringLiteral("混合专家模型 answer with ```code``` & <b>tags</b>"),
                  QStringLiteral("stop"), sampleMetrics(), {}, sampleProfile());
    x.regen = *s.regenerate(x.reply, sampleGeneration());
    s.finishReply(x.regen, QStringLiteral("second answer"), QStringLiteral("length"), sampleMetrics(),
                  {{1, {1, 1, 0, 0}}});
    const qint64 edited = *s.editAndResend(x.user, QStringLiteral("edited question"));
    const qint64 r3 = *s.beginPartialReply(x.conversation, edited, sampleGeneration());
    s.finishReply(r3, QStringLiteral("third"), QStringLiteral("stop"), sampleMetrics(), {}, sampleProfile(7));
    s.selectBranch(x.regen);
    s.setClockForTesting({});
    return x;
}

QByteArray render(const std::function<bool(QIODevice &, QString *)> &write) {
    QByteArray out;
    QBuffer b(&out);
    b.open(QIODevice::WriteOnly);
    QString error;
    if (!write(b, &error)) qWarning("%s", qPrintable(error));
    return out;
}

// Runs python3-jsonschema (Draft 2020-12); empty on success, the validator's message otherwise.
QString validate(const QString &schemaFile, const QByteArray &json) {
    QTemporaryDir dir;
    const QString data = dir.filePath(QStringLiteral("data.json"));
    QFile f(data);
    if (!f.open(QIODevice::WriteOnly) || f.write(json) != json.size())
        return QStringLiteral("cannot write temp file");
    f.close();
    QProcess p;
    p.start(QStringLiteral("python3"),
            {QStringLiteral("-c"),
             QStringLiteral(
                 "import json,sys,jsonschema\n"
                 "s=json.load(open(sys.argv[1])); jsonschema.Draft202012Validator.check_schema(s)\n"
                 "e=sorted(jsonschema.Draft202012Validator(s).iter_errors(json.load(open(sys.argv[2]))), "
                 "key=str)\n"
                 "print(e[0].message + ' at ' + '/'.join(map(str, e[0].absolute_path)) if e else 'valid')"),
             kSchemaDir + QLatin1Char('/') + schemaFile, data});
    if (!p.waitForFinished(60000) || p.exitCode() != 0)
        return QStringLiteral("python3 with jsonschema (Debian python3-jsonschema) is needed: ") +
               QString::fromUtf8(p.readAllStandardError()).trimmed();
    const QString out = QString::fromUtf8(p.readAllStandardOutput()).trimmed();
    return out == QLatin1String("valid") ? QString() : out;
}

qint64 procStatusKb(const char *key) {
    QFile f(QStringLiteral("/proc/self/status"));
    if (!f.open(QIODevice::ReadOnly)) return -1;
    for (const QByteArray &line : f.readAll().split('\n'))
        if (line.startsWith(key)) return line.mid(qstrlen(key)).trimmed().split(' ').first().toLongLong();
    return -1;
}

// Resets VmHWM to the current RSS (Linux ≥ 4.0: "5" to clear_refs).
bool resetPeakRss() {
    QFile f(QStringLiteral("/proc/self/clear_refs"));
    return f.open(QIODevice::WriteOnly) && f.write("5") == 1;
}

QJsonObject benchJson(bool withRequest) {
    QJsonObject j{
        {QStringLiteral("format"), QStringLiteral("expertscope.bench")},
        {QStringLiteral("format_version"), withRequest ? 2 : 1},
        {QStringLiteral("model"), QStringLiteral("resources/models/default")},
        {QStringLiteral("model_name"), QStringLiteral("default")},
        {QStringLiteral("model_hash"), QStringLiteral("fnv1a64:00ff")},
        {QStringLiteral("precision"), QStringLiteral("fp32")},
        {QStringLiteral("device"), QStringLiteral("Test CPU")},
        {QStringLiteral("driver"), QString()},
        {QStringLiteral("backend"), QStringLiteral("cpu")},
        {QStringLiteral("threads"), 2},
        {QStringLiteral("version"), QStringLiteral("0.1.0")},
        {QStringLiteral("commit"), QStringLiteral("abc")},
        {QStringLiteral("seed"), QJsonValue()},
        {QStringLiteral("results"), QJsonArray{QJsonObject{{QStringLiteral("test"), QStringLiteral("pp64")},
                                                           {QStringLiteral("tokens_per_s"), 900.0},
                                                           {QStringLiteral("seconds"), 0.071}},
                                               QJsonObject{{QStringLiteral("test"), QStringLiteral("tg32")},
                                                           {QStringLiteral("tokens_per_s"), 150.0},
                                                           {QStringLiteral("seconds"), 0.213},
                                                           {QStringLiteral("roofline_tokens_per_s"), 400.0},
                                                           {QStringLiteral("mbu"), 0.375}}}}};
    if (withRequest) {
        QJsonObject r = profileToJson(sampleProfile());
        r.insert(QStringLiteral("label"), QStringLiteral("pp64 + tg4"));
        j.insert(QStringLiteral("request"), r);
    }
    return j;
}

} // namespace

class TestReport : public QObject {
    Q_OBJECT

private:
    QTemporaryDir m_dir;
    QString path(const QString &name) const { return m_dir.filePath(name); }

private slots:
    void reportJsonValidatesAgainstSchema_data() {
        QTest::addColumn<QString>("kind");
        QTest::newRow("message") << QStringLiteral("message");
        QTest::newRow("conversation") << QStringLiteral("conversation");
        QTest::newRow("bench with request") << QStringLiteral("bench");
        QTest::newRow("bench table only") << QStringLiteral("bench-v1");
    }
    void reportJsonValidatesAgainstSchema() {
        QFETCH(QString, kind);
        ChatStore s;
        QVERIFY(s.open(QStringLiteral(":memory:")).ok());
        const Sample x = fillStore(s);
        QString error;
        std::optional<Report> r =
            kind == QLatin1String("message") ? messageReport(s, x.reply, &error)
            : kind == QLatin1String("conversation")
                ? conversationReport(s, x.conversation, &error)
                : benchReport(benchJson(kind == QLatin1String("bench")), QStringLiteral("test"), &error);
        QVERIFY2(r, qPrintable(error));
        const QByteArray json = render([&](QIODevice &d, QString *e) { return writeJson(*r, d, e); });
        const QString problem = validate(QStringLiteral("expertscope-report-v1.schema.json"), json);
        QVERIFY2(problem.isEmpty(), qPrintable(problem));
        // The validator can fail: a report without its requests is refused.
        QJsonObject broken = QJsonDocument::fromJson(json).object();
        broken.remove(QStringLiteral("requests"));
        QVERIFY(!validate(QStringLiteral("expertscope-report-v1.schema.json"), QJsonDocument(broken).toJson())
                     .isEmpty());
    }

    void conversationJsonValidatesAndRoundTripsByteIdentical() {
        ChatStore a;
        QVERIFY(a.open(path(QStringLiteral("roundtrip-a.sqlite"))).ok());
        const Sample x = fillStore(a);
        QString error;
        const QByteArray first =
            render([&](QIODevice &d, QString *e) { return writeConversationJson(a, x.conversation, d, e); });
        QVERIFY(!first.isEmpty());
        const QString problem = validate(QStringLiteral("expertscope-conversation-v1.schema.json"), first);
        QVERIFY2(problem.isEmpty(), qPrintable(problem));

        // Into another database (and a second time into the same one): new ids, same bytes.
        ChatStore b;
        QVERIFY(b.open(path(QStringLiteral("roundtrip-b.sqlite"))).ok());
        b.createConversation(QStringLiteral("already here")); // ids differ from the source's
        b.addMessage(1, std::nullopt, MessageRole::User, QStringLiteral("x"));
        const std::optional<qint64> id = importConversationJson(b, first, &error);
        QVERIFY2(id, qPrintable(error));
        const QByteArray second =
            render([&](QIODevice &d, QString *e) { return writeConversationJson(b, *id, d, e); });
        QCOMPARE(second, first);
        const std::optional<qint64> again = importConversationJson(a, first, &error);
        QVERIFY2(again, qPrintable(error));
        QVERIFY(*again != x.conversation);
        QCOMPARE(render([&](QIODevice &d, QString *e) { return writeConversationJson(a, *again, d, e); }),
                 first);

        // The import is the conversation: the same active branch, profiles and metrics.
        const QList<Message> pa = a.activePath(x.conversation), pb = b.activePath(*id);
        QCOMPARE(pb.size(), pa.size());
        for (qsizetype i = 0; i < pa.size(); ++i) {
            QCOMPARE(pb[i].content, pa[i].content);
            QCOMPARE(pb[i].createdAt, pa[i].createdAt);
            QCOMPARE(pb[i].generation, pa[i].generation);
            QCOMPARE(b.metrics(pb[i].id), a.metrics(pa[i].id));
            QCOMPARE(b.profile(pb[i].id), a.profile(pa[i].id));
            QCOMPARE(b.routing(pb[i].id), a.routing(pa[i].id));
        }
        QCOMPARE(b.conversation(*id)->settings, a.conversation(x.conversation)->settings);
        QCOMPARE(b.conversation(*id)->title, a.conversation(x.conversation)->title);
    }

    void importRefusesBadFiles_data() {
        QTest::addColumn<QByteArray>("json");
        QTest::addColumn<QString>("expected");
        const QByteArray conv =
            R"("conversation":{"title":"t","created_at":"2026-01-01T00:00:00.000Z","updated_at":"2026-01-01T00:00:00.000Z","pinned":false,"settings":{},"current_leaf":1})";
        const QByteArray msg1 =
            R"({"id":1,"parent":null,"role":"user","content":"a","created_at":"2026-01-01T00:00:00.000Z","state":"complete","finish_reason":""})";
        QTest::newRow("not JSON") << QByteArray("{\"format\":") << QStringLiteral("Not valid JSON");
        QTest::newRow("other format") << QByteArray(R"({"format":"something","version":1})")
                                      << QStringLiteral("Not an ExpertScope conversation");
        QTest::newRow("newer version") << QByteArray(R"({"format":"expertscope.conversation","version":2})")
                                       << QStringLiteral("version 2 is not supported");
        QTest::newRow("parent after child")
            << QByteArray(
                   R"({"format":"expertscope.conversation","version":1,)" + conv +
                   R"(,"messages":[{"id":1,"parent":2,"role":"user","content":"a","created_at":"2026-01-01T00:00:00.000Z","state":"complete","finish_reason":""}]})")
            << QStringLiteral("does not come before it");
        QTest::newRow("bad role")
            << QByteArray(
                   R"({"format":"expertscope.conversation","version":1,)" + conv +
                   R"(,"messages":[{"id":1,"parent":null,"role":"robot","content":"a","created_at":"2026-01-01T00:00:00.000Z","state":"complete","finish_reason":""}]})")
            << QStringLiteral("\"role\" is not");
        QTest::newRow("leaf not a message")
            << QByteArray(R"({"format":"expertscope.conversation","version":1,)" +
                          QByteArray(conv).replace("\"current_leaf\":1", "\"current_leaf\":9") +
                          R"(,"messages":[)" + msg1 + "]}")
            << QStringLiteral("\"current_leaf\" 9 is not one of the messages");
        QTest::newRow("fractional token time")
            << QByteArray(R"({"format":"expertscope.conversation","version":1,)" + conv + R"(,"messages":[)" +
                          QByteArray(msg1).replace("}", R"(,"profile":{"token_times_us":[1.5]}})") + "]}")
            << QStringLiteral("token_times_us");
        // Found by tests/fuzz: values that would not survive the next export, or the store.
        QTest::newRow("token time beyond float")
            << QByteArray(R"({"format":"expertscope.conversation","version":1,)" + conv + R"(,"messages":[)" +
                          QByteArray(msg1).replace("}", R"(,"metrics":{"token_times_ms":[1.0,2e94]}})") +
                          "]}")
            << QStringLiteral("\"token_times_ms\" holds a value that is not a number in float range");
        QTest::newRow("token time of 2^63 µs")
            << QByteArray(
                   R"({"format":"expertscope.conversation","version":1,)" + conv + R"(,"messages":[)" +
                   QByteArray(msg1).replace("}", R"(,"profile":{"token_times_us":[9223372036854775808]}})") +
                   "]}")
            << QStringLiteral("token_times_us");
        QTest::newRow("trace weight beyond float16")
            << QByteArray(
                   R"({"format":"expertscope.conversation","version":1,)" + conv + R"(,"messages":[)" +
                   QByteArray(msg1).replace("}", R"(,"profile":{"trace_ids":[1],"trace_weights":[1e10]}})") +
                   "]}")
            << QStringLiteral("not a router weight in [0, 1]");
        QTest::newRow("routing layer twice")
            << QByteArray(
                   R"({"format":"expertscope.conversation","version":1,)" + conv + R"(,"messages":[)" +
                   QByteArray(msg1).replace(
                       "}",
                       R"(,"routing":[{"layer":1,"expert_counts":[1]},{"layer":1,"expert_counts":[2]}]})") +
                   "]}")
            << QStringLiteral("lists layer 1 twice");
    }
    void importRefusesBadFiles() {
        QFETCH(QByteArray, json);
        QFETCH(QString, expected);
        ChatStore s;
        QVERIFY(s.open(QStringLiteral(":memory:")).ok());
        QString error;
        QVERIFY(!importConversationJson(s, json, &error));
        QVERIFY2(error.contains(expected), qPrintable(error));
        QCOMPARE(s.conversations().size(), 0);
    }

    void traceIsWellFormed() {
        ChatStore s;
        QVERIFY(s.open(QStringLiteral(":memory:")).ok());
        const Sample x = fillStore(s);
        QVERIFY(s.selectBranch(x.reply)); // the branch whose reply has steps (the other has metrics only)
        QString error;
        const std::optional<Report> r = conversationReport(s, x.conversation, &error);
        QVERIFY2(r, qPrintable(error));
        const QByteArray trace = render([&](QIODevice &d, QString *e) { return writeTrace(*r, d, e); });
        QJsonParseError pe;
        const QJsonDocument doc = QJsonDocument::fromJson(trace, &pe);
        QVERIFY2(pe.error == QJsonParseError::NoError, qPrintable(pe.errorString()));
        const QJsonArray events = doc.object().value(QStringLiteral("traceEvents")).toArray();
        QVERIFY(!events.isEmpty());
        QSet<QString> spans, counters, threads;
        for (const QJsonValue &v : events) {
            const QJsonObject e = v.toObject();
            const QString ph = e.value(QStringLiteral("ph")).toString();
            QVERIFY2(ph == QLatin1String("X") || ph == QLatin1String("C") || ph == QLatin1String("M"),
                     qPrintable(ph));
            QVERIFY(e.value(QStringLiteral("pid")).isDouble());
            QVERIFY(e.value(QStringLiteral("name")).isString());
            if (ph == QLatin1String("X")) {
                QVERIFY(e.value(QStringLiteral("tid")).isDouble());
                QVERIFY(e.value(QStringLiteral("ts")).isDouble());
                QVERIFY(e.value(QStringLiteral("dur")).toDouble(-1) >= 0);
                spans.insert(e.value(QStringLiteral("name")).toString());
            } else if (ph == QLatin1String("C")) {
                QVERIFY(e.value(QStringLiteral("ts")).isDouble());
                const QJsonObject args = e.value(QStringLiteral("args")).toObject();
                QVERIFY(!args.isEmpty());
                for (const QJsonValue &a : args) QVERIFY(a.isDouble() || a.isNull());
                counters.insert(e.value(QStringLiteral("name")).toString());
            } else {
                threads.insert(
                    e.value(QStringLiteral("args")).toObject().value(QStringLiteral("name")).toString());
            }
        }
        for (const char *k : {"request", "queue", "prefill", "decode", "step", "attention", "moe", "dense",
                              "sampling", "other"})
            QVERIFY2(spans.contains(QLatin1String(k)), k);
        for (const char *k :
             {"memory in use (bytes)", "KV blocks in use", "tok/s", "expert load L1", "expert load L3"})
            QVERIFY2(counters.contains(QLatin1String(k)), k);
        QVERIFY(threads.contains(QStringLiteral("message %1").arg(x.reply)));
        QVERIFY(threads.contains(QStringLiteral("message %1 · engine steps").arg(x.reply)));
    }

    void pdfRendersToPages() {
        if (QStandardPaths::findExecutable(QStringLiteral("pdftoppm")).isEmpty())
            QFAIL("pdftoppm (Debian poppler-utils) is needed to check the PDF");
        ChatStore s;
        QVERIFY(s.open(QStringLiteral(":memory:")).ok());
        const Sample x = fillStore(s);
        QString error;
        const std::optional<Report> r = conversationReport(s, x.conversation, &error);
        QVERIFY2(r, qPrintable(error));
        const QString pdf = path(QStringLiteral("report.pdf"));
        QVERIFY2(exportReport(*r, Format::Pdf, pdf, &error), qPrintable(error));
        QFile f(pdf);
        QVERIFY(f.open(QIODevice::ReadOnly));
        QVERIFY(f.read(5) == "%PDF-");
        QProcess p;
        p.start(QStringLiteral("pdftoppm"), {QStringLiteral("-r"), QStringLiteral("40"),
                                             QStringLiteral("-png"), pdf, path(QStringLiteral("page"))});
        QVERIFY(p.waitForFinished(60000));
        QVERIFY2(p.exitCode() == 0, p.readAllStandardError().constData());
        const QStringList pages = QDir(m_dir.path()).entryList({QStringLiteral("page-*.png")});
        QVERIFY2(pages.size() >= 2, qPrintable(pages.join(QLatin1Char(' '))));
        for (const QString &page : pages) {
            QImage img(path(page));
            QVERIFY(!img.isNull());
            QVERIFY(img.width() > 200 && img.height() > 300);
        }
    }

    void htmlEscapesHostileText() {
        ChatStore s;
        QVERIFY(s.open(QStringLiteral(":memory:")).ok());
        const Sample x = fillStore(s);
        QString error;
        const std::optional<Report> r = messageReport(s, x.reply, &error);
        QVERIFY2(r, qPrintable(error));
        const QString html = reportHtml(*r);
        QVERIFY(!html.contains(QStringLiteral("<script")));
        QVERIFY(!html.contains(QStringLiteral("<img src=x")));
        QVERIFY(!html.contains(QStringLiteral("<b>tags")));
        QVERIFY(html.contains(QStringLiteral("&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;")) ||
                html.contains(QStringLiteral("&lt;script&gt;alert('x')&lt;/script&gt;")));
        QVERIFY(html.contains(QStringLiteral("&amp; &lt;b&gt;tags&lt;/b&gt;")));
        QVERIFY(html.contains(QStringLiteral("&quot;q&quot;")));
        // The title too, in <title> and <h1>; the charts are images, the whole file self-contained.
        QVERIFY(html.contains(
            QStringLiteral("<title>ExpertScope report: Message %1 — 路由 &lt;script&gt;").arg(x.reply)));
        QCOMPARE(html.count(QStringLiteral("src=\"data:image/svg+xml;base64,")), 4);
        QVERIFY(!html.contains(QStringLiteral("http://")) && !html.contains(QStringLiteral("src=\"file")));
        // Reproducibility header: model, hash, precision, sampling, seed.
        for (const QString &k :
             {QStringLiteral("ERNIE-4.5-21B-A3B-PT"), QStringLiteral("fnv1a64:0123456789abcdef"),
              QStringLiteral("18446744073709551600"), QStringLiteral("&quot;temperature&quot;:0.7")})
            QVERIFY2(html.contains(k), qPrintable(k));
        // CSV quotes fields with commas and quotes (request labels are ours, but the rule holds).
        const QByteArray csv = render([&](QIODevice &d, QString *e) { return writeCsv(*r, d, e); });
        QVERIFY(csv.startsWith("request,series,index,time_us,value\n"));
        QVERIFY(csv.contains(QStringLiteral("message %1,itl_ms,1,51750,20.5").arg(x.reply).toUtf8()));
        QVERIFY(csv.contains(QStringLiteral("message %1,expert_tokens_L3,2,,4").arg(x.reply).toUtf8()));
    }

    void markdownShowsTheActiveBranch() {
        ChatStore s;
        QVERIFY(s.open(QStringLiteral(":memory:")).ok());
        const Sample x = fillStore(s);
        QString error;
        const QString md = QString::fromUtf8(render(
            [&](QIODevice &d, QString *e) { return writeConversationMarkdown(s, x.conversation, d, e); }));
        QVERIFY(md.startsWith(QStringLiteral("# 路由 ")));
        QVERIFY(md.contains(QStringLiteral("### User · 2023-11-14 22:13:")));
        QVERIFY(md.contains(QStringLiteral("### Assistant · ")));
        QVERIFY(md.contains(QStringLiteral("second answer")));        // the selected branch
        QVERIFY(!md.contains(QStringLiteral("混合专家模型 answer"))); // its sibling is not on it
        QVERIFY(!md.contains(QStringLiteral("edited question")));
        QVERIFY(md.contains(QStringLiteral(" · length"))); // a reply cut by the token limit says so
    }

    void benchJsonIsAReportInput() {
        QString error;
        std::optional<Report> r = benchReport(benchJson(true), QStringLiteral("bench.json"), &error);
        QVERIFY2(r, qPrintable(error));
        QCOMPARE(r->bench.size(), 2);
        QCOMPARE(r->requests.size(), 1);
        QCOMPARE(chartsFor(*r).size(), 4);
        QCOMPARE(r->requests.first().profile.nSteps, 2); // the profile's own figure, not recounted
        const QString html = reportHtml(*r);
        QVERIFY(html.contains(QStringLiteral("Benchmark results")));
        QVERIFY(html.contains(QStringLiteral("Test CPU")));
        r = benchReport(benchJson(false), QStringLiteral("old.json"), &error);
        QVERIFY2(r, qPrintable(error));
        QVERIFY(r->requests.isEmpty());
        QVERIFY(chartsFor(*r).isEmpty());
        QVERIFY(!benchReport(QJsonObject{{QStringLiteral("x"), 1}}, QStringLiteral("junk.json"), &error));
        QVERIFY2(
            error.contains(QStringLiteral("junk.json is not the JSON of `expertscope-cli bench --json`")),
            qPrintable(error));
        QJsonObject bad = benchJson(true);
        QJsonObject req = bad.value(QStringLiteral("request")).toObject();
        req.insert(QStringLiteral("token_times_us"), QStringLiteral("soon"));
        bad.insert(QStringLiteral("request"), req);
        QVERIFY(!benchReport(bad, QStringLiteral("bad.json"), &error));
        QVERIFY2(error.contains(QStringLiteral("\"token_times_us\" is not an array")), qPrintable(error));
    }

    void exportIsAtomicAndCancellable() {
        ChatStore s;
        QVERIFY(s.open(QStringLiteral(":memory:")).ok());
        const Sample x = fillStore(s);
        const QString file = path(QStringLiteral("atomic.json"));
        QFile old(file);
        QVERIFY(old.open(QIODevice::WriteOnly));
        old.write("previous export");
        old.close();
        QString error;
        int calls = 0;
        QVERIFY(!exportConversationJson(s, x.conversation, file, &error, [&](qint64 done, qint64) {
            ++calls;
            return done < 2;
        }));
        QCOMPARE(error, QStringLiteral("Cancelled"));
        QVERIFY(calls >= 3);
        QVERIFY(old.open(QIODevice::ReadOnly));
        QCOMPARE(old.readAll(), QByteArray("previous export")); // untouched
        old.close();
        QVERIFY(!exportConversationJson(s, 999, file, &error));
        QVERIFY2(error.contains(QStringLiteral("no conversation 999")), qPrintable(error));
        QVERIFY(!exportReport(*messageReport(s, x.reply, &error), Format::Html,
                              path(QStringLiteral("no/such/dir/r.html")), &error));
        QVERIFY2(error.contains(QStringLiteral("no/such/dir/r.html")), qPrintable(error));
    }

    // 10,000 messages of 2 KiB (≈ 20 MiB of text, ≈ 24 MiB of JSON) export with the peak RSS
    // growing by less than the stated bound: 8 MiB (SQLite's page cache is ≤ 2 MiB; one message
    // and its JSON are held at a time, plus a hash of 10,000 ids).
    void largeConversationExportsInBoundedMemory() {
        constexpr int kMessages = 10000;
        constexpr qint64 kBoundKb = 8 * 1024;
        const QString db = path(QStringLiteral("large.sqlite"));
        {
            ChatStore s;
            QVERIFY(s.open(db).ok());
            ConversationSnapshot snap;
            snap.conversation.title = QStringLiteral("long");
            snap.conversation.createdAt = snap.conversation.updatedAt =
                QDateTime::fromMSecsSinceEpoch(1'700'000'000'000, Qt::UTC);
            const QString body = QString(QStringLiteral("专家路由 expert routing ")).repeated(2048 / 22);
            for (int i = 1; i <= kMessages; ++i) {
                Message m;
                m.id = i;
                if (i > 1) m.parentId = i - 1;
                m.role = i % 2 ? MessageRole::User : MessageRole::Assistant;
                m.content = QString::number(i) + body;
                m.createdAt = snap.conversation.createdAt.addMSecs(i);
                snap.messages.append(m);
            }
            snap.conversation.currentLeafId = kMessages;
            QVERIFY2(s.importConversation(snap), qPrintable(s.lastError()));
        }
        malloc_trim(0);
        ChatStore s;
        QVERIFY(s.open(db).ok());
        const qint64 id = s.conversations().first().id;
        QCOMPARE(s.messageCount(id), kMessages);
        const QString out = path(QStringLiteral("large.json"));
        if (!resetPeakRss())
            QSKIP("cannot reset the peak RSS (/proc/self/clear_refs): no measurement possible");
        const qint64 before = procStatusKb("VmRSS:");
        qint64 lastDone = -1, progressCalls = 0;
        QString error;
        QVERIFY2(exportConversationJson(s, id, out, &error,
                                        [&](qint64 done, qint64 total) {
                                            ++progressCalls;
                                            lastDone = done;
                                            return total == kMessages;
                                        }),
                 qPrintable(error));
        const qint64 jsonPeak = procStatusKb("VmHWM:") - before;
        QVERIFY2(exportConversationMarkdown(s, id, path(QStringLiteral("large.md")), &error),
                 qPrintable(error));
        const qint64 bothPeak = procStatusKb("VmHWM:") - before;
        qInfo("10,000 messages: JSON %lld KiB, peak RSS growth %lld KiB (JSON), %lld KiB (JSON then "
              "Markdown); bound %lld KiB",
              QFileInfo(out).size() / 1024, jsonPeak, bothPeak, kBoundKb);
        QVERIFY(QFileInfo(out).size() > 20 * 1024 * 1024); // more than the bound: the export did stream
        QCOMPARE(lastDone, qint64(kMessages));
        QCOMPARE(progressCalls, qint64(kMessages + 1));
        QVERIFY2(bothPeak < kBoundKb, qPrintable(QStringLiteral("peak RSS grew by %1 KiB").arg(bothPeak)));
        // And the file is the conversation: it parses and has every message.
        QFile f(out);
        QVERIFY(f.open(QIODevice::ReadOnly));
        const std::optional<ConversationSnapshot> back = parseConversationJson(f.readAll(), &error);
        QVERIFY2(back, qPrintable(error));
        QCOMPARE(back->messages.size(), kMessages);
    }

    void cliReport() {
#if !defined(ES_CLI_PATH)
        QSKIP("expertscope-cli is not built");
#else
        const QString db = path(QStringLiteral("cli.sqlite"));
        Sample x;
        {
            ChatStore s;
            QVERIFY(s.open(db).ok());
            x = fillStore(s);
        }
        auto run = [](const QStringList &args, QString *err) {
            QProcess p;
            p.start(QStringLiteral(ES_CLI_PATH), args);
            p.waitForFinished(120000);
            *err = QString::fromUtf8(p.readAllStandardError());
            return p.exitCode();
        };
        QString err;
        const QString html = path(QStringLiteral("cli.html"));
        QCOMPARE(run({QStringLiteral("report"), QStringLiteral("--db"), db, QStringLiteral("--message"),
                      QString::number(x.reply), QStringLiteral("--format"), QStringLiteral("html"),
                      QStringLiteral("--out"), html},
                     &err),
                 0);
        QVERIFY(QFileInfo(html).size() > 1000);
        const QString chat = path(QStringLiteral("cli-chat.json"));
        QCOMPARE(run({QStringLiteral("report"), QStringLiteral("--db"), db, QStringLiteral("--conversation"),
                      QString::number(x.conversation), QStringLiteral("--format"),
                      QStringLiteral("chat-json"), QStringLiteral("--out"), chat},
                     &err),
                 0);
        QCOMPARE(run({QStringLiteral("import"), QStringLiteral("--db"), path(QStringLiteral("cli2.sqlite")),
                      QStringLiteral("--chat"), chat},
                     &err),
                 0);
        QCOMPARE(run({QStringLiteral("report"), QStringLiteral("--db"), db, QStringLiteral("--message"),
                      QString::number(x.user), QStringLiteral("--format"), QStringLiteral("pdf"),
                      QStringLiteral("--out"), path(QStringLiteral("x.pdf"))},
                     &err),
                 1);
        QVERIFY2(err == QStringLiteral(
                            "error: Message %1 is a user message; reports are made of assistant replies\n")
                            .arg(x.user),
                 qPrintable(err));
        QVERIFY(run({QStringLiteral("report"), QStringLiteral("--db"), db, QStringLiteral("--message"),
                     QStringLiteral("1"), QStringLiteral("--format"), QStringLiteral("docx"),
                     QStringLiteral("--out"), path(QStringLiteral("x"))},
                    &err) != 0);
        QVERIFY2(err.contains(QStringLiteral("--format must be")), qPrintable(err));
        // A --db that is not a database (the user's notes): import and report refuse it, say so,
        // and leave it exactly as it was, with nothing set aside beside it.
        const QString notes = path(QStringLiteral("notes.txt"));
        const QByteArray text("Shopping: milk, tea.\nNot a database.\n");
        {
            QFile f(notes);
            QVERIFY(f.open(QIODevice::WriteOnly));
            f.write(text);
        }
        for (const QStringList &args :
             {QStringList{QStringLiteral("import"), QStringLiteral("--db"), notes, QStringLiteral("--chat"), chat},
              QStringList{QStringLiteral("report"), QStringLiteral("--db"), notes, QStringLiteral("--message"),
                          QStringLiteral("1"), QStringLiteral("--format"), QStringLiteral("html"),
                          QStringLiteral("--out"), path(QStringLiteral("notes.html"))}}) {
            QVERIFY(run(args, &err) != 0);
            QVERIFY2(err.contains(QStringLiteral("not an intact ExpertScope database")), qPrintable(err));
            QFile f(notes);
            QVERIFY(f.open(QIODevice::ReadOnly));
            QCOMPARE(f.readAll(), text);
            QCOMPARE(QDir(QFileInfo(notes).path()).entryList({QStringLiteral("notes.txt*")}, QDir::Files),
                     QStringList{QStringLiteral("notes.txt")});
        }
#endif
    }
};

QTEST_MAIN(TestReport)
#include "test_report.moc"
