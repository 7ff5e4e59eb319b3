// Conversation export and import. Markdown: the active branch, speaker labels and timestamps,
// for reading. JSON (format "expertscope.conversation" v1, docs/schemas/
// expertscope-conversation-v1.schema.json): the whole message tree with metrics, routing and
// profiles, ids renumbered 1..n in tree order so an export → import → export round trip is
// byte-identical. Exports stream one message at a time from the store (bounded memory whatever
// the conversation's length), report progress and can be cancelled; files are written
// atomically. Call on the store's thread.
#pragma once

#include "report_data.h"

#include <QByteArray>
#include <QIODevice>

#include <optional>

namespace es {
class ChatStore;
}

namespace es::report {

bool writeConversationMarkdown(const ChatStore &store, qint64 conversationId, QIODevice &out, QString *error,
                               const ProgressFn &progress = {});
bool writeConversationJson(const ChatStore &store, qint64 conversationId, QIODevice &out, QString *error,
                           const ProgressFn &progress = {});
// Whole-file helpers (QSaveFile): a failed or cancelled export leaves any older file as it was.
bool exportConversationMarkdown(const ChatStore &store, qint64 conversationId, const QString &path,
                                QString *error, const ProgressFn &progress = {});
bool exportConversationJson(const ChatStore &store, qint64 conversationId, const QString &path,
                            QString *error, const ProgressFn &progress = {});

// Parses and checks an exported conversation (format, version, every field's type, parents before
// children, the current leaf among the messages); nullopt with a sentence naming the first problem.
std::optional<ConversationSnapshot> parseConversationJson(const QByteArray &json, QString *error);
// Parses and adds the conversation under new ids; returns its id.
std::optional<qint64> importConversationJson(ChatStore &store, const QByteArray &json, QString *error);

} // namespace es::report
