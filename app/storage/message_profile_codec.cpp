// Compact BLOB formats of message_profiles (schema v4). Both are versioned by a leading byte so
// a later format can be added without a migration; decoders refuse anything malformed instead
// of guessing (a damaged row shows as "no profile", never as wrong numbers).
//
// token_times: byte 0 = 1 (format), then one zigzag LEB128 varint per token: the difference to
//   the previous token's time in µs (the first one: its time since submit). About 2 bytes a
//   token at decode speeds, exact. Format 2 (with MessageProfile::tokenTextEnds): byte 0 = 2, then
//   per token two zigzag varints, the time difference and the text end's difference (bytes).
// routing_trace: "ESRT", byte 4 = 1 (format), byte 5 = bytes per expert id (1: uint8 with 0xFF
//   for -1, used when the model has at most 255 experts; 2: int16 LE), bytes 6-7 = 0, bytes 8-11 =
//   slot count n (uint32 LE), then qCompress() of n ids followed by n float16 LE weights.
//   Format 2 (a trace with the router's margins): byte 4 = 2, bytes 12-15 = margin count m
//   (uint32 LE), then qCompress() of the n ids, n weights and m float16 LE margins.
// steps (v5): byte 0 = 1 (format), then per step nine zigzag LEB128 varints: start µs (difference
//   to the previous step's start), duration µs, n_seqs, prefill tokens, decode tokens, attention,
//   MoE, dense and sampling µs. Empty: no steps (a profile from before v5).
// memory_samples (v5): byte 0 = 1, then per sample three zigzag varints: time µs and bytes in use
//   (each the difference to the previous sample's), KV blocks in use.
// step_timeline (v6): compact JSON {"v": 1, "step": n, "read_bw": bytes/s, "ops": [[name, phase,
//   layer, start µs, duration µs, bytes, shared], …]} (a few hundred launches once per reply: the
//   text form costs little and reads in any tool).
#include "storage_types.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>

#include <QtEndian>
#include <QtGlobal>
#include <qfloat16.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

