// es_report: the report JSON and the conversation JSON validate against their schemas in
// docs/schemas (python3-jsonschema); the trace is well-formed Trace Event JSON of the documented
// kinds; the PDF renders to pages with pdftoppm; hostile user text is escaped in HTML and made
// inert in Markdown (no element a renderer would make of it, code verbatim); conversation
// export → import → export is byte-identical; an import refuses a profile whose counts disagree
// with its arrays and a lone UTF-16 surrogate, naming where; a hostile profile already in a
// database makes a small report; a 10,000-message export streams in bounded memory, reports
// progress and can be cancelled; bench JSON is a report input; the CLI's report command.
#include "chat_store.h"
#include "conversation_export.h"
#include "markdown_text.h"
#include "report_charts.h"
#include "report_data.h"
#include "report_writers.h"

#include <QBuffer>
#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QSet>
#include <QSqlDatabase>
#include <QSqlError>
#include <QSqlQuery>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTextBlock>
#include <QTextDocument>
#include <QtTest>

#include <malloc.h>
#include <sys/resource.h>

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
    p.phases = {12.5, 40.25, 7.125, 1.5, 3.0625, 0.5 + seed};
    p.nSteps = 2;
    p.nStepsTimed = 1;
    p.timeline = {quint64(7 + seed), 3.35e12,
                  {{QStringLiteral("norm+qkv+rope_kv gemv"), 0, 0, 0.0, 3.25, 2.5e6, 0.0},
                   {QStringLiteral("moe_front"), 1, 1, 3.25, 2.0, 1.25e6, 0.375}}};
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
    // A profile whose counts disagree with its arrays (or with any model) is refused naming the
    // field and both numbers, before anything is sized by it: a 10 KB file that claims a million
    // layers and experts is refused at once instead of becoming a report of hundreds of MB.
    void importRefusesInconsistentProfiles_data() {
        QTest::addColumn<QByteArray>("json");
        QTest::addColumn<QString>("expected");
        auto file = [](const QByteArray &profile) {
            return QByteArray(
                       R"({"format":"expertscope.conversation","version":1,"messages":[)"
                       R"({"id":1,"parent":null,"role":"user","content":"q","created_at":"2026-01-01T00:00:00.000Z","state":"complete","finish_reason":""},)"
                       R"({"id":2,"parent":1,"role":"assistant","content":"a","created_at":"2026-01-01T00:00:01.000Z","state":"complete","finish_reason":"stop","profile":)") +
                   profile +
                   R"(}],"conversation":{"title":"t","created_at":"2026-01-01T00:00:00.000Z","updated_at":"2026-01-01T00:00:00.000Z","pinned":false,"settings":{},"current_leaf":2}})";
        };
        // A model of 4 layers (1 and 3 MoE), 4 experts, top-2, one position; each row changes fields.
        auto profile = [](const QJsonObject &change) {
            QJsonObject o{
                {QStringLiteral("n_layers"), 4},
                {QStringLiteral("n_experts"), 4},
                {QStringLiteral("k"), 2},
                {QStringLiteral("moe_layers"), QJsonArray{1, 3}},
                {QStringLiteral("routing"),
                 QJsonArray{QJsonObject{{QStringLiteral("layer"), 1},
                                        {QStringLiteral("expert_counts"), QJsonArray{1, 0, 0, 1}}},
                            QJsonObject{{QStringLiteral("layer"), 3},
                                        {QStringLiteral("expert_counts"), QJsonArray{0, 1, 1, 0}}}}},
                {QStringLiteral("trace_ids"), QJsonArray{0, 3, 1, 2}},
                {QStringLiteral("trace_weights"), QJsonArray{0.5, 0.5, 0.5, 0.5}}};
            for (auto it = change.begin(); it != change.end(); ++it) o.insert(it.key(), it.value());
            return QJsonDocument(o).toJson(QJsonDocument::Compact);
        };
        auto json = [](const char *text) { return QJsonDocument::fromJson(text).object(); };
        // The hostile file of about 10 KB: a million layers and experts over 400 routed "layers".
        QJsonArray moe, rows;
        for (int l = 0; l < 400; ++l) {
            moe.append(l);
            rows.append(
                QJsonObject{{QStringLiteral("layer"), l}, {QStringLiteral("expert_counts"), QJsonArray{1}}});
        }
        const QByteArray million = file(profile({{QStringLiteral("n_layers"), 1000000},
                                                 {QStringLiteral("n_experts"), 1000000},
                                                 {QStringLiteral("moe_layers"), moe},
                                                 {QStringLiteral("routing"), rows},
                                                 {QStringLiteral("trace_ids"), QJsonArray{}},
                                                 {QStringLiteral("trace_weights"), QJsonArray{}}}));
        QVERIFY(million.size() > 8000 && million.size() < 20000);
        QTest::newRow("a million layers and experts")
            << million
            << QStringLiteral(
                   R"(Message 2 of the file: profile: "n_layers" is 1000000; a profile has at most 1024 layers)");
        QTest::newRow("a million experts")
            << file(profile(json(R"({"n_experts":1000000})")))
            << QStringLiteral(R"("n_experts" is 1000000; a profile has at most 4096 experts)");
        QTest::newRow("k above n_experts")
            << file(profile(json(R"({"k":5})"))) << QStringLiteral(R"("k" is 5 but "n_experts" is 4)");
        QTest::newRow("counts shorter than n_experts")
            << file(profile(json(
                   R"({"routing":[{"layer":1,"expert_counts":[1,0,0]},{"layer":3,"expert_counts":[0,1,1,0]}]})")))
            << QStringLiteral(R"("routing" layer 1 has 3 expert counts but "n_experts" is 4)");
        QTest::newRow("counts longer than n_experts")
            << file(profile(json(
                   R"({"routing":[{"layer":1,"expert_counts":[1,0,0,1,5]},{"layer":3,"expert_counts":[0,1,1,0]}]})")))
            << QStringLiteral(R"("routing" layer 1 has 5 expert counts but "n_experts" is 4)");
        QTest::newRow("trace shorter than its positions")
            << file(profile(json(R"({"trace_ids":[0,3,1],"trace_weights":[0.5,0.5,0.5]})")))
            << QStringLiteral(R"("trace_ids" has 3 entries, not a whole number of positions of 4 slots)");
        QTest::newRow("trace longer than its positions")
            << file(profile(json(R"({"trace_ids":[0,3,1,2,0],"trace_weights":[0.5,0.5,0.5,0.5,0.5]})")))
            << QStringLiteral(R"("trace_ids" has 5 entries, not a whole number of positions of 4 slots)");
        QTest::newRow("trace of an expert beyond n_experts")
            << file(profile(json(R"({"trace_ids":[0,3,1,4]})")))
            << QStringLiteral(R"("trace_ids" holds expert 4 but "n_experts" is 4)");
        QTest::newRow("MoE layer beyond n_layers")
            << file(profile(json(R"({"moe_layers":[1,3,7]})")))
            << QStringLiteral(R"("moe_layers" lists layer 7 but "n_layers" is 4)");
        QTest::newRow("negative n_layers") << file(profile(json(R"({"n_layers":-4})")))
                                           << QStringLiteral(R"("n_layers" is -4; it cannot be negative)");
        QTest::newRow("negative k") << file(profile(json(R"({"k":-1})")))
                                    << QStringLiteral(R"("k" is -1; it cannot be negative)");
        QTest::newRow("negative prompt tokens")
            << file(profile(json(R"({"prompt_tokens":-3})")))
            << QStringLiteral(R"("prompt_tokens" is -3; it cannot be negative)");
        QTest::newRow("n_layers an int would wrap to 4")
            << file(profile(json(R"({"n_layers":4294967300})")))
            << QStringLiteral(R"("n_layers" is 4294967300, beyond any count this profile can hold)");
        QTest::newRow("routing alone, rows of two lengths")
            << QByteArray(file("{}"))
                   .replace(
                       R"("profile":{})",
                       R"("routing":[{"layer":1,"expert_counts":[1,2]},{"layer":2,"expert_counts":[1]}])")
            << QStringLiteral(
                   R"(Message 2 of the file: routing: "routing" layer 2 has 1 expert counts but layer 1 has 2)");
    }
    void importRefusesInconsistentProfiles() {
        QFETCH(QByteArray, json);
        QFETCH(QString, expected);
        ChatStore s;
        QVERIFY(s.open(QStringLiteral(":memory:")).ok());
        QString error;
        QElapsedTimer clock;
        clock.start();
        QVERIFY(!importConversationJson(s, json, &error));
        QVERIFY2(error.contains(expected), qPrintable(error));
        QVERIFY(clock.elapsed() < 10000); // refused at once: nothing is sized by the claims
        QCOMPARE(s.conversations().size(), 0);
        // The same profile as a bench run's instrumented request (report/import --bench-json).
        const QJsonObject profile = QJsonDocument::fromJson(json)
                                        .object()
                                        .value(QStringLiteral("messages"))
                                        .toArray()
                                        .last()
                                        .toObject()
                                        .value(QStringLiteral("profile"))
                                        .toObject();
        if (!profile.isEmpty()) {
            QJsonObject bench = benchJson(true);
            bench.insert(QStringLiteral("request"), profile);
            QVERIFY(!benchReport(bench, QStringLiteral("bench.json"), &error));
            QVERIFY2(error.contains(expected.section(QStringLiteral("profile: "), -1)), qPrintable(error));
        }
    }

    // Half a UTF-16 pair (JSON "\ud800") is no text: Qt keeps it in the QString, and SQLite's UTF-8
    // would store another character (U+FFFD). The import is refused naming where it was; a pair
    // of halves is a character and imports.
    void importRefusesLoneSurrogates_data() {
        QTest::addColumn<QByteArray>("json");
        QTest::addColumn<QString>("expected");
        const QByteArray conv =
            R"("conversation":{"title":"t","created_at":"2026-01-01T00:00:00.000Z","updated_at":"2026-01-01T00:00:00.000Z","pinned":false,"settings":{},"current_leaf":2})";
        const QByteArray msgs =
            R"("messages":[{"id":1,"parent":null,"role":"user","content":"q","created_at":"2026-01-01T00:00:00.000Z","state":"complete","finish_reason":""},)"
            R"({"id":2,"parent":1,"role":"assistant","content":"a","created_at":"2026-01-01T00:00:01.000Z","state":"complete","finish_reason":"stop","generation":{"model_name":"m","model_hash":"","precision":"","sampling":{"stop":["x"]},"seed":null}}])";
        auto doc = [](const QByteArray &m, const QByteArray &c) {
            return QByteArray(R"({"format":"expertscope.conversation","version":1,)") + m + "," + c + "}";
        };
        const QString lone = QStringLiteral(R"( holds a lone UTF-16 surrogate (\u%1))");
        QTest::newRow("message text")
            << doc(QByteArray(msgs).replace(R"("content":"a")", R"("content":"a\ud800b")"), conv)
            << QStringLiteral(R"(Message 2 of the file: "content")") + lone.arg("d800");
        QTest::newRow("title") << doc(msgs,
                                      QByteArray(conv).replace(R"("title":"t")", R"("title":"\udc00t")"))
                               << QStringLiteral(R"(The conversation's "title")") + lone.arg("dc00");
        QTest::newRow("a pair the wrong way round")
            << doc(QByteArray(msgs).replace(R"("content":"q")", R"("content":"\ude00\ud83d")"), conv)
            << QStringLiteral(R"(Message 1 of the file: "content")") + lone.arg("de00");
        QTest::newRow("finish reason")
            << doc(QByteArray(msgs).replace(R"("finish_reason":"stop")", R"("finish_reason":"\ud800")"), conv)
            << QStringLiteral(R"(Message 2 of the file: "finish_reason")") + lone.arg("d800");
        QTest::newRow("model name")
            << doc(QByteArray(msgs).replace(R"("model_name":"m")", R"("model_name":"m\udbff")"), conv)
            << QStringLiteral(R"(Message 2 of the file: "generation.model_name")") + lone.arg("dbff");
        QTest::newRow("stop string")
            << doc(QByteArray(msgs).replace(R"("stop":["x"])", R"("stop":["x","\ud800"])"), conv)
            << QStringLiteral(R"(Message 2 of the file: "generation.sampling.stop[1]")") + lone.arg("d800");
        QTest::newRow("a settings key kept for newer builds")
            << doc(msgs, QByteArray(conv).replace(R"("settings":{})", R"("settings":{"pane\udfff":1})"))
            << QStringLiteral(R"(The conversation's a key of "settings")") + lone.arg("dfff");
    }
    void importRefusesLoneSurrogates() {
        QFETCH(QByteArray, json);
        QFETCH(QString, expected);
        ChatStore s;
        QVERIFY(s.open(QStringLiteral(":memory:")).ok());
        QString error;
        QVERIFY(!importConversationJson(s, json, &error));
        QVERIFY2(error.contains(expected), qPrintable(error));
        QCOMPARE(s.conversations().size(), 0);
        // The same file with a whole pair (an emoji as two escapes) in that place imports, and the
        // character is stored.
        QByteArray pair = json;
        pair.replace(R"(\ude00\ud83d)", R"(\ud83d\ude00)");
        for (const char *half : {R"(\ud800)", R"(\udc00)", R"(\udbff)", R"(\udfff)"})
            pair.replace(half, R"(\ud83d\ude00)");
        const std::optional<qint64> id = importConversationJson(s, pair, &error);
        QVERIFY2(id, qPrintable(error));
        const QByteArray exported =
            render([&](QIODevice &d, QString *e) { return writeConversationJson(s, *id, d, e); });
        QVERIFY(exported.contains("\xF0\x9F\x98\x80")); // U+1F600 in UTF-8
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

    // The Markdown export renders as the text but can create no HTML element: <, > and & outside
    // code become entities, code stays verbatim inside fences that no line of it can close.
    void inertMarkdownCases_data() {
        QTest::addColumn<QString>("text");
        QTest::addColumn<QString>("expected");
        QTest::newRow("plain") << QStringLiteral("**bold** and _em_, 1 < 2 & 3 > 2")
                               << QStringLiteral("**bold** and _em_, 1 &lt; 2 &amp; 3 &gt; 2");
        QTest::newRow("script") << QStringLiteral("<script>alert(1)</script>")
                                << QStringLiteral("&lt;script&gt;alert(1)&lt;/script&gt;");
        QTest::newRow("img onerror") << QStringLiteral("x <img src=x onerror=alert(1)> y")
                                     << QStringLiteral("x &lt;img src=x onerror=alert(1)&gt; y");
        QTest::newRow("entity stays text")
            << QStringLiteral("&lt;b&gt;") << QStringLiteral("&amp;lt;b&amp;gt;");
        QTest::newRow("blockquote kept")
            << QStringLiteral("> quoted <b>\n> > nested") << QStringLiteral("> quoted &lt;b&gt;\n> > nested");
        QTest::newRow("inline code verbatim")
            << QStringLiteral("use `<div>` or ``a ` <b>``") << QStringLiteral("use `<div>` or ``a ` <b>``");
        QTest::newRow("escaped backtick is no code")
            << QStringLiteral("\\`<img src=x onerror=alert(2)>`")
            << QStringLiteral("\\`&lt;img src=x onerror=alert(2)&gt;`");
        QTest::newRow("backslash before <") << QStringLiteral("\\<b>") << QStringLiteral("&lt;b&gt;");
        QTest::newRow("link destination takes a backtick")
            << QStringLiteral("[a](b`c) <img src=x onerror=alert(3)> `")
            << QStringLiteral("[a](b`c) &lt;img src=x onerror=alert(3)&gt; `");
        QTest::newRow("link title across lines")
            << QStringLiteral("[a](b \"x\n` y\") <img src=x onerror=alert(4)> `")
            << QStringLiteral("[a](b \"x\n` y\") &lt;img src=x onerror=alert(4)&gt; `");
        QTest::newRow("a blank line ends the paragraph")
            << QStringLiteral("[a]\n\n`<b>`") << QStringLiteral("[a]\n\n`<b>`");
        QTest::newRow("table cell") << QStringLiteral("| `a | <img src=x onerror=alert(5)> | b` |")
                                    << QStringLiteral("| `a | &lt;img src=x onerror=alert(5)&gt; | b` |");
        QTest::newRow("autolink takes a backtick")
            << QStringLiteral("www.x.org/`a <img src=x onerror=alert(6)> `")
            << QStringLiteral("www.x.org/`a &lt;img src=x onerror=alert(6)&gt; `");
        QTest::newRow("Pandoc raw attribute")
            << QStringLiteral("`<b>x</b>`{=html}") << QStringLiteral("`&lt;b&gt;x&lt;/b&gt;`{=html}");
        QTest::newRow("code span does not cross lines")
            << QStringLiteral("`abc\n# <img src=x onerror=alert(7)> `")
            << QStringLiteral("`abc\n# &lt;img src=x onerror=alert(7)&gt; `");
        QTest::newRow("fenced code verbatim")
            << QStringLiteral("before <b>\n```python\nif a < b and c > d: print(\"<b>\")\n```\nafter <b>")
            << QStringLiteral(
                   "before &lt;b&gt;\n```python\nif a < b and c > d: print(\"<b>\")\n```\nafter &lt;b&gt;");
        QTest::newRow("a fence longer than the backticks inside")
            << QStringLiteral("````\nprint(\"```\")\n```\n<b>still code</b>\n````\n<b>")
            << QStringLiteral("````\nprint(\"```\")\n```\n<b>still code</b>\n````\n&lt;b&gt;");
        QTest::newRow("tilde fence, info with a backtick")
            << QStringLiteral("~~~ sh `x`\n```\n<b>\n~~~") << QStringLiteral("````sh\n```\n<b>\n````");
        QTest::newRow("unclosed fence is closed") << QStringLiteral("```\n<script>alert(8)</script>")
                                                  << QStringLiteral("```\n<script>alert(8)</script>\n```");
        QTest::newRow("fence inside a list item moves to the margin")
            << QStringLiteral("- item\n  ```\n  <b>x</b>\n  ```")
            << QStringLiteral("- item\n```\n<b>x</b>\n```");
        QTest::newRow("Pandoc raw block loses its attribute")
            << QStringLiteral("```{=html}\n<img src=x onerror=alert(9)>\n```")
            << QStringLiteral("```\n<img src=x onerror=alert(9)>\n```");
        QTest::newRow("indented code is escaped")
            << QStringLiteral("    <b>") << QStringLiteral("    &lt;b&gt;");
        QTest::newRow("carriage returns are line ends")
            << QStringLiteral("a\r```\r<b>\r```\rb<i>") << QStringLiteral("a\n```\n<b>\n```\nb&lt;i&gt;");
    }
    void inertMarkdownCases() {
        QFETCH(QString, text);
        QFETCH(QString, expected);
        QCOMPARE(inertMarkdown(text), expected);
    }

    void markdownExportIsInert() {
        ChatStore s;
        QVERIFY(s.open(QStringLiteral(":memory:")).ok());
        const qint64 c =
            *s.createConversation(QStringLiteral("<img src=x onerror=alert('title')> & co\nline 2"));
        const QString attack = QStringLiteral(
            "Look: <script>alert(1)</script> and <img src=x onerror=alert(1)> & `<kbd>inline</kbd>`\n\n"
            "````html\n<b>bold</b>\n```\nnot the end\n````\n\n"
            "```\n<script>alert('unclosed')</script>");
        const qint64 u = *s.addMessage(c, std::nullopt, MessageRole::User, attack);
        GenerationInfo g = sampleGeneration();
        g.modelName = QStringLiteral("<i>model</i>");
        const qint64 a = *s.beginPartialReply(c, u, g);
        QVERIFY(s.finishReply(a, QStringLiteral("reply <svg onload=alert(2)>"),
                              QStringLiteral("error: <b>x</b>")));
        QString error;
        const QString md = QString::fromUtf8(
            render([&](QIODevice &d, QString *e) { return writeConversationMarkdown(s, c, d, e); }));
        // No raw markup outside code: the only `<` left are inside the inline span and the fences.
        for (const char *raw : {"<script>alert(1)", "<img", "<svg", "<i>model", "<b>x"})
            QVERIFY2(!md.contains(QLatin1String(raw)), raw);
        QVERIFY(
            md.startsWith(QStringLiteral("# &lt;img src=x onerror=alert('title')&gt; &amp; co line 2\n")));
        QVERIFY(md.contains(QStringLiteral("&lt;script&gt;alert(1)&lt;/script&gt; and &lt;img src=x "
                                           "onerror=alert(1)&gt; &amp; `<kbd>inline</kbd>`")));
        QVERIFY(md.contains(QStringLiteral("````html\n<b>bold</b>\n```\nnot the end\n````\n")));
        QVERIFY(md.contains(QStringLiteral("```\n<script>alert('unclosed')</script>\n```\n\n### Assistant")));
        QVERIFY(md.contains(QStringLiteral("· &lt;i&gt;model&lt;/i&gt; · error: &lt;b&gt;x&lt;/b&gt;")));
        QVERIFY(md.contains(QStringLiteral("reply &lt;svg onload=alert(2)&gt;")));

        // A renderer (md4c, CommonMark with GitHub's extensions, as QTextDocument uses) shows the
        // markup as text and makes no element of it; the code keeps its characters.
        QTextDocument doc;
        doc.setMarkdown(md, QTextDocument::MarkdownDialectGitHub);
        const QString text = doc.toPlainText();
        for (const char *shown :
             {"<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "<kbd>inline</kbd>", "<b>bold</b>",
              "not the end", "<script>alert('unclosed')</script>", "reply <svg onload=alert(2)>"})
            QVERIFY2(text.contains(QLatin1String(shown)), shown);
        QVERIFY(!doc.toHtml().contains(QLatin1String("<img")));
        // The assistant's heading is a heading, not code swallowed by the unclosed fence.
        bool heading = false;
        for (QTextBlock b = doc.begin(); b.isValid(); b = b.next())
            heading |= b.text().startsWith(QLatin1String("Assistant")) && b.blockFormat().headingLevel() == 3;
        QVERIFY(heading);
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

    // A profile already in a database (an older build's, or edited by hand: here written with
    // SQL, past every check) that claims a million layers, experts and shared experts, top-k of a
    // million, MoE layers outside any model and token times ten years apart: reports are bounded
    // by the arrays that are there, quickly and in little memory, and the conversation's export
    // imports again.
    void hostileStoredProfileMakesASmallReport() {
        const QString db = path(QStringLiteral("hostile.sqlite"));
        qint64 reply = 0, conversation = 0;
        {
            ChatStore s;
            QVERIFY(s.open(db).ok());
            conversation = *s.createConversation(QStringLiteral("hostile"));
            const qint64 u =
                *s.addMessage(conversation, std::nullopt, MessageRole::User, QStringLiteral("q"));
            reply = *s.beginPartialReply(conversation, u, sampleGeneration());
            QVERIFY(s.finishReply(reply, QStringLiteral("a"), QStringLiteral("stop"), sampleMetrics(), {},
                                  sampleProfile()));
        }
        {
            QSqlDatabase sql =
                QSqlDatabase::addDatabase(QStringLiteral("QSQLITE"), QStringLiteral("hostile"));
            sql.setDatabaseName(db);
            QVERIFY(sql.open());
            QSqlQuery q(sql);
            QList<quint32> moe;
            for (quint32 l = 0; l < 40; ++l) moe << l;
            moe << 5000 << 0xFFFFFFFFu;
            QVERIFY(q.prepare(QStringLiteral(
                "UPDATE message_profiles SET n_layers = 1000000, n_experts = 1000000, n_shared_experts = "
                "1000000, top_k = 1000000, moe_layers = ?, token_times = ? WHERE message_id = ?")));
            q.addBindValue(encodeUInt32(moe));
            q.addBindValue(encodeTokenTimes({0, 10, 20, 315'360'000'000'000})); // ten years later
            q.addBindValue(reply);
            QVERIFY2(q.exec(), qPrintable(q.lastError().text()));
            QVERIFY(q.exec(QStringLiteral("DELETE FROM message_routing WHERE message_id = %1").arg(reply)));
            for (int l : {0, 1, 2, 3, 5000, 7, 7})
                QVERIFY(q.exec(QStringLiteral("INSERT OR IGNORE INTO message_routing (message_id, layer, "
                                              "expert_counts) VALUES (%1, %2, X'01000000')")
                                   .arg(reply)
                                   .arg(l)));
            sql.close();
        }
        QSqlDatabase::removeDatabase(QStringLiteral("hostile"));

        {
            ChatStore s;
            QVERIFY(s.open(db).ok());
            QCOMPARE(s.profile(reply)->nExperts, 1000000); // stored as it is ...
            QString error;
            const std::optional<Report> r = messageReport(s, reply, &error);
            QVERIFY2(r, qPrintable(error));
            const MessageProfile &p = r->requests.first().profile; // ... and bounded by its arrays
            QCOMPARE(p.nExperts, 1);
            QCOMPARE(p.nLayers, kMaxProfileLayers);
            QCOMPARE(p.nSharedExperts, kMaxProfileExperts);
            QCOMPARE(p.k, 1);
            QVERIFY(p.traceIds.isEmpty());
            QVERIFY(!profileShapeError(p));
            QVERIFY(reportHtml(*r).size() < 1024 * 1024);
        }

#if !defined(ES_CLI_PATH)
        QSKIP("expertscope-cli is not built");
#else
        auto run = [](const QStringList &args, QString *err) {
            QProcess p;
            p.start(QStringLiteral(ES_CLI_PATH), args);
            if (!p.waitForFinished(120000)) return -1; // bounded: a report of this profile took minutes
            *err = QString::fromUtf8(p.readAllStandardError());
            return p.exitCode();
        };
        QString err;
        for (const QString &format : {QStringLiteral("html"), QStringLiteral("pdf"), QStringLiteral("csv"),
                                      QStringLiteral("json"), QStringLiteral("trace")}) {
            const QString out = path(QStringLiteral("hostile.") + format);
            QCOMPARE(run({QStringLiteral("report"), QStringLiteral("--db"), db, QStringLiteral("--message"),
                          QString::number(reply), QStringLiteral("--format"), format, QStringLiteral("--out"),
                          out},
                         &err),
                     0);
            QVERIFY2(QFileInfo(out).size() < 2 * 1024 * 1024,
                     qPrintable(QStringLiteral("%1: %2 bytes").arg(format).arg(QFileInfo(out).size())));
        }
        const QString chat = path(QStringLiteral("hostile-chat.json"));
        QCOMPARE(run({QStringLiteral("report"), QStringLiteral("--db"), db, QStringLiteral("--conversation"),
                      QString::number(conversation), QStringLiteral("--format"), QStringLiteral("chat-json"),
                      QStringLiteral("--out"), chat},
                     &err),
                 0);
        QCOMPARE(run({QStringLiteral("import"), QStringLiteral("--db"),
                      path(QStringLiteral("hostile-2.sqlite")), QStringLiteral("--chat"), chat},
                     &err),
                 0);
        // The largest child so far (every CLI run of this test binary): no report sized by the claims.
        rusage children{};
        QCOMPARE(getrusage(RUSAGE_CHILDREN, &children), 0);
        qInfo("largest expertscope-cli run: %ld MiB", children.ru_maxrss / 1024);
        QVERIFY2(children.ru_maxrss < 1024 * 1024,
                 qPrintable(QStringLiteral("%1 KiB").arg(children.ru_maxrss)));
#endif
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
