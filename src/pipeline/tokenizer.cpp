// Tokenizer: loading tokenizer.json / ESM vocab.txt, added tokens, the encode pipeline,
// post-processing, batching and decoding.
#include "pipeline/tokenizer.h"

#include <algorithm>
#include <limits>
#include <type_traits>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "pipeline/tok_internal.h"
#include "weights/gguf.h"

namespace xdna {

using json = nlohmann::json;
using namespace tok;

// ---- JSON helpers -----------------------------------------------------------------------------
[[noreturn]] static void fail(const std::string& what) { throw std::runtime_error("tokenizer.json: " + what); }

static const json& field(const json& j, const char* name, const char* where) {
  if (!j.is_object() || !j.contains(name)) fail(std::string(where) + " has no '" + name + "'");
  return j.at(name);
}

// An integer of type T: JSON integers only, in T's range (nlohmann's get<int>() of 1e300 is an
// undefined float conversion and of 2^40 a silent truncation).
template <class T>
static T int_value(const json& v, const std::string& what) {
  if (!v.is_number_integer()) fail("unexpected value: " + what + " must be an integer, not " + v.dump());
  const bool fits = v.is_number_unsigned()
                        ? v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max())
                        : v.get<int64_t>() >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
                              (v.get<int64_t>() < 0 || static_cast<uint64_t>(v.get<int64_t>()) <=
                                                           static_cast<uint64_t>(std::numeric_limits<T>::max()));
  if (!fits) fail("unexpected value: " + what + " " + v.dump() + " is out of range");
  return v.is_number_unsigned() ? static_cast<T>(v.get<uint64_t>()) : static_cast<T>(v.get<int64_t>());
}

template <class T>
static T get_or(const json& j, const char* name, T fallback) {
  if (!j.is_object() || !j.contains(name) || j.at(name).is_null()) return fallback;
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) return int_value<T>(j.at(name), name);
  else return j.at(name).get<T>();
}

static std::u32string u32(const std::string& s) { return utf8_to_u32(s); }

static std::shared_ptr<Regex> parse_pattern(const json& p, const char* where) {
  if (p.is_object() && p.contains("String")) return std::make_shared<Regex>(p["String"].get<std::string>(), true);
  if (p.is_object() && p.contains("Regex")) return std::make_shared<Regex>(p["Regex"].get<std::string>());
  fail(std::string(where) + ": pattern must be {\"String\": ...} or {\"Regex\": ...}");
}

