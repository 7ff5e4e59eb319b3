// The Hugging Face hub's cache on disk, the one transformers, vLLM and huggingface-cli share, so
// a model any of them downloaded is found here without copying and a download started by one
// can be resumed by another:
//   <cache>/models--{org}--{name}/blobs/<etag>             a file's content, named by its SHA-256
//                                                           (LFS files) or git blob SHA-1 (others)
//                                 blobs/<etag>.incomplete  a download in progress, resumed from its size
//                                 snapshots/<commit>/<path> relative symlinks to ../../blobs/<etag>
//                                 refs/<revision>          the commit a branch or tag named when fetched
//   <cache>/.locks/models--{org}--{name}/<etag>.lock       flock()ed while the blob is written
// A blob is only ever created by renaming its .incomplete file once its digest matched, and a
// snapshot's links are made only after every blob of the download is in place, so a snapshot
// folder never shows a half-written file.
#pragma once

#include "engine/core/status.h"
#include "engine/model/model_config.h"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace es::models {

// The hub's environment, as huggingface_hub reads it.
struct hub_settings {
    std::string endpoint = "https://huggingface.co"; // HF_ENDPOINT (a mirror), no trailing '/'
    std::string token;                               // HF_TOKEN, else the file huggingface-cli login wrote
    std::filesystem::path cache_dir; // HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub
};
// HF_ENDPOINT; HF_TOKEN (or HUGGING_FACE_HUB_TOKEN), else the file HF_TOKEN_PATH or $HF_HOME/token;
// HF_HUB_CACHE (or HUGGINGFACE_HUB_CACHE), else $HF_HOME/hub, else
// ${XDG_CACHE_HOME:-~/.cache}/huggingface/hub. HF_HOME defaults to ${XDG_CACHE_HOME:-~/.cache}/huggingface.
hub_settings hub_settings_from_environment();

// "org/name": letters, digits, '.', '_' and '-', neither part starting with '.' or '-' nor
// holding "..". The error names what is wrong.
status check_repo_id(const std::string &repo_id);
// A branch, tag or commit: non-empty, no "..", no leading '/', no control characters or '\\'.
status check_revision(const std::string &revision);
// A file's path inside a repo as the hub lists it: relative, '/'-separated, no "." or ".."
// component and no '\\' or control characters (it becomes a path in the cache).
status check_repo_path(const std::string &path);

// "models--org--name".
std::string repo_folder_name(const std::string &repo_id);

// The paths of one repo in a cache (nothing is created).
class repo_cache {
public:
    repo_cache(std::filesystem::path cache_dir, const std::string &repo_id);
    const std::filesystem::path &cache_dir() const { return m_cache; }
    const std::filesystem::path &dir() const { return m_dir; }
    std::filesystem::path blob(const std::string &etag) const { return m_dir / "blobs" / etag; }
    std::filesystem::path incomplete(const std::string &etag) const {
        return blob(etag).string() + ".incomplete";
    }
    std::filesystem::path lock(const std::string &etag) const;
    std::filesystem::path snapshot(const std::string &commit) const { return m_dir / "snapshots" / commit; }
    std::filesystem::path ref(const std::string &revision) const { return m_dir / "refs" / revision; }

    // The commit refs/<revision> names, or the revision itself when it is a commit id.
    std::optional<std::string> commit_for(const std::string &revision) const;
    // snapshots/<commit>/<path> → ../../blobs/<etag> (one more ".." per folder in path), replacing
    // whatever was there.
    status link(const std::string &commit, const std::string &path, const std::string &etag) const;
    // refs/<revision> = commit (written atomically); nothing for a revision that is the commit.
    status write_ref(const std::string &revision, const std::string &commit) const;

private:
    std::filesystem::path m_cache, m_dir;
    std::string m_folder;
};

// One snapshot found in a cache.
struct cached_model {
    std::string repo_id;                // from the folder's name
    std::string commit;                 // the snapshot folder's name
    std::vector<std::string> refs;      // revisions naming it (main, …)
    std::filesystem::path dir;          // snapshots/<commit>: what load_model opens
    uint64_t bytes = 0;                 // the files the snapshot links to
    std::optional<model_config> config; // when config.json is one the engine runs
    bool loadable = false;              // config and every weight file check out as the loader checks them
    std::string problem;                // why not loadable
    int64_t modified = 0;               // the snapshot folder's modification time, seconds since the epoch
};
// Every snapshot of every model repo in the cache, newest first; the loader's own checks
// (load_model_config, weight_store::open_dir: headers only, nothing is read in bulk) decide
// whether it is loadable. A missing cache folder gives an empty list.
std::vector<cached_model> scan_cache(const std::filesystem::path &cache_dir);

} // namespace es::models
