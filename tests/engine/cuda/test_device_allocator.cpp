// es::device_allocator, the caching allocator of the CUDA backend's workspace, over a fake memory
// source (CPU only: addresses are handed out from a pretend device and never dereferenced): the
// rounding, 256-byte alignment, splitting and coalescing within a segment (never across two),
// best fit, growth by segments, the out-of-memory path (cached segments given back, one retry,
// then a message naming the request and the state), the stats and fragmentation on hand-made
// layouts, bad frees as errors, graph pinning, and a randomized run checked against the invariants.
#include "engine/cuda/device_allocator.h"

#include <QtTest>

#include <map>
#include <random>

using namespace es;

namespace {

constexpr size_t KiB = 1024, MiB = 1024 * 1024;

// A pretend device of `capacity` bytes. Segments are laid out back to back from `base` (so two
// segments can be neighbours in the address space, which must not make them one), freed address
// ranges are not reused.
struct fake_device {
    uintptr_t base = 0x7f0000000000;
    uintptr_t next = base;
    size_t capacity = size_t(1) << 40, used = 0;
    std::map<uintptr_t, size_t> live;
    int n_alloc_calls = 0, n_free_calls = 0;
    bool misalign = false, throw_on_alloc = false;

    device_memory_source source() {
        device_memory_source s;
        s.alloc = [this](size_t bytes) -> void * {
            ++n_alloc_calls;
            if (throw_on_alloc) throw load_error("fake: the device is gone");
            if (used + bytes > capacity) return nullptr;
            const uintptr_t p = next + (misalign ? 16 : 0);
            next += bytes + (misalign ? 256 : 0);
            used += bytes;
            live[p] = bytes;
            return reinterpret_cast<void *>(p);
        };
        s.free = [this](void *p, size_t bytes) {
            ++n_free_calls;
            auto it = live.find(reinterpret_cast<uintptr_t>(p));
            if (it == live.end() || it->second != bytes)
                qFatal("fake: free of a segment it did not hand out");
            used -= bytes;
            live.erase(it);
        };
        s.describe = [this] { return "fake device: " + format_bytes(capacity - used) + " free"; };
        return s;
    }
};

uintptr_t addr(const void *p) { return reinterpret_cast<uintptr_t>(p); }

void *must_alloc(device_allocator &a, size_t bytes) {
    auto r = a.allocate(bytes, "test block");
    if (!r) qFatal("allocate(%zu) failed: %s", bytes, r.message().c_str());
    return *r;
}

#define CHECK_OK(a)                                                                                          \
    do {                                                                                                     \
        const es::status s_ = (a).check();                                                                   \
        QVERIFY2(s_.ok(), s_.ok() ? "" : s_.message().c_str());                                              \
    } while (0)

} // namespace

class TestDeviceAllocator : public QObject {
    Q_OBJECT

private slots:
    void rounding_data() {
        QTest::addColumn<qulonglong>("request");
        QTest::addColumn<qulonglong>("block");
        QTest::addColumn<qulonglong>("segment");
        QTest::newRow("zero") << 0ull << 256ull << qulonglong(2 * MiB);
        QTest::newRow("one byte") << 1ull << 256ull << qulonglong(2 * MiB);
        QTest::newRow("256") << 256ull << 256ull << qulonglong(2 * MiB);
        QTest::newRow("257") << 257ull << 512ull << qulonglong(2 * MiB);
        QTest::newRow("1 MiB") << qulonglong(MiB) << qulonglong(MiB) << qulonglong(2 * MiB);
        QTest::newRow("1 MiB + 1") << qulonglong(MiB + 1) << qulonglong(MiB + 256) << qulonglong(20 * MiB);
        QTest::newRow("10 MiB - 1") << qulonglong(10 * MiB - 1) << qulonglong(10 * MiB)
                                    << qulonglong(10 * MiB);
        QTest::newRow("10 MiB - 257")
            << qulonglong(10 * MiB - 257) << qulonglong(10 * MiB - 256) << qulonglong(20 * MiB);
        QTest::newRow("21 MiB + 1") << qulonglong(21 * MiB + 1) << qulonglong(21 * MiB + 256)
                                    << qulonglong(22 * MiB);
        QTest::newRow("1 GiB") << qulonglong(1024 * MiB) << qulonglong(1024 * MiB) << qulonglong(1024 * MiB);
    }
    void rounding() {
        QFETCH(qulonglong, request);
        QFETCH(qulonglong, block);
        QFETCH(qulonglong, segment);
        QCOMPARE(qulonglong(device_allocator::block_bytes(request)), block);
        QCOMPARE(qulonglong(device_allocator::segment_bytes(request)), segment);

        fake_device dev;
        device_allocator a(dev.source());
        void *p = must_alloc(a, request);
        QCOMPARE(addr(p) % 256, uintptr_t(0));
        QCOMPARE(qulonglong(a.stats().in_use), block);
        QCOMPARE(qulonglong(a.stats().requested), request);
        QCOMPARE(qulonglong(a.stats().reserved), segment);
        QCOMPARE(dev.live.size(), size_t(1));
        QCOMPARE(qulonglong(dev.live.begin()->second), segment);
        CHECK_OK(a);
    }