static SplitBehavior parse_behavior(const std::string& b) {
  if (b == "Removed") return SplitBehavior::Removed;
  if (b == "Isolated") return SplitBehavior::Isolated;
  if (b == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (b == "Contiguous") return SplitBehavior::Contiguous;
  fail("unknown split behavior '" + b + "'");
}

Normalizer parse_normalizer(const json& j) {
  Normalizer n;
  std::string type = field(j, "type", "normalizer").get<std::string>();
  if (type == "BertNormalizer") {
    n.kind = Normalizer::Bert;
    n.clean_text = get_or(j, "clean_text", true);
    n.handle_chinese_chars = get_or(j, "handle_chinese_chars", true);
    n.lowercase = get_or(j, "lowercase", true);
    n.strip_accents = get_or(j, "strip_accents", n.lowercase);  // null: follows lowercase
  } else if (type == "NFD") n.kind = Normalizer::NFD;
  else if (type == "NFKD") n.kind = Normalizer::NFKD;
  else if (type == "NFC") n.kind = Normalizer::NFC;
  else if (type == "NFKC") n.kind = Normalizer::NFKC;
  else if (type == "Lowercase") n.kind = Normalizer::Lowercase;
  else if (type == "StripAccents") n.kind = Normalizer::StripAccents;
  else if (type == "Strip") {
    n.kind = Normalizer::Strip;
    n.strip_left = get_or(j, "strip_left", true);
    n.strip_right = get_or(j, "strip_right", true);
  } else if (type == "Replace") {
    n.kind = Normalizer::Replace;
    n.pattern = parse_pattern(field(j, "pattern", "Replace normalizer"), "Replace normalizer");
    n.content = u32(field(j, "content", "Replace normalizer").get<std::string>());
  } else if (type == "Prepend") {
    n.kind = Normalizer::Prepend;
    n.content = u32(field(j, "prepend", "Prepend normalizer").get<std::string>());
  } else if (type == "Sequence") {
    for (const auto& c : field(j, "normalizers", "Sequence normalizer")) n.children.push_back(parse_normalizer(c));
  } else {
    fail("unsupported normalizer type '" + type + "'");
  }
  return n;
}

static const char* kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

PreTokenizer parse_pre_tokenizer(const json& j) {
  PreTokenizer p;
  std::string type = field(j, "type", "pre_tokenizer").get<std::string>();
  if (type == "BertPreTokenizer") p.kind = PreTokenizer::Bert;
  else if (type == "WhitespaceSplit") p.kind = PreTokenizer::WhitespaceSplit;
  else if (type == "Whitespace") {
    p.kind = PreTokenizer::Whitespace;
    p.pattern = std::make_shared<Regex>(R"(\w+|[^\w\s]+)");
    p.invert = true;  // the matches are the words
    p.behavior = SplitBehavior::Removed;
  } else if (type == "Punctuation") {
    p.kind = PreTokenizer::Punctuation;
    p.behavior = parse_behavior(get_or<std::string>(j, "behavior", "Isolated"));
  } else if (type == "Digits") {
    p.kind = PreTokenizer::Digits;
    p.individual_digits = get_or(j, "individual_digits", false);
  } else if (type == "Split") {
    p.kind = PreTokenizer::Split;
    p.pattern = parse_pattern(field(j, "pattern", "Split pre_tokenizer"), "Split pre_tokenizer");
    p.behavior = parse_behavior(field(j, "behavior", "Split pre_tokenizer").get<std::string>());
    p.invert = get_or(j, "invert", false);
  } else if (type == "ByteLevel") {
    p.kind = PreTokenizer::ByteLevel;
    p.add_prefix_space = get_or(j, "add_prefix_space", true);
    p.use_regex = get_or(j, "use_regex", true);
    if (p.use_regex) p.pattern = std::make_shared<Regex>(kGpt2Regex);
  } else if (type == "Metaspace") {
    p.kind = PreTokenizer::Metaspace;
    auto r = u32(get_or<std::string>(j, "replacement", "\u2581"));
    if (r.size() != 1) fail("Metaspace replacement must be one character");
    p.replacement = r[0];
    p.split = get_or(j, "split", true);
    std::string scheme = get_or<std::string>(j, "prepend_scheme", "");
    if (scheme.empty()) scheme = get_or(j, "add_prefix_space", true) ? "always" : "never";  // old files
    if (scheme == "always") p.prepend = PreTokenizer::Always;
    else if (scheme == "first") p.prepend = PreTokenizer::First;
    else if (scheme == "never") p.prepend = PreTokenizer::Never;
    else fail("unknown Metaspace prepend_scheme '" + scheme + "'");
  } else if (type == "Sequence") {
    for (const auto& c : field(j, "pretokenizers", "Sequence pre_tokenizer"))
      p.children.push_back(parse_pre_tokenizer(c));
  } else {
    fail("unsupported pre_tokenizer type '" + type + "'");
  }
  return p;
}

Decoder parse_decoder(const json& j) {
  Decoder d;
  std::string type = field(j, "type", "decoder").get<std::string>();
  if (type == "WordPiece") {
    d.kind = Decoder::WordPiece;
    d.prefix = get_or<std::string>(j, "prefix", "##");
    d.cleanup = get_or(j, "cleanup", true);
  } else if (type == "ByteLevel") d.kind = Decoder::ByteLevel;
  else if (type == "Metaspace") {
    d.kind = Decoder::Metaspace;
    d.replacement = get_or<std::string>(j, "replacement", "\u2581");
    std::string scheme = get_or<std::string>(j, "prepend_scheme", "");
    d.prepend = scheme.empty() ? get_or(j, "add_prefix_space", true) : scheme != "never";
  } else if (type == "Replace") {
    d.kind = Decoder::Replace;
    const json& p = field(j, "pattern", "Replace decoder");
    if (!p.contains("String")) fail("Replace decoder: only String patterns are supported");
    d.pattern = p["String"].get<std::string>();
    d.content = field(j, "content", "Replace decoder").get<std::string>();
  } else if (type == "ByteFallback") d.kind = Decoder::ByteFallback;
  else if (type == "Fuse") d.kind = Decoder::Fuse;
  else if (type == "Strip") {
    d.kind = Decoder::Strip;
    auto c = u32(field(j, "content", "Strip decoder").get<std::string>());
    if (c.size() != 1) fail("Strip decoder content must be one character");
    d.strip_char = c[0];
    d.strip_start = get_or<size_t>(j, "start", 0);
    d.strip_stop = get_or<size_t>(j, "stop", 0);
  } else if (type == "BPEDecoder") {
    d.kind = Decoder::BPE;
    d.replacement = get_or<std::string>(j, "suffix", "</w>");
  } else if (type == "Sequence") {
    for (const auto& c : field(j, "decoders", "Sequence decoder")) d.children.push_back(parse_decoder(c));
  } else {
    fail("unsupported decoder type '" + type + "'");
  }
  return d;
}

static void parse_model(const json& j, Model& m) {
  if (!j.is_object()) fail("'model' must be an object");
  std::string type = get_or<std::string>(j, "type", "");
  if (type.empty()) {  // HF accepts untagged models; infer from the fields
    if (j.contains("merges")) type = "BPE";
    else if (j.contains("vocab") && j["vocab"].is_array()) type = "Unigram";
    else type = "WordPiece";
  }
  const json& vocab = field(j, "vocab", "model");
  if (type == "WordPiece" || type == "BPE") {
    if (!vocab.is_object()) fail(type + " model: 'vocab' must be an object {token: id}");
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
      int64_t id = int_value<int64_t>(it.value(), type + " model: the id of token '" + it.key() + "'");
      if (id < 0 || id > (1 << 30)) fail(type + " model: bad id for token '" + it.key() + "'");
      m.vocab[it.key()] = static_cast<int32_t>(id);
    }
    m.continuing_subword_prefix = get_or<std::string>(j, "continuing_subword_prefix", type == "WordPiece" ? "##" : "");
    std::string unk = get_or<std::string>(j, "unk_token", type == "WordPiece" ? "[UNK]" : "");
    if (!unk.empty()) {
      auto it = m.vocab.find(unk);
      if (it != m.vocab.end()) m.unk_id = it->second;
      else if (type == "BPE") fail("BPE model: unk_token '" + unk + "' is not in the vocab");
    }
  }
  if (type == "WordPiece") {
    m.kind = Model::WordPiece;
    m.max_input_chars_per_word = get_or<size_t>(j, "max_input_chars_per_word", 100);
  } else if (type == "BPE") {
    m.kind = Model::BPE;
    m.end_of_word_suffix = get_or<std::string>(j, "end_of_word_suffix", "");
    m.fuse_unk = get_or(j, "fuse_unk", false);
    m.byte_fallback = get_or(j, "byte_fallback", false);
    m.ignore_merges = get_or(j, "ignore_merges", false);
    const json& merges = field(j, "merges", "BPE model");
    if (!merges.is_array()) fail("BPE model: 'merges' must be an array");
    size_t prefix_len = m.continuing_subword_prefix.size();
    uint32_t rank = 0;
    for (const auto& mj : merges) {
      std::string a, b;
      if (mj.is_string()) {
        std::string s = mj.get<std::string>();
        size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
          fail("BPE model: merge '" + s + "' is not two tokens separated by one space");
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else if (mj.is_array() && mj.size() == 2) {
        a = mj[0].get<std::string>();
        b = mj[1].get<std::string>();
      } else {
        fail("BPE model: merge #" + std::to_string(rank) + " is neither \"a b\" nor [a, b]");
      }
      auto ia = m.vocab.find(a), ib = m.vocab.find(b);
      if (ia == m.vocab.end() || ib == m.vocab.end())
        fail("BPE model: merge '" + a + " " + b + "' uses a token missing from the vocab");
      std::string merged = a + (b.size() >= prefix_len ? b.substr(prefix_len) : std::string());
      auto im = m.vocab.find(merged);
      if (im == m.vocab.end()) fail("BPE model: merged token '" + merged + "' is not in the vocab");
      uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(ia->second)) << 32) | static_cast<uint32_t>(ib->second);
      m.merges[key] = {rank++, im->second};  // a repeated pair keeps its last rank, like HF
    }
  } else if (type == "Unigram") {
    m.kind = Model::Unigram;
    if (!vocab.is_array()) fail("Unigram model: 'vocab' must be an array of [piece, score]");
    int32_t id = 0;
    for (const auto& e : vocab) {
      if (!e.is_array() || e.size() != 2) fail("Unigram model: vocab entry #" + std::to_string(id) + " is not [piece, score]");
      m.vocab[e[0].get<std::string>()] = id++;
      m.scores.push_back(e[1].get<double>());
    }
    if (j.contains("unk_id") && !j["unk_id"].is_null()) {
      int64_t u = int_value<int64_t>(j["unk_id"], "Unigram model: unk_id");
      if (u < 0 || u >= id) fail("Unigram model: unk_id " + std::to_string(u) + " is outside the vocab");
      m.unk_id = static_cast<int32_t>(u);
    }
    m.byte_fallback = get_or(j, "byte_fallback", false);
  } else {
    fail("unsupported model type '" + type + "' (supported: WordPiece, BPE, Unigram)");
  }
  m.finish();
}

