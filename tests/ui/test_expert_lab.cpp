// The expert lab (offscreen, the real engine on the tiny MoE model, CPU): the dialog checks an
// intervention by the engine's rules as it is typed; a conversation's intervention shows as a
// banner, routes its next reply (the stored trace never holds a disabled expert), is stored with
// the reply and named in its header and its report; a right click on the routing heatmap opens the
// lab with that expert; the Compare page names the change and diffs the two replies' words.
// Routing insight: a left click on an expert's cell marks, in the chat, the reply tokens routed to
// it in that layer (again, or Esc, clears it); the routing page lists the expert pairs a layer
// chooses together; the token lens shows the router's margin.
// ES_SCREENSHOT_DIR=<dir> saves the lab, the chat with its banner, the Compare page, the
// highlighted tokens and the pairs there.
#include "chat_pane.h"
#include "chat_store.h"
#include "compare_view.h"
#include "desktop_screen.h"
#include "engine_session.h"
#include "expert_lab_dialog.h"
#include "main_window.h"
#include "message_widget.h"
#include "profiler_panel.h"
#include "report_data.h"
#include "report_writers.h"
#include "routing_stats.h"
#include "routing_view.h"

#include <QDialogButtonBox>
#include <QTableWidget>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTemporaryDir>
#include <QTimer>
#include <QtTest>

#include <algorithm>

#include <qcustomplot.h>

using namespace es;

namespace {
void saveGrab(QWidget *w, const QString &fileName) {
    const QString dir = qEnvironmentVariable("ES_SCREENSHOT_DIR");
    if (dir.isEmpty()) return;
    QVERIFY(w->grab().save(dir + u'/' + fileName));
}
} // namespace

class TestExpertLab : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void dialogChecksAsYouType();
    void interventionRoutesStoresAndNames();
    void remoteAndDenseAreRefused();
    void expertTokensPairsAndMargins();

private:
    void loadModel(const QString &name);
    Message runTurn(ChatPane *pane, const QString &text);
    QTemporaryDir m_home;
    std::unique_ptr<ChatStore> m_store;
    std::unique_ptr<EngineSession> m_session;
};

void TestExpertLab::initTestCase() {
    qputenv("HOME", m_home.path().toUtf8());
    QCoreApplication::setOrganizationName("ExpertScopeTests");
    QCoreApplication::setApplicationName("test_expert_lab");
}

void TestExpertLab::loadModel(const QString &name) {
    m_store = std::make_unique<ChatStore>();
    QVERIFY(m_store->open(":memory:").ok());
    m_session = std::make_unique<EngineSession>(EngineSessionOptions{.backend = "cpu", .defaultMaxTokens = 12});
    QSignalSpy loaded(m_session.get(), &EngineSession::modelLoaded);
    m_session->loadModel(QStringLiteral(ES_TEST_DATA_DIR) + "/" + name);
    QVERIFY(loaded.wait(30000));
}

Message TestExpertLab::runTurn(ChatPane *pane, const QString &text) {
    QSignalSpy finished(m_session.get(), &EngineSession::replyFinished);
    QSignalSpy failed(m_session.get(), &EngineSession::replyFailed);
    pane->send(text);
    if (!finished.wait(60000)) qWarning("no reply; failures: %d", int(failed.count()));
    for (int i = 0; i < 50 && pane->isGenerating(); ++i) QTest::qWait(100);
    if (!pane->conversationId()) return {};
    return m_store->activePath(*pane->conversationId()).last();
}

