// ConversationListModel: mirrors the store's list (or search hits) and applies changes as the
// smallest row operations it can find: removals, then moves and inserts in target order, then
// dataChanged for rows whose content changed.
#include "conversation_list_model.h"

#include "chat_store.h"

#include <QSet>

namespace es {

ConversationListModel::ConversationListModel(ChatStore *store, QObject *parent)
    : QAbstractListModel(parent), m_store(store) {
    if (m_store) connect(m_store, &ChatStore::conversationsChanged, this, &ConversationListModel::refresh);
    refresh();
}

int ConversationListModel::rowCount(const QModelIndex &parent) const {
    return parent.isValid() ? 0 : int(m_rows.size());
}

QVariant ConversationListModel::data(const QModelIndex &index, int role) const {
    if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid)) return {};
    const Row &row = m_rows.at(index.row());
    const Conversation &c = row.conversation;
    switch (role) {
    case Qt::DisplayRole: return c.title.isEmpty() ? tr("New conversation") : c.title;
    case Qt::EditRole:
    case TitleRole: return c.title;
    case Qt::ToolTipRole: return row.snippet.isEmpty() ? QVariant() : QVariant(row.snippet);
    case IdRole: return c.id;
    case CreatedAtRole: return c.createdAt;
    case UpdatedAtRole: return c.updatedAt;
    case PinnedRole: return c.pinned;
    case SnippetRole: return row.snippet;
    case SnippetHtmlRole: {
        QString html;
        int at = 0;
        for (const TextRange &r : row.snippetHighlights) {
            html += row.snippet.mid(at, r.start - at).toHtmlEscaped();
            html += QStringLiteral("<b>") + row.snippet.mid(r.start, r.length).toHtmlEscaped() + QStringLiteral("</b>");
            at = r.start + r.length;
        }
        return html + row.snippet.mid(at).toHtmlEscaped();
    }
    case CurrentLeafIdRole: return c.currentLeafId.value_or(0);
    default: return {};
    }
}

bool ConversationListModel::setData(const QModelIndex &index, const QVariant &value, int role) {
    if (!m_store || !checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid))
        return false;
    const qint64 id = m_rows.at(index.row()).conversation.id;
    // The store's conversationsChanged signal brings the change back here (refresh()).
    if (role == Qt::EditRole || role == TitleRole) return m_store->renameConversation(id, value.toString());
    if (role == PinnedRole) return m_store->setPinned(id, value.toBool());
    return false;
}

Qt::ItemFlags ConversationListModel::flags(const QModelIndex &index) const {
    if (!index.isValid()) return Qt::NoItemFlags;
    return QAbstractListModel::flags(index) | Qt::ItemIsEditable | Qt::ItemNeverHasChildren;
}

QHash<int, QByteArray> ConversationListModel::roleNames() const {
    QHash<int, QByteArray> names = QAbstractListModel::roleNames();
    names.insert(IdRole, "conversationId");
    names.insert(TitleRole, "title");
    names.insert(CreatedAtRole, "createdAt");
    names.insert(UpdatedAtRole, "updatedAt");
    names.insert(PinnedRole, "pinned");
    names.insert(SnippetRole, "snippet");
    names.insert(SnippetHtmlRole, "snippetHtml");
    names.insert(CurrentLeafIdRole, "currentLeafId");
    return names;
}

qint64 ConversationListModel::conversationId(int row) const {
    return row >= 0 && row < m_rows.size() ? m_rows.at(row).conversation.id : 0;
}

int ConversationListModel::rowOf(qint64 conversationId) const {
    for (qsizetype i = 0; i < m_rows.size(); ++i)
        if (m_rows.at(i).conversation.id == conversationId) return int(i);
    return -1;
}

void ConversationListModel::setSearchText(const QString &text) {
    if (text == m_searchText) return;
    m_searchText = text;
    refresh();
    emit searchTextChanged(m_searchText);
}

void ConversationListModel::refresh() {
    QList<Row> next;
    if (m_store && m_store->isOpen()) {
        if (m_searchText.trimmed().isEmpty()) {
            for (const Conversation &c : m_store->conversations()) next.append({c, {}, {}});
        } else {
            for (const SearchHit &h : m_store->search(m_searchText, 200))
                next.append({h.conversation, h.snippet, h.snippetHighlights});
        }
    }
    sync(next);
}

void ConversationListModel::sync(const QList<Row> &next) {
    QSet<qint64> nextIds;
    for (const Row &r : next) nextIds.insert(r.conversation.id);

    // 1. Remove rows that are gone, in contiguous ranges from the bottom up.
    for (int i = int(m_rows.size()) - 1; i >= 0; --i) {
        if (nextIds.contains(m_rows.at(i).conversation.id)) continue;
        int first = i;
        while (first > 0 && !nextIds.contains(m_rows.at(first - 1).conversation.id)) --first;
        beginRemoveRows(QModelIndex(), first, i);
        m_rows.remove(first, i - first + 1);
        endRemoveRows();
        i = first;
    }

    // 2. Walk the target order: each position either already holds its row, or the row moves up
    //    from further down, or it is new. Rows are unique, so afterwards m_rows matches `next`.
    for (int i = 0; i < next.size(); ++i) {
        const Row &want = next.at(i);
        if (i < m_rows.size() && m_rows.at(i).conversation.id == want.conversation.id) {
            if (!(m_rows.at(i) == want)) {
                m_rows[i] = want;
                emit dataChanged(index(i), index(i));
            }
            continue;
        }
        int from = -1;
        for (int j = i + 1; j < m_rows.size(); ++j)
            if (m_rows.at(j).conversation.id == want.conversation.id) {
                from = j;
                break;
            }
        if (from >= 0) {
            beginMoveRows(QModelIndex(), from, from, QModelIndex(), i);
            m_rows.move(from, i);
            endMoveRows();
            if (!(m_rows.at(i) == want)) {
                m_rows[i] = want;
                emit dataChanged(index(i), index(i));
            }
        } else {
            beginInsertRows(QModelIndex(), i, i);
            m_rows.insert(i, want);
            endInsertRows();
        }
    }
}

} // namespace es
