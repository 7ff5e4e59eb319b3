// PresetBar: chips are rebuilt on every setPresets() (there are tens at most); which one is
// checked is derived from m_activeId alone (syncChecked), so a click's own toggling never
// disagrees with the state. Styling uses palette roles only, so themes and CJK fonts work.
#include "preset_bar.h"

#include "flow_layout.h"
#include "sampling_controls.h"

#include <QApplication>
#include <QKeySequence>
#include <QShortcut>
#include <QToolButton>

#include <utility>

namespace es {

namespace {

constexpr int kShortcutCount = 9;

QString elide(const QString &s, int maxChars) {
    return s.size() <= maxChars ? s : s.left(maxChars).trimmed() + QStringLiteral("…");
}

// A chip's label: mnemonics off (a name may contain '&'); a long name is shortened (the tooltip
// has it whole), so no chip is wider than a narrow pane.
QString chipText(const Preset &p) {
    QString text = elide(p.name.isEmpty() ? p.prefix : p.name, 24);
    return text.replace(u'&', QStringLiteral("&&"));
}

} // namespace

PresetBar::PresetBar(QWidget *parent) : QWidget(parent) {
    m_chipLayout = new FlowLayout(this, 6);

    m_manageButton = new QToolButton(this);
    m_manageButton->setObjectName(QStringLiteral("managePresetsButton"));
    m_manageButton->setText(tr("Manage presets…"));
    m_manageButton->setToolTip(tr("Create, edit, reorder, import and export presets"));
    m_manageButton->setFocusPolicy(Qt::TabFocus);
    m_manageButton->setAutoRaise(true);
    connect(m_manageButton, &QToolButton::clicked, this, &PresetBar::managePresetsRequested);
    m_chipLayout->addWidget(m_manageButton);

    setStyleSheet(QStringLiteral(
        "QToolButton[presetChip=\"true\"] { border: 1px solid palette(mid); border-radius: 11px;"
        "  padding: 3px 10px; background: palette(button); }"
        "QToolButton[presetChip=\"true\"]:hover { border-color: palette(highlight); }"
        "QToolButton[presetChip=\"true\"]:checked { background: palette(highlight);"
        "  color: palette(highlighted-text); border-color: palette(highlight); }"
        "QToolButton[presetChip=\"true\"]:focus { border: 2px solid palette(highlight); padding: 2px 9px; }"
        "QToolButton[presetChip=\"true\"]:checked:focus { border-color: palette(text); }"));

    // As wide as the composer; as tall as the rows the chips need at that width.
    QSizePolicy policy(QSizePolicy::Preferred, QSizePolicy::Preferred);
    policy.setHeightForWidth(true);
    setSizePolicy(policy);
    rebuildShortcuts();
}

PresetBar::~PresetBar() {
    // Shortcuts owned by a scope widget would outlive the bar.
    qDeleteAll(std::exchange(m_shortcuts, {}));
}

std::optional<Preset> PresetBar::activePreset() const {
    if (!m_activeId) return std::nullopt;
    for (const Preset &p : m_presets) {
        if (p.id == *m_activeId) return p;
    }
    return std::nullopt;
}

QToolButton *PresetBar::chip(qint64 id) const {
    for (int i = 0; i < m_presets.size(); ++i) {
        if (m_presets.at(i).id == id) return m_chips.value(i);
    }
    return nullptr;
}

void PresetBar::setShortcutScope(QWidget *scope) {
    m_shortcutScope = scope;
    rebuildShortcuts();
}

void PresetBar::setPresets(const QList<Preset> &presets) {
    m_presets = presets;
    if (m_activeId && !activePreset()) m_activeId.reset();
    rebuildChips();
    rebuildShortcuts();
}

void PresetBar::setActivePreset(std::optional<qint64> id) {
    m_activeId = id;
    if (m_activeId && !activePreset()) m_activeId.reset();
    syncChecked();
}

void PresetBar::togglePresetAt(int index) {
    if (index < 0 || index >= m_presets.size()) return;
    const Preset p = m_presets.at(index);
    if (m_activeId == p.id) {
        m_activeId.reset();
        syncChecked();
        emit presetCleared();
    } else {
        m_activeId = p.id;
        syncChecked();
        emit presetApplied(p);
    }
}

void PresetBar::rebuildChips() {
    // A chip being deleted may hold the focus; hand it to the chip that will take its place.
    const int focusIndex = int(m_chips.indexOf(qobject_cast<QToolButton *>(QApplication::focusWidget())));

    qDeleteAll(m_chips);
    m_chips.clear();
    for (int i = 0; i < m_presets.size(); ++i) {
        const Preset &p = m_presets.at(i);
        auto *chip = new QToolButton(this);
        chip->setObjectName(QStringLiteral("presetChip"));
        chip->setProperty("presetChip", true);
        chip->setProperty("presetId", p.id);
        chip->setText(chipText(p));
        chip->setCheckable(true);
        chip->setFocusPolicy(Qt::TabFocus); // reachable by Tab; a click leaves the focus in the composer
        chip->setToolButtonStyle(Qt::ToolButtonTextOnly);
        chip->setToolTip(chipToolTip(p, i));
        chip->setAccessibleName(p.name.isEmpty() ? p.prefix : p.name);
        chip->setAccessibleDescription(tr("Preset. Applies the prefix %1").arg(p.prefix));
        connect(chip, &QToolButton::clicked, this, [this, i] { togglePresetAt(i); });
        m_chipLayout->insertWidget(i, chip);
        m_chips.append(chip);
    }
    syncChecked();

    // Tab order: chips left to right, then "Manage presets…".
    QWidget *prev = nullptr;
    for (QToolButton *chip : std::as_const(m_chips)) {
        if (prev) setTabOrder(prev, chip);
        prev = chip;
    }
    if (prev) setTabOrder(prev, m_manageButton);

    if (focusIndex >= 0) {
        if (QToolButton *next = m_chips.value(std::min(focusIndex, int(m_chips.size()) - 1)))
            next->setFocus(Qt::OtherFocusReason);
    }
    updateGeometry();
}

void PresetBar::rebuildShortcuts() {
    qDeleteAll(std::exchange(m_shortcuts, {}));
    QWidget *owner = m_shortcutScope ? m_shortcutScope.data() : this;
    const Qt::ShortcutContext context = m_shortcutScope ? Qt::WidgetWithChildrenShortcut : Qt::WindowShortcut;
    const int n = std::min(kShortcutCount, int(m_presets.size()));
    for (int i = 0; i < n; ++i) {
        auto *s = new QShortcut(QKeySequence(Qt::ALT | Qt::Key(Qt::Key_1 + i)), owner);
        s->setContext(context);
        connect(s, &QShortcut::activated, this, [this, i] { togglePresetAt(i); });
        // A shortcut owned by another widget dies with it; forget it then.
        connect(s, &QObject::destroyed, this, [this, s] { m_shortcuts.removeAll(s); });
        m_shortcuts.append(s);
    }
}

void PresetBar::syncChecked() {
    for (int i = 0; i < m_chips.size(); ++i) m_chips.at(i)->setChecked(m_activeId == m_presets.at(i).id);
}

QString PresetBar::chipToolTip(const Preset &p, int index) const {
    QString html = QStringLiteral("<p><b>%1</b></p>").arg(p.name.toHtmlEscaped());
    auto row = [&html](const QString &label, const QString &value) {
        html += QStringLiteral("<p><i>%1</i> %2</p>").arg(label.toHtmlEscaped(), value.toHtmlEscaped());
    };
    row(tr("Prefix:"), p.prefix.isEmpty() ? tr("(none)") : p.prefix);
    row(tr("System prompt:"), p.systemPrompt.isEmpty() ? tr("(none)") : elide(p.systemPrompt, 300));
    row(tr("Sampling:"), SamplingControls::summary(p.sampling));
    if (index < kShortcutCount) {
        const QKeySequence key(Qt::ALT | Qt::Key(Qt::Key_1 + index));
        row(tr("Shortcut:"), key.toString(QKeySequence::NativeText));
    }
    if (p.isBuiltin()) html += QStringLiteral("<p>%1</p>").arg(tr("Built-in preset.").toHtmlEscaped());
    return QStringLiteral("<qt>") + html + QStringLiteral("</qt>");
}

} // namespace es
