// PresetRepository: reads and writes the presets table; the exchange format itself is presets.cpp's.
#include "preset_repository.h"

#include "presets.h"
#include "store_connection.h"
#include "store_sql.h"

#include <QSet>
#include <QSqlError>

#include <algorithm>

namespace es {

namespace {

const QLatin1String kPresetColumns("id, name, prefix, system_prompt, sampling, position, builtin_key");

Preset readPreset(const QSqlQuery &q) {
    Preset p;
    p.id = q.value(0).toLongLong();
    p.name = q.value(1).toString();
    p.prefix = q.value(2).toString();
    p.systemPrompt = q.value(3).toString();
    p.sampling = SamplingParams::fromJson(jsonObject(q.value(4)));
    p.position = q.value(5).toInt();
    p.builtinKey = q.value(6).toString();
    return p;
}

} // namespace

bool PresetRepository::refreshBuiltinPresets() {
    StoreTransaction t(m_connection);
    if (!t.ok()) return false;
    bool changed = false;
    for (const Preset &p : builtinPresets()) {
        QSqlQuery q(m_connection.db());
        const QVariantList values = {p.name, p.prefix, p.systemPrompt, jsonText(p.sampling.toJson()),
                                     p.builtinKey};
        if (!run(q,
                 QStringLiteral("UPDATE presets SET name = ?, prefix = ?, system_prompt = ?, sampling = ? "
                                "WHERE builtin_key = ?"),
                 values))
            return m_connection.fail(tr("Could not update a built-in preset"), q.lastError().text());
        if (q.numRowsAffected() == 1) continue;
        if (!run(q,
                 QStringLiteral(
                     "INSERT INTO presets (name, prefix, system_prompt, sampling, builtin_key, position) "
                     "VALUES (?, ?, ?, ?, ?, (SELECT coalesce(max(position) + 1, 0) FROM presets))"),
                 values))
            return m_connection.fail(tr("Could not add a built-in preset"), q.lastError().text());
        changed = true;
    }
    if (!t.commit()) return false;
    if (changed) m_connection.notifyPresetsChanged();
    return true;
}

QList<Preset> PresetRepository::presets() const {
    QList<Preset> out;
    if (!m_connection.checkThread()) return out;
    QSqlQuery q(m_connection.db());
    if (!run(q, QStringLiteral("SELECT %1 FROM presets ORDER BY position, id").arg(kPresetColumns))) {
        m_connection.fail(tr("Could not read the presets"), q.lastError().text());
        return out;
    }
    while (q.next()) out.append(readPreset(q));
    return out;
}

std::optional<Preset> PresetRepository::preset(qint64 id) const {
    if (!m_connection.checkThread()) return std::nullopt;
    QSqlQuery q(m_connection.db());
    if (!run(q, QStringLiteral("SELECT %1 FROM presets WHERE id = ?").arg(kPresetColumns), {id}) ||
        !q.next()) {
        m_connection.fail(tr("There is no preset %1").arg(id), q.lastError().text());
        return std::nullopt;
    }
    return readPreset(q);
}

std::optional<qint64> PresetRepository::createPreset(const Preset &p) {
    if (!m_connection.checkThread()) return std::nullopt;
    if (p.name.trimmed().isEmpty()) {
        m_connection.fail(tr("A preset needs a name"), {});
        return std::nullopt;
    }
    QSqlQuery q(m_connection.db());
    if (!run(q,
             QStringLiteral("INSERT INTO presets (name, prefix, system_prompt, sampling, position) "
                            "VALUES (?, ?, ?, ?, (SELECT coalesce(max(position) + 1, 0) FROM presets))"),
             {p.name, p.prefix, p.systemPrompt, jsonText(p.sampling.toJson())})) {
        m_connection.fail(tr("Could not add preset %1").arg(p.name), q.lastError().text());
        return std::nullopt;
    }
    const qint64 id = q.lastInsertId().toLongLong();
    m_connection.notifyPresetsChanged();
    return id;
}

bool PresetRepository::updatePreset(const Preset &p) {
    if (!m_connection.checkThread()) return false;
    if (p.name.trimmed().isEmpty()) return m_connection.fail(tr("A preset needs a name"), {});
    QSqlQuery q(m_connection.db());
    if (!run(q,
             QStringLiteral("UPDATE presets SET name = ?, prefix = ?, system_prompt = ?, sampling = ? "
                            "WHERE id = ? AND builtin_key IS NULL"),
             {p.name, p.prefix, p.systemPrompt, jsonText(p.sampling.toJson()), p.id}))
        return m_connection.fail(tr("Could not save preset %1").arg(p.name), q.lastError().text());
    if (q.numRowsAffected() != 1)
        return m_connection.fail(
            tr("Preset %1 does not exist or is built in (built-in presets cannot be changed; duplicate "
               "one instead)")
                .arg(p.id),
            {});
    m_connection.notifyPresetsChanged();
    return true;
}

bool PresetRepository::deletePreset(qint64 id) {
    if (!m_connection.checkThread()) return false;
    QSqlQuery q(m_connection.db());
    if (!run(q, QStringLiteral("DELETE FROM presets WHERE id = ? AND builtin_key IS NULL"), {id}))
        return m_connection.fail(tr("Could not delete preset %1").arg(id), q.lastError().text());
    if (q.numRowsAffected() != 1)
        return m_connection.fail(
            tr("Preset %1 does not exist or is built in (built-in presets cannot be deleted)").arg(id), {});
    m_connection.notifyPresetsChanged();
    return true;
}

bool PresetRepository::reorderPresets(const QList<qint64> &orderedIds) {
    if (!m_connection.checkThread()) return false;
    {
        StoreTransaction t(m_connection);
        if (!t.ok()) return false;
        QSet<qint64> existing;
        for (const Preset &p : presets()) existing.insert(p.id);
        const QSet<qint64> given(orderedIds.cbegin(), orderedIds.cend());
        if (given != existing || qsizetype(given.size()) != orderedIds.size())
            return m_connection.fail(tr("The new preset order must list every preset exactly once"), {});
        QSqlQuery q(m_connection.db());
        for (qsizetype i = 0; i < orderedIds.size(); ++i) {
            if (!run(q, QStringLiteral("UPDATE presets SET position = ? WHERE id = ?"),
                     {int(i), orderedIds[i]}))
                return m_connection.fail(tr("Could not reorder the presets"), q.lastError().text());
        }
        if (!t.commit()) return false;
    }
    m_connection.notifyPresetsChanged();
    return true;
}

QByteArray PresetRepository::exportPresets(const QList<qint64> &ids) const {
    QList<Preset> chosen;
    for (const Preset &p : presets())
        if (ids.isEmpty() || ids.contains(p.id)) chosen.append(p);
    return exportPresetsJson(chosen);
}

std::optional<PresetImportResult> PresetRepository::importPresets(const QByteArray &json) {
    if (!m_connection.checkThread()) return std::nullopt;
    QString error;
    const std::optional<QList<Preset>> parsed = parsePresetsJson(json, &error);
    if (!parsed) {
        m_connection.fail(tr("Could not import presets"), error);
        return std::nullopt;
    }
    PresetImportResult result;
    {
        StoreTransaction t(m_connection);
        if (!t.ok()) return std::nullopt;
        QList<Preset> known = presets();
        auto sameContent = [](const Preset &a, const Preset &b) {
            return a.name == b.name && a.prefix == b.prefix && a.systemPrompt == b.systemPrompt &&
                   a.sampling == b.sampling;
        };
        QSqlQuery q(m_connection.db());
        for (const Preset &p : *parsed) {
            // Importing the same file twice must not double the preset bar.
            if (std::any_of(known.cbegin(), known.cend(),
                            [&](const Preset &k) { return sameContent(k, p); })) {
                ++result.skippedDuplicates;
                continue;
            }
            if (!run(q,
                     QStringLiteral(
                         "INSERT INTO presets (name, prefix, system_prompt, sampling, position) "
                         "VALUES (?, ?, ?, ?, (SELECT coalesce(max(position) + 1, 0) FROM presets))"),
                     {p.name, p.prefix, p.systemPrompt, jsonText(p.sampling.toJson())})) {
                m_connection.fail(tr("Could not import preset %1").arg(p.name), q.lastError().text());
                return std::nullopt;
            }
            result.importedIds.append(q.lastInsertId().toLongLong());
            known.append(p);
        }
        if (!t.commit()) return std::nullopt;
    }
    if (!result.importedIds.isEmpty()) m_connection.notifyPresetsChanged();
    return result;
}

} // namespace es
