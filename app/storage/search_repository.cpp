// SearchRepository: FTS5 queries (bm25 ranking, highlight and snippet markers turned into
// TextRanges) and the LIKE scan that stands in for them when a term is shorter than a trigram.
#include "search_repository.h"

#include "conversation_repository.h"
#include "store_connection.h"
#include "store_sql.h"

#include <QRegularExpression>
#include <QSqlError>

#include <algorithm>

namespace es {

namespace {

// The FTS snippet/highlight markers: control characters that chat text does not contain.
const QChar kMarkOpen(0x01);
const QChar kMarkClose(0x02);

// Removes the FTS markers from s, recording where the marked spans are in the result.
QString stripMarkers(const QString &s, QList<TextRange> *ranges) {
    QString out;
    out.reserve(s.size());
    int open = -1;
    for (QChar ch : s) {
        if (ch == kMarkOpen) {
            open = int(out.size());
        } else if (ch == kMarkClose) {
            if (open >= 0 && out.size() > open) {
                // Adjacent trigram matches come back as separate spans; merge them.
                if (!ranges->isEmpty() && ranges->last().start + ranges->last().length == open)
                    ranges->last().length += int(out.size()) - open;
                else
                    ranges->append({open, int(out.size()) - open});
            }
            open = -1;
        } else {
            out.append(ch);
        }
    }
    return out;
}

// Every case-insensitive occurrence of each term in s, sorted and merged.
QList<TextRange> findTerms(const QString &s, const QStringList &terms) {
    QList<TextRange> found;
    for (const QString &t : terms)
        for (qsizetype at = s.indexOf(t, 0, Qt::CaseInsensitive); at >= 0;
             at = s.indexOf(t, at + t.size(), Qt::CaseInsensitive))
            found.append({int(at), int(t.size())});
    std::sort(found.begin(), found.end(),
              [](const TextRange &a, const TextRange &b) { return a.start < b.start; });
    QList<TextRange> merged;
    for (const TextRange &r : found) {
        if (!merged.isEmpty() && r.start <= merged.last().start + merged.last().length)
            merged.last().length = std::max(merged.last().length, r.start + r.length - merged.last().start);
        else
            merged.append(r);
    }
    return merged;
}

// A window of text around the first match, like FTS5's snippet(), for the LIKE path.
QString makeSnippet(const QString &text, const QStringList &terms, QList<TextRange> *highlights) {
    constexpr int kBefore = 16, kAfter = 48;
    const QList<TextRange> all = findTerms(text, terms);
    const int first = all.isEmpty() ? 0 : all.first().start;
    qsizetype start = std::max(0, first - kBefore);
    qsizetype end = std::min<qsizetype>(text.size(), first + kAfter);
    // Never cut a surrogate pair in half.
    if (start > 0 && text.at(start).isLowSurrogate()) --start;
    if (end < text.size() && text.at(end).isLowSurrogate()) ++end;
    const QString ellipsis = QStringLiteral("…");
    QString snippet = (start > 0 ? ellipsis : QString()) + text.mid(start, end - start) +
                      (end < text.size() ? ellipsis : QString());
    const int shift = (start > 0 ? int(ellipsis.size()) : 0) - int(start);
    for (const TextRange &r : all) {
        if (r.start < start || r.start + r.length > end) continue;
        highlights->append({r.start + shift, r.length});
    }
    return snippet;
}

QString likePattern(const QString &term) {
    QString escaped = term;
    escaped.replace(QLatin1Char('\\'), QLatin1String("\\\\"));
    escaped.replace(QLatin1Char('%'), QLatin1String("\\%"));
    escaped.replace(QLatin1Char('_'), QLatin1String("\\_"));
    return QLatin1Char('%') + escaped + QLatin1Char('%');
}

// Gathers hits per conversation; score: lower is better, title matches count double, and a
// conversation matching in both its title and its text ranks above one matching in either.
struct HitAccumulator {
    struct Entry {
        double titleScore = 0, messageScore = 0;
        bool inTitle = false, inMessage = false;
        SearchHit hit;
    };
    QHash<qint64, Entry> entries;

