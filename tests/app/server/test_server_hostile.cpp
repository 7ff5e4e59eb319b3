// expertscope-cli serve against hostile clients: the real server process on 127.0.0.1 (a free
// port it prints), in its default configuration without a key, with short deadlines so the
// suite stays short. Raw sockets play the clients — many of them from other loopback addresses
// (127.0.0.2…; Linux routes all of 127/8 to lo), since the server counts connections per address:
// slow headers from more sockets than the server has worker threads while /health still answers;
// a slow body; lying Content-Length; a chunked body over the limit; oversize prompts refused fast
// with the server's RSS (/proc/PID/status VmRSS) flat; connections over the per-client and total
// caps answered 503 at once; cross-site requests (text/plain POST, foreign Origin, foreign Host);
// a stream whose client leaves frees its request; a non-loopback bind without a key; and at the
// end the server still answers a completion. The figures go to the log through qInfo (the
// README's server section quotes them). Every wait is bounded.
#include "http_policy.h"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <QProcess>
#include <QRegularExpression>
#include <QtTest>

#include "serve_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <thread>

using nlohmann::json;
using clock_type = std::chrono::steady_clock;

namespace {

const std::string model_dir = std::string(ES_TEST_DATA_DIR) + "/moe-shared";

// Under AddressSanitizer (the sanitize preset builds the suite and the server alike) freed memory
// sits in ASan's quarantine, not in glibc's arenas: the server's RSS says nothing about them.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool k_asan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool k_asan = true;
#else
constexpr bool k_asan = false;
#endif
#else
constexpr bool k_asan = false;
#endif

// The server's options in this suite (seconds and counts): short deadlines, small caps.
constexpr int k_header_timeout_s = 2, k_body_timeout_s = 1, k_keep_alive_s = 1;
constexpr int k_max_connections = 100, k_per_client = 40, k_max_prompt_tokens = 200;
const char *k_allowed_origin = "http://allowed.example";

double seconds_since(clock_type::time_point t0) {
    return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// A blocking TCP connection to 127.0.0.1:port from the local address `from` (another loopback
// address is another client to the server). -1 on failure.
int connect_from(const char *from, int port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    sockaddr_in src{};
    src.sin_family = AF_INET;
    inet_pton(AF_INET, from, &src.sin_addr);
    sockaddr_in dst{};
    dst.sin_family = AF_INET;
    dst.sin_port = htons(uint16_t(port));
    inet_pton(AF_INET, "127.0.0.1", &dst.sin_addr);
    if (::bind(fd, reinterpret_cast<sockaddr *>(&src), sizeof src) != 0 ||
        ::connect(fd, reinterpret_cast<sockaddr *>(&dst), sizeof dst) != 0) {
        ::close(fd);
        return -1;
    }
    return fd;
}

bool send_all(int fd, const std::string &bytes) {
    size_t done = 0;
    while (done < bytes.size()) {
        const ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
        if (n <= 0) return false;
        done += size_t(n);
    }
    return true;
}

struct raw_response {
    int status = -1;          // -1: nothing (or no complete head) within the wait
    std::string head, body;
    bool closed = false;      // the server closed the connection after it
    double seconds = 0;       // from the call until the response was complete
    clock_type::time_point complete_at; // when its last byte arrived
};

// Reads one response (head, then Content-Length bytes of body) within timeout_ms; `closed`
// tells whether the connection then ended (waits up to 200 ms more for that). Bytes past the
// response (a pipelined answer's start) go to *rest, which the next call passes back in.
raw_response read_response(int fd, int timeout_ms, std::string *rest = nullptr) {
    raw_response r;
    const auto t0 = clock_type::now();
    const auto deadline = t0 + std::chrono::milliseconds(timeout_ms);
    std::string buf;
    if (rest) buf.swap(*rest);
    size_t need = std::string::npos; // total bytes of the response once the head is known
    char chunk[65536];
    for (;;) {
        if (const size_t end = buf.find("\r\n\r\n"); need == std::string::npos && end != std::string::npos) {
            if (buf.compare(0, 9, "HTTP/1.1 ") == 0 && buf.compare(9, 3, "100") == 0) { // 100 Continue
                buf.erase(0, end + 4);
                continue;
            }
            size_t length = 0;
            const std::string head = buf.substr(0, end);
            static const QRegularExpression cl_re("(?im)^content-length:\\s*(\\d+)");
            if (auto m = cl_re.match(QString::fromStdString(head)); m.hasMatch()) length = m.captured(1).toULongLong();
            need = end + 4 + length;
        }
        if (need != std::string::npos && buf.size() >= need) {
            if (rest) rest->assign(buf, need);
            buf.resize(need);
            break;
        }
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now()).count();
        if (left <= 0) return r;
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, int(left)) <= 0) continue;
        const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
        if (n <= 0) {
            r.closed = true;
            break;
        }
        buf.append(chunk, size_t(n));
    }
    const size_t end = buf.find("\r\n\r\n");
    if (end == std::string::npos || buf.size() < 12) return r;
    r.status = std::atoi(buf.substr(9, 3).c_str());
    r.head = buf.substr(0, end);
    r.body = buf.substr(end + 4);
    r.complete_at = clock_type::now();
    r.seconds = seconds_since(t0);
    if (!r.closed && (!rest || rest->empty())) {
        pollfd p{fd, POLLIN, 0};
        char c;
        r.closed = ::poll(&p, 1, 200) > 0 && ::recv(fd, &c, 1, MSG_PEEK) == 0;
    }
    return r;
}

