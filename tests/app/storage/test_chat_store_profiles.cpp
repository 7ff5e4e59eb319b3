// ChatStore profiles (schema v4, steps and memory samples since v5): the BLOB codecs of
// message_profiles round-trip exactly and refuse damaged input, a profile is stored with its reply
// in one transaction, survives delete and undo, and a damaged row reads as no profile. A profile's
// shape: profileShapeError() names what an import refuses, boundedProfile() makes a stored one
// consistent (and leaves a consistent one as it is).
#include "chat_store_test_support.h"

#include <QTemporaryDir>
#include <QtTest>

#include <cmath>
#include <functional>
#include <limits>

using namespace es;
using namespace es_test;

class TestChatStoreProfiles : public QObject {
    Q_OBJECT

private:
    QTemporaryDir m_dir;
    int m_fileCounter = 0;
    QString freshPath() { return m_dir.filePath(QStringLiteral("chats-%1.sqlite").arg(++m_fileCounter)); }

private Q_SLOTS:
    void initTestCase() { QVERIFY(m_dir.isValid()); }

    // ---- Profiles (schema v4) ----------------------------------------------------------------------

    void profileCodecs_data() {
        QTest::addColumn<QList<qint64>>("times");
        QTest::newRow("none") << QList<qint64>{};
        QTest::newRow("one") << QList<qint64>{0};
        QTest::newRow("decode") << QList<qint64>{31250, 51750, 72750, 92500};
        QTest::newRow("clock step back") << QList<qint64>{100, 90, 5'000'000'000LL, 5'000'000'001LL};
    }
    void profileCodecs() {
        QFETCH(QList<qint64>, times);
        const QByteArray b = encodeTokenTimes(times);
        QCOMPARE(decodeTokenTimes(b), std::optional<QList<qint64>>(times));
        QVERIFY(!decodeTokenTimes(QByteArray()));
        QVERIFY(!decodeTokenTimes(QByteArray("\x02", 1)));        // unknown format
        QVERIFY(!decodeTokenTimes(QByteArray("\x01\x80", 2)));    // varint cut off

        // Traces: one byte per id up to 255 experts (−1 kept), two above; float16 weights exact.
        for (int nExperts : {4, 255, 300}) {
            const QList<qint16> ids = {-1, 0, 3, qint16(nExperts - 1)};
            const QList<float> w = {0.f, 0.5f, 0.2998046875f, 1.f};
            const QByteArray blob = encodeRoutingTrace(ids, w, nExperts);
            QList<qint16> ids2;
            QList<float> w2;
            QVERIFY(decodeRoutingTrace(blob, &ids2, &w2));
            QCOMPARE(ids2, ids);
            QCOMPARE(w2, w);
            QCOMPARE(blob.at(5), char(nExperts <= 255 ? 1 : 2));
            QByteArray damaged = blob;
            damaged.chop(3);
            QVERIFY(!decodeRoutingTrace(damaged, &ids2, &w2));
        }
        QList<qint16> ids;
        QList<float> w;
        QVERIFY(decodeRoutingTrace(QByteArray(), &ids, &w)); // no trace: a dense model
        QVERIFY(ids.isEmpty());
        QVERIFY(!decodeRoutingTrace(QByteArray("XXXX\x01\x01\0\0\0\0\0\0", 12), &ids, &w));
    }

