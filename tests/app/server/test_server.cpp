// expertscope-cli serve as a client meets it: the real server process on 127.0.0.1 (a free port
// it picks and prints), driven over loopback with cpp-httplib's client. Answers equal the
// engine's own (generate, and the engine in-process); concurrent clients share engine steps;
// a client that goes away mid-stream frees its request; /metrics parses as Prometheus text and
// moves as it should; malformed requests get 4xx with an OpenAI error body and the server stays
// up; SIGTERM shuts it down cleanly. In process, a server made on an engine its owner loaded
// serves that model beside the owner's own requests, logs each answer with its token counts, and
// leaves the engine working when it stops. Every wait is bounded.
#include "api_server.h"
#include "engine/runtime/engine.h"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <QProcess>
#include <QRegularExpression>
#include <QtTest>

#include "engine_generate.h"
#include "serve_process.h"

#include <atomic>
#include <cmath>
#include <cstring>
#include <chrono>
#include <map>
#include <thread>

using nlohmann::json;

namespace {

const QString data_dir = QStringLiteral(ES_TEST_DATA_DIR);
const std::string model_dir = std::string(ES_TEST_DATA_DIR) + "/moe-shared";
const std::string api_key = "test-key-123";

struct http_result {
    int status = -1;
    std::string body;
};

// One parsed Prometheus exposition: series text ("name{labels}") → value, and family → type.
struct prom {
    std::map<std::string, double> series;
    std::vector<std::pair<std::string, double>> ordered;  // as exposed
    std::map<std::string, std::string> types;
    std::string error;  // first malformed line, empty when all parsed

    double get(const std::string &name, const std::string &labels_contain = "") const {
        for (const auto &[k, v] : series) {
            const auto brace = k.find('{');
            if (k.substr(0, brace) != name) continue;
            if (!labels_contain.empty() && k.find(labels_contain) == std::string::npos) continue;
            return v;
        }
        return -1.0;
    }
    double sum(const std::string &name) const {
        double s = 0.0;
        for (const auto &[k, v] : series)
            if (k.substr(0, k.find('{')) == name) s += v;
        return s;
    }
};

prom parse_prometheus(const std::string &text) {
    prom p;
    static const QRegularExpression sample_re(
        R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*")(,[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\]|\\.)*")*\})? ([-+]?(?:[0-9.eE+-]+|Inf|NaN))$)");
    static const QRegularExpression type_re(R"(^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped)$)");
    size_t pos = 0;
    while (pos < text.size()) {
        size_t nl = text.find('\n', pos);
        if (nl == std::string::npos) nl = text.size();
        const QString line = QString::fromStdString(text.substr(pos, nl - pos));
        pos = nl + 1;
        if (line.isEmpty()) continue;
        if (line.startsWith("# TYPE")) {
            auto m = type_re.match(line);
            if (!m.hasMatch()) { p.error = line.toStdString(); break; }
            p.types[m.captured(1).toStdString()] = m.captured(2).toStdString();
            continue;
        }
        if (line.startsWith("#")) continue;
        auto m = sample_re.match(line);
        if (!m.hasMatch()) { p.error = line.toStdString(); break; }
        std::string name = m.captured(1).toStdString();
        // The family must have been typed before its samples.
        std::string family = name;
        for (const char *suffix : {"_bucket", "_sum", "_count"})
            if (!p.types.count(family) && family.size() > strlen(suffix) &&
                family.compare(family.size() - strlen(suffix), strlen(suffix), suffix) == 0)
                family = family.substr(0, family.size() - strlen(suffix));
        if (!p.types.count(family)) { p.error = "untyped sample: " + line.toStdString(); break; }
        const std::string key = name + m.captured(2).toStdString();
        const QString value = m.captured(5);
        const double v = value == "+Inf" || value == "Inf" ? INFINITY : value.toDouble();
        if (p.series.count(key)) { p.error = "duplicate series: " + key; break; }
        p.series[key] = v;
        p.ordered.emplace_back(key, v);
    }
    return p;
}

} // namespace

class TestServer : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void cleanupTestCase();
    void models();
    void answersEqualGenerate_data();
    void answersEqualGenerate();
    void tokenPromptEqualsEngine();
    void metricsParseAndMove();
    void concurrentClientsAreBatched();
    void disconnectFreesRequest();
    void nonStreamingDisconnectFreesRequest();
    void malformed_data();
    void malformed();
    void sharedEngineServesBesideItsOwner();

private:
    http_result request(const std::string &method, const std::string &path, const std::string &body = "",
                        const std::string &key = api_key);
    prom scrape();
    // Scrapes until the engine is idle and its telemetry snapshot has caught up (the engine
    // publishes at most every 10 ms and when it goes idle), bounded to 3 s.
    prom settled_scrape();
    // Streams a request; returns the concatenated text, the usage chunk and every raw event.
    struct stream_result {
        int status = -1;
        std::string text, finish;
        json usage;
        std::vector<std::string> events;
    };
    stream_result stream(const std::string &path, json body);

    QProcess m_server;
    int m_port = 0;
};

