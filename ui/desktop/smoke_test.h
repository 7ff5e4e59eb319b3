// --smoke-test (the package test runs it offscreen in a fresh Debian root): once the model is
// loaded, one message in a new conversation, one reply, a line on stdout and exit 0. Every failure
// ends it at once with the reason, never by waiting out the time limit: the model does not load,
// the pane reports an error (the store could not save the message or the reply), no reply starts
// (send() returns without one), the reply fails or comes back empty or cancelled; and no reply
// within kTimeoutMs.
#pragma once

#include <QObject>
#include <QString>
#include <QTimer>

#include <optional>

namespace es {

class ChatPane;
class EngineSession;

class SmokeTest : public QObject {
    Q_OBJECT
public:
    static constexpr int kTimeoutMs = 300000; // the default model on a slow CPU, with room to spare
    static constexpr const char *kPrompt = "【技术解析模式】What does ls do?";

    // Watches the session from now on: create it before anything that reacts to a failed load
    // with a dialog, so that finished() (and the app's exit) comes first.
    explicit SmokeTest(EngineSession *session, int timeoutMs = kTimeoutMs, QObject *parent = nullptr);

    // Sends the prompt in a new conversation of `pane` (call it when the model is loaded).
    void send(ChatPane *pane);
    // The exit code once finished() was emitted.
    std::optional<int> exitCode() const { return m_exitCode; }

signals:
    // Once: 0 and the line for stdout ("smoke test passed: …"), or 1 and the line for stderr
    // ("smoke test failed: …").
    void finished(int exitCode, const QString &line);

private:
    void fail(const QString &why);
    void onReplyFinished(quint64 requestId, const QString &reason, int nTokens);

    EngineSession *m_session;
    QString m_text;
    QTimer m_timeout;
    std::optional<int> m_exitCode;
};

} // namespace es
