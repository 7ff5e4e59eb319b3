// MainWindow: conversations on the left, one or more chat panes side by side in the centre
// (each its own conversation; "send to all panes" compares presets on the same question, and a
// pane opened at another precision — its own EngineSession on the same model — compares FP8
// with BF16 or the exact weights), the
// status bar (model, backend, precision, memory, live tok/s, the server's address while it
// serves). It owns no model state: the EngineSession and ChatStore it is given do. It owns the
// LocalServer that serves the session's model over HTTP (Model ▸ Server…, ServerDialog), which
// stops when the window goes. File ▸ Export/Import: ExportMenu (es_report). Window layout is
// kept in QSettings.
#pragma once

#include "remote_client.h"
#include "session_types.h"

#include <QMainWindow>
#include <QPointer>

class QAction;
class QDockWidget;
class QLabel;
class QProgressBar;
class QSplitter;

namespace es {

class ChatPane;
class ChatStore;
class ConversationSidebar;
class EngineSession;
class ExportMenu;
class LocalServer;
class ProfilerPanel;
class ServerDialog;

class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    MainWindow(ChatStore *store, EngineSession *session, QWidget *parent = nullptr);
    ~MainWindow() override;

    QList<ChatPane *> panes() const { return m_panes; }
    ChatPane *currentPane() const { return m_current; }
    ConversationSidebar *sidebar() const { return m_sidebar; }
    QAction *sendToAllAction() const { return m_sendToAll; }
    QString statusText() const; // the status bar's figures, for tests and screenshots
    ProfilerPanel *profilerPanel() const { return m_profiler; }
    QDockWidget *profilerDock() const { return m_profilerDock; }
    ExportMenu *exportMenu() const { return m_exportMenu; }
    LocalServer *localServer() const { return m_server; }
    ServerDialog *serverDialog() const; // null until first opened
    QAction *serverAction() const { return m_serverAction; }

public slots:
    void openModel();                  // folder dialog → will-it-fit → load
    void downloadModel();              // Model ▸ Download…: the hub's models, downloads, the cache, recent
    void connectToServer();            // ConnectServerDialog → connectToEndpoint
    void connectToEndpoint(const es::RemoteEndpoint &endpoint); // EngineSession::connectRemote
    void openServerPanel();            // Model ▸ Server…: ServerDialog (not modal; the server outlives it)
    void loadModelFolder(const QString &dir, bool askWhenTooBig = true);
    // Default: the main session. Null when the window has no room for another pane.
    ChatPane *addPane(EngineSession *session = nullptr);
    // A pane whose replies come from the current model at another weight precision ("auto",
    // "fp8", "bf16"): a second EngineSession loads the model that way (shared by every pane at
    // that precision, unloaded with the last of them). Null when no model is loaded.
    ChatPane *addPrecisionPane(const QString &precision);
    void closeCurrentPane();
    void applyPresetToCurrentPane(const std::optional<es::Preset> &preset);
    void managePresets();
    void openPreferences(); // Edit ▸ Preferences… (PreferencesDialog)

signals:
    void modelFolderChosen(const QString &dir);

protected:
    void closeEvent(QCloseEvent *event) override;

private:
    void buildMenus();
    void setCurrentPane(ChatPane *pane);
    void onModelLoaded(const es::SessionModelInfo &info);
    void onStats(const es::SessionStats &stats);
    void broadcast(ChatPane *from, const QString &text);
    void rebuildPresetMenu();
    void releaseUnusedSessions();

    QPointer<ChatStore> m_store;
    QPointer<EngineSession> m_session;
    QList<EngineSession *> m_extraSessions; // for panes at another precision (children of this)
    ConversationSidebar *m_sidebar = nullptr;
    QSplitter *m_panesSplitter = nullptr;
    QSplitter *m_mainSplitter = nullptr;
    QList<ChatPane *> m_panes;
    ChatPane *m_current = nullptr;
    QAction *m_sendToAll = nullptr;
    QAction *m_disconnect = nullptr;
    QMenu *m_presetMenu = nullptr;
    QLabel *m_modelLabel = nullptr, *m_backendLabel = nullptr, *m_memoryLabel = nullptr, *m_speedLabel = nullptr;
    QLabel *m_queueLabel = nullptr; // the server's queue (remote) or the engine's, when not empty
    QLabel *m_loadLabel = nullptr;
    QProgressBar *m_loadProgress = nullptr;
    bool m_broadcasting = false;
    QString m_connectingTo; // the server being connected to (its failure is not a model load's)
    ProfilerPanel *m_profiler = nullptr;
    QDockWidget *m_profilerDock = nullptr;
    ExportMenu *m_exportMenu = nullptr;
    LocalServer *m_server = nullptr;
    QPointer<ServerDialog> m_serverDialog;
    QAction *m_serverAction = nullptr;
    QLabel *m_serverLabel = nullptr; // "Serving at …" while the server runs (a link to the panel)
};

} // namespace es
