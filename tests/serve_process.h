// Starts `expertscope-cli serve` (ES_CLI_PATH) as a child process on a port it picks (`--port 0`)
// and reads that port from its "listening on http://127.0.0.1:PORT" line, within 30 s. For the
// suites that drive the real server over loopback. Header-only (Qt Core).
#pragma once

#include <QProcess>
#include <QRegularExpression>
#include <QStringList>

namespace es_test {

// Starts `serve` with `args` (which must include --port 0) and sets *port. Returns why it
// failed (the server did not start, exited — with its stderr — or printed no port), or an empty
// string on success.
inline QString start_serve(QProcess &server, const QStringList &args, int *port) {
    *port = 0;
    server.setProgram(ES_CLI_PATH);
    server.setArguments(QStringList{"serve"} + args);
    server.setProcessChannelMode(QProcess::SeparateChannels);
    server.start();
    if (!server.waitForStarted(10000)) return QStringLiteral("the server did not start");
    static const QRegularExpression re(R"(listening on http://127\.0\.0\.1:(\d+))");
    QString out;
    for (int i = 0; i < 300 && *port == 0; ++i) {
        server.waitForReadyRead(100);
        out += QString::fromUtf8(server.readAllStandardOutput());
        if (auto m = re.match(out); m.hasMatch()) *port = m.captured(1).toInt();
        if (server.state() != QProcess::Running)
            return "the server exited: " + QString::fromUtf8(server.readAllStandardError());
    }
    return *port > 0 ? QString() : QStringLiteral("the server did not print its port within 30 s");
}

} // namespace es_test