static std::vector<TemplateItem> parse_post_processor(const json& j) {
  std::vector<TemplateItem> t;
  std::string type = field(j, "type", "post_processor").get<std::string>();
  if (type == "TemplateProcessing") {
    const json& specials = get_or(j, "special_tokens", json::object());
    for (const auto& item : field(j, "single", "TemplateProcessing")) {
      if (item.contains("Sequence")) {
        t.push_back({true, {}, get_or(item["Sequence"], "type_id", 0)});
      } else if (item.contains("SpecialToken")) {
        std::string name = field(item["SpecialToken"], "id", "TemplateProcessing SpecialToken").get<std::string>();
        if (!specials.contains(name)) fail("TemplateProcessing: special token '" + name + "' is not in special_tokens");
        t.push_back({false, field(specials[name], "ids", "TemplateProcessing special token").get<std::vector<int32_t>>(),
                     get_or(item["SpecialToken"], "type_id", 0)});
      } else {
        fail("TemplateProcessing: template item is neither Sequence nor SpecialToken");
      }
    }
  } else if (type == "BertProcessing" || type == "RobertaProcessing") {
    int32_t cls = int_value<int32_t>(field(j, "cls", type.c_str()).at(1), type + ": the cls id");
    int32_t sep = int_value<int32_t>(field(j, "sep", type.c_str()).at(1), type + ": the sep id");
    t = {{false, {cls}, 0}, {true, {}, 0}, {false, {sep}, 0}};
  } else if (type == "ByteLevel") {
    // only adjusts offsets
  } else if (type == "Sequence") {
    for (const auto& p : field(j, "processors", "Sequence post_processor")) {
      auto sub = parse_post_processor(p);
      if (!sub.empty()) {
        if (!t.empty()) fail("Sequence post_processor: more than one processor adds tokens");
        t = std::move(sub);
      }
    }
  } else {
    fail("unsupported post_processor type '" + type + "'");
  }
  return t;
}

