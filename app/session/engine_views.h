// Conversions from the engine's types to the session's value types, shared by EngineSession and
// LocalServer. Internal to es_session: it names engine types, which ui/ never sees.
#pragma once

#include "session_types.h"

namespace es {

struct request_metrics;

// A request's profile from its measurements: token times on the engine clock, the routing trace
// over positions (prompt, then generated). tokenTextEnds is set only when textEnds has one entry
// per generated token.
ReplyProfile toReplyProfile(quint64 id, const request_metrics &m, const QList<int> &moeLayers, int nExperts,
                            const QList<int> &textEnds = {});

} // namespace es
