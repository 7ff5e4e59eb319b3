// ServerDialog: Model ▸ Server… (Ctrl+Shift+S) — serves the model loaded in the app to
// OpenAI-compatible clients over HTTP through the window's LocalServer: address and port (port
// 0: any free one), an optional API key (hidden unless "Show"; remembered only with "Remember
// key"), "Allow without a key" for an address other machines can reach, the served model name;
// Start and Stop; the listening URL once started (selectable, with Copy); what went wrong, in
// words naming it; the totals (requests, active, errors, tokens/s, tokens) and the requests log
// (ServedRequestModel), with Clear. Not modal: the server keeps running when it is closed, and it
// refreshes from LocalServer's signals (a GUI-thread timer drains the server's answers).
// The address, port and name are remembered when a server starts (ServerSettings).
#pragma once

#include "local_server.h"

#include <QDialog>
#include <QPointer>

class QCheckBox;
class QLabel;
class QLineEdit;
class QPushButton;
class QSpinBox;
class QTableView;
class QToolButton;

namespace es {

class EngineSession;
class ServedRequestModel;

class ServerDialog : public QDialog {
    Q_OBJECT
public:
    ServerDialog(LocalServer *server, EngineSession *session, QWidget *parent = nullptr);

    // The options the fields hold now.
    LocalServerOptions options() const;

    // Tests drive these widgets directly.
    QLineEdit *hostEdit() const { return m_host; }
    QSpinBox *portSpin() const { return m_port; }
    QLineEdit *keyEdit() const { return m_key; }
    QToolButton *showKeyButton() const { return m_showKey; }
    QCheckBox *rememberKeyBox() const { return m_rememberKey; }
    QCheckBox *allowWithoutKeyBox() const { return m_allowWithoutKey; }
    QLineEdit *modelNameEdit() const { return m_modelName; }
    QPushButton *startButton() const { return m_start; }
    QPushButton *stopButton() const { return m_stop; }
    QLineEdit *urlEdit() const { return m_url; }
    QPushButton *copyButton() const { return m_copy; }
    QLabel *messageLabel() const { return m_message; }
    QLabel *totalsLabel() const { return m_totals; }
    QTableView *requestsView() const { return m_table; }
    ServedRequestModel *requestsModel() const { return m_model; }
    QPushButton *clearButton() const { return m_clear; }

public slots:
    void start(); // the fields → LocalServer::start; the error, if any, in the message line
    void stop();

private:
    void showMessage(const QString &text, bool error);
    void updateState();
    void showTotals(const ServerTotals &t);
    void updateModelHint();

    QPointer<LocalServer> m_server;
    QPointer<EngineSession> m_session;
    QLabel *m_intro = nullptr;
    QLineEdit *m_host = nullptr, *m_key = nullptr, *m_modelName = nullptr, *m_url = nullptr;
    QSpinBox *m_port = nullptr;
    QToolButton *m_showKey = nullptr;
    QCheckBox *m_rememberKey = nullptr, *m_allowWithoutKey = nullptr;
    QPushButton *m_start = nullptr, *m_stop = nullptr, *m_copy = nullptr, *m_clear = nullptr;
    QLabel *m_message = nullptr, *m_totals = nullptr, *m_urlHint = nullptr;
    QTableView *m_table = nullptr;
    ServedRequestModel *m_model = nullptr;
};

} // namespace es
