// Value types the storage layer hands out: conversations, messages of the message tree, their
// metrics and routing summaries, presets and preset imports, search hits, undo snapshots. Plain
// copyable structs with defaulted ==, no Qt SQL types and no engine types, so ui/ can use them
// directly.
// Times are UTC QDateTimes with millisecond precision (stored as ms since the epoch).
#pragma once

#include <QByteArray>
#include <QDateTime>
#include <QHash>
#include <QJsonDocument>
#include <QJsonObject>
#include <QList>
#include <QString>
#include <QStringList>

#include <optional>

namespace es {

enum class MessageRole { System, User, Assistant };
enum class MessageState {
    Complete, // the reply ended (stop, length, cancelled by the user: see finishReason)
    Partial,  // still streaming; checkpointed text only
    Failed,   // the engine failed, or the app died mid-reply (finishReason "interrupted")
};

// What a conversation's request does when the history no longer fits the model's context
// (conversations.overflow_policy, schema v6): refuse with the sizes; drop the oldest messages,
// the system prompt first; or keep the system prompt and drop the oldest turns after it.
enum class OverflowPolicy { Refuse, DropOldest, KeepSystemAndLast };
QString overflowPolicyName(OverflowPolicy p); // "refuse" | "drop-oldest" | "keep-last" (stored)
std::optional<OverflowPolicy> overflowPolicyFromString(const QString &s);

QString messageRoleName(MessageRole role);   // "system" | "user" | "assistant" (the stored spelling)
QString messageStateName(MessageState state); // "complete" | "partial" | "failed"
std::optional<MessageRole> messageRoleFromString(const QString &s);
std::optional<MessageState> messageStateFromString(const QString &s);

// Sampling parameters as the user or a preset chose them. An unset field means "the model's
// generation_config default", so a preset can set temperature alone. JSON keys are the engine's
// and generation_config.json's snake_case names (temperature, top_p, top_k, min_p,
// repetition_penalty, presence_penalty, frequency_penalty, max_tokens, seed, stop).
// An expert intervention as the app stores and shows it (the engine's routing_intervention,
// engine/backend/routing_intervention.h, in the CLI's own syntax): experts disabled and forced as
// "LAYER:EXPERT,…" (LAYER a checkpoint layer index or *), the routed experts per token (0: the
// model's k) and the scale of the router's correction bias (1: the model's). The engine checks it
// against the model when a reply starts and refuses it by name.
struct ExpertIntervention {
    QString disabled, forced;
    int topK = 0;
    double biasScale = 1.0;

    bool isEmpty() const { return disabled.isEmpty() && forced.isEmpty() && topK == 0 && biasScale == 1.0; }
    QJsonObject toJson() const; // {} when empty
    static ExpertIntervention fromJson(const QJsonObject &o);
    // "disable 3:5, *:1; force 2:0; top-k 4; bias × 0.5" (the engine's wording); "" when empty.
    QString summary() const;
    bool operator==(const ExpertIntervention &) const = default;
};

struct SamplingParams {
    std::optional<double> temperature;
    std::optional<double> topP;
    std::optional<int> topK;
    std::optional<double> minP;
    std::optional<double> repetitionPenalty;
    std::optional<double> presencePenalty;
    std::optional<double> frequencyPenalty;
    std::optional<int> maxTokens;
    std::optional<quint64> seed; // JSON: a number up to 2^53, a decimal string above (exact)
    QStringList stopStrings;
    // Not a sampling setting, but it travels with them: what the conversation asks of the router
    // and what a reply was generated under (JSON key "intervention", absent when empty).
    ExpertIntervention intervention;

