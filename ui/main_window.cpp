// MainWindow (see main_window.h).
#include "main_window.h"

#include "download_model_dialog.h"
#include "export_menu.h"
#include "local_server.h"
#include "profile_recorder.h"
#include "server_dialog.h"

#include "chat_pane.h"
#include "chat_store.h"
#include "composer.h"
#include "connect_server_dialog.h"
#include "conversation_sidebar.h"
#include "engine_session.h"
#include "expert_lab_dialog.h"
#include "message_widget.h"
#include "preferences_dialog.h"
#include "preset_editor_dialog.h"
#include "profiler_panel.h"
#include "settings_keys.h"

#include <QActionGroup>
#include <QApplication>
#include <QCloseEvent>
#include <QDir>
#include <QDockWidget>
#include <QFileDialog>
#include <QLabel>
#include <QListView>
#include <QMenuBar>
#include <QMessageBox>
#include <QProgressBar>
#include <QScreen>
#include <QStyle>
#include <QSettings>
#include <QSplitter>
#include <QStatusBar>

#include <algorithm>

namespace es {

namespace {

QString human_bytes(qint64 b) {
    if (b <= 0) return QStringLiteral("–");
    const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = double(b);
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        ++u;
    }
    return QStringLiteral("%1 %2").arg(v, 0, 'f', u == 0 ? 0 : 1).arg(units[u]);
}

} // namespace

