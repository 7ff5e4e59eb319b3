// ChatPane (see chat_pane.h).
#include "chat_pane.h"
#include "app_settings.h"

#include "chat_store.h"
#include "composer.h"
#include "engine_session.h"
#include "expert_lab_dialog.h"
#include "message_widget.h"
#include "preset_bar.h"
#include "profile_recorder.h"
#include "reply_writer.h"
#include "sampling_controls.h"

#include <QComboBox>
#include <QDialog>
#include <QDialogButtonBox>
#include <QLocale>
#include <QMessageBox>
#include <QPushButton>
#include <QPlainTextEdit>
#include <QThreadPool>
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
    m_systemBanner = new QLabel(this);
    m_systemBanner->setObjectName("systemPromptBanner");
    m_systemBanner->setWordWrap(true);
    m_systemBanner->setTextFormat(Qt::RichText);
    m_systemBanner->setStyleSheet(
        QStringLiteral("background: palette(alternate-base); border-left: 3px solid #3b6fb6; padding: 4px"));
    m_systemBanner->hide();
    connect(m_systemBanner, &QLabel::linkActivated, this, [this](const QString &link) {
        if (link == QLatin1String("edit")) editSystemPrompt();
        else if (link == QLatin1String("clear")) setSystemPrompt({});
    });
    layout->addWidget(m_systemBanner);
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
    auto *system = new QToolButton(m_composer);
    system->setText(tr("System prompt…"));
    system->setToolTip(tr("This conversation's own system prompt (no preset needed)"));
    m_composer->topRow()->addWidget(system);
    connect(system, &QToolButton::clicked, this, &ChatPane::editSystemPrompt);

    // What a request does once the conversation outgrows the context.
    m_policy = new QComboBox(m_composer);
    m_policy->setObjectName("overflowPolicy");
    m_policy->addItem(tr("When too long: keep system prompt and last turns"), int(OverflowPolicy::KeepSystemAndLast));
    m_policy->addItem(tr("When too long: drop oldest"), int(OverflowPolicy::DropOldest));
    m_policy->addItem(tr("When too long: refuse"), int(OverflowPolicy::Refuse));
    m_policy->setToolTip(tr("What is sent once this conversation no longer fits the model's context: the system "
                            "prompt and the latest turns; the oldest messages, system prompt included, left out "
                            "first; or nothing, with the sizes named"));
    // A narrow pane shows the choice cut short (the list shows it whole): the combo does not set
    // the pane's minimum width, which decides whether another pane fits beside it.
    m_policy->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
    m_policy->setMinimumContentsLength(12);
    m_composer->footerRow()->insertWidget(2, m_policy);
    connect(m_policy, &QComboBox::activated, this,
            [this](int index) { setOverflowPolicy(OverflowPolicy(m_policy->itemData(index).toInt())); });

    m_countPool = std::make_unique<QThreadPool>();
    m_countPool->setMaxThreadCount(1);
    m_countTimer.setSingleShot(true);
    m_countTimer.setInterval(150);
    connect(&m_countTimer, &QTimer::timeout, this, &ChatPane::updateTokenCount);
    connect(m_composer, &Composer::draftChanged, this, [this] { m_countTimer.start(); });
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
    connect(m_session, &EngineSession::modelLoaded, this, [this] {
        m_messageTokens.clear(); // another model, another tokenizer
        m_historyKey.clear();
        updateContextInfo();
        updateTokenCount();
    });
    connect(m_session, &EngineSession::modelLoadStarted, this, &ChatPane::updateComposerState);
    connect(m_session, &EngineSession::modelLoadFailed, this, &ChatPane::updateComposerState);
    connect(m_session, &EngineSession::remoteDisconnected, this, &ChatPane::updateComposerState);
    connect(m_store, &ChatStore::messagesChanged, this, [this](qint64 id) {
        if (m_conversation == id && !isGenerating()) reload();
    });
    ProfileRecorder::forSession(m_session); // follows every reply, so a finished one has a profile to store
    updateComposerState();
    updateContextInfo();
    reload();
}

