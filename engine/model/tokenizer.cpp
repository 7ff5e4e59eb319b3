// The ERNIE-4.5 tokenizer: a SentencePiece processor plus the table of special and added tokens
// read from tokenizer_config.json, special_tokens_map.json and added_tokens.json (HF layout).
// Invariants: m_added maps the text of every special or added token to its id; m_added_by_id
// holds the special ones (decode renders them as their text, is_special() is true); ids are
// looked up in the files and the model, only unk/bos/eos fall back to 0/1/2. The detokenizer
// never emits a split UTF-8 character: trailing byte-fallback pieces wait for their sequence.
#include "engine/model/tokenizer.h"

#include <nlohmann/json.hpp>
#include <sentencepiece_processor.h>

#include <algorithm>
#include <bitset>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <optional>
#include <set>
#include <system_error>
#include <tuple>

namespace es {

using json = nlohmann::json;
namespace fs = std::filesystem;

namespace {

[[noreturn]] void fail(const std::string &msg) { throw load_error(msg); }

// Added-token ids beyond this are refused (the real ERNIE-4.5 vocabulary has 103,424 entries).
constexpr int64_t k_max_token_id = 16'777'215;

// Named tokens whose value must be a string, {"content": string} or null.
constexpr const char *k_named_tokens[] = {"unk_token", "bos_token", "eos_token", "pad_token",
                                          "cls_token", "sep_token", "mask_token"};

std::string describe(const json &v) {
    if (v.is_string()) return "the string \"" + v.get<std::string>() + "\"";
    return std::string("a JSON ") + v.type_name();
}

// Reads a JSON object from `file`; std::nullopt when the file does not exist.
std::optional<json> read_json_object(const fs::path &file) {
    std::error_code ec;
    if (!fs::exists(file, ec)) return std::nullopt;
    std::ifstream in(file, std::ios::binary);
    if (!in) fail(file.string() + ": cannot be read");
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    json j;
    try {
        j = json::parse(text);
    } catch (const json::exception &e) { // parse_error, and out_of_range for a number like 1e999
        std::string what = e.what();
        const size_t p = what.find("] "); // drop nlohmann's "[json.exception.parse_error.101] "
        fail(file.string() + ": not valid JSON (" + (p == std::string::npos ? what : what.substr(p + 2)) +
             ")");
    }
    if (!j.is_object()) fail(file.string() + ": expected a JSON object, found a JSON " + j.type_name());
    return j;
}

// A token given by name: "text", {"content": "text", ...} (an AddedToken) or null (absent).
std::optional<std::string> token_text_of(const json &v, const fs::path &file, const std::string &key) {
    if (v.is_null()) return std::nullopt;
    if (v.is_string()) return v.get<std::string>();
    if (v.is_object()) {
        const auto it = v.find("content");
        if (it != v.end() && it->is_string()) return it->get<std::string>();
        fail(file.string() + ": key '" + key + ".content' is " +
             (it == v.end() ? std::string("missing") : describe(*it)) + ", expected a string");
    }
    fail(file.string() + ": key '" + key + "' is " + describe(v) +
         ", expected a string or {\"content\": string}");
}

// What the three JSON files say, before ids are resolved against the model.
struct token_files {
    std::map<std::string, std::string> named; // "bos_token" → "<s>"
    std::vector<std::string> additional;      // additional_special_tokens
    struct added {
        std::string text;
        int64_t id;
        bool special;
    };
    std::vector<added> added_tokens; // added_tokens.json, then added_tokens_decoder
};

int64_t parse_token_id(const std::string &s, const fs::path &file, const std::string &key) {
    int64_t id = -1;
    bool ok = !s.empty() && s.size() <= 9 &&
              std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (ok) id = std::stoll(s);
    if (!ok || id > k_max_token_id)
        fail(file.string() + ": key '" + key + "' is not a token id (expected an integer in [0, " +
             std::to_string(k_max_token_id) + "])");
    return id;
}

// tokenizer_config.json and special_tokens_map.json share the named-token keys.
void read_named_tokens(const json &j, const fs::path &file, token_files &out) {
    for (const char *key : k_named_tokens) {
        const auto it = j.find(key);
        if (it == j.end()) continue;
        if (auto text = token_text_of(*it, file, key)) out.named[key] = *text;
    }
    // Other "*_token" keys (sys_start_token, header_start_token, …) name special tokens too when
    // they hold a string or an AddedToken; anything else under such a key (add_bos_token: false)
    // is not a token and is left alone.
    for (const auto &[key, v] : j.items()) {
        const bool named_like = key.size() > 6 && key.ends_with("_token") && !key.starts_with("add_");
        const bool checked_above =
            std::find(std::begin(k_named_tokens), std::end(k_named_tokens), key) != std::end(k_named_tokens);
        if (!named_like || checked_above) continue;
        if (v.is_string() || (v.is_object() && v.contains("content")))
            if (auto text = token_text_of(v, file, key)) out.named[key] = *text;
    }
    if (const auto it = j.find("additional_special_tokens"); it != j.end() && !it->is_null()) {
        if (!it->is_array())
            fail(file.string() + ": key 'additional_special_tokens' is " + describe(*it) +
                 ", expected a list");
        for (size_t i = 0; i < it->size(); ++i)
            if (auto text =
                    token_text_of((*it)[i], file, "additional_special_tokens[" + std::to_string(i) + "]"))
                out.additional.push_back(*text);
    }
}

token_files read_token_files(const fs::path &dir) {
    token_files out;
    if (auto j = read_json_object(dir / "added_tokens.json")) {
        const fs::path file = dir / "added_tokens.json";
        for (const auto &[text, v] : j->items()) {
            if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > k_max_token_id)
                fail(file.string() + ": key '" + text + "' is " + describe(v) +
                     ", expected a token id in [0, " + std::to_string(k_max_token_id) + "]");
            out.added_tokens.push_back({text, v.get<int64_t>(), false});
        }
    }
    if (auto j = read_json_object(dir / "tokenizer_config.json")) {
        const fs::path file = dir / "tokenizer_config.json";
        if (const auto it = j->find("added_tokens_decoder"); it != j->end() && !it->is_null()) {
            if (!it->is_object())
                fail(file.string() + ": key 'added_tokens_decoder' is " + describe(*it) +
                     ", expected an object {id: {\"content\": …, \"special\": …}}");
            for (const auto &[id_str, v] : it->items()) {
                const std::string key = "added_tokens_decoder." + id_str;
                const int64_t id = parse_token_id(id_str, file, key);
                if (!v.is_object())
                    fail(file.string() + ": key '" + key + "' is " + describe(v) + ", expected an object");
                auto text = token_text_of(v, file, key);
                if (!text) fail(file.string() + ": key '" + key + ".content' is missing, expected a string");
                bool special = false;
                if (const auto s = v.find("special"); s != v.end()) {
                    if (!s->is_boolean())
                        fail(file.string() + ": key '" + key + ".special' is " + describe(*s) +
                             ", expected true or false");
                    special = s->get<bool>();
                }
                out.added_tokens.push_back({*text, id, special});
            }
        }
        read_named_tokens(*j, file, out);
    }
    // special_tokens_map.json is written by save_pretrained next to tokenizer_config.json; where
    // both name a token, the map wins (it is the later, explicit statement).
    if (auto j = read_json_object(dir / "special_tokens_map.json"))
        read_named_tokens(*j, dir / "special_tokens_map.json", out);
    return out;
}

// Byte value of a byte-fallback piece ("<0xE4>" → 0xE4), or -1.
int byte_piece_value(std::string_view p) {
    if (p.size() != 6 || p.substr(0, 3) != "<0x" || p[5] != '>') return -1;
    int v = 0;
    for (char c : p.substr(3, 2)) {
        v *= 16;
        if (c >= '0' && c <= '9')
            v += c - '0';
        else if (c >= 'A' && c <= 'F')
            v += c - 'A' + 10;
        else if (c >= 'a' && c <= 'f')
            v += c - 'a' + 10;
        else
            return -1;
    }
    return v;
}

// Length of the UTF-8 sequence a lead byte starts (1 for ASCII and for bytes that cannot lead).
int utf8_sequence_length(unsigned char c) {
    if (c >= 0xC2 && c <= 0xDF) return 2;
    if (c >= 0xE0 && c <= 0xEF) return 3;
    if (c >= 0xF0 && c <= 0xF4) return 4;
    return 1;
}

bool is_continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

// How many trailing bytes of `bytes` form the start of a UTF-8 character that is not complete yet.
size_t incomplete_utf8_tail(const std::vector<unsigned char> &bytes) {
    const size_t n = bytes.size();
    for (size_t k = 1; k <= std::min<size_t>(n, 4); ++k) {
        const unsigned char c = bytes[n - k];
        if (is_continuation(c)) continue;
        return utf8_sequence_length(c) > static_cast<int>(k) ? k : 0;
    }
    return 0;
}

// Replaces every invalid UTF-8 sequence in s by U+FFFD.
std::string sanitize_utf8(std::string_view s) {
    std::string out;
    out.reserve(s.size());
    size_t i = 0;
    while (i < s.size()) {
        const auto c = static_cast<unsigned char>(s[i]);
        const int len = c < 0x80 ? 1 : utf8_sequence_length(c) == 1 ? 0 : utf8_sequence_length(c);
        bool ok = len > 0 && i + len <= s.size();
        for (int k = 1; ok && k < len; ++k) ok = is_continuation(static_cast<unsigned char>(s[i + k]));
        if (ok && len == 3) { // no overlongs, no surrogates
            const auto c1 = static_cast<unsigned char>(s[i + 1]);
            ok = !(c == 0xE0 && c1 < 0xA0) && !(c == 0xED && c1 >= 0xA0);
        } else if (ok && len == 4) {
            const auto c1 = static_cast<unsigned char>(s[i + 1]);
            ok = !(c == 0xF0 && c1 < 0x90) && !(c == 0xF4 && c1 >= 0x90);
        }
        if (ok) {
            out.append(s.substr(i, len));
            i += len;
        } else {
            out += "\xEF\xBF\xBD";
            ++i;
        }
    }
    return out;
}

// What decides how text maps onto pieces, read from the SentencePiece ModelProto's wire format
// (libsentencepiece installs no header for the message types). Field numbers and defaults are
// sentencepiece_model.proto's.
struct sp_spec {
    bool parsed = false;
    int model_type = 1;                  // TrainerSpec.model_type (3): 1 unigram, 2 BPE, 3 word, 4 char
    bool byte_fallback = false;          // TrainerSpec.byte_fallback (35)
    bool identity = true;                // NormalizerSpec.precompiled_charsmap (2) is empty
    bool add_dummy_prefix = true;        // NormalizerSpec (3)
    bool remove_extra_whitespaces = true; // NormalizerSpec (4)
    bool escape_whitespaces = true;      // NormalizerSpec (5)
};

// A protobuf wire-format reader over one message: next() yields (field, wire type, value or bytes).
struct wire_reader {
    std::string_view buf;
    size_t pos = 0;
    bool failed = false;

