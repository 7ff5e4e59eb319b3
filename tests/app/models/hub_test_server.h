// A local HTTP server that speaks the subset of the Hugging Face hub's API that downloads use,
// with faults on demand — for test_hub_download and test_cli_models:
//   GET /api/models/{repo}/revision/{rev}[?blobs=true]  {"id", "sha", "siblings": [{"rfilename",
//       "size", "blobId", "lfs": {"sha256", "size", "pointerSize"}}]} (LFS entries for *.safetensors)
//   GET /{repo}/resolve/{rev}/{file}  the file; an LFS file is a 302 to http://localhost:<port>/cdn/<sha256>
//       (another host name than the endpoint's 127.0.0.1, as the hub's CDN is another host)
//   GET /cdn/<sha256>                  the LFS file's bytes
// Files honour "Range: bytes=N-" (206, Content-Range; 416 past the end). Faults, per file name
// (or "api" for the file list): an answer's status (401, 403, 404, 500) with an X-Error-Code, the
// connection dropped after N body bytes, a flipped byte, Range ignored (200 with the whole file),
// and a pause between 16 KiB pieces (a slow server). Every request is logged with its Range and
// Authorization headers. POSIX sockets, one thread a connection, Connection: close; every wait is
// bounded (5 s socket timeouts) and stop() ends every connection.
#pragma once

#include <QCryptographicHash>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

class HubTestServer {
public:
    struct Fault {
        int status = 0;           // answer this status instead
        std::string errorCode;    // with this X-Error-Code
        uint64_t dropAfter = 0;   // close the connection after this many body bytes (0: never)
        bool corrupt = false;     // flip a byte of the body
        bool ignoreRange = false; // answer 200 with the whole file to a Range request
        int chunkDelayMs = 0;     // pause between 16 KiB pieces
        int times = -1;           // requests it applies to (-1: every one)
    };
    struct Logged {
        std::string target, range, authorization, host;
    };
    struct Repo {
        std::string commit;
        std::map<std::string, std::string> files; // rfilename → content
    };

    HubTestServer() = default;
    HubTestServer(const HubTestServer &) = delete;
    HubTestServer &operator=(const HubTestServer &) = delete;
    ~HubTestServer() { stop(); }

    void addRepo(const std::string &id, Repo repo) {
        std::lock_guard lock(m_mutex);
        m_repos[id] = std::move(repo);
    }
    void setFault(const std::string &name, Fault f) {
        std::lock_guard lock(m_mutex);
        m_faults[name] = f;
    }
    void clearFaults() {
        std::lock_guard lock(m_mutex);
        m_faults.clear();
    }
    // Every request to the endpoint's host (not /cdn/) must carry "Authorization: Bearer <token>".
    void requireToken(const std::string &token) {
        std::lock_guard lock(m_mutex);
        m_token = token;
    }
    std::vector<Logged> log() const {
        std::lock_guard lock(m_mutex);
        return m_log;
    }
    void clearLog() {
        std::lock_guard lock(m_mutex);
        m_log.clear();
    }
    uint64_t bytesSent(const std::string &file) const {
        std::lock_guard lock(m_mutex);
        auto it = m_sent.find(file);
        return it == m_sent.end() ? 0 : it->second;
    }
    static std::string sha256(const std::string &data) {
        return QCryptographicHash::hash(QByteArray::fromStdString(data), QCryptographicHash::Sha256)
            .toHex()
            .toStdString();
    }
    static std::string gitBlobId(const std::string &data) {
        const std::string blob = "blob " + std::to_string(data.size()) + std::string(1, '\0') + data;
        return QCryptographicHash::hash(QByteArray::fromStdString(blob), QCryptographicHash::Sha1)
            .toHex()
            .toStdString();
    }
    static bool isLfs(const std::string &name) { return name.size() > 12 && name.ends_with(".safetensors"); }

    bool start() {
        m_listen = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (m_listen < 0) return false;
        int one = 1;
        ::setsockopt(m_listen, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (::bind(m_listen, reinterpret_cast<sockaddr *>(&a), sizeof a) != 0 || ::listen(m_listen, 64) != 0)
            return false;
        socklen_t len = sizeof a;
        ::getsockname(m_listen, reinterpret_cast<sockaddr *>(&a), &len);
        m_port = ntohs(a.sin_port);
        m_acceptor = std::thread([this] { acceptLoop(); });
        return true;
    }
    void stop() {
        if (m_stopping.exchange(true)) return;
        if (m_listen >= 0) ::shutdown(m_listen, SHUT_RDWR);
        if (m_acceptor.joinable()) m_acceptor.join();
        if (m_listen >= 0) ::close(m_listen);
        std::vector<std::thread> workers;
        {
            std::lock_guard lock(m_mutex);
            for (int fd : m_open) ::shutdown(fd, SHUT_RDWR);
            workers.swap(m_workers);
        }
        for (auto &t : workers) t.join();
    }
    int port() const { return m_port; }
    std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(m_port); }

private:
    void acceptLoop() {
        while (!m_stopping) {
            const int fd = ::accept4(m_listen, nullptr, nullptr, SOCK_CLOEXEC);
            if (fd < 0) {
                if (m_stopping || (errno != EINTR && errno != ECONNABORTED)) return;
                continue;
            }
            timeval tv{5, 0};
            ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
            ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
            std::lock_guard lock(m_mutex);
            m_open.insert(fd);
            m_workers.emplace_back([this, fd] {
                serve(fd);
                std::lock_guard l(m_mutex);
                m_open.erase(fd);
                ::close(fd);
            });
        }
    }

