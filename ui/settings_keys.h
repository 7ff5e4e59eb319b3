// The QSettings keys of the app's preferences, in one place: the Model menu, the Preferences
// dialog (AppSettings) and the start-up code (main.cpp, app_startup.cpp) read and write the same
// keys, so each setting has one stored value. Header-only: app_startup.cpp uses it without es_ui.
#pragma once

#include <QDir>
#include <QSettings>
#include <QStandardPaths>
#include <QString>

namespace es::settings_keys {

inline constexpr char kBackend[] = "engine/backend";                            // auto | cuda | cpu
inline constexpr char kPrecision[] = "engine/precision";                        // auto | fp8 | bf16
inline constexpr char kKvCache[] = "engine/kv_cache";                           // bf16 | fp8
inline constexpr char kGpuMemoryUtilization[] = "engine/gpu_memory_utilization"; // 0.10 … 0.99
inline constexpr char kThreads[] = "engine/threads";                            // 0: all cores
inline constexpr char kDefaultSampling[] = "sampling/defaults";                 // SamplingParams JSON
inline constexpr char kDataFolder[] = "storage/dataFolder";                     // empty: the default
inline constexpr char kLanguage[] = "ui/language";                              // "" (system) | en | zh_CN
inline constexpr char kTheme[] = "ui/theme";                                    // system | light | dark
inline constexpr char kChatFontSize[] = "ui/chatFontSize";                      // points; 0: the system's
// The Server panel (Model ▸ Server…): the last address, port and served name; the API key only
// while "Remember key" is ticked (stored unencrypted, as the checkbox says).
inline constexpr char kServerHost[] = "server/host";                            // 127.0.0.1 by default
inline constexpr char kServerPort[] = "server/port";                            // 0 … 65535; 0: any free port
inline constexpr char kServerModelName[] = "server/modelName";                  // empty: the model folder's name
inline constexpr char kServerApiKey[] = "server/apiKey";                        // absent: not remembered

// Where the conversation database lives when the settings name no folder.
inline QString defaultDataFolder() { return QStandardPaths::writableLocation(QStandardPaths::AppDataLocation); }

// The data folder the app opens: the chosen one, else the default.
inline QString dataFolder() {
    const QString chosen = QSettings().value(kDataFolder).toString();
    return chosen.isEmpty() ? defaultDataFolder() : QDir::cleanPath(chosen);
}

} // namespace es::settings_keys
