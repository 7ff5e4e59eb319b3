// ExpertLabDialog: edits one conversation's expert intervention (es::ExpertIntervention) — experts
// disabled and forced as LAYER:EXPERT lists, the routed experts per token, the scale of the
// router's correction bias — against the loaded model's MoE layers and experts. Every edit is
// checked at once by the engine's own rules (EngineSession::checkIntervention), and Apply stays
// disabled while the text says something the engine would refuse. The conversation's next replies
// (and a regenerated one) are routed under it; each reply stores the intervention it ran under.
#pragma once

#include "session_types.h"

#include <QDialog>
#include <functional>

class QDialogButtonBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QSpinBox;

namespace es {

class ExpertLabDialog : public QDialog {
    Q_OBJECT
public:
    // check: "" when the intervention is valid for the loaded model, else the reason.
    ExpertLabDialog(const SessionModelInfo &model, const ExpertIntervention &current,
                    std::function<QString(const ExpertIntervention &)> check, QWidget *parent = nullptr);

    ExpertIntervention intervention() const;
    // Fills the editors (e.g. "disable expert 5 of layer 3" from the routing heatmap).
    void setIntervention(const ExpertIntervention &iv);
    QString problem() const; // "" when Apply is possible

    // Adds "L:E" to a LAYER:EXPERT list unless it is there already.
    static QString withExpert(const QString &list, int layer, int expert);

private:
    void validate();

    std::function<QString(const ExpertIntervention &)> m_check;
    QLineEdit *m_disabled = nullptr, *m_forced = nullptr;
    QSpinBox *m_topK = nullptr;
    QDoubleSpinBox *m_biasScale = nullptr;
    QLabel *m_problem = nullptr, *m_summary = nullptr;
    QDialogButtonBox *m_buttons = nullptr;
};

} // namespace es
