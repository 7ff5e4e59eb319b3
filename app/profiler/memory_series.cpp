// Memory aggregations (see memory_series.h).
#include "memory_series.h"

#include <algorithm>

namespace es {

qint64 memoryInUse(const MemoryView &m) {
    return m.weightsBytes + qint64(m.kvBlocksUsed) * m.kvBlockBytes + m.allocInUse;
}

double fragmentation(qint64 largestFree, qint64 totalFree) {
    if (totalFree <= 0) return 0.0;
    return 1.0 - double(std::clamp<qint64>(largestFree, 0, totalFree)) / double(totalFree);
}

double kvWaste(qint64 tokensStored, qint64 blocksUsed, int blockSize) {
    const qint64 cap = blocksUsed * qint64(blockSize);
    return cap > 0 ? 1.0 - double(tokensStored) / double(cap) : 0.0;
}

MemorySample memorySample(const MemoryView &m, double tS) {
    MemorySample s;
    s.tS = tS;
    s.weights = m.weightsBytes;
    s.kvCapacity = m.kvCapacityBytes > 0 ? m.kvCapacityBytes : qint64(m.kvBlocksTotal) * m.kvBlockBytes;
    s.kvCache = m.kvMappedBytes >= 0 ? m.kvMappedBytes : s.kvCapacity;
    s.kvInUse = qint64(m.kvBlocksUsed) * m.kvBlockBytes;
    s.workspace = m.allocReserved;
    s.free = m.deviceFree;
    s.deviceTotal = m.deviceTotal;
    if (!m.deviceParts.isEmpty() && m.deviceTotal > 0)
        s.other = std::max<qint64>(0, m.deviceTotal - m.deviceFree - s.weights - s.kvCache - s.workspace);
    s.fragmentation = m.fragmentation;
    s.kvWaste = m.kvWaste;
    return s;
}

KvBlockMap kvBlockMap(const MemoryView &m, int maxCells) {
    KvBlockMap map;
    const int total = std::max(0, m.kvBlocksTotal);
    if (total > 0 && m.kvBlockStates.size() == total) {
        // Exact: each block's own state.
        const auto state = [&](int b) { return std::clamp(int(quint8(m.kvBlockStates[b])), 0, 3); };
        int *count[4] = {&map.used, &map.cached, &map.free, &map.unmapped};
        for (int b = 0; b < total; ++b) ++*count[state(b)];
        if (maxCells <= 0) return map;
        map.blocksPerCell = (total + maxCells - 1) / maxCells;
        const int nCells = (total + map.blocksPerCell - 1) / map.blocksPerCell;
        map.cells.reserve(nCells);
        for (int c = 0; c < nCells; ++c) {
            int n[4] = {0, 0, 0, 0};
            for (int b = c * map.blocksPerCell; b < std::min(total, (c + 1) * map.blocksPerCell); ++b) ++n[state(b)];
            // The majority; ties to the earlier state (used, cached, free, unmapped).
            const int best = int(std::max_element(n, n + 4) - n);
            map.cells.append(KvBlockState(best));
        }
        return map;
    }
    map.used = std::clamp(m.kvBlocksUsed, 0, total);
    map.cached = std::clamp(m.kvBlocksCached - map.used, 0, total - map.used);
    map.free = total - map.used - map.cached;
    if (total == 0 || maxCells <= 0) return map;
    map.blocksPerCell = (total + maxCells - 1) / maxCells;
    const int nCells = (total + map.blocksPerCell - 1) / map.blocksPerCell;
    map.cells.reserve(nCells);
    for (int c = 0; c < nCells; ++c) {
        const int b0 = c * map.blocksPerCell, b1 = std::min(total, b0 + map.blocksPerCell);
        // Blocks in [b0, b1) by state, in pool order used | cached | free.
        auto overlap = [&](int lo, int hi) { return std::max(0, std::min(b1, hi) - std::max(b0, lo)); };
        const int u = overlap(0, map.used), k = overlap(map.used, map.used + map.cached),
                  f = overlap(map.used + map.cached, total);
        map.cells.append(u >= k && u >= f ? KvBlockState::Used
                         : k >= f         ? KvBlockState::Cached
                                          : KvBlockState::Free);
    }
    return map;
}

} // namespace es
