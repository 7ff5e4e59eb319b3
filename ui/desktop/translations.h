// Interface translations: ExpertScope's own catalogue (embedded as :/i18n/expertscope_<lang>.qm,
// built from resources/translations/*.ts) plus Qt's own qtbase catalogue when the system has it
// (standard dialogs' buttons, context menus of text fields).
#pragma once

#include <QLocale>
#include <QString>

class QCoreApplication;

namespace es {

// The embedded catalogues' folder in the resource system.
inline constexpr const char *kTranslationsResourceDir = ":/i18n";

// language: "zh_CN", "en", … from --lang; empty: the system's UI languages in order (on Unix Qt
// reads LANGUAGE, then LC_ALL / LC_MESSAGES / LANG, as QLocale::system().uiLanguages()).
// Installs the translators on app (they live as its children) and returns the locale whose
// catalogue was loaded, or QLocale::c() when the interface stays in English (the source language).
QLocale installTranslations(QCoreApplication &app, const QString &language = {});

} // namespace es
