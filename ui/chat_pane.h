// ChatPane: one conversation — its active branch as MessageWidgets, and a Composer. It turns
// user actions into store mutations and engine requests: send, stop, regenerate and
// edit-and-resend (both make sibling branches, never erase), branch switching. A send writes the
// user's message and the reply's row in one transaction; while the reply streams the pane shows
// the text at the session's pump rate and its ReplyWriter saves it at least every 250 ms, so a
// crash loses at most the last 250 ms of text and never a finished message.
// Context: the composer's footer shows the model's context and KV budget and a live count of the
// prompt that would be sent (the history counted once off the GUI thread and cached, the draft
// counted as it is typed, debounced); each conversation has its own system prompt and overflow
// policy (stored with it), applied by ContextFitter when a request is built, so a chat longer
// than the context stays usable and its replies say what their prompt left out. Continue carries
// on a reply cut at its token limit; Delete removes a message and its branch (confirmed, and a
// reply streaming in that branch is stopped first).
#pragma once

#include "context_fit.h"
#include "session_types.h"
#include "storage_types.h"

#include <QHash>
#include <QPointer>
#include <QTimer>
#include <QWidget>

#include <memory>
#include <optional>

class QComboBox;
class QLabel;
class QScrollArea;
class QThreadPool;
class QVBoxLayout;

namespace es {

class ChatStore;
class Composer;
class PresetBar;
class EngineSession;
class MessageWidget;
class ReplyWriter;

class ChatPane : public QWidget {
    Q_OBJECT
public:
    ChatPane(ChatStore *store, EngineSession *session, QWidget *parent = nullptr);
    ~ChatPane() override;

    std::optional<qint64> conversationId() const { return m_conversation; }
    // The message whose header the user clicked last (0: none), for File ▸ Export report.
    qint64 selectedMessage() const { return m_selectedMessage; }
    bool isGenerating() const { return m_request != 0; }
    Composer *composer() const { return m_composer; }
    PresetBar *presetBar() const { return m_presetBar; }
    std::optional<Preset> activePreset() const { return m_preset; }
    QList<MessageWidget *> messageWidgets() const;
    EngineSession *session() const;
    // The precision (and backend) this pane's replies come from, shown beside its title.
    QString engineBadge() const;
    QString titleText() const; // the header's title, as shown

public slots:
    void setConversation(std::optional<qint64> id); // nullopt: a new, empty conversation
    // Its conversation is about to be deleted: a reply in progress is stopped and saved first, so
    // the deletion (and its undo) takes the reply as it stands.
    void conversationAboutToBeDeleted(qint64 id);
    void setActivePreset(const std::optional<es::Preset> &preset);
    void send(const QString &text);
    void stop();
    void regenerate(qint64 assistantMessageId);
    void editAndResend(qint64 userMessageId, const QString &text);
    void switchBranch(qint64 messageId);
    void reload();
    // Sampling parameters of this conversation (a dialog over SamplingControls).
    void editConversationSettings();
    // The expert lab (ExpertLabDialog) on this conversation's intervention; `prefill`, when given,
    // is shown instead of the stored one (e.g. an expert picked on the routing heatmap).
    void openExpertLab(const std::optional<es::ExpertIntervention> &prefill = std::nullopt);
    // Stores `iv` as this conversation's intervention (the next replies are routed under it).
    bool setConversationIntervention(const es::ExpertIntervention &iv);
    // The intervention this conversation's next reply runs under (its own, else its preset's).
    ExpertIntervention nextIntervention() const { return effectiveSampling().intervention; }
    // This conversation's own system prompt (empty: none, then the preset's applies); stored with
    // it, or kept for a conversation not created yet.
    QString systemPrompt() const;
    bool setSystemPrompt(const QString &prompt);
    void editSystemPrompt(); // a dialog over setSystemPrompt
    QString systemPromptBannerText() const;
    OverflowPolicy overflowPolicy() const;
    bool setOverflowPolicy(es::OverflowPolicy policy);
    // Carries on a reply cut at its token limit: the same message grows and is stored again.
    void continueReply(qint64 assistantMessageId);
    // Asks, then deletes the message and everything below it (ChatStore::deleteMessage); a reply
    // in progress is stopped first (replyInterrupted says so).
    void deleteMessage(qint64 messageId);
    // The count the composer shows once the history's count is in (tests wait on it); -1: none.
    int promptTokenCount() const { return m_shownTokens; }

signals:
    void managePresetsRequested();
    void conversationCreated(qint64 conversationId);
    void generatingChanged(bool generating);
    void activated(); // the user interacted with this pane (it becomes the current pane)
    void errorOccurred(const QString &message);
    // A reply in progress was stopped by something other than Stop (the pane moved to another
    // conversation, its conversation is being deleted); message says which, for the status bar.
    void replyInterrupted(const QString &message);
    void messageSelected(qint64 messageId); // the user clicked a message's header (the profiler shows it)
    void promptTokensCounted(int tokens);   // the composer's count changed

private:
    // The request for reply `replyId` (its branch up to it; with it when continuing), fitted to the
    // context under the conversation's policy; nullopt and *refusal when it cannot be sent.
    std::optional<ChatRequest> buildRequest(qint64 replyId, bool continuing, int *dropped, QString *refusal);
    void startReply(qint64 replyId, bool continuing = false);
    void submitReply(qint64 replyId, const ChatRequest &req, const QString &savedText);
    QString effectiveSystemPrompt() const;
    ContextBudget budget() const;
    void updateSystemPromptBanner();
    void updateContextInfo();
    void updateTokenCount(); // debounced by m_countTimer
    void showTokenCount();
    void endReply();
    void onTokens(quint64 requestId, const QString &delta, int nTokens);
    void onFinished(quint64 requestId, const QString &reason, const es::MessageMetrics &metrics,
                    const QList<es::LayerRouting> &routing, quint64 seed);
    void onFailed(quint64 requestId, const QString &message);
    void updateComposerState();
    void updateInterventionBanner();
    SamplingParams effectiveSampling() const;
    GenerationInfo generationInfo(quint64 seed) const;
    void scrollToBottom();
    bool eventFilter(QObject *watched, QEvent *event) override;

