// What a measurement needs besides its numbers to be reproduced (Qt-free, for the CLI's bench
// JSON and the app's reports): the CPU's model name and a content hash of a model folder.
#pragma once

#include <string>

namespace es::models {

// /proc/cpuinfo's "model name" ("unknown CPU" when it has none).
std::string cpu_model_name();
// "fnv1a64:…" (FNV-1a 64, hex) over config.json and the *.safetensors files in name order, each
// named and sized in the hash, whole up to 4 GiB together; above that "fnv1a64-headers:…" over
// the first MiB of each (the safetensors header: every tensor's name, dtype, shape and offset)
// and its size. Empty for a missing folder or an unreadable file.
std::string model_content_hash(const std::string &dir);

} // namespace es::models
