// expertscope-cli as a user meets it: every malformed folder, config or argument exits non-zero
// with one line naming what was wrong; info / logits / generate work on the reference models;
// the same seed gives the same text.
#include <QDir>
#include <QFile>
#include <QProcess>
#include <QJsonObject>
#include <QJsonDocument>
#include <QJsonArray>
#include <QTemporaryDir>
#include <QtTest>

#include <map>

namespace {

struct run_result {
    int exit_code = -1;
    QString out, err;
};

run_result run_cli(const QStringList &args, int timeout_ms = 60000) {
    QProcess p;
    p.start(ES_CLI_PATH, args);
    run_result r;
    if (!p.waitForFinished(timeout_ms)) {
        p.kill();
        p.waitForFinished();
        r.err = "timed out";
        return r;
    }
    r.exit_code = p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -2; // -2: crashed
    r.out = QString::fromUtf8(p.readAllStandardOutput());
    r.err = QString::fromUtf8(p.readAllStandardError());
    return r;
}

void copy_dir(const QString &from, const QString &to) {
    QDir().mkpath(to);
    for (const QString &f : QDir(from).entryList(QDir::Files)) QFile::copy(from + "/" + f, to + "/" + f);
}

const QString data_dir = QStringLiteral(ES_TEST_DATA_DIR);

} // namespace

class TestCli : public QObject {
    Q_OBJECT
private slots:
    void failures_data();
    void failures();
    void info();
    void generateIsDeterministicPerSeed();
    void generateChat();
    void version();
    void evalMeasuresPrecision();
    void serveBenchUnderAnIntervention();
    void benchHoldsWeightsAsPrecisionSays();
};

void TestCli::failures_data() {
    QTest::addColumn<QString>("setup");  // what to break in a copy of tests/data/moe-shared
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<QString>("expected"); // substring of the one-line error

    const QStringList logits{"logits", "--model", "@DIR", "--ids", "1,2,3", "--out", "@DIR/out.npy"};
    QTest::newRow("missing folder") << "" << QStringList{"logits", "--model", "/nonexistent/model", "--ids", "1", "--out", "/tmp/x.npy"} << "/nonexistent/model";
    QTest::newRow("bad ids") << "" << QStringList{"logits", "--model", "@DIR", "--ids", "1,x,3", "--out", "@DIR/o.npy"} << "'x' is not a token id";
    QTest::newRow("negative id") << "" << QStringList{"logits", "--model", "@DIR", "--ids", "1,-3", "--out", "@DIR/o.npy"} << "'-3'";
    QTest::newRow("id outside vocab") << "" << QStringList{"logits", "--model", "@DIR", "--ids", "1,999999", "--out", "@DIR/o.npy"} << "999999";
    QTest::newRow("unknown option") << "" << QStringList{"logits", "--model", "@DIR", "--ids", "1", "--out", "x", "--bogus"} << "bogus";
    QTest::newRow("unknown backend") << "" << QStringList{"logits", "--model", "@DIR", "--ids", "1", "--out", "x", "--backend", "tpu"} << "tpu";
    QTest::newRow("missing config") << "rm config.json" << logits << "config.json";
    QTest::newRow("config not json") << "write config.json {" << logits << "config.json";
    QTest::newRow("missing weights") << "rm model.safetensors" << logits << "model.safetensors";
    QTest::newRow("truncated weights") << "truncate model.safetensors" << logits << "model.safetensors";
    QTest::newRow("heads not divisible") << "config num_key_value_heads 3" << logits << "num_key_value_heads";
    QTest::newRow("absurd vocab") << "config vocab_size 1000000000000" << logits << "vocab_size";
    QTest::newRow("unsupported architecture") << "config architectures LlamaForCausalLM" << logits << "LlamaForCausalLM";
    QTest::newRow("shape mismatch") << "config hidden_size 48" << logits << "model.embed_tokens.weight";
    QTest::newRow("prompt longer than context") << "config max_position_embeddings 2" << logits << "context";
    QTest::newRow("generate without tokenizer") << "rm tokenizer.model" << QStringList{"generate", "--model", "@DIR", "--prompt", "hi"} << "tokenizer.model";
    QTest::newRow("eval same precisions") << "" << QStringList{"eval", "--model", "@DIR", "--precision", "fp8", "--baseline", "fp8"} << "the same";
    QTest::newRow("fp8 KV on the CPU") << "" << QStringList{"logits", "--model", "@DIR", "--ids", "1,2", "--out", "@DIR/o.npy", "--kv-cache", "fp8"} << "needs the CUDA backend";
    QTest::newRow("unknown KV dtype") << "" << QStringList{"logits", "--model", "@DIR", "--ids", "1", "--out", "x", "--kv-cache", "int4"} << "int4";
    QTest::newRow("eval fp8 KV on the CPU") << "" << QStringList{"eval", "--model", "@DIR", "--precision", "bf16", "--baseline", "bf16", "--kv-cache", "fp8"} << "needs the CUDA backend";
    QTest::newRow("bench fp8 KV on the CPU") << "" << QStringList{"bench", "--shape", "ernie-4.5-0.3b", "--layers", "1", "--kv-cache", "fp8"} << "CUDA backend option";
    QTest::newRow("bench fp32 weights on CUDA")
        << "" << QStringList{"bench",     "--shape", "ernie-4.5-0.3b", "--layers", "1",
                             "--backend", "cuda",    "--precision",    "fp32"}
        << "the CPU backend's";
    QTest::newRow("bench fp32 weights of a checkpoint")
        << "" << QStringList{"bench", "--model", "@DIR", "--precision", "fp32"}
        << "--precision fp32 is for --shape";
    QTest::newRow("fp32 weights outside bench")
        << "" << QStringList{"logits", "--model", "@DIR", "--ids", "1", "--out", "x", "--precision", "fp32"}
        << "fp32";
    QTest::newRow("eval text without tokenizer") << "rm tokenizer.model" << QStringList{"eval", "--model", "@DIR", "--text", "@DIR/config.json"} << "tokenizer.model";
    QTest::newRow("bad temperature") << "" << QStringList{"generate", "--model", "@DIR", "--prompt", "hi", "--temperature", "-1"} << "temperature";
    QTest::newRow("serve without a model") << "" << QStringList{"serve", "--port", "0"} << "serve needs --model DIR or --shape NAME";
    QTest::newRow("serve unknown shape") << "" << QStringList{"serve", "--shape", "ernie-9", "--port", "0"} << "ernie-9";
    QTest::newRow("serve model and shape") << "" << QStringList{"serve", "--model", "@DIR", "--shape", "ernie-4.5-0.3b"} << "excludes";
    QTest::newRow("serve-bench intervention on a dense layer")
        << "" << QStringList{"serve-bench", "--model", "@DIR", "--requests", "1", "--concurrency", "1", "--disable-experts", "0:1"}
        << "layer 0";
    QTest::newRow("serve-bench intervention over HTTP")
        << "" << QStringList{"serve-bench", "--url", "http://127.0.0.1:9", "--moe-top-k", "1"} << "in-process engine only";
}

