// Appearance: the theme (light, dark, or the desktop's) and the chat's font size, applied to the
// running app — no restart. Light and dark are Qt's Fusion style with a palette of their own; every
// widget that draws with palette roles follows (chat bubbles and code blocks re-shade on the
// palette change, the profiler's charts re-colour through charts::makePlot). "system" follows the
// desktop: with Qt 6.5 or later QStyleHints::colorScheme(), live; with older Qt (Debian 12 has 6.4)
// the GTK and KDE settings files and the platform's palette, read when the theme is applied, and
// light when none of them says dark (systemSchemeNote() says which).
#pragma once

#include <QCoreApplication>
#include <QPalette>
#include <QString>

namespace es {

struct AppSettings;

class Appearance {
    Q_DECLARE_TR_FUNCTIONS(Appearance)
public:
    // theme and chat font size of s (the rest of s is not about appearance).
    static void apply(const AppSettings &s);
    // "system" | "light" | "dark"; an unknown name is "system".
    static void applyTheme(const QString &theme);
    // points; 0: the application font's size. Applies to the chat's messages and message box.
    static void applyChatFontSize(int points);

    // Whether the theme on screen now is dark (the palette's window colour, whatever chose it).
    static bool isDark(const QPalette &palette);
    static QPalette darkPalette();
    static QPalette lightPalette(); // Fusion's own

    // Whether the desktop asks for dark colours now.
    static bool systemPrefersDark();
    // One sentence on how "system" is decided here (for the Preferences dialog).
    static QString systemSchemeNote();
};

} // namespace es
