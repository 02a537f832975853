#include <gtest/gtest.h>

#include <cmath>

#include "core/numeric.h"
#include "weights/bake.h"
#include "weights/baked.h"
#include "weights/gguf.h"
#include "core/sha256.h"
#include "weights_test_util.h"

using namespace xdna;
using namespace wtest;
using nlohmann::json;

namespace {

struct Src {
  std::string name;
  Shape shape;
  std::vector<float> values;
};

// A tiny Hugging Face checkpoint: config, tokenizer, one f32 safetensors file (plus a bf16
// matrix and an int64 buffer the engine does not use).
std::vector<Src> make_checkpoint(const TempDir& dir) {
  std::vector<Src> ts = {{"model.embed_tokens.weight", {16, 64}, {}},
                         {"model.layers.0.self_attn.q_proj.weight", {32, 64}, {}},
                         {"model.layers.0.input_layernorm.weight", {64}, {}},
                         {"model.layers.0.mlp.down_proj.weight", {8, 20}, {}},
                         {"model.layers.0.self_attn.q_proj.bias", {32}, {}}};
  uint32_t seed = 1;
  json header = {{"__metadata__", {{"format", "pt"}}}};
  Bytes data;
  for (auto& t : ts) {
    for (int64_t i = 0; i < shape_numel(t.shape); ++i) {
      seed = seed * 1664525u + 1013904223u;
      t.values.push_back((static_cast<float>(seed >> 8) / float(1 << 24) - 0.5f) * 4.0f);
    }
    header[t.name] = {{"dtype", "F32"}, {"shape", t.shape},
                      {"data_offsets", {data.size(), data.size() + 4 * t.values.size()}}};
    put_floats(data, t.values);
  }
  // bf16 matrix: values exactly representable.
  Src k{"model.layers.0.self_attn.k_proj.weight", {4, 64}, {}};
  header[k.name] = {{"dtype", "BF16"}, {"shape", k.shape},
                    {"data_offsets", {data.size(), data.size() + 2 * 256}}};
  for (int i = 0; i < 256; ++i) {
    k.values.push_back(float(i % 17 - 8) / 4);
    put<uint16_t>(data, f32_to_bf16(k.values.back()));
  }
  ts.push_back(k);
  header["position_ids"] = {{"dtype", "I64"}, {"shape", {1, 2}},
                            {"data_offsets", {data.size(), data.size() + 16}}};
  put<int64_t>(data, 0);
  put<int64_t>(data, 1);
  write_file(dir / "model.safetensors", safetensors_bytes(header, data));
  write_text(dir / "config.json", R"({"hidden_size": 64, "model_type": "llama"})");
  write_text(dir / "tokenizer.json", R"({"model": {"type": "BPE"}})");
  return ts;
}

float max_abs(const float* x, int64_t n) {
  float m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m;
}

// Largest error allowed for value i of a row-major [rows, cols] matrix stored as `dtype`.
float bound(DType dtype, int64_t group, const Src& s, int64_t i) {
  const float x = std::fabs(s.values[i]);
  const int64_t cols = s.shape.back();
  switch (dtype) {
    case DType::F32: return 0;
    case DType::F16: return x * 0x1p-11f + 1e-7f;
    case DType::BF16: return x * 0x1p-8f;
    case DType::BFP16: return max_abs(&s.values[i / 8 * 8], 8) / 32;  // 6-bit mantissas, truncated
    case DType::I8: return max_abs(&s.values[i / group * group], group) / 254 * 1.001f;
    case DType::I4: return max_abs(&s.values[i / group * group], group) / 14 * 1.001f;
    default: ADD_FAILURE() << "unexpected dtype"; return 0;
  }
  (void)cols;
}

}  // namespace

