// PresetListModel: the presets as a flat list in preset-bar order, for the preset editor's list.
// It holds values only (the editor reads and writes ChatStore and feeds setPresets()), and applies
// each new list as row removes, moves, inserts and dataChanged, never a reset, so a view keeps its
// selection and current row across a reload. Built-ins carry a lock icon and BuiltinRole.
#pragma once

#include "storage_types.h"

#include <QAbstractListModel>
#include <QIcon>

namespace es {

class PresetListModel : public QAbstractListModel {
    Q_OBJECT
public:
    enum Role {
        IdRole = Qt::UserRole + 1, // qint64
        NameRole,                  // QString (DisplayRole shows a placeholder for an empty name)
        PrefixRole,                // QString
        SystemPromptRole,          // QString
        BuiltinRole,               // bool
        BuiltinKeyRole,            // QString, empty for user presets
    };
    Q_ENUM(Role)

    explicit PresetListModel(QObject *parent = nullptr);

    int rowCount(const QModelIndex &parent = QModelIndex()) const override;
    QVariant data(const QModelIndex &index, int role = Qt::DisplayRole) const override;
    Qt::ItemFlags flags(const QModelIndex &index) const override;
    QHash<int, QByteArray> roleNames() const override;

    // Replaces the list (ids identify rows across calls).
    void setPresets(const QList<Preset> &presets);
    QList<Preset> presets() const { return m_presets; }
    // The preset at row; a default Preset (id 0) when row is out of range.
    Preset preset(int row) const;
    int rowOf(qint64 id) const; // -1 when not listed
    QList<qint64> ids() const;

    // The padlock shown for built-ins: the icon theme's "object-locked" where there is one,
    // else a drawn padlock in the palette's text colour. Needs a QApplication.
    static QIcon lockIcon();

private:
    QList<Preset> m_presets;
    mutable QIcon m_lockIcon;  // made on first use: it needs the application's palette
    mutable QIcon m_blankIcon; // user presets: keeps their names in line with the built-ins'
};

} // namespace es