    bool varint(uint64_t &v) {
        v = 0;
        for (int shift = 0; shift < 64 && pos < buf.size(); shift += 7) {
            const auto c = static_cast<unsigned char>(buf[pos++]);
            v |= uint64_t(c & 0x7F) << shift;
            if (c < 0x80) return true;
        }
        return false;
    }
    bool next(uint32_t &field, uint64_t &value, std::string_view &bytes) {
        if (failed || pos >= buf.size()) return false;
        uint64_t key = 0;
        if (!varint(key)) return (failed = true, false);
        field = uint32_t(key >> 3);
        switch (key & 7) {
        case 0:
            if (!varint(value)) return (failed = true, false);
            return true;
        case 1:
        case 5: {
            const size_t n = (key & 7) == 1 ? 8 : 4;
            if (buf.size() - pos < n) return (failed = true, false);
            pos += n;
            value = 0;
            return true;
        }
        case 2: {
            uint64_t n = 0;
            if (!varint(n) || n > buf.size() - pos) return (failed = true, false);
            bytes = buf.substr(pos, size_t(n));
            pos += size_t(n);
            return true;
        }
        default: // groups: not used by ModelProto
            return (failed = true, false);
        }
    }
};

sp_spec read_sp_spec(std::string_view model_proto) {
    sp_spec spec;
    wire_reader top{model_proto};
    uint32_t field = 0;
    uint64_t value = 0;
    std::string_view bytes;
    while (top.next(field, value, bytes)) {
        if (field != 2 && field != 3) continue;
        wire_reader sub{bytes};
        uint32_t f = 0;
        uint64_t v = 0;
        std::string_view b;
        while (sub.next(f, v, b)) {
            if (field == 2 && f == 3) spec.model_type = int(v);
            if (field == 2 && f == 35) spec.byte_fallback = v != 0;
            if (field == 3 && f == 2) spec.identity = b.empty();
            if (field == 3 && f == 3) spec.add_dummy_prefix = v != 0;
            if (field == 3 && f == 4) spec.remove_extra_whitespaces = v != 0;
            if (field == 3 && f == 5) spec.escape_whitespaces = v != 0;
        }
        if (sub.failed) return {};
    }
    spec.parsed = !top.failed;
    return spec;
}

// The code point of the valid UTF-8 character that starts at s[i] and its length; length 0 when
// the bytes there are not one (SentencePiece's rule: no overlongs, no surrogates, ≤ U+10FFFF).
std::pair<uint32_t, size_t> decode_utf8(std::string_view s, size_t i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) return {c, 1};
    const size_t len = size_t(utf8_sequence_length(c));
    if (len == 1 || i + len > s.size()) return {0, 0};
    uint32_t cp = c & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
    for (size_t k = 1; k < len; ++k) {
        const auto b = static_cast<unsigned char>(s[i + k]);
        if (!is_continuation(b)) return {0, 0};
        cp = cp << 6 | (b & 0x3F);
    }
    const uint32_t min_cp = len == 2 ? 0x80 : len == 3 ? 0x800 : 0x10000;
    if (cp < min_cp || (cp >= 0xD800 && cp < 0xE000) || cp > 0x10FFFF) return {0, 0};
    return {cp, len};
}

} // namespace