MainWindow::MainWindow(ChatStore *store, EngineSession *session, QWidget *parent)
    : QMainWindow(parent), m_store(store), m_session(session) {
    setWindowTitle(tr("ExpertScope"));
    m_mainSplitter = new QSplitter(Qt::Horizontal, this);
    m_sidebar = new ConversationSidebar(store, m_mainSplitter);
    m_panesSplitter = new QSplitter(Qt::Horizontal, m_mainSplitter);
    m_mainSplitter->addWidget(m_sidebar);
    m_mainSplitter->addWidget(m_panesSplitter);
    // The sidebar keeps its width when the window is resized; the chat takes the rest.
    m_mainSplitter->setStretchFactor(0, 0);
    m_mainSplitter->setStretchFactor(1, 1);
    m_mainSplitter->setSizes({260, 900});
    setCentralWidget(m_mainSplitter);

    m_modelLabel = new QLabel(tr("No model"), this);
    m_backendLabel = new QLabel(this);
    m_backendLabel->setObjectName(QStringLiteral("backendLabel"));
    m_memoryLabel = new QLabel(this);
    m_speedLabel = new QLabel(this);
    m_queueLabel = new QLabel(this);
    m_queueLabel->setVisible(false);
    m_queueLabel->setToolTip(
        tr("Requests in the running batch and waiting in the queue (a remote server's own, "
           "from its /metrics: vllm:num_requests_running / _waiting)"));
    m_loadLabel = new QLabel(this);
    m_loadProgress = new QProgressBar(this);
    m_loadProgress->setRange(0, 100);
    m_loadProgress->setMaximumWidth(160);
    m_loadProgress->setVisible(false);
    m_loadLabel->setVisible(false);
    m_memoryLabel->setToolTip(tr("Memory the engine uses: weights + KV cache blocks in use + workspace, of the device total"));
    m_speedLabel->setToolTip(tr("Decode speed: generated tokens per second over the last half second"));
    statusBar()->addWidget(m_modelLabel);
    statusBar()->addWidget(m_loadLabel);
    statusBar()->addWidget(m_loadProgress);
    statusBar()->addPermanentWidget(m_backendLabel);
    statusBar()->addPermanentWidget(m_memoryLabel);
    statusBar()->addPermanentWidget(m_queueLabel);
    statusBar()->addPermanentWidget(m_speedLabel);

    // The app's HTTP server on the session's engine; its requests reach the profiler's recorder
    // (the Latency page and the routing strip show the latest one), which reads the engine's
    // steps at each of the server's drains while requests run.
    m_server = new LocalServer(session, this);
    m_serverLabel = new QLabel(this);
    m_serverLabel->setObjectName(QStringLiteral("serverLabel"));
    m_serverLabel->setVisible(false);
    m_serverLabel->setToolTip(tr("The app serves its model over HTTP (Model ▸ Server…)"));
    statusBar()->addPermanentWidget(m_serverLabel);
    connect(m_serverLabel, &QLabel::linkActivated, this, &MainWindow::openServerPanel);
    ProfileRecorder *recorder = ProfileRecorder::forSession(session);
    connect(m_server, &LocalServer::requestProfiled, recorder, &ProfileRecorder::recordServedReply);
    connect(m_server, &LocalServer::serving, recorder, &ProfileRecorder::poll);
    connect(m_server, &LocalServer::started, this, [this](const QString &url) {
        m_serverLabel->setText(tr("<a href=\"server\">Serving at %1</a>").arg(url.toHtmlEscaped()));
        m_serverLabel->setVisible(true);
    });
    connect(m_server, &LocalServer::stopped, this, [this](const QString &why) {
        m_serverLabel->setVisible(false);
        if (!why.isEmpty()) statusBar()->showMessage(tr("The server stopped: %1").arg(why), 15000);
    });

    // The profiler: a right-hand dock fed by the session; while hidden it reads and draws nothing.
    m_profiler = new ProfilerPanel(store, session, this);
    m_profiler->setConversationProvider(
        [this]() -> std::optional<qint64> { return m_current ? m_current->conversationId() : std::nullopt; });
    m_profiler->setOpenConversationsProvider([this] {
        QList<qint64> open;
        for (ChatPane *p : std::as_const(m_panes))
            if (p->conversationId()) open << *p->conversationId();
        return open;
    });
    m_profilerDock = new QDockWidget(tr("Profiler"), this);
    m_profilerDock->setObjectName(QStringLiteral("profilerDock"));
    m_profilerDock->setWidget(m_profiler);
    connect(m_profiler, &ProfilerPanel::interventionRequested, this, [this](int layer, int expert, bool force) {
        if (!m_current) return;
        ExpertIntervention iv = m_current->nextIntervention();
        QString &list = force ? iv.forced : iv.disabled;
        list = ExpertLabDialog::withExpert(list, layer, expert);
        m_current->openExpertLab(iv);
    });
    addDockWidget(Qt::RightDockWidgetArea, m_profilerDock);
    // A clicked expert's tokens, marked in the replies on screen.
    connect(m_profiler, &ProfilerPanel::tokenHighlightChanged, this, [this](const TokenHighlight &ranges) {
        for (ChatPane *p : std::as_const(m_panes))
            for (MessageWidget *w : p->messageWidgets()) w->highlightTokens(ranges.value(w->messageId()));
    });

    buildMenus();
    addPane();

    connect(m_sidebar, &ConversationSidebar::conversationSelected, this, [this](std::optional<qint64> id) {
        if (m_current) m_current->setConversation(id);
    });
    connect(m_sidebar, &ConversationSidebar::searchAccepted, this, [this] {
        if (m_current) m_current->composer()->editor()->setFocus();
    });
    connect(m_sidebar, &ConversationSidebar::conversationAboutToBeDeleted, this, [this](qint64 id) {
        for (ChatPane *p : m_panes) p->conversationAboutToBeDeleted(id);
    });
    connect(m_sidebar, &ConversationSidebar::conversationDeleted, this, [this](qint64 id) {
        for (ChatPane *p : m_panes)
            if (p->conversationId() == id) p->setConversation(std::nullopt);
    });
    connect(m_session, &EngineSession::modelLoadStarted, this, [this](const QString &dir) {
        m_loadLabel->setText(m_connectingTo == dir ? tr("Connecting to %1…").arg(dir)
                                                   : tr("Loading %1…").arg(dir));
        m_loadLabel->setVisible(true);
        m_loadProgress->setValue(0);
        m_loadProgress->setVisible(true);
    });
    connect(m_session, &EngineSession::modelLoadProgress, this, [this](const QString &stage, double f) {
        m_loadLabel->setText(tr("Loading the model: %1").arg(stage));
        m_loadProgress->setValue(int(f * 100));
    });
    connect(m_session, &EngineSession::modelLoaded, this, &MainWindow::onModelLoaded);
    // A session whose model was loaded before this window existed: shown as if it just loaded.
    if (m_session->isModelLoaded()) onModelLoaded(m_session->modelInfo());
    connect(m_session, &EngineSession::modelLoadFailed, this, [this](const QString &dir, const QString &message) {
        m_loadLabel->setVisible(false);
        m_loadProgress->setVisible(false);
        // A folder rejected before loading leaves the model that was loaded in place.
        const bool kept = m_session->isModelLoaded();
        if (!kept) m_modelLabel->setText(tr("No model"));
        m_disconnect->setEnabled(m_session->isRemote());
        if (m_connectingTo == dir) {
            m_connectingTo.clear();
            QMessageBox::critical(this, tr("Could not connect to the server"),
                                  tr("<p>Connecting to <b>%1</b> failed:</p><p>%2</p>")
                                      .arg(dir.toHtmlEscaped(), message.toHtmlEscaped()));
            return;
        }
        QString text = tr("<p>Loading <b>%1</b> failed:</p><p>%2</p>").arg(dir.toHtmlEscaped(), message.toHtmlEscaped());
        if (kept) text += tr("<p>%1 is still loaded.</p>").arg(m_session->modelInfo().name.toHtmlEscaped());
        QMessageBox::critical(this, tr("The model could not be loaded"), text);
    });
    connect(m_session, &EngineSession::remoteDisconnected, this, [this] {
        m_disconnect->setEnabled(false);
        m_modelLabel->setText(tr("No model"));
        m_backendLabel->clear();
        m_queueLabel->setVisible(false);
    });
    connect(m_session, &EngineSession::statsUpdated, this, &MainWindow::onStats);
    connect(m_store, &ChatStore::presetsChanged, this, &MainWindow::rebuildPresetMenu);
    rebuildPresetMenu();

    QSettings settings;
    restoreGeometry(settings.value("window/geometry").toByteArray());
    m_mainSplitter->restoreState(settings.value("window/mainSplitter").toByteArray());
    // The first run: 1280×800 or the screen, whichever is smaller; the profiler takes 35% of
    // the width, the chat most of the rest.
    if (!settings.contains("window/geometry"))
        resize(QSize(1280, 800).boundedTo(screen()->availableGeometry().size()));
    if (!restoreState(settings.value("window/state").toByteArray())) // docks (the profiler)
        resizeDocks({m_profilerDock}, {width() * 35 / 100}, Qt::Horizontal);
    // The conversation open when the app last closed opens again (not an empty chat).
    const qint64 last = settings.value("session/lastConversation", 0).toLongLong();
    if (last > 0 && m_store->conversation(last)) {
        m_sidebar->selectConversation(last);
        m_current->setConversation(last);
    }
}

