// es::block_pool, the paged-KV block pool with prefix caching (after vLLM v1's BlockPool):
// reference counts on allocate/acquire/release, the allocation order (the lowest uncached free
// block first, so that the pool's top empties; then cached free blocks least recently freed first,
// a request's blocks reversed so its tail goes first, an evicted block losing its hash), the
// pool's memory on demand (blocks above n_mapped handed out only once the grow function maps them,
// a failed grow falling back to evicting cached blocks, the trim floor and set_mapped), hash reuse
// and its limits (ids compared on lookup, first writer wins), hash_block chaining, and a randomized
// property test against a small reference model of the pool that checks check() and every ref
// count, the allocation order, the memory's top and lookups after each step.
#include "engine/runtime/block_pool.h"

#include <QtTest>

#include <algorithm>
#include <deque>
#include <map>
#include <numeric>
#include <random>
#include <set>

using ids_t = std::vector<int32_t>;
Q_DECLARE_METATYPE(ids_t)

namespace QTest {
template <>
inline char *toString(const std::optional<es::block_hash> &h) {
    return qstrdup(h ? QByteArray::number(qulonglong(*h), 16).prepend("0x").constData() : "nullopt");
}
} // namespace QTest

namespace {

QString describe(const ids_t &ids) {
    QStringList parts;
    for (int32_t id : ids) parts << QString::number(id);
    return "[" + parts.join(", ") + "]";
}

ids_t reversed(ids_t v) {
    std::reverse(v.begin(), v.end());
    return v;
}

// block_size token ids that differ per `content`.
ids_t block_tokens(int32_t content, int32_t block_size) {
    ids_t t(static_cast<size_t>(block_size));
    for (int32_t i = 0; i < block_size; ++i) t[size_t(i)] = content * 1000 + i;
    return t;
}

ids_t iota_ids(int32_t first, int32_t n) {
    ids_t v(size_t(std::max(n, 0)));
    for (int32_t i = 0; i < n; ++i) v[size_t(i)] = first + i;
    return v;
}

} // namespace

class TestBlockPool : public QObject {
    Q_OBJECT

private slots:
    void freshPool_data();
    void freshPool();
    void allocateReleaseRefCounts_data();
    void allocateReleaseRefCounts();
    void lowestUncachedFirst();
    void cachedEvictedLeastRecentlyFreed();
    void requestTailEvictedFirst_data();
    void requestTailEvictedFirst();
    void allocationEvictsHash();
    void cacheThenLookupAndAcquire();
    void acquireSharedBlock();
    void lookupComparesTokenIds_data();
    void lookupComparesTokenIds();
    void duplicateContentStaysPrivate();
    void allocateMoreThanFree_data();
    void allocateMoreThanFree();
    void doubleReleaseIsIgnored();
    void hashChaining_data();
    void hashChaining();
    void randomOperations_data();
    void randomOperations();
    void growsOnDemand();
    void failedGrowEvictsCachedThenFails();
    void trimFloorAndSetMapped();
};

void TestBlockPool::freshPool_data() {
    QTest::addColumn<int>("n_blocks");
    QTest::addColumn<int>("block_size");
    QTest::newRow("empty_pool") << 0 << 16;
    QTest::newRow("one_block") << 1 << 16;
    QTest::newRow("block_size_1") << 5 << 1;
    QTest::newRow("typical") << 64 << 16;
}

void TestBlockPool::freshPool() {
    QFETCH(int, n_blocks);
    QFETCH(int, block_size);
    es::block_pool pool(n_blocks, block_size);
    QCOMPARE(pool.n_blocks(), n_blocks);
    QCOMPARE(pool.block_size(), block_size);
    QCOMPARE(pool.n_free(), n_blocks);
    QCOMPARE(pool.n_used(), 0);
    QCOMPARE(pool.n_cached(), 0);
    QCOMPARE(pool.n_cached_free(), 0);
    QCOMPARE(pool.free_queue(), iota_ids(0, n_blocks)); // ids in order: block 0 is handed out first
    QCOMPARE(QString::fromStdString(pool.check()), QString());
}

void TestBlockPool::allocateReleaseRefCounts_data() {
    QTest::addColumn<int>("n_blocks");
    QTest::addColumn<int>("n_alloc");
    QTest::newRow("zero_blocks") << 8 << 0;
    QTest::newRow("one_block") << 8 << 1;
    QTest::newRow("some") << 8 << 3;
    QTest::newRow("all") << 8 << 8;
    QTest::newRow("the_only_block") << 1 << 1;
}

void TestBlockPool::allocateReleaseRefCounts() {
    QFETCH(int, n_blocks);
    QFETCH(int, n_alloc);
    es::block_pool pool(n_blocks, 16);
    auto got = pool.allocate(n_alloc);
    QVERIFY(got.has_value());
    QCOMPARE(*got, iota_ids(0, n_alloc)); // taken from the front, in queue order
    for (int32_t b : *got) QCOMPARE(pool.ref_cnt(b), 1);
    QCOMPARE(pool.n_free(), n_blocks - n_alloc);
    QCOMPARE(pool.n_used(), n_alloc);
    QCOMPARE(pool.free_queue(), iota_ids(n_alloc, n_blocks - n_alloc));
    QCOMPARE(QString::fromStdString(pool.check()), QString());

    pool.release(*got);
    for (int32_t b : *got) QCOMPARE(pool.ref_cnt(b), 0);
    QCOMPARE(pool.n_free(), n_blocks);
    QCOMPARE(pool.n_used(), 0);
    QCOMPARE(QString::fromStdString(pool.check()), QString());
}

