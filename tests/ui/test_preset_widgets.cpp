// Widget tests of the preset UI (label ui, offscreen): PresetBar (click applies, click again
// clears, Alt+N, Tab order, scoped shortcuts), PresetEditorDialog over an in-memory ChatStore
// (add, save, revert, duplicate, delete, locked built-ins, reorder, unsaved-changes prompt,
// export → import round trip and import errors; file dialogs and questions through the dialog's
// test hooks), SamplingControls (every field set and unset, defaults, paramsChanged), and
// PresetListModel under QAbstractItemModelTester. ES_SCREENSHOT_DIR=<dir> saves grabs there.
#include "chat_store.h"
#include "preset_bar.h"
#include "preset_editor_dialog.h"
#include "preset_list_model.h"
#include "presets.h"
#include "sampling_controls.h"

#include <QAbstractItemModelTester>
#include <QApplication>
#include <QCheckBox>
#include <QDoubleSpinBox>
#include <QFile>
#include <QLabel>
#include <QLineEdit>
#include <QListView>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTemporaryDir>
#include <QToolButton>
#include <QVBoxLayout>
#include <QtTest>

#include <limits>
#include <memory>

using namespace es;

namespace {

// The dialog with its interaction hooks answered by the test.
class TestEditor : public PresetEditorDialog {
public:
    using PresetEditorDialog::PresetEditorDialog;
    using PresetEditorDialog::UnsavedChoice;

    QString importPath;
    QString exportPath;
    bool confirmAnswer = true;
    int confirmCalls = 0;
    QList<UnsavedChoice> unsavedAnswers; // taken in order; Cancel when empty
    int unsavedCalls = 0;
    QStringList errors;

protected:
    QString chooseImportPath() override { return importPath; }
    QString chooseExportPath() override { return exportPath; }
    bool confirmDelete(const Preset &) override {
        ++confirmCalls;
        return confirmAnswer;
    }
    UnsavedChoice askUnsavedChanges(const Preset &) override {
        ++unsavedCalls;
        return unsavedAnswers.isEmpty() ? UnsavedChoice::Cancel : unsavedAnswers.takeFirst();
    }
    void showError(const QString &title, const QString &text) override {
        errors << title + QStringLiteral(": ") + text;
    }
};

template <class T>
T *child(QObject *parent, const char *name) {
    T *w = parent->findChild<T *>(QLatin1String(name));
    if (!w) qWarning("no child %s", name);
    return w;
}

Preset makePreset(qint64 id, const QString &name, const QString &prefix = {}, const QString &prompt = {}) {
    Preset p;
    p.id = id;
    p.name = name;
    p.prefix = prefix;
    p.systemPrompt = prompt;
    return p;
}

// The presets as the bar gets them: the built-ins with ids 1 and 2, then a user preset 3.
QList<Preset> barPresets() {
    QList<Preset> out = builtinPresets();
    out[0].id = 1;
    out[1].id = 2;
    Preset mine = makePreset(3, QStringLiteral("Terse & exact"), QStringLiteral("[terse]"),
                             QStringLiteral("Answer in one line."));
    mine.sampling.topK = 40;
    mine.position = 2;
    out.append(mine);
    return out;
}

bool sameContent(const Preset &a, const Preset &b) {
    return a.name == b.name && a.prefix == b.prefix && a.systemPrompt == b.systemPrompt &&
           a.sampling == b.sampling;
}

void saveGrab(QWidget *w, const QString &fileName) {
    const QString dir = qEnvironmentVariable("ES_SCREENSHOT_DIR");
    const QPixmap pm = w->grab();
    QVERIFY(!pm.isNull());
    if (!dir.isEmpty()) QVERIFY(pm.save(dir + u'/' + fileName));
}

struct ParamsRecorder {
    QList<SamplingParams> emitted;
    explicit ParamsRecorder(SamplingControls *c) {
        QObject::connect(c, &SamplingControls::paramsChanged, c,
                         [this](const SamplingParams &p) { emitted.append(p); });
    }
};

} // namespace

class TestPresetWidgets : public QObject {
    Q_OBJECT

private Q_SLOTS:
    void initTestCase();

    // SamplingControls
    void samplingSetParamsRoundTrip_data();
    void samplingSetParamsRoundTrip();
    void samplingEveryFieldThroughTheEditors();
    void samplingDefaultsShownWhenUnset();
    void samplingSeed();
    void samplingResetAndSetParamsSignals();
    void samplingSummary();

    // PresetListModel
    void listModelUnderTester();

    // PresetBar
    void barClickAppliesAndClears();
    void barAltNumberApplies();
    void barScopedShortcuts();
    void barTabReachesEveryChip();
    void barSetPresetsAndTooltips();
    void barWrapsWhenNarrow();

    // PresetEditorDialog
    void editorListsBuiltins();
    void editorAdd();
    void editorEditSaveRevert();
    void editorDuplicateBuiltin();
    void editorDeleteUserPreset();
    void editorBuiltinsAreLocked();
    void editorReorderPersists();
    void editorUnsavedChangesPrompt();
    void editorExportImportRoundTrip();
    void editorImportErrors_data();
    void editorImportErrors();
    void editorExportError();
    void editorFollowsExternalChanges();
    void editorGrab();
};

void TestPresetWidgets::initTestCase() {
    // Fusion looks the same on every machine; the widgets do not depend on it.
    QApplication::setStyle(QStringLiteral("Fusion"));
}

// ---- SamplingControls -------------------------------------------------------------------------

void TestPresetWidgets::samplingSetParamsRoundTrip_data() {
    QTest::addColumn<SamplingParams>("params");
    QTest::newRow("all unset") << SamplingParams{};
    SamplingParams t;
    t.temperature = 0.3;
    QTest::newRow("temperature only") << t;
    SamplingParams all;
    all.temperature = 0.7;
    all.topP = 0.9;
    all.topK = 40;
    all.minP = 0.05;
    all.repetitionPenalty = 1.1;
    all.presencePenalty = -0.5;
    all.frequencyPenalty = 0.25;
    all.maxTokens = 2048;
    all.seed = 42;
    all.stopStrings = {QStringLiteral("</s>"), QStringLiteral("Observation:")};
    QTest::newRow("every field") << all;
    SamplingParams mins;
    mins.temperature = 0.0;
    mins.topK = 0;
    mins.minP = 0.0;
    mins.maxTokens = 1;
    mins.seed = 0;
    QTest::newRow("range minimums (greedy, off, seed 0)") << mins;
    SamplingParams fine;
    fine.temperature = 0.333333;
    fine.topP = 0.87654321;
    fine.repetitionPenalty = 1.0375;
    QTest::newRow("finer than the editors show") << fine;
    SamplingParams outside;
    outside.temperature = 5.0;
    outside.maxTokens = 1000000;
    outside.presencePenalty = -3.0;
    QTest::newRow("outside the editor ranges") << outside;
    SamplingParams bigSeed;
    bigSeed.seed = std::numeric_limits<quint64>::max();
    QTest::newRow("seed 2^64-1") << bigSeed;
    SamplingParams stops;
    stops.stopStrings = {QStringLiteral("\n\nUser:"), QStringLiteral("a\\b"),
                         QStringLiteral("\t"),        QStringLiteral(" "),
                         QStringLiteral("。"),        QStringLiteral("\\n literally")};
    QTest::newRow("stop strings with breaks, tabs, backslashes, CJK") << stops;
}

