// Start-up plan (see app_startup.h).
#include "app_startup.h"

#include <QCoreApplication>
#include <QDir>
#include <QFileInfo>
#include <QSettings>
#include <QStandardPaths>

namespace es {

QString defaultModelDir() {
    QStringList candidates{QDir(QCoreApplication::applicationDirPath()).filePath("../share/expertscope/models/default")};
#ifdef ES_SOURCE_MODELS_DIR
    candidates << QStringLiteral(ES_SOURCE_MODELS_DIR "/default");
#endif
    for (const QString &c : candidates)
        if (QFileInfo::exists(c + "/config.json")) return QDir(c).canonicalPath();
    return {};
}

StartupPlan planStartup(const QString &explicitModel) {
    StartupPlan plan;
    QSettings settings;
    const QString dataDir = QStandardPaths::writableLocation(QStandardPaths::AppDataLocation);
    QDir().mkpath(dataDir);
    plan.databasePath = QDir(dataDir).filePath("expertscope.sqlite");
    plan.lastSessionCrashed = settings.value("session/running", false).toBool();
    if (!explicitModel.isEmpty()) {
        plan.modelToOpen = explicitModel;
    } else {
        const QString last = settings.value("model/lastDir").toString();
        if (!last.isEmpty() && plan.lastSessionCrashed) {
            plan.notice = QCoreApplication::translate("Startup", "The last session ended unexpectedly, so %1 was not "
                                                                 "reopened automatically. Open it from File ▸ Open model.")
                              .arg(QFileInfo(last).fileName());
        } else if (!last.isEmpty() && QFileInfo(last + "/config.json").exists()) {
            plan.modelToOpen = last;
        } else {
            plan.modelToOpen = defaultModelDir(); // first run: the embedded default model
        }
    }
    return plan;
}

void markSessionRunning() {
    QSettings settings;
    settings.setValue("session/running", true);
    settings.sync();
}

void markCleanExit() {
    QSettings settings;
    settings.setValue("session/running", false);
    settings.sync();
}

} // namespace es
