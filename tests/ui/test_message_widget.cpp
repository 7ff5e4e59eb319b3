// Code blocks of a reply: find_code_blocks against hand-written Markdown (fences of both kinds,
// indentation, longer closing fences, a block still streaming), and MessageWidget's "Copy code"
// links putting exactly the block's text on the clipboard.
#include "markdown_code_blocks.h"
#include "message_widget.h"

#include <QApplication>
#include <QClipboard>
#include <QSignalSpy>
#include <QTextBrowser>
#include <QtTest>

using namespace es;

namespace {

QString copy_label(int i, const QString &lang) { return QStringLiteral("copy %1 %2").arg(i).arg(lang); }

} // namespace

class TestMessageWidget : public QObject {
    Q_OBJECT
private slots:
    void findsClosedBlocks() {
        const QString md = "Intro\n```python\nprint('a')\n\nx = 1\n```\nmiddle\n~~~\nplain ~~~ text\n~~~\nend";
        const CodeBlocks b = find_code_blocks(md, copy_label);
        QCOMPARE(b.code, (QStringList{"print('a')\n\nx = 1", "plain ~~~ text"}));
        QCOMPARE(b.languages, (QStringList{"python", ""}));
        QVERIFY(b.annotated.contains("[copy 0 python](es-copy:0)\n\n```python"));
        QVERIFY(b.annotated.contains("[copy 1 ](es-copy:1)\n\n~~~"));
        QVERIFY(b.annotated.startsWith("Intro\n\n[copy 0"));
        QVERIFY(b.annotated.endsWith("~~~\nend"));
    }
    void fenceRules() {
        // A longer opening fence is closed only by one at least as long; other fence chars are text.
        const CodeBlocks b = find_code_blocks("````md\n```\ninner\n```\n~~~\n````\n", copy_label);
        QCOMPARE(b.code, QStringList{"```\ninner\n```\n~~~"});
        QCOMPARE(b.languages, QStringList{"md"});
        // Indented fence: its indentation is removed from the body lines; 4 spaces is not a fence.
        const CodeBlocks c = find_code_blocks("  ```\n  a\n    b\n  ```\n    ```\nnot code\n", copy_label);
        QCOMPARE(c.code, QStringList{"a\n  b"});
        // A closing fence may not carry an info string; a backtick info string may not hold a backtick.
        QCOMPARE(find_code_blocks("```c\nx\n``` y\n", copy_label).code.size(), 0);
        QCOMPARE(find_code_blocks("``` a`b\nx\n```\n", copy_label).code.size(), 0);
        // Link text with brackets stays one link.
        const CodeBlocks d = find_code_blocks("```\nx\n```", [](int, const QString &) { return QString("[a]"); });
        QVERIFY(d.annotated.startsWith("[\\[a\\]](es-copy:0)"));
    }
    void unclosedBlockWhileStreaming() {
        const QString md = "Done:\n```\nfirst\n```\nNext:\n```cpp\nint x";
        const CodeBlocks b = find_code_blocks(md, copy_label);
        QCOMPARE(b.code, QStringList{"first"});
        QVERIFY(b.annotated.endsWith("Next:\n```cpp\nint x"));
        QVERIFY(!b.annotated.contains("es-copy:1"));
    }
    void copyLinkPutsTheBlockOnTheClipboard() {
        Message m;
        m.id = 7;
        m.role = MessageRole::Assistant;
        m.content = "Run:\n```sh\nls -l\n```\nand\n```\necho <b>&amp;\n```\n";
        MessageWidget w(m);
        QCOMPARE(w.codeBlocks(), (QStringList{"ls -l", "echo <b>&amp;"}));
        auto *body = w.findChild<QTextBrowser *>();
        QVERIFY(body);
        QVERIFY(body->toPlainText().contains("Copy code · sh"));
        QVERIFY(body->toPlainText().contains("ls -l"));
        QSignalSpy copied(&w, &MessageWidget::copyRequested);
        emit body->anchorClicked(QUrl("es-copy:1"));
        QCOMPARE(copied.size(), 1);
        QCOMPARE(copied.at(0).at(0).toString(), QString("echo <b>&amp;"));
        QCOMPARE(QApplication::clipboard()->text(), QString("echo <b>&amp;"));
        emit body->anchorClicked(QUrl("es-copy:9")); // out of range: ignored
        QCOMPARE(copied.size(), 1);
        // Streaming: the link appears once the block closes.
        w.setStreamingText("```\npartial");
        QVERIFY(w.codeBlocks().isEmpty());
        w.setStreamingText("```\npartial\n```");
        QCOMPARE(w.codeBlocks(), QStringList{"partial"});
    }
    void userMessagesHaveNoLinks() {
        Message m;
        m.role = MessageRole::User;
        m.content = "```\nx\n```";
        MessageWidget w(m);
        QVERIFY(w.codeBlocks().isEmpty());
        QVERIFY(!w.findChild<QTextBrowser *>()->toPlainText().contains("Copy code"));
    }
};

QTEST_MAIN(TestMessageWidget)
#include "test_message_widget.moc"
