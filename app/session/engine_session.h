// EngineSession: the only door from the Qt app into the engine. It owns the es::engine (and so
// its worker thread), turns engine events into Qt signals on the GUI thread at a bounded rate
// (a 30 Hz pump; a reply's text is coalesced per tick), and never blocks the GUI thread: loading
// runs on the engine thread and is polled, submit/cancel only queue commands.
// Cancel is immediate for the app: replyFinished(id, "cancelled") is emitted at once and later
// engine events of that request are dropped. Destroying the session cancels everything and
// joins the engine thread.
// Remote mode: connectRemote() puts a RemoteClient (an OpenAI-compatible server over HTTP) in
// the engine's place — same signals, same value types, so chat panes and the profiler work
// unchanged; loadModel() goes back to the local engine.
// Thread: create and use on the GUI thread (or any one thread with an event loop).
#pragma once

#include "prompt_tokens.h"
#include "remote_client.h"
#include "session_types.h"

#include <QHash>
#include <QObject>
#include <QTimer>

#include <memory>

namespace es {

class engine;
class request_stream;
struct engine_params;

struct EngineSessionOptions {
    QString backend = QStringLiteral("auto"); // auto | cpu | cuda
    // auto: FP8 weights on the GPU, the checkpoint's exact values on the CPU. fp8 | bf16: those
    // weights on the GPU, and on the CPU the same rounding emulated (fp32 math) — so two panes
    // can compare precisions on any machine.
    QString precision = QStringLiteral("auto");
    // bf16 | fp8: the GPU's KV cache (fp8: E4M3, half the memory, so twice the context or
    // replies). The CPU keeps its fp32 cache: fp8 applies only when the model runs on the GPU.
    QString kvCache = QStringLiteral("bf16");
    // The share of the GPU's memory the engine may fill (engine_params::gpu_memory_utilization).
    double gpuMemoryUtilization = 0.90;
    int threads = 0;                           // CPU threads, 0: all
    int maxConcurrentReplies = 8;
    int defaultMaxTokens = 1024;               // when neither the preset nor the conversation sets one
    int pumpIntervalMs = 33;
};

class EngineSession : public QObject {
    Q_OBJECT
public:
    explicit EngineSession(const EngineSessionOptions &options = {}, QObject *parent = nullptr);
    ~EngineSession() override;

    bool isModelLoaded() const { return m_loaded; }
    bool isLoading() const { return m_loading; }
    SessionModelInfo modelInfo() const { return m_info; }
    int activeReplies() const;
    // Replies come from a remote server (connectRemote) rather than the local engine.
    bool isRemote() const { return m_remote != nullptr; }
    RemoteClient *remote() const { return m_remote.get(); }
    const EngineSessionOptions &options() const { return m_options; }

    // The local engine, for LocalServer, which serves its loaded model over HTTP beside the app's
    // own replies (one copy of the weights; the scheduler batches both). Whoever holds it must let
    // go when localModelAboutToChange is emitted. Replaced by reconfigure().
    std::shared_ptr<engine> localEngine() const { return m_engine; }

    // Counts prompts in the loaded model's tokens (any thread); null while no local model with a
    // tokenizer is loaded (a remote server's tokenizer is not at hand).
    std::shared_ptr<const PromptTokenizer> promptTokenizer() const { return m_promptTokenizer; }

    // The latest engine telemetry (a lock-free read; call from a 10–30 Hz timer, not per token).
    TelemetryView telemetry() const;
    // The profile so far of a reply in flight (for the live token strip); empty when unknown.
    ReplyProfile replyProfile(quint64 requestId) const;