// The server stops here, while the window's slots can still hear it (bounded: LocalServer::stop).
MainWindow::~MainWindow() {
    delete m_serverDialog;
    delete m_server;
}

void MainWindow::buildMenus() {
    QMenu *file = menuBar()->addMenu(tr("&File"));
    file->addAction(tr("&Open model…"), QKeySequence::Open, this, &MainWindow::openModel);
    file->addAction(tr("&New conversation"), QKeySequence::New, m_sidebar, &ConversationSidebar::newConversation);
    file->addSeparator();
    m_exportMenu = new ExportMenu(
        m_store, this, [this] { return m_current ? m_current->conversationId() : std::nullopt; },
        [this] { return m_current ? m_current->selectedMessage() : qint64(0); }, this);
    m_exportMenu->addTo(file);
    m_exportMenu->setSession(m_session);
    connect(m_exportMenu, &ExportMenu::conversationImported, this, [this](qint64 id) {
        m_sidebar->selectConversation(id);
        if (m_current) m_current->setConversation(id);
    });
    file->addSeparator();
    file->addAction(tr("&Quit"), QKeySequence::Quit, this, &QWidget::close);

    QMenu *edit = menuBar()->addMenu(tr("&Edit"));
    edit->addAction(tr("&Find conversations"), QKeySequence::Find, m_sidebar, &ConversationSidebar::focusSearch);
    edit->addAction(tr("&Rename conversation…"), QKeySequence(Qt::Key_F2), m_sidebar, &ConversationSidebar::renameCurrent);
    edit->addAction(tr("&Pin or unpin conversation"), this, [this] { m_sidebar->togglePinCurrent(); });
    // Ctrl+Del deletes the conversation only from the conversation list: in a text field it
    // deletes the next word, as everywhere else.
    QAction *del = edit->addAction(tr("&Delete conversation"), QKeySequence(Qt::CTRL | Qt::Key_Delete), m_sidebar,
                                   &ConversationSidebar::deleteCurrent);
    del->setShortcutContext(Qt::WidgetShortcut);
    m_sidebar->listView()->addAction(del);
    // Enabled exactly while a deleted conversation can be restored (Ctrl+Z in a text field is
    // that field's own undo).
    QAction *undo = edit->addAction(tr("&Undo delete"), QKeySequence::Undo, m_sidebar, &ConversationSidebar::undoDelete);
    undo->setEnabled(false);
    connect(m_sidebar, &ConversationSidebar::undoAvailableChanged, undo, [undo](bool available, const QString &title) {
        undo->setEnabled(available);
        undo->setText(available ? tr("&Undo delete of “%1”").arg(title) : tr("&Undo delete"));
    });
    edit->addSeparator();
    // The platform's Preferences shortcut; Ctrl+, where it has none (X11 without KDE).
    QAction *preferences = edit->addAction(tr("Pre&ferences…"), this, &MainWindow::openPreferences);
    const QList<QKeySequence> preferenceKeys = QKeySequence::keyBindings(QKeySequence::Preferences);
    preferences->setShortcuts(preferenceKeys.isEmpty() ? QList<QKeySequence>{QKeySequence(Qt::CTRL | Qt::Key_Comma)}
                                                       : preferenceKeys);
    preferences->setMenuRole(QAction::PreferencesRole);

    QMenu *view = menuBar()->addMenu(tr("&View"));
    view->addAction(tr("Add a &pane (compare)"), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_N), this, [this] { addPane(); });
    QMenu *precisionPane = view->addMenu(tr("Add a pane at another p&recision"));
    precisionPane->setToolTipsVisible(true);
    for (auto [key, label] : {std::pair{"fp8", tr("FP8 (E4M3 weights)")},
                              {"bf16", tr("BF16 weights")},
                              {"auto", tr("Automatic (FP8 on the GPU, exact on the CPU)")}}) {
        QAction *a = precisionPane->addAction(label, this, [this, key = QString(key)] { addPrecisionPane(key); });
        a->setToolTip(tr("The same model loaded a second time at this precision, in a new pane; with "
                         "“Send to all panes” both answer the same question"));
    }
    view->addAction(tr("&Close pane"), QKeySequence(Qt::CTRL | Qt::Key_W), this, &MainWindow::closeCurrentPane);
    m_sendToAll = view->addAction(tr("&Send to all panes"));
    m_sendToAll->setCheckable(true);
    m_sendToAll->setToolTip(tr("A message sent in one pane is sent in every pane, each with its own preset"));
    QAction *profiler = m_profilerDock->toggleViewAction();
    profiler->setText(tr("&Profiler"));
    profiler->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_P));
    view->addAction(profiler);

    m_presetMenu = menuBar()->addMenu(tr("&Presets"));

    QMenu *model = menuBar()->addMenu(tr("&Model"));
    model->addAction(tr("&Download…"), this, &MainWindow::downloadModel);
    // The recent models (ModelHub::recentModels), read each time the menu opens.
    QMenu *recent = model->addMenu(tr("&Recent models"));
    connect(recent, &QMenu::aboutToShow, this, [this, recent] {
        recent->clear();
        for (const QString &dir : ModelHub::recentModels())
            recent->addAction(QDir::toNativeSeparators(dir), this, [this, dir] { loadModelFolder(dir); })
                ->setEnabled(QDir(dir).exists());
        if (recent->isEmpty()) recent->addAction(tr("(none yet)"))->setEnabled(false);
    });
    model->addAction(tr("&Connect to server…"), this, &MainWindow::connectToServer);
    // Back to the local model; enabled while connected.
    m_disconnect = model->addAction(tr("D&isconnect from the server"), m_session.data(), &EngineSession::disconnectRemote);
    m_disconnect->setEnabled(false);
    m_serverAction = model->addAction(tr("&Server…"), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_S), this,
                                      &MainWindow::openServerPanel);
    m_serverAction->setToolTip(tr("Serve the loaded model to OpenAI-compatible clients over HTTP"));
    model->addSeparator();
    // One checkable action per choice of an engine option (field, exclusive within group): the
    // choice is remembered under setting and applied by reconfiguring the session.
    auto addChoice = [this](QMenu *menu, QActionGroup *group, const QString &label, QString EngineSessionOptions::*field,
                            const QString &setting, const QString &key) {
        QAction *a = menu->addAction(label);
        a->setCheckable(true);
        a->setChecked(m_session->options().*field == key);
        group->addAction(a);
        // The Preferences dialog changes the same options: the check follows the session.
        connect(menu, &QMenu::aboutToShow, a, [this, a, field, key] { a->setChecked(m_session->options().*field == key); });
        connect(a, &QAction::triggered, this, [this, field, setting, key] {
            EngineSessionOptions o = m_session->options();
            o.*field = key;
            QSettings().setValue(setting, key);
            m_session->reconfigure(o);
        });
        return a;
    };
    auto *backends = new QActionGroup(this);
    model->addAction(tr("&Expert lab…"), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_E), this, [this] {
        if (m_current) m_current->openExpertLab();
    });
    QMenu *backendMenu = model->addMenu(tr("&Backend"));
    backendMenu->setToolTipsVisible(true);
    // A backend that cannot run here is shown, disabled, with the reason (no CUDA device, no module).
    for (auto [key, label] : {std::pair{"auto", tr("Automatic (GPU when usable)")}, {"cuda", tr("CUDA GPU")}, {"cpu", tr("CPU")}}) {
        QAction *a = addChoice(backendMenu, backends, label, &EngineSessionOptions::backend,
                               QString::fromLatin1(settings_keys::kBackend), key);
        const EngineSession::BackendAvailability availability = EngineSession::backendAvailability(key);
        if (availability.usable) continue;
        a->setEnabled(false);
        a->setText(tr("%1 — not available: %2").arg(label, availability.reason));
        a->setToolTip(availability.reason);
    }
    auto *precisions = new QActionGroup(this);
    QMenu *precisionMenu = model->addMenu(tr("&Precision"));
    precisionMenu->setToolTipsVisible(true);
    for (auto [key, label] : {std::pair{"auto", tr("Automatic (FP8 on the GPU, exact on the CPU)")},
                              {"fp8", tr("FP8 (E4M3 weights)")},
                              {"bf16", tr("BF16 weights")}}) {
        QAction *a = addChoice(precisionMenu, precisions, label, &EngineSessionOptions::precision,
                               QString::fromLatin1(settings_keys::kPrecision), key);
        if (QString(key) != "auto")
            a->setToolTip(tr("On the CPU the weights are rounded the same way and computed in fp32, so the "
                             "effect of the precision on answers and routing can be compared anywhere."));
    }
    auto *kvCaches = new QActionGroup(this);
    QMenu *kvMenu = model->addMenu(tr("&KV cache"));
    kvMenu->setToolTipsVisible(true);
    for (auto [key, label] : {std::pair{"bf16", tr("BF16 (exact keys and values)")},
                              {"fp8", tr("FP8 (E4M3: half the memory, on the GPU)")}}) {
        QAction *a = addChoice(kvMenu, kvCaches, label, &EngineSessionOptions::kvCache,
                               QString::fromLatin1(settings_keys::kKvCache), key);
        a->setToolTip(QString(key) == "fp8"
                          ? tr("Keys and values stored in 8 bits: twice the context or replies in the same GPU "
                               "memory, at some cost in accuracy. The CPU keeps its fp32 cache.")
                          : tr("Keys and values stored in 16 bits, as the model computes them."));
    }
    // The GPU's share the engine may fill; the KV pool takes what the weights and workspace leave.
    auto *shares = new QActionGroup(this);
    QMenu *shareMenu = model->addMenu(tr("&GPU memory"));
    shareMenu->setToolTipsVisible(true);
    for (const int percent : {50, 70, 80, 90, 95}) {
        QAction *a = shareMenu->addAction(percent == 90 ? tr("%1% (default)").arg(percent) : tr("%1%").arg(percent));
        a->setCheckable(true);
        a->setChecked(qRound(m_session->options().gpuMemoryUtilization * 100.0) == percent);
        a->setToolTip(tr("The share of the GPU's memory ExpertScope may fill: the weights, the workspace and, "
                         "with what they leave, the KV cache (more context and more replies at once). Memory "
                         "other programs hold counts as used."));
        shares->addAction(a);
        connect(shareMenu, &QMenu::aboutToShow, a, [this, a, percent] {
            a->setChecked(qRound(m_session->options().gpuMemoryUtilization * 100.0) == percent);
        });
        connect(a, &QAction::triggered, this, [this, percent] {
            EngineSessionOptions o = m_session->options();
            o.gpuMemoryUtilization = percent / 100.0;
            QSettings().setValue(settings_keys::kGpuMemoryUtilization, o.gpuMemoryUtilization);
            m_session->reconfigure(o);
        });
    }

    QMenu *help = menuBar()->addMenu(tr("&Help"));
    help->addAction(tr("&About ExpertScope"), this, [this] {
        QMessageBox::about(this, tr("About ExpertScope"),
                           tr("<p><b>ExpertScope</b> %1</p><p>Chat with ERNIE-4.5 models and see inside them while they "
                              "answer.</p><p>Licensed under the GNU GPL, version 3 or later.</p>")
                               .arg(QApplication::applicationVersion()));
    });
}

