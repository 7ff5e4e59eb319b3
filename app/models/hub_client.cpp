// The hub's HTTP API subset over cpp-httplib (hub_client.h).
#include "app/models/hub_client.h"

#include "app/models/digest.h"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <optional>
#include <thread>

namespace es::models {

namespace {

#ifndef ES_MODELS_USER_AGENT
#define ES_MODELS_USER_AGENT "expertscope"
#endif

struct url_parts {
    std::string scheme, host; // host without brackets
    int port = 0;
    std::string target; // path and query, starting with '/'
    std::string origin() const {
        const bool v6 = host.find(':') != std::string::npos;
        return scheme + "://" + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
    }
    bool same_origin(const url_parts &o) const {
        return scheme == o.scheme && host == o.host && port == o.port;
    }
};

std::string lower(std::string s) {
    for (char &c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
    return s;
}

std::optional<url_parts> parse_url(const std::string &url) {
    url_parts u;
    const auto sep = url.find("://");
    if (sep == std::string::npos) return std::nullopt;
    u.scheme = lower(url.substr(0, sep));
    if (u.scheme != "http" && u.scheme != "https") return std::nullopt;
    const auto path_at = url.find_first_of("/?#", sep + 3);
    std::string authority =
        url.substr(sep + 3, path_at == std::string::npos ? std::string::npos : path_at - sep - 3);
    if (authority.find('@') != std::string::npos) return std::nullopt; // no credentials in URLs
    u.target = path_at == std::string::npos ? "/" : url.substr(path_at);
    if (u.target.front() != '/') u.target.insert(0, "/");
    if (auto hash = u.target.find('#'); hash != std::string::npos) u.target.resize(hash);
    std::string port;
    if (!authority.empty() && authority.front() == '[') {
        const auto close = authority.find(']');
        if (close == std::string::npos) return std::nullopt;
        u.host = authority.substr(1, close - 1);
        if (close + 1 < authority.size() && authority[close + 1] == ':') port = authority.substr(close + 2);
    } else {
        const auto colon = authority.rfind(':');
        u.host = authority.substr(0, colon);
        if (colon != std::string::npos) port = authority.substr(colon + 1);
    }
    u.host = lower(u.host);
    if (u.host.empty()) return std::nullopt;
    u.port = u.scheme == "https" ? 443 : 80;
    if (!port.empty()) {
        if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
        u.port = std::stoi(port);
        if (u.port <= 0 || u.port > 65535) return std::nullopt;
    }
    return u;
}

// A Location header against the URL that answered it (absolute, scheme-relative, absolute-path or
// relative-path forms).
std::string resolve_location(const url_parts &base, const std::string &location) {
    if (location.find("://") != std::string::npos) return location;
    if (location.starts_with("//")) return base.scheme + ":" + location;
    const std::string origin =
        base.scheme + "://" + (base.host.find(':') != std::string::npos ? "[" + base.host + "]" : base.host) +
        ":" + std::to_string(base.port);
    if (location.starts_with("/")) return origin + location;
    std::string dir = base.target.substr(0, base.target.find('?'));
    dir.resize(dir.rfind('/') + 1);
    return origin + dir + location;
}

// "bytes 100-199/1000" → 100.
std::optional<uint64_t> content_range_start(const std::string &v) {
    if (!v.starts_with("bytes ")) return std::nullopt;
    const auto dash = v.find('-', 6);
    if (dash == std::string::npos || dash == 6) return std::nullopt;
    const std::string start = v.substr(6, dash - 6);
    if (start.find_first_not_of("0123456789") != std::string::npos || start.size() > 19) return std::nullopt;
    return std::stoull(start);
}

// What an answer that is not a file means, in words that say what to do.
std::string answer_message(int status, const std::string &url, bool token_sent, const std::string &error_code,
                           const std::string &error_message) {
    std::string detail = error_message.empty() ? "" : " (the server says: " + error_message + ")";
    if (error_code == "GatedRepo")
        return "the repository is gated (" + std::to_string(status) + " for " + url + ")" + detail +
               ": accept its conditions on the model's page while logged in, then set HF_TOKEN to a token of "
               "that "
               "account";
    if (status == 401 || status == 403) {
        if (token_sent)
            return "the server refused the token in HF_TOKEN (" + std::to_string(status) + " for " + url +
                   ")" + detail +
                   ": check that it is valid and that its account has access to the repository";
        return "a token is needed (" + std::to_string(status) + " for " + url + ")" + detail +
               ": the repository is private or gated, or does not exist; set HF_TOKEN to an access token (or "
               "log "
               "in with huggingface-cli login)";
    }
    if (status == 404) {
        const std::string what = error_code == "RevisionNotFound" ? "revision"
                                 : error_code == "EntryNotFound"  ? "file"
                                 : error_code == "RepoNotFound"   ? "repository"
                                                                  : "repository, revision or file";
        return "not found (404 for " + url + ")" + detail + ": check the " + what + " name";
    }
    return "the server answered " + std::to_string(status) + " for " + url + detail;
}

bool retry_status(int status) { return status == 408 || status == 429 || status >= 500; }

// httplib's error in words.
std::string transport_error(httplib::Error e) {
    switch (e) {
    case httplib::Error::Connection:
        return "could not connect";
    case httplib::Error::ConnectionTimeout:
        return "timed out connecting";
    case httplib::Error::Read:
        return "the connection broke or stalled while reading";
    case httplib::Error::Write:
        return "the connection broke while sending the request";
    case httplib::Error::SSLConnection:
        return "the TLS handshake failed";
    case httplib::Error::SSLLoadingCerts:
        return "the system's CA certificates could not be loaded";
    default:
        return httplib::to_string(e);
    }
}

} // namespace

std::string percent_encode(const std::string &s, bool keep_slash) {
    static const char *hex = "0123456789ABCDEF";
    std::string out;
    for (unsigned char c : s) {
        const bool unreserved = std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~';
        if (unreserved || (keep_slash && c == '/')) {
            out += char(c);
        } else {
            out += '%';
            out += hex[c >> 4];
            out += hex[c & 15];
        }
    }
    return out;
}

hub_client::hub_client(hub_settings settings) : m_settings(std::move(settings)) {
    while (m_settings.endpoint.size() > 1 && m_settings.endpoint.back() == '/')
        m_settings.endpoint.pop_back();
}

void hub_client::set_timeouts(std::chrono::seconds connect, std::chrono::seconds read) {
    m_connect_timeout = connect;
    m_read_timeout = read;
}

std::string hub_client::api_url(const std::string &repo_id, const std::string &revision) const {
    return m_settings.endpoint + "/api/models/" + percent_encode(repo_id, true) + "/revision/" +
           percent_encode(revision, false) + "?blobs=true";
}

std::string hub_client::resolve_url(const std::string &repo_id, const std::string &revision,
                                    const std::string &path) const {
    return m_settings.endpoint + "/" + percent_encode(repo_id, true) + "/resolve/" +
           percent_encode(revision, false) + "/" + percent_encode(path, true);
}

fetch_status hub_client::fetch(const std::string &url, uint64_t offset, const sink &sink,
                               const std::atomic<bool> *cancel) const {
    const std::optional<url_parts> endpoint = parse_url(m_settings.endpoint);
    std::string current = url;
    for (int hop = 0; hop <= 10; ++hop) {
        const std::optional<url_parts> u = parse_url(current);
        if (!u) return {fetch_outcome::fail, 0, "'" + current + "' is not an http:// or https:// URL"};
        httplib::Client cli(u->origin());
        if (!cli.is_valid()) return {fetch_outcome::fail, 0, "cannot make a client for " + u->origin()};
        cli.set_follow_location(false); // followed here, so the token stays with the endpoint's host
        cli.set_url_encode(false);      // paths arrive encoded
        cli.set_decompress(false);
        cli.set_keep_alive(false);
        cli.set_connection_timeout(time_t(m_connect_timeout.count()));
        cli.set_read_timeout(time_t(m_read_timeout.count()));
        httplib::Headers headers{{"User-Agent", ES_MODELS_USER_AGENT}, {"Accept-Encoding", "identity"}};
        const bool token_sent = !m_settings.token.empty() && endpoint && endpoint->same_origin(*u);
        if (token_sent) headers.emplace("Authorization", "Bearer " + m_settings.token);
        if (offset > 0) headers.emplace("Range", "bytes=" + std::to_string(offset) + "-");

        int status = 0;
        std::string location, error_code, error_message, body, stop_reason;
        bool in_body = false, stopped = false, cancelled = false;
        const httplib::Result res = cli.Get(
            u->target, headers,
            [&](const httplib::Response &r) {
                status = r.status;
                location = r.get_header_value("Location");
                error_code = r.get_header_value("X-Error-Code");
                error_message = r.get_header_value("X-Error-Message");
                if (status != 200 && status != 206) return true; // its body is read as the message's
                uint64_t start = 0;
                if (status == 206) {
                    const auto s = content_range_start(r.get_header_value("Content-Range"));
                    if (!s || *s != offset) {
                        stop_reason = "the server answered the range request for bytes " +
                                      std::to_string(offset) + "- of " + current + " with '" +
                                      r.get_header_value("Content-Range") + "'";
                        stopped = true;
                        return false;
                    }
                    start = *s;
                }
                if (!sink.begin(start)) {
                    stopped = true;
                    return false;
                }
                in_body = true;
                return true;
            },
            [&](const char *data, size_t n) {
                if (cancel && cancel->load(std::memory_order_relaxed)) {
                    cancelled = true;
                    return false;
                }
                if (in_body) {
                    if (!sink.data(data, n)) {
                        stopped = true;
                        return false;
                    }
                    return true;
                }
                if (body.size() < 4096) body.append(data, std::min(n, size_t(4096) - body.size()));
                return true;
            });
        if (cancelled || (cancel && cancel->load())) return {fetch_outcome::cancelled, status, "cancelled"};
        if (stopped) return {fetch_outcome::fail, status, stop_reason};
        if (!res) {
            const httplib::Error e = res.error();
            std::string what = u->origin() + ": " + transport_error(e);
            if (in_body) what = "the connection to " + u->origin() + " dropped during the transfer";
            const bool permanent =
                e == httplib::Error::SSLServerVerification || e == httplib::Error::SSLLoadingCerts;
            if (e == httplib::Error::SSLServerVerification)
                what = "the TLS certificate of " + u->host + " could not be verified";
            return {permanent ? fetch_outcome::fail : fetch_outcome::retry, status, what};
        }
        if (in_body) return {fetch_outcome::ok, status, ""};
        if (status >= 300 && status < 400 && !location.empty()) {
            current = resolve_location(*u, location);
            continue;
        }
        if (error_message.empty() && !body.empty()) {
            // The hub's JSON errors carry {"error": "..."}; a short text body says it too.
            const auto j = nlohmann::json::parse(body, nullptr, false);
            if (j.is_object() && j.contains("error") && j["error"].is_string()) error_message = j["error"];
        }
        return {retry_status(status) ? fetch_outcome::retry : fetch_outcome::fail, status,
                answer_message(status, current, token_sent, error_code, error_message)};
    }
    return {fetch_outcome::fail, 0, "more than 10 redirects from " + url};
}

result<std::string> hub_client::fetch_text(const std::string &url, size_t max_bytes,
                                           const std::atomic<bool> *cancel) const {
    std::string text;
    bool too_long = false;
    sink s{[&](uint64_t) {
               text.clear();
               return true;
           },
           [&](const char *data, size_t n) {
               if (text.size() + n > max_bytes) {
                   too_long = true;
                   return false;
               }
               text.append(data, n);
               return true;
           }};
    fetch_status st;
    for (int attempt = 0; attempt < 3; ++attempt) {
        if (attempt) std::this_thread::sleep_for(std::chrono::milliseconds(500 << attempt));
        st = fetch(url, 0, s, cancel);
        if (st.outcome != fetch_outcome::retry) break;
    }
    if (too_long) return error{url + " is larger than " + std::to_string(max_bytes) + " bytes"};
    if (st.outcome != fetch_outcome::ok) return error{st.message};
    return text;
}

result<repo_listing> hub_client::list_files(const std::string &repo_id, const std::string &revision,
                                            const std::atomic<bool> *cancel) const {
    if (auto st = check_repo_id(repo_id); !st) return st.err();
    if (auto st = check_revision(revision); !st) return st.err();
    const std::string url = api_url(repo_id, revision);
    auto text = fetch_text(url, size_t(64) << 20, cancel);
    if (!text) return text.err();
    const auto j = nlohmann::json::parse(*text, nullptr, false);
    const std::string where = "the file list of " + repo_id + " (" + url + ")";
    if (!j.is_object()) return error{where + " is not a JSON object"};
    repo_listing out;
    out.repo_id = repo_id;
    if (!j.contains("sha") || !j["sha"].is_string() || !is_hex_id(j["sha"].get<std::string>(), 40))
        return error{where + " has no commit id ('sha', 40 hex digits)"};
    out.commit = j["sha"].get<std::string>();
    if (!j.contains("siblings") || !j["siblings"].is_array()) return error{where + " has no 'siblings' list"};
    for (const auto &s : j["siblings"]) {
        if (!s.is_object() || !s.contains("rfilename") || !s["rfilename"].is_string())
            return error{where + ": an entry of 'siblings' has no 'rfilename'"};
        hub_file f;
        f.path = s["rfilename"].get<std::string>();
        if (auto st = check_repo_path(f.path); !st) return error{where + ": " + st.message()};
        const auto number = [](const nlohmann::json &v) {
            return v.is_number_unsigned() || v.is_number_integer();
        };
        if (s.contains("lfs") && s["lfs"].is_object()) {
            const auto &lfs = s["lfs"];
            if (!lfs.contains("sha256") || !lfs["sha256"].is_string() || !lfs.contains("size") ||
                !number(lfs["size"]))
                return error{where + ": '" + f.path + "' is an LFS file without 'sha256' and 'size'"};
            f.sha256 = lower(lfs["sha256"].get<std::string>());
            if (!is_hex_id(f.sha256, 64)) return error{where + ": '" + f.path + "' has a malformed SHA-256"};
            if (lfs["size"].get<int64_t>() < 0)
                return error{where + ": '" + f.path + "' has a negative size"};
            f.size = lfs["size"].get<uint64_t>();
        } else {
            if (!s.contains("size") || !number(s["size"]) || s["size"].get<int64_t>() < 0)
                return error{where + ": '" + f.path +
                             "' has no size (the list is asked for with ?blobs=true)"};
            f.size = s["size"].get<uint64_t>();
        }
        if (s.contains("blobId") && s["blobId"].is_string())
            f.blob_id = lower(s["blobId"].get<std::string>());
        if (f.sha256.empty() && !is_hex_id(f.blob_id, 40))
            return error{where + ": '" + f.path +
                         "' has no digest to verify it by (no 'blobId' or 'lfs.sha256')"};
        out.files.push_back(std::move(f));
    }
    return out;
}

} // namespace es::models
