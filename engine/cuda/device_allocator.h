// A caching allocator for device memory, after PyTorch's CUDACachingAllocator (reduced: one stream,
// one pool, no graph-private pools). Segments come from a pluggable source (the CUDA backend passes
// cudaMalloc/cudaFree, the tests a fake); blocks are 256-byte multiples cut from them by best fit
// over a size-ordered free set, split on allocation and coalesced with free neighbours of the same
// segment on free. Freed blocks stay cached for the next request; empty segments go back to the
// source on release_cached() or when the source runs out. Plain C++: no CUDA header here.
#pragma once

#include "engine/core/status.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>

namespace es {

// Where segments come from. alloc returns nullptr when the memory is not there (out of memory);
// any other failure it may throw (es::load_error), which the allocator passes on unchanged with
// its own state untouched. free must not throw. describe (optional) says what the device has
// left, for out-of-memory messages ("device: 1.2 GiB free of 80.0 GiB").
struct device_memory_source {
    std::function<void *(size_t bytes)> alloc;
    std::function<void(void *p, size_t bytes)> free;
    std::function<std::string()> describe;
};

// The allocator's figures (bytes). Definitions as in ARCHITECTURE.md ("Memory manager"):
//   reserved           segments held from the source (what the device lost to us)
//   in_use             blocks handed out, each rounded up to 256 bytes
//   largest_free_block the largest request that can be served without asking the source
//   fragmentation      1 − largest_free_block / (reserved − in_use); 0 when nothing is free
struct device_allocator_stats {
    uint64_t reserved = 0, in_use = 0, largest_free_block = 0;
    uint64_t requested = 0; // bytes asked for by the blocks in use (before rounding)
    uint64_t peak_in_use = 0, peak_reserved = 0;
    int64_t n_segments = 0, n_blocks_in_use = 0, n_free_blocks = 0, n_pinned = 0;
    int64_t n_source_allocs = 0, n_source_frees = 0; // segments obtained / given back, ever
    int64_t n_oom_retries = 0; // times the source failed, cached segments were freed, and it was asked again
    double fragmentation = 0.0;
};

// Owned by one thread (the CUDA backend's, i.e. the engine thread); not thread-safe. One stream:
// a block freed and handed out again is ordered by that stream, so reuse needs no event.
class device_allocator {
public:
    static constexpr size_t k_alignment = 256;                  // every block's start and size
    static constexpr size_t k_small_request = size_t(1) << 20;  // requests up to this …
    static constexpr size_t k_small_segment = size_t(2) << 20;  // … get a 2 MiB segment,
    static constexpr size_t k_large_request = size_t(10) << 20; // requests below this …
    static constexpr size_t k_large_segment = size_t(20) << 20; // … a 20 MiB one,
    static constexpr size_t k_segment_round = size_t(2) << 20;  // larger ones a 2 MiB multiple.
    static constexpr size_t k_max_request = size_t(1) << 50;    // 1 PiB: larger is a caller's bug

    explicit device_allocator(device_memory_source source);
    ~device_allocator(); // gives every segment back to the source (blocks still out become invalid)
    device_allocator(const device_allocator &) = delete;
    device_allocator &operator=(const device_allocator &) = delete;

    // A block of at least `bytes` (0 counts as 1), 256-byte aligned. Best fit from the cache; else a
    // new segment (segment_bytes); when the source has no memory, the cached empty segments are
    // given back and, if there were any, the source asked once more. Fails with a message naming `what`, the
    // request, the allocator's state and the device's (source.describe).
    result<void *> allocate(size_t bytes, const std::string &what = "a block");

    // Returns a block to the cache (coalescing it with free neighbours). nullptr is a no-op.
    // Errors, with nothing changed: a pointer this allocator did not hand out, one inside a block,
    // a block already free (double free), a block pinned by a live CUDA graph.
    status free(void *p);

    // CUDA graphs record raw pointers: the backend pins every block in use after capturing a graph
    // and unpins them when it destroys its graphs. A pinned block cannot be freed (free() fails),
    // so it is never handed out again while a graph that uses it lives. Returns the count pinned.
    int64_t pin_in_use();
    void unpin_all();

    // Gives every entirely free segment back to the source; returns the bytes released.
    uint64_t release_cached();

    device_allocator_stats stats() const;
    void reset_peak(); // peak_in_use/peak_reserved := the current figures
    // "reserved 40.0 MiB in 2 segments, in use 30.0 MiB, largest free block 4.0 MiB"
    std::string summary() const;
    // Verifies the invariants (device_allocator.cpp's opening comment); the first broken one in
    // words. For tests: O(blocks).
    status check() const;

    // The rounding (exposed for tests and for estimates): a request's block size, and the size of
    // the segment a request that misses the cache asks the source for.
    static size_t block_bytes(size_t request);
    static size_t segment_bytes(size_t request);

private:
    struct block {
        size_t size = 0;
        uintptr_t segment = 0; // start of the segment it lies in
        size_t requested = 0;  // while allocated
        bool allocated = false, pinned = false;
    };
    using block_map = std::map<uintptr_t, block>; // every block of every segment, by address

    void *take(block_map::iterator it, size_t size, size_t requested);
    bool grow(size_t size); // one new segment from the source, as one free block
    void insert_free(uintptr_t addr, const block &b);
    std::string oom_message(size_t bytes, const std::string &what, uint64_t released) const;

    device_memory_source m_source;
    block_map m_blocks;
    std::set<std::pair<size_t, uintptr_t>> m_free; // (size, address): best fit, then lowest address
    std::map<uintptr_t, size_t> m_segments;        // start → bytes
    uint64_t m_reserved = 0, m_in_use = 0, m_requested = 0, m_peak_in_use = 0, m_peak_reserved = 0;
    int64_t m_n_in_use = 0, m_n_pinned = 0, m_n_source_allocs = 0, m_n_source_frees = 0, m_n_oom_retries = 0;
};

// "12.0 MiB" (binary units, one decimal; bytes below 1 KiB as "512 B").
std::string format_bytes(uint64_t bytes);

} // namespace es
