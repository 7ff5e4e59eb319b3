// The desktop app's start-up decisions (ui/desktop/app_startup.cpp) against an in-memory store and
// settings in a temporary folder: the first run opens the embedded default model and gets the
// welcome conversation; a deleted welcome never comes back; an existing database gets none; a
// failing store records nothing; the welcome is translated (zh_CN); the database lives in the data
// folder chosen in Preferences, or in the default one (and the notice says so) when that cannot be made.
#include "app_startup.h"
#include "chat_store.h"
#include "settings_keys.h"
#include "translations.h"

#include <QCoreApplication>
#include <QDir>
#include <QSettings>
#include <QTemporaryDir>
#include <QTranslator>
#include <QtTest>

using namespace es;

class TestAppStartup : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void init();
    void firstRunOpensDefaultModel();
    void firstRunCreatesWelcome();
    void deletedWelcomeNeverComesBack();
    void existingDatabaseGetsNoWelcome();
    void failingStoreRecordsNothing();
    void welcomeIsTranslated();
    void crashReopensTheModelUnlessItWasLoading();
    void chosenDataFolderHoldsTheDatabase();

private:
    QTemporaryDir m_config;
};

void TestAppStartup::initTestCase() {
    QVERIFY(m_config.isValid());
    QCoreApplication::setOrganizationName("ExpertScopeTest");
    QCoreApplication::setApplicationName("TestAppStartup");
    QSettings::setDefaultFormat(QSettings::IniFormat);
    QSettings::setPath(QSettings::IniFormat, QSettings::UserScope, m_config.path());
    QStandardPaths::setTestModeEnabled(true);
}

void TestAppStartup::init() {
    QSettings settings;
    settings.clear(); // every case starts as a first run
    settings.sync();
}

void TestAppStartup::firstRunOpensDefaultModel() {
    const StartupPlan plan = planStartup({});
    QVERIFY(!plan.lastSessionCrashed);
    QVERIFY2(!plan.modelToOpen.isEmpty(), "the embedded default model was not found");
    QCOMPARE(plan.modelToOpen, defaultModelDir());
    QVERIFY(QFileInfo::exists(plan.modelToOpen + "/config.json"));
    QVERIFY(plan.databasePath.endsWith("expertscope.sqlite"));
    // An explicit --model wins over the default.
    QCOMPARE(planStartup("/some/where").modelToOpen, QStringLiteral("/some/where"));
}

void TestAppStartup::firstRunCreatesWelcome() {
    ChatStore store;
    QVERIFY(store.open(":memory:").ok());
    const std::optional<qint64> id = createWelcomeConversation(store);
    QVERIFY2(id.has_value(), qPrintable(store.lastError()));
    const QList<Conversation> all = store.conversations();
    QCOMPARE(all.size(), 1);
    QCOMPARE(all[0].title, QStringLiteral("Welcome to ExpertScope"));
    const QList<Message> path = store.activePath(*id);
    QCOMPARE(path.size(), 2);
    QCOMPARE(path[0].role, MessageRole::User);
    QCOMPARE(path[1].role, MessageRole::Assistant);
    QCOMPARE(path[1].state, MessageState::Complete);
    for (const char *topic :
         {"Chat pane", "Presets", "Profiler", "Models", "【技术解析模式】", "File ▸ Open model"})
        QVERIFY2(path[1].content.contains(QString::fromUtf8(topic)), topic);
    QVERIFY(QSettings().value("welcome/created").toBool());
    // A second start with the welcome still there adds nothing.
    QVERIFY(!createWelcomeConversation(store).has_value());
    QCOMPARE(store.conversations().size(), 1);
}

void TestAppStartup::deletedWelcomeNeverComesBack() {
    ChatStore store;
    QVERIFY(store.open(":memory:").ok());
    const std::optional<qint64> id = createWelcomeConversation(store);
    QVERIFY(id.has_value());
    QVERIFY(store.deleteConversation(*id).has_value());
    QVERIFY(store.conversations().isEmpty());
    QVERIFY(!createWelcomeConversation(store).has_value());
    QVERIFY(store.conversations().isEmpty());
    // Not even with a new, empty database (the settings remember it).
    ChatStore fresh;
    QVERIFY(fresh.open(":memory:").ok());
    QVERIFY(!createWelcomeConversation(fresh).has_value());
    QVERIFY(fresh.conversations().isEmpty());
}

