// EngineSession (see engine_session.h). The pump timer runs only while something is in flight
// (a load or a reply), so an idle app costs nothing.
#include "engine_session.h"

#include "engine_views.h"

#include "app/models/provenance.h"
#include "engine/cuda/cuda_loader.h"
#include "engine/runtime/engine.h"
#include "engine/runtime/model.h"

#include <QDateTime>
#include <QDir>
#include <QFileInfo>
#include <QLocale>

#include <future>
#include <mutex>

namespace es {

struct EngineSession::LoadState {
    std::future<status> done;
    std::future<std::string> hash; // models::model_content_hash, beside the load
    QString dir;
    std::mutex mutex;          // progress is written on the engine thread
    QString stage;
    double fraction = 0;
    bool changed = false;
};

namespace {

engine_params make_params(const EngineSessionOptions &o) {
    engine_params p;
    p.load.kind = o.backend == "cuda" ? backend_kind::cuda : o.backend == "cpu" ? backend_kind::cpu : backend_kind::automatic;
    p.load.precision = o.precision == "bf16" ? weight_precision::bf16 : weight_precision::fp8;
    p.load.emulate_precision_on_cpu = o.precision == "bf16" || o.precision == "fp8";
    // An FP8 KV cache where the model will run on the GPU (the CPU backend refuses one: the
    // choice is the GPU's, and a machine without a usable GPU keeps working).
    const bool gpu = o.backend == "cuda" || (o.backend != "cpu" && cuda_status().available);
    p.load.kv_cache = o.kvCache == "fp8" && gpu ? kv_cache_dtype::fp8 : kv_cache_dtype::bf16;
    p.load.n_threads = o.threads;
    p.load.need_tokenizer = true;
    p.max_num_seqs = std::max(1, o.maxConcurrentReplies);
    p.gpu_memory_utilization = o.gpuMemoryUtilization;
    return p;
}

// What the weights are, as the status bar and each reply's generation info say it.
QString precisionLabel(bool cpu, const QString &option) {
    if (cpu)
        return option == "fp8"    ? QStringLiteral("fp8-e4m3 (emulated)")
               : option == "bf16" ? QStringLiteral("bf16 (emulated)")
                                  : QStringLiteral("fp32");
    return option == "bf16" ? QStringLiteral("bf16") : QStringLiteral("fp8-e4m3");
}

// The stored intervention as the engine's; errors name the field.
result<routing_intervention> to_routing_intervention(const ExpertIntervention &iv) {
    return make_routing_intervention(iv.disabled.toStdString(), iv.forced.toStdString(), iv.topK,
                                     float(iv.biasScale), "disabled experts", "forced experts");
}

sampling_params merge(const SamplingParams &s, sampling_params d, int default_max_tokens) {
    if (s.temperature) d.temperature = float(*s.temperature);
    if (s.topP) d.top_p = float(*s.topP);
    if (s.topK) d.top_k = *s.topK;
    if (s.minP) d.min_p = float(*s.minP);
    if (s.repetitionPenalty) d.repetition_penalty = float(*s.repetitionPenalty);
    if (s.presencePenalty) d.presence_penalty = float(*s.presencePenalty);
    if (s.frequencyPenalty) d.frequency_penalty = float(*s.frequencyPenalty);
    d.max_tokens = s.maxTokens ? *s.maxTokens : default_max_tokens;
    if (s.seed) d.seed = *s.seed;
    for (const QString &stop : s.stopStrings)
        if (!stop.isEmpty()) d.stop_strings.push_back(stop.toStdString());
    return d;
}

SamplingParams to_view(const sampling_params &d) {
    SamplingParams s;
    s.temperature = d.temperature;
    s.topP = d.top_p;
    if (d.top_k > 0) s.topK = d.top_k;
    s.repetitionPenalty = d.repetition_penalty;
    return s;
}

MessageMetrics to_metrics(const request_metrics &m) {
    MessageMetrics out;
    const int n = int(m.token_times_us.size());
    out.nPromptTokens = m.n_prompt_tokens;
    out.nOutputTokens = n;
    if (m.t_first_token_us >= 0) {
        out.ttftMs = m.ttft_ms();
        const double prefill_s = (m.t_first_token_us - m.t_submit_us) / 1e6;
        const int computed = m.n_prompt_tokens - m.n_cached_prompt_tokens;
        if (prefill_s > 0) out.prefillTokS = computed / prefill_s;
    }
    for (int i = 0; i < n; ++i) {
        out.tokenTimesMs.push_back(float((m.token_times_us[i] - m.t_submit_us) / 1000.0));
        if (i > 0) out.itlMs.push_back(float((m.token_times_us[i] - m.token_times_us[i - 1]) / 1000.0));
    }
    if (n > 1) {
        const double span_s = (m.token_times_us.back() - m.token_times_us.front()) / 1e6;
        if (span_s > 0) out.decodeTokS = (n - 1) / span_s;
    }
    return out;
}

// Expert token-slot counts per MoE layer over the positions this request computed.
QList<LayerRouting> to_routing(const request_metrics &m, const QList<int> &moe_layers, int n_expert) {
    QList<LayerRouting> out;
    if (m.n_moe_layers <= 0 || m.k <= 0 || n_expert <= 0) return out;
    for (int s = 0; s < m.n_moe_layers; ++s) {
        LayerRouting r;
        r.layer = s < moe_layers.size() ? moe_layers[s] : s;
        r.expertCounts = QList<quint32>(n_expert, 0);
        out.push_back(r);
    }
    const size_t per_pos = size_t(m.n_moe_layers) * size_t(m.k);
    for (size_t i = 0; i < m.trace.size(); ++i) {
        const int16_t e = m.trace[i];
        if (e < 0 || e >= n_expert) continue;
        out[int((i % per_pos) / size_t(m.k))].expertCounts[e] += 1;
    }
    return out;
}

} // namespace

ReplyProfile toReplyProfile(quint64 id, const request_metrics &m, const QList<int> &moe_layers, int n_expert,
                            const QList<int> &text_ends) {
    ReplyProfile p;
    p.requestId = id;
    p.tSubmitUs = m.t_submit_us;
    p.tFirstTokenUs = m.t_first_token_us;
    p.tFinishUs = m.t_finish_us;
    p.tokenTimesUs = QList<qint64>(m.token_times_us.begin(), m.token_times_us.end());
    // One text end per token time (the stream's tokens and the metrics' times are the same tokens;
    // mid-stream the metrics may hold times of tokens whose text is not drained yet: none then).
    if (text_ends.size() == p.tokenTimesUs.size()) p.tokenTextEnds = text_ends;
    p.nPromptTokens = m.n_prompt_tokens;
    p.nCachedPromptTokens = m.n_cached_prompt_tokens;
    p.nPreemptions = m.n_preemptions;
    p.seed = m.seed;
    p.moeLayers = moe_layers;
    p.nExperts = n_expert;
    p.k = m.k;
    p.ids = QList<qint16>(m.trace.begin(), m.trace.end());
    p.weights = QList<float>(m.trace_weights.begin(), m.trace_weights.end());
    p.margins = QList<float>(m.trace_margins.begin(), m.trace_margins.end());
    return p;
}

int EngineSession::activeReplies() const {
    return m_remote ? m_remote->activeReplies() : int(m_active.size());
}

void EngineSession::setDetailedProfiling(bool on) { m_engine->set_detailed_profiling(on); }

bool EngineSession::detailedProfiling() const { return m_engine->detailed_profiling(); }

TelemetryView EngineSession::telemetry() const {
    if (m_remote) return m_remote->telemetry();
    TelemetryView v;
    auto t = m_engine->telemetry();
    if (!t) return v;
    v.valid = true;
    v.nSteps = t->n_steps;
    v.tUs = t->t_us;
    v.steps.reserve(qsizetype(t->recent_steps.size()));
    for (const step_record &r : t->recent_steps) {
        StepView s{r.step,      r.t_start_us,  r.duration_ms, r.n_seqs,       r.n_prefill_tokens,
                   r.n_decode_tokens, r.n_preempted, r.schedule_ms, r.forward_ms, r.sample_ms,
                   r.emit_ms,   r.attention_ms, r.moe_ms,     r.dense_ms,     r.head_ms,
                   {},          {}, // seqIds, seqTokens: filled below
                   r.moe_shared_ms, r.other_ms, r.device_ms, r.phases_timed, r.phases_on_device};
        s.seqIds.reserve(qsizetype(r.seq_tokens.size()));
        s.seqTokens.reserve(qsizetype(r.seq_tokens.size()));
        for (const auto &[id, n] : r.seq_tokens) {
            s.seqIds.push_back(id);
            s.seqTokens.push_back(n);
        }
        v.steps.push_back(std::move(s));
    }
    v.moeLayers = QList<int>(t->moe_layers.begin(), t->moe_layers.end());
    v.nExperts = t->n_expert;
    v.nExpertsUsed = t->n_expert_used;
    v.expertTokens = QList<quint64>(t->expert_tokens.begin(), t->expert_tokens.end());
    v.expertWeight = QList<double>(t->expert_weight.begin(), t->expert_weight.end());
    v.expertTokensWindow = QList<quint64>(t->expert_tokens_window.begin(), t->expert_tokens_window.end());
    v.windowSteps = t->window_steps;
    const memory_stats &m = t->memory;
    v.memory = {qint64(m.weights_bytes), qint64(m.kv_block_bytes), m.kv_blocks_total, m.kv_blocks_used, m.kv_blocks_free,
                m.kv_blocks_cached, m.kv_tokens_stored, m.kv_waste, qint64(m.alloc_reserved), qint64(m.alloc_in_use),
                qint64(m.alloc_largest_free), qint64(m.device_total), qint64(m.device_free), m.fragmentation,
                QByteArray(reinterpret_cast<const char *>(m.kv_block_states.data()), qsizetype(m.kv_block_states.size())),
                {}};
    for (const auto &[name, bytes] : m.device_parts)
        v.memory.deviceParts.append({QString::fromStdString(name), qint64(bytes)});
    v.memory.kvBlocksMapped = m.kv_blocks_mapped;
    v.memory.kvMappedBytes = qint64(m.kv_mapped_bytes);
    v.memory.kvCapacityBytes = qint64(m.kv_capacity_bytes);
    v.memory.kvNote = QString::fromStdString(m.kv_note);
    v.running = t->n_running;
    v.waiting = t->n_waiting;
    v.prefixQueries = t->prefix_queries;
    v.prefixHits = t->prefix_hits;
    v.tokensGenerated = t->n_tokens_generated;
    v.requestsFinished = t->n_requests_finished;
    v.timeline.step = t->timeline_step;
    v.timeline.readBandwidth = t->device_read_bandwidth;
    v.timeline.ops.reserve(qsizetype(t->timeline.size()));
    for (const op_time &o : t->timeline)
        v.timeline.ops.append({QString::fromStdString(o.name), int(o.phase), o.layer, o.start_us, o.dur_us, o.bytes,
                               o.shared});
    return v;
}

ReplyProfile EngineSession::replyProfile(quint64 requestId) const {
    if (m_remote) return m_remote->replyProfile(requestId);
    auto it = m_active.find(requestId);
    if (it == m_active.end()) return {};
    return toReplyProfile(requestId, it->stream->metrics(), m_info.moeLayers, m_info.nExperts, it->tokenTextEnds);
}

EngineSession::EngineSession(const EngineSessionOptions &options, QObject *parent)
    : QObject(parent), m_options(options), m_engine(std::make_shared<engine>(make_params(options))) {
    qRegisterMetaType<es::SessionModelInfo>();
    qRegisterMetaType<es::SessionStats>();
    qRegisterMetaType<es::MessageMetrics>();
    qRegisterMetaType<es::TelemetryView>();
    qRegisterMetaType<es::ReplyProfile>();
    m_timer.setInterval(options.pumpIntervalMs);
    m_timer.setTimerType(Qt::PreciseTimer);
    connect(&m_timer, &QTimer::timeout, this, &EngineSession::pump);
}

EngineSession::~EngineSession() {
    emit localModelAboutToChange(tr("the app is closing"));
    m_timer.stop();
    m_remote.reset();
    m_engine.reset(); // cancels every open request and joins the engine thread (a LocalServer let go above)
}

EngineSession::BackendAvailability EngineSession::backendAvailability(const QString &backend) {
    if (backend != QLatin1String("cuda")) return {};
    const cuda_status_info &st = cuda_status();
    if (st.available) return {};
    const QString detail = QString::fromStdString(st.reason);
    if (!st.built) return {false, tr("this build has no CUDA backend")};
    if (!st.module_loaded) return {false, tr("the CUDA module is missing or does not load (%1)").arg(detail)};
    return {false, tr("no usable CUDA device (%1)").arg(detail)};
}

QString EngineSession::usableSavedBackend(const QString &wanted, QString *notice) {
    const BackendAvailability a = backendAvailability(wanted);
    if (a.usable) return wanted;
    if (notice) *notice = tr("The saved backend %1 cannot run here: %2. Using Automatic.").arg(wanted, a.reason);
    return QStringLiteral("auto");
}

QString EngineSession::checkFolder(const QString &dir, const EngineSessionOptions &options) {
    const status st = check_model_folder(dir.toStdString(), make_params(options).load);
    return st ? QString() : QString::fromStdString(st.message());
}

MemoryEstimateView EngineSession::estimate(const QString &dir, const EngineSessionOptions &options) {
    MemoryEstimateView v;
    v.message = checkFolder(dir, options);
    if (!v.message.isEmpty()) return v;
    auto e = engine::estimate_memory(dir.toStdString(), make_params(options));
    if (!e) {
        v.message = QString::fromStdString(e.message());
        return v;
    }
    v.ok = true;
    v.fits = e->fits;
    v.gpu = e->gpu;
    v.weightsBytes = qint64(e->weights_bytes);
    v.kvBytes = qint64(e->kv_bytes);
    v.workspaceBytes = qint64(e->workspace_bytes);
    v.availableBytes = qint64(e->available_bytes);
    // engine::estimate_memory's one-line summary, in the interface language (the engine is Qt-free
    // and its text English).
    const auto size = [](qint64 b) { return QLocale().formattedDataSize(b, 1); };
    if (v.gpu)
        v.message = (v.fits ? tr("%1 (%2): weights %3 + KV cache %4 + workspace %5 of %6 free — fits")
                            : tr("%1 (%2): weights %3 + KV cache %4 + workspace %5 of %6 free — does not fit"))
                        .arg(QString::fromStdString(e->device), options.precision == "bf16" ? "BF16" : "FP8",
                             size(v.weightsBytes), size(v.kvBytes), size(v.workspaceBytes), size(v.availableBytes));
    else
        v.message = (v.fits ? tr("CPU: weights %1 + KV cache %2 of %3 RAM — fits")
                            : tr("CPU: weights %1 + KV cache %2 of %3 RAM — does not fit"))
                        .arg(size(v.weightsBytes), size(v.kvBytes), size(v.availableBytes));
    v.message += tr("; the KV cache holds %1 tokens").arg(QLocale().toString(qlonglong(e->kv_tokens)));
    if (!e->note.empty()) v.message += QStringLiteral(" (") + QString::fromStdString(e->note) + QLatin1Char(')');
    return v;
}

void EngineSession::ensurePumping() {
    if (!m_timer.isActive()) m_timer.start();
}

void EngineSession::loadModel(const QString &dir) {
    m_wantedDir = dir;
    if (const QString why = checkFolder(dir, m_options); !why.isEmpty()) {
        // Refused before anything is unloaded; said from the event loop, as every other load
        // outcome is, so a caller connects after calling and still hears it.
        QMetaObject::invokeMethod(
            this, [this, dir, why] { emit modelLoadFailed(dir, why); }, Qt::QueuedConnection);
        return;
    }
    if (m_loaded && !m_remote)
        emit localModelAboutToChange(QFileInfo(dir) == QFileInfo(m_info.dir)
                                         ? tr("the model is loading again")
                                         : tr("%1 is loading in its place").arg(QFileInfo(dir).fileName()));
    cancelAll();
    dropRemote();
    m_loaded = false;
    m_loading = true;
    m_info = {};
    m_promptTokenizer.reset();
    auto state = std::make_shared<LoadState>();
    state->dir = dir;
    std::weak_ptr<LoadState> weak = state;
    state->done = m_engine->load_model(dir.toStdString(), [weak](const std::string &stage, float f) {
        if (auto s = weak.lock()) {
            std::lock_guard lock(s->mutex);
            s->stage = QString::fromStdString(stage);
            s->fraction = f;
            s->changed = true;
        }
    });
    // The folder's content hash (reports name the exact weights) is read while the engine loads.
    state->hash = std::async(std::launch::async, [d = dir.toStdString()] { return models::model_content_hash(d); });
    m_load = state;
    emit modelLoadStarted(dir);
    ensurePumping();
}

void EngineSession::dropRemote() {
    if (!m_remote) return;
    m_remote->cancelAll();
    m_remote.reset();
    m_loaded = false;
    m_info = {};
    m_promptTokenizer.reset();
}

void EngineSession::connectRemote(const RemoteEndpoint &endpoint) {
    if (m_loaded && !m_remote)
        emit localModelAboutToChange(tr("the app connects to the server %1 instead").arg(endpoint.baseUrl.toString()));
    cancelAll();
    dropRemote();
    m_load.reset(); // a local load in progress is abandoned (its result is ignored)
    m_loading = true;
    m_loaded = false;
    m_info = {};
    m_promptTokenizer.reset();
    m_engine->unload_model(); // the server does the work now: free the local weights
    m_remote = std::make_unique<RemoteClient>(endpoint, m_options.defaultMaxTokens);
    RemoteClient *r = m_remote.get();
    const QString where = r->endpoint().baseUrl.toString();
    connect(r, &RemoteClient::tokensGenerated, this, &EngineSession::tokensGenerated);
    connect(r, &RemoteClient::replyFinished, this, &EngineSession::replyFinished);
    connect(r, &RemoteClient::replyFailed, this, &EngineSession::replyFailed);
    connect(r, &RemoteClient::replyProfiled, this, &EngineSession::replyProfiled);
    connect(r, &RemoteClient::statsUpdated, this, &EngineSession::statsUpdated);
    connect(r, &RemoteClient::connected, this, [this](const SessionModelInfo &info) {
        m_loading = false;
        m_loaded = true;
        m_info = info;
        emit modelLoaded(m_info);
    });
    connect(r, &RemoteClient::connectFailed, this, [this, where](const QString &message) {
        m_loading = false;
        m_remote.release()->deleteLater(); // we are inside one of its slots
        emit modelLoadFailed(where, message);
    });
    emit modelLoadStarted(where);
    r->connectToServer();
}

void EngineSession::disconnectRemote() {
    if (!m_remote) return;
    cancelAll();
    dropRemote();
    m_loading = false;
    emit remoteDisconnected();
    if (!m_wantedDir.isEmpty()) loadModel(m_wantedDir);
}

void EngineSession::reconfigure(const EngineSessionOptions &options) {
    if (m_remote) { // the local engine's options; the remote connection stays
        m_options = options;
        m_engine = std::make_shared<engine>(make_params(options));
        m_timer.setInterval(options.pumpIntervalMs);
        return;
    }
    const QString dir = m_loaded ? m_info.dir : m_load ? m_load->dir : m_wantedDir;
    if (m_loaded) emit localModelAboutToChange(tr("the engine restarts with new settings"));
    cancelAll();
    m_load.reset();
    m_loading = m_loaded = false;
    m_info = {};
    m_promptTokenizer.reset();
    m_options = options;
    m_engine = std::make_shared<engine>(make_params(options));
    m_timer.setInterval(options.pumpIntervalMs);
    if (!dir.isEmpty()) loadModel(dir);
}

QString EngineSession::checkIntervention(const ExpertIntervention &iv) const {
    if (iv.isEmpty()) return {};
    if (m_remote) return tr("Expert interventions run in the built-in engine; a remote server does not take them.");
    const auto info = m_engine->info();
    if (!m_loaded || !info) return tr("No model is loaded.");
    auto routing = to_routing_intervention(iv);
    if (!routing) return QString::fromStdString(routing.message());
    if (auto s = check_routing_intervention(*routing, info->config); !s) return QString::fromStdString(s.message());
    if (!info->routing_interventions)
        return tr("The %1 backend's router does not apply expert interventions; they run on the CPU backend.")
            .arg(QString::fromStdString(info->backend_name));
    return {};
}

quint64 EngineSession::submit(const ChatRequest &request) {
    if (m_remote) return m_remote->submit(request);
    request_params r;
    for (const ChatTurn &t : request.messages) {
        const chat_role role = t.role == MessageRole::System      ? chat_role::system
                               : t.role == MessageRole::Assistant ? chat_role::assistant
                                                                  : chat_role::user;
        r.messages.push_back({role, t.content.toStdString()});
    }
    r.system_prompt = request.systemPrompt.toStdString();
    r.preset_prefix = request.presetPrefix.toStdString();
    r.continue_final_message = request.continueLastReply;
    r.sampling = merge(request.sampling, m_engine->model_defaults(), m_options.defaultMaxTokens);
    if (const ExpertIntervention &iv = request.sampling.intervention; !iv.isEmpty()) {
        auto routing = to_routing_intervention(iv);
        if (routing) r.routing = std::make_shared<const routing_intervention>(std::move(*routing));
        else r.refusal = "expert intervention: " + routing.message();
    }
    auto stream = m_engine->submit(std::move(r));
    const quint64 id = stream->id();
    m_active.insert(id, Active{stream, {}, 0, 0, {}});
    ensurePumping();
    return id;
}

void EngineSession::finishRequest(quint64 id, const QString &reason) {
    auto it = m_active.find(id);
    if (it == m_active.end()) return;
    Active a = it.value();
    m_active.erase(it);
    if (!a.pendingUtf8.isEmpty()) emit tokensGenerated(id, QString::fromUtf8(a.pendingUtf8), a.pendingTokens);
    const request_metrics m = a.stream->metrics();
    MessageMetrics metrics = to_metrics(m);
    metrics.stopReason = reason;
    emit replyProfiled(id, toReplyProfile(id, m, m_info.moeLayers, m_info.nExperts, a.tokenTextEnds));
    emit replyFinished(id, reason, metrics, to_routing(m, m_info.moeLayers, m_info.nExperts), m.seed);
}

void EngineSession::cancel(quint64 requestId) {
    if (m_remote) return m_remote->cancel(requestId);
    if (!m_active.contains(requestId)) return;
    m_engine->cancel(requestId);
    finishRequest(requestId, QStringLiteral("cancelled"));
}

void EngineSession::cancelAll() {
    if (m_remote) m_remote->cancelAll();
    const auto ids = m_active.keys();
    for (quint64 id : ids) cancel(id);
}

void EngineSession::pump() {
    if (m_remote) { // the remote client pumps its own replies
        m_timer.stop();
        return;
    }
    // Loading.
    if (m_load) {
        {
            std::lock_guard lock(m_load->mutex);
            if (m_load->changed) {
                m_load->changed = false;
                emit modelLoadProgress(m_load->stage, m_load->fraction);
            }
        }
        if (m_load->done.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
            const status st = m_load->done.get();
            const QString dir = m_load->dir;
            const QString hash = QString::fromStdString(m_load->hash.get());
            m_load.reset();
            m_loading = false;
            if (!st) {
                emit modelLoadFailed(dir, QString::fromStdString(st.message()));
            } else if (auto info = m_engine->info()) {
                const model_config &c = info->config;
                SessionModelInfo v;
                v.dir = dir;
                v.name = QFileInfo(dir).fileName();
                v.architecture = QString::fromStdString(c.arch_name);
                v.backend = QString::fromStdString(info->backend_name);
                v.backendNote = QString::fromStdString(info->backend_note);
                v.modelHash = hash;
                if (v.backend.startsWith(QLatin1String("cuda"))) {
                    // The backend's name carries the GPU's ("cuda:0 NVIDIA H100 …").
                    v.device = v.backend.section(QLatin1Char(' '), 1);
                    const int driver = cuda_status().driver_version;
                    v.driver = driver > 0 ? tr("driver for CUDA %1").arg(QString::fromStdString(cuda_version_string(driver)))
                                          : tr("unknown");
                } else {
                    v.device = QString::fromStdString(models::cpu_model_name());
                    v.driver = tr("none (the CPU backend)");
                }
                v.precision = precisionLabel(v.backend.startsWith("cpu"), m_options.precision);
                v.isMoe = c.arch == model_arch::moe;
                v.nLayers = int(c.n_layer);
                v.nExperts = int(c.n_expert);
                v.nExpertsUsed = int(c.n_expert_used);
                v.nSharedExperts = int(c.n_expert_shared);
                for (int64_t il = 0; il < c.n_layer; ++il)
                    if (c.is_moe_layer(il)) v.moeLayers.push_back(int(il));
                v.nParams = c.n_params();
                v.nParamsActive = c.n_params_active();
                v.contextLength = int(c.n_ctx_train);
                v.kvTokens = qint64(info->n_kv_blocks) * info->block_size;
                v.defaults = to_view(info->defaults);
                if (auto t = m_engine->telemetry()) {
                    v.weightsBytes = qint64(t->memory.weights_bytes);
                    v.kvCacheBytes = qint64(t->memory.kv_block_bytes) * t->memory.kv_blocks_total;
                }
                m_info = v;
                m_promptTokenizer = info->tok ? std::make_shared<const PromptTokenizer>(info->tok) : nullptr;
                m_loaded = true;
                emit modelLoaded(m_info);
            }
        }
    }

    // Replies: coalesce this tick's text per request.
    const auto ids = m_active.keys();
    for (quint64 id : ids) {
        auto it = m_active.find(id);
        if (it == m_active.end()) continue;
        QString finished, failed;
        bool ended = false;
        for (request_event &ev : it->stream->drain()) {
            if (ev.kind == event_kind::token) {
                it->pendingUtf8 += QByteArray::fromStdString(ev.text);
                it->pendingTokens += int(ev.token_ids.size());
                // The event's text belongs to its tokens: each of them ends where it ends.
                it->textBytes += qint64(ev.text.size());
                for (size_t i = 0; i < ev.token_ids.size(); ++i) it->tokenTextEnds.append(int(it->textBytes));
            } else if (ev.kind == event_kind::finished) {
                finished = QString::fromStdString(ev.finish_reason);
                ended = true;
            } else {
                failed = QString::fromStdString(ev.error);
                ended = true;
            }
        }
        if (!it->pendingUtf8.isEmpty() && !ended) {
            emit tokensGenerated(id, QString::fromUtf8(it->pendingUtf8), it->pendingTokens);
            it->pendingUtf8.clear();
            it->pendingTokens = 0;
        }
        if (!ended) continue;
        if (!failed.isEmpty()) {
            Active a = it.value();
            m_active.erase(it);
            if (!a.pendingUtf8.isEmpty()) emit tokensGenerated(id, QString::fromUtf8(a.pendingUtf8), a.pendingTokens);
            emit replyProfiled(id, toReplyProfile(id, a.stream->metrics(), m_info.moeLayers, m_info.nExperts, a.tokenTextEnds));
            emit replyFailed(id, failed);
        } else {
            finishRequest(id, finished);
        }
    }

    // Live figures, about once a second's worth of tokens.
    if (auto t = m_engine->telemetry()) {
        const qint64 now = QDateTime::currentMSecsSinceEpoch();
        if (m_lastStatsMs == 0 || now - m_lastStatsMs >= 500) {
            if (m_lastStatsMs != 0) {
                const double dt = (now - m_lastStatsMs) / 1000.0;
                m_tokPerSec = dt > 0 ? double(t->n_tokens_generated - m_lastTokensGenerated) / dt : 0.0;
            }
            m_lastTokensGenerated = t->n_tokens_generated;
            m_lastStatsMs = now;
            SessionStats s;
            s.tokensPerSecond = m_active.isEmpty() ? 0.0 : m_tokPerSec;
            s.running = t->n_running;
            s.waiting = t->n_waiting;
            s.memoryInUse = qint64(t->memory.weights_bytes + t->memory.kv_block_bytes * uint64_t(t->memory.kv_blocks_used) +
                                   t->memory.alloc_in_use);
            s.memoryTotal = qint64(t->memory.device_total);
            s.kvBlocksUsed = t->memory.kv_blocks_used;
            s.kvBlocksTotal = t->memory.kv_blocks_total;
            emit statsUpdated(s);
        }
    }
    if (!m_load && m_active.isEmpty()) {
        // Idle: say so once (tok/s back to 0) and stop the pump until the next load or reply.
        m_tokPerSec = 0;
        m_lastStatsMs = 0;
        if (auto t = m_engine->telemetry()) {
            SessionStats s;
            s.memoryInUse = qint64(t->memory.weights_bytes + t->memory.alloc_in_use);
            s.memoryTotal = qint64(t->memory.device_total);
            s.kvBlocksTotal = t->memory.kv_blocks_total;
            emit statsUpdated(s);
        }
        m_timer.stop();
    }
}

} // namespace es