void TestServer::initTestCase() {
    const QString started =
        es_test::start_serve(m_server,
                             {"--model", QString::fromStdString(model_dir), "--port", "0", "--api-key",
                              QString::fromStdString(api_key), "--max-body-bytes", "65536",
                              "--max-prompt-tokens", "200", "--threads", "2"},
                             &m_port);
    QVERIFY2(started.isEmpty(), qPrintable(started));
    QCOMPARE(request("GET", "/health", "", "").status, 200);
}

void TestServer::cleanupTestCase() {
    if (m_server.state() != QProcess::Running) return;
    m_server.terminate();  // SIGTERM: graceful shutdown
    const bool clean = m_server.waitForFinished(15000);
    if (!clean) {
        m_server.kill();
        m_server.waitForFinished(5000);
    }
    QVERIFY2(clean, "the server did not stop within 15 s of SIGTERM");
    QCOMPARE(m_server.exitStatus(), QProcess::NormalExit);
    QCOMPARE(m_server.exitCode(), 0);
    QVERIFY(m_server.readAllStandardError().contains("shutting down"));
}

http_result TestServer::request(const std::string &method, const std::string &path, const std::string &body,
                                const std::string &key) {
    httplib::Client cli("127.0.0.1", m_port);
    cli.set_connection_timeout(5, 0);
    cli.set_read_timeout(120, 0);
    cli.set_write_timeout(30, 0);
    httplib::Headers h;
    if (!key.empty()) h.emplace("Authorization", "Bearer " + key);
    httplib::Result res = method == "GET" ? cli.Get(path.c_str(), h) : cli.Post(path.c_str(), h, body, "application/json");
    http_result r;
    if (res) {
        r.status = res->status;
        r.body = res->body;
    }
    return r;
}

prom TestServer::scrape() {
    const http_result r = request("GET", "/metrics", "", "");
    prom p = parse_prometheus(r.body);
    if (r.status != 200) p.error = "GET /metrics: HTTP " + std::to_string(r.status);
    return p;
}

prom TestServer::settled_scrape() {
    prom p = scrape();
    for (int i = 0; i < 100; ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
        prom q = scrape();
        const bool same = q.get("expertscope:engine_steps_total") == p.get("expertscope:engine_steps_total");
        p = std::move(q);
        if (same && p.get("vllm:num_requests_running") == 0 && p.get("vllm:num_requests_waiting") == 0) break;
    }
    return p;
}

TestServer::stream_result TestServer::stream(const std::string &path, json body) {
    body["stream"] = true;
    stream_result s;
    httplib::Client cli("127.0.0.1", m_port);
    cli.set_connection_timeout(5, 0);
    cli.set_read_timeout(120, 0);
    httplib::Request req;
    req.method = "POST";
    req.path = path;
    req.set_header("Authorization", "Bearer " + api_key);
    req.set_header("Content-Type", "application/json");
    req.body = body.dump();
    std::string buf;
    req.content_receiver = [&](const char *data, size_t n, uint64_t, uint64_t) {
        buf.append(data, n);
        for (size_t p; (p = buf.find("\n\n")) != std::string::npos;) {
            std::string ev = buf.substr(0, p);
            buf.erase(0, p + 2);
            s.events.push_back(ev);
            if (ev.rfind("data: ", 0) != 0 || ev == "data: [DONE]") continue;
            const json j = json::parse(ev.substr(6), nullptr, false);
            if (j.is_discarded()) continue;
            if (j.contains("usage") && j["usage"].is_object()) s.usage = j["usage"];
            if (!j.contains("choices") || j["choices"].empty()) continue;
            const json &c = j["choices"][0];
            if (c.contains("delta") && c["delta"].contains("content")) s.text += c["delta"]["content"].get<std::string>();
            if (c.contains("text")) s.text += c["text"].get<std::string>();
            if (!c["finish_reason"].is_null()) s.finish = c["finish_reason"].get<std::string>();
        }
        return true;
    };
    auto res = cli.send(req);
    if (res) s.status = res->status;
    return s;
}

void TestServer::models() {
    const http_result r = request("GET", "/v1/models");
    QCOMPARE(r.status, 200);
    const json j = json::parse(r.body);
    QCOMPARE(j["object"].get<std::string>(), std::string("list"));
    QCOMPARE(j["data"].size(), size_t(1));
    QCOMPARE(j["data"][0]["id"].get<std::string>(), std::string("moe-shared"));
    QCOMPARE(request("GET", "/v1/models", "", "").status, 401);
}

