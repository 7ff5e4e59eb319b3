// The client-side Prometheus text parser (app/session/prometheus_text): the exposition grammar
// (HELP/TYPE, labels with escapes, ±Inf/NaN, timestamps, blank and CRLF lines), sums over label
// matches, and malformed lines counted with the first one named.
#include "prometheus_text.h"

#include <QtTest>

#include <cmath>

using namespace es;

class TestPrometheusText : public QObject {
    Q_OBJECT
private slots:
    void samples_data();
    void samples();
    void malformed_data();
    void malformed();
    void typesAndSums();
    void vllmStyleExposition();
};

void TestPrometheusText::samples_data() {
    QTest::addColumn<QByteArray>("text");
    QTest::addColumn<QString>("name");
    QTest::addColumn<QString>("labelKey");
    QTest::addColumn<QString>("labelValue");
    QTest::addColumn<double>("value");
    QTest::newRow("plain") << QByteArray("up 1\n") << "up"
                           << ""
                           << "" << 1.0;
    QTest::newRow("colon name, labels")
        << QByteArray("vllm:num_requests_running{model_name=\"m\"} 3\n") << "vllm:num_requests_running"
        << "model_name"
        << "m" << 3.0;
    QTest::newRow("exponent") << QByteArray("x_total 1.5e+03\n") << "x_total"
                              << ""
                              << "" << 1500.0;
    QTest::newRow("negative") << QByteArray("g -2.25") << "g"
                              << ""
                              << "" << -2.25;
    QTest::newRow("+Inf le") << QByteArray("h_bucket{le=\"+Inf\"} 7\n") << "h_bucket"
                             << "le"
                             << "+Inf" << 7.0;
    QTest::newRow("escaped quote, backslash, newline") << QByteArray("m{path=\"a\\\"b\\\\c\\nd\"} 1\n") << "m"
                                                       << "path"
                                                       << "a\"b\\c\nd" << 1.0;
    QTest::newRow("trailing comma, spaces, tabs") << QByteArray("m{ a=\"1\" , b=\"2\", }\t 4\n") << "m"
                                                  << "b"
                                                  << "2" << 4.0;
    QTest::newRow("timestamp") << QByteArray("m 5 1700000000000\n") << "m"
                               << ""
                               << "" << 5.0;
    QTest::newRow("CRLF and blank lines") << QByteArray("\r\n\n# HELP m help text\r\nm{k=\"v\"} 9\r\n") << "m"
                                          << "k"
                                          << "v" << 9.0;
    QTest::newRow("utf-8 label value") << QByteArray("m{name=\"\xe4\xbd\xa0\xe5\xa5\xbd\"} 2\n") << "m"
                                       << "name" << QString::fromUtf8("你好") << 2.0;
}

void TestPrometheusText::samples() {
    QFETCH(QByteArray, text);
    QFETCH(QString, name);
    QFETCH(QString, labelKey);
    QFETCH(QString, labelValue);
    QFETCH(double, value);
    const PromExposition p = parsePrometheusText(text);
    QCOMPARE(p.malformedLines, 0);
    QCOMPARE(p.samples.size(), 1);
    QCOMPARE(p.samples[0].name, name);
    QCOMPARE(p.samples[0].value, value);
    if (!labelKey.isEmpty()) QCOMPARE(p.samples[0].label(labelKey), labelValue);
}

void TestPrometheusText::malformed_data() {
    QTest::addColumn<QByteArray>("text");
    QTest::addColumn<QString>("error");
    QTest::newRow("no value") << QByteArray("ok 1\nbroken\n") << "line 2: expected a space before the value";
    QTest::newRow("not a number") << QByteArray("m abc\n") << "line 1: 'abc' is not a number";
    QTest::newRow("unterminated label")
        << QByteArray("m{a=\"x} 1\n") << "line 1: unterminated value of label a";
    QTest::newRow("unquoted label") << QByteArray("m{a=1} 1\n")
                                    << "line 1: expected a quoted value for label a";
    QTest::newRow("bad name") << QByteArray("9m 1\n") << "line 1: expected a metric name";
    QTest::newRow("bad type") << QByteArray("# TYPE m widget\nm 1\n") << "line 1: malformed # TYPE line";
    QTest::newRow("junk after timestamp")
        << QByteArray("m 1 2 3\n") << "line 1: unexpected text after the timestamp";
}

void TestPrometheusText::malformed() {
    QFETCH(QByteArray, text);
    QFETCH(QString, error);
    const PromExposition p = parsePrometheusText(text);
    QCOMPARE(p.malformedLines, 1);
    QCOMPARE(p.firstError, error);
}

void TestPrometheusText::typesAndSums() {
    const PromExposition p = parsePrometheusText("# HELP es:t tokens\n# TYPE es:t counter\n"
                                                 "es:t{layer=\"1\",expert=\"0\"} 3\n"
                                                 "es:t{layer=\"1\",expert=\"1\"} 4\n"
                                                 "es:t{layer=\"2\",expert=\"0\"} 10\n"
                                                 "nan_gauge NaN\n");
    QCOMPARE(p.types.value("es:t"), QString("counter"));
    QCOMPARE(p.family("es:t").size(), 3);
    QCOMPARE(*p.sum("es:t"), 17.0);
    QCOMPARE(*p.sum("es:t", {{"layer", "1"}}), 7.0);
    QCOMPARE(*p.sum("es:t", {{"layer", "2"}, {"expert", "0"}}), 10.0);
    QVERIFY(!p.sum("es:t", {{"layer", "3"}}));
    QVERIFY(!p.sum("absent"));
    QVERIFY(std::isnan(*p.sum("nan_gauge")));
    QVERIFY(p.has("nan_gauge"));
}

// The shape of a vLLM 0.x /metrics page (abridged): histograms, info gauges with labels.
void TestPrometheusText::vllmStyleExposition() {
    const QByteArray text =
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
        "# TYPE vllm:cache_config_info gauge\n"
        "vllm:cache_config_info{block_size=\"16\",cache_dtype=\"auto\",num_gpu_blocks=\"27000\"} 1.0\n"
        "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n"
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        "vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"baidu/ERNIE-4.5-21B-A3B-PT\"} 0.25\n"
        "# TYPE vllm:time_to_first_token_seconds histogram\n"
        "vllm:time_to_first_token_seconds_bucket{le=\"0.001\",model_name=\"m\"} 0.0\n"
        "vllm:time_to_first_token_seconds_bucket{le=\"+Inf\",model_name=\"m\"} 12.0\n"
        "vllm:time_to_first_token_seconds_count{model_name=\"m\"} 12.0\n"
        "vllm:time_to_first_token_seconds_sum{model_name=\"m\"} 0.84\n";
    const PromExposition p = parsePrometheusText(text);
    QCOMPARE(p.malformedLines, 0);
    QCOMPARE(p.samples.size(), 6);
    QCOMPARE(p.family("vllm:cache_config_info").first().label("num_gpu_blocks"), QString("27000"));
    QCOMPARE(*p.sum("vllm:kv_cache_usage_perc"), 0.25);
    QCOMPARE(p.types.value("vllm:time_to_first_token_seconds"), QString("histogram"));
    QCOMPARE(*p.sum("vllm:time_to_first_token_seconds_bucket", {{"le", "+Inf"}}), 12.0);
}

QTEST_GUILESS_MAIN(TestPrometheusText)
#include "test_prometheus_text.moc"
