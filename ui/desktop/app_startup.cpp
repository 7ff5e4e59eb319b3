// Start-up plan (see app_startup.h).
#include "app_startup.h"

#include "chat_store.h"
#include "settings_keys.h"

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
    // The data folder chosen in Preferences; one that cannot be made (a drive not mounted) gives
    // way to the default folder, and the notice says so.
    QString dataDir = settings_keys::dataFolder();
    QString dataNotice;
    if (!QDir().mkpath(dataDir) && dataDir != settings_keys::defaultDataFolder()) {
        dataNotice = QCoreApplication::translate("Startup", "The data folder %1 cannot be used; the conversations "
                                                             "are in the default folder %2 for now.")
                          .arg(QDir::toNativeSeparators(dataDir),
                               QDir::toNativeSeparators(settings_keys::defaultDataFolder()));
        dataDir = settings_keys::defaultDataFolder();
        QDir().mkpath(dataDir);
    }
    plan.databasePath = QDir(dataDir).filePath("expertscope.sqlite");
    plan.lastSessionCrashed = settings.value("session/running", false).toBool();
    if (!explicitModel.isEmpty()) {
        plan.modelToOpen = explicitModel;
    } else {
        const QString last = settings.value("model/lastDir").toString();
        const QString loading = settings.value("session/loadingModel").toString();
        if (plan.lastSessionCrashed && !loading.isEmpty()) {
            plan.notice = QCoreApplication::translate("Startup", "The last session ended unexpectedly while %1 was "
                                                                 "loading, so it was not reopened automatically. Open "
                                                                 "it from File ▸ Open model.")
                              .arg(QFileInfo(loading).fileName());
        } else if (!last.isEmpty() && QFileInfo(last + "/config.json").exists()) {
            plan.modelToOpen = last;
            if (plan.lastSessionCrashed)
                plan.notice = QCoreApplication::translate("Startup", "The last session ended unexpectedly; a reply "
                                                                     "it was writing is kept as interrupted.");
        } else {
            plan.modelToOpen = defaultModelDir(); // first run: the embedded default model
        }
    }
    if (!dataNotice.isEmpty()) plan.notice = plan.notice.isEmpty() ? dataNotice : dataNotice + u' ' + plan.notice;
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
    settings.remove("session/loadingModel");
    settings.sync();
}

void markModelLoading(const QString &dir) {
    QSettings settings;
    settings.setValue("session/loadingModel", dir);
    settings.sync();
}

void markModelLoadEnded() {
    QSettings settings;
    settings.remove("session/loadingModel");
    settings.sync();
}

std::optional<qint64> createWelcomeConversation(ChatStore &store) {
    QSettings settings;
    const QString key = QStringLiteral("welcome/created");
    if (settings.value(key, false).toBool()) return std::nullopt;
    if (!store.conversations().isEmpty()) { // a database from before this version: not a first run
        settings.setValue(key, true);
        return std::nullopt;
    }
    const QString title = QCoreApplication::translate("Welcome", "Welcome to ExpertScope");
    const QString question = QCoreApplication::translate("Welcome", "What can I do here?");
    const QString answer = QCoreApplication::translate(
        "Welcome",
        "Welcome! ExpertScope runs language models on this computer and shows what happens inside "
        "them while they answer. This conversation was written by the app, not by the model.\n\n"
        "**Chat pane.** Type below and press Enter to send, Esc to stop. Regenerate or edit a message "
        "to try another answer: the old one is kept, and ‹ 1/2 › switches between them. "
        "View ▸ Add a pane puts conversations side by side, and View ▸ Send to all panes asks them all the "
        "same question.\n\n"
        "**Presets.** The preset buttons by the message box start a message in a mode: "
        "【技术解析模式】 for technical explanations, 【创意写作模式】 for creative writing. Each "
        "preset brings its own system prompt and sampling; Manage presets… edits them "
        "and adds your own.\n\n"
        "**Profiler.** View ▸ Profiler (Ctrl+P) opens the panels on the right: *Routing* shows which "
        "experts each layer chooses for every token, *Compare* sets two replies side by side, "
        "*Latency* shows the time to the first token and between tokens, *Memory* shows weights, KV "
        "cache and free memory. Click a message's header to see its stored profile again.\n\n"
        "**Models.** The model loaded now is the small default model that comes with the app "
        "(answers are short and often odd: it is a demonstration). File ▸ Open model… opens an "
        "ERNIE-4.5 model folder in the Hugging Face layout, for example ERNIE-4.5-0.3B-PT or "
        "ERNIE-4.5-21B-A3B-PT downloaded from huggingface.co. The status bar shows the model, "
        "whether it runs on the GPU or the CPU, memory and speed.\n\n"
        "Delete this conversation from the list on the left when you no longer need it; it will not "
        "come back.");

    const std::optional<qint64> id = store.createConversation(title);
    if (!id) return std::nullopt;
    const std::optional<qint64> questionId = store.addMessage(*id, std::nullopt, MessageRole::User, question);
    if (!questionId || !store.addMessage(*id, *questionId, MessageRole::Assistant, answer)) {
        const QString error = store.lastError();
        store.deleteConversation(*id); // no half-made welcome; the next start tries again
        qWarning("expertscope: the welcome conversation could not be saved: %s", qPrintable(error));
        return std::nullopt;
    }
    settings.setValue(key, true);
    settings.sync();
    return id;
}

} // namespace es