void TestServer::answersEqualGenerate_data() {
    QTest::addColumn<QString>("prompt");
    QTest::addColumn<double>("temperature");
    QTest::addColumn<int>("seed");
    QTest::addColumn<int>("max_tokens");
    QTest::newRow("greedy 24") << "Hello" << 0.0 << 1 << 24;
    QTest::newRow("sampled 40 seed 7") << "Tell me about the experts." << 0.8 << 7 << 40;
    QTest::newRow("sampled 1 token") << "你好" << 1.0 << 3 << 1;
}

void TestServer::answersEqualGenerate() {
    QFETCH(QString, prompt);
    QFETCH(double, temperature);
    QFETCH(int, seed);
    QFETCH(int, max_tokens);
    QProcess gen;
    gen.start(ES_CLI_PATH, {"generate", "--model", QString::fromStdString(model_dir), "--prompt", prompt, "--chat",
                            "--seed", QString::number(seed), "--temperature", QString::number(temperature),
                            "--max-tokens", QString::number(max_tokens), "--threads", "2"});
    QVERIFY(gen.waitForFinished(60000));
    QCOMPARE(gen.exitCode(), 0);
    std::string expected = gen.readAllStandardOutput().toStdString();
    QVERIFY(!expected.empty() && expected.back() == '\n');
    expected.pop_back();  // generate ends with a newline

    const json body = {{"model", "moe-shared"},
                       {"messages", {{{"role", "user"}, {"content", prompt.toStdString()}}}},
                       {"temperature", temperature},
                       {"seed", seed},
                       {"max_tokens", max_tokens}};
    const http_result r = request("POST", "/v1/chat/completions", body.dump());
    QCOMPARE(r.status, 200);
    const json j = json::parse(r.body);
    QCOMPARE(j["object"].get<std::string>(), std::string("chat.completion"));
    QCOMPARE(QString::fromStdString(j["choices"][0]["message"]["content"].get<std::string>()), QString::fromStdString(expected));
    const int n_out = j["usage"]["completion_tokens"].get<int>();
    QVERIFY(n_out >= 1 && n_out <= max_tokens);
    const std::string finish = j["choices"][0]["finish_reason"].get<std::string>();
    QVERIFY(finish == "stop" || finish == "length");
    if (finish == "length") QCOMPARE(n_out, max_tokens);
    QCOMPARE(j["usage"]["total_tokens"].get<int>(), j["usage"]["prompt_tokens"].get<int>() + n_out);

    json sbody = body;
    sbody["stream_options"] = {{"include_usage", true}};
    const stream_result s = stream("/v1/chat/completions", sbody);
    QCOMPARE(s.status, 200);
    QCOMPARE(QString::fromStdString(s.text), QString::fromStdString(expected));
    QCOMPARE(s.finish, finish);
    QVERIFY(!s.events.empty());
    QCOMPARE(s.events.back(), std::string("data: [DONE]"));
    QVERIFY(s.usage.is_object());
    QCOMPARE(s.usage["completion_tokens"].get<int>(), n_out);
    QCOMPARE(s.usage["prompt_tokens"], j["usage"]["prompt_tokens"]);
    const json first = json::parse(s.events.front().substr(6));
    QCOMPARE(first["choices"][0]["delta"]["role"].get<std::string>(), std::string("assistant"));
}

void TestServer::tokenPromptEqualsEngine() {
    const std::vector<int32_t> ids{5, 17, 3, 99, 250, 1024, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18};
    es::engine_params ep;
    ep.load.n_threads = 1;
    es::engine eng(ep);
    QVERIFY(eng.load_model(model_dir).get());
    es::request_params rp;
    rp.prompt_ids = ids;
    rp.sampling = eng.model_defaults();
    rp.sampling.temperature = 0.9f;
    rp.sampling.top_k = 20;
    rp.sampling.seed = 1234;
    rp.sampling.max_tokens = 30;
    auto st = eng.submit(rp);
    std::string expected, finish;
    es::request_event ev;
    for (int i = 0; i < 600 && finish.empty(); ++i)
        if (st->wait_pop(ev, std::chrono::milliseconds(100))) {
            QVERIFY2(ev.kind != es::event_kind::failed, ev.error.c_str());
            if (ev.kind == es::event_kind::token) expected += ev.text;
            else finish = ev.finish_reason;
        }
    QVERIFY(!finish.empty());

    const json body = {{"model", "moe-shared"}, {"prompt", ids}, {"temperature", 0.9}, {"top_k", 20},
                       {"seed", 1234}, {"max_tokens", 30}};
    const http_result r = request("POST", "/v1/completions", body.dump());
    QCOMPARE(r.status, 200);
    const json j = json::parse(r.body);
    QCOMPARE(j["object"].get<std::string>(), std::string("text_completion"));
    QCOMPARE(QString::fromStdString(j["choices"][0]["text"].get<std::string>()), QString::fromStdString(expected));
    QCOMPARE(j["choices"][0]["finish_reason"].get<std::string>(), finish);
    QCOMPARE(j["usage"]["prompt_tokens"].get<size_t>(), ids.size());
    const stream_result s = stream("/v1/completions", body);
    QCOMPARE(QString::fromStdString(s.text), QString::fromStdString(expected));
    QCOMPARE(s.finish, finish);
    QVERIFY(s.usage.is_null());  // no include_usage: no usage chunk
}