void MainWindow::openPreferences() {
    PreferencesDialog dialog(m_session, this);
    dialog.setNotifier([window = QPointer<MainWindow>(this)](const QString &message) {
        if (window) window->statusBar()->showMessage(message, 15000);
    });
    dialog.exec();
}

void MainWindow::managePresets() {
    PresetEditorDialog dialog(m_store, this);
    dialog.setModelDefaults(overlaySampling(m_session->modelInfo().defaults, AppSettings::defaultSampling()));
    if (m_current && m_current->activePreset()) dialog.selectPreset(m_current->activePreset()->id);
    dialog.exec();
}

void MainWindow::rebuildPresetMenu() {
    m_presetMenu->clear();
    m_presetMenu->addAction(tr("&Manage presets…"), this, &MainWindow::managePresets);
    m_presetMenu->addAction(tr("&Sampling settings of this conversation…"), this, [this] {
        if (m_current) m_current->editConversationSettings();
    });
    m_presetMenu->addSeparator();
    m_presetMenu->addAction(tr("No preset"), this, [this] { applyPresetToCurrentPane(std::nullopt); });
    m_presetMenu->addSeparator();
    int n = 0;
    for (const Preset &p : m_store->presets()) {
        QAction *a = m_presetMenu->addAction(p.name, this, [this, p] { applyPresetToCurrentPane(p); });
        // Alt+1…9 belong to the focused pane's preset bar; the menu only shows them.
        if (++n <= 9) a->setText(QStringLiteral("%1\tAlt+%2").arg(p.name).arg(n));
        a->setToolTip(p.prefix);
    }
}

