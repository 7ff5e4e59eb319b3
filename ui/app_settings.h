// AppSettings: the app's preferences as one value — the engine's defaults (backend, precision, KV
// cache, GPU memory share, CPU threads), the default sampling, the data folder, the interface
// language, theme and chat font size. load() and save() go through QSettings under the keys of
// settings_keys.h, the same the Model menu and the start-up code use: QSettings is the one source
// of truth, AppSettings a snapshot of it. Values out of range on disk load as their defaults.
#pragma once

#include "engine_session.h"
#include "storage_types.h"

#include <QString>

namespace es {

struct AppSettings {
    QString backend = QStringLiteral("auto");  // auto | cuda | cpu
    QString precision = QStringLiteral("auto"); // auto | fp8 | bf16
    QString kvCache = QStringLiteral("bf16");  // bf16 | fp8
    double gpuMemoryUtilization = 0.90;         // kMinGpuShare … kMaxGpuShare
    int threads = 0;                            // CPU threads, 0: all cores
    // Under every preset and conversation, over the model's generation_config: an unset field is
    // the model's default. Never carries an expert intervention.
    SamplingParams sampling;
    QString dataFolder; // where the conversation database lives; empty: the default folder
    QString language;   // "" (the system's) | en | zh_CN; applied at the next start
    QString theme = QStringLiteral("system"); // system | light | dark
    int chatFontSize = 0; // points, kMinChatFontSize … kMaxChatFontSize; 0: the system's size

    static constexpr double kMinGpuShare = 0.10, kMaxGpuShare = 0.99;
    static constexpr int kMaxThreads = 1024;
    static constexpr int kMinChatFontSize = 6, kMaxChatFontSize = 48;

    static AppSettings load();
    void save() const;
    // The default sampling as stored now (chat panes read it for every reply they start).
    static SamplingParams defaultSampling();

    // base with the engine fields of these settings (backend, precision, KV cache, GPU share,
    // threads); the other fields of base stay.
    EngineSessionOptions engineOptions(EngineSessionOptions base) const;
    // Whether other differs in a field that needs the engine restarted (the model reloaded).
    bool engineDiffers(const AppSettings &other) const;
    bool operator==(const AppSettings &) const = default;
};

// The Server panel's last choices: address, port, served name and — only with rememberKey — the
// API key (settings_keys.h, kServer*). Not part of AppSettings: the panel saves them when a
// server starts, not the Preferences dialog.
struct ServerSettings {
    QString host = QStringLiteral("127.0.0.1");
    int port = 8000;
    QString modelName;
    QString apiKey;           // empty unless rememberKey
    bool rememberKey = false; // the key is stored (unencrypted) exactly while this is set

    static ServerSettings load();
    // Saves every field; without rememberKey the stored key is removed.
    void save() const;
};

// base with every field that over sets (stop strings and the intervention when not empty).
SamplingParams overlaySampling(const SamplingParams &base, const SamplingParams &over);

} // namespace es
