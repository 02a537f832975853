// Tokenizer::from_gguf: the tokenizer a GGUF file describes in its tokenizer.ggml.* metadata.
//
// A GGUF has no tokenizer.json, only llama.cpp's keys: the token strings, their types (1 normal,
// 3 control, 4 user-defined, 6 byte), SentencePiece scores or BPE merges, special ids and flags.
// The pipeline around them is built here the way transformers' GGUF conversion builds it
// (transformers 5.24, integrations/gguf/gguf_tokenizer_mapping.py), since that is the reference the
// fixtures are written with:
//   "llama" (SentencePiece): BPE with byte fallback; the merges, which the file does not list, are
//      recovered from the vocab (every split of a token into two vocab tokens, best score first).
//      Gemma architectures use GemmaTokenizer's pipeline (normalizer " " -> "▁", no prefix
//      space) and rank merges by token position instead of score; others use LlamaTokenizer's
//      (Metaspace with a prefix space on the first word).
//   "gpt2" (byte-level BPE): tokens + merges; tokenizer.ggml.pre picks the split regex (Llama 3,
//      Qwen2, ...); an unknown name keeps GPT-2's ByteLevel regex.
// Control tokens become special added tokens, user-defined ones plain added tokens; both are
// matched whole in the raw text.
#include <algorithm>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "pipeline/tok_internal.h"
#include "weights/gguf.h"

