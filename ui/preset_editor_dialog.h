// PresetEditorDialog: the preset editor over a ChatStore — the preset list (PresetListModel) with
// add, duplicate, delete, move up/down, Import…/Export… JSON, and a form for the current preset
// (name, prefix, system prompt, SamplingControls) with Save/Revert. List operations persist at
// once; form edits wait for Save, and leaving a preset with unsaved edits asks first. Built-ins
// are read-only (locked form, no delete): duplicate one to change it. Everything that would block
// a test (file dialogs, questions, error boxes) goes through protected virtual hooks.
#pragma once

#include "storage_types.h"

#include <QDialog>
#include <QPointer>

#include <optional>

class QLabel;
class QLineEdit;
class QListView;
class QModelIndex;
class QPlainTextEdit;
class QPushButton;
class QToolButton;
class QWidget;

namespace es {

class ChatStore;
class PresetListModel;
class SamplingControls;

class PresetEditorDialog : public QDialog {
    Q_OBJECT
public:
    // store: open, on this (the GUI) thread; it must outlive the dialog. The dialog follows the
    // store's presetsChanged signal, so changes made elsewhere show up (unsaved form edits stay).
    explicit PresetEditorDialog(ChatStore *store, QWidget *parent = nullptr);

    PresetListModel *model() const { return m_model; }
    std::optional<qint64> currentPresetId() const;
    // The current preset as the form shows it (id, position and builtinKey of the stored one).
    std::optional<Preset> editedPreset() const;
    bool hasUnsavedChanges() const;
    // The loaded model's generation_config values, shown by unset sampling fields.
    void setModelDefaults(const es::SamplingParams &defaults);

public Q_SLOTS:
    // Makes preset id current; asks about unsaved changes first (and stays put on Cancel).
    void selectPreset(qint64 id);
    void addPreset();
    // Copies the current preset (built-ins too) as a user preset placed right after it.
    void duplicatePreset();
    // The current user preset, after confirmDelete(); built-ins are never deleted.
    void deletePreset();
    void moveUp();
    void moveDown();
    // Writes the form to the store; false if nothing could be saved (the error was shown).
    bool save();
    // Puts the stored values back into the form.
    void revert();
    void importPresets();
    void exportPresets();
    // Re-reads the store's presets.
    void reload();
    // Close/Escape: asks about unsaved changes first.
    void reject() override;

Q_SIGNALS:
    // After any change this dialog persisted (add, duplicate, delete, move, save, import).
    void presetsChanged();

protected:
    enum class UnsavedChoice { Save, Discard, Cancel };
    // Hooks for user interaction; tests override them. Empty path: the user cancelled.
    virtual QString chooseImportPath();
    virtual QString chooseExportPath();
    virtual bool confirmDelete(const es::Preset &preset);
    virtual UnsavedChoice askUnsavedChanges(const es::Preset &preset);
    virtual void showError(const QString &title, const QString &text);

private:
    bool leaveCurrent();
    void loadEditor(const std::optional<Preset> &preset);
    void setCurrentRow(int row);
    void onCurrentRowChanged(const QModelIndex &current);
    void updateState();
    void move(int delta);
    void selectWithoutAsking(qint64 id);
    void setStatus(const QString &text);
    QString uniqueName(const QString &base) const;

    QPointer<ChatStore> m_store;
    PresetListModel *m_model = nullptr;
    std::optional<Preset> m_stored; // the stored version of the preset in the form
    bool m_selecting = false;       // set while the dialog itself moves the list's current row
    QString m_lastDir;

    QListView *m_list = nullptr;
    QPushButton *m_addButton = nullptr;
    QPushButton *m_duplicateButton = nullptr;
    QPushButton *m_deleteButton = nullptr;
    QToolButton *m_upButton = nullptr;
    QToolButton *m_downButton = nullptr;
    QPushButton *m_importButton = nullptr;
    QPushButton *m_exportButton = nullptr;
    QWidget *m_lockBanner = nullptr;
    QWidget *m_form = nullptr;
    QLineEdit *m_nameEdit = nullptr;
    QLineEdit *m_prefixEdit = nullptr;
    QPlainTextEdit *m_promptEdit = nullptr;
    SamplingControls *m_sampling = nullptr;
    QPushButton *m_saveButton = nullptr;
    QPushButton *m_revertButton = nullptr;
    QLabel *m_statusLabel = nullptr;
};

} // namespace es