    void addTitle(qint64 conversationId, double score, const QList<TextRange> &highlights) {
        Entry &e = entries[conversationId];
        e.inTitle = true;
        e.titleScore = 2.0 * score;
        e.hit.titleHighlights = highlights;
    }
    // Messages arrive best first; only the best one per conversation gives the snippet.
    void addMessage(qint64 conversationId, qint64 messageId, double score, const QString &snippet,
                    const QList<TextRange> &highlights) {
        Entry &e = entries[conversationId];
        if (e.inMessage) return;
        e.inMessage = true;
        e.messageScore = score;
        e.hit.messageId = messageId;
        e.hit.snippet = snippet;
        e.hit.snippetHighlights = highlights;
    }
};

// The accumulated hits with their conversations, best first (ties: most recently updated), at
// most limit of them.
QList<SearchHit> rankHits(const HitAccumulator &acc, const ConversationRepository &conversations, int limit) {
    QList<SearchHit> hits;
    for (auto it = acc.entries.cbegin(); it != acc.entries.cend(); ++it) {
        const std::optional<Conversation> c = conversations.conversation(it.key());
        if (!c) continue;
        SearchHit hit = it.value().hit;
        hit.conversation = *c;
        hit.score = it.value().titleScore + it.value().messageScore;
        hits.append(hit);
    }
    std::sort(hits.begin(), hits.end(), [](const SearchHit &a, const SearchHit &b) {
        if (a.score != b.score) return a.score < b.score;
        return a.conversation.updatedAt > b.conversation.updatedAt;
    });
    if (hits.size() > limit) hits.resize(limit);
    return hits;
}

} // namespace

QList<SearchHit> SearchRepository::search(const QString &text, int limit) const {
    if (!m_connection.checkThread()) return {};
    const QStringList terms = text.split(QRegularExpression(QStringLiteral("\\s+")), Qt::SkipEmptyParts);
    if (terms.isEmpty() || limit <= 0) return {};
    // The trigram index can answer a term only if it has at least three characters.
    const bool indexable =
        std::all_of(terms.cbegin(), terms.cend(), [](const QString &t) { return t.toUcs4().size() >= 3; });
    return indexable ? searchFts(terms, limit) : searchLike(terms, limit);
}

QList<SearchHit> SearchRepository::searchFts(const QStringList &terms, int limit) const {
    QStringList quoted;
    for (QString t : terms)
        quoted.append(QLatin1Char('"') + t.replace(QLatin1Char('"'), QLatin1String("\"\"")) +
                      QLatin1Char('"'));
    const QString match = quoted.join(QLatin1Char(' ')); // implicit AND of phrases

    HitAccumulator acc;
    QSqlQuery q(m_connection.db());
    if (!run(q,
             QStringLiteral(
                 "SELECT rowid, bm25(conversations_fts), highlight(conversations_fts, 0, char(1), char(2)) "
                 "FROM conversations_fts WHERE conversations_fts MATCH ? ORDER BY rank LIMIT ?"),
             {match, limit})) {
        m_connection.fail(tr("Search failed"), q.lastError().text());
        return {};
    }
    while (q.next()) {
        QList<TextRange> ranges;
        stripMarkers(q.value(2).toString(), &ranges);
        acc.addTitle(q.value(0).toLongLong(), q.value(1).toDouble(), ranges);
    }
    // Enough message hits that `limit` conversations are found even when one has many.
    if (!run(q,
             QStringLiteral("SELECT m.conversation_id, m.id, bm25(messages_fts), "
                            "snippet(messages_fts, 0, char(1), char(2), '…', 40) "
                            "FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid "
                            "WHERE messages_fts MATCH ? ORDER BY bm25(messages_fts) LIMIT ?"),
             {match, limit * 20})) {
        m_connection.fail(tr("Search failed"), q.lastError().text());
        return {};
    }
    while (q.next()) {
        QList<TextRange> ranges;
        const QString snippet = stripMarkers(q.value(3).toString(), &ranges);
        acc.addMessage(q.value(0).toLongLong(), q.value(1).toLongLong(), q.value(2).toDouble(), snippet,
                       ranges);
    }

    return rankHits(acc, m_conversations, limit);
}

QList<SearchHit> SearchRepository::searchLike(const QStringList &terms, int limit) const {
    // No relevance score without the index: a title match counts -2, a message match -1, and
    // ties go to the most recently updated conversation.
    QStringList titleWhere, contentWhere;
    QVariantList patterns;
    for (const QString &t : terms) {
        titleWhere.append(QStringLiteral("title LIKE ? ESCAPE '\\'"));
        contentWhere.append(QStringLiteral("content LIKE ? ESCAPE '\\'"));
        patterns.append(likePattern(t));
    }
    HitAccumulator acc;
    QSqlQuery q(m_connection.db());
    if (!run(q,
             QStringLiteral("SELECT id, title FROM conversations WHERE %1")
                 .arg(titleWhere.join(QLatin1String(" AND "))),
             patterns)) {
        m_connection.fail(tr("Search failed"), q.lastError().text());
        return {};
    }
    while (q.next()) acc.addTitle(q.value(0).toLongLong(), -1.0, findTerms(q.value(1).toString(), terms));
    QVariantList values = patterns;
    values.append(limit * 20);
    if (!run(q,
             QStringLiteral(
                 "SELECT conversation_id, id, content FROM messages WHERE state <> 'partial' AND %1 "
                 "ORDER BY id DESC LIMIT ?")
                 .arg(contentWhere.join(QLatin1String(" AND "))),
             values)) {
        m_connection.fail(tr("Search failed"), q.lastError().text());
        return {};
    }
    while (q.next()) {
        QList<TextRange> ranges;
        const QString snippet = makeSnippet(q.value(2).toString(), terms, &ranges);
        acc.addMessage(q.value(0).toLongLong(), q.value(1).toLongLong(), -1.0, snippet, ranges);
    }
    return rankHits(acc, m_conversations, limit);
}

} // namespace es