// Uncached free blocks go out lowest first, whenever they were freed: the pool fills from the
// bottom, so its top stays free and can be given back.
void TestBlockPool::lowestUncachedFirst() {
    es::block_pool pool(6, 4);
    const ids_t a = *pool.allocate(2); // 0 1
    const ids_t b = *pool.allocate(2); // 2 3
    QCOMPARE(pool.free_queue(), (ids_t{4, 5}));
    pool.release(b);
    QCOMPARE(pool.free_queue(), (ids_t{2, 3, 4, 5}));
    pool.release(ids_t{a[1]});
    pool.release(ids_t{a[0]});
    QCOMPARE(pool.free_queue(), (ids_t{0, 1, 2, 3, 4, 5}));
    QCOMPARE(*pool.allocate(3), (ids_t{0, 1, 2}));
    pool.release(ids_t{1});
    QCOMPARE(*pool.allocate(2), (ids_t{1, 3})); // the hole first, then upwards
    QCOMPARE(pool.trim_floor(true), 4);
    QCOMPARE(QString::fromStdString(pool.check()), QString());
}

// Cached free blocks are evicted only once no uncached block is free, least recently freed first,
// wherever they lie in the pool.
void TestBlockPool::cachedEvictedLeastRecentlyFreed() {
    const int32_t bs = 4;
    es::block_pool pool(6, bs);
    const ids_t all = *pool.allocate(6);
    for (int32_t b : {1, 4, 2}) { // cached, in this order of release
        const ids_t t = block_tokens(b, bs);
        pool.cache_full_block(b, es::hash_block(std::nullopt, t), t);
    }
    pool.release(ids_t{4});
    pool.release(ids_t{5}); // uncached
    pool.release(ids_t{1});
    pool.release(ids_t{2});
    pool.release(ids_t{0}); // uncached
    QCOMPARE(pool.free_queue(), (ids_t{0, 5, 4, 1, 2}));
    QCOMPARE(pool.n_cached_free(), 3);
    QCOMPARE(*pool.allocate(3), (ids_t{0, 5, 4}));
    QCOMPARE(pool.n_cached(), 2); // block 4's hash went with it
    QVERIFY(!pool.hash_of(4));
    QCOMPARE(*pool.allocate(1), ids_t{1});
    QCOMPARE(QString::fromStdString(pool.check()), QString());
}

void TestBlockPool::requestTailEvictedFirst_data() {
    QTest::addColumn<int>("n_request_blocks");
    QTest::newRow("one_block") << 1;
    QTest::newRow("two_blocks") << 2;
    QTest::newRow("five_blocks") << 5;
}

// A request's blocks are released reversed (as the scheduler does), so its tail, least likely to
// be shared as a prefix, is evicted first and its first block last.
void TestBlockPool::requestTailEvictedFirst() {
    QFETCH(int, n_request_blocks);
    const int32_t bs = 4;
    es::block_pool pool(n_request_blocks + 2, bs);
    const ids_t req = *pool.allocate(n_request_blocks);
    std::optional<es::block_hash> parent;
    for (int32_t i = 0; i < n_request_blocks; ++i) {
        const ids_t t = block_tokens(i, bs);
        parent = es::hash_block(parent, t);
        pool.cache_full_block(req[size_t(i)], *parent, t);
    }
    QCOMPARE(pool.n_cached(), n_request_blocks);
    pool.release(reversed(req));
    QCOMPARE(pool.n_cached_free(), n_request_blocks);

    // The two never-used blocks first, then the request from its tail to its head.
    const ids_t expected_queue = ids_t{int32_t(n_request_blocks), int32_t(n_request_blocks + 1)};
    ids_t want = expected_queue;
    for (int32_t b : reversed(req)) want.push_back(b);
    QCOMPARE(pool.free_queue(), want);

    QCOMPARE(*pool.allocate(2), expected_queue);
    QCOMPARE(pool.n_cached(), n_request_blocks); // the uncached blocks went first
    for (int32_t i = n_request_blocks - 1; i >= 0; --i) {
        const ids_t got = *pool.allocate(1);
        QCOMPARE(got, ids_t{req[size_t(i)]});
        QVERIFY(!pool.hash_of(got[0]));
        QCOMPARE(pool.n_cached(), i); // the head's hash survives longest
    }
    QCOMPARE(QString::fromStdString(pool.check()), QString());
}

