// es::tokenizer and es::detokenizer on the tiny English + Chinese SentencePiece model of
// tests/data/tokenizer (tokenizer.model from make_tokenizer.sh, plus the hub-layout JSON files):
// round trips, special tokens and their ids as the files state them, exact ids from spm_encode,
// streaming that never splits a UTF-8 character, stop ids, and the load errors; long text
// encoded in segments equals SentencePiece's own encoding of the whole, and no text has fewer
// tokens than its bytes over max_token_bytes().
#include "engine/model/tokenizer.h"

#include <sentencepiece_processor.h>

#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QtTest>

#include <cstring>
#include <filesystem>
#include <random>

using ids_t = std::vector<int32_t>;

namespace {

const QString k_dir = QStringLiteral(ES_TEST_DATA_DIR "/tokenizer");

std::string str(const QByteArray &b) { return std::string(b.constData(), size_t(b.size())); }

QByteArray bytes(const std::string &s) { return QByteArray(s.data(), qsizetype(s.size())); }

bool valid_utf8(const std::string &s) { return QString::fromUtf8(bytes(s)).toUtf8() == bytes(s); }

QJsonObject read_json(const QString &name) {
    QFile f(k_dir + "/" + name);
    if (!f.open(QIODevice::ReadOnly)) return {};
    return QJsonDocument::fromJson(f.readAll()).object();
}

// added_tokens_decoder of tokenizer_config.json: text → id, as the file states it.
QMap<QString, int> file_token_ids() {
    QMap<QString, int> out;
    const QJsonObject dec = read_json("tokenizer_config.json").value("added_tokens_decoder").toObject();
    for (auto it = dec.begin(); it != dec.end(); ++it)
        out[it.value().toObject().value("content").toString()] = it.key().toInt();
    return out;
}

QString describe(const ids_t &ids) {
    QStringList parts;
    for (int32_t id : ids) parts << QString::number(id);
    return "[" + parts.join(", ") + "]";
}

bool write_file(const QString &path, const QByteArray &content) {
    QFile f(path);
    return f.open(QIODevice::WriteOnly | QIODevice::Truncate) && f.write(content) == content.size();
}

} // namespace

class TestTokenizer : public QObject {
    Q_OBJECT

private slots:
    void initTestCase();
    void roundTrip_data();
    void roundTrip();
    void exactIds_data();
    void exactIds();
    void addedTokensFromFile_data();
    void addedTokensFromFile();
    void namedTokens_data();
    void namedTokens();
    void specialsInText_data();
    void specialsInText();
    void stopIds();
    void streamingHoldsPartialCharacters();
    void tokenText();
    void idsOutsideTheVocabulary();
    void addedTokensLongestMatch();
    void withoutConfigFiles();
    void textBound();
    void segmentsEqualWholeEncoding_data();
    void segmentsEqualWholeEncoding();
    void loadErrors_data();
    void loadErrors();

private:
    std::unique_ptr<es::tokenizer> m_tok;
};

void TestTokenizer::initTestCase() {
    auto r = es::tokenizer::load(std::filesystem::path(k_dir.toStdString()));
    QVERIFY2(r.ok(), r.ok() ? "" : r.message().c_str());
    m_tok = std::move(r.value());
    QCOMPARE(m_tok->n_vocab(), 3000);
}

