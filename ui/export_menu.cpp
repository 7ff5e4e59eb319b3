// ExportMenu (see export_menu.h).
#include "export_menu.h"

#include "chat_store.h"
#include "conversation_export.h"
#include "report_data.h"
#include "report_writers.h"

#include <QFile>
#include <QFileDialog>
#include <QMenu>
#include <QMessageBox>
#include <QProgressDialog>

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
      m_currentConversation(std::move(currentConversation)), m_selectedMessage(std::move(selectedMessage)) {}

void ExportMenu::addTo(QMenu *file) {
    QMenu *conv = file->addMenu(tr("E&xport conversation"));
    for (bool json : {false, true}) {
        conv->addAction(
            json ? tr("As &JSON (whole tree, with metrics)…") : tr("As &Markdown (active branch)…"), this,
            [this, json] {
                const std::optional<qint64> id = m_currentConversation();
                if (!id) return fail(tr("No conversation is open"));
                const QString path =
                    QFileDialog::getSaveFileName(m_window, tr("Export conversation"), QString(),
                                                 json ? tr("JSON (*.json)") : tr("Markdown (*.md)"));
                if (!path.isEmpty() && !exportConversation(*id, json, path) &&
                    m_lastError != QLatin1String("Cancelled"))
                    fail(tr("Export failed"));
            });
    }
    file->addAction(tr("&Import conversation…"), this, [this] {
        const QString path =
            QFileDialog::getOpenFileName(m_window, tr("Import conversation"), QString(), tr("JSON (*.json)"));
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
                const QString path = QFileDialog::getSaveFileName(
                    m_window, tr("Export report"), QStringLiteral("report") + report::formatSuffix(*f),
                    QStringLiteral("%1 (*%2)").arg(name, report::formatSuffix(*f)));
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
    return r && report::exportReport(*r, *f, path, &m_lastError);
}

void ExportMenu::fail(const QString &title) {
    if (m_lastError.isEmpty()) m_lastError = title;
    QMessageBox::warning(m_window, title, m_lastError);
}

} // namespace es