tokenizer::tokenizer() : m_sp(std::make_unique<sentencepiece::SentencePieceProcessor>()) {}
tokenizer::~tokenizer() = default;

result<std::unique_ptr<tokenizer>> tokenizer::load(const fs::path &dir) {
    return catch_errors([&]() -> std::unique_ptr<tokenizer> {
        const fs::path model_file = dir / "tokenizer.model";
        std::error_code ec;
        if (!fs::exists(model_file, ec))
            fail(model_file.string() + ": not found (expected a SentencePiece tokenizer.model)");
        if (!fs::is_regular_file(model_file, ec)) fail(model_file.string() + ": not a regular file");

        std::unique_ptr<tokenizer> tok(new tokenizer());
        if (const auto st = tok->m_sp->Load(model_file.string()); !st.ok()) {
            // libsentencepiece reports a protobuf parse failure as its source line; say it plainly.
            std::string why = st.message();
            if (why.find("ParseFromArray") != std::string::npos)
                why = "the file does not parse as a ModelProto";
            fail(model_file.string() + ": not a valid SentencePiece model (" + why + ")");
        }
        const int32_t sp_size = tok->m_sp->GetPieceSize();
        if (sp_size <= 0) fail(model_file.string() + ": not a valid SentencePiece model (no pieces)");

        const token_files files = read_token_files(dir);

        // Added tokens first: their ids are stated outright. added_tokens_decoder comes after
        // added_tokens.json in the list and wins for the same text.
        for (const auto &a : files.added_tokens) {
            if (const auto it = tok->m_added.find(a.text); it != tok->m_added.end())
                tok->m_added_by_id.erase(it->second);
            tok->m_added[a.text] = static_cast<int32_t>(a.id);
            if (a.special) tok->m_added_by_id[static_cast<int32_t>(a.id)] = a.text;
        }

        // A named special token gets the id its added entry states, or its piece's id in the model.
        auto resolve = [&](const std::string &text) -> int32_t {
            if (const auto it = tok->m_added.find(text); it != tok->m_added.end()) return it->second;
            const int id = tok->m_sp->PieceToId(text);
            if (id >= 0 && id < sp_size && tok->m_sp->IdToPiece(id) == text) return id;
            return -1;
        };
        auto mark_special = [&](int32_t id, const std::string &text) {
            if (id < 0) return;
            tok->m_added[text] = id;
            tok->m_added_by_id[id] = text;
        };
        std::vector<std::string> special_texts;
        for (const auto &[key, text] : files.named) special_texts.push_back(text);
        special_texts.insert(special_texts.end(), files.additional.begin(), files.additional.end());
        for (const auto &text : special_texts) mark_special(resolve(text), text);

        // The ids the engine needs by role; unk/bos/eos fall back to the model's own (or 0/1/2).
        auto named_id = [&](const char *key) -> int32_t {
            const auto it = files.named.find(key);
            return it == files.named.end() ? -1 : resolve(it->second);
        };
        auto with_fallback = [&](int32_t id, int sp_id, int32_t fallback) -> int32_t {
            if (id >= 0) return id;
            id = (sp_id >= 0 && sp_id < sp_size) ? sp_id : fallback;
            if (id < sp_size && (tok->m_sp->IsControl(id) || tok->m_sp->IsUnknown(id)))
                mark_special(id, tok->m_sp->IdToPiece(id));
            return id;
        };
        special_tokens &sp = tok->m_specials;
        sp.unk_id = with_fallback(named_id("unk_token"), tok->m_sp->unk_id(), 0);
        sp.bos_id = with_fallback(named_id("bos_token"), tok->m_sp->bos_id(), 1);
        sp.eos_id = with_fallback(named_id("eos_token"), tok->m_sp->eos_id(), 2);
        sp.pad_id = named_id("pad_token");
        if (sp.pad_id < 0) sp.pad_id = tok->m_sp->pad_id() >= 0 ? tok->m_sp->pad_id() : sp.unk_id;
        sp.cls_id = named_id("cls_token");
        sp.sep_id = named_id("sep_token");
        tok->learn_text_bounds();
        return tok;
    });
}