    void alignment() {
        fake_device dev;
        device_allocator a(dev.source());
        std::vector<void *> ps;
        for (size_t n : {1, 3, 255, 256, 257, 1000, 4095, 70000, 333333}) ps.push_back(must_alloc(a, n));
        for (size_t i = 0; i < ps.size(); ++i) {
            QCOMPARE(addr(ps[i]) % 256, uintptr_t(0));
            for (size_t j = 0; j < i; ++j) QVERIFY(ps[i] != ps[j]);
        }
        CHECK_OK(a);
    }

    void splitAndCoalesce() {
        fake_device dev;
        device_allocator a(dev.source());
        void *pa = must_alloc(a, 1000); // 1024
        void *pb = must_alloc(a, 4096);
        void *pc = must_alloc(a, 256);
        const uintptr_t base = dev.live.begin()->first;
        QCOMPARE(addr(pa), base); // one segment, split in address order
        QCOMPARE(addr(pb), base + 1024);
        QCOMPARE(addr(pc), base + 5120);
        auto s = a.stats();
        QCOMPARE(s.n_segments, int64_t(1));
        QCOMPARE(s.in_use, uint64_t(1024 + 4096 + 256));
        QCOMPARE(s.n_free_blocks, int64_t(1));
        QCOMPARE(s.largest_free_block, uint64_t(2 * MiB - 5376));
        QCOMPARE(s.fragmentation, 0.0);

        QVERIFY(a.free(pb).ok()); // a hole of 4096 between two blocks in use
        s = a.stats();
        QCOMPARE(s.n_free_blocks, int64_t(2));
        QCOMPARE(s.largest_free_block, uint64_t(2 * MiB - 5376));
        QCOMPARE(s.fragmentation, 1.0 - double(2 * MiB - 5376) / double(2 * MiB - 1280));
        CHECK_OK(a);

        QVERIFY(a.free(pa).ok()); // coalesces with the hole after it: one free block of 5120
        s = a.stats();
        QCOMPARE(s.n_free_blocks, int64_t(2));
        QCOMPARE(qulonglong(addr(must_alloc(a, 5120))), qulonglong(base)); // the exact fit, at the start
        QVERIFY(a.free(reinterpret_cast<void *>(base)).ok());
        CHECK_OK(a);

        QVERIFY(a.free(pc).ok()); // coalesces on both sides: the whole segment is one free block
        s = a.stats();
        QCOMPARE(s.n_free_blocks, int64_t(1));
        QCOMPARE(s.largest_free_block, uint64_t(2 * MiB));
        QCOMPARE(s.in_use, uint64_t(0));
        QCOMPARE(s.reserved, uint64_t(2 * MiB));
        QCOMPARE(s.fragmentation, 0.0);
        CHECK_OK(a);
    }

