// Text written into a Markdown export so that it renders as the same text but can create no
// HTML element: a viewer that renders raw HTML (most do) must not run a message's
// <script> or <img onerror=…>.
// - Outside code, `<`, `>` and `&` become `&lt;`, `&gt;` and `&amp;` (CommonMark renders them as the
//   characters; a backslash escape of one of them becomes its entity, since `\<` is not an escape
//   everywhere). Blockquote markers at the start of a line stay.
// - Fenced code blocks (``` or ~~~, up to three spaces of indentation) stay verbatim, since their
//   content is inert, and are written at the start of the line with a fence of their own: longer
//   than any run of the fence character inside, so no line of the block can close it, and
//   closed at the end of the text when the message left it open (the next message stays outside).
// - Inline code spans stay verbatim when every renderer reads them as code: on one line, no `]`
//   before them in the paragraph (a link destination or title could take their backtick), no `|`
//   inside (a table row would split them), not in a `www.`/`scheme:` word (GitHub's autolinks run
//   on through backticks), not next to `{…}` (MyST roles, Pandoc raw attributes). Once one is in
//   doubt, the rest of the paragraph is escaped like text, which in a code span shows the entity
//   instead of the character: safe, and rare.
// - A fence's info string keeps a plain language name only (Pandoc's {=html} would make the block
//   raw HTML).
// Indented code blocks are escaped like text (telling them from a list item's continuation needs
// the whole block structure).
#pragma once

#include <QString>

namespace es::report {

QString inertMarkdown(const QString &markdown);
// One line of text (a heading, a field in a heading): line breaks become spaces, then as above.
QString inertMarkdownLine(const QString &text);

} // namespace es::report
