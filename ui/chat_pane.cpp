// ChatPane (see chat_pane.h).
#include "chat_pane.h"

#include "chat_store.h"
#include "composer.h"
#include "engine_session.h"
#include "expert_lab_dialog.h"
#include "message_widget.h"
#include "preset_bar.h"
#include "profile_recorder.h"
#include "reply_writer.h"
#include "sampling_controls.h"

#include <QDialog>
#include <QDialogButtonBox>
#include <QEvent>
#include <QHBoxLayout>
#include <QToolButton>
#include <QLabel>
#include <QRandomGenerator>
#include <QScrollArea>
#include <QScrollBar>
#include <QTimer>
#include <QVBoxLayout>

namespace es {

ChatPane::ChatPane(ChatStore *store, EngineSession *session, QWidget *parent)
    : QWidget(parent), m_store(store), m_session(session) {
    auto *layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    m_title = new QLabel(this);
    m_title->setTextFormat(Qt::PlainText); // a title is the user's text, never markup
    m_title->setStyleSheet("font-weight: bold; padding: 2px");
    m_badge = new QLabel(this);
    m_badge->setStyleSheet("color: palette(mid); padding: 2px");
    m_badge->setToolTip(tr("Where this pane's replies are computed: backend and weight precision"));
    auto *titleRow = new QHBoxLayout;
    titleRow->addWidget(m_title, 1);
    titleRow->addWidget(m_badge);
    layout->addLayout(titleRow);
    m_interventionBanner = new QLabel(this);
    m_interventionBanner->setWordWrap(true);
    m_interventionBanner->setTextFormat(Qt::RichText);
    m_interventionBanner->setStyleSheet(
        QStringLiteral("background: palette(alternate-base); border-left: 3px solid #c77c02; padding: 4px"));
    m_interventionBanner->hide();
    connect(m_interventionBanner, &QLabel::linkActivated, this, [this](const QString &link) {
        if (link == QLatin1String("edit")) openExpertLab();
        else if (link == QLatin1String("clear")) setConversationIntervention({});
    });
    layout->addWidget(m_interventionBanner);
    m_scroll = new QScrollArea(this);
    m_scroll->setWidgetResizable(true);
    m_scroll->setFrameShape(QFrame::NoFrame);
    m_list = new QWidget(m_scroll);
    m_listLayout = new QVBoxLayout(m_list);
    m_listLayout->setContentsMargins(2, 2, 2, 2);
    m_listLayout->addStretch(1);
    m_scroll->setWidget(m_list);
    layout->addWidget(m_scroll, 1);
    m_composer = new Composer(this);
    layout->addWidget(m_composer);
    m_composer->editor()->installEventFilter(this);

    // Mode-prefix presets above the text box, and this conversation's sampling settings.
    m_presetBar = new PresetBar(m_composer);
    m_presetBar->setShortcutScope(this);
    m_presetBar->setPresets(m_store->presets());
    m_composer->topRow()->addWidget(m_presetBar, 1);
    auto *settings = new QToolButton(m_composer);
    settings->setText(tr("Sampling…"));
    settings->setToolTip(tr("Temperature, top-p, seed and the other sampling settings of this conversation"));
    m_composer->topRow()->addWidget(settings);
    connect(settings, &QToolButton::clicked, this, &ChatPane::editConversationSettings);
    connect(m_presetBar, &PresetBar::presetApplied, this, [this](const Preset &p) { setActivePreset(p); });
    connect(m_presetBar, &PresetBar::presetCleared, this, [this] { setActivePreset(std::nullopt); });
    connect(m_presetBar, &PresetBar::managePresetsRequested, this, &ChatPane::managePresetsRequested);
    connect(m_store, &ChatStore::presetsChanged, this, [this] {
        m_presetBar->setPresets(m_store->presets());
        if (m_preset) { // keep the active preset's latest text, or drop it if deleted
            std::optional<Preset> fresh = m_store->preset(m_preset->id);
            if (fresh) m_preset = fresh;
            else setActivePreset(std::nullopt);
        }
    });

    connect(m_composer, &Composer::sendRequested, this, &ChatPane::send);
    connect(m_composer, &Composer::stopRequested, this, &ChatPane::stop);
    connect(m_session, &EngineSession::tokensGenerated, this, &ChatPane::onTokens);
    connect(m_session, &EngineSession::replyFinished, this, &ChatPane::onFinished);
    connect(m_session, &EngineSession::replyFailed, this, &ChatPane::onFailed);
    connect(m_session, &EngineSession::modelLoaded, this, &ChatPane::updateComposerState);
    connect(m_session, &EngineSession::modelLoadStarted, this, &ChatPane::updateComposerState);
    connect(m_session, &EngineSession::modelLoadFailed, this, &ChatPane::updateComposerState);
    connect(m_session, &EngineSession::remoteDisconnected, this, &ChatPane::updateComposerState);
    connect(m_store, &ChatStore::messagesChanged, this, [this](qint64 id) {
        if (m_conversation == id && !isGenerating()) reload();
    });
    ProfileRecorder::forSession(m_session); // follows every reply, so a finished one has a profile to store
    updateComposerState();
    reload();
}

ChatPane::~ChatPane() {
    // Closing mid-reply: keep what was produced, ended as stopped.
    if (!m_request) return;
    if (m_session) {
        disconnect(m_session, nullptr, this, nullptr);
        m_session->cancel(m_request);
    }
    if (m_reply) m_reply->cancel();
}

bool ChatPane::eventFilter(QObject *watched, QEvent *event) {
    if (event->type() == QEvent::FocusIn) emit activated();
    return QWidget::eventFilter(watched, event);
}

QList<MessageWidget *> ChatPane::messageWidgets() const { return m_list->findChildren<MessageWidget *>(); }

void ChatPane::setConversation(std::optional<qint64> id) {
    if (m_conversation == id) return;
    if (isGenerating()) {
        stop();
        emit replyInterrupted(tr("The reply in “%1” was stopped: switching conversations stops a reply in progress. "
                                 "What it had written is kept.")
                                  .arg(m_title->text()));
    }
    m_conversation = id;
    // The conversation's preset becomes the active one (its prefix is not re-inserted).
    std::optional<Preset> preset;
    if (id)
        if (auto c = m_store->conversation(*id); c && c->settings.presetId) preset = m_store->preset(*c->settings.presetId);
    const QString oldPrefix = m_preset ? m_preset->prefix : QString();
    m_preset = preset;
    m_presetBar->setActivePreset(preset ? std::optional<qint64>(preset->id) : std::nullopt);
    m_composer->applyPrefix(oldPrefix, QString(), /*takeFocus=*/false);
    reload();
}

void ChatPane::conversationAboutToBeDeleted(qint64 id) {
    if (m_conversation != id || !isGenerating()) return;
    stop();
    emit replyInterrupted(tr("The reply in “%1” was stopped because its conversation was deleted.").arg(m_title->text()));
}

void ChatPane::setActivePreset(const std::optional<Preset> &preset) {
    const QString oldPrefix = m_preset ? m_preset->prefix : QString();
    m_preset = preset;
    m_presetBar->setActivePreset(preset ? std::optional<qint64>(preset->id) : std::nullopt);
    m_composer->applyPrefix(oldPrefix, preset ? preset->prefix : QString());
    // Remember the choice with the conversation.
    if (m_conversation)
        if (auto c = m_store->conversation(*m_conversation)) {
            ConversationSettings st = c->settings;
            st.presetId = preset ? std::optional<qint64>(preset->id) : std::nullopt;
            m_store->setConversationSettings(*m_conversation, st);
        }
    updateInterventionBanner();
}

void ChatPane::editConversationSettings() {
    ConversationSettings current = m_pendingSettings;
    if (m_conversation)
        if (auto c = m_store->conversation(*m_conversation)) current = c->settings;
    QDialog dialog(this);
    dialog.setWindowTitle(tr("Sampling settings of this conversation"));
    auto *layout = new QVBoxLayout(&dialog);
    auto *controls = new SamplingControls(&dialog);
    controls->setModelDefaults(m_session->modelInfo().defaults);
    controls->setParams(current.sampling);
    layout->addWidget(controls);
    auto *buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, &dialog);
    layout->addWidget(buttons);
    connect(buttons, &QDialogButtonBox::accepted, &dialog, &QDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, &dialog, &QDialog::reject);
    if (dialog.exec() != QDialog::Accepted) return;
    current.sampling = controls->params();
    if (m_conversation) {
        if (!m_store->setConversationSettings(*m_conversation, current)) emit errorOccurred(m_store->lastError());
    } else {
        m_pendingSettings = current;
    }
    updateInterventionBanner();
}

