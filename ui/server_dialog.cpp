// ServerDialog (see server_dialog.h).
#include "server_dialog.h"

#include "app_settings.h"
#include "engine_session.h"
#include "served_request_model.h"

#include <QApplication>
#include <QCheckBox>
#include <QClipboard>
#include <QDialogButtonBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QLocale>
#include <QPushButton>
#include <QSpinBox>
#include <QTableView>
#include <QToolButton>
#include <QVBoxLayout>

namespace es {

ServerDialog::ServerDialog(LocalServer *server, EngineSession *session, QWidget *parent)
    : QDialog(parent), m_server(server), m_session(session) {
    setWindowTitle(tr("Server"));
    const ServerSettings saved = ServerSettings::load();

    m_intro = new QLabel(this);
    m_intro->setWordWrap(true);
    m_intro->setTextFormat(Qt::PlainText); // model names and messages are shown as they are

    m_host = new QLineEdit(saved.host, this);
    m_host->setToolTip(tr("The address to listen on: 127.0.0.1 serves this machine only; 0.0.0.0 (or this "
                          "machine's address) lets other machines connect, and needs an API key"));
    m_port = new QSpinBox(this);
    m_port->setRange(0, 65535);
    m_port->setSpecialValueText(tr("any free port"));
    m_port->setValue(saved.port);
    m_port->setToolTip(tr("The TCP port; 0 picks any free one (the URL below shows which)"));
    auto *addressRow = new QHBoxLayout;
    addressRow->addWidget(m_host, 1);
    addressRow->addWidget(new QLabel(tr("Port"), this));
    addressRow->addWidget(m_port);

    m_key = new QLineEdit(saved.apiKey, this);
    m_key->setEchoMode(QLineEdit::Password);
    m_key->setPlaceholderText(tr("none"));
    m_key->setToolTip(tr("Clients must send “Authorization: Bearer <key>”; without a key only this machine "
                         "may be served"));
    m_showKey = new QToolButton(this);
    m_showKey->setText(tr("Show"));
    m_showKey->setCheckable(true);
    m_showKey->setToolTip(tr("Show or hide the key"));
    m_rememberKey = new QCheckBox(tr("Remember key"), this);
    m_rememberKey->setChecked(saved.rememberKey);
    m_rememberKey->setToolTip(tr("Stores the key in ExpertScope's settings file, unencrypted"));
    auto *keyRow = new QHBoxLayout;
    keyRow->addWidget(m_key, 1);
    keyRow->addWidget(m_showKey);
    keyRow->addWidget(m_rememberKey);
    m_allowWithoutKey = new QCheckBox(tr("Allow without a key on an address other machines can reach"), this);
    m_allowWithoutKey->setToolTip(tr("Anyone who can reach the address could then use the model"));

    m_modelName = new QLineEdit(saved.modelName, this);
    m_modelName->setToolTip(tr("The name clients send as “model” and /v1/models lists; empty: the model "
                               "folder's name"));

    auto *form = new QFormLayout;
    form->addRow(tr("Address"), addressRow);
    form->addRow(tr("API key (optional)"), keyRow);
    form->addRow(QString(), m_allowWithoutKey);
    form->addRow(tr("Model name"), m_modelName);

    m_start = new QPushButton(tr("Start"), this);
    m_start->setDefault(true);
    m_stop = new QPushButton(tr("Stop"), this);
    m_url = new QLineEdit(this);
    m_url->setReadOnly(true);
    m_url->setPlaceholderText(tr("not serving"));
    m_url->setToolTip(tr("Where the server listens; OpenAI clients take this followed by /v1 as their base URL"));
    m_copy = new QPushButton(tr("Copy"), this);
    m_copy->setToolTip(tr("Copy the URL"));
    auto *runRow = new QHBoxLayout;
    runRow->addWidget(m_start);
    runRow->addWidget(m_stop);
    runRow->addSpacing(12);
    runRow->addWidget(new QLabel(tr("URL"), this));
    runRow->addWidget(m_url, 1);
    runRow->addWidget(m_copy);
    m_urlHint = new QLabel(this);
    m_urlHint->setWordWrap(true);
    m_urlHint->setTextFormat(Qt::PlainText);
    m_urlHint->setTextInteractionFlags(Qt::TextSelectableByMouse);

    m_message = new QLabel(this);
    m_message->setWordWrap(true);
    m_message->setTextFormat(Qt::PlainText);
    m_message->setTextInteractionFlags(Qt::TextSelectableByMouse);
    m_message->setVisible(false);

    m_totals = new QLabel(this);
    m_totals->setToolTip(tr("Requests: answered by the server's routes. Active: being answered now. Errors: "
                            "answered with a status of 400 or more. tok/s: tokens generated for its requests "
                            "per second over the last two seconds."));
    m_model = new ServedRequestModel(server, this);
    m_table = new QTableView(this);
    m_table->setModel(m_model);
    m_table->setSelectionBehavior(QAbstractItemView::SelectRows);
    m_table->setAlternatingRowColors(true);
    m_table->verticalHeader()->setVisible(false);
    m_table->verticalHeader()->setDefaultSectionSize(m_table->fontMetrics().height() + 6);
    m_table->horizontalHeader()->setStretchLastSection(false);
    m_table->horizontalHeader()->setSectionResizeMode(ServedRequestModel::Route, QHeaderView::Stretch);
    m_table->setWordWrap(false);
    const QFontMetrics fm = m_table->fontMetrics();
    const auto width = [&fm](const QString &sample) { return fm.horizontalAdvance(sample) + 18; };
    m_table->setColumnWidth(ServedRequestModel::Time, width(QStringLiteral("00:00:00.000")));
    m_table->setColumnWidth(ServedRequestModel::Client, width(QStringLiteral("127.0.0.1:65535")));
    m_table->setColumnWidth(ServedRequestModel::Model, width(QStringLiteral("ERNIE-4.5-0.3B")));
    for (int c : {ServedRequestModel::PromptTokens, ServedRequestModel::CompletionTokens, ServedRequestModel::Status})
        m_table->setColumnWidth(c, std::max(width(QStringLiteral("10,000")),
                                            width(m_model->headerData(c, Qt::Horizontal).toString())));
    for (int c : {ServedRequestModel::Duration, ServedRequestModel::Ttft})
        m_table->setColumnWidth(c, width(QStringLiteral("10,000 ms")));
    m_clear = new QPushButton(tr("Clear"), this);
    m_clear->setToolTip(tr("Empty the requests log (the totals stay)"));
    auto *logHead = new QHBoxLayout;
    logHead->addWidget(m_totals, 1);
    logHead->addWidget(m_clear);

    auto *buttons = new QDialogButtonBox(QDialogButtonBox::Close, this);
    auto *layout = new QVBoxLayout(this);
    layout->addWidget(m_intro);
    layout->addLayout(form);
    layout->addLayout(runRow);
    layout->addWidget(m_urlHint);
    layout->addWidget(m_message);
    layout->addLayout(logHead);
    layout->addWidget(m_table, 1);
    layout->addWidget(buttons);
    resize(900, 560);

    connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    connect(m_start, &QPushButton::clicked, this, &ServerDialog::start);
    connect(m_stop, &QPushButton::clicked, this, &ServerDialog::stop);
    connect(m_copy, &QPushButton::clicked, this, [this] {
        QApplication::clipboard()->setText(m_url->text());
        showMessage(tr("Copied %1.").arg(m_url->text()), false);
    });
    connect(m_showKey, &QToolButton::toggled, this, [this](bool shown) {
        m_key->setEchoMode(shown ? QLineEdit::Normal : QLineEdit::Password);
        m_showKey->setText(shown ? tr("Hide") : tr("Show"));
    });
    // Unticking forgets a stored key at once; ticking stores it with the next start.
    connect(m_rememberKey, &QCheckBox::toggled, this, [](bool on) {
        if (on) return;
        ServerSettings s = ServerSettings::load();
        s.rememberKey = false;
        s.apiKey.clear();
        s.save();
    });
    connect(m_clear, &QPushButton::clicked, this, [this] {
        if (m_server) m_server->clearRequests();
    });
    if (server) {
        connect(server, &LocalServer::started, this, [this] { updateState(); });
        connect(server, &LocalServer::stopped, this, [this](const QString &why) {
            updateState();
            if (why.isEmpty())
                showMessage(tr("Stopped."), false);
            else
                showMessage(tr("The server stopped: %1. Start it again to serve the model loaded then.").arg(why),
                            true);
        });
        connect(server, &LocalServer::totalsChanged, this, &ServerDialog::showTotals);
    }
    if (session) {
        connect(session, &EngineSession::modelLoaded, this, [this] { updateState(); });
        connect(session, &EngineSession::modelLoadStarted, this, [this] { updateState(); });
        connect(session, &EngineSession::modelLoadFailed, this, [this] { updateState(); });
        connect(session, &EngineSession::remoteDisconnected, this, [this] { updateState(); });
    }
    showTotals(server ? server->totals() : ServerTotals{});
    updateState();
}

LocalServerOptions ServerDialog::options() const {
    LocalServerOptions o;
    o.host = m_host->text().trimmed();
    o.port = m_port->value();
    o.apiKey = m_key->text();
    o.allowWithoutKey = m_allowWithoutKey->isChecked();
    o.modelName = m_modelName->text().trimmed();
    return o;
}

void ServerDialog::start() {
    if (!m_server) return;
    const LocalServerOptions o = options();
    const QString error = m_server->start(o);
    if (!error.isEmpty()) {
        showMessage(error, true);
        return;
    }
    ServerSettings s;
    s.host = o.host;
    s.port = o.port;
    s.modelName = o.modelName;
    s.rememberKey = m_rememberKey->isChecked();
    if (s.rememberKey) s.apiKey = o.apiKey;
    s.save();
    showMessage(o.apiKey.isEmpty() ? tr("Serving without a key.")
                                   : tr("Serving; clients send “Authorization: Bearer <key>”."),
                false);
    updateState();
}

void ServerDialog::stop() {
    if (m_server) m_server->stop();
}

void ServerDialog::showMessage(const QString &text, bool error) {
    m_message->setStyleSheet(error ? QStringLiteral("color: #d03b3b") : QString());
    m_message->setText(text);
    m_message->setVisible(!text.isEmpty());
}

void ServerDialog::updateState() {
    const bool running = m_server && m_server->isRunning();
    m_start->setEnabled(!running);
    m_stop->setEnabled(running);
    for (QWidget *w : std::initializer_list<QWidget *>{m_host, m_port, m_key, m_allowWithoutKey, m_modelName})
        w->setEnabled(!running);
    m_url->setText(running ? m_server->url() : QString());
    m_copy->setEnabled(running);
    if (running)
        m_urlHint->setText(tr("OpenAI clients: base URL %1/v1, model “%2”.")
                               .arg(m_server->url(), m_server->servedModelName()));
    m_urlHint->setVisible(running);
    updateModelHint();
}

void ServerDialog::updateModelHint() {
    QString model;
    if (m_session && m_session->isModelLoaded() && !m_session->isRemote()) model = m_session->modelInfo().name;
    m_modelName->setPlaceholderText(model.isEmpty() ? tr("the model folder's name") : model);
    if (m_server && m_server->isRunning())
        m_intro->setText(tr("Serving %1 from the app's engine: the server's requests and your chats share the "
                            "loaded model and are batched together. Loading another model stops the server.")
                             .arg(m_server->servedModelName()));
    else if (!model.isEmpty())
        m_intro->setText(tr("Serve %1, the model loaded in the app, to OpenAI-compatible clients over HTTP "
                            "(/v1/chat/completions, /v1/completions, /v1/models, /metrics). No second copy is "
                            "loaded: the server and your chats share the engine.")
                             .arg(model));
    else
        m_intro->setText(tr("Serve the model loaded in the app to OpenAI-compatible clients over HTTP. Open a "
                            "model first (File ▸ Open model…)."));
}

void ServerDialog::showTotals(const ServerTotals &t) {
    const QLocale l;
    m_totals->setText(tr("Requests %1 · active %2 · errors %3 · %4 tok/s · tokens: %5 prompt, %6 completion")
                          .arg(l.toString(t.requests), l.toString(t.active), l.toString(t.errors),
                               l.toString(t.tokensPerSecond, 'f', 1), l.toString(t.promptTokens),
                               l.toString(t.completionTokens)));
}

} // namespace es