    QJsonObject toJson() const;
    // Unknown keys are ignored; values of the wrong type are dropped (never a failure: the
    // JSON comes from our own files or from an import that was already validated).
    static SamplingParams fromJson(const QJsonObject &o);
    bool operator==(const SamplingParams &) const = default;
};

// A seed as JSON holds it: a non-negative number below 2^64 (a fraction is dropped) or a decimal
// string; nullopt for anything else (negative, too large, NaN, another type).
std::optional<quint64> seedFromJson(const QJsonValue &v);

// Per-conversation settings (conversations.settings JSON). Keys this version does not know are
// kept in `extra` and written back, so an older build never drops a newer build's settings.
struct ConversationSettings {
    SamplingParams sampling;
    std::optional<qint64> presetId;
    QJsonObject extra;

    QJsonObject toJson() const;
    static ConversationSettings fromJson(const QJsonObject &o);
    bool operator==(const ConversationSettings &) const = default;
};

struct Conversation {
    qint64 id = 0;
    QString title;
    QDateTime createdAt;
    QDateTime updatedAt;
    bool pinned = false;
    std::optional<qint64> currentLeafId; // the active branch ends here; none while empty
    ConversationSettings settings;
    // Schema v6. The conversation's own system prompt (empty: none; then a preset's, if any) and
    // what a request does when the history outgrows the context.
    QString systemPrompt;
    OverflowPolicy overflowPolicy = OverflowPolicy::KeepSystemAndLast;
    bool operator==(const Conversation &) const = default;
};

// What produced an assistant message; empty for user and system messages.
struct GenerationInfo {
    QString modelName;
    QString modelHash;
    QString precision; // "bf16", "fp8-e4m3", "fp32", ...
    SamplingParams sampling;
    std::optional<quint64> seed; // the seed actually used (reproducible runs)
    bool operator==(const GenerationInfo &) const = default;
};

struct Message {
    qint64 id = 0;
    qint64 conversationId = 0;
    std::optional<qint64> parentId; // none: a root (the first message, or an edit of it)
    MessageRole role = MessageRole::User;
    QString content;
    QDateTime createdAt;
    MessageState state = MessageState::Complete;
    QString finishReason; // "stop", "length", "cancelled", "error: …", "interrupted"
    GenerationInfo generation;
    // Schema v6: earlier messages of the branch left out of this reply's prompt to fit the context.
    int droppedMessages = 0;
    bool operator==(const Message &) const = default;
};

// Per-message measurements; definitions as in docs/architecture.md ("Metric definitions").
struct MessageMetrics {
    std::optional<double> ttftMs;
    std::optional<int> nPromptTokens;
    std::optional<int> nOutputTokens;
    std::optional<double> prefillTokS;
    std::optional<double> decodeTokS;
    QList<float> itlMs;        // one gap per output token after the first (ms)
    QList<float> tokenTimesMs; // each output token's time since the request was submitted (ms)
    QString stopReason;
    std::optional<qint64> peakMemoryBytes;
    bool operator==(const MessageMetrics &) const = default;
};

// Expert token-slot counts of one MoE layer over one reply (dense layers have no entry).
struct LayerRouting {
    int layer = 0;
    QList<quint32> expertCounts; // [n_expert]
    bool operator==(const LayerRouting &) const = default;
};

// Engine time spent while a reply was in flight, by phase (the profiler's Latency chart).
// attention: norms, q/k/v, RoPE, KV write, attention, output projection; moe: the router and the
// routed experts; moeShared: the shared experts; dense: dense MLP layers; sampling: the LM head
// and the sampler (on the GPU one fused step); other: the rest of each step (scheduling,
// embedding, transfers, emitting text). Profiles stored before schema v6 have no moeShared (it
// is in moe), and count the LM head in dense.
struct PhaseTimes {
    double attentionMs = 0, moeMs = 0, denseMs = 0, samplingMs = 0, otherMs = 0, moeSharedMs = 0;
    double totalMs() const { return attentionMs + moeMs + moeSharedMs + denseMs + samplingMs + otherMs; }
    bool operator==(const PhaseTimes &) const = default;
};

// One launch of the step timeline (engine op_time): name, phase (es::step_phase), layer (-1:
// none), start and duration in µs from the step's first launch, the bytes it reads (0: not
// modelled) and the shared experts' share of them.
struct TimelineOp {
    QString name;
    int phase = 5, layer = -1;
    double startUs = 0, durUs = 0, bytes = 0, shared = 0;
    bool operator==(const TimelineOp &) const = default;
};

// The step timeline of one step timed on the device, with the device's read bandwidth (bytes/s,
// 0: unknown) a launch's bytes per second are set against.
struct StepTimeline {
    quint64 step = 0;
    double readBandwidth = 0;
    QList<TimelineOp> ops;
    bool isEmpty() const { return ops.isEmpty(); }
    bool operator==(const StepTimeline &) const = default;
};

// One engine step that ran while a reply was in flight (schema v5): when it started (µs since
// the reply's submit), how long it took, what it batched, and its phase times in µs (other =
// duration − the four phases; moe: the routed and shared experts; sampling: the LM head and the
// sampler; all 0 for a step whose phases were not timed). Shared with replies running at the
// same time.
struct ProfileStep {
    qint64 tStartUs = 0, durationUs = 0;
    int nSeqs = 0, nPrefillTokens = 0, nDecodeTokens = 0;
    qint64 attentionUs = 0, moeUs = 0, denseUs = 0, samplingUs = 0;
    bool operator==(const ProfileStep &) const = default;
};

// Memory in use while a reply was in flight (schema v5), sampled when the recorder read the
// telemetry (≤ 30 Hz, only when the figure changed): weights + KV blocks in use + workspace.
struct ProfileMemorySample {
    qint64 tUs = 0; // since submit
    qint64 inUseBytes = 0;
    int kvBlocksUsed = 0;
    bool operator==(const ProfileMemorySample &) const = default;
};

// What the profiler measured for one assistant reply, stored with it (message_profiles, schema
// v4, plus its routing counts in message_routing) so a selected old message shows exactly what
// was shown live. Times are µs since the request was submitted (engine clock, exact integers).
struct MessageProfile {
    std::optional<qint64> ttftUs;     // submit → first generated token
    qint64 durationUs = 0;            // submit → finish
    QList<qint64> tokenTimesUs;       // every generated token
    // Where each generated token's text ends in the reply's text, in UTF-8 bytes (the text the
    // engine emitted with it: a token whose text is held back, e.g. for a stop string, ends where
    // the previous one did). One per token time, or empty (replies from before it was recorded, a
    // remote server's).
    QList<int> tokenTextEnds;
    int nPromptTokens = 0, nCachedPromptTokens = 0, nPreemptions = 0;
    // Engine steps that ran while the reply was in flight (shared with replies running at the
    // same time); nStepsMissed counts steps the recorder could not see (telemetry ring overrun).
    // Phases are measured on a sample of the steps where the engine times them on the device
    // (nStepsTimed of nSteps; the phases are then that sample scaled to every step's time);
    // -1: every step (the CPU, and profiles stored before schema v6).
    PhaseTimes phases;
    int nSteps = 0, nStepsMissed = 0, maxBatchSeqs = 0;
    int nStepsTimed = -1;
    StepTimeline timeline; // schema v6: the latest step of the reply timed on the device
    // Peak over the reply of weights + KV blocks in use + workspace in use, and KV blocks in use.
    qint64 memoryPeakBytes = 0;
    int kvBlocksPeak = 0;
    // The model's shape, so dense layers and shared experts can be drawn for an old message.
    int nLayers = 0, nExperts = 0, nSharedExperts = 0, k = 0;
    QList<int> moeLayers;
    // Routing trace over positions (prompt, then generated): [(p * moeLayers.size() + m) * k + j];
    // id -1 where the position came from the prefix cache. Weights are rounded to float16 when
    // the profile is made, so the compact stored form is exact.
    QList<qint16> traceIds;
    QList<float> traceWeights;
    // The router's margin at each position and MoE layer, [p * moeLayers.size() + m]: the k-th
    // choice's selection score (softmax probability + correction bias) minus the (k+1)-th's, so
    // a small margin is a token the layer nearly sent elsewhere. NaN where it was not recorded
    // (prefix-cached positions; the CUDA backend records no margins); empty for profiles from
    // before margins were recorded. Rounded to float16 like the weights.
    QList<float> traceMargins;
    QList<LayerRouting> routing;      // token-slot counts per MoE layer (the routing summary)
    // Schema v5: the steps themselves (at most the recorder's history, 4096) and the memory
    // samples. Empty for profiles stored before v5 (the aggregates above are still there).
    QList<ProfileStep> steps;
    QList<ProfileMemorySample> memory;