    static bool sendAll(int fd, const char *p, size_t n) {
        while (n) {
            const ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
            if (w <= 0) return false;
            p += w;
            n -= size_t(w);
        }
        return true;
    }
    static std::string decode(const std::string &s) {
        std::string out;
        for (size_t i = 0; i < s.size(); ++i) {
            if (s[i] == '%' && i + 2 < s.size()) {
                out += char(std::stoi(s.substr(i + 1, 2), nullptr, 16));
                i += 2;
            } else {
                out += s[i];
            }
        }
        return out;
    }
    void answer(int fd, int status, const std::string &body, const std::vector<std::string> &headers = {}) {
        std::string head = "HTTP/1.1 " + std::to_string(status) +
                           " X\r\nContent-Length: " + std::to_string(body.size()) +
                           "\r\nConnection: close\r\n";
        for (const auto &h : headers) head += h + "\r\n";
        head += "\r\n";
        sendAll(fd, head.data(), head.size()) && sendAll(fd, body.data(), body.size());
    }
    // The fault for a name — a status one or a body one — counted as used.
    std::optional<Fault> takeFault(const std::string &name, bool status) {
        std::lock_guard lock(m_mutex);
        auto it = m_faults.find(name);
        if (it == m_faults.end() || it->second.times == 0 || (it->second.status != 0) != status)
            return std::nullopt;
        if (it->second.times > 0) --it->second.times;
        return it->second;
    }

    void serve(int fd) {
        std::string req;
        char buf[4096];
        while (req.find("\r\n\r\n") == std::string::npos && req.size() < 65536) {
            const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
            if (n <= 0) return;
            req.append(buf, size_t(n));
        }
        const std::string line = req.substr(0, req.find("\r\n"));
        const auto sp1 = line.find(' '), sp2 = line.rfind(' ');
        if (sp1 == std::string::npos || sp2 <= sp1) return answer(fd, 400, "bad request");
        const std::string target = line.substr(sp1 + 1, sp2 - sp1 - 1);
        std::map<std::string, std::string> h;
        for (size_t at = req.find("\r\n") + 2; at < req.size();) {
            const size_t end = req.find("\r\n", at);
            if (end == std::string::npos || end == at) break;
            const std::string hl = req.substr(at, end - at);
            const auto colon = hl.find(':');
            if (colon != std::string::npos) {
                std::string k = hl.substr(0, colon), v = hl.substr(colon + 1);
                for (char &c : k) c = char(std::tolower(static_cast<unsigned char>(c)));
                while (!v.empty() && v.front() == ' ') v.erase(v.begin());
                h[k] = v;
            }
            at = end + 2;
        }
        std::string token;
        {
            std::lock_guard lock(m_mutex);
            m_log.push_back({target, h["range"], h["authorization"], h["host"]});
            token = m_token;
        }
        const std::string path = target.substr(0, target.find('?'));
        if (path.starts_with("/cdn/")) return serveContent(fd, path.substr(5), h["range"], true);
        if (!token.empty() && h["authorization"] != "Bearer " + token)
            return answer(fd, 401, R"({"error":"Invalid credentials in Authorization header"})");
        if (path.starts_with("/api/models/")) return serveListing(fd, path.substr(12));
        const auto resolve = path.find("/resolve/");
        if (resolve == std::string::npos) return answer(fd, 404, "no such route");
        const std::string repoId = decode(path.substr(1, resolve - 1));
        const std::string rest = path.substr(resolve + 9);
        const auto slash = rest.find('/');
        if (slash == std::string::npos) return answer(fd, 404, "no file");
        const std::string rev = decode(rest.substr(0, slash)), file = decode(rest.substr(slash + 1));
        std::string content, commit;
        {
            std::lock_guard lock(m_mutex);
            auto r = m_repos.find(repoId);
            if (r == m_repos.end())
                return answer(fd, 404, R"({"error":"Repository not found"})", {"X-Error-Code: RepoNotFound"});
            if (rev != "main" && rev != r->second.commit)
                return answer(fd, 404, R"({"error":"Revision not found"})",
                              {"X-Error-Code: RevisionNotFound"});
            auto f = r->second.files.find(file);
            if (f == r->second.files.end())
                return answer(fd, 404, R"({"error":"Entry not found"})", {"X-Error-Code: EntryNotFound"});
            content = f->second;
            commit = r->second.commit;
        }
        if (auto fault = takeFault(file, true)) {
            std::vector<std::string> hs;
            if (!fault->errorCode.empty()) hs.push_back("X-Error-Code: " + fault->errorCode);
            return answer(fd, fault->status, R"({"error":"fault"})", hs);
        }
        if (isLfs(file))
            return answer(fd, 302, "",
                          {"Location: http://localhost:" + std::to_string(m_port) + "/cdn/" + sha256(content),
                           "X-Linked-Etag: \"" + sha256(content) + "\"", "X-Repo-Commit: " + commit});
        serveBytes(fd, file, content, h["range"]);
    }

