// Block pool with prefix caching (see block_pool.h). Uncached free blocks live in a bitmap with a
// summary bit per word (the lowest one found in a few word reads); cached free blocks in an
// intrusive doubly linked LRU queue over block ids, so that a cache hit leaves its middle in O(1).
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

block_pool::id_set::id_set(int32_t n)
    : m_words((size_t(std::max(n, 0)) + 63) / 64), m_summary((m_words.size() + 63) / 64) {}

void block_pool::id_set::insert(int32_t b) {
    uint64_t &w = m_words[size_t(b) >> 6];
    const uint64_t bit = uint64_t(1) << (b & 63);
    if (w & bit) return;
    w |= bit;
    m_summary[size_t(b) >> 12] |= uint64_t(1) << ((b >> 6) & 63);
    ++m_size;
}

void block_pool::id_set::erase(int32_t b) {
    uint64_t &w = m_words[size_t(b) >> 6];
    const uint64_t bit = uint64_t(1) << (b & 63);
    if (!(w & bit)) return;
    w &= ~bit;
    if (!w) m_summary[size_t(b) >> 12] &= ~(uint64_t(1) << ((b >> 6) & 63));
    --m_size;
}

int32_t block_pool::id_set::lowest() const {
    for (size_t s = 0; s < m_summary.size(); ++s)
        if (m_summary[s]) {
            const size_t w = s * 64 + size_t(__builtin_ctzll(m_summary[s]));
            return int32_t(w * 64 + size_t(__builtin_ctzll(m_words[w])));
        }
    return -1;
}

int32_t block_pool::id_set::highest_absent_below(int32_t n) const {
    for (int32_t w = (n - 1) >> 6; n > 0 && w >= 0; --w) {
        uint64_t absent = ~m_words[size_t(w)];
        const int32_t below = std::min(64, n - w * 64); // bits [0, below) of word w lie below n
        if (below < 64) absent &= (uint64_t(1) << below) - 1;
        if (absent) return w * 64 + 63 - __builtin_clzll(absent);
    }
    return -1;
}

block_pool::block_pool(int32_t n_blocks, int32_t block_size, int32_t n_mapped)
    : m_block_size(block_size), m_blocks(size_t(std::max(n_blocks, 0))), m_uncached(n_blocks) {
    for (int32_t b = 0; b < this->n_blocks(); ++b) m_uncached.insert(b);
    m_n_free = this->n_blocks();
    m_n_mapped = n_mapped < 0 ? this->n_blocks() : std::min(n_mapped, this->n_blocks());
}

void block_pool::queue_push_back(int32_t b) {
    block &x = m_blocks[b];
    x.prev = m_tail;
    x.next = -1;
    if (m_tail >= 0) m_blocks[m_tail].next = b;
    else m_head = b;
    m_tail = b;
    x.in_queue = true;
    ++m_n_lru;
}

