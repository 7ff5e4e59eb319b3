// ExpertLabDialog (see expert_lab_dialog.h).
#include "expert_lab_dialog.h"

#include <QDialogButtonBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSpinBox>
#include <QVBoxLayout>

namespace es {

ExpertLabDialog::ExpertLabDialog(const SessionModelInfo &model, const ExpertIntervention &current,
                                 std::function<QString(const ExpertIntervention &)> check, QWidget *parent)
    : QDialog(parent), m_check(std::move(check)) {
    setWindowTitle(tr("Expert lab"));
    auto *layout = new QVBoxLayout(this);
    QStringList layers;
    for (int l : model.moeLayers) layers << QString::number(l);
    auto *about = new QLabel(
        tr("Change how %1 routes the next replies of this conversation, then regenerate and compare the "
           "replies on the profiler's Compare page. MoE layers: %2; experts 0–%3; %4 chosen per token.")
            .arg(model.name.toHtmlEscaped(), layers.join(QLatin1String(", ")))
            .arg(model.nExperts - 1)
            .arg(model.nExpertsUsed),
        this);
    about->setWordWrap(true);
    layout->addWidget(about);

    auto *form = new QFormLayout;
    m_disabled = new QLineEdit(this);
    m_disabled->setPlaceholderText(tr("e.g. %1:0, *:5").arg(model.moeLayers.value(0, 1)));
    m_disabled->setToolTip(tr("LAYER:EXPERT, comma-separated; LAYER is the checkpoint's layer index or * for every "
                              "MoE layer. A disabled expert's router probability is 0 and it is never chosen."));
    form->addRow(tr("&Disable experts:"), m_disabled);
    m_forced = new QLineEdit(this);
    m_forced->setPlaceholderText(tr("e.g. *:3"));
    m_forced->setToolTip(tr("LAYER:EXPERT, comma-separated. Forced experts are chosen first; the remaining places "
                            "go to the best of the others. Weights stay the router's probabilities, normalised "
                            "over the chosen experts."));
    form->addRow(tr("&Force experts:"), m_forced);
    m_topK = new QSpinBox(this);
    m_topK->setRange(0, std::max(1, model.nExperts));
    m_topK->setSpecialValueText(tr("the model's (%1)").arg(model.nExpertsUsed));
    m_topK->setToolTip(tr("Routed experts chosen per token in every MoE layer."));
    form->addRow(tr("Experts per &token:"), m_topK);
    m_biasScale = new QDoubleSpinBox(this);
    m_biasScale->setRange(-100.0, 100.0);
    m_biasScale->setDecimals(2);
    m_biasScale->setSingleStep(0.25);
    m_biasScale->setToolTip(tr("Multiplies the router's correction bias in the choice (1: the model's, 0: none). "
                               "The weights never include the bias."));
    form->addRow(tr("Correction &bias × :"), m_biasScale);
    layout->addLayout(form);

    m_summary = new QLabel(this);
    m_summary->setWordWrap(true);
    layout->addWidget(m_summary);
    m_problem = new QLabel(this);
    m_problem->setWordWrap(true);
    m_problem->setStyleSheet(QStringLiteral("color: #b3261e;"));
    m_problem->setTextInteractionFlags(Qt::TextSelectableByMouse);
    layout->addWidget(m_problem);

    m_buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel | QDialogButtonBox::Reset, this);
    m_buttons->button(QDialogButtonBox::Ok)->setText(tr("&Apply"));
    m_buttons->button(QDialogButtonBox::Reset)->setText(tr("&Clear"));
    m_buttons->button(QDialogButtonBox::Reset)->setToolTip(tr("Route as the model does (no intervention)"));
    layout->addWidget(m_buttons);
    connect(m_buttons, &QDialogButtonBox::accepted, this, &QDialog::accept);
    connect(m_buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
    connect(m_buttons->button(QDialogButtonBox::Reset), &QPushButton::clicked, this,
            [this] { setIntervention({}); });
    for (QLineEdit *e : {m_disabled, m_forced}) connect(e, &QLineEdit::textChanged, this, &ExpertLabDialog::validate);
    connect(m_topK, &QSpinBox::valueChanged, this, &ExpertLabDialog::validate);
    connect(m_biasScale, &QDoubleSpinBox::valueChanged, this, &ExpertLabDialog::validate);
    setIntervention(current);
    resize(520, sizeHint().height());
}

ExpertIntervention ExpertLabDialog::intervention() const {
    ExpertIntervention iv;
    iv.disabled = m_disabled->text().simplified();
    iv.forced = m_forced->text().simplified();
    iv.topK = m_topK->value();
    iv.biasScale = m_biasScale->value();
    return iv;
}

void ExpertLabDialog::setIntervention(const ExpertIntervention &iv) {
    m_disabled->setText(iv.disabled);
    m_forced->setText(iv.forced);
    m_topK->setValue(iv.topK);
    m_biasScale->setValue(iv.biasScale);
    validate();
}

QString ExpertLabDialog::problem() const { return m_problem->text(); }

QString ExpertLabDialog::withExpert(const QString &list, int layer, int expert) {
    const QString item = QStringLiteral("%1:%2").arg(layer).arg(expert);
    QStringList items;
    for (const QString &s : list.split(QLatin1Char(','), Qt::SkipEmptyParts)) items << s.trimmed();
    if (!items.contains(item)) items << item;
    return items.join(QLatin1String(", "));
}

void ExpertLabDialog::validate() {
    const ExpertIntervention iv = intervention();
    const QString why = m_check ? m_check(iv) : QString();
    m_problem->setText(why);
    m_summary->setText(iv.isEmpty() ? tr("No intervention: the model routes as trained.")
                                    : tr("Next replies: %1").arg(iv.summary()));
    m_buttons->button(QDialogButtonBox::Ok)->setEnabled(why.isEmpty());
}

} // namespace es