void TestExpertLab::dialogChecksAsYouType() {
    loadModel("moe-shared"); // layers 1 and 2 are MoE, 8 experts, k 2
    ExpertLabDialog dialog(m_session->modelInfo(), {},
                           [this](const ExpertIntervention &iv) { return m_session->checkIntervention(iv); });
    auto *disabled = dialog.findChildren<QLineEdit *>().value(0);
    auto *buttons = dialog.findChild<QDialogButtonBox *>();
    QVERIFY(disabled && buttons);
    QPushButton *apply = buttons->button(QDialogButtonBox::Ok);
    QVERIFY(apply->isEnabled()); // empty: the model's routing
    QTest::keyClicks(disabled, "0:3");
    QVERIFY(!apply->isEnabled());
    QVERIFY2(dialog.problem().contains("layer 0 is a dense layer"), qPrintable(dialog.problem()));
    disabled->clear();
    QTest::keyClicks(disabled, "1:3, *:9");
    QVERIFY(dialog.problem().contains("8 experts"));
    disabled->setText("1:3, *:5");
    QVERIFY2(apply->isEnabled(), qPrintable(dialog.problem()));
    QCOMPARE(dialog.intervention().summary(), QString("disable 1:3, *:5"));
    dialog.findChild<QSpinBox *>()->setValue(7); // 7 of the 8 with two disabled in layer 1: too many
    QVERIFY(dialog.problem().contains("only 6 are not disabled"));
    QVERIFY(!apply->isEnabled());
    buttons->button(QDialogButtonBox::Reset)->click();
    QVERIFY(dialog.intervention().isEmpty());
    QCOMPARE(ExpertLabDialog::withExpert("1:3", 2, 4), QString("1:3, 2:4"));
    QCOMPARE(ExpertLabDialog::withExpert("1:3, 2:4", 2, 4), QString("1:3, 2:4"));
}

void TestExpertLab::interventionRoutesStoresAndNames() {
    loadModel("moe-shared");
    MainWindow window(m_store.get(), m_session.get());
    window.resize(1400, 900);
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    // The session loaded its model before the window existed: the status bar still names it.
    QVERIFY2(window.statusText().startsWith("moe-shared — MoE"), qPrintable(window.statusText()));
    ChatPane *pane = window.currentPane();
    const Message plain = runTurn(pane, QStringLiteral("What does a router do?"));
    QCOMPARE(plain.role, MessageRole::Assistant);
    QVERIFY(plain.generation.sampling.intervention.isEmpty());
    QLabel *banner = nullptr;
    for (QLabel *l : pane->findChildren<QLabel *>())
        if (l->text().contains("Expert intervention")) banner = l;
    QVERIFY(!banner || !banner->isVisible());

    // The heatmap's context menu names the expert under the cursor; the lab opens with it.
    RoutingView *routing = window.profilerPanel()->routingView();
    window.profilerPanel()->setCurrentTab(ProfilerPanel::Tab::Routing);
    window.profilerPanel()->selectMessage(plain.id);
    QCustomPlot *plot = routing->heatmapPlot();
    QTRY_VERIFY(plot->isVisible());
    plot->replot();
    const QPoint cell(int(plot->xAxis->coordToPixel(4)), int(plot->yAxis->coordToPixel(1)));
    QCOMPARE(routing->expertAt(cell), (QPair<int, int>{1, 4}));
    const QPoint dense(int(plot->xAxis->coordToPixel(4)), int(plot->yAxis->coordToPixel(0)));
    QCOMPARE(routing->expertAt(dense), (QPair<int, int>{-1, -1}));
    bool sawLab = false;
    QTimer::singleShot(0, this, [&] {
        auto *lab = qobject_cast<ExpertLabDialog *>(QApplication::activeModalWidget());
        QVERIFY(lab);
        sawLab = true;
        QCOMPARE(lab->intervention().disabled, QString("1:4"));
        lab->findChildren<QLineEdit *>().value(0)->setText("*:0, *:1"); // experts 0 and 1 nowhere
        saveGrab(lab, "expert-lab.png");
        lab->accept();
    });
    emit routing->interventionRequested(1, 4, false);
    QVERIFY(sawLab);
    QCOMPARE(pane->nextIntervention().summary(), QString("disable *:0, *:1"));
    for (QLabel *l : pane->findChildren<QLabel *>())
        if (l->text().contains("Expert intervention")) banner = l;
    QVERIFY(banner && banner->isVisible());
    QVERIFY(banner->text().contains("disable *:0, *:1"));

    // The next reply runs under it: stored with it, its trace never holds expert 0 or 1, named.
    const Message lab = runTurn(pane, QStringLiteral("What does a router do?"));
    saveGrab(pane, "expert-lab-chat.png");
    QCOMPARE(lab.generation.sampling.intervention.summary(), QString("disable *:0, *:1"));
    const std::optional<MessageProfile> profile = m_store->profile(lab.id);
    QVERIFY(profile && !profile->traceIds.isEmpty());
    for (qint16 e : profile->traceIds) QVERIFY(e >= 2);
    for (const LayerRouting &r : m_store->routing(lab.id)) QCOMPARE(r.expertCounts[0] + r.expertCounts[1], 0u);
    MessageWidget *header = nullptr;
    for (MessageWidget *w : pane->messageWidgets())
        if (w->messageId() == lab.id) header = w;
    QVERIFY(header);
    bool named = false;
    for (QLabel *l : header->findChildren<QLabel *>())
        named = named || l->text().contains("expert intervention: disable *:0, *:1");
    QVERIFY(named);
    QString error;
    const std::optional<report::Report> rep = report::messageReport(*m_store, lab.id, &error);
    QVERIFY2(rep, qPrintable(error));
    const QString html = report::reportHtml(*rep);
    QVERIFY(html.contains("Expert intervention"));
    QVERIFY(html.contains("disable *:0, *:1"));
    const std::optional<report::Report> plainRep = report::messageReport(*m_store, plain.id, &error);
    QVERIFY(plainRep && report::reportHtml(*plainRep).contains("none (the model's own routing)"));

    // Compare: the change is named, and the words are diffed.
    window.profilerPanel()->setCurrentTab(ProfilerPanel::Tab::Compare);
    window.profilerPanel()->setCompareMessages(plain.id, lab.id);
    CompareView *compare = window.profilerPanel()->compareView();
    QTRY_VERIFY(compare->textSummary().startsWith("Words:"));
    QTest::qWait(200); // the plots' queued replot
    saveGrab(&window, "expert-lab-compare.png");
    QVERIFY(compare->findChildren<QLabel *>().size() > 0);
    bool titled = false;
    for (QLabel *l : compare->findChildren<QLabel *>()) titled = titled || l->text().contains("experts: disable *:0");
    QVERIFY(titled);
    if (plain.content != lab.content) QVERIFY(compare->textDiffHtml().contains("<s ") || compare->textDiffHtml().contains("<span "));

    // Clear from the banner: the next reply routes as the model does.
    emit banner->linkActivated("clear");
    QVERIFY(pane->nextIntervention().isEmpty());
    QVERIFY(!banner->isVisible());
}

