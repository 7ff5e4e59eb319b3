// File-menu entries for es_report: export the current conversation as Markdown or JSON, import a
// conversation JSON, and export a profiling report of the selected message or of the whole
// conversation in each format. Long work runs with a modal QProgressDialog that can cancel (the
// exporters stream and write atomically, so a cancel leaves no half file). GUI thread only.
#pragma once

#include <QObject>
#include <QPointer>

#include <functional>
#include <optional>

class QMenu;
class QWidget;

namespace es {

class ChatStore;

class ExportMenu : public QObject {
    Q_OBJECT
public:
    // currentConversation / selectedMessage are asked at the moment an entry is chosen.
    ExportMenu(ChatStore *store, QWidget *window, std::function<std::optional<qint64>()> currentConversation,
               std::function<qint64()> selectedMessage, QObject *parent = nullptr);
    void addTo(QMenu *file);

    // The actions themselves, with the file chosen by the caller (tests and the menu entries).
    bool exportConversation(qint64 conversationId, bool json, const QString &path);
    bool exportReport(bool wholeConversation, const QString &format, const QString &path);
    std::optional<qint64> importConversation(const QString &path);
    QString lastError() const { return m_lastError; }

signals:
    void conversationImported(qint64 conversationId);

private:
    std::optional<qint64> reportMessage() const; // the selected reply, or the branch's last one
    void fail(const QString &title);

    QPointer<ChatStore> m_store;
    QPointer<QWidget> m_window;
    std::function<std::optional<qint64>()> m_currentConversation;
    std::function<qint64()> m_selectedMessage;
    QString m_lastError;
};

} // namespace es