namespace xdna {

using json = nlohmann::json;
using namespace tok;

namespace {

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error("GGUF tokenizer: " + what); }

enum TokenType { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

// Split regexes by tokenizer.ggml.pre (the models' own tokenizer.json regexes).
const char* kLlama3Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* kQwen2Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* kQwen35Split =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* kTekkenSplit =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const char* kGpt4oSplit =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

const char* split_regex_for(const std::string& pre) {
  static const std::pair<const char*, const char*> table[] = {
      {"llama3", kLlama3Split}, {"llama-v3", kLlama3Split}, {"llama-bpe", kLlama3Split},
      {"falcon3", kLlama3Split}, {"falcon-h1", kLlama3Split}, {"pixtral", kLlama3Split},
      {"midm-2.0", kLlama3Split}, {"lfm2", kLlama3Split}, {"jina-v5-nano", kLlama3Split},
      {"dbrx", kLlama3Split}, {"smaug-bpe", kLlama3Split}, {"tekken", kTekkenSplit},
      {"qwen2", kQwen2Split}, {"deepseek-r1-qwen", kQwen2Split}, {"kormo", kQwen2Split},
      {"f2llmv2", kQwen2Split}, {"megrez", kQwen2Split}, {"qwen35", kQwen35Split},
      {"gpt-4o", kGpt4oSplit}, {"llama4", kGpt4oSplit}, {"kanana2", kGpt4oSplit},
      {"talkie", kGpt4oSplit}, {"minimax-m2", kGpt4oSplit},
  };
  for (auto [name, regex] : table)
    if (pre == name) return regex;
  return nullptr;
}

uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// Byte-level vocabularies spell every byte as a printable character; a token using any other
// character is stored raw and gets respelled from its UTF-8 bytes.
std::string byte_level_spelling(const std::string& token) {
  const std::u32string& table = byte_to_char_table();
  std::u32string cs = utf8_to_u32(token);
  bool spelled = std::all_of(cs.begin(), cs.end(), [](char32_t c) { return char_to_byte(c) >= 0; });
  if (spelled) return token;
  std::string out;
  for (unsigned char b : token) append_utf8(out, table[b]);
  return out;
}

// transformers respells a Gemma token that has a space and nothing but whitespace (Python's
// str.isspace, which adds U+001C..U+001F to Unicode White_Space).
bool is_space_run(const std::string& token) {
  if (token.find(' ') == std::string::npos) return false;
  for (char32_t c : utf8_to_u32(token))
    if (!is_whitespace(c) && !(c >= 0x1C && c <= 0x1F)) return false;
  return true;
}

// transformers' generate_merges: every way to cut a token into two vocab tokens is a merge,
// scored by the whole token's score; merges are sorted by (score, left length, right length)
// (descending when `best_first`), ties kept in vocab order and, within a token, by (left id,
// right id). Lengths are in code points.
void recover_merges(Model& m, const std::vector<std::string>& tokens, const std::vector<double>& scores,
                    bool best_first) {
  struct Candidate {
    int32_t left, right, merged;
    double score;
    uint32_t len_left, len_right;
  };
  std::vector<Candidate> all, local;
  std::vector<size_t> cuts;  // byte offsets of code point boundaries
  for (size_t i = 0; i < tokens.size(); i++) {
    const std::string& t = tokens[i];
    auto self = m.vocab.find(t);
    if (self == m.vocab.end() || self->second != static_cast<int32_t>(i)) continue;  // a duplicate: HF's dict keeps one
    cuts.clear();
    for (size_t b = 1; b < t.size(); b++)
      if ((static_cast<unsigned char>(t[b]) & 0xC0) != 0x80) cuts.push_back(b);
    uint32_t total = static_cast<uint32_t>(cuts.size() + 1);
    local.clear();
    for (size_t k = 0; k < cuts.size(); k++) {
      auto l = m.vocab.find(t.substr(0, cuts[k]));
      if (l == m.vocab.end()) continue;
      auto r = m.vocab.find(t.substr(cuts[k]));
      if (r == m.vocab.end()) continue;
      uint32_t len_left = static_cast<uint32_t>(k + 1);
      local.push_back({l->second, r->second, self->second, scores[i], len_left, total - len_left});
    }
    std::sort(local.begin(), local.end(), [](const Candidate& a, const Candidate& b) {
      return a.left != b.left ? a.left < b.left : a.right < b.right;
    });
    all.insert(all.end(), local.begin(), local.end());
  }
  std::stable_sort(all.begin(), all.end(), [best_first](const Candidate& a, const Candidate& b) {
    auto ka = std::make_tuple(a.score, a.len_left, a.len_right), kb = std::make_tuple(b.score, b.len_left, b.len_right);
    return best_first ? ka > kb : ka < kb;
  });
  m.merges.reserve(all.size());
  uint32_t rank = 0;
  for (const auto& c : all) m.merges[pair_key(c.left, c.right)] = {rank++, c.merged};
}

void read_merges(Model& m, const std::vector<std::string>& merges) {
  m.merges.reserve(merges.size());
  uint32_t rank = 0;
  for (const auto& s : merges) {
    size_t sp = s.find(' ');
    if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
      fail("merge '" + s + "' is not two tokens separated by one space");
    std::string a = s.substr(0, sp), b = s.substr(sp + 1);
    auto ia = m.vocab.find(a), ib = m.vocab.find(b), im = m.vocab.find(a + b);
    if (ia == m.vocab.end() || ib == m.vocab.end() || im == m.vocab.end())
      fail("merge '" + s + "' uses a token missing from tokenizer.ggml.tokens");
    m.merges[pair_key(ia->second, ib->second)] = {rank++, im->second};
  }
}

int32_t optional_id(const GgufFile& g, const char* key, size_t n_tokens) {
  if (!g.has(key)) return -1;
  int64_t id = g.get_int(key);
  if (id < 0 || static_cast<size_t>(id) >= n_tokens)
    fail(std::string(key) + " = " + std::to_string(id) + " is outside the " + std::to_string(n_tokens) + " tokens");
  return static_cast<int32_t>(id);
}

bool optional_bool(const GgufFile& g, const char* key, bool fallback) {
  return g.has(key) ? g.get_bool(key) : fallback;
}

}  // namespace

Tokenizer Tokenizer::from_gguf(const GgufFile& g) {
  if (!g.has("tokenizer.ggml.model")) fail("no tokenizer.ggml.model in the metadata");
  const std::string kind = g.get_string("tokenizer.ggml.model");
  const std::string arch = g.get_string("general.architecture", "");
  if (kind != "llama" && kind != "gpt2")
    fail("tokenizer.ggml.model '" + kind + "' is not supported (supported: llama, gpt2)");
  if (!g.has("tokenizer.ggml.tokens")) fail("no tokenizer.ggml.tokens in the metadata");
  const std::vector<std::string> raw = g.get_string_array("tokenizer.ggml.tokens");
  const size_t n = raw.size();
  if (n == 0) fail("tokenizer.ggml.tokens is empty");
  std::vector<int64_t> types;
  if (g.has("tokenizer.ggml.token_type")) {
    types = g.get_int_array("tokenizer.ggml.token_type");
    if (types.size() != n) fail("tokenizer.ggml.token_type has " + std::to_string(types.size()) + " entries for " + std::to_string(n) + " tokens");
  }
  const bool has_merges = g.has("tokenizer.ggml.merges");
  const bool gemma = kind == "llama" && (arch == "gemma" || arch == "gemma2" || arch == "gemma3");
  const bool phi3 = kind == "llama" && arch == "phi3";

  auto t = std::make_unique<TokenizerImpl>();
  Model& m = t->model;
  m.kind = Model::BPE;
  try {
    // ---- vocab (as HF's {token: id} dict: a repeated token keeps its last id)
    std::vector<std::string> tokens = raw;
    for (auto& tok : tokens) {
      if (kind == "gpt2") {
        tok = byte_level_spelling(tok);
      } else if (gemma && is_space_run(tok)) {
        // Gemma stores space runs as real spaces ("  ") but looks them up as "▁▁"
        size_t chars = utf8_to_u32(tok).size();
        tok.clear();
        for (size_t k = 0; k < chars; k++) tok += "\u2581";
      }
    }
    for (size_t i = 0; i < n; i++) m.vocab[tokens[i]] = static_cast<int32_t>(i);

    // ---- merges
    if (has_merges) {
      read_merges(m, g.get_string_array("tokenizer.ggml.merges"));
    } else if (kind == "llama") {
      std::vector<double> scores(n);
      if (gemma) {  // Gemma's scores do not follow its merge order; the token order does
        for (size_t i = 0; i < n; i++) scores[i] = -static_cast<double>(i);
      } else {
        if (!g.has("tokenizer.ggml.scores")) fail("a llama vocab without merges needs tokenizer.ggml.scores");
        scores = g.get_float_array("tokenizer.ggml.scores");
        if (scores.size() != n) fail("tokenizer.ggml.scores has " + std::to_string(scores.size()) + " entries for " + std::to_string(n) + " tokens");
        for (auto& s : scores) s = static_cast<double>(static_cast<float>(s));  // stored as f32
      }
      recover_merges(m, tokens, scores, /*best_first=*/true);
    } else {  // byte-level without merges: by id, lowest first
      std::vector<double> ids(n);
      for (size_t i = 0; i < n; i++) ids[i] = static_cast<double>(i);
      recover_merges(m, tokens, ids, /*best_first=*/false);
    }

    // ---- model options and the pipeline around it (what tokenizer.json would hold)
    json normalizer, pre_tokenizer, decoder;
    if (kind == "llama") {
      m.byte_fallback = true;
      m.fuse_unk = true;
      auto unk = m.vocab.find("<unk>");
      if (unk != m.vocab.end()) m.unk_id = unk->second;
      json strip_decoders = json::array({{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                                         {{"type", "ByteFallback"}},
                                         {{"type", "Fuse"}}});
      if (gemma) {
        normalizer = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}};
        pre_tokenizer = {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "MergedWithPrevious"}};
      } else {
        if (phi3)
          normalizer = {{"type", "Sequence"},
                        {"normalizers", json::array({{{"type", "Prepend"}, {"prepend", "\u2581"}},
                                                     {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}}})}};
        else
          pre_tokenizer = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "first"}, {"split", false}};
        strip_decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
      }
      decoder = {{"type", "Sequence"}, {"decoders", strip_decoders}};
    } else {
      json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
      std::string pre = g.get_string("tokenizer.ggml.pre", "");
      if (const char* split = split_regex_for(pre)) {
        byte_level["use_regex"] = false;
        pre_tokenizer = {{"type", "Sequence"},
                         {"pretokenizers", json::array({{{"type", "Split"}, {"pattern", {{"Regex", split}}}, {"behavior", "Isolated"}},
                                                        byte_level})}};
      } else {
        pre_tokenizer = byte_level;
      }
      decoder = {{"type", "ByteLevel"}};
    }
    if (!normalizer.is_null()) t->normalizer = std::make_unique<Normalizer>(parse_normalizer(normalizer));
    if (!pre_tokenizer.is_null()) t->pre_tokenizer = std::make_unique<PreTokenizer>(parse_pre_tokenizer(pre_tokenizer));
    t->decoder = std::make_unique<Decoder>(parse_decoder(decoder));
    m.finish();

    // ---- added tokens: control -> special, user-defined -> plain; both matched in the raw text
    auto add = [&](const std::string& content, bool special) {
      if (content.empty() || t->added_by_content.count(content)) return;
      auto it = m.vocab.find(content);
      int32_t id = it != m.vocab.end() ? it->second : static_cast<int32_t>(n + t->added.size());
      t->added.push_back({utf8_to_u32(content), id, false, false, false, /*normalized=*/false, special});
      t->added_by_id[id] = content;
      t->added_by_content[content] = id;
    };
    for (size_t i = 0; i < types.size(); i++) {
      // A byte-level control token spelled outside the byte alphabet is a mislabel: skipped.
      if (types[i] == kControl && (kind != "gpt2" || tokens[i] == raw[i])) add(raw[i], true);
    }
    t->bos_id = optional_id(g, "tokenizer.ggml.bos_token_id", n);
    t->eos_id = optional_id(g, "tokenizer.ggml.eos_token_id", n);
    int32_t unk_id = optional_id(g, "tokenizer.ggml.unknown_token_id", n);
    int32_t pad_id = optional_id(g, "tokenizer.ggml.padding_token_id", n);
    for (int32_t id : {t->bos_id, t->eos_id, unk_id, pad_id})
      if (id >= 0) add(raw[static_cast<size_t>(id)], true);
    for (size_t i = 0; i < types.size(); i++)
      if (types[i] == kUserDefined && (m.vocab.count(raw[i]) || t->added_by_content.count(raw[i]))) add(raw[i], false);
    finish_added(*t);

    // ---- post-processing: <bos> $A <eos> as the flags say
    bool add_bos = optional_bool(g, "tokenizer.ggml.add_bos_token", kind == "llama");
    bool add_eos = optional_bool(g, "tokenizer.ggml.add_eos_token", false);
    if (add_bos && t->bos_id >= 0) t->single_template.push_back({false, {t->bos_id}, 0});
    t->single_template.push_back({true, {}, 0});
    if (add_eos && t->eos_id >= 0) t->single_template.push_back({false, {t->eos_id}, 0});
    t->pad_id = pad_id >= 0 ? pad_id : 0;
  } catch (const std::invalid_argument& e) {
    fail(std::string("a token is not valid UTF-8: ") + e.what());
  }
  return Tokenizer(std::move(t));
}

}  // namespace xdna