// The bound holds when normalizing never shrinks text (an identity charsmap, spaces kept: ' '
// only grows into "▁", a dummy prefix only adds) and every id stands for a piece's text, one
// byte (byte fallback instead of <unk>, which would swallow a run of unknown characters) or a
// special/added token's text matched in the raw text. Then the ids' texts cover the text.
// Segment cuts are exact for BPE: a merge joins adjacent symbols into a piece, so when no
// piece holds the two characters on either side of a cut, no symbol ever spans it and both
// sides merge exactly as they would alone (the merge order within a side is unchanged: it is
// by score, then position). Without a dummy prefix or whitespace removal, encoding a segment
// normalizes it as the whole text would.
void tokenizer::learn_text_bounds() {
    const sp_spec spec = read_sp_spec(m_sp->serialized_model_proto());
    const bool keeps_text = spec.parsed && spec.identity && !spec.remove_extra_whitespaces;
    m_space_code = spec.escape_whitespaces ? 0x2581 : 0x20;
    size_t longest = 1;
    std::vector<uint64_t> pairs;
    for (int id = 0; id < m_sp->GetPieceSize(); ++id) {
        if (m_sp->IsControl(id) || m_sp->IsUnknown(id) || m_sp->IsByte(id)) continue;
        const std::string &p = m_sp->IdToPiece(id);
        longest = std::max(longest, p.size());
        std::optional<uint32_t> prev;
        for (size_t i = 0; i < p.size();) {
            const auto [cp, len] = decode_utf8(p, i);
            if (len == 0) { // not a character (never in a text piece): skip the byte
                prev.reset();
                ++i;
                continue;
            }
            if (prev) pairs.push_back(uint64_t(*prev) << 32 | cp);
            prev = cp;
            i += len;
        }
    }
    for (const auto &[text, id] : m_added) longest = std::max(longest, text.size());
    const bool bounded_ids = spec.byte_fallback && (spec.model_type == 1 || spec.model_type == 2);
    m_max_token_bytes = keeps_text && bounded_ids ? longest : 0;
    m_segment_cuts = keeps_text && spec.model_type == 2 && !spec.add_dummy_prefix;
    std::sort(pairs.begin(), pairs.end());
    pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());
    m_piece_pairs = m_segment_cuts ? std::move(pairs) : std::vector<uint64_t>{};
}