void TestServer::metricsParseAndMove() {
    const prom before = settled_scrape();
    QVERIFY2(before.error.empty(), before.error.c_str());
    for (const char *family : {"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
                               "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
                               "vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:request_success_total",
                               "vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
                               "vllm:e2e_request_latency_seconds", "expertscope:expert_tokens_total",
                               "expertscope:memory_bytes", "expertscope:memory_fragmentation",
                               "expertscope:kv_cache_waste", "expertscope:http_answers_total",
                               "expertscope:http_answer_errors_total"})
        QVERIFY2(before.types.count(family), family);
    QCOMPARE(before.types.at("vllm:time_to_first_token_seconds"), std::string("histogram"));
    QCOMPARE(before.types.at("vllm:prompt_tokens_total"), std::string("counter"));
    QVERIFY(before.get("expertscope:memory_bytes", "kind=\"weights\"") > 0);
    QVERIFY(before.get("expertscope:memory_bytes", "kind=\"kv_total\"") > 0);
    // The CPU backend's pool is allocated whole: all of it mapped.
    QCOMPARE(before.get("expertscope:memory_bytes", "kind=\"kv_mapped\""),
             before.get("expertscope:memory_bytes", "kind=\"kv_total\""));
    QCOMPARE(before.get("expertscope:kv_blocks", "state=\"mapped\""), before.get("expertscope:kv_blocks", "state=\"total\""));

    // A prompt that is longer than two KV blocks, sent twice: the second finds the first's blocks.
    std::vector<int32_t> ids;
    for (int i = 0; i < 40; ++i) ids.push_back(10 + i * 7);
    const json body = {{"model", "moe-shared"}, {"prompt", ids}, {"temperature", 0}, {"max_tokens", 12}, {"ignore_eos", true}};
    http_result r = request("POST", "/v1/completions", body.dump());
    QCOMPARE(r.status, 200);
    r = request("POST", "/v1/completions", body.dump());
    QCOMPARE(r.status, 200);
    const json j = json::parse(r.body);
    QCOMPARE(j["usage"]["completion_tokens"].get<int>(), 12);

    const prom after = settled_scrape();
    QVERIFY2(after.error.empty(), after.error.c_str());
    QCOMPARE(after.get("vllm:prompt_tokens_total") - before.get("vllm:prompt_tokens_total"), 80.0);
    QCOMPARE(after.get("vllm:generation_tokens_total") - before.get("vllm:generation_tokens_total"), 24.0);
    QCOMPARE(after.get("vllm:request_success_total", "finished_reason=\"length\"") -
                 before.get("vllm:request_success_total", "finished_reason=\"length\""), 2.0);
    QCOMPARE(after.get("vllm:time_to_first_token_seconds_count") - before.get("vllm:time_to_first_token_seconds_count"), 2.0);
    QCOMPARE(after.get("vllm:inter_token_latency_seconds_count") - before.get("vllm:inter_token_latency_seconds_count"), 22.0);
    QCOMPARE(after.get("vllm:e2e_request_latency_seconds_count") - before.get("vllm:e2e_request_latency_seconds_count"), 2.0);
    QVERIFY(after.get("vllm:prefix_cache_hits_total") > before.get("vllm:prefix_cache_hits_total"));
    QVERIFY(after.get("vllm:prefix_cache_queries_total") >= after.get("vllm:prefix_cache_hits_total"));
    // Every position computed for the first time is routed to k experts in each MoE layer.
    QVERIFY(after.sum("expertscope:expert_tokens_total") > before.sum("expertscope:expert_tokens_total"));
    // Histograms: cumulative buckets, +Inf equals _count.
    for (const char *h : {"vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds", "vllm:e2e_request_latency_seconds"}) {
        double prev = 0.0;
        for (const auto &[k, v] : after.ordered)
            if (k.rfind(std::string(h) + "_bucket", 0) == 0) {
                if (k.find("+Inf") != std::string::npos) QCOMPARE(v, after.get(std::string(h) + "_count"));
                QVERIFY2(v >= prev, k.c_str());
                prev = v;
            }
    }
    QCOMPARE(after.get("vllm:num_requests_running"), 0.0);
    // Every answer of the routes is counted (the scrapes too); none of these was an error.
    QVERIFY(after.get("expertscope:http_answers_total") >= before.get("expertscope:http_answers_total") + 2);
    QCOMPARE(after.get("expertscope:http_answer_errors_total"), before.get("expertscope:http_answer_errors_total"));
}