// ---- Construction -----------------------------------------------------------------------------
Tokenizer::Tokenizer(std::unique_ptr<TokenizerImpl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

// Longest first, so the first match at a position is the longest (leftmost-longest), indexed by
// first character: Gemma has 6,384 added tokens, too many to try at every position.
static void order_added(TokenizerImpl& t) {
  std::stable_sort(t.added.begin(), t.added.end(),
                   [](const AddedToken& a, const AddedToken& b) { return a.content.size() > b.content.size(); });
  t.added_by_first.clear();
  for (uint32_t i = 0; i < t.added.size(); i++)
    if (!t.added[i].content.empty()) t.added_by_first[t.added[i].content[0]].push_back(i);  // "" never matches
}

void finish_added(TokenizerImpl& t) {
  for (auto& a : t.added)
    if (a.special) t.special_ids.push_back(a.id);
  std::sort(t.special_ids.begin(), t.special_ids.end());
  order_added(t);
}

Tokenizer Tokenizer::from_json(std::string_view text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    fail(std::string("invalid JSON: ") + e.what());
  }
  if (!j.is_object()) fail("top level is not an object");
  auto t = std::make_unique<TokenizerImpl>();
  try {
    parse_model(field(j, "model", "top level"), t->model);
    if (j.contains("normalizer") && !j["normalizer"].is_null())
      t->normalizer = std::make_unique<Normalizer>(parse_normalizer(j["normalizer"]));
    if (j.contains("pre_tokenizer") && !j["pre_tokenizer"].is_null())
      t->pre_tokenizer = std::make_unique<PreTokenizer>(parse_pre_tokenizer(j["pre_tokenizer"]));
    if (j.contains("decoder") && !j["decoder"].is_null())
      t->decoder = std::make_unique<Decoder>(parse_decoder(j["decoder"]));
    if (j.contains("post_processor") && !j["post_processor"].is_null())
      t->single_template = parse_post_processor(j["post_processor"]);
    bool before = true;
    for (const auto& item : t->single_template) {
      if (item.is_sequence) before = false;
      else if (before && t->bos_id < 0 && !item.ids.empty()) t->bos_id = item.ids.front();
      else if (!before && !item.ids.empty()) t->eos_id = item.ids.back();
    }
    for (const auto& a : get_or(j, "added_tokens", json::array())) {
      AddedToken tok;
      std::string content = field(a, "content", "added token").get<std::string>();
      if (content.empty()) continue;
      tok.id = int_value<int32_t>(field(a, "id", "added token"), "added token '" + content + "': id");
      tok.single_word = get_or(a, "single_word", false);
      tok.lstrip = get_or(a, "lstrip", false);
      tok.rstrip = get_or(a, "rstrip", false);
      tok.normalized = get_or(a, "normalized", true);
      tok.special = get_or(a, "special", false);
      tok.content = u32(content);
      if (tok.normalized && t->normalizer) t->normalizer->apply(tok.content);
      t->added_by_id[tok.id] = content;
      t->added_by_content[content] = tok.id;
      t->added.push_back(std::move(tok));
    }
    finish_added(*t);
    if (j.contains("padding") && j["padding"].is_object()) t->pad_id = get_or(j["padding"], "pad_id", -1);
    if (j.contains("truncation") && j["truncation"].is_object())
      t->file_max_length = get_or<size_t>(j["truncation"], "max_length", 0);
  } catch (const json::exception& e) {
    fail(std::string("unexpected value: ") + e.what());
  } catch (const std::invalid_argument& e) {
    fail(std::string("a string in the file is not valid UTF-8: ") + e.what());
  }
  if (t->pad_id < 0) {
    for (const char* name : {"[PAD]", "<pad>", "<|endoftext|>"}) {
      auto it = t->added_by_content.find(name);
      if (it != t->added_by_content.end()) { t->pad_id = it->second; break; }
    }
    if (t->pad_id < 0) t->pad_id = 0;
  }
  return Tokenizer(std::move(t));
}