    void bestFit() {
        fake_device dev;
        device_allocator a(dev.source());
        // Layout: [h4096][x][h1024][x][h2048][x][h2048'][x][tail]; h* freed below.
        void *h4096 = must_alloc(a, 4096);
        must_alloc(a, 256);
        void *h1024 = must_alloc(a, 1024);
        must_alloc(a, 256);
        void *h2048 = must_alloc(a, 2048);
        must_alloc(a, 256);
        void *h2048b = must_alloc(a, 2048);
        must_alloc(a, 256);
        for (void *p : {h4096, h1024, h2048b, h2048}) QVERIFY(a.free(p).ok());
        CHECK_OK(a);
        QCOMPARE(a.stats().n_free_blocks, int64_t(5));
        // 1500 → the smallest block that fits (2048), of two equal ones the lower address.
        void *p = must_alloc(a, 1500);
        QCOMPARE(p, h2048);
        // The rest of that block (512) stays free right after it.
        QCOMPARE(addr(must_alloc(a, 512)), addr(h2048) + 1536);
        QCOMPARE(must_alloc(a, 1024), h1024); // exact fit
        QCOMPARE(must_alloc(a, 2000), h2048b);
        QCOMPARE(must_alloc(a, 3000), h4096); // the only one left below the tail
        QCOMPARE(dev.n_alloc_calls, 1);
        CHECK_OK(a);
    }

    void growth() {
        fake_device dev;
        device_allocator a(dev.source());
        void *p1 = must_alloc(a, 1536 * KiB); // 20 MiB segment
        void *p2 = must_alloc(a, 18 * MiB);   // fits the rest of it (18.5 MiB free)
        QCOMPARE(dev.n_alloc_calls, 1);
        QCOMPARE(addr(p2), addr(p1) + 1536 * KiB);
        void *p3 = must_alloc(a, 1 * MiB); // 0.5 MiB left: a new 2 MiB segment
        QCOMPARE(dev.n_alloc_calls, 2);
        void *p4 = must_alloc(a, 30 * MiB); // a 30 MiB segment
        QCOMPARE(dev.n_alloc_calls, 3);
        auto s = a.stats();
        QCOMPARE(s.n_segments, int64_t(3));
        QCOMPARE(s.reserved, uint64_t(52 * MiB));
        QCOMPARE(s.peak_reserved, uint64_t(52 * MiB));
        QCOMPARE(s.n_source_allocs, int64_t(3));
        // The fake lays segments back to back: freeing everything must leave one free block per
        // segment, never one spanning two segments.
        QCOMPARE(dev.live.size(), size_t(3));
        QCOMPARE(std::next(dev.live.begin())->first, dev.live.begin()->first + 20 * MiB);
        for (void *p : {p1, p2, p3, p4}) QVERIFY(a.free(p).ok());
        s = a.stats();
        QCOMPARE(s.n_free_blocks, int64_t(3));
        QCOMPARE(s.largest_free_block, uint64_t(30 * MiB));
        QCOMPARE(s.fragmentation, 1.0 - 30.0 / 52.0);
        CHECK_OK(a);
        // Cached: a request that fits a free segment does not go to the source.
        must_alloc(a, 25 * MiB);
        QCOMPARE(dev.n_alloc_calls, 3);
        QCOMPARE(a.release_cached(), uint64_t(22 * MiB)); // the 20 and 2 MiB segments; not the used one
        QCOMPARE(a.stats().n_segments, int64_t(1));
        QCOMPARE(dev.live.size(), size_t(1));
        QCOMPARE(a.stats().n_source_frees, int64_t(2));
        CHECK_OK(a);
    }

    void oomRetryThenSucceed() {
        fake_device dev;
        dev.capacity = 24 * MiB;
        device_allocator a(dev.source());
        void *small = must_alloc(a, 1536 * KiB); // 20 MiB segment
        QVERIFY(a.free(small).ok());             // cached
        // 12 MiB fits the cached 20 MiB segment: no new one.
        void *p = must_alloc(a, 12 * MiB);
        QCOMPARE(dev.n_alloc_calls, 1);
        QVERIFY(a.free(p).ok());
        // 21 MiB does not fit: the source has 4 MiB, fails; the cached 20 MiB go back; retry works.
        p = must_alloc(a, 21 * MiB);
        QCOMPARE(dev.n_alloc_calls, 3);
        QCOMPARE(dev.n_free_calls, 1);
        auto s = a.stats();
        QCOMPARE(s.n_oom_retries, int64_t(1));
        QCOMPARE(s.reserved, uint64_t(22 * MiB));
        QCOMPARE(s.n_segments, int64_t(1));
        QCOMPARE(s.in_use, uint64_t(21 * MiB));
        CHECK_OK(a);
    }