void TestBlockPool::allocationEvictsHash() {
    const int32_t bs = 8;
    es::block_pool pool(3, bs);
    const ids_t b = *pool.allocate(1); // block 0
    const ids_t t = block_tokens(7, bs);
    const es::block_hash h = es::hash_block(std::nullopt, t);
    pool.cache_full_block(b[0], h, t);
    QCOMPARE(pool.hash_of(b[0]), std::optional<es::block_hash>(h));
    pool.release(b);
    QCOMPARE(pool.free_queue(), (ids_t{1, 2, 0}));
    // Freed but still cached: a lookup finds it until it is evicted.
    QCOMPARE(pool.lookup(h, t), b[0]);
    QCOMPARE(pool.n_cached_free(), 1);

    QCOMPARE(*pool.allocate(2), (ids_t{1, 2})); // the cached block is at the back: survives
    QCOMPARE(pool.lookup(h, t), b[0]);
    QCOMPARE(*pool.allocate(1), b); // now evicted
    QCOMPARE(pool.lookup(h, t), -1);
    QVERIFY(!pool.hash_of(b[0]));
    QCOMPARE(pool.n_cached(), 0);
    QCOMPARE(pool.ref_cnt(b[0]), 1);
    QCOMPARE(QString::fromStdString(pool.check()), QString());
}

void TestBlockPool::cacheThenLookupAndAcquire() {
    const int32_t bs = 16;
    es::block_pool pool(4, bs);
    const ids_t req = *pool.allocate(2); // 0 1
    const ids_t t0 = block_tokens(1, bs), t1 = block_tokens(2, bs);
    const es::block_hash h0 = es::hash_block(std::nullopt, t0), h1 = es::hash_block(h0, t1);
    pool.cache_full_block(req[0], h0, t0);
    pool.cache_full_block(req[1], h1, t1);
    QCOMPARE(pool.lookup(h0, t0), req[0]);
    QCOMPARE(pool.lookup(h1, t1), req[1]);
    QCOMPARE(pool.n_cached(), 2);
    QCOMPARE(pool.n_cached_free(), 0);

    pool.release(reversed(req));
    QCOMPARE(pool.free_queue(), (ids_t{2, 3, 1, 0}));
    QCOMPARE(pool.n_free(), 4);

    // A hit on a free cached block takes it out of the middle of the queue with one reference.
    const int32_t hit = pool.lookup(h1, t1);
    QCOMPARE(hit, req[1]);
    pool.acquire(hit);
    QCOMPARE(pool.ref_cnt(hit), 1);
    QCOMPARE(pool.n_free(), 3);
    QCOMPARE(pool.free_queue(), (ids_t{2, 3, 0}));
    QCOMPARE(pool.n_cached_free(), 1);
    QCOMPARE(pool.hash_of(hit), std::optional<es::block_hash>(h1)); // still cached while in use
    QCOMPARE(QString::fromStdString(pool.check()), QString());

    // Allocating everything else never hands out the acquired block.
    const ids_t rest = *pool.allocate(3);
    QVERIFY(std::find(rest.begin(), rest.end(), hit) == rest.end());
    QVERIFY(!pool.allocate(1));
    QCOMPARE(pool.lookup(h1, t1), hit);
    QCOMPARE(pool.lookup(h0, t0), -1); // block 0 was evicted by that allocation
    QCOMPARE(QString::fromStdString(pool.check()), QString());
}

void TestBlockPool::acquireSharedBlock() {
    const int32_t bs = 4;
    es::block_pool pool(2, bs);
    const ids_t a = *pool.allocate(1);
    const ids_t t = block_tokens(3, bs);
    const es::block_hash h = es::hash_block(std::nullopt, t);
    pool.cache_full_block(a[0], h, t);
    // A second request hits the block while the first still holds it.
    pool.acquire(pool.lookup(h, t));
    QCOMPARE(pool.ref_cnt(a[0]), 2);
    QCOMPARE(pool.n_free(), 1);
    pool.release(a);
    QCOMPARE(pool.ref_cnt(a[0]), 1);
    QCOMPARE(pool.n_free(), 1); // still in use by the second
    QCOMPARE(pool.free_queue(), ids_t{1});
    pool.release(a);
    QCOMPARE(pool.ref_cnt(a[0]), 0);
    QCOMPARE(pool.free_queue(), (ids_t{1, 0}));
    QCOMPARE(QString::fromStdString(pool.check()), QString());
}

void TestBlockPool::lookupComparesTokenIds_data() {
    QTest::addColumn<ids_t>("query");
    QTest::addColumn<bool>("hit");
    const ids_t cached = {10, 11, 12, 13};
    QTest::newRow("same_ids") << cached << true;
    QTest::newRow("last_id_differs") << ids_t{10, 11, 12, 14} << false;
    QTest::newRow("first_id_differs") << ids_t{9, 11, 12, 13} << false;
    QTest::newRow("permuted") << ids_t{13, 12, 11, 10} << false;
    QTest::newRow("shorter") << ids_t{10, 11, 12} << false;
    QTest::newRow("longer") << ids_t{10, 11, 12, 13, 14} << false;
    QTest::newRow("empty") << ids_t{} << false;
}