void TestPresetWidgets::samplingSetParamsRoundTrip() {
    QFETCH(SamplingParams, params);
    SamplingControls c;
    ParamsRecorder rec(&c);
    c.setParams(params);
    QCOMPARE(c.params(), params);
    QVERIFY(rec.emitted.isEmpty());
    // The check boxes show which fields are set.
    QCOMPARE(child<QCheckBox>(&c, "temperatureCheck")->isChecked(), params.temperature.has_value());
    QCOMPARE(child<QCheckBox>(&c, "topKCheck")->isChecked(), params.topK.has_value());
    QCOMPARE(child<QCheckBox>(&c, "maxTokensCheck")->isChecked(), params.maxTokens.has_value());
    QCOMPARE(child<QCheckBox>(&c, "seedCheck")->isChecked(), params.seed.has_value());
    QCOMPARE(child<QDoubleSpinBox>(&c, "temperatureSpin")->isEnabled(), params.temperature.has_value());
    if (params.seed) QCOMPARE(child<QLineEdit>(&c, "seedEdit")->text(), QString::number(*params.seed));
    // Editing another field keeps the untouched ones exact.
    child<QCheckBox>(&c, "frequencyPenaltyCheck")->click();
    SamplingParams expected = params;
    expected.frequencyPenalty = params.frequencyPenalty ? std::nullopt : std::optional<double>(0.0);
    QCOMPARE(c.params(), expected);
}

void TestPresetWidgets::samplingEveryFieldThroughTheEditors() {
    SamplingControls c;
    c.show();
    QVERIFY(QTest::qWaitForWindowExposed(&c));
    ParamsRecorder rec(&c);
    struct D {
        const char *key;
        double value;
    };
    for (const D &d : {D{"temperature", 1.25}, D{"topP", 0.85}, D{"minP", 0.1}, D{"repetitionPenalty", 1.15},
                       D{"presencePenalty", 0.5}, D{"frequencyPenalty", -0.3}}) {
        auto *check = child<QCheckBox>(&c, (QByteArray(d.key) + "Check").constData());
        auto *spin = child<QDoubleSpinBox>(&c, (QByteArray(d.key) + "Spin").constData());
        QVERIFY(check && spin);
        QVERIFY(!spin->isEnabled());
        check->click();
        QVERIFY(spin->isEnabled());
        spin->setValue(d.value);
    }
    child<QCheckBox>(&c, "topKCheck")->click();
    child<QSpinBox>(&c, "topKSpin")->setValue(50);
    child<QCheckBox>(&c, "maxTokensCheck")->click();
    QSpinBox *maxTokens = child<QSpinBox>(&c, "maxTokensSpin");
    maxTokens->selectAll();
    QTest::keyClicks(maxTokens, QStringLiteral("4096"));
    child<QCheckBox>(&c, "seedCheck")->click();
    QLineEdit *seed = child<QLineEdit>(&c, "seedEdit");
    seed->selectAll();
    QTest::keyClicks(seed, QStringLiteral("1234567890123"));
    QPlainTextEdit *stop = child<QPlainTextEdit>(&c, "stopEdit");
    QTest::keyClicks(stop, QStringLiteral("</s>"));
    QTest::keyClick(stop, Qt::Key_Return);
    QTest::keyClick(stop, Qt::Key_Return); // an empty line is no stop string
    QTest::keyClicks(stop, QStringLiteral("\\n\\nUser:"));

    SamplingParams expected;
    expected.temperature = 1.25;
    expected.topP = 0.85;
    expected.topK = 50;
    expected.minP = 0.1;
    expected.repetitionPenalty = 1.15;
    expected.presencePenalty = 0.5;
    expected.frequencyPenalty = -0.3;
    expected.maxTokens = 4096;
    expected.seed = 1234567890123ULL;
    expected.stopStrings = {QStringLiteral("</s>"), QStringLiteral("\n\nUser:")};
    QCOMPARE(c.params(), expected);
    QVERIFY(!rec.emitted.isEmpty());
    QCOMPARE(rec.emitted.last(), expected);

    // And back to unset, field by field.
    for (const char *key : {"temperature", "topP", "topK", "minP", "repetitionPenalty", "presencePenalty",
                            "frequencyPenalty", "maxTokens", "seed"}) {
        child<QCheckBox>(&c, (QByteArray(key) + "Check").constData())->click();
    }
    stop->clear();
    QCOMPARE(c.params(), SamplingParams{});
    QCOMPARE(rec.emitted.last(), SamplingParams{});
}

void TestPresetWidgets::samplingDefaultsShownWhenUnset() {
    SamplingControls c;
    ParamsRecorder rec(&c);
    SamplingParams defaults;
    defaults.temperature = 0.7;
    defaults.topK = 20;
    defaults.seed = 99;
    c.setModelDefaults(defaults);
    QVERIFY(rec.emitted.isEmpty());
    QCOMPARE(c.params(), SamplingParams{});
    QCOMPARE(c.modelDefaults(), defaults);

    auto *temp = child<QDoubleSpinBox>(&c, "temperatureSpin");
    QVERIFY(!temp->isEnabled());
    QCOMPARE(temp->value(), 0.7);
    QCOMPARE(child<QSpinBox>(&c, "topKSpin")->value(), 20);
    // Fields the model does not set show the engine's fallback.
    QCOMPARE(child<QDoubleSpinBox>(&c, "topPSpin")->value(), 1.0);
    QCOMPARE(child<QSpinBox>(&c, "maxTokensSpin")->value(), 512);
    QCOMPARE(child<QLineEdit>(&c, "seedEdit")->text(), QStringLiteral("99"));
    QVERIFY(child<QCheckBox>(&c, "temperatureCheck")->toolTip().contains(QStringLiteral("0.7")));

    // Checking a field starts it at the default it showed.
    child<QCheckBox>(&c, "temperatureCheck")->click();
    QVERIFY(temp->isEnabled());
    QCOMPARE(c.params().temperature, std::optional<double>(0.7));
    QCOMPARE(rec.emitted.size(), 1);
    temp->setValue(0.95);
    QCOMPARE(c.params().temperature, std::optional<double>(0.95));
    QCOMPARE(rec.emitted.size(), 2);
    // Unchecking unsets it and shows the default again.
    child<QCheckBox>(&c, "temperatureCheck")->click();
    QCOMPARE(c.params().temperature, std::nullopt);
    QCOMPARE(temp->value(), 0.7);
    QVERIFY(!temp->isEnabled());
    QCOMPARE(rec.emitted.size(), 3);

    // New defaults repaint unset fields only.
    c.setParams([] {
        SamplingParams p;
        p.topK = 5;
        return p;
    }());
    SamplingParams other;
    other.temperature = 0.2;
    other.topK = 80;
    c.setModelDefaults(other);
    QCOMPARE(temp->value(), 0.2);
    QCOMPARE(child<QSpinBox>(&c, "topKSpin")->value(), 5);
    QCOMPARE(c.params().topK, std::optional<int>(5));

    c.setMaxTokensLimit(1000);
    QCOMPARE(child<QSpinBox>(&c, "maxTokensSpin")->maximum(), 1000);
}