    void oomErrorMessage() {
        fake_device dev;
        dev.capacity = 24 * MiB;
        device_allocator a(dev.source());
        void *p = must_alloc(a, 12 * MiB);
        void *cached = must_alloc(a, 1 * MiB); // a 2 MiB segment, then freed: cached
        QVERIFY(a.free(cached).ok());
        const auto before = a.stats();
        const int calls = dev.n_alloc_calls;
        auto r = a.allocate(16 * MiB, "the forward pass's workspace (64 tokens)");
        QVERIFY(!r.ok());
        const QString m = QString::fromStdString(r.message());
        QVERIFY2(m.startsWith("out of GPU memory: the forward pass's workspace (64 tokens) needs 16.0 MiB"),
                 qPrintable(m));
        QVERIFY2(m.contains("16777216 bytes"), qPrintable(m));
        QVERIFY2(m.contains(
                     "; allocator: reserved 12.0 MiB in 1 segment, in use 12.0 MiB, largest free block 0 B"),
                 qPrintable(m));
        QVERIFY2(m.contains("2.0 MiB of cached segments were given back first"), qPrintable(m));
        QVERIFY2(m.contains("fake device: 12.0 MiB free"), qPrintable(m));
        // Asked, gave back the cache, asked once more, then gave up.
        QCOMPARE(dev.n_alloc_calls, calls + 2);
        const auto after = a.stats();
        QCOMPARE(after.in_use, before.in_use);
        QCOMPARE(after.reserved, before.reserved - 2 * MiB);
        CHECK_OK(a);
        // Nothing cached: one attempt only, and the message says nothing was given back.
        r = a.allocate(16 * MiB, "again");
        QVERIFY(!r.ok());
        QCOMPARE(dev.n_alloc_calls, calls + 3);
        QVERIFY(!QString::fromStdString(r.message()).contains("given back"));
        // Still usable afterwards.
        QVERIFY(a.free(p).ok());
        QVERIFY(a.allocate(16 * MiB, "after freeing").ok());
        CHECK_OK(a);
    }

    void hugeRequest() {
        fake_device dev;
        device_allocator a(dev.source());
        auto r = a.allocate(~size_t(0), "an absurd size");
        QVERIFY(!r.ok());
        QVERIFY2(QString::fromStdString(r.message()).contains("an absurd size"), r.message().c_str());
        QCOMPARE(dev.n_alloc_calls, 0);
    }

    void sourceFailures() {
        fake_device dev;
        device_allocator a(dev.source());
        dev.throw_on_alloc = true;
        auto r = a.allocate(1000);
        QVERIFY(!r.ok());
        QCOMPARE(QString::fromStdString(r.message()), QString("fake: the device is gone"));
        QCOMPARE(a.stats().reserved, uint64_t(0));
        dev.throw_on_alloc = false;
        dev.misalign = true;
        r = a.allocate(1000);
        QVERIFY(!r.ok());
        QVERIFY2(QString::fromStdString(r.message()).contains("not aligned to 256 bytes"),
                 r.message().c_str());
        QCOMPARE(dev.live.size(), size_t(0)); // the misaligned segment went back
        QCOMPARE(a.stats().n_segments, int64_t(0));
        CHECK_OK(a);
    }