    int tracePositions() const {
        const qsizetype per = qsizetype(moeLayers.size()) * k;
        return per > 0 ? int(traceIds.size() / per) : 0;
    }
    bool isEmpty() const { return tokenTimesUs.isEmpty() && traceIds.isEmpty() && !ttftUs; }
    bool operator==(const MessageProfile &) const = default;
};

// ---- A profile's model shape, before anything is sized by it ----
// A profile read from outside (an imported conversation, a bench JSON) or from a database (a
// row an older build or a hand edit wrote) names its model's shape in numbers: layers, experts,
// top-k. Charts, tables and aggregations size cells and arrays by them, so they are checked
// against these limits and against the arrays that are actually there before any use.
// The limits are the engine's own for a config (engine/model/model_config.cpp: at most 1024
// layers and 4096 experts), so no model this software loads makes a larger profile; today's
// largest MoE models are far inside them (ERNIE 4.5 300B-A47B: 54 layers, 64 experts;
// DeepSeek-V3: 61 layers, 256 experts). The largest routing matrix is then 1024 × 4096 cells.
inline constexpr int kMaxProfileLayers = 1024;
inline constexpr int kMaxProfileExperts = 4096; // routed experts; shared experts too

// Why a profile's shape is inconsistent, as a sentence naming the field and both numbers
// (`"n_layers" is 1000000; a profile has at most 1024 layers`); nullopt when it is consistent:
// - n_layers ≤ kMaxProfileLayers, n_experts and n_shared_experts ≤ kMaxProfileExperts, k ≤
//   n_experts; no count, time or size is negative;
// - moe_layers: distinct layers below n_layers;
// - routing: distinct layers, each among moe_layers (below n_layers, or below the limit when the
//   profile names neither), every row as long as n_experts (all rows equally long when
//   n_experts is 0: routing stored without a profile);
// - trace_ids: as many as trace_weights, a whole number of positions of moe_layers × k slots,
//   each −1 or an expert below n_experts.
// Every profile the recorder makes is consistent; an import refuses one that is not.
std::optional<QString> profileShapeError(const MessageProfile &p);
// The same profile made consistent by trusting its arrays over its counts, for profiles already
// stored (which the app must show, not refuse): counts are bounded to the limits and raised to
// what the arrays hold (layers), rows that do not fit are dropped or padded, n_experts becomes
// the routing rows' length, and a trace that does not fit the shape is dropped (shown as none).
// Allocates nothing a count in the profile asks for beyond the limits. A consistent profile comes
// back unchanged; afterwards profileShapeError() is nullopt.
MessageProfile boundedProfile(MessageProfile p);

// A lone UTF-16 surrogate in JSON text: a string or key that a file spells with a \uD800–\uDFFF
// escape that is not half of a pair. QJsonDocument keeps it in the QString, but it is no
// character and UTF-8 (the database, every export) cannot hold it: it would come back as U+FFFD.
struct LoneSurrogate {
    QString path;              // where: messages[2].content, presets[0].sampling.stop[1]; "" is the
                               // top level, or unknown when found in the bytes only
    bool inKey = false;        // in one of the keys of the object at path, not in a value
    ushort unit = 0;           // the surrogate, 0xD800..0xDFFF
    qsizetype byteOffset = -1; // of its escape in the raw JSON, when found in the bytes only
};
// The first lone surrogate in a parsed document (with its path) or, should the parser have
// replaced it, in the raw bytes it was parsed from; nullopt when there is none.
std::optional<LoneSurrogate> findLoneSurrogate(const QJsonDocument &doc, const QByteArray &json);

struct Preset {
    qint64 id = 0;
    QString name;
    QString prefix;       // inserted at the start of the composer, e.g. "【技术解析模式】"
    QString systemPrompt; // empty: none
    SamplingParams sampling;
    int position = 0;     // order in the preset bar, 0 first
    QString builtinKey;   // non-empty for the built-in presets ("technical", "creative")
    bool isBuiltin() const { return !builtinKey.isEmpty(); }
    bool operator==(const Preset &) const = default;
};

struct PresetImportResult {
    QList<qint64> importedIds; // appended after the existing presets, in file order
    int skippedDuplicates = 0; // identical to an existing preset (name, prefix, prompt, sampling)
};

// [start, start + length) in UTF-16 code units of the string it belongs to.
struct TextRange {
    int start = 0;
    int length = 0;
    bool operator==(const TextRange &) const = default;
};

struct SearchHit {
    Conversation conversation;
    std::optional<qint64> messageId; // the best-matching message, if message text matched
    QString snippet;                 // plain text around the match in that message ("…" at cuts)
    QList<TextRange> snippetHighlights;
    QList<TextRange> titleHighlights; // matches inside conversation.title
    double score = 0;                 // lower is better (FTS5 bm25 convention)
};

// Everything deleteConversation removed, enough for restoreConversation to put it back with the
// same ids. Messages are in id order, which is parent-before-child.
struct ConversationSnapshot {
    Conversation conversation;
    QList<Message> messages;
    QHash<qint64, MessageMetrics> metrics;
    QHash<qint64, QList<LayerRouting>> routing;
    QHash<qint64, MessageProfile> profiles;
    bool operator==(const ConversationSnapshot &) const = default;
};

struct SiblingInfo {
    QList<qint64> ids; // oldest first; the `< index+1 / ids.size() >` switcher
    int index = -1;    // this message's position in ids; -1 when the message does not exist
};

struct BenchRun {
    qint64 id = 0;
    QDateTime createdAt;
    QJsonObject json;
    bool operator==(const BenchRun &) const = default;
};

// BLOB encodings of the metric and routing columns: little-endian float32 / uint32 arrays.
QByteArray encodeFloat32(const QList<float> &v);
QList<float> decodeFloat32(const QByteArray &b);
QByteArray encodeUInt32(const QList<quint32> &v);
QList<quint32> decodeUInt32(const QByteArray &b);

// Compact BLOBs of message_profiles (formats documented in message_profile_codec.cpp). Decoders
// return nullopt for a BLOB that is not in the format (never a crash on a damaged row).
// textEnds (MessageProfile::tokenTextEnds) are kept when there is one per time.
QByteArray encodeTokenTimes(const QList<qint64> &timesUs, const QList<int> &textEnds = {});
std::optional<QList<qint64>> decodeTokenTimes(const QByteArray &b, QList<int> *textEnds = nullptr);
// margins (MessageProfile::traceMargins) are kept when given: empty writes the first format.
QByteArray encodeRoutingTrace(const QList<qint16> &ids, const QList<float> &weights, int nExperts,
                              const QList<float> &margins = {});
bool decodeRoutingTrace(const QByteArray &b, QList<qint16> *ids, QList<float> *weights,
                        QList<float> *margins = nullptr);
// Schema v5 columns steps and memory_samples; an empty BLOB (or NULL) decodes to no entries.
QByteArray encodeProfileSteps(const QList<ProfileStep> &steps);
std::optional<QList<ProfileStep>> decodeProfileSteps(const QByteArray &b);
QByteArray encodeMemorySamples(const QList<ProfileMemorySample> &samples);
std::optional<QList<ProfileMemorySample>> decodeMemorySamples(const QByteArray &b);
// Schema v6 column step_timeline: an empty BLOB (or NULL) decodes to an empty timeline.
QByteArray encodeStepTimeline(const StepTimeline &t);
std::optional<StepTimeline> decodeStepTimeline(const QByteArray &b);

} // namespace es