void TestPresetWidgets::samplingSeed() {
    SamplingControls c;
    ParamsRecorder rec(&c);
    QLineEdit *seed = child<QLineEdit>(&c, "seedEdit");
    QToolButton *roll = child<QToolButton>(&c, "seedRollButton");
    QVERIFY(!seed->isEnabled());
    QVERIFY(!roll->isEnabled());
    QCOMPARE(seed->placeholderText(), QStringLiteral("random"));

    child<QCheckBox>(&c, "seedCheck")->click(); // a fixed seed: starts at a fresh random one
    QVERIFY(c.params().seed.has_value());
    QCOMPARE(seed->text(), QString::number(*c.params().seed));
    QVERIFY(seed->isEnabled() && roll->isEnabled());

    seed->selectAll();
    QTest::keyClicks(seed, QStringLiteral("12345"));
    QCOMPARE(c.params().seed, std::optional<quint64>(12345));
    // Invalid text (empty, above 2^64-1) is not stored; leaving the field shows the stored seed.
    seed->clear();
    emit seed->textEdited(QString());
    QCOMPARE(c.params().seed, std::optional<quint64>(12345));
    emit seed->editingFinished();
    QCOMPARE(seed->text(), QStringLiteral("12345"));
    // Typing stores each valid prefix: 19 nines fit in 64 bits, the 20th digit would not.
    seed->clear();
    QTest::keyClicks(seed, QStringLiteral("99999999999999999999"));
    QCOMPARE(c.params().seed, std::optional<quint64>(9999999999999999999ULL));
    emit seed->editingFinished();
    QCOMPARE(seed->text(), QStringLiteral("9999999999999999999"));
    seed->selectAll();
    QTest::keyClicks(seed, QStringLiteral("12345"));
    // Letters are refused by the validator.
    seed->selectAll();
    QTest::keyClicks(seed, QStringLiteral("x"));
    QCOMPARE(c.params().seed, std::optional<quint64>(12345));

    const qsizetype before = rec.emitted.size();
    roll->click();
    QVERIFY(c.params().seed.has_value());
    QCOMPARE(seed->text(), QString::number(*c.params().seed));
    QVERIFY(rec.emitted.size() >= before); // a new seed (equal only by a 1-in-2^32 chance)

    child<QCheckBox>(&c, "seedCheck")->click(); // back to random
    QCOMPARE(c.params().seed, std::nullopt);
    QVERIFY(seed->text().isEmpty());
}

void TestPresetWidgets::samplingResetAndSetParamsSignals() {
    SamplingControls c;
    ParamsRecorder rec(&c);
    SamplingParams p;
    p.temperature = 0.4;
    p.maxTokens = 100;
    p.stopStrings = {QStringLiteral("END")};
    c.setParams(p);
    QVERIFY(rec.emitted.isEmpty());
    QCOMPARE(child<QPlainTextEdit>(&c, "stopEdit")->toPlainText(), QStringLiteral("END"));

    QPushButton *reset = child<QPushButton>(&c, "resetButton");
    reset->click();
    QCOMPARE(c.params(), SamplingParams{});
    QCOMPARE(rec.emitted.size(), 1);
    QCOMPARE(rec.emitted.first(), SamplingParams{});
    QVERIFY(child<QPlainTextEdit>(&c, "stopEdit")->toPlainText().isEmpty());
    QVERIFY(!child<QCheckBox>(&c, "temperatureCheck")->isChecked());
    reset->click(); // nothing to reset: no signal
    QCOMPARE(rec.emitted.size(), 1);

    c.setColumnCount(1);
    QCOMPARE(c.columnCount(), 1);
    c.setColumnCount(2);
    QCOMPARE(c.columnCount(), 2);
}

void TestPresetWidgets::samplingSummary() {
    QCOMPARE(SamplingControls::summary({}), QStringLiteral("model defaults"));
    SamplingParams p;
    p.temperature = 0.3;
    p.topP = 0.8;
    QCOMPARE(SamplingControls::summary(p), QStringLiteral("temperature 0.3, top-p 0.8"));
    p.seed = 7;
    p.stopStrings = {QStringLiteral("a"), QStringLiteral("b")};
    QVERIFY(SamplingControls::summary(p).contains(QStringLiteral("seed 7")));
    QVERIFY(SamplingControls::summary(p).contains(QStringLiteral("stop strings: 2")));
}

// ---- PresetListModel ----------------------------------------------------------------------------

void TestPresetWidgets::listModelUnderTester() {
    PresetListModel model;
    QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::QtTest);
    QSignalSpy resets(&model, &QAbstractItemModel::modelReset);
    QSignalSpy layouts(&model, &QAbstractItemModel::layoutChanged);

    QList<Preset> builtins = builtinPresets();
    builtins[0].id = 1;
    builtins[1].id = 2;
    const Preset a = makePreset(3, QStringLiteral("A"), QStringLiteral("[a]"));
    const Preset b = makePreset(4, QStringLiteral("B"));
    const Preset c = makePreset(5, QString()); // an empty name shows a placeholder

    model.setPresets({builtins[0], builtins[1], a});
    QCOMPARE(model.rowCount(), 3);
    QCOMPARE(model.ids(), (QList<qint64>{1, 2, 3}));
    model.setPresets({a, builtins[0], builtins[1], b}); // a move and an insert
    QCOMPARE(model.ids(), (QList<qint64>{3, 1, 2, 4}));
    Preset a2 = a;
    a2.name = QStringLiteral("A renamed");
    QSignalSpy changed(&model, &QAbstractItemModel::dataChanged);
    model.setPresets({builtins[1], a2, c}); // removes, a move, a change, an insert
    QCOMPARE(model.ids(), (QList<qint64>{2, 3, 5}));
    QVERIFY(!changed.isEmpty());
    QCOMPARE(model.data(model.index(1)).toString(), QStringLiteral("A renamed"));
    QVERIFY(!model.data(model.index(2)).toString().isEmpty());
    QVERIFY(model.data(model.index(2), PresetListModel::NameRole).toString().isEmpty());

    // Roles.
    const QModelIndex builtin = model.index(0);
    QCOMPARE(model.data(builtin, PresetListModel::IdRole).toLongLong(), 2);
    QCOMPARE(model.data(builtin, PresetListModel::BuiltinRole).toBool(), true);
    QCOMPARE(model.data(builtin, PresetListModel::BuiltinKeyRole).toString(), QStringLiteral("creative"));
    QCOMPARE(model.data(builtin, PresetListModel::PrefixRole).toString(), QStringLiteral("【创意写作模式】"));
    QVERIFY(!model.data(builtin, Qt::DecorationRole).value<QIcon>().isNull());
    QVERIFY(model.data(builtin, Qt::ToolTipRole).toString().contains(QStringLiteral("temperature 0.9")));
    QVERIFY(model.data(model.index(1), Qt::DecorationRole).value<QIcon>().cacheKey() !=
            model.data(builtin, Qt::DecorationRole).value<QIcon>().cacheKey()); // no lock
    QCOMPARE(model.data(model.index(1), PresetListModel::BuiltinRole).toBool(), false);
    QCOMPARE(model.rowOf(5), 2);
    QCOMPARE(model.rowOf(42), -1);
    QCOMPARE(model.preset(7).id, 0);
    QVERIFY(model.roleNames().contains(PresetListModel::PrefixRole));

    model.setPresets({});
    QCOMPARE(model.rowCount(), 0);
    QCOMPARE(resets.size(), 0);
    QCOMPARE(layouts.size(), 0);
}

// ---- PresetBar -------------------------------------------------------------------------------------

