// The caching device allocator (see device_allocator.h). Invariants: the blocks of a segment tile it
// exactly, in address order in m_blocks; no two free blocks of one segment are neighbours (a free
// coalesces at once); m_free holds exactly the free blocks; the counters equal the sums over blocks.
#include "engine/cuda/device_allocator.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>

namespace es {

namespace {

std::string hex(uintptr_t p) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "0x%" PRIxPTR, p);
    return buf;
}

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

} // namespace

std::string format_bytes(uint64_t bytes) {
    if (bytes < 1024) return std::to_string(bytes) + " B";
    static const char *units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = double(bytes) / 1024.0;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        ++u;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
    return buf;
}

device_allocator::device_allocator(device_memory_source source) : m_source(std::move(source)) {}

device_allocator::~device_allocator() {
    for (const auto &[p, bytes] : m_segments) {
        try {
            m_source.free(reinterpret_cast<void *>(p), bytes);
        } catch (...) { // a source's free must not throw; never let a destructor do it either
        }
    }
}

size_t device_allocator::block_bytes(size_t request) {
    return round_up(std::max<size_t>(request, 1), k_alignment);
}

size_t device_allocator::segment_bytes(size_t request) {
    const size_t b = block_bytes(request);
    if (b <= k_small_request) return k_small_segment;
    if (b < k_large_request) return k_large_segment;
    return round_up(b, k_segment_round);
}

void device_allocator::insert_free(uintptr_t addr, const block &b) {
    m_blocks[addr] = b;
    m_free.emplace(b.size, addr);
}

// Allocates `size` bytes at the start of free block `it`; the rest (if any) stays a free block.
void *device_allocator::take(block_map::iterator it, size_t size, size_t requested) {
    block &b = it->second;
    m_free.erase({b.size, it->first});
    if (b.size > size) {
        block rest;
        rest.size = b.size - size;
        rest.segment = b.segment;
        insert_free(it->first + size, rest);
        b.size = size;
    }
    b.allocated = true;
    b.pinned = false;
    b.requested = requested;
    m_in_use += size;
    m_requested += requested;
    ++m_n_in_use;
    m_peak_in_use = std::max(m_peak_in_use, m_in_use);
    return reinterpret_cast<void *>(it->first);
}

bool device_allocator::grow(size_t size) {
    const size_t seg = segment_bytes(size);
    void *p = m_source.alloc ? m_source.alloc(seg) : nullptr;
    if (!p) return false;
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    if (a % k_alignment != 0) {
        m_source.free(p, seg);
        throw load_error("device allocator: the memory source returned " + hex(a) +
                         ", which is not aligned to " + std::to_string(k_alignment) + " bytes");
    }
    m_segments.emplace(a, seg);
    m_reserved += seg;
    m_peak_reserved = std::max(m_peak_reserved, m_reserved);
    ++m_n_source_allocs;
    block b;
    b.size = seg;
    b.segment = a;
    insert_free(a, b);
    return true;
}

result<void *> device_allocator::allocate(size_t bytes, const std::string &what) {
    return catch_errors([&]() -> result<void *> {
        if (bytes > k_max_request)
            throw load_error("device allocator: " + what + " asks for " + std::to_string(bytes) +
                             " bytes, more than any device has (a size computed wrongly?)");
        const size_t size = block_bytes(bytes);
        auto fit = m_free.lower_bound({size, 0});
        if (fit == m_free.end()) {
            uint64_t released = 0;
            if (!grow(size)) {
                // PyTorch's order: give the cached empty segments back, then ask once more.
                released = release_cached();
                if (released) ++m_n_oom_retries;
                if (!released || !grow(size)) throw load_error(oom_message(bytes, what, released));
            }
            fit = m_free.lower_bound({size, 0});
            if (fit == m_free.end())
                throw load_error("device allocator: internal error: a new segment does not fit " + what);
        }
        return take(m_blocks.find(fit->second), size, bytes);
    });
}

status device_allocator::free(void *p) {
    if (!p) return ok_status();
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    auto it = m_blocks.upper_bound(a);
    if (it == m_blocks.begin())
        return error{"device allocator: free of " + hex(a) + ", which it never handed out"};
    --it; // the block at or before a
    block &b = it->second;
    if (a >= it->first + b.size)
        return error{"device allocator: free of " + hex(a) + ", which it never handed out"};
    if (it->first != a)
        return error{"device allocator: free of " + hex(a) + ", which points inside the " +
                     std::string(b.allocated ? "block in use" : "free block") + " at " + hex(it->first) +
                     " (" + format_bytes(b.size) + ")" + (b.allocated ? "" : ": freed twice?")};
    if (!b.allocated)
        return error{"device allocator: double free of " + hex(a) + " (a free block of " +
                     format_bytes(b.size) + ")"};
    if (b.pinned)
        return error{"device allocator: free of " + hex(a) + " (" + format_bytes(b.size) +
                     "), which a live CUDA graph uses: destroy the graphs first"};
    m_in_use -= b.size;
    m_requested -= b.requested;
    --m_n_in_use;
    b.allocated = false;
    b.requested = 0;
    uintptr_t start = it->first;
    size_t size = b.size;
    // Coalesce with the next and the previous block when free and of the same segment.
    if (auto next = std::next(it);
        next != m_blocks.end() && !next->second.allocated && next->second.segment == b.segment) {
        m_free.erase({next->second.size, next->first});
        size += next->second.size;
        m_blocks.erase(next);
    }
    if (it != m_blocks.begin()) {
        auto prev = std::prev(it);
        if (!prev->second.allocated && prev->second.segment == b.segment) {
            m_free.erase({prev->second.size, prev->first});
            start = prev->first;
            size += prev->second.size;
            m_blocks.erase(it);
            it = prev;
        }
    }
    it->second.size = size;
    m_free.emplace(size, start);
    return ok_status();
}

