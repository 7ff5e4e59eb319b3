// The hub's cache layout, its environment, and the scan that lists what is in it (hub_cache.h).
#include "app/models/hub_cache.h"

#include "app/models/digest.h"
#include "engine/model/safetensors.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <pwd.h>
#include <sstream>
#include <system_error>

namespace fs = std::filesystem;

namespace es::models {

namespace {

std::string env(const char *name) {
    const char *v = std::getenv(name);
    return v ? std::string(v) : std::string();
}

fs::path home_dir() {
    if (auto h = env("HOME"); !h.empty()) return h;
    if (const passwd *pw = getpwuid(getuid()); pw && pw->pw_dir) return pw->pw_dir;
    return fs::current_path();
}

fs::path expand_user(const std::string &p) {
    if (p == "~" || p.starts_with("~/")) return home_dir() / p.substr(std::min<size_t>(p.size(), 2));
    return p;
}

std::string trim(std::string s) {
    while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
    size_t i = 0;
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    return s.substr(i);
}

bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == '-';
}

// One part of a repo id: the hub's rules (1–96 name characters, not starting or ending with '.'
// or '-', no ".." or "--", which the cache's folder names would make ambiguous).
bool valid_name_part(const std::string &s) {
    if (s.empty() || s.size() > 96) return false;
    if (!std::all_of(s.begin(), s.end(), name_char)) return false;
    if (s.front() == '.' || s.front() == '-' || s.back() == '.' || s.back() == '-') return false;
    return s.find("..") == std::string::npos && s.find("--") == std::string::npos;
}

bool has_control_char(const std::string &s) {
    return std::any_of(s.begin(), s.end(),
                       [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; });
}

std::string read_small_file(const fs::path &p) {
    std::ifstream in(p, std::ios::binary);
    std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    return s.size() > 4096 ? std::string() : s;
}

int64_t mtime_of(const fs::path &p) {
    struct stat st {};
    return ::stat(p.c_str(), &st) == 0 ? int64_t(st.st_mtime) : 0;
}

} // namespace

hub_settings hub_settings_from_environment() {
    hub_settings s;
    if (auto e = env("HF_ENDPOINT"); !e.empty()) s.endpoint = e;
    while (s.endpoint.size() > 1 && s.endpoint.back() == '/') s.endpoint.pop_back();
    const std::string xdg = env("XDG_CACHE_HOME");
    const fs::path cache_root = xdg.empty() ? home_dir() / ".cache" : fs::path(xdg);
    const std::string hf_home_env = env("HF_HOME");
    const fs::path hf_home = hf_home_env.empty() ? cache_root / "huggingface" : expand_user(hf_home_env);
    std::string hub = env("HF_HUB_CACHE");
    if (hub.empty()) hub = env("HUGGINGFACE_HUB_CACHE");
    s.cache_dir = hub.empty() ? hf_home / "hub" : expand_user(hub);
    s.token = env("HF_TOKEN");
    if (s.token.empty()) s.token = env("HUGGING_FACE_HUB_TOKEN");
    if (s.token.empty()) {
        const std::string path = env("HF_TOKEN_PATH");
        s.token = trim(read_small_file(path.empty() ? hf_home / "token" : expand_user(path)));
    }
    s.token = trim(s.token);
    return s;
}

status check_repo_id(const std::string &repo_id) {
    const auto slash = repo_id.find('/');
    const bool ok = slash == std::string::npos ? valid_name_part(repo_id)
                                               : valid_name_part(repo_id.substr(0, slash)) &&
                                                     valid_name_part(repo_id.substr(slash + 1));
    if (!ok)
        return error{"'" + repo_id +
                     "' is not a hub repository id (expected org/name: letters, digits, '.', '_', '-', "
                     "as in baidu/ERNIE-4.5-0.3B-PT)"};
    return ok_status();
}

status check_revision(const std::string &revision) {
    if (revision.empty() || revision.size() > 256 || revision.front() == '/' || revision.back() == '/' ||
        revision.find("..") != std::string::npos || revision.find('\\') != std::string::npos ||
        revision.find("//") != std::string::npos || has_control_char(revision))
        return error{"'" + revision + "' is not a revision (a branch, tag or commit id such as main)"};
    return ok_status();
}

status check_repo_path(const std::string &path) {
    bool ok = !path.empty() && path.size() <= 1024 && path.front() != '/' &&
              path.find('\\') == std::string::npos && !has_control_char(path);
    std::stringstream parts(path);
    for (std::string part; ok && std::getline(parts, part, '/');)
        ok = !part.empty() && part != "." && part != "..";
    if (ok && path.back() == '/') ok = false;
    if (!ok) return error{"the hub lists a file named '" + path + "', which is not a safe relative path"};
    return ok_status();
}

std::string repo_folder_name(const std::string &repo_id) {
    std::string out = "models--";
    for (char c : repo_id) {
        if (c == '/')
            out += "--";
        else
            out += c;
    }
    return out;
}

repo_cache::repo_cache(fs::path cache_dir, const std::string &repo_id)
    : m_cache(std::move(cache_dir)), m_folder(repo_folder_name(repo_id)) {
    m_dir = m_cache / m_folder;
}

