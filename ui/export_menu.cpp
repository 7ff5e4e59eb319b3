// ExportMenu (see export_menu.h).
#include "export_menu.h"

#include "chat_store.h"
#include "conversation_export.h"
#include "engine_session.h"
#include "report_data.h"
#include "report_writers.h"

#include <QDesktopServices>
#include <QDir>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QLabel>
#include <QMainWindow>
#include <QMenu>
#include <QMessageBox>
#include <QProgressDialog>
#include <QRegularExpression>
#include <QSettings>
#include <QStandardPaths>
#include <QStatusBar>
#include <QTimer>
#include <QToolButton>
#include <QUrl>

namespace es {

namespace {

// A modal progress dialog shown after 300 ms; setValue() keeps the window responsive.
struct Progress {
    QProgressDialog dialog;
    Progress(QWidget *parent, const QString &label)
        : dialog(label, ExportMenu::tr("Cancel"), 0, 100, parent) {
        dialog.setWindowModality(Qt::WindowModal);
        dialog.setMinimumDuration(300);
        dialog.setAutoClose(false);
        dialog.setAutoReset(false);
    }
    report::ProgressFn fn() {
        return [this](qint64 done, qint64 total) {
            if (dialog.maximum() != int(total)) dialog.setMaximum(int(std::max<qint64>(1, total)));
            dialog.setValue(int(done));
            return !dialog.wasCanceled();
        };
    }
};

} // namespace

ExportMenu::ExportMenu(ChatStore *store, QWidget *window,
                       std::function<std::optional<qint64>()> currentConversation,
                       std::function<qint64()> selectedMessage, QObject *parent)
    : QObject(parent), m_store(store), m_window(window),
      m_currentConversation(std::move(currentConversation)), m_selectedMessage(std::move(selectedMessage)) {
    auto *mainWindow = qobject_cast<QMainWindow *>(window);
    if (!mainWindow) return;
    m_notice = new QWidget(mainWindow);
    m_notice->setObjectName(QStringLiteral("savedNotice"));
    auto *row = new QHBoxLayout(m_notice);
    row->setContentsMargins(0, 0, 0, 0);
    m_noticeLabel = new QLabel(m_notice);
    m_noticeLabel->setTextFormat(Qt::PlainText);
    auto *open = new QToolButton(m_notice);
    open->setText(tr("Open"));
    open->setToolTip(tr("Open the saved file with the program the system uses for it"));
    auto *folder = new QToolButton(m_notice);
    folder->setText(tr("Show folder"));
    folder->setToolTip(tr("Open the folder the file was saved in"));
    row->addWidget(m_noticeLabel);
    row->addWidget(open);
    row->addWidget(folder);
    connect(open, &QToolButton::clicked, this, &ExportMenu::openSaved);
    connect(folder, &QToolButton::clicked, this, &ExportMenu::showSavedFolder);
    m_noticeTimer = new QTimer(this);
    m_noticeTimer->setSingleShot(true);
    m_noticeTimer->setInterval(30000);
    connect(m_noticeTimer, &QTimer::timeout, m_notice, &QWidget::hide);
    mainWindow->statusBar()->addWidget(m_notice);
    m_notice->hide();
}

QString ExportMenu::suggestedPath(std::optional<qint64> conversationId, const QString &suffix) const {
    QString dir = QSettings().value(QStringLiteral("export/lastDir")).toString();
    if (dir.isEmpty() || !QFileInfo(dir).isDir()) dir = QStandardPaths::writableLocation(QStandardPaths::DocumentsLocation);
    if (dir.isEmpty() || !QFileInfo(dir).isDir()) dir = QDir::homePath();
    QString title = tr("Conversation");
    QDate date = QDate::currentDate();
    if (const std::optional<Conversation> c = conversationId && m_store ? m_store->conversation(*conversationId)
                                                                         : std::nullopt) {
        if (!c->title.trimmed().isEmpty()) title = c->title;
        if (c->updatedAt.isValid()) date = c->updatedAt.toLocalTime().date();
    }
    // Characters that file systems or shells trip over become spaces; the name stays readable.
    title.replace(QRegularExpression(QStringLiteral(R"([/\\:*?"<>|\x00-\x1f])")), QStringLiteral(" "));
    title = title.simplified().left(80);
    if (title.isEmpty() || title.startsWith(QLatin1Char('.'))) title.prepend(tr("Conversation") + QLatin1Char(' '));
    return QDir(dir).filePath(QStringLiteral("%1 %2%3").arg(title, date.toString(Qt::ISODate), suffix));
}

QString ExportMenu::askSavePath(const QString &caption, const QString &suggested, const QString &filter) {
    return QFileDialog::getSaveFileName(m_window, caption, suggested, filter);
}

void ExportMenu::announceSaved(const QString &path) {
    m_savedPath = path;
    QSettings().setValue(QStringLiteral("export/lastDir"), QFileInfo(path).absolutePath());
    if (m_notice) {
        m_noticeLabel->setText(tr("Saved to %1").arg(QDir::toNativeSeparators(path)));
        m_noticeLabel->setToolTip(QDir::toNativeSeparators(path));
        m_notice->show();
        m_noticeTimer->start();
    }
    emit saved(path);
}

void ExportMenu::openSaved() {
    if (!m_savedPath.isEmpty()) QDesktopServices::openUrl(QUrl::fromLocalFile(m_savedPath));
}

void ExportMenu::showSavedFolder() {
    if (!m_savedPath.isEmpty()) QDesktopServices::openUrl(QUrl::fromLocalFile(QFileInfo(m_savedPath).absolutePath()));
}

void ExportMenu::addTo(QMenu *file) {
    QMenu *conv = file->addMenu(tr("E&xport conversation"));
    for (bool json : {false, true}) {
        conv->addAction(
            json ? tr("As &JSON (whole tree, with metrics)…") : tr("As &Markdown (active branch)…"), this,
            [this, json] {
                const std::optional<qint64> id = m_currentConversation();
                if (!id) return fail(tr("No conversation is open"));
                const QString path =
                    askSavePath(tr("Export conversation"), suggestedPath(id, json ? QStringLiteral(".json") : QStringLiteral(".md")),
                                json ? tr("JSON (*.json)") : tr("Markdown (*.md)"));
                if (!path.isEmpty() && !exportConversation(*id, json, path) &&
                    m_lastError != QLatin1String("Cancelled"))
                    fail(tr("Export failed"));
            });
    }
    file->addAction(tr("&Import conversation…"), this, [this] {
        const QString path = QFileDialog::getOpenFileName(
            m_window, tr("Import conversation"), QFileInfo(suggestedPath(std::nullopt, {})).absolutePath(),
            tr("JSON (*.json)"));
        if (!path.isEmpty() && !importConversation(path)) fail(tr("Import failed"));
    });
    QMenu *report = file->addMenu(tr("Export &report"));
    const std::pair<const char *, QString> formats[] = {{"html", tr("HTML")},
                                                        {"pdf", tr("PDF")},
                                                        {"json", tr("JSON")},
                                                        {"csv", tr("CSV")},
                                                        {"trace", tr("Perfetto trace")}};
    for (bool whole : {false, true}) {
        QMenu *sub = report->addMenu(whole ? tr("Of the &conversation") : tr("Of the selected &message"));
        for (const auto &[key, name] : formats) {
            const QString format = QLatin1String(key);
            sub->addAction(name + QStringLiteral("…"), this, [this, whole, format, name] {
                const auto f = report::formatFromName(format);
                const QString suffix = report::formatSuffix(*f);
                const QString path = askSavePath(
                    tr("Export report"),
                    suggestedPath(m_currentConversation(), QLatin1Char(' ') + tr("report") + suffix),
                    QStringLiteral("%1 (*%2)").arg(name, suffix));
                if (!path.isEmpty() && !exportReport(whole, format, path) &&
                    m_lastError != QLatin1String("Cancelled"))
                    fail(tr("Export failed"));
            });
        }
    }
}

bool ExportMenu::exportConversation(qint64 conversationId, bool json, const QString &path) {
    if (!m_store) return false;
    Progress progress(m_window, tr("Exporting the conversation…"));
    const bool ok =
        json
            ? report::exportConversationJson(*m_store, conversationId, path, &m_lastError, progress.fn())
            : report::exportConversationMarkdown(*m_store, conversationId, path, &m_lastError, progress.fn());
    if (ok) announceSaved(path);
    return ok;
}

std::optional<qint64> ExportMenu::importConversation(const QString &path) {
    if (!m_store) return std::nullopt;
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly)) {
        m_lastError = tr("%1 could not be read: %2").arg(path, f.errorString());
        return std::nullopt;
    }
    const std::optional<qint64> id = report::importConversationJson(*m_store, f.readAll(), &m_lastError);
    if (id) emit conversationImported(*id);
    return id;
}