    // Will the model in dir fit (weights + KV cache) with these options? Checks the folder first
    // (checkFolder): a folder that could not load is !ok, with the reason.
    static MemoryEstimateView estimate(const QString &dir, const EngineSessionOptions &options);
    // Whether a backend choice (auto | cpu | cuda) can run here; when not, the reason in the
    // interface language ("no CUDA device", "the CUDA module is missing", …). auto and cpu always can.
    struct BackendAvailability {
        bool usable = true;
        QString reason;
    };
    static BackendAvailability backendAvailability(const QString &backend);
    // The backend to start with when `wanted` came from the settings: wanted when it can run here,
    // else "auto", with *notice saying why (a saved CUDA choice on a machine without a usable GPU
    // must not stop every later start).
    static QString usableSavedBackend(const QString &wanted, QString *notice);
    // Everything that can be checked without loading: config.json, the weights' files and headers,
    // generation_config.json, the tokenizer and whether the backend can run here. Empty when the
    // folder would load; else the reason. Reads headers only (milliseconds).
    static QString checkFolder(const QString &dir, const EngineSessionOptions &options);

public slots:
    // Asynchronous; modelLoaded or modelLoadFailed follows. A folder that fails checkFolder fails
    // at once and leaves the loaded model (and its replies) as they are; otherwise open replies
    // are cancelled and the model is replaced.
    void loadModel(const QString &dir);
    // New backend/precision/threads: cancels open replies, restarts the engine, and reloads the
    // model that was loaded or last asked for (also one whose load failed, say for the backend
    // chosen before) with the new options.
    void reconfigure(const es::EngineSessionOptions &options);
    // Asynchronous; modelLoadStarted(url), then modelLoaded (info.remoteUrl set) once /v1/models
    // lists the model, or modelLoadFailed(url, why: unreachable, key refused, not an OpenAI
    // server, model not served). Open replies are cancelled and the local model is unloaded.
    void connectRemote(const es::RemoteEndpoint &endpoint);
    // Back from a server to the local engine: open replies are cancelled and the local model last
    // asked for (if any) loads again. Nothing when not connected.
    void disconnectRemote();
    // Returns the request id (never 0). Failures (no model, prompt too long…) arrive as replyFailed.
    quint64 submit(const es::ChatRequest &request);
    // "" when the loaded model's backend would route under `iv`, else why not (the engine's own
    // check: layers, experts, k, and whether the backend applies interventions at all).
    QString checkIntervention(const es::ExpertIntervention &iv) const;
    // Detailed profiling: every engine step timed per phase on the device (else a sample of them;
    // engine::set_detailed_profiling). No effect on the CPU (every step is timed) or remotely.
    void setDetailedProfiling(bool on);
    bool detailedProfiling() const;
    void cancel(quint64 requestId);
    void cancelAll();

signals:
    void modelLoadStarted(const QString &dir);
    void modelLoadProgress(const QString &stage, double fraction);
    void modelLoaded(const es::SessionModelInfo &info);
    void modelLoadFailed(const QString &dir, const QString &message);
    void remoteDisconnected(); // disconnectRemote: no model until the local one (if any) loads
    // The loaded local model is about to be replaced or unloaded, or the engine restarted or
    // destroyed (why: in words, "… is loading in its place"). Emitted before anything changes,
    // so a direct connection (LocalServer) can stop serving it first.
    void localModelAboutToChange(const QString &why);
    // Text produced since the last signal for this request (whole UTF-8 characters).
    void tokensGenerated(quint64 requestId, const QString &textDelta, int nTokens);
    // finishReason: "stop" | "length" | "cancelled". seed: the seed actually used.
    void replyFinished(quint64 requestId, const QString &finishReason, const es::MessageMetrics &metrics,
                       const QList<es::LayerRouting> &routing, quint64 seed);
    void replyFailed(quint64 requestId, const QString &message);
    // Emitted right before replyFinished / replyFailed with the reply's complete profile.
    void replyProfiled(quint64 requestId, const es::ReplyProfile &profile);
    void statsUpdated(const es::SessionStats &stats);

private:
    void pump();
    void ensurePumping();
    void finishRequest(quint64 id, const QString &reason);
    void dropRemote();

    struct Active {
        std::shared_ptr<request_stream> stream;
        QByteArray pendingUtf8; // text not yet emitted
        int pendingTokens = 0;
        qint64 textBytes = 0;      // the reply's text so far, in UTF-8 bytes
        QList<int> tokenTextEnds;  // ReplyProfile::tokenTextEnds
    };
    struct LoadState;

    EngineSessionOptions m_options;
    std::shared_ptr<engine> m_engine; // shared with LocalServer while it serves the model
    std::unique_ptr<RemoteClient> m_remote;
    QHash<quint64, Active> m_active;
    QTimer m_timer;
    bool m_loaded = false, m_loading = false;
    SessionModelInfo m_info;
    std::shared_ptr<const PromptTokenizer> m_promptTokenizer;
    std::shared_ptr<LoadState> m_load;
    QString m_wantedDir; // the folder of the last loadModel (reconfigure reloads it)
    quint64 m_lastTokensGenerated = 0;
    qint64 m_lastStatsMs = 0;
    double m_tokPerSec = 0;
};

} // namespace es