void MainWindow::applyPresetToCurrentPane(const std::optional<Preset> &preset) {
    if (m_current) m_current->setActivePreset(preset);
}

ChatPane *MainWindow::addPane(EngineSession *session) {
    // Another pane never makes the window wider than it is (or than the screen): without room
    // for one more at its minimum width, none is added and the status bar says why.
    if (!m_panes.isEmpty()) {
        // Measured from the splitters themselves (the window's own minimum is updated only when
        // its layout runs, after this returns).
        const int room = std::min(width(), screen()->availableGeometry().width());
        int needed = m_mainSplitter->minimumSizeHint().width() + m_panes.front()->minimumSizeHint().width() +
                     m_panesSplitter->handleWidth();
        if (m_profilerDock->isVisible() && !m_profilerDock->isFloating())
            needed += m_profilerDock->minimumSizeHint().width() + style()->pixelMetric(QStyle::PM_DockWidgetSeparatorExtent);
        if (needed > room) {
            statusBar()->showMessage(
                tr("No room for another pane: close one (Ctrl+W), hide the profiler or widen the window"), 10000);
            releaseUnusedSessions();
            return nullptr;
        }
    }
    auto *pane = new ChatPane(m_store, session ? session : m_session.data(), m_panesSplitter);
    m_panesSplitter->addWidget(pane);
    m_panes.push_back(pane);
    connect(pane, &ChatPane::activated, this, [this, pane] { setCurrentPane(pane); });
    connect(pane, &ChatPane::messageSelected, m_profiler, &ProfilerPanel::selectMessage);
    connect(pane, &ChatPane::conversationCreated, this, [this](qint64 id) { m_sidebar->selectConversation(id); });
    connect(pane, &ChatPane::managePresetsRequested, this, &MainWindow::managePresets);
    connect(pane, &ChatPane::errorOccurred, this, [this](const QString &m) { statusBar()->showMessage(m, 10000); });
    connect(pane, &ChatPane::replyInterrupted, this, [this](const QString &m) { statusBar()->showMessage(m, 10000); });
    connect(pane->composer(), &Composer::sendRequested, this, [this, pane](const QString &text) { broadcast(pane, text); });
    setCurrentPane(pane);
    pane->composer()->editor()->setFocus();
    return pane;
}