void block_pool::queue_remove(int32_t b) {
    block &x = m_blocks[b];
    if (x.prev >= 0) m_blocks[x.prev].next = x.next;
    else m_head = x.next;
    if (x.next >= 0) m_blocks[x.next].prev = x.prev;
    else m_tail = x.prev;
    x.prev = x.next = -1;
    x.in_queue = false;
    --m_n_lru;
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

void block_pool::make_free(int32_t b) {
    if (m_blocks[b].has_hash) queue_push_back(b);
    else m_uncached.insert(b);
    ++m_n_free;
}

void block_pool::states(std::vector<uint8_t> &out) const {
    out.resize(m_blocks.size());
    for (size_t b = 0; b < m_blocks.size(); ++b)
        out[b] = m_blocks[b].ref_cnt > 0    ? 0
                 : m_blocks[b].has_hash     ? 1
                 : int32_t(b) < m_n_mapped ? 2
                                            : 3;
}

void block_pool::grow_to(int32_t want) {
    m_grow_error.clear();
    if (!m_grow) {
        m_grow_error = "the KV pool has memory for " + std::to_string(m_n_mapped) + " of its " +
                       std::to_string(n_blocks()) + " blocks and cannot grow";
        return;
    }
    const int32_t got = m_grow(want, m_grow_error);
    m_n_mapped = std::clamp(got, m_n_mapped, n_blocks());
    if (m_n_mapped >= want) m_grow_error.clear();
    else if (m_grow_error.empty())
        m_grow_error = "the KV pool could not map blocks up to " + std::to_string(want) + " (it has " +
                       std::to_string(m_n_mapped) + ")";
}

std::optional<std::vector<int32_t>> block_pool::allocate(int32_t n) {
    if (n < 0 || n > m_n_free) return std::nullopt;
    // Uncached free blocks below the memory's top; past them come the unmapped ones (every block
    // from n_mapped up), lowest first, which need the pool to grow.
    const int32_t unmapped = n_blocks() - m_n_mapped;
    if (n > m_uncached.size() - unmapped && unmapped > 0)
        grow_to(std::min(n_blocks(), m_n_mapped + (n - (m_uncached.size() - unmapped))));
    const int32_t uncached = m_uncached.size() - (n_blocks() - m_n_mapped);
    if (n > uncached + m_n_lru) return std::nullopt;
    std::vector<int32_t> out;
    out.reserve(size_t(n));
    for (int32_t i = 0; i < n; ++i) {
        int32_t b = -1;
        if (i < uncached) {
            b = m_uncached.lowest();
            m_uncached.erase(b);
        } else {
            b = m_head;
            queue_remove(b);
            evict_hash(b);
        }
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
        if (--x.ref_cnt == 0) make_free(b);
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
        if (x.in_queue) queue_remove(b);
        else m_uncached.erase(b);
        --m_n_free;
    }
    ++x.ref_cnt;
}

void block_pool::cache_full_block(int32_t b, block_hash h, std::span<const int32_t> tokens) {
    block &x = m_blocks[b];
    if (x.has_hash || lookup(h, tokens) >= 0 || b >= m_n_mapped) return;
    x.has_hash = true;
    x.hash = h;
    x.tokens.assign(tokens.begin(), tokens.end());
    m_cached.emplace(h, b);
    if (x.ref_cnt == 0) { // (the scheduler caches blocks it holds; a free one moves to the LRU queue)
        m_uncached.erase(b);
        queue_push_back(b);
    }
}

int32_t block_pool::trim_floor(bool keep_cached) const {
    // The highest block that is not uncached-free (in use or cached), skipping cached free ones
    // unless they are kept: a word of the bitmap at a time.
    for (int32_t t = m_n_mapped;;) {
        const int32_t b = m_uncached.highest_absent_below(t);
        if (b < 0) return 0;
        if (keep_cached || m_blocks[b].ref_cnt > 0) return b + 1;
        t = b;
    }
}

bool block_pool::set_mapped(int32_t n) {
    n = std::clamp(n, 0, n_blocks());
    for (int32_t b = n; b < m_n_mapped; ++b)
        if (m_blocks[b].ref_cnt > 0) return false;
    for (int32_t b = n; b < m_n_mapped; ++b)
        if (m_blocks[b].in_queue) { // a cached free block: its hash goes with its memory
            queue_remove(b);
            evict_hash(b);
            m_uncached.insert(b);
        }
    m_n_mapped = n;
    return true;
}

std::optional<block_hash> block_pool::hash_of(int32_t b) const {
    return m_blocks[b].has_hash ? std::optional<block_hash>(m_blocks[b].hash) : std::nullopt;
}

std::vector<int32_t> block_pool::free_queue() const {
    std::vector<int32_t> out;
    out.reserve(size_t(m_n_free));
    m_uncached.for_each([&](int32_t b) { out.push_back(b); });
    for (int32_t b = m_head; b >= 0; b = m_blocks[b].next) out.push_back(b);
    return out;
}

std::string block_pool::check() const {
    int32_t in_queue = 0;
    for (int32_t b = m_head, prev = -1; b >= 0; prev = b, b = m_blocks[b].next) {
        if (m_blocks[b].prev != prev) return "LRU queue links broken at block " + std::to_string(b);
        if (m_blocks[b].ref_cnt != 0) return "block " + std::to_string(b) + " is queued with ref_cnt > 0";
        if (!m_blocks[b].has_hash) return "block " + std::to_string(b) + " is in the LRU queue without a hash";
        if (++in_queue > n_blocks()) return "LRU queue has a cycle";
    }
    if (in_queue != m_n_lru) return "LRU length " + std::to_string(m_n_lru) + " != queue length " + std::to_string(in_queue);
    if (in_queue + m_uncached.size() != m_n_free)
        return "n_free " + std::to_string(m_n_free) + " != " + std::to_string(in_queue) + " cached + " +
               std::to_string(m_uncached.size()) + " uncached free blocks";
    if (m_n_mapped < 0 || m_n_mapped > n_blocks()) return "n_mapped " + std::to_string(m_n_mapped) + " out of range";
    for (int32_t b = 0; b < n_blocks(); ++b) {
        const block &x = m_blocks[b];
        if (x.ref_cnt < 0) return "negative ref_cnt on block " + std::to_string(b);
        const bool unc = m_uncached.contains(b);
        if ((x.ref_cnt == 0) != (x.in_queue || unc)) return "block " + std::to_string(b) + " is neither used nor free";
        if (x.in_queue && unc) return "block " + std::to_string(b) + " is both cached-free and uncached-free";
        if (unc && x.has_hash) return "uncached free block " + std::to_string(b) + " has a hash";
        if (x.has_hash && lookup(x.hash, x.tokens) != b) return "cached block " + std::to_string(b) + " not in the map";
        if (b >= m_n_mapped && !unc) return "block " + std::to_string(b) + " has no memory but is used or cached";
    }
    for (const auto &[h, b] : m_cached)
        if (!m_blocks[b].has_hash || m_blocks[b].hash != h) return "hash map points to uncached block";
    return {};
}

} // namespace es
