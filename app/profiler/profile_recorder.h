// ProfileRecorder: follows every reply of one EngineSession and adds to the session's
// ReplyProfile what only the engine-wide telemetry knows — the time per phase of the engine steps
// that ran while the reply was in flight, and its memory peak — giving the MessageProfile that
// ChatPane stores with the message and the profiler shows. It reads telemetry once per pump tick
// that brought tokens (≈30 Hz at most, never per token) and keeps the last 4096 steps so the
// prefill steps before a reply's first tokens are still attributed. A step shared by concurrent
// replies is apportioned by tokens: each reply gets (its tokens in the step / the step's tokens)
// of every phase time, so the phase times of replies that ran together add up to the engine's
// time, not a multiple of it; nSteps counts the steps that computed the reply. (A source that
// does not list a step's sequences falls back to whole steps for every reply in flight.) Each step
// the reply took part in is also listed in the profile, whole (up to 65,536; schema v5), with a
// memory sample whenever the figure changed (up to 8,192). Requests the app's server answered on
// the same engine (LocalServer) are recorded the same way once they end (recordServedReply), so
// the profiler can show the latest one. GUI thread only.
#pragma once

#include "session_types.h"
#include "storage_types.h"

#include <QHash>
#include <QObject>
#include <QPointer>
#include <QSet>

#include <deque>
#include <optional>

namespace es {

class EngineSession;

// What the recorder measured for one reply, beside the session's ReplyProfile.
struct ReplyEngineStats {
    // Over the steps whose phases were measured (nStepsTimed; their share of the reply's step
    // time timedMs of stepMs): makeMessageProfile scales them to every step.
    PhaseTimes phases;
    int nSteps = 0, nStepsMissed = 0, maxBatchSeqs = 0;
    int nStepsTimed = 0;
    double stepMs = 0, timedMs = 0;
    StepTimeline timeline; // the latest step of the reply timed on the device
    qint64 memoryPeakBytes = 0;
    int kvBlocksPeak = 0;
    QList<ProfileStep> steps;          // times since submit, oldest first
    QList<ProfileMemorySample> memory; // when the figure changed, oldest first
};

// The profile of a reply: times relative to submit, weights rounded to float16, routing counts
// from the trace (the same counts EngineSession reports with replyFinished).
MessageProfile makeMessageProfile(const ReplyProfile &reply, const SessionModelInfo &model,
                                  const ReplyEngineStats &stats);

// A reply's metrics from its profile (what the session reports with replyFinished, for a reply
// that ended without it: a failure). Stop reason "error".
MessageMetrics metricsFromProfile(const MessageProfile &profile);

class ProfileRecorder : public QObject {
    Q_OBJECT
public:
    explicit ProfileRecorder(EngineSession *session, QObject *parent = nullptr);
    // The session's recorder, made on first use as the session's child (so every pane and the
    // profiler panel share one and it lives exactly as long as the session).
    static ProfileRecorder *forSession(EngineSession *session);

    // A finished reply's profile, removed from the recorder (ChatPane stores it). The recorder
    // keeps the last 16 finished profiles until taken.
    std::optional<MessageProfile> takeProfile(quint64 requestId);
    std::optional<MessageProfile> finishedProfile(quint64 requestId) const;
    // The profile so far of a reply in flight; empty when the recorder does not know it.
    MessageProfile liveProfile(quint64 requestId) const;
    QList<quint64> activeRequests() const;
    // The reply most recently started (in flight or finished); 0 when none yet.
    quint64 latestRequest() const { return m_latest; }
    // Whether a finished profile is a request the app's server answered (recordServedReply).
    bool isServed(quint64 requestId) const { return m_served.contains(requestId); }

public slots:
    // Reads the latest telemetry and attributes new steps. Called on each pump tick with tokens
    // and before a reply is finalized; cheap when nothing changed.
    void poll();
    // A request the app's server answered on this session's engine (LocalServer::requestProfiled):
    // its profile is completed from the steps still in the history, which holds them when the
    // server's drains keep poll() running (LocalServer::serving), and replyRecorded follows.
    void recordServedReply(const es::ReplyProfile &reply);

signals:
    // A reply ended (finished, cancelled or failed) and its profile is final.
    void replyRecorded(quint64 requestId, const es::MessageProfile &profile);

private:
    struct Accum {
        qint64 tSubmitUs = 0;
        ReplyEngineStats stats; // steps that left the history, memory peaks, missed steps
    };
    Accum &track(quint64 requestId, qint64 tSubmitUs);
    void onReplyProfiled(quint64 requestId, const ReplyProfile &reply);

    QPointer<EngineSession> m_session;
    QHash<quint64, Accum> m_active;
    QHash<quint64, MessageProfile> m_finished;
    QList<quint64> m_finishedOrder;
    QSet<quint64> m_served; // finished profiles of served requests
    std::deque<StepView> m_history; // steps seen, oldest first, at most kHistory
    quint64 m_lastStep = 0;
    bool m_haveStep = false;
    quint64 m_timelineStep = 0; // the step of the last timeline handed to the replies in it
    bool m_haveTimeline = false;
    quint64 m_latest = 0;
};

} // namespace es
