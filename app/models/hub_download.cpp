// Downloads into the hub cache: plan, free-space check, resumable verified blobs, snapshot links
// (hub_download.h).
#include "app/models/hub_download.h"

#include "app/models/digest.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <thread>

namespace fs = std::filesystem;

namespace es::models {

namespace {

using clock_type = std::chrono::steady_clock;

std::string os_error(const std::string &what, const fs::path &p, int err) {
    return what + " " + p.string() + ": " + std::strerror(err);
}

// An open descriptor, closed when it goes.
struct fd_guard {
    int fd = -1;
    explicit fd_guard(int f) : fd(f) {}
    fd_guard(const fd_guard &) = delete;
    fd_guard &operator=(const fd_guard &) = delete;
    ~fd_guard() {
        if (fd >= 0) ::close(fd);
    }
};

// .locks/models--org--name/<etag>.lock held with flock(), as huggingface_hub's FileLock holds it:
// two programs never write one blob at once, and a killed holder's lock goes with its process.
result<std::unique_ptr<fd_guard>> lock_blob(const repo_cache &cache, const hub_file &f) {
    const fs::path p = cache.lock(f.etag());
    std::error_code ec;
    fs::create_directories(p.parent_path(), ec);
    if (ec) return error{"cannot create " + p.parent_path().string() + ": " + ec.message()};
    auto g = std::make_unique<fd_guard>(::open(p.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    if (g->fd < 0) return error{os_error("cannot open the lock", p, errno)};
    if (::flock(g->fd, LOCK_EX | LOCK_NB) != 0)
        return error{errno == EWOULDBLOCK
                         ? "another program is downloading " + f.path + " into the cache (it holds " +
                               p.string() + "); try again when it has finished"
                         : os_error("cannot lock", p, errno)};
    return g;
}

// Progress of the whole download, reported at most every 100 ms (and at every stage change);
// speed over the last five seconds of transfer.
class progress_meter {
public:
    explicit progress_meter(const download_options &o) : m_o(o) {}
    download_progress p;

    void stage(download_progress::stage s, const std::string &file = {}) {
        p.what = s;
        p.file = file;
        report(true);
    }
    void add(uint64_t n) {
        p.done += n;
        m_fetched += n;
        report(false);
    }
    void take_back(uint64_t n) { p.done -= std::min(p.done, n); }
    uint64_t fetched() const { return m_fetched; }

private:
    void report(bool force) {
        const auto now = clock_type::now();
        m_samples.emplace_back(now, m_fetched);
        while (m_samples.size() > 2 && now - m_samples[1].first > std::chrono::seconds(5))
            m_samples.pop_front();
        if (!m_o.on_progress || (!force && now - m_last < std::chrono::milliseconds(100))) return;
        m_last = now;
        const double dt = std::chrono::duration<double>(now - m_samples.front().first).count();
        p.bytes_per_second = dt >= 0.5 ? double(m_fetched - m_samples.front().second) / dt : 0.0;
        p.seconds_left =
            p.bytes_per_second > 0 ? double(p.total - std::min(p.total, p.done)) / p.bytes_per_second : -1;
        m_o.on_progress(p);
    }
    const download_options &m_o;
    uint64_t m_fetched = 0;
    std::deque<std::pair<clock_type::time_point, uint64_t>> m_samples;
    clock_type::time_point m_last{};
};

// Sleeps up to `seconds`, returning early (false) when the cancel flag rises.
bool wait_unless_cancelled(double seconds, const std::atomic<bool> *cancel) {
    const auto until = clock_type::now() + std::chrono::duration<double>(seconds);
    while (clock_type::now() < until) {
        if (cancel && cancel->load()) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return !(cancel && cancel->load());
}

uint64_t size_or_zero(const fs::path &p) {
    std::error_code ec;
    const auto n = fs::file_size(p, ec);
    return ec ? 0 : uint64_t(n);
}

bool blob_present(const repo_cache &cache, const hub_file &f) {
    std::error_code ec;
    return fs::is_regular_file(cache.blob(f.etag()), ec) && size_or_zero(cache.blob(f.etag())) == f.size;
}

// The bytes of a partial file that a resume continues (a partial longer than the file starts over).
uint64_t partial_bytes(const repo_cache &cache, const hub_file &f) {
    const uint64_t n = size_or_zero(cache.incomplete(f.etag()));
    return n <= f.size ? n : 0;
}

// One file into blobs/<etag>: resumed from its .incomplete file, verified, renamed into place.
status fetch_blob(const hub_client &client, const download_options &o, const repo_cache &cache,
                  const std::string &commit, const hub_file &f, progress_meter &meter, download_result &r) {
    const fs::path part = cache.incomplete(f.etag()), blob = cache.blob(f.etag());
    fd_guard file(::open(part.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
    if (file.fd < 0) return error{os_error("cannot open", part, errno)};
    struct stat st {};
    if (::fstat(file.fd, &st) != 0) return error{os_error("cannot read", part, errno)};
    uint64_t pos = uint64_t(st.st_size);
    if (pos > f.size) { // not this file's beginning: start over
        if (::ftruncate(file.fd, 0) != 0) return error{os_error("cannot truncate", part, errno)};
        pos = 0;
    }
    const digest::kind kind = f.sha256.empty() ? digest::kind::git_blob_sha1 : digest::kind::sha256;
    auto hash = std::make_unique<digest>(kind, f.size);
    // The digest's state is not kept on disk: a resumed file's bytes are read back into it first.
    if (pos > 0) {
        meter.stage(download_progress::stage::verifying, f.path);
        std::vector<char> buf(size_t(1) << 20);
        for (uint64_t at = 0; at < pos;) {
            const ssize_t n =
                ::pread(file.fd, buf.data(), size_t(std::min<uint64_t>(buf.size(), pos - at)), off_t(at));
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) return error{os_error("cannot read back", part, n < 0 ? errno : EIO)};
            hash->update(buf.data(), size_t(n));
            at += uint64_t(n);
        }
        r.resumed_from_bytes += pos;
    }
    meter.stage(download_progress::stage::downloading, f.path);

    std::string write_error;
    const auto restart = [&] {
        meter.take_back(pos);
        pos = 0;
        hash = std::make_unique<digest>(kind, f.size);
        return ::ftruncate(file.fd, 0) == 0;
    };
    const hub_client::sink sink{
        [&](uint64_t start) {
            if (start == 0 && pos > 0 && !restart()) { // the server sent the whole file: keep it, not ours
                write_error = os_error("cannot truncate", part, errno);
                return false;
            }
            return true;
        },
        [&](const char *data, size_t n) {
            if (pos + n > f.size) {
                write_error = f.path + ": the server sent more than the " + std::to_string(f.size) +
                              " bytes the file list gives";
                return false;
            }
            for (size_t off = 0; off < n;) {
                const ssize_t w = ::pwrite(file.fd, data + off, n - off, off_t(pos + off));
                if (w < 0 && errno == EINTR) continue;
                if (w <= 0) {
                    const int err = w < 0 ? errno : EIO;
                    write_error = os_error("cannot write", part, err);
                    if (err == ENOSPC || err == EDQUOT || err == EFBIG)
                        write_error +=
                            " — the disk is full; the partial file is kept and the download resumes "
                            "from it once there is room";
                    return false;
                }
                off += size_t(w);
            }
            hash->update(data, n);
            pos += n;
            meter.add(n);
            return true;
        }};

    const std::string url = client.resolve_url(o.repo_id, commit, f.path);
    double wait = o.retry_wait_s;
    bool restarted_after_416 = false;
    for (int attempt = 1; pos < f.size; ++attempt) {
        const fetch_status fs_ = client.fetch(url, pos, sink, o.cancel);
        if (!write_error.empty()) return error{write_error};
        if (fs_.outcome == fetch_outcome::cancelled)
            return error{"cancelled; the partial file " + part.string() +
                         " is kept and the download resumes from it"};
        std::string why = fs_.message;
        if (fs_.outcome == fetch_outcome::fail) {
            // A range the server cannot satisfy: the partial is not a prefix it knows; start over once.
            if (fs_.http_status == 416 && pos > 0 && !restarted_after_416) {
                restarted_after_416 = true;
                if (!restart()) return error{os_error("cannot truncate", part, errno)};
                continue;
            }
            return error{f.path + ": " + fs_.message};
        }
        if (fs_.outcome == fetch_outcome::ok) {
            if (pos >= f.size) break;
            why = "the transfer ended after " + std::to_string(pos) + " of " + std::to_string(f.size) +
                  " bytes";
        }
        if (attempt >= o.max_attempts)
            return error{f.path + ": " + why + "; gave up after " + std::to_string(attempt) +
                         " attempts — the partial file is kept: run the download again to resume it"};
        if (!wait_unless_cancelled(wait, o.cancel))
            return error{"cancelled; the partial file " + part.string() +
                         " is kept and the download resumes from it"};
        wait = std::min(wait * 2, 30.0);
    }

    meter.stage(download_progress::stage::verifying, f.path);
    if (::fdatasync(file.fd) != 0) return error{os_error("cannot write", part, errno)};
    const std::string got = hash->hex();
    const std::string &want = f.sha256.empty() ? f.blob_id : f.sha256;
    if (got != want) {
        ::unlink(part.c_str()); // a corrupt file is never kept, nor resumed from
        return error{f.path + ": the downloaded file's " +
                     (f.sha256.empty() ? "git blob SHA-1 " : "SHA-256 ") + got + " is not the " + want +
                     " the hub lists; it was removed (nothing of it is kept)"};
    }
    if (::rename(part.c_str(), blob.c_str()) != 0)
        return error{os_error("cannot move into place", part, errno)};
    ++r.files_fetched;
    return ok_status();
}

} // namespace

std::string human_bytes(uint64_t b) {
    const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = double(b);
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        ++u;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
    return buf;
}

bool is_unused_weight_file(const std::string &path) {
    for (const char *suffix :
         {".bin", ".pt", ".pth", ".pdparams", ".gguf", ".h5", ".msgpack", ".onnx", ".ckpt"})
        if (path.ends_with(suffix)) return true;
    return false;
}

result<download_plan> plan_download(const download_options &o) {
    if (auto st = check_repo_id(o.repo_id); !st) return st.err();
    if (auto st = check_revision(o.revision); !st) return st.err();
    hub_client client(o.hub);
    auto listing = client.list_files(o.repo_id, o.revision, o.cancel);
    if (!listing) return listing.err();
    download_plan plan;
    plan.listing = std::move(*listing);
    bool has_config = false, has_weights = false;
    for (const hub_file &f : plan.listing.files) {
        if (is_unused_weight_file(f.path)) continue;
        has_config |= f.path == "config.json";
        has_weights |= f.path.ends_with(".safetensors");
        plan.files.push_back(f);
    }
    const std::string where = o.repo_id + " at " + o.revision;
    if (!has_config) return error{where + " has no config.json: not a model repository the engine can load"};
    if (!has_weights) return error{where + " has no safetensors weights (the engine reads safetensors only)"};

    // config.json first, checked as the loader checks it: nothing else is fetched for a model the
    // engine would refuse.
    const repo_cache cache(o.hub.cache_dir, o.repo_id);
    const hub_file &config_file = *std::find_if(plan.files.begin(), plan.files.end(),
                                                [](const hub_file &f) { return f.path == "config.json"; });
    std::string config_text;
    if (blob_present(cache, config_file)) {
        std::ifstream in(cache.blob(config_file.etag()), std::ios::binary);
        config_text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    } else {
        auto text = client.fetch_text(client.resolve_url(o.repo_id, plan.listing.commit, "config.json"),
                                      1 << 20, o.cancel);
        if (!text) return error{where + ": config.json: " + text.message()};
        config_text = std::move(*text);
    }
    auto config = parse_model_config(config_text, o.repo_id + "/config.json");
    if (!config) return error{config.message() + " — " + o.repo_id + " was not downloaded"};
    plan.config = *config;

    std::map<std::string, bool> counted; // a blob shared by two paths counts once
    for (const hub_file &f : plan.files) {
        if (counted[f.etag()]) continue;
        counted[f.etag()] = true;
        plan.total_bytes += f.size;
        if (!blob_present(cache, f)) plan.missing_bytes += f.size;
    }
    return plan;
}

result<download_result> download_model(const download_options &o) {
    progress_meter meter(o);
    meter.stage(download_progress::stage::listing);
    auto plan = plan_download(o);
    if (!plan) return plan.err();
    download_result r;
    r.plan = std::move(*plan);
    if (o.on_plan && !o.on_plan(r.plan)) return error{"stopped before downloading " + o.repo_id};
    const repo_cache cache(o.hub.cache_dir, o.repo_id);
    const std::string &commit = r.plan.listing.commit;

    // What to fetch (one per blob), and the free space it needs beyond the partial files.
    std::vector<hub_file> to_fetch;
    std::map<std::string, bool> seen;
    uint64_t needed = 0, on_disk = 0;
    for (const hub_file &f : r.plan.files) {
        if (seen[f.etag()]) continue;
        seen[f.etag()] = true;
        if (blob_present(cache, f)) {
            ++r.files_cached;
            continue;
        }
        to_fetch.push_back(f);
        const uint64_t have = partial_bytes(cache, f);
        on_disk += have;
        needed += f.size - have;
    }
    meter.stage(download_progress::stage::checking);
    const fs::path blobs = cache.dir() / "blobs";
    std::error_code ec;
    fs::create_directories(blobs, ec);
    if (ec) return error{"cannot create " + blobs.string() + ": " + ec.message()};
    const uint64_t free_bytes = o.free_space ? o.free_space(blobs) : uint64_t(fs::space(blobs, ec).available);
    if (ec) return error{"cannot tell the free space of " + blobs.string() + ": " + ec.message()};
    if (needed > free_bytes)
        return error{"not enough free space for " + o.repo_id + ": " + human_bytes(needed) +
                     " to download, " + human_bytes(free_bytes) + " free in " + blobs.string() +
                     " (free some space or set HF_HUB_CACHE to a folder on a larger disk)"};

    meter.p.file_count = int(to_fetch.size());
    meter.p.total = needed + on_disk;
    meter.p.done = on_disk;
    for (size_t i = 0; i < to_fetch.size(); ++i) {
        meter.p.file_index = int(i) + 1;
        auto lock = lock_blob(cache, to_fetch[i]);
        if (!lock) return lock.err();
        if (blob_present(cache, to_fetch[i])) { // another program finished it while we waited
            meter.p.done += to_fetch[i].size - std::min(to_fetch[i].size, partial_bytes(cache, to_fetch[i]));
            continue;
        }
        const hub_client client(o.hub);
        if (auto st = fetch_blob(client, o, cache, commit, to_fetch[i], meter, r); !st) {
            r.fetched_bytes = meter.fetched();
            return st.err();
        }
    }
    r.fetched_bytes = meter.fetched();

    // Every blob is in place: now the snapshot's links, then the revision's ref.
    meter.stage(download_progress::stage::linking);
    for (const hub_file &f : r.plan.files)
        if (auto st = cache.link(commit, f.path, f.etag()); !st) return st.err();
    if (auto st = cache.write_ref(o.revision, commit); !st) return st.err();
    r.snapshot_dir = cache.snapshot(commit);
    return r;
}

} // namespace es::models
