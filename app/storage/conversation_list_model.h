// ConversationListModel: the conversation list of the left pane, over ChatStore. Without a search
// text it lists every conversation (pinned first, then newest first); with one, the search hits
// best first, each with a snippet. It follows the store's conversationsChanged signal and updates
// in place (row inserts, removes, moves and dataChanged, never a reset), so views keep their
// selection and scroll position. Lives on the store's thread.
#pragma once

#include "storage_types.h"

#include <QAbstractListModel>
#include <QPointer>

namespace es {

class ChatStore;

class ConversationListModel : public QAbstractListModel {
    Q_OBJECT
    Q_PROPERTY(QString searchText READ searchText WRITE setSearchText NOTIFY searchTextChanged)
public:
    enum Role {
        IdRole = Qt::UserRole + 1, // qint64
        TitleRole,                 // QString (DisplayRole shows a placeholder for an empty title)
        CreatedAtRole,             // QDateTime, UTC
        UpdatedAtRole,             // QDateTime, UTC
        PinnedRole,                // bool; settable
        SnippetRole,               // QString, plain; empty unless searching and message text matched
        SnippetHtmlRole,           // QString: the snippet HTML-escaped with matches in <b>…</b>
        CurrentLeafIdRole,         // qint64, 0 when the conversation is empty
    };
    Q_ENUM(Role)

    explicit ConversationListModel(ChatStore *store, QObject *parent = nullptr);

    int rowCount(const QModelIndex &parent = QModelIndex()) const override;
    QVariant data(const QModelIndex &index, int role = Qt::DisplayRole) const override;
    // EditRole/TitleRole rename the conversation, PinnedRole pins it, through the store.
    bool setData(const QModelIndex &index, const QVariant &value, int role = Qt::EditRole) override;
    Qt::ItemFlags flags(const QModelIndex &index) const override;
    QHash<int, QByteArray> roleNames() const override;

    qint64 conversationId(int row) const; // 0 when row is out of range
    int rowOf(qint64 conversationId) const; // -1 when not listed
    QString searchText() const { return m_searchText; }

public Q_SLOTS:
    void setSearchText(const QString &text);
    // Re-reads the store and applies the difference as row operations.
    void refresh();

Q_SIGNALS:
    void searchTextChanged(const QString &text);

private:
    struct Row {
        Conversation conversation;
        QString snippet;
        QList<TextRange> snippetHighlights;
        bool operator==(const Row &) const = default;
    };
    void sync(const QList<Row> &next);

    QPointer<ChatStore> m_store;
    QString m_searchText;
    QList<Row> m_rows;
};

} // namespace es
