// Interface translations (see translations.h).
#include "translations.h"

#include <QCoreApplication>
#include <QLibraryInfo>
#include <QTranslator>

namespace es {

QLocale installTranslations(QCoreApplication &app, const QString &language) {
    const QLocale locale = language.isEmpty() ? QLocale::system() : QLocale(language);
    if (!language.isEmpty()) QLocale::setDefault(locale);

    // QTranslator::load(QLocale, …) walks locale.uiLanguages() (zh-Hans-CN, zh-CN, zh, …) and
    // takes the first catalogue that exists; English is the source language, so "en" finds the
    // (plural-forms only) expertscope_en.qm or nothing, and both leave the source strings.
    auto *own = new QTranslator(&app);
    if (!own->load(locale, QStringLiteral("expertscope"), QStringLiteral("_"),
                   QLatin1String(kTranslationsResourceDir))) {
        delete own;
        return QLocale::c();
    }
    QCoreApplication::installTranslator(own);

    auto *qt = new QTranslator(&app);
    if (qt->load(locale, QStringLiteral("qtbase"), QStringLiteral("_"),
                 QLibraryInfo::path(QLibraryInfo::TranslationsPath)))
        QCoreApplication::installTranslator(qt);
    else
        delete qt;
    return QLocale(own->language());
}

} // namespace es
