// The CUDA self-test as a CTest suite (label gpu): every kernel against its CPU twin and the
// reference checkpoints end to end. Skips (never fails) where there is no usable GPU; the same
// checks run on the GPU machine through `expertscope-cli selftest`.
#include "engine/cuda/selftest/cuda_selftest.h"

#include <QtTest>

class TestKernelGpu : public QObject {
    Q_OBJECT
private slots:
    void selftest();
};

void TestKernelGpu::selftest() {
    es::selftest_options o;
    o.data_dir = ES_TEST_DATA_DIR;
    const es::selftest_report r = es::run_cuda_selftest(o);
    if (r.skipped) QSKIP(qPrintable("no usable GPU: " + QString::fromStdString(r.skip_reason)));
    int failed = 0;
    for (const auto &row : r.rows)
        if (!row.pass) {
            ++failed;
            qWarning("FAIL %s %s: %s = %g (limit %g) %s", row.group.c_str(), row.name.c_str(), row.metric.c_str(),
                     row.value, row.limit, row.note.c_str());
        }
    QCOMPARE(failed, 0);
}

QTEST_GUILESS_MAIN(TestKernelGpu)
#include "test_kernel_gpu.moc"
