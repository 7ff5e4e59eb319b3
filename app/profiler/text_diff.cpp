// Word-level diff of two replies (see text_diff.h).
#include "text_diff.h"

#include <algorithm>
#include <vector>

namespace es {

namespace {

bool isCjk(char32_t c) {
    return (c >= 0x3040 && c <= 0x30ff) || (c >= 0x3400 && c <= 0x4dbf) || (c >= 0x4e00 && c <= 0x9fff) ||
           (c >= 0xac00 && c <= 0xd7af) || (c >= 0xf900 && c <= 0xfaff) || (c >= 0x20000 && c <= 0x2fa1f);
}

enum class Cls { Word, Space, Single };

Cls classOf(char32_t c) {
    if (isCjk(c)) return Cls::Single;
    if (QChar::isSpace(c)) return Cls::Space;
    if (QChar::isLetterOrNumber(c) || c == U'_') return Cls::Word;
    return Cls::Single;
}

bool isSpaceUnit(const QString &u) { return !u.isEmpty() && u.front().isSpace(); }

void push(QList<DiffSpan> &spans, DiffSpan::Kind kind, const QString &text) {
    if (!spans.isEmpty() && spans.back().kind == kind) spans.back().text += text;
    else spans.append({kind, text});
}

} // namespace

QStringList diffUnits(const QString &text) {
    QStringList units;
    QString cur;
    Cls curCls = Cls::Single;
    for (const char32_t c : text.toUcs4()) {
        const Cls k = classOf(c);
        const QString s = QString::fromUcs4(&c, 1);
        if (!cur.isEmpty() && k == curCls && k != Cls::Single) {
            cur += s;
            continue;
        }
        if (!cur.isEmpty()) units << cur;
        cur = s;
        curCls = k;
    }
    if (!cur.isEmpty()) units << cur;
    return units;
}

TextDiff diffTexts(const QString &a, const QString &b) {
    const QStringList ua = diffUnits(a), ub = diffUnits(b);
    TextDiff d;
    for (const QString &u : ua) d.unitsA += isSpaceUnit(u) ? 0 : 1;
    for (const QString &u : ub) d.unitsB += isSpaceUnit(u) ? 0 : 1;
    // The common prefix and suffix first: most pairs differ in a part only.
    qsizetype pre = 0;
    while (pre < ua.size() && pre < ub.size() && ua[pre] == ub[pre]) ++pre;
    qsizetype suf = 0;
    while (suf < ua.size() - pre && suf < ub.size() - pre && ua[ua.size() - 1 - suf] == ub[ub.size() - 1 - suf]) ++suf;
    const qsizetype n = ua.size() - pre - suf, m = ub.size() - pre - suf;
    QList<DiffSpan> &spans = d.spans;
    auto same = [&](const QString &u) {
        push(spans, DiffSpan::Kind::Same, u);
        if (!isSpaceUnit(u)) ++d.unitsSame;
    };
    for (qsizetype i = 0; i < pre; ++i) same(ua[i]);
    if (n > kMaxDiffUnits || m > kMaxDiffUnits) {
        d.truncated = true;
        for (qsizetype i = 0; i < n; ++i) push(spans, DiffSpan::Kind::Removed, ua[pre + i]);
        for (qsizetype j = 0; j < m; ++j) push(spans, DiffSpan::Kind::Added, ub[pre + j]);
    } else {
        // LCS lengths of the suffixes: L[i][j] over ua[pre+i…], ub[pre+j…].
        std::vector<uint16_t> L(size_t((n + 1) * (m + 1)), 0);
        auto at = [&](qsizetype i, qsizetype j) -> uint16_t & { return L[size_t(i * (m + 1) + j)]; };
        for (qsizetype i = n - 1; i >= 0; --i)
            for (qsizetype j = m - 1; j >= 0; --j)
                at(i, j) = ua[pre + i] == ub[pre + j] ? uint16_t(at(i + 1, j + 1) + 1)
                                                      : std::max(at(i + 1, j), at(i, j + 1));
        qsizetype i = 0, j = 0;
        while (i < n || j < m) {
            if (i < n && j < m && ua[pre + i] == ub[pre + j]) {
                same(ua[pre + i]);
                ++i, ++j;
            } else if (j < m && (i == n || at(i, j + 1) >= at(i + 1, j))) {
                push(spans, DiffSpan::Kind::Added, ub[pre + j++]);
            } else {
                push(spans, DiffSpan::Kind::Removed, ua[pre + i++]);
            }
        }
    }
    for (qsizetype i = ua.size() - suf; i < ua.size(); ++i) same(ua[i]);
    return d;
}

QString diffHtml(const TextDiff &d) {
    QString html;
    for (const DiffSpan &s : d.spans) {
        QString t = s.text.toHtmlEscaped();
        t.replace(QLatin1Char('\n'), QLatin1String("<br>"));
        switch (s.kind) {
        case DiffSpan::Kind::Same:
            html += t;
            break;
        case DiffSpan::Kind::Removed:
            html += QStringLiteral("<s style=\"color:#b3261e\">") + t + QStringLiteral("</s>");
            break;
        case DiffSpan::Kind::Added:
            html += QStringLiteral("<span style=\"background-color:#ffe08a\">") + t + QStringLiteral("</span>");
            break;
        }
    }
    return html;
}

} // namespace es