// The same hash with other ids (a collision) must miss: serving it would give wrong KV.
void TestBlockPool::lookupComparesTokenIds() {
    QFETCH(ids_t, query);
    QFETCH(bool, hit);
    es::block_pool pool(2, 4);
    const ids_t b = *pool.allocate(1);
    const ids_t cached = {10, 11, 12, 13};
    const es::block_hash h = es::hash_block(std::nullopt, cached);
    pool.cache_full_block(b[0], h, cached);
    QCOMPARE(pool.lookup(h, query), hit ? b[0] : -1);
    QCOMPARE(pool.lookup(h + 1, cached), -1); // other hash, same ids
}

void TestBlockPool::duplicateContentStaysPrivate() {
    const int32_t bs = 4;
    es::block_pool pool(4, bs);
    const ids_t a = *pool.allocate(1), b = *pool.allocate(1);
    const ids_t t = block_tokens(5, bs);
    const es::block_hash h = es::hash_block(std::nullopt, t);
    pool.cache_full_block(a[0], h, t);
    pool.cache_full_block(b[0], h, t); // computed the same content concurrently: first writer wins
    QCOMPARE(pool.n_cached(), 1);
    QCOMPARE(pool.hash_of(a[0]), std::optional<es::block_hash>(h));
    QVERIFY(!pool.hash_of(b[0]));
    QCOMPARE(pool.lookup(h, t), a[0]);
    // Caching a block twice (another hash) leaves the first hash.
    const ids_t t2 = block_tokens(6, bs);
    pool.cache_full_block(a[0], es::hash_block(std::nullopt, t2), t2);
    QCOMPARE(pool.hash_of(a[0]), std::optional<es::block_hash>(h));
    QCOMPARE(pool.lookup(es::hash_block(std::nullopt, t2), t2), -1);

    // A colliding hash with other ids is a separate entry, and both are found by their ids.
    const ids_t c = *pool.allocate(1);
    pool.cache_full_block(c[0], h, t2);
    QCOMPARE(pool.n_cached(), 2);
    QCOMPARE(pool.lookup(h, t), a[0]);
    QCOMPARE(pool.lookup(h, t2), c[0]);
    QCOMPARE(QString::fromStdString(pool.check()), QString());

    pool.release(b);
    pool.release(a);
    pool.release(c);
    QCOMPARE(pool.n_free(), 4);
    QCOMPARE(pool.n_cached_free(), 2);
    QCOMPARE(QString::fromStdString(pool.check()), QString());
}

void TestBlockPool::allocateMoreThanFree_data() {
    QTest::addColumn<int>("n_blocks");
    QTest::addColumn<int>("pre_alloc");
    QTest::addColumn<int>("request");
    QTest::newRow("empty_pool") << 0 << 0 << 1;
    QTest::newRow("one_over_fresh") << 4 << 0 << 5;
    // Rows with pre_alloc > 0 give the last block back (cached), so one more is free.
    QTest::newRow("one_over_partly_used") << 8 << 5 << 5;
    QTest::newRow("only_a_cached_block_free") << 4 << 4 << 2;
    QTest::newRow("far_over") << 4 << 1 << 1000;
    QTest::newRow("negative") << 4 << 0 << -1;
}

void TestBlockPool::allocateMoreThanFree() {
    QFETCH(int, n_blocks);
    QFETCH(int, pre_alloc);
    QFETCH(int, request);
    es::block_pool pool(n_blocks, 4);
    const ids_t held = *pool.allocate(pre_alloc);
    // A cached free block, so a failed allocation that evicted would show.
    if (pre_alloc > 0) {
        const ids_t t = block_tokens(1, 4);
        pool.cache_full_block(held.back(), es::hash_block(std::nullopt, t), t);
        pool.release(ids_t{held.back()});
    }
    const ids_t queue = pool.free_queue();
    const int32_t n_free = pool.n_free(), n_cached = pool.n_cached();

    QVERIFY(!pool.allocate(request));
    QCOMPARE(pool.free_queue(), queue);
    QCOMPARE(pool.n_free(), n_free);
    QCOMPARE(pool.n_cached(), n_cached);
    for (int32_t b = 0; b < n_blocks; ++b)
        QCOMPARE(pool.ref_cnt(b), std::find(queue.begin(), queue.end(), b) == queue.end() ? 1 : 0);
    QCOMPARE(QString::fromStdString(pool.check()), QString());
    // Exactly what is free still works.
    QVERIFY(pool.allocate(n_free).has_value());
    QCOMPARE(pool.n_free(), 0);
}

// Releasing a block nobody holds is a caller bug; the pool must not go negative or queue it twice.
void TestBlockPool::doubleReleaseIsIgnored() {
    es::block_pool pool(3, 4);
    const ids_t a = *pool.allocate(1);
    pool.release(a);
    pool.release(a);
    QCOMPARE(pool.ref_cnt(a[0]), 0);
    QCOMPARE(pool.n_free(), 3);
    QCOMPARE(pool.free_queue(), (ids_t{0, 1, 2}));
    QCOMPARE(QString::fromStdString(pool.check()), QString());
}

