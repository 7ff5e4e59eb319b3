// AppSettings (see app_settings.h).
#include "app_settings.h"

#include "settings_keys.h"

#include <QJsonDocument>
#include <QJsonObject>
#include <QSettings>

#include <algorithm>

namespace es {

namespace {

// value when it is one of the allowed choices, else fallback (a hand-edited or older file).
QString choice(const QVariant &value, std::initializer_list<const char *> allowed, const QString &fallback) {
    const QString v = value.toString();
    for (const char *a : allowed)
        if (v == QLatin1String(a)) return v;
    return fallback;
}

} // namespace

AppSettings AppSettings::load() {
    namespace k = settings_keys;
    const QSettings s;
    const AppSettings d;
    AppSettings a;
    a.backend = choice(s.value(k::kBackend), {"auto", "cuda", "cpu"}, d.backend);
    a.precision = choice(s.value(k::kPrecision), {"auto", "fp8", "bf16"}, d.precision);
    a.kvCache = choice(s.value(k::kKvCache), {"bf16", "fp8"}, d.kvCache);
    a.gpuMemoryUtilization =
        std::clamp(s.value(k::kGpuMemoryUtilization, d.gpuMemoryUtilization).toDouble(), kMinGpuShare, kMaxGpuShare);
    a.threads = std::clamp(s.value(k::kThreads, 0).toInt(), 0, kMaxThreads);
    a.sampling = defaultSampling();
    a.dataFolder = s.value(k::kDataFolder).toString();
    a.language = choice(s.value(k::kLanguage), {"en", "zh_CN"}, QString());
    a.theme = choice(s.value(k::kTheme), {"system", "light", "dark"}, d.theme);
    const int size = s.value(k::kChatFontSize, 0).toInt();
    a.chatFontSize = size >= kMinChatFontSize && size <= kMaxChatFontSize ? size : 0;
    return a;
}

void AppSettings::save() const {
    namespace k = settings_keys;
    QSettings s;
    s.setValue(k::kBackend, backend);
    s.setValue(k::kPrecision, precision);
    s.setValue(k::kKvCache, kvCache);
    s.setValue(k::kGpuMemoryUtilization, gpuMemoryUtilization);
    s.setValue(k::kThreads, threads);
    SamplingParams stored = sampling;
    stored.intervention = {};
    s.setValue(k::kDefaultSampling, QString::fromUtf8(QJsonDocument(stored.toJson()).toJson(QJsonDocument::Compact)));
    // Empty means "the default": no key, so the default can move (a new install prefix, a locale).
    for (auto [key, value] : {std::pair{k::kDataFolder, dataFolder}, {k::kLanguage, language}}) {
        if (value.isEmpty())
            s.remove(key);
        else
            s.setValue(key, value);
    }
    s.setValue(k::kTheme, theme);
    s.setValue(k::kChatFontSize, chatFontSize);
}

SamplingParams AppSettings::defaultSampling() {
    const QByteArray json = QSettings().value(settings_keys::kDefaultSampling).toString().toUtf8();
    SamplingParams p = SamplingParams::fromJson(QJsonDocument::fromJson(json).object());
    p.intervention = {}; // an intervention belongs to a conversation, never to every reply
    return p;
}

EngineSessionOptions AppSettings::engineOptions(EngineSessionOptions base) const {
    base.backend = backend;
    base.precision = precision;
    base.kvCache = kvCache;
    base.gpuMemoryUtilization = gpuMemoryUtilization;
    base.threads = threads;
    return base;
}

bool AppSettings::engineDiffers(const AppSettings &o) const {
    return backend != o.backend || precision != o.precision || kvCache != o.kvCache ||
           qRound(gpuMemoryUtilization * 100) != qRound(o.gpuMemoryUtilization * 100) || threads != o.threads;
}

ServerSettings ServerSettings::load() {
    namespace k = settings_keys;
    const QSettings s;
    ServerSettings v;
    const QString host = s.value(k::kServerHost).toString().trimmed();
    if (!host.isEmpty()) v.host = host;
    bool ok = false;
    const int port = s.value(k::kServerPort).toInt(&ok);
    if (ok && port >= 0 && port <= 65535) v.port = port;
    v.modelName = s.value(k::kServerModelName).toString();
    v.rememberKey = s.contains(k::kServerApiKey);
    v.apiKey = s.value(k::kServerApiKey).toString();
    return v;
}

void ServerSettings::save() const {
    namespace k = settings_keys;
    QSettings s;
    s.setValue(k::kServerHost, host);
    s.setValue(k::kServerPort, port);
    s.setValue(k::kServerModelName, modelName);
    if (rememberKey)
        s.setValue(k::kServerApiKey, apiKey);
    else
        s.remove(k::kServerApiKey);
}

SamplingParams overlaySampling(const SamplingParams &base, const SamplingParams &over) {
    SamplingParams s = base;
    if (over.temperature) s.temperature = over.temperature;
    if (over.topP) s.topP = over.topP;
    if (over.topK) s.topK = over.topK;
    if (over.minP) s.minP = over.minP;
    if (over.repetitionPenalty) s.repetitionPenalty = over.repetitionPenalty;
    if (over.presencePenalty) s.presencePenalty = over.presencePenalty;
    if (over.frequencyPenalty) s.frequencyPenalty = over.frequencyPenalty;
    if (over.maxTokens) s.maxTokens = over.maxTokens;
    if (over.seed) s.seed = over.seed;
    if (!over.stopStrings.isEmpty()) s.stopStrings = over.stopStrings;
    if (!over.intervention.isEmpty()) s.intervention = over.intervention;
    return s;
}

} // namespace es
