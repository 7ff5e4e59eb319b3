// MessageWidget (see message_widget.h). The body is a read-only QTextBrowser sized to its
// document so the pane scrolls, not each message; Markdown via QTextDocument::setMarkdown
// (CommonMark + GitHub tables and code fences).
#include "message_widget.h"

#include "context_fit.h"
#include "markdown_code_blocks.h"

#include <QAbstractTextDocumentLayout>
#include <cmath>
#include <QApplication>
#include <QClipboard>
#include <QContextMenuEvent>
#include <QLocale>
#include <QMenu>
#include <QDesktopServices>
#include <QHBoxLayout>
#include <QKeyEvent>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QTextBrowser>
#include <QToolButton>
#include <QTextBlock>
#include <QTextCursor>
#include <QTimer>
#include <QVBoxLayout>

namespace es {

namespace {

// A QTextBrowser whose height follows its document (laid out at the viewport's width).
class AutoHeightBrowser : public QTextBrowser {
public:
    explicit AutoHeightBrowser(QWidget *parent) : QTextBrowser(parent) {
        setVerticalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
        setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
        setFrameShape(QFrame::NoFrame);
        setOpenLinks(false); // MessageWidget routes clicks: es-copy: links copy a code block
        setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Fixed);
        connect(document()->documentLayout(), &QAbstractTextDocumentLayout::documentSizeChanged, this,
                [this] { fitHeight(); });
    }
    void fitHeight() {
        const int h = int(std::ceil(document()->size().height())) + frameWidth() * 2 + 2;
        if (h != height()) setFixedHeight(std::max(h, 20));
    }

protected:
    void resizeEvent(QResizeEvent *e) override {
        QTextBrowser::resizeEvent(e);
        if (document()->textWidth() != viewport()->width()) {
            document()->setTextWidth(viewport()->width());
            fitHeight();
        }
    }
};

QToolButton *small_button(const QString &text, const QString &tip, QWidget *parent) {
    auto *b = new QToolButton(parent);
    b->setText(text);
    b->setToolTip(tip);
    b->setAutoRaise(true);
    return b;
}

} // namespace