void TestServer::concurrentClientsAreBatched() {
    // Non-streaming, greedy, ignore_eos: every request generates exactly n_tok tokens.
    const int n_tok = 192, n_clients = 8;
    auto one = [this](int k) {
        const json body = {{"model", "moe-shared"}, {"prompt", std::vector<int32_t>{40 + k, 41, 42 + k, 43}},
                           {"temperature", 0}, {"max_tokens", 192}, {"ignore_eos", true}};
        const http_result r = request("POST", "/v1/completions", body.dump());
        if (r.status != 200) return -1;
        return json::parse(r.body)["usage"]["completion_tokens"].get<int>();
    };
    const prom before = settled_scrape();
    auto t0 = std::chrono::steady_clock::now();
    QCOMPARE(one(0), n_tok);
    const double single_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double single_tps = n_tok / single_s;
    const prom mid = settled_scrape();

    std::vector<int> got(n_clients, 0);
    std::vector<std::thread> clients;
    t0 = std::chrono::steady_clock::now();
    for (int c = 0; c < n_clients; ++c) clients.emplace_back([&, c] { got[size_t(c)] = one(c + 1); });
    for (auto &t : clients) t.join();
    const double conc_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (int g : got) QCOMPARE(g, n_tok);
    const double conc_tps = n_clients * n_tok / conc_s;
    const prom after = settled_scrape();
    QVERIFY2(after.error.empty(), after.error.c_str());
    // Engine steps (the engine's own counter): one client needs a step per token; batched
    // clients share steps, so 8 × 192 tokens take far fewer than 8 × 192 steps.
    const double steps_single = mid.get("expertscope:engine_steps_total") - before.get("expertscope:engine_steps_total");
    const double steps_conc = after.get("expertscope:engine_steps_total") - mid.get("expertscope:engine_steps_total");
    // Steps the server's poller saw with more than one / more than four sequences.
    const double all = after.get("expertscope:step_sequences_count") - mid.get("expertscope:step_sequences_count");
    const double multi = all - (after.get("expertscope:step_sequences_bucket", "le=\"1\"") -
                                mid.get("expertscope:step_sequences_bucket", "le=\"1\""));
    const double over4 = all - (after.get("expertscope:step_sequences_bucket", "le=\"4\"") -
                                mid.get("expertscope:step_sequences_bucket", "le=\"4\""));
    qInfo("single client: %.0f steps, %.0f tok/s; %d clients: %.0f steps, %.0f tok/s (x%.2f); "
          "steps seen with >1 sequence %.0f of %.0f, with >4 %.0f",
          steps_single, single_tps, n_clients, steps_conc, conc_tps, conc_tps / single_tps, multi, all, over4);
    QVERIFY(steps_single >= n_tok);
    QVERIFY2(steps_conc <= 0.5 * n_clients * n_tok, "concurrent clients did not share engine steps");
    QVERIFY2(multi > 0, "no engine step held more than one sequence");
    QVERIFY2(over4 > 0, "no engine step held more than four sequences");
    // Wall-clock throughput on this shared 2-core machine is noisy (other builds run beside the
    // test): on the tiny model a batched step costs nearly as much per token as a lone one, so
    // the gain is small (x1.2-1.3 when the machine is quiet) and is reported, not asserted.
    if (conc_tps <= single_tps)
        qWarning("concurrent throughput %.0f tok/s is not above one client's %.0f tok/s (machine load?)", conc_tps, single_tps);
}

