// ConnectServerDialog (see connect_server_dialog.h).
#include "connect_server_dialog.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QFormLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSettings>
#include <QVBoxLayout>

namespace es {

ConnectServerDialog::ConnectServerDialog(QWidget *parent)
    : QDialog(parent), m_query(new RemoteModelQuery(this)) {
    setWindowTitle(tr("Connect to a server"));
    QSettings settings;
    m_url =
        new QLineEdit(settings.value("remote/url", QStringLiteral("http://127.0.0.1:8000")).toString(), this);
    m_url->setPlaceholderText(QStringLiteral("http://host:8000"));
    m_url->setToolTip(
        tr("Base URL of an OpenAI-compatible server: expertscope-cli serve, vLLM, SGLang, FastDeploy…"));
    m_key = new QLineEdit(settings.value("remote/apiKey").toString(), this);
    m_key->setEchoMode(QLineEdit::Password);
    m_key->setPlaceholderText(tr("none"));
    m_rememberKey = new QCheckBox(tr("Remember key"), this);
    m_rememberKey->setChecked(settings.contains("remote/apiKey"));
    m_rememberKey->setToolTip(tr("Stores the key in ExpertScope's settings file, unencrypted"));
    m_fetch = new QPushButton(tr("Fetch models"), this);
    m_models = new QComboBox(this);
    m_models->setEnabled(false);
    m_message = new QLabel(this);
    m_message->setWordWrap(true);
    m_message->setTextInteractionFlags(Qt::TextSelectableByMouse);

    auto *form = new QFormLayout;
    form->addRow(tr("Server URL"), m_url);
    auto *keyRow = new QHBoxLayout;
    keyRow->addWidget(m_key, 1);
    keyRow->addWidget(m_rememberKey);
    form->addRow(tr("API key (optional)"), keyRow);
    auto *modelRow = new QHBoxLayout;
    modelRow->addWidget(m_models, 1);
    modelRow->addWidget(m_fetch);
    form->addRow(tr("Model"), modelRow);
    auto *buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel, this);
    m_ok = buttons->button(QDialogButtonBox::Ok);
    m_ok->setText(tr("Connect"));
    auto *layout = new QVBoxLayout(this);
    layout->addLayout(form);
    layout->addWidget(m_message);
    layout->addWidget(buttons);
    resize(520, sizeHint().height());

    connect(buttons, &QDialogButtonBox::accepted, this, &ConnectServerDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    connect(m_fetch, &QPushButton::clicked, this, &ConnectServerDialog::fetchModels);
    // A changed address or key makes the fetched list stale.
    for (QLineEdit *e : {m_url, m_key})
        connect(e, &QLineEdit::textEdited, this, [this] {
            m_models->clear();
            m_models->setEnabled(false);
            updateOk();
        });
    m_models->setPlaceholderText(tr("the server's first model"));
    connect(m_query, &RemoteModelQuery::finished, this,
            [this](const QStringList &models, const QString &error) {
                m_fetch->setEnabled(true);
                m_models->clear();
                m_models->addItems(models);
                if (!models.isEmpty()) m_models->setCurrentIndex(0); // a placeholder would stay otherwise
                m_models->setEnabled(!models.isEmpty());
                if (!error.isEmpty()) {
                    m_message->setStyleSheet(QStringLiteral("color: #b00020"));
                    m_message->setText(error);
                } else {
                    m_message->setStyleSheet(QString());
                    m_message->setText(tr("%n model(s) served.", nullptr, int(models.size())));
                }
                updateOk();
                emit modelsFetched(error.isEmpty());
            });
    updateOk();
}

RemoteEndpoint ConnectServerDialog::endpoint() const {
    return {normalizeBaseUrl(m_url->text()), m_key->text().trimmed(), m_models->currentText()};
}

void ConnectServerDialog::fetchModels() {
    const QUrl url = normalizeBaseUrl(m_url->text());
    if (url.isEmpty()) {
        m_message->setStyleSheet(QStringLiteral("color: #b00020"));
        m_message->setText(tr("Not a server address: give http://host:port"));
        emit modelsFetched(false);
        return;
    }
    m_fetch->setEnabled(false);
    m_message->setStyleSheet(QString());
    m_message->setText(tr("Asking %1 for its models…").arg(url.toString()));
    m_query->fetch(url, m_key->text().trimmed());
}

// A server address is enough: without a fetched list the server's first model is used.
void ConnectServerDialog::updateOk() { m_ok->setEnabled(!normalizeBaseUrl(m_url->text()).isEmpty()); }

void ConnectServerDialog::accept() {
    QSettings settings;
    settings.setValue("remote/url", m_url->text().trimmed());
    if (m_rememberKey->isChecked() && !m_key->text().trimmed().isEmpty())
        settings.setValue("remote/apiKey", m_key->text().trimmed());
    else
        settings.remove("remote/apiKey");
    QDialog::accept();
}

} // namespace es