Tokenizer Tokenizer::from_esm_vocab(std::string_view text) {
  auto t = std::make_unique<TokenizerImpl>();
  t->esm = true;
  std::istringstream in{std::string(text)};
  std::string line;
  int32_t id = 0;
  while (std::getline(in, line)) {
    // load_vocab_file strips each line (blank lines still take an id)
    size_t a = line.find_first_not_of(" \t\r\n"), b = line.find_last_not_of(" \t\r\n");
    std::string tok = a == std::string::npos ? std::string() : line.substr(a, b - a + 1);
    t->model.vocab[tok] = id;
    if (!tok.empty()) {
      t->added.push_back({u32(tok), id, false, false, false, false, false});
      t->added_by_content[tok] = id;
    }
    id++;
  }
  auto need = [&](const char* name) {
    auto it = t->model.vocab.find(name);
    if (it == t->model.vocab.end()) throw std::runtime_error(std::string("ESM vocab: no '") + name + "' token");
    return it->second;
  };
  t->model.unk_id = need("<unk>");
  t->pad_id = need("<pad>");
  int32_t cls = need("<cls>"), eos = need("<eos>");
  for (const char* s : {"<cls>", "<pad>", "<eos>", "<unk>", "<mask>"})
    if (t->model.vocab.count(s)) t->special_ids.push_back(t->model.vocab[s]);
  t->single_template = {{false, {cls}, 0}, {true, {}, 0}, {false, {eos}, 0}};
  t->model.finish();
  std::sort(t->special_ids.begin(), t->special_ids.end());
  order_added(*t);
  return Tokenizer(std::move(t));
}

