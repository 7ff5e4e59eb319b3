// The CUDA backend as a run-time module, as a user meets it: expertscope and expertscope-cli need
// no CUDA library to start; --version names the backends and, when CUDA cannot be used, why;
// EXPERTSCOPE_CUDA_MODULE pointing at a missing file, a library that is not a module, a module of
// another ABI or build, or one whose dependencies are missing leaves the CLI on the CPU with the
// reason naming the problem; --backend cuda fails with that reason, --backend auto runs on the CPU.
// Holds on a machine with or without a GPU: the expected outcome follows what --version reports.
#include <QProcess>
#include <QProcessEnvironment>
#include <QRegularExpression>
#include <QtTest>

namespace {

struct run_result {
    int exit_code = -1;
    QString out, err;
};

run_result run(const QString &program, const QStringList &args, const QProcessEnvironment &env) {
    QProcess p;
    p.setProcessEnvironment(env);
    p.start(program, args);
    run_result r;
    if (!p.waitForFinished(60000)) {
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

QProcessEnvironment env_with_module(const QString &module) {
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.remove("EXPERTSCOPE_CUDA_MODULE");
    if (!module.isNull()) env.insert("EXPERTSCOPE_CUDA_MODULE", module);
    return env;
}

run_result cli(const QStringList &args, const QString &module = QString()) {
    return run(QStringLiteral(ES_CLI_PATH), args, env_with_module(module));
}

// "backends: …" line of --version: "cpu, cuda (…)" or "cpu; cuda unavailable: <reason>".
QString backends_line(const QString &version_text) {
    for (const QString &l : version_text.split('\n'))
        if (l.startsWith("backends: ")) return l;
    return {};
}

QString unavailable_reason(const QString &version_text) {
    const QString l = backends_line(version_text);
    const QString tag = QStringLiteral("cuda unavailable: ");
    const qsizetype i = l.indexOf(tag);
    return i < 0 ? QString() : l.mid(i + tag.size());
}

const QString data_dir = QStringLiteral(ES_TEST_DATA_DIR);
const QStringList generate_args{"generate",     "--model", data_dir + "/dense", "--prompt", "hello",
                                "--max-tokens", "2",       "--temperature",     "0"};

// The NEEDED entries of an ELF file (readelf -d).
QStringList needed(const QString &file) {
    QProcess p;
    p.start("readelf", {"-d", file});
    if (!p.waitForFinished(30000) || p.exitCode() != 0) return {"readelf failed: " + p.errorString()};
    QStringList out;
    static const QRegularExpression re(R"(\(NEEDED\)\s+Shared library: \[([^\]]+)\])");
    for (const auto &m : re.globalMatch(QString::fromUtf8(p.readAllStandardOutput()))) out << m.captured(1);
    return out;
}

} // namespace

class TestCudaModule : public QObject {
    Q_OBJECT
private slots:
    void executablesNeedNoCudaLibrary_data();
    void executablesNeedNoCudaLibrary();
    void versionNamesBackends();
    void guiVersionNeedsNoDisplay();
    void backendsFollowTheStatus();
    void brokenModuleLeavesTheCpu_data();
    void brokenModuleLeavesTheCpu();
    void moduleOfThisBuildLoads();
};

void TestCudaModule::executablesNeedNoCudaLibrary_data() {
    QTest::addColumn<QString>("file");
    QTest::newRow("expertscope-cli") << QStringLiteral(ES_CLI_PATH);
#ifdef ES_GUI_PATH
    QTest::newRow("expertscope") << QStringLiteral(ES_GUI_PATH);
#endif
}

void TestCudaModule::executablesNeedNoCudaLibrary() {
    QFETCH(QString, file);
    const QStringList libs = needed(file);
    QVERIFY2(!libs.isEmpty() && !libs.first().startsWith("readelf failed"), qPrintable(libs.join(", ")));
    QVERIFY2(libs.contains("libc.so.6"), qPrintable(libs.join(", ")));
    static const QRegularExpression cuda(
        R"(^lib(cudart|cublas|cublasLt|cuda|nvidia|nvrtc|cufft|curand)[.-])");
    for (const QString &l : libs) QVERIFY2(!cuda.match(l).hasMatch(), qPrintable(file + " needs " + l));
}

void TestCudaModule::versionNamesBackends() {
    const run_result r = cli({"--version"});
    QCOMPARE(r.exit_code, 0);
    QVERIFY2(r.out.startsWith("expertscope-cli ") && r.out.contains("(commit "), qPrintable(r.out));
    QVERIFY2(r.out.contains("\nQt: ") && r.out.contains("\nCUDA: "), qPrintable(r.out));
    const QString b = backends_line(r.out);
    QVERIFY2(b.startsWith("backends: cpu"), qPrintable(r.out));
    // Either CUDA is usable (with its device) or the line says why not, in words.
    QVERIFY2(b.startsWith("backends: cpu, cuda (") || unavailable_reason(r.out).size() > 10, qPrintable(b));
#ifndef ES_CUDA_MODULE_PATH
    QVERIFY2(b.contains("this build has no CUDA backend"), qPrintable(b));
#endif
}

void TestCudaModule::guiVersionNeedsNoDisplay() {
#ifndef ES_GUI_PATH
    QSKIP("this build has no desktop app");
#else
    QProcessEnvironment env = env_with_module(QString());
    for (const char *v : {"DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM"}) env.remove(v);
    const run_result r = run(QStringLiteral(ES_GUI_PATH), {"--version"}, env);
    QVERIFY2(r.exit_code == 0, qPrintable(r.err));
    QVERIFY2(r.out.startsWith("expertscope ") && r.out.contains("\nQt 6."), qPrintable(r.out));
    QVERIFY2(backends_line(r.out).startsWith("backends: cpu"), qPrintable(r.out));
    // The same answer as the CLI's (same loader, same machine).
    QCOMPARE(backends_line(r.out), backends_line(cli({"--version"}).out));
#endif
}

void TestCudaModule::backendsFollowTheStatus() {
    const QString reason = unavailable_reason(cli({"--version"}).out);
    const run_result cuda = cli(QStringList(generate_args) << "--backend"
                                                           << "cuda");
    const run_result automatic = cli(QStringList(generate_args) << "--backend"
                                                                << "auto");
    QVERIFY2(automatic.exit_code == 0, qPrintable(automatic.err));
    if (reason.isEmpty()) { // a usable GPU here
        QVERIFY2(cuda.exit_code == 0, qPrintable(cuda.err));
        QVERIFY2(automatic.err.contains("[cuda"), qPrintable(automatic.err));
        return;
    }
    QCOMPARE(cuda.exit_code, 1);
    QVERIFY2(cuda.err.contains("the CUDA backend cannot run here: " + reason), qPrintable(cuda.err));
    QVERIFY2(automatic.err.contains("[cpu") && automatic.err.contains("note: CUDA not used: " + reason),
             qPrintable(automatic.err));
    const run_result bench =
        cli({"bench", "--shape", "ernie-4.5-0.3b", "--layers", "1", "--backend", "cuda"});
    QCOMPARE(bench.exit_code, 1);
    QVERIFY2(bench.err.contains(reason), qPrintable(bench.err));
    const run_result selftest = cli({"selftest", "--data", data_dir});
    QCOMPARE(selftest.exit_code, 0);
    QVERIFY2(selftest.out.contains("selftest: skipped (" + reason + ")"), qPrintable(selftest.out));
}

void TestCudaModule::brokenModuleLeavesTheCpu_data() {
    QTest::addColumn<QString>("module");
    QTest::addColumn<QString>("expected"); // in the reason
#ifndef ES_CUDA_MODULE_PATH
    // Without CUDA in the build no module is looked for, whatever the variable says.
    QTest::newRow("no CUDA in the build") << "/nonexistent/libexpertscope-cuda.so"
                                          << "this build has no CUDA backend";
#else
    QTest::newRow("missing file")
        << "/nonexistent/libexpertscope-cuda.so"
        << "EXPERTSCOPE_CUDA_MODULE names /nonexistent/libexpertscope-cuda.so, which is not a file";
    QTest::newRow("a folder") << data_dir << "which is not a file";
    QTest::newRow("not a library") << data_dir + "/dense/config.json"
                                   << "cannot load the CUDA module " + data_dir + "/dense/config.json";
    QTest::newRow("not a module") << ES_FAKE_CUDA_MODULE_1
                                  << QString(ES_FAKE_CUDA_MODULE_1) + " is not an ExpertScope CUDA module";
    QTest::newRow("another ABI") << ES_FAKE_CUDA_MODULE_2 << "has module ABI 999, this program needs";
    QTest::newRow("another build") << ES_FAKE_CUDA_MODULE_3 << "was built as 0.0.0+another-build";
    QTest::newRow("missing dependency")
        << ES_FAKE_CUDA_MODULE_4 << "libes_fake_missing_dependency.so: cannot open shared object file";
#endif
}

void TestCudaModule::brokenModuleLeavesTheCpu() {
    QFETCH(QString, module);
    QFETCH(QString, expected);
    const run_result v = cli({"--version"}, module);
    QVERIFY2(v.exit_code == 0, qPrintable(v.err));
    const QString reason = unavailable_reason(v.out);
    QVERIFY2(reason.contains(expected), qPrintable(v.out));
    const run_result automatic = cli(QStringList(generate_args) << "--backend"
                                                                << "auto",
                                     module);
    QVERIFY2(automatic.exit_code == 0, qPrintable(automatic.err));
    QVERIFY2(automatic.err.contains("[cpu") && automatic.err.contains("note: CUDA not used: " + reason),
             qPrintable(automatic.err));
    const run_result cuda = cli(QStringList(generate_args) << "--backend"
                                                           << "cuda",
                                module);
    QCOMPARE(cuda.exit_code, 1);
    QVERIFY2(cuda.err.contains("the CUDA backend cannot run here: " + reason), qPrintable(cuda.err));
}

void TestCudaModule::moduleOfThisBuildLoads() {
#ifndef ES_CUDA_MODULE_PATH
    QSKIP("this build has no CUDA module");
#else
    // Found next to the executable in the build tree, and loadable here (its libcublasLt is
    // found) whether or not a GPU is present: what remains is a device question.
    for (const QString &module : {QString(), QStringLiteral(ES_CUDA_MODULE_PATH)}) {
        const run_result r = cli({"--version"}, module);
        QCOMPARE(r.exit_code, 0);
        QVERIFY2(r.out.contains("\nCUDA module: " + QFileInfo(ES_CUDA_MODULE_PATH).absoluteFilePath()) ||
                     r.out.contains("\nCUDA module: " + QFileInfo(ES_CUDA_MODULE_PATH).canonicalFilePath()),
                 qPrintable(r.out));
        QVERIFY2(r.out.contains(", runtime ") && r.out.contains("kernels for sm_"), qPrintable(r.out));
    }
    // The module exports its entry point and nothing else.
    QProcess nm;
    nm.start("nm", {"-D", "--defined-only", ES_CUDA_MODULE_PATH});
    QVERIFY(nm.waitForFinished(30000));
    const QStringList lines = QString::fromUtf8(nm.readAllStandardOutput()).split('\n', Qt::SkipEmptyParts);
    QCOMPARE(lines.size(), 1);
    QVERIFY2(lines.first().endsWith(" T es_cuda_module_entry"), qPrintable(lines.first()));
#endif
}

QTEST_GUILESS_MAIN(TestCudaModule)
#include "test_cuda_module.moc"
