// Model ▸ Download… (DownloadModelDialog over ModelHub) against HubTestServer with HF_ENDPOINT and
// HF_HUB_CACHE set: the catalogue's five checkpoints with their verdicts, a typed repo checked
// (size and architecture) before downloading, the download's progress, the model found in the
// cache and loaded with Load, errors shown in the dialog, Cancel keeping the partial file, and the
// recent models list. ES_SCREENSHOT_DIR=<dir> saves the dialog after its download
// (download-dialog.png, the README's screenshot).
#include "app/models/hub_test_server.h"
#include "download_model_dialog.h"

#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QProgressBar>
#include <QPushButton>
#include <QSignalSpy>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QtTest>

#include <filesystem>
#include <fstream>

using namespace es;
namespace fs = std::filesystem;

namespace {

const std::string kRepo = "test-org/Tiny-MoE";
const std::string kCommit = "fedcba9876543210fedcba9876543210fedcba98";

std::string readFile(const fs::path &p) {
    std::ifstream in(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

} // namespace

class TestDownloadDialog : public QObject {
    Q_OBJECT

    QTemporaryDir m_home;
    HubTestServer m_server;
    HubTestServer::Repo m_repo;
    EngineSessionOptions m_options;

    fs::path cacheDir() const { return fs::path(m_home.path().toStdString()) / "hub"; }
    QString snapshotDir() const {
        return QString::fromStdString(
            (cacheDir() / "models--test-org--Tiny-MoE" / "snapshots" / kCommit).string());
    }

private slots:
    void initTestCase() {
        qputenv("HOME", m_home.path().toUtf8()); // QSettings of the test stay out of the real home
        QCoreApplication::setOrganizationName("ExpertScopeTests");
        QCoreApplication::setApplicationName("test_download_dialog");
        m_repo.commit = kCommit;
        for (const char *f : {"config.json", "model.safetensors", "tokenizer.model", "tokenizer_config.json",
                              "special_tokens_map.json"})
            m_repo.files[f] = readFile(fs::path(ES_TEST_DATA_DIR) / "moe-shared" / f);
        m_server.addRepo(kRepo, m_repo);
        QVERIFY(m_server.start());
        qputenv("HF_ENDPOINT", QByteArray::fromStdString(m_server.endpoint()));
        qputenv("HF_HUB_CACHE", QByteArray::fromStdString(cacheDir().string()));
        qunsetenv("HF_TOKEN");
        m_options.backend = "cpu";
    }
    void cleanupTestCase() { m_server.stop(); }

    void theCatalogueHasTheCheckpoints() {
        DownloadModelDialog d(m_options);
        QTableWidget *t = d.catalogueTable();
        QCOMPARE(t->rowCount(), 5);
        QCOMPARE(t->item(0, 0)->text(), QString("baidu/ERNIE-4.5-0.3B-PT"));
        QCOMPARE(t->item(0, 4)->text(), QString("fits")); // 0.3B in BF16 on the CPU
        QVERIFY(t->item(0, 4)->toolTip().startsWith("CPU: weights"));
        QCOMPARE(t->item(4, 0)->text(), QString("baidu/ERNIE-4.5-300B-A47B-PT"));
        QCOMPARE(t->item(4, 4)->text(), QString("needs several GPUs"));
        t->selectRow(2);
        QCOMPARE(d.repoEdit()->text(), QString("baidu/ERNIE-4.5-21B-A3B-PT"));
    }

    void checkDownloadAndLoad() {
        DownloadModelDialog d(m_options);
        QCOMPARE(d.cachedTable()->rowCount(), 0);
        d.repoEdit()->setText(QString::fromStdString(kRepo));
        QSignalSpy checked(d.hub(), &ModelHub::checked);
        d.checkButton()->click();
        QVERIFY(!d.downloadButton()->isEnabled()); // one job at a time
        QVERIFY(checked.wait(20000));
        QVERIFY2(d.messageLabel()->text().contains("Ernie4_5_MoeForCausalLM") &&
                     d.messageLabel()->text().contains("5 files"),
                 qPrintable(d.messageLabel()->text()));
        QVERIFY(!fs::exists(cacheDir() / "models--test-org--Tiny-MoE" /
                            "snapshots")); // a check fetches no weights

        QSignalSpy downloaded(d.hub(), &ModelHub::downloaded);
        QSignalSpy progress(d.hub(), &ModelHub::progress);
        d.downloadButton()->click();
        QVERIFY(downloaded.wait(30000));
        QCOMPARE(downloaded.first().first().toString(), snapshotDir());
        QVERIFY(progress.count() > 0);
        QCOMPARE(d.progressBar()->value(), 1000);
        QVERIFY2(d.messageLabel()->text().contains("Downloaded and verified"),
                 qPrintable(d.messageLabel()->text()));
        QCOMPARE(d.cachedTable()->rowCount(), 1);
        QCOMPARE(d.cachedTable()->item(0, 3)->text(), QString("ready"));
        QVERIFY(d.loadButton()->isEnabled()); // the new model is selected
        if (const QString dir = qEnvironmentVariable("ES_SCREENSHOT_DIR"); !dir.isEmpty()) {
            d.resize(980, 640);
            d.show();
            QVERIFY(QTest::qWaitForWindowExposed(&d));
            QVERIFY(d.grab().save(dir + "/download-dialog.png"));
        }

        QSignalSpy load(&d, &DownloadModelDialog::loadRequested);
        d.loadButton()->click();
        QCOMPARE(load.count(), 1);
        QCOMPARE(load.first().first().toString(), snapshotDir());
        QCOMPARE(d.result(), int(QDialog::Accepted));
    }

    void failuresAreShown() {
        DownloadModelDialog d(m_options);
        d.repoEdit()->setText("test-org/Nothing");
        QSignalSpy failed(d.hub(), &ModelHub::failed);
        d.downloadButton()->click();
        QVERIFY(failed.wait(20000));
        QVERIFY2(d.messageLabel()->text().contains("not found (404"), qPrintable(d.messageLabel()->text()));
        QVERIFY(d.downloadButton()->isEnabled());
        d.repoEdit()->setText("not a repo");
        d.checkButton()->click();
        QVERIFY(failed.wait(20000));
        QVERIFY2(d.messageLabel()->text().contains("is not a hub repository id"),
                 qPrintable(d.messageLabel()->text()));
    }

    void cancelKeepsThePartialFile() {
        HubTestServer::Repo other = m_repo;
        other.files["model.safetensors"] +=
            std::string(4096, '\0'); // another blob than the one downloaded above
        m_server.addRepo("test-org/Slow", other);
        HubTestServer::Fault slow;
        slow.chunkDelayMs = 50;
        m_server.setFault("model.safetensors", slow);
        const fs::path partial = cacheDir() / "models--test-org--Slow" / "blobs" /
                                 (HubTestServer::sha256(other.files["model.safetensors"]) + ".incomplete");
        const auto partialBytes = [&] {
            std::error_code ec;
            const auto n = fs::file_size(partial, ec);
            return ec ? uintmax_t(0) : n;
        };
        DownloadModelDialog d(m_options);
        d.repoEdit()->setText("test-org/Slow");
        QSignalSpy failed(d.hub(), &ModelHub::failed);
        d.downloadButton()->click();
        QTRY_VERIFY_WITH_TIMEOUT(partialBytes() >= 16384, 20000);
        QVERIFY(d.cancelButton()->isEnabled());
        d.cancelButton()->click();
        QVERIFY(failed.wait(20000));
        QVERIFY2(d.messageLabel()->text().startsWith("cancelled"), qPrintable(d.messageLabel()->text()));
        QVERIFY(partialBytes() >= 16384 && partialBytes() < other.files["model.safetensors"].size());
        QVERIFY(d.downloadButton()->isEnabled());
        m_server.clearFaults();
    }

    void recentModels() {
        for (int i = 0; i < ModelHub::kMaxRecent + 2; ++i)
            ModelHub::noteRecentModel(QString("/nowhere/%1").arg(i));
        ModelHub::noteRecentModel(snapshotDir());
        const QStringList recent = ModelHub::recentModels();
        QCOMPARE(recent.size(), ModelHub::kMaxRecent);
        QCOMPARE(recent.first(), snapshotDir());
        DownloadModelDialog d(m_options);
        QCOMPARE(d.recentList()->count(), ModelHub::kMaxRecent);
        QVERIFY(!(d.recentList()->item(1)->flags() & Qt::ItemIsEnabled)); // a folder that is gone
        d.recentList()->setCurrentRow(0);
        QVERIFY(d.loadButton()->isEnabled());
        QSignalSpy load(&d, &DownloadModelDialog::loadRequested);
        d.loadButton()->click();
        QCOMPARE(load.first().first().toString(), snapshotDir());
    }
};

QTEST_MAIN(TestDownloadDialog)
#include "test_download_dialog.moc"