Tokenizer Tokenizer::from_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("tokenizer: cannot open '" + path + "'");
  char magic[4] = {};
  f.read(magic, 4);
  if (f.gcount() == 4 && std::string_view(magic, 4) == "GGUF") {  // mapped, not read into memory
    f.close();
    try {
      return from_gguf(GgufFile(path));
    } catch (const std::exception& e) {
      throw std::runtime_error(path + ": " + e.what());
    }
  }
  f.clear();
  f.seekg(0);
  std::stringstream ss;
  ss << f.rdbuf();
  std::string text = ss.str();
  size_t first = text.find_first_not_of(" \t\r\n");
  try {
    if (first != std::string::npos && text[first] == '{') return from_json(text);
    if (text.find("<cls>") != std::string::npos && text.find("<eos>") != std::string::npos)
      return from_esm_vocab(text);
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": " + e.what());
  }
  throw std::runtime_error(path + ": neither a tokenizer.json (JSON object), a GGUF file nor an ESM vocab.txt");
}

// ---- Encoding ---------------------------------------------------------------------------------
struct Segment {
  std::u32string text;
  int32_t added_id;  // -1: plain text
  bool at_start;
};

static bool ws_only_tail(const std::u32string& s, size_t end, size_t& start) {
  size_t i = end;
  while (i > 0 && is_whitespace(s[i - 1])) i--;
  start = i;
  return true;
}

// AddedVocabulary::find_matches: leftmost-longest matches of the tokens with `normalized` ==
// want_normalized, then the single_word / lstrip / rstrip rules.
static void split_added(const TokenizerImpl& t, const Segment& seg, bool want_normalized, std::vector<Segment>& out) {
  const std::u32string& s = seg.text;
  size_t start_offset = 0;
  auto emit_text = [&](size_t a, size_t b) {
    if (b > a) out.push_back({s.substr(a, b - a), -1, seg.at_start && a == 0});
  };
  for (size_t i = 0; i < s.size();) {
    const AddedToken* hit = nullptr;
    auto candidates = t.added_by_first.find(s[i]);
    if (candidates != t.added_by_first.end()) {
      for (uint32_t k : candidates->second) {
        const AddedToken& a = t.added[k];
        if (a.normalized != want_normalized || a.content.size() > s.size() - i) continue;
        if (s.compare(i, a.content.size(), a.content) == 0) { hit = &a; break; }
      }
    }
    if (!hit) { i++; continue; }
    size_t start = i, stop = i + hit->content.size();
    i = stop;
    if (hit->single_word) {
      bool start_ok = start == 0 || !is_word_char(s[start - 1]);
      bool stop_ok = stop == s.size() || !is_word_char(s[stop]);
      if (!start_ok || !stop_ok) continue;
    }
    if (hit->lstrip) {
      size_t ns;
      ws_only_tail(s, start, ns);
      start = std::max(ns, start_offset);
    }
    if (hit->rstrip)
      while (stop < s.size() && is_whitespace(s[stop])) stop++;
    emit_text(start_offset, start);
    out.push_back({s.substr(start, stop - start), hit->id, false});
    start_offset = stop;
    i = std::max(i, stop);
  }
  emit_text(start_offset, s.size());
}

void TokenizerImpl::encode_text(const std::u32string& text, std::vector<int32_t>& ids) const {
  std::vector<Segment> raw;
  split_added(*this, {text, -1, true}, false, raw);
  std::vector<Piece> pieces;
  for (auto& seg : raw) {
    if (seg.added_id >= 0) { ids.push_back(seg.added_id); continue; }
    if (normalizer) normalizer->apply(seg.text);
    std::vector<Segment> norm;
    split_added(*this, seg, true, norm);
    for (auto& n : norm) {
      if (n.added_id >= 0) { ids.push_back(n.added_id); continue; }
      pieces.clear();
      pieces.push_back({std::move(n.text), n.at_start});
      if (pre_tokenizer) pre_tokenizer->apply(pieces);
      for (const auto& p : pieces) model.tokenize(u32_to_utf8(p.text), ids);
    }
  }
}

// EsmTokenizer: vocab tokens are cut out of the text (longest first), what is left is split on
// whitespace and each remaining word is <unk>.
static void esm_encode(const TokenizerImpl& t, const std::u32string& text, std::vector<int32_t>& ids) {
  std::vector<Segment> segs;
  split_added(t, {text, -1, true}, false, segs);
  for (const auto& s : segs) {
    if (s.added_id >= 0) { ids.push_back(s.added_id); continue; }
    bool in_word = false;
    for (char32_t c : s.text) {
      bool ws = is_whitespace(c) || (c >= 0x1C && c <= 0x1F);  // Python str.split()
      if (!ws && !in_word) ids.push_back(t.model.unk_id);
      in_word = !ws;
    }
  }
}

