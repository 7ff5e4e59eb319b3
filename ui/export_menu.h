// File-menu entries for es_report: export the current conversation as Markdown or JSON, import a
// conversation JSON, and export a profiling report of the selected message or of the whole
// conversation in each format. Long work runs with a modal QProgressDialog that can cancel (the
// exporters stream and write atomically, so a cancel leaves no half file). The save dialogs open
// in the last export folder (else Documents) with a name made of the conversation's title and
// date; a saved file is announced in the window's status bar, "Saved to …", with Open and Show
// folder (QDesktopServices). A report names the backend, device, driver and model hash of the
// session that measured it (its model info). GUI thread only.
#pragma once

#include <QObject>
#include <QPointer>

#include <functional>
#include <optional>

class QLabel;
class QMenu;
class QTimer;
class QToolButton;
class QWidget;

namespace es {

class ChatStore;
class EngineSession;

class ExportMenu : public QObject {
    Q_OBJECT
public:
    // currentConversation / selectedMessage are asked at the moment an entry is chosen.
    ExportMenu(ChatStore *store, QWidget *window, std::function<std::optional<qint64>()> currentConversation,
               std::function<qint64()> selectedMessage, QObject *parent = nullptr);
    void addTo(QMenu *file);
    // Where backend, device, driver and (for replies that did not record it) nothing else come
    // from in reports: the session's model info.
    void setSession(EngineSession *session) { m_session = session; }

    // The file name the save dialog proposes: "<title> <yyyy-MM-dd><suffix>" in the last export
    // folder (QSettings export/lastDir), else Documents (else home). suffix with its dot.
    QString suggestedPath(std::optional<qint64> conversationId, const QString &suffix) const;
    // "Saved to …" with Open / Show folder, in the window's status bar after a save; for tests.
    QWidget *savedNotice() const { return m_notice; }
    QString savedPath() const { return m_savedPath; }
    void openSaved();       // QDesktopServices::openUrl on the saved file
    void showSavedFolder(); // … on its folder

    // The actions themselves, with the file chosen by the caller (tests and the menu entries).
    bool exportConversation(qint64 conversationId, bool json, const QString &path);
    bool exportReport(bool wholeConversation, const QString &format, const QString &path);
    std::optional<qint64> importConversation(const QString &path);
    QString lastError() const { return m_lastError; }

signals:
    void conversationImported(qint64 conversationId);
    void saved(const QString &path);

private:
    std::optional<qint64> reportMessage() const; // the selected reply, or the branch's last one
    void fail(const QString &title);
    void announceSaved(const QString &path); // remembers the folder, shows the notice
    QString askSavePath(const QString &caption, const QString &suggested, const QString &filter);

    QPointer<ChatStore> m_store;
    QPointer<EngineSession> m_session;
    QWidget *m_notice = nullptr; // in the window's status bar (null when it has none)
    QLabel *m_noticeLabel = nullptr;
    QTimer *m_noticeTimer = nullptr;
    QString m_savedPath;
    QPointer<QWidget> m_window;
    std::function<std::optional<qint64>()> m_currentConversation;
    std::function<qint64()> m_selectedMessage;
    QString m_lastError;
};

} // namespace es