    void serveListing(int fd, const std::string &rest) {
        if (auto fault = takeFault("api", true)) {
            std::vector<std::string> hs;
            if (!fault->errorCode.empty()) hs.push_back("X-Error-Code: " + fault->errorCode);
            return answer(fd, fault->status, R"({"error":"fault"})", hs);
        }
        const auto at = rest.find("/revision/");
        if (at == std::string::npos) return answer(fd, 404, "no revision");
        const std::string repoId = decode(rest.substr(0, at)), rev = decode(rest.substr(at + 10));
        std::lock_guard lock(m_mutex);
        auto r = m_repos.find(repoId);
        if (r == m_repos.end())
            return answer(fd, 404, R"({"error":"Repository not found"})", {"X-Error-Code: RepoNotFound"});
        if (rev != "main" && rev != r->second.commit)
            return answer(fd, 404, R"({"error":"Revision not found"})", {"X-Error-Code: RevisionNotFound"});
        std::string siblings;
        for (const auto &[name, content] : r->second.files) {
            if (!siblings.empty()) siblings += ",";
            siblings += "{\"rfilename\":\"" + name + "\",\"size\":" + std::to_string(content.size()) +
                        ",\"blobId\":\"" + gitBlobId(isLfs(name) ? "pointer of " + name : content) + "\"";
            if (isLfs(name))
                siblings += ",\"lfs\":{\"sha256\":\"" + sha256(content) +
                            "\",\"size\":" + std::to_string(content.size()) + ",\"pointerSize\":134}";
            siblings += "}";
        }
        const std::string body = "{\"_id\":\"x\",\"id\":\"" + repoId + "\",\"sha\":\"" + r->second.commit +
                                 "\",\"siblings\":[" + siblings + "]}";
        answer(fd, 200, body, {"Content-Type: application/json"});
    }

    void serveContent(int fd, const std::string &sha, const std::string &range, bool) {
        std::string name, content;
        {
            std::lock_guard lock(m_mutex);
            for (const auto &[id, repo] : m_repos)
                for (const auto &[n, c] : repo.files)
                    if (isLfs(n) && sha256(c) == sha) {
                        name = n;
                        content = c;
                    }
        }
        if (name.empty()) return answer(fd, 404, "no such blob");
        serveBytes(fd, name, content, range);
    }

    void serveBytes(int fd, const std::string &name, std::string content, const std::string &range) {
        const Fault f = takeFault(name, false).value_or(Fault{});
        if (f.corrupt && !content.empty()) content[content.size() / 2] ^= 0x5a;
        uint64_t from = 0;
        if (range.starts_with("bytes=") && !f.ignoreRange) {
            from = std::stoull(range.substr(6));
            if (from >= content.size())
                return answer(fd, 416, "", {"Content-Range: bytes */" + std::to_string(content.size())});
        }
        std::string head =
            std::string("HTTP/1.1 ") + (from ? "206" : "200") +
            " X\r\nConnection: close\r\nContent-Length: " + std::to_string(content.size() - from) + "\r\n";
        if (from)
            head += "Content-Range: bytes " + std::to_string(from) + "-" +
                    std::to_string(content.size() - 1) + "/" + std::to_string(content.size()) + "\r\n";
        head += "\r\n";
        if (!sendAll(fd, head.data(), head.size())) return;
        uint64_t sent = 0;
        for (uint64_t at = from; at < content.size();) {
            size_t n = size_t(std::min<uint64_t>(16384, content.size() - at));
            if (f.dropAfter) {
                if (sent >= f.dropAfter) return; // the connection closes with the body unfinished
                n = size_t(std::min<uint64_t>(n, f.dropAfter - sent));
            }
            if (!sendAll(fd, content.data() + at, n)) return;
            at += n;
            sent += n;
            {
                std::lock_guard lock(m_mutex);
                m_sent[name] += n;
            }
            if (f.chunkDelayMs) std::this_thread::sleep_for(std::chrono::milliseconds(f.chunkDelayMs));
            if (m_stopping) return;
        }
    }

    mutable std::mutex m_mutex;
    std::map<std::string, Repo> m_repos;
    std::map<std::string, Fault> m_faults;
    std::map<std::string, uint64_t> m_sent;
    std::vector<Logged> m_log;
    std::string m_token;
    std::set<int> m_open;
    std::vector<std::thread> m_workers;
    std::thread m_acceptor;
    std::atomic<bool> m_stopping{false};
    int m_listen = -1, m_port = 0;
};
