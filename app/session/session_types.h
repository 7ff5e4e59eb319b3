// Value types EngineSession hands to ui/: what a loaded model is, what a chat request carries,
// and live engine figures for the status bar. No engine headers here (ui/ never sees engine/).
#pragma once

#include "storage_types.h"

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
};

struct SessionModelInfo {
    QString dir;
    QString name;               // folder name
    QString architecture;       // architectures[0]
    QString backend;            // "cpu (2 threads, fp32)", "cuda:0 …"
    QString precision;          // "fp32", "bf16", "fp8-e4m3"
    bool isMoe = false;
    int nLayers = 0, nExperts = 0, nExpertsUsed = 0, nSharedExperts = 0;
    QList<int> moeLayers;
    qint64 nParams = 0, nParamsActive = 0;
    qint64 weightsBytes = 0, kvCacheBytes = 0;
    int contextLength = 0;
    SamplingParams defaults;    // from generation_config.json
};

struct MemoryEstimateView {
    bool ok = false;            // false: the folder could not be read (message says why)
    bool fits = false;
    qint64 weightsBytes = 0, kvBytes = 0, availableBytes = 0;
    QString message;
};

struct SessionStats {
    double tokensPerSecond = 0;  // generated tokens per second over the last second
    int running = 0, waiting = 0;
    qint64 memoryInUse = 0;      // weights + KV cache blocks in use + workspace
    qint64 memoryTotal = 0;      // device (GPU) or RAM total
    int kvBlocksUsed = 0, kvBlocksTotal = 0;
};

} // namespace es

Q_DECLARE_METATYPE(es::SessionModelInfo)
Q_DECLARE_METATYPE(es::SessionStats)
Q_DECLARE_METATYPE(es::MessageMetrics)
