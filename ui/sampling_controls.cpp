// SamplingControls: m_params is the source of truth; the editors are views of it. A user edit
// writes one field of m_params and emits paramsChanged; setParams() rewrites the editors with
// m_updating set, so no edit handler runs. Ranges follow the engine's validation and common use.
#include "sampling_controls.h"

#include <QCheckBox>
#include <QDoubleSpinBox>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QRandomGenerator>
#include <QRegularExpressionValidator>
#include <QSignalBlocker>
#include <QSpinBox>
#include <QToolButton>

#include <algorithm>

namespace es {

namespace {

// ERNIE-4.5 models have a 128K context; setMaxTokensLimit() narrows it to the loaded model's.
constexpr int kMaxTokensBound = 131072;

// Stop strings are edited one per line, so a line break inside one is written "\n" (and a tab
// "\t", a backslash "\\"): every QStringList survives the round trip except empty strings,
// which mean nothing as a stop string.
QString escapeStop(const QString &s) {
    QString out;
    out.reserve(s.size());
    for (QChar c : s) {
        if (c == u'\\')
            out += QStringLiteral("\\\\");
        else if (c == u'\n')
            out += QStringLiteral("\\n");
        else if (c == u'\t')
            out += QStringLiteral("\\t");
        else
            out += c;
    }
    return out;
}

QString unescapeStop(const QString &s) {
    QString out;
    out.reserve(s.size());
    for (qsizetype i = 0; i < s.size(); ++i) {
        if (s[i] == u'\\' && i + 1 < s.size()) {
            const QChar n = s[i + 1];
            if (n == u'n') {
                out += u'\n';
                ++i;
                continue;
            }
            if (n == u't') {
                out += u'\t';
                ++i;
                continue;
            }
            if (n == u'\\') {
                out += u'\\';
                ++i;
                continue;
            }
        }
        out += s[i];
    }
    return out;
}

QStringList parseStopText(const QString &text) {
    QStringList out;
    for (const QString &line : text.split(u'\n')) {
        if (!line.isEmpty()) out.append(unescapeStop(line));
    }
    return out;
}

QString stopText(const QStringList &stops) {
    QStringList lines;
    for (const QString &s : stops) lines.append(escapeStop(s));
    return lines.join(u'\n');
}

QString number(double v) { return QString::number(v, 'g', 6); }

} // namespace

SamplingParams SamplingControls::fallbackDefaults() {
    SamplingParams p;
    p.temperature = 0.8;
    p.topP = 1.0;
    p.topK = 0;
    p.minP = 0.0;
    p.repetitionPenalty = 1.0;
    p.presencePenalty = 0.0;
    p.frequencyPenalty = 0.0;
    p.maxTokens = 512;
    return p; // seed unset: random
}

QString SamplingControls::summary(const SamplingParams &p) {
    QStringList parts;
    if (p.temperature) parts << tr("temperature %1").arg(number(*p.temperature));
    if (p.topP) parts << tr("top-p %1").arg(number(*p.topP));
    if (p.topK) parts << tr("top-k %1").arg(*p.topK);
    if (p.minP) parts << tr("min-p %1").arg(number(*p.minP));
    if (p.repetitionPenalty) parts << tr("repetition penalty %1").arg(number(*p.repetitionPenalty));
    if (p.presencePenalty) parts << tr("presence penalty %1").arg(number(*p.presencePenalty));
    if (p.frequencyPenalty) parts << tr("frequency penalty %1").arg(number(*p.frequencyPenalty));
    if (p.maxTokens) parts << tr("max tokens %1").arg(*p.maxTokens);
    if (p.seed) parts << tr("seed %1").arg(*p.seed);
    if (!p.stopStrings.isEmpty()) parts << tr("stop strings: %1").arg(p.stopStrings.size());
    if (parts.isEmpty()) return tr("model defaults");
    return parts.join(tr(", "));
}

SamplingControls::SamplingControls(QWidget *parent) : QWidget(parent) {
    m_grid = new QGridLayout(this);
    m_grid->setContentsMargins(0, 0, 0, 0);

    m_doubles << makeDoubleField(
        &SamplingParams::temperature, "temperature", tr("&Temperature"),
        tr("How random the reply is: the logits are divided by the temperature before sampling. Lower is "
           "more focused and repeatable, higher more varied; 0 always picks the most likely token (greedy)."),
        0.0, 2.0, 0.05, 2, tr("greedy"));
    m_doubles << makeDoubleField(
        &SamplingParams::topP, "topP", tr("T&op-p"),
        tr("Nucleus sampling: sample only among the most likely tokens whose probabilities add up to p. "
           "Lower is more conservative; 1 turns it off."),
        0.0, 1.0, 0.01, 3);
    m_ints << makeIntField(&SamplingParams::topK, "topK", tr("Top-&k"),
                           tr("Sample only among the k most likely tokens. 0 turns it off."), 0, 10000, 1,
                           tr("off"));
    m_doubles << makeDoubleField(
        &SamplingParams::minP, "minP", tr("&Min-p"),
        tr("Drop tokens whose probability is below min-p times that of the most likely token. Keeps "
           "the reply coherent at higher temperatures; 0 turns it off."),
        0.0, 1.0, 0.01, 3, tr("off"));
    m_doubles << makeDoubleField(
        &SamplingParams::repetitionPenalty, "repetitionPenalty", tr("Repetition pena&lty"),
        tr("Makes tokens already in the prompt or the reply less likely (positive logits divided by the "
           "penalty, negative ones multiplied). 1 turns it off; 1.05 to 1.2 is usual."),
        0.5, 2.0, 0.05, 2);
    m_doubles << makeDoubleField(
        &SamplingParams::presencePenalty, "presencePenalty", tr("Pr&esence penalty"),
        tr("Subtracted once from the logit of every token already in the reply: nudges the model "
           "towards new words and topics. 0 turns it off; negative values encourage repetition."),
        -2.0, 2.0, 0.1, 2);
    m_doubles << makeDoubleField(
        &SamplingParams::frequencyPenalty, "frequencyPenalty", tr("&Frequency penalty"),
        tr("Subtracted from a token's logit once for every time it is already in the reply: discourages "
           "repeating the same words verbatim. 0 turns it off."),
        -2.0, 2.0, 0.1, 2);
    m_ints << makeIntField(&SamplingParams::maxTokens, "maxTokens", tr("Max tokens"),
                           tr("The most tokens the reply may have. Generation stops there (finish reason "
                              "\"length\") or earlier at the end of the context."),
                           1, kMaxTokensBound, 64);

    // Seed: the unset state is the model's seed if it names one, else a new random seed per reply.
    m_seedHelp = tr("The random seed for sampling. A fixed seed with the same model, precision, prompt and "
                    "parameters gives the same reply again. Unchecked: a new random seed for every reply "
                    "(the one used is saved with the reply).");
    m_seedCheck = new QCheckBox(tr("Seed"), this);
    m_seedCheck->setObjectName(QStringLiteral("seedCheck"));
    m_seedBox = new QWidget(this);
    auto *seedLayout = new QHBoxLayout(m_seedBox);
    seedLayout->setContentsMargins(0, 0, 0, 0);
    seedLayout->setSpacing(2);
    m_seedEdit = new QLineEdit(m_seedBox);
    m_seedEdit->setObjectName(QStringLiteral("seedEdit"));
    // Up to 20 digits; values above 2^64-1 fail toULongLong and are refused in onSeedEdited().
    m_seedEdit->setValidator(
        new QRegularExpressionValidator(QRegularExpression(QStringLiteral("[0-9]{0,20}")), m_seedEdit));
    m_seedRoll = new QToolButton(m_seedBox);
    m_seedRoll->setObjectName(QStringLiteral("seedRollButton"));
    m_seedRoll->setText(tr("New"));
    m_seedRoll->setToolTip(tr("Pick a new random fixed seed"));
    m_seedRoll->setAccessibleName(tr("New random seed"));
    seedLayout->addWidget(m_seedEdit, 1);
    seedLayout->addWidget(m_seedRoll);
    m_seedCheck->setAccessibleDescription(m_seedHelp);
    m_seedEdit->setAccessibleName(tr("Seed"));
    m_rowOrder << m_seedCheck << m_seedBox;

    connect(m_seedCheck, &QCheckBox::toggled, this, [this](bool on) {
        if (m_updating) return;
        const SamplingParams before = m_params;
        if (on) {
            if (m_modelDefaults.seed)
                m_params.seed = m_modelDefaults.seed;
            else
                m_params.seed = QRandomGenerator::global()->generate();
        } else {
            m_params.seed.reset();
        }
        refreshSeed();
        changed(before);
    });
    connect(m_seedEdit, &QLineEdit::textEdited, this, &SamplingControls::onSeedEdited);
    // An empty or out-of-range seed is not stored; leaving the field shows the stored one again.
    connect(m_seedEdit, &QLineEdit::editingFinished, this, [this] {
        if (!m_updating) refreshSeed();
    });
    connect(m_seedRoll, &QToolButton::clicked, this, &SamplingControls::rollSeed);

    m_stopLabel = new QLabel(tr("Stop strin&gs (one per line):"), this);
    m_stopEdit = new QPlainTextEdit(this);
    m_stopEdit->setObjectName(QStringLiteral("stopEdit"));
    m_stopEdit->setTabChangesFocus(true);
    m_stopEdit->setPlaceholderText(tr("None: the model's end-of-turn token ends the reply"));
    m_stopLabel->setBuddy(m_stopEdit);
    m_stopEdit->setAccessibleName(tr("Stop strings"));
    const QString stopHelp =
        tr("The reply ends when it produces one of these strings. One per line; write \\n "
           "for a line break, \\t for a tab and \\\\ for a backslash.");
    m_stopLabel->setToolTip(stopHelp);
    m_stopEdit->setToolTip(stopHelp);
    // About three lines: most stop lists are short, and the form should stay compact.
    m_stopEdit->setFixedHeight(m_stopEdit->fontMetrics().lineSpacing() * 3 + 2 * m_stopEdit->frameWidth() +
                               8);
    connect(m_stopEdit, &QPlainTextEdit::textChanged, this, [this] {
        if (m_updating) return;
        const SamplingParams before = m_params;
        m_params.stopStrings = parseStopText(m_stopEdit->toPlainText());
        changed(before);
    });

    m_resetButton = new QPushButton(tr("Reset to model defaults"), this);
    m_resetButton->setObjectName(QStringLiteral("resetButton"));
    m_resetButton->setAutoDefault(false);
    m_resetButton->setToolTip(tr("Unset every field: the reply uses the model's generation_config values"));
    connect(m_resetButton, &QPushButton::clicked, this, &SamplingControls::resetToModelDefaults);

    relayout();
    refreshAll();
    refreshTooltips();
}

SamplingControls::DoubleField SamplingControls::makeDoubleField(std::optional<double> SamplingParams::*member,
                                                                const char *key, const QString &label,
                                                                const QString &help, double min, double max,
                                                                double step, int decimals,
                                                                const QString &specialValueText) {
    DoubleField f{member, new QCheckBox(label, this), new QDoubleSpinBox(this), help};
    f.check->setObjectName(QLatin1String(key) + QLatin1String("Check"));
    f.spin->setObjectName(QLatin1String(key) + QLatin1String("Spin"));
    f.spin->setRange(min, max);
    f.spin->setSingleStep(step);
    f.spin->setDecimals(decimals);
    f.spin->setSpecialValueText(specialValueText);
    f.spin->setAccelerated(true);
    f.spin->setAccessibleName(QString(label).remove(u'&'));
    f.check->setAccessibleDescription(help);
    m_rowOrder << f.check << f.spin;
    connect(f.check, &QCheckBox::toggled, this, [this, member, spin = f.spin](bool on) {
        if (m_updating) return;
        const SamplingParams before = m_params;
        // Overriding starts from the value the field showed (the model default), so checking
        // the box alone changes nothing the model would do until the value is edited.
        if (on)
            m_params.*member = spin->value();
        else
            (m_params.*member).reset();
        refreshAll();
        changed(before);
    });
    connect(f.spin, &QDoubleSpinBox::valueChanged, this, [this, member](double v) {
        if (m_updating || !(m_params.*member)) return;
        const SamplingParams before = m_params;
        m_params.*member = v;
        changed(before);
    });
    return f;
}

SamplingControls::IntField SamplingControls::makeIntField(std::optional<int> SamplingParams::*member,
                                                          const char *key, const QString &label,
                                                          const QString &help, int min, int max, int step,
                                                          const QString &specialValueText) {
    IntField f{member, new QCheckBox(label, this), new QSpinBox(this), help};
    f.check->setObjectName(QLatin1String(key) + QLatin1String("Check"));
    f.spin->setObjectName(QLatin1String(key) + QLatin1String("Spin"));
    f.spin->setRange(min, max);
    f.spin->setSingleStep(step);
    f.spin->setSpecialValueText(specialValueText);
    f.spin->setAccelerated(true);
    f.spin->setAccessibleName(QString(label).remove(u'&'));
    f.check->setAccessibleDescription(help);
    m_rowOrder << f.check << f.spin;
    connect(f.check, &QCheckBox::toggled, this, [this, member, spin = f.spin](bool on) {
        if (m_updating) return;
        const SamplingParams before = m_params;
        if (on)
            m_params.*member = spin->value();
        else
            (m_params.*member).reset();
        refreshAll();
        changed(before);
    });
    connect(f.spin, &QSpinBox::valueChanged, this, [this, member](int v) {
        if (m_updating || !(m_params.*member)) return;
        const SamplingParams before = m_params;
        m_params.*member = v;
        changed(before);
    });
    return f;
}

void SamplingControls::setColumnCount(int columns) {
    columns = std::clamp(columns, 1, 2);
    if (columns == m_columns) return;
    m_columns = columns;
    relayout();
}

void SamplingControls::relayout() {
    for (QWidget *w : std::as_const(m_rowOrder)) m_grid->removeWidget(w);
    m_grid->removeWidget(m_stopLabel);
    m_grid->removeWidget(m_stopEdit);
    m_grid->removeWidget(m_resetButton);
    for (int c = 0; c < 4; ++c) m_grid->setColumnStretch(c, 0);

    const int pairs = int(m_rowOrder.size() / 2);
    for (int i = 0; i < pairs; ++i) {
        const int row = i / m_columns;
        const int col = (i % m_columns) * 2;
        m_grid->addWidget(m_rowOrder[2 * i], row, col);
        m_grid->addWidget(m_rowOrder[2 * i + 1], row, col + 1);
    }
    for (int c = 0; c < m_columns; ++c) m_grid->setColumnStretch(2 * c + 1, 1);
    const int rows = (pairs + m_columns - 1) / m_columns;
    const int span = 2 * m_columns;
    m_grid->addWidget(m_stopLabel, rows, 0, 1, span);
    m_grid->addWidget(m_stopEdit, rows + 1, 0, 1, span);
    m_grid->addWidget(m_resetButton, rows + 2, 0, 1, span, Qt::AlignRight);

    // Tab order follows the reading order: across each row, then down.
    QWidget *prev = nullptr;
    auto chain = [&prev](QWidget *w) {
        if (prev) setTabOrder(prev, w);
        prev = w;
    };
    for (int i = 0; i < pairs; ++i) {
        chain(m_rowOrder[2 * i]);
        if (m_rowOrder[2 * i + 1] == m_seedBox) {
            chain(m_seedEdit);
            chain(m_seedRoll);
        } else {
            chain(m_rowOrder[2 * i + 1]);
        }
    }
    chain(m_stopEdit);
    chain(m_resetButton);
}

double SamplingControls::effectiveDefault(std::optional<double> SamplingParams::*member) const {
    if (const auto &v = m_modelDefaults.*member) return *v;
    return *(fallbackDefaults().*member);
}

int SamplingControls::effectiveDefault(std::optional<int> SamplingParams::*member) const {
    if (const auto &v = m_modelDefaults.*member) return *v;
    return *(fallbackDefaults().*member);
}

void SamplingControls::setParams(const SamplingParams &params) {
    m_params = params;
    refreshAll();
}

void SamplingControls::setModelDefaults(const SamplingParams &defaults) {
    m_modelDefaults = defaults;
    refreshAll();
    refreshTooltips();
}

void SamplingControls::setMaxTokensLimit(int limit) {
    const int max = limit > 0 ? limit : kMaxTokensBound;
    for (IntField &f : m_ints) {
        if (f.member != &SamplingParams::maxTokens) continue;
        const QSignalBlocker block(f.spin);
        f.spin->setMaximum(max);
    }
    refreshAll();
}

void SamplingControls::resetToModelDefaults() {
    const SamplingParams before = m_params;
    m_params = {};
    refreshAll();
    changed(before);
}

void SamplingControls::changed(const SamplingParams &before) {
    if (m_params != before) emit paramsChanged(m_params);
}

void SamplingControls::refreshAll() {
    m_updating = true;
    for (const DoubleField &f : std::as_const(m_doubles)) {
        const std::optional<double> &v = m_params.*(f.member);
        f.check->setChecked(v.has_value());
        f.spin->setEnabled(v.has_value());
        // A value outside the editor's range (an imported preset, say) is kept in m_params;
        // the editor shows it clamped.
        f.spin->setValue(v ? *v : effectiveDefault(f.member));
    }
    for (const IntField &f : std::as_const(m_ints)) {
        const std::optional<int> &v = m_params.*(f.member);
        f.check->setChecked(v.has_value());
        f.spin->setEnabled(v.has_value());
        f.spin->setValue(v ? *v : effectiveDefault(f.member));
    }
    m_updating = false;
    refreshSeed();
    refreshStop();
}

void SamplingControls::refreshSeed() {
    m_updating = true;
    m_seedCheck->setChecked(m_params.seed.has_value());
    m_seedEdit->setEnabled(m_params.seed.has_value());
    m_seedRoll->setEnabled(m_params.seed.has_value());
    const std::optional<quint64> shown = m_params.seed ? m_params.seed : m_modelDefaults.seed;
    m_seedEdit->setText(shown ? QString::number(*shown) : QString());
    m_seedEdit->setPlaceholderText(tr("random"));
    m_updating = false;
}

void SamplingControls::refreshStop() {
    // Rewriting the text would move the cursor under the user's hands; only do it when the text
    // does not already say the same.
    if (parseStopText(m_stopEdit->toPlainText()) == m_params.stopStrings) return;
    m_updating = true;
    m_stopEdit->setPlainText(stopText(m_params.stopStrings));
    m_updating = false;
}

void SamplingControls::refreshTooltips() {
    const SamplingParams fallback = fallbackDefaults();
    auto withDefault = [](const QString &help, const QString &value) {
        return help + QStringLiteral("\n\n") + tr("Unchecked: the model's default, %1.").arg(value);
    };
    for (const DoubleField &f : std::as_const(m_doubles)) {
        const double d = effectiveDefault(f.member);
        const QString shown = (d == f.spin->minimum() && !f.spin->specialValueText().isEmpty())
                                  ? QStringLiteral("%1 (%2)").arg(number(d), f.spin->specialValueText())
                                  : number(d);
        const QString tip = withDefault(f.help, shown);
        f.check->setToolTip(tip);
        f.spin->setToolTip(tip);
    }
    for (const IntField &f : std::as_const(m_ints)) {
        const int d = effectiveDefault(f.member);
        const QString shown = (d == f.spin->minimum() && !f.spin->specialValueText().isEmpty())
                                  ? QStringLiteral("%1 (%2)").arg(d).arg(f.spin->specialValueText())
                                  : QString::number(d);
        const QString tip = withDefault(f.help, shown);
        f.check->setToolTip(tip);
        f.spin->setToolTip(tip);
    }
    const QString seedTip =
        withDefault(m_seedHelp, m_modelDefaults.seed ? QString::number(*m_modelDefaults.seed) : tr("random"));
    m_seedCheck->setToolTip(seedTip);
    m_seedEdit->setToolTip(seedTip);
}

void SamplingControls::onSeedEdited(const QString &text) {
    if (m_updating || !m_params.seed) return;
    bool ok = false;
    const quint64 v = text.toULongLong(&ok);
    if (!ok) return; // empty or above 2^64-1: keep the stored seed until the text is valid again
    const SamplingParams before = m_params;
    m_params.seed = v;
    changed(before);
}

void SamplingControls::rollSeed() {
    if (!m_params.seed) return;
    const SamplingParams before = m_params;
    // 32 bits: short enough to read out and type back; collisions do not matter for a seed.
    m_params.seed = QRandomGenerator::global()->generate();
    refreshSeed();
    changed(before);
}

} // namespace es
