// Start-up decisions of the desktop app, kept out of main() so tests can drive them: where the
// database lives, which model to open first, whether the last session crashed (then the last
// model is not reopened automatically when the crash came while it loaded, in case it was the
// cause), and the first run's welcome conversation.
#pragma once

#include <QString>

#include <optional>

namespace es {

class ChatStore;

struct StartupPlan {
    QString databasePath;
    QString modelToOpen;     // empty: none
    bool lastSessionCrashed = false;
    QString notice;          // one sentence for the status bar, or empty
};

// explicitModel: from --model (wins); otherwise the last model — also after a crash, unless the
// crash came while a model was loading (then that model is not reopened: it may be the cause);
// otherwise (first run, or the last model is gone) the embedded default model. A crash is a
// session that never reached markCleanExit: a kill -9, a power cut, a fault — not SIGTERM or
// SIGINT, which the app answers by quitting cleanly.
StartupPlan planStartup(const QString &explicitModel);
// The embedded default model's folder: <prefix>/share/expertscope/models/default next to an
// installed binary, else the source tree's resources/models/default; empty when neither exists.
QString defaultModelDir();
// Marks this session as running (cleared by markCleanExit); a later planStartup that finds the
// mark set knows this session crashed.
void markSessionRunning();
void markCleanExit();
// A model load began (dir) / ended, loaded or failed: a crash in between is a crash while loading.
void markModelLoading(const QString &dir);
void markModelLoadEnded();

// The first run's welcome conversation: a question and an answer explaining the chat pane,
// presets, the profiler panels and where models come from (translated: call after the
// translators are installed). Created only when the settings have never recorded it
// ("welcome/created") and the store holds no conversation; the record is written either way,
// so a deleted welcome conversation never comes back and an existing database never gets one.
// Returns the new conversation's id; nullopt when none was created (lastError of the store
// says why when it failed, and then nothing is recorded, so the next start tries again).
// GUI thread, with the store open.
std::optional<qint64> createWelcomeConversation(ChatStore &store);

} // namespace es