void TestPresetWidgets::barClickAppliesAndClears() {
    PresetBar bar;
    QList<Preset> applied;
    int cleared = 0;
    connect(&bar, &PresetBar::presetApplied, this, [&](const Preset &p) { applied.append(p); });
    connect(&bar, &PresetBar::presetCleared, this, [&] { ++cleared; });
    const QList<Preset> presets = barPresets();
    bar.setPresets(presets);
    bar.show();
    QVERIFY(QTest::qWaitForWindowExposed(&bar));

    QToolButton *first = bar.chip(1);
    QToolButton *third = bar.chip(3);
    QVERIFY(first && third);
    QCOMPARE(first->text(), QStringLiteral("技术解析模式"));
    QCOMPARE(third->text(), QStringLiteral("Terse && exact")); // '&' is not a mnemonic

    QTest::mouseClick(first, Qt::LeftButton);
    QCOMPARE(applied.size(), 1);
    QCOMPARE(applied.last(), presets[0]);
    QCOMPARE(applied.last().prefix, QStringLiteral("【技术解析模式】"));
    QVERIFY(first->isChecked());
    QCOMPARE(bar.activePresetId(), std::optional<qint64>(1));
    QCOMPARE(bar.activePreset(), std::optional<Preset>(presets[0]));

    QTest::mouseClick(first, Qt::LeftButton); // the active chip again: cleared
    QCOMPARE(cleared, 1);
    QCOMPARE(applied.size(), 1);
    QVERIFY(!first->isChecked());
    QCOMPARE(bar.activePresetId(), std::nullopt);

    QTest::mouseClick(first, Qt::LeftButton);
    QTest::mouseClick(third, Qt::LeftButton); // switching: one apply, no clear, one chip checked
    QCOMPARE(applied.size(), 3);
    QCOMPARE(applied.last(), presets[2]);
    QCOMPARE(cleared, 1);
    QVERIFY(!first->isChecked());
    QVERIFY(third->isChecked());

    QSignalSpy manage(&bar, &PresetBar::managePresetsRequested);
    QTest::mouseClick(bar.manageButton(), Qt::LeftButton);
    QCOMPARE(manage.size(), 1);
}

void TestPresetWidgets::barAltNumberApplies() {
    PresetBar bar;
    QList<Preset> applied;
    int cleared = 0;
    connect(&bar, &PresetBar::presetApplied, this, [&](const Preset &p) { applied.append(p); });
    connect(&bar, &PresetBar::presetCleared, this, [&] { ++cleared; });
    const QList<Preset> presets = barPresets();
    bar.setPresets(presets);
    bar.show();
    QApplication::setActiveWindow(&bar);
    QVERIFY(QTest::qWaitForWindowActive(&bar));

    QTest::keyClick(&bar, Qt::Key_2, Qt::AltModifier);
    QCOMPARE(applied.size(), 1);
    QCOMPARE(applied.last(), presets[1]);
    QCOMPARE(bar.activePresetId(), std::optional<qint64>(2));
    QVERIFY(bar.chip(2)->isChecked());
    QTest::keyClick(&bar, Qt::Key_3, Qt::AltModifier);
    QCOMPARE(applied.last(), presets[2]);
    QTest::keyClick(&bar, Qt::Key_3, Qt::AltModifier); // like a click on the active chip
    QCOMPARE(cleared, 1);
    QTest::keyClick(&bar, Qt::Key_4, Qt::AltModifier); // no fourth preset
    QCOMPARE(applied.size(), 2);
}

void TestPresetWidgets::barScopedShortcuts() {
    // Two panes in one window, each with a bar scoped to its pane: Alt+1 acts on the pane that
    // has the focus only.
    QWidget window;
    auto *layout = new QVBoxLayout(&window);
    QWidget *panes[2];
    PresetBar *bars[2];
    QLineEdit *edits[2];
    QList<qint64> applied[2];
    for (int i = 0; i < 2; ++i) {
        panes[i] = new QWidget(&window);
        auto *paneLayout = new QVBoxLayout(panes[i]);
        bars[i] = new PresetBar(panes[i]);
        bars[i]->setShortcutScope(panes[i]);
        edits[i] = new QLineEdit(panes[i]);
        paneLayout->addWidget(bars[i]);
        paneLayout->addWidget(edits[i]);
        layout->addWidget(panes[i]);
        bars[i]->setPresets(barPresets());
        connect(bars[i], &PresetBar::presetApplied, this,
                [&applied, i](const Preset &p) { applied[i].append(p.id); });
    }
    window.show();
    QApplication::setActiveWindow(&window);
    QVERIFY(QTest::qWaitForWindowActive(&window));
    edits[1]->setFocus();
    QTRY_VERIFY(edits[1]->hasFocus());
    QTest::keyClick(edits[1], Qt::Key_1, Qt::AltModifier);
    QCOMPARE(applied[0], QList<qint64>{});
    QCOMPARE(applied[1], QList<qint64>{1});
    edits[0]->setFocus();
    QTRY_VERIFY(edits[0]->hasFocus());
    QTest::keyClick(edits[0], Qt::Key_2, Qt::AltModifier);
    QCOMPARE(applied[0], QList<qint64>{2});
    QCOMPARE(applied[1], QList<qint64>{1});
}

void TestPresetWidgets::barTabReachesEveryChip() {
    PresetBar bar;
    bar.setPresets(barPresets());
    bar.show();
    QApplication::setActiveWindow(&bar);
    QVERIFY(QTest::qWaitForWindowActive(&bar));
    for (qint64 id : {1, 2, 3}) QVERIFY(bar.chip(id)->focusPolicy() & Qt::TabFocus);
    bar.chip(1)->setFocus();
    QTRY_COMPARE(QApplication::focusWidget(), static_cast<QWidget *>(bar.chip(1)));
    QTest::keyClick(QApplication::focusWidget(), Qt::Key_Tab);
    QCOMPARE(QApplication::focusWidget(), static_cast<QWidget *>(bar.chip(2)));
    QTest::keyClick(QApplication::focusWidget(), Qt::Key_Tab);
    QCOMPARE(QApplication::focusWidget(), static_cast<QWidget *>(bar.chip(3)));
    QTest::keyClick(QApplication::focusWidget(), Qt::Key_Tab);
    QCOMPARE(QApplication::focusWidget(), static_cast<QWidget *>(bar.manageButton()));

    // Space on a focused chip applies it.
    QSignalSpy applied(&bar, &PresetBar::presetApplied);
    bar.chip(2)->setFocus();
    QTRY_VERIFY(bar.chip(2)->hasFocus());
    QTest::keyClick(bar.chip(2), Qt::Key_Space);
    QCOMPARE(applied.size(), 1);
    QCOMPARE(bar.activePresetId(), std::optional<qint64>(2));
    saveGrab(&bar, QStringLiteral("preset_bar.png"));
}

