// JSON and BLOB encodings of the storage value types. The spellings here are what is on disk:
// changing one is a schema migration, not a refactoring.
#include "storage_types.h"

#include <QJsonArray>
#include <QSet>
#include <QtEndian>

#include <algorithm>
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

QString overflowPolicyName(OverflowPolicy p) {
    switch (p) {
    case OverflowPolicy::Refuse: return QStringLiteral("refuse");
    case OverflowPolicy::DropOldest: return QStringLiteral("drop-oldest");
    case OverflowPolicy::KeepSystemAndLast: return QStringLiteral("keep-last");
    }
    return {};
}

std::optional<OverflowPolicy> overflowPolicyFromString(const QString &s) {
    if (s == QLatin1String("refuse")) return OverflowPolicy::Refuse;
    if (s == QLatin1String("drop-oldest")) return OverflowPolicy::DropOldest;
    if (s == QLatin1String("keep-last")) return OverflowPolicy::KeepSystemAndLast;
    return std::nullopt;
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
    if (!intervention.isEmpty()) o.insert(QLatin1String("intervention"), intervention.toJson());
    return o;
}

QJsonObject ExpertIntervention::toJson() const {
    QJsonObject o;
    if (!disabled.isEmpty()) o.insert(QLatin1String("disable"), disabled);
    if (!forced.isEmpty()) o.insert(QLatin1String("force"), forced);
    if (topK != 0) o.insert(QLatin1String("top_k"), topK);
    if (biasScale != 1.0) o.insert(QLatin1String("bias_scale"), biasScale);
    return o;
}

ExpertIntervention ExpertIntervention::fromJson(const QJsonObject &o) {
    ExpertIntervention iv;
    iv.disabled = o.value(QLatin1String("disable")).toString().simplified();
    iv.forced = o.value(QLatin1String("force")).toString().simplified();
    const QJsonValue k = o.value(QLatin1String("top_k")), b = o.value(QLatin1String("bias_scale"));
    if (k.isDouble() && k.toDouble() >= 0 && k.toDouble() <= 4096) iv.topK = int(k.toDouble());
    if (b.isDouble() && std::isfinite(b.toDouble())) iv.biasScale = b.toDouble();
    return iv;
}