    // The second formats: token times with where each token's text ends, a trace with the
    // router's margins (NaN kept); the first format still reads, and says it has neither.
    void profileCodecsWithTextAndMargins() {
        const QList<qint64> times = {31250, 51750, 72750};
        const QList<int> ends = {3, 3, 11};
        const QByteArray b = encodeTokenTimes(times, ends);
        QCOMPARE(b.at(0), char(2));
        QList<int> ends2;
        QCOMPARE(decodeTokenTimes(b, &ends2), std::optional<QList<qint64>>(times));
        QCOMPARE(ends2, ends);
        QCOMPARE(decodeTokenTimes(encodeTokenTimes(times), &ends2), std::optional<QList<qint64>>(times));
        QVERIFY(ends2.isEmpty());
        QCOMPARE(encodeTokenTimes(times, {1, 2}).at(0), char(1)); // not one per token: not kept
        QByteArray cut = b;
        cut.chop(1);
        QVERIFY(!decodeTokenTimes(cut, &ends2)); // a text end cut off

        const QList<qint16> ids = {-1, -1, 0, 3, 2, 1};
        const QList<float> w = {0.f, 0.f, 0.5f, 0.5f, 0.75f, 0.25f};
        const QList<float> margins = {NAN, 0.125f, 0.0f};
        const QByteArray blob = encodeRoutingTrace(ids, w, 4, margins);
        QCOMPARE(blob.at(4), char(2));
        QList<qint16> ids2;
        QList<float> w2, m2;
        QVERIFY(decodeRoutingTrace(blob, &ids2, &w2, &m2));
        QCOMPARE(ids2, ids);
        QCOMPARE(w2, w);
        QCOMPARE(m2.size(), 3);
        QVERIFY(std::isnan(m2[0]));
        QCOMPARE(m2[1], 0.125f);
        QCOMPARE(m2[2], 0.0f);
        QVERIFY(decodeRoutingTrace(encodeRoutingTrace(ids, w, 4), &ids2, &w2, &m2));
        QVERIFY(m2.isEmpty());
        QByteArray damaged = blob;
        damaged.chop(2);
        QVERIFY(!decodeRoutingTrace(damaged, &ids2, &w2, &m2));

        // Stored with a reply and read back.
        auto s = memoryStore();
        const qint64 c = *s->createConversation(QStringLiteral("margins"));
        const qint64 u = *s->addMessage(c, std::nullopt, MessageRole::User, QStringLiteral("q"));
        const qint64 a = *s->beginPartialReply(c, u, sampleGeneration());
        MessageProfile p = sampleProfile();
        p.traceMargins.clear();
        for (int i = 0; i < p.tracePositions() * int(p.moeLayers.size()); ++i) p.traceMargins << float(i) / 8.0f;
        p.tokenTextEnds.clear();
        for (int i = 0; i < p.tokenTimesUs.size(); ++i) p.tokenTextEnds << 2 * i + 1;
        QVERIFY(!profileShapeError(p));
        QVERIFY(s->finishReply(a, QStringLiteral("answer"), QStringLiteral("stop"), {}, {}, p));
        const std::optional<MessageProfile> back = s->profile(a);
        QVERIFY(back);
        QCOMPARE(back->traceMargins, p.traceMargins);
        QCOMPARE(back->tokenTextEnds, p.tokenTextEnds);
        // A count that does not fit the trace or the token times is named.
        p.traceMargins.removeLast();
        QVERIFY(profileShapeError(p)->contains(QStringLiteral("trace_margins")));
        QVERIFY(boundedProfile(p).traceMargins.isEmpty());
    }

    // v5 columns: steps and memory samples round-trip exactly; damaged BLOBs are refused.
    void profileStepCodecs() {
        const MessageProfile p = sampleProfile();
        QCOMPARE(decodeProfileSteps(encodeProfileSteps(p.steps)), std::optional<QList<ProfileStep>>(p.steps));
        QCOMPARE(decodeMemorySamples(encodeMemorySamples(p.memory)),
                 std::optional<QList<ProfileMemorySample>>(p.memory));
        QCOMPARE(decodeProfileSteps(QByteArray()), std::optional<QList<ProfileStep>>(QList<ProfileStep>{}));
        QCOMPARE(decodeMemorySamples(QByteArray()),
                 std::optional<QList<ProfileMemorySample>>(QList<ProfileMemorySample>{}));
        QByteArray cut = encodeProfileSteps(p.steps);
        cut.chop(1);
        QVERIFY(!decodeProfileSteps(cut));                        // a record cut short
        QVERIFY(!decodeMemorySamples(QByteArray("\x02\x00", 2))); // unknown format
    }

