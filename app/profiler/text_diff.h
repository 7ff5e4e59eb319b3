// A word-level diff of two replies (the Compare page's "changed tokens"): the texts are cut into
// units — a run of letters and digits of an alphabetic script, one CJK character, one run of
// white space, or one other character — and the longest common subsequence of units decides what
// is the same, what only A has and what only B has. Units, not model tokens, so that the same
// text diffs the same whatever tokenizer produced it.
#pragma once

#include <QList>
#include <QString>

namespace es {

struct DiffSpan {
    enum class Kind { Same, Removed, Added }; // Removed: only in A; Added: only in B
    Kind kind = Kind::Same;
    QString text;
    bool operator==(const DiffSpan &) const = default;
};

struct TextDiff {
    QList<DiffSpan> spans;  // A's and B's text interleaved: Same + Removed is A, Same + Added is B
    int unitsA = 0, unitsB = 0, unitsSame = 0; // non-space units
    // Past kMaxDiffUnits units a side, the middle is compared as one changed block (the common
    // prefix and suffix still found): the table would be too large to build at once.
    bool truncated = false;
};

inline constexpr int kMaxDiffUnits = 3000;

QStringList diffUnits(const QString &text);
TextDiff diffTexts(const QString &a, const QString &b);
// The diff as HTML: removed units struck through in red, added ones on a yellow background.
QString diffHtml(const TextDiff &d);

} // namespace es