// A cut before s[at] is exact when both neighbours are whole characters and no piece holds
// them side by side (spaces compared as the "▁" pieces hold).
bool tokenizer::can_cut(std::string_view s, size_t at) const {
    if (at == 0 || at >= s.size() || is_continuation(static_cast<unsigned char>(s[at]))) return false;
    size_t lead = at - 1;
    while (lead > 0 && at - lead < 4 && is_continuation(static_cast<unsigned char>(s[lead]))) --lead;
    const auto [a, a_len] = decode_utf8(s, lead);
    const auto [b, b_len] = decode_utf8(s, at);
    if (a_len == 0 || lead + a_len != at || b_len == 0) return false;
    const auto key = [this](uint32_t l, uint32_t r) {
        return uint64_t(l == 0x20 ? m_space_code : l) << 32 | (r == 0x20 ? m_space_code : r);
    };
    return !std::binary_search(m_piece_pairs.begin(), m_piece_pairs.end(), key(a, b));
}

// Where the first segment of s ends: an exact cut near k_segment_bytes (searched back to half
// of it, then forward), or the whole of s when it has none.
size_t tokenizer::segment_end(std::string_view s) const {
    if (!m_segment_cuts || s.size() <= k_segment_bytes) return s.size();
    for (size_t at = k_segment_bytes; at > k_segment_bytes / 2; --at)
        if (can_cut(s, at)) return at;
    for (size_t at = k_segment_bytes + 1; at < s.size(); ++at)
        if (can_cut(s, at)) return at;
    return s.size();
}

