// The CUDA backend's KV pool in its address range (engine/cuda/backend/kv_pool_plan.h), on the
// CPU: regions at a granule-aligned stride that holds the capacity, the bytes that back a block
// count, the mapping steps' sizes (at least a granule a region and 64 MiB in all, at least an
// eighth of what is mapped, never past the stride, exactly what is missing when asked), and the
// trims (only whole steps from the top, never below the blocks kept). A random walk of grows and
// trims checks that the blocks kept are always backed.
#include "engine/cuda/backend/kv_pool_plan.h"

#include <QtTest>

#include <random>

namespace {
constexpr size_t MiB = size_t(1) << 20;
}

class TestKvPoolPlan : public QObject {
    Q_OBJECT
private slots:
    void layout_data();
    void layout();
    void stepsGrowGeometrically();
    void exactStepNearTheEnd();
    void trimsWholeStepsFromTheTop();
    void wholePoolWithoutGranule();
    void randomWalk();
};

void TestKvPoolPlan::layout_data() {
    QTest::addColumn<int>("n_regions");
    QTest::addColumn<int>("capacity");
    QTest::addColumn<qulonglong>("block_bytes");
    QTest::addColumn<qulonglong>("stride");
    QTest::addColumn<qulonglong>("min_step");
    const qulonglong g = 2 * MiB;
    // 21B-A3B BF16: 16 tokens × 512 × 2 bytes = 16 KiB a block and region; 56 regions.
    QTest::newRow("21b_a3b_bf16") << 56 << 4096 << qulonglong(16384) << qulonglong(64 * MiB) << g;
    // 0.3B BF16: 8 KiB; 36 regions; a capacity that is no multiple of the 256 blocks a granule holds.
    QTest::newRow("0_3b_bf16_odd") << 36 << 1000 << qulonglong(8192) << qulonglong(8 * MiB) << g;
    // A toy model: 4 regions of 256-byte blocks; 64 MiB in all is 16 MiB a region, within the stride.
    QTest::newRow("toy") << 4 << 200000 << qulonglong(256) << qulonglong(50 * MiB) << qulonglong(16 * MiB);
    // A toy model's small pool: the step is the whole stride.
    QTest::newRow("toy_small") << 4 << 64 << qulonglong(256) << qulonglong(2 * MiB) << qulonglong(2 * MiB);
}

void TestKvPoolPlan::layout() {
    QFETCH(int, n_regions);
    QFETCH(int, capacity);
    QFETCH(qulonglong, block_bytes);
    QFETCH(qulonglong, stride);
    QFETCH(qulonglong, min_step);
    const es::kv_pool_layout l = es::make_kv_pool_layout(n_regions, capacity, block_bytes, 2 * MiB);
    QCOMPARE(qulonglong(l.stride), stride);
    QCOMPARE(qulonglong(l.min_step), min_step);
    QCOMPARE(l.stride % l.granule, size_t(0));
    QVERIFY(l.stride >= size_t(capacity) * block_bytes);
    QVERIFY(l.stride - size_t(capacity) * block_bytes < l.granule);
    const es::kv_mapping m(l);
    QCOMPARE(m.mapped_blocks(), 0);
    QCOMPARE(m.bytes_for(0), size_t(0));
    QCOMPARE(m.bytes_for(1), l.granule);
    QCOMPARE(m.bytes_for(capacity), l.stride);
    QCOMPARE(m.bytes_for(capacity + 5), l.stride); // never past the region
    QCOMPARE(m.blocks_in(l.stride), capacity);
}

// From nothing: the first step is the least step (or what is needed, when more); then each step
// at least an eighth of what is mapped, so a pool grown one block at a time takes few steps.
void TestKvPoolPlan::stepsGrowGeometrically() {
    const es::kv_pool_layout l = es::make_kv_pool_layout(56, 65536, 16384, 2 * MiB); // 1 GiB a region
    es::kv_mapping m(l);
    QCOMPARE(m.step_for(1, false), 2 * MiB);
    QCOMPARE(m.step_for(1, true), 2 * MiB);
    QCOMPARE(m.step_for(1000, false), 16 * MiB); // 1000 blocks: 16000 KiB, in whole granules
    m.push(m.step_for(1, false));
    QCOMPARE(m.mapped_blocks(), 128);
    QCOMPARE(m.step_for(128, false), size_t(0));
    for (int32_t n = 129; n <= 65536; ++n)
        if (const size_t s = m.step_for(n, false)) {
            QVERIFY(s >= m.mapped_bytes() / 8 || m.mapped_bytes() + s == l.stride); // (the last one: what is left)
            QCOMPARE(s % l.granule, size_t(0));
            m.push(s);
            QVERIFY(m.mapped_blocks() >= n);
        }
    QCOMPARE(m.mapped_bytes(), l.stride);
    QCOMPARE(m.mapped_blocks(), 65536);
    QVERIFY2(m.steps().size() <= 45, qPrintable(QString::number(m.steps().size()))); // 43: 2 MiB → 1 GiB
    QCOMPARE(m.step_for(65536, false), size_t(0));
}

