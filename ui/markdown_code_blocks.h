// Fenced code blocks of a Markdown text (CommonMark fences: ``` or ~~~, up to three spaces of
// indentation, closed by a fence of the same character at least as long). MessageWidget uses it
// to put a "Copy code" link above every closed block; the link's URL carries the block's index.
#pragma once

#include <QString>
#include <QStringList>

#include <functional>

namespace es {

struct CodeBlocks {
    QStringList code;      // the text of each closed block, without its fences and indentation
    QStringList languages; // the info string's first word ("" when none)
    QString annotated;     // the Markdown with a link paragraph [..](es-copy:N) before block N
};

inline constexpr char kCopyCodeScheme[] = "es-copy";

// linkText(i) is the text of block i's link (e.g. "Copy code · python"). Unclosed blocks (a reply
// still streaming) get no link and are not listed.
CodeBlocks find_code_blocks(const QString &markdown, const std::function<QString(int, const QString &)> &linkText);

} // namespace es