void TestTokenizer::roundTrip_data() {
    QTest::addColumn<QByteArray>("text");
    QTest::addColumn<bool>("byte_fallback"); // the text needs byte-fallback pieces

    QTest::newRow("english") << QByteArray("The quick brown fox jumps over the lazy dog.") << false;
    QTest::newRow("chinese") << QByteArray("床前明月光，疑是地上霜。举头望明月，低头思故乡。") << false;
    QTest::newRow("tech_mode") << QByteArray("【技术解析模式】请解释专家混合模型的路由。") << true;
    QTest::newRow("creative_mode") << QByteArray("【创意写作模式】写一首关于月亮的诗。") << true;
    QTest::newRow("mixed") << QByteArray("ERNIE 4.5 是一个 MoE 模型, with 64 experts (6 active).") << false;
    QTest::newRow("emoji") << QByteArray("Hi 😀👍🏽!") << true;
    QTest::newRow("rare_cjk") << QByteArray("𠀋𪚥龘") << true;
    QTest::newRow("accents") << QByteArray("naïve café, Ærø ©®™") << true;
    QTest::newRow("leading_spaces") << QByteArray("   leading") << false;
    QTest::newRow("trailing_spaces") << QByteArray("trailing   ") << false;
    QTest::newRow("multiple_spaces") << QByteArray("a  b   c    d") << false;
    QTest::newRow("single_space") << QByteArray(" ") << false;
    // spm_train reads its corpus line by line, so this model never saw "\n" or "\t": byte pieces.
    QTest::newRow("newlines") << QByteArray("line one\nline two\n\n\nend\n") << true;
    QTest::newRow("tabs_crlf") << QByteArray("a\tb\r\nc") << true;
    QTest::newRow("empty") << QByteArray("") << false;
    QTest::newRow("specials_inline")
        << QByteArray("<|begin_of_sentence|>User: 你好\nAssistant: 你好！<|end_of_sentence|>") << true;
    QTest::newRow("almost_specials") << QByteArray("<s x> </ s> <mask:2> <|end_of_sentence <unk") << false;
}

void TestTokenizer::roundTrip() {
    QFETCH(QByteArray, text);
    QFETCH(bool, byte_fallback);

    const ids_t ids = m_tok->encode(str(text));
    QCOMPARE(bytes(m_tok->decode(ids)), text);
    if (text.isEmpty()) QVERIFY(ids.empty());
    if (!ids.empty() && !text.startsWith("<s>"))
        QVERIFY2(ids.front() != m_tok->specials().bos_id, "no BOS is added");

    bool has_byte_piece = false;
    for (int32_t id : ids) has_byte_piece |= m_tok->piece(id).starts_with("<0x");
    QCOMPARE(has_byte_piece, byte_fallback);

    // Streaming gives the same text, in chunks that are each valid UTF-8.
    es::detokenizer detok(*m_tok);
    std::string streamed;
    for (int32_t id : ids) {
        const std::string chunk = detok.push(id);
        QVERIFY2(valid_utf8(chunk), qPrintable("split UTF-8 after id " + QString::number(id)));
        streamed += chunk;
    }
    QCOMPARE(bytes(detok.flush()), QByteArray());
    QCOMPARE(bytes(streamed), bytes(m_tok->decode(ids)));
}

void TestTokenizer::exactIds_data() {
    QTest::addColumn<QByteArray>("text");
    QTest::addColumn<QList<int>>("ids");

    // Made once with the sentencepiece package's tool on tests/data/tokenizer/tokenizer.model:
    //   printf '%s' "$text" | spm_encode --model=tokenizer.model --output_format=id
    // Regenerate them if make_tokenizer.sh is ever re-run with other options.
    QTest::newRow("hello_world") << QByteArray("Hello world")
                                 << QList<int>{1502, 1237, 404, 1243, 334, 292, 931};
    QTest::newRow("chat_line") << QByteArray("User: What is a mixture of experts?")
                               << QList<int>{1358, 835,  1278, 573, 1263, 304,  535,  296,  324,
                                             646,  1241, 844,  394, 682,  1194, 1241, 1246, 2243};
    QTest::newRow("chinese") << QByteArray("中文分词") << QList<int>{1313, 1285, 1442, 2043};
    QTest::newRow("poem") << QByteArray("床前明月光，疑是地上霜。")
                          << QList<int>{2799, 1473, 980, 1648, 1236, 2380, 1288, 1436, 1325, 1976, 1238};
    QTest::newRow("tech_mode") << QByteArray("【技术解析模式】")
                               << QList<int>{237, 138, 154, 2509, 2093, 1586, 2208, 1082, 237, 138, 155};
    QTest::newRow("creative_mode") << QByteArray("【创意写作模式】")
                                   << QList<int>{237, 138, 154, 1830, 1441, 1743, 1333, 1082, 237, 138, 155};
    QTest::newRow("double_spaces") << QByteArray("  two  spaces")
                                   << QList<int>{1230, 286, 1291, 1243, 1230, 306, 1258, 1162};
    QTest::newRow("emoji_bytes") << QByteArray("😀") << QList<int>{250, 169, 162, 138};
    QTest::newRow("digits_split") << QByteArray("GPL 3.0 license")
                                  << QList<int>{1417, 1315, 1343, 1230, 1235, 1255, 1287, 383, 582};
}