    // v6 column: the step timeline round-trips exactly; a damaged or foreign one is refused.
    void stepTimelineCodec() {
        const MessageProfile p = sampleProfile();
        QVERIFY(!p.timeline.isEmpty());
        QCOMPARE(decodeStepTimeline(encodeStepTimeline(p.timeline)), std::optional<StepTimeline>(p.timeline));
        QCOMPARE(decodeStepTimeline(QByteArray()), std::optional<StepTimeline>(StepTimeline{}));
        QByteArray cut = encodeStepTimeline(p.timeline);
        cut.chop(2);
        QVERIFY(!decodeStepTimeline(cut));                                                // not JSON
        QVERIFY(!decodeStepTimeline(R"({"v":2,"step":1,"read_bw":0,"ops":[]})"));        // another version
        QVERIFY(!decodeStepTimeline(R"({"v":1,"step":1,"read_bw":0,"ops":[["a",9,0,0,1,0,0]]})")); // no phase 9
        QVERIFY(!decodeStepTimeline(R"({"v":1,"step":1,"read_bw":0,"ops":[["a",1,0,0,-1,0,0]]})")); // negative time
        QVERIFY(!decodeStepTimeline(R"({"v":1,"step":1,"read_bw":0,"ops":[["a",1,0,0,1,0,2]]})")); // share > 1
        QVERIFY(!decodeStepTimeline(R"({"v":1,"step":1e300,"read_bw":0,"ops":[]})"));              // no such step
        QVERIFY(!decodeStepTimeline(R"({"v":1,"step":1,"read_bw":-5,"ops":[]})"));                 // negative bandwidth
    }

    // Found by tests/fuzz: extreme values round-trip (differences wrap, no signed overflow), a
    // count beyond int is refused, and a trace whose zlib length is damaged is refused before
    // qUncompress() would allocate it.
    void profileCodecsAtTheLimits() {
        constexpr qint64 lo = std::numeric_limits<qint64>::min(), hi = std::numeric_limits<qint64>::max();
        const QList<qint64> times = {hi, lo, 0, lo, hi};
        QCOMPARE(decodeTokenTimes(encodeTokenTimes(times)), std::optional<QList<qint64>>(times));
        const QList<ProfileStep> steps = {{lo, hi, 1, 2, 3, lo, hi, 0, -1}, {hi, lo, -4, 5, 6, 7, 8, 9, 10}};
        QCOMPARE(decodeProfileSteps(encodeProfileSteps(steps)), std::optional<QList<ProfileStep>>(steps));
        const QList<ProfileMemorySample> mem = {{hi, lo, 3}, {lo, hi, -3}};
        QCOMPARE(decodeMemorySamples(encodeMemorySamples(mem)),
                 std::optional<QList<ProfileMemorySample>>(mem));

        QByteArray wide("\x01", 1); // one step whose n_seqs (third field) is 2^40
        for (quint8 b : {0, 0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x20, 0, 0, 0, 0, 0, 0}) wide.append(char(b));
        QVERIFY(!decodeProfileSteps(wide));

        QByteArray trace = encodeRoutingTrace({1, 2}, {0.5f, 0.5f}, 8);
        trace[12] = char(0x7f); // after the 12-byte header, qCompress()'s big-endian length: ~2 GB
        QList<qint16> ids;
        QList<float> w;
        QVERIFY(!decodeRoutingTrace(trace, &ids, &w));
    }

    void profileStoredWithReply() {
        auto s = memoryStore();
        const qint64 c = *s->createConversation(QStringLiteral("profiled"));
        const qint64 u = *s->addMessage(c, std::nullopt, MessageRole::User, QStringLiteral("【技术解析模式】MoE?"));
        const qint64 a = *s->beginPartialReply(c, u, sampleGeneration());
        QVERIFY(!s->profile(a));
        // Routing passed beside the profile wins for message_routing (ChatPane passes both, equal).
        QVERIFY(s->finishReply(a, QStringLiteral("answer"), QStringLiteral("stop"), sampleMetrics(), {}, sampleProfile()));
        QCOMPARE(*s->profile(a), sampleProfile());
        QCOMPARE(s->routing(a), sampleProfile().routing);
        QCOMPARE(*s->metrics(a), sampleMetrics());

        // One transaction: a finish that fails (not partial any more) leaves no profile behind.
        const qint64 b = *s->regenerate(a, sampleGeneration());
        QVERIFY(s->finishReply(b, QStringLiteral("plain"), QStringLiteral("stop")));
        MessageProfile other = sampleProfile();
        other.ttftUs = 1;
        QVERIFY(!s->finishReply(b, QStringLiteral("again"), QStringLiteral("stop"), sampleMetrics(), {}, other));
        QVERIFY(!s->profile(b));

        // saveProfile replaces, routing included; a dense model's profile has no trace.
        MessageProfile dense;
        dense.ttftUs = 5;
        dense.tokenTimesUs = {5, 9};
        dense.nLayers = 2;
        QVERIFY(s->saveProfile(b, dense));
        QCOMPARE(*s->profile(b), dense);
        QVERIFY(s->routing(b).isEmpty());
        QVERIFY(!s->saveProfile(424242, dense)); // no such message
    }