void TestBlockPool::hashChaining_data() {
    QTest::addColumn<bool>("a_has_parent");
    QTest::addColumn<qulonglong>("a_parent");
    QTest::addColumn<ids_t>("a_tokens");
    QTest::addColumn<bool>("b_has_parent");
    QTest::addColumn<qulonglong>("b_parent");
    QTest::addColumn<ids_t>("b_tokens");
    QTest::addColumn<bool>("equal");
    const ids_t t = {1, 2, 3, 4};
    QTest::newRow("same_everything") << true << 42ull << t << true << 42ull << t << true;
    QTest::newRow("no_parent_twice") << false << 0ull << t << false << 0ull << t << true;
    QTest::newRow("different_parent") << true << 42ull << t << true << 43ull << t << false;
    QTest::newRow("no_parent_vs_parent") << false << 0ull << t << true << 0ull << t << false;
    // The "no parent" seed must not be reachable by passing its value as a parent.
    QTest::newRow("no_parent_vs_seed_parent") << false << 0ull << t << true << 0x5eedull << t << false;
    QTest::newRow("different_token") << true << 42ull << t << true << 42ull << ids_t{1, 2, 3, 5} << false;
    QTest::newRow("permuted_tokens") << true << 42ull << t << true << 42ull << ids_t{4, 3, 2, 1} << false;
    QTest::newRow("prefix_tokens") << true << 42ull << t << true << 42ull << ids_t{1, 2, 3} << false;
    QTest::newRow("one_token_blocks") << true << 7ull << ids_t{9} << true << 8ull << ids_t{9} << false;
    QTest::newRow("negative_id") << false << 0ull << ids_t{-1} << false << 0ull << ids_t{0} << false;
}

void TestBlockPool::hashChaining() {
    QFETCH(bool, a_has_parent);
    QFETCH(qulonglong, a_parent);
    QFETCH(ids_t, a_tokens);
    QFETCH(bool, b_has_parent);
    QFETCH(qulonglong, b_parent);
    QFETCH(ids_t, b_tokens);
    QFETCH(bool, equal);
    auto opt = [](bool has, qulonglong v) {
        return has ? std::optional<es::block_hash>(v) : std::optional<es::block_hash>();
    };
    const es::block_hash ha = es::hash_block(opt(a_has_parent, a_parent), a_tokens);
    const es::block_hash hb = es::hash_block(opt(b_has_parent, b_parent), b_tokens);
    QCOMPARE(ha == hb, equal);
}

void TestBlockPool::randomOperations_data() {
    QTest::addColumn<int>("n_blocks");
    QTest::addColumn<int>("block_size");
    QTest::addColumn<int>("n_contents"); // distinct block contents: few means many cache hits
    QTest::addColumn<int>("n_ops");
    QTest::addColumn<uint>("seed");
    QTest::addColumn<int>("grow_step"); // 0: the pool's memory is whole; else it is mapped in such steps
    QTest::newRow("tiny_pool") << 2 << 1 << 3 << 5000 << 1u << 0;
    QTest::newRow("small_pool_many_hits") << 8 << 4 << 4 << 8000 << 2u << 0;
    QTest::newRow("medium_pool") << 32 << 16 << 24 << 8000 << 3u << 0;
    QTest::newRow("large_pool_few_hits") << 128 << 16 << 400 << 8000 << 4u << 0;
    QTest::newRow("one_block") << 1 << 16 << 2 << 3000 << 5u << 0;
    QTest::newRow("growing_tiny") << 3 << 1 << 3 << 5000 << 6u << 1;
    QTest::newRow("growing_small_many_hits") << 8 << 4 << 4 << 8000 << 7u << 3;
    QTest::newRow("growing_medium") << 32 << 16 << 24 << 8000 << 8u << 5;
    QTest::newRow("growing_large_word_edges") << 200 << 16 << 400 << 8000 << 9u << 64;
}