// Near the end of the device: exactly what is missing, never less.
void TestKvPoolPlan::exactStepNearTheEnd() {
    const es::kv_pool_layout l = es::make_kv_pool_layout(2, 4096, 16384, 2 * MiB);
    es::kv_mapping m(l);
    m.push(32 * MiB); // 2048 blocks
    QCOMPARE(m.step_for(2049, false), size_t(32 * MiB)); // 64 MiB in all over two regions
    QCOMPARE(m.step_for(2049, true), 2 * MiB);
    QCOMPARE(m.step_for(4096, true), size_t(32 * MiB));
    m.push(30 * MiB);
    QCOMPARE(m.step_for(4096, false), 2 * MiB); // capped at the stride
}

void TestKvPoolPlan::trimsWholeStepsFromTheTop() {
    const es::kv_pool_layout l = es::make_kv_pool_layout(56, 4096, 16384, 2 * MiB);
    es::kv_mapping m(l);
    for (size_t s : {2 * MiB, 2 * MiB, 4 * MiB, 8 * MiB}) m.push(s); // blocks to 128, 256, 512, 1024
    QCOMPARE(m.mapped_blocks(), 1024);
    QCOMPARE(m.steps_above(1024), size_t(0));
    QCOMPARE(m.steps_above(600), size_t(0)); // block 599 lies in the top step
    QCOMPARE(m.mapped_after_trim(600), 1024);
    QCOMPARE(m.steps_above(512), size_t(1));
    QCOMPARE(m.mapped_after_trim(512), 512);
    QCOMPARE(m.steps_above(300), size_t(1));
    QCOMPARE(m.steps_above(129), size_t(2));
    QCOMPARE(m.mapped_after_trim(129), 256);
    QCOMPARE(m.steps_above(0), size_t(4));
    QCOMPARE(m.mapped_after_trim(0), 0);
    QCOMPARE(m.pop(), 8 * MiB);
    QCOMPARE(m.mapped_blocks(), 512);
}

// Granule 0: the pool is one allocation, its stride the capacity's bytes exactly (the kernels'
// layout as before).
void TestKvPoolPlan::wholePoolWithoutGranule() {
    const es::kv_pool_layout l = es::make_kv_pool_layout(6, 1000, 2048, 0);
    QCOMPARE(l.stride, size_t(1000) * 2048);
    QCOMPARE(es::kv_mapping(l).bytes_for(7), size_t(7) * 2048);
}

// Grows to random block counts and trims to random ones: the blocks asked for are always backed
// after a grow, at least the blocks kept after a trim, and a trim gives back only whole steps
// lying at or above the blocks kept.
void TestKvPoolPlan::randomWalk() {
    std::mt19937 rng(5);
    for (int round = 0; round < 20; ++round) {
        const int32_t regions = int32_t(2 + rng() % 100), capacity = int32_t(1 + rng() % 20000);
        const size_t block = size_t(256) << (rng() % 8);
        const es::kv_pool_layout l = es::make_kv_pool_layout(regions, capacity, block, 2 * MiB);
        es::kv_mapping m(l);
        for (int op = 0; op < 300; ++op) {
            const int32_t n = int32_t(rng() % uint32_t(capacity + 1));
            if (rng() % 2) {
                const size_t s = m.step_for(n, rng() % 4 == 0);
                if (s) m.push(s);
                QVERIFY(m.mapped_blocks() >= n);
                QVERIFY(m.mapped_bytes() <= l.stride);
            } else {
                const int32_t before = m.mapped_blocks(), after = m.mapped_after_trim(n);
                const size_t k = m.steps_above(n);
                for (size_t i = 0; i < k; ++i) m.pop();
                QCOMPARE(m.mapped_blocks(), after);
                QVERIFY(after >= std::min(n, before));
                QCOMPARE(m.steps_above(n), size_t(0));
            }
        }
    }
}

QTEST_APPLESS_MAIN(TestKvPoolPlan)
#include "test_kv_pool_plan.moc"
