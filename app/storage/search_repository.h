// SearchRepository: full-text search over conversation titles and message text (FTS5 tables with
// the trigram tokenizer, kept in step with their content tables by triggers), with a LIKE scan
// for terms too short for the index.
// Invariants: read-only; text of replies still streaming is never searched; highlights are
// UTF-16 ranges into the returned title or snippet.
#pragma once

#include "storage_types.h"

#include <QCoreApplication>
#include <QStringList>

namespace es {

class ConversationRepository;
class StoreConnection;

class SearchRepository {
    Q_DECLARE_TR_FUNCTIONS(es::ChatStore)
public:
    SearchRepository(StoreConnection &connection, const ConversationRepository &conversations)
        : m_connection(connection), m_conversations(conversations) {}

    // Conversations whose title or message text contains every whitespace-separated term, best
    // first (ChatStore::search documents the semantics).
    QList<SearchHit> search(const QString &text, int limit) const;

private:
    QList<SearchHit> searchFts(const QStringList &terms, int limit) const;
    QList<SearchHit> searchLike(const QStringList &terms, int limit) const;

    StoreConnection &m_connection;
    const ConversationRepository &m_conversations;
};

} // namespace es