// One request on a fresh connection from `from`; the response within timeout_ms.
raw_response roundtrip(int port, const std::string &bytes, int timeout_ms = 10000, const char *from = "127.0.0.1") {
    const int fd = connect_from(from, port);
    if (fd < 0) return {};
    raw_response r;
    const auto t0 = clock_type::now();
    if (send_all(fd, bytes)) r = read_response(fd, timeout_ms);
    r.seconds = seconds_since(t0);
    ::close(fd);
    return r;
}

std::string post(const std::string &path, const std::string &body, const std::string &extra_headers = "",
                 const std::string &content_type = "application/json") {
    std::string r = "POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
    if (!content_type.empty()) r += "Content-Type: " + content_type + "\r\n";
    return r + extra_headers + "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body;
}

std::string get(const std::string &path, const std::string &host = "127.0.0.1", const std::string &extra = "") {
    return "GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\n" + extra + "Connection: close\r\n\r\n";
}

std::string error_message(const raw_response &r) {
    const json j = json::parse(r.body, nullptr, false);
    if (j.is_discarded() || !j.contains("error")) return "(no OpenAI error body: " + r.body.substr(0, 120) + ")";
    return j["error"]["message"].get<std::string>();
}

int64_t rss_kib(qint64 pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/status");
    for (std::string line; std::getline(in, line);)
        if (line.rfind("VmRSS:", 0) == 0) return std::stoll(line.substr(6));
    return -1;
}

} // namespace

class TestServerHostile : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void cleanupTestCase();
    void slowHeadersDoNotStarveOthers();
    void slowBodyTimesOut();
    void lyingContentLength_data();
    void lyingContentLength();
    void chunkedBodies();
    void keepAliveAndPipelining();
    void oversizePromptsAreRefusedAndFreed();
    void connectionCaps();
    void crossSiteRequests_data();
    void crossSiteRequests();
    void noPathsAndUnsignedIds();
    void midStreamDisconnectFreesRequest();
    void nonLoopbackWithoutKey();
    void policyRules();
    void stillServesAtTheEnd();

private:
    double metric(const std::string &name);
    // Waits (bounded, 5 s) until the server holds exactly `n` connections besides the scrape's own.
    bool wait_open_connections(double n);

    QProcess m_server;
    int m_port = 0;
};

void TestServerHostile::initTestCase() {
    const QString started = es_test::start_serve(m_server,
                                                 {"--model",
                                                  QString::fromStdString(model_dir),
                                                  "--port",
                                                  "0",
                                                  "--threads",
                                                  "2",
                                                  "--max-prompt-tokens",
                                                  QString::number(k_max_prompt_tokens),
                                                  "--header-timeout",
                                                  QString::number(k_header_timeout_s),
                                                  "--body-timeout",
                                                  QString::number(k_body_timeout_s),
                                                  "--keep-alive-timeout",
                                                  QString::number(k_keep_alive_s),
                                                  "--write-timeout",
                                                  "2",
                                                  "--max-connections",
                                                  QString::number(k_max_connections),
                                                  "--max-connections-per-client",
                                                  QString::number(k_per_client),
                                                  "--allowed-origins",
                                                  k_allowed_origin},
                                                 &m_port);
    QVERIFY2(started.isEmpty(), qPrintable(started));
    QCOMPARE(roundtrip(m_port, get("/health")).status, 200);
}

void TestServerHostile::cleanupTestCase() {
    if (m_server.state() != QProcess::Running) return;
    m_server.terminate();
    const bool clean = m_server.waitForFinished(15000);
    if (!clean) {
        m_server.kill();
        m_server.waitForFinished(5000);
    }
    QVERIFY2(clean, "the server did not stop within 15 s of SIGTERM");
    QCOMPARE(m_server.exitCode(), 0);
}

double TestServerHostile::metric(const std::string &name) {
    const raw_response r = roundtrip(m_port, get("/metrics"));
    static const QRegularExpression line_re("(?m)^([a-zA-Z_:]+) ([-+0-9.eE]+)$");
    for (auto it = line_re.globalMatch(QString::fromStdString(r.body)); it.hasNext();) {
        const auto m = it.next();
        if (m.captured(1).toStdString() == name) return m.captured(2).toDouble();
    }
    return -1;
}

