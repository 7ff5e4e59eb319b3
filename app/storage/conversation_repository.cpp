// ConversationRepository: the conversations and messages tables. Multi-statement mutations run in
// one StoreTransaction; a single statement relies on SQLite's implicit transaction. Changes are
// reported through StoreConnection only after the commit.
#include "conversation_repository.h"

#include "profile_repository.h"
#include "store_connection.h"
#include "store_sql.h"

#include <QSet>
#include <QSqlError>

#include <algorithm>

namespace es {

// ---- Conversations ----------------------------------------------------------------------------------

std::optional<qint64> ConversationRepository::createConversation(const QString &title,
                                                                 const ConversationSettings &settings) {
    if (!m_connection.checkThread()) return std::nullopt;
    const std::optional<qint64> id = insertConversationRow({title, settings, {}, OverflowPolicy::KeepSystemAndLast});
    if (id) m_connection.notifyConversationsChanged();
    return id;
}

std::optional<qint64> ConversationRepository::insertConversationRow(const NewConversation &create) {
    QSqlQuery q(m_connection.db());
    const qint64 now = m_connection.nowMs();
    if (!run(q,
             QStringLiteral("INSERT INTO conversations (title, created_at, updated_at, settings, system_prompt, "
                            "overflow_policy) VALUES (?, ?, ?, ?, ?, ?)"),
             {create.title, now, now, jsonText(create.settings.toJson()), create.systemPrompt,
              overflowPolicyName(create.overflowPolicy)})) {
        m_connection.fail(tr("Could not create a conversation"), q.lastError().text());
        return std::nullopt;
    }
    return q.lastInsertId().toLongLong();
}

bool ConversationRepository::renameConversation(qint64 id, const QString &title) {
    if (!m_connection.checkThread()) return false;
    QSqlQuery q(m_connection.db());
    // Renaming does not touch updated_at: the list order follows conversation activity.
    if (!run(q, QStringLiteral("UPDATE conversations SET title = ? WHERE id = ?"), {title, id}))
        return m_connection.fail(tr("Could not rename conversation %1").arg(id), q.lastError().text());
    if (q.numRowsAffected() != 1) return m_connection.fail(tr("There is no conversation %1").arg(id), {});
    m_connection.notifyConversationsChanged();
    return true;
}

bool ConversationRepository::setPinned(qint64 id, bool pinned) {
    if (!m_connection.checkThread()) return false;
    QSqlQuery q(m_connection.db());
    if (!run(q, QStringLiteral("UPDATE conversations SET pinned = ? WHERE id = ?"), {pinned ? 1 : 0, id}))
        return m_connection.fail(tr("Could not pin conversation %1").arg(id), q.lastError().text());
    if (q.numRowsAffected() != 1) return m_connection.fail(tr("There is no conversation %1").arg(id), {});
    m_connection.notifyConversationsChanged();
    return true;
}

bool ConversationRepository::setConversationSettings(qint64 id, const ConversationSettings &settings) {
    if (!m_connection.checkThread()) return false;
    QSqlQuery q(m_connection.db());
    if (!run(q, QStringLiteral("UPDATE conversations SET settings = ? WHERE id = ?"),
             {jsonText(settings.toJson()), id}))
        return m_connection.fail(tr("Could not save the settings of conversation %1").arg(id),
                                 q.lastError().text());
    if (q.numRowsAffected() != 1) return m_connection.fail(tr("There is no conversation %1").arg(id), {});
    m_connection.notifyConversationsChanged();
    return true;
}

bool ConversationRepository::updateConversationColumn(qint64 id, const char *column, const QVariant &value,
                                                      const QString &what) {
    if (!m_connection.checkThread()) return false;
    QSqlQuery q(m_connection.db());
    // Like the sampling settings, these do not touch updated_at: they are not chat activity.
    if (!run(q, QStringLiteral("UPDATE conversations SET %1 = ? WHERE id = ?").arg(QLatin1String(column)), {value, id}))
        return m_connection.fail(what, q.lastError().text());
    if (q.numRowsAffected() != 1) return m_connection.fail(tr("There is no conversation %1").arg(id), {});
    m_connection.notifyConversationsChanged();
    return true;
}

bool ConversationRepository::setSystemPrompt(qint64 id, const QString &systemPrompt) {
    return updateConversationColumn(id, "system_prompt", systemPrompt,
                                    tr("Could not save the system prompt of conversation %1").arg(id));
}

bool ConversationRepository::setOverflowPolicy(qint64 id, OverflowPolicy policy) {
    return updateConversationColumn(id, "overflow_policy", overflowPolicyName(policy),
                                    tr("Could not save the overflow policy of conversation %1").arg(id));
}

std::optional<Conversation> ConversationRepository::conversation(qint64 id) const {
    if (!m_connection.checkThread()) return std::nullopt;
    QSqlQuery q(m_connection.db());
    if (!run(q, QStringLiteral("SELECT %1 FROM conversations c WHERE c.id = ?").arg(kConversationColumns),
             {id})) {
        m_connection.fail(tr("Could not read conversation %1").arg(id), q.lastError().text());
        return std::nullopt;
    }
    if (!q.next()) {
        m_connection.fail(tr("There is no conversation %1").arg(id), {});
        return std::nullopt;
    }
    return readConversation(q);
}

QList<Conversation> ConversationRepository::conversations() const {
    QList<Conversation> out;
    if (!m_connection.checkThread()) return out;
    QSqlQuery q(m_connection.db());
    if (!run(q, QStringLiteral(
                    "SELECT %1 FROM conversations c ORDER BY c.pinned DESC, c.updated_at DESC, c.id DESC")
                    .arg(kConversationColumns))) {
        m_connection.fail(tr("Could not list conversations"), q.lastError().text());
        return out;
    }
    while (q.next()) out.append(readConversation(q));
    return out;
}

QList<Message> ConversationRepository::messagesOf(qint64 conversationId) const {
    QList<Message> out;
    QSqlQuery q(m_connection.db());
    if (!run(q,
             QStringLiteral("SELECT %1 FROM messages m WHERE m.conversation_id = ? ORDER BY m.id")
                 .arg(kMessageColumns),
             {conversationId})) {
        m_connection.fail(tr("Could not read the messages of conversation %1").arg(conversationId),
                          q.lastError().text());
        return out;
    }
    while (q.next()) out.append(readMessage(q));
    return out;
}

std::optional<ConversationSnapshot> ConversationRepository::deleteConversation(qint64 id) {
    if (!m_connection.checkThread()) return std::nullopt;
    ConversationSnapshot snapshot;
    {
        StoreTransaction t(m_connection);
        if (!t.ok()) return std::nullopt;
        const std::optional<Conversation> c = conversation(id);
        if (!c) return std::nullopt;
        snapshot.conversation = *c;
        snapshot.messages = messagesOf(id);
        for (const Message &m : std::as_const(snapshot.messages)) {
            if (std::optional<MessageMetrics> mm = m_profiles.metrics(m.id))
                snapshot.metrics.insert(m.id, *mm);
            const QList<LayerRouting> r = m_profiles.routing(m.id);
            if (!r.isEmpty()) snapshot.routing.insert(m.id, r);
            if (std::optional<MessageProfile> p = m_profiles.profile(m.id))
                snapshot.profiles.insert(m.id, *p);
        }
        QSqlQuery q(m_connection.db());
        // Messages, metrics and routing go with it (ON DELETE CASCADE); the FTS triggers fire.
        if (!run(q, QStringLiteral("DELETE FROM conversations WHERE id = ?"), {id})) {
            m_connection.fail(tr("Could not delete conversation %1").arg(id), q.lastError().text());
            return std::nullopt;
        }
        if (!t.commit()) return std::nullopt;
    }
    m_connection.notifyConversationsChanged();
    m_connection.notifyMessagesChanged(id);
    return snapshot;
}

bool ConversationRepository::restoreConversation(const ConversationSnapshot &snapshot) {
    if (!m_connection.checkThread()) return false;
    const Conversation &c = snapshot.conversation;
    {
        StoreTransaction t(m_connection);
        if (!t.ok()) return false;
        QSqlQuery q(m_connection.db());
        // The leaf is set last: it references a message not inserted yet.
        if (!run(q,
                 QStringLiteral(
                     "INSERT INTO conversations (id, title, created_at, updated_at, pinned, settings, "
                     "system_prompt, overflow_policy) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"),
                 {c.id, c.title, c.createdAt.toMSecsSinceEpoch(), c.updatedAt.toMSecsSinceEpoch(),
                  c.pinned ? 1 : 0, jsonText(c.settings.toJson()), c.systemPrompt,
                  overflowPolicyName(c.overflowPolicy)}))
            return m_connection.fail(tr("Could not restore conversation %1").arg(c.id), q.lastError().text());
        QList<Message> messages = snapshot.messages;
        std::sort(messages.begin(), messages.end(),
                  [](const Message &a, const Message &b) { return a.id < b.id; });
        for (const Message &m : std::as_const(messages)) {
            if (!run(q,
                     QStringLiteral(
                         "INSERT INTO messages (id, conversation_id, parent_id, role, content, created_at, "
                         "state, finish_reason, model_name, model_hash, precision, sampling, seed, "
                         "dropped_messages) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
                     {m.id, c.id, nullable(m.parentId), messageRoleName(m.role), m.content,
                      m.createdAt.toMSecsSinceEpoch(), messageStateName(m.state), m.finishReason,
                      m.generation.modelName, m.generation.modelHash, m.generation.precision,
                      jsonText(m.generation.sampling.toJson()), seedVariant(m.generation.seed),
                      m.droppedMessages}))
                return m_connection.fail(tr("Could not restore message %1").arg(m.id), q.lastError().text());
        }
        for (auto it = snapshot.metrics.cbegin(); it != snapshot.metrics.cend(); ++it) {
            const MessageMetrics &mm = it.value();
            if (!run(q,
                     QStringLiteral("INSERT INTO message_metrics (message_id, ttft_ms, n_prompt_tokens, "
                                    "n_output_tokens, prefill_tok_s, decode_tok_s, itl_ms, token_times_ms, "
                                    "stop_reason, peak_memory_bytes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
                     {it.key(), nullable(mm.ttftMs), nullable(mm.nPromptTokens), nullable(mm.nOutputTokens),
                      nullable(mm.prefillTokS), nullable(mm.decodeTokS), encodeFloat32(mm.itlMs),
                      encodeFloat32(mm.tokenTimesMs), mm.stopReason, nullable(mm.peakMemoryBytes)}))
                return m_connection.fail(tr("Could not restore the metrics of message %1").arg(it.key()),
                                         q.lastError().text());
        }
        for (auto it = snapshot.routing.cbegin(); it != snapshot.routing.cend(); ++it) {
            for (const LayerRouting &r : it.value()) {
                if (!run(q,
                         QStringLiteral("INSERT INTO message_routing (message_id, layer, expert_counts) "
                                        "VALUES (?, ?, ?)"),
                         {it.key(), r.layer, encodeUInt32(r.expertCounts)}))
                    return m_connection.fail(tr("Could not restore the routing of message %1").arg(it.key()),
                                             q.lastError().text());
            }
        }
        for (auto it = snapshot.profiles.cbegin(); it != snapshot.profiles.cend(); ++it)
            if (!m_profiles.writeProfile(it.key(), it.value(), false)) return false; // routing restored above
        if (!run(q, QStringLiteral("UPDATE conversations SET current_leaf_id = ? WHERE id = ?"),
                 {nullable(c.currentLeafId), c.id}))
            return m_connection.fail(tr("Could not restore conversation %1").arg(c.id), q.lastError().text());
        if (!t.commit()) return false;
    }
    m_connection.notifyConversationsChanged();
    m_connection.notifyMessagesChanged(c.id);
    return true;
}

std::optional<qint64> ConversationRepository::importConversation(const ConversationSnapshot &snapshot) {
    if (!m_connection.checkThread()) return std::nullopt;
    const Conversation &c = snapshot.conversation;
    qint64 newId = 0;
    {
        StoreTransaction t(m_connection);
        if (!t.ok()) return std::nullopt;
        QSqlQuery q(m_connection.db());
        if (!run(q,
                 QStringLiteral("INSERT INTO conversations (title, created_at, updated_at, pinned, settings, "
                                "system_prompt, overflow_policy) VALUES (?, ?, ?, ?, ?, ?, ?)"),
                 {c.title, c.createdAt.toMSecsSinceEpoch(), c.updatedAt.toMSecsSinceEpoch(), c.pinned ? 1 : 0,
                  jsonText(c.settings.toJson()), c.systemPrompt, overflowPolicyName(c.overflowPolicy)})) {
            m_connection.fail(tr("Could not import the conversation \"%1\"").arg(c.title),
                              q.lastError().text());
            return std::nullopt;
        }
        newId = q.lastInsertId().toLongLong();
        QHash<qint64, qint64> ids; // snapshot id → new id
        ids.reserve(snapshot.messages.size());
        for (const Message &m : snapshot.messages) {
            std::optional<qint64> parent;
            if (m.parentId) {
                auto it = ids.constFind(*m.parentId);
                if (it == ids.constEnd()) {
                    m_connection.fail(
                        tr("Message %1 of the imported conversation names parent %2, which does not come "
                           "before it")
                            .arg(m.id)
                            .arg(*m.parentId),
                        {});
                    return std::nullopt;
                }
                parent = *it;
            }
            if (ids.contains(m.id)) {
                m_connection.fail(tr("The imported conversation has two messages with id %1").arg(m.id), {});
                return std::nullopt;
            }
            if (!run(q,
                     QStringLiteral(
                         "INSERT INTO messages (conversation_id, parent_id, role, content, created_at, "
                         "state, finish_reason, model_name, model_hash, precision, sampling, seed, "
                         "dropped_messages) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
                     {newId, nullable(parent), messageRoleName(m.role), m.content,
                      m.createdAt.toMSecsSinceEpoch(), messageStateName(m.state), m.finishReason,
                      m.generation.modelName, m.generation.modelHash, m.generation.precision,
                      jsonText(m.generation.sampling.toJson()), seedVariant(m.generation.seed),
                      m.droppedMessages})) {
                m_connection.fail(tr("Could not import message %1").arg(m.id), q.lastError().text());
                return std::nullopt;
            }
            ids.insert(m.id, q.lastInsertId().toLongLong());
        }
        for (auto it = snapshot.metrics.cbegin(); it != snapshot.metrics.cend(); ++it) {
            const MessageMetrics &mm = it.value();
            if (!ids.contains(it.key()) ||
                !run(q,
                     QStringLiteral("INSERT INTO message_metrics (message_id, ttft_ms, n_prompt_tokens, "
                                    "n_output_tokens, prefill_tok_s, decode_tok_s, itl_ms, token_times_ms, "
                                    "stop_reason, peak_memory_bytes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
                     {ids.value(it.key()), nullable(mm.ttftMs), nullable(mm.nPromptTokens),
                      nullable(mm.nOutputTokens), nullable(mm.prefillTokS), nullable(mm.decodeTokS),
                      encodeFloat32(mm.itlMs), encodeFloat32(mm.tokenTimesMs), mm.stopReason,
                      nullable(mm.peakMemoryBytes)})) {
                m_connection.fail(tr("Could not import the metrics of message %1").arg(it.key()),
                                  q.lastError().text());
                return std::nullopt;
            }
        }
        for (auto it = snapshot.routing.cbegin(); it != snapshot.routing.cend(); ++it) {
            for (const LayerRouting &r : it.value()) {
                if (!ids.contains(it.key()) ||
                    !run(q,
                         QStringLiteral("INSERT INTO message_routing (message_id, layer, expert_counts) "
                                        "VALUES (?, ?, ?)"),
                         {ids.value(it.key()), r.layer, encodeUInt32(r.expertCounts)})) {
                    m_connection.fail(tr("Could not import the routing of message %1").arg(it.key()),
                                      q.lastError().text());
                    return std::nullopt;
                }
            }
        }
        for (auto it = snapshot.profiles.cbegin(); it != snapshot.profiles.cend(); ++it) {
            if (!ids.contains(it.key())) {
                m_connection.fail(
                    tr("The imported profile of message %1 belongs to no message").arg(it.key()), {});
                return std::nullopt;
            }
            if (!m_profiles.writeProfile(ids.value(it.key()), it.value(), false)) return std::nullopt;
        }
        std::optional<qint64> leaf;
        if (c.currentLeafId) {
            if (!ids.contains(*c.currentLeafId)) {
                m_connection.fail(
                    tr("The imported conversation's current message %1 is not one of its messages")
                        .arg(*c.currentLeafId),
                    {});
                return std::nullopt;
            }
            leaf = ids.value(*c.currentLeafId);
        }
        if (!run(q, QStringLiteral("UPDATE conversations SET current_leaf_id = ? WHERE id = ?"),
                 {nullable(leaf), newId})) {
            m_connection.fail(tr("Could not import the conversation \"%1\"").arg(c.title),
                              q.lastError().text());
            return std::nullopt;
        }
        if (!t.commit()) return std::nullopt;
    }
    m_connection.notifyConversationsChanged();
    m_connection.notifyMessagesChanged(newId);
    return newId;
}

bool ConversationRepository::forEachMessage(qint64 conversationId,
                                            const std::function<bool(const Message &)> &visit) const {
    if (!m_connection.checkThread()) return false;
    QSqlQuery q(m_connection.db());
    q.setForwardOnly(true); // rows are fetched as they are read, none kept
    if (!run(q,
             QStringLiteral("SELECT %1 FROM messages m WHERE m.conversation_id = ? ORDER BY m.id")
                 .arg(kMessageColumns),
             {conversationId}))
        return m_connection.fail(tr("Could not read the messages of conversation %1").arg(conversationId),
                                 q.lastError().text());
    while (q.next())
        if (!visit(readMessage(q))) return false;
    return true;
}

int ConversationRepository::messageCount(qint64 conversationId) const {
    if (!m_connection.checkThread()) return 0;
    QSqlQuery q(m_connection.db());
    if (!run(q, QStringLiteral("SELECT count(*) FROM messages WHERE conversation_id = ?"),
             {conversationId}) ||
        !q.next()) {
        m_connection.fail(tr("Could not count the messages of conversation %1").arg(conversationId),
                          q.lastError().text());
        return 0;
    }
    return q.value(0).toInt();
}

bool ConversationRepository::touchConversation(qint64 conversationId) {
    QSqlQuery q(m_connection.db());
    if (!run(q, QStringLiteral("UPDATE conversations SET updated_at = ? WHERE id = ?"),
             {m_connection.nowMs(), conversationId}))
        return m_connection.fail(tr("Could not update conversation %1").arg(conversationId),
                                 q.lastError().text());
    return true;
}

// ---- Messages -----------------------------------------------------------------------------------------

std::optional<qint64> ConversationRepository::insertMessage(qint64 conversationId,
                                                            std::optional<qint64> parentId, MessageRole role,
                                                            const QString &content, MessageState state,
                                                            const GenerationInfo &generation) {
    qint64 id = 0;
    {
        StoreTransaction t(m_connection);
        if (!t.ok()) return std::nullopt;
        const std::optional<qint64> inserted =
            insertMessageRow(conversationId, parentId, role, content, state, generation);
        if (!inserted) return std::nullopt;
        id = *inserted;
        if (!t.commit()) return std::nullopt;
    }
    m_connection.notifyMessagesChanged(conversationId);
    m_connection.notifyConversationsChanged();
    return id;
}

std::optional<qint64> ConversationRepository::insertMessageRow(qint64 conversationId,
                                                               std::optional<qint64> parentId,
                                                               MessageRole role, const QString &content,
                                                               MessageState state,
                                                               const GenerationInfo &generation) {
    if (parentId) {
        const std::optional<qint64> parentConversation = conversationOf(m_connection, *parentId);
        if (!parentConversation) return std::nullopt;
        if (*parentConversation != conversationId) {
            m_connection.fail(tr("Message %1 belongs to another conversation").arg(*parentId), {});
            return std::nullopt;
        }
    }
    QSqlQuery q(m_connection.db());
    if (!run(q,
             QStringLiteral(
                 "INSERT INTO messages (conversation_id, parent_id, role, content, created_at, state, "
                 "model_name, model_hash, precision, sampling, seed) "
                 "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
             {conversationId, nullable(parentId), messageRoleName(role), content, m_connection.nowMs(),
              messageStateName(state), generation.modelName, generation.modelHash, generation.precision,
              jsonText(generation.sampling.toJson()), seedVariant(generation.seed)})) {
        m_connection.fail(tr("Could not add a message to conversation %1").arg(conversationId),
                          q.lastError().text());
        return std::nullopt;
    }
    const qint64 id = q.lastInsertId().toLongLong();
    if (!run(q, QStringLiteral("UPDATE conversations SET current_leaf_id = ?, updated_at = ? WHERE id = ?"),
             {id, m_connection.nowMs(), conversationId})) {
        m_connection.fail(tr("Could not update conversation %1").arg(conversationId), q.lastError().text());
        return std::nullopt;
    }
    if (q.numRowsAffected() != 1) {
        m_connection.fail(tr("There is no conversation %1").arg(conversationId), {});
        return std::nullopt;
    }
    return id;
}

std::optional<qint64> ConversationRepository::addMessage(qint64 conversationId,
                                                         std::optional<qint64> parentId, MessageRole role,
                                                         const QString &content,
                                                         const GenerationInfo &generation) {
    if (!m_connection.checkThread()) return std::nullopt;
    return insertMessage(conversationId, parentId, role, content, MessageState::Complete, generation);
}

std::optional<Message> ConversationRepository::message(qint64 id) const {
    if (!m_connection.checkThread()) return std::nullopt;
    QSqlQuery q(m_connection.db());
    if (!run(q, QStringLiteral("SELECT %1 FROM messages m WHERE m.id = ?").arg(kMessageColumns), {id})) {
        m_connection.fail(tr("Could not read message %1").arg(id), q.lastError().text());
        return std::nullopt;
    }
    if (!q.next()) {
        m_connection.fail(tr("There is no message %1").arg(id), {});
        return std::nullopt;
    }
    return readMessage(q);
}

bool ConversationRepository::setCurrentLeaf(qint64 conversationId, qint64 messageId) {
    if (!m_connection.checkThread()) return false;
    QSqlQuery q(m_connection.db());
    // Switching branches does not touch updated_at: browsing is not activity.
    if (!run(q,
             QStringLiteral("UPDATE conversations SET current_leaf_id = ? WHERE id = ? AND EXISTS "
                            "(SELECT 1 FROM messages WHERE id = ? AND conversation_id = ?)"),
             {messageId, conversationId, messageId, conversationId}))
        return m_connection.fail(tr("Could not select message %1").arg(messageId), q.lastError().text());
    if (q.numRowsAffected() != 1)
        return m_connection.fail(
            tr("Message %1 is not in conversation %2").arg(messageId).arg(conversationId), {});
    m_connection.notifyMessagesChanged(conversationId);
    return true;
}

bool ConversationRepository::selectBranch(qint64 messageId) {
    if (!m_connection.checkThread()) return false;
    const std::optional<qint64> conversationId = conversationOf(m_connection, messageId);
    if (!conversationId) return false;
    qint64 leaf = messageId;
    QSqlQuery q(m_connection.db());
    for (;;) {
        if (!run(q, QStringLiteral("SELECT max(id) FROM messages WHERE parent_id = ?"), {leaf}) || !q.next())
            return m_connection.fail(tr("Could not follow the branch of message %1").arg(messageId),
                                     q.lastError().text());
        if (q.value(0).isNull()) break;
        leaf = q.value(0).toLongLong();
    }
    return setCurrentLeaf(*conversationId, leaf);
}

QList<Message> ConversationRepository::pathTo(qint64 messageId) const {
    QList<Message> out;
    if (!m_connection.checkThread()) return out;
    QSqlQuery q(m_connection.db());
    if (!run(q,
             QStringLiteral("WITH RECURSIVE path (id, depth) AS (SELECT ?, 0 UNION ALL "
                            "SELECT parent.parent_id, path.depth + 1 FROM messages parent JOIN path ON "
                            "parent.id = path.id "
                            "WHERE parent.parent_id IS NOT NULL) "
                            "SELECT %1 FROM path JOIN messages m ON m.id = path.id ORDER BY path.depth DESC")
                 .arg(kMessageColumns),
             {messageId})) {
        m_connection.fail(tr("Could not read the path to message %1").arg(messageId), q.lastError().text());
        return out;
    }
    while (q.next()) out.append(readMessage(q));
    return out;
}

QList<Message> ConversationRepository::activePath(qint64 conversationId) const {
    const std::optional<Conversation> c = conversation(conversationId);
    if (!c || !c->currentLeafId) return {};
    return pathTo(*c->currentLeafId);
}

QList<Message> ConversationRepository::children(qint64 messageId) const {
    QList<Message> out;
    if (!m_connection.checkThread()) return out;
    QSqlQuery q(m_connection.db());
    if (!run(q,
             QStringLiteral("SELECT %1 FROM messages m WHERE m.parent_id = ? ORDER BY m.id")
                 .arg(kMessageColumns),
             {messageId})) {
        m_connection.fail(tr("Could not read the replies to message %1").arg(messageId),
                          q.lastError().text());
        return out;
    }
    while (q.next()) out.append(readMessage(q));
    return out;
}

SiblingInfo ConversationRepository::siblings(qint64 messageId) const {
    SiblingInfo info;
    const std::optional<Message> m = message(messageId);
    if (!m) return info;
    QSqlQuery q(m_connection.db());
    // `parent_id IS ?` also matches NULL: roots are siblings of each other.
    if (!run(q,
             QStringLiteral(
                 "SELECT id FROM messages WHERE conversation_id = ? AND parent_id IS ? ORDER BY id"),
             {m->conversationId, nullable(m->parentId)})) {
        m_connection.fail(tr("Could not read the siblings of message %1").arg(messageId),
                          q.lastError().text());
        return info;
    }
    while (q.next()) info.ids.append(q.value(0).toLongLong());
    info.index = int(info.ids.indexOf(messageId));
    return info;
}

std::optional<Message> ConversationRepository::userMessageToEdit(qint64 userMessageId) {
    std::optional<Message> original = message(userMessageId);
    if (original && original->role != MessageRole::User) {
        m_connection.fail(tr("Message %1 is not a user message").arg(userMessageId), {});
        return std::nullopt;
    }
    return original;
}

std::optional<qint64> ConversationRepository::editAndResend(qint64 userMessageId, const QString &newContent) {
    const std::optional<Message> original = userMessageToEdit(userMessageId);
    if (!original) return std::nullopt;
    return insertMessage(original->conversationId, original->parentId, MessageRole::User, newContent,
                         MessageState::Complete, {});
}

std::optional<qint64> ConversationRepository::regenerate(qint64 assistantMessageId,
                                                         const GenerationInfo &generation) {
    const std::optional<Message> original = message(assistantMessageId);
    if (!original) return std::nullopt;
    if (original->role != MessageRole::Assistant || !original->parentId) {
        m_connection.fail(tr("Message %1 is not an assistant reply").arg(assistantMessageId), {});
        return std::nullopt;
    }
    return insertMessage(original->conversationId, original->parentId, MessageRole::Assistant, QString(),
                         MessageState::Partial, generation);
}

bool ConversationRepository::deleteMessage(qint64 messageId) {
    if (!m_connection.checkThread()) return false;
    qint64 conversationId = 0;
    {
        StoreTransaction t(m_connection);
        if (!t.ok()) return false;
        const std::optional<Message> m = message(messageId);
        if (!m) return false;
        conversationId = m->conversationId;
        const std::optional<Conversation> c = conversation(conversationId);
        if (!c) return false;
        // Is the active leaf inside the subtree that goes? Then the branch moves: to the newest
        // remaining sibling's branch, else to the parent, else the conversation is empty.
        bool leafGoes = false;
        if (c->currentLeafId)
            for (const Message &onPath : pathTo(*c->currentLeafId))
                if (onPath.id == messageId) leafGoes = true;
        QSqlQuery q(m_connection.db());
        // The subtree goes with it (parent_id ON DELETE CASCADE), with its metrics, routing and
        // profiles; the FTS triggers fire.
        if (!run(q, QStringLiteral("DELETE FROM messages WHERE id = ?"), {messageId}))
            return m_connection.fail(tr("Could not delete message %1").arg(messageId), q.lastError().text());
        if (leafGoes) {
            std::optional<qint64> leaf = m->parentId;
            if (!run(q,
                     QStringLiteral("SELECT max(id) FROM messages WHERE conversation_id = ? AND parent_id IS ?"),
                     {conversationId, nullable(m->parentId)}) ||
                !q.next())
                return m_connection.fail(tr("Could not delete message %1").arg(messageId), q.lastError().text());
            if (!q.value(0).isNull()) {
                leaf = q.value(0).toLongLong();
                for (;;) { // the sibling's newest branch, as selectBranch follows it
                    if (!run(q, QStringLiteral("SELECT max(id) FROM messages WHERE parent_id = ?"), {*leaf}) ||
                        !q.next())
                        return m_connection.fail(tr("Could not delete message %1").arg(messageId),
                                                 q.lastError().text());
                    if (q.value(0).isNull()) break;
                    leaf = q.value(0).toLongLong();
                }
            }
            if (!run(q, QStringLiteral("UPDATE conversations SET current_leaf_id = ? WHERE id = ?"),
                     {nullable(leaf), conversationId}))
                return m_connection.fail(tr("Could not delete message %1").arg(messageId), q.lastError().text());
        }
        if (!touchConversation(conversationId) || !t.commit()) return false;
    }
    m_connection.notifyMessagesChanged(conversationId);
    m_connection.notifyConversationsChanged();
    return true;
}

// ---- Turns ------------------------------------------------------------------------------------------------

std::optional<TurnIds> ConversationRepository::insertTurnRows(qint64 conversationId,
                                                              std::optional<qint64> parentId,
                                                              const QString &text,
                                                              const GenerationInfo &reply) {
    TurnIds ids;
    ids.conversationId = conversationId;
    const std::optional<qint64> user =
        insertMessageRow(conversationId, parentId, MessageRole::User, text, MessageState::Complete, {});
    if (!user) return std::nullopt;
    ids.userMessageId = *user;
    const std::optional<qint64> partial = insertMessageRow(conversationId, *user, MessageRole::Assistant,
                                                           QString(), MessageState::Partial, reply);
    if (!partial) return std::nullopt;
    ids.replyId = *partial;
    return ids;
}

std::optional<TurnIds> ConversationRepository::beginTurn(std::optional<qint64> conversationId,
                                                         const NewConversation &create,
                                                         std::optional<qint64> parentId, const QString &text,
                                                         const GenerationInfo &reply) {
    if (!m_connection.checkThread()) return std::nullopt;
    std::optional<TurnIds> ids;
    {
        StoreTransaction t(m_connection);
        if (!t.ok()) return std::nullopt;
        if (!conversationId) conversationId = insertConversationRow(create);
        if (!conversationId) return std::nullopt;
        ids = insertTurnRows(*conversationId, parentId, text, reply);
        if (!ids || !t.commit()) return std::nullopt;
    }
    m_connection.notifyMessagesChanged(ids->conversationId);
    m_connection.notifyConversationsChanged();
    return ids;
}

std::optional<TurnIds> ConversationRepository::beginEditedTurn(qint64 userMessageId,
                                                               const QString &newContent,
                                                               const GenerationInfo &reply) {
    const std::optional<Message> original = userMessageToEdit(userMessageId);
    if (!original) return std::nullopt;
    return beginTurn(original->conversationId, {}, original->parentId, newContent, reply);
}

// ---- Streaming replies -----------------------------------------------------------------------------------

std::optional<qint64> ConversationRepository::beginPartialReply(qint64 conversationId, qint64 parentId,
                                                                const GenerationInfo &generation) {
    if (!m_connection.checkThread()) return std::nullopt;
    return insertMessage(conversationId, parentId, MessageRole::Assistant, QString(), MessageState::Partial,
                         generation);
}

bool ConversationRepository::updatePartialReply(qint64 messageId, const QString &text) {
    if (!m_connection.checkThread()) return false;
    QSqlQuery q(m_connection.db());
    if (!run(q, QStringLiteral("UPDATE messages SET content = ? WHERE id = ? AND state = 'partial'"),
             {text, messageId}))
        return m_connection.fail(tr("Could not save the reply so far"), q.lastError().text());
    if (q.numRowsAffected() != 1)
        return m_connection.fail(tr("Message %1 is not a reply in progress").arg(messageId), {});
    return true;
}

bool ConversationRepository::reopenReply(qint64 messageId) {
    if (!m_connection.checkThread()) return false;
    const std::optional<Message> m = message(messageId);
    if (!m) return false;
    if (m->role != MessageRole::Assistant || m->state != MessageState::Complete)
        return m_connection.fail(tr("Message %1 is not a finished reply, so it cannot be continued").arg(messageId), {});
    QSqlQuery q(m_connection.db());
    // Back to 'partial': the text leaves the search index until the reply ends again (FTS triggers),
    // and a crash meanwhile marks it interrupted with what it had.
    if (!run(q, QStringLiteral("UPDATE messages SET state = 'partial', finish_reason = '' WHERE id = ? AND state = 'complete'"),
             {messageId}))
        return m_connection.fail(tr("Could not continue reply %1").arg(messageId), q.lastError().text());
    if (q.numRowsAffected() != 1) return m_connection.fail(tr("Message %1 is not a finished reply").arg(messageId), {});
    m_connection.notifyMessagesChanged(m->conversationId);
    return true;
}

bool ConversationRepository::setDroppedMessages(qint64 messageId, int dropped) {
    if (!m_connection.checkThread()) return false;
    QSqlQuery q(m_connection.db());
    if (!run(q, QStringLiteral("UPDATE messages SET dropped_messages = ? WHERE id = ?"), {dropped, messageId}))
        return m_connection.fail(tr("Could not save reply %1").arg(messageId), q.lastError().text());
    if (q.numRowsAffected() != 1) return m_connection.fail(tr("There is no message %1").arg(messageId), {});
    return true;
}

bool ConversationRepository::endPartialReply(qint64 messageId, const QString &text, MessageState state,
                                             const QString &finishReason, const MessageMetrics *metrics,
                                             const QList<LayerRouting> *routing,
                                             const MessageProfile *profile) {
    if (!m_connection.checkThread()) return false;
    qint64 conversationId = 0;
    {
        StoreTransaction t(m_connection);
        if (!t.ok()) return false;
        const std::optional<qint64> owner = conversationOf(m_connection, messageId);
        if (!owner) return false;
        conversationId = *owner;
        QSqlQuery q(m_connection.db());
        if (!run(q,
                 QStringLiteral("UPDATE messages SET content = ?, state = ?, finish_reason = ? "
                                "WHERE id = ? AND state = 'partial'"),
                 {text, messageStateName(state), finishReason, messageId}))
            return m_connection.fail(tr("Could not save reply %1").arg(messageId), q.lastError().text());
        if (q.numRowsAffected() != 1)
            return m_connection.fail(tr("Message %1 is not a reply in progress").arg(messageId), {});
        if (metrics) {
            const MessageMetrics &mm = *metrics;
            if (!run(q,
                     QStringLiteral(
                         "INSERT OR REPLACE INTO message_metrics (message_id, ttft_ms, n_prompt_tokens, "
                         "n_output_tokens, prefill_tok_s, decode_tok_s, itl_ms, token_times_ms, "
                         "stop_reason, peak_memory_bytes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"),
                     {messageId, nullable(mm.ttftMs), nullable(mm.nPromptTokens), nullable(mm.nOutputTokens),
                      nullable(mm.prefillTokS), nullable(mm.decodeTokS), encodeFloat32(mm.itlMs),
                      encodeFloat32(mm.tokenTimesMs), mm.stopReason, nullable(mm.peakMemoryBytes)}))
                return m_connection.fail(tr("Could not save the metrics of reply %1").arg(messageId),
                                         q.lastError().text());
        }
        if (routing) {
            if (!run(q, QStringLiteral("DELETE FROM message_routing WHERE message_id = ?"), {messageId}))
                return m_connection.fail(tr("Could not save the routing of reply %1").arg(messageId),
                                         q.lastError().text());
            for (const LayerRouting &r : *routing) {
                if (!run(q,
                         QStringLiteral("INSERT INTO message_routing (message_id, layer, expert_counts) "
                                        "VALUES (?, ?, ?)"),
                         {messageId, r.layer, encodeUInt32(r.expertCounts)}))
                    return m_connection.fail(tr("Could not save the routing of reply %1").arg(messageId),
                                             q.lastError().text());
            }
        }
        if (profile && !m_profiles.writeProfile(messageId, *profile, !routing || routing->isEmpty()))
            return false;
        if (!touchConversation(conversationId)) return false;
        if (!t.commit()) return false;
    }
    m_connection.notifyMessagesChanged(conversationId);
    m_connection.notifyConversationsChanged();
    return true;
}

int ConversationRepository::recoverPartialReplies() {
    if (!m_connection.checkThread()) return -1;
    QSet<qint64> touched;
    int n = 0;
    {
        StoreTransaction t(m_connection);
        if (!t.ok()) return -1;
        QSqlQuery q(m_connection.db());
        if (!run(q,
                 QStringLiteral("SELECT DISTINCT conversation_id FROM messages WHERE state = 'partial'"))) {
            m_connection.fail(tr("Could not look for interrupted replies"), q.lastError().text());
            return -1;
        }
        while (q.next()) touched.insert(q.value(0).toLongLong());
        // Leaving 'partial' adds the text to the search index (see the FTS triggers).
        if (!run(q, QStringLiteral("UPDATE messages SET state = 'failed', finish_reason = 'interrupted' "
                                   "WHERE state = 'partial'"))) {
            m_connection.fail(tr("Could not mark interrupted replies"), q.lastError().text());
            return -1;
        }
        n = q.numRowsAffected();
        if (!t.commit()) return -1;
    }
    for (qint64 id : std::as_const(touched)) m_connection.notifyMessagesChanged(id);
    if (n > 0) m_connection.notifyConversationsChanged();
    return n;
}

} // namespace es