void TestServer::disconnectFreesRequest() {
    const prom before = scrape();
    std::atomic<int> chunks{0};
    {
        httplib::Client cli("127.0.0.1", m_port);
        cli.set_read_timeout(60, 0);
        httplib::Request req;
        req.method = "POST";
        req.path = "/v1/completions";
        req.set_header("Authorization", "Bearer " + api_key);
        req.set_header("Content-Type", "application/json");
        req.body = json{{"model", "moe-shared"}, {"prompt", "Once upon a time"}, {"max_tokens", 4000},
                        {"ignore_eos", true}, {"temperature", 0}, {"stream", true}}
                       .dump();
        req.content_receiver = [&](const char *, size_t, uint64_t, uint64_t) { return ++chunks < 5; };  // then hang up
        auto res = cli.send(req);
        QVERIFY(!res || res.error() == httplib::Error::Canceled);
    }
    QVERIFY(chunks >= 5);
    // Bounded wait for the server to notice (its next write fails) and the engine to free the blocks.
    prom p;
    for (int i = 0; i < 100; ++i) {
        p = scrape();
        if (p.get("vllm:num_requests_running") == 0 && p.get("vllm:kv_cache_usage_perc") == 0 &&
            p.get("vllm:request_success_total", "finished_reason=\"abort\"") > before.get("vllm:request_success_total", "finished_reason=\"abort\""))
            break;
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    QCOMPARE(p.get("vllm:num_requests_running"), 0.0);
    QCOMPARE(p.get("vllm:kv_cache_usage_perc"), 0.0);
    QCOMPARE(p.get("expertscope:memory_bytes", "kind=\"kv_used\""), 0.0);
    QCOMPARE(p.get("vllm:request_success_total", "finished_reason=\"abort\"") -
                 before.get("vllm:request_success_total", "finished_reason=\"abort\""), 1.0);
    // It stopped long before 4000 tokens.
    QVERIFY(p.get("vllm:generation_tokens_total") - before.get("vllm:generation_tokens_total") < 3000);
    QCOMPARE(request("GET", "/health", "", "").status, 200);
}

// A non-streaming request still running after a second is answered with chunked encoding and
// a newline every second: the client that hangs up at the first one is noticed and its request
// cancelled, as for streams. Four streams run beside it so that it surely outlasts that second
// however fast the machine.
void TestServer::nonStreamingDisconnectFreesRequest() {
    const prom before = scrape();
    const auto aborts = [&before](const prom &p) {
        return p.get("vllm:request_success_total", "finished_reason=\"abort\"") -
               before.get("vllm:request_success_total", "finished_reason=\"abort\"");
    };
    const auto make = [](bool stream) {
        httplib::Request req;
        req.method = "POST";
        req.path = "/v1/completions";
        req.set_header("Authorization", "Bearer " + api_key);
        req.set_header("Content-Type", "application/json");
        req.body = json{{"model", "moe-shared"}, {"prompt", "Once upon a time"},
                        {"max_tokens", 4000},    {"ignore_eos", true},
                        {"temperature", 0},      {"stream", stream}}
                       .dump();
        return req;
    };
    std::atomic<bool> stop_background{false};
    std::vector<std::thread> background;
    for (int i = 0; i < 4; ++i)
        background.emplace_back([&, port = m_port] {
            httplib::Client cli("127.0.0.1", port);
            cli.set_read_timeout(60, 0);
            httplib::Request req = make(true);
            req.content_receiver = [&](const char *, size_t, uint64_t, uint64_t) {
                return !stop_background.load();
            };
            cli.send(req);
        });
    const auto wait_for = [&](auto pred) {
        prom p;
        for (int i = 0; i < 100; ++i) {
            p = scrape();
            if (pred(p)) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        return p;
    };
    prom p = wait_for([](const prom &p) { return p.get("vllm:num_requests_running") == 4; });
    QCOMPARE(p.get("vllm:num_requests_running"), 4.0);

    std::string first;
    {
        httplib::Client cli("127.0.0.1", m_port);
        cli.set_read_timeout(60, 0);
        httplib::Request req = make(false);
        req.content_receiver = [&](const char *data, size_t n, uint64_t, uint64_t) {
            first.assign(data, n);
            return false; // hang up at the first bytes
        };
        auto res = cli.send(req);
        QVERIFY(!res || res.error() == httplib::Error::Canceled);
    }
    const bool probe = !first.empty() && first.find_first_not_of('\n') == std::string::npos;
    p = wait_for([&](const prom &p) { return p.get("vllm:num_requests_running") == 4 && aborts(p) == 1; });
    stop_background = true;
    for (auto &t : background) t.join();
    QVERIFY2(probe, ("the first bytes were not a newline probe: " + first.substr(0, 80)).c_str());
    QCOMPARE(p.get("vllm:num_requests_running"), 4.0); // only the background streams
    QCOMPARE(aborts(p), 1.0);
    p = wait_for([](const prom &p) {
        return p.get("vllm:num_requests_running") == 0 && p.get("vllm:kv_cache_usage_perc") == 0;
    });
    QCOMPARE(p.get("vllm:num_requests_running"), 0.0);
    QCOMPARE(p.get("vllm:kv_cache_usage_perc"), 0.0);
    QCOMPARE(aborts(p), 5.0);
    QCOMPARE(request("GET", "/health", "", "").status, 200);
}

void TestServer::malformed_data() {
    QTest::addColumn<QString>("path");
    QTest::addColumn<QString>("body");
    QTest::addColumn<QString>("key");
    QTest::addColumn<int>("status");
    QTest::addColumn<QString>("param");  // expected error.param ("" = null)

    const QString chat = "/v1/chat/completions", cmpl = "/v1/completions";
    const QString k = QString::fromStdString(api_key);
    const QString msgs = R"("messages":[{"role":"user","content":"hi"}])";
    QTest::newRow("bad json") << chat << R"({"messages":[)" << k << 400 << "";
    QTest::newRow("not an object") << chat << "[1,2]" << k << 400 << "";
    QTest::newRow("number beyond double")
        << chat << "{" + msgs + R"(,"temperature":2e2221})" << k << 400 << "";
    QTest::newRow("empty body") << chat << "" << k << 400 << "";
    QTest::newRow("missing messages") << chat << R"({"model":"moe-shared"})" << k << 400 << "messages";
    QTest::newRow("messages not array") << chat << R"({"messages":"hi"})" << k << 400 << "messages";
    QTest::newRow("bad role") << chat << R"({"messages":[{"role":"wizard","content":"hi"}]})" << k << 400 << "messages[0].role";
    QTest::newRow("image part") << chat << R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{}}]}]})" << k << 400 << "messages[0].content[0].type";
    QTest::newRow("content number") << chat << R"({"messages":[{"role":"user","content":5}]})" << k << 400 << "messages[0].content";
    QTest::newRow("temperature string") << chat << "{" + msgs + R"(,"temperature":"hot"})" << k << 400 << "temperature";
    QTest::newRow("temperature negative") << chat << "{" + msgs + R"(,"temperature":-1})" << k << 400 << "temperature";
    QTest::newRow("top_p zero") << chat << "{" + msgs + R"(,"top_p":0})" << k << 400 << "top_p";
    QTest::newRow("max_tokens zero") << chat << "{" + msgs + R"(,"max_tokens":0})" << k << 400 << "max_tokens";
    QTest::newRow("max_tokens float") << chat << "{" + msgs + R"(,"max_tokens":2.5})" << k << 400 << "max_tokens";
    QTest::newRow("max_tokens past context") << chat << "{" + msgs + R"(,"max_tokens":100000})" << k << 400 << "max_completion_tokens";
    QTest::newRow("stream string") << chat << "{" + msgs + R"(,"stream":"yes"})" << k << 400 << "stream";
    QTest::newRow("stop number") << chat << "{" + msgs + R"(,"stop":7})" << k << 400 << "stop";
    QTest::newRow("n 2") << chat << "{" + msgs + R"(,"n":2})" << k << 400 << "n";
    QTest::newRow("unknown model") << chat << "{" + msgs + R"(,"model":"gpt-4"})" << k << 404 << "model";
    QTest::newRow("model number") << chat << "{" + msgs + R"(,"model":4})" << k << 400 << "model";
    QTest::newRow("bad api key") << chat << "{" + msgs + "}" << "wrong" << 401 << "";
    QTest::newRow("no api key") << chat << "{" + msgs + "}" << "" << 401 << "";
    QTest::newRow("prompt missing") << cmpl << R"({"max_tokens":3})" << k << 400 << "prompt";
    QTest::newRow("prompt object") << cmpl << R"({"prompt":{"a":1}})" << k << 400 << "prompt";
    QTest::newRow("token id outside vocab") << cmpl << R"({"prompt":[1,2,300000]})" << k << 400 << "prompt";
    QTest::newRow("prompt over --max-prompt-tokens") << cmpl << R"({"prompt":[)" + QString("5,").repeated(250) + "5]}" << k << 400 << "prompt";
    QTest::newRow("huge body") << cmpl << R"({"prompt":")" + QString(70000, 'a') + "\"}" << k << 413 << "";
    QTest::newRow("unknown route") << "/v1/embeddings" << "{}" << k << 404 << "";
}

