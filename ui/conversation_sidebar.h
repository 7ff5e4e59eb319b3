// ConversationSidebar: the left pane — search over titles and message text (FTS5 through the
// store; typing only filters, Enter opens the first match), the conversation list (pinned first,
// newest first), new / rename / pin / delete.
// Deleting shows an Undo bar for a few seconds; undo restores the conversation exactly, from the
// bar or (also after the bar has gone) Edit ▸ Undo delete, until the next delete replaces it.
#pragma once

#include "storage_types.h"

#include <QWidget>

#include <optional>

class QLineEdit;
class QListView;
class QDialog;
class QLabel;
class QPushButton;
class QTimer;

namespace es {

class ChatStore;
class ConversationListModel;

class ConversationSidebar : public QWidget {
    Q_OBJECT
public:
    explicit ConversationSidebar(ChatStore *store, QWidget *parent = nullptr);

    std::optional<qint64> currentConversation() const;
    QLineEdit *searchField() const { return m_search; }
    QListView *listView() const { return m_list; }
    ConversationListModel *model() const { return m_model; }
    bool canUndoDelete() const { return m_undo.has_value(); }
    QWidget *undoBar() const { return m_undoBar; }
    QDialog *renameDialog() const { return m_renameDialog; } // while open (tests)

public slots:
    void selectConversation(std::optional<qint64> id);
    void newConversation();
    void renameCurrent();
    void togglePinCurrent();
    void deleteCurrent();
    void undoDelete();
    void focusSearch();
    void expireUndoBar(); // what the undo bar's timeout does

signals:
    void conversationSelected(std::optional<qint64> id); // nullopt: start a new one
    void conversationAboutToBeDeleted(qint64 id); // before the store deletes it (replies stop first)
    void conversationDeleted(qint64 id);
    // An undo became possible (title: the deleted conversation's) or was used up (available false).
    void undoAvailableChanged(bool available, const QString &title);
    void searchAccepted(); // Enter in the search field opened its first match

protected:
    bool eventFilter(QObject *watched, QEvent *event) override;

private:
    ChatStore *m_store;
    ConversationListModel *m_model;
    QLineEdit *m_search;
    QListView *m_list;
    QWidget *m_undoBar;
    QLabel *m_undoLabel;
    QTimer *m_undoTimer;
    std::optional<ConversationSnapshot> m_undo;
    QDialog *m_renameDialog = nullptr;
};

} // namespace es