    void profileSurvivesDeleteAndUndo() {
        auto s = memoryStore();
        const qint64 c = *s->createConversation(QStringLiteral("undo keeps profiles"));
        const qint64 u = *s->addMessage(c, std::nullopt, MessageRole::User, QStringLiteral("q"));
        const qint64 a = *s->beginPartialReply(c, u, sampleGeneration());
        QVERIFY(s->finishReply(a, QStringLiteral("answer"), QStringLiteral("stop"), sampleMetrics(), sampleRouting(),
                               sampleProfile()));
        const std::optional<ConversationSnapshot> snap = s->deleteConversation(c);
        QVERIFY(snap);
        QVERIFY(!s->profile(a));
        QCOMPARE(snap->profiles.size(), 1);
        QVERIFY(s->restoreConversation(*snap));
        MessageProfile expected = sampleProfile();
        expected.routing = sampleRouting(); // the routing argument was stored
        QCOMPARE(*s->profile(a), expected);
    }

    // ---- Shape: what an import refuses, and what a stored profile is bounded to -------------------

    void profileShapeIsCheckedAndBounded() {
        // What the recorder makes is consistent and comes back from boundedProfile() unchanged.
        QVERIFY(!profileShapeError(sampleProfile()));
        QCOMPARE(boundedProfile(sampleProfile()), sampleProfile());
        MessageProfile dense;
        dense.tokenTimesUs = {5, 9};
        dense.nLayers = 2;
        QVERIFY(!profileShapeError(dense));
        QCOMPARE(boundedProfile(dense), dense);
        MessageProfile routingOnly; // a reply stored before profiles existed: routing alone
        routingOnly.routing = sampleRouting();
        QVERIFY(!profileShapeError(routingOnly));
        QCOMPARE(boundedProfile(routingOnly), routingOnly);

        struct Case {
            const char *name;
            std::function<void(MessageProfile &)> damage;
            QString says;
        };
        const Case cases[] = {
            {"a million layers and experts", [](MessageProfile &p) { p.nLayers = p.nExperts = 1000000; },
             R"("n_layers" is 1000000; a profile has at most 1024 layers)"},
            {"a million experts", [](MessageProfile &p) { p.nExperts = 1000000; },
             R"("n_experts" is 1000000; a profile has at most 4096 experts)"},
            {"too many shared experts", [](MessageProfile &p) { p.nSharedExperts = 5000; },
             R"("n_shared_experts" is 5000; a profile has at most 4096 shared experts)"},
            {"k above n_experts", [](MessageProfile &p) { p.k = 5; }, R"("k" is 5 but "n_experts" is 4)"},
            {"negative layers", [](MessageProfile &p) { p.nLayers = -1; },
             R"("n_layers" is -1; it cannot be negative)"},
            {"negative k", [](MessageProfile &p) { p.k = -2; }, R"("k" is -2; it cannot be negative)"},
            {"negative prompt", [](MessageProfile &p) { p.nPromptTokens = -7; },
             R"("prompt_tokens" is -7; it cannot be negative)"},
            {"MoE layer beyond the model",
             [](MessageProfile &p) {
                 p.moeLayers = {1, 9};
             },
             R"("moe_layers" lists layer 9 but "n_layers" is 4)"},
            {"MoE layer twice",
             [](MessageProfile &p) {
                 p.moeLayers = {1, 1, 3};
             },
             R"("moe_layers" lists layer 1 twice)"},
            {"routing row shorter",
             [](MessageProfile &p) {
                 p.routing[0].expertCounts = {1, 2, 3};
             },
             R"("routing" layer 1 has 3 expert counts but "n_experts" is 4)"},
            {"routing row longer",
             [](MessageProfile &p) {
                 p.routing[1].expertCounts = {1, 2, 3, 4, 5};
             },
             R"("routing" layer 3 has 5 expert counts but "n_experts" is 4)"},
            {"routing of a dense layer", [](MessageProfile &p) { p.routing[1].layer = 2; },
             R"("routing" has layer 2, which "moe_layers" does not list)"},
            {"trace cut short",
             [](MessageProfile &p) {
                 p.traceIds.removeLast();
                 p.traceWeights.removeLast();
             },
             R"("trace_ids" has 11 entries, not a whole number of positions of 4 slots)"},
            {"trace id beyond the experts", [](MessageProfile &p) { p.traceIds[4] = 4; },
             R"("trace_ids" holds expert 4 but "n_experts" is 4)"},
            {"trace without k", [](MessageProfile &p) { p.k = 0; },
             R"("trace_ids" has 12 entries but "moe_layers" lists 2 layers and "k" is 0)"},
            {"weights missing", [](MessageProfile &p) { p.traceWeights.clear(); },
             R"("trace_ids" has 12 entries but "trace_weights" has 0)"},
        };
        for (const Case &c : cases) {
            MessageProfile p = sampleProfile();
            c.damage(p);
            const std::optional<QString> why = profileShapeError(p);
            QVERIFY2(why && why->contains(c.says),
                     qPrintable(QLatin1String(c.name) + QLatin1String(": ") + why.value_or("none")));
            // Bounded, the same profile is consistent and inside the limits.
            const MessageProfile b = boundedProfile(p);
            const std::optional<QString> after = profileShapeError(b);
            QVERIFY2(!after,
                     qPrintable(QLatin1String(c.name) + QLatin1String(": ") + after.value_or(QString())));
        }

        // The arrays win over the counts: a million claimed, the four experts of the rows kept.
        MessageProfile huge = sampleProfile();
        huge.nLayers = huge.nExperts = huge.nSharedExperts = huge.k = 1000000;
        MessageProfile b = boundedProfile(huge);
        QCOMPARE(b.nLayers, kMaxProfileLayers);
        QCOMPARE(b.nExperts, 4);
        QCOMPARE(b.nSharedExperts, kMaxProfileExperts);
        QCOMPARE(b.k, 4);
        QVERIFY(b.traceIds.isEmpty()); // recorded with k = 2: it does not fit k = 4, so it is not shown
        QCOMPARE(b.routing, sampleProfile().routing);
        // Rows of different lengths: n_experts becomes the longest, the others padded with zeros;
        // the trace still fits (its ids are below it) and stays.
        MessageProfile ragged = sampleProfile();
        ragged.routing[1].expertCounts = {0, 2, 2, 0, 7};
        b = boundedProfile(ragged);
        QCOMPARE(b.nExperts, 5);
        QCOMPARE(b.routing[0].expertCounts, (QList<quint32>{2, 0, 1, 1, 0}));
        QCOMPARE(b.traceIds, sampleProfile().traceIds);
        // Layers: rows and MoE layers outside the limit, twice or not MoE are dropped; layers the
        // arrays hold raise the count.
        MessageProfile layers = sampleProfile();
        layers.nLayers = 2;
        layers.moeLayers = {1, 3, 3, 5000, -4};
        layers.routing.append({7, {1, 1, 1, 1}});
        layers.routing.append({1, {9, 9, 9, 9}});
        b = boundedProfile(layers);
        QCOMPARE(b.moeLayers, (QList<int>{1, 3}));
        QCOMPARE(b.nLayers, 4);
        QCOMPARE(b.routing, sampleProfile().routing);
    }

    void damagedProfileReadsAsNone() {
        const QString path = freshPath();
        qint64 a = 0;
        {
            ChatStore s;
            QVERIFY(s.open(path).ok());
            const qint64 c = *s.createConversation(QStringLiteral("damaged"));
            const qint64 u = *s.addMessage(c, std::nullopt, MessageRole::User, QStringLiteral("q"));
            a = *s.beginPartialReply(c, u, {});
            QVERIFY(s.finishReply(a, QStringLiteral("x"), QStringLiteral("stop"), {}, {}, sampleProfile()));
        }
        {
            RawDb raw(path);
            QVERIFY(raw.exec(QStringLiteral("UPDATE message_profiles SET routing_trace = X'00112233'")));
        }
        ChatStore s;
        QVERIFY(s.open(path).ok());
        QVERIFY(!s.profile(a));
        QVERIFY2(s.lastError().contains(QLatin1String("damaged")), qPrintable(s.lastError()));
        QCOMPARE(s.message(a)->content, QStringLiteral("x")); // the message itself is fine
    }
};

QTEST_GUILESS_MAIN(TestChatStoreProfiles)

#include "test_chat_store_profiles.moc"
