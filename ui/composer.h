// Composer: the text box at the bottom of a chat pane. Enter sends, Shift+Enter inserts a
// newline, Esc stops the reply in progress. Applying a preset puts its mode prefix at the start
// of the text (replacing the previous preset's prefix) so the user sees exactly what is sent.
// Its footer shows the model's context and KV budget and the live token count of what would be
// sent (ChatPane computes both); the pane puts the overflow-policy menu there.
#pragma once

#include <QPlainTextEdit>
#include <QWidget>

class QPushButton;
class QLabel;
class QHBoxLayout;

namespace es {

class ComposerEdit : public QPlainTextEdit {
    Q_OBJECT
public:
    using QPlainTextEdit::QPlainTextEdit;
signals:
    void sendRequested();
    void stopRequested();

protected:
    void keyPressEvent(QKeyEvent *e) override;
};

class Composer : public QWidget {
    Q_OBJECT
public:
    explicit Composer(QWidget *parent = nullptr);

    QString text() const;
    void setText(const QString &text);
    ComposerEdit *editor() const { return m_edit; }
    // Where the pane puts the preset bar (above the text box).
    QHBoxLayout *topRow() const { return m_top; }
    // The footer row (context, overflow policy, token count), where the pane adds its controls.
    QHBoxLayout *footerRow() const { return m_footer; }
    QString contextText() const;
    QString tokenCountText() const;

public slots:
    void setGenerating(bool generating);
    void setCanSend(bool can, const QString &whyNot = {});
    // The model's context and KV budget ("" hides it), with the definitions as its tooltip.
    void setContextInfo(const QString &text, const QString &toolTip);
    // The live count ("1,234 / 4,096 tokens"); over: the prompt does not fit as it stands.
    void setTokenCount(const QString &text, const QString &toolTip, bool over);
    // Replaces a leading `oldPrefix` (if present) with `newPrefix`; takeFocus: the text box gets
    // the focus (a preset the user chose), not when a conversation merely opened.
    void applyPrefix(const QString &oldPrefix, const QString &newPrefix, bool takeFocus = true);

signals:
    void sendRequested(const QString &text);
    void stopRequested();
    void draftChanged(); // the text box's text changed (typed, pasted, a preset's prefix)

private:
    void trySend();

    ComposerEdit *m_edit = nullptr;
    QPushButton *m_send = nullptr, *m_stop = nullptr;
    QLabel *m_hint = nullptr;
    QLabel *m_context = nullptr, *m_tokens = nullptr;
    QHBoxLayout *m_top = nullptr, *m_footer = nullptr;
    bool m_generating = false, m_canSend = true;
};

} // namespace es
