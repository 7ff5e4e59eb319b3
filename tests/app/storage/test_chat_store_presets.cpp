// ChatStore presets: the built-ins seeded and read-only, user presets created, changed, reordered
// and deleted, and the JSON exchange format exported and imported (duplicates skipped, malformed
// files refused whole, a lone UTF-16 surrogate refused naming where it is).
#include "chat_store_test_support.h"
#include "presets.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QtTest>

using namespace es;
using namespace es_test;

class TestChatStorePresets : public QObject {
    Q_OBJECT

private:
private Q_SLOTS:
    // ---- Presets ---------------------------------------------------------------------------------------------------

    void builtinPresetsSeeded() {
        auto s = memoryStore();
        const QList<Preset> p = s->presets();
        QCOMPARE(p.size(), 2);
        QCOMPARE(p[0].prefix, QStringLiteral("【技术解析模式】"));
        QCOMPARE(p[0].builtinKey, QStringLiteral("technical"));
        QVERIFY(p[0].isBuiltin());
        QVERIFY(!p[0].systemPrompt.isEmpty());
        QVERIFY(qAbs(*p[0].sampling.temperature - 0.3) < 1e-9);
        QCOMPARE(p[1].prefix, QStringLiteral("【创意写作模式】"));
        QCOMPARE(p[1].builtinKey, QStringLiteral("creative"));
        QVERIFY(qAbs(*p[1].sampling.temperature - 0.9) < 1e-9);
        QCOMPARE(p[0].position, 0);
        QCOMPARE(p[1].position, 1);
        // Built-ins are read-only.
        Preset edited = p[0];
        edited.systemPrompt = QStringLiteral("changed");
        QVERIFY(!s->updatePreset(edited));
        QVERIFY(!s->deletePreset(p[0].id));
        QCOMPARE(s->presets(), p);
    }

    void presetCrud() {
        auto s = memoryStore();
        QSignalSpy changed(s.get(), &ChatStore::presetsChanged);
        const QList<Preset> builtins = s->presets();
        Preset mine;
        mine.name = QStringLiteral("代码审查");
        mine.prefix = QStringLiteral("【代码审查】");
        mine.systemPrompt = QStringLiteral("Review the code.");
        mine.sampling.temperature = 0.2;
        mine.sampling.maxTokens = 1024;
        const qint64 id = *s->createPreset(mine);
        QCOMPARE(s->presets().size(), 3);
        Preset stored = *s->preset(id);
        QCOMPARE(stored.position, 2);
        QVERIFY(!stored.isBuiltin());
        QCOMPARE(stored.sampling, mine.sampling);
        stored.name = QStringLiteral("代码审查 v2");
        stored.sampling.topP = 0.9;
        QVERIFY(s->updatePreset(stored));
        QCOMPARE(*s->preset(id), stored);
        QVERIFY(!s->createPreset(Preset{})); // a name is required

        // Reorder: the user's preset first, built-ins after.
        QVERIFY(s->reorderPresets({id, builtins[1].id, builtins[0].id}));
        QList<qint64> order;
        for (const Preset &p : s->presets()) order.append(p.id);
        QCOMPARE(order, (QList<qint64>{id, builtins[1].id, builtins[0].id}));
        QVERIFY(!s->reorderPresets({id, builtins[0].id}));                  // one missing
        QVERIFY(!s->reorderPresets({id, id, builtins[0].id, builtins[1].id})); // duplicate
        QVERIFY(!s->reorderPresets({id, builtins[1].id, builtins[0].id, 999}));

        QVERIFY(s->deletePreset(id));
        QCOMPARE(s->presets().size(), 2);
        QVERIFY(!s->deletePreset(id));
        QVERIFY(changed.count() >= 4);
    }

    void presetExportImportRoundTrip() {
        auto s = memoryStore();
        Preset a;
        a.name = QStringLiteral("Short");
        a.prefix = QStringLiteral("【短】");
        a.systemPrompt = QStringLiteral("答案不超过三句话。\n\"Quoted\" and \\backslashes\\.");
        a.sampling.temperature = 0.1;
        a.sampling.seed = ~quint64(0);
        a.sampling.stopStrings = {QStringLiteral("\n\n")};
        Preset b;
        b.name = QStringLiteral("Plain");
        const qint64 ida = *s->createPreset(a), idb = *s->createPreset(b);
        const QByteArray json = s->exportPresets({ida, idb});
        const QJsonObject root = QJsonDocument::fromJson(json).object();
        QCOMPARE(root.value(QStringLiteral("format")).toString(), QStringLiteral("expertscope.presets"));
        QCOMPARE(root.value(QStringLiteral("version")).toInt(), kPresetFormatVersion);
        QCOMPARE(root.value(QStringLiteral("presets")).toArray().size(), 2);

        auto other = memoryStore();
        const std::optional<PresetImportResult> imported = other->importPresets(json);
        QVERIFY2(imported, qPrintable(other->lastError()));
        QCOMPARE(imported->importedIds.size(), 2);
        QCOMPARE(imported->skippedDuplicates, 0);
        const QList<Preset> got = other->presets();
        QCOMPARE(got.size(), 4);
        for (int i = 0; i < 2; ++i) {
            const Preset &want = i == 0 ? a : b;
            const Preset &have = got[2 + i];
            QCOMPARE(have.name, want.name);
            QCOMPARE(have.prefix, want.prefix);
            QCOMPARE(have.systemPrompt, want.systemPrompt);
            QCOMPARE(have.sampling, want.sampling);
            QVERIFY(!have.isBuiltin());
        }
        // Export → import of everything is stable, and importing again adds nothing.
        QCOMPARE(other->exportPresets(imported->importedIds), json);
        const std::optional<PresetImportResult> again = other->importPresets(json);
        QVERIFY(again);
        QCOMPARE(again->importedIds.size(), 0);
        QCOMPARE(again->skippedDuplicates, 2);
        // Built-ins exported from one store are duplicates of the other's.
        QCOMPARE(other->importPresets(s->exportPresets())->skippedDuplicates, 4);
    }

