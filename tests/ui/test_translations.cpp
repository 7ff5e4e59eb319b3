// The interface translations (resources/translations/*.ts, embedded as :/i18n/*.qm):
// every Simplified Chinese string is finished and keeps the source's placeholders (%1…, %n),
// accelerators (&X) and tab shortcuts; the embedded catalogue matches the .ts (not stale);
// es::installTranslations picks zh_CN / en; the main window comes up in Chinese; a CJK font is
// there so the Chinese renders (no missing-glyph boxes).
#include "chat_store.h"
#include "engine_session.h"
#include "main_window.h"
#include "translations.h"

#include <QApplication>
#include <QComboBox>
#include <QFile>
#include <QMenuBar>
#include <QRegularExpression>
#include <QSet>
#include <QTemporaryDir>
#include <QTextLayout>
#include <QTranslator>
#include <QXmlStreamReader>
#include <QtTest>

using namespace es;

namespace {

const QString kTsDir = QStringLiteral(ES_TEST_DATA_DIR "/../../resources/translations");

struct TsMessage {
    QString context, source, comment;
    bool numerus = false;
    QString type;                // translation's type attribute: "", "unfinished", "vanished", …
    QStringList translations;    // one, or one per numerus form
};

QList<TsMessage> readTs(const QString &path, QString *language) {
    QList<TsMessage> out;
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly)) return out;
    QXmlStreamReader x(&f);
    QString context;
    TsMessage m;
    while (!x.atEnd()) {
        x.readNext();
        if (!x.isStartElement()) continue;
        const auto n = x.name();
        if (n == QLatin1String("TS")) *language = x.attributes().value("language").toString();
        else if (n == QLatin1String("name")) context = x.readElementText();
        else if (n == QLatin1String("message")) {
            m = TsMessage{context, {}, {}, x.attributes().value("numerus") == QLatin1String("yes"), {}, {}};
        } else if (n == QLatin1String("source")) m.source = x.readElementText();
        else if (n == QLatin1String("comment")) m.comment = x.readElementText();
        else if (n == QLatin1String("translation")) {
            m.type = x.attributes().value("type").toString();
            if (!m.numerus) {
                m.translations << x.readElementText();
                out << m;
            } else {
                while (x.readNextStartElement()) m.translations << x.readElementText(); // numerusform
                out << m;
            }
        }
    }
    if (x.hasError()) qWarning() << path << x.errorString() << "at line" << x.lineNumber();
    return out;
}

// %1..%99 and %n as a multiset-free set (a translation may reorder them, not drop or add any).
QSet<QString> placeholders(const QString &s) {
    static const QRegularExpression re(QStringLiteral("%(\\d{1,2}|n)"));
    QSet<QString> set;
    for (auto it = re.globalMatch(s); it.hasNext();) set.insert(it.next().captured(0));
    return set;
}

// The accelerator character of "&File" / "文件(&F)" (lower case), or empty; "&&" is a literal &.
QString accelerator(const QString &s) {
    for (qsizetype i = 0; i + 1 < s.size(); ++i) {
        if (s[i] != QLatin1Char('&')) continue;
        if (s[i + 1] == QLatin1Char('&')) { ++i; continue; }
        return s[i + 1].toLower();
    }
    return {};
}

} // namespace

class TestTranslations : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void cleanup();
    void chineseIsComplete();
    void placeholdersAndAcceleratorsKept();
    void englishIsThePluralFile();
    void embeddedCatalogueMatchesTs();
    void installPicksTheLanguage();
    void keyStringsTranslate();
    void mainWindowInChinese();
    void cjkGlyphsRender();

private:
    void removeTranslators();
    QTemporaryDir m_home;
    QList<TsMessage> m_zh;
};