// A dense model has no lab; a bad stored intervention fails the reply with the engine's reason.
void TestExpertLab::remoteAndDenseAreRefused() {
    loadModel("dense");
    QCOMPARE(m_session->checkIntervention({"", "", 2, 1.0}),
             QString("expert interventions need a mixture-of-experts model; this one has no MoE layers"));
    ChatPane pane(m_store.get(), m_session.get());
    QSignalSpy errors(&pane, &ChatPane::errorOccurred);
    pane.openExpertLab();
    QCOMPARE(errors.count(), 1);
    QVERIFY(errors.at(0).at(0).toString().contains("needs a mixture-of-experts model"));

    loadModel("moe-shared");
    ChatPane pane2(m_store.get(), m_session.get());
    QVERIFY(pane2.setConversationIntervention({"1:x", "", 0, 1.0}));
    QSignalSpy failed(m_session.get(), &EngineSession::replyFailed);
    pane2.send("hello");
    QVERIFY(failed.wait(30000));
    QVERIFY2(failed.at(0).at(1).toString().contains("'1:x' is not LAYER:EXPERT"), qPrintable(failed.at(0).at(1).toString()));
}

void TestExpertLab::expertTokensPairsAndMargins() {
    loadModel("moe-shared"); // layers 1 and 2 are MoE, 8 experts, k 2
    MainWindow window(m_store.get(), m_session.get());
    window.resize(1400, 900);
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    ChatPane *pane = window.currentPane();
    ConversationSettings seeded; // the same reply every run
    seeded.sampling.seed = 7;
    pane->setConversation(*m_store->createConversation(QStringLiteral("Rivers"), seeded));
    const Message reply = runTurn(pane, QStringLiteral("Tell me about rivers and mountains"));
    QCOMPARE(reply.role, MessageRole::Assistant);
    const std::optional<MessageProfile> profile = m_store->profile(reply.id);
    QVERIFY(profile);
    QCOMPARE(profile->tokenTextEnds.size(), profile->tokenTimesUs.size()); // stored with the reply
    QCOMPARE(profile->tokenTextEnds.last(), int(reply.content.toUtf8().size()));
    // The CPU backend records the router's margin at every position it computed.
    QCOMPARE(profile->traceMargins.size(), qsizetype(profile->tracePositions()) * profile->moeLayers.size());

    ProfilerPanel *panel = window.profilerPanel();
    RoutingView *routing = panel->routingView();
    panel->setCurrentTab(ProfilerPanel::Tab::Routing);
    panel->selectMessage(reply.id);
    MessageWidget *shown = nullptr;
    for (MessageWidget *w : pane->messageWidgets())
        if (w->messageId() == reply.id) shown = w;
    QVERIFY(shown);

    // The expert of layer 1 that took the most reply tokens.
    int best = -1;
    QList<int> bestPositions;
    for (int e = 0; e < 8; ++e) {
        const QList<int> at = positionsRoutedTo(*profile, 1, e, profile->nPromptTokens);
        if (at.size() > bestPositions.size()) {
            best = e;
            bestPositions = at;
        }
    }
    QVERIFY(best >= 0);
    QCustomPlot *plot = routing->heatmapPlot();
    QTRY_VERIFY(plot->isVisible());
    QTest::qWait(100); // the queued replots and layout of the page
    plot->replot();
    const QPoint cell(int(plot->xAxis->coordToPixel(best)), int(plot->yAxis->coordToPixel(1)));
    QCOMPARE(routing->expertAt(cell), (QPair<int, int>{1, best}));
    QTest::mouseClick(plot, Qt::LeftButton, {}, cell);
    QCOMPARE(routing->highlightedExpert(), (QPair<int, int>{1, best}));
    // Every routed reply token the model read back (the last one it never read) is marked.
    const int expected = int(std::count_if(bestPositions.cbegin(), bestPositions.cend(), [&](int pos) {
        const int j = pos - profile->nPromptTokens;
        return profile->tokenTextEnds[j] > (j > 0 ? profile->tokenTextEnds[j - 1] : 0);
    }));
    QTRY_COMPARE(shown->highlightedTokens(), expected);
    QVERIFY(expected > 0);
    // Each mark is the text of a token that went to that expert.
    const QByteArray utf8 = reply.content.toUtf8();
    QStringList want;
    for (int pos : bestPositions) {
        const int j = pos - profile->nPromptTokens;
        const int from = j > 0 ? profile->tokenTextEnds[j - 1] : 0;
        if (profile->tokenTextEnds[j] > from)
            want << QString::fromUtf8(utf8.mid(from, profile->tokenTextEnds[j] - from)).trimmed();
    }
    const QStringList got = shown->highlightedText().split(QLatin1Char('\n'));
    int matching = 0;
    for (qsizetype i = 0; i < got.size() && i < want.size(); ++i) matching += got[i].trimmed() == want[i] ? 1 : 0;
    QVERIFY2(matching * 10 >= int(want.size()) * 8, qPrintable(got.join('|') + " vs " + want.join('|')));
    plot->replot(); // the marked cell
    saveGrab(&window, "routing-expert-tokens.png");

    // Again: cleared. Once more and Esc: cleared.
    QTest::mouseClick(plot, Qt::LeftButton, {}, cell);
    QCOMPARE(routing->highlightedExpert(), (QPair<int, int>{-1, -1}));
    QTRY_COMPARE(shown->highlightedTokens(), 0);
    QTest::mouseClick(plot, Qt::LeftButton, {}, cell);
    QTRY_COMPARE(shown->highlightedTokens(), expected);
    QTest::keyClick(plot, Qt::Key_Escape);
    QTRY_COMPARE(shown->highlightedTokens(), 0);

    // Chosen together: layer 1's most frequent pair, as coActivation counts it.
    const CoActivation c = coActivation(*profile, 1);
    const QList<ExpertPair> top = topPairs(c, 8);
    QVERIFY(!top.isEmpty());
    QTableWidget *pairs = routing->pairsTable();
    QCOMPARE(routing->coActivationLayer(), 1);
    QTRY_COMPARE(pairs->rowCount(), int(top.size()));
    QCOMPARE(pairs->item(0, 0)->text(), QStringLiteral("e%1 + e%2").arg(top[0].a).arg(top[0].b));
    QVERIFY(pairs->item(0, 1)->text().startsWith(QString::number(top[0].count) + " ("));

    // The token lens names the margin.
    QVERIFY2(routing->tokenDetails(profile->nPromptTokens).contains("margin "),
             qPrintable(routing->tokenDetails(profile->nPromptTokens)));
    saveGrab(panel, "routing-pairs.png");
}

ES_DESKTOP_QTEST_MAIN(TestExpertLab)
#include "test_expert_lab.moc"