bool ChatPane::setConversationIntervention(const ExpertIntervention &iv) {
    ConversationSettings current = m_pendingSettings;
    if (m_conversation)
        if (auto c = m_store->conversation(*m_conversation)) current = c->settings;
    current.sampling.intervention = iv;
    if (m_conversation) {
        if (!m_store->setConversationSettings(*m_conversation, current)) {
            emit errorOccurred(m_store->lastError());
            return false;
        }
    } else {
        m_pendingSettings = current;
    }
    updateInterventionBanner();
    return true;
}

void ChatPane::openExpertLab(const std::optional<ExpertIntervention> &prefill) {
    const SessionModelInfo info = m_session->modelInfo();
    if (m_session->isRemote())
        return emit errorOccurred(
            tr("The expert lab needs the built-in engine; a remote server does not take expert interventions."));
    if (!m_session->isModelLoaded())
        return emit errorOccurred(tr("The expert lab needs a loaded model — File ▸ Open model… (Ctrl+O)."));
    if (!info.isMoe || info.nExperts <= 0)
        return emit errorOccurred(
            tr("The expert lab needs a mixture-of-experts model; %1 has no routed experts.").arg(info.name));
    ExpertLabDialog dialog(info, prefill.value_or(effectiveSampling().intervention),
                           [session = m_session](const ExpertIntervention &iv) {
                               return session ? session->checkIntervention(iv) : QString();
                           },
                           this);
    if (dialog.exec() != QDialog::Accepted) return;
    setConversationIntervention(dialog.intervention());
}