// Thousands of random operations against a reference model of the pool (ref counts, the
// uncached free blocks as an ordered set, the cached free ones as an LRU list, the cache as block →
// content, the memory's top): after each one check() is empty and the pool agrees with the model;
// at the end, after releasing everything, every block is free. With grow_step, the pool starts
// without memory, grows through a function that maps in such steps up to a limit that moves at
// random (a device whose memory comes and goes), and is trimmed at random.
void TestBlockPool::randomOperations() {
    QFETCH(int, n_blocks);
    QFETCH(int, block_size);
    QFETCH(int, n_contents);
    QFETCH(int, n_ops);
    QFETCH(uint, seed);
    QFETCH(int, grow_step);

    // Content c: its ids and its hash. The last content deliberately collides with the first
    // (same hash, other ids) so collisions are exercised too.
    std::vector<ids_t> tokens(static_cast<size_t>(n_contents));
    std::vector<es::block_hash> hashes(static_cast<size_t>(n_contents));
    for (int32_t c = 0; c < n_contents; ++c) {
        tokens[size_t(c)] = block_tokens(c, block_size);
        hashes[size_t(c)] =
            es::hash_block(c % 3 == 0 ? std::nullopt : std::optional<es::block_hash>(c), tokens[size_t(c)]);
    }
    if (n_contents > 1) hashes.back() = hashes.front();

    // The memory: mapped in grow_step steps up to `limit` blocks.
    int32_t limit = n_blocks, mapped = grow_step > 0 ? 0 : n_blocks;
    int n_grows = 0, n_short_grows = 0, n_trims = 0;
    auto device = [&](int32_t have, int32_t want) {
        const int32_t stepped = std::min(n_blocks, (want + grow_step - 1) / grow_step * grow_step);
        return std::max(have, std::min(stepped, limit));
    };
    es::block_pool pool(n_blocks, block_size, grow_step > 0 ? 0 : -1);
    int32_t grown_to = -1; // what the last call of the grow function asked for
    pool.set_grow([&](int32_t want, std::string &error) {
        grown_to = want;
        const int32_t got = device(pool.n_mapped(), want);
        if (got < want) error = "no memory for block " + std::to_string(got);
        return got;
    });
    std::mt19937 rng(seed);
    auto pick = [&rng](size_t n) { return size_t(std::uniform_int_distribution<size_t>(0, n - 1)(rng)); };

    // Reference model.
    std::vector<int32_t> ref(static_cast<size_t>(n_blocks), 0);
    std::set<int32_t> uncached;
    for (int32_t b = 0; b < n_blocks; ++b) uncached.insert(b);
    std::deque<int32_t> lru;
    std::map<int32_t, int32_t> cached; // block → content
    auto model_lookup = [&](int32_t c) {
        for (const auto &[b, cc] : cached)
            if (hashes[size_t(cc)] == hashes[size_t(c)] && tokens[size_t(cc)] == tokens[size_t(c)]) return b;
        return -1;
    };
    auto make_free = [&](int32_t b) {
        if (cached.count(b)) lru.push_back(b);
        else uncached.insert(b);
    };
    auto uncached_mapped = [&] {
        return int32_t(std::distance(uncached.begin(), uncached.lower_bound(mapped)));
    };
    auto model_floor = [&](bool keep_cached) {
        int32_t t = mapped;
        while (t > 0 && ref[size_t(t - 1)] == 0 && !(keep_cached && cached.count(t - 1))) --t;
        return t;
    };
    std::vector<ids_t> owners; // each: the blocks one "request" holds, in table order
    auto model_release = [&](const ids_t &blocks) {
        for (int32_t b : blocks)
            if (--ref[size_t(b)] == 0) make_free(b);
    };

    int n_hits = 0, n_failed_allocs = 0, n_evictions = 0;
    for (int op = 0; op < n_ops; ++op) {
        const int kind = int(pick(grow_step > 0 ? 6 : 4));
        QString what;
        if (kind == 0) { // allocate for a new request (sometimes more than is free)
            const int32_t n =
                int32_t(pick(size_t(std::max(2, n_blocks / 2)))) + (pick(8) == 0 ? n_blocks : 0);
            what = QString("allocate %1").arg(n);
            const int32_t n_free = int32_t(uncached.size() + lru.size());
            int32_t want_grow = -1;
            if (n <= n_free && n > uncached_mapped() && mapped < n_blocks) {
                want_grow = std::min(n_blocks, mapped + n - uncached_mapped());
                const int32_t got = device(mapped, want_grow);
                n_short_grows += got < want_grow;
                ++n_grows;
                mapped = got;
            }
            grown_to = -1;
            auto got = pool.allocate(n);
            QCOMPARE(grown_to, want_grow);
            const int32_t from_uncached = std::min(n, uncached_mapped());
            if (n > n_free || n > uncached_mapped() + int32_t(lru.size())) {
                QVERIFY2(!got, qPrintable(what));
                ++n_failed_allocs;
            } else {
                QVERIFY2(got, qPrintable(what));
                ids_t want;
                for (int32_t i = 0; i < n; ++i) {
                    if (i < from_uncached) {
                        want.push_back(*uncached.begin());
                        uncached.erase(uncached.begin());
                    } else {
                        want.push_back(lru.front());
                        lru.pop_front();
                        n_evictions += int(cached.erase(want.back()));
                    }
                }
                QCOMPARE(*got, want);
                for (int32_t b : want) ref[size_t(b)] = 1;
                owners.push_back(want);
            }
        } else if (kind == 1 && !owners.empty()) { // release a request, reversed
            const size_t o = pick(owners.size());
            const ids_t rev = reversed(owners[o]);
            what = "release " + describe(rev);
            pool.release(rev);
            model_release(rev);
            owners.erase(owners.begin() + long(o));
        } else if (kind == 2 && !owners.empty()) { // cache one held block with some content
            const ids_t &blocks = owners[pick(owners.size())];
            if (blocks.empty()) continue;
            const int32_t b = blocks[pick(blocks.size())];
            const int32_t c = int32_t(pick(size_t(n_contents)));
            what = QString("cache block %1 as content %2").arg(b).arg(c);
            pool.cache_full_block(b, hashes[size_t(c)], tokens[size_t(c)]);
            if (!cached.count(b) && model_lookup(c) < 0) cached[b] = c;
        } else if (kind == 4) { // the device's memory comes and goes
            limit = int32_t(pick(size_t(n_blocks) + 1));
            what = QString("limit %1").arg(limit);
        } else if (kind == 5) { // trim: to the floor or above it, sometimes keeping the cached blocks
            const bool keep_cached = pick(2) == 0;
            const int32_t floor = model_floor(keep_cached);
            QCOMPARE(pool.trim_floor(keep_cached), floor);
            const int32_t target = floor + int32_t(pick(size_t(mapped - floor) + 1));
            what = QString("trim to %1 (floor %2%3)").arg(target).arg(floor).arg(keep_cached ? ", cached kept" : "");
            if (floor > 0 && pick(4) == 0 && ref[size_t(floor - 1)] > 0) { // below a block in use: refused
                QVERIFY(!pool.set_mapped(floor - 1));
                QCOMPARE(pool.n_mapped(), mapped);
            }
            QVERIFY(pool.set_mapped(target));
            for (int32_t b = target; b < mapped; ++b)
                if (cached.count(b)) {
                    lru.erase(std::find(lru.begin(), lru.end(), b));
                    cached.erase(b);
                    uncached.insert(b);
                }
            n_trims += target < mapped;
            mapped = target;
        } else { // lookup + acquire, into a new request or appended to an existing one
            const int32_t c = int32_t(pick(size_t(n_contents)));
            const int32_t want = model_lookup(c);
            what = QString("lookup content %1").arg(c);
            const int32_t got = pool.lookup(hashes[size_t(c)], tokens[size_t(c)]);
            QCOMPARE(got, want);
            if (got >= 0) {
                ++n_hits;
                pool.acquire(got);
                if (ref[size_t(got)]++ == 0) lru.erase(std::find(lru.begin(), lru.end(), got));
                if (!owners.empty() && pick(2) == 0)
                    owners[pick(owners.size())].push_back(got);
                else
                    owners.push_back({got});
            }
        }

        const std::string broken = pool.check();
        QVERIFY2(broken.empty(),
                 qPrintable(QString("after op %1 (%2): %3").arg(op).arg(what).arg(broken.c_str())));
        QCOMPARE(pool.n_mapped(), mapped);
        QCOMPARE(pool.n_free(), int32_t(uncached.size() + lru.size()));
        QCOMPARE(pool.n_free_mapped(), uncached_mapped() + int32_t(lru.size()));
        ids_t queue(uncached.begin(), uncached.end());
        queue.insert(queue.end(), lru.begin(), lru.end());
        QCOMPARE(pool.free_queue(), queue);
        for (int32_t b = 0; b < n_blocks; ++b) QCOMPARE(pool.ref_cnt(b), ref[size_t(b)]);
        QCOMPARE(pool.n_cached(), int32_t(cached.size()));
        QCOMPARE(pool.n_cached_free(), int32_t(lru.size()));
        for (int32_t b = 0; b < n_blocks; ++b) QCOMPARE(pool.hash_of(b).has_value(), cached.count(b) == 1);
        // The KV block map's per-block states agree with the model.
        std::vector<uint8_t> states;
        pool.states(states);
        QCOMPARE(int32_t(states.size()), n_blocks);
        for (int32_t b = 0; b < n_blocks; ++b) {
            const uint8_t want = ref[size_t(b)] > 0 ? 0 : cached.count(b) ? 1 : b < mapped ? 2 : 3;
            QCOMPARE(int(states[size_t(b)]), int(want));
        }
    }
    // The workload must have exercised what it is meant to.
    QVERIFY(n_hits > 0);
    QVERIFY(n_failed_allocs > 0);
    if (n_blocks > 1) QVERIFY(n_evictions > 0);
    if (grow_step > 0) {
        QVERIFY(n_grows > 0);
        QVERIFY(n_short_grows > 0);
        QVERIFY(n_trims > 0);
    }

    for (const ids_t &blocks : owners) pool.release(reversed(blocks));
    QCOMPARE(QString::fromStdString(pool.check()), QString());
    QCOMPARE(pool.n_free(), pool.n_blocks());
    QCOMPARE(pool.n_used(), 0);
    for (int32_t b = 0; b < n_blocks; ++b) QCOMPARE(pool.ref_cnt(b), 0);
}

