// ModelHub (model_hub.h): es_models for the desktop app, jobs on a worker thread.
#include "model_hub.h"

#include "app/models/hub_cache.h"
#include "app/models/hub_download.h"
#include "app/models/model_catalogue.h"

#include <QMetaObject>
#include <QSettings>

#include <algorithm>

namespace es {

namespace {

engine_params estimate_params(const EngineSessionOptions &o) {
    engine_params p;
    p.load.kind = o.backend == "cuda"  ? backend_kind::cuda
                  : o.backend == "cpu" ? backend_kind::cpu
                                       : backend_kind::automatic;
    p.gpu_memory_utilization = o.gpuMemoryUtilization;
    p.max_num_seqs = std::max(1, o.maxConcurrentReplies);
    return p;
}

QList<FitView> to_views(const std::vector<models::fit_verdict> &v) {
    QList<FitView> out;
    for (const auto &f : v)
        out.push_back({QString::fromStdString(f.precision), f.ok, f.fits, QString::fromStdString(f.summary)});
    return out;
}

QString stage_text(models::download_progress::stage s) {
    using st = models::download_progress::stage;
    switch (s) {
    case st::listing:
        return ModelHub::tr("Listing the files");
    case st::checking:
        return ModelHub::tr("Checking the free space");
    case st::downloading:
        return ModelHub::tr("Downloading");
    case st::verifying:
        return ModelHub::tr("Verifying");
    case st::linking:
        return ModelHub::tr("Finishing");
    }
    return {};
}

} // namespace

ModelHub::ModelHub(QObject *parent) : QObject(parent) {
    qRegisterMetaType<es::RemoteModelView>();
    qRegisterMetaType<es::DownloadProgressView>();
}

ModelHub::~ModelHub() {
    m_cancel = true;
    if (m_worker.joinable()) m_worker.join();
}

QString ModelHub::cacheDir() {
    return QString::fromStdString(models::hub_settings_from_environment().cache_dir.string());
}

QString ModelHub::endpoint() {
    return QString::fromStdString(models::hub_settings_from_environment().endpoint);
}

QList<CatalogueModelView> ModelHub::catalogue(const EngineSessionOptions &options) {
    QList<CatalogueModelView> out;
    const engine_params p = estimate_params(options);
    for (const models::catalogue_entry &e : models::ernie_catalogue()) {
        CatalogueModelView v;
        v.repoId = QString::fromStdString(e.repo_id);
        v.kind = QString::fromStdString(e.kind);
        v.base = e.base;
        v.multiGpu = e.multi_gpu;
        v.params = e.params;
        v.activeParams = e.active_params;
        v.downloadBytes = qint64(e.download_bytes);
        v.fit = to_views(models::fit_at_each_precision(e.config, p));
        out.push_back(std::move(v));
    }
    return out;
}

QList<CachedModelView> ModelHub::cachedModels() {
    QList<CachedModelView> out;
    for (const models::cached_model &m :
         models::scan_cache(models::hub_settings_from_environment().cache_dir)) {
        CachedModelView v;
        v.repoId = QString::fromStdString(m.repo_id);
        v.commit = QString::fromStdString(m.commit);
        v.dir = QString::fromStdString(m.dir.string());
        for (const auto &r : m.refs) v.refs << QString::fromStdString(r);
        v.bytes = qint64(m.bytes);
        v.params = m.config ? m.config->n_params() : 0;
        v.loadable = m.loadable;
        v.problem = QString::fromStdString(m.problem);
        out.push_back(std::move(v));
    }
    return out;
}

QList<FitView> ModelHub::fitOfFolder(const QString &dir, const EngineSessionOptions &options) {
    return to_views(models::fit_at_each_precision(dir.toStdString(), estimate_params(options)));
}

QStringList ModelHub::recentModels() {
    return QSettings().value(QStringLiteral("model/recent")).toStringList();
}

void ModelHub::noteRecentModel(const QString &dir) {
    if (dir.isEmpty()) return;
    QStringList recent = recentModels();
    recent.removeAll(dir);
    recent.prepend(dir);
    while (recent.size() > kMaxRecent) recent.removeLast();
    QSettings().setValue(QStringLiteral("model/recent"), recent);
}

void ModelHub::startJob(std::function<void()> job) {
    if (m_worker.joinable()) m_worker.join(); // the previous job has ended (m_busy was false)
    m_cancel = false;
    m_busy = true;
    m_worker = std::thread(std::move(job));
}

void ModelHub::check(const QString &repoId, const QString &revision, const EngineSessionOptions &options) {
    if (m_busy) return;
    models::download_options o;
    o.repo_id = repoId.trimmed().toStdString();
    o.revision = revision.trimmed().isEmpty() ? "main" : revision.trimmed().toStdString();
    o.hub = models::hub_settings_from_environment();
    o.cancel = &m_cancel;
    const engine_params p = estimate_params(options);
    startJob([this, o, p] {
        auto plan = models::plan_download(o);
        RemoteModelView v;
        QString message;
        if (plan) {
            v.repoId = QString::fromStdString(o.repo_id);
            v.revision = QString::fromStdString(o.revision);
            v.commit = QString::fromStdString(plan->listing.commit);
            v.architecture = QString::fromStdString(plan->config.arch_name);
            v.files = int(plan->files.size());
            v.totalBytes = qint64(plan->total_bytes);
            v.missingBytes = qint64(plan->missing_bytes);
            v.params = plan->config.n_params();
            v.activeParams = plan->config.n_params_active();
            v.fit = to_views(models::fit_at_each_precision(plan->config, p));
        } else {
            message = QString::fromStdString(plan.message());
        }
        const bool ok = plan.ok();
        QMetaObject::invokeMethod(
            this,
            [this, ok, v, message] {
                m_busy = false;
                if (ok)
                    emit checked(v);
                else
                    emit failed(message);
            },
            Qt::QueuedConnection);
    });
}

void ModelHub::download(const QString &repoId, const QString &revision) {
    if (m_busy) return;
    models::download_options o;
    o.repo_id = repoId.trimmed().toStdString();
    o.revision = revision.trimmed().isEmpty() ? "main" : revision.trimmed().toStdString();
    o.hub = models::hub_settings_from_environment();
    o.cancel = &m_cancel;
    o.on_progress = [this](const models::download_progress &p) {
        DownloadProgressView v{stage_text(p.what), QString::fromStdString(p.file),
                               p.file_index,       p.file_count,
                               qint64(p.done),     qint64(p.total),
                               p.bytes_per_second, p.seconds_left};
        QMetaObject::invokeMethod(
            this, [this, v] { emit progress(v); }, Qt::QueuedConnection);
    };
    startJob([this, o] {
        auto r = models::download_model(o);
        const bool ok = r.ok();
        const QString text =
            ok ? QString::fromStdString(r->snapshot_dir.string()) : QString::fromStdString(r.message());
        QMetaObject::invokeMethod(
            this,
            [this, ok, text] {
                m_busy = false;
                if (ok)
                    emit downloaded(text);
                else
                    emit failed(text);
            },
            Qt::QueuedConnection);
    });
}

void ModelHub::cancel() { m_cancel = true; }

} // namespace es
