// ProfileRepository: what was measured per message: metrics (message_metrics), routing counts
// (message_routing) and the reply's profile (message_profiles, schema v4; steps and memory
// samples since v5).
// Invariants: a profile and its routing counts are written together, in the caller's transaction
// or in one of their own; a row that does not decode reads as no profile, never as wrong numbers.
#pragma once

#include "storage_types.h"

#include <QCoreApplication>

#include <optional>

namespace es {

class StoreConnection;

class ProfileRepository {
    Q_DECLARE_TR_FUNCTIONS(es::ChatStore)
public:
    explicit ProfileRepository(StoreConnection &connection) : m_connection(connection) {}

    std::optional<MessageMetrics> metrics(qint64 messageId) const;
    QList<LayerRouting> routing(qint64 messageId) const;
    // Stores (replacing) a message's profile and its routing counts, in one transaction.
    bool saveProfile(qint64 messageId, const MessageProfile &profile);
    // The stored profile, routing counts included; nullopt when there is none or its row cannot
    // be decoded (lastError says so).
    std::optional<MessageProfile> profile(qint64 messageId) const;
    // Inside the caller's transaction: replaces the profile row and, when writeRouting is set,
    // the message's routing rows with profile.routing.
    bool writeProfile(qint64 messageId, const MessageProfile &profile, bool writeRouting);

private:
    StoreConnection &m_connection;
};

} // namespace es
