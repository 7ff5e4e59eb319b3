// The SQL helpers the repositories share: the prepare-bind-exec call, the conversions between
// value types and columns, and the row readers with their column lists.
// Invariant: a SELECT that builds a Conversation or a Message names kConversationColumns or
// kMessageColumns, in that order, and reads the row with readConversation or readMessage.
// Internal to es_storage.
#pragma once

#include "storage_types.h"

#include <QDateTime>
#include <QJsonDocument>
#include <QSqlQuery>
#include <QVariant>

#include <optional>

namespace es {

class StoreConnection;

inline constexpr QLatin1String kConversationColumns("c.id, c.title, c.created_at, c.updated_at, c.pinned, "
                                                    "c.current_leaf_id, c.settings, c.system_prompt, "
                                                    "c.overflow_policy");
inline constexpr QLatin1String kMessageColumns("m.id, m.conversation_id, m.parent_id, m.role, m.content, "
                                               "m.created_at, m.state, m.finish_reason, m.model_name, "
                                               "m.model_hash, m.precision, m.sampling, m.seed, "
                                               "m.dropped_messages");

// Prepares sql, binds values in order and executes; on failure the query's lastError() tells.
// A null QString binds as SQL NULL in Qt SQL; text columns are NOT NULL, so it becomes ''.
// (Nullable columns are bound from std::optional through nullable(), never from a QString.)
bool run(QSqlQuery &q, const QString &sql, const QVariantList &values = {});

inline QVariant nullable(const std::optional<qint64> &v) { return v ? QVariant(*v) : QVariant(); }
inline QVariant nullable(const std::optional<int> &v) { return v ? QVariant(*v) : QVariant(); }
inline QVariant nullable(const std::optional<double> &v) { return v ? QVariant(*v) : QVariant(); }
inline QVariant seedVariant(const std::optional<quint64> &v) { return v ? QVariant(qint64(*v)) : QVariant(); }

inline QString jsonText(const QJsonObject &o) {
    return QString::fromUtf8(QJsonDocument(o).toJson(QJsonDocument::Compact));
}
inline QJsonObject jsonObject(const QVariant &v) {
    return QJsonDocument::fromJson(v.toString().toUtf8()).object();
}

inline QDateTime fromMs(const QVariant &v) { return QDateTime::fromMSecsSinceEpoch(v.toLongLong(), Qt::UTC); }

template <typename T>
std::optional<T> optionalValue(const QVariant &v) {
    if (v.isNull()) return std::nullopt;
    return v.value<T>();
}

Conversation readConversation(const QSqlQuery &q);
Message readMessage(const QSqlQuery &q);

// The conversation a message belongs to; nullopt (with lastError set) when there is no such message.
std::optional<qint64> conversationOf(const StoreConnection &connection, qint64 messageId);

} // namespace es
