// Text -> token ids, reproducing Hugging Face `tokenizers` (tokenizer.json) id for id, plus the
// ESM-2 protein tokenizer (transformers' EsmTokenizer, from its vocab.txt).
//
//   auto tok = xdna::Tokenizer::from_file("tokenizer.json");
//   xdna::Encoding e = tok.encode("Hello world", /*add_special_tokens=*/true);
//   std::string text = tok.decode(e.ids, /*skip_special_tokens=*/true);
//
// Pipeline (as in HF): added tokens are cut out first, the rest is normalized, pre-tokenized into
// words, each word is run through the model (WordPiece / BPE / Unigram), and the post-processor
// adds the special tokens. Tokenizer::from_gguf builds the same pipeline from a GGUF file's
// metadata. See docs/tokenizers.md for what is supported and what differs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace xdna {

struct Encoding {
  std::vector<int32_t> ids;
  std::vector<int32_t> type_ids;
  std::vector<uint8_t> attention_mask;  // 1 = real token, 0 = padding
  bool truncated = false;               // ids were cut to max_length
  size_t original_length = 0;           // number of ids before truncation and padding
};

struct BatchOptions {
  bool add_special_tokens = true;
  size_t max_length = 0;      // 0 = no truncation; else cut to this many ids (special tokens kept)
  bool pad_to_longest = true; // pad every encoding to the longest one in the batch
};

struct TokenizerImpl;
class GgufFile;

class Tokenizer {
 public:
  // tokenizer.json (HF) or an ESM vocab.txt (<cls> <pad> <eos> <unk> ... <mask>).
  // Throws std::runtime_error naming the file and what is wrong with it.
  static Tokenizer from_file(const std::string& path);
  static Tokenizer from_json(std::string_view json_text);
  static Tokenizer from_esm_vocab(std::string_view vocab_text);
  // The tokenizer a GGUF file carries in its tokenizer.ggml.* metadata, built as transformers'
  // GGUF conversion builds it: "llama" (SentencePiece BPE with byte fallback; Gemma's variant for
  // gemma* architectures) or "gpt2" (byte-level BPE, split regex chosen by tokenizer.ggml.pre).
  // encode(text, true) adds BOS / EOS as tokenizer.ggml.add_bos_token / add_eos_token say.
  // Throws std::runtime_error naming the key that is missing or wrong.
  static Tokenizer from_gguf(const GgufFile& gguf);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Input must be valid UTF-8 (std::invalid_argument naming the byte offset otherwise).
  Encoding encode(std::string_view text, bool add_special_tokens = true) const;
  // Truncation keeps the special tokens: the text part is cut so that the total is max_length.
  std::vector<Encoding> encode_batch(const std::vector<std::string>& texts,
                                     const BatchOptions& options = {}) const;
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = true) const;

  int32_t token_to_id(std::string_view token) const;  // -1 when unknown
  std::string id_to_token(int32_t id) const;          // "" when out of range
  size_t vocab_size() const;                          // model vocab + added tokens
  int32_t pad_id() const;                             // from the file's padding section, or a
                                                      // [PAD]/<pad> token, or 0
  // Max length of the truncation section of tokenizer.json (0 when absent). Not applied by
  // encode(): pass it in BatchOptions::max_length when wanted.
  size_t file_max_length() const;
  // Begin / end of sequence ids: from GGUF metadata, else the first / last special token the
  // post-processor adds (-1 when there is none).
  int32_t bos_id() const;
  int32_t eos_id() const;

 private:
  explicit Tokenizer(std::unique_ptr<TokenizerImpl> impl);
  std::unique_ptr<TokenizerImpl> impl_;
};

}  // namespace xdna