void tokenizer::encode_plain(std::string_view s, std::vector<int32_t> &ids, size_t stop_after) const {
    std::vector<int> piece_ids;
    while (!s.empty() && ids.size() <= stop_after) {
        const size_t end = segment_end(s);
        piece_ids.clear();
        m_sp->Encode(s.substr(0, end), &piece_ids).IgnoreError(); // fails only without a model, which load() rules out
        ids.insert(ids.end(), piece_ids.begin(), piece_ids.end());
        s.remove_prefix(end);
    }
}

std::vector<int32_t> tokenizer::encode(std::string_view text) const { return encode(text, SIZE_MAX); }

std::vector<int32_t> tokenizer::encode(std::string_view text, size_t stop_after) const {
    std::vector<int32_t> ids;
    auto encode_plain = [&](std::string_view s) { this->encode_plain(s, ids, stop_after); };
    // Special/added token strings are matched first, longest first; text between them goes to
    // SentencePiece. The first-byte filter keeps the scan linear for ordinary text.
    std::bitset<256> first_bytes;
    size_t max_len = 0;
    for (const auto &[t, id] : m_added) {
        if (t.empty()) continue;
        first_bytes.set(static_cast<unsigned char>(t[0]));
        max_len = std::max(max_len, t.size());
    }
    size_t start = 0, pos = 0;
    while (pos < text.size() && ids.size() <= stop_after) {
        size_t match_len = 0;
        int32_t match_id = -1;
        if (first_bytes.test(static_cast<unsigned char>(text[pos]))) {
            for (size_t len = std::min(max_len, text.size() - pos); len > 0; --len) {
                const auto it = m_added.find(text.substr(pos, len));
                if (it != m_added.end()) {
                    match_len = len;
                    match_id = it->second;
                    break;
                }
            }
        }
        if (match_len == 0) {
            ++pos;
            continue;
        }
        encode_plain(text.substr(start, pos - start));
        ids.push_back(match_id);
        pos += match_len;
        start = pos;
    }
    if (ids.size() <= stop_after) encode_plain(text.substr(start));
    return ids;
}

namespace {

// Text of a non-special added token by id (rare: linear in the number of added tokens).
const std::string *find_added_text(const std::map<std::string, int32_t, std::less<>> &added, int32_t id) {
    for (const auto &[t, i] : added)
        if (i == id) return &t;
    return nullptr;
}

} // namespace

std::string tokenizer::decode(const std::vector<int32_t> &ids) const {
    const int32_t sp_size = m_sp->GetPieceSize();
    std::string out;
    std::vector<int> run; // consecutive SentencePiece ids, decoded together (byte pieces group)
    auto flush_run = [&] {
        if (run.empty()) return;
        out += m_sp->DecodeIds(run);
        run.clear();
    };
    for (const int32_t id : ids) {
        if (const auto it = m_added_by_id.find(id); it != m_added_by_id.end()) {
            flush_run();
            out += it->second;
        } else if (id >= 0 && id < sp_size) {
            if (m_sp->IsControl(id) || m_sp->IsUnknown(id)) {
                flush_run();
                out += m_sp->IdToPiece(id);
            } else {
                run.push_back(id);
            }
        } else if (const std::string *t = id >= sp_size ? find_added_text(m_added, id) : nullptr) {
            flush_run();
            out += *t;
        }
        // Any other id is not a token of this tokenizer (e.g. a model vocabulary padded past the
        // tokenizer's): it renders as nothing.
    }
    flush_run();
    return out;
}

std::string tokenizer::piece(int32_t id) const {
    if (const auto it = m_added_by_id.find(id); it != m_added_by_id.end()) return it->second;
    if (id >= 0 && id < m_sp->GetPieceSize()) return m_sp->IdToPiece(id);
    if (const std::string *t = find_added_text(m_added, id)) return *t;
    return {};
}