ChatPane::~ChatPane() {
    // A count in flight posts to this pane: it ends before the pane does (its result is dropped).
    m_countPool->clear();
    m_countPool->waitForDone();
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
    m_countTimer.start(); // its system prompt may change the count
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
    // An unset field: the Preferences' default sampling, else the model's.
    controls->setModelDefaults(overlaySampling(m_session->modelInfo().defaults, AppSettings::defaultSampling()));
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
    updateContextInfo();
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
    updateSystemPromptBanner();
    m_policy->setCurrentIndex(m_policy->findData(int(overflowPolicy())));
    m_countTimer.start();
    m_branchTurns.clear();
    m_branchKey.clear();
    if (!conv) return;
    const QList<Message> path = m_store->activePath(*m_conversation);
    for (const Message &m : path) { // what the composer's count starts from
        if (m.role == MessageRole::System) continue;
        m_branchTurns.push_back({m.role, m.content});
        m_branchKey += QStringLiteral("%1:%2,").arg(m.id).arg(m.content.size());
    }
    qint64 lastAssistant = 0;
    for (const Message &m : path)
        if (m.role == MessageRole::Assistant) lastAssistant = m.id;
    const qint64 leaf = path.isEmpty() ? 0 : path.constLast().id;
    for (const Message &m : path) {
        if (m.role == MessageRole::System) continue;
        auto *w = new MessageWidget(m, m_list);
        w->setSiblings(m_store->siblings(m.id));
        w->setRegenerateVisible(m.id == lastAssistant);
        w->setContinueVisible(m.id == leaf && m.state == MessageState::Complete && m.finishReason == "length");
        if (m.role == MessageRole::Assistant && m.state != MessageState::Partial) w->setMetrics(m_store->metrics(m.id));
        w->setActionsEnabled(!isGenerating());
        connect(w, &MessageWidget::editSubmitted, this, &ChatPane::editAndResend);
        connect(w, &MessageWidget::regenerateRequested, this, &ChatPane::regenerate);
        connect(w, &MessageWidget::continueRequested, this, &ChatPane::continueReply);
        connect(w, &MessageWidget::deleteRequested, this, &ChatPane::deleteMessage);
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
    // Model defaults < the Preferences' default sampling < the preset's choices < the
    // conversation's own settings.
    SamplingParams s = overlaySampling(AppSettings::defaultSampling(), m_preset ? m_preset->sampling : SamplingParams{});
    std::optional<ConversationSettings> cs;
    if (m_conversation) {
        if (auto c = m_store->conversation(*m_conversation)) cs = c->settings;
    } else {
        cs = m_pendingSettings;
    }
    return cs ? overlaySampling(s, cs->sampling) : s;
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
        created.systemPrompt = m_pendingSystemPrompt;
        created.overflowPolicy = m_pendingPolicy;
        if (m_preset) created.settings.presetId = m_preset->id;
        turn = m_store->beginTurnInNewConversation(created, text, generationInfo(seed));
        if (!turn) return emit errorOccurred(tr("Could not save the message: %1").arg(m_store->lastError()));
        m_pendingSettings = {};
        m_pendingSystemPrompt.clear();
        m_pendingPolicy = OverflowPolicy::KeepSystemAndLast;
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

ContextBudget ChatPane::budget() const {
    const SessionModelInfo info = m_session->modelInfo();
    return contextBudget(info.contextLength, info.kvTokens,
                         effectiveSampling().maxTokens.value_or(m_session->options().defaultMaxTokens));
}

std::optional<ChatRequest> ChatPane::buildRequest(qint64 replyId, bool continuing, int *dropped, QString *refusal) {
    // The prompt: the active path up to the reply (with it when it is continued).
    ChatRequest req;
    QList<qint64> ids;
    const QList<Message> path = m_store->pathTo(replyId);
    for (const Message &m : path) {
        if (m.role == MessageRole::System) continue;
        if (m.id == replyId && !continuing) break;
        req.messages.push_back({m.role, m.content});
        ids.push_back(m.id);
        if (m.id == replyId) break;
    }
    req.systemPrompt = effectiveSystemPrompt();
    req.sampling = effectiveSampling();
    req.continueLastReply = continuing;
    *dropped = 0;
    const std::shared_ptr<const PromptTokenizer> tok = m_session->promptTokenizer();
    const ContextBudget b = budget();
    if (!tok || b.limit <= 0) return req; // a remote server counts (and refuses) for itself

    // Each message's tokens, counted once per text (a continued reply's text grows).
    PromptSizes sizes;
    sizes.frameTokens = tok->frameTokens();
    sizes.systemTokens = tok->systemTokens(req.systemPrompt);
    for (qsizetype i = 0; i < req.messages.size(); ++i) {
        const ChatTurn &t = req.messages[i];
        auto it = m_messageTokens.constFind(ids[i]);
        if (it == m_messageTokens.constEnd() || it->first != t.content.size())
            it = m_messageTokens.insert(ids[i], {t.content.size(), tok->messageTokens(t.role, t.content)});
        sizes.messageTokens.push_back(it->second);
        sizes.roles.push_back(t.role);
    }
    const OverflowPolicy policy = overflowPolicy();
    ContextFit fit = ContextFitter::fit(sizes, b, policy);
    // The parts' sum can miss the real count by a token or two where texts meet: near the limit
    // the fitted prompt is counted exactly, and one more exchange goes while it is over.
    const auto fitted = [&](const ContextFit &f) {
        ChatRequest r = req;
        if (!f.sendSystem) r.systemPrompt.clear();
        r.messages = req.messages.mid(f.firstMessage);
        return r;
    };
    const int margin = 16 + 2 * int(req.messages.size()); // ≥ what the parts' sum can miss
    while (fit.fits && fit.promptTokens > b.promptLimit() - margin) {
        const ChatRequest r = fitted(fit);
        const int exact = tok->requestTokens(r);
        if (exact <= b.promptLimit()) break;
        // Make the fitter see the difference on the oldest part that is still sent.
        sizes.frameTokens += exact - fit.promptTokens;
        const ContextFit next = ContextFitter::fit(sizes, b, policy);
        if (next == fit) { // cannot happen: the frame grew; kept as a guard against a loop
            fit.fits = false;
            break;
        }
        fit = next;
    }
    if (!fit.fits) {
        *refusal = fit.refusal.isEmpty() ? tr("The prompt does not fit the model's context.") : fit.refusal;
        return std::nullopt;
    }
    *dropped = fit.droppedMessages;
    return fitted(fit);
}

void ChatPane::startReply(qint64 replyId, bool continuing) {
    int dropped = 0;
    QString refusal;
    const std::optional<ChatRequest> req = buildRequest(replyId, continuing, &dropped, &refusal);
    if (!req) {
        // The turn stays, its reply failed with the reason (sizes named), so the user sees why.
        if (!m_store->failReply(replyId, QString(), refusal)) emit errorOccurred(m_store->lastError());
        reload();
        return emit errorOccurred(refusal);
    }
    if (dropped > 0 && !m_store->setDroppedMessages(replyId, dropped)) emit errorOccurred(m_store->lastError());
    submitReply(replyId, *req, QString());
}

void ChatPane::submitReply(qint64 replyId, const ChatRequest &request, const QString &savedText) {
    ChatRequest req = request;
    const auto reply = m_store->message(replyId);
    if (reply && reply->generation.seed) req.sampling.seed = reply->generation.seed;
    m_reply = std::make_unique<ReplyWriter>(m_store, replyId, savedText);
    connect(m_reply.get(), &ReplyWriter::checkpointFailed, this, [this](const QString &error) {
        emit errorOccurred(tr("Could not save the reply: %1").arg(error));
    });
    m_request = m_session->submit(req);
    reload();
    emit generatingChanged(true);
    updateComposerState();
}

void ChatPane::continueReply(qint64 assistantMessageId) {
    if (isGenerating() || !m_session->isModelLoaded()) return;
    const std::optional<Message> m = m_store->message(assistantMessageId);
    if (!m) return emit errorOccurred(m_store->lastError());
    int dropped = 0;
    QString refusal;
    const std::optional<ChatRequest> req = buildRequest(assistantMessageId, true, &dropped, &refusal);
    if (!req) return emit errorOccurred(refusal);
    m_continuedMetrics = m_store->metrics(assistantMessageId);
    if (!m_store->reopenReply(assistantMessageId))
        return emit errorOccurred(tr("Could not continue the reply: %1").arg(m_store->lastError()));
    if (!m_store->setDroppedMessages(assistantMessageId, dropped)) emit errorOccurred(m_store->lastError());
    submitReply(assistantMessageId, *req, m->content);
}

void ChatPane::deleteMessage(qint64 messageId) {
    const std::optional<Message> m = m_store->message(messageId);
    if (!m) return emit errorOccurred(m_store->lastError());
    QMessageBox box(QMessageBox::Question, tr("Delete message"),
                    isGenerating() ? tr("Delete this message and every message below it in this branch? The reply "
                                        "in progress is stopped first. This cannot be undone.")
                                   : tr("Delete this message and every message below it in this branch? This "
                                        "cannot be undone."),
                    QMessageBox::Cancel, this);
    QPushButton *yes = box.addButton(tr("Delete"), QMessageBox::DestructiveRole);
    box.setDefaultButton(QMessageBox::Cancel);
    box.exec();
    if (box.clickedButton() != yes) return;
    // Every message shown is on the active branch, so a reply streaming here is below this one.
    if (isGenerating()) {
        stop();
        emit replyInterrupted(tr("The reply in progress was stopped to delete a message of its branch."));
    }
    if (!m_store->deleteMessage(messageId))
        emit errorOccurred(tr("Could not delete the message: %1").arg(m_store->lastError()));
    if (m_selectedMessage == messageId) m_selectedMessage = 0;
    reload();
}

QString ChatPane::systemPrompt() const {
    if (!m_conversation) return m_pendingSystemPrompt;
    const auto c = m_store->conversation(*m_conversation);
    return c ? c->systemPrompt : QString();
}

QString ChatPane::effectiveSystemPrompt() const {
    const QString own = systemPrompt();
    return !own.isEmpty() ? own : m_preset ? m_preset->systemPrompt : QString();
}

bool ChatPane::setSystemPrompt(const QString &prompt) {
    if (m_conversation) {
        if (!m_store->setSystemPrompt(*m_conversation, prompt)) {
            emit errorOccurred(m_store->lastError());
            return false;
        }
    } else {
        m_pendingSystemPrompt = prompt;
    }
    updateSystemPromptBanner();
    m_countTimer.start();
    return true;
}

void ChatPane::editSystemPrompt() {
    QDialog dialog(this);
    dialog.setWindowTitle(tr("System prompt of this conversation"));
    auto *layout = new QVBoxLayout(&dialog);
    auto *help = new QLabel(tr("Sent first, as the system message, with every request of this conversation. "
                               "Empty: none (a preset's system prompt applies, if it has one)."),
                            &dialog);
    help->setWordWrap(true);
    layout->addWidget(help);
    auto *edit = new QPlainTextEdit(&dialog);
    edit->setPlainText(systemPrompt());
    layout->addWidget(edit);
    auto *buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, &dialog);
    layout->addWidget(buttons);
    connect(buttons, &QDialogButtonBox::accepted, &dialog, &QDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, &dialog, &QDialog::reject);
    if (dialog.exec() != QDialog::Accepted) return;
    setSystemPrompt(edit->toPlainText().trimmed());
}

QString ChatPane::systemPromptBannerText() const { return m_systemBanner->isVisibleTo(this) ? m_systemBanner->text() : QString(); }

void ChatPane::updateSystemPromptBanner() {
    const QString own = systemPrompt();
    m_systemBanner->setVisible(!own.isEmpty());
    if (own.isEmpty()) return;
    const QString shown = own.simplified().size() > 160 ? own.simplified().left(159) + QStringLiteral("…") : own.simplified();
    m_systemBanner->setText(tr("<b>System prompt</b>: %1 <a href=\"edit\">Edit…</a> · <a href=\"clear\">Clear</a>")
                                .arg(shown.toHtmlEscaped()));
    m_systemBanner->setToolTip(own);
}

OverflowPolicy ChatPane::overflowPolicy() const {
    if (!m_conversation) return m_pendingPolicy;
    const auto c = m_store->conversation(*m_conversation);
    return c ? c->overflowPolicy : OverflowPolicy::KeepSystemAndLast;
}

bool ChatPane::setOverflowPolicy(OverflowPolicy policy) {
    if (m_conversation) {
        if (!m_store->setOverflowPolicy(*m_conversation, policy)) {
            emit errorOccurred(m_store->lastError());
            return false;
        }
    } else {
        m_pendingPolicy = policy;
    }
    m_policy->setCurrentIndex(m_policy->findData(int(policy)));
    showTokenCount();
    return true;
}

void ChatPane::updateContextInfo() {
    if (!m_session) return;
    const SessionModelInfo info = m_session->modelInfo();
    if (!m_session->isModelLoaded() || info.contextLength <= 0) return m_composer->setContextInfo({}, {});
    const QLocale l;
    QString text = tr("Context %1 tokens").arg(l.toString(info.contextLength));
    if (info.kvCacheBytes > 0 && info.kvTokens > 0)
        text += tr(" · KV cache %1 (%2 tokens)").arg(l.formattedDataSize(info.kvCacheBytes, 1), l.toString(info.kvTokens));
    const ContextBudget b = budget();
    m_composer->setContextInfo(
        text, tr("The model's context: the most tokens one prompt and its reply may hold. The KV cache holds the "
                 "tokens of every reply in flight; one prompt and its reply must fit it too. Each request keeps "
                 "%1 tokens free for the reply, so a prompt may have %2.")
                  .arg(l.toString(b.replyReserve), l.toString(b.promptLimit())));
}

// The count: the history's (cached; counted on the pool when it changed) plus the draft's.
void ChatPane::updateTokenCount() {
    if (!m_session) return; // the session went before this pane (its timer may still fire)
    const std::shared_ptr<const PromptTokenizer> tok = m_session->promptTokenizer();
    if (!tok || !m_session->isModelLoaded()) {
        m_shownTokens = -1;
        m_composer->setTokenCount(m_session->isRemote() && m_session->isModelLoaded()
                                      ? tr("no token count for a remote server")
                                      : QString(),
                                  {}, false);
        return;
    }
    const QString system = effectiveSystemPrompt();
    const QList<ChatTurn> turns = m_branchTurns;
    const QString key = QString::number(quintptr(tok.get())) + QLatin1Char('/') + m_branchKey + QLatin1Char('/') + system;
    // Without a reply before it, the new message meets plain text: the whole prompt is counted
    // (it is short: the system prompt and the draft at most).
    if (turns.isEmpty() || turns.constLast().role != MessageRole::Assistant) {
        ChatRequest r;
        r.systemPrompt = system;
        r.messages = turns;
        r.messages.push_back({MessageRole::User, m_composer->text()});
        m_historyKey.clear();
        m_shownTokens = tok->requestTokens(r);
        return showTokenCount();
    }
    if (key != m_historyKey) {
        if (key != m_pendingHistoryKey) {
            m_pendingHistoryKey = key;
            m_countPool->start([this, tok, system, turns, key] {
                const int n = tok->historyTokens(system, turns);
                QMetaObject::invokeMethod(
                    this,
                    [this, key, n] {
                        if (key != m_pendingHistoryKey) return; // the branch changed meanwhile
                        m_pendingHistoryKey.clear();
                        m_historyKey = key;
                        m_historyTokens = n;
                        updateTokenCount();
                    },
                    Qt::QueuedConnection);
            });
        }
        return m_composer->setTokenCount(tr("counting tokens…"), {}, false);
    }
    m_shownTokens = m_historyTokens + tok->newTurnTokens(m_composer->text());
    showTokenCount();
}

void ChatPane::showTokenCount() {
    if (m_shownTokens < 0) return;
    const QLocale l;
    const ContextBudget b = budget();
    const bool over = b.limit > 0 && m_shownTokens > b.promptLimit();
    QString text = tr("%1 / %2 tokens").arg(l.toString(m_shownTokens), l.toString(b.promptLimit()));
    if (over)
        text += overflowPolicy() == OverflowPolicy::Refuse ? tr(" — too long: it will be refused")
                                                            : tr(" — too long: the oldest turns will be left out");
    m_composer->setTokenCount(text,
                              tr("The prompt that would be sent — system prompt, this branch and the text box, "
                                 "rendered with the chat template — in the model's tokens, against what the "
                                 "context leaves for it (%1 tokens are kept for the reply)")
                                  .arg(l.toString(b.replyReserve)),
                              over);
    emit promptTokensCounted(m_shownTokens);
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
    // A continued reply: timings are the continuation's, its token count the whole message's.
    if (m_continuedMetrics && m_continuedMetrics->nOutputTokens)
        stored.nOutputTokens = *m_continuedMetrics->nOutputTokens + stored.nOutputTokens.value_or(0);
    m_continuedMetrics.reset();
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
    m_continuedMetrics.reset();
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
