// PreferencesDialog (see preferences_dialog.h).
#include "preferences_dialog.h"

#include "appearance.h"
#include "engine_session.h"
#include "sampling_controls.h"
#include "settings_keys.h"

#include <QApplication>
#include <QComboBox>
#include <QDialogButtonBox>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QPushButton>
#include <QSettings>
#include <QSpinBox>
#include <QTabWidget>
#include <QTemporaryFile>
#include <QThread>
#include <QTimer>
#include <QVBoxLayout>

#include <memory>

namespace es {

namespace {

// A combo box of (key, label) choices; the key is the item's data.
QComboBox *choices(QWidget *parent, const char *name, std::initializer_list<std::pair<const char *, QString>> items) {
    auto *box = new QComboBox(parent);
    box->setObjectName(QLatin1String(name));
    for (const auto &[key, label] : items) box->addItem(label, QString::fromLatin1(key));
    return box;
}

void select(QComboBox *box, const QString &key) {
    const int i = box->findData(key);
    box->setCurrentIndex(i >= 0 ? i : 0);
}

QString key(const QComboBox *box) { return box->currentData().toString(); }

QLabel *note(QWidget *parent, const char *name) {
    auto *label = new QLabel(parent);
    label->setObjectName(QLatin1String(name));
    label->setWordWrap(true);
    label->setStyleSheet(QStringLiteral("color: palette(mid)"));
    return label;
}

} // namespace

PreferencesDialog::PreferencesDialog(EngineSession *session, QWidget *parent) : QDialog(parent), m_session(session) {
    setWindowTitle(tr("Preferences"));
    setObjectName(QStringLiteral("preferencesDialog"));
    m_tabs = new QTabWidget(this);
    m_tabs->addTab(buildEnginePage(), tr("&Engine"));
    auto *samplingPage = new QWidget(this);
    auto *samplingLayout = new QVBoxLayout(samplingPage);
    auto *samplingIntro = note(samplingPage, "samplingNote");
    samplingIntro->setText(tr("Used by every reply unless its preset or conversation sets the field. An unset "
                              "field is the model's own default (from its generation_config.json)."));
    samplingLayout->addWidget(samplingIntro);
    m_sampling = new SamplingControls(samplingPage);
    m_sampling->setObjectName(QStringLiteral("defaultSampling"));
    if (m_session) m_sampling->setModelDefaults(m_session->modelInfo().defaults);
    samplingLayout->addWidget(m_sampling);
    samplingLayout->addStretch(1);
    m_tabs->addTab(samplingPage, tr("Default &sampling"));
    m_tabs->addTab(buildInterfacePage(), tr("&Interface"));
    m_tabs->addTab(buildDataPage(), tr("&Data"));

    m_buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel | QDialogButtonBox::Apply |
                                         QDialogButtonBox::RestoreDefaults,
                                     this);
    connect(m_buttons, &QDialogButtonBox::accepted, this, &PreferencesDialog::accept);
    connect(m_buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    connect(m_buttons->button(QDialogButtonBox::Apply), &QPushButton::clicked, this, &PreferencesDialog::apply);
    connect(m_buttons->button(QDialogButtonBox::RestoreDefaults), &QPushButton::clicked, this,
            &PreferencesDialog::restoreDefaults);
    auto *layout = new QVBoxLayout(this);
    layout->addWidget(m_tabs);
    layout->addWidget(m_buttons);

    AppSettings current = AppSettings::load();
    if (m_session) { // the engine as it runs
        const EngineSessionOptions &o = m_session->options();
        current.backend = o.backend;
        current.precision = o.precision;
        current.kvCache = o.kvCache;
        current.gpuMemoryUtilization = o.gpuMemoryUtilization;
        current.threads = o.threads;
    }
    m_opened = current;
    setSettings(current);
    for (QComboBox *box : {m_language, m_theme})
        connect(box, &QComboBox::currentIndexChanged, this, &PreferencesDialog::updateNotes);
    connect(m_dataFolder, &QLineEdit::textChanged, this, &PreferencesDialog::updateNotes);
    updateNotes();
}

QWidget *PreferencesDialog::buildEnginePage() {
    auto *page = new QWidget(this);
    auto *form = new QFormLayout(page);
    m_backend = choices(page, "backendCombo",
                        {{"auto", tr("Automatic (GPU when usable)")}, {"cuda", tr("CUDA GPU")}, {"cpu", tr("CPU")}});
    // A backend that cannot run here is listed, disabled, with the reason (as in Model ▸ Backend).
    for (int i = 0; i < m_backend->count(); ++i) {
        const EngineSession::BackendAvailability a = EngineSession::backendAvailability(m_backend->itemData(i).toString());
        if (a.usable) continue;
        m_backend->setItemText(i, tr("%1 — not available: %2").arg(m_backend->itemText(i), a.reason));
        m_backend->setItemData(i, false, Qt::UserRole - 1); // QStandardItemModel: the item's enabled flag
        m_backend->setItemData(i, a.reason, Qt::ToolTipRole);
    }
    m_precision = choices(page, "precisionCombo",
                          {{"auto", tr("Automatic (FP8 on the GPU, exact on the CPU)")},
                           {"fp8", tr("FP8 (E4M3 weights)")},
                           {"bf16", tr("BF16 weights")}});
    m_kvCache = choices(page, "kvCacheCombo",
                        {{"bf16", tr("BF16 (exact keys and values)")}, {"fp8", tr("FP8 (E4M3: half the memory, on the GPU)")}});
    m_gpuShare = new QSpinBox(page);
    m_gpuShare->setObjectName(QStringLiteral("gpuShareSpin"));
    m_gpuShare->setRange(qRound(AppSettings::kMinGpuShare * 100), qRound(AppSettings::kMaxGpuShare * 100));
    m_gpuShare->setSuffix(tr(" %"));
    m_gpuShare->setToolTip(tr("The share of the GPU's memory ExpertScope may fill: the weights, the workspace and, "
                              "with what they leave, the KV cache. Memory other programs hold counts as used."));
    m_threads = new QSpinBox(page);
    m_threads->setObjectName(QStringLiteral("threadsSpin"));
    m_threads->setRange(0, std::max(1, QThread::idealThreadCount()));
    m_threads->setSpecialValueText(tr("All cores (%1)").arg(QThread::idealThreadCount()));
    m_threads->setToolTip(tr("Threads the CPU backend computes with"));
    form->addRow(tr("&Backend:"), m_backend);
    form->addRow(tr("&Precision:"), m_precision);
    form->addRow(tr("&KV cache:"), m_kvCache);
    form->addRow(tr("&GPU memory share:"), m_gpuShare);
    form->addRow(tr("CPU &threads:"), m_threads);
    auto *reload = note(page, "engineNote");
    reload->setText(tr("A change here reloads the model (replies in progress stop). If it does not load with the "
                       "new settings, the previous ones come back and the model loads again."));
    form->addRow(reload);
    return page;
}

QWidget *PreferencesDialog::buildInterfacePage() {
    auto *page = new QWidget(this);
    auto *form = new QFormLayout(page);
    // Each language in its own name, so it can be found whatever the interface language is now.
    m_language = choices(page, "languageCombo",
                         {{"", tr("The system's language")},
                          {"en", QStringLiteral("English")},
                          {"zh_CN", QStringLiteral("简体中文")}});
    m_languageNote = note(page, "languageNote");
    m_theme = choices(page, "themeCombo", {{"system", tr("Follow the system")}, {"light", tr("Light")}, {"dark", tr("Dark")}});
    m_themeNote = note(page, "themeNote");
    m_fontSize = new QSpinBox(page);
    m_fontSize->setObjectName(QStringLiteral("fontSizeSpin"));
    // 0 and then kMinChatFontSize…: the spin box steps from "system" straight to the smallest size.
    m_fontSize->setRange(AppSettings::kMinChatFontSize - 1, AppSettings::kMaxChatFontSize);
    m_fontSize->setSpecialValueText(tr("System (%1 pt)").arg(QApplication::font().pointSize()));
    m_fontSize->setSuffix(tr(" pt"));
    m_fontSize->setToolTip(tr("The size of the messages and of the message box"));
    form->addRow(tr("&Language:"), m_language);
    form->addRow(m_languageNote);
    form->addRow(tr("&Theme:"), m_theme);
    form->addRow(m_themeNote);
    form->addRow(tr("Chat &font size:"), m_fontSize);
    return page;
}

QWidget *PreferencesDialog::buildDataPage() {
    auto *page = new QWidget(this);
    auto *form = new QFormLayout(page);
    auto *row = new QHBoxLayout;
    m_dataFolder = new QLineEdit(page);
    m_dataFolder->setObjectName(QStringLiteral("dataFolderEdit"));
    m_dataFolder->setPlaceholderText(QDir::toNativeSeparators(settings_keys::defaultDataFolder()));
    m_dataFolder->setClearButtonEnabled(true);
    auto *browse = new QPushButton(tr("&Browse…"), page);
    connect(browse, &QPushButton::clicked, this, [this] {
        const QString start = m_dataFolder->text().isEmpty() ? settings_keys::dataFolder() : m_dataFolder->text();
        const QString dir = QFileDialog::getExistingDirectory(this, tr("Data folder"), start);
        if (!dir.isEmpty()) m_dataFolder->setText(QDir::toNativeSeparators(dir));
    });
    row->addWidget(m_dataFolder, 1);
    row->addWidget(browse);
    form->addRow(tr("Data &folder:"), row);
    m_dataNote = note(page, "dataNote");
    form->addRow(m_dataNote);
    return page;
}

void PreferencesDialog::updateNotes() {
    m_languageNote->setText(key(m_language) != m_opened.language
                                ? tr("The new language is used from the next start of ExpertScope.")
                                : QString());
    m_languageNote->setVisible(!m_languageNote->text().isEmpty());
    m_themeNote->setText(key(m_theme) == QLatin1String("system") ? Appearance::systemSchemeNote() : QString());
    m_themeNote->setVisible(!m_themeNote->text().isEmpty());
    QString data = tr("Where the conversation database (expertscope.sqlite) lives; empty: the default folder shown. "
                      "ExpertScope uses a new folder from its next start and does not move the database: copy "
                      "it over to keep your conversations.");
    if (QDir::cleanPath(QDir::fromNativeSeparators(m_dataFolder->text().trimmed())) !=
        QDir::cleanPath(m_opened.dataFolder))
        data += QLatin1Char(' ') + tr("Changed: used from the next start.");
    m_dataNote->setText(data);
}

AppSettings PreferencesDialog::settings() const {
    AppSettings s;
    s.backend = key(m_backend);
    s.precision = key(m_precision);
    s.kvCache = key(m_kvCache);
    s.gpuMemoryUtilization = m_gpuShare->value() / 100.0;
    s.threads = m_threads->value();
    s.sampling = m_sampling->params();
    const QString folder = m_dataFolder->text().trimmed();
    s.dataFolder = folder.isEmpty() ? QString() : QDir::cleanPath(QDir::fromNativeSeparators(folder));
    s.language = key(m_language);
    s.theme = key(m_theme);
    s.chatFontSize = m_fontSize->value() >= AppSettings::kMinChatFontSize ? m_fontSize->value() : 0;
    return s;
}

void PreferencesDialog::setSettings(const AppSettings &s) {
    select(m_backend, s.backend);
    select(m_precision, s.precision);
    select(m_kvCache, s.kvCache);
    m_gpuShare->setValue(qRound(s.gpuMemoryUtilization * 100));
    m_threads->setValue(s.threads);
    m_sampling->setParams(s.sampling);
    m_dataFolder->setText(QDir::toNativeSeparators(s.dataFolder));
    select(m_language, s.language);
    select(m_theme, s.theme);
    m_fontSize->setValue(s.chatFontSize >= AppSettings::kMinChatFontSize ? s.chatFontSize : m_fontSize->minimum());
}

void PreferencesDialog::restoreDefaults() {
    AppSettings defaults;
    // A default backend that cannot run here is still "auto": always usable.
    setSettings(defaults);
}

QString PreferencesDialog::checkDataFolder(const QString &path) {
    if (path.isEmpty()) return {};
    const QString shown = QDir::toNativeSeparators(path);
    if (!QDir::isAbsolutePath(path)) return tr("Data folder: “%1” is not a full path.").arg(shown);
    const QFileInfo info(path);
    if (info.exists()) {
        if (!info.isDir()) return tr("Data folder: “%1” is a file, not a folder.").arg(shown);
        // Writing is the only sure test (permissions, a read-only mount, root's exemptions).
        QTemporaryFile probe(QDir(path).filePath(QStringLiteral(".expertscope-write-test-XXXXXX")));
        if (!probe.open()) return tr("Data folder: “%1” is not writable (%2).").arg(shown, probe.errorString());
        return {};
    }
    // A folder still to be made: the nearest existing folder above it must take it.
    QFileInfo above(info.absolutePath());
    while (!above.exists() && !above.isRoot()) above = QFileInfo(above.absolutePath());
    if (!above.isDir() || !above.isWritable())
        return tr("Data folder: “%1” does not exist and cannot be created in “%2”.")
            .arg(shown, QDir::toNativeSeparators(above.absoluteFilePath()));
    return {};
}

QString PreferencesDialog::refuse(QWidget *field, const QString &message) {
    for (int i = 0; i < m_tabs->count(); ++i)
        if (m_tabs->widget(i)->isAncestorOf(field)) m_tabs->setCurrentIndex(i);
    field->setFocus();
    return message;
}

QString PreferencesDialog::validate() {
    const AppSettings s = settings();
    if (const QString why = checkDataFolder(s.dataFolder); !why.isEmpty()) return refuse(m_dataFolder, why);
    const EngineSession::BackendAvailability backend = EngineSession::backendAvailability(s.backend);
    if (!backend.usable) return refuse(m_backend, tr("Backend: %1 cannot run here: %2.").arg(s.backend, backend.reason));
    // The model that is loaded must load again with the new engine settings (checked before
    // anything is unloaded: the weights' files, the backend, the precision).
    if (m_session && m_session->isModelLoaded() && !m_session->isRemote() && s.engineDiffers(m_opened)) {
        const QString dir = m_session->modelInfo().dir;
        if (const QString why = EngineSession::checkFolder(dir, s.engineOptions(m_session->options())); !why.isEmpty())
            return refuse(m_backend, tr("Backend and precision: %1 cannot be loaded with them: %2")
                                         .arg(QDir::toNativeSeparators(dir), why));
    }
    return {};
}

bool PreferencesDialog::apply() {
    if (const QString why = validate(); !why.isEmpty()) {
        QMessageBox::warning(this, tr("Preferences not saved"), why);
        return false;
    }
    const AppSettings s = settings();
    s.save();
    Appearance::apply(s);
    if (m_session && s.engineDiffers(m_opened))
        reloadKeepingModel(m_session, s.engineOptions(m_session->options()), m_notify);
    m_opened = s;
    updateNotes();
    return true;
}

void PreferencesDialog::accept() {
    if (apply()) QDialog::accept();
}

void PreferencesDialog::reloadKeepingModel(EngineSession *session, const EngineSessionOptions &options,
                                           std::function<void(const QString &)> notify) {
    const EngineSessionOptions previous = session->options();
    const bool hadModel = session->isModelLoaded() && !session->isRemote();
    session->reconfigure(options);
    if (!hadModel) return;
    // One outcome of this reload: loaded (done) or failed (back to the previous options).
    auto *watch = new QObject(session);
    auto done = std::make_shared<bool>(false);
    connect(session, &EngineSession::modelLoaded, watch, [watch, done] {
        *done = true;
        watch->deleteLater();
    });
    connect(session, &EngineSession::modelLoadFailed, watch,
            [session, watch, done, previous, notify](const QString &, const QString &why) {
                if (*done) return;
                *done = true;
                watch->deleteLater();
                namespace k = settings_keys;
                QSettings stored;
                stored.setValue(k::kBackend, previous.backend);
                stored.setValue(k::kPrecision, previous.precision);
                stored.setValue(k::kKvCache, previous.kvCache);
                stored.setValue(k::kGpuMemoryUtilization, previous.gpuMemoryUtilization);
                stored.setValue(k::kThreads, previous.threads);
                // After the signal: the session is still inside the step that reported the failure.
                QTimer::singleShot(0, session, [session, previous] { session->reconfigure(previous); });
                if (notify)
                    notify(tr("The model did not load with the new engine settings (%1); the previous settings are "
                              "back and it loads again.")
                               .arg(why));
            });
}

} // namespace es
