// expertscope-cli download and models against HubTestServer (a local server speaking the hub's
// API subset) with HF_ENDPOINT, HF_TOKEN and HF_HUB_CACHE set as a user sets them: the download
// prints the snapshot folder and `models` lists it with its fit; a token-protected repo needs
// HF_TOKEN (sent as a Bearer token); and a download killed (SIGKILL) mid-file resumes after a
// restart from the partial file's size — the server's log of Range headers shows it — and verifies.
#include "app/models/hub_test_server.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <csignal>
#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;

namespace {

const std::string kRepo = "test-org/Tiny-MoE";
const std::string kCommit = "89abcdef0123456789abcdef0123456789abcdef";

std::string readFile(const fs::path &p) {
    std::ifstream in(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

struct run_result {
    int exit_code = -1;
    QString out, err;
};

} // namespace

class TestCliModels : public QObject {
    Q_OBJECT

    HubTestServer m_server;
    HubTestServer::Repo m_repo;
    std::unique_ptr<QTemporaryDir> m_tmp;

    fs::path cacheDir() const { return fs::path(m_tmp->path().toStdString()) / "hub"; }
    fs::path weightsBlob() const {
        return cacheDir() / "models--test-org--Tiny-MoE" / "blobs" /
               HubTestServer::sha256(m_repo.files.at("model.safetensors"));
    }
    fs::path weightsPartial() const { return weightsBlob().string() + ".incomplete"; }

    QProcessEnvironment env(const QString &token = {}) const {
        QProcessEnvironment e = QProcessEnvironment::systemEnvironment();
        e.insert("HF_ENDPOINT", QString::fromStdString(m_server.endpoint()));
        e.insert("HF_HUB_CACHE", QString::fromStdString(cacheDir().string()));
        e.insert("HOME", m_tmp->path()); // no token file of the user's
        e.remove("HF_HOME");
        e.remove("HF_TOKEN_PATH");
        e.remove("HUGGING_FACE_HUB_TOKEN");
        if (token.isEmpty())
            e.remove("HF_TOKEN");
        else
            e.insert("HF_TOKEN", token);
        return e;
    }
    run_result run(const QStringList &args, const QProcessEnvironment &e) const {
        QProcess p;
        p.setProcessEnvironment(e);
        p.start(ES_CLI_PATH, args);
        run_result r;
        if (!p.waitForFinished(60000)) {
            p.kill();
            p.waitForFinished();
            r.err = "timed out";
            return r;
        }
        r.exit_code = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -2;
        r.out = QString::fromUtf8(p.readAllStandardOutput());
        r.err = QString::fromUtf8(p.readAllStandardError());
        return r;
    }
    std::vector<std::string> weightRanges() const {
        std::vector<std::string> out;
        for (const auto &l : m_server.log())
            if (l.target.starts_with("/cdn/")) out.push_back(l.range);
        return out;
    }

private slots:
    void initTestCase() {
        m_repo.commit = kCommit;
        for (const char *f : {"config.json", "generation_config.json", "model.safetensors",
                              "special_tokens_map.json", "tokenizer.model", "tokenizer_config.json"})
            m_repo.files[f] = readFile(fs::path(ES_TEST_DATA_DIR) / "moe-shared" / f);
        m_server.addRepo(kRepo, m_repo);
        QVERIFY(m_server.start());
    }
    void init() {
        m_server.clearFaults();
        m_server.clearLog();
        m_server.requireToken("");
        m_tmp = std::make_unique<QTemporaryDir>();
        QVERIFY(m_tmp->isValid());
    }
    void cleanupTestCase() { m_server.stop(); }

    void downloadThenList() {
        const run_result d = run({"download", QString::fromStdString(kRepo)}, env());
        QVERIFY2(d.exit_code == 0, qPrintable(d.err));
        const fs::path snapshot = cacheDir() / "models--test-org--Tiny-MoE" / "snapshots" / kCommit;
        QCOMPARE(d.out.trimmed().toStdString(), snapshot.string());
        QVERIFY2(d.err.contains("every file verified"), qPrintable(d.err));
        QVERIFY2(d.err.contains("BF16") && d.err.contains("FP8"), qPrintable(d.err)); // the fit verdicts
        QCOMPARE(readFile(snapshot / "model.safetensors"), m_repo.files["model.safetensors"]);

        const run_result m = run({"models", "--json", "--backend", "cpu"}, env());
        QVERIFY2(m.exit_code == 0, qPrintable(m.err));
        const QJsonObject o = QJsonDocument::fromJson(m.out.toUtf8()).object();
        QCOMPARE(o["cache"].toString().toStdString(), cacheDir().string());
        const QJsonArray models = o["models"].toArray();
        QCOMPARE(models.size(), 1);
        const QJsonObject entry = models[0].toObject();
        QCOMPARE(entry["repo"].toString().toStdString(), kRepo);
        QCOMPARE(entry["path"].toString().toStdString(), snapshot.string());
        QCOMPARE(entry["refs"].toArray().first().toString(), QString("main"));
        QVERIFY(entry["loadable"].toBool());
        QVERIFY(entry["bytes"].toDouble() >= double(m_repo.files["model.safetensors"].size()));
        QVERIFY(entry["fit"].toObject()["bf16"].toObject()["fits"].toBool());
        QCOMPARE(entry["fit"].toObject()["bf16"].toObject()["device"].toString(), QString("CPU"));

        const run_result text = run({"models", "--available", "--backend", "cpu"}, env());
        QVERIFY2(text.exit_code == 0, qPrintable(text.err));
        QVERIFY2(text.out.contains(QString::fromStdString(kRepo)) &&
                     text.out.contains("baidu/ERNIE-4.5-300B-A47B-PT") &&
                     text.out.contains("needs several GPUs"),
                 qPrintable(text.out));
    }

    void theEndpointOptionOverridesTheEnvironment() {
        QProcessEnvironment e = env();
        e.insert("HF_ENDPOINT", "http://127.0.0.1:1"); // nothing listens there
        const run_result d = run({"download", QString::fromStdString(kRepo), "--endpoint",
                                  QString::fromStdString(m_server.endpoint()) + "/", "--revision",
                                  QString::fromStdString(kCommit)},
                                 e);
        QVERIFY2(d.exit_code == 0, qPrintable(d.err));
        QVERIFY(!fs::exists(cacheDir() / "models--test-org--Tiny-MoE" / "refs" /
                            "main")); // a commit needs no ref
    }

    void aTokenIsSentAndNeeded() {
        m_server.requireToken("hf_cli_token");
        const run_result without = run({"download", QString::fromStdString(kRepo)}, env());
        QCOMPARE(without.exit_code, 1);
        QVERIFY2(without.err.startsWith("error: ") && without.err.contains("a token is needed (401") &&
                     without.err.contains("HF_TOKEN"),
                 qPrintable(without.err));
        QCOMPARE(without.err.count('\n'), 1);
        const run_result with = run({"download", QString::fromStdString(kRepo)}, env("hf_cli_token"));
        QVERIFY2(with.exit_code == 0, qPrintable(with.err));
        bool sawApi = false;
        for (const auto &l : m_server.log())
            if (l.target.starts_with("/api/models/")) sawApi = l.authorization == "Bearer hf_cli_token";
        QVERIFY(sawApi);
    }

    void failuresAreOneLine() {
        const run_result missing = run({"download", "test-org/Nothing"}, env());
        QCOMPARE(missing.exit_code, 1);
        QVERIFY2(missing.err.contains("not found (404"), qPrintable(missing.err));
        const run_result bad = run({"download", "not a repo"}, env());
        QCOMPARE(bad.exit_code, 1);
        QVERIFY2(bad.err.contains("is not a hub repository id"), qPrintable(bad.err));
        HubTestServer::Fault corrupt;
        corrupt.corrupt = true;
        m_server.setFault("model.safetensors", corrupt);
        const run_result wrong = run({"download", QString::fromStdString(kRepo)}, env());
        QCOMPARE(wrong.exit_code, 1);
        QVERIFY2(wrong.err.contains("SHA-256") && wrong.err.contains("removed"), qPrintable(wrong.err));
        QVERIFY(!fs::exists(weightsBlob()) && !fs::exists(weightsPartial()));
    }

    void aKilledDownloadResumesAfterARestart() {
        HubTestServer::Fault slow;
        slow.chunkDelayMs = 60; // 16 KiB a piece: about 3 s for the weights
        m_server.setFault("model.safetensors", slow);
        QProcess p;
        p.setProcessEnvironment(env());
        p.start(ES_CLI_PATH, {"download", QString::fromStdString(kRepo)});
        QVERIFY(p.waitForStarted(10000));
        // Killed once part of the weights is on disk.
        QElapsedTimer t;
        t.start();
        std::error_code ec;
        while (t.elapsed() < 30000 && (fs::file_size(weightsPartial(), ec) < 100000 || ec) &&
               p.state() == QProcess::Running)
            QTest::qWait(10);
        QVERIFY2(p.state() == QProcess::Running, qPrintable(QString::fromUtf8(p.readAllStandardError())));
        ::kill(pid_t(p.processId()), SIGKILL);
        QVERIFY(p.waitForFinished(10000));
        QCOMPARE(p.exitStatus(), QProcess::CrashExit);
        const uintmax_t kept = fs::file_size(weightsPartial());
        QVERIFY(kept >= 100000 && kept < m_repo.files["model.safetensors"].size());
        QVERIFY(!fs::exists(weightsBlob()));

        m_server.clearFaults();
        m_server.clearLog();
        const run_result again = run({"download", QString::fromStdString(kRepo)}, env());
        QVERIFY2(again.exit_code == 0, qPrintable(again.err));
        QCOMPARE(weightRanges(), std::vector<std::string>{"bytes=" + std::to_string(kept) + "-"});
        QVERIFY2(again.err.contains("resumed from"), qPrintable(again.err));
        QCOMPARE(readFile(weightsBlob()), m_repo.files["model.safetensors"]);
        QVERIFY(!fs::exists(weightsPartial()));
    }
};

QTEST_GUILESS_MAIN(TestCliModels)
#include "test_cli_models.moc"