ChatPane *MainWindow::addPrecisionPane(const QString &precision) {
    if (!m_session->isModelLoaded()) {
        statusBar()->showMessage(tr("Load a model first: the new pane uses the same model at another precision"), 8000);
        return nullptr;
    }
    if (m_session->isRemote()) {
        statusBar()->showMessage(tr("A server's precision is the server's: open a local model to compare precisions"),
                                 8000);
        return nullptr;
    }
    if (m_session->options().precision == precision) return addPane();
    for (EngineSession *s : std::as_const(m_extraSessions))
        if (s->options().precision == precision) return addPane(s);
    const QString dir = m_session->modelInfo().dir;
    EngineSessionOptions o = m_session->options();
    o.precision = precision;
    const MemoryEstimateView e = EngineSession::estimate(dir, o);
    if (e.ok && !e.fits) {
        const auto answer = QMessageBox::warning(
            this, tr("A second copy may not fit"),
            tr("<p>This loads the model a second time.</p><p>%1</p><p>Load anyway?</p>").arg(e.message.toHtmlEscaped()),
            QMessageBox::Yes | QMessageBox::No, QMessageBox::No);
        if (answer != QMessageBox::Yes) return nullptr;
    }
    auto *session = new EngineSession(o, this);
    m_extraSessions.push_back(session);
    connect(session, &EngineSession::modelLoadFailed, this, [this](const QString &d, const QString &message) {
        QMessageBox::critical(this, tr("The model could not be loaded"),
                              tr("<p>Loading <b>%1</b> failed:</p><p>%2</p>").arg(d.toHtmlEscaped(), message.toHtmlEscaped()));
    });
    session->loadModel(dir);
    return addPane(session);
}

