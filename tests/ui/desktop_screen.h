// A desktop-sized screen for window tests: the offscreen platform's own screen is 800×600, smaller
// than the main window's default size (1280×800), which a real desktop has room for.
// ES_DESKTOP_QTEST_MAIN(Class) is QTEST_MAIN(Class) on a 1920×1080 offscreen screen (when the
// platform is offscreen, as CTest runs it; another platform is left as it is).
#pragma once

#include <QApplication>
#include <QFile>
#include <QTemporaryDir>
#include <QtTest>

namespace es_test {

// Points the offscreen platform at a one-screen configuration; false if it cannot be written.
inline bool useDesktopScreen(const QTemporaryDir &dir) {
    if (qEnvironmentVariable("QT_QPA_PLATFORM", QStringLiteral("offscreen")) != QLatin1String("offscreen"))
        return true;
    const QString config = dir.filePath(QStringLiteral("screens.json"));
    QFile f(config);
    if (!f.open(QIODevice::WriteOnly) ||
        f.write(R"({"screens": [{"name": "desktop", "x": 0, "y": 0, "width": 1920, "height": 1080,
                                 "logicalDpi": 96, "dpr": 1}]})") < 0)
        return false;
    f.close();
    qputenv("QT_QPA_PLATFORM", "offscreen:configfile=" + config.toUtf8());
    return true;
}

} // namespace es_test

#define ES_DESKTOP_QTEST_MAIN(TestObject)                                                                      \
    int main(int argc, char **argv) {                                                                          \
        QTemporaryDir screenDir;                                                                               \
        if (!es_test::useDesktopScreen(screenDir)) return 1;                                                   \
        QApplication app(argc, argv);                                                                          \
        TestObject tc;                                                                                         \
        QTEST_SET_MAIN_SOURCE_PATH                                                                             \
        return QTest::qExec(&tc, argc, argv);                                                                  \
    }
