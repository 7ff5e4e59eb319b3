// KV block pool with prefix caching, after vLLM v1's BlockPool, on a pool whose memory may grow
// and shrink (a backend that maps the KV pool on demand: backend::kv_ensure_blocks). Blocks hold
// block_size tokens. Invariants:
//  - every block is either in use (ref_cnt > 0) or free (ref_cnt == 0), never both; a free block
//    is either uncached (in the uncached set) or cached (in the LRU queue), never both;
//  - allocation order: the lowest uncached free block first, so that requests pack at the bottom
//    of the pool and its top empties (and can be given back: trim_floor, set_mapped); when none
//    is left, a cached free block is evicted, least recently freed first (the LRU queue's front).
//    A request's blocks are released in reverse, so its tail (least likely to be shared) is
//    evicted before its head;
//  - blocks [0, n_mapped) have memory; every block at or above n_mapped is free and uncached.
//    Handing out a block at or above n_mapped first asks the grow function to map it; a failed
//    grow leaves the cached blocks to be evicted before allocation fails (grow_error says why);
//  - a full block may carry a hash (chained over the token ids of every block up to it); the hash
//    map points to exactly the cached blocks whose hash is set, in use or free. Allocating a free
//    block drops its hash (eviction). A hit on a free cached block takes it out of the queue.
// Not thread-safe: owned by the engine thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace es {

using block_hash = uint64_t;

// Hash of a full block: chained over the parent block's hash and this block's token ids.
block_hash hash_block(std::optional<block_hash> parent, std::span<const int32_t> tokens);

// Maps the memory of blocks [0, want) of the pool if it can; returns how many blocks have memory
// now (never fewer than before; more than want where the backend maps in larger steps; fewer when
// the memory is not there, with why in `error`).
using kv_grow_fn = std::function<int32_t(int32_t want, std::string &error)>;

class block_pool {
public:
    // n_mapped < 0: every block has memory (a pool allocated whole).
    block_pool(int32_t n_blocks, int32_t block_size, int32_t n_mapped = -1);

    int32_t n_blocks() const { return int32_t(m_blocks.size()); }
    int32_t block_size() const { return m_block_size; }
    int32_t n_free() const { return m_n_free; }          // ref_cnt == 0 (includes cached-but-free and unmapped)
    int32_t n_used() const { return n_blocks() - m_n_free; }
    int32_t n_cached() const { return int32_t(m_cached.size()); } // blocks carrying a hash
    int32_t n_cached_free() const { return m_n_lru; }     // cached and evictable
    // Blocks [0, n_mapped()) have memory; the rest are free, uncached and mapped on demand.
    int32_t n_mapped() const { return m_n_mapped; }
    // Free blocks that have memory: allocating up to this many never asks to grow.
    int32_t n_free_mapped() const { return m_n_free - (n_blocks() - m_n_mapped); }

    void set_grow(kv_grow_fn grow) { m_grow = std::move(grow); }
    // Why the last grow fell short (empty after one that succeeded).
    const std::string &grow_error() const { return m_grow_error; }

    // Takes n blocks (the lowest uncached free blocks, growing the pool's memory where they lie
    // above n_mapped, then cached free blocks, LRU first, evicting their hashes); ref_cnt = 1.
    // Returns nothing when fewer than n can be had (and changes nothing but, perhaps, n_mapped).
    std::optional<std::vector<int32_t>> allocate(int32_t n);

    // Drops one reference per block; a block reaching 0 becomes free: uncached ones join the
    // uncached set, cached ones the back of the LRU queue in the given order (callers pass a
    // request's blocks reversed).
    void release(std::span<const int32_t> blocks);

    // Looks up a cached full block by hash and token ids (ids compared, so a hash collision can
    // never serve wrong KV). Returns the block id or -1.
    int32_t lookup(block_hash h, std::span<const int32_t> tokens) const;

    // Takes a reference on a cached block found by lookup (removing it from the free queue).
    void acquire(int32_t block);

    // Marks a full block as cached under hash h with the given token ids. A block already
    // cached under another id is left alone (first writer wins, the duplicate stays private).
    void cache_full_block(int32_t block, block_hash h, std::span<const int32_t> tokens);

    // The lowest block count the pool's memory can shrink to: every block from it up to
    // n_mapped() is free, and uncached when keep_cached.
    int32_t trim_floor(bool keep_cached) const;
    // Blocks [n, n_mapped()) lose their memory (a trim) or blocks up to n gain it (a grow made
    // outside allocate). Refused (false, nothing changed) when a block that would lose its
    // memory is in use; cached ones among them lose their hash.
    bool set_mapped(int32_t n);

    int32_t ref_cnt(int32_t block) const { return m_blocks[block].ref_cnt; }
    std::optional<block_hash> hash_of(int32_t block) const;
    // Each block's state in block order: 0 in use (ref_cnt > 0), 1 free but holding a cached
    // prefix, 2 free, 3 free without memory (at or above n_mapped) — the values of
    // es::kv_block_state. Resizes out to n_blocks().
    void states(std::vector<uint8_t> &out) const;
    // The free blocks in allocation order: uncached ones by id, then cached ones LRU first (tests
    // and the KV block map).
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
        int32_t prev = -1, next = -1; // LRU queue links (cached free blocks)
        bool in_queue = false;
        bool has_hash = false;
        block_hash hash = 0;
        std::vector<int32_t> tokens;  // token ids of a cached block
    };
    // A set of block ids with the lowest one at hand: a bitmap and a summary bit per 64-bit word.
    class id_set {
    public:
        explicit id_set(int32_t n);
        void insert(int32_t b);
        void erase(int32_t b);
        bool contains(int32_t b) const { return (m_words[size_t(b) >> 6] >> (b & 63)) & 1; }
        int32_t lowest() const; // -1 when empty
        int32_t highest_absent_below(int32_t n) const; // the highest id < n not in the set, or -1
        int32_t size() const { return m_size; }
        template <typename F>
        void for_each(F &&f) const {
            for (size_t w = 0; w < m_words.size(); ++w)
                for (uint64_t bits = m_words[w]; bits; bits &= bits - 1) f(int32_t(w * 64 + size_t(__builtin_ctzll(bits))));
        }

    private:
        std::vector<uint64_t> m_words, m_summary;
        int32_t m_size = 0;
    };
    void queue_push_back(int32_t b);
    void queue_remove(int32_t b);
    void evict_hash(int32_t b);
    // Frees a block whose last reference went: into the uncached set or the LRU queue's back.
    void make_free(int32_t b);
    // Maps memory up to `want` blocks through m_grow; m_grow_error says why when it falls short.
    void grow_to(int32_t want);

    int32_t m_block_size;
    std::vector<block> m_blocks;
    id_set m_uncached;                 // free blocks without a hash (mapped or not)
    int32_t m_head = -1, m_tail = -1, m_n_lru = 0; // LRU queue of cached free blocks
    int32_t m_n_free = 0, m_n_mapped = 0;
    kv_grow_fn m_grow;
    std::string m_grow_error;
    std::unordered_multimap<block_hash, int32_t> m_cached;
    uint64_t m_queries = 0, m_hits = 0;
};

} // namespace es
