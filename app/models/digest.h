// Streamed digests of downloaded files (OpenSSL's EVP): SHA-256, which the hub lists for every
// LFS file, and the git blob SHA-1 ("blob <size>\0" + content), its id of every other file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace es::models {

class digest {
public:
    enum class kind { sha256, git_blob_sha1 };
    // git_blob_sha1 hashes the header of a blob of `size` bytes first, so the content streams
    // in as it arrives.
    digest(kind k, uint64_t size);
    ~digest();
    digest(const digest &) = delete;
    digest &operator=(const digest &) = delete;

    void update(const void *data, size_t n);
    // Lower-case hex of the digest; the object may not be updated afterwards.
    std::string hex();

private:
    void *m_ctx = nullptr; // EVP_MD_CTX
};

// Lower-case hex digits only, of exactly `digits` characters.
bool is_hex_id(const std::string &s, size_t digits);

} // namespace es::models
