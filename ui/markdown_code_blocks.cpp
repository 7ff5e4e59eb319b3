// find_code_blocks (see markdown_code_blocks.h): one pass over the lines.
#include "markdown_code_blocks.h"

namespace es {

namespace {

struct Fence {
    QChar ch;
    int length = 0;
    int indent = 0;
    QString info;
};

// A fence line: ≤ 3 spaces, then ≥ 3 backticks or tildes (a backtick fence's info string may not
// contain a backtick).
bool parse_fence(const QString &line, Fence *f) {
    int i = 0;
    while (i < line.size() && i < 4 && line[i] == ' ') ++i;
    if (i > 3 || i >= line.size() || (line[i] != '`' && line[i] != '~')) return false;
    const QChar ch = line[i];
    int n = 0;
    while (i + n < line.size() && line[i + n] == ch) ++n;
    if (n < 3) return false;
    const QString info = line.mid(i + n).trimmed();
    if (ch == '`' && info.contains('`')) return false;
    f->ch = ch;
    f->length = n;
    f->indent = i;
    f->info = info;
    return true;
}

QString strip_indent(const QString &line, int indent) {
    int i = 0;
    while (i < indent && i < line.size() && line[i] == ' ') ++i;
    return line.mid(i);
}

} // namespace

CodeBlocks find_code_blocks(const QString &markdown, const std::function<QString(int, const QString &)> &linkText) {
    CodeBlocks out;
    const QStringList lines = markdown.split('\n');
    QStringList result;
    result.reserve(lines.size());
    int open = -1; // index in `lines` of the open fence
    Fence fence;
    QStringList body;
    for (int i = 0; i < lines.size(); ++i) {
        const QString &line = lines[i];
        Fence f;
        if (open < 0) {
            if (parse_fence(line, &f)) {
                open = i;
                fence = f;
                body.clear();
                continue; // emitted when the block closes (the link goes before it)
            }
            result << line;
            continue;
        }
        if (parse_fence(line, &f) && f.ch == fence.ch && f.length >= fence.length && f.info.isEmpty()) {
            const int index = int(out.code.size());
            const QString language = fence.info.section(' ', 0, 0);
            out.code << body.join('\n');
            out.languages << language;
            QString text = linkText(index, language);
            text.replace('[', "\\[").replace(']', "\\]");
            // Its own paragraph: a blank line before (unless already there) and after.
            if (!result.isEmpty() && !result.last().trimmed().isEmpty()) result << QString();
            result << QStringLiteral("[%1](%2:%3)").arg(text, QLatin1String(kCopyCodeScheme)).arg(index) << QString();
            for (int k = open; k <= i; ++k) result << lines[k];
            open = -1;
            continue;
        }
        body << strip_indent(line, fence.indent);
    }
    if (open >= 0)
        for (int k = open; k < lines.size(); ++k) result << lines[k]; // still streaming: as it is
    out.annotated = result.join('\n');
    return out;
}

} // namespace es
