// PreferencesDialog (Edit ▸ Preferences…, QKeySequence::Preferences or Ctrl+,): the engine's
// defaults (backend, precision, KV cache, GPU memory share, CPU threads), the default sampling,
// the interface (language, theme, chat font size) and the data folder, as one AppSettings. OK
// and Apply check every field (a wrong one is named and nothing is saved), save to QSettings and
// apply what can be applied now: theme and font size at once, an engine change by reloading the
// model the way the Model menu does — and back to the previous engine settings, reloading the
// model again, when the new ones fail to load it. Language and data folder take effect at the
// next start (the dialog says so). Cancel changes nothing; Restore Defaults fills in the
// defaults, saved only by OK or Apply.
#pragma once

#include "app_settings.h"

#include <QDialog>
#include <QPointer>

#include <functional>

class QComboBox;
class QDialogButtonBox;
class QLabel;
class QLineEdit;
class QSpinBox;
class QTabWidget;

namespace es {

class EngineSession;
class SamplingControls;

class PreferencesDialog : public QDialog {
    Q_OBJECT
public:
    // Shows the stored settings, with the engine fields as session runs now (a --backend from the
    // command line, a saved backend that cannot run here).
    explicit PreferencesDialog(EngineSession *session, QWidget *parent = nullptr);

    // Where a message about a later engine reload goes (the main window's status bar); it may be
    // called after the dialog has closed.
    void setNotifier(std::function<void(const QString &)> notify) { m_notify = std::move(notify); }

    AppSettings settings() const; // as the fields show them
    void setSettings(const AppSettings &s);
    // "" when every field is valid, else one sentence naming the field (which gets the focus).
    QString validate();
    // validate, then save and apply (see the class comment). False, with the reason shown in a
    // message box, when a field is refused or the model cannot be loaded with these settings.
    bool apply();

    // "" when path can be the data folder (empty: the default one), else why not, naming the field.
    static QString checkDataFolder(const QString &path);
    // Reloads session's model with options (EngineSession::reconfigure, as the Model menu does);
    // when that load fails, the previous options and their settings come back and the model loads
    // again, and notify says so. Nothing waits: the outcome arrives as the session's signals.
    static void reloadKeepingModel(EngineSession *session, const EngineSessionOptions &options,
                                   std::function<void(const QString &)> notify);

public slots:
    void restoreDefaults();
    void accept() override; // OK: apply(), and close only when it succeeded

private:
    QWidget *buildEnginePage();
    QWidget *buildInterfacePage();
    QWidget *buildDataPage();
    void updateNotes();
    QString refuse(QWidget *field, const QString &message);

    QPointer<EngineSession> m_session;
    AppSettings m_opened; // what the dialog showed when it opened
    std::function<void(const QString &)> m_notify;
    QTabWidget *m_tabs = nullptr;
    QComboBox *m_backend = nullptr, *m_precision = nullptr, *m_kvCache = nullptr;
    QSpinBox *m_gpuShare = nullptr, *m_threads = nullptr;
    SamplingControls *m_sampling = nullptr;
    QComboBox *m_language = nullptr, *m_theme = nullptr;
    QSpinBox *m_fontSize = nullptr;
    QLabel *m_languageNote = nullptr, *m_themeNote = nullptr, *m_dataNote = nullptr;
    QLineEdit *m_dataFolder = nullptr;
    QDialogButtonBox *m_buttons = nullptr;
};

} // namespace es
