// PresetRepository: the presets table: the built-in mode prefixes (their text owned by presets.cpp,
// their position by the user) and the user's own presets, with reordering and JSON exchange.
// Invariants: built-ins are read-only here (refreshBuiltinPresets rewrites their text only);
// positions list every preset once; an import skips presets identical to existing ones.
#pragma once

#include "storage_types.h"

#include <QByteArray>
#include <QCoreApplication>

#include <optional>

namespace es {

class StoreConnection;

class PresetRepository {
    Q_DECLARE_TR_FUNCTIONS(es::ChatStore)
public:
    explicit PresetRepository(StoreConnection &connection) : m_connection(connection) {}

    // Built-ins are owned by the code: their text is refreshed at every open (so a new release's
    // wording reaches existing users), their position is the user's. Missing ones are appended.
    bool refreshBuiltinPresets();
    QList<Preset> presets() const; // by position
    std::optional<Preset> preset(qint64 id) const;
    std::optional<qint64> createPreset(const Preset &preset);
    bool updatePreset(const Preset &preset);
    bool deletePreset(qint64 id);
    bool reorderPresets(const QList<qint64> &orderedIds);
    QByteArray exportPresets(const QList<qint64> &ids) const;
    std::optional<PresetImportResult> importPresets(const QByteArray &json);

private:
    StoreConnection &m_connection;
};

} // namespace es