void TestCli::failures() {
    QFETCH(QString, setup);
    QFETCH(QStringList, args);
    QFETCH(QString, expected);
    QTemporaryDir tmp;
    const QString dir = tmp.filePath("model");
    copy_dir(data_dir + "/moe-shared", dir);
    const QStringList op = setup.split(' ');
    if (op[0] == "rm") {
        QVERIFY(QFile::remove(dir + "/" + op[1]));
    } else if (op[0] == "write") {
        QFile f(dir + "/" + op[1]);
        QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
        f.write(op[2].toUtf8());
    } else if (op[0] == "truncate") {
        QFile f(dir + "/" + op[1]);
        QVERIFY(f.resize(f.size() / 2));
    } else if (op[0] == "config") {
        QFile f(dir + "/config.json");
        QVERIFY(f.open(QIODevice::ReadOnly));
        QByteArray text = f.readAll();
        f.close();
        // Replace the key's value textually: "key": value → "key": new
        QRegularExpression re("\"" + op[1] + "\": (\\[[^\\]]*\\]|[^,\\n]+)");
        QVERIFY2(re.match(text).hasMatch(), qPrintable(op[1]));
        const bool is_text = op[2].at(0).isLetter();
        const QString value = op[1] == "architectures" ? "[\"" + op[2] + "\"]" : is_text ? "\"" + op[2] + "\"" : op[2];
        text = QString::fromUtf8(text).replace(re, "\"" + op[1] + "\": " + value).toUtf8();
        QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
        f.write(text);
    }
    for (QString &a : args) a.replace("@DIR", dir);
    const run_result r = run_cli(args);
    QVERIFY2(r.exit_code > 0, qPrintable(QString("exit %1, stderr: %2").arg(r.exit_code).arg(r.err)));
    const QStringList lines = r.err.trimmed().split('\n');
    QVERIFY2(lines.size() == 1, qPrintable("expected one line, got: " + r.err));
    QVERIFY2(lines[0].startsWith("error: "), qPrintable(lines[0]));
    QVERIFY2(lines[0].contains(expected), qPrintable("'" + expected + "' not in: " + lines[0]));
}

void TestCli::info() {
    const run_result r = run_cli({"info", "--model", data_dir + "/moe-odd"});
    QCOMPARE(r.exit_code, 0);
    QVERIFY(r.out.contains("Ernie4_5_MoeForCausalLM"));
    QVERIFY(r.out.contains("6 routed (top-3"));
    QVERIFY(r.out.contains("weight files     ok"));
    const run_result j = run_cli({"info", "--model", data_dir + "/dense", "--json"});
    QCOMPARE(j.exit_code, 0);
    QVERIFY(j.out.contains("\"head_dim\": 32"));
}

void TestCli::generateIsDeterministicPerSeed() {
    const QStringList base{"generate", "--model", data_dir + "/moe-shared", "--prompt", "The router picks",
                           "--max-tokens", "12", "--temperature", "1.0", "--top-k", "50"};
    const run_result a = run_cli(base + QStringList{"--seed", "7"});
    const run_result b = run_cli(base + QStringList{"--seed", "7"});
    QCOMPARE(a.exit_code, 0);
    QCOMPARE(b.exit_code, 0);
    QCOMPARE(a.out, b.out);
    QVERIFY2(a.err.contains("decode") && a.err.contains("TTFT"), qPrintable(a.err));
}