TEST(Bake, PlanFollowsTheDocumentedRules) {
  EXPECT_EQ(plan_tensor("a.weight", {8, 64}, DType::F32, Precision::Int4, 0).dtype, DType::I4);
  EXPECT_EQ(plan_tensor("a.weight", {8, 64}, DType::F32, Precision::Int4, 0).group, 32);
  EXPECT_EQ(plan_tensor("a.weight", {8, 64}, DType::F32, Precision::Int8, 0).group, 64);
  EXPECT_EQ(plan_tensor("a.bias", {64}, DType::BF16, Precision::Int8, 0).dtype, DType::F32);
  EXPECT_EQ(plan_tensor("norm.weight", {64}, DType::BF16, Precision::BF16, 0).dtype, DType::F32);
  EXPECT_EQ(plan_tensor("embed_tokens.weight", {8, 64}, DType::F32, Precision::Int4, 0).dtype,
            DType::BF16);
  EXPECT_EQ(plan_tensor("embed_tokens.weight", {8, 64}, DType::F32, Precision::F16, 0).dtype,
            DType::F16);
  const TensorPlan odd = plan_tensor("a.weight", {8, 20}, DType::F32, Precision::BFP16, 0);
  EXPECT_EQ(odd.dtype, DType::F32);
  EXPECT_NE(odd.warning.find("multiple of 8"), std::string::npos);
  EXPECT_EQ(plan_tensor("q.weight", {8, 256}, DType::Q4_K, Precision::Keep, 0).dtype, DType::Q4_K);
  EXPECT_EQ(plan_tensor("ids", {8}, DType::I32, Precision::F16, 0).dtype, DType::I32);
  EXPECT_EQ(precision_from_name("bfp16"), Precision::BFP16);
  EXPECT_FALSE(precision_from_name("fp8").has_value());
}

TEST(Bake, RoundTripAtEveryPrecision) {
  TempDir dir;
  const std::vector<Src> src = make_checkpoint(dir);
  for (Precision p : {Precision::F32, Precision::F16, Precision::BF16, Precision::BFP16,
                      Precision::Int8, Precision::Int4, Precision::Keep}) {
    SCOPED_TRACE(precision_name(p));
    const std::string out = dir / (std::string("m-") + precision_name(p) + ".xdna");
    std::vector<std::string> log;
    BakeOptions o{dir.path.string(), out, p, 0, [&](const std::string& s) { log.push_back(s); }};
    const BakeSummary sum = bake_checkpoint(o);
    EXPECT_EQ(sum.tensors, 6);
    EXPECT_EQ(sum.skipped, 1);  // position_ids (I64)
    BakedModel m(out);
    EXPECT_EQ(m.config()["hidden_size"], 64);
    EXPECT_EQ(m.file("tokenizer.json"), R"({"model": {"type": "BPE"}})");
    EXPECT_EQ(m.manifest()["source"]["files"][0]["sha256"],
              sha256_file(dir / "model.safetensors"));
    EXPECT_EQ(m.metadata()["precision"], precision_name(p));
    EXPECT_FALSE(m.contains("position_ids"));
    for (const Src& s : src) {
      SCOPED_TRACE(s.name);
      Tensor t = m.get(s.name);
      const bool bf16_src = s.name.find("k_proj") != std::string::npos;
      const TensorPlan plan =
          plan_tensor(s.name, s.shape, bf16_src ? DType::BF16 : DType::F32, p, 0);
      EXPECT_EQ(m.manifest()["source"]["format"], "safetensors");
      EXPECT_EQ(t.dtype(), plan.dtype);
      EXPECT_EQ(t.shape(), s.shape);
      // Zero copy: the view points into the mapping, page-aligned.
      auto* map = dynamic_cast<MappedFile*>(t.buffer().get());
      ASSERT_NE(map, nullptr);
      EXPECT_GE(t.raw(), map->data());
      EXPECT_LE(t.raw() + t.nbytes(), map->data() + map->size());
      EXPECT_EQ((t.raw() - map->data()) % 4096, 0);
      if (t.dtype() == DType::I8 || t.dtype() == DType::I4) {
        ASSERT_NE(t.scales(), nullptr);
        EXPECT_EQ(t.group_size(), plan.group);
      }
      const std::vector<float> got = t.to_vector();
      // The bf16 source holds exact bf16 values: stored as bf16 they come back exactly.
      const DType eff = bf16_src && t.dtype() == DType::BF16 ? DType::F32 : t.dtype();
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_LE(std::fabs(got[i] - s.values[i]), bound(eff, t.group_size(), s, int64_t(i)))
            << "value " << i << ": " << got[i] << " vs " << s.values[i];
    }
    // Row length 20 cannot be split into bfp16 blocks or int4 groups of 32: f32 plus a warning.
    if (p == Precision::BFP16 || p == Precision::Int4) {
      EXPECT_EQ(m.get("model.layers.0.mlp.down_proj.weight").dtype(), DType::F32);
      bool warned = false;
      for (const auto& l : log) warned |= l.find("warning: 'model.layers.0.mlp.down_proj") == 0;
      EXPECT_TRUE(warned);
    }
  }
}