void TestTranslations::initTestCase() {
    qputenv("HOME", m_home.path().toUtf8());
    QCoreApplication::setOrganizationName("ExpertScopeTests");
    QCoreApplication::setApplicationName("test_translations");
    QString lang;
    m_zh = readTs(kTsDir + "/expertscope_zh_CN.ts", &lang);
    QCOMPARE(lang, QStringLiteral("zh_CN"));
    QVERIFY2(m_zh.size() > 300, qPrintable(QString::number(m_zh.size())));
}

void TestTranslations::removeTranslators() {
    for (auto *t : qApp->findChildren<QTranslator *>()) {
        QCoreApplication::removeTranslator(t);
        delete t;
    }
    QLocale::setDefault(QLocale::c());
}

void TestTranslations::cleanup() { removeTranslators(); }

void TestTranslations::chineseIsComplete() {
    QStringList problems;
    for (const TsMessage &m : m_zh) {
        const QString where = m.context + " / " + m.source.left(60);
        if (!m.type.isEmpty()) problems << m.type + ": " + where; // unfinished, vanished, obsolete
        if (m.numerus && m.translations.size() != 1) problems << "numerus forms (zh has 1): " + where;
        for (const QString &t : m.translations)
            if (t.trimmed().isEmpty()) problems << "empty: " + where;
    }
    QVERIFY2(problems.isEmpty(), qPrintable(problems.join('\n')));
}

void TestTranslations::placeholdersAndAcceleratorsKept() {
    QStringList problems;
    for (const TsMessage &m : m_zh) {
        const QString where = m.context + " / " + m.source.left(60);
        for (const QString &t : m.translations) {
            if (placeholders(t) != placeholders(m.source)) problems << "placeholders: " + where + " → " + t;
            if (accelerator(t) != accelerator(m.source)) problems << "accelerator: " + where + " → " + t;
            if (m.source.count('\t') != t.count('\t')) problems << "tab shortcut: " + where;
            if (m.source.contains("[*]") != t.contains("[*]")) problems << "[*]: " + where;
        }
    }
    QVERIFY2(problems.isEmpty(), qPrintable(problems.join('\n')));
}

void TestTranslations::englishIsThePluralFile() {
    QString lang;
    const QList<TsMessage> en = readTs(kTsDir + "/expertscope_en.ts", &lang);
    QCOMPARE(lang, QStringLiteral("en"));
    QVERIFY(!en.isEmpty());
    for (const TsMessage &m : en) {
        QVERIFY2(m.numerus, qPrintable(m.source)); // lupdate -pluralonly
        QVERIFY2(m.type.isEmpty(), qPrintable(m.source));
        QCOMPARE(m.translations.size(), 2);
        for (const QString &t : m.translations) QCOMPARE(placeholders(t), placeholders(m.source));
    }
}

void TestTranslations::embeddedCatalogueMatchesTs() {
    QVERIFY(QFile::exists(":/i18n/expertscope_zh_CN.qm"));
    QVERIFY(QFile::exists(":/i18n/expertscope_en.qm"));
    QTranslator zh;
    QVERIFY(zh.load(":/i18n/expertscope_zh_CN.qm"));
    QStringList stale;
    for (const TsMessage &m : m_zh) {
        const QByteArray ctx = m.context.toUtf8(), src = m.source.toUtf8(), com = m.comment.toUtf8();
        const char *comment = m.comment.isEmpty() ? nullptr : com.constData();
        const QString got = zh.translate(ctx, src, comment, m.numerus ? 2 : -1);
        if (got != m.translations.value(0)) // raw: tr() fills %n in afterwards
            stale << m.context + " / " + m.source.left(60);
    }
    QVERIFY2(stale.isEmpty(), qPrintable("rebuild the .qm: " + stale.join('\n')));
}