namespace es {

namespace {

constexpr char kTraceMagic[4] = {'E', 'S', 'R', 'T'};
constexpr int kTraceHeader = 12, kTraceHeaderWithMargins = 16;

void putVarint(QByteArray &out, quint64 v) {
    while (v >= 0x80) {
        out.append(char(0x80 | (v & 0x7f)));
        v >>= 7;
    }
    out.append(char(v));
}

bool getVarint(const QByteArray &in, qsizetype &at, quint64 *v) {
    quint64 r = 0;
    for (int shift = 0; shift < 64 && at < in.size(); shift += 7) {
        const quint8 b = quint8(in[at++]);
        r |= quint64(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *v = r;
            return true;
        }
    }
    return false;
}

// Differences and running sums wrap modulo 2^64 (unsigned arithmetic): every qint64 sequence
// round-trips exactly, and a damaged BLOB cannot overflow a signed sum.
qint64 wrappingSub(qint64 a, qint64 b) { return qint64(quint64(a) - quint64(b)); }
qint64 wrappingAdd(qint64 a, qint64 b) { return qint64(quint64(a) + quint64(b)); }
bool fitsInt(qint64 v) {
    return v >= std::numeric_limits<int>::min() && v <= std::numeric_limits<int>::max();
}

void putZigzag(QByteArray &out, qint64 v) { putVarint(out, (quint64(v) << 1) ^ quint64(v >> 63)); }

bool getZigzag(const QByteArray &in, qsizetype &at, qint64 *v) {
    quint64 z = 0;
    if (!getVarint(in, at, &z)) return false;
    *v = qint64(z >> 1) ^ -qint64(z & 1);
    return true;
}

// Decodes records of n zigzag varints each after the format byte; nullopt if malformed.
template <int N>
std::optional<QList<std::array<qint64, N>>> decodeRecords(const QByteArray &b) {
    QList<std::array<qint64, N>> out;
    if (b.isEmpty()) return out;
    if (b[0] != char(1)) return std::nullopt;
    for (qsizetype at = 1; at < b.size();) {
        std::array<qint64, N> r{};
        for (int i = 0; i < N; ++i)
            if (!getZigzag(b, at, &r[size_t(i)])) return std::nullopt;
        out.append(r);
    }
    return out;
}

// float16 LE arrays of the routing trace.
void putHalves(const QList<float> &v, char *out) {
    for (qsizetype i = 0; i < v.size(); ++i) {
        const qfloat16 h(v[i]);
        quint16 bits;
        std::memcpy(&bits, &h, sizeof bits);
        qToLittleEndian<quint16>(bits, out + i * 2);
    }
}

QList<float> getHalves(const char *in, qsizetype n) {
    QList<float> v(n);
    for (qsizetype i = 0; i < n; ++i) {
        const quint16 bits = qFromLittleEndian<quint16>(in + i * 2);
        qfloat16 h;
        std::memcpy(static_cast<void *>(&h), &bits, sizeof bits); // qfloat16 is its 16 bits
        v[i] = float(h);
    }
    return v;
}

} // namespace

QByteArray encodeProfileSteps(const QList<ProfileStep> &steps) {
    if (steps.isEmpty()) return QByteArray("");
    QByteArray out;
    out.reserve(1 + steps.size() * 12);
    out.append(char(1));
    qint64 prev = 0;
    for (const ProfileStep &s : steps) {
        putZigzag(out, wrappingSub(s.tStartUs, prev));
        prev = s.tStartUs;
        for (qint64 v : {s.durationUs, qint64(s.nSeqs), qint64(s.nPrefillTokens), qint64(s.nDecodeTokens),
                         s.attentionUs, s.moeUs, s.denseUs, s.samplingUs})
            putZigzag(out, v);
    }
    return out;
}

std::optional<QList<ProfileStep>> decodeProfileSteps(const QByteArray &b) {
    const auto records = decodeRecords<9>(b);
    if (!records) return std::nullopt;
    QList<ProfileStep> out;
    out.reserve(records->size());
    qint64 t = 0;
    for (const auto &r : *records) {
        if (!fitsInt(r[2]) || !fitsInt(r[3]) || !fitsInt(r[4])) return std::nullopt;
        t = wrappingAdd(t, r[0]);
        out.append({t, r[1], int(r[2]), int(r[3]), int(r[4]), r[5], r[6], r[7], r[8]});
    }
    return out;
}

QByteArray encodeMemorySamples(const QList<ProfileMemorySample> &samples) {
    if (samples.isEmpty()) return QByteArray("");
    QByteArray out;
    out.append(char(1));
    qint64 prevT = 0, prevB = 0;
    for (const ProfileMemorySample &m : samples) {
        putZigzag(out, wrappingSub(m.tUs, prevT));
        putZigzag(out, wrappingSub(m.inUseBytes, prevB));
        putZigzag(out, m.kvBlocksUsed);
        prevT = m.tUs;
        prevB = m.inUseBytes;
    }
    return out;
}

std::optional<QList<ProfileMemorySample>> decodeMemorySamples(const QByteArray &b) {
    const auto records = decodeRecords<3>(b);
    if (!records) return std::nullopt;
    QList<ProfileMemorySample> out;
    qint64 t = 0, bytes = 0;
    for (const auto &r : *records) {
        if (!fitsInt(r[2])) return std::nullopt;
        t = wrappingAdd(t, r[0]);
        bytes = wrappingAdd(bytes, r[1]);
        out.append({t, bytes, int(r[2])});
    }
    return out;
}

QByteArray encodeTokenTimes(const QList<qint64> &timesUs, const QList<int> &textEnds) {
    const bool withText = !timesUs.isEmpty() && textEnds.size() == timesUs.size();
    QByteArray out;
    out.reserve(1 + timesUs.size() * (withText ? 3 : 2));
    out.append(char(withText ? 2 : 1));
    qint64 prev = 0, prevEnd = 0;
    for (qsizetype i = 0; i < timesUs.size(); ++i) {
        putZigzag(out, wrappingSub(timesUs[i], prev)); // zigzag: small negatives stay small
        prev = timesUs[i];
        if (!withText) continue;
        putZigzag(out, wrappingSub(textEnds[i], prevEnd));
        prevEnd = textEnds[i];
    }
    return out;
}

std::optional<QList<qint64>> decodeTokenTimes(const QByteArray &b, QList<int> *textEnds) {
    if (textEnds) textEnds->clear();
    if (b.isEmpty() || (b[0] != char(1) && b[0] != char(2))) return std::nullopt;
    const bool withText = b[0] == char(2);
    if (withText && b.size() == 1) return std::nullopt; // no tokens is written as format 1
    QList<qint64> out;
    QList<int> ends;
    qint64 prev = 0, prevEnd = 0;
    for (qsizetype at = 1; at < b.size();) {
        qint64 d = 0;
        if (!getZigzag(b, at, &d)) return std::nullopt;
        prev = wrappingAdd(prev, d);
        out.append(prev);
        if (!withText) continue;
        if (!getZigzag(b, at, &d)) return std::nullopt;
        prevEnd = wrappingAdd(prevEnd, d);
        if (prevEnd < 0 || !fitsInt(prevEnd)) return std::nullopt;
        ends.append(int(prevEnd));
    }
    if (textEnds) *textEnds = ends;
    return out;
}

QByteArray encodeRoutingTrace(const QList<qint16> &ids, const QList<float> &weights, int nExperts,
                              const QList<float> &margins) {
    if (ids.isEmpty() || ids.size() != weights.size()) return {};
    const int idBytes = nExperts <= 255 ? 1 : 2;
    const qsizetype n = ids.size(), nm = margins.size();
    QByteArray payload(n * idBytes + n * 2 + nm * 2, Qt::Uninitialized);
    char *p = payload.data();
    for (qsizetype i = 0; i < n; ++i) {
        if (idBytes == 1)
            p[i] = char(ids[i] < 0 ? 0xff : quint8(ids[i]));
        else
            qToLittleEndian<qint16>(ids[i], p + i * 2);
    }
    putHalves(weights, p + n * idBytes);
    putHalves(margins, p + n * idBytes + n * 2);
    const int header = nm > 0 ? kTraceHeaderWithMargins : kTraceHeader;
    QByteArray out(header, '\0');
    std::memcpy(out.data(), kTraceMagic, 4);
    out[4] = char(nm > 0 ? 2 : 1);
    out[5] = char(idBytes);
    qToLittleEndian<quint32>(quint32(n), out.data() + 8);
    if (nm > 0) qToLittleEndian<quint32>(quint32(nm), out.data() + 12);
    out.append(qCompress(payload, 6));
    return out;
}

bool decodeRoutingTrace(const QByteArray &b, QList<qint16> *ids, QList<float> *weights, QList<float> *margins) {
    ids->clear();
    weights->clear();
    if (margins) margins->clear();
    if (b.isEmpty()) return true; // no trace (a dense model, or nothing computed)
    if (b.size() < kTraceHeader || std::memcmp(b.constData(), kTraceMagic, 4) != 0 ||
        (b[4] != char(1) && b[4] != char(2)))
        return false;
    const int header = b[4] == char(2) ? kTraceHeaderWithMargins : kTraceHeader;
    const int idBytes = b[5];
    if (idBytes != 1 && idBytes != 2) return false;
    const qsizetype n = qFromLittleEndian<quint32>(b.constData() + 8);
    // qCompress() puts the uncompressed length first (big-endian): it must be the payload's, and
    // zlib cannot expand more than 1032:1, so a damaged length is refused before qUncompress()
    // would allocate it.
    if (b.size() < header + 4) return false;
    const qsizetype nm = header == kTraceHeader ? 0 : qsizetype(qFromLittleEndian<quint32>(b.constData() + 12));
    const quint64 claimed = qFromBigEndian<quint32>(b.constData() + header);
    if (claimed != quint64(n) * quint64(idBytes + 2) + quint64(nm) * 2 ||
        claimed > quint64(b.size() - header) * 1032)
        return false;
    const QByteArray payload = qUncompress(b.mid(header));
    if (payload.size() != n * idBytes + n * 2 + nm * 2) return false;
    const char *p = payload.constData();
    ids->resize(n);
    weights->resize(n);
    for (qsizetype i = 0; i < n; ++i) {
        if (idBytes == 1)
            (*ids)[i] = quint8(p[i]) == 0xff ? qint16(-1) : qint16(quint8(p[i]));
        else
            (*ids)[i] = qFromLittleEndian<qint16>(p + i * 2);
    }
    *weights = getHalves(p + n * idBytes, n);
    if (margins) *margins = getHalves(p + n * idBytes + n * 2, nm);
    return true;
}

QByteArray encodeStepTimeline(const StepTimeline &t) {
    QJsonArray ops;
    for (const TimelineOp &o : t.ops)
        ops.append(QJsonArray{o.name, o.phase, o.layer, o.startUs, o.durUs, o.bytes, o.shared});
    return QJsonDocument(QJsonObject{{QStringLiteral("v"), 1},
                                     {QStringLiteral("step"), double(t.step)},
                                     {QStringLiteral("read_bw"), t.readBandwidth},
                                     {QStringLiteral("ops"), ops}})
        .toJson(QJsonDocument::Compact);
}

std::optional<StepTimeline> decodeStepTimeline(const QByteArray &b) {
    StepTimeline t;
    if (b.isEmpty()) return t;
    QJsonParseError err{};
    const QJsonDocument doc = QJsonDocument::fromJson(b, &err);
    if (err.error != QJsonParseError::NoError || !doc.isObject()) return std::nullopt;
    const QJsonObject o = doc.object();
    if (o.value(QStringLiteral("v")).toInt() != 1 || !o.value(QStringLiteral("ops")).isArray()) return std::nullopt;
    // A step number a double holds exactly (an engine counts far fewer), a finite bandwidth.
    const double step = o.value(QStringLiteral("step")).toDouble(), bw = o.value(QStringLiteral("read_bw")).toDouble();
    if (!(step >= 0 && step <= 9007199254740992.0) || !(bw >= 0 && std::isfinite(bw))) return std::nullopt;
    t.step = quint64(step);
    t.readBandwidth = bw;
    for (const QJsonValue &v : o.value(QStringLiteral("ops")).toArray()) {
        const QJsonArray a = v.toArray();
        if (a.size() != 7 || !a[0].isString()) return std::nullopt;
        TimelineOp op{a[0].toString(), a[1].toInt(), a[2].toInt(), a[3].toDouble(), a[4].toDouble(),
                      a[5].toDouble(), a[6].toDouble()};
        if (op.phase < 0 || op.phase > 5 || !std::isfinite(op.startUs) || !std::isfinite(op.durUs) || op.durUs < 0 ||
            !std::isfinite(op.bytes) || op.bytes < 0 || !(op.shared >= 0 && op.shared <= 1))
            return std::nullopt;
        t.ops.append(op);
    }
    return t;
}

} // namespace es