void TestTokenizer::exactIds() {
    QFETCH(QByteArray, text);
    QFETCH(QList<int>, ids);
    const ids_t got = m_tok->encode(str(text));
    QCOMPARE(describe(got), describe(ids_t(ids.begin(), ids.end())));
}

void TestTokenizer::addedTokensFromFile_data() {
    QTest::addColumn<QString>("content");
    QTest::addColumn<int>("id");
    QTest::addColumn<bool>("special");
    const QJsonObject dec = read_json("tokenizer_config.json").value("added_tokens_decoder").toObject();
    QVERIFY(!dec.isEmpty());
    for (auto it = dec.begin(); it != dec.end(); ++it) {
        const QJsonObject t = it.value().toObject();
        QTest::newRow(qPrintable(t.value("content").toString()))
            << t.value("content").toString() << it.key().toInt() << t.value("special").toBool();
    }
}

void TestTokenizer::addedTokensFromFile() {
    QFETCH(QString, content);
    QFETCH(int, id);
    QFETCH(bool, special);
    const std::string text = content.toStdString();
    QCOMPARE(describe(m_tok->encode(text)), describe({id}));
    QCOMPARE(m_tok->piece_to_id(text), id);
    QCOMPARE(bytes(m_tok->piece(id)), bytes(text));
    QCOMPARE(bytes(m_tok->token_text(id)), bytes(text));
    QCOMPARE(bytes(m_tok->decode({id})), bytes(text)); // special tokens are rendered as their text
    QCOMPARE(m_tok->is_special(id), special);
}

void TestTokenizer::namedTokens_data() {
    QTest::addColumn<QString>("key");
    QTest::addColumn<QString>("content");
    QTest::addColumn<int>("id");
    const QJsonObject map = read_json("special_tokens_map.json");
    const QMap<QString, int> ids = file_token_ids();
    QVERIFY(!map.isEmpty());
    for (auto it = map.begin(); it != map.end(); ++it) {
        if (it.value().isString()) {
            QTest::newRow(qPrintable(it.key()))
                << it.key() << it.value().toString() << ids.value(it.value().toString(), -1);
        } else {
            const QJsonArray list = it.value().toArray();
            for (int i = 0; i < list.size(); ++i)
                QTest::newRow(qPrintable(it.key() + "[" + QString::number(i) + "]"))
                    << it.key() << list[i].toString() << ids.value(list[i].toString(), -1);
        }
    }
}

void TestTokenizer::namedTokens() {
    QFETCH(QString, key);
    QFETCH(QString, content);
    QFETCH(int, id);
    QVERIFY2(id >= 0, "every named token of the map has an id in added_tokens_decoder");
    QCOMPARE(describe(m_tok->encode(content.toStdString())), describe({id}));
    QVERIFY(m_tok->is_special(id));

    const es::special_tokens &s = m_tok->specials();
    const QMap<QString, int32_t> by_role{{"unk_token", s.unk_id}, {"bos_token", s.bos_id},
                                         {"eos_token", s.eos_id}, {"pad_token", s.pad_id},
                                         {"cls_token", s.cls_id}, {"sep_token", s.sep_id}};
    if (by_role.contains(key)) QCOMPARE(by_role.value(key), id);
}

void TestTokenizer::specialsInText_data() {
    QTest::addColumn<QStringList>("parts"); // concatenated to make the text
    QTest::newRow("sep_between_words") << QStringList{"a", "<|end_of_sentence|>", "b"};
    QTest::newRow("adjacent") << QStringList{"<|end_of_sentence|>", "<|begin_of_sentence|>"};
    QTest::newRow("at_both_ends") << QStringList{"<|begin_of_sentence|>", "User: 你好\n",
                                                 "<|end_of_sentence|>"};
    QTest::newRow("control_pieces") << QStringList{"<s>", "hi", "</s>", " ", "<unk>"};
    QTest::newRow("mask_tokens") << QStringList{"<mask:4>", "system",   "<mask:5>", "<mask:6>",
                                                "user",     "<mask:7>", "<mask:1>"};
    QTest::newRow("glued_to_cjk") << QStringList{"【技术解析模式】", "<|end_of_sentence|>", "诗"};
}

