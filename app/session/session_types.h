// Value types EngineSession hands to ui/: what a loaded model is, what a chat request carries,
// and live engine figures for the status bar. No engine headers here (ui/ never sees engine/).
#pragma once

#include "storage_types.h"

#include <QByteArray>
#include <QList>
#include <QMetaType>
#include <QString>

namespace es {

struct ChatTurn {
    MessageRole role = MessageRole::User;
    QString content;
};

struct ChatRequest {
    QList<ChatTurn> messages;   // the active branch, oldest first, ending with the user's turn
    QString systemPrompt;       // empty: none
    QString presetPrefix;       // e.g. "【技术解析模式】", put before the last user message
    SamplingParams sampling;    // unset fields: the model's generation_config defaults
    // The last message is an assistant reply cut short (stop reason "length") that this request
    // carries on: the prompt ends inside it, and what is generated extends it.
    bool continueLastReply = false;
};

struct SessionModelInfo {
    QString dir;
    QString name;               // folder name
    QString architecture;       // architectures[0]
    QString backend;            // "cpu (2 threads, fp32)", "cuda:0 …"
    QString backendNote;        // "CUDA not used: <reason>" when `auto` fell back to the CPU; else empty
    QString device;             // the GPU's name, or the CPU's (/proc/cpuinfo); empty for a server
    QString driver;             // "driver for CUDA 13.0", "none (the CPU backend)"; empty for a server
    QString modelHash;          // models::model_content_hash of dir; empty for a server
    QString precision;          // "fp32", "bf16", "fp8-e4m3"
    bool isMoe = false;
    int nLayers = 0, nExperts = 0, nExpertsUsed = 0, nSharedExperts = 0;
    QList<int> moeLayers;
    qint64 nParams = 0, nParamsActive = 0;
    qint64 weightsBytes = 0, kvCacheBytes = 0;
    qint64 kvTokens = 0;        // tokens the KV cache holds (all replies together); 0: unknown
    int contextLength = 0;
    SamplingParams defaults;    // from generation_config.json
    QString remoteUrl;          // set when replies come from a remote server (dir == remoteUrl)
};

struct MemoryEstimateView {
    bool ok = false;            // false: the folder could not be read (message says why)
    bool fits = false;
    bool gpu = false;           // the estimate is for the GPU (else the CPU's RAM)
    qint64 weightsBytes = 0, kvBytes = 0, workspaceBytes = 0, availableBytes = 0;
    QString message;
};

struct SessionStats {
    double tokensPerSecond = 0;  // generated tokens per second over the last second
    int running = 0, waiting = 0;
    qint64 memoryInUse = 0;      // weights + KV cache blocks in use + workspace
    qint64 memoryTotal = 0;      // device (GPU) or RAM total
    int kvBlocksUsed = 0, kvBlocksTotal = 0;
};

// ---- Profiler feed (definitions: the metrics table of ARCHITECTURE.md) ----------------------

// One engine step.
struct StepView {
    quint64 step = 0;
    qint64 tUs = 0;              // engine clock, µs
    double durationMs = 0;
    int nSeqs = 0, nPrefillTokens = 0, nDecodeTokens = 0, nPreempted = 0;
    double scheduleMs = 0, forwardMs = 0, sampleMs = 0, emitMs = 0;
    double attentionMs = 0, moeMs = 0, denseMs = 0, headMs = 0; // inside forward
    // The requests computed in the step and their token counts (same order); empty when the
    // source does not say (then a step is attributed to every reply in flight).
    QList<quint64> seqIds;
    QList<int> seqTokens;
    // engine step_record: the shared experts, the timed rest of the forward, the device's time
    // for the step; the phases are measured only where phasesTimed (on the GPU a sample of the
    // steps, phasesOnDevice).
    double moeSharedMs = 0, forwardOtherMs = 0, deviceMs = 0;
    bool phasesTimed = false, phasesOnDevice = false;
};

struct MemoryView {
    qint64 weightsBytes = 0, kvBlockBytes = 0;
    int kvBlocksTotal = 0, kvBlocksUsed = 0, kvBlocksFree = 0, kvBlocksCached = 0;
    qint64 kvTokensStored = 0;
    double kvWaste = 0;          // 1 − tokens stored / (blocks used × block size)
    qint64 allocReserved = 0, allocInUse = 0, allocLargestFree = 0;
    qint64 deviceTotal = 0, deviceFree = 0;
    double fragmentation = 0;    // 1 − largest free / total free
    // Each KV block's state in pool order (es::kv_block_state: 0 used, 1 cached, 2 free); empty
    // when the source has no per-block view (a remote server).
    QByteArray kvBlockStates;
    // The backend's device allocations by purpose (weights, KV pool, workspace, library
    // workspaces, …); empty on the CPU and remotely. What deviceTotal − deviceFree holds beyond
    // them is the CUDA context's and other processes'.
    QList<QPair<QString, qint64>> deviceParts;
    // The KV pool's memory (es::memory_stats): blocks [0, kvBlocksMapped) have memory, the pool
    // holds kvMappedBytes now of kvCapacityBytes when wholly mapped (a pool mapped on demand grows
    // and shrinks; one allocated whole has them equal); kvNote says how it is held. −1 / 0: the
    // source does not say (then the pool is kvBlocksTotal × kvBlockBytes, all of it mapped).
    int kvBlocksMapped = -1;
    qint64 kvMappedBytes = -1, kvCapacityBytes = 0;
    QString kvNote;
};

// The latest engine telemetry, converted for the GUI. Cheap to copy (implicitly shared lists).
struct TelemetryView {
    bool valid = false;
    quint64 nSteps = 0;
    qint64 tUs = 0;
    QList<StepView> steps;               // newest last
    QList<int> moeLayers;                // layer index of each MoE slot
    int nExperts = 0, nExpertsUsed = 0;
    QList<quint64> expertTokens;         // [slot * nExperts + e], since the model was loaded
    QList<double> expertWeight;          // gate-weight mass, same layout
    QList<quint64> expertTokensWindow;   // the same over the last windowSteps steps (live)
    int windowSteps = 0;
    MemoryView memory;
    int running = 0, waiting = 0;
    quint64 prefixQueries = 0, prefixHits = 0, tokensGenerated = 0, requestsFinished = 0;
    // Remote server (RemoteClient): telemetry comes from its /metrics, steps stay empty, the
    // expert window spans windowSeconds of scrapes; noExpertMetrics: the server exposes none.
    QString remoteUrl;
    bool noExpertMetrics = false;
    double windowSeconds = 0;
    // The launches of the latest step timed on the device (empty on the CPU and remotely).
    StepTimeline timeline;
};

// Everything measured for one reply: timing of every token and its routing per MoE layer.
struct ReplyProfile {
    quint64 requestId = 0;
    qint64 tSubmitUs = 0, tFirstTokenUs = -1, tFinishUs = -1; // engine clock
    QList<qint64> tokenTimesUs;          // engine clock, one per generated token
    QList<int> tokenTextEnds;            // where each token's text ends in the reply (UTF-8 bytes)
    int nPromptTokens = 0, nCachedPromptTokens = 0, nPreemptions = 0;
    quint64 seed = 0;
    // Routing trace over positions (prompt then generated): ids[(p * nMoe + m) * k + j],
    // -1 where the position came from the prefix cache.
    QList<int> moeLayers;
    int nExperts = 0, k = 0;
    QList<qint16> ids;
    QList<float> weights;
    // The router's margin per position and MoE layer, margins[p * nMoe + m] (the k-th choice's
    // selection score minus the (k+1)-th's); NaN where not recorded (prefix cache).
    QList<float> margins;
};

} // namespace es

Q_DECLARE_METATYPE(es::TelemetryView)
Q_DECLARE_METATYPE(es::ReplyProfile)
Q_DECLARE_METATYPE(es::SessionModelInfo)
Q_DECLARE_METATYPE(es::SessionStats)
Q_DECLARE_METATYPE(es::MessageMetrics)