QString ExpertIntervention::summary() const {
    QStringList parts;
    auto list = [](const QString &refs) {
        QStringList items;
        for (const QString &r : refs.split(QLatin1Char(','), Qt::SkipEmptyParts)) items << r.trimmed();
        return items.join(QLatin1String(", "));
    };
    if (!disabled.isEmpty()) parts << QStringLiteral("disable ") + list(disabled);
    if (!forced.isEmpty()) parts << QStringLiteral("force ") + list(forced);
    if (topK > 0) parts << QStringLiteral("top-k %1").arg(topK);
    if (biasScale != 1.0) parts << QStringLiteral("bias × %1").arg(biasScale);
    return parts.join(QLatin1String("; "));
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
    p.intervention = ExpertIntervention::fromJson(o.value(QLatin1String("intervention")).toObject());
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

// ---- Profile shape ---------------------------------------------------------------------------------

namespace {

QString field(const char *key) { return QStringLiteral("\"%1\"").arg(QLatin1String(key)); }

} // namespace

std::optional<QString> profileShapeError(const MessageProfile &p) {
    const std::pair<const char *, qint64> counts[] = {{"ttft_us", p.ttftUs.value_or(0)},
                                                      {"duration_us", p.durationUs},
                                                      {"prompt_tokens", p.nPromptTokens},
                                                      {"cached_prompt_tokens", p.nCachedPromptTokens},
                                                      {"preemptions", p.nPreemptions},
                                                      {"n_steps", p.nSteps},
                                                      {"n_steps_missed", p.nStepsMissed},
                                                      {"max_batch_seqs", p.maxBatchSeqs},
                                                      {"memory_peak_bytes", p.memoryPeakBytes},
                                                      {"kv_blocks_peak", p.kvBlocksPeak},
                                                      {"n_layers", p.nLayers},
                                                      {"n_experts", p.nExperts},
                                                      {"n_shared_experts", p.nSharedExperts},
                                                      {"k", p.k}};
    for (const auto &[key, v] : counts)
        if (v < 0) return QStringLiteral("%1 is %2; it cannot be negative").arg(field(key)).arg(v);
    if (p.nLayers > kMaxProfileLayers)
        return QStringLiteral("%1 is %2; a profile has at most %3 layers")
            .arg(field("n_layers"))
            .arg(p.nLayers)
            .arg(kMaxProfileLayers);
    if (p.nExperts > kMaxProfileExperts)
        return QStringLiteral("%1 is %2; a profile has at most %3 experts")
            .arg(field("n_experts"))
            .arg(p.nExperts)
            .arg(kMaxProfileExperts);
    if (p.nSharedExperts > kMaxProfileExperts)
        return QStringLiteral("%1 is %2; a profile has at most %3 shared experts")
            .arg(field("n_shared_experts"))
            .arg(p.nSharedExperts)
            .arg(kMaxProfileExperts);
    if (p.k > p.nExperts)
        return QStringLiteral(
                   "%1 is %2 but %3 is %4: a token cannot be routed to more experts than there are")
            .arg(field("k"))
            .arg(p.k)
            .arg(field("n_experts"))
            .arg(p.nExperts);

    QSet<int> moe;
    for (int l : p.moeLayers) {
        if (l < 0 || l >= p.nLayers)
            return QStringLiteral("%1 lists layer %2 but %3 is %4")
                .arg(field("moe_layers"))
                .arg(l)
                .arg(field("n_layers"))
                .arg(p.nLayers);
        if (moe.contains(l)) return QStringLiteral("%1 lists layer %2 twice").arg(field("moe_layers")).arg(l);
        moe.insert(l);
    }

    QSet<int> rows;
    qsizetype firstWidth = -1;
    int firstLayer = 0;
    for (const LayerRouting &r : p.routing) {
        if (r.layer < 0) return QStringLiteral("%1 has layer %2").arg(field("routing")).arg(r.layer);
        if (!p.moeLayers.isEmpty() && !moe.contains(r.layer))
            return QStringLiteral("%1 has layer %2, which %3 does not list")
                .arg(field("routing"))
                .arg(r.layer)
                .arg(field("moe_layers"));
        if (p.moeLayers.isEmpty() && p.nLayers > 0 && r.layer >= p.nLayers)
            return QStringLiteral("%1 has layer %2 but %3 is %4")
                .arg(field("routing"))
                .arg(r.layer)
                .arg(field("n_layers"))
                .arg(p.nLayers);
        if (r.layer >= kMaxProfileLayers)
            return QStringLiteral("%1 has layer %2; a profile has at most %3 layers")
                .arg(field("routing"))
                .arg(r.layer)
                .arg(kMaxProfileLayers);
        if (rows.contains(r.layer))
            return QStringLiteral("%1 lists layer %2 twice").arg(field("routing")).arg(r.layer);
        rows.insert(r.layer);
        const qsizetype width = r.expertCounts.size();
        if (p.nExperts > 0 && width != p.nExperts)
            return QStringLiteral("%1 layer %2 has %3 expert counts but %4 is %5")
                .arg(field("routing"))
                .arg(r.layer)
                .arg(width)
                .arg(field("n_experts"))
                .arg(p.nExperts);
        if (width > kMaxProfileExperts)
            return QStringLiteral("%1 layer %2 has %3 expert counts; a profile has at most %4 experts")
                .arg(field("routing"))
                .arg(r.layer)
                .arg(width)
                .arg(kMaxProfileExperts);
        if (firstWidth >= 0 && width != firstWidth)
            return QStringLiteral("%1 layer %2 has %3 expert counts but layer %4 has %5")
                .arg(field("routing"))
                .arg(r.layer)
                .arg(width)
                .arg(firstLayer)
                .arg(firstWidth);
        if (firstWidth < 0) {
            firstWidth = width;
            firstLayer = r.layer;
        }
    }

    if (p.traceIds.size() != p.traceWeights.size())
        return QStringLiteral("%1 has %2 entries but %3 has %4")
            .arg(field("trace_ids"))
            .arg(p.traceIds.size())
            .arg(field("trace_weights"))
            .arg(p.traceWeights.size());
    if (!p.traceIds.isEmpty()) {
        const qsizetype perPosition = qsizetype(p.moeLayers.size()) * p.k;
        if (perPosition == 0)
            return QStringLiteral("%1 has %2 entries but %3 lists %4 layers and %5 is %6")
                .arg(field("trace_ids"))
                .arg(p.traceIds.size())
                .arg(field("moe_layers"))
                .arg(p.moeLayers.size())
                .arg(field("k"))
                .arg(p.k);
        if (p.traceIds.size() % perPosition != 0)
            return QStringLiteral(
                       "%1 has %2 entries, not a whole number of positions of %3 slots (%4 lists %5 "
                       "layers, %6 is %7)")
                .arg(field("trace_ids"))
                .arg(p.traceIds.size())
                .arg(perPosition)
                .arg(field("moe_layers"))
                .arg(p.moeLayers.size())
                .arg(field("k"))
                .arg(p.k);
        for (qint16 id : p.traceIds)
            if (id < -1 || id >= p.nExperts)
                return QStringLiteral("%1 holds expert %2 but %3 is %4")
                    .arg(field("trace_ids"))
                    .arg(id)
                    .arg(field("n_experts"))
                    .arg(p.nExperts);
    }
    // Token text ends: none, or one per token time, never decreasing, never negative.
    if (!p.tokenTextEnds.isEmpty()) {
        if (p.tokenTextEnds.size() != p.tokenTimesUs.size())
            return QStringLiteral("%1 has %2 entries but %3 has %4")
                .arg(field("token_text_ends"))
                .arg(p.tokenTextEnds.size())
                .arg(field("token_times_us"))
                .arg(p.tokenTimesUs.size());
        for (qsizetype i = 0; i < p.tokenTextEnds.size(); ++i)
            if (p.tokenTextEnds[i] < (i > 0 ? p.tokenTextEnds[i - 1] : 0))
                return QStringLiteral("%1 goes back at token %2").arg(field("token_text_ends")).arg(i);
    }
    // Margins: none, or one per position and MoE layer of the trace.
    if (!p.traceMargins.isEmpty() && p.traceMargins.size() != qsizetype(p.tracePositions()) * p.moeLayers.size())
        return QStringLiteral("%1 has %2 entries but the trace has %3 positions of %4 layers")
            .arg(field("trace_margins"))
            .arg(p.traceMargins.size())
            .arg(p.tracePositions())
            .arg(p.moeLayers.size());
    return std::nullopt;
}

MessageProfile boundedProfile(MessageProfile p) {
    if (p.ttftUs && *p.ttftUs < 0) p.ttftUs = 0;
    p.durationUs = std::max<qint64>(p.durationUs, 0);
    p.memoryPeakBytes = std::max<qint64>(p.memoryPeakBytes, 0);
    for (int *v : {&p.nPromptTokens, &p.nCachedPromptTokens, &p.nPreemptions, &p.nSteps, &p.nStepsMissed,
                   &p.maxBatchSeqs, &p.kvBlocksPeak})
        *v = std::max(*v, 0);
    p.nLayers = std::clamp(p.nLayers, 0, kMaxProfileLayers);
    p.nExperts = std::clamp(p.nExperts, 0, kMaxProfileExperts);
    p.nSharedExperts = std::clamp(p.nSharedExperts, 0, kMaxProfileExperts);

    // MoE layers: distinct, inside the limit; the layer count grows to hold them.
    QSet<int> moe;
    QList<int> moeLayers;
    for (int l : std::as_const(p.moeLayers))
        if (l >= 0 && l < kMaxProfileLayers && !moe.contains(l)) {
            moe.insert(l);
            moeLayers.append(l);
            p.nLayers = std::max(p.nLayers, l + 1);
        }
    if (moeLayers.size() != p.moeLayers.size()) p.moeLayers = moeLayers;

    // Routing rows: distinct MoE layers (any layer inside the limit when none are listed), all as
    // long as the experts they count; n_experts follows the rows when they disagree with it.
    QSet<int> seen;
    QList<LayerRouting> rows;
    int width = 0;
    bool changed = false;
    for (const LayerRouting &r : std::as_const(p.routing)) {
        const bool fits =
            p.moeLayers.isEmpty() ? r.layer >= 0 && r.layer < kMaxProfileLayers : moe.contains(r.layer);
        if (!fits || seen.contains(r.layer)) {
            changed = true;
            continue;
        }
        seen.insert(r.layer);
        if (p.moeLayers.isEmpty() && p.nLayers > 0) p.nLayers = std::max(p.nLayers, r.layer + 1);
        width = std::max(width, int(std::min<qsizetype>(r.expertCounts.size(), kMaxProfileExperts)));
        rows.append(r);
    }
    bool rowsMatch = true;
    for (const LayerRouting &r : std::as_const(rows))
        rowsMatch = rowsMatch && r.expertCounts.size() == (p.nExperts > 0 ? p.nExperts : width);
    if (!rows.isEmpty() && !rowsMatch) {
        if (p.nExperts > 0) p.nExperts = width;
        const int target = p.nExperts > 0 ? p.nExperts : width;
        for (LayerRouting &r : rows)
            if (r.expertCounts.size() != target) r.expertCounts.resize(target, 0); // truncate or pad
        changed = true;
    }
    if (changed) p.routing = rows;

    // The trace: kept only when it fits the shape (a whole number of positions, ids in range).
    const qsizetype perPosition = qsizetype(p.moeLayers.size()) * p.k;
    bool traceFits = p.traceIds.size() == p.traceWeights.size();
    if (!p.traceIds.isEmpty())
        traceFits = traceFits && perPosition > 0 && p.k <= p.nExperts &&
                    p.traceIds.size() % perPosition == 0 &&
                    std::all_of(p.traceIds.cbegin(), p.traceIds.cend(),
                                [&](qint16 id) { return id >= -1 && id < p.nExperts; });
    if (!traceFits) {
        p.traceIds.clear();
        p.traceWeights.clear();
    }
    if (p.traceMargins.size() != qsizetype(p.tracePositions()) * p.moeLayers.size()) p.traceMargins.clear();
    bool endsFit = p.tokenTextEnds.size() == p.tokenTimesUs.size();
    for (qsizetype i = 0; endsFit && i < p.tokenTextEnds.size(); ++i)
        endsFit = p.tokenTextEnds[i] >= (i > 0 ? p.tokenTextEnds[i - 1] : 0);
    if (!endsFit) p.tokenTextEnds.clear();
    p.k = std::clamp(p.k, 0, p.nExperts);
    return p;
}

// ---- Lone surrogates in JSON text --------------------------------------------------------------------

namespace {

std::optional<ushort> loneSurrogateIn(QStringView s) {
    for (qsizetype i = 0; i < s.size(); ++i) {
        const QChar c = s[i];
        if (c.isHighSurrogate() && i + 1 < s.size() && s[i + 1].isLowSurrogate()) {
            ++i; // a pair: one character outside the BMP
            continue;
        }
        if (c.isSurrogate()) return c.unicode();
    }
    return std::nullopt;
}

bool findInValue(const QJsonValue &v, const QString &path, LoneSurrogate *out) {
    if (v.isString()) {
        const std::optional<ushort> u = loneSurrogateIn(v.toString());
        if (u) *out = {path, false, *u, -1};
        return u.has_value();
    }
    if (v.isArray()) {
        const QJsonArray a = v.toArray();
        for (qsizetype i = 0; i < a.size(); ++i)
            if (findInValue(a.at(i), QStringLiteral("%1[%2]").arg(path).arg(i), out)) return true;
    } else if (v.isObject()) {
        const QJsonObject o = v.toObject();
        for (auto it = o.constBegin(); it != o.constEnd(); ++it) {
            if (const std::optional<ushort> u = loneSurrogateIn(it.key())) {
                *out = {path, true, *u, -1};
                return true;
            }
            if (findInValue(it.value(), path.isEmpty() ? it.key() : path + QLatin1Char('.') + it.key(), out))
                return true;
        }
    }
    return false;
}

int hex4(const QByteArray &b, qsizetype at) {
    if (at < 0 || at + 4 > b.size()) return -1;
    int v = 0;
    for (qsizetype i = at; i < at + 4; ++i) {
        const char c = b[i];
        const int d = c >= '0' && c <= '9'   ? c - '0'
                      : c >= 'a' && c <= 'f' ? c - 'a' + 10
                      : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                             : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

// The byte offset of the first \uXXXX escape inside a string that is a lone surrogate.
std::optional<LoneSurrogate> findInBytes(const QByteArray &json) {
    bool inString = false;
    for (qsizetype i = 0; i < json.size(); ++i) {
        const char c = json[i];
        if (!inString || c == '"') {
            if (c == '"') inString = !inString;
            continue;
        }
        if (c != '\\' || i + 1 >= json.size()) continue;
        if (json[i + 1] != 'u') {
            ++i; // a one-character escape (\" included)
            continue;
        }
        const int u = hex4(json, i + 2);
        if (u >= 0xD800 && u <= 0xDBFF) {
            const bool pairEscape = i + 7 < json.size() && json[i + 6] == '\\' && json[i + 7] == 'u';
            const int low = pairEscape ? hex4(json, i + 8) : -1;
            if (low >= 0xDC00 && low <= 0xDFFF) {
                i += 11;
                continue;
            }
        }
        if (u >= 0xD800 && u <= 0xDFFF) return LoneSurrogate{{}, false, ushort(u), i};
        i += 1;
    }
    return std::nullopt;
}

} // namespace

std::optional<LoneSurrogate> findLoneSurrogate(const QJsonDocument &doc, const QByteArray &json) {
    LoneSurrogate found;
    const QJsonValue root = doc.isArray() ? QJsonValue(doc.array()) : QJsonValue(doc.object());
    if (findInValue(root, QString(), &found)) return found;
    return findInBytes(json);
}

} // namespace es
