// Internal pieces of the tokenizer (see tokenizer.h). Text inside the pipeline is UTF-32
// (std::u32string): normalizers, pre-tokenizers and regexes all work per code point.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "pipeline/tokenizer.h"

namespace xdna::tok {

// ---- Unicode (tok_unicode.cpp) ------------------------------------------------------------
std::u32string utf8_to_u32(std::string_view s);  // throws std::invalid_argument on bad UTF-8
void append_utf8(std::string& out, char32_t c);
std::string u32_to_utf8(std::u32string_view s);
std::string utf8_lossy(std::string_view bytes);  // bad sequences -> U+FFFD (like String::from_utf8_lossy)
bool is_valid_utf8(std::string_view s);

bool is_whitespace(char32_t c);   // Unicode White_Space (Rust char::is_whitespace)
bool is_punctuation(char32_t c);  // ASCII punctuation or general category P*
bool is_numeric(char32_t c);      // general category N* (Rust char::is_numeric)
bool is_control_other(char32_t c);  // general category Cc Cf Co Cs (not Cn, as HF)
bool is_mark_nonspacing(char32_t c);  // Mn (BertNormalizer's strip_accents)
bool is_combining_mark(char32_t c);   // Mn Mc Me (the StripAccents normalizer)
bool is_word_char(char32_t c);    // regex \w: Alphabetic, M, Nd, Pc, Join_Control
enum class NormForm { NFD, NFKD, NFC, NFKC };
std::u32string normalize(std::u32string_view s, NormForm form);
std::u32string lowercase(std::u32string_view s);  // per-char full lowercase (Rust to_lowercase)

// PCRE2 (UTF-32, UCP) regex with Oniguruma-style \s \w \d rewritten to the Unicode properties
// that HF's Oniguruma uses.
class Regex {
 public:
  explicit Regex(const std::string& pattern_utf8, bool literal = false);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  // Non-empty matches, left to right, as [start, end) code point offsets.
  std::vector<std::pair<size_t, size_t>> find_all(std::u32string_view s) const;

 private:
  void* code_ = nullptr;  // pcre2_code_32*
};

// ---- Normalizers and pre-tokenizers (tok_normalize.cpp) ------------------------------------
struct Normalizer {
  enum Kind { Bert, NFD, NFKD, NFC, NFKC, Lowercase, StripAccents, Strip, Replace, Prepend, Sequence };
  Kind kind = Sequence;
  bool clean_text = true, handle_chinese_chars = true, strip_accents = false, lowercase = true;
  bool strip_left = false, strip_right = false;
  std::shared_ptr<Regex> pattern;  // Replace
  std::u32string content;          // Replace: replacement; Prepend: prefix
  std::vector<Normalizer> children;
  void apply(std::u32string& s) const;
};

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

struct Piece {
  std::u32string text;
  bool at_start = false;  // begins at offset 0 of the original input (Metaspace prepend "first")
};

struct PreTokenizer {
  enum Kind { Bert, Whitespace, WhitespaceSplit, Punctuation, Metaspace, ByteLevel, Split, Digits,
              Sequence };
  Kind kind = Sequence;
  SplitBehavior behavior = SplitBehavior::Isolated;
  bool invert = false;
  std::shared_ptr<Regex> pattern;          // Split; ByteLevel's GPT-2 regex when use_regex
  bool add_prefix_space = false;           // ByteLevel
  bool use_regex = true;                   // ByteLevel
  bool individual_digits = false;          // Digits
  char32_t replacement = U'\u2581';        // Metaspace
  enum Prepend { Always, First, Never } prepend = Always;
  bool split = true;                       // Metaspace
  std::vector<PreTokenizer> children;
  void apply(std::vector<Piece>& pieces) const;
};

// ByteLevel's byte <-> printable-char map (GPT-2).
const std::u32string& byte_to_char_table();  // 256 entries
int char_to_byte(char32_t c);                 // -1 when not in the map

// ---- Models (tok_models.cpp) --------------------------------------------------------------
struct Model {
  enum Kind { WordPiece, BPE, Unigram };
  Kind kind = WordPiece;
  std::unordered_map<std::string, int32_t> vocab;
  std::vector<std::string> id_to_token;  // empty string for holes
  int32_t unk_id = -1;
  // WordPiece
  std::string continuing_subword_prefix;  // also BPE
  size_t max_input_chars_per_word = 100;
  // BPE
  std::unordered_map<uint64_t, std::pair<uint32_t, int32_t>> merges;  // (a,b) -> (rank, new id)
  std::string end_of_word_suffix;
  bool byte_fallback = false, fuse_unk = false, ignore_merges = false;
  int32_t byte_ids[256];  // <0xNN> ids (-1 when absent)
  // Unigram
  std::vector<double> scores;
  double min_score = 0;
  size_t max_piece_bytes = 0;

