// ModelHub: the desktop app's door to models on the Hugging Face hub (es_models, Qt-free) — the
// ERNIE-4.5 catalogue with this machine's will-it-fit verdicts, the models already in the hub
// cache (whichever program downloaded them), the recent models, and one download or check at a
// time on a worker thread, reported through signals on the GUI thread. Only Qt value types
// cross this header, so ui/ never sees engine or es_models headers.
#pragma once

#include "engine_session.h"

#include <QList>
#include <QObject>
#include <QString>
#include <QStringList>

#include <atomic>
#include <functional>
#include <memory>
#include <thread>

namespace es {

struct FitView {
    QString precision; // "BF16" or "FP8"
    bool ok = false, fits = false;
    QString summary; // the estimate's line, or why there is none
};

struct CatalogueModelView {
    QString repoId, kind;  // kind: "dense" or "MoE"
    bool base = false;     // pre-trained only (-Base-PT)
    bool multiGpu = false; // needs several GPUs
    qint64 params = 0, activeParams = 0, downloadBytes = 0;
    QList<FitView> fit;
};

struct CachedModelView {
    QString repoId, commit, dir; // dir: the snapshot folder, what loadModel opens
    QStringList refs;
    qint64 bytes = 0, params = 0;
    bool loadable = false;
    QString problem; // why not loadable
};

// A repo checked before downloading: its files' sizes and its config, judged by the loader's rules.
struct RemoteModelView {
    QString repoId, revision, commit, architecture;
    int files = 0;
    qint64 totalBytes = 0, missingBytes = 0, params = 0, activeParams = 0;
    QList<FitView> fit;
};

struct DownloadProgressView {
    QString stage; // in words: "Listing files", "Downloading", "Verifying", …
    QString file;
    int fileIndex = 0, fileCount = 0;
    qint64 done = 0, total = 0;
    double bytesPerSecond = 0, secondsLeft = -1; // -1: not known yet
};

class ModelHub : public QObject {
    Q_OBJECT
public:
    explicit ModelHub(QObject *parent = nullptr);
    ~ModelHub() override; // cancels the job in hand and waits for its thread

    // The hub cache in use (HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub).
    static QString cacheDir();
    static QString endpoint();
    static QList<CatalogueModelView> catalogue(const EngineSessionOptions &options);
    static QList<CachedModelView> cachedModels();
    // The fit of a model folder at each precision, as the Model menu's estimate counts it.
    static QList<FitView> fitOfFolder(const QString &dir, const EngineSessionOptions &options);

    // The recent models (model folders, newest first, at most kMaxRecent), kept in QSettings.
    static constexpr int kMaxRecent = 8;
    static QStringList recentModels();
    static void noteRecentModel(const QString &dir);

    bool isBusy() const { return m_busy; }
    // Lists the repo and checks its config (nothing else is fetched): checked or failed.
    void check(const QString &repoId, const QString &revision, const EngineSessionOptions &options);
    // Downloads it into the hub cache: progress, then downloaded or failed.
    void download(const QString &repoId, const QString &revision);
    // Stops the job in hand; partial files stay and the next download resumes them.
    void cancel();

signals:
    void checked(const es::RemoteModelView &model);
    void progress(const es::DownloadProgressView &p);
    void downloaded(const QString &dir);
    void failed(const QString &message);

private:
    void startJob(std::function<void()> job);
    std::thread m_worker;
    std::atomic<bool> m_cancel{false};
    bool m_busy = false;
};

} // namespace es

Q_DECLARE_METATYPE(es::RemoteModelView)
Q_DECLARE_METATYPE(es::DownloadProgressView)