void TestPresetWidgets::barSetPresetsAndTooltips() {
    PresetBar bar;
    QSignalSpy applied(&bar, &PresetBar::presetApplied);
    QSignalSpy cleared(&bar, &PresetBar::presetCleared);
    QList<Preset> presets = barPresets();
    bar.setPresets(presets);

    // Programmatic changes do not emit.
    bar.setActivePreset(2);
    QVERIFY(bar.chip(2)->isChecked());
    bar.setActivePreset(42); // not listed: none active
    QCOMPARE(bar.activePresetId(), std::nullopt);
    bar.setActivePreset(3);
    presets[2].name = QStringLiteral("Renamed");
    bar.setPresets(presets); // still listed: stays active, new contents
    QCOMPARE(bar.activePresetId(), std::optional<qint64>(3));
    QCOMPARE(bar.activePreset()->name, QStringLiteral("Renamed"));
    QVERIFY(bar.chip(3)->isChecked());
    presets.removeLast();
    bar.setPresets(presets); // gone: none active
    QCOMPARE(bar.activePresetId(), std::nullopt);
    QCOMPARE(bar.chip(3), nullptr);
    QCOMPARE(applied.size(), 0);
    QCOMPARE(cleared.size(), 0);

    const QString tip = bar.chip(1)->toolTip();
    QVERIFY2(tip.contains(QStringLiteral("【技术解析模式】")), qPrintable(tip));
    QVERIFY2(tip.contains(presets[0].systemPrompt.left(10)), qPrintable(tip));
    QVERIFY2(tip.contains(QStringLiteral("temperature 0.3")), qPrintable(tip));
    QVERIFY2(tip.contains(QStringLiteral("Alt+1")), qPrintable(tip));

    bar.setPresets({});
    QCOMPARE(bar.presets().size(), 0);
    QVERIFY(bar.manageButton()->isVisibleTo(&bar));
}

void TestPresetWidgets::barWrapsWhenNarrow() {
    QList<Preset> many;
    for (int i = 0; i < 12; ++i)
        many.append(makePreset(i + 1, QStringLiteral("预设 Preset number %1").arg(i + 1)));
    PresetBar bar;
    bar.setPresets(many);
    QVERIFY(bar.hasHeightForWidth());
    bar.resize(400, bar.heightForWidth(400));
    bar.show();
    QApplication::setActiveWindow(&bar);
    QVERIFY(QTest::qWaitForWindowActive(&bar));
    // The bar does not ask for the width of all its chips: the composer decides its width, and
    // the chips take more rows.
    QVERIFY(bar.minimumSizeHint().width() < 400);
    QVERIFY(bar.heightForWidth(400) >= 2 * bar.chip(1)->sizeHint().height());
    // Every chip and "Manage presets…" whole inside the bar, at its own size, none overlapping.
    QList<QRect> seen;
    for (int i = 1; i <= 12; ++i) {
        QToolButton *chip = bar.chip(i);
        QVERIFY(chip->isVisible());
        QCOMPARE(chip->size(), chip->sizeHint());
        QVERIFY2(bar.rect().contains(chip->geometry()), qPrintable(QString::number(i)));
        for (const QRect &r : std::as_const(seen)) QVERIFY(!r.intersects(chip->geometry()));
        seen << chip->geometry();
    }
    QVERIFY(bar.rect().contains(bar.manageButton()->geometry()));
    // Tab still walks the chips in order.
    bar.chip(11)->setFocus();
    QTRY_VERIFY(bar.chip(11)->hasFocus());
    QTest::keyClick(bar.chip(11), Qt::Key_Tab);
    QTRY_VERIFY(bar.chip(12)->hasFocus());
    saveGrab(&bar, QStringLiteral("preset_bar_narrow.png"));
}

// ---- PresetEditorDialog -------------------------------------------------------------------------

void TestPresetWidgets::editorListsBuiltins() {
    ChatStore store;
    QVERIFY(store.open(QStringLiteral(":memory:")).ok());
    TestEditor dialog(&store);
    QAbstractItemModelTester tester(dialog.model(), QAbstractItemModelTester::FailureReportingMode::QtTest);
    QCOMPARE(dialog.model()->rowCount(), 2);
    QCOMPARE(dialog.currentPresetId(), std::optional<qint64>(store.presets().first().id));
    QCOMPARE(child<QLineEdit>(&dialog, "nameEdit")->text(), QStringLiteral("技术解析模式"));
    QCOMPARE(child<QListView>(&dialog, "presetList")->currentIndex().row(), 0);
    QVERIFY(!dialog.hasUnsavedChanges());
}

void TestPresetWidgets::editorAdd() {
    ChatStore store;
    QVERIFY(store.open(QStringLiteral(":memory:")).ok());
    TestEditor dialog(&store);
    QAbstractItemModelTester tester(dialog.model(), QAbstractItemModelTester::FailureReportingMode::QtTest);
    QSignalSpy changed(&dialog, &PresetEditorDialog::presetsChanged);

    child<QPushButton>(&dialog, "addButton")->click();
    QCOMPARE(store.presets().size(), 3);
    const Preset added = store.presets().last();
    QVERIFY(!added.isBuiltin());
    QCOMPARE(added.name, QStringLiteral("New preset"));
    QCOMPARE(dialog.currentPresetId(), std::optional<qint64>(added.id));
    QCOMPARE(child<QListView>(&dialog, "presetList")->currentIndex().row(), 2);
    QCOMPARE(child<QLineEdit>(&dialog, "nameEdit")->text(), QStringLiteral("New preset"));
    QVERIFY(!child<QLineEdit>(&dialog, "nameEdit")->isReadOnly());
    QCOMPARE(changed.size(), 1);

    dialog.addPreset(); // a second one gets a different name
    QCOMPARE(store.presets().last().name, QStringLiteral("New preset 2"));
    QCOMPARE(changed.size(), 2);
}

void TestPresetWidgets::editorEditSaveRevert() {
    ChatStore store;
    QVERIFY(store.open(QStringLiteral(":memory:")).ok());
    TestEditor dialog(&store);
    QAbstractItemModelTester tester(dialog.model(), QAbstractItemModelTester::FailureReportingMode::QtTest);
    dialog.show();
    QVERIFY(QTest::qWaitForWindowExposed(&dialog));
    dialog.addPreset();
    const qint64 id = *dialog.currentPresetId();
    QSignalSpy changed(&dialog, &PresetEditorDialog::presetsChanged);

    auto *name = child<QLineEdit>(&dialog, "nameEdit");
    auto *prefix = child<QLineEdit>(&dialog, "prefixEdit");
    auto *prompt = child<QPlainTextEdit>(&dialog, "systemPromptEdit");
    auto *save = child<QPushButton>(&dialog, "saveButton");
    auto *revert = child<QPushButton>(&dialog, "revertButton");
    QVERIFY(!save->isEnabled());
    QVERIFY(!revert->isEnabled());

    name->selectAll();
    QTest::keyClicks(name, QStringLiteral("Review")); // QTest types Latin-1 only; CJK below by setText
    QCOMPARE(name->text(), QStringLiteral("Review"));
    name->setText(QStringLiteral("代码审查"));
    prefix->setText(QStringLiteral("【代码审查】"));
    prompt->setPlainText(QStringLiteral("Review the code.\nPoint out bugs first."));
    child<QCheckBox>(&dialog, "temperatureCheck")->click();
    child<QDoubleSpinBox>(&dialog, "temperatureSpin")->setValue(0.2);
    child<QCheckBox>(&dialog, "maxTokensCheck")->click();
    child<QSpinBox>(&dialog, "maxTokensSpin")->setValue(1024);
    QVERIFY(dialog.hasUnsavedChanges());
    QVERIFY(dialog.isWindowModified());
    QVERIFY(save->isEnabled());
    QVERIFY(revert->isEnabled());
    QCOMPARE(store.preset(id)->name, QStringLiteral("New preset")); // not yet saved

    // An empty name cannot be saved.
    const QString typed = name->text();
    name->setText(QStringLiteral("   "));
    QVERIFY(!save->isEnabled());
    name->setText(typed);

    save->click();
    const Preset stored = *store.preset(id);
    QCOMPARE(stored.name, QStringLiteral("代码审查"));
    QCOMPARE(stored.prefix, QStringLiteral("【代码审查】"));
    QCOMPARE(stored.systemPrompt, QStringLiteral("Review the code.\nPoint out bugs first."));
    QCOMPARE(stored.sampling.temperature, std::optional<double>(0.2));
    QCOMPARE(stored.sampling.maxTokens, std::optional<int>(1024));
    QCOMPARE(stored.sampling.topP, std::nullopt);
    QVERIFY(!dialog.hasUnsavedChanges());
    QVERIFY(!save->isEnabled());
    QCOMPARE(changed.size(), 1);
    QCOMPARE(dialog.model()->data(dialog.model()->index(2)).toString(), QStringLiteral("代码审查"));
    QVERIFY(dialog.errors.isEmpty());

    // Revert puts the stored values back.
    name->setText(QStringLiteral("Something else"));
    prompt->setPlainText(QString());
    child<QCheckBox>(&dialog, "temperatureCheck")->click();
    QVERIFY(dialog.hasUnsavedChanges());
    revert->click();
    QVERIFY(!dialog.hasUnsavedChanges());
    QCOMPARE(name->text(), QStringLiteral("代码审查"));
    QCOMPARE(prompt->toPlainText(), stored.systemPrompt);
    QCOMPARE(child<QDoubleSpinBox>(&dialog, "temperatureSpin")->value(), 0.2);
    QVERIFY(child<QCheckBox>(&dialog, "temperatureCheck")->isChecked());
    QCOMPARE(*store.preset(id), stored);
    QCOMPARE(changed.size(), 1);

    // Surrounding spaces in the name are not saved.
    name->setText(QStringLiteral("  padded  "));
    QVERIFY(dialog.save());
    QCOMPARE(store.preset(id)->name, QStringLiteral("padded"));
    QCOMPARE(name->text(), QStringLiteral("padded"));
    QVERIFY(!dialog.hasUnsavedChanges());
}