TEST(Bake, KeepPreservesGgmlBytesAndQuantizesGgufOnRequest) {
  TempDir dir;
  // A GGUF file with an f32 norm and a q8_0 matrix [2, 32].
  Bytes g;
  put<uint32_t>(g, 0x46554747);
  put<uint32_t>(g, 3);
  put<uint64_t>(g, 2);
  put<uint64_t>(g, 0);
  put_str(g, "blk.0.attn_norm.weight");
  put<uint32_t>(g, 1);
  put<uint64_t>(g, 32);
  put<uint32_t>(g, 0);
  put<uint64_t>(g, 0);
  put_str(g, "blk.0.attn_q.weight");
  put<uint32_t>(g, 2);
  put<uint64_t>(g, 32);
  put<uint64_t>(g, 2);
  put<uint32_t>(g, 8);
  put<uint64_t>(g, 128);
  while (g.size() % 32) g.push_back(0);
  for (int i = 0; i < 32; ++i) put<float>(g, float(i));
  for (int b = 0; b < 2; ++b) {
    put<uint16_t>(g, f32_to_f16(0.125f * (b + 1)));
    for (int i = 0; i < 32; ++i) g.push_back(static_cast<uint8_t>(static_cast<int8_t>(i * 3 - 50)));
  }
  write_file(dir / "m.gguf", g);
  GgufFile source(dir / "m.gguf");

  bake_checkpoint({dir / "m.gguf", dir / "keep.xdna", Precision::Keep, 0, {}});
  BakedModel keep(dir / "keep.xdna");
  Tensor q = keep.get("blk.0.attn_q.weight");
  EXPECT_EQ(q.dtype(), DType::Q8_0);
  EXPECT_EQ(q.shape(), (Shape{2, 32}));
  Tensor sq = source.get("blk.0.attn_q.weight");
  EXPECT_EQ(std::memcmp(q.raw(), sq.raw(), sq.nbytes()), 0);
  EXPECT_EQ(keep.manifest()["source"]["format"], "gguf");

  bake_checkpoint({dir / "m.gguf", dir / "i8.xdna", Precision::Int8, 0, {}});
  BakedModel i8(dir / "i8.xdna");
  Tensor w = i8.get("blk.0.attn_q.weight");
  EXPECT_EQ(w.dtype(), DType::I8);
  const std::vector<float> want = sq.to_vector(), got = w.to_vector();
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_NEAR(got[i], want[i], max_abs(&want[i / 32 * 32], 32) / 254 * 1.001f);

  // A GGUF tensor type the engine lacks stops the bake, naming the tensor and type.
  const std::string msg = error_of([&] {
    bake_checkpoint({std::string(XDNA_FIXTURE_DIR) + "/weights/tiny.gguf", dir / "x.xdna",
                     Precision::Keep, 0, {}});
  });
  EXPECT_NE(msg.find("'q4_1'"), std::string::npos) << msg;
  EXPECT_FALSE(std::filesystem::exists(dir / "x.xdna"));
  EXPECT_FALSE(std::filesystem::exists(dir / "x.xdna.tmp"));
}

