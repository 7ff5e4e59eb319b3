// JSON and BLOB encodings of the storage value types. The spellings here are what is on disk:
// changing one is a schema migration, not a refactoring.
#include "storage_types.h"

#include <QJsonArray>
#include <QtEndian>

#include <cmath>

namespace es {

QString messageRoleName(MessageRole role) {
    switch (role) {
    case MessageRole::System: return QStringLiteral("system");
    case MessageRole::User: return QStringLiteral("user");
    case MessageRole::Assistant: return QStringLiteral("assistant");
    }
    return {};
}

QString messageStateName(MessageState state) {
    switch (state) {
    case MessageState::Complete: return QStringLiteral("complete");
    case MessageState::Partial: return QStringLiteral("partial");
    case MessageState::Failed: return QStringLiteral("failed");
    }
    return {};
}

std::optional<MessageRole> messageRoleFromString(const QString &s) {
    if (s == QLatin1String("system")) return MessageRole::System;
    if (s == QLatin1String("user")) return MessageRole::User;
    if (s == QLatin1String("assistant")) return MessageRole::Assistant;
    return std::nullopt;
}

std::optional<MessageState> messageStateFromString(const QString &s) {
    if (s == QLatin1String("complete")) return MessageState::Complete;
    if (s == QLatin1String("partial")) return MessageState::Partial;
    if (s == QLatin1String("failed")) return MessageState::Failed;
    return std::nullopt;
}

namespace {

// JSON numbers are doubles: integers above 2^53 would round, so seeds that large are strings.
constexpr quint64 kMaxExactJsonInt = (quint64(1) << 53);

void putDouble(QJsonObject &o, const char *key, const std::optional<double> &v) {
    if (v) o.insert(QLatin1String(key), *v);
}
void putInt(QJsonObject &o, const char *key, const std::optional<int> &v) {
    if (v) o.insert(QLatin1String(key), *v);
}
std::optional<double> getDouble(const QJsonObject &o, const char *key) {
    const QJsonValue v = o.value(QLatin1String(key));
    if (!v.isDouble()) return std::nullopt;
    return v.toDouble();
}
std::optional<int> getInt(const QJsonObject &o, const char *key) {
    const QJsonValue v = o.value(QLatin1String(key));
    if (!v.isDouble()) return std::nullopt;
    return v.toInt();
}

} // namespace

QJsonObject SamplingParams::toJson() const {
    QJsonObject o;
    putDouble(o, "temperature", temperature);
    putDouble(o, "top_p", topP);
    putInt(o, "top_k", topK);
    putDouble(o, "min_p", minP);
    putDouble(o, "repetition_penalty", repetitionPenalty);
    putDouble(o, "presence_penalty", presencePenalty);
    putDouble(o, "frequency_penalty", frequencyPenalty);
    putInt(o, "max_tokens", maxTokens);
    if (seed) {
        if (*seed <= kMaxExactJsonInt)
            o.insert(QLatin1String("seed"), double(*seed));
        else
            o.insert(QLatin1String("seed"), QString::number(*seed));
    }
    if (!stopStrings.isEmpty()) o.insert(QLatin1String("stop"), QJsonArray::fromStringList(stopStrings));
    return o;
}

std::optional<quint64> seedFromJson(const QJsonValue &v) {
    if (v.isDouble()) {
        const double d = v.toDouble();
        if (d >= 0 && d < 18446744073709551616.0) return quint64(d); // [0, 2^64): the cast is defined
        return std::nullopt;
    }
    if (v.isString()) {
        bool ok = false;
        const quint64 s = v.toString().toULongLong(&ok);
        if (ok) return s;
    }
    return std::nullopt;
}

SamplingParams SamplingParams::fromJson(const QJsonObject &o) {
    SamplingParams p;
    p.temperature = getDouble(o, "temperature");
    p.topP = getDouble(o, "top_p");
    p.topK = getInt(o, "top_k");
    p.minP = getDouble(o, "min_p");
    p.repetitionPenalty = getDouble(o, "repetition_penalty");
    p.presencePenalty = getDouble(o, "presence_penalty");
    p.frequencyPenalty = getDouble(o, "frequency_penalty");
    p.maxTokens = getInt(o, "max_tokens");
    p.seed = seedFromJson(o.value(QLatin1String("seed")));
    for (const QJsonValue &s : o.value(QLatin1String("stop")).toArray())
        if (s.isString()) p.stopStrings.append(s.toString());
    return p;
}

QJsonObject ConversationSettings::toJson() const {
    QJsonObject o = extra;
    const QJsonObject s = sampling.toJson();
    if (!s.isEmpty()) o.insert(QLatin1String("sampling"), s);
    else o.remove(QLatin1String("sampling"));
    if (presetId) o.insert(QLatin1String("preset_id"), double(*presetId));
    else o.remove(QLatin1String("preset_id"));
    return o;
}

ConversationSettings ConversationSettings::fromJson(const QJsonObject &o) {
    ConversationSettings s;
    s.sampling = SamplingParams::fromJson(o.value(QLatin1String("sampling")).toObject());
    const QJsonValue preset = o.value(QLatin1String("preset_id"));
    // Ids are SQLite rowids, exact as doubles up to 2^53; anything else is not an id.
    if (preset.isDouble() && std::fabs(preset.toDouble()) <= 9007199254740992.0)
        s.presetId = qint64(preset.toDouble());
    s.extra = o;
    s.extra.remove(QLatin1String("sampling"));
    s.extra.remove(QLatin1String("preset_id"));
    return s;
}

QByteArray encodeFloat32(const QList<float> &v) {
    QByteArray b(v.size() * qsizetype(sizeof(float)), Qt::Uninitialized);
    for (qsizetype i = 0; i < v.size(); ++i) qToLittleEndian<float>(v[i], b.data() + i * sizeof(float));
    return b;
}

QList<float> decodeFloat32(const QByteArray &b) {
    QList<float> v(b.size() / qsizetype(sizeof(float)));
    for (qsizetype i = 0; i < v.size(); ++i) v[i] = qFromLittleEndian<float>(b.constData() + i * sizeof(float));
    return v;
}

QByteArray encodeUInt32(const QList<quint32> &v) {
    QByteArray b(v.size() * qsizetype(sizeof(quint32)), Qt::Uninitialized);
    for (qsizetype i = 0; i < v.size(); ++i) qToLittleEndian<quint32>(v[i], b.data() + i * sizeof(quint32));
    return b;
}

QList<quint32> decodeUInt32(const QByteArray &b) {
    QList<quint32> v(b.size() / qsizetype(sizeof(quint32)));
    for (qsizetype i = 0; i < v.size(); ++i)
        v[i] = qFromLittleEndian<quint32>(b.constData() + i * sizeof(quint32));
    return v;
}

} // namespace es