void MainWindow::closeCurrentPane() {
    if (m_panes.size() <= 1 || !m_current) return;
    ChatPane *pane = m_current;
    m_panes.removeOne(pane);
    // Later (this may run inside one of the pane's own key events); its session goes after it.
    connect(pane, &QObject::destroyed, this, &MainWindow::releaseUnusedSessions);
    pane->deleteLater();
    setCurrentPane(m_panes.back());
}

// A precision pane's session lives as long as some pane uses it (its model memory is freed then).
void MainWindow::releaseUnusedSessions() {
    for (qsizetype i = m_extraSessions.size() - 1; i >= 0; --i) {
        EngineSession *s = m_extraSessions[i];
        const bool used = std::any_of(m_panes.begin(), m_panes.end(), [s](ChatPane *p) { return p->session() == s; });
        if (used) continue;
        m_extraSessions.removeAt(i);
        s->deleteLater();
    }
}

void MainWindow::setCurrentPane(ChatPane *pane) {
    if (m_current == pane) return;
    m_current = pane;
    for (ChatPane *p : m_panes) p->setStyleSheet(p == pane && m_panes.size() > 1 ? "es--ChatPane { border: 1px solid palette(highlight); }" : QString());
    m_sidebar->selectConversation(pane ? pane->conversationId() : std::nullopt);
}

// "Send to all panes": the same question, without the sender's mode prefix, goes to every other
// pane with that pane's own preset prefix.
void MainWindow::broadcast(ChatPane *from, const QString &text) {
    if (!m_sendToAll->isChecked() || m_broadcasting) return;
    m_broadcasting = true;
    QString question = text;
    if (from->activePreset() && question.startsWith(from->activePreset()->prefix))
        question.remove(0, from->activePreset()->prefix.size());
    for (ChatPane *p : m_panes) {
        if (p == from || p->isGenerating()) continue;
        const QString prefix = p->activePreset() ? p->activePreset()->prefix : QString();
        p->send(prefix + question);
    }
    m_broadcasting = false;
}

void MainWindow::openModel() {
    const QString dir = QFileDialog::getExistingDirectory(this, tr("Open a model folder (config.json + safetensors)"),
                                                          QSettings().value("model/lastDir").toString());
    if (dir.isEmpty()) return;
    emit modelFolderChosen(dir);
    loadModelFolder(dir);
}

void MainWindow::loadModelFolder(const QString &dir, bool askWhenTooBig) {
    const MemoryEstimateView e = EngineSession::estimate(dir, m_session->options());
    if (!e.ok) {
        QMessageBox::critical(this, tr("The model cannot be opened"),
                              tr("<p>%1 cannot be opened:</p><p>%2</p>").arg(dir.toHtmlEscaped(), e.message.toHtmlEscaped()));
        return;
    }
    if (!e.fits && askWhenTooBig) {
        const auto answer = QMessageBox::warning(
            this, tr("The model may not fit"),
            tr("<p>%1</p><p>Loading may fail or make the system swap. Load anyway?</p>").arg(e.message.toHtmlEscaped()),
            QMessageBox::Yes | QMessageBox::No, QMessageBox::No);
        if (answer != QMessageBox::Yes) return;
    }
    statusBar()->showMessage(e.message, 8000);
    m_session->loadModel(dir);
}