int64_t device_allocator::pin_in_use() {
    int64_t n = 0;
    for (auto &[a, b] : m_blocks)
        if (b.allocated && !b.pinned) {
            b.pinned = true;
            ++n;
        }
    m_n_pinned += n;
    return n;
}

void device_allocator::unpin_all() {
    for (auto &[a, b] : m_blocks) b.pinned = false;
    m_n_pinned = 0;
}

uint64_t device_allocator::release_cached() {
    uint64_t released = 0;
    for (auto s = m_segments.begin(); s != m_segments.end();) {
        auto it = m_blocks.find(s->first);
        if (it == m_blocks.end() || it->second.allocated || it->second.size != s->second) {
            ++s;
            continue;
        }
        m_free.erase({it->second.size, it->first});
        m_blocks.erase(it);
        try {
            m_source.free(reinterpret_cast<void *>(s->first), s->second);
        } catch (...) {
        }
        released += s->second;
        m_reserved -= s->second;
        ++m_n_source_frees;
        s = m_segments.erase(s);
    }
    return released;
}

device_allocator_stats device_allocator::stats() const {
    device_allocator_stats s;
    s.reserved = m_reserved;
    s.in_use = m_in_use;
    s.requested = m_requested;
    s.largest_free_block = m_free.empty() ? 0 : m_free.rbegin()->first;
    s.peak_in_use = m_peak_in_use;
    s.peak_reserved = m_peak_reserved;
    s.n_segments = int64_t(m_segments.size());
    s.n_blocks_in_use = m_n_in_use;
    s.n_free_blocks = int64_t(m_free.size());
    s.n_pinned = m_n_pinned;
    s.n_source_allocs = m_n_source_allocs;
    s.n_source_frees = m_n_source_frees;
    s.n_oom_retries = m_n_oom_retries;
    const uint64_t free_total = m_reserved - m_in_use;
    s.fragmentation = free_total > 0 ? 1.0 - double(s.largest_free_block) / double(free_total) : 0.0;
    return s;
}

void device_allocator::reset_peak() {
    m_peak_in_use = m_in_use;
    m_peak_reserved = m_reserved;
}

std::string device_allocator::summary() const {
    const device_allocator_stats s = stats();
    return "reserved " + format_bytes(s.reserved) + " in " + std::to_string(s.n_segments) +
           (s.n_segments == 1 ? " segment" : " segments") + ", in use " + format_bytes(s.in_use) +
           ", largest free block " + format_bytes(s.largest_free_block);
}

status device_allocator::check() const {
    auto fail = [](const std::string &m) { return status{error{"device allocator invariant: " + m}}; };
    uint64_t reserved = 0, in_use = 0, requested = 0;
    int64_t n_in_use = 0, n_free = 0, n_pinned = 0;
    auto bit = m_blocks.begin();
    for (const auto &[seg, seg_bytes] : m_segments) {
        reserved += seg_bytes;
        uintptr_t at = seg;
        bool prev_free = false;
        while (at < seg + seg_bytes) {
            if (bit == m_blocks.end() || bit->first != at)
                return fail("segment " + hex(seg) + " has no block at " + hex(at));
            const block &b = bit->second;
            if (b.segment != seg) return fail("block " + hex(at) + " names segment " + hex(b.segment));
            if (b.size == 0 || b.size % k_alignment)
                return fail("block " + hex(at) + " has size " + std::to_string(b.size));
            if (!b.allocated && prev_free) return fail("free neighbours not coalesced at " + hex(at));
            if (b.allocated) {
                in_use += b.size;
                requested += b.requested;
                ++n_in_use;
                n_pinned += b.pinned;
                if (b.requested > b.size) return fail("block " + hex(at) + " smaller than its request");
            } else {
                ++n_free;
                if (b.pinned) return fail("free block " + hex(at) + " is pinned");
                if (!m_free.count({b.size, at}))
                    return fail("free block " + hex(at) + " missing from the free set");
            }
            prev_free = !b.allocated;
            at += b.size;
            ++bit;
        }
        if (at != seg + seg_bytes) return fail("blocks overrun segment " + hex(seg));
    }
    if (bit != m_blocks.end()) return fail("block " + hex(bit->first) + " lies outside every segment");
    if (int64_t(m_free.size()) != n_free) return fail("the free set holds blocks that are not free");
    if (reserved != m_reserved || in_use != m_in_use || requested != m_requested || n_in_use != m_n_in_use ||
        n_pinned != m_n_pinned)
        return fail("counters disagree with the blocks");
    return ok_status();
}

std::string device_allocator::oom_message(size_t bytes, const std::string &what, uint64_t released) const {
    std::string m = "out of GPU memory: " + what + " needs " + format_bytes(bytes) + " (" +
                    std::to_string(bytes) + " bytes; a new segment of " + format_bytes(segment_bytes(bytes)) +
                    ")";
    m += "; allocator: " + summary();
    if (released) m += " (" + format_bytes(released) + " of cached segments were given back first)";
    if (m_source.describe) {
        try {
            const std::string d = m_source.describe();
            if (!d.empty()) m += "; " + d;
        } catch (...) {
        }
    }
    return m;
}

} // namespace es