void TestPresetWidgets::editorDuplicateBuiltin() {
    ChatStore store;
    QVERIFY(store.open(QStringLiteral(":memory:")).ok());
    TestEditor dialog(&store);
    QAbstractItemModelTester tester(dialog.model(), QAbstractItemModelTester::FailureReportingMode::QtTest);
    QSignalSpy changed(&dialog, &PresetEditorDialog::presetsChanged);
    const Preset technical = store.presets().at(0);
    QVERIFY(technical.isBuiltin());
    QCOMPARE(dialog.currentPresetId(), std::optional<qint64>(technical.id));

    child<QPushButton>(&dialog, "duplicateButton")->click();
    const QList<Preset> after = store.presets();
    QCOMPARE(after.size(), 3);
    const Preset copy = after.at(1); // placed right after its original
    QVERIFY(!copy.isBuiltin());
    QCOMPARE(copy.name, QStringLiteral("技术解析模式 (copy)"));
    QCOMPARE(copy.prefix, technical.prefix);
    QCOMPARE(copy.systemPrompt, technical.systemPrompt);
    QCOMPARE(copy.sampling, technical.sampling);
    QCOMPARE(after.at(0).id, technical.id);
    QCOMPARE(after.at(2).builtinKey, QStringLiteral("creative"));
    QCOMPARE(dialog.currentPresetId(), std::optional<qint64>(copy.id));
    QCOMPARE(child<QListView>(&dialog, "presetList")->currentIndex().row(), 1);
    QVERIFY(!child<QLineEdit>(&dialog, "nameEdit")->isReadOnly()); // the copy is editable
    QVERIFY(child<QWidget>(&dialog, "samplingControls")->isEnabled());
    QCOMPARE(changed.size(), 1);
    QVERIFY(dialog.errors.isEmpty());
}

void TestPresetWidgets::editorDeleteUserPreset() {
    ChatStore store;
    QVERIFY(store.open(QStringLiteral(":memory:")).ok());
    Preset a = makePreset(0, QStringLiteral("A"));
    Preset b = makePreset(0, QStringLiteral("B"));
    const qint64 idA = *store.createPreset(a);
    const qint64 idB = *store.createPreset(b);
    TestEditor dialog(&store);
    QAbstractItemModelTester tester(dialog.model(), QAbstractItemModelTester::FailureReportingMode::QtTest);
    QSignalSpy changed(&dialog, &PresetEditorDialog::presetsChanged);
    dialog.selectPreset(idA);
    auto *del = child<QPushButton>(&dialog, "deleteButton");
    QVERIFY(del->isEnabled());

    dialog.confirmAnswer = false; // the user says no
    del->click();
    QCOMPARE(dialog.confirmCalls, 1);
    QCOMPARE(store.presets().size(), 4);
    QCOMPARE(changed.size(), 0);

    dialog.confirmAnswer = true;
    del->click();
    QCOMPARE(dialog.confirmCalls, 2);
    QCOMPARE(store.presets().size(), 3);
    QVERIFY(!store.preset(idA));
    QCOMPARE(changed.size(), 1);
    // The neighbour that took its place is current.
    QCOMPARE(dialog.currentPresetId(), std::optional<qint64>(idB));
    QCOMPARE(child<QLineEdit>(&dialog, "nameEdit")->text(), QStringLiteral("B"));

    del->click(); // B, the last row: the previous row becomes current
    QCOMPARE(store.presets().size(), 2);
    QCOMPARE(dialog.currentPresetId(), std::optional<qint64>(store.presets().last().id));
    QVERIFY(!del->isEnabled()); // a built-in now
    QVERIFY(dialog.errors.isEmpty());
}

void TestPresetWidgets::editorBuiltinsAreLocked() {
    ChatStore store;
    QVERIFY(store.open(QStringLiteral(":memory:")).ok());
    TestEditor dialog(&store);
    QAbstractItemModelTester tester(dialog.model(), QAbstractItemModelTester::FailureReportingMode::QtTest);
    dialog.show();
    QVERIFY(QTest::qWaitForWindowExposed(&dialog));
    for (const Preset &builtin : store.presets()) {
        dialog.selectPreset(builtin.id);
        QCOMPARE(dialog.currentPresetId(), std::optional<qint64>(builtin.id));
        QVERIFY(!child<QPushButton>(&dialog, "deleteButton")->isEnabled());
        QVERIFY(child<QPushButton>(&dialog, "duplicateButton")->isEnabled());
        QVERIFY(child<QLineEdit>(&dialog, "nameEdit")->isReadOnly());
        QVERIFY(child<QLineEdit>(&dialog, "prefixEdit")->isReadOnly());
        QVERIFY(child<QPlainTextEdit>(&dialog, "systemPromptEdit")->isReadOnly());
        QVERIFY(!child<QWidget>(&dialog, "samplingControls")->isEnabled());
        QVERIFY(!child<QCheckBox>(&dialog, "temperatureCheck")->isEnabled());
        QVERIFY(!child<QPushButton>(&dialog, "saveButton")->isEnabled());
        QVERIFY(child<QWidget>(&dialog, "lockBanner")->isVisible());
        QCOMPARE(child<QLineEdit>(&dialog, "nameEdit")->text(), builtin.name);

        // Typing into a read-only field changes nothing; calling the slots directly neither.
        QTest::keyClicks(child<QLineEdit>(&dialog, "nameEdit"), QStringLiteral("xyz"));
        QVERIFY(!dialog.hasUnsavedChanges());
        dialog.confirmAnswer = true;
        dialog.deletePreset();
        QCOMPARE(dialog.confirmCalls, 0);
        QVERIFY(dialog.save());
        QCOMPARE(*store.preset(builtin.id), builtin);
    }
    QCOMPARE(store.presets().size(), 2);

    // A user preset unlocks the form.
    dialog.addPreset();
    QVERIFY(!child<QWidget>(&dialog, "lockBanner")->isVisible());
    QVERIFY(child<QWidget>(&dialog, "samplingControls")->isEnabled());
    QVERIFY(child<QPushButton>(&dialog, "deleteButton")->isEnabled());
}