void ChatPane::updateInterventionBanner() {
    const ExpertIntervention iv = effectiveSampling().intervention;
    m_interventionBanner->setVisible(!iv.isEmpty());
    if (iv.isEmpty()) return;
    m_interventionBanner->setText(tr("<b>Expert intervention</b> — the next replies are routed under: %1. "
                                     "<a href=\"edit\">Edit…</a> · <a href=\"clear\">Clear</a>")
                                      .arg(iv.summary().toHtmlEscaped()));
}

QString ChatPane::engineBadge() const { return m_badge->text(); }
QString ChatPane::titleText() const { return m_title->text(); }

EngineSession *ChatPane::session() const { return m_session; }

void ChatPane::updateComposerState() {
    const SessionModelInfo info = m_session->modelInfo();
    m_badge->setText(!m_session->isModelLoaded() ? QString() : m_session->isRemote() ? tr("remote") : info.precision);
    if (!m_session->isModelLoaded())
        m_composer->setCanSend(false, m_session->isLoading() ? tr("Loading the model…")
                                                             : tr("No model is loaded — File ▸ Open model… (Ctrl+O)"));
    else m_composer->setCanSend(true);
    m_composer->setGenerating(isGenerating());
}

void ChatPane::reload() {
    // Rebuild the message list from the store's active branch.
    // Detach first (a widget may be the sender of the signal that led here), delete later.
    for (MessageWidget *w : messageWidgets()) {
        w->hide();
        w->setParent(nullptr);
        w->deleteLater();
    }
    m_replyWidget = nullptr;
    std::optional<Conversation> conv = m_conversation ? m_store->conversation(*m_conversation) : std::nullopt;
    if (m_conversation && !conv) m_conversation.reset();
    m_title->setText(conv ? (conv->title.isEmpty() ? tr("Untitled") : conv->title) : tr("New conversation"));
    updateInterventionBanner();
    if (!conv) return;
    const QList<Message> path = m_store->activePath(*m_conversation);
    qint64 lastAssistant = 0;
    for (const Message &m : path)
        if (m.role == MessageRole::Assistant) lastAssistant = m.id;
    for (const Message &m : path) {
        if (m.role == MessageRole::System) continue;
        auto *w = new MessageWidget(m, m_list);
        w->setSiblings(m_store->siblings(m.id));
        w->setRegenerateVisible(m.id == lastAssistant);
        w->setActionsEnabled(!isGenerating());
        connect(w, &MessageWidget::editSubmitted, this, &ChatPane::editAndResend);
        connect(w, &MessageWidget::regenerateRequested, this, &ChatPane::regenerate);
        connect(w, &MessageWidget::siblingRequested, this, &ChatPane::switchBranch);
        connect(w, &MessageWidget::selected, this, [this](qint64 id) {
            m_selectedMessage = id;
            for (MessageWidget *other : messageWidgets()) other->setSelected(other->messageId() == id);
            emit messageSelected(id);
        });
        w->setSelected(m.id == m_selectedMessage);
        m_listLayout->insertWidget(m_listLayout->count() - 1, w);
        if (m_reply && m.id == m_reply->replyId()) m_replyWidget = w;
    }
    scrollToBottom();
}