Encoding TokenizerImpl::post_process(std::vector<int32_t> ids, bool add_special) const {
  Encoding e;
  if (add_special && !single_template.empty()) {
    for (const auto& item : single_template) {
      const auto& src = item.is_sequence ? ids : item.ids;
      e.ids.insert(e.ids.end(), src.begin(), src.end());
      e.type_ids.insert(e.type_ids.end(), src.size(), item.type_id);
    }
  } else {
    e.ids = std::move(ids);
    e.type_ids.assign(e.ids.size(), 0);
  }
  e.attention_mask.assign(e.ids.size(), 1);
  e.original_length = e.ids.size();
  return e;
}

Encoding Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  std::u32string s = utf8_to_u32(text);
  std::vector<int32_t> ids;
  if (impl_->esm) esm_encode(*impl_, s, ids);
  else impl_->encode_text(s, ids);
  return impl_->post_process(std::move(ids), add_special_tokens);
}

std::vector<Encoding> Tokenizer::encode_batch(const std::vector<std::string>& texts, const BatchOptions& opt) const {
  std::vector<Encoding> out;
  out.reserve(texts.size());
  size_t specials = opt.add_special_tokens ? impl_->num_special() : 0;
  if (opt.max_length > 0 && opt.max_length < specials)
    throw std::invalid_argument("tokenizer: max_length " + std::to_string(opt.max_length) + " is shorter than the " +
                                std::to_string(specials) + " special tokens");
  size_t longest = 0;
  for (const auto& text : texts) {
    Encoding raw = encode(text, false);
    size_t full = raw.ids.size() + specials;
    bool cut = opt.max_length > 0 && full > opt.max_length;
    if (cut) raw.ids.resize(opt.max_length - specials);
    Encoding e = impl_->post_process(std::move(raw.ids), opt.add_special_tokens);
    e.truncated = cut;
    e.original_length = full;
    longest = std::max(longest, e.ids.size());
    out.push_back(std::move(e));
  }
  if (opt.pad_to_longest) {
    for (auto& e : out) {
      size_t n = longest - e.ids.size();
      e.ids.insert(e.ids.end(), n, impl_->pad_id);
      e.type_ids.insert(e.type_ids.end(), n, 0);
      e.attention_mask.insert(e.attention_mask.end(), n, 0);
    }
  }
  return out;
}