void TestServer::malformed() {
    QFETCH(QString, path);
    QFETCH(QString, body);
    QFETCH(QString, key);
    QFETCH(int, status);
    QFETCH(QString, param);
    const http_result r = request("POST", path.toStdString(), body.toStdString(), key.toStdString());
    QCOMPARE(r.status, status);
    const json j = json::parse(r.body, nullptr, false);
    QVERIFY2(!j.is_discarded() && j.contains("error"), r.body.c_str());
    const json &e = j["error"];
    QVERIFY(e["message"].is_string() && !e["message"].get<std::string>().empty());
    QVERIFY(e["type"].is_string());
    QVERIFY(e.contains("param") && e.contains("code"));
    if (param.isEmpty()) QVERIFY2(e["param"].is_null(), r.body.c_str());
    else QCOMPARE(QString::fromStdString(e["param"].get<std::string>()), param);
    if (status == 404 && param == "model") QCOMPARE(e["code"].get<std::string>(), std::string("model_not_found"));
    // The server stays up and serves.
    QCOMPARE(request("GET", "/health", "", "").status, 200);
    QCOMPARE(m_server.state(), QProcess::Running);
}

QTEST_GUILESS_MAIN(TestServer)
void TestServer::sharedEngineServesBesideItsOwner() {
    es::engine_params ep;
    ep.load.n_threads = 2;
    // A server on an engine without a model refuses to start.
    {
        es::server::server_options o;
        es::server::api_server empty(o, std::make_shared<es::engine>(ep));
        QCOMPARE(empty.load(), std::string("no model is loaded"));
    }
    auto eng = std::make_shared<es::engine>(ep);
    QVERIFY(eng->load_model(model_dir).get());
    es::server::server_options o;
    o.port = 0;
    o.api_key = api_key;
    o.served_model_name = "shared";
    es::server::api_server srv(o, eng);
    QCOMPARE(srv.load(), std::string());
    std::mutex mutex;
    std::vector<es::server::request_log_entry> log;
    srv.set_request_logger([&](const es::server::request_log_entry &e) {
        std::lock_guard lock(mutex);
        log.push_back(e);
    });
    QCOMPARE(srv.bind(), std::string());
    const int port = srv.port();
    QVERIFY(port > 0);
    {
        // The port is taken now: a second server there says so, naming it.
        es::server::server_options o2 = o;
        o2.port = port;
        es::server::api_server other(o2, eng);
        QCOMPARE(other.load(), std::string());
        const std::string err = other.bind();
        QVERIFY2(err.find(":" + std::to_string(port) + " (the port is in use)") != std::string::npos, err.c_str());
    }
    std::thread serving([&srv] { srv.serve(); });

    // The owner's request and a client's run on the one engine at the same time.
    auto own = eng->submit([&] {
        es::request_params rp;
        rp.prompt_ids = {5, 6, 7, 8};
        rp.sampling.temperature = 0;
        rp.sampling.max_tokens = 64; // no stop ids: 64 tokens
        return rp;
    }());
    httplib::Client c("127.0.0.1", port);
    c.set_connection_timeout(5, 0);
    c.set_read_timeout(60, 0);
    const json body = {{"model", "shared"},
                       {"messages", json::array({{{"role", "user"}, {"content", "Hello"}}})},
                       {"max_tokens", 16},
                       {"temperature", 0},
                       {"ignore_eos", true}};
    auto res = c.Post("/v1/chat/completions", {{"Authorization", "Bearer " + api_key}}, body.dump(), "application/json");
    QVERIFY(res);
    QCOMPARE(res->status, 200);
    const json answer = json::parse(res->body);
    QCOMPARE(answer["model"].get<std::string>(), std::string("shared"));
    QCOMPARE(answer["usage"]["completion_tokens"].get<int>(), 16);
    auto refused = c.Get("/v1/models");
    QVERIFY(refused);
    QCOMPARE(refused->status, 401);

    srv.stop();
    serving.join();
    {
        std::lock_guard lock(mutex);
        QCOMPARE(log.size(), size_t(2));
        const es::server::request_log_entry &chat = log[0];
        QCOMPARE(chat.method, std::string("POST"));
        QCOMPARE(chat.path, std::string("/v1/chat/completions"));
        QCOMPARE(chat.status, 200);
        QCOMPARE(chat.model, std::string("shared"));
        QCOMPARE(chat.prompt_tokens, answer["usage"]["prompt_tokens"].get<int64_t>());
        QCOMPARE(chat.completion_tokens, int64_t(16));
        QCOMPARE(chat.finish_reason, std::string("length"));
        QVERIFY(chat.request_id != 0 && chat.metrics && chat.metrics->token_times_us.size() == 16);
        QCOMPARE(chat.ttft_ms, -1.0); // not streamed
        QVERIFY(chat.client.rfind("127.0.0.1:", 0) == 0);
        QCOMPARE(log[1].path, std::string("/v1/models"));
        QCOMPARE(log[1].status, 401);
        QCOMPARE(log[1].prompt_tokens, int64_t(-1));
    }
    const es::server::server_totals t = srv.totals();
    QCOMPARE(t.requests, uint64_t(2));
    QCOMPARE(t.errors, uint64_t(1));
    QCOMPARE(t.active, uint64_t(0));
    QCOMPARE(t.generation_tokens, uint64_t(16));
    QCOMPARE(t.tokens_out, uint64_t(16));

    // The owner's request ran to its end beside it, and the engine serves its owner after the stop.
    const es_test::generation mine = es_test::generate_with_engine(*eng, {9, 10, 11}, [] {
        es::sampling_params sp;
        sp.temperature = 0;
        sp.max_tokens = 8;
        return sp;
    }());
    QVERIFY2(mine.ok(), mine.error.c_str());
    QCOMPARE(mine.tokens.size(), size_t(8));
    size_t n = 0;
    std::string finish;
    for (es::request_event ev; finish.empty() && own->wait_pop(ev, std::chrono::seconds(30));) {
        if (ev.kind == es::event_kind::token) n += ev.token_ids.size();
        else finish = ev.kind == es::event_kind::finished ? ev.finish_reason : "failed: " + ev.error;
    }
    QCOMPARE(finish, std::string("length"));
    QCOMPARE(n, size_t(64));
}

#include "test_server.moc"
