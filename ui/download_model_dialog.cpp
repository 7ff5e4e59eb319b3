// DownloadModelDialog (see download_model_dialog.h).
#include "download_model_dialog.h"

#include <QDialogButtonBox>
#include <QDir>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QLocale>
#include <QProgressBar>
#include <QPushButton>
#include <QTableWidget>
#include <QVBoxLayout>

namespace es {

namespace {

QString sizeText(qint64 b) { return QLocale().formattedDataSize(b, 1); }

QString paramsText(qint64 n) {
    return n >= 1000000000 ? QObject::tr("%1B").arg(double(n) / 1e9, 0, 'f', 1)
                           : QObject::tr("%1M").arg(double(n) / 1e6, 0, 'f', 0);
}

QString durationText(double s) {
    if (s < 0) return QObject::tr("unknown");
    const qint64 t = qint64(s + 0.5);
    return t >= 3600 ? QStringLiteral("%1:%2:%3")
                           .arg(t / 3600)
                           .arg(t / 60 % 60, 2, 10, QChar('0'))
                           .arg(t % 60, 2, 10, QChar('0'))
                     : QStringLiteral("%1:%2").arg(t / 60).arg(t % 60, 2, 10, QChar('0'));
}

QTableWidgetItem *item(const QString &text, const QString &tip = {}) {
    auto *it = new QTableWidgetItem(text);
    it->setFlags(Qt::ItemIsSelectable | Qt::ItemIsEnabled);
    if (!tip.isEmpty()) it->setToolTip(tip);
    return it;
}

QTableWidget *makeTable(const QStringList &headers, QWidget *parent) {
    auto *t = new QTableWidget(0, int(headers.size()), parent);
    t->setHorizontalHeaderLabels(headers);
    t->setSelectionBehavior(QAbstractItemView::SelectRows);
    t->setSelectionMode(QAbstractItemView::SingleSelection);
    t->setEditTriggers(QAbstractItemView::NoEditTriggers);
    t->setTabKeyNavigation(false); // Tab leaves the table (arrows move in it)
    t->verticalHeader()->hide();
    t->horizontalHeader()->setStretchLastSection(true);
    return t;
}

} // namespace

DownloadModelDialog::DownloadModelDialog(const EngineSessionOptions &options, QWidget *parent)
    : QDialog(parent), m_options(options), m_hub(new ModelHub(this)) {
    setWindowTitle(tr("Download a model"));
    m_catalogue = makeTable(
        {tr("Model"), tr("Kind"), tr("Parameters"), tr("Download"), tr("BF16 here"), tr("FP8 here")}, this);
    m_catalogue->setAccessibleName(tr("ERNIE-4.5 checkpoints"));
    m_repo = new QLineEdit(this);
    m_repo->setPlaceholderText(QStringLiteral("org/name, e.g. baidu/ERNIE-4.5-0.3B-PT"));
    m_revision = new QLineEdit(QStringLiteral("main"), this);
    m_check = new QPushButton(tr("&Check"), this);
    m_check->setToolTip(
        tr("Read the repository's file list and config.json: its size, and whether ExpertScope runs it"));
    m_download = new QPushButton(tr("&Download"), this);
    m_cancel = new QPushButton(tr("C&ancel download"), this);
    m_cancel->setToolTip(tr("Stop; the part downloaded is kept and the next download resumes from it"));
    m_message = new QLabel(this);
    m_message->setWordWrap(true);
    m_message->setTextInteractionFlags(Qt::TextSelectableByMouse | Qt::TextSelectableByKeyboard);
    m_progress = new QProgressBar(this);
    m_progress->setRange(0, 1000);
    m_progressLabel = new QLabel(this);
    m_cached = makeTable({tr("Model"), tr("Revision"), tr("Size"), tr("Status")}, this);
    m_cached->setAccessibleName(tr("Models in the hub cache"));
    m_recent = new QListWidget(this);
    m_recent->setAccessibleName(tr("Recent models"));
    m_cacheLabel = new QLabel(this);
    m_cacheLabel->setWordWrap(true);

    auto *catalogueBox = new QGroupBox(tr("ERNIE-4.5 on the Hugging Face hub"), this);
    auto *catalogueLayout = new QVBoxLayout(catalogueBox);
    catalogueLayout->addWidget(m_catalogue);
    auto *form = new QFormLayout;
    auto *repoRow = new QHBoxLayout;
    repoRow->addWidget(m_repo, 1);
    auto *revisionLabel = new QLabel(tr("Re&vision"), this);
    revisionLabel->setBuddy(m_revision);
    repoRow->addWidget(revisionLabel);
    repoRow->addWidget(m_revision);
    m_revision->setMaximumWidth(160);
    repoRow->addWidget(m_check);
    repoRow->addWidget(m_download);
    auto *repoLabel = new QLabel(tr("&Repository"), this);
    repoLabel->setBuddy(m_repo);
    form->addRow(repoLabel, repoRow);
    catalogueLayout->addLayout(form);
    catalogueLayout->addWidget(m_message);
    auto *progressRow = new QHBoxLayout;
    progressRow->addWidget(m_progress, 1);
    progressRow->addWidget(m_cancel);
    catalogueLayout->addLayout(progressRow);
    catalogueLayout->addWidget(m_progressLabel);

    auto *localBox = new QGroupBox(tr("On this computer"), this);
    auto *localLayout = new QVBoxLayout(localBox);
    localLayout->addWidget(m_cacheLabel);
    localLayout->addWidget(m_cached, 2);
    auto *recentLabel = new QLabel(tr("Rece&nt models"), this);
    recentLabel->setBuddy(m_recent);
    localLayout->addWidget(recentLabel);
    localLayout->addWidget(m_recent, 1);

    auto *buttons = new QDialogButtonBox(QDialogButtonBox::Close, this);
    m_load = buttons->addButton(tr("&Load"), QDialogButtonBox::AcceptRole);
    m_load->setEnabled(false);
    auto *layout = new QVBoxLayout(this);
    layout->addWidget(catalogueBox, 3);
    layout->addWidget(localBox, 2);
    layout->addWidget(buttons);
    resize(900, 720);

    connect(buttons, &QDialogButtonBox::rejected, this, &DownloadModelDialog::reject);
    connect(m_load, &QPushButton::clicked, this, &DownloadModelDialog::loadSelected);
    connect(m_check, &QPushButton::clicked, this, &DownloadModelDialog::checkRepo);
    connect(m_download, &QPushButton::clicked, this, &DownloadModelDialog::downloadRepo);
    connect(m_repo, &QLineEdit::returnPressed, this, &DownloadModelDialog::checkRepo);
    connect(m_cancel, &QPushButton::clicked, m_hub, &ModelHub::cancel);
    connect(m_catalogue, &QTableWidget::itemSelectionChanged, this, [this] {
        const auto rows = m_catalogue->selectionModel()->selectedRows();
        if (!rows.isEmpty()) m_repo->setText(m_catalogue->item(rows.first().row(), 0)->text());
    });
    // One selection at a time between the cache and the recent list: Load opens that one.
    connect(m_cached, &QTableWidget::itemSelectionChanged, this, [this] {
        if (!m_cached->selectedItems().isEmpty()) m_recent->clearSelection();
        m_load->setEnabled(!m_hub->isBusy() && !selectedDir().isEmpty());
    });
    connect(m_recent, &QListWidget::itemSelectionChanged, this, [this] {
        if (!m_recent->selectedItems().isEmpty()) m_cached->clearSelection();
        m_load->setEnabled(!m_hub->isBusy() && !selectedDir().isEmpty());
    });
    connect(m_cached, &QTableWidget::cellDoubleClicked, this, &DownloadModelDialog::loadSelected);
    connect(m_recent, &QListWidget::itemDoubleClicked, this, &DownloadModelDialog::loadSelected);

    connect(m_hub, &ModelHub::checked, this, [this](const RemoteModelView &m) {
        setBusy(false);
        QStringList fit;
        for (const FitView &f : m.fit)
            fit << (f.ok ? (f.fits ? tr("%1 fits").arg(f.precision) : tr("%1 does not fit").arg(f.precision))
                         : tr("%1: no estimate").arg(f.precision));
        showMessage(
            tr("%1 at %2: %3, %4 parameters (%5 active), %6 files, %7 (%8 still to download). Here: %9.")
                .arg(m.repoId, m.revision, m.architecture, paramsText(m.params), paramsText(m.activeParams))
                .arg(m.files)
                .arg(sizeText(m.totalBytes), sizeText(m.missingBytes), fit.join(QStringLiteral(", "))),
            false);
    });
    connect(m_hub, &ModelHub::progress, this, [this](const DownloadProgressView &p) {
        m_progress->setValue(p.total > 0 ? int(1000.0 * double(p.done) / double(p.total)) : 0);
        m_progressLabel->setText(p.file.isEmpty() ? p.stage
                                                  : tr("%1 %2 (file %3 of %4) — %5 of %6, %7/s, %8 left")
                                                        .arg(p.stage, p.file)
                                                        .arg(p.fileIndex)
                                                        .arg(p.fileCount)
                                                        .arg(sizeText(p.done), sizeText(p.total),
                                                             sizeText(qint64(p.bytesPerSecond)),
                                                             durationText(p.secondsLeft)));
    });
    connect(m_hub, &ModelHub::downloaded, this, [this](const QString &dir) {
        setBusy(false);
        m_progress->setValue(1000);
        m_progressLabel->clear();
        m_lastDownloaded = dir;
        refreshCached();
        for (int r = 0; r < m_cached->rowCount(); ++r)
            if (m_cached->item(r, 0)->data(Qt::UserRole).toString() == dir) m_cached->selectRow(r);
        showMessage(tr("Downloaded and verified: %1. Press Load to open it.").arg(m_repo->text().trimmed()),
                    false);
        m_load->setDefault(true);
        m_load->setFocus();
    });
    connect(m_hub, &ModelHub::failed, this, [this](const QString &message) {
        setBusy(false);
        m_progressLabel->clear();
        showMessage(message, true);
    });

    fillCatalogue();
    refreshCached();
    fillRecent();
    setBusy(false);
}

void DownloadModelDialog::fillCatalogue() {
    const QList<CatalogueModelView> models = ModelHub::catalogue(m_options);
    m_catalogue->setRowCount(int(models.size()));
    for (int r = 0; r < models.size(); ++r) {
        const CatalogueModelView &m = models[r];
        m_catalogue->setItem(r, 0, item(m.repoId));
        m_catalogue->setItem(
            r, 1,
            m.base ? item(tr("%1, base").arg(m.kind), tr("Pre-trained only, not post-trained for chat"))
                   : item(m.kind));
        m_catalogue->setItem(
            r, 2, item(tr("%1 (%2 active)").arg(paramsText(m.params), paramsText(m.activeParams))));
        m_catalogue->setItem(r, 3,
                             item(tr("about %1").arg(sizeText(m.downloadBytes)),
                                  tr("The weights in BF16 as the hub stores them; the exact size comes with "
                                     "Check")));
        for (int i = 0; i < m.fit.size() && i < 2; ++i) {
            const FitView &f = m.fit[i];
            const QString verdict = m.multiGpu ? (i == 0 ? tr("needs several GPUs") : QStringLiteral("—"))
                                    : !f.ok    ? tr("no estimate")
                                    : f.fits   ? tr("fits")
                                               : tr("does not fit");
            m_catalogue->setItem(r, 4 + i, item(verdict, f.summary));
        }
    }
    m_catalogue->resizeColumnsToContents();
}

void DownloadModelDialog::refreshCached() {
    m_cacheLabel->setText(
        tr("In the Hugging Face cache, %1 (HF_HUB_CACHE), whichever program downloaded them:")
            .arg(QDir::toNativeSeparators(ModelHub::cacheDir())));
    const QList<CachedModelView> models = ModelHub::cachedModels();
    m_cached->setRowCount(int(models.size()));
    for (int r = 0; r < models.size(); ++r) {
        const CachedModelView &m = models[r];
        auto *name = item(m.repoId, m.dir);
        name->setData(Qt::UserRole, m.loadable ? m.dir : QString());
        m_cached->setItem(r, 0, name);
        m_cached->setItem(
            r, 1, item(m.refs.isEmpty() ? m.commit.left(12) : m.refs.join(QStringLiteral(", ")), m.commit));
        m_cached->setItem(r, 2, item(sizeText(m.bytes)));
        m_cached->setItem(r, 3,
                          item(m.loadable ? tr("ready") : tr("not loadable: %1").arg(m.problem), m.problem));
    }
    m_cached->resizeColumnsToContents();
}

void DownloadModelDialog::fillRecent() {
    m_recent->clear();
    for (const QString &dir : ModelHub::recentModels()) {
        auto *it = new QListWidgetItem(QDir::toNativeSeparators(dir), m_recent);
        it->setData(Qt::UserRole, dir);
        if (!QDir(dir).exists()) {
            it->setFlags(Qt::NoItemFlags);
            it->setToolTip(tr("This folder no longer exists"));
        }
    }
}

QString DownloadModelDialog::selectedDir() const {
    const auto cached = m_cached->selectionModel()->selectedRows();
    if (!cached.isEmpty()) return m_cached->item(cached.first().row(), 0)->data(Qt::UserRole).toString();
    const auto recent = m_recent->selectedItems();
    return recent.isEmpty() ? QString() : recent.first()->data(Qt::UserRole).toString();
}

void DownloadModelDialog::setBusy(bool busy) {
    m_check->setEnabled(!busy);
    m_download->setEnabled(!busy);
    m_repo->setReadOnly(busy);
    m_revision->setReadOnly(busy);
    m_cancel->setEnabled(busy);
    m_load->setEnabled(!busy && !selectedDir().isEmpty()); // loading would end the download in hand
    m_progress->setVisible(busy || m_progress->value() > 0);
}

void DownloadModelDialog::showMessage(const QString &text, bool error) {
    m_message->setStyleSheet(error ? QStringLiteral("color: #b00020") : QString());
    m_message->setText(text);
}

void DownloadModelDialog::checkRepo() {
    if (m_hub->isBusy()) return;
    if (m_repo->text().trimmed().isEmpty())
        return showMessage(tr("Type a repository id (org/name) or pick a model above."), true);
    setBusy(true);
    showMessage(tr("Checking %1…").arg(m_repo->text().trimmed()), false);
    m_hub->check(m_repo->text(), m_revision->text(), m_options);
}

void DownloadModelDialog::downloadRepo() {
    if (m_hub->isBusy()) return;
    if (m_repo->text().trimmed().isEmpty())
        return showMessage(tr("Type a repository id (org/name) or pick a model above."), true);
    m_progress->setValue(0);
    setBusy(true);
    showMessage(
        tr("Downloading %1 from %2 into the hub cache…").arg(m_repo->text().trimmed(), ModelHub::endpoint()),
        false);
    m_hub->download(m_repo->text(), m_revision->text());
}

void DownloadModelDialog::loadSelected() {
    const QString dir = selectedDir();
    if (dir.isEmpty()) return;
    emit loadRequested(dir);
    accept();
}

void DownloadModelDialog::reject() {
    m_hub->cancel(); // the thread ends when the dialog (and its hub) goes; partial files are kept
    QDialog::reject();
}

} // namespace es