TEST(Bake, ShardedFixtureBakesWithConfigAndTokenizer) {
  TempDir dir;
  const std::string src = std::string(XDNA_FIXTURE_DIR) + "/weights/sharded";
  bake_checkpoint({src, dir / "s.xdna", Precision::BF16, 0, {}});
  BakedModel m(dir / "s.xdna");
  EXPECT_EQ(m.config()["vocab_size"], 8);
  EXPECT_TRUE(m.has_file("tokenizer.json"));
  EXPECT_FALSE(m.has_file("config.json"));
  EXPECT_EQ(m.get("model.layers.0.mlp.up_proj.weight").dtype(), DType::BF16);
  EXPECT_EQ(m.get("model.norm.weight").dtype(), DType::F32);
  EXPECT_EQ(m.manifest()["source"]["files"].size(), 4u);  // 2 shards, config, index
}

// sentence-transformers keeps its head in subdirectories (1_Pooling/config.json decides CLS or
// mean pooling): a bake must carry them, under their relative names, but no weights in any
// subdirectory and nothing hidden.
TEST(Bake, CarriesSubdirectoryFilesButNoWeightsOrHiddenFiles) {
  TempDir dir;
  make_checkpoint(dir);
  const std::string pooling = R"({"word_embedding_dimension": 64, "pooling_mode_cls_token": true})";
  std::filesystem::create_directories(dir.path / "1_Pooling");
  std::filesystem::create_directories(dir.path / "onnx");
  std::filesystem::create_directories(dir.path / ".git/objects");
  write_text(dir / "1_Pooling/config.json", pooling);
  write_text(dir / "modules.json", R"([{"path": "1_Pooling", "type": "x.Pooling"}])");
  write_text(dir / "sentence_bert_config.json", R"({"max_seq_length": 128})");
  write_text(dir / "onnx/model.onnx", "not carried");
  write_text(dir / "onnx/model.safetensors.index.json", "{}");
  write_text(dir / ".git/objects/pack", "not carried");
  write_text(dir / "1_Pooling/.hidden", "not carried");
  bake_checkpoint({dir.path.string(), dir / "p.xdna", Precision::F32, 0, {}});
  BakedModel m(dir / "p.xdna");
  ASSERT_TRUE(m.has_file("1_Pooling/config.json"));
  EXPECT_EQ(m.file("1_Pooling/config.json"), pooling);
  EXPECT_TRUE(m.has_file("modules.json"));
  EXPECT_TRUE(m.has_file("sentence_bert_config.json"));
  EXPECT_TRUE(m.has_file("tokenizer.json"));
  EXPECT_EQ(m.file_names(), (std::vector<std::string>{"1_Pooling/config.json", "modules.json",
                                                      "sentence_bert_config.json", "tokenizer.json"}));
}

