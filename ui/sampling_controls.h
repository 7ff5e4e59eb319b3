// SamplingControls: a form editing one es::SamplingParams (temperature, top-p, top-k, min-p,
// repetition / presence / frequency penalty, max tokens, seed, stop strings). Each optional field
// has an override checkbox: unchecked is "unset" (the model's default, shown greyed in the disabled
// editor); checked is the editor's value. Invariant: params() is exact — a field the user did not
// touch keeps the value setParams() gave it, even where an editor rounds it for display.
#pragma once

#include "storage_types.h"

#include <QWidget>

class QCheckBox;
class QDoubleSpinBox;
class QGridLayout;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QPushButton;
class QSpinBox;
class QToolButton;

namespace es {

class SamplingControls : public QWidget {
    Q_OBJECT
public:
    explicit SamplingControls(QWidget *parent = nullptr);

    SamplingParams params() const { return m_params; }
    SamplingParams modelDefaults() const { return m_modelDefaults; }

    // What an unset field means when the model's generation_config does not say either: the
    // engine's own defaults (engine/runtime/sampler.h, sampling_params; restated here because ui/ never
    // includes engine/): temperature 0.8, top-p 1 (off), top-k 0 (off), min-p 0 (off), penalties
    // off, max tokens 512, a random seed.
    static SamplingParams fallbackDefaults();

    // One line naming the fields that are set, e.g. "temperature 0.3, top-p 0.8"; "model
    // defaults" when none is. For tooltips (the preset bar, the preset list).
    static QString summary(const SamplingParams &params);

    // 1: one field per row (narrow side panels); 2 (the default): two fields per row.
    void setColumnCount(int columns);
    int columnCount() const { return m_columns; }

public Q_SLOTS:
    // Shows params; does not emit paramsChanged (the caller knows what it set).
    void setParams(const es::SamplingParams &params);
    // The model's generation_config values shown by unset fields. Unset fields of `defaults`
    // fall back to fallbackDefaults(). Does not change params().
    void setModelDefaults(const es::SamplingParams &defaults);
    // The model's context length: the upper bound of max tokens (0: the built-in bound).
    void setMaxTokensLimit(int limit);
    // Unsets every field and clears the stop strings; emits paramsChanged if anything changed.
    void resetToModelDefaults();

Q_SIGNALS:
    // The user changed a field (or resetToModelDefaults() did); params is the new params().
    // Not emitted by setParams().
    void paramsChanged(const es::SamplingParams &params);

private:
    struct DoubleField {
        std::optional<double> SamplingParams::*member;
        QCheckBox *check;
        QDoubleSpinBox *spin;
        QString help;
    };
    struct IntField {
        std::optional<int> SamplingParams::*member;
        QCheckBox *check;
        QSpinBox *spin;
        QString help;
    };

    // key names the widgets: "<key>Check", "<key>Spin" (tests find them by name).
    DoubleField makeDoubleField(std::optional<double> SamplingParams::*member, const char *key,
                                const QString &label, const QString &help, double min, double max,
                                double step, int decimals, const QString &specialValueText = {});
    IntField makeIntField(std::optional<int> SamplingParams::*member, const char *key, const QString &label,
                          const QString &help, int min, int max, int step,
                          const QString &specialValueText = {});
    double effectiveDefault(std::optional<double> SamplingParams::*member) const;
    int effectiveDefault(std::optional<int> SamplingParams::*member) const;
    void refreshAll();
    void refreshSeed();
    void refreshStop();
    void refreshTooltips();
    void relayout();
    void changed(const SamplingParams &before);
    void onSeedEdited(const QString &text);
    void rollSeed();

    SamplingParams m_params;
    SamplingParams m_modelDefaults;
    bool m_updating = false; // true while the editors are set from m_params
    int m_columns = 2;

    QGridLayout *m_grid = nullptr;
    QList<DoubleField> m_doubles;
    QList<IntField> m_ints;
    QCheckBox *m_seedCheck = nullptr;
    QWidget *m_seedBox = nullptr;
    QLineEdit *m_seedEdit = nullptr;
    QToolButton *m_seedRoll = nullptr;
    QString m_seedHelp;
    QLabel *m_stopLabel = nullptr;
    QPlainTextEdit *m_stopEdit = nullptr;
    QPushButton *m_resetButton = nullptr;
    QList<QWidget *> m_rowOrder; // check, editor, check, editor, … in display order
};

} // namespace es