fs::path repo_cache::lock(const std::string &etag) const {
    return m_cache / ".locks" / m_folder / (etag + ".lock");
}

std::optional<std::string> repo_cache::commit_for(const std::string &revision) const {
    if (is_hex_id(revision, 40)) return revision;
    std::error_code ec;
    if (!fs::is_regular_file(ref(revision), ec)) return std::nullopt;
    const std::string commit = trim(read_small_file(ref(revision)));
    if (!is_hex_id(commit, 40)) return std::nullopt;
    return commit;
}

status repo_cache::link(const std::string &commit, const std::string &path, const std::string &etag) const {
    const fs::path link_path = snapshot(commit) / path;
    // ../../blobs/<etag> from snapshots/<commit>/, one more ".." per folder of the path.
    fs::path target = "..";
    target /= "..";
    for (size_t i = 0; i < size_t(std::count(path.begin(), path.end(), '/')); ++i) target /= "..";
    target = target / "blobs" / etag;
    std::error_code ec;
    fs::create_directories(link_path.parent_path(), ec);
    if (ec) return error{"cannot create " + link_path.parent_path().string() + ": " + ec.message()};
    // Made beside its place and renamed over it: the path always names a whole link.
    const fs::path tmp = link_path.string() + ".link-" + std::to_string(::getpid());
    fs::remove(tmp, ec);
    fs::create_symlink(target, tmp, ec);
    if (ec) return error{"cannot create the link " + tmp.string() + ": " + ec.message()};
    fs::rename(tmp, link_path, ec);
    if (ec) {
        fs::remove(tmp);
        return error{"cannot create the link " + link_path.string() + ": " + ec.message()};
    }
    return ok_status();
}

status repo_cache::write_ref(const std::string &revision, const std::string &commit) const {
    if (revision == commit) return ok_status();
    const fs::path p = ref(revision);
    std::error_code ec;
    fs::create_directories(p.parent_path(), ec);
    if (ec) return error{"cannot create " + p.parent_path().string() + ": " + ec.message()};
    const fs::path tmp = p.string() + ".tmp-" + std::to_string(::getpid());
    {
        std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
        out << commit; // as huggingface_hub writes it: the id, no newline
        if (!out.flush()) return error{"cannot write " + tmp.string()};
    }
    fs::rename(tmp, p, ec);
    if (ec) return error{"cannot write " + p.string() + ": " + ec.message()};
    return ok_status();
}

std::vector<cached_model> scan_cache(const fs::path &cache_dir) {
    std::vector<cached_model> out;
    std::error_code ec;
    for (const fs::directory_entry &repo : fs::directory_iterator(cache_dir, ec)) {
        const std::string folder = repo.path().filename().string();
        if (!folder.starts_with("models--") || !repo.is_directory(ec)) continue;
        std::string repo_id = folder.substr(8);
        if (auto sep = repo_id.find("--"); sep != std::string::npos) repo_id.replace(sep, 2, "/");
        // Which revisions name which commit (refs/ may hold nested names such as refs/pr/1).
        std::map<std::string, std::vector<std::string>> refs;
        const fs::path refs_dir = repo.path() / "refs";
        for (auto it = fs::recursive_directory_iterator(refs_dir, ec);
             !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
            if (!it->is_regular_file(ec)) continue;
            const std::string commit = trim(read_small_file(it->path()));
            if (is_hex_id(commit, 40))
                refs[commit].push_back(fs::relative(it->path(), refs_dir, ec).generic_string());
        }
        ec.clear();
        for (const fs::directory_entry &snap : fs::directory_iterator(repo.path() / "snapshots", ec)) {
            if (!snap.is_directory(ec)) continue;
            cached_model m;
            m.repo_id = repo_id;
            m.commit = snap.path().filename().string();
            m.refs = refs[m.commit];
            std::sort(m.refs.begin(), m.refs.end());
            m.dir = snap.path();
            m.modified = mtime_of(snap.path());
            std::error_code walk;
            for (auto it = fs::recursive_directory_iterator(snap.path(), walk);
                 !walk && it != fs::recursive_directory_iterator(); it.increment(walk)) {
                std::error_code size_ec;
                if (it->is_directory(size_ec)) continue;
                const uintmax_t n = fs::file_size(it->path(), size_ec); // follows the link to the blob
                if (size_ec && m.problem.empty())
                    m.problem = fs::relative(it->path(), snap.path(), size_ec).generic_string() +
                                " is missing its blob";
                else if (!size_ec)
                    m.bytes += n;
            }
            if (auto cfg = load_model_config(m.dir); !cfg) {
                if (m.problem.empty()) m.problem = cfg.message();
            } else {
                m.config = *cfg;
                if (auto store = weight_store::open_dir(m.dir); !store) {
                    if (m.problem.empty()) m.problem = store.message();
                } else if (m.problem.empty()) {
                    m.loadable = true;
                }
            }
            out.push_back(std::move(m));
        }
        ec.clear();
    }
    std::stable_sort(out.begin(), out.end(), [](const cached_model &a, const cached_model &b) {
        return a.modified != b.modified ? a.modified > b.modified : a.repo_id < b.repo_id;
    });
    return out;
}

} // namespace es::models
