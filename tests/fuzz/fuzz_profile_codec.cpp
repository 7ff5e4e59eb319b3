// The message_profiles BLOB formats (app/storage/message_profile_codec.cpp), both ways: any
// bytes given to each decoder are refused or decoded (a damaged row must never crash the app),
// and values built from the input encode and decode back to themselves. A profile's shape
// (storage_types.h): any profile built from the input, bounded, is consistent and inside the
// limits; bounding again changes nothing, and a consistent profile is not changed at all.
#include "fuzz_support.h"
#include "storage_types.h"

#include <fuzzer/FuzzedDataProvider.h>

#include <QByteArray>
#include <qfloat16.h>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    using namespace es;
    const QByteArray bytes(reinterpret_cast<const char *>(data), qsizetype(size));
    (void)decodeTokenTimes(bytes);
    (void)decodeProfileSteps(bytes);
    (void)decodeMemorySamples(bytes);
    QList<qint16> ids;
    QList<float> weights;
    if (decodeRoutingTrace(bytes, &ids, &weights)) ES_FUZZ_CHECK(ids.size() == weights.size());
    (void)decodeFloat32(bytes);
    (void)decodeUInt32(bytes);

    FuzzedDataProvider in(data, size);
    QList<qint64> times;
    QList<ProfileStep> steps;
    QList<ProfileMemorySample> memory;
    ids.clear();
    weights.clear();
    const int n_experts = in.ConsumeBool() ? 64 : 300;
    while (in.remaining_bytes() > 0) {
        switch (in.ConsumeIntegralInRange(0, 3)) {
        case 0:
            times.append(in.ConsumeIntegral<qint64>());
            break;
        case 1: {
            ProfileStep s;
            s.tStartUs = in.ConsumeIntegral<qint64>();
            s.durationUs = in.ConsumeIntegral<qint64>();
            s.nSeqs = in.ConsumeIntegral<int>();
            s.nPrefillTokens = in.ConsumeIntegral<int>();
            s.nDecodeTokens = in.ConsumeIntegral<int>();
            s.attentionUs = in.ConsumeIntegral<qint64>();
            s.moeUs = in.ConsumeIntegral<qint64>();
            s.denseUs = in.ConsumeIntegral<qint64>();
            s.samplingUs = in.ConsumeIntegral<qint64>();
            steps.append(s);
            break;
        }
        case 2: {
            ProfileMemorySample m;
            m.tUs = in.ConsumeIntegral<qint64>();
            m.inUseBytes = in.ConsumeIntegral<qint64>();
            m.kvBlocksUsed = in.ConsumeIntegral<int>();
            memory.append(m);
            break;
        }
        default:
            ids.append(qint16(in.ConsumeIntegralInRange<int>(-1, n_experts - 1)));
            // Weights stored as float16: the round trip is exact for values float16 holds.
            weights.append(float(qfloat16(in.ConsumeFloatingPointInRange<float>(0.0f, 1.0f))));
            break;
        }
    }
    const auto t = decodeTokenTimes(encodeTokenTimes(times));
    ES_FUZZ_CHECK(t && *t == times);
    const auto s = decodeProfileSteps(encodeProfileSteps(steps));
    ES_FUZZ_CHECK(s && *s == steps);
    const auto m = decodeMemorySamples(encodeMemorySamples(memory));
    ES_FUZZ_CHECK(m && *m == memory);
    QList<qint16> ids2;
    QList<float> weights2;
    ES_FUZZ_CHECK(decodeRoutingTrace(encodeRoutingTrace(ids, weights, n_experts), &ids2, &weights2));
    ES_FUZZ_CHECK(ids2 == ids && weights2 == weights);

    // A profile of any shape from the same bytes: counts near the limits, around them and absurd.
    FuzzedDataProvider shape(data, size);
    auto count = [&shape] {
        switch (shape.ConsumeIntegralInRange(0, 3)) {
        case 0: return shape.ConsumeIntegralInRange(0, 8);
        case 1: return shape.ConsumeIntegralInRange(-2, 70);
        case 2: return shape.ConsumeIntegralInRange(1020, 4100);
        default: return shape.ConsumeIntegral<int>();
        }
    };
    MessageProfile p;
    p.nLayers = count();
    p.nExperts = count();
    p.nSharedExperts = count();
    p.k = count();
    p.nPromptTokens = count();
    for (int i = shape.ConsumeIntegralInRange(0, 6); i > 0; --i) p.moeLayers.append(count());
    for (int i = shape.ConsumeIntegralInRange(0, 6); i > 0; --i) {
        LayerRouting r{count(), {}};
        for (int e = shape.ConsumeIntegralInRange(0, 9); e > 0; --e) r.expertCounts.append(shape.ConsumeIntegral<quint32>());
        p.routing.append(r);
    }
    for (int i = shape.ConsumeIntegralInRange(0, 40); i > 0; --i) {
        p.traceIds.append(qint16(shape.ConsumeIntegralInRange(-2, 9)));
        p.traceWeights.append(0.5f);
    }
    if (shape.ConsumeBool() && !p.traceWeights.isEmpty()) p.traceWeights.removeLast();
    const MessageProfile bounded = boundedProfile(p);
    const std::optional<QString> why = profileShapeError(bounded);
    if (why) std::fprintf(stderr, "bounded profile still inconsistent: %s\n", qPrintable(*why));
    ES_FUZZ_CHECK(!why);
    ES_FUZZ_CHECK(bounded.nLayers <= kMaxProfileLayers && bounded.nExperts <= kMaxProfileExperts &&
                  bounded.nSharedExperts <= kMaxProfileExperts && bounded.routing.size() <= kMaxProfileLayers);
    ES_FUZZ_CHECK(boundedProfile(bounded) == bounded);
    if (!profileShapeError(p)) ES_FUZZ_CHECK(bounded == p);
    return 0;
}
