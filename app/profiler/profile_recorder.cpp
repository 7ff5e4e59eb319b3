// ProfileRecorder (see profile_recorder.h). A reply's engine statistics are the steps that
// started in [submit, finish]: those still in the history are summed when asked (so a step that
// began after the finish is never counted, whatever order the pump delivered things in), and a
// step leaving the history is folded into the sums of the replies it belongs to.
#include "profile_recorder.h"

#include "engine_session.h"
#include "latency_stats.h"
#include "memory_series.h"
#include "routing_stats.h"

#include <qfloat16.h>

#include <algorithm>

namespace es {

namespace {
constexpr size_t kHistory = 4096;
constexpr int kFinishedKept = 16;              // untaken: a pane closed mid-reply, a failed reply
constexpr qsizetype kMemorySamplesKept = 8192; // ≈ 4.5 minutes at 30 Hz of changing figures
constexpr qsizetype kStepsKept = 65536;        // listed steps per reply (≈ 0.8 MB stored); all are counted

bool inReply(const StepView &s, qint64 tSubmitUs, qint64 tFinishUs) {
    return s.tUs >= tSubmitUs && (tFinishUs < 0 || s.tUs <= tFinishUs);
}

qint64 us(double ms) { return qRound64(ms * 1000.0); }

// This reply's share of a step: its tokens over the step's tokens when the step lists its
// sequences (0 when the reply was not in it), else 1 (the step counts for every reply in flight).
double shareOf(const StepView &s, quint64 id) {
    if (s.seqIds.isEmpty()) return 1.0;
    qint64 mine = 0, all = 0;
    for (qsizetype i = 0; i < s.seqIds.size() && i < s.seqTokens.size(); ++i) {
        all += s.seqTokens[i];
        if (s.seqIds[i] == id) mine += s.seqTokens[i];
    }
    return all > 0 ? double(mine) / double(all) : 0.0;
}

// The listed step (schema v5) is the engine's step as it ran, whole: the trace draws engine steps.
void count(ReplyEngineStats &st, const StepView &s, quint64 id, qint64 tSubmitUs) {
    const double share = shareOf(s, id);
    if (share <= 0.0) return;
    const PhaseTimes whole = s.phasesTimed ? stepPhases(s) : PhaseTimes{};
    st.stepMs += s.durationMs * share;
    if (s.phasesTimed) {
        PhaseTimes ph = whole;
        for (double *v : {&ph.attentionMs, &ph.moeMs, &ph.moeSharedMs, &ph.denseMs, &ph.samplingMs, &ph.otherMs})
            *v *= share;
        accumulate(st.phases, ph);
        st.timedMs += s.durationMs * share;
        ++st.nStepsTimed;
    }
    ++st.nSteps;
    st.maxBatchSeqs = std::max(st.maxBatchSeqs, s.nSeqs);
    if (st.steps.size() < kStepsKept)
        st.steps.append({s.tUs - tSubmitUs, us(s.durationMs), s.nSeqs, s.nPrefillTokens, s.nDecodeTokens,
                         us(whole.attentionMs), us(whole.moeMs + whole.moeSharedMs), us(whole.denseMs),
                         us(whole.samplingMs)});
}
} // namespace

MessageProfile makeMessageProfile(const ReplyProfile &r, const SessionModelInfo &model,
                                  const ReplyEngineStats &st) {
    MessageProfile p;
    if (r.tFirstTokenUs >= 0) p.ttftUs = r.tFirstTokenUs - r.tSubmitUs;
    p.tokenTimesUs.reserve(r.tokenTimesUs.size());
    for (qint64 t : r.tokenTimesUs) p.tokenTimesUs.append(t - r.tSubmitUs);
    p.durationUs =
        r.tFinishUs >= 0 ? r.tFinishUs - r.tSubmitUs : (p.tokenTimesUs.isEmpty() ? 0 : p.tokenTimesUs.last());
    if (r.tokenTextEnds.size() == r.tokenTimesUs.size()) p.tokenTextEnds = r.tokenTextEnds;
    p.nPromptTokens = r.nPromptTokens;
    p.nCachedPromptTokens = r.nCachedPromptTokens;
    p.nPreemptions = r.nPreemptions;
    p.phases = st.phases;
    // A sample of the steps timed: their phases scaled to the time of every step of the reply.
    if (st.nStepsTimed > 0 && st.nStepsTimed < st.nSteps && st.timedMs > 0) {
        const double scale = st.stepMs / st.timedMs;
        for (double *v : {&p.phases.attentionMs, &p.phases.moeMs, &p.phases.moeSharedMs, &p.phases.denseMs,
                          &p.phases.samplingMs, &p.phases.otherMs})
            *v *= scale;
    }
    p.nStepsTimed = st.nStepsTimed == st.nSteps ? -1 : st.nStepsTimed;
    p.timeline = st.timeline;
    p.nSteps = st.nSteps;
    p.nStepsMissed = st.nStepsMissed;
    p.maxBatchSeqs = st.maxBatchSeqs;
    p.memoryPeakBytes = st.memoryPeakBytes;
    p.kvBlocksPeak = st.kvBlocksPeak;
    p.steps = st.steps;
    p.memory = st.memory;
    p.nLayers = model.nLayers;
    p.nExperts = r.nExperts > 0 ? r.nExperts : model.nExperts;
    p.nSharedExperts = model.nSharedExperts;
    p.k = r.k;
    p.moeLayers = r.moeLayers;
    p.traceIds = r.ids;
    p.traceWeights.reserve(r.weights.size());
    // float16 is what the stored trace keeps; rounding here makes live and stored identical.
    for (float w : r.weights) p.traceWeights.append(float(qfloat16(w)));
    // Margins only when every position has one slot per MoE layer (else none: a partial array
    // would misalign positions).
    if (r.margins.size() == qsizetype(p.tracePositions()) * r.moeLayers.size()) {
        p.traceMargins.reserve(r.margins.size());
        for (float m : r.margins) p.traceMargins.append(float(qfloat16(m)));
    }
    p.routing = routingFromTrace(p.traceIds, p.moeLayers, p.k, p.nExperts);
    return p;
}

MessageMetrics metricsFromProfile(const MessageProfile &p) {
    MessageMetrics m;
    const int n = int(p.tokenTimesUs.size());
    m.nPromptTokens = p.nPromptTokens;
    m.nOutputTokens = n;
    if (p.ttftUs) {
        m.ttftMs = *p.ttftUs / 1000.0;
        const int computed = p.nPromptTokens - p.nCachedPromptTokens;
        if (*p.ttftUs > 0) m.prefillTokS = computed / (*p.ttftUs / 1e6);
    }
    for (int i = 0; i < n; ++i) {
        m.tokenTimesMs.push_back(float(p.tokenTimesUs[i] / 1000.0));
        if (i > 0) m.itlMs.push_back(float((p.tokenTimesUs[i] - p.tokenTimesUs[i - 1]) / 1000.0));
    }
    if (n > 1 && p.tokenTimesUs.last() > p.tokenTimesUs.first())
        m.decodeTokS = (n - 1) / ((p.tokenTimesUs.last() - p.tokenTimesUs.first()) / 1e6);
    m.stopReason = QStringLiteral("error");
    if (p.memoryPeakBytes > 0) m.peakMemoryBytes = p.memoryPeakBytes;
    return m;
}

ProfileRecorder::ProfileRecorder(EngineSession *session, QObject *parent)
    : QObject(parent), m_session(session) {
    connect(session, &EngineSession::tokensGenerated, this, [this](quint64 id) {
        poll();
        if (!m_active.contains(id) && !m_finished.contains(id) && m_session)
            track(id, m_session->replyProfile(id).tSubmitUs);
    });
    connect(session, &EngineSession::replyProfiled, this, &ProfileRecorder::onReplyProfiled);
}

ProfileRecorder *ProfileRecorder::forSession(EngineSession *session) {
    if (!session) return nullptr;
    if (auto *r = session->findChild<ProfileRecorder *>(QString(), Qt::FindDirectChildrenOnly)) return r;
    return new ProfileRecorder(session, session);
}

ProfileRecorder::Accum &ProfileRecorder::track(quint64 id, qint64 tSubmitUs) {
    auto it = m_active.find(id);
    if (it != m_active.end()) return *it;
    Accum a;
    a.tSubmitUs = tSubmitUs;
    m_latest = id;
    return *m_active.insert(id, a);
}

void ProfileRecorder::poll() {
    if (!m_session) return;
    const TelemetryView t = m_session->telemetry();
    if (!t.valid) return;
    bool first = true;
    for (const StepView &s : t.steps) {
        if (m_haveStep && s.step <= m_lastStep) continue;
        if (first && m_haveStep && s.step > m_lastStep + 1) {
            // The ring moved on further than we read: those steps are lost to every open reply.
            const int missed = int(s.step - m_lastStep - 1);
            for (Accum &a : m_active) a.stats.nStepsMissed += missed;
        }
        first = false;
        m_history.push_back(s);
        m_lastStep = s.step;
        m_haveStep = true;
    }
    while (m_history.size() > kHistory) {
        const StepView &old = m_history.front();
        for (auto it = m_active.begin(); it != m_active.end(); ++it)
            if (old.tUs >= it->tSubmitUs) count(it->stats, old, it.key(), it->tSubmitUs);
        m_history.pop_front();
    }
    // The latest step timed on the device, for the replies that were in it.
    if (!t.timeline.isEmpty() && (!m_haveTimeline || t.timeline.step != m_timelineStep)) {
        m_haveTimeline = true;
        m_timelineStep = t.timeline.step;
        for (const StepView &s : m_history)
            if (s.step == t.timeline.step)
                for (auto it = m_active.begin(); it != m_active.end(); ++it)
                    if (shareOf(s, it.key()) > 0.0 && s.tUs >= it->tSubmitUs) it->stats.timeline = t.timeline;
    }
    const qint64 inUse = memoryInUse(t.memory);
    for (Accum &a : m_active) {
        a.stats.memoryPeakBytes = std::max(a.stats.memoryPeakBytes, inUse);
        a.stats.kvBlocksPeak = std::max(a.stats.kvBlocksPeak, t.memory.kvBlocksUsed);
        QList<ProfileMemorySample> &mem = a.stats.memory;
        const bool changed = mem.isEmpty() || mem.constLast().inUseBytes != inUse ||
                             mem.constLast().kvBlocksUsed != t.memory.kvBlocksUsed;
        if (changed && mem.size() < kMemorySamplesKept && t.tUs >= a.tSubmitUs)
            mem.append({t.tUs - a.tSubmitUs, inUse, t.memory.kvBlocksUsed});
    }
}

void ProfileRecorder::onReplyProfiled(quint64 id, const ReplyProfile &reply) {
    poll();
    Accum a = track(id, reply.tSubmitUs);
    m_active.remove(id);
    ReplyEngineStats st = a.stats;
    for (const StepView &s : m_history)
        if (inReply(s, reply.tSubmitUs, reply.tFinishUs)) count(st, s, id, reply.tSubmitUs);
    const MessageProfile p =
        makeMessageProfile(reply, m_session ? m_session->modelInfo() : SessionModelInfo{}, st);
    m_finished.insert(id, p);
    m_finishedOrder.append(id);
    while (m_finishedOrder.size() > kFinishedKept) {
        const quint64 old = m_finishedOrder.takeFirst();
        m_finished.remove(old);
        m_served.remove(old);
    }
    emit replyRecorded(id, p);
}

void ProfileRecorder::recordServedReply(const ReplyProfile &reply) {
    if (reply.requestId == 0 || m_finished.contains(reply.requestId)) return;
    m_served.insert(reply.requestId);
    // Not the app's latest reply: a chat reply streaming now stays the one the profiler follows.
    const quint64 latest = m_latest;
    onReplyProfiled(reply.requestId, reply);
    m_latest = latest;
}

std::optional<MessageProfile> ProfileRecorder::takeProfile(quint64 id) {
    auto it = m_finished.find(id);
    if (it == m_finished.end()) return std::nullopt;
    MessageProfile p = it.value();
    m_finished.erase(it);
    m_finishedOrder.removeOne(id);
    m_served.remove(id);
    return p;
}

std::optional<MessageProfile> ProfileRecorder::finishedProfile(quint64 id) const {
    auto it = m_finished.find(id);
    if (it == m_finished.end()) return std::nullopt;
    return it.value();
}

MessageProfile ProfileRecorder::liveProfile(quint64 id) const {
    auto it = m_active.find(id);
    if (it == m_active.end() || !m_session) return {};
    const ReplyProfile reply = m_session->replyProfile(id);
    if (reply.requestId == 0) return {};
    ReplyEngineStats st = it->stats;
    for (const StepView &s : m_history)
        if (inReply(s, it->tSubmitUs, -1)) count(st, s, id, it->tSubmitUs);
    return makeMessageProfile(reply, m_session->modelInfo(), st);
}

QList<quint64> ProfileRecorder::activeRequests() const { return m_active.keys(); }

} // namespace es
