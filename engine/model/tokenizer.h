// ERNIE-4.5 tokenizer: SentencePiece tokenizer.model (Debian's libsentencepiece) plus the
// special tokens named in tokenizer_config.json / special_tokens_map.json / added_tokens.json.
// Special-token strings in the text are matched first (longest match) and become single ids;
// the text between them is SentencePiece-encoded. No BOS is added. Long text is encoded in
// bounded segments where the vocabulary makes that exact, and a text's token count has a lower
// bound from its length alone (max_token_bytes), so servers can refuse before encoding.
#pragma once

#include "engine/core/status.h"

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace es {

struct special_tokens {
    int32_t unk_id = 0;
    int32_t bos_id = 1;   // <s>
    int32_t eos_id = 2;   // </s>
    int32_t pad_id = 0;
    int32_t cls_id = -1;  // <|begin_of_sentence|>
    int32_t sep_id = -1;  // <|end_of_sentence|>
};

class tokenizer {
public:
    // Reads dir/tokenizer.model and, when present, dir/tokenizer_config.json,
    // dir/special_tokens_map.json and dir/added_tokens.json.
    static result<std::unique_ptr<tokenizer>> load(const std::filesystem::path &dir);
    ~tokenizer();

    std::vector<int32_t> encode(std::string_view text) const;
    // encode() that may stop early: once more than `stop_after` ids exist it returns them (a
    // prefix of the full encoding, longer than stop_after) without encoding the rest.
    std::vector<int32_t> encode(std::string_view text, size_t stop_after) const;
    // The most bytes of text one id can stand for: a text of B bytes encodes to at least
    // ceil(B / max_token_bytes()) ids. 0 when the model gives no such bound (a normalizer that
    // may drop or shrink text, or unknown characters without byte fallback).
    size_t max_token_bytes() const { return m_max_token_bytes; }
    // Whether long plain text is encoded in segments (of about k_segment_bytes, cut only where no
    // piece can span the cut, so the ids equal a whole encoding's): a BPE model whose normalizer
    // keeps the text as it is. Otherwise SentencePiece's scratch grows with the whole text.
    bool encodes_in_segments() const { return m_segment_cuts; }
    static constexpr size_t k_segment_bytes = 32 * 1024;
    std::string decode(const std::vector<int32_t> &ids) const;
    // The text of one token as it appears inside a decoded stream ("▁" → " ", byte pieces as bytes).
    std::string token_text(int32_t id) const;
    std::string piece(int32_t id) const;          // raw piece, e.g. "▁the" or "<|end_of_sentence|>"
    int32_t piece_to_id(std::string_view piece) const; // -1 when unknown
    int32_t n_vocab() const;                      // SentencePiece pieces plus added tokens
    bool is_special(int32_t id) const;

    const special_tokens &specials() const { return m_specials; }
    // Ids that end an assistant turn: eos and <|end_of_sentence|> when present.
    std::vector<int32_t> stop_ids() const;

private:
    tokenizer();
    void learn_text_bounds();
    void encode_plain(std::string_view s, std::vector<int32_t> &ids, size_t stop_after) const;
    size_t segment_end(std::string_view s) const;
    bool can_cut(std::string_view s, size_t at) const;

    std::unique_ptr<sentencepiece::SentencePieceProcessor> m_sp;
    special_tokens m_specials;
    std::map<std::string, int32_t, std::less<>> m_added;  // special/added token text → id
    std::map<int32_t, std::string> m_added_by_id;
    size_t m_max_token_bytes = 0;
    bool m_segment_cuts = false;
    uint32_t m_space_code = 0x2581;       // what ' ' becomes before pieces are matched ("▁")
    std::vector<uint64_t> m_piece_pairs;  // sorted: (a << 32 | b) for adjacent characters a b of a piece
};

// Streams text from token ids without splitting UTF-8 characters or byte-fallback sequences:
// push(id) returns the text that became final with this token.
class detokenizer {
public:
    explicit detokenizer(const tokenizer &tok) : m_tok(tok) {}
    std::string push(int32_t id);
    std::string flush();   // whatever is pending (invalid UTF-8 replaced by U+FFFD)

private:
    const tokenizer &m_tok;
    std::vector<int32_t> m_ids;
    size_t m_emitted_bytes = 0;
};

} // namespace es