MessageWidget::MessageWidget(const Message &message, QWidget *parent)
    : QFrame(parent), m_message(message), m_text(message.content) {
    setObjectName(message.role == MessageRole::User ? "userMessage" : "assistantMessage");
    setFrameShape(QFrame::StyledPanel);
    auto *outer = new QVBoxLayout(this);
    outer->setContentsMargins(10, 6, 10, 6);
    outer->setSpacing(2);

    auto *header = new QHBoxLayout;
    m_who = new QLabel(this);
    QFont bold; // only the weight: the size follows the message's (the chat font size)
    bold.setBold(true);
    m_who->setFont(bold);
    m_status = new QLabel(this);
    m_status->setStyleSheet("color: palette(mid)");
    m_who->setCursor(Qt::PointingHandCursor);
    header->addWidget(m_who);
    header->addWidget(m_status);
    header->addStretch(1);
    m_prev = small_button(QStringLiteral("‹"), tr("Previous version"), this);
    m_branch = new QLabel(this);
    m_next = small_button(QStringLiteral("›"), tr("Next version"), this);
    m_copy = small_button(tr("Copy"), tr("Copy this message as Markdown"), this);
    m_edit = small_button(tr("Edit"), tr("Edit this message and send it again (the original stays as a branch)"), this);
    m_regen = small_button(tr("Regenerate"), tr("Generate another reply (the current one stays as a branch)"), this);
    m_continue = small_button(tr("Continue"), tr("This reply stopped at its token limit: generate more of it"), this);
    m_more = small_button(QStringLiteral("⋯"), tr("More actions"), this);
    m_more->setPopupMode(QToolButton::InstantPopup);
    auto *menu = new QMenu(m_more);
    m_delete = menu->addAction(tr("Delete message…"));
    m_delete->setToolTip(tr("Delete this message and every message below it in this branch"));
    m_more->setMenu(menu);
    for (QWidget *w : {static_cast<QWidget *>(m_prev), static_cast<QWidget *>(m_branch), static_cast<QWidget *>(m_next),
                       static_cast<QWidget *>(m_copy), static_cast<QWidget *>(m_edit), static_cast<QWidget *>(m_regen),
                       static_cast<QWidget *>(m_continue), static_cast<QWidget *>(m_more)})
        header->addWidget(w);
    outer->addLayout(header);

    // Body and editor: only one is visible (a QStackedWidget would reserve the editor's height).
    m_body = new AutoHeightBrowser(this);
    outer->addWidget(m_body);
    auto *editPage = new QWidget(this);
    m_editPage = editPage;
    auto *editLayout = new QVBoxLayout(editPage);
    editLayout->setContentsMargins(0, 0, 0, 0);
    m_editor = new QPlainTextEdit(editPage);
    auto *editButtons = new QHBoxLayout;
    auto *send = new QPushButton(tr("Save && send"), editPage);
    auto *cancel = new QPushButton(tr("Cancel"), editPage);
    editButtons->addStretch(1);
    editButtons->addWidget(cancel);
    editButtons->addWidget(send);
    editLayout->addWidget(m_editor);
    editLayout->addLayout(editButtons);
    editPage->setVisible(false);
    outer->addWidget(editPage);
    // Under a reply: what its prompt left out, then its measurements, both quiet.
    m_contextNote = new QLabel(this);
    m_contextNote->setObjectName("contextNote");
    m_contextNote->setWordWrap(true);
    m_contextNote->setStyleSheet("color: #9a6700; font-size: small");
    m_contextNote->setVisible(false);
    outer->addWidget(m_contextNote);
    m_stats = new QLabel(this);
    m_stats->setObjectName("messageStats");
    m_stats->setStyleSheet("color: palette(mid); font-size: small");
    m_stats->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_stats->setVisible(false);
    outer->addWidget(m_stats);

    connect(m_copy, &QToolButton::clicked, this, [this] {
        QApplication::clipboard()->setText(m_text);
        showCopied(tr("Copied"));
        emit copyRequested(m_text);
    });
    connect(m_body, &QTextBrowser::anchorClicked, this, [this](const QUrl &url) {
        if (url.scheme() == QLatin1String(kCopyCodeScheme)) {
            bool ok = false;
            const int index = url.path().toInt(&ok);
            if (ok && index >= 0 && index < m_codeBlocks.size()) {
                QApplication::clipboard()->setText(m_codeBlocks[index]);
                showCopied(tr("Code copied"));
                emit copyRequested(m_codeBlocks[index]);
            }
            return;
        }
        QDesktopServices::openUrl(url);
    });
    connect(m_edit, &QToolButton::clicked, this, &MessageWidget::startEditing);
    connect(cancel, &QPushButton::clicked, this, [this] { showEditor(false); });
    connect(send, &QPushButton::clicked, this, [this] {
        const QString t = m_editor->toPlainText().trimmed();
        if (t.isEmpty()) return;
        showEditor(false);
        emit editSubmitted(m_message.id, t);
    });
    connect(m_regen, &QToolButton::clicked, this, [this] { emit regenerateRequested(m_message.id); });
    connect(m_continue, &QToolButton::clicked, this, [this] { emit continueRequested(m_message.id); });
    connect(m_delete, &QAction::triggered, this, [this] { emit deleteRequested(m_message.id); });
    connect(m_prev, &QToolButton::clicked, this, [this] {
        if (m_siblings.index > 0) emit siblingRequested(m_siblings.ids[m_siblings.index - 1]);
    });
    connect(m_next, &QToolButton::clicked, this, [this] {
        if (m_siblings.index + 1 < m_siblings.ids.size()) emit siblingRequested(m_siblings.ids[m_siblings.index + 1]);
    });

    m_edit->setVisible(message.role == MessageRole::User);
    m_regen->setVisible(false);
    m_continue->setVisible(false);
    setSiblings({});
    m_streaming = message.state == MessageState::Partial;
    render();
}

void MessageWidget::mousePressEvent(QMouseEvent *event) {
    // The body and the buttons take their own clicks; what reaches here is the header and margins.
    if (event->button() == Qt::LeftButton) emit selected(m_message.id);
    QFrame::mousePressEvent(event);
}

