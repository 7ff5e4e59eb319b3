// Composer (see composer.h).
#include "composer.h"

#include <QHBoxLayout>
#include <QKeyEvent>
#include <QLabel>
#include <QPushButton>
#include <QVBoxLayout>

namespace es {

void ComposerEdit::keyPressEvent(QKeyEvent *e) {
    if ((e->key() == Qt::Key_Return || e->key() == Qt::Key_Enter) && !(e->modifiers() & Qt::ShiftModifier)) {
        emit sendRequested();
        return;
    }
    if (e->key() == Qt::Key_Escape) {
        emit stopRequested();
        return;
    }
    QPlainTextEdit::keyPressEvent(e);
}

Composer::Composer(QWidget *parent) : QWidget(parent) {
    auto *layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    m_top = new QHBoxLayout;
    layout->addLayout(m_top);
    auto *row = new QHBoxLayout;
    m_edit = new ComposerEdit(this);
    m_edit->setPlaceholderText(tr("Message the model — Enter to send, Shift+Enter for a new line, Esc to stop"));
    m_edit->setTabChangesFocus(true);
    m_edit->setMaximumHeight(120);
    m_edit->setMinimumHeight(56);
    row->addWidget(m_edit, 1);
    auto *buttons = new QVBoxLayout;
    m_send = new QPushButton(tr("Send"), this);
    m_send->setToolTip(tr("Send (Enter)"));
    m_stop = new QPushButton(tr("Stop"), this);
    m_stop->setToolTip(tr("Stop generating (Esc)"));
    buttons->addWidget(m_send);
    buttons->addWidget(m_stop);
    buttons->addStretch(1);
    row->addLayout(buttons);
    layout->addLayout(row);
    m_hint = new QLabel(this);
    m_hint->setStyleSheet("color: palette(mid)");
    m_hint->setVisible(false);
    layout->addWidget(m_hint);
    m_footer = new QHBoxLayout;
    m_context = new QLabel(this);
    m_context->setObjectName("contextInfo");
    m_context->setStyleSheet("color: palette(mid); font-size: small");
    // Informational: it wraps rather than widen the pane (a pane's minimum width decides whether
    // another fits beside it).
    m_context->setWordWrap(true);
    m_context->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
    m_tokens = new QLabel(this);
    m_tokens->setObjectName("tokenCount");
    m_tokens->setStyleSheet("color: palette(mid); font-size: small");
    m_footer->addWidget(m_context, 3); // (Ignored: it takes the room the stretch leaves it)
    m_footer->addStretch(1);
    m_footer->addWidget(m_tokens);
    layout->addLayout(m_footer);
    connect(m_edit, &QPlainTextEdit::textChanged, this, &Composer::draftChanged);

    connect(m_edit, &ComposerEdit::sendRequested, this, &Composer::trySend);
    connect(m_send, &QPushButton::clicked, this, &Composer::trySend);
    connect(m_edit, &ComposerEdit::stopRequested, this, [this] {
        if (m_generating) emit stopRequested();
    });
    connect(m_stop, &QPushButton::clicked, this, &Composer::stopRequested);
    setGenerating(false);
}

QString Composer::text() const { return m_edit->toPlainText(); }
void Composer::setText(const QString &text) { m_edit->setPlainText(text); }

void Composer::trySend() {
    const QString t = m_edit->toPlainText().trimmed();
    if (t.isEmpty() || m_generating || !m_canSend) return;
    m_edit->clear();
    emit sendRequested(t);
}

void Composer::setGenerating(bool generating) {
    m_generating = generating;
    m_send->setVisible(!generating);
    m_stop->setVisible(generating);
    m_send->setEnabled(m_canSend);
}

void Composer::setCanSend(bool can, const QString &whyNot) {
    m_canSend = can;
    m_send->setEnabled(can);
    m_hint->setText(whyNot);
    m_hint->setVisible(!can && !whyNot.isEmpty());
}

QString Composer::contextText() const { return m_context->text(); }
QString Composer::tokenCountText() const { return m_tokens->text(); }

void Composer::setContextInfo(const QString &text, const QString &toolTip) {
    m_context->setText(text);
    m_context->setToolTip(toolTip);
    m_context->setVisible(!text.isEmpty());
}

void Composer::setTokenCount(const QString &text, const QString &toolTip, bool over) {
    m_tokens->setText(text);
    m_tokens->setToolTip(toolTip);
    m_tokens->setStyleSheet(over ? QStringLiteral("color: #b3261e; font-size: small; font-weight: bold")
                                 : QStringLiteral("color: palette(mid); font-size: small"));
    m_tokens->setVisible(!text.isEmpty());
}

void Composer::applyPrefix(const QString &oldPrefix, const QString &newPrefix, bool takeFocus) {
    QString t = m_edit->toPlainText();
    if (!oldPrefix.isEmpty() && t.startsWith(oldPrefix)) t.remove(0, oldPrefix.size());
    if (!newPrefix.isEmpty() && !t.startsWith(newPrefix)) t.prepend(newPrefix);
    m_edit->setPlainText(t);
    QTextCursor c = m_edit->textCursor();
    c.movePosition(QTextCursor::End);
    m_edit->setTextCursor(c);
    if (takeFocus) m_edit->setFocus();
}

} // namespace es
