// Streamed digests of downloaded files (see digest.h).
#include "app/models/digest.h"

#include <openssl/evp.h>

#include <new>
#include <stdexcept>

namespace es::models {

digest::digest(kind k, uint64_t size) {
    auto *ctx = EVP_MD_CTX_new();
    if (!ctx) throw std::bad_alloc();
    m_ctx = ctx;
    if (EVP_DigestInit_ex(ctx, k == kind::sha256 ? EVP_sha256() : EVP_sha1(), nullptr) != 1)
        throw std::runtime_error("OpenSSL: digest initialisation failed");
    if (k == kind::git_blob_sha1) {
        const std::string header = "blob " + std::to_string(size) + std::string(1, '\0');
        update(header.data(), header.size());
    }
}

digest::~digest() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX *>(m_ctx)); }

void digest::update(const void *data, size_t n) {
    if (n) EVP_DigestUpdate(static_cast<EVP_MD_CTX *>(m_ctx), data, n);
}

std::string digest::hex() {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_DigestFinal_ex(static_cast<EVP_MD_CTX *>(m_ctx), md, &len);
    static const char *digits = "0123456789abcdef";
    std::string out;
    out.reserve(len * 2);
    for (unsigned int i = 0; i < len; ++i) {
        out += digits[md[i] >> 4];
        out += digits[md[i] & 15];
    }
    return out;
}

bool is_hex_id(const std::string &s, size_t digits) {
    if (s.size() != digits) return false;
    for (char c : s)
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
    return true;
}

} // namespace es::models