std::string tokenizer::token_text(int32_t id) const {
    if (const auto it = m_added_by_id.find(id); it != m_added_by_id.end()) return it->second;
    if (id < 0 || id >= m_sp->GetPieceSize()) return piece(id);
    const std::string &p = m_sp->IdToPiece(id);
    if (m_sp->IsByte(id)) {
        const int b = byte_piece_value(p);
        return b < 0 ? std::string() : std::string(1, static_cast<char>(b));
    }
    if (m_sp->IsControl(id) || m_sp->IsUnknown(id)) return p;
    std::string out;
    static constexpr std::string_view k_space = "\xE2\x96\x81"; // "▁"
    for (size_t i = 0; i < p.size();) {
        if (p.compare(i, k_space.size(), k_space) == 0) {
            out += ' ';
            i += k_space.size();
        } else {
            out += p[i++];
        }
    }
    return out;
}

int32_t tokenizer::piece_to_id(std::string_view p) const {
    if (const auto it = m_added.find(p); it != m_added.end()) return it->second;
    const int id = m_sp->PieceToId(p);
    if (id >= 0 && id < m_sp->GetPieceSize() && m_sp->IdToPiece(id) == p) return id;
    return -1;
}

int32_t tokenizer::n_vocab() const {
    int32_t n = m_sp->GetPieceSize();
    for (const auto &[t, id] : m_added) n = std::max(n, id + 1);
    return n;
}

bool tokenizer::is_special(int32_t id) const {
    if (m_added_by_id.count(id)) return true;
    return id >= 0 && id < m_sp->GetPieceSize() && (m_sp->IsControl(id) || m_sp->IsUnknown(id));
}

std::vector<int32_t> tokenizer::stop_ids() const {
    std::vector<int32_t> ids{m_specials.eos_id};
    auto add = [&](int32_t id) {
        if (id >= 0 && std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
    };
    add(piece_to_id("<|end_of_sentence|>"));
    return ids;
}

// ---- detokenizer ----------------------------------------------------------------------------

namespace {

// The byte value of id when it is a byte-fallback piece, else -1.
int byte_of(const tokenizer &tok, int32_t id) {
    if (tok.is_special(id)) return -1;
    return byte_piece_value(tok.piece(id));
}

} // namespace

std::string detokenizer::push(int32_t id) {
    m_ids.push_back(id);

    // Trailing byte pieces that start a UTF-8 character but do not finish it yet stay pending:
    // SentencePiece would render them as U+FFFD now and as the character once it is complete.
    std::vector<unsigned char> tail;
    for (size_t i = m_ids.size(); i > 0 && tail.size() < 4; --i) {
        const int b = byte_of(m_tok, m_ids[i - 1]);
        if (b < 0) break;
        tail.insert(tail.begin(), static_cast<unsigned char>(b));
    }
    const size_t n_pending = incomplete_utf8_tail(tail);
    const size_t n_final = m_ids.size() - n_pending;

    const std::string text = m_tok.decode(std::vector<int32_t>(m_ids.begin(), m_ids.begin() + n_final));
    // Belt and braces: never end a chunk inside a character, whatever the pieces were.
    std::vector<unsigned char> last(text.end() - std::min<size_t>(text.size(), 4), text.end());
    const size_t end = text.size() - incomplete_utf8_tail(last);

    std::string out;
    if (end > m_emitted_bytes) {
        out = text.substr(m_emitted_bytes, end - m_emitted_bytes);
        m_emitted_bytes = end;
    }
    // Everything is out and the last token is a whole token (not a byte piece): keep only it, as
    // context for the next token (decoding is concatenative from there), so a long stream costs
    // O(1) per token instead of re-decoding everything.
    if (n_pending == 0 && end == text.size() && m_ids.size() > 1 && byte_of(m_tok, m_ids.back()) < 0) {
        m_ids.erase(m_ids.begin(), m_ids.end() - 1);
        m_emitted_bytes = m_tok.decode(m_ids).size();
    }
    return out;
}

std::string detokenizer::flush() {
    const std::string text = m_tok.decode(m_ids);
    std::string out =
        text.size() > m_emitted_bytes ? sanitize_utf8(std::string_view(text).substr(m_emitted_bytes)) : "";
    m_ids.clear();
    m_emitted_bytes = 0;
    return out;
}

} // namespace es