void MainWindow::downloadModel() {
    DownloadModelDialog dialog(m_session->options(), this);
    QString chosen;
    connect(&dialog, &DownloadModelDialog::loadRequested, this, [&chosen](const QString &dir) { chosen = dir; });
    dialog.exec();
    if (!chosen.isEmpty()) loadModelFolder(chosen);
}

void MainWindow::connectToServer() {
    ConnectServerDialog dialog(this);
    if (dialog.exec() != QDialog::Accepted) return;
    connectToEndpoint(dialog.endpoint());
}

ServerDialog *MainWindow::serverDialog() const { return m_serverDialog; }

void MainWindow::openServerPanel() {
    if (!m_serverDialog) m_serverDialog = new ServerDialog(m_server, m_session, this);
    m_serverDialog->show();
    m_serverDialog->raise();
    m_serverDialog->activateWindow();
}

void MainWindow::connectToEndpoint(const RemoteEndpoint &endpoint) {
    m_connectingTo = normalizeBaseUrl(endpoint.baseUrl.toString()).toString();
    m_session->connectRemote(endpoint);
}

void MainWindow::onModelLoaded(const SessionModelInfo &info) {
    m_disconnect->setEnabled(!info.remoteUrl.isEmpty());
    m_loadLabel->setVisible(false);
    m_loadProgress->setVisible(false);
    m_connectingTo.clear();
    if (!info.remoteUrl.isEmpty()) {
        m_modelLabel->setText(tr("remote: %1 · %2").arg(info.remoteUrl, info.name));
        m_backendLabel->setText(info.isMoe ? tr("%1 experts on %2 MoE layers (server metrics)")
                                                 .arg(info.nExperts)
                                                 .arg(info.moeLayers.size())
                                           : tr("no expert metrics from the server"));
        QSettings().setValue("remote/model", info.name);
        return;
    }
    m_modelLabel->setText(info.isMoe ? tr("%1 — MoE, %2 experts (top-%3), %4 layers")
                                           .arg(info.name)
                                           .arg(info.nExperts)
                                           .arg(info.nExpertsUsed)
                                           .arg(info.nLayers)
                                     : tr("%1 — dense, %2 layers").arg(info.name).arg(info.nLayers));
    // On the CPU because CUDA cannot be used here: say so, and why (the reason in the tooltip).
    if (info.backendNote.isEmpty()) {
        m_backendLabel->setText(QStringLiteral("%1 · %2").arg(info.backend, info.precision));
        m_backendLabel->setToolTip(QString());
    } else {
        m_backendLabel->setText(tr("%1 · %2 · GPU not used").arg(info.backend, info.precision));
        m_backendLabel->setToolTip(info.backendNote);
    }
    for (EngineSession *s : std::as_const(m_extraSessions)) // panes at another precision follow the model
        if (s->modelInfo().dir != info.dir && !s->isLoading()) s->loadModel(info.dir);
    QSettings settings;
    settings.setValue("model/lastDir", info.dir);
    ModelHub::noteRecentModel(info.dir);
}

void MainWindow::onStats(const SessionStats &s) {
    m_memoryLabel->setText(tr("Memory %1 / %2").arg(human_bytes(s.memoryInUse), human_bytes(s.memoryTotal)));
    m_speedLabel->setText(s.tokensPerSecond > 0 ? tr("%1 tok/s").arg(s.tokensPerSecond, 0, 'f', 1) : tr("idle"));
    // A remote server's queue is shown always (other clients load it); the local one when in use.
    m_queueLabel->setText(tr("%1 running · %2 waiting").arg(s.running).arg(s.waiting));
    m_queueLabel->setVisible(m_session->isRemote() || s.running > 0 || s.waiting > 0);
}

QString MainWindow::statusText() const {
    QStringList parts{m_modelLabel->text(), m_backendLabel->text(), m_memoryLabel->text()};
    if (!m_queueLabel->isHidden()) parts << m_queueLabel->text();
    parts << m_speedLabel->text();
    return parts.join(" | ");
}

void MainWindow::closeEvent(QCloseEvent *event) {
    QSettings settings;
    settings.setValue("window/geometry", saveGeometry());
    settings.setValue("window/mainSplitter", m_mainSplitter->saveState());
    settings.setValue("window/state", saveState());
    settings.setValue("session/lastConversation", m_current && m_current->conversationId() ? *m_current->conversationId() : 0);
    QMainWindow::closeEvent(event);
}

} // namespace es