void TestTokenizer::specialsInText() {
    QFETCH(QStringList, parts);
    const QMap<QString, int> specials = file_token_ids();
    ids_t expected;
    std::string text;
    for (const QString &p : parts) {
        text += p.toStdString();
        if (specials.contains(p)) {
            expected.push_back(specials.value(p));
        } else {
            const ids_t plain = m_tok->encode(p.toStdString());
            expected.insert(expected.end(), plain.begin(), plain.end());
        }
    }
    QCOMPARE(describe(m_tok->encode(text)), describe(expected));
    QCOMPARE(bytes(m_tok->decode(expected)), bytes(text));
}

void TestTokenizer::stopIds() {
    const QMap<QString, int> ids = file_token_ids();
    const QString eos = read_json("special_tokens_map.json").value("eos_token").toString();
    QCOMPARE(m_tok->specials().eos_id, ids.value(eos));
    const ids_t stops = m_tok->stop_ids();
    QCOMPARE(describe(stops), describe({ids.value(eos), ids.value("<|end_of_sentence|>")}));
    QCOMPARE(m_tok->specials().sep_id, ids.value("<|end_of_sentence|>"));
    QCOMPARE(m_tok->specials().cls_id, ids.value("<|begin_of_sentence|>"));
}

void TestTokenizer::streamingHoldsPartialCharacters() {
    const ids_t ids = m_tok->encode("😀"); // four byte pieces
    QCOMPARE(ids.size(), size_t(4));
    es::detokenizer detok(*m_tok);
    QCOMPARE(bytes(detok.push(ids[0])), QByteArray());
    QCOMPARE(bytes(detok.push(ids[1])), QByteArray());
    QCOMPARE(bytes(detok.push(ids[2])), QByteArray());
    QCOMPARE(bytes(detok.push(ids[3])), QByteArray("😀"));

    // A byte sequence cut short by the end of the stream: flush() shows U+FFFD, never raw bytes.
    es::detokenizer cut(*m_tok);
    QCOMPARE(bytes(cut.push(m_tok->encode("a")[0])), QByteArray("a"));
    QCOMPARE(bytes(cut.push(ids[0])), QByteArray());
    QCOMPARE(bytes(cut.push(ids[1])), QByteArray());
    QCOMPARE(bytes(cut.flush()), QByteArray("\xEF\xBF\xBD\xEF\xBF\xBD"));

    // A broken sequence followed by ordinary text is not held back forever.
    es::detokenizer broken(*m_tok);
    std::string out = broken.push(ids[0]);
    out += broken.push(m_tok->encode("x")[0]);
    QCOMPARE(bytes(out), bytes(m_tok->decode({ids[0], m_tok->encode("x")[0]})));
    QVERIFY(valid_utf8(out));
}

void TestTokenizer::tokenText() {
    const int32_t space_t = m_tok->piece_to_id("\xE2\x96\x81t"); // "▁t"
    QVERIFY(space_t >= 0);
    QCOMPARE(bytes(m_tok->token_text(space_t)), QByteArray(" t"));
    const int32_t byte_e4 = m_tok->piece_to_id("<0xE4>");
    QVERIFY(byte_e4 >= 0);
    QCOMPARE(bytes(m_tok->token_text(byte_e4)), QByteArray("\xE4"));
    QVERIFY(!m_tok->is_special(byte_e4));
    QCOMPARE(m_tok->piece_to_id("no such piece"), -1);
}

void TestTokenizer::idsOutsideTheVocabulary() {
    // A model vocabulary may be padded past the tokenizer's: such ids render as nothing.
    QCOMPARE(bytes(m_tok->decode({-1, m_tok->n_vocab(), 1 << 30})), QByteArray());
    QCOMPARE(bytes(m_tok->piece(m_tok->n_vocab())), QByteArray());
    QVERIFY(!m_tok->is_special(-1));
}

