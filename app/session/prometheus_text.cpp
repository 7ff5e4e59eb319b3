// Prometheus text parser (see prometheus_text.h). One pass per line with an index; no regular
// expressions (a scrape of a large MoE model has tens of thousands of expert series).
#include "prometheus_text.h"

#include <cmath>
#include <limits>

namespace es {

namespace {

bool isNameStart(char c, bool colon) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (colon && c == ':');
}
bool isNameChar(char c, bool colon) { return isNameStart(c, colon) || (c >= '0' && c <= '9'); }
bool isBlank(char c) { return c == ' ' || c == '\t'; }

// Reads a metric (colon allowed) or label name at i; empty on failure.
QByteArray readName(const QByteArray &s, qsizetype &i, bool colon) {
    const qsizetype start = i;
    if (i >= s.size() || !isNameStart(s[i], colon)) return {};
    while (i < s.size() && isNameChar(s[i], colon)) ++i;
    return s.mid(start, i - start);
}

void skipBlanks(const QByteArray &s, qsizetype &i) {
    while (i < s.size() && isBlank(s[i])) ++i;
}

std::optional<double> parseValue(const QByteArray &t) {
    if (t == "+Inf" || t == "Inf") return std::numeric_limits<double>::infinity();
    if (t == "-Inf") return -std::numeric_limits<double>::infinity();
    if (t == "NaN") return std::numeric_limits<double>::quiet_NaN();
    bool ok = false;
    const double v = t.toDouble(&ok);
    if (!ok) return std::nullopt;
    return v;
}

// One sample line; an error text on failure.
QString parseSample(const QByteArray &s, PromSample &out) {
    qsizetype i = 0;
    const QByteArray name = readName(s, i, true);
    if (name.isEmpty()) return QStringLiteral("expected a metric name");
    out.name = QString::fromLatin1(name);
    if (i < s.size() && s[i] == '{') {
        ++i;
        for (;;) {
            skipBlanks(s, i);
            if (i < s.size() && s[i] == '}') {
                ++i;
                break;
            }
            const QByteArray key = readName(s, i, false);
            if (key.isEmpty()) return QStringLiteral("expected a label name");
            skipBlanks(s, i);
            if (i >= s.size() || s[i] != '=')
                return QStringLiteral("expected '=' after label %1").arg(QString::fromLatin1(key));
            ++i;
            skipBlanks(s, i);
            if (i >= s.size() || s[i] != '"')
                return QStringLiteral("expected a quoted value for label %1").arg(QString::fromLatin1(key));
            ++i;
            QByteArray value;
            bool closed = false;
            while (i < s.size()) {
                const char c = s[i++];
                if (c == '"') {
                    closed = true;
                    break;
                }
                if (c == '\\' && i < s.size()) {
                    const char e = s[i++];
                    value += e == 'n' ? '\n' : e; // \\ → \, \" → ", \n → newline
                } else {
                    value += c;
                }
            }
            if (!closed)
                return QStringLiteral("unterminated value of label %1").arg(QString::fromLatin1(key));
            out.labels.append({QString::fromLatin1(key), QString::fromUtf8(value)});
            skipBlanks(s, i);
            if (i < s.size() && s[i] == ',') {
                ++i;
                continue;
            }
            if (i < s.size() && s[i] == '}') {
                ++i;
                break;
            }
            return QStringLiteral("expected ',' or '}' in the labels");
        }
    }
    if (i >= s.size() || !isBlank(s[i])) return QStringLiteral("expected a space before the value");
    skipBlanks(s, i);
    qsizetype start = i;
    while (i < s.size() && !isBlank(s[i])) ++i;
    const std::optional<double> v = parseValue(s.mid(start, i - start));
    if (!v) return QStringLiteral("'%1' is not a number").arg(QString::fromLatin1(s.mid(start, i - start)));
    out.value = *v;
    skipBlanks(s, i);
    if (i < s.size()) {
        start = i;
        while (i < s.size() && !isBlank(s[i])) ++i;
        bool ok = false;
        const qint64 ts = s.mid(start, i - start).toLongLong(&ok);
        if (!ok)
            return QStringLiteral("'%1' is not a timestamp")
                .arg(QString::fromLatin1(s.mid(start, i - start)));
        out.timestampMs = ts;
        skipBlanks(s, i);
        if (i < s.size()) return QStringLiteral("unexpected text after the timestamp");
    }
    return {};
}

} // namespace

QString PromSample::label(const QString &key) const {
    for (const auto &kv : labels)
        if (kv.first == key) return kv.second;
    return {};
}

bool PromExposition::has(const QString &name) const {
    for (const PromSample &s : samples)
        if (s.name == name) return true;
    return false;
}

std::optional<double> PromExposition::sum(const QString &name,
                                          const QList<QPair<QString, QString>> &match) const {
    std::optional<double> total;
    for (const PromSample &s : samples) {
        if (s.name != name) continue;
        bool all = true;
        for (const auto &m : match)
            if (s.label(m.first) != m.second) all = false;
        if (!all) continue;
        total = total.value_or(0.0) + s.value;
    }
    return total;
}

QList<PromSample> PromExposition::family(const QString &name) const {
    QList<PromSample> out;
    for (const PromSample &s : samples)
        if (s.name == name) out.append(s);
    return out;
}

PromExposition parsePrometheusText(const QByteArray &text) {
    PromExposition out;
    qsizetype pos = 0;
    int lineNo = 0;
    while (pos < text.size()) {
        qsizetype nl = text.indexOf('\n', pos);
        if (nl < 0) nl = text.size();
        QByteArray line = text.mid(pos, nl - pos);
        pos = nl + 1;
        ++lineNo;
        if (line.endsWith('\r')) line.chop(1);
        qsizetype i = 0;
        skipBlanks(line, i);
        if (i == line.size()) continue;
        line = line.mid(i);
        QString error;
        if (line.startsWith('#')) {
            const QList<QByteArray> parts = line.simplified().split(' ');
            if (parts.size() >= 2 && parts[1] == "TYPE") {
                static const QList<QByteArray> kinds = {"counter", "gauge", "histogram", "summary",
                                                        "untyped"};
                if (parts.size() != 4 || !kinds.contains(parts[3]))
                    error = QStringLiteral("malformed # TYPE line");
                else
                    out.types.insert(QString::fromLatin1(parts[2]), QString::fromLatin1(parts[3]));
            }
        } else {
            PromSample s;
            error = parseSample(line, s);
            if (error.isEmpty()) out.samples.append(std::move(s));
        }
        if (!error.isEmpty()) {
            ++out.malformedLines;
            if (out.firstError.isEmpty())
                out.firstError = QStringLiteral("line %1: %2").arg(lineNo).arg(error);
        }
    }
    return out;
}

} // namespace es