// Blocks above the memory's top are handed out only once the grow function mapped them, asked
// for exactly the blocks missing; what it maps beyond is used before it is asked again.
void TestBlockPool::growsOnDemand() {
    es::block_pool pool(10, 4, 0);
    QCOMPARE(pool.n_mapped(), 0);
    QCOMPARE(pool.n_free(), 10);
    QCOMPARE(pool.n_free_mapped(), 0);
    std::vector<int32_t> asked;
    pool.set_grow([&](int32_t want, std::string &) {
        asked.push_back(want);
        return std::min(10, (want + 3) / 4 * 4); // steps of 4 blocks
    });
    QCOMPARE(*pool.allocate(1), ids_t{0});
    QCOMPARE(asked, ids_t{1});
    QCOMPARE(pool.n_mapped(), 4);
    QCOMPARE(*pool.allocate(3), (ids_t{1, 2, 3}));
    QCOMPARE(asked, ids_t{1}); // mapped already
    QCOMPARE(*pool.allocate(2), (ids_t{4, 5}));
    QCOMPARE(asked, (ids_t{1, 6}));
    QCOMPARE(pool.n_mapped(), 8);
    QCOMPARE(*pool.allocate(4), (ids_t{6, 7, 8, 9}));
    QCOMPARE(asked, (ids_t{1, 6, 10}));
    QCOMPARE(pool.n_mapped(), 10);
    QVERIFY(pool.grow_error().empty());
    std::vector<uint8_t> states;
    pool.states(states);
    QCOMPARE(int(states[9]), 0);
    QCOMPARE(QString::fromStdString(pool.check()), QString());
}

