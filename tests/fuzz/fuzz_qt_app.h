// The Qt application object the Qt-based fuzzers need (SQLite driver plugins, fonts for the
// report charts), created once before the first input, on the offscreen platform.
#pragma once

#include <QGuiApplication>

#include <cstdlib>

namespace es::fuzz {

inline void make_qt_app() {
    static int argc = 1;
    static char arg0[] = "fuzz";
    static char *argv[] = {arg0, nullptr};
    setenv("QT_QPA_PLATFORM", "offscreen", 0);
    static QGuiApplication app(argc, argv);
}

} // namespace es::fuzz