TEST(Baked, Sha256KnownAnswer) {
  EXPECT_EQ(sha256_hex("abc", 3),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex(nullptr, 0),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

namespace {

// A baked file written by BakedWriter: an f32 [2, 3] tensor, an int8 [2, 4] one with scales.
Bytes small_baked(const TempDir& dir) {
  {
    BakedWriter w(dir / "b.xdna");
    w.add_tensor({{"name", "w"}, {"dtype", "f32"}, {"shape", {2, 3}}});
    w.add_tensor({{"name", "q"}, {"dtype", "int8"}, {"shape", {2, 4}}, {"scales", "q.scales"},
                  {"group", 2}});
    w.add_tensor({{"name", "q.scales"}, {"dtype", "f32"}, {"shape", {2, 2}}});
    w.add_file("vocab.txt", "a\nb\n");
    w.set("config", {{"x", 1}});
    w.begin();
    const float wv[6] = {1, 2, 3, 4, 5, 6};
    w.write(wv, 12);
    w.write(wv + 3, 12);  // in two pieces
    const int8_t qv[8] = {1, -1, 2, -2, 3, -3, 4, -4};
    w.write(qv, 8);
    const float sv[4] = {0.5f, 1, 2, 4};
    w.write(sv, 16);
    w.finish();
  }
  MappedFile f(dir / "b.xdna");
  return Bytes(reinterpret_cast<const uint8_t*>(f.data()),
               reinterpret_cast<const uint8_t*>(f.data()) + f.size());
}

// Rewrites the manifest of a baked file (the data region stays where it is).
Bytes with_manifest(Bytes b, const json& manifest) {
  const std::string m = manifest.dump();
  uint64_t data_offset;
  std::memcpy(&data_offset, &b[32], 8);
  if (64 + m.size() > data_offset) throw std::logic_error("manifest too large for the test");
  std::memset(&b[64], ' ', data_offset - 64);
  std::memcpy(&b[64], m.data(), m.size());
  const uint64_t n = m.size();
  std::memcpy(&b[24], &n, 8);
  return b;
}

std::string open_error(const Bytes& b) {
  return error_of([&] { BakedModel m(buf(b), "bad.xdna"); });
}

}  // namespace

TEST(Baked, WriterAndReaderAgree) {
  TempDir dir;
  const Bytes b = small_baked(dir);
  BakedModel m(buf(b), "mem.xdna");
  EXPECT_EQ(m.get("w").data<float>()[5], 6.0f);
  Tensor q = m.get("q");
  EXPECT_EQ(q.group_size(), 2);
  EXPECT_EQ(q.to_vector(), (std::vector<float>{0.5f, -0.5f, 2, -2, 6, -6, 16, -16}));
  EXPECT_EQ(m.file("vocab.txt"), "a\nb\n");
  EXPECT_EQ(m.config()["x"], 1);
  EXPECT_EQ(m.manifest()["files"][0]["sha256"], sha256_hex("a\nb\n", 4));
  for (const auto& t : m.tensors()) EXPECT_EQ(t.offset % 4096, 0u) << t.name;
}

TEST(Baked, TruncationsThrow) {
  TempDir dir;
  const Bytes full = small_baked(dir);
  for (size_t cut = 0; cut < full.size(); cut += (cut < 4200 ? 1 : 61)) {
    const Bytes part(full.begin(), full.begin() + static_cast<long>(cut));
    const std::string msg = open_error(part);
    EXPECT_NE(msg.find("bad.xdna"), std::string::npos) << cut << ": " << msg;
  }
}

TEST(Baked, CorruptFilesNameTheProblem) {
  TempDir dir;
  const Bytes b = small_baked(dir);
  auto has = [](const std::string& msg, const char* what) {
    EXPECT_NE(msg.find(what), std::string::npos) << "message: " << msg;
  };
  Bytes x = b;
  x[3] = 'X';
  has(open_error(x), "bad magic");
  x = b;
  x[8] = 9;
  has(open_error(x), "version 9");
  x = b;
  const uint64_t absurd = uint64_t{1} << 62;
  std::memcpy(&x[24], &absurd, 8);
  has(open_error(x), "manifest");
  x = b;
  const uint64_t unaligned = 4100;
  std::memcpy(&x[32], &unaligned, 8);
  has(open_error(x), "multiple of 4096");
  x = b;
  x[64] = '#';
  has(open_error(x), "manifest does not parse");

  const json good = BakedModel(buf(b), "m").manifest();
  auto edit = [&](auto fn) {
    json m = good;
    fn(m);
    return open_error(with_manifest(b, m));
  };
  has(edit([](json& m) { m["tensors"][0]["offset"] = 1ull << 40; }), "exceed the data region");
  has(edit([](json& m) { m["tensors"][0]["dtype"] = "f64"; }), "unknown dtype 'f64'");
  has(edit([](json& m) { m["tensors"][0]["bytes"] = 20; }), "needs 24 bytes");
  has(edit([](json& m) { m["tensors"][0]["shape"] = {2, -3}; }), "bad shape");
  has(edit([](json& m) { m["tensors"][1]["scales"] = "nope"; }), "scales tensor 'nope' is missing");
  has(edit([](json& m) { m["tensors"][1]["group"] = 3; }), "group 3 does not divide");
  has(edit([](json& m) { m["tensors"][2]["offset"] = m["tensors"][1]["offset"]; }), "overlap");
  has(edit([](json& m) { m["tensors"][2]["name"] = "w"; }), "listed twice");
  has(edit([](json& m) { m.erase("tensors"); }), "no 'tensors' list");
  has(edit([](json& m) { m["tensors"][0]["offset"] = 4; }), "not 64-byte aligned");
}