bool TestServerHostile::wait_open_connections(double n) {
    for (int i = 0; i < 100; ++i) {
        if (metric("expertscope:http_connections_open") == n + 1) return true; // +1: the scrape's own
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
}

// 80 sockets from four addresses (20 each, under the per-client cap) send a request head one
// byte every 100 ms: more than the 64 worker threads. They hold no worker: /health answers at
// once meanwhile, and each slow socket gets 408 when its header deadline passes.
void TestServerHostile::slowHeadersDoNotStarveOthers() {
    QVERIFY(wait_open_connections(0));
    const std::string head = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + std::string(200, 'x') + "\r\n\r\n";
    std::vector<int> slow;
    for (int a = 2; a <= 5; ++a)
        for (int i = 0; i < 20; ++i) {
            const int fd = connect_from(("127.0.0." + std::to_string(a)).c_str(), m_port);
            QVERIFY2(fd >= 0, "connect failed");
            slow.push_back(fd);
        }
    const auto t0 = clock_type::now();
    std::atomic<bool> trickling{true};
    std::thread trickle([&] {
        for (size_t pos = 0; trickling && pos < head.size(); ++pos) {
            for (int fd : slow) ::send(fd, &head[pos], 1, MSG_NOSIGNAL | MSG_DONTWAIT);
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
    });
    double held = 0; // every slow socket accepted (bounded: well inside their 2 s)
    for (int i = 0; i < 20 && held != double(slow.size()); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        held = metric("expertscope:http_connections_open") - 1; // less the scrape's own
    }
    double worst = 0;
    int probes_ok = 0;
    for (int i = 0; i < 5; ++i) {
        const raw_response h = roundtrip(m_port, get("/health"), 3000);
        probes_ok += h.status == 200;
        worst = std::max(worst, h.seconds);
        std::this_thread::sleep_for(std::chrono::milliseconds(150));
    }
    const double probes_done = seconds_since(t0);
    int timed_out = 0;
    double last_408 = 0;
    for (int fd : slow) {
        const raw_response r = read_response(fd, 4000);
        timed_out += r.status == 408 && r.closed;
        last_408 = std::max(last_408, seconds_since(t0));
    }
    trickling = false;
    trickle.join();
    for (int fd : slow) ::close(fd);
    qInfo("slow headers: %d sockets trickling 1 byte/100 ms (%.0f held by the server); /health answered %d/5, "
          "slowest %.3f s; %d got 408, the last %.2f s after they began (header deadline %d s)",
          int(slow.size()), held, probes_ok, worst, timed_out, last_408, k_header_timeout_s);
    QCOMPARE(held, double(slow.size()));
    QVERIFY2(probes_done < k_header_timeout_s, "the probes took longer than the slow sockets lived");
    QCOMPARE(probes_ok, 5);
    QVERIFY2(worst < 1.0, "a /health probe waited behind the slow clients");
    QCOMPARE(timed_out, int(slow.size()));
    QVERIFY(last_408 < k_header_timeout_s + 2.0);
}

// The head arrives at once, the body one byte every 100 ms: 408 once the body deadline passes.
void TestServerHostile::slowBodyTimesOut() {
    const std::string body = json{{"prompt", "Hello"}, {"max_tokens", 1}}.dump();
    const int fd = connect_from("127.0.0.1", m_port);
    QVERIFY(fd >= 0);
    QVERIFY(send_all(fd, "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n"));
    const auto t0 = clock_type::now();
    std::atomic<bool> go{true};
    std::thread trickle([&] {
        for (size_t i = 0; go && i + 1 < body.size(); ++i) { // never the last byte
            ::send(fd, &body[i], 1, MSG_NOSIGNAL | MSG_DONTWAIT);
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
    });
    const raw_response r = read_response(fd, 5000);
    const double t = seconds_since(t0);
    go = false;
    trickle.join();
    ::close(fd);
    qInfo("slow body: %d after %.2f s (body deadline %d s): %s", r.status, t, k_body_timeout_s, error_message(r).c_str());
    QCOMPARE(r.status, 408);
    QVERIFY(r.closed);
    QVERIFY(t >= k_body_timeout_s * 0.9 && t < k_body_timeout_s + 2.0);
}

// A Content-Length that is too large, negative or not a number is answered from the head alone
// (no body is sent): the answer is 413 or 400, never 408, and comes before the body deadline.
void TestServerHostile::lyingContentLength_data() {
    QTest::addColumn<QString>("length_headers");
    QTest::addColumn<int>("status");
    QTest::newRow("huge") << "Content-Length: 99999999999\r\n" << 413;
    QTest::newRow("beyond 2^64") << "Content-Length: 999999999999999999999999\r\n" << 413;
    QTest::newRow("just over the limit") << "Content-Length: 1048577\r\n" << 413;
    QTest::newRow("negative") << "Content-Length: -1\r\n" << 400;
    QTest::newRow("not a number") << "Content-Length: ten\r\n" << 400;
    QTest::newRow("a list") << "Content-Length: 5, 5\r\n" << 400;
    QTest::newRow("two that differ") << "Content-Length: 5\r\nContent-Length: 6\r\n" << 400;
    QTest::newRow("with chunked") << "Content-Length: 5\r\nTransfer-Encoding: chunked\r\n" << 400;
    QTest::newRow("unknown encoding") << "Transfer-Encoding: gzip\r\n" << 501;
}

void TestServerHostile::lyingContentLength() {
    QFETCH(QString, length_headers);
    QFETCH(int, status);
    const std::string head = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
                             length_headers.toStdString() + "\r\n";
    const raw_response r = roundtrip(m_port, head, 5000);
    qInfo("%s: %d in %.3f s: %s", QTest::currentDataTag(), r.status, r.seconds, error_message(r).c_str());
    QCOMPARE(r.status, status);
    QVERIFY(r.closed);
    QVERIFY(r.seconds < k_body_timeout_s);
    QVERIFY(!json::parse(r.body, nullptr, false).is_discarded());
}

// Chunked bodies are counted against the body limit (413 once the chunks exceed it, before the
// rest is sent); a chunked request within it is served like any other.
void TestServerHostile::chunkedBodies() {
    const std::string head = "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                             "Transfer-Encoding: chunked\r\n\r\n";
    const std::string chunk(256 * 1024, ' '); // JSON allows leading whitespace
    std::string over = head;
    for (int i = 0; i < 5; ++i) over += "40000\r\n" + chunk + "\r\n"; // 1.25 MiB, no last chunk
    const raw_response big = roundtrip(m_port, over, 5000);
    qInfo("chunked body over 1 MiB: %d in %.3f s: %s", big.status, big.seconds, error_message(big).c_str());
    QCOMPARE(big.status, 413);

    const std::string body = json{{"prompt", "Hello"}, {"max_tokens", 2}}.dump();
    const std::string ok = head + "3\r\n" + body.substr(0, 3) + "\r\n" + [&] {
        char size[16];
        std::snprintf(size, sizeof size, "%zx", body.size() - 3);
        return std::string(size);
    }() + ";ext=1\r\n" + body.substr(3) + "\r\n0\r\nX-Trailer: t\r\n\r\n";
    const raw_response small = roundtrip(m_port, ok);
    QCOMPARE(small.status, 200);
    QCOMPARE(json::parse(small.body)["usage"]["completion_tokens"].get<int>(), 2);
}

// Two requests pipelined in one write get two answers in order on the connection, which then
// waits for a third and is closed when the keep-alive deadline passes. An Expect: 100-continue
// request gets its 100 first.
void TestServerHostile::keepAliveAndPipelining() {
    const int fd = connect_from("127.0.0.1", m_port);
    QVERIFY(fd >= 0);
    const std::string body = json{{"prompt", "Hi"}, {"max_tokens", 1}}.dump();
    QVERIFY(send_all(fd, "GET /health HTTP/1.1\r\nHost: localhost\r\n\r\nPOST /v1/completions HTTP/1.1\r\nHost: "
                         "localhost\r\nContent-Type: application/json\r\nContent-Length: " +
                             std::to_string(body.size()) + "\r\n\r\n" + body));
    std::string rest; // both answers may arrive in one read
    const raw_response first = read_response(fd, 5000, &rest);
    QCOMPARE(first.status, 200);
    QVERIFY(!first.closed);
    const raw_response second = read_response(fd, 10000, &rest);
    QCOMPARE(second.status, 200);
    QCOMPARE(json::parse(second.body)["object"].get<std::string>(), std::string("text_completion"));
    // Idle now: closed by the server after the keep-alive deadline, which runs from when the
    // server finished writing the answer, so no sooner than that after the answer arrived.
    pollfd p{fd, POLLIN, 0};
    char c;
    const bool closed = ::poll(&p, 1, (k_keep_alive_s + 3) * 1000) > 0 && ::recv(fd, &c, 1, 0) == 0;
    const double idle = std::chrono::duration<double>(clock_type::now() - second.complete_at).count();
    ::close(fd);
    QVERIFY2(closed, "the idle connection was not closed");
    qInfo("keep-alive: the idle connection was closed %.3f s after its last answer (deadline %d s)", idle,
          k_keep_alive_s);
    QVERIFY(idle >= k_keep_alive_s * 0.8); // the margin is for this client being scheduled late

    const int fd2 = connect_from("127.0.0.1", m_port);
    QVERIFY(send_all(fd2, "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                          "Expect: 100-continue\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n"));
    std::string got(64, '\0');
    pollfd p2{fd2, POLLIN, 0};
    QVERIFY(::poll(&p2, 1, 5000) > 0);
    got.resize(size_t(std::max<ssize_t>(0, ::recv(fd2, got.data(), got.size(), 0))));
    QCOMPARE(got, std::string("HTTP/1.1 100 Continue\r\n\r\n"));
    QVERIFY(send_all(fd2, body));
    QCOMPARE(read_response(fd2, 10000).status, 200);
    ::close(fd2);
}

// Prompts far over --max-prompt-tokens: a 1 MiB text (within the body limit) is refused by its
// byte length before it is tokenized; a 9 KB text (which may still fit by its bytes) is
// tokenized only until it runs over. Either way the refusal is quick and the server's RSS stays
// where it was (the figure before this change: about +240 MB per 1 MiB prompt, kept).
void TestServerHostile::oversizePromptsAreRefusedAndFreed() {
    const qint64 pid = m_server.processId();
    std::string huge;
    while (huge.size() < 1000000) huge += "word ";
    std::string medium;
    while (medium.size() < 9000) medium += "word ";
    // Warm up: the first requests of each kind grow the heap once.
    for (const std::string *p : {&huge, &medium})
        QCOMPARE(roundtrip(m_port, post("/v1/completions", json{{"prompt", *p}, {"max_tokens", 1}}.dump())).status, 400);
    const int64_t before = rss_kib(pid);
    double slowest = 0;
    std::string message;
    const int n = 12;
    for (int i = 0; i < n; ++i) {
        for (const std::string *p : {&huge, &medium}) {
            const raw_response r = roundtrip(m_port, post("/v1/completions", json{{"prompt", *p}, {"max_tokens", 1}}.dump()));
            QCOMPARE(r.status, 400);
            message = error_message(r);
            QVERIFY2(message.find("at least") != std::string::npos, message.c_str());
            slowest = std::max(slowest, r.seconds);
        }
        const json chat = {{"messages", {{{"role", "user"}, {"content", huge}}}}, {"max_tokens", 1}};
        const raw_response r = roundtrip(m_port, post("/v1/chat/completions", chat.dump()));
        QCOMPARE(r.status, 400);
        slowest = std::max(slowest, r.seconds);
    }
    const int64_t after = rss_kib(pid);
    qInfo("oversize prompts: %d × (1 MB completion, 9 KB completion, 1 MB chat), slowest refusal %.3f s; "
          "server RSS %.1f MiB before, %.1f MiB after (%+.1f MiB); e.g. \"%s\"",
          n, slowest, before / 1024.0, after / 1024.0, (after - before) / 1024.0, message.c_str());
    QVERIFY(before > 0 && after > 0);
    if (k_asan) qInfo("RSS not compared: built with AddressSanitizer, whose quarantine holds freed memory");
    else QVERIFY2(after - before < 16 * 1024, "the server's RSS grew by 16 MiB or more over the oversize prompts");
    QVERIFY2(slowest < 2.0, "an oversize prompt took 2 s or more to refuse");
}

// Connections over the per-client cap, and over the total cap, are answered 503 at once and
// closed; other clients are served meanwhile.
void TestServerHostile::connectionCaps() {
    QVERIFY(wait_open_connections(0));
    std::vector<int> held;
    for (int i = 0; i < k_per_client; ++i) {
        const int fd = connect_from("127.0.0.6", m_port);
        QVERIFY(fd >= 0);
        held.push_back(fd);
    }
    raw_response over = roundtrip(m_port, get("/health"), 3000, "127.0.0.6");
    qInfo("per-client cap: %d held from 127.0.0.6, the next answered %d in %.3f s: %s", k_per_client, over.status,
          over.seconds, error_message(over).c_str());
    QCOMPARE(over.status, 503);
    QVERIFY(over.closed);
    QVERIFY(over.seconds < 1.0);
    QCOMPARE(roundtrip(m_port, get("/health")).status, 200); // another address is served

    // Up to the total: 40 + 40 + 20 = 100 (the per-client cap is 40).
    for (const char *from : {"127.0.0.7", "127.0.0.8"})
        for (int i = 0; i < (std::strcmp(from, "127.0.0.7") == 0 ? k_per_client : k_max_connections - 2 * k_per_client); ++i) {
            const int fd = connect_from(from, m_port);
            QVERIFY(fd >= 0);
            held.push_back(fd);
        }
    QCOMPARE(int(held.size()), k_max_connections);
    for (int i = 0; i < 100; ++i) { // until the server has accepted them all: a probe then finds it full
        const raw_response probe = roundtrip(m_port, get("/health"), 3000, "127.0.0.9");
        if (probe.status == 503) {
            over = probe;
            break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    qInfo("total cap: %d held, the next answered %d in %.3f s: %s", k_max_connections, over.status, over.seconds,
          error_message(over).c_str());
    QCOMPARE(over.status, 503);
    QVERIFY(error_message(over).find("100 connections") != std::string::npos);
    for (int fd : held) ::close(fd);
    QVERIFY(wait_open_connections(0));
    QVERIFY(metric("expertscope:http_connections_refused_total") >= 2);
}

// Without a key, on 127.0.0.1: what a web page could send is refused — a text/plain POST (a
// "simple" cross-site request), a foreign Origin (unless --allowed-origins lists it), a Host
// that is not a loopback name (DNS rebinding). curl-like requests (no Origin) and the page's own
// origin pass.
void TestServerHostile::crossSiteRequests_data() {
    QTest::addColumn<QString>("method");
    QTest::addColumn<QString>("content_type");
    QTest::addColumn<QString>("headers");
    QTest::addColumn<int>("status");
    QTest::addColumn<QString>("code");
    QTest::newRow("text/plain POST") << "POST" << "text/plain" << "" << 415 << "unsupported_media_type";
    QTest::newRow("form POST") << "POST" << "application/x-www-form-urlencoded" << "" << 415 << "unsupported_media_type";
    QTest::newRow("POST without Content-Type") << "POST" << "" << "" << 415 << "unsupported_media_type";
    QTest::newRow("json with charset") << "POST" << "application/json; charset=utf-8" << "" << 200 << "";
    QTest::newRow("foreign Origin") << "POST" << "application/json" << "Origin: http://evil.example\r\n" << 403 << "origin_not_allowed";
    QTest::newRow("foreign Origin, GET") << "GET" << "" << "Origin: http://evil.example\r\n" << 403 << "origin_not_allowed";
    QTest::newRow("Origin null") << "POST" << "application/json" << "Origin: null\r\n" << 403 << "origin_not_allowed";
    QTest::newRow("foreign Host") << "POST" << "application/json" << "Host: attacker.example\r\n" << 421 << "misdirected_request";
    QTest::newRow("rebound Host and Origin") << "GET" << "" << "Host: attacker.example:%PORT%\r\nOrigin: http://attacker.example:%PORT%\r\n" << 421 << "misdirected_request";
    QTest::newRow("Host localhost") << "POST" << "application/json" << "Host: localhost:%PORT%\r\n" << 200 << "";
    QTest::newRow("Host [::1]") << "POST" << "application/json" << "Host: [::1]:%PORT%\r\n" << 200 << "";
    QTest::newRow("same origin") << "POST" << "application/json" << "Host: 127.0.0.1:%PORT%\r\nOrigin: http://127.0.0.1:%PORT%\r\n" << 200 << "";
    QTest::newRow("listed origin") << "POST" << "application/json" << "Origin: http://allowed.example\r\n" << 200 << "";
    QTest::newRow("preflight, listed") << "OPTIONS" << "" << "Origin: http://allowed.example\r\nAccess-Control-Request-Method: POST\r\n" << 204 << "";
    QTest::newRow("preflight, foreign") << "OPTIONS" << "" << "Origin: http://evil.example\r\nAccess-Control-Request-Method: POST\r\n" << 403 << "origin_not_allowed";
}

void TestServerHostile::crossSiteRequests() {
    QFETCH(QString, method);
    QFETCH(QString, content_type);
    QFETCH(QString, headers);
    QFETCH(int, status);
    QFETCH(QString, code);
    std::string extra = headers.replace("%PORT%", QString::number(m_port)).toStdString();
    std::string host = "127.0.0.1";
    if (const size_t at = extra.find("Host: "); at != std::string::npos) { // this row's Host replaces the default
        const size_t eol = extra.find("\r\n", at);
        host = extra.substr(at + 6, eol - at - 6);
        extra.erase(at, eol + 2 - at);
    }
    const std::string body = json{{"prompt", "Hi"}, {"max_tokens", 1}}.dump();
    std::string req = method.toStdString() + (method == "GET" ? " /v1/models" : " /v1/completions") +
                      " HTTP/1.1\r\nHost: " + host + "\r\n" + extra;
    if (!content_type.isEmpty()) req += "Content-Type: " + content_type.toStdString() + "\r\n";
    if (method == "POST") req += "Content-Length: " + std::to_string(body.size()) + "\r\n";
    req += "Connection: close\r\n\r\n";
    if (method == "POST") req += body;
    const raw_response r = roundtrip(m_port, req);
    QCOMPARE(r.status, status);
    if (!code.isEmpty()) {
        const json j = json::parse(r.body, nullptr, false);
        QVERIFY2(!j.is_discarded() && j.contains("error"), r.body.c_str());
        QCOMPARE(QString::fromStdString(j["error"]["code"].get<std::string>()), code);
    }
    if (QByteArray(QTest::currentDataTag()).startsWith("listed origin") || QByteArray(QTest::currentDataTag()).startsWith("preflight, listed"))
        QVERIFY2(r.head.find("Access-Control-Allow-Origin: http://allowed.example") != std::string::npos, r.head.c_str());
    if (QByteArray(QTest::currentDataTag()) == "preflight, listed")
        QVERIFY(r.head.find("Access-Control-Allow-Headers: Authorization, Content-Type") != std::string::npos);
    if (status >= 400) QVERIFY(r.head.find("Access-Control-Allow-Origin") == std::string::npos);
}

// No answer names a path of the server's machine (/v1/models has the served name as its root);
// a token id of 2^63 or more is named as the unsigned number it is.
void TestServerHostile::noPathsAndUnsignedIds() {
    const raw_response models = roundtrip(m_port, get("/v1/models"));
    QCOMPARE(models.status, 200);
    QVERIFY2(models.body.find(model_dir) == std::string::npos && models.body.find("/moe-shared") == std::string::npos,
             models.body.c_str());
    QCOMPARE(json::parse(models.body)["data"][0]["root"].get<std::string>(), std::string("moe-shared"));
    for (const char *path : {"/v1/completions", "/v1/chat/completions", "/nope"})
        QVERIFY(roundtrip(m_port, post(path, "{")).body.find(ES_TEST_DATA_DIR) == std::string::npos);

    for (const char *id : {"9223372036854775808", "18446744073709551615", "3000"}) {
        const raw_response r = roundtrip(m_port, post("/v1/completions", std::string(R"({"prompt":[1,)") + id + "]}"));
        QCOMPARE(r.status, 400);
        const std::string msg = error_message(r);
        QVERIFY2(msg.find(std::string("token id ") + id + " ") != std::string::npos, msg.c_str());
        QVERIFY2(msg.find('-') == std::string::npos, msg.c_str());
    }
}

// A streaming client that leaves mid-stream (closes its socket) frees its request: the engine
// runs nothing afterwards and the abort is counted.
void TestServerHostile::midStreamDisconnectFreesRequest() {
    const double aborts_before = [&] {
        const raw_response m = roundtrip(m_port, get("/metrics"));
        static const QRegularExpression re("vllm:request_success_total\\{[^}]*finished_reason=\"abort\"[^}]*\\} ([0-9.]+)");
        const auto match = re.match(QString::fromStdString(m.body));
        return match.hasMatch() ? match.captured(1).toDouble() : 0.0;
    }();
    const int fd = connect_from("127.0.0.1", m_port);
    QVERIFY(fd >= 0);
    const std::string body =
        json{{"prompt", "Once upon a time"}, {"max_tokens", 3000}, {"ignore_eos", true}, {"stream", true}}.dump();
    QVERIFY(send_all(fd, post("/v1/completions", body)));
    std::string got;
    char buf[4096];
    const auto t0 = clock_type::now();
    while (got.find("data: ", got.find("data: ") + 1) == std::string::npos && seconds_since(t0) < 10) {
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, 500) > 0) {
            const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
            if (n <= 0) break;
            got.append(buf, size_t(n));
        }
    }
    QVERIFY2(got.find("data: ") != std::string::npos, got.c_str());
    ::close(fd); // gone
    const auto t1 = clock_type::now();
    double running = -1, aborts = 0;
    for (int i = 0; i < 100; ++i) {
        const raw_response m = roundtrip(m_port, get("/metrics"));
        static const QRegularExpression run_re("(?m)^vllm:num_requests_running\\{[^}]*\\} ([0-9.]+)$");
        static const QRegularExpression abort_re("vllm:request_success_total\\{[^}]*finished_reason=\"abort\"[^}]*\\} ([0-9.]+)");
        const QString text = QString::fromStdString(m.body);
        if (auto r = run_re.match(text); r.hasMatch()) running = r.captured(1).toDouble();
        if (auto a = abort_re.match(text); a.hasMatch()) aborts = a.captured(1).toDouble();
        if (running == 0 && aborts == aborts_before + 1) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    qInfo("mid-stream disconnect: request freed %.2f s after the client closed", seconds_since(t1));
    QCOMPARE(running, 0.0);
    QCOMPARE(aborts, aborts_before + 1);
}

// Binding every address without a key is refused, naming the flag; with the flag the server
// starts and says on stderr that it has no key.
void TestServerHostile::nonLoopbackWithoutKey() {
    QProcess refused;
    refused.start(ES_CLI_PATH, {"serve", "--model", QString::fromStdString(model_dir), "--host", "0.0.0.0", "--port", "0"});
    QVERIFY(refused.waitForFinished(30000));
    QVERIFY(refused.exitCode() != 0);
    const QString why = refused.readAllStandardError();
    QVERIFY2(why.contains("--insecure-no-api-key") && why.contains("--api-key"), qPrintable(why));

    QProcess insecure;
    insecure.start(ES_CLI_PATH, {"serve", "--model", QString::fromStdString(model_dir), "--host", "0.0.0.0", "--port",
                                 "0", "--threads", "1", "--insecure-no-api-key"});
    QString out, err;
    for (int i = 0; i < 300 && !out.contains("listening on"); ++i) {
        insecure.waitForReadyRead(100);
        out += insecure.readAllStandardOutput();
        if (insecure.state() != QProcess::Running) break;
    }
    err += insecure.readAllStandardError();
    insecure.terminate();
    QVERIFY(insecure.waitForFinished(15000));
    err += insecure.readAllStandardError();
    QVERIFY2(out.contains("listening on http://0.0.0.0:"), qPrintable(out + err));
    QVERIFY2(err.contains("without an API key"), qPrintable(err));
    QCOMPARE(insecure.exitCode(), 0);
}

// The rules behind the browser checks and the key check, case by case (http_policy).
void TestServerHostile::policyRules() {
    using namespace es::server;
    for (const char *h : {"localhost", "LOCALHOST:8000", "127.0.0.1", "127.0.0.1:1", "127.9.8.7:65535", "[::1]", "[::1]:8000"})
        QVERIFY2(is_loopback_host(h), h);
    for (const char *h : {"", "attacker.example", "localhost.attacker.example", "127.0.0.1.nip.io", "128.0.0.1",
                          "0.0.0.0", "[::2]", "[::1", "[::1]x", "localhost:x", "localhost:123456", "::1", "10.0.0.1:80"})
        QVERIFY2(!is_loopback_host(h), h);
    for (const char *t : {"application/json", "Application/JSON", "application/json; charset=utf-8", " application/json ;x=1"})
        QVERIFY2(is_json_media_type(t), t);
    for (const char *t : {"", "text/plain", "application/jsonx", "application/x-www-form-urlencoded", "multipart/form-data"})
        QVERIFY2(!is_json_media_type(t), t);

    QVERIFY(same_secret("Bearer abc", "Bearer abc"));
    QVERIFY(!same_secret("Bearer abd", "Bearer abc"));
    QVERIFY(!same_secret("Bearer ab", "Bearer abc"));
    QVERIFY(!same_secret("Bearer abcd", "Bearer abc"));
    QVERIFY(!same_secret("", "Bearer abc"));
    QVERIFY(!same_secret(std::string("Bearer abc\0", 11), "Bearer abc"));

    origin_rules loopback{{normalize_origin("https://App.Example/")}, true};
    QCOMPARE(check_origin("", "127.0.0.1:8000", loopback), origin_verdict::absent);
    QCOMPARE(check_origin("http://127.0.0.1:8000", "127.0.0.1:8000", loopback), origin_verdict::same);
    QCOMPARE(check_origin("http://localhost:8000", "localhost:8000", loopback), origin_verdict::same);
    QCOMPARE(check_origin("http://localhost:9999", "localhost:8000", loopback), origin_verdict::foreign);
    QCOMPARE(check_origin("http://rebound.example:8000", "rebound.example:8000", loopback), origin_verdict::foreign);
    QCOMPARE(check_origin("https://app.example", "127.0.0.1:8000", loopback), origin_verdict::allowed);
    QCOMPARE(check_origin("null", "127.0.0.1:8000", loopback), origin_verdict::foreign);
    origin_rules lan{{}, false};
    QCOMPARE(check_origin("http://server.lan:8000", "server.lan:8000", lan), origin_verdict::same);
    QCOMPARE(check_origin("http://other.lan", "server.lan:8000", lan), origin_verdict::foreign);
    QCOMPARE(check_origin("http://anything", "server.lan:8000", origin_rules{{"*"}, false}), origin_verdict::allowed);
}

void TestServerHostile::stillServesAtTheEnd() {
    QCOMPARE(m_server.state(), QProcess::Running);
    httplib::Client cli("127.0.0.1", m_port);
    cli.set_read_timeout(60, 0);
    auto res = cli.Post("/v1/chat/completions",
                        json{{"messages", {{{"role", "user"}, {"content", "Hello"}}}}, {"max_tokens", 8}, {"seed", 1}}.dump(),
                        "application/json");
    QVERIFY(res);
    QCOMPARE(res->status, 200);
    const json j = json::parse(res->body);
    QCOMPARE(j["object"].get<std::string>(), std::string("chat.completion"));
    QVERIFY(j["usage"]["completion_tokens"].get<int>() >= 1);
    const double refused = metric("expertscope:http_connections_refused_total");
    const double timed_out = metric("expertscope:http_requests_timed_out_total");
    const double rejected = metric("expertscope:http_requests_rejected_total");
    qInfo("the server is up and serves; it refused %.0f connections, timed out %.0f requests and rejected %.0f as malformed",
          refused, timed_out, rejected);
    QVERIFY(timed_out >= 81); // 80 slow heads, 1 slow body
}

QTEST_GUILESS_MAIN(TestServerHostile)
#include "test_server_hostile.moc"
