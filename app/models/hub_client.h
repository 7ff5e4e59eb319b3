// A client of the Hugging Face hub's HTTP API, the subset downloads need (cpp-httplib, with
// OpenSSL for https): the repo API's file list with sizes and digests, and files through
// /resolve/ with redirects followed and byte ranges. Any server that speaks this subset works:
// the hub, a mirror (HF_ENDPOINT), the test suite's server.
#pragma once

#include "app/models/hub_cache.h"
#include "engine/core/status.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace es::models {

// One file of a repo at a commit, as GET /api/models/{repo}/revision/{rev}?blobs=true lists it
// (siblings[]: rfilename, size, blobId, lfs {sha256, size}).
struct hub_file {
    std::string path;    // rfilename
    uint64_t size = 0;   // the content's bytes (for LFS files lfs.size, not the pointer's)
    std::string sha256;  // LFS files: the content's SHA-256, lower-case hex
    std::string blob_id; // the git blob SHA-1
    // The blob's name in the cache, as huggingface_hub names it: the SHA-256 for LFS files, the
    // git blob id for the others.
    const std::string &etag() const { return sha256.empty() ? blob_id : sha256; }
};

struct repo_listing {
    std::string repo_id;
    std::string commit; // the revision resolved to its 40-digit commit id
    std::vector<hub_file> files;
};

// How a request ended, as the downloader acts on it.
enum class fetch_outcome {
    ok,
    retry,     // the connection dropped, timed out or the server is busy (429, 5xx): resume later
    fail,      // an answer that will not change (401, 404, …) or a local error; message says which
    cancelled, // the cancel flag was raised
};
struct fetch_status {
    fetch_outcome outcome = fetch_outcome::ok;
    int http_status = 0; // the last answer's status, 0 when none came
    std::string message; // empty when ok
};

class hub_client {
public:
    explicit hub_client(hub_settings settings);
    const hub_settings &settings() const { return m_settings; }
    // Seconds a request may wait for the connection and for each read (a stalled transfer).
    void set_timeouts(std::chrono::seconds connect, std::chrono::seconds read);

    // {endpoint}/api/models/{repo}/revision/{rev}?blobs=true and {endpoint}/{repo}/resolve/{rev}/{path},
    // the revision and path percent-encoded.
    std::string api_url(const std::string &repo_id, const std::string &revision) const;
    std::string resolve_url(const std::string &repo_id, const std::string &revision,
                            const std::string &path) const;

    // The repo's files at a revision. Every path is checked (check_repo_path), every file has a
    // size and a digest to verify it by; the commit is 40 hex digits.
    result<repo_listing> list_files(const std::string &repo_id, const std::string &revision,
                                    const std::atomic<bool> *cancel = nullptr) const;
    // A small file (config.json), at most max_bytes.
    result<std::string> fetch_text(const std::string &url, size_t max_bytes,
                                   const std::atomic<bool> *cancel = nullptr) const;

    // What receives a body: begin(start) once the answer is known (start: the byte the body
    // begins at — the offset asked for, or 0 when the server sent the whole file instead), then
    // data(bytes, n) per piece. Either returns false to stop the transfer (outcome fail).
    struct sink {
        std::function<bool(uint64_t start)> begin;
        std::function<bool(const char *data, size_t n)> data;
    };
    // GET url from byte `offset` on (a Range header when offset > 0), following up to 10
    // redirects; the token goes only to the endpoint's own host, never to a CDN it redirects to.
    fetch_status fetch(const std::string &url, uint64_t offset, const sink &sink,
                       const std::atomic<bool> *cancel = nullptr) const;

private:
    hub_settings m_settings;
    std::chrono::seconds m_connect_timeout{15}, m_read_timeout{60};
};

// "%2F"-style encoding of everything but RFC 3986's unreserved characters (and '/' when keep_slash).
std::string percent_encode(const std::string &s, bool keep_slash);

} // namespace es::models