void TestCli::generateChat() {
    const run_result r = run_cli({"generate", "--model", data_dir + "/dense", "--chat", "--system", "你是助手",
                                  "--prompt", "【技术解析模式】什么是专家混合？", "--max-tokens", "8", "--temperature", "0"});
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    QVERIFY(r.err.contains("finish: "));
}

void TestCli::version() {
    const run_result r = run_cli({"--version"});
    QCOMPARE(r.exit_code, 0);
    QVERIFY(r.out.contains("expertscope-cli"));
}

// eval: FP8 weights (emulated on the CPU) against the exact checkpoint — a small but non-zero
// cost; BF16 against the exact values of a BF16 checkpoint — none at all.
void TestCli::evalMeasuresPrecision() {
    QTemporaryDir tmp;
    const QString json = tmp.filePath("eval.json");
    const run_result r = run_cli({"eval", "--model", data_dir + "/moe-shared", "--windows", "2", "--ctx", "40", "--json", json});
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    QVERIFY(r.out.contains("top-1 agreement"));
    QVERIFY(r.out.contains("expert-set overlap"));
    QFile f(json);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QJsonObject j = QJsonDocument::fromJson(f.readAll()).object();
    QCOMPARE(j["positions"].toInt(), 80);
    QVERIFY(j["kl_mean"].toDouble() > 0 && j["kl_mean"].toDouble() < 0.5);
    QVERIFY(j["kl_max"].toDouble() >= j["kl_p99"].toDouble());
    QVERIFY(j["top1_agreement"].toDouble() > 0.5 && j["top1_agreement"].toDouble() <= 1.0);
    QVERIFY(j["router_overlap"].toDouble() > 0.5 && j["router_overlap"].toDouble() <= 1.0);
    QCOMPARE(j["router"].toArray().size(), 2); // moe-shared: MoE layers 1 and 2
    // The reference checkpoints are stored in BF16: rounding to BF16 changes nothing.
    const run_result b = run_cli({"eval", "--model", data_dir + "/moe-shared", "--precision", "bf16", "--windows", "1",
                                  "--ctx", "24", "--json", json});
    QVERIFY2(b.exit_code == 0, qPrintable(b.err));
    QFile g(json);
    QVERIFY(g.open(QIODevice::ReadOnly));
    const QJsonObject k = QJsonDocument::fromJson(g.readAll()).object();
    QCOMPARE(k["kl_max"].toDouble(), 0.0);
    QCOMPARE(k["top1_agreement"].toDouble(), 1.0);
    QCOMPARE(k["router_identical"].toDouble(), 1.0);
}

// bench on the CPU: --precision says how the weights are held, and the decode bytes it reports
// are those: BF16 half of fp32 (the fp32 norms aside), E4M3 linears less again.
// serve-bench runs every request under the expert intervention it is given, through the engine.
void TestCli::serveBenchUnderAnIntervention() {
    const run_result r = run_cli({"serve-bench", "--model", data_dir + "/moe-shared", "--requests", "2", "--concurrency",
                                  "1", "--prompt-len", "8", "--output-len", "4", "--shared-prefix", "0",
                                  "--disable-experts", "*:0", "--moe-top-k", "1"},
                                 120000);
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    QVERIFY2(r.err.contains("every request under the expert intervention: disable *:0; top-k 1"), qPrintable(r.err));
}

void TestCli::benchHoldsWeightsAsPrecisionSays() {
    QTemporaryDir tmp;
    std::map<QString, double> bytes;
    for (const char *prec : {"fp32", "bf16", "fp8"}) {
        const QString json = tmp.filePath(QString(prec) + ".json");
        const run_result r = run_cli({"bench", "--shape", "ernie-4.5-0.3b", "--layers", "1", "--pp", "8",
                                      "--tg", "2", "--reps", "1", "--precision", prec, "--json", json},
                                     120000);
        QVERIFY2(r.exit_code == 0, qPrintable(r.err));
        QFile f(json);
        QVERIFY(f.open(QIODevice::ReadOnly));
        const QJsonObject o = QJsonDocument::fromJson(f.readAll()).object();
        QCOMPARE(o["precision"].toString(), QString(prec));
        bytes[prec] = o["decode_bytes_per_token"].toDouble();
        const QString held = QString(prec) == "fp8" ? "fp8-e4m3 weights" : QString(prec) + " weights";
        QVERIFY2(r.out.contains(held), qPrintable(r.out));
    }
    QVERIFY2(bytes["bf16"] > 0.5 * bytes["fp32"] && bytes["bf16"] < 0.501 * bytes["fp32"],
             qPrintable(QString("%1 of %2").arg(bytes["bf16"]).arg(bytes["fp32"])));
    QVERIFY(bytes["fp8"] <
            bytes["bf16"]); // the linears at a byte; the head (most of one layer's bytes) stays BF16
}

QTEST_GUILESS_MAIN(TestCli)
#include "test_cli.moc"
