// Tokenizers on arbitrary bytes. The first byte picks what the rest is:
//   0-5  text (often invalid UTF-8) encoded and decoded by one of the committed fixture
//        tokenizers (WordPiece, byte-level BPE, SentencePiece BPE, Unigram, ESM, GGUF SPM);
//   6    token ids (4 bytes each) decoded by each of them;
//   7    a tokenizer.json, built and run on a fixed text.
// Each must throw (std::exception) or work, never crash, over-read or leak.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "pipeline/tokenizer.h"
#include "weights/gguf.h"

namespace {

std::string fixture(const std::string& rel) {
  const std::string path = std::string(XDNA_FIXTURE_DIR) + "/tokenizers/" + rel;
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) {
    std::fprintf(stderr, "fuzz_tokenizer: missing fixture %s\n", path.c_str());
    std::abort();
  }
  std::string s;
  char buf[1 << 16];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) s.append(buf, n);
  std::fclose(f);
  return s;
}

const std::vector<xdna::Tokenizer>& tokenizers() {
  static const std::vector<xdna::Tokenizer> all = [] {
    std::vector<xdna::Tokenizer> v;
    v.push_back(xdna::Tokenizer::from_json(fixture("minilm.tokenizer.json")));  // WordPiece
    v.push_back(xdna::Tokenizer::from_json(fixture("gpt2.tokenizer.json")));    // byte-level BPE
    v.push_back(xdna::Tokenizer::from_json(fixture("llama2.tokenizer.json")));  // SentencePiece BPE
    v.push_back(xdna::Tokenizer::from_json(fixture("unigram.tokenizer.json")));
    v.push_back(xdna::Tokenizer::from_esm_vocab(fixture("esm.vocab.txt")));
    v.push_back(xdna::Tokenizer::from_gguf(xdna::GgufFile(std::string(XDNA_FIXTURE_DIR) + "/tokenizers/llm/gguf_gemma.gguf")));
    return v;
  }();
  return all;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const auto& toks = tokenizers();
  const uint8_t mode = data[0] % 8;
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    if (mode < toks.size()) {
      const xdna::Tokenizer& t = toks[mode];
      const xdna::Encoding e = t.encode(rest, true);
      (void)t.decode(e.ids, false);
      (void)t.encode_batch({std::string(rest), "a"}, {true, 8, true});
    } else if (mode == 6) {
      std::vector<int32_t> ids(rest.size() / 4);
      if (!ids.empty()) std::memcpy(ids.data(), rest.data(), ids.size() * 4);
      for (const xdna::Tokenizer& t : toks) {
        (void)t.decode(ids, false);
        (void)t.decode(ids, true);
        for (int32_t id : ids) (void)t.id_to_token(id);
      }
    } else {
      const xdna::Tokenizer t = xdna::Tokenizer::from_json(rest);
      const xdna::Encoding e = t.encode("Hello world, <b>fuzz</b> 123 \u00fcn\u00efcode", true);
      (void)t.decode(e.ids, false);
    }
  } catch (const std::exception&) {
  }
  return 0;
}
