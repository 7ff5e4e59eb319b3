// ConversationSidebar (see conversation_sidebar.h).
#include "conversation_sidebar.h"

#include "chat_store.h"
#include "conversation_list_model.h"

#include <QHBoxLayout>
#include <QInputDialog>
#include <QKeyEvent>
#include <QLabel>
#include <QLineEdit>
#include <QListView>
#include <QMenu>
#include <QPushButton>
#include <QTimer>
#include <QToolButton>
#include <QVBoxLayout>

namespace es {

ConversationSidebar::ConversationSidebar(ChatStore *store, QWidget *parent) : QWidget(parent), m_store(store) {
    auto *layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    auto *top = new QHBoxLayout;
    m_search = new QLineEdit(this);
    m_search->setPlaceholderText(tr("Search conversations (Ctrl+F)"));
    m_search->setClearButtonEnabled(true);
    auto *add = new QToolButton(this);
    add->setText(QStringLiteral("+"));
    add->setToolTip(tr("New conversation (Ctrl+N)"));
    top->addWidget(m_search, 1);
    top->addWidget(add);
    layout->addLayout(top);

    m_model = new ConversationListModel(store, this);
    m_list = new QListView(this);
    m_list->setModel(m_model);
    m_list->setEditTriggers(QAbstractItemView::EditKeyPressed);
    m_list->setContextMenuPolicy(Qt::CustomContextMenu);
    m_list->setWordWrap(true);
    m_list->setUniformItemSizes(false);
    layout->addWidget(m_list, 1);

    m_undoBar = new QWidget(this);
    auto *undoLayout = new QHBoxLayout(m_undoBar);
    undoLayout->setContentsMargins(0, 0, 0, 0);
    m_undoLabel = new QLabel(m_undoBar);
    m_undoLabel->setTextFormat(Qt::PlainText);
    // A long title wraps instead of widening the sidebar (its width stays what the user set).
    m_undoLabel->setWordWrap(true);
    m_undoLabel->setMinimumWidth(1);
    auto *undo = new QPushButton(tr("Undo"), m_undoBar);
    undoLayout->addWidget(m_undoLabel, 1);
    undoLayout->addWidget(undo);
    m_undoBar->setVisible(false);
    layout->addWidget(m_undoBar);
    m_undoTimer = new QTimer(this);
    m_undoTimer->setSingleShot(true);
    m_undoTimer->setInterval(10000);

    // Typing filters the list and nothing else: the open conversation stays open (and highlighted
    // while it matches), the focus stays here. Enter opens the first match; Down goes to the list.
    connect(m_search, &QLineEdit::textChanged, this, [this](const QString &text) {
        const std::optional<qint64> open = currentConversation();
        {
            QSignalBlocker block(m_list->selectionModel());
            m_model->setSearchText(text);
        }
        selectConversation(open);
    });
    connect(m_search, &QLineEdit::returnPressed, this, [this] {
        if (m_model->rowCount() == 0) return;
        const qint64 id = m_model->conversationId(0);
        selectConversation(id);
        emit conversationSelected(id);
        emit searchAccepted();
    });
    m_search->installEventFilter(this);
    connect(add, &QToolButton::clicked, this, &ConversationSidebar::newConversation);
    connect(undo, &QPushButton::clicked, this, &ConversationSidebar::undoDelete);
    connect(m_undoTimer, &QTimer::timeout, this, &ConversationSidebar::expireUndoBar);
    connect(m_list->selectionModel(), &QItemSelectionModel::currentChanged, this, [this](const QModelIndex &cur) {
        if (cur.isValid()) emit conversationSelected(m_model->conversationId(cur.row()));
    });
    connect(m_list, &QListView::customContextMenuRequested, this, [this](const QPoint &pos) {
        if (!m_list->indexAt(pos).isValid()) return;
        QMenu menu(this);
        menu.addAction(tr("Rename…"), this, &ConversationSidebar::renameCurrent);
        menu.addAction(tr("Pin / unpin"), this, &ConversationSidebar::togglePinCurrent);
        menu.addSeparator();
        menu.addAction(tr("Delete"), this, &ConversationSidebar::deleteCurrent);
        menu.exec(m_list->viewport()->mapToGlobal(pos));
    });
}

std::optional<qint64> ConversationSidebar::currentConversation() const {
    const QModelIndex i = m_list->currentIndex();
    if (!i.isValid()) return std::nullopt;
    const qint64 id = m_model->conversationId(i.row());
    return id ? std::optional<qint64>(id) : std::nullopt;
}

void ConversationSidebar::selectConversation(std::optional<qint64> id) {
    const int row = id ? m_model->rowOf(*id) : -1;
    QSignalBlocker block(m_list->selectionModel());
    if (row < 0) m_list->selectionModel()->clearCurrentIndex();
    else m_list->setCurrentIndex(m_model->index(row));
}

void ConversationSidebar::newConversation() {
    selectConversation(std::nullopt);
    emit conversationSelected(std::nullopt);
}

void ConversationSidebar::renameCurrent() {
    const auto id = currentConversation();
    if (!id) return;
    const auto conv = m_store->conversation(*id);
    QInputDialog dialog(this);
    dialog.setWindowTitle(tr("Rename conversation"));
    dialog.setLabelText(tr("Title:"));
    dialog.setTextValue(conv ? conv->title : QString());
    // Wide enough for its title, which window managers otherwise cut ("Renam… ation"): the text
    // field sets the width (QInputDialog's layout overrides the dialog's own minimum).
    if (auto *field = dialog.findChild<QLineEdit *>())
        field->setMinimumWidth(std::max(360, dialog.fontMetrics().horizontalAdvance(dialog.windowTitle()) * 2 + 120));
    m_renameDialog = &dialog;
    const bool ok = dialog.exec() == QDialog::Accepted;
    m_renameDialog = nullptr;
    if (ok) m_store->renameConversation(*id, dialog.textValue().trimmed());
}

void ConversationSidebar::togglePinCurrent() {
    const auto id = currentConversation();
    if (!id) return;
    if (const auto conv = m_store->conversation(*id)) m_store->setPinned(*id, !conv->pinned);
}

void ConversationSidebar::deleteCurrent() {
    const auto id = currentConversation();
    if (!id) return;
    emit conversationAboutToBeDeleted(*id);
    auto snap = m_store->deleteConversation(*id);
    if (!snap) return;
    m_undo = std::move(snap);
    m_undoLabel->setText(tr("Deleted “%1”").arg(m_undo->conversation.title));
    m_undoBar->setVisible(true);
    m_undoTimer->start();
    emit conversationDeleted(*id);
    emit undoAvailableChanged(true, m_undo->conversation.title);
}

void ConversationSidebar::undoDelete() {
    if (!m_undo) return;
    const qint64 id = m_undo->conversation.id;
    if (m_store->restoreConversation(*m_undo)) {
        m_undo.reset();
        m_undoBar->setVisible(false);
        m_undoTimer->stop();
        selectConversation(id);
        emit conversationSelected(id);
        emit undoAvailableChanged(false, QString());
    }
}

// The bar goes; the snapshot stays for Edit ▸ Undo delete.
void ConversationSidebar::expireUndoBar() { m_undoBar->setVisible(false); }

bool ConversationSidebar::eventFilter(QObject *watched, QEvent *event) {
    if (watched == m_search && event->type() == QEvent::KeyPress &&
        static_cast<QKeyEvent *>(event)->key() == Qt::Key_Down && m_model->rowCount() > 0) {
        m_list->setFocus();
        if (!m_list->currentIndex().isValid()) m_list->setCurrentIndex(m_model->index(0));
        return true;
    }
    return QWidget::eventFilter(watched, event);
}

void ConversationSidebar::focusSearch() {
    m_search->setFocus();
    m_search->selectAll();
}

} // namespace es
