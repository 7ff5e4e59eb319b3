// Block pool with prefix caching (see block_pool.h). The free queue is an intrusive doubly
// linked list over block ids, so removal of a cache hit from the middle is O(1).
#include "engine/runtime/block_pool.h"

#include <algorithm>
#include <string>

namespace es {

block_hash hash_block(std::optional<block_hash> parent, std::span<const int32_t> tokens) {
    // FNV-1a over the parent hash and the ids, then a splitmix finalizer.
    uint64_t h = 0xcbf29ce484222325ull;
    auto mix = [&h](uint64_t v) {
        for (int i = 0; i < 8; ++i) {
            h ^= (v >> (8 * i)) & 0xff;
            h *= 0x100000001b3ull;
        }
    };
    mix(parent ? *parent : 0x5eedull);
    mix(parent ? 1 : 0);
    for (int32_t t : tokens) mix(uint64_t(uint32_t(t)));
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebull;
    return h ^ (h >> 31);
}

block_pool::block_pool(int32_t n_blocks, int32_t block_size) : m_block_size(block_size), m_blocks(size_t(n_blocks)) {
    for (int32_t b = 0; b < n_blocks; ++b) queue_push_back(b);
    m_n_free = n_blocks;
}

void block_pool::queue_push_back(int32_t b) {
    block &x = m_blocks[b];
    x.prev = m_tail;
    x.next = -1;
    if (m_tail >= 0) m_blocks[m_tail].next = b;
    else m_head = b;
    m_tail = b;
    x.in_queue = true;
}

void block_pool::queue_remove(int32_t b) {
    block &x = m_blocks[b];
    if (x.prev >= 0) m_blocks[x.prev].next = x.next;
    else m_head = x.next;
    if (x.next >= 0) m_blocks[x.next].prev = x.prev;
    else m_tail = x.prev;
    x.prev = x.next = -1;
    x.in_queue = false;
}

void block_pool::evict_hash(int32_t b) {
    block &x = m_blocks[b];
    if (!x.has_hash) return;
    auto range = m_cached.equal_range(x.hash);
    for (auto it = range.first; it != range.second; ++it)
        if (it->second == b) {
            m_cached.erase(it);
            break;
        }
    x.has_hash = false;
    x.tokens.clear();
}

int32_t block_pool::n_cached_free() const {
    int32_t n = 0;
    for (const auto &[h, b] : m_cached)
        if (m_blocks[b].ref_cnt == 0) ++n;
    return n;
}

void block_pool::states(std::vector<uint8_t> &out) const {
    out.resize(m_blocks.size());
    for (size_t b = 0; b < m_blocks.size(); ++b)
        out[b] = m_blocks[b].ref_cnt > 0 ? 0 : m_blocks[b].has_hash ? 1 : 2;
}

std::optional<std::vector<int32_t>> block_pool::allocate(int32_t n) {
    if (n < 0 || n > m_n_free) return std::nullopt;
    std::vector<int32_t> out;
    out.reserve(size_t(n));
    for (int32_t i = 0; i < n; ++i) {
        const int32_t b = m_head;
        queue_remove(b);
        evict_hash(b);
        m_blocks[b].ref_cnt = 1;
        out.push_back(b);
    }
    m_n_free -= n;
    return out;
}

void block_pool::release(std::span<const int32_t> blocks) {
    for (int32_t b : blocks) {
        block &x = m_blocks[b];
        if (x.ref_cnt <= 0) continue; // double release is a caller bug; check() reports leaks
        if (--x.ref_cnt == 0) {
            queue_push_back(b);
            ++m_n_free;
        }
    }
}

int32_t block_pool::lookup(block_hash h, std::span<const int32_t> tokens) const {
    auto range = m_cached.equal_range(h);
    for (auto it = range.first; it != range.second; ++it) {
        const block &x = m_blocks[it->second];
        if (x.tokens.size() == tokens.size() && std::equal(tokens.begin(), tokens.end(), x.tokens.begin()))
            return it->second;
    }
    return -1;
}

void block_pool::acquire(int32_t b) {
    block &x = m_blocks[b];
    if (x.ref_cnt == 0) {
        queue_remove(b);
        --m_n_free;
    }
    ++x.ref_cnt;
}

void block_pool::cache_full_block(int32_t b, block_hash h, std::span<const int32_t> tokens) {
    block &x = m_blocks[b];
    if (x.has_hash || lookup(h, tokens) >= 0) return;
    x.has_hash = true;
    x.hash = h;
    x.tokens.assign(tokens.begin(), tokens.end());
    m_cached.emplace(h, b);
}

std::optional<block_hash> block_pool::hash_of(int32_t b) const {
    return m_blocks[b].has_hash ? std::optional<block_hash>(m_blocks[b].hash) : std::nullopt;
}

std::vector<int32_t> block_pool::free_queue() const {
    std::vector<int32_t> out;
    for (int32_t b = m_head; b >= 0; b = m_blocks[b].next) out.push_back(b);
    return out;
}

std::string block_pool::check() const {
    int32_t in_queue = 0;
    for (int32_t b = m_head, prev = -1; b >= 0; prev = b, b = m_blocks[b].next) {
        if (m_blocks[b].prev != prev) return "free queue links broken at block " + std::to_string(b);
        if (m_blocks[b].ref_cnt != 0) return "block " + std::to_string(b) + " is queued with ref_cnt > 0";
        if (++in_queue > n_blocks()) return "free queue has a cycle";
    }
    if (in_queue != m_n_free) return "n_free " + std::to_string(m_n_free) + " != queue length " + std::to_string(in_queue);
    for (int32_t b = 0; b < n_blocks(); ++b) {
        const block &x = m_blocks[b];
        if (x.ref_cnt < 0) return "negative ref_cnt on block " + std::to_string(b);
        if ((x.ref_cnt == 0) != x.in_queue) return "block " + std::to_string(b) + " is neither used nor queued";
        if (x.has_hash && lookup(x.hash, x.tokens) != b) return "cached block " + std::to_string(b) + " not in the map";
    }
    for (const auto &[h, b] : m_cached)
        if (!m_blocks[b].has_hash || m_blocks[b].hash != h) return "hash map points to uncached block";
    return {};
}

} // namespace es