// A grow that falls short: the pool evicts cached blocks before it fails, fails without changing
// anything when even they are not enough, and says why; a pool without a grow function says so.
void TestBlockPool::failedGrowEvictsCachedThenFails() {
    const int32_t bs = 4;
    es::block_pool pool(8, bs, 4);
    int32_t room = 4; // the device's memory: blocks [0, room)
    pool.set_grow([&](int32_t want, std::string &error) {
        if (want > room) error = "out of device memory for the KV pool";
        return std::min(want, room);
    });
    const ids_t held = *pool.allocate(4);
    QCOMPARE(held, (ids_t{0, 1, 2, 3}));
    for (int32_t b : {2, 3}) {
        const ids_t t = block_tokens(b, bs);
        pool.cache_full_block(b, es::hash_block(std::nullopt, t), t);
    }
    pool.release(ids_t{3, 2});
    QCOMPARE(pool.n_free(), 6);
    QCOMPARE(pool.n_free_mapped(), 2);
    // The uncached blocks 4.. need memory that is not there: the cached ones go instead.
    QCOMPARE(*pool.allocate(1), ids_t{3});
    QCOMPARE(pool.grow_error(), std::string("out of device memory for the KV pool"));
    QCOMPARE(pool.n_cached(), 1);
    const ids_t queue = pool.free_queue();
    QVERIFY(!pool.allocate(2));
    QCOMPARE(pool.free_queue(), queue);
    QCOMPARE(pool.n_cached(), 1);
    QCOMPARE(pool.n_mapped(), 4);
    // Memory again: the pool grows and the cached block survives.
    room = 8;
    QCOMPARE(*pool.allocate(2), (ids_t{4, 5}));
    QVERIFY(pool.grow_error().empty());
    QCOMPARE(pool.n_cached(), 1);
    QCOMPARE(QString::fromStdString(pool.check()), QString());

    es::block_pool fixed(4, bs, 2);
    QCOMPARE(*fixed.allocate(2), (ids_t{0, 1}));
    QVERIFY(!fixed.allocate(1));
    QVERIFY2(fixed.grow_error().find("cannot grow") != std::string::npos, fixed.grow_error().c_str());
}

// The trim floor: the lowest top the memory can shrink to, above every block in use and, unless
// they may go, every cached one; set_mapped refuses to take a block in use and drops the hashes of
// the cached blocks it takes.
void TestBlockPool::trimFloorAndSetMapped() {
    const int32_t bs = 4;
    es::block_pool pool(200, bs); // past three bitmap words
    QCOMPARE(pool.trim_floor(true), 0);
    const ids_t a = *pool.allocate(150);
    QCOMPARE(pool.trim_floor(true), 150);
    pool.release(ids_t(a.begin() + 10, a.end())); // 10 .. 149 free again
    QCOMPARE(pool.trim_floor(true), 10);
    const ids_t b = *pool.allocate(131); // 10 .. 140
    const ids_t t = block_tokens(1, bs);
    const es::block_hash h = es::hash_block(std::nullopt, t);
    pool.cache_full_block(130, h, t);
    pool.release(ids_t(b.begin() + 60, b.end())); // 70 .. 140 free, 130 cached
    QCOMPARE(pool.trim_floor(true), 131);
    QCOMPARE(pool.trim_floor(false), 70);
    QVERIFY(!pool.set_mapped(69)); // block 69 is in use
    QCOMPARE(pool.n_mapped(), 200);
    QVERIFY(pool.set_mapped(131)); // keeps the cached block
    QCOMPARE(pool.lookup(h, t), 130);
    QVERIFY(pool.set_mapped(70));
    QCOMPARE(pool.lookup(h, t), -1);
    QCOMPARE(pool.n_cached(), 0);
    QCOMPARE(pool.n_free_mapped(), 0);
    std::vector<uint8_t> states;
    pool.states(states);
    QCOMPARE(int(states[69]), 0);
    QCOMPARE(int(states[70]), 3);
    QCOMPARE(int(states[199]), 3);
    QCOMPARE(QString::fromStdString(pool.check()), QString());
    // No grow function: the unmapped top is out of reach.
    QVERIFY(!pool.allocate(1));
    QVERIFY(pool.set_mapped(200)); // mapped again from outside
    QCOMPARE(*pool.allocate(1), ids_t{70});
    QCOMPARE(QString::fromStdString(pool.check()), QString());
}

QTEST_APPLESS_MAIN(TestBlockPool)
#include "test_block_pool.moc"
