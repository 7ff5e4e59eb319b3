// --smoke-test (see smoke_test.h).
#include "smoke_test.h"

#include "chat_pane.h"
#include "engine_session.h"

namespace es {

SmokeTest::SmokeTest(EngineSession *session, int timeoutMs, QObject *parent)
    : QObject(parent), m_session(session) {
    connect(session, &EngineSession::modelLoadFailed, this,
            [this](const QString &dir, const QString &message) {
                fail(QStringLiteral("the model %1 did not load: %2").arg(dir, message));
            });
    connect(session, &EngineSession::tokensGenerated, this,
            [this](quint64, const QString &delta, int) { m_text += delta; });
    connect(session, &EngineSession::replyFinished, this,
            [this](quint64 id, const QString &reason, const MessageMetrics &metrics) {
                onReplyFinished(id, reason, metrics.nOutputTokens.value_or(0));
            });
    connect(session, &EngineSession::replyFailed, this,
            [this](quint64, const QString &message) { fail(message); });
    m_timeout.setSingleShot(true);
    connect(&m_timeout, &QTimer::timeout, this,
            [this, timeoutMs] { fail(QStringLiteral("no reply within %1 s").arg(timeoutMs / 1000)); });
    m_timeout.start(timeoutMs);
}

void SmokeTest::send(ChatPane *pane) {
    if (m_exitCode) return;
    // An error the pane reports (the store could not save the message, or the reply so far) is
    // the end of the test: nothing would come of waiting.
    connect(pane, &ChatPane::errorOccurred, this, [this](const QString &message) { fail(message); });
    pane->setConversation(std::nullopt);
    pane->send(QString::fromUtf8(kPrompt));
    if (m_exitCode || pane->isGenerating()) return;
    fail(m_session->isModelLoaded() ? QStringLiteral("the message was sent but no reply started")
                                    : QStringLiteral("the message was not sent: no model is loaded"));
}

void SmokeTest::onReplyFinished(quint64, const QString &reason, int nTokens) {
    if (m_exitCode) return;
    if (m_text.trimmed().isEmpty() || reason == QLatin1String("cancelled"))
        return fail(QStringLiteral("the reply was empty (finish reason %1)").arg(reason));
    m_timeout.stop();
    m_exitCode = 0;
    const SessionModelInfo info = m_session->modelInfo();
    emit finished(0, QStringLiteral("smoke test passed: %1 on %2, %3 tokens (%4): %5")
                         .arg(info.name, info.backend)
                         .arg(nTokens)
                         .arg(reason, m_text.simplified().left(80)));
}

void SmokeTest::fail(const QString &why) {
    if (m_exitCode) return;
    m_timeout.stop();
    m_exitCode = 1;
    emit finished(1, QStringLiteral("smoke test failed: ") + why);
}

} // namespace es
