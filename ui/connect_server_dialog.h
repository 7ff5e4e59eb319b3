// ConnectServerDialog: Model ▸ Connect to server… — the base URL of an OpenAI-compatible server
// (ExpertScope's `serve`, vLLM, SGLang, FastDeploy), an optional API key, "Fetch models" to list
// /v1/models (asynchronous; errors — unreachable, key refused, not an OpenAI server — shown in
// the dialog), and the model to chat with. The URL is remembered; the key only when "Remember
// key" is ticked (QSettings, in clear text, which the checkbox's tooltip says).
#pragma once

#include "remote_client.h"

#include <QDialog>

class QCheckBox;
class QComboBox;
class QLabel;
class QLineEdit;
class QPushButton;

namespace es {

class ConnectServerDialog : public QDialog {
    Q_OBJECT
public:
    explicit ConnectServerDialog(QWidget *parent = nullptr);

    RemoteEndpoint endpoint() const;
    // Tests drive these widgets directly.
    QLineEdit *urlEdit() const { return m_url; }
    QLineEdit *keyEdit() const { return m_key; }
    QComboBox *modelBox() const { return m_models; }
    QPushButton *fetchButton() const { return m_fetch; }
    QPushButton *connectButton() const { return m_ok; }
    QLabel *messageLabel() const { return m_message; }

public slots:
    void fetchModels();
    void accept() override; // saves the URL (and the key when asked), then closes

signals:
    void modelsFetched(bool ok); // after each fetch (tests wait on it)

private:
    void updateOk();

    QLineEdit *m_url, *m_key;
    QCheckBox *m_rememberKey;
    QPushButton *m_fetch, *m_ok;
    QComboBox *m_models;
    QLabel *m_message;
    RemoteModelQuery *m_query;
};

} // namespace es