void TestTokenizer::addedTokensLongestMatch() {
    QTemporaryDir tmp;
    QVERIFY(tmp.isValid());
    for (const char *f : {"tokenizer.model", "tokenizer_config.json", "special_tokens_map.json"})
        QVERIFY(QFile::copy(k_dir + "/" + f, tmp.filePath(f)));
    QVERIFY(write_file(tmp.filePath("added_tokens.json"),
                       R"({"<extra>": 3000, "<extra>long": 3001, "<mask:1>tail": 3002})"));
    auto r = es::tokenizer::load(tmp.path().toStdString());
    QVERIFY2(r.ok(), r.ok() ? "" : r.message().c_str());
    const es::tokenizer &tok = *r.value();
    QCOMPARE(tok.n_vocab(), 3003);

    ids_t lon = tok.encode("lon");
    lon.insert(lon.begin(), 3000);
    ids_t tai = tok.encode("tai");
    tai.insert(tai.begin(), tok.piece_to_id("<mask:1>"));
    QCOMPARE(describe(tok.encode("<extra>long")), describe({3001}));
    QCOMPARE(describe(tok.encode("<extra>lon")), describe(lon));
    QCOMPARE(describe(tok.encode("<mask:1>tail")), describe({3002}));
    QCOMPARE(describe(tok.encode("<mask:1>tai")), describe(tai));
    QCOMPARE(bytes(tok.decode(tok.encode("x<extra>long<extra>y"))), QByteArray("x<extra>long<extra>y"));
    QCOMPARE(bytes(tok.piece(3001)), QByteArray("<extra>long"));
    QVERIFY(!tok.is_special(3000)); // added_tokens.json entries are plain added tokens
}

void TestTokenizer::withoutConfigFiles() {
    QTemporaryDir tmp;
    QVERIFY(tmp.isValid());
    QVERIFY(QFile::copy(k_dir + "/tokenizer.model", tmp.filePath("tokenizer.model")));
    auto r = es::tokenizer::load(tmp.path().toStdString());
    QVERIFY2(r.ok(), r.ok() ? "" : r.message().c_str());
    const es::tokenizer &tok = *r.value();
    // The model's own <unk>/<s>/</s> (0/1/2 in this model); no cls/sep without the files.
    QCOMPARE(tok.specials().unk_id, tok.piece_to_id("<unk>"));
    QCOMPARE(tok.specials().bos_id, tok.piece_to_id("<s>"));
    QCOMPARE(tok.specials().eos_id, tok.piece_to_id("</s>"));
    QCOMPARE(tok.specials().cls_id, -1);
    QCOMPARE(tok.specials().sep_id, -1);
    QCOMPARE(describe(tok.stop_ids()),
             describe({tok.piece_to_id("</s>"), tok.piece_to_id("<|end_of_sentence|>")}));
    QCOMPARE(describe(tok.encode("<s>")), describe({tok.piece_to_id("<s>")}));
    QCOMPARE(bytes(tok.decode(tok.encode("<s>你好</s>"))), QByteArray("<s>你好</s>"));
}

void TestTokenizer::loadErrors_data() {
    QTest::addColumn<QString>("model"); // copy | missing | garbage | truncated | empty | directory
    QTest::addColumn<QString>("file");  // JSON file to write beside the model ("" for none)
    QTest::addColumn<QByteArray>("content");
    QTest::addColumn<QStringList>("expected"); // substrings of the message; %1 is the folder

    const QStringList model_missing{"%1/tokenizer.model", "not found"};
    const QStringList model_broken{"%1/tokenizer.model", "not a valid SentencePiece model"};
    QTest::newRow("model_missing") << "missing"
                                   << "" << QByteArray() << model_missing;
    QTest::newRow("model_garbage") << "garbage"
                                   << "" << QByteArray() << model_broken;
    QTest::newRow("model_truncated") << "truncated"
                                     << "" << QByteArray() << model_broken;
    QTest::newRow("model_empty") << "empty"
                                 << "" << QByteArray() << model_broken;
    QTest::newRow("model_is_directory")
        << "directory"
        << "" << QByteArray() << QStringList{"%1/tokenizer.model", "not a regular file"};
    QTest::newRow("config_not_json") << "copy"
                                     << "tokenizer_config.json" << QByteArray("{ \"bos_token\": ")
                                     << QStringList{"%1/tokenizer_config.json", "not valid JSON"};
    QTest::newRow("config_number_beyond_double") // nlohmann throws out_of_range, not parse_error
        << "copy"
        << "tokenizer_config.json" << QByteArray(R"({"model_max_length": 1e999})")
        << QStringList{"%1/tokenizer_config.json", "not valid JSON"};
    QTest::newRow("config_not_object") << "copy"
                                       << "tokenizer_config.json" << QByteArray("[1, 2]")
                                       << QStringList{"%1/tokenizer_config.json", "expected a JSON object"};
    QTest::newRow("bos_token_number")
        << "copy"
        << "tokenizer_config.json" << QByteArray(R"({"bos_token": 5})")
        << QStringList{"%1/tokenizer_config.json", "'bos_token'", "expected a string"};
    QTest::newRow("eos_token_no_content")
        << "copy"
        << "special_tokens_map.json" << QByteArray(R"({"eos_token": {"text": "</s>"}})")
        << QStringList{"%1/special_tokens_map.json", "'eos_token.content'"};
    QTest::newRow("decoder_id_not_integer")
        << "copy"
        << "tokenizer_config.json" << QByteArray(R"({"added_tokens_decoder": {"five": {"content": "<x>"}}})")
        << QStringList{"%1/tokenizer_config.json", "'added_tokens_decoder.five'"};
    QTest::newRow("decoder_without_content")
        << "copy"
        << "tokenizer_config.json" << QByteArray(R"({"added_tokens_decoder": {"5": {"special": true}}})")
        << QStringList{"%1/tokenizer_config.json", "'added_tokens_decoder.5.content'"};
    QTest::newRow("decoder_not_object")
        << "copy"
        << "tokenizer_config.json" << QByteArray(R"({"added_tokens_decoder": [1]})")
        << QStringList{"%1/tokenizer_config.json", "'added_tokens_decoder'"};
    QTest::newRow("additional_not_list")
        << "copy"
        << "tokenizer_config.json" << QByteArray(R"({"additional_special_tokens": "<mask:4>"})")
        << QStringList{"%1/tokenizer_config.json", "'additional_special_tokens'", "expected a list"};
    QTest::newRow("added_tokens_id_string")
        << "copy"
        << "added_tokens.json" << QByteArray(R"({"<x>": "3000"})")
        << QStringList{"%1/added_tokens.json", "'<x>'", "expected a token id"};
}

