// DownloadModelDialog: Model ▸ Download… — the ERNIE-4.5 checkpoints with their parameters, size
// and will-it-fit verdict here at BF16 and FP8; any other hub repo id typed in, checked (its file
// list and config.json, by the loader's rules) before anything is downloaded; the download's
// progress with speed and time left, and Cancel (the part downloaded stays and resumes next
// time); the models already in the hub cache (downloaded by this app, transformers, vLLM or
// huggingface-cli) and the recent models, either loaded with Load or a double-click. All work
// runs in ModelHub (app/session) off the GUI thread; errors are shown in the dialog, in words.
#pragma once

#include "engine_session.h"
#include "model_hub.h"

#include <QDialog>

class QLabel;
class QLineEdit;
class QListWidget;
class QProgressBar;
class QPushButton;
class QTableWidget;

namespace es {

class DownloadModelDialog : public QDialog {
    Q_OBJECT
public:
    explicit DownloadModelDialog(const EngineSessionOptions &options, QWidget *parent = nullptr);

    // Tests drive these widgets directly.
    QTableWidget *catalogueTable() const { return m_catalogue; }
    QTableWidget *cachedTable() const { return m_cached; }
    QListWidget *recentList() const { return m_recent; }
    QLineEdit *repoEdit() const { return m_repo; }
    QLineEdit *revisionEdit() const { return m_revision; }
    QPushButton *checkButton() const { return m_check; }
    QPushButton *downloadButton() const { return m_download; }
    QPushButton *cancelButton() const { return m_cancel; }
    QPushButton *loadButton() const { return m_load; }
    QLabel *messageLabel() const { return m_message; }
    QProgressBar *progressBar() const { return m_progress; }
    ModelHub *hub() const { return m_hub; }

public slots:
    void checkRepo();
    void downloadRepo();
    void loadSelected();
    void refreshCached();
    void reject() override; // a download in hand is cancelled first (its part is kept)

signals:
    void loadRequested(const QString &dir);

private:
    void fillCatalogue();
    void fillRecent();
    void setBusy(bool busy);
    void showMessage(const QString &text, bool error);
    QString selectedDir() const;

    EngineSessionOptions m_options;
    ModelHub *m_hub;
    QTableWidget *m_catalogue, *m_cached;
    QListWidget *m_recent;
    QLineEdit *m_repo, *m_revision;
    QPushButton *m_check, *m_download, *m_cancel, *m_load;
    QLabel *m_message, *m_progressLabel, *m_cacheLabel;
    QProgressBar *m_progress;
    QString m_lastDownloaded;
};

} // namespace es
