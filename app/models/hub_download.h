// Downloads a model repo from the hub into the hub cache (hub_cache.h), the way huggingface_hub's
// snapshot_download lays it out, so transformers, vLLM and huggingface-cli see the same files:
// 1. the file list at the revision (hub_client::list_files: sizes and digests, the commit id);
// 2. config.json, fetched first and checked with the loader's own validation
//    (parse_model_config), so an architecture the engine does not run is refused before any
//    weights are fetched; the repo must hold safetensors weights;
// 3. a free-space check: the bytes still missing against what the cache's file system has;
// 4. each missing file into blobs/<etag>.incomplete (resumed from its size with a Range
//    request — after a dropped connection, a cancel or a killed process, ours or
//    huggingface_hub's), its SHA-256 (LFS) or git blob SHA-1 computed as it is written and
//    compared before it is renamed to blobs/<etag>; a mismatch removes the partial file;
// 5. the snapshot's links and refs/<revision>, once every file is in place.
// Weight formats the engine does not read (*.bin, *.pt, *.pth, *.pdparams, *.gguf, *.h5, *.msgpack,
// *.onnx, *.ckpt) are left on the hub.
#pragma once

#include "app/models/hub_client.h"
#include "engine/model/model_config.h"

#include <atomic>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

namespace es::models {

struct download_progress {
    enum class stage { listing, checking, downloading, verifying, linking };
    stage what = stage::listing;
    std::string file;                   // the file in hand (downloading, verifying)
    int file_index = 0, file_count = 0; // 1-based among the files to fetch
    uint64_t done = 0, total = 0;       // bytes of the files to fetch: on disk (partials included) / all
    double bytes_per_second = 0;        // over the last few seconds
    double seconds_left = -1;           // -1: not known yet
};

// What a download would fetch: the listing, the files kept, the config checked.
struct download_plan {
    repo_listing listing;
    std::vector<hub_file> files; // the files to have in the snapshot
    model_config config;         // config.json as the engine reads it
    uint64_t total_bytes = 0;    // every file of the snapshot
    uint64_t missing_bytes = 0;  // not yet in the cache (partial files' bytes not counted)
};

struct download_options {
    std::string repo_id;
    std::string revision = "main";
    hub_settings hub;
    std::function<void(const download_progress &)> on_progress; // on the downloading thread
    // Called once the plan is known, before anything but config.json is fetched; false stops
    // the download there (an error saying so).
    std::function<bool(const download_plan &)> on_plan;
    const std::atomic<bool> *cancel = nullptr; // raised: stop, keeping partial files
    // Bytes free where the blobs go (std::filesystem::space's `available` when empty).
    std::function<uint64_t(const std::filesystem::path &)> free_space;
    int max_attempts = 6;      // per file: a dropped transfer resumes from where it stopped
    double retry_wait_s = 1.0; // before the 2nd attempt; doubled each time, at most 30 s
};

struct download_result {
    download_plan plan;
    std::filesystem::path snapshot_dir; // snapshots/<commit>: what load_model opens
    uint64_t fetched_bytes = 0;         // bytes transferred in this run
    uint64_t resumed_from_bytes = 0;    // bytes of partial files this run continued
    int files_fetched = 0, files_cached = 0;
};

// Steps 1–2 (and what is already in the cache): nothing is written.
result<download_plan> plan_download(const download_options &o);
// Every step. Errors say what failed and keep partial files that can resume; a file whose digest
// does not match is removed.
result<download_result> download_model(const download_options &o);

// The engine reads safetensors only: other weight formats are not fetched.
bool is_unused_weight_file(const std::string &path);

// Bytes in binary units for messages and progress: "512 B", "292.97 KiB", "1.50 GiB".
std::string human_bytes(uint64_t bytes);

} // namespace es::models