void ChatPane::scrollToBottom() {
    QTimer::singleShot(0, this, [this] { m_scroll->verticalScrollBar()->setValue(m_scroll->verticalScrollBar()->maximum()); });
}

SamplingParams ChatPane::effectiveSampling() const {
    // Model defaults < the preset's choices < the conversation's own settings.
    SamplingParams s = m_preset ? m_preset->sampling : SamplingParams{};
    std::optional<ConversationSettings> cs;
    if (m_conversation) {
        if (auto c = m_store->conversation(*m_conversation)) cs = c->settings;
    } else {
        cs = m_pendingSettings;
    }
    if (cs) {
        {
            const SamplingParams &o = cs->sampling;
            if (o.temperature) s.temperature = o.temperature;
            if (o.topP) s.topP = o.topP;
            if (o.topK) s.topK = o.topK;
            if (o.minP) s.minP = o.minP;
            if (o.repetitionPenalty) s.repetitionPenalty = o.repetitionPenalty;
            if (o.presencePenalty) s.presencePenalty = o.presencePenalty;
            if (o.frequencyPenalty) s.frequencyPenalty = o.frequencyPenalty;
            if (o.maxTokens) s.maxTokens = o.maxTokens;
            if (o.seed) s.seed = o.seed;
            if (!o.stopStrings.isEmpty()) s.stopStrings = o.stopStrings;
            if (!o.intervention.isEmpty()) s.intervention = o.intervention;
        }
    }
    return s;
}

GenerationInfo ChatPane::generationInfo(quint64 seed) const {
    GenerationInfo g;
    const SessionModelInfo info = m_session->modelInfo();
    g.modelName = info.name;
    g.modelHash = info.modelHash;
    g.precision = info.precision;
    g.sampling = effectiveSampling();
    g.seed = seed;
    return g;
}

void ChatPane::send(const QString &text) {
    emit activated();
    if (isGenerating() || !m_session->isModelLoaded() || text.trimmed().isEmpty()) return;
    // Seed and sampling come from the conversation's settings, or for a new one the pending ones.
    const quint64 seed = effectiveSampling().seed.value_or(QRandomGenerator::global()->generate64() >> 11);
    std::optional<TurnIds> turn;
    if (!m_conversation) {
        NewConversation created;
        created.title = text.simplified();
        if (created.title.size() > 48) created.title = created.title.left(47) + QStringLiteral("…");
        created.settings = m_pendingSettings;
        if (m_preset) created.settings.presetId = m_preset->id;
        turn = m_store->beginTurnInNewConversation(created, text, generationInfo(seed));
        if (!turn) return emit errorOccurred(tr("Could not save the message: %1").arg(m_store->lastError()));
        m_pendingSettings = {};
        m_conversation = turn->conversationId;
        emit conversationCreated(turn->conversationId);
    } else {
        const auto conv = m_store->conversation(*m_conversation);
        turn = m_store->beginTurn(*m_conversation, conv ? conv->currentLeafId : std::nullopt, text,
                                  generationInfo(seed));
        if (!turn) return emit errorOccurred(tr("Could not save the message: %1").arg(m_store->lastError()));
    }
    startReply(turn->replyId);
}

