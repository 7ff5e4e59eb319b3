// KV block pool with prefix caching, after vLLM v1's BlockPool. Blocks hold block_size tokens.
// Invariants:
//  - every block is either in use (ref_cnt > 0) or in the free queue (ref_cnt == 0), never both;
//  - the free queue is in eviction order: front = evicted first. Freed blocks go to the back,
//    a request's blocks in reverse so its tail (least likely to be shared) is evicted first;
//  - a full block may carry a hash (chained over the token ids of every block up to it); the hash
//    map points to exactly the cached blocks whose hash is set, in use or free. Allocating a free
//    block drops its hash (eviction). A hit on a free cached block takes it out of the queue.
// Not thread-safe: owned by the engine thread.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace es {

using block_hash = uint64_t;

// Hash of a full block: chained over the parent block's hash and this block's token ids.
block_hash hash_block(std::optional<block_hash> parent, std::span<const int32_t> tokens);

class block_pool {
public:
    block_pool(int32_t n_blocks, int32_t block_size);

    int32_t n_blocks() const { return int32_t(m_blocks.size()); }
    int32_t block_size() const { return m_block_size; }
    int32_t n_free() const { return m_n_free; }          // ref_cnt == 0 (includes cached-but-free)
    int32_t n_used() const { return n_blocks() - m_n_free; }
    int32_t n_cached() const { return int32_t(m_cached.size()); } // blocks carrying a hash
    int32_t n_cached_free() const;                        // cached and evictable

    // Takes n blocks from the front of the free queue (evicting their hashes); ref_cnt = 1.
    // Returns nothing when fewer than n are free (and changes nothing).
    std::optional<std::vector<int32_t>> allocate(int32_t n);

    // Drops one reference per block; blocks reaching 0 join the back of the free queue in the
    // given order (callers pass a request's blocks reversed).
    void release(std::span<const int32_t> blocks);

    // Looks up a cached full block by hash and token ids (ids compared, so a hash collision can
    // never serve wrong KV). Returns the block id or -1.
    int32_t lookup(block_hash h, std::span<const int32_t> tokens) const;

    // Takes a reference on a cached block found by lookup (removing it from the free queue).
    void acquire(int32_t block);

    // Marks a full block as cached under hash h with the given token ids. A block already
    // cached under another id is left alone (first writer wins, the duplicate stays private).
    void cache_full_block(int32_t block, block_hash h, std::span<const int32_t> tokens);

    int32_t ref_cnt(int32_t block) const { return m_blocks[block].ref_cnt; }
    std::optional<block_hash> hash_of(int32_t block) const;
    // Each block's state in block order: 0 in use (ref_cnt > 0), 1 free but holding a cached
    // prefix, 2 free (the values of es::kv_block_state). Resizes out to n_blocks().
    void states(std::vector<uint8_t> &out) const;
    // Free queue front-to-back (tests and the KV block map).
    std::vector<int32_t> free_queue() const;
    // Checks every invariant above; returns an empty string or what is broken (tests).
    std::string check() const;

    // Prefix-cache statistics: queried blocks and hits since construction.
    uint64_t queries() const { return m_queries; }
    uint64_t hits() const { return m_hits; }
    void count_query(uint64_t queried, uint64_t hit) {
        m_queries += queried;
        m_hits += hit;
    }

private:
    struct block {
        int32_t ref_cnt = 0;
        int32_t prev = -1, next = -1; // free-queue links
        bool in_queue = false;
        bool has_hash = false;
        block_hash hash = 0;
        std::vector<int32_t> tokens;  // token ids of a cached block
    };
    void queue_push_back(int32_t b);
    void queue_remove(int32_t b);
    void evict_hash(int32_t b);

    int32_t m_block_size;
    std::vector<block> m_blocks;
    int32_t m_head = -1, m_tail = -1, m_n_free = 0;
    std::unordered_multimap<block_hash, int32_t> m_cached;
    uint64_t m_queries = 0, m_hits = 0;
};

} // namespace es
