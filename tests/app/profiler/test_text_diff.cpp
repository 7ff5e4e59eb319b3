// The Compare page's word diff (app/profiler/text_diff.h): units of Latin and CJK text, the
// spans of an edit in the middle, insertions and deletions at either end, identical and empty
// texts, and the bound on very long texts; every diff's spans must rebuild both texts exactly.
#include "text_diff.h"

#include <QtTest>

using namespace es;

namespace {
// A's text (Same + Removed) and B's (Same + Added) from the spans.
std::pair<QString, QString> rebuild(const TextDiff &d) {
    QString a, b;
    for (const DiffSpan &s : d.spans) {
        if (s.kind != DiffSpan::Kind::Added) a += s.text;
        if (s.kind != DiffSpan::Kind::Removed) b += s.text;
    }
    return {a, b};
}
} // namespace

class TestTextDiff : public QObject {
    Q_OBJECT
private slots:
    void units();
    void spans_data();
    void spans();
    void longTextsAreBounded();
    void html();
};

void TestTextDiff::units() {
    QCOMPARE(diffUnits(QStringLiteral("Hello, world  x2")),
             (QStringList{"Hello", ",", " ", "world", "  ", "x2"}));
    QCOMPARE(diffUnits(QStringLiteral("专家路由ok")), (QStringList{"专", "家", "路", "由", "ok"}));
    QVERIFY(diffUnits(QString()).isEmpty());
}

void TestTextDiff::spans_data() {
    QTest::addColumn<QString>("a");
    QTest::addColumn<QString>("b");
    QTest::addColumn<int>("same"); // non-space units common to both
    QTest::newRow("identical") << "the cat sat" << "the cat sat" << 3;
    QTest::newRow("middle word") << "the cat sat down" << "the dog sat down" << 3;
    QTest::newRow("inserted") << "a b" << "a x b" << 2;
    QTest::newRow("deleted at the end") << "a b c" << "a b" << 2;
    QTest::newRow("added at the start") << "b c" << "a b c" << 2;
    QTest::newRow("empty A") << "" << "new text" << 0;
    QTest::newRow("empty B") << "old text" << "" << 0;
    QTest::newRow("chinese") << "混合专家模型很快" << "混合专家模型很慢" << 7;
    QTest::newRow("reordered") << "one two three" << "three two one" << 1;
}

void TestTextDiff::spans() {
    QFETCH(QString, a);
    QFETCH(QString, b);
    QFETCH(int, same);
    const TextDiff d = diffTexts(a, b);
    const auto [ra, rb] = rebuild(d);
    QCOMPARE(ra, a);
    QCOMPARE(rb, b);
    QCOMPARE(d.unitsSame, same);
    QVERIFY(!d.truncated);
    for (qsizetype i = 1; i < d.spans.size(); ++i) QVERIFY(d.spans[i].kind != d.spans[i - 1].kind); // merged
    if (a == b) QCOMPARE(d.spans.size(), a.isEmpty() ? 0 : 1);
}

void TestTextDiff::longTextsAreBounded() {
    QString a, b;
    for (int i = 0; i < kMaxDiffUnits; ++i) {
        a += QStringLiteral("w%1 ").arg(i);
        b += QStringLiteral("v%1 ").arg(i);
    }
    a = QStringLiteral("same start ") + a + QStringLiteral("same end");
    b = QStringLiteral("same start ") + b + QStringLiteral("same end");
    const TextDiff d = diffTexts(a, b);
    QVERIFY(d.truncated);
    const auto [ra, rb] = rebuild(d);
    QCOMPARE(ra, a);
    QCOMPARE(rb, b);
    QCOMPARE(d.unitsSame, 4); // the common prefix and suffix are still found
}

void TestTextDiff::html() {
    const QString h = diffHtml(diffTexts(QStringLiteral("a <b> c"), QStringLiteral("a <i> c\nd")));
    QVERIFY(h.contains(QStringLiteral("<s style=\"color:#b3261e\">b</s>")));
    QVERIFY(h.contains(QStringLiteral("&lt;")));      // text is escaped
    QVERIFY(!h.contains(QStringLiteral("<b>")));
    QVERIFY(h.contains(QStringLiteral("<br>")));
}

QTEST_GUILESS_MAIN(TestTextDiff)
#include "test_text_diff.moc"