void TestPresetWidgets::editorReorderPersists() {
    ChatStore store;
    QVERIFY(store.open(QStringLiteral(":memory:")).ok());
    const qint64 mine = *store.createPreset(makePreset(0, QStringLiteral("Mine")));
    const QList<Preset> initial = store.presets();
    const qint64 technical = initial.at(0).id, creative = initial.at(1).id;
    TestEditor dialog(&store);
    QAbstractItemModelTester tester(dialog.model(), QAbstractItemModelTester::FailureReportingMode::QtTest);
    QSignalSpy changed(&dialog, &PresetEditorDialog::presetsChanged);
    auto ids = [&store] {
        QList<qint64> out;
        for (const Preset &p : store.presets()) out.append(p.id);
        return out;
    };
    auto *up = child<QToolButton>(&dialog, "moveUpButton");
    auto *down = child<QToolButton>(&dialog, "moveDownButton");
    auto *list = child<QListView>(&dialog, "presetList");

    dialog.selectPreset(mine);
    QVERIFY(up->isEnabled());
    QVERIFY(!down->isEnabled());
    up->click();
    QCOMPARE(ids(), (QList<qint64>{technical, mine, creative}));
    up->click();
    QCOMPARE(ids(), (QList<qint64>{mine, technical, creative}));
    QVERIFY(!up->isEnabled());
    QCOMPARE(list->currentIndex().row(), 0);
    QCOMPARE(dialog.currentPresetId(), std::optional<qint64>(mine));
    QCOMPARE(dialog.model()->ids(), ids());
    QCOMPARE(changed.size(), 2);

    // Built-ins move too.
    dialog.selectPreset(creative);
    up->click();
    QCOMPARE(ids(), (QList<qint64>{mine, creative, technical}));
    down->click();
    down->click(); // already last: nothing
    QCOMPARE(ids(), (QList<qint64>{mine, technical, creative}));
    QCOMPARE(changed.size(), 4);

    // Unsaved edits survive a move.
    dialog.selectPreset(mine);
    child<QLineEdit>(&dialog, "nameEdit")->setText(QStringLiteral("Mine, edited"));
    down->click();
    QCOMPARE(ids(), (QList<qint64>{technical, mine, creative}));
    QVERIFY(dialog.hasUnsavedChanges());
    QCOMPARE(child<QLineEdit>(&dialog, "nameEdit")->text(), QStringLiteral("Mine, edited"));
    QCOMPARE(dialog.unsavedCalls, 0);
    QVERIFY(dialog.errors.isEmpty());
}

void TestPresetWidgets::editorUnsavedChangesPrompt() {
    ChatStore store;
    QVERIFY(store.open(QStringLiteral(":memory:")).ok());
    const qint64 mine = *store.createPreset(makePreset(0, QStringLiteral("Mine")));
    TestEditor dialog(&store);
    QAbstractItemModelTester tester(dialog.model(), QAbstractItemModelTester::FailureReportingMode::QtTest);
    dialog.show();
    QVERIFY(QTest::qWaitForWindowExposed(&dialog));
    auto *list = child<QListView>(&dialog, "presetList");
    auto *name = child<QLineEdit>(&dialog, "nameEdit");
    const qint64 technical = store.presets().at(0).id;

    dialog.selectPreset(mine);
    name->setText(QStringLiteral("Mine 2"));

    // Cancel: the list goes back to the edited preset, the edits stay.
    dialog.unsavedAnswers = {TestEditor::UnsavedChoice::Cancel};
    list->setCurrentIndex(dialog.model()->index(0));
    QCOMPARE(dialog.unsavedCalls, 1);
    QCOMPARE(dialog.currentPresetId(), std::optional<qint64>(mine));
    QCOMPARE(list->currentIndex().row(), 2);
    QCOMPARE(name->text(), QStringLiteral("Mine 2"));

    // Save: saved, then moved on.
    dialog.unsavedAnswers = {TestEditor::UnsavedChoice::Save};
    list->setCurrentIndex(dialog.model()->index(0));
    QCOMPARE(dialog.unsavedCalls, 2);
    QCOMPARE(store.preset(mine)->name, QStringLiteral("Mine 2"));
    QCOMPARE(dialog.currentPresetId(), std::optional<qint64>(technical));
    QCOMPARE(list->currentIndex().row(), 0);

    // Discard: not saved, moved on.
    dialog.selectPreset(mine);
    name->setText(QStringLiteral("Mine 3"));
    dialog.unsavedAnswers = {TestEditor::UnsavedChoice::Discard};
    dialog.selectPreset(technical);
    QCOMPARE(dialog.unsavedCalls, 3);
    QCOMPARE(store.preset(mine)->name, QStringLiteral("Mine 2"));
    QCOMPARE(dialog.currentPresetId(), std::optional<qint64>(technical));

    // Closing asks too; Cancel keeps the dialog open.
    dialog.selectPreset(mine);
    name->setText(QStringLiteral("Mine 4"));
    dialog.unsavedAnswers = {TestEditor::UnsavedChoice::Cancel};
    dialog.reject();
    QVERIFY(dialog.isVisible());
    dialog.unsavedAnswers = {TestEditor::UnsavedChoice::Save};
    dialog.reject();
    QVERIFY(!dialog.isVisible());
    QCOMPARE(store.preset(mine)->name, QStringLiteral("Mine 4"));
    QVERIFY(dialog.errors.isEmpty());
}