void TestTokenizer::loadErrors() {
    QFETCH(QString, model);
    QFETCH(QString, file);
    QFETCH(QByteArray, content);
    QFETCH(QStringList, expected);

    QTemporaryDir tmp;
    QVERIFY(tmp.isValid());
    const QString model_path = tmp.filePath("tokenizer.model");
    QFile real(k_dir + "/tokenizer.model");
    QVERIFY(real.open(QIODevice::ReadOnly));
    const QByteArray model_bytes = real.readAll();
    if (model == "copy") QVERIFY(write_file(model_path, model_bytes));
    if (model == "garbage")
        QVERIFY(write_file(model_path, QByteArray("this is not a SentencePiece model\n").repeated(50)));
    if (model == "truncated") QVERIFY(write_file(model_path, model_bytes.left(model_bytes.size() / 3)));
    if (model == "empty") QVERIFY(write_file(model_path, QByteArray()));
    if (model == "directory") QVERIFY(QDir(tmp.path()).mkdir("tokenizer.model"));
    if (!file.isEmpty()) QVERIFY(write_file(tmp.filePath(file), content));

    auto r = es::tokenizer::load(tmp.path().toStdString());
    QVERIFY(!r.ok());
    const QString message = QString::fromStdString(r.message());
    for (QString e : expected) {
        e.replace("%1", tmp.path());
        QVERIFY2(message.contains(e), qPrintable("message \"" + message + "\" lacks \"" + e + "\""));
    }
}

// The longest piece of tests/data/tokenizer is 48 bytes (16 × "─"; the special tokens are
// shorter), as the sentencepiece package's tool lists the vocabulary:
//   spm_export_vocab --model=tokenizer.model | awk -F'\t' 'length($1) > m { m = length($1) } END { print m }'
// (byte pieces "<0xE4>" stand for one byte each and are not counted).
void TestTokenizer::textBound() {
    QCOMPARE(m_tok->max_token_bytes(), size_t(48));
    QVERIFY(m_tok->encodes_in_segments()); // BPE, identity normalizer, no dummy prefix
    std::string run;
    for (int i = 0; i < 16 * 40; ++i) run += "\xE2\x94\x80"; // "─" × 640: 40 pieces of 48 bytes
    QCOMPARE(m_tok->encode(run).size(), size_t(40));
    for (const char *text : {"Hello world", "  two  spaces", "中文分词", "😀", "<|begin_of_sentence|>", " "}) {
        const size_t n = m_tok->encode(text).size();
        QVERIFY2(n * m_tok->max_token_bytes() >= std::strlen(text), text);
    }
}