// ---- Decoding ---------------------------------------------------------------------------------
static std::string replace_all(const std::string& s, const std::string& from, const std::string& to) {
  if (from.empty()) return s;
  std::string out;
  size_t pos = 0;
  for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
    out.append(s, pos, hit - pos);
    out += to;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

static std::string wordpiece_cleanup(std::string s) {
  static const std::pair<const char*, const char*> rules[] = {
      {" .", "."}, {" ?", "?"}, {" !", "!"}, {" ,", ","}, {" ' ", "'"}, {" n't", "n't"},
      {" 'm", "'m"}, {" do not", " don't"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (auto [a, b] : rules) s = replace_all(s, a, b);
  return s;
}

void tok::Decoder::apply(std::vector<std::string>& tokens) const {
  switch (kind) {
    case WordPiece:
      for (size_t i = 0; i < tokens.size(); i++) {
        auto& t = tokens[i];
        if (i != 0) {
          if (t.compare(0, prefix.size(), prefix) == 0) t = t.substr(prefix.size());
          else t = " " + t;
        }
        if (cleanup) t = wordpiece_cleanup(t);
      }
      break;
    case ByteLevel: {
      std::string bytes;
      for (const auto& t : tokens) {
        std::u32string cs = utf8_to_u32(t);
        std::string mapped;
        bool ok = true;
        for (char32_t c : cs) {
          int b = char_to_byte(c);
          if (b < 0) { ok = false; break; }
          mapped.push_back(static_cast<char>(b));
        }
        bytes += ok ? mapped : t;
      }
      tokens = {utf8_lossy(bytes)};
      break;
    }
    case Metaspace: {
      std::u32string rep = utf8_to_u32(replacement);
      for (size_t i = 0; i < tokens.size(); i++) {
        std::u32string out;
        for (char32_t c : utf8_to_u32(tokens[i])) {
          if (!rep.empty() && c == rep[0]) {
            if (!(i == 0 && prepend)) out.push_back(U' ');
          } else {
            out.push_back(c);
          }
        }
        tokens[i] = u32_to_utf8(out);
      }
      break;
    }
    case Replace:
      for (auto& t : tokens) t = replace_all(t, pattern, content);
      break;
    case ByteFallback: {
      std::vector<std::string> out;
      std::string pending;
      size_t pending_count = 0;
      auto flush = [&] {
        if (pending_count == 0) return;
        if (is_valid_utf8(pending)) out.push_back(pending);
        else for (size_t k = 0; k < pending_count; k++) out.push_back("\xEF\xBF\xBD");
        pending.clear();
        pending_count = 0;
      };
      for (auto& t : tokens) {
        if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' && std::isxdigit(static_cast<unsigned char>(t[3])) &&
            std::isxdigit(static_cast<unsigned char>(t[4]))) {
          pending.push_back(static_cast<char>(std::stoi(t.substr(3, 2), nullptr, 16)));
          pending_count++;
        } else {
          flush();
          out.push_back(std::move(t));
        }
      }
      flush();
      tokens = std::move(out);
      break;
    }
    case Fuse: {
      std::string all;
      for (auto& t : tokens) all += t;
      tokens = {all};
      break;
    }
    case Strip:
      for (auto& t : tokens) {
        std::u32string cs = utf8_to_u32(t);
        size_t a = 0, b = cs.size();
        while (a < strip_start && a < cs.size() && cs[a] == strip_char) a++;
        for (size_t k = 0; k < strip_stop && b > a && cs[b - 1] == strip_char; k++) b--;
        t = u32_to_utf8(cs.substr(a, b - a));
      }
      break;
    case BPE:
      for (size_t i = 0; i < tokens.size(); i++)
        tokens[i] = replace_all(tokens[i], replacement, i + 1 == tokens.size() ? "" : " ");
      break;
    case Sequence:
      for (const auto& d : children) d.apply(tokens);
      break;
  }
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (skip_special_tokens && impl_->is_special(id)) continue;
    auto it = impl_->added_by_id.find(id);
    if (it != impl_->added_by_id.end()) tokens.push_back(it->second);
    else if (id >= 0 && static_cast<size_t>(id) < impl_->model.id_to_token.size() &&
             !impl_->model.id_to_token[static_cast<size_t>(id)].empty())
      tokens.push_back(impl_->model.id_to_token[static_cast<size_t>(id)]);
  }
  if (impl_->esm) {  // EsmTokenizer joins tokens with spaces
    std::string out;
    for (size_t i = 0; i < tokens.size(); i++) out += (i ? " " : "") + tokens[i];
    return out;
  }
  if (!impl_->decoder) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); i++) out += (i ? " " : "") + tokens[i];
    return out;
  }
  impl_->decoder->apply(tokens);
  std::string out;
  for (auto& t : tokens) out += t;
  return out;
}

int32_t Tokenizer::token_to_id(std::string_view token) const {
  auto it = impl_->added_by_content.find(std::string(token));
  if (it != impl_->added_by_content.end()) return it->second;
  auto m = impl_->model.vocab.find(std::string(token));
  return m == impl_->model.vocab.end() ? -1 : m->second;
}

std::string Tokenizer::id_to_token(int32_t id) const {
  auto it = impl_->added_by_id.find(id);
  if (it != impl_->added_by_id.end()) return it->second;
  if (id < 0 || static_cast<size_t>(id) >= impl_->model.id_to_token.size()) return "";
  return impl_->model.id_to_token[static_cast<size_t>(id)];
}

size_t Tokenizer::vocab_size() const {
  size_t n = impl_->model.vocab.size();
  for (auto& [id, s] : impl_->added_by_id)
    if (!impl_->model.vocab.count(s)) n++;
  return n;
}

int32_t Tokenizer::pad_id() const { return impl_->pad_id; }
size_t Tokenizer::file_max_length() const { return impl_->file_max_length; }
int32_t Tokenizer::bos_id() const { return impl_->bos_id; }
int32_t Tokenizer::eos_id() const { return impl_->eos_id; }

}  // namespace xdna