    void statsAndFragmentation() {
        fake_device dev;
        device_allocator a(dev.source());
        auto s = a.stats();
        QCOMPARE(s.reserved, uint64_t(0));
        QCOMPARE(s.fragmentation, 0.0); // nothing free
        // One 2 MiB segment cut into 8 blocks of 256 KiB, then every other one freed: 4 holes.
        std::vector<void *> ps;
        for (int i = 0; i < 8; ++i) ps.push_back(must_alloc(a, 256 * KiB - 100));
        s = a.stats();
        QCOMPARE(s.in_use, uint64_t(2 * MiB));
        QCOMPARE(s.requested, uint64_t(8 * (256 * KiB - 100)));
        QCOMPARE(s.largest_free_block, uint64_t(0));
        QCOMPARE(s.fragmentation, 0.0); // reserved == in use: nothing free
        QCOMPARE(s.n_blocks_in_use, int64_t(8));
        for (int i = 0; i < 8; i += 2) QVERIFY(a.free(ps[size_t(i)]).ok());
        s = a.stats();
        QCOMPARE(s.in_use, uint64_t(1 * MiB));
        QCOMPARE(s.n_free_blocks, int64_t(4));
        QCOMPARE(s.largest_free_block, uint64_t(256 * KiB));
        QCOMPARE(s.fragmentation, 0.75); // 1 − 256 KiB / 1 MiB
        QCOMPARE(s.peak_in_use, uint64_t(2 * MiB));
        a.reset_peak();
        QCOMPARE(a.stats().peak_in_use, uint64_t(1 * MiB));
        QVERIFY(a.free(ps[1]).ok()); // joins blocks 0..2: 768 KiB
        s = a.stats();
        QCOMPARE(s.largest_free_block, uint64_t(768 * KiB));
        QCOMPARE(s.fragmentation, 1.0 - 768.0 / 1280.0);
        QCOMPARE(s.peak_in_use, uint64_t(1 * MiB));
        QCOMPARE(QString::fromStdString(a.summary()),
                 QString("reserved 2.0 MiB in 1 segment, in use 768.0 KiB, largest free block 768.0 KiB"));
        CHECK_OK(a);
    }

    void badFrees() {
        fake_device dev;
        device_allocator a(dev.source());
        void *p = must_alloc(a, 1000);
        void *q = must_alloc(a, 1000);
        const auto before = a.stats();
        QVERIFY(a.free(nullptr).ok());

        int on_stack = 0;
        auto r = a.free(&on_stack);
        QVERIFY(!r.ok());
        QVERIFY2(QString::fromStdString(r.message()).contains("never handed out"), r.message().c_str());

        r = a.free(reinterpret_cast<char *>(p) + 256);
        QVERIFY(!r.ok());
        QVERIFY2(QString::fromStdString(r.message()).contains("points inside the block in use"),
                 r.message().c_str());

        QCOMPARE(a.stats().in_use, before.in_use);
        CHECK_OK(a);

        QVERIFY(a.free(q).ok());
        r = a.free(q); // q's block merged with the free tail: q still starts a free block
        QVERIFY(!r.ok());
        QVERIFY2(QString::fromStdString(r.message()).contains("double free"), r.message().c_str());
        QVERIFY(a.free(p).ok());
        r = a.free(q); // now merged into p's block: q lies inside a free block
        QVERIFY(!r.ok());
        QVERIFY2(QString::fromStdString(r.message()).contains("freed twice?"), r.message().c_str());
        r = a.free(p);
        QVERIFY(!r.ok());
        QVERIFY2(QString::fromStdString(r.message()).contains("double free"), r.message().c_str());
        // Past the end of the last segment.
        r = a.free(reinterpret_cast<void *>(dev.live.begin()->first + 2 * MiB + 256));
        QVERIFY(!r.ok());
        QVERIFY2(QString::fromStdString(r.message()).contains("never handed out"), r.message().c_str());
        QCOMPARE(a.stats().in_use, uint64_t(0));
        CHECK_OK(a);
    }

    void graphPins() {
        fake_device dev;
        device_allocator a(dev.source());
        void *work = must_alloc(a, 100 * KiB);
        void *inputs = must_alloc(a, 4 * KiB);
        QCOMPARE(a.pin_in_use(), int64_t(2));
        QCOMPARE(a.pin_in_use(), int64_t(0)); // already pinned
        QCOMPARE(a.stats().n_pinned, int64_t(2));
        auto r = a.free(work);
        QVERIFY(!r.ok());
        QVERIFY2(QString::fromStdString(r.message()).contains("live CUDA graph"), r.message().c_str());
        // A block allocated after the capture is not the graph's.
        void *later = must_alloc(a, 1000);
        QVERIFY(later != work && later != inputs);
        QVERIFY(a.free(later).ok());
        // Never handed out again while pinned: a request of the same size gets other memory.
        void *other = must_alloc(a, 100 * KiB);
        QVERIFY(other != work);
        QVERIFY(a.free(other).ok());
        CHECK_OK(a);
        a.unpin_all();
        QCOMPARE(a.stats().n_pinned, int64_t(0));
        QVERIFY(a.free(work).ok());
        QVERIFY(a.free(inputs).ok());
        QCOMPARE(a.stats().in_use, uint64_t(0));
        CHECK_OK(a);
    }