void MessageWidget::changeEvent(QEvent *event) {
    QFrame::changeEvent(event);
    // The Markdown's link colour, the code blocks' shade and the code's size are fixed when it is
    // rendered: a new palette (theme) or font (chat font size) renders it again.
    const bool restyled = event->type() == QEvent::PaletteChange || event->type() == QEvent::FontChange;
    if (restyled && m_message.role != MessageRole::User) render();
}

void MessageWidget::contextMenuEvent(QContextMenuEvent *event) {
    // The body has its own menu (copy, select all); the header and margins offer the message's.
    QMenu menu(this);
    menu.addAction(m_delete);
    menu.exec(event->globalPos());
}

QString MessageWidget::statusText() const { return m_status->text(); }
QString MessageWidget::statsText() const { return m_stats->isVisibleTo(this) ? m_stats->text() : QString(); }
QString MessageWidget::contextNoteText() const {
    return m_contextNote->isVisibleTo(this) ? m_contextNote->text() : QString();
}
QString MessageWidget::headerToolTip() const { return m_who->toolTip(); }

void MessageWidget::setMetrics(const std::optional<MessageMetrics> &metrics) {
    m_metrics = metrics;
    updateStats();
}

// The stats line (decode tok/s, output tokens, TTFT, stop reason) and the header's times.
void MessageWidget::updateStats() {
    const QLocale locale;
    const QString sent = m_message.createdAt.toLocalTime().toString(QStringLiteral("yyyy-MM-dd HH:mm:ss"));
    QString tip = (m_message.role == MessageRole::User ? tr("Sent %1") : tr("Started %1")).arg(sent);
    const bool reply = m_message.role == MessageRole::Assistant && !m_streaming;
    if (reply && m_metrics && !m_metrics->tokenTimesMs.isEmpty()) {
        const double ms = m_metrics->tokenTimesMs.constLast();
        tip += QLatin1Char('\n') + tr("Finished %1 (%2 s)")
                                        .arg(m_message.createdAt.addMSecs(qint64(ms)).toLocalTime().toString(
                                                 QStringLiteral("yyyy-MM-dd HH:mm:ss")),
                                             locale.toString(ms / 1000.0, 'f', 1));
    }
    tip += QLatin1Char('\n') + tr("Click to show this message's profile in the profiler");
    m_who->setToolTip(tip);

    const QString note = reply ? ContextFitter::droppedNote(m_message.droppedMessages) : QString();
    m_contextNote->setText(note);
    m_contextNote->setVisible(!note.isEmpty());

    QStringList parts;
    if (reply && m_metrics) {
        const MessageMetrics &mm = *m_metrics;
        if (mm.decodeTokS) parts << tr("%1 tok/s").arg(locale.toString(*mm.decodeTokS, 'f', 1));
        if (mm.nOutputTokens) parts << tr("%n token(s)", nullptr, *mm.nOutputTokens);
        if (mm.nPromptTokens) parts << tr("prompt %1").arg(locale.toString(*mm.nPromptTokens));
        if (mm.ttftMs) parts << tr("TTFT %1 ms").arg(locale.toString(*mm.ttftMs, 'f', 0));
        const QString stop = mm.stopReason.isEmpty() ? m_message.finishReason : mm.stopReason;
        if (!stop.isEmpty()) parts << tr("stop: %1").arg(stop);
    }
    m_stats->setText(parts.join(QStringLiteral(" · ")));
    m_stats->setVisible(!parts.isEmpty());
}

void MessageWidget::setSelected(bool selected) {
    if (m_selected == selected) return;
    m_selected = selected;
    setStyleSheet(selected ? QStringLiteral("es--MessageWidget { border: 2px solid palette(highlight); }") : QString());
}

QString MessageWidget::statusLine() const {
    // A reply produced under an expert intervention always says so.
    const ExpertIntervention &iv = m_message.generation.sampling.intervention;
    if (m_message.role == MessageRole::Assistant && !iv.isEmpty()) {
        const QString rest = plainStatusLine();
        return tr("expert intervention: %1").arg(iv.summary()) + (rest.isEmpty() ? QString() : QStringLiteral(" · ") + rest);
    }
    return plainStatusLine();
}