    void presetImportErrors_data() {
        QTest::addColumn<QByteArray>("json");
        QTest::addColumn<QString>("mentions");
        QTest::newRow("not JSON") << QByteArray("{presets") << QString("JSON");
        QTest::newRow("array") << QByteArray("[]") << QString("object");
        QTest::newRow("wrong format") << QByteArray(R"({"format":"other","version":1,"presets":[]})") << QString("format");
        QTest::newRow("newer version") << QByteArray(R"({"format":"expertscope.presets","version":2,"presets":[]})")
                                       << QString("newer");
        QTest::newRow("version not a number")
            << QByteArray(R"({"format":"expertscope.presets","version":"1","presets":[]})") << QString("version");
        QTest::newRow("no presets") << QByteArray(R"({"format":"expertscope.presets","version":1})") << QString("presets");
        QTest::newRow("missing name")
            << QByteArray(R"({"format":"expertscope.presets","version":1,"presets":[{"name":"ok"},{"prefix":"x"}]})")
            << QString("Preset 2");
        QTest::newRow("prefix not a string")
            << QByteArray(R"({"format":"expertscope.presets","version":1,"presets":[{"name":"a","prefix":3}]})")
            << QString("prefix");
        QTest::newRow("sampling not an object")
            << QByteArray(R"({"format":"expertscope.presets","version":1,"presets":[{"name":"a","sampling":[]}]})")
            << QString("sampling");
        // Half a UTF-16 pair is no text: stored, it would come back as U+FFFD.
        QTest::newRow("lone surrogate in a prompt")
            << QByteArray(
                   R"({"format":"expertscope.presets","version":1,"presets":[{"name":"a","system_prompt":"x\ud800y"}]})")
            << QString(R"("presets[0].system_prompt" holds a lone UTF-16 surrogate (\ud800))");
        QTest::newRow("lone surrogate in a stop string")
            << QByteArray(
                   R"({"format":"expertscope.presets","version":1,"presets":[{"name":"a","sampling":{"stop":["ok","\udc01"]}}]})")
            << QString(R"("presets[0].sampling.stop[1]" holds a lone UTF-16 surrogate (\udc01))");
    }

    // Where a lone surrogate is: in the parsed document (with its path), and in the bytes should
    // a parser have replaced it; a pair and an escaped backslash before "ud800" are not one.
    void loneSurrogatesAreFound() {
        auto find = [](const QByteArray &json) {
            QJsonParseError e;
            const QJsonDocument d = QJsonDocument::fromJson(json, &e);
            return e.error == QJsonParseError::NoError ? findLoneSurrogate(d, json) : std::nullopt;
        };
        QVERIFY(!find(R"({"a":"\ud83d\ude00 and \\ud800 and é"})"));
        std::optional<LoneSurrogate> l = find(R"({"a":[1,{"b":"x\ud800y"}]})");
        QVERIFY(l);
        QCOMPARE(l->path, QStringLiteral("a[1].b"));
        QCOMPARE(l->unit, ushort(0xd800));
        QVERIFY(!l->inKey);
        l = find(R"({"a":"\udc00\ud800"})"); // a pair the wrong way round: two lone halves
        QVERIFY(l && l->unit == 0xdc00 && l->path == QLatin1String("a"));
        l = find(R"({"a":"x\ud800"})"); // a high half at the end
        QVERIFY(l && l->unit == 0xd800);
        l = find(R"({"o":{"k\udfff":1}})");
        QVERIFY(l && l->inKey && l->path == QLatin1String("o") && l->unit == 0xdfff);
        // The bytes alone (a document without it, as a parser that replaced it would give).
        l = findLoneSurrogate(QJsonDocument(), R"({"a":"x\uD800"})");
        QVERIFY(l && l->path.isEmpty() && l->byteOffset == 7 && l->unit == 0xd800);
        // A pair, an escaped backslash before "ud800", an escaped quote, a plain \u escape.
        const QByteArray fine = "{\"a\":\"\\ud83d\\ude00\",\"b\":\"\\\\ud800\",\"c\\\"\":\"\\u0041\"}";
        QVERIFY(!findLoneSurrogate(QJsonDocument(), fine));
    }

    void presetImportErrors() {
        QFETCH(QByteArray, json);
        QFETCH(QString, mentions);
        auto s = memoryStore();
        QVERIFY(!s->importPresets(json));
        QVERIFY2(s->lastError().contains(mentions), qPrintable(s->lastError()));
        QCOMPARE(s->presets().size(), 2); // nothing half-imported
    }
};

QTEST_GUILESS_MAIN(TestChatStorePresets)

#include "test_chat_store_presets.moc"
