// The shared SQL helpers (store_sql.h): binding, the row readers, the message → conversation lookup.
#include "store_sql.h"

#include "store_connection.h"

#include <QSqlError>

namespace es {

bool run(QSqlQuery &q, const QString &sql, const QVariantList &values) {
    if (!q.prepare(sql)) return false;
    for (const QVariant &v : values) {
        if (v.typeId() == QMetaType::QString && v.toString().isNull())
            q.addBindValue(QStringLiteral(""));
        else
            q.addBindValue(v);
    }
    return q.exec();
}

Conversation readConversation(const QSqlQuery &q) {
    Conversation c;
    c.id = q.value(0).toLongLong();
    c.title = q.value(1).toString();
    c.createdAt = fromMs(q.value(2));
    c.updatedAt = fromMs(q.value(3));
    c.pinned = q.value(4).toInt() != 0;
    c.currentLeafId = optionalValue<qint64>(q.value(5));
    c.settings = ConversationSettings::fromJson(jsonObject(q.value(6)));
    c.systemPrompt = q.value(7).toString();
    c.overflowPolicy = overflowPolicyFromString(q.value(8).toString()).value_or(OverflowPolicy::KeepSystemAndLast);
    return c;
}

Message readMessage(const QSqlQuery &q) {
    Message m;
    m.id = q.value(0).toLongLong();
    m.conversationId = q.value(1).toLongLong();
    m.parentId = optionalValue<qint64>(q.value(2));
    m.role = messageRoleFromString(q.value(3).toString()).value_or(MessageRole::User);
    m.content = q.value(4).toString();
    m.createdAt = fromMs(q.value(5));
    m.state = messageStateFromString(q.value(6).toString()).value_or(MessageState::Failed);
    m.finishReason = q.value(7).toString();
    m.generation.modelName = q.value(8).toString();
    m.generation.modelHash = q.value(9).toString();
    m.generation.precision = q.value(10).toString();
    m.generation.sampling = SamplingParams::fromJson(jsonObject(q.value(11)));
    if (!q.value(12).isNull()) m.generation.seed = quint64(q.value(12).toLongLong());
    m.droppedMessages = q.value(13).toInt();
    return m;
}

std::optional<qint64> conversationOf(const StoreConnection &connection, qint64 messageId) {
    QSqlQuery q(connection.db());
    if (!run(q, QStringLiteral("SELECT conversation_id FROM messages WHERE id = ?"), {messageId}) ||
        !q.next()) {
        connection.fail(StoreConnection::tr("There is no message %1").arg(messageId), q.lastError().text());
        return std::nullopt;
    }
    return q.value(0).toLongLong();
}

} // namespace es