QString MessageWidget::plainStatusLine() const {
    if (m_streaming) return tr("generating…");
    if (m_message.state == MessageState::Failed)
        return m_message.finishReason == "interrupted" ? tr("interrupted (the app closed mid-reply)")
                                                       : tr("failed: %1").arg(m_message.finishReason);
    if (m_message.finishReason == "cancelled") return tr("stopped");
    if (m_message.finishReason == "length") return tr("cut at the token limit");
    return {};
}

void MessageWidget::render() {
    m_who->setText(m_message.role == MessageRole::User        ? tr("You")
                   : m_message.role == MessageRole::Assistant ? tr("Assistant")
                                                              : tr("System"));
    m_status->setText(statusLine());
    if (m_message.role == MessageRole::User) {
        m_body->setPlainText(m_text);
        m_codeBlocks.clear();
    } else {
        const CodeBlocks blocks = find_code_blocks(m_text, [](int, const QString &language) {
            // Words only: a symbol such as ⧉ is an empty box in fonts that lack it.
            return language.isEmpty() ? tr("Copy code") : tr("Copy code · %1").arg(language);
        });
        m_codeBlocks = blocks.code;
        m_body->setMarkdown(blocks.annotated);
        shadeCodeBlocks();
    }
    static_cast<AutoHeightBrowser *>(m_body)->fitHeight();
    m_copy->setEnabled(!m_text.isEmpty());
    updateStats();
    applyHighlight();
}

// Code blocks on a background of their own (the Markdown importer marks them with BlockCodeFence),
// so code stands apart from prose in every style: a shade off the base colour, lighter on a dark
// base, darker on a light one. Code (blocks and inline) in the message's size: the importer gives
// it the system's fixed font at that font's own size, which would not follow the chat font size.
void MessageWidget::shadeCodeBlocks() {
    const QColor alternate = palette().color(QPalette::AlternateBase);
    const QColor shade = palette().color(QPalette::Base).lightness() < 128 ? alternate.lighter(118) : alternate.darker(104);
    QTextCharFormat size;
    size.setFontPointSize(font().pointSizeF());
    QTextCursor cursor(m_body->document());
    for (QTextBlock b = m_body->document()->begin(); b.isValid(); b = b.next()) {
        const bool codeBlock = b.blockFormat().hasProperty(QTextFormat::BlockCodeFence);
        for (auto it = b.begin(); !it.atEnd(); ++it) {
            const QTextFragment fragment = it.fragment();
            if (!codeBlock && !fragment.charFormat().fontFixedPitch()) continue; // inline code is fixed-pitch
            cursor.setPosition(fragment.position());
            cursor.setPosition(fragment.position() + fragment.length(), QTextCursor::KeepAnchor);
            cursor.mergeCharFormat(size);
        }
        if (!codeBlock) continue;
        QTextBlockFormat f;
        f.setBackground(shade);
        cursor.setPosition(b.position());
        cursor.mergeBlockFormat(f);
    }
}

// "Copied" in the header for a moment: the clipboard itself shows nothing.
void MessageWidget::showCopied(const QString &what) {
    m_status->setText(what);
    QTimer::singleShot(1500, this, [this] { m_status->setText(statusLine()); });
}

void MessageWidget::setStreamingText(const QString &text) {
    m_text = text;
    m_streaming = true;
    render();
}

void MessageWidget::setFinished(const Message &message) {
    m_message = message;
    m_text = message.content;
    m_streaming = false;
    render();
}

void MessageWidget::setSiblings(const SiblingInfo &siblings) {
    m_siblings = siblings;
    const bool many = siblings.ids.size() > 1;
    m_prev->setVisible(many);
    m_next->setVisible(many);
    m_branch->setVisible(many);
    if (many) {
        m_branch->setText(QStringLiteral("%1/%2").arg(siblings.index + 1).arg(siblings.ids.size()));
        m_prev->setEnabled(siblings.index > 0);
        m_next->setEnabled(siblings.index + 1 < siblings.ids.size());
    }
}