void ChatPane::regenerate(qint64 assistantMessageId) {
    if (isGenerating() || !m_session->isModelLoaded()) return;
    const quint64 seed = QRandomGenerator::global()->generate64() >> 11; // a new draw, reproducible
    SamplingParams s = effectiveSampling();
    const quint64 use = s.seed ? *s.seed : seed;
    auto replyId = m_store->regenerate(assistantMessageId, generationInfo(use));
    if (!replyId) return emit errorOccurred(tr("Could not regenerate: %1").arg(m_store->lastError()));
    startReply(*replyId);
}

void ChatPane::editAndResend(qint64 userMessageId, const QString &text) {
    if (isGenerating() || !m_session->isModelLoaded()) return;
    const quint64 seed = effectiveSampling().seed.value_or(QRandomGenerator::global()->generate64() >> 11);
    const std::optional<TurnIds> turn = m_store->beginEditedTurn(userMessageId, text, generationInfo(seed));
    if (!turn) return emit errorOccurred(tr("Could not save the edit: %1").arg(m_store->lastError()));
    startReply(turn->replyId);
}

void ChatPane::switchBranch(qint64 messageId) {
    if (isGenerating()) return;
    if (!m_store->selectBranch(messageId)) emit errorOccurred(m_store->lastError());
    reload();
}

void ChatPane::startReply(qint64 replyId) {
    // The prompt: the active path up to (not including) the new partial reply.
    ChatRequest req;
    const QList<Message> path = m_store->pathTo(replyId);
    for (const Message &m : path) {
        if (m.id == replyId) break;
        if (m.role == MessageRole::System) continue;
        req.messages.push_back({m.role, m.content});
    }
    if (m_preset) req.systemPrompt = m_preset->systemPrompt;
    const auto reply = m_store->message(replyId);
    req.sampling = effectiveSampling();
    if (reply && reply->generation.seed) req.sampling.seed = reply->generation.seed;
    m_reply = std::make_unique<ReplyWriter>(m_store, replyId);
    connect(m_reply.get(), &ReplyWriter::checkpointFailed, this, [this](const QString &error) {
        emit errorOccurred(tr("Could not save the reply: %1").arg(error));
    });
    m_request = m_session->submit(req);
    reload();
    emit generatingChanged(true);
    updateComposerState();
}

void ChatPane::onTokens(quint64 requestId, const QString &delta, int) {
    if (requestId != m_request) return;
    m_reply->append(delta);
    if (m_replyWidget) m_replyWidget->setStreamingText(m_reply->text());
    const QScrollBar *bar = m_scroll->verticalScrollBar();
    if (bar->value() >= bar->maximum() - 40) scrollToBottom(); // follow unless the user scrolled up
}

void ChatPane::onFinished(quint64 requestId, const QString &reason, const MessageMetrics &metrics,
                          const QList<LayerRouting> &routing, quint64) {
    if (requestId != m_request) return;
    m_request = 0;
    // The reply's profile (what the profiler showed live) is stored in the same transaction.
    const std::optional<MessageProfile> profile = ProfileRecorder::forSession(m_session)->takeProfile(requestId);
    MessageMetrics stored = metrics;
    if (profile && profile->memoryPeakBytes > 0) stored.peakMemoryBytes = profile->memoryPeakBytes;
    if (!m_reply->finish(reason, stored, routing, profile))
        emit errorOccurred(tr("Could not save the reply: %1").arg(m_store->lastError()));
    endReply();
}

void ChatPane::onFailed(quint64 requestId, const QString &message) {
    if (requestId != m_request) return;
    m_request = 0;
    // What was measured until the failure is kept with the message, like a finished reply's.
    const std::optional<MessageProfile> profile = ProfileRecorder::forSession(m_session)->takeProfile(requestId);
    if (!(profile ? m_reply->fail(message, metricsFromProfile(*profile), *profile) : m_reply->fail(message)))
        emit errorOccurred(tr("Could not save the reply: %1").arg(m_store->lastError()));
    endReply();
    emit errorOccurred(message);
}

// After the reply's final state is written: back to idle, the list rebuilt from the store.
void ChatPane::endReply() {
    m_reply.reset();
    m_replyWidget = nullptr;
    emit generatingChanged(false);
    updateComposerState();
    reload();
}

void ChatPane::stop() {
    if (m_request && m_session) m_session->cancel(m_request); // replyFinished("cancelled") follows at once
}

} // namespace es
