// Inert Markdown (see markdown_text.h): one pass over the lines (CommonMark's line endings),
// fenced blocks collected and written again with fences of their own, every other line escaped
// character by character with the inline rules.
#include "markdown_text.h"

#include <QStringList>

#include <algorithm>
#include <optional>

namespace es::report {

namespace {

QStringList splitLines(const QString &text) {
    QStringList lines;
    qsizetype start = 0;
    for (qsizetype i = 0; i < text.size(); ++i) {
        if (text[i] != u'\n' && text[i] != u'\r') continue;
        lines << text.mid(start, i - start);
        if (text[i] == u'\r' && i + 1 < text.size() && text[i + 1] == u'\n') ++i;
        start = i + 1;
    }
    lines << text.mid(start);
    return lines;
}

// Columns of leading indentation (a tab goes to the next multiple of 4) and where the text starts.
int indentation(QStringView line, qsizetype *textAt) {
    int columns = 0;
    qsizetype i = 0;
    for (; i < line.size(); ++i) {
        if (line[i] == u' ')
            ++columns;
        else if (line[i] == u'\t')
            columns += 4 - columns % 4;
        else
            break;
    }
    *textAt = i;
    return columns;
}

qsizetype runAt(QStringView s, qsizetype at, QChar c) {
    qsizetype n = 0;
    while (at + n < s.size() && s[at + n] == c) ++n;
    return n;
}

bool isBlank(QStringView line) {
    return std::all_of(line.begin(), line.end(), [](QChar c) { return c == u' ' || c == u'\t'; });
}

bool isAsciiPunctuation(QChar c) {
    const char16_t u = c.unicode();
    return (u >= 0x21 && u <= 0x2F) || (u >= 0x3A && u <= 0x40) || (u >= 0x5B && u <= 0x60) ||
           (u >= 0x7B && u <= 0x7E);
}

void appendEscaped(QChar c, QString &out) {
    if (c == u'<')
        out += QLatin1String("&lt;");
    else if (c == u'>')
        out += QLatin1String("&gt;");
    else if (c == u'&')
        out += QLatin1String("&amp;");
    else
        out += c;
}

struct Fence {
    QChar ch;
    qsizetype length = 0;
    int indent = 0;
    QString info;
};

// An opening fence: up to three columns of indentation, three or more backticks or tildes; a
// backtick fence's info string holds no backtick (CommonMark).
std::optional<Fence> openingFence(QStringView line) {
    qsizetype at = 0;
    const int indent = indentation(line, &at);
    if (indent > 3 || at >= line.size() || (line[at] != u'`' && line[at] != u'~')) return std::nullopt;
    const QChar ch = line[at];
    const qsizetype n = runAt(line, at, ch);
    if (n < 3) return std::nullopt;
    const QString info = line.mid(at + n).trimmed().toString();
    if (ch == u'`' && info.contains(u'`')) return std::nullopt;
    return Fence{ch, n, indent, info};
}

bool closesFence(QStringView line, const Fence &f) {
    qsizetype at = 0;
    if (indentation(line, &at) > 3) return false;
    const qsizetype n = runAt(line, at, f.ch);
    return n >= f.length && isBlank(line.mid(at + n));
}

// The info string's first word when it is a language name; anything else (attributes, Pandoc's
// {=html}, which would make the block raw HTML) is dropped: it is not shown as text.
QString languageOf(const QString &info) {
    const QString word = info.section(u' ', 0, 0);
    const bool plain = std::all_of(word.begin(), word.end(), [](QChar c) {
        return (c >= u'a' && c <= u'z') || (c >= u'A' && c <= u'Z') || (c >= u'0' && c <= u'9') ||
               c == u'_' || c == u'-' || c == u'+' || c == u'#' || c == u'.';
    });
    return plain ? word : QString();
}

// A fenced block written at the start of the line (so no list item or quote around it can end
// it early) with a fence longer than any backtick run inside: no line of it can close it.
void writeFenced(const Fence &open, const QStringList &body, QString &out) {
    qsizetype longest = 0;
    for (const QString &line : body)
        for (qsizetype i = 0; i < line.size();) {
            const qsizetype n = runAt(line, i, u'`');
            longest = std::max(longest, n);
            i += std::max<qsizetype>(n, 1);
        }
    const QString fence(std::max<qsizetype>(3, longest + 1), u'`');
    out += fence + languageOf(open.info) + u'\n';
    for (const QString &line : body) {
        qsizetype strip = 0; // the fence's own indentation, as CommonMark removes it from the lines
        while (strip < open.indent && strip < line.size() && line[strip] == u' ') ++strip;
        out += QStringView(line).mid(strip);
        out += u'\n';
    }
    out += fence + u'\n';
}

// Whether a code span opening at `at` may instead be read as part of something else by some
// renderer: a GFM autolink (www. or a scheme before it in the same word, which may run on
// through backticks), a MyST role before it ({role}`…`) or a Pandoc raw attribute after it
// (`…`{=html}).
bool spanMayBeOtherwise(QStringView line, qsizetype at, qsizetype end) {
    qsizetype wordStart = at;
    while (wordStart > 0 && !line[wordStart - 1].isSpace()) --wordStart;
    const QStringView word = line.mid(wordStart, at - wordStart);
    if (word.contains(u':') || word.contains(QLatin1String("www."), Qt::CaseInsensitive)) return true;
    if (at > 0 && line[at - 1] == u'}') return true;
    return end < line.size() && line[end] == u'{';
}

// One line outside fenced code. `untrusted` carries over the paragraph's lines: once a `]` (a
// link's destination or title may take a later backtick) or a doubtful code span has come, no
// later span is left verbatim, so every span that is left verbatim pairs as any renderer pairs it.
void escapeLine(QStringView line, bool *untrusted, QString &out) {
    qsizetype i = 0;
    // Blockquote markers stay: up to three spaces, '>', an optional space; repeated.
    for (;;) {
        qsizetype at = 0;
        if (indentation(line.mid(i), &at) > 3 || i + at >= line.size() || line[i + at] != u'>') break;
        out += line.mid(i, at + 1);
        i += at + 1;
        if (i < line.size() && line[i] == u' ') out += line[i++];
    }
    while (i < line.size()) {
        const QChar c = line[i];
        if (c == u'\\' && i + 1 < line.size() && isAsciiPunctuation(line[i + 1])) {
            const QChar d = line[i + 1];
            if (d == u'<' || d == u'>' || d == u'&')
                appendEscaped(d, out); // `\<` is no escape in every renderer; the entity is
            else
                out += line.mid(i, 2);
            i += 2;
            continue;
        }
        if (c == u'`') {
            const qsizetype n = runAt(line, i, u'`');
            if (!*untrusted) {
                qsizetype close = i + n; // the next run of exactly n backticks on this line
                while (close < line.size()) {
                    const qsizetype m = runAt(line, close, u'`');
                    if (m == n) break;
                    close += std::max<qsizetype>(m, 1);
                }
                if (close < line.size()) {
                    const qsizetype end = close + n;
                    if (!line.mid(i, end - i).contains(u'|') && !spanMayBeOtherwise(line, i, end)) {
                        out += line.mid(i, end - i); // code: verbatim
                        i = end;
                        continue;
                    }
                    *untrusted = true; // a table cell or another construct may pair it otherwise
                }
            }
            out += line.mid(i, n); // literal backticks
            i += n;
            continue;
        }
        if (c == u']') *untrusted = true;
        appendEscaped(c, out);
        ++i;
    }
}

} // namespace

QString inertMarkdown(const QString &markdown) {
    QString out;
    out.reserve(markdown.size() + markdown.size() / 8);
    const QStringList lines = splitLines(markdown);
    std::optional<Fence> open;
    QStringList body;
    bool untrusted = false;
    for (const QString &line : lines) {
        if (open) {
            if (closesFence(line, *open)) {
                writeFenced(*open, body, out);
                open.reset();
            } else {
                body << line;
            }
            continue;
        }
        if ((open = openingFence(line))) {
            body.clear();
            untrusted = false;
            continue;
        }
        if (isBlank(line)) untrusted = false; // a paragraph ends: links cannot reach past it
        escapeLine(line, &untrusted, out);
        out += u'\n';
    }
    if (open) writeFenced(*open, body, out); // left open: closed here, not by the next message
    if (out.endsWith(u'\n')) out.chop(1);    // as many line breaks as the text had
    return out;
}

QString inertMarkdownLine(const QString &text) {
    QString flat = text;
    flat.replace(QLatin1String("\r\n"), QLatin1String(" "));
    flat.replace(u'\r', u' ');
    flat.replace(u'\n', u' ');
    QString out;
    bool untrusted = false;
    escapeLine(flat, &untrusted, out);
    return out;
}

} // namespace es::report