namespace {

// Long text from a seeded generator: words and CJK from the tokenizer's own languages, spaces
// in runs, newlines, emoji (byte fallback), a literal "▁" and box-drawing runs.
std::string long_text(const QString &kind, size_t bytes, uint32_t seed) {
    std::mt19937 rng(seed);
    const std::vector<std::string> words{"the", "expert", "routing", "of", "mixture", "model", "Hello",
                                         "world", "GPL", "3.0", "license", "tokens", "a", "is"};
    const std::vector<std::string> cjk{"床", "前", "明", "月", "光", "中", "文", "分", "词", "模", "型", "，", "。"};
    const std::vector<std::string> odd{"😀", "\n", "\n\n", "\t", "\xE2\x96\x81", "\xE2\x94\x80\xE2\x94\x80",
                                       "  ", "   ", "ï", "©"};
    std::string out;
    while (out.size() < bytes) {
        const uint32_t r = rng() % 100;
        if (kind == "english") {
            out += words[rng() % words.size()];
            out += r < 90 ? " " : r < 95 ? "  " : ". ";
        } else if (kind == "chinese") {
            out += cjk[rng() % cjk.size()];
        } else if (kind == "runs") {
            const std::string unit = r < 30 ? "a" : r < 60 ? " " : r < 80 ? "\xE2\x94\x80" : "中";
            for (uint32_t k = 0, n = 1 + rng() % 300; k < n; ++k) out += unit;
        } else { // mixed
            out += r < 40 ? words[rng() % words.size()] : r < 70 ? cjk[rng() % cjk.size()] : odd[rng() % odd.size()];
            if (rng() % 2) out += " ";
        }
    }
    return out;
}

} // namespace

// tokenizer::encode cuts long text into segments; SentencePiece encoding the whole text at once
// (libsentencepiece itself, on the same model) must give the same ids. Each row is long enough
// for several segments, and encode(text, 0), which stops after the first segment, shows cuts
// were made. The bound holds on every row.
void TestTokenizer::segmentsEqualWholeEncoding_data() {
    QTest::addColumn<QString>("kind");
    QTest::addColumn<int>("kib");
    QTest::addColumn<bool>("cuts");
    for (uint32_t seed = 1; seed <= 3; ++seed) {
        QTest::addRow("english %u", seed) << "english" << 150 << true;
        QTest::addRow("chinese %u", seed) << "chinese" << 150 << true;
        QTest::addRow("mixed %u", seed) << "mixed" << 200 << true;
        QTest::addRow("runs %u", seed) << "runs" << 150 << true;
    }
    QTest::newRow("one long run, no cut") << "box" << 100 << false; // "──" is in a piece
}

void TestTokenizer::segmentsEqualWholeEncoding() {
    QFETCH(QString, kind);
    QFETCH(int, kib);
    QFETCH(bool, cuts);
    std::string text;
    if (kind == "box")
        while (text.size() < size_t(kib) << 10) text += "\xE2\x94\x80";
    else
        text = long_text(kind, size_t(kib) << 10, uint32_t(qHash(QTest::currentDataTag())));
    sentencepiece::SentencePieceProcessor sp;
    QVERIFY(sp.Load((k_dir + "/tokenizer.model").toStdString()).ok());
    std::vector<int> whole;
    QVERIFY(sp.Encode(text, &whole).ok());
    const ids_t got = m_tok->encode(text);
    QCOMPARE(got.size(), whole.size());
    QVERIFY2(std::equal(got.begin(), got.end(), whole.begin()), "the segmented encoding differs");
    QVERIFY(got.size() * m_tok->max_token_bytes() >= text.size());

    const ids_t first = m_tok->encode(text, 0);
    QVERIFY(!first.empty() && std::equal(first.begin(), first.end(), got.begin()));
    if (!cuts) {
        QCOMPARE(first.size(), got.size());
        return;
    }
    QVERIFY2(first.size() < got.size() / 2, "no cut in the text");
    const ids_t some = m_tok->encode(text, got.size() / 2);
    QVERIFY(some.size() > got.size() / 2 && some.size() < got.size());
    QVERIFY(std::equal(some.begin(), some.end(), got.begin()));
}

QTEST_GUILESS_MAIN(TestTokenizer)
#include "test_tokenizer.moc"
