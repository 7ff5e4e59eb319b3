// MessageWidget: one message of a chat pane — speaker, Markdown body (re-rendered as text
// streams in), and its actions: copy, edit-and-resend (user), regenerate and continue
// (assistant), delete (the "⋯" menu and the context menu), and the `< 2/3 >` switcher between
// sibling branches. Under a reply, a quiet line with its measurements (tok/s, tokens, TTFT, stop
// reason) and, when the prompt left messages out to fit the context, a note saying how many; the
// header's tooltip has the times. It only displays and asks; ChatPane decides.
#pragma once

#include "storage_types.h"

#include <QFrame>
#include <QStringList>

#include <optional>

class QAction;
class QLabel;
class QTextBrowser;
class QToolButton;
class QPlainTextEdit;

namespace es {

class MessageWidget : public QFrame {
    Q_OBJECT
public:
    QString statusText() const; // the header's status: "generating…", "stopped", "Copied"…
    explicit MessageWidget(const Message &message, QWidget *parent = nullptr);

    qint64 messageId() const { return m_message.id; }
    MessageRole role() const { return m_message.role; }
    QString text() const { return m_text; }
    // The closed fenced code blocks of the body; each has a "Copy code" link above it.
    QStringList codeBlocks() const { return m_codeBlocks; }

    // Streaming: replaces the body text (Markdown) and marks the message as still generating.
    void setStreamingText(const QString &text);
    void setFinished(const Message &message);
    void setSiblings(const SiblingInfo &siblings);
    void setRegenerateVisible(bool visible);
    // Continue: offered on a reply cut at its token limit (stop reason "length") that ends the branch.
    void setContinueVisible(bool visible);
    // The reply's stored measurements (ChatStore::metrics), shown in the stats line.
    void setMetrics(const std::optional<MessageMetrics> &metrics);
    QString statsText() const;       // the quiet line under a reply ("" when none)
    QString contextNoteText() const; // "3 earlier messages were left out…" ("" when none)
    QString headerToolTip() const;   // the times, on the speaker's name
    void setActionsEnabled(bool enabled); // false while the pane generates
    // Selection (the profiler shows the selected message's profile): a click on the header.
    void setSelected(bool selected);
    bool isSelected() const { return m_selected; }
    // Marks these byte ranges of the text (UTF-8, [from, to)) in the body — the tokens the
    // profiler's highlighted expert took; empty: none. Kept across re-renders.
    void highlightTokens(const QList<QPair<int, int>> &byteRanges);
    int highlightedTokens() const { return m_highlightedTokens; } // ranges found in the body
    QString highlightedText() const; // the marked text, one range a line (tests)

signals:
    void copyRequested(const QString &text); // the whole message, or one code block
    void editSubmitted(qint64 messageId, const QString &newText);
    void regenerateRequested(qint64 messageId);
    void continueRequested(qint64 messageId);
    void deleteRequested(qint64 messageId); // the message and its branch below it
    void siblingRequested(qint64 messageId); // switch the branch to this sibling
    void selected(qint64 messageId);          // the user clicked the message's header

protected:
    void mousePressEvent(QMouseEvent *event) override;
    void changeEvent(QEvent *event) override; // a new palette or font: rendered again with them
    void contextMenuEvent(QContextMenuEvent *event) override;

private:
    void render();
    void startEditing();
    void showEditor(bool editing);
    QString statusLine() const;
    QString plainStatusLine() const;
    void updateStats();
    void shadeCodeBlocks();
    void showCopied(const QString &what);

    Message m_message;
    QString m_text;
    QStringList m_codeBlocks;
    bool m_streaming = false;
    SiblingInfo m_siblings;
    QLabel *m_who = nullptr;
    QLabel *m_status = nullptr;
    QWidget *m_editPage = nullptr;
    QTextBrowser *m_body = nullptr;
    QPlainTextEdit *m_editor = nullptr;
    QToolButton *m_copy = nullptr, *m_edit = nullptr, *m_regen = nullptr, *m_continue = nullptr;
    QToolButton *m_more = nullptr; // "⋯": the menu of less frequent actions (delete)
    QAction *m_delete = nullptr;
    QLabel *m_contextNote = nullptr, *m_stats = nullptr;
    std::optional<MessageMetrics> m_metrics;
    QToolButton *m_prev = nullptr, *m_next = nullptr;
    QLabel *m_branch = nullptr;
    bool m_selected = false;
    QList<QPair<int, int>> m_highlightRanges;
    int m_highlightedTokens = 0;
    void applyHighlight();
};

} // namespace es
