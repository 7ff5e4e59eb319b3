// Start-up decisions of the desktop app, kept out of main() so tests can drive them: where the
// database lives, which model to open first, and whether the last session crashed (then the
// last model is not reopened automatically, in case it was the cause).
#pragma once

#include <QString>

namespace es {

struct StartupPlan {
    QString databasePath;
    QString modelToOpen;     // empty: none
    bool lastSessionCrashed = false;
    QString notice;          // one sentence for the status bar, or empty
};

// explicitModel: from --model (wins); otherwise the last model unless the last session crashed;
// otherwise (first run, or the last model is gone) the embedded default model.
StartupPlan planStartup(const QString &explicitModel);
// The embedded default model's folder: <prefix>/share/expertscope/models/default next to an
// installed binary, else the source tree's resources/models/default; empty when neither exists.
QString defaultModelDir();
// Marks this session as running (cleared by markCleanExit); a later planStartup that finds the
// mark set knows this session crashed.
void markSessionRunning();
void markCleanExit();

} // namespace es
