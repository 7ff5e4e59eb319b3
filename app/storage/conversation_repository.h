// ConversationRepository: conversations and their message trees: the conversation list, the
// messages with their branches (edit and regenerate add siblings; current_leaf_id is the active
// branch), streaming replies from partial to complete or failed, and whole-conversation snapshots
// for delete/undo and import.
// Invariants: a parent is in its child's conversation; partial replies change only through the
// streaming calls; a message's metrics, routing and profile are written in its transaction.
#pragma once

#include "storage_types.h"
#include "turn_ids.h"

#include <QCoreApplication>
#include <QVariant>

#include <functional>
#include <optional>

namespace es {

class ProfileRepository;
class StoreConnection;

class ConversationRepository {
    Q_DECLARE_TR_FUNCTIONS(es::ChatStore)
public:
    ConversationRepository(StoreConnection &connection, ProfileRepository &profiles)
        : m_connection(connection), m_profiles(profiles) {}

    // ---- Conversations (ChatStore documents each call) ----------------------------------------
    std::optional<qint64> createConversation(const QString &title, const ConversationSettings &settings);
    bool renameConversation(qint64 id, const QString &title);
    bool setPinned(qint64 id, bool pinned);
    bool setConversationSettings(qint64 id, const ConversationSettings &settings);
    bool setSystemPrompt(qint64 id, const QString &systemPrompt);
    bool setOverflowPolicy(qint64 id, OverflowPolicy policy);
    std::optional<Conversation> conversation(qint64 id) const;
    QList<Conversation> conversations() const;
    std::optional<ConversationSnapshot> deleteConversation(qint64 id);
    bool restoreConversation(const ConversationSnapshot &snapshot);
    std::optional<qint64> importConversation(const ConversationSnapshot &snapshot);
    bool forEachMessage(qint64 conversationId, const std::function<bool(const Message &)> &visit) const;
    int messageCount(qint64 conversationId) const;

    // ---- The message tree ------------------------------------------------------------------------
    std::optional<qint64> addMessage(qint64 conversationId, std::optional<qint64> parentId, MessageRole role,
                                     const QString &content, const GenerationInfo &generation);
    std::optional<Message> message(qint64 id) const;
    bool setCurrentLeaf(qint64 conversationId, qint64 messageId);
    bool selectBranch(qint64 messageId);
    QList<Message> activePath(qint64 conversationId) const;
    QList<Message> pathTo(qint64 messageId) const;
    QList<Message> children(qint64 messageId) const;
    SiblingInfo siblings(qint64 messageId) const;
    std::optional<qint64> editAndResend(qint64 userMessageId, const QString &newContent);
    std::optional<qint64> regenerate(qint64 assistantMessageId, const GenerationInfo &generation);
    bool deleteMessage(qint64 messageId);

    // ---- Turns: a user message and the partial reply to it, in one transaction ---------------------
    // conversationId nullopt: a new conversation made from `create`, in the same transaction.
    std::optional<TurnIds> beginTurn(std::optional<qint64> conversationId, const NewConversation &create,
                                     std::optional<qint64> parentId, const QString &text,
                                     const GenerationInfo &reply);
    std::optional<TurnIds> beginEditedTurn(qint64 userMessageId, const QString &newContent,
                                           const GenerationInfo &reply);

    // ---- Streaming replies -----------------------------------------------------------------------
    std::optional<qint64> beginPartialReply(qint64 conversationId, qint64 parentId,
                                            const GenerationInfo &generation);
    bool updatePartialReply(qint64 messageId, const QString &text);
    bool reopenReply(qint64 messageId);
    bool setDroppedMessages(qint64 messageId, int dropped);
    // Ends a partial reply in one transaction: text, state, finish reason, then what is given:
    // metrics (replacing), routing (replacing the message's rows), the profile (with its own
    // routing counts when `routing` is null or empty). Fails if the message is not partial.
    bool endPartialReply(qint64 messageId, const QString &text, MessageState state,
                         const QString &finishReason, const MessageMetrics *metrics,
                         const QList<LayerRouting> *routing, const MessageProfile *profile = nullptr);
    int recoverPartialReplies();

private:
    // The user message an edit branches from; nullopt (the reason recorded) when there is none.
    std::optional<Message> userMessageToEdit(qint64 userMessageId);
    bool touchConversation(qint64 conversationId);
    // The row writers below run inside the caller's transaction and report nothing.
    std::optional<qint64> insertConversationRow(const NewConversation &create);
    bool updateConversationColumn(qint64 id, const char *column, const QVariant &value, const QString &what);
    // A message under parentId (checked to be in the same conversation), made current leaf.
    std::optional<qint64> insertMessageRow(qint64 conversationId, std::optional<qint64> parentId,
                                           MessageRole role, const QString &content, MessageState state,
                                           const GenerationInfo &generation);
    std::optional<TurnIds> insertTurnRows(qint64 conversationId, std::optional<qint64> parentId,
                                          const QString &text, const GenerationInfo &reply);
    // insertMessageRow in its own transaction, then the change notifications.
    std::optional<qint64> insertMessage(qint64 conversationId, std::optional<qint64> parentId,
                                        MessageRole role, const QString &content, MessageState state,
                                        const GenerationInfo &generation);
    QList<Message> messagesOf(qint64 conversationId) const;

    StoreConnection &m_connection;
    ProfileRepository &m_profiles;
};

} // namespace es
