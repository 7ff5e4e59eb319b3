// Memory aggregations for the profiler: one sample of the stacked memory chart from the
// engine's accounting, the fragmentation and KV-waste definitions, and the KV block map.
// Definitions as in the metrics table of ARCHITECTURE.md:
//   fragmentation = 1 − largest free block / total free (0 when nothing is free);
//   KV waste = 1 − tokens stored / (blocks used × block size).
#pragma once

#include "session_types.h"

#include <QList>

namespace es {

// One point of the stacked area (bytes). kvCache is the KV pool's memory now: what a pool mapped
// on demand has mapped (it grows with the requests and shrinks when they are done), or the whole
// pool where it is one allocation (blocks × block bytes); kvCapacity what the pool holds when
// wholly mapped. workspace the backend allocator's reservation, free the device's free memory
// (GPU: cudaMemGetInfo; CPU backend: the machine's available RAM).
struct MemorySample {
    double tS = 0;
    qint64 weights = 0, kvCache = 0, kvCapacity = 0, workspace = 0, free = 0, deviceTotal = 0;
    // Device memory in use beyond weights, KV pool and workspace: library workspaces, the CUDA
    // context, other processes (total − free − those three; 0 without a device's figures).
    qint64 other = 0;
    qint64 kvInUse = 0; // blocks in use × block bytes
    double fragmentation = 0, kvWaste = 0;
};
MemorySample memorySample(const MemoryView &m, double tS);

// Weights + KV blocks in use + workspace in use: the figure a reply's memory peak is taken of.
qint64 memoryInUse(const MemoryView &m);

double fragmentation(qint64 largestFree, qint64 totalFree);
double kvWaste(qint64 tokensStored, qint64 blocksUsed, int blockSize);

// The KV block map: one cell per block in pool (block id) order, used (ref > 0), cached (free but
// holding a reusable prefix), free, or unmapped (free, without memory: the top of a pool mapped
// on demand), from the engine's per-block states — so the map shows where in the pool the blocks
// lie, not only how many. Without per-block states (a source that publishes counts only) the
// cells are drawn from the counts in the order used | cached | free, "cached" then being
// max(0, cached − used): exact when nothing runs, a lower bound while replies hold hashed blocks.
// At most maxCells cells: with more blocks, each cell stands for ⌈blocks / maxCells⌉ blocks and
// shows their majority state (ties: used, then cached, then free).
enum class KvBlockState : int { Used = 0, Cached = 1, Free = 2, Unmapped = 3 };
struct KvBlockMap {
    int blocksPerCell = 1;
    int used = 0, cached = 0, free = 0, unmapped = 0; // block counts (free: with memory)
    QList<KvBlockState> cells;
};
KvBlockMap kvBlockMap(const MemoryView &m, int maxCells = 4096);

} // namespace es