void TestPresetWidgets::editorExportImportRoundTrip() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    ChatStore store;
    QVERIFY(store.open(QStringLiteral(":memory:")).ok());
    TestEditor dialog(&store);
    QAbstractItemModelTester tester(dialog.model(), QAbstractItemModelTester::FailureReportingMode::QtTest);

    dialog.addPreset();
    child<QLineEdit>(&dialog, "nameEdit")->setText(QStringLiteral("Reviewer"));
    child<QLineEdit>(&dialog, "prefixEdit")->setText(QStringLiteral("【审查】"));
    child<QPlainTextEdit>(&dialog, "systemPromptEdit")->setPlainText(QStringLiteral("Be strict."));
    child<QCheckBox>(&dialog, "topKCheck")->click();
    child<QSpinBox>(&dialog, "topKSpin")->setValue(7);
    child<QCheckBox>(&dialog, "seedCheck")->click();
    child<QLineEdit>(&dialog, "seedEdit")->setText(QStringLiteral("31337"));
    emit child<QLineEdit>(&dialog, "seedEdit")->textEdited(QStringLiteral("31337"));
    child<QPlainTextEdit>(&dialog, "stopEdit")->setPlainText(QStringLiteral("END\n\\n\\n"));
    QVERIFY(dialog.save());
    const Preset original = store.presets().last();
    QCOMPARE(original.sampling.seed, std::optional<quint64>(31337));
    QCOMPARE(original.sampling.stopStrings, (QStringList{QStringLiteral("END"), QStringLiteral("\n\n")}));

    // Export: every preset, in order, written whole.
    dialog.exportPath = dir.filePath(QStringLiteral("presets.json"));
    child<QPushButton>(&dialog, "exportButton")->click();
    QVERIFY2(dialog.errors.isEmpty(), qPrintable(dialog.errors.join(u'\n')));
    QFile file(dialog.exportPath);
    QVERIFY(file.open(QIODevice::ReadOnly));
    QString why;
    const std::optional<QList<Preset>> exported = parsePresetsJson(file.readAll(), &why);
    QVERIFY2(exported, qPrintable(why));
    QCOMPARE(exported->size(), 3);
    QVERIFY(sameContent(exported->at(2), original));
    QVERIFY(child<QLabel>(&dialog, "statusLabel")->text().contains(QStringLiteral("presets.json")));
    // No temporary files left beside it.
    QCOMPARE(QDir(dir.path()).entryList(QDir::Files), QStringList{QStringLiteral("presets.json")});

    // Delete, then import: it comes back (the built-ins in the file are skipped as duplicates).
    dialog.selectPreset(original.id);
    dialog.deletePreset();
    QCOMPARE(store.presets().size(), 2);
    QSignalSpy changed(&dialog, &PresetEditorDialog::presetsChanged);
    dialog.importPath = dialog.exportPath;
    child<QPushButton>(&dialog, "importButton")->click();
    QVERIFY2(dialog.errors.isEmpty(), qPrintable(dialog.errors.join(u'\n')));
    const QList<Preset> after = store.presets();
    QCOMPARE(after.size(), 3);
    QVERIFY(sameContent(after.last(), original));
    QCOMPARE(dialog.currentPresetId(), std::optional<qint64>(after.last().id));
    QCOMPARE(changed.size(), 1);
    const QString status = child<QLabel>(&dialog, "statusLabel")->text();
    QVERIFY2(status.contains(QStringLiteral("1 added")) && status.contains(QStringLiteral("presets.json")),
             qPrintable(status));

    // Importing the same file again adds nothing.
    child<QPushButton>(&dialog, "importButton")->click();
    QCOMPARE(store.presets().size(), 3);
    QCOMPARE(changed.size(), 1);
    QVERIFY2(child<QLabel>(&dialog, "statusLabel")->text().contains(QStringLiteral("already here")),
             qPrintable(child<QLabel>(&dialog, "statusLabel")->text()));

    // A cancelled file dialog does nothing.
    dialog.importPath.clear();
    dialog.exportPath.clear();
    child<QPushButton>(&dialog, "importButton")->click();
    child<QPushButton>(&dialog, "exportButton")->click();
    QVERIFY(dialog.errors.isEmpty());
}

void TestPresetWidgets::editorImportErrors_data() {
    QTest::addColumn<QByteArray>("content"); // empty: the file does not exist
    QTest::addColumn<QString>("expected");
    QTest::newRow("missing file") << QByteArray() << QStringLiteral("Could not read");
    QTest::newRow("not JSON") << QByteArray("{ oops") << QStringLiteral("Not a JSON file");
    QTest::newRow("wrong format") << QByteArray(
                                         R"({"format": "something.else", "version": 1, "presets": []})")
                                  << QStringLiteral("\"format\"");
    QTest::newRow("newer version")
        << QByteArray(R"({"format": "expertscope.presets", "version": 99, "presets": []})")
        << QStringLiteral("newer ExpertScope");
    QTest::newRow("preset without a name")
        << QByteArray(R"({"format": "expertscope.presets", "version": 1, "presets": [{"prefix": "x"}]})")
        << QStringLiteral("Preset 1: \"name\"");
}

void TestPresetWidgets::editorImportErrors() {
    QFETCH(QByteArray, content);
    QFETCH(QString, expected);
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const QString path = dir.filePath(QStringLiteral("broken-presets.json"));
    if (!content.isEmpty()) {
        QFile f(path);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write(content);
    }
    ChatStore store;
    QVERIFY(store.open(QStringLiteral(":memory:")).ok());
    TestEditor dialog(&store);
    QSignalSpy changed(&dialog, &PresetEditorDialog::presetsChanged);
    dialog.importPath = path;
    dialog.importPresets();
    QCOMPARE(dialog.errors.size(), 1);
    const QString error = dialog.errors.first();
    QVERIFY2(error.contains(QStringLiteral("broken-presets.json")), qPrintable(error));
    QVERIFY2(error.contains(expected), qPrintable(error));
    QCOMPARE(store.presets().size(), 2);
    QCOMPARE(changed.size(), 0);
}

void TestPresetWidgets::editorExportError() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    ChatStore store;
    QVERIFY(store.open(QStringLiteral(":memory:")).ok());
    TestEditor dialog(&store);
    dialog.exportPath = dir.filePath(QStringLiteral("no/such/folder/presets.json"));
    dialog.exportPresets();
    QCOMPARE(dialog.errors.size(), 1);
    QVERIFY2(dialog.errors.first().contains(QStringLiteral("presets.json")),
             qPrintable(dialog.errors.first()));
    QVERIFY(!QFile::exists(dialog.exportPath));
}

void TestPresetWidgets::editorFollowsExternalChanges() {
    ChatStore store;
    QVERIFY(store.open(QStringLiteral(":memory:")).ok());
    const qint64 mine = *store.createPreset(makePreset(0, QStringLiteral("Mine")));
    TestEditor dialog(&store);
    QAbstractItemModelTester tester(dialog.model(), QAbstractItemModelTester::FailureReportingMode::QtTest);
    QCOMPARE(dialog.model()->rowCount(), 3);
    // Another part of the app adds one: it shows up, the current preset stays.
    dialog.selectPreset(mine);
    child<QLineEdit>(&dialog, "nameEdit")->setText(QStringLiteral("Mine, unsaved"));
    const qint64 other = *store.createPreset(makePreset(0, QStringLiteral("Other")));
    QCOMPARE(dialog.model()->rowCount(), 4);
    QCOMPARE(dialog.model()->rowOf(other), 3);
    QCOMPARE(dialog.currentPresetId(), std::optional<qint64>(mine));
    QCOMPARE(child<QLineEdit>(&dialog, "nameEdit")->text(), QStringLiteral("Mine, unsaved"));
    QVERIFY(dialog.hasUnsavedChanges());
}

void TestPresetWidgets::editorGrab() {
    ChatStore store;
    QVERIFY(store.open(QStringLiteral(":memory:")).ok());
    Preset mine = makePreset(0, QStringLiteral("Code review"), QStringLiteral("【代码审查】"),
                             QStringLiteral("You are a strict reviewer. List bugs first, then style."));
    mine.sampling.temperature = 0.2;
    mine.sampling.maxTokens = 1024;
    mine.sampling.stopStrings = {QStringLiteral("</review>")};
    const qint64 id = *store.createPreset(mine);
    TestEditor dialog(&store);
    SamplingParams defaults;
    defaults.temperature = 0.8;
    defaults.topP = 0.8;
    defaults.repetitionPenalty = 1.0;
    dialog.setModelDefaults(defaults);
    dialog.show();
    QVERIFY(QTest::qWaitForWindowExposed(&dialog));
    dialog.selectPreset(id);
    saveGrab(&dialog, QStringLiteral("preset_editor_user.png"));
    dialog.selectPreset(store.presets().first().id);
    saveGrab(&dialog, QStringLiteral("preset_editor_builtin.png"));
}

QTEST_MAIN(TestPresetWidgets)
#include "test_preset_widgets.moc"