    QPointer<ChatStore> m_store;
    QPointer<EngineSession> m_session;
    QLabel *m_badge = nullptr;
    std::optional<qint64> m_conversation;
    std::optional<Preset> m_preset;
    QLabel *m_title = nullptr;
    QLabel *m_interventionBanner = nullptr; // shown while the next replies run under an intervention
    QScrollArea *m_scroll = nullptr;
    QWidget *m_list = nullptr;
    QVBoxLayout *m_listLayout = nullptr;
    Composer *m_composer = nullptr;
    PresetBar *m_presetBar = nullptr;
    ConversationSettings m_pendingSettings; // for a conversation not created yet
    QString m_pendingSystemPrompt;          // the same for its system prompt and policy
    OverflowPolicy m_pendingPolicy = OverflowPolicy::KeepSystemAndLast;
    QLabel *m_systemBanner = nullptr;
    QComboBox *m_policy = nullptr;

    // The live count: the history's (what precedes a new message) is counted on m_countPool and
    // kept under its key; the draft's on the GUI thread, m_countTimer after the last keystroke.
    QTimer m_countTimer;
    std::unique_ptr<QThreadPool> m_countPool;
    QList<ChatTurn> m_branchTurns; // the active branch as reload() read it
    QString m_branchKey;           // its messages' ids and lengths
    QString m_historyKey;        // what m_historyTokens was counted for ("" none)
    QString m_pendingHistoryKey; // what the pool is counting now
    int m_historyTokens = 0;
    int m_shownTokens = -1;
    QHash<qint64, QPair<qsizetype, int>> m_messageTokens; // id → (content length, tokens)

    std::optional<MessageMetrics> m_continuedMetrics; // a continued reply's measurements before

    quint64 m_request = 0;                // engine request in flight (0: none)
    std::unique_ptr<ReplyWriter> m_reply; // its partial message in the store, while it streams
    MessageWidget *m_replyWidget = nullptr;
    qint64 m_selectedMessage = 0; // highlighted; its profile is in the profiler
};

} // namespace es