    void destructorGivesSegmentsBack() {
        fake_device dev;
        {
            device_allocator a(dev.source());
            must_alloc(a, 1000);
            void *p = must_alloc(a, 30 * MiB);
            QVERIFY(a.free(p).ok());
            QCOMPARE(dev.live.size(), size_t(2));
        }
        QCOMPARE(dev.live.size(), size_t(0));
        QCOMPARE(dev.used, size_t(0));
    }

    // Random allocations and frees (sizes from 1 byte to 24 MiB, a device of 256 MiB so the
    // out-of-memory path runs too); after every step the stats equal a model kept here and blocks
    // in use never overlap; every 50 steps the invariants hold.
    void randomized() {
        fake_device dev;
        dev.capacity = 256 * MiB;
        device_allocator a(dev.source());
        std::mt19937_64 rng(42);
        std::map<uintptr_t, size_t> live; // start → block bytes
        uint64_t peak = 0;
        int n_fail = 0;
        for (int step = 0; step < 4000; ++step) {
            const bool do_alloc = live.empty() || rng() % 100 < 55;
            if (do_alloc) {
                const int kind = int(rng() % 10);
                const size_t n = kind < 6   ? size_t(rng() % (64 * KiB)) + 1
                                 : kind < 9 ? size_t(rng() % (4 * MiB)) + 1
                                            : size_t(rng() % (24 * MiB)) + 1;
                auto r = a.allocate(n, "random");
                if (!r.ok()) {
                    ++n_fail;
                    QVERIFY2(QString::fromStdString(r.message()).startsWith("out of GPU memory"),
                             r.message().c_str());
                } else {
                    const uintptr_t p = addr(*r);
                    QCOMPARE(p % 256, uintptr_t(0));
                    auto nx = live.lower_bound(p);
                    if (nx != live.end()) QVERIFY(p + device_allocator::block_bytes(n) <= nx->first);
                    if (nx != live.begin()) QVERIFY(std::prev(nx)->first + std::prev(nx)->second <= p);
                    live[p] = device_allocator::block_bytes(n);
                }
            } else {
                auto it = live.begin();
                std::advance(it, long(rng() % live.size()));
                QVERIFY(a.free(reinterpret_cast<void *>(it->first)).ok());
                live.erase(it);
            }
            if (step % 500 == 0) a.release_cached();
            uint64_t in_use = 0;
            for (const auto &[p, b] : live) in_use += b;
            peak = std::max(peak, in_use);
            const auto s = a.stats();
            QCOMPARE(s.in_use, in_use);
            QCOMPARE(s.peak_in_use, peak);
            QCOMPARE(s.reserved, uint64_t(dev.used));
            QCOMPARE(s.n_segments, int64_t(dev.live.size()));
            QVERIFY(s.largest_free_block <= s.reserved - s.in_use);
            QVERIFY(s.fragmentation >= 0.0 && s.fragmentation < 1.0);
            if (step % 50 == 0) CHECK_OK(a);
        }
        CHECK_OK(a);
        QVERIFY2(n_fail > 0, "the randomized run should reach the out-of-memory path");
        QVERIFY(a.stats().n_oom_retries > 0);
        for (const auto &[p, b] : live) QVERIFY(a.free(reinterpret_cast<void *>(p)).ok());
        const auto s = a.stats();
        QCOMPARE(s.in_use, uint64_t(0));
        QCOMPARE(s.n_free_blocks, s.n_segments); // every segment back to one block
        QCOMPARE(a.release_cached(), s.reserved);
        QCOMPARE(dev.used, size_t(0));
    }
};

QTEST_APPLESS_MAIN(TestDeviceAllocator)
#include "test_device_allocator.moc"