  void finish();  // builds id_to_token, byte_ids, min_score...
  void tokenize(std::string_view word, std::vector<int32_t>& out) const;

 private:
  void wordpiece(std::string_view word, std::vector<int32_t>& out) const;
  void bpe(std::string_view word, std::vector<int32_t>& out) const;
  void unigram(std::string_view word, std::vector<int32_t>& out) const;
};

// ---- Decoders (tokenizer.cpp) -------------------------------------------------------------
struct Decoder {
  enum Kind { WordPiece, ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, BPE, Sequence };
  Kind kind = Sequence;
  std::string prefix = "##";  // WordPiece
  bool cleanup = true;        // WordPiece
  std::string replacement;    // Metaspace (UTF-8), BPE suffix
  bool prepend = true;        // Metaspace: prepend_scheme != never
  std::string pattern, content;  // Replace (literal pattern)
  char32_t strip_char = U' ';
  size_t strip_start = 0, strip_stop = 0;
  std::vector<Decoder> children;
  void apply(std::vector<std::string>& tokens) const;
};

}  // namespace xdna::tok

// ---- The whole tokenizer (tokenizer.cpp; tok_gguf.cpp builds one from GGUF metadata) --------
namespace xdna {

struct AddedToken {
  std::u32string content;  // matched text: normalized form when `normalized`
  int32_t id;
  bool single_word, lstrip, rstrip, normalized, special;
};

struct TemplateItem {
  bool is_sequence;
  std::vector<int32_t> ids;  // special token ids when !is_sequence
  int32_t type_id;
};

struct TokenizerImpl {
  bool esm = false;
  std::unique_ptr<tok::Normalizer> normalizer;
  std::unique_ptr<tok::PreTokenizer> pre_tokenizer;
  tok::Model model;
  std::unique_ptr<tok::Decoder> decoder;
  std::vector<AddedToken> added;  // both raw and normalized ones, longest first
  std::unordered_map<char32_t, std::vector<uint32_t>> added_by_first;  // first char -> indices in `added`
  std::unordered_map<int32_t, std::string> added_by_id;
  std::unordered_map<std::string, int32_t> added_by_content;
  std::vector<int32_t> special_ids;  // sorted
  std::vector<TemplateItem> single_template;  // empty: no post-processor
  int32_t pad_id = -1;
  int32_t bos_id = -1, eos_id = -1;  // GGUF metadata, or the post-processor's first/last token
  size_t file_max_length = 0;

  bool is_special(int32_t id) const { return std::binary_search(special_ids.begin(), special_ids.end(), id); }
  void encode_text(const std::u32string& text, std::vector<int32_t>& ids) const;
  size_t num_special() const {
    size_t n = 0;
    for (auto& t : single_template)
      if (!t.is_sequence) n += t.ids.size();
    return n;
  }
  Encoding post_process(std::vector<int32_t> ids, bool add_special) const;
};

// tokenizer.json's normalizer / pre_tokenizer / decoder objects (tokenizer.cpp); throw
// std::runtime_error on what they do not support.
tok::Normalizer parse_normalizer(const nlohmann::json& j);
tok::PreTokenizer parse_pre_tokenizer(const nlohmann::json& j);
tok::Decoder parse_decoder(const nlohmann::json& j);

// Collects the special ids and orders the added tokens for leftmost-longest matching.
void finish_added(TokenizerImpl& t);

}  // namespace xdna
