// PresetListModel: setPresets() turns the old row list into the new one with removals first,
// then, walking the target order, a move or an insert wherever a row differs, then dataChanged
// for rows whose content changed. Presets number in the tens, so the quadratic walk is fine.
#include "preset_list_model.h"

#include "sampling_controls.h"

#include <QApplication>
#include <QPainter>
#include <QPainterPath>
#include <QPalette>
#include <QPixmap>
#include <QSet>

namespace es {

PresetListModel::PresetListModel(QObject *parent) : QAbstractListModel(parent) {}

int PresetListModel::rowCount(const QModelIndex &parent) const {
    return parent.isValid() ? 0 : int(m_presets.size());
}

QVariant PresetListModel::data(const QModelIndex &index, int role) const {
    if (!index.isValid()) return {}; // asked by views and QAbstractItemModelTester: not an error
    if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid)) return {};
    const Preset &p = m_presets.at(index.row());
    switch (role) {
    case Qt::DisplayRole:
        return p.name.isEmpty() ? tr("(unnamed)") : p.name;
    case Qt::EditRole:
    case NameRole:
        return p.name;
    case Qt::DecorationRole:
        if (m_lockIcon.isNull()) {
            m_lockIcon = lockIcon();
            QPixmap blank(16, 16);
            blank.fill(Qt::transparent);
            m_blankIcon = QIcon(blank);
        }
        // User presets get a blank icon of the same size, so all names line up.
        return p.isBuiltin() ? m_lockIcon : m_blankIcon;
    case Qt::ToolTipRole: {
        QString tip = p.isBuiltin()
                          ? tr("Built-in preset (read-only): duplicate it to make your own version.")
                          : tr("Your preset.");
        if (!p.prefix.isEmpty()) tip += u'\n' + tr("Prefix: %1").arg(p.prefix);
        tip += u'\n' + tr("Sampling: %1").arg(SamplingControls::summary(p.sampling));
        return tip;
    }
    case Qt::AccessibleDescriptionRole:
        return p.isBuiltin() ? tr("Built-in, read-only") : QVariant();
    case IdRole:
        return p.id;
    case PrefixRole:
        return p.prefix;
    case SystemPromptRole:
        return p.systemPrompt;
    case BuiltinRole:
        return p.isBuiltin();
    case BuiltinKeyRole:
        return p.builtinKey;
    default:
        return {};
    }
}

Qt::ItemFlags PresetListModel::flags(const QModelIndex &index) const {
    if (!index.isValid()) return Qt::NoItemFlags;
    if (!checkIndex(index, CheckIndexOption::IndexIsValid | CheckIndexOption::ParentIsInvalid))
        return Qt::NoItemFlags;
    return Qt::ItemIsEnabled | Qt::ItemIsSelectable | Qt::ItemNeverHasChildren;
}

QHash<int, QByteArray> PresetListModel::roleNames() const {
    QHash<int, QByteArray> names = QAbstractListModel::roleNames();
    names.insert(IdRole, "presetId");
    names.insert(NameRole, "name");
    names.insert(PrefixRole, "prefix");
    names.insert(SystemPromptRole, "systemPrompt");
    names.insert(BuiltinRole, "builtin");
    names.insert(BuiltinKeyRole, "builtinKey");
    return names;
}

Preset PresetListModel::preset(int row) const {
    return (row >= 0 && row < m_presets.size()) ? m_presets.at(row) : Preset{};
}

int PresetListModel::rowOf(qint64 id) const {
    for (int i = 0; i < m_presets.size(); ++i) {
        if (m_presets.at(i).id == id) return i;
    }
    return -1;
}

QList<qint64> PresetListModel::ids() const {
    QList<qint64> out;
    out.reserve(m_presets.size());
    for (const Preset &p : m_presets) out.append(p.id);
    return out;
}

void PresetListModel::setPresets(const QList<Preset> &presets) {
    QSet<qint64> wanted;
    for (const Preset &p : presets) wanted.insert(p.id);

    for (int i = int(m_presets.size()) - 1; i >= 0; --i) {
        if (wanted.contains(m_presets.at(i).id)) continue;
        beginRemoveRows({}, i, i);
        m_presets.removeAt(i);
        endRemoveRows();
    }

    for (int i = 0; i < presets.size(); ++i) {
        const Preset &target = presets.at(i);
        if (i < m_presets.size() && m_presets.at(i).id == target.id) {
            if (!(m_presets.at(i) == target)) {
                m_presets[i] = target;
                emit dataChanged(index(i), index(i));
            }
            continue;
        }
        int from = -1;
        for (int j = i + 1; j < m_presets.size(); ++j) {
            if (m_presets.at(j).id == target.id) {
                from = j;
                break;
            }
        }
        if (from >= 0) {
            beginMoveRows({}, from, from, {}, i);
            m_presets.move(from, i);
            endMoveRows();
            if (!(m_presets.at(i) == target)) {
                m_presets[i] = target;
                emit dataChanged(index(i), index(i));
            }
        } else {
            beginInsertRows({}, i, i);
            m_presets.insert(i, target);
            endInsertRows();
        }
    }
}

QIcon PresetListModel::lockIcon() {
    const QIcon themed = QIcon::fromTheme(QStringLiteral("object-locked"));
    if (!themed.isNull()) return themed;
    const QColor ink = QApplication::palette().color(QPalette::Text);
    QIcon drawn;
    for (int size : {16, 24, 32}) {
        QPixmap pm(size, size);
        pm.fill(Qt::transparent);
        QPainter p(&pm);
        p.setRenderHint(QPainter::Antialiasing);
        const qreal s = size / 16.0;
        // Shackle: an arch over the body.
        p.setPen(QPen(ink, 1.6 * s));
        p.setBrush(Qt::NoBrush);
        QPainterPath shackle;
        shackle.moveTo(5 * s, 8 * s);
        shackle.lineTo(5 * s, 5.5 * s);
        shackle.arcTo(QRectF(5 * s, 2 * s, 6 * s, 6 * s), 180, -180);
        shackle.lineTo(11 * s, 8 * s);
        p.drawPath(shackle);
        // Body with a keyhole.
        p.setPen(Qt::NoPen);
        p.setBrush(ink);
        p.drawRoundedRect(QRectF(3 * s, 7.5 * s, 10 * s, 7 * s), 1.2 * s, 1.2 * s);
        p.setBrush(QApplication::palette().color(QPalette::Base));
        p.drawEllipse(QPointF(8 * s, 10.5 * s), 1.1 * s, 1.1 * s);
        p.end();
        drawn.addPixmap(pm);
    }
    return drawn;
}

} // namespace es