std::optional<qint64> ExportMenu::reportMessage() const {
    const std::optional<qint64> conv = m_currentConversation();
    if (!conv || !m_store) return std::nullopt;
    const qint64 selected = m_selectedMessage();
    if (selected > 0) {
        const std::optional<Message> m = m_store->message(selected);
        if (m && m->conversationId == *conv && m->role == MessageRole::Assistant) return selected;
    }
    const QList<Message> path = m_store->activePath(*conv);
    for (qsizetype i = path.size() - 1; i >= 0; --i)
        if (path[i].role == MessageRole::Assistant) return path[i].id;
    return std::nullopt;
}

bool ExportMenu::exportReport(bool wholeConversation, const QString &format, const QString &path) {
    const std::optional<report::Format> f = report::formatFromName(format);
    const std::optional<qint64> conv = m_currentConversation();
    if (!m_store || !f || !conv) {
        m_lastError = tr("No conversation is open");
        return false;
    }
    std::optional<report::Report> r;
    if (wholeConversation) {
        Progress progress(m_window, tr("Gathering the conversation's measurements…"));
        r = report::conversationReport(*m_store, *conv, &m_lastError, progress.fn());
    } else {
        const std::optional<qint64> id = reportMessage();
        if (!id) {
            m_lastError = tr("This conversation has no reply to report on");
            return false;
        }
        r = report::messageReport(*m_store, *id, &m_lastError);
    }
    if (!r) return false;
    // The session's environment where the stored replies do not carry it: the backend, device and
    // driver are this app's (a reply records its model and precision, not the machine); the
    // model's hash is filled in only for the model loaded now, matched by its name.
    if (m_session && m_session->isModelLoaded()) {
        const SessionModelInfo info = m_session->modelInfo();
        report::Provenance &p = r->provenance;
        if (p.backend.isEmpty())
            p.backend = info.remoteUrl.isEmpty() ? info.backend : tr("remote server %1").arg(info.remoteUrl);
        if (p.device.isEmpty()) p.device = info.device;
        if (p.driver.isEmpty()) p.driver = info.driver;
        if (p.modelHash.isEmpty() && p.modelName == info.name) p.modelHash = info.modelHash;
    }
    const bool ok = report::exportReport(*r, *f, path, &m_lastError);
    if (ok) announceSaved(path);
    return ok;
}

void ExportMenu::fail(const QString &title) {
    if (m_lastError.isEmpty()) m_lastError = title;
    QMessageBox::warning(m_window, title, m_lastError);
}

} // namespace es