void TestTranslations::installPicksTheLanguage() {
    QCOMPARE(installTranslations(*qApp, "zh_CN").name(), QStringLiteral("zh_CN"));
    QCOMPARE(QCoreApplication::translate("es::Composer", "Send"), QStringLiteral("发送"));
    removeTranslators();

    QCOMPARE(installTranslations(*qApp, "en").language(), QLocale::English);
    QCOMPARE(QCoreApplication::translate("es::Composer", "Send"), QStringLiteral("Send"));
    QCOMPARE(QCoreApplication::translate("es::ChatStore", "%n reply(ies) cut off when ExpertScope last closed were "
                                                          "kept as they were.", nullptr, 1),
             QStringLiteral("1 reply cut off when ExpertScope last closed was kept as it was."));
    removeTranslators();

    // No catalogue for the language: the interface stays in English.
    QCOMPARE(installTranslations(*qApp, "de_DE"), QLocale::c());
    QCOMPARE(QCoreApplication::translate("es::Composer", "Send"), QStringLiteral("Send"));
}

void TestTranslations::keyStringsTranslate() {
    installTranslations(*qApp, "zh_CN");
    auto tr = [](const char *ctx, const char *s, int n = -1) { return QCoreApplication::translate(ctx, s, nullptr, n); };
    QCOMPARE(tr("es::MainWindow", "&File"), QStringLiteral("文件(&F)"));
    QCOMPARE(tr("es::MainWindow", "&Open model…"), QStringLiteral("打开模型(&O)…"));
    QCOMPARE(tr("es::Composer", "Message the model — Enter to send, Shift+Enter for a new line, Esc to stop"),
             QStringLiteral("给模型发消息 — Enter 发送，Shift+Enter 换行，Esc 停止"));
    QCOMPARE(tr("es::ConversationListModel", "New conversation"), QStringLiteral("新对话"));
    QCOMPARE(tr("es::ChatStore", "%n reply(ies) cut off when ExpertScope last closed were kept as they were.", 3),
             QStringLiteral("ExpertScope 上次关闭时被中断的 3 条回复已按原样保留。"));
    QCOMPARE(tr("Startup", "The last session ended unexpectedly while %1 was loading, so it was not reopened "
                           "automatically. Open it from File ▸ Open model."),
             QStringLiteral("上次会话在加载 %1 时意外结束，因此没有自动重新打开它。请通过“文件 ▸ 打开模型”打开。"));
}

void TestTranslations::mainWindowInChinese() {
    installTranslations(*qApp, "zh_CN");
    ChatStore store;
    QVERIFY(store.open(":memory:").ok());
    EngineSession session(EngineSessionOptions{.backend = "cpu"});
    MainWindow window(&store, &session);
    QStringList menus;
    for (QAction *a : window.menuBar()->actions()) menus << a->text();
    QVERIFY2(menus.contains(QStringLiteral("文件(&F)")), qPrintable(menus.join(", ")));
    QVERIFY2(menus.contains(QStringLiteral("帮助(&H)")), qPrintable(menus.join(", ")));
    // No English word left on the menu bar (accelerator letters aside).
    for (const QString &m : menus) {
        QString stripped = m;
        stripped.remove(QRegularExpression(QStringLiteral("\\(&.\\)")));
        QVERIFY2(!stripped.contains(QRegularExpression(QStringLiteral("[A-Za-z]{2,}"))), qPrintable(m));
    }
}

void TestTranslations::cjkGlyphsRender() {
    // With the system's fonts (fonts-wqy-microhei from installer/setup-deps.sh) every character
    // of a Chinese label maps to a real glyph, through font fallback if need be.
    QTextLayout layout(QStringLiteral("文件 编辑 视图 新对话 专家路由 预设"), QApplication::font());
    layout.beginLayout();
    layout.createLine();
    layout.endLayout();
    const QList<QGlyphRun> runs = layout.glyphRuns();
    QVERIFY(!runs.isEmpty());
    for (const QGlyphRun &run : runs)
        for (quint32 g : run.glyphIndexes())
            QVERIFY2(g != 0, qPrintable("missing glyph in " + run.rawFont().familyName() +
                                        ": install a CJK font (fonts-wqy-microhei)"));
}

QTEST_MAIN(TestTranslations)
#include "test_translations.moc"
