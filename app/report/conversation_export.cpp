// Conversation export/import (see conversation_export.h). The JSON is written by hand around
// per-message QJsonDocuments so that only one message is in memory at a time; Qt writes object
// keys sorted and doubles in their shortest exact form, which makes the output deterministic.
#include "conversation_export.h"
#include "es_build_info.h"

#include "chat_store.h"
#include "markdown_text.h"
#include "report_writers.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QRegularExpression>

namespace es::report {

namespace {

constexpr int kFormatVersion = 1;

QString isoTime(const QDateTime &t) { return t.toUTC().toString(Qt::ISODateWithMs); }

std::optional<QDateTime> parseTime(const QJsonValue &v) {
    if (!v.isString()) return std::nullopt;
    QDateTime t = QDateTime::fromString(v.toString(), Qt::ISODateWithMs);
    if (!t.isValid()) return std::nullopt;
    return t.toUTC();
}

QJsonValue seedJson(const std::optional<quint64> &s) {
    if (!s) return QJsonValue(QJsonValue::Null);
    if (*s <= (quint64(1) << 53)) return QJsonValue(qint64(*s));
    return QString::number(*s);
}

bool put(QIODevice &out, const QByteArray &b, QString *error) {
    if (out.write(b) == b.size()) return true;
    *error = QStringLiteral("Could not write the export: %1").arg(out.errorString());
    return false;
}

bool cancelled(const ProgressFn &progress, qint64 done, qint64 total, QString *error) {
    if (!progress || progress(done, total)) return false;
    *error = QStringLiteral("Cancelled");
    return true;
}

// The active branch's ids, root first, walking parents from the leaf (one row at a time).
std::optional<QList<qint64>> activeBranchIds(const ChatStore &store, const Conversation &c, QString *error) {
    QList<qint64> ids;
    std::optional<qint64> at = c.currentLeafId;
    while (at) {
        const std::optional<Message> m = store.message(*at);
        if (!m) {
            *error = QStringLiteral("Message %1 of conversation %2 could not be read: %3")
                         .arg(*at)
                         .arg(c.id)
                         .arg(store.lastError());
            return std::nullopt;
        }
        ids.prepend(m->id);
        at = m->parentId;
        if (ids.size() > 10'000'000) break; // a cycle cannot exist (ids grow), but never loop forever
    }
    return ids;
}

// Where a lone surrogate is, in the words of the other refusals: "Message 3 of the file: …".
QString loneSurrogateError(const LoneSurrogate &s) {
    const QString what =
        QStringLiteral("holds a lone UTF-16 surrogate (\\u%1), which is not text (an export never has one)")
            .arg(s.unit, 4, 16, QLatin1Char('0'));
    if (s.path.isEmpty() && s.byteOffset >= 0)
        return QStringLiteral("The file %1 at byte %2").arg(what).arg(s.byteOffset);
    auto place = [&](const QString &field) {
        if (s.inKey)
            return field.isEmpty() ? QStringLiteral("a key") : QStringLiteral("a key of \"%1\"").arg(field);
        return field.isEmpty() ? QStringLiteral("the value") : QStringLiteral("\"%1\"").arg(field);
    };
    static const QRegularExpression message(QStringLiteral("^messages\\[(\\d+)\\](?:\\.(.*))?$"));
    static const QRegularExpression conversation(QStringLiteral("^conversation(?:\\.(.*))?$"));
    if (const QRegularExpressionMatch m = message.match(s.path); m.hasMatch())
        return QStringLiteral("Message %1 of the file: %2 %3")
            .arg(m.captured(1).toLongLong() + 1)
            .arg(place(m.captured(2)), what);
    if (const QRegularExpressionMatch m = conversation.match(s.path); m.hasMatch())
        return QStringLiteral("The conversation's %1 %2").arg(place(m.captured(1)), what);
    return QStringLiteral("The file's %1 %2").arg(place(s.path), what);
}

} // namespace

bool writeConversationMarkdown(const ChatStore &store, qint64 conversationId, QIODevice &out, QString *error,
                               const ProgressFn &progress) {
    const std::optional<Conversation> c = store.conversation(conversationId);
    if (!c) {
        *error = QStringLiteral("There is no conversation %1 in %2").arg(conversationId).arg(store.path());
        return false;
    }
    const std::optional<QList<qint64>> ids = activeBranchIds(store, *c, error);
    if (!ids) return false;
    // Every text from the store goes in inert (markdown_text.h): it renders as written, but a
    // viewer that renders HTML finds none in it; the title stays one heading line.
    const QString title = inertMarkdownLine(c->title);
    QByteArray head =
        QStringLiteral("# %1\n\n_Exported from ExpertScope %2 · created %3 UTC · %4 messages on the "
                       "active branch_\n\n")
            .arg(title.isEmpty() ? QStringLiteral("Untitled conversation") : title,
                 QStringLiteral(ES_VERSION),
                 c->createdAt.toUTC().toString(QStringLiteral("yyyy-MM-dd HH:mm")))
            .arg(ids->size())
            .toUtf8();
    if (!put(out, head, error)) return false;
    for (qsizetype i = 0; i < ids->size(); ++i) {
        if (cancelled(progress, i, ids->size(), error)) return false;
        const std::optional<Message> m = store.message(ids->at(i));
        if (!m) {
            *error =
                QStringLiteral("Message %1 could not be read: %2").arg(ids->at(i)).arg(store.lastError());
            return false;
        }
        const QString who = m->role == MessageRole::User        ? QStringLiteral("User")
                            : m->role == MessageRole::Assistant ? QStringLiteral("Assistant")
                                                                : QStringLiteral("System");
        QString line = QStringLiteral("### %1 · %2 UTC")
                           .arg(who, m->createdAt.toUTC().toString(QStringLiteral("yyyy-MM-dd HH:mm:ss")));
        if (m->role == MessageRole::Assistant && !m->generation.modelName.isEmpty())
            line += QStringLiteral(" · %1").arg(inertMarkdownLine(m->generation.modelName));
        if (m->state != MessageState::Complete ||
            (!m->finishReason.isEmpty() && m->finishReason != QLatin1String("stop")))
            line += QStringLiteral(" · %1").arg(
                m->finishReason.isEmpty() ? messageStateName(m->state) : inertMarkdownLine(m->finishReason));
        const QString block =
            line + QStringLiteral("\n\n") + inertMarkdown(m->content) + QStringLiteral("\n\n");
        if (!put(out, block.toUtf8(), error)) return false;
    }
    if (progress) progress(ids->size(), ids->size());
    return true;
}

bool writeConversationJson(const ChatStore &store, qint64 conversationId, QIODevice &out, QString *error,
                           const ProgressFn &progress) {
    const std::optional<Conversation> c = store.conversation(conversationId);
    if (!c) {
        *error = QStringLiteral("There is no conversation %1 in %2").arg(conversationId).arg(store.path());
        return false;
    }
    const qint64 total = store.messageCount(conversationId);
    QHash<qint64, qint64> local; // store id → exported id (1..n in id order)
    local.reserve(total);
    // The leaf is known only as a store id: its exported number is its rank among the ids, counted
    // in the same pass; it goes after the messages (readers take keys in any order).
    qint64 n = 0;
    if (!put(out,
             QByteArrayLiteral("{\"format\":\"expertscope.conversation\",\"version\":1,\"messages\":[\n"),
             error))
        return false;
    bool writeOk = true;
    const bool ok = store.forEachMessage(conversationId, [&](const Message &m) {
        if (cancelled(progress, n, total, error)) return writeOk = false;
        local.insert(m.id, ++n);
        QJsonObject o{{QStringLiteral("id"), n},
                      {QStringLiteral("parent"),
                       m.parentId ? QJsonValue(local.value(*m.parentId)) : QJsonValue(QJsonValue::Null)},
                      {QStringLiteral("role"), messageRoleName(m.role)},
                      {QStringLiteral("content"), m.content},
                      {QStringLiteral("created_at"), isoTime(m.createdAt)},
                      {QStringLiteral("state"), messageStateName(m.state)},
                      {QStringLiteral("finish_reason"), m.finishReason}};
        if (m.droppedMessages > 0) o.insert(QStringLiteral("dropped_messages"), m.droppedMessages);
        if (m.parentId && !local.contains(*m.parentId)) {
            *error = QStringLiteral("Message %1's parent %2 is not in the conversation")
                         .arg(m.id)
                         .arg(*m.parentId);
            return writeOk = false;
        }
        if (m.role == MessageRole::Assistant || m.generation != GenerationInfo{})
            o.insert(QStringLiteral("generation"),
                     QJsonObject{{QStringLiteral("model_name"), m.generation.modelName},
                                 {QStringLiteral("model_hash"), m.generation.modelHash},
                                 {QStringLiteral("precision"), m.generation.precision},
                                 {QStringLiteral("sampling"), m.generation.sampling.toJson()},
                                 {QStringLiteral("seed"), seedJson(m.generation.seed)}});
        if (const std::optional<MessageMetrics> mm = store.metrics(m.id))
            o.insert(QStringLiteral("metrics"), metricsToJson(*mm));
        // Bounded as every reader of a stored profile bounds it (an older build's or a hand-edited
        // row), so the file imports again; a consistent profile is written as it is. Its routing
        // counts go with it.
        if (const std::optional<MessageProfile> p = store.profile(m.id)) {
            o.insert(QStringLiteral("profile"), profileToJson(boundedProfile(*p)));
        } else {
            MessageProfile routingOnly;
            routingOnly.routing = store.routing(m.id);
            QJsonArray r;
            for (const LayerRouting &lr : boundedProfile(routingOnly).routing) {
                QJsonArray counts;
                for (quint32 x : lr.expertCounts) counts.append(qint64(x));
                r.append(QJsonObject{{QStringLiteral("layer"), lr.layer},
                                     {QStringLiteral("expert_counts"), counts}});
            }
            if (!r.isEmpty()) o.insert(QStringLiteral("routing"), r);
        }
        QByteArray line = QJsonDocument(o).toJson(QJsonDocument::Compact);
        if (n > 1) line.prepend(",\n");
        return writeOk = put(out, line, error);
    });
    if (!ok || !writeOk) {
        if (error->isEmpty()) *error = store.lastError();
        return false;
    }
    const QJsonObject conv{
        {QStringLiteral("title"), c->title},
        {QStringLiteral("created_at"), isoTime(c->createdAt)},
        {QStringLiteral("updated_at"), isoTime(c->updatedAt)},
        {QStringLiteral("pinned"), c->pinned},
        {QStringLiteral("settings"), c->settings.toJson()},
        {QStringLiteral("system_prompt"), c->systemPrompt},
        {QStringLiteral("overflow_policy"), overflowPolicyName(c->overflowPolicy)},
        {QStringLiteral("current_leaf"), c->currentLeafId && local.contains(*c->currentLeafId)
                                             ? QJsonValue(local.value(*c->currentLeafId))
                                             : QJsonValue(QJsonValue::Null)}};
    if (!put(out,
             QByteArrayLiteral("\n],\"conversation\":") + QJsonDocument(conv).toJson(QJsonDocument::Compact) +
                 QByteArrayLiteral("}\n"),
             error))
        return false;
    if (progress) progress(total, total);
    return true;
}

bool exportConversationMarkdown(const ChatStore &store, qint64 conversationId, const QString &path,
                                QString *error, const ProgressFn &progress) {
    return writeFileAtomically(
        path,
        [&](QIODevice &out, QString *err) {
            return writeConversationMarkdown(store, conversationId, out, err, progress);
        },
        error);
}

bool exportConversationJson(const ChatStore &store, qint64 conversationId, const QString &path,
                            QString *error, const ProgressFn &progress) {
    return writeFileAtomically(
        path,
        [&](QIODevice &out, QString *err) {
            return writeConversationJson(store, conversationId, out, err, progress);
        },
        error);
}

std::optional<ConversationSnapshot> parseConversationJson(const QByteArray &json, QString *error) {
    QJsonParseError pe;
    const QJsonDocument doc = QJsonDocument::fromJson(json, &pe);
    if (pe.error != QJsonParseError::NoError) {
        *error = QStringLiteral("Not valid JSON: %1 at byte %2").arg(pe.errorString()).arg(pe.offset);
        return std::nullopt;
    }
    if (const std::optional<LoneSurrogate> lone = findLoneSurrogate(doc, json)) {
        *error = loneSurrogateError(*lone);
        return std::nullopt;
    }
    const QJsonObject root = doc.object();
    if (root.value(QStringLiteral("format")).toString() != QLatin1String("expertscope.conversation")) {
        *error = QStringLiteral(
            "Not an ExpertScope conversation export (\"format\" is not \"expertscope.conversation\")");
        return std::nullopt;
    }
    const int version = root.value(QStringLiteral("version")).toInt(-1);
    if (version != kFormatVersion) {
        *error =
            QStringLiteral("Conversation export version %1 is not supported (this build reads version %2)")
                .arg(version)
                .arg(kFormatVersion);
        return std::nullopt;
    }
    const QJsonObject conv = root.value(QStringLiteral("conversation")).toObject();
    ConversationSnapshot s;
    s.conversation.title = conv.value(QStringLiteral("title")).toString();
    const auto created = parseTime(conv.value(QStringLiteral("created_at")));
    const auto updated = parseTime(conv.value(QStringLiteral("updated_at")));
    if (!created || !updated) {
        *error = QStringLiteral("The conversation's created_at/updated_at are missing or not ISO 8601 times");
        return std::nullopt;
    }
    s.conversation.createdAt = *created;
    s.conversation.updatedAt = *updated;
    s.conversation.pinned = conv.value(QStringLiteral("pinned")).toBool();
    s.conversation.settings =
        ConversationSettings::fromJson(conv.value(QStringLiteral("settings")).toObject());
    // Files from before these fields existed have neither: no system prompt, the default policy.
    s.conversation.systemPrompt = conv.value(QStringLiteral("system_prompt")).toString();
    if (const QJsonValue p = conv.value(QStringLiteral("overflow_policy")); !p.isUndefined()) {
        const auto policy = overflowPolicyFromString(p.toString());
        if (!policy) {
            *error = QStringLiteral("\"overflow_policy\" is not refuse, drop-oldest or keep-last");
            return std::nullopt;
        }
        s.conversation.overflowPolicy = *policy;
    }
    const QJsonValue leaf = conv.value(QStringLiteral("current_leaf"));
    if (leaf.isDouble())
        s.conversation.currentLeafId = leaf.toInteger();
    else if (!leaf.isNull() && !leaf.isUndefined()) {
        *error = QStringLiteral("\"current_leaf\" is neither a message id nor null");
        return std::nullopt;
    }
    const QJsonValue messages = root.value(QStringLiteral("messages"));
    if (!messages.isArray()) {
        *error = QStringLiteral("\"messages\" is missing or not an array");
        return std::nullopt;
    }
    QSet<qint64> seen;
    qint64 index = 0;
    for (const QJsonValue &v : messages.toArray()) {
        ++index;
        const QJsonObject o = v.toObject();
        auto bad = [&](const QString &what) {
            *error = QStringLiteral("Message %1 of the file: %2").arg(index).arg(what);
            return std::nullopt;
        };
        Message m;
        if (!o.value(QStringLiteral("id")).isDouble()) return bad(QStringLiteral("\"id\" is missing"));
        m.id = o.value(QStringLiteral("id")).toInteger();
        if (seen.contains(m.id)) return bad(QStringLiteral("id %1 is used twice").arg(m.id));
        const QJsonValue parent = o.value(QStringLiteral("parent"));
        if (parent.isDouble()) {
            m.parentId = parent.toInteger();
            if (!seen.contains(*m.parentId))
                return bad(QStringLiteral("its parent %1 does not come before it").arg(*m.parentId));
        } else if (!parent.isNull() && !parent.isUndefined()) {
            return bad(QStringLiteral("\"parent\" is neither an id nor null"));
        }
        const auto role = messageRoleFromString(o.value(QStringLiteral("role")).toString());
        const auto state = messageStateFromString(o.value(QStringLiteral("state")).toString());
        const auto created = parseTime(o.value(QStringLiteral("created_at")));
        if (!role) return bad(QStringLiteral("\"role\" is not system, user or assistant"));
        if (!state) return bad(QStringLiteral("\"state\" is not complete, partial or failed"));
        if (!created) return bad(QStringLiteral("\"created_at\" is not an ISO 8601 time"));
        if (!o.value(QStringLiteral("content")).isString())
            return bad(QStringLiteral("\"content\" is not a string"));
        m.role = *role;
        m.state = *state;
        m.createdAt = *created;
        m.content = o.value(QStringLiteral("content")).toString();
        m.finishReason = o.value(QStringLiteral("finish_reason")).toString();
        if (const QJsonValue d = o.value(QStringLiteral("dropped_messages")); !d.isUndefined()) {
            if (!d.isDouble() || d.toInteger(-1) < 0) return bad(QStringLiteral("\"dropped_messages\" is not a count"));
            m.droppedMessages = int(d.toInteger());
        }
        const QJsonObject g = o.value(QStringLiteral("generation")).toObject();
        m.generation.modelName = g.value(QStringLiteral("model_name")).toString();
        m.generation.modelHash = g.value(QStringLiteral("model_hash")).toString();
        m.generation.precision = g.value(QStringLiteral("precision")).toString();
        m.generation.sampling = SamplingParams::fromJson(g.value(QStringLiteral("sampling")).toObject());
        const QJsonValue seed = g.value(QStringLiteral("seed"));
        if (seed.isDouble())
            m.generation.seed = quint64(seed.toInteger());
        else if (seed.isString()) {
            bool ok = false;
            m.generation.seed = seed.toString().toULongLong(&ok);
            if (!ok) return bad(QStringLiteral("\"seed\" is not a number"));
        }
        QString why;
        if (o.contains(QStringLiteral("metrics"))) {
            const auto mm = metricsFromJson(o.value(QStringLiteral("metrics")).toObject(), &why);
            if (!mm) return bad(QStringLiteral("metrics: ") + why);
            s.metrics.insert(m.id, *mm);
        }
        if (o.contains(QStringLiteral("profile"))) {
            const auto p = profileFromJson(o.value(QStringLiteral("profile")).toObject(), &why);
            if (!p) return bad(QStringLiteral("profile: ") + why);
            s.profiles.insert(m.id, *p);
            if (!p->routing.isEmpty()) s.routing.insert(m.id, p->routing);
        } else if (o.contains(QStringLiteral("routing"))) {
            // the profile reader checks the routing array the same way
            const auto p = profileFromJson(
                QJsonObject{{QStringLiteral("routing"), o.value(QStringLiteral("routing"))}}, &why);
            if (!p) return bad(QStringLiteral("routing: ") + why);
            s.routing.insert(m.id, p->routing);
        }
        seen.insert(m.id);
        s.messages.append(m);
    }
    if (s.conversation.currentLeafId && !seen.contains(*s.conversation.currentLeafId)) {
        *error = QStringLiteral("\"current_leaf\" %1 is not one of the messages")
                     .arg(*s.conversation.currentLeafId);
        return std::nullopt;
    }
    return s;
}

std::optional<qint64> importConversationJson(ChatStore &store, const QByteArray &json, QString *error) {
    const std::optional<ConversationSnapshot> s = parseConversationJson(json, error);
    if (!s) return std::nullopt;
    const std::optional<qint64> id = store.importConversation(*s);
    if (!id) *error = store.lastError();
    return id;
}

} // namespace es::report