void MessageWidget::setRegenerateVisible(bool visible) { m_regen->setVisible(visible && m_message.role == MessageRole::Assistant); }

void MessageWidget::setContinueVisible(bool visible) {
    m_continue->setVisible(visible && m_message.role == MessageRole::Assistant);
}

void MessageWidget::setActionsEnabled(bool enabled) {
    // Delete stays enabled: the pane stops a reply in progress first, and says so.
    for (QToolButton *b : {m_edit, m_regen, m_continue, m_prev, m_next}) b->setEnabled(enabled);
    if (enabled) setSiblings(m_siblings);
}

void MessageWidget::startEditing() {
    m_editor->setPlainText(m_text);
    showEditor(true);
    m_editor->setFocus();
}

void MessageWidget::showEditor(bool editing) {
    m_body->setVisible(!editing);
    m_editPage->setVisible(editing);
}

void MessageWidget::highlightTokens(const QList<QPair<int, int>> &byteRanges) {
    m_highlightRanges = byteRanges;
    applyHighlight();
}

// The body shows the rendered Markdown, not the text: each character of the text is found in the
// rendered text a little ahead of the previous one (markup characters are not, and stay where
// they are), and a token's range is marked where its characters landed.
void MessageWidget::applyHighlight() {
    QList<QTextEdit::ExtraSelection> marks;
    if (!m_highlightRanges.isEmpty()) {
        const QString shown = m_body->document()->toPlainText();
        QList<int> byteToChar; // UTF-8 byte offset → index into m_text
        byteToChar.reserve(m_text.size() * 2 + 1);
        for (qsizetype i = 0; i < m_text.size(); ++i) {
            const int bytes = m_text[i].isHighSurrogate() ? 4 : m_text[i].isLowSurrogate() ? 0
                              : m_text[i].unicode() < 0x80   ? 1
                              : m_text[i].unicode() < 0x800  ? 2
                                                             : 3;
            for (int b = 0; b < bytes; ++b) byteToChar.append(int(i));
        }
        byteToChar.append(int(m_text.size()));
        constexpr int kLookAhead = 48;
        QList<int> place(m_text.size() + 1);
        int at = 0;
        for (qsizetype i = 0; i < m_text.size(); ++i) {
            place[i] = at;
            for (int d = 0; d < kLookAhead && at + d < shown.size(); ++d)
                if (shown[at + d] == m_text[i] || (m_text[i] == u'\n' && shown[at + d] == QChar::ParagraphSeparator)) {
                    place[i] = at + d;
                    at += d + 1;
                    break;
                }
        }
        place[m_text.size()] = at;
        // Two shades in turn, so neighbouring tokens stay told apart.
        QTextCharFormat marks2[2];
        marks2[0].setBackground(palette().color(QPalette::Highlight).lighter(150));
        marks2[1].setBackground(palette().color(QPalette::Highlight).lighter(125));
        for (QTextCharFormat &f : marks2) f.setForeground(palette().color(QPalette::Text));
        for (const auto &[from, to] : std::as_const(m_highlightRanges)) {
            if (from < 0 || to <= from || to >= byteToChar.size()) continue;
            const int a = place[byteToChar[from]], b = place[byteToChar[to - 1]] + 1;
            if (b <= a) continue;
            QTextEdit::ExtraSelection s;
            s.cursor = QTextCursor(m_body->document());
            s.cursor.setPosition(std::min<int>(a, int(shown.size())));
            s.cursor.setPosition(std::min<int>(b, int(shown.size())), QTextCursor::KeepAnchor);
            s.format = marks2[marks.size() % 2];
            marks << s;
        }
    }
    m_highlightedTokens = int(marks.size());
    m_body->setExtraSelections(marks);
}

QString MessageWidget::highlightedText() const {
    QStringList parts;
    for (const QTextEdit::ExtraSelection &s : m_body->extraSelections()) parts << s.cursor.selectedText();
    return parts.join(QLatin1Char('\n'));
}

} // namespace es
