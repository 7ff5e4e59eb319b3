// Mode-prefix presets outside the database: the built-in ones, and the JSON exchange format used
// by export/import. Built-ins are owned by this code (ChatStore refreshes their text at every
// open, keeping the user's ordering); user presets are owned by the database.
//
// Exchange format, version 1 (UTF-8 JSON; readers ignore unknown keys):
//   {
//     "format":  "expertscope.presets",   // required, exactly this string
//     "version": 1,                       // required; a reader refuses versions it does not know
//     "presets": [                        // required; array order is the preset-bar order
//       { "name":          "…",           // required, non-empty string
//         "prefix":        "…",           // optional string, default ""
//         "system_prompt": "…",           // optional string, default ""
//         "sampling":      { "temperature": 0.3, "top_p": 0.8, … } }  // optional, SamplingParams keys
//     ]
//   }
// Ids, positions and the built-in flag are not exported: an import always adds user presets.
#pragma once

#include "storage_types.h"

#include <QByteArray>
#include <QList>
#include <QString>

namespace es {

constexpr int kPresetFormatVersion = 1;

// The built-in presets in their default order: 【技术解析模式】 ("technical") and
// 【创意写作模式】 ("creative"). ids are 0; builtinKey and position are set.
QList<Preset> builtinPresets();

QByteArray exportPresetsJson(const QList<Preset> &presets);

// Parses an export. On failure returns nullopt and sets *error to a sentence naming what is
// wrong (which preset, which key, what was expected). Returned presets have id 0, no builtinKey,
// and positions 0..n-1 in file order.
std::optional<QList<Preset>> parsePresetsJson(const QByteArray &json, QString *error);

} // namespace es
