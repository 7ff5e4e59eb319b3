// PresetBar: the composer's row of mode-prefix preset chips — one checkable chip per preset in
// preset-bar order, then "Manage presets…". At most one chip is active. It holds values only: the
// owner feeds setPresets() (from ChatStore::presets()) and reacts to presetApplied/presetCleared
// by inserting the prefix and using the preset's system prompt and sampling.
// Keyboard: every chip is in the Tab chain (Space toggles it); Alt+1…Alt+9 act as clicks on the
// first nine chips. Chips wrap onto more rows when they do not fit in one (a FlowLayout), so a
// narrow pane shows every chip at full size.
#pragma once

#include "storage_types.h"

#include <QList>
#include <QPointer>
#include <QWidget>

#include <optional>

class QShortcut;
class QToolButton;

namespace es {

class FlowLayout;

class PresetBar : public QWidget {
    Q_OBJECT
public:
    explicit PresetBar(QWidget *parent = nullptr);
    ~PresetBar() override;

    QList<Preset> presets() const { return m_presets; }
    std::optional<qint64> activePresetId() const { return m_activeId; }
    std::optional<Preset> activePreset() const;

    // Where Alt+1…Alt+9 work. nullptr (the default): anywhere in this bar's window. With several
    // bars in one window (compare panes), give each its pane, so the shortcut acts on the pane
    // that has the focus instead of being ambiguous.
    void setShortcutScope(QWidget *scope);

    // The chip of preset id (nullptr when not shown); for tests and accessibility tools.
    QToolButton *chip(qint64 id) const;
    QToolButton *manageButton() const { return m_manageButton; }

public Q_SLOTS:
    // Rebuilds the chips. The active preset stays active if it is still listed, else none is
    // (no signal either way: the owner is the one changing the list).
    void setPresets(const QList<es::Preset> &presets);
    // Marks a chip active (nullopt: none) without emitting, e.g. when the shown conversation
    // changes. An id that is not listed clears the active chip.
    void setActivePreset(std::optional<qint64> id);
    // What clicking chip `index` (0-based, bar order) does: applies that preset, or clears it if
    // it is the active one. Out-of-range indexes do nothing.
    void togglePresetAt(int index);

Q_SIGNALS:
    // The user chose a preset: insert its prefix, use its system prompt and sampling.
    void presetApplied(const es::Preset &preset);
    // The user turned the active preset off.
    void presetCleared();
    // The user asked for the preset editor ("Manage presets…").
    void managePresetsRequested();

private:
    void rebuildChips();
    void rebuildShortcuts();
    void syncChecked();
    QString chipToolTip(const Preset &preset, int index) const;

    QList<Preset> m_presets;
    std::optional<qint64> m_activeId;
    FlowLayout *m_chipLayout = nullptr; // the chips, then "Manage presets…"
    QList<QToolButton *> m_chips; // parallel to m_presets
    QToolButton *m_manageButton = nullptr;
    QPointer<QWidget> m_shortcutScope;
    QList<QShortcut *> m_shortcuts;
};

} // namespace es