void TestAppStartup::existingDatabaseGetsNoWelcome() {
    ChatStore store;
    QVERIFY(store.open(":memory:").ok());
    const std::optional<qint64> mine = store.createConversation("mine");
    QVERIFY(mine.has_value());
    QVERIFY(!createWelcomeConversation(store).has_value());
    QCOMPARE(store.conversations().size(), 1);
    QVERIFY(QSettings().value("welcome/created").toBool());
    QVERIFY(store.deleteConversation(*mine).has_value());
    QVERIFY(!createWelcomeConversation(store).has_value());
    QVERIFY(store.conversations().isEmpty());
}

void TestAppStartup::failingStoreRecordsNothing() {
    ChatStore closed; // never opened: every write fails
    QVERIFY(!createWelcomeConversation(closed).has_value());
    QVERIFY(!QSettings().contains("welcome/created"));
    // The next start, with a working store, still gets its welcome.
    ChatStore store;
    QVERIFY(store.open(":memory:").ok());
    QVERIFY(createWelcomeConversation(store).has_value());
}

void TestAppStartup::welcomeIsTranslated() {
    const QLocale loaded = installTranslations(*QCoreApplication::instance(), "zh_CN");
    QCOMPARE(loaded.name(), QStringLiteral("zh_CN"));
    ChatStore store;
    QVERIFY(store.open(":memory:").ok());
    const std::optional<qint64> id = createWelcomeConversation(store);
    QVERIFY(id.has_value());
    const QString title = store.conversation(*id)->title;
    QVERIFY2(title != QStringLiteral("Welcome to ExpertScope"), qPrintable(title));
    QVERIFY2(title.contains(QStringLiteral("欢迎")), qPrintable(title));
    const QList<Message> path = store.activePath(*id);
    QCOMPARE(path.size(), 2);
    QVERIFY(path[1].content.contains(QStringLiteral("【技术解析模式】")));
    QVERIFY(path[1].content.contains(QStringLiteral("性能分析")));
}

// After a crash the last model opens again (with a notice); only a crash while a model was loading
// keeps that model closed.
void TestAppStartup::crashReopensTheModelUnlessItWasLoading() {
    const QString model = defaultModelDir();
    QVERIFY(!model.isEmpty());
    QSettings settings;
    settings.setValue("model/lastDir", model);
    markSessionRunning(); // and never markCleanExit: a crash
    StartupPlan plan = planStartup({});
    QVERIFY(plan.lastSessionCrashed);
    QCOMPARE(plan.modelToOpen, model);
    QVERIFY(!plan.notice.isEmpty()); // (in whichever language an earlier case installed)

    markModelLoading(model); // the crash came while it loaded
    plan = planStartup({});
    QVERIFY(plan.modelToOpen.isEmpty());
    QVERIFY(plan.notice.contains(QFileInfo(model).fileName()));

    markModelLoadEnded();
    markCleanExit();
    plan = planStartup({});
    QVERIFY(!plan.lastSessionCrashed);
    QCOMPARE(plan.modelToOpen, model);
    QVERIFY(plan.notice.isEmpty());
}

void TestAppStartup::chosenDataFolderHoldsTheDatabase() {
    QTemporaryDir dir;
    const QString chosen = dir.filePath("conversations");
    QSettings().setValue(settings_keys::kDataFolder, chosen);
    StartupPlan plan = planStartup({});
    QCOMPARE(plan.databasePath, QDir(chosen).filePath("expertscope.sqlite"));
    QVERIFY(QFileInfo(chosen).isDir()); // made when missing
    QVERIFY(plan.notice.isEmpty());

    // A folder that cannot be made (below a file): the default folder, and the notice names both.
    QFile file(dir.filePath("a-file"));
    QVERIFY(file.open(QIODevice::WriteOnly));
    file.close();
    QSettings().setValue(settings_keys::kDataFolder, file.fileName() + "/below");
    plan = planStartup({});
    QCOMPARE(plan.databasePath, QDir(settings_keys::defaultDataFolder()).filePath("expertscope.sqlite"));
    QVERIFY2(plan.notice.contains(file.fileName() + "/below") && plan.notice.contains(settings_keys::defaultDataFolder()),
             qPrintable(plan.notice));
}

QTEST_GUILESS_MAIN(TestAppStartup)
#include "test_app_startup.moc"
