// es::render_chat against the ERNIE-4.5 chat template. The expected strings were rendered once by
// Jinja2 from the chat_template in tests/data/tokenizer/tokenizer_config.json (the hub's template):
//   jinja2.Environment().from_string(cfg["chat_template"]).render(messages=…, add_generation_prompt=…)
// One more row checks that the rendered template tokenizes with single ids for its special tokens.
// Continuing a final assistant message (Hugging Face's continue_final_message, which the Jinja
// template cannot express) leaves that message open: no end-of-sentence, no generation prompt.
#include "engine/model/chat_template.h"
#include "engine/model/tokenizer.h"

#include <QtTest>

#include <filesystem>

Q_DECLARE_METATYPE(std::vector<es::chat_message>)

namespace {

es::chat_message sys(const char *c) { return {es::chat_role::system, c}; }
es::chat_message user(const char *c) { return {es::chat_role::user, c}; }
es::chat_message bot(const char *c) { return {es::chat_role::assistant, c}; }

} // namespace

class TestChatTemplate : public QObject {
    Q_OBJECT

private slots:
    void render_data();
    void render();
    void tokenizesWithSpecialIds();
    void continueFinalMessage();
};

void TestChatTemplate::render_data() {
    QTest::addColumn<std::vector<es::chat_message>>("messages");
    QTest::addColumn<bool>("add_generation_prompt");
    QTest::addColumn<QByteArray>("expected");

    QTest::newRow("no_messages") << std::vector<es::chat_message>{} << true
                                 << QByteArray("<|begin_of_sentence|>Assistant: ");
    QTest::newRow("user_only") << std::vector{user("Hello")} << true
                               << QByteArray("<|begin_of_sentence|>User: Hello\nAssistant: ");
    QTest::newRow("system_user") << std::vector{sys("You are a helpful assistant."), user("What is MoE?")}
                                 << true
                                 << QByteArray("<|begin_of_sentence|>You are a helpful assistant.\n"
                                               "User: What is MoE?\nAssistant: ");
    QTest::newRow("multi_turn") << std::vector{sys("Be brief."), user("Hi"), bot("Hello!"),
                                               user("Name two experts.")}
                                << true
                                << QByteArray("<|begin_of_sentence|>Be brief.\nUser: Hi\nAssistant: Hello!"
                                              "<|end_of_sentence|>User: Name two experts.\nAssistant: ");
    QTest::newRow("no_generation_prompt")
        << std::vector{user("Hi"), bot("Hello!")} << false
        << QByteArray("<|begin_of_sentence|>User: Hi\nAssistant: Hello!<|end_of_sentence|>");
    QTest::newRow("no_generation_prompt_after_user")
        << std::vector{user("Hi")} << false << QByteArray("<|begin_of_sentence|>User: Hi\n");
    QTest::newRow("empty_content") << std::vector{sys(""), user(""), bot(""), user("")} << true
                                   << QByteArray(
                                          "<|begin_of_sentence|>\nUser: \nAssistant: <|end_of_sentence|>"
                                          "User: \nAssistant: ");
    QTest::newRow("cjk_mode_prefix") << std::vector{sys("你是一位诗人。"),
                                                    user("【创意写作模式】写一首关于月亮的诗。")}
                                     << true
                                     << QByteArray("<|begin_of_sentence|>你是一位诗人。\n"
                                                   "User: 【创意写作模式】写一首关于月亮的诗。\nAssistant: ");
    QTest::newRow("cjk_multi_turn") << std::vector{user("【技术解析模式】什么是专家混合？"),
                                                   bot("路由器为每个词元选择专家。"), user("谢谢")}
                                    << true
                                    << QByteArray(
                                           "<|begin_of_sentence|>User: 【技术解析模式】什么是专家混合？\n"
                                           "Assistant: 路由器为每个词元选择专家。<|end_of_sentence|>"
                                           "User: 谢谢\nAssistant: ");
    QTest::newRow("content_with_newlines")
        << std::vector{user("line 1\nline 2\n")} << true
        << QByteArray("<|begin_of_sentence|>User: line 1\nline 2\n\nAssistant: ");
}

void TestChatTemplate::render() {
    QFETCH(std::vector<es::chat_message>, messages);
    QFETCH(bool, add_generation_prompt);
    QFETCH(QByteArray, expected);
    const std::string got = es::render_chat(messages, add_generation_prompt);
    QCOMPARE(QByteArray(got.data(), qsizetype(got.size())), expected);
}

void TestChatTemplate::tokenizesWithSpecialIds() {
    auto r = es::tokenizer::load(std::filesystem::path(ES_TEST_DATA_DIR "/tokenizer"));
    QVERIFY2(r.ok(), r.ok() ? "" : r.message().c_str());
    const es::tokenizer &tok = *r.value();
    const std::string prompt = es::render_chat({user("Hi"), bot("Hello!"), user("再见")});
    const std::vector<int32_t> ids = tok.encode(prompt);
    QVERIFY(!ids.empty());
    QCOMPARE(ids.front(), tok.specials().cls_id);
    QCOMPARE(std::count(ids.begin(), ids.end(), tok.specials().sep_id), qsizetype(1));
    QCOMPARE(QByteArray::fromStdString(tok.decode(ids)), QByteArray::fromStdString(prompt));
}

void TestChatTemplate::continueFinalMessage() {
    // The reply stays open, so generation carries on inside it.
    QCOMPARE(QByteArray::fromStdString(es::render_chat({user("Hi"), bot("Hello, th")}, true, true)),
             QByteArray("<|begin_of_sentence|>User: Hi\nAssistant: Hello, th"));
    // Earlier assistant messages are closed as always.
    QCOMPARE(QByteArray::fromStdString(es::render_chat({user("Hi"), bot("Hello!"), user("More"), bot("One")}, true, true)),
             QByteArray("<|begin_of_sentence|>User: Hi\nAssistant: Hello!<|end_of_sentence|>User: More\nAssistant: One"));
    // Nothing to continue when the last message is the user's: the usual generation prompt.
    QCOMPARE(QByteArray::fromStdString(es::render_chat({user("Hi")}, true, true)),
             QByteArray("<|begin_of_sentence|>User: Hi\nAssistant: "));
}

QTEST_GUILESS_MAIN(TestChatTemplate)
#include "test_chat_template.moc"
