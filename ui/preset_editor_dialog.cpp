// PresetEditorDialog: m_stored is the stored version of the preset in the form; the form is
// dirty when its contents differ from it. reload() refreshes the list from the store and keeps
// dirty form contents; it is connected to the store's presetsChanged and also called after each
// of the dialog's own writes. Export goes through QSaveFile: a failed write leaves the old file.
#include "preset_editor_dialog.h"

#include "chat_store.h"
#include "preset_list_model.h"
#include "presets.h"
#include "sampling_controls.h"

#include <QDialogButtonBox>
#include <QDir>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QFrame>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QItemSelectionModel>
#include <QKeySequence>
#include <QLabel>
#include <QLineEdit>
#include <QListView>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSaveFile>
#include <QScopedValueRollback>
#include <QSet>
#include <QShortcut>
#include <QSplitter>
#include <QStandardPaths>
#include <QStyle>
#include <QToolButton>
#include <QVBoxLayout>

#include <algorithm>

namespace es {

namespace {

constexpr qint64 kMaxImportBytes = 16 * 1024 * 1024; // far above any real preset file

QString shownPath(const QString &path) { return QDir::toNativeSeparators(path); }

QPushButton *makeButton(const QString &text, const QString &objectName, QWidget *parent) {
    auto *b = new QPushButton(text, parent);
    b->setObjectName(objectName);
    b->setAutoDefault(false); // Enter in a line edit must not add or delete presets
    return b;
}

} // namespace

PresetEditorDialog::PresetEditorDialog(ChatStore *store, QWidget *parent)
    : QDialog(parent), m_store(store), m_model(new PresetListModel(this)) {
    setWindowTitle(tr("Presets[*]"));
    m_lastDir = QStandardPaths::writableLocation(QStandardPaths::DocumentsLocation);
    if (m_lastDir.isEmpty()) m_lastDir = QDir::homePath();

    // ---- Left: the list and list operations ----
    auto *left = new QWidget;
    auto *leftLayout = new QVBoxLayout(left);
    leftLayout->setContentsMargins(0, 0, 0, 0);
    auto *listLabel = new QLabel(tr("&Presets (in preset-bar order):"), left);
    m_list = new QListView(left);
    m_list->setObjectName(QStringLiteral("presetList"));
    m_list->setModel(m_model);
    m_list->setSelectionMode(QAbstractItemView::SingleSelection);
    m_list->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_list->setUniformItemSizes(true);
    m_list->setIconSize(QSize(16, 16));
    m_list->setSpacing(2);
    m_list->setMinimumWidth(200);
    listLabel->setBuddy(m_list);
    leftLayout->addWidget(listLabel);
    leftLayout->addWidget(m_list, 1);

    auto *listButtons = new QHBoxLayout;
    m_addButton = makeButton(tr("&Add"), QStringLiteral("addButton"), left);
    m_addButton->setToolTip(
        tr("Add a new preset (%1)").arg(QKeySequence(QKeySequence::New).toString(QKeySequence::NativeText)));
    m_addButton->setShortcut(QKeySequence::New);
    m_duplicateButton = makeButton(tr("D&uplicate"), QStringLiteral("duplicateButton"), left);
    m_duplicateButton->setToolTip(tr("Copy the selected preset as a new preset of yours (built-ins too)"));
    m_deleteButton = makeButton(tr("&Delete"), QStringLiteral("deleteButton"), left);
    m_deleteButton->setToolTip(tr("Delete the selected preset (built-in presets cannot be deleted)"));
    m_upButton = new QToolButton(left);
    m_upButton->setObjectName(QStringLiteral("moveUpButton"));
    m_upButton->setIcon(style()->standardIcon(QStyle::SP_ArrowUp));
    m_upButton->setShortcut(QKeySequence(Qt::ALT | Qt::Key_Up));
    m_upButton->setToolTip(tr("Move up in the preset bar (Alt+Up)"));
    m_upButton->setAccessibleName(tr("Move up"));
    m_downButton = new QToolButton(left);
    m_downButton->setObjectName(QStringLiteral("moveDownButton"));
    m_downButton->setIcon(style()->standardIcon(QStyle::SP_ArrowDown));
    m_downButton->setShortcut(QKeySequence(Qt::ALT | Qt::Key_Down));
    m_downButton->setToolTip(tr("Move down in the preset bar (Alt+Down)"));
    m_downButton->setAccessibleName(tr("Move down"));
    listButtons->addWidget(m_addButton);
    listButtons->addWidget(m_duplicateButton);
    listButtons->addWidget(m_deleteButton);
    listButtons->addStretch(1);
    listButtons->addWidget(m_upButton);
    listButtons->addWidget(m_downButton);
    leftLayout->addLayout(listButtons);

    auto *fileButtons = new QHBoxLayout;
    m_importButton = makeButton(tr("&Import…"), QStringLiteral("importButton"), left);
    m_importButton->setToolTip(tr("Add the presets of an ExpertScope preset file (JSON)"));
    m_exportButton = makeButton(tr("E&xport…"), QStringLiteral("exportButton"), left);
    m_exportButton->setToolTip(tr("Save every preset, in this order, to a JSON file"));
    fileButtons->addWidget(m_importButton);
    fileButtons->addWidget(m_exportButton);
    fileButtons->addStretch(1);
    leftLayout->addLayout(fileButtons);

    // ---- Right: the form ----
    m_form = new QWidget;
    auto *formLayout = new QVBoxLayout(m_form);
    formLayout->setContentsMargins(0, 0, 0, 0);

    auto *banner = new QFrame(m_form);
    banner->setObjectName(QStringLiteral("lockBanner"));
    banner->setFrameShape(QFrame::StyledPanel);
    banner->setBackgroundRole(QPalette::AlternateBase);
    banner->setAutoFillBackground(true);
    auto *bannerLayout = new QHBoxLayout(banner);
    auto *lockIcon = new QLabel(banner);
    lockIcon->setPixmap(PresetListModel::lockIcon().pixmap(16, 16));
    auto *lockText =
        new QLabel(tr("Built-in preset: read-only. Use Duplicate to make an editable copy."), banner);
    lockText->setWordWrap(true);
    bannerLayout->addWidget(lockIcon, 0, Qt::AlignTop);
    bannerLayout->addWidget(lockText, 1);
    m_lockBanner = banner;
    formLayout->addWidget(banner);

    auto *fields = new QFormLayout;
    m_nameEdit = new QLineEdit(m_form);
    m_nameEdit->setObjectName(QStringLiteral("nameEdit"));
    m_nameEdit->setMaxLength(200);
    m_nameEdit->setToolTip(tr("The chip's label in the preset bar"));
    m_prefixEdit = new QLineEdit(m_form);
    m_prefixEdit->setObjectName(QStringLiteral("prefixEdit"));
    m_prefixEdit->setPlaceholderText(tr("e.g. 【技术解析模式】"));
    m_prefixEdit->setToolTip(tr("Put at the start of your message when the preset is applied"));
    m_promptEdit = new QPlainTextEdit(m_form);
    m_promptEdit->setObjectName(QStringLiteral("systemPromptEdit"));
    m_promptEdit->setTabChangesFocus(true);
    m_promptEdit->setPlaceholderText(tr("Optional: instructions the model reads before the conversation"));
    m_promptEdit->setToolTip(tr("The system prompt; empty for none"));
    m_promptEdit->setMinimumHeight(m_promptEdit->fontMetrics().lineSpacing() * 4);
    fields->addRow(tr("&Name:"), m_nameEdit);
    fields->addRow(tr("P&refix:"), m_prefixEdit);
    fields->addRow(tr("S&ystem prompt:"), m_promptEdit);
    formLayout->addLayout(fields, 1);

    auto *samplingBox = new QGroupBox(tr("Sampling (unchecked: the model's default)"), m_form);
    auto *samplingLayout = new QVBoxLayout(samplingBox);
    m_sampling = new SamplingControls(samplingBox);
    m_sampling->setObjectName(QStringLiteral("samplingControls"));
    samplingLayout->addWidget(m_sampling);
    formLayout->addWidget(samplingBox);

    auto *formButtons = new QHBoxLayout;
    m_revertButton = makeButton(tr("Re&vert"), QStringLiteral("revertButton"), m_form);
    m_revertButton->setToolTip(tr("Discard the unsaved changes to this preset"));
    m_saveButton = makeButton(tr("&Save"), QStringLiteral("saveButton"), m_form);
    m_saveButton->setToolTip(tr("Save the changes to this preset (%1)")
                                 .arg(QKeySequence(QKeySequence::Save).toString(QKeySequence::NativeText)));
    m_saveButton->setShortcut(QKeySequence::Save);
    m_saveButton->setDefault(true);
    formButtons->addStretch(1);
    formButtons->addWidget(m_revertButton);
    formButtons->addWidget(m_saveButton);
    formLayout->addLayout(formButtons);

    auto *splitter = new QSplitter(Qt::Horizontal, this);
    splitter->addWidget(left);
    splitter->addWidget(m_form);
    splitter->setChildrenCollapsible(false);
    splitter->setStretchFactor(0, 0);
    splitter->setStretchFactor(1, 1);
    splitter->setSizes({240, 620});

    m_statusLabel = new QLabel(this);
    m_statusLabel->setObjectName(QStringLiteral("statusLabel"));
    m_statusLabel->setWordWrap(true);
    m_statusLabel->setTextInteractionFlags(Qt::TextSelectableByMouse);
    auto *closeBox = new QDialogButtonBox(QDialogButtonBox::Close, this);
    closeBox->button(QDialogButtonBox::Close)->setAutoDefault(false);
    connect(closeBox, &QDialogButtonBox::rejected, this, &PresetEditorDialog::reject);
    auto *bottom = new QHBoxLayout;
    bottom->addWidget(m_statusLabel, 1);
    bottom->addWidget(closeBox);

    auto *layout = new QVBoxLayout(this);
    layout->addWidget(splitter, 1);
    layout->addLayout(bottom);

    // ---- Wiring ----
    connect(m_addButton, &QPushButton::clicked, this, &PresetEditorDialog::addPreset);
    connect(m_duplicateButton, &QPushButton::clicked, this, &PresetEditorDialog::duplicatePreset);
    connect(m_deleteButton, &QPushButton::clicked, this, &PresetEditorDialog::deletePreset);
    connect(m_upButton, &QToolButton::clicked, this, &PresetEditorDialog::moveUp);
    connect(m_downButton, &QToolButton::clicked, this, &PresetEditorDialog::moveDown);
    connect(m_importButton, &QPushButton::clicked, this, &PresetEditorDialog::importPresets);
    connect(m_exportButton, &QPushButton::clicked, this, &PresetEditorDialog::exportPresets);
    connect(m_saveButton, &QPushButton::clicked, this, &PresetEditorDialog::save);
    connect(m_revertButton, &QPushButton::clicked, this, &PresetEditorDialog::revert);
    auto *deleteKey = new QShortcut(QKeySequence::Delete, m_list);
    deleteKey->setContext(Qt::WidgetShortcut);
    connect(deleteKey, &QShortcut::activated, this, &PresetEditorDialog::deletePreset);
    connect(m_list->selectionModel(), &QItemSelectionModel::currentChanged, this,
            [this](const QModelIndex &current) { onCurrentRowChanged(current); });
    connect(m_nameEdit, &QLineEdit::textChanged, this, &PresetEditorDialog::updateState);
    connect(m_prefixEdit, &QLineEdit::textChanged, this, &PresetEditorDialog::updateState);
    connect(m_promptEdit, &QPlainTextEdit::textChanged, this, &PresetEditorDialog::updateState);
    connect(m_sampling, &SamplingControls::paramsChanged, this, &PresetEditorDialog::updateState);
    if (m_store) connect(m_store.data(), &ChatStore::presetsChanged, this, &PresetEditorDialog::reload);

    resize(900, 640);
    reload();
}

// ---- State -----------------------------------------------------------------------------------

std::optional<qint64> PresetEditorDialog::currentPresetId() const {
    return m_stored ? std::optional<qint64>(m_stored->id) : std::nullopt;
}

std::optional<Preset> PresetEditorDialog::editedPreset() const {
    if (!m_stored) return std::nullopt;
    Preset p = *m_stored;
    p.name = m_nameEdit->text();
    p.prefix = m_prefixEdit->text();
    p.systemPrompt = m_promptEdit->toPlainText();
    p.sampling = m_sampling->params();
    return p;
}

bool PresetEditorDialog::hasUnsavedChanges() const {
    return m_stored && !m_stored->isBuiltin() && editedPreset() != m_stored;
}

void PresetEditorDialog::setModelDefaults(const SamplingParams &defaults) {
    m_sampling->setModelDefaults(defaults);
}

void PresetEditorDialog::updateState() {
    const int row = m_stored ? m_model->rowOf(m_stored->id) : -1;
    const bool has = m_stored.has_value();
    const bool builtin = has && m_stored->isBuiltin();
    const bool dirty = hasUnsavedChanges();
    const bool storeOk = m_store && m_store->isOpen();

    m_addButton->setEnabled(storeOk);
    m_duplicateButton->setEnabled(storeOk && has);
    m_deleteButton->setEnabled(storeOk && has && !builtin);
    m_upButton->setEnabled(storeOk && row > 0);
    m_downButton->setEnabled(storeOk && row >= 0 && row < m_model->rowCount() - 1);
    m_importButton->setEnabled(storeOk);
    m_exportButton->setEnabled(storeOk && m_model->rowCount() > 0);
    m_saveButton->setEnabled(storeOk && dirty && !m_nameEdit->text().trimmed().isEmpty());
    m_revertButton->setEnabled(dirty);
    m_form->setEnabled(has);
    setWindowModified(dirty);
}

void PresetEditorDialog::loadEditor(const std::optional<Preset> &preset) {
    m_stored = preset;
    const Preset shown = preset.value_or(Preset{});
    const bool readOnly = !preset || preset->isBuiltin();
    m_nameEdit->setText(shown.name);
    m_prefixEdit->setText(shown.prefix);
    m_promptEdit->setPlainText(shown.systemPrompt);
    m_sampling->setParams(shown.sampling);
    // Built-ins stay readable and selectable (copy a prompt) but not editable.
    m_nameEdit->setReadOnly(readOnly);
    m_prefixEdit->setReadOnly(readOnly);
    m_promptEdit->setReadOnly(readOnly);
    m_sampling->setEnabled(!readOnly);
    m_lockBanner->setVisible(preset && preset->isBuiltin());
    m_nameEdit->setToolTip(readOnly && preset
                               ? tr("Built-in presets are read-only: duplicate this one to change it")
                               : tr("The chip's label in the preset bar"));
    updateState();
}

void PresetEditorDialog::setCurrentRow(int row) {
    const QScopedValueRollback guard(m_selecting, true);
    if (row < 0) {
        m_list->selectionModel()->clear();
        return;
    }
    const QModelIndex index = m_model->index(row);
    m_list->selectionModel()->setCurrentIndex(index, QItemSelectionModel::ClearAndSelect);
    m_list->scrollTo(index);
}

void PresetEditorDialog::onCurrentRowChanged(const QModelIndex &current) {
    if (m_selecting) return;
    const std::optional<qint64> nextId =
        current.isValid() ? std::optional<qint64>(m_model->preset(current.row()).id) : std::nullopt;
    if (nextId == currentPresetId()) return;
    if (!leaveCurrent()) {
        // Cancelled: the list goes back to the preset still in the form.
        setCurrentRow(m_stored ? m_model->rowOf(m_stored->id) : -1);
        return;
    }
    // Saving reloads the list (and puts its current row back on the saved preset): select by id.
    if (nextId)
        selectWithoutAsking(*nextId);
    else
        loadEditor(std::nullopt);
}

bool PresetEditorDialog::leaveCurrent() {
    if (!hasUnsavedChanges()) return true;
    switch (askUnsavedChanges(*editedPreset())) {
    case UnsavedChoice::Save:
        return save();
    case UnsavedChoice::Discard:
        revert();
        return true;
    case UnsavedChoice::Cancel:
        return false;
    }
    return false;
}

void PresetEditorDialog::selectWithoutAsking(qint64 id) {
    const int row = m_model->rowOf(id);
    if (row < 0) return;
    setCurrentRow(row);
    loadEditor(m_model->preset(row));
}

void PresetEditorDialog::setStatus(const QString &text) { m_statusLabel->setText(text); }

QString PresetEditorDialog::uniqueName(const QString &base) const {
    QSet<QString> names;
    for (const Preset &p : m_model->presets()) names.insert(p.name);
    if (!names.contains(base)) return base;
    for (int n = 2;; ++n) {
        const QString candidate = QStringLiteral("%1 %2").arg(base).arg(n);
        if (!names.contains(candidate)) return candidate;
    }
}

// ---- Slots -----------------------------------------------------------------------------------

void PresetEditorDialog::reload() {
    if (!m_store) return;
    const QList<Preset> all = m_store->isOpen() ? m_store->presets() : QList<Preset>{};
    const std::optional<qint64> currentId = currentPresetId();
    const int oldRow = currentId ? m_model->rowOf(*currentId) : -1;
    {
        const QScopedValueRollback guard(m_selecting, true);
        m_model->setPresets(all);
    }
    const int row = currentId ? m_model->rowOf(*currentId) : -1;
    if (row >= 0) {
        const Preset fresh = m_model->preset(row);
        if (hasUnsavedChanges()) {
            m_stored = fresh; // keep the user's edits; they are now compared with the fresh copy
            updateState();
        } else {
            loadEditor(fresh);
        }
        setCurrentRow(row);
    } else if (m_model->rowCount() > 0) {
        // First open, or the current preset is gone: its neighbour (the one now in its place).
        const int next = std::clamp(oldRow, 0, m_model->rowCount() - 1);
        setCurrentRow(next);
        loadEditor(m_model->preset(next));
    } else {
        setCurrentRow(-1);
        loadEditor(std::nullopt);
    }
}

void PresetEditorDialog::selectPreset(qint64 id) {
    if (m_stored && m_stored->id == id) return;
    if (m_model->rowOf(id) < 0 || !leaveCurrent()) return;
    selectWithoutAsking(id);
}

void PresetEditorDialog::addPreset() {
    if (!m_store || !leaveCurrent()) return;
    Preset p;
    p.name = uniqueName(tr("New preset"));
    const std::optional<qint64> id = m_store->createPreset(p);
    if (!id) {
        showError(tr("Add preset"),
                  tr("Could not add a preset.") + QStringLiteral("\n\n") + m_store->lastError());
        return;
    }
    reload();
    selectWithoutAsking(*id);
    m_nameEdit->setFocus(Qt::OtherFocusReason);
    m_nameEdit->selectAll();
    setStatus(tr("Added “%1”.").arg(p.name));
    emit presetsChanged();
}

void PresetEditorDialog::duplicatePreset() {
    if (!m_store || !m_stored || !leaveCurrent()) return;
    const Preset source = *m_stored;
    Preset copy = source;
    copy.name = tr("%1 (copy)").arg(source.name);
    copy.builtinKey.clear();
    const std::optional<qint64> id = m_store->createPreset(copy);
    if (!id) {
        showError(tr("Duplicate preset"), tr("Could not duplicate “%1”.").arg(source.name) +
                                              QStringLiteral("\n\n") + m_store->lastError());
        return;
    }
    // createPreset appends; the copy belongs next to its original.
    QList<qint64> order;
    for (const Preset &p : m_store->presets()) {
        if (p.id != *id) order.append(p.id);
    }
    order.insert(std::min<qsizetype>(order.indexOf(source.id) + 1, order.size()), *id);
    if (!m_store->reorderPresets(order))
        showError(tr("Duplicate preset"), tr("The copy was added at the end: %1").arg(m_store->lastError()));
    reload();
    selectWithoutAsking(*id);
    m_nameEdit->setFocus(Qt::OtherFocusReason);
    m_nameEdit->selectAll();
    setStatus(tr("Duplicated “%1”.").arg(source.name));
    emit presetsChanged();
}

void PresetEditorDialog::deletePreset() {
    if (!m_store || !m_stored || m_stored->isBuiltin()) return;
    const Preset victim = *m_stored;
    if (!confirmDelete(victim)) return;
    if (!m_store->deletePreset(victim.id)) {
        showError(tr("Delete preset"), tr("Could not delete “%1”.").arg(victim.name) +
                                           QStringLiteral("\n\n") + m_store->lastError());
        return;
    }
    reload();
    setStatus(tr("Deleted “%1”.").arg(victim.name));
    emit presetsChanged();
}

void PresetEditorDialog::moveUp() { move(-1); }
void PresetEditorDialog::moveDown() { move(+1); }

void PresetEditorDialog::move(int delta) {
    if (!m_store || !m_stored) return;
    QList<qint64> order;
    for (const Preset &p : m_store->presets()) order.append(p.id);
    const qsizetype from = order.indexOf(m_stored->id);
    const qsizetype to = from + delta;
    if (from < 0 || to < 0 || to >= order.size()) return;
    order.move(from, to);
    if (!m_store->reorderPresets(order)) {
        showError(tr("Move preset"),
                  tr("Could not change the order.") + QStringLiteral("\n\n") + m_store->lastError());
        return;
    }
    reload();
    emit presetsChanged();
}

bool PresetEditorDialog::save() {
    if (!m_store || !hasUnsavedChanges()) return true;
    const QString name = m_nameEdit->text().trimmed();
    if (name.isEmpty()) {
        showError(tr("Save preset"), tr("A preset needs a name."));
        return false;
    }
    if (name != m_nameEdit->text()) m_nameEdit->setText(name);
    const Preset edited = *editedPreset();
    if (!m_store->updatePreset(edited)) {
        showError(tr("Save preset"),
                  tr("Could not save “%1”.").arg(name) + QStringLiteral("\n\n") + m_store->lastError());
        return false;
    }
    reload();
    setStatus(tr("Saved “%1”.").arg(name));
    emit presetsChanged();
    return true;
}

void PresetEditorDialog::revert() {
    if (m_stored) loadEditor(m_stored);
}

void PresetEditorDialog::importPresets() {
    if (!m_store) return;
    const QString title = tr("Import presets");
    const QString path = chooseImportPath();
    if (path.isEmpty()) return;
    m_lastDir = QFileInfo(path).absolutePath();
    const QString fileName = QFileInfo(path).fileName();

    QFile file(path);
    if (!file.open(QIODevice::ReadOnly)) {
        showError(title, tr("Could not read “%1”: %2").arg(shownPath(path), file.errorString()));
        return;
    }
    if (file.size() > kMaxImportBytes) {
        showError(title, tr("“%1” is too large to be a preset file (%2 MB).")
                             .arg(shownPath(path))
                             .arg(double(file.size()) / (1024 * 1024), 0, 'f', 1));
        return;
    }
    const QByteArray json = file.readAll();
    // Parse here first for the bare reason (the store's message would repeat "Could not import").
    QString why;
    const std::optional<QList<Preset>> parsed = parsePresetsJson(json, &why);
    if (!parsed) {
        showError(title, tr("Could not import presets from “%1”: %2").arg(shownPath(path), why));
        return;
    }
    const std::optional<PresetImportResult> result = m_store->importPresets(json);
    if (!result) {
        showError(title,
                  tr("Could not import presets from “%1”: %2").arg(shownPath(path), m_store->lastError()));
        return;
    }
    reload();
    const int imported = int(result->importedIds.size());
    const int skipped = result->skippedDuplicates;
    // Worded without plurals: the English UI has no translation file to pick plural forms.
    if (parsed->isEmpty()) {
        setStatus(tr("“%1” holds no presets.").arg(fileName));
    } else if (imported == 0) {
        setStatus(tr("Nothing imported from “%1”: all its presets (%2) are already here.")
                      .arg(fileName)
                      .arg(skipped));
    } else {
        setStatus(tr("Presets imported from “%1”: %2 added, %3 already here.")
                      .arg(fileName)
                      .arg(imported)
                      .arg(skipped));
        if (!hasUnsavedChanges()) selectWithoutAsking(result->importedIds.first());
        emit presetsChanged();
    }
}

void PresetEditorDialog::exportPresets() {
    if (!m_store || !leaveCurrent()) return;
    const QString title = tr("Export presets");
    const QString path = chooseExportPath();
    if (path.isEmpty()) return;
    m_lastDir = QFileInfo(path).absolutePath();
    const QByteArray json = m_store->exportPresets();
    // QSaveFile writes a temporary file and renames it over the target on commit(), so a full
    // disk or a crash never leaves a half-written preset file behind.
    QSaveFile file(path);
    if (!file.open(QIODevice::WriteOnly) || file.write(json) != json.size() || !file.commit()) {
        showError(title, tr("Could not write “%1”: %2").arg(shownPath(path), file.errorString()));
        return;
    }
    setStatus(
        tr("Exported all presets (%1) to “%2”.").arg(m_model->rowCount()).arg(QFileInfo(path).fileName()));
}

void PresetEditorDialog::reject() {
    if (!leaveCurrent()) return;
    QDialog::reject();
}

// ---- Interaction hooks -------------------------------------------------------------------------

QString PresetEditorDialog::chooseImportPath() {
    return QFileDialog::getOpenFileName(this, tr("Import presets"), m_lastDir,
                                        tr("ExpertScope presets (*.json);;All files (*)"));
}

QString PresetEditorDialog::chooseExportPath() {
    QFileDialog dialog(this, tr("Export presets"), m_lastDir, tr("ExpertScope presets (*.json)"));
    dialog.setAcceptMode(QFileDialog::AcceptSave);
    dialog.setDefaultSuffix(QStringLiteral("json"));
    dialog.selectFile(QStringLiteral("expertscope-presets.json"));
    if (dialog.exec() != QDialog::Accepted) return {};
    return dialog.selectedFiles().value(0);
}

bool PresetEditorDialog::confirmDelete(const Preset &preset) {
    QMessageBox box(QMessageBox::Question, tr("Delete preset"),
                    tr("Delete the preset “%1”? This cannot be undone.").arg(preset.name),
                    QMessageBox::NoButton, this);
    QPushButton *remove = box.addButton(tr("Delete"), QMessageBox::DestructiveRole);
    box.addButton(QMessageBox::Cancel);
    box.setDefaultButton(QMessageBox::Cancel);
    box.exec();
    return box.clickedButton() == remove;
}

PresetEditorDialog::UnsavedChoice PresetEditorDialog::askUnsavedChanges(const Preset &preset) {
    QMessageBox box(QMessageBox::Question, tr("Unsaved changes"),
                    tr("The preset “%1” has unsaved changes.").arg(preset.name),
                    QMessageBox::Save | QMessageBox::Discard | QMessageBox::Cancel, this);
    box.setInformativeText(tr("Save them before leaving it?"));
    box.setDefaultButton(QMessageBox::Save);
    switch (box.exec()) {
    case QMessageBox::Save:
        return UnsavedChoice::Save;
    case QMessageBox::Discard:
        return UnsavedChoice::Discard;
    default:
        return UnsavedChoice::Cancel;
    }
}

void PresetEditorDialog::showError(const QString &title, const QString &text) {
    QMessageBox::warning(this, title, text);
}

} // namespace es
