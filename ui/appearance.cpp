// Appearance (see appearance.h).
#include "appearance.h"

#include "app_settings.h"

#include <QApplication>
#include <QDir>
#include <QEvent>
#include <QFile>
#include <QFont>
#include <QSettings>
#include <QStyle>
#include <QStyleFactory>
#include <QStyleHints>
#include <QWidget>

namespace es {

namespace {

// The style and palette the platform gave the app, before any theme was applied: "system" on a
// light desktop goes back to them.
struct SystemLook {
    QString style;
    QPalette palette;
};

const SystemLook &systemLook() {
    static const SystemLook look{QApplication::style()->name(), QApplication::palette()};
    return look;
}

QString configHome() {
    const QString xdg = qEnvironmentVariable("XDG_CONFIG_HOME");
    return xdg.isEmpty() ? QDir::homePath() + QStringLiteral("/.config") : xdg;
}

bool darkColor(const QColor &c) { return c.isValid() && c.lightness() < 128; }

// A new application palette for every widget that exists: Qt 6.4 stores it without telling them
// (only widgets made afterwards would get it), so each window re-resolves its palette and passes
// it down to its children.
void setApplicationPalette(const QPalette &palette) {
    QApplication::setPalette(palette);
    QEvent change(QEvent::ApplicationPaletteChange);
    for (QWidget *w : QApplication::topLevelWidgets()) QCoreApplication::sendEvent(w, &change);
    // A style sheet's palette(…) colours are looked up when it is applied: applied again, it
    // takes the new palette's (the preset chips, the secondary texts).
    for (QWidget *w : QApplication::allWidgets())
        if (!w->styleSheet().isEmpty()) w->setStyleSheet(w->styleSheet());
}

// The desktop's wish as GTK and KDE store it (Qt before 6.5 has no API for it): GTK_THEME
// "Name:dark", gtk-3.0/settings.ini (gtk-application-prefer-dark-theme, a theme name with
// "dark"), KDE's kdeglobals window background. nullopt when none of them says.
std::optional<bool> desktopFilesPreferDark() {
    const QString gtkTheme = qEnvironmentVariable("GTK_THEME");
    if (!gtkTheme.isEmpty()) return gtkTheme.endsWith(QLatin1String(":dark"), Qt::CaseInsensitive) ||
                                    gtkTheme.contains(QLatin1String("dark"), Qt::CaseInsensitive);
    const QString gtkIni = configHome() + QStringLiteral("/gtk-3.0/settings.ini");
    if (QFile::exists(gtkIni)) {
        const QSettings gtk(gtkIni, QSettings::IniFormat);
        const QString prefer = gtk.value(QStringLiteral("Settings/gtk-application-prefer-dark-theme")).toString();
        if (prefer == QLatin1String("1") || prefer == QLatin1String("true")) return true;
        if (gtk.value(QStringLiteral("Settings/gtk-theme-name")).toString().contains(QLatin1String("dark"),
                                                                                     Qt::CaseInsensitive))
            return true;
        if (!prefer.isEmpty()) return false;
    }
    const QString kde = configHome() + QStringLiteral("/kdeglobals");
    if (QFile::exists(kde)) {
        const QSettings globals(kde, QSettings::IniFormat);
        const QStringList rgb = globals.value(QStringLiteral("Colors:Window/BackgroundNormal")).toStringList();
        if (rgb.size() >= 3) return darkColor(QColor(rgb[0].toInt(), rgb[1].toInt(), rgb[2].toInt()));
    }
    return std::nullopt;
}

} // namespace

bool Appearance::isDark(const QPalette &palette) { return darkColor(palette.color(QPalette::Window)); }

QPalette Appearance::darkPalette() {
    QPalette p;
    const QColor window(45, 45, 48), base(30, 30, 32), text(230, 230, 230), disabled(127, 127, 127);
    p.setColor(QPalette::Window, window);
    p.setColor(QPalette::WindowText, text);
    p.setColor(QPalette::Base, base);
    p.setColor(QPalette::AlternateBase, QColor(52, 52, 56));
    p.setColor(QPalette::ToolTipBase, QColor(60, 60, 64));
    p.setColor(QPalette::ToolTipText, text);
    p.setColor(QPalette::PlaceholderText, QColor(140, 140, 140));
    p.setColor(QPalette::Text, text);
    p.setColor(QPalette::Button, QColor(56, 56, 60));
    p.setColor(QPalette::ButtonText, text);
    p.setColor(QPalette::BrightText, QColor(255, 90, 90));
    p.setColor(QPalette::Light, QColor(78, 78, 82));
    p.setColor(QPalette::Midlight, QColor(64, 64, 68));
    p.setColor(QPalette::Mid, QColor(130, 130, 136)); // also secondary text (palette(mid)): readable on Base
    p.setColor(QPalette::Dark, QColor(26, 26, 28));
    p.setColor(QPalette::Shadow, QColor(0, 0, 0));
    p.setColor(QPalette::Highlight, QColor(42, 120, 205));
    p.setColor(QPalette::HighlightedText, Qt::white);
    p.setColor(QPalette::Link, QColor(100, 165, 255));
    p.setColor(QPalette::LinkVisited, QColor(175, 140, 255));
    for (QPalette::ColorRole role : {QPalette::WindowText, QPalette::Text, QPalette::ButtonText})
        p.setColor(QPalette::Disabled, role, disabled);
    p.setColor(QPalette::Disabled, QPalette::Base, window);
    p.setColor(QPalette::Disabled, QPalette::Highlight, QColor(70, 70, 74));
    p.setColor(QPalette::Disabled, QPalette::HighlightedText, disabled);
    return p;
}

QPalette Appearance::lightPalette() {
    std::unique_ptr<QStyle> fusion(QStyleFactory::create(QStringLiteral("Fusion")));
    return fusion ? fusion->standardPalette() : QPalette();
}

bool Appearance::systemPrefersDark() {
#if QT_VERSION >= QT_VERSION_CHECK(6, 5, 0)
    const Qt::ColorScheme scheme = QGuiApplication::styleHints()->colorScheme();
    if (scheme != Qt::ColorScheme::Unknown) return scheme == Qt::ColorScheme::Dark;
#endif
    if (const std::optional<bool> files = desktopFilesPreferDark()) return *files;
    return isDark(systemLook().palette); // a platform theme (KDE, qt6ct) that already hands out dark colours
}

QString Appearance::systemSchemeNote() {
#if QT_VERSION >= QT_VERSION_CHECK(6, 5, 0)
    return tr("Follows the desktop's colour scheme as it changes.");
#else
    return tr("This Qt (%1) cannot ask the desktop for its colour scheme: ExpertScope reads the GTK and KDE "
              "settings when the theme is applied (at start and on OK), and uses light when they do not say dark.")
        .arg(QString::fromLatin1(qVersion()));
#endif
}

void Appearance::applyTheme(const QString &theme) {
    const SystemLook &system = systemLook(); // captured before the first change
    static bool themed = false; // a palette of ours is on screen
    const bool dark = theme == QLatin1String("dark") || (theme != QLatin1String("light") && systemPrefersDark());
    if (theme != QLatin1String("light") && theme != QLatin1String("dark") && !dark) {
        // The desktop's own light look, as the app started; untouched when it was never changed,
        // so the platform keeps its palette (and its live updates) to itself.
        if (!themed) return;
        themed = false;
        if (QApplication::style()->name() != system.style) QApplication::setStyle(system.style);
        setApplicationPalette(system.palette);
        return;
    }
    themed = true;
    if (QApplication::style()->name().compare(QLatin1String("fusion"), Qt::CaseInsensitive) != 0)
        QApplication::setStyle(QStringLiteral("Fusion"));
    setApplicationPalette(dark ? darkPalette() : lightPalette());
}

void Appearance::applyChatFontSize(int points) {
    QFont font = QApplication::font();
    if (points >= AppSettings::kMinChatFontSize && points <= AppSettings::kMaxChatFontSize) font.setPointSize(points);
    // Class fonts: every message and message box, present and future, of every pane.
    QEvent change(QEvent::ApplicationFontChange); // for the widgets that exist, as for the palette
    for (const char *cls : {"es::MessageWidget", "es::Composer"}) {
        QApplication::setFont(font, cls);
        for (QWidget *w : QApplication::allWidgets())
            if (w->inherits(cls)) QCoreApplication::sendEvent(w, &change);
    }
}

void Appearance::apply(const AppSettings &s) {
    applyTheme(s.theme);
    applyChatFontSize(s.chatFontSize);
#if QT_VERSION >= QT_VERSION_CHECK(6, 5, 0)
    // "system" follows the desktop while the app runs.
    static const bool following = [] {
        QObject::connect(QGuiApplication::styleHints(), &QStyleHints::colorSchemeChanged, qApp, [] {
            const AppSettings now = AppSettings::load();
            if (now.theme == QLatin1String("system")) applyTheme(now.theme);
        });
        return true;
    }();
    Q_UNUSED(following);
#endif
}

} // namespace es
