// The CTranslate2 reader and the Whisper importer, against tests/fixtures/ct2 (made by
// scripts/make_ct2_fixtures.py: a random-init tiny transformers Whisper and the same model
// converted by CTranslate2's own converter at float32 and float16).
#include "weights/ctranslate2.h"

#include <cmath>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "core/numeric.h"
#include "weights/baked.h"
#include "weights/safetensors.h"
#include "weights_test_util.h"

namespace {

using namespace xdna;
using namespace wtest;
namespace fs = std::filesystem;
using nlohmann::json;

const std::string kDir = std::string(XDNA_FIXTURE_DIR) + "/ct2/";

json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

std::vector<float> as_f32(const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  const int64_t cols = t.ndim() ? t.shape().back() : 1;
  const int64_t row_bytes = dtype_bytes(t.dtype(), cols);
  const float* scales = t.scales() ? t.scales()->data<float>() : nullptr;
  const int64_t group = t.scales() ? t.group_size() : 0;
  for (int64_t r = 0; r < t.numel() / cols; ++r)
    dequantize_row(t.dtype(), t.raw() + r * row_bytes, out.data() + r * cols, cols,
                   scales ? scales + r * (cols / group) : nullptr, group);
  return out;
}

// Imports `variant` and returns the baked model; the config lands in tmp/config.json.
std::unique_ptr<BakedModel> import(const TempDir& tmp, const std::string& variant,
                                   Precision p = Precision::Keep) {
  const Ct2ImportSummary s = import_ctranslate2_whisper(kDir + variant, tmp / "model.baked",
                                                        tmp / "config.json", p);
  EXPECT_EQ(s.spec, "WhisperSpec");
  return std::make_unique<BakedModel>(tmp / "model.baked");
}

TEST(Ct2Reader, ReadsNamesShapesDtypesAndAliases) {
  auto f = open_ctranslate2(kDir + "whisper_f16/model.bin");
  EXPECT_EQ(f->format(), "ctranslate2");
  EXPECT_EQ(f->metadata()["spec"], "WhisperSpec");
  EXPECT_EQ(f->metadata()["binary_version"], 6);
  const TensorInfo& qkv = f->info("encoder/layer_0/self_attention/linear_0/weight");
  EXPECT_EQ(qkv.shape, (Shape{96, 32}));
  EXPECT_EQ(qkv.file_dtype, "float16");
  EXPECT_EQ(f->info("encoder/conv1/weight").shape, (Shape{32, 16, 3}));
  // Scalars: int16 has no engine dtype, but is listed.
  const TensorInfo& heads = f->info("encoder/num_heads");
  EXPECT_TRUE(heads.shape.empty());
  EXPECT_EQ(heads.file_dtype, "int16");
  EXPECT_FALSE(heads.dtype.has_value());
  // The tied output projection is an alias of the embeddings: same bytes.
  const TensorInfo& proj = f->info("decoder/projection/weight");
  EXPECT_EQ(proj.offset, f->info("decoder/embeddings/weight").offset);
  EXPECT_EQ(f->metadata()["aliases"]["decoder/projection/weight"], "decoder/embeddings/weight");
  EXPECT_EQ(f->get("decoder/projection/weight").shape(), (Shape{64, 32}));
}

// Every tensor of the f32 import is bit-identical to the transformers checkpoint.
TEST(Ct2Import, Float32EqualsTransformersExactly) {
  TempDir tmp;
  auto baked = import(tmp, "whisper_f32");
  SafetensorsFile hf({kDir + "hf/model.safetensors"});
  int64_t compared = 0;
  for (const TensorInfo& t : hf.tensors()) {
    ASSERT_TRUE(baked->contains(t.name)) << t.name;
    const Tensor a = baked->get(t.name), b = hf.get(t.name);
    ASSERT_EQ(a.shape(), b.shape()) << t.name;
    ASSERT_EQ(a.dtype(), DType::F32) << t.name;
    ASSERT_EQ(0, std::memcmp(a.raw(), b.raw(), static_cast<size_t>(b.nbytes()))) << t.name;
    ++compared;
  }
  EXPECT_EQ(compared, static_cast<int64_t>(baked->tensors().size()));  // nothing extra
  EXPECT_EQ(compared, 89);
}

// The f16 import holds exactly the f16 rounding of the transformers values.
TEST(Ct2Import, Float16IsTheRoundingOfTransformers) {
  TempDir tmp;
  auto baked = import(tmp, "whisper_f16");
  SafetensorsFile hf({kDir + "hf/model.safetensors"});
  for (const TensorInfo& t : hf.tensors()) {
    ASSERT_TRUE(baked->contains(t.name)) << t.name;
    const Tensor a = baked->get(t.name);
    ASSERT_EQ(a.dtype(), DType::F16) << t.name;
    const std::vector<float> got = as_f32(a), want = as_f32(hf.get(t.name));
    ASSERT_EQ(got.size(), want.size()) << t.name;
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(got[i], f16_to_f32(f32_to_f16(want[i]))) << t.name << "[" << i << "]";
  }
  EXPECT_EQ(baked->manifest()["source"]["format"], "ctranslate2");
  EXPECT_TRUE(baked->has_file("tokenizer.json"));
}

TEST(Ct2Import, ConfigHasTransformersFieldsAndDecodingLists) {
  TempDir tmp;
  auto baked = import(tmp, "whisper_f16");
  const json got = read_json(tmp / "config.json");
  const json hf = read_json(kDir + "hf/config.json");
  for (const char* k : {"d_model", "encoder_layers", "encoder_attention_heads", "decoder_layers",
                        "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim",
                        "num_mel_bins", "vocab_size", "max_source_positions",
                        "max_target_positions"})
    EXPECT_EQ(got.at(k), hf.at(k)) << k;
  EXPECT_EQ(got["num_heads_source"], "model.bin");  // 4 heads of 8: not a released size
  EXPECT_EQ(got["eos_token_id"], 8);
  EXPECT_EQ(got["decoder_start_token_id"], 9);
  EXPECT_EQ(got["suppress_ids"], json({1, 2}));
  EXPECT_EQ(got["begin_suppress_tokens"], json({8}));
  EXPECT_TRUE(got["alignment_heads"].is_array());
  EXPECT_EQ(baked->config(), got);  // the baked file carries the same config
}

TEST(Ct2Import, ConvertsToTheRequestedPrecision) {
  TempDir tmp;
  auto f32 = import(tmp, "whisper_f16", Precision::F32);
  const std::string q = "model.decoder.layers.1.encoder_attn.v_proj.weight";
  EXPECT_EQ(f32->get(q).dtype(), DType::F32);
  auto src = open_ctranslate2(kDir + "whisper_f16/model.bin");
  // v is the second half of the fused cross-attention [k; v].
  const std::vector<float> fused = as_f32(src->get("decoder/layer_1/attention/linear_1/weight"));
  const std::vector<float> v = as_f32(f32->get(q));
  ASSERT_EQ(v.size() * 2, fused.size());
  for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], fused[v.size() + i]);

  TempDir tmp8;
  auto i8 = import(tmp8, "whisper_f16", Precision::Int8);
  const Tensor w = i8->get(q);
  EXPECT_EQ(w.dtype(), DType::I8);
  const std::vector<float> deq = as_f32(w);
  for (size_t i = 0; i < v.size(); ++i) ASSERT_NEAR(deq[i], v[i], 0.02f) << i;
  EXPECT_EQ(i8->get("model.decoder.layers.1.encoder_attn.v_proj.bias").dtype(), DType::F32);
}

TEST(Ct2Import, RefusesWhatIsNotAWhisperDirectory) {
  TempDir tmp;
  EXPECT_NE(error_of([&] { import_ctranslate2_whisper(tmp.path.string(), tmp / "o", tmp / "c"); })
                .find("no model.bin"),
            std::string::npos);
}

// ---- malformed model.bin -----------------------------------------------------------------------

void put_ct2_str(Bytes& b, const std::string& s) {
  put<uint16_t>(b, static_cast<uint16_t>(s.size() + 1));
  b.insert(b.end(), s.begin(), s.end());
  b.push_back(0);
}

// A model.bin with one f32 [2, 3] variable "w" and an alias "a" -> "w".
Bytes tiny_bin(uint32_t version = 6, uint8_t dtype = 0, uint32_t bytes = 24,
               const std::string& spec = "WhisperSpec", const std::string& name = "w") {
  Bytes b;
  put<uint32_t>(b, version);
  put_ct2_str(b, spec);
  put<uint32_t>(b, 3);  // revision
  put<uint32_t>(b, 1);
  put_ct2_str(b, name);
  put<uint8_t>(b, 2);
  put<uint32_t>(b, 2);
  put<uint32_t>(b, 3);
  put<uint8_t>(b, dtype);
  put<uint32_t>(b, bytes);
  put_floats(b, {1, 2, 3, 4, 5, 6});
  put<uint32_t>(b, 1);
  put_ct2_str(b, "a");
  put_ct2_str(b, name);
  return b;
}

std::string open_error(const TempDir& tmp, const Bytes& b) {
  write_file(tmp.path / "model.bin", b);
  return error_of([&] { open_ctranslate2(tmp / "model.bin"); });
}

TEST(Ct2Reader, CraftedFileReadsBack) {
  TempDir tmp;
  write_file(tmp.path / "model.bin", tiny_bin());
  auto f = open_ctranslate2(tmp / "model.bin");
  ASSERT_EQ(f->tensors().size(), 2u);
  EXPECT_EQ(f->get("a").data<float>()[5], 6.0f);
}

TEST(Ct2Reader, BadVersionNamesFileAndOffset) {
  TempDir tmp;
  const std::string e = open_error(tmp, tiny_bin(5));
  EXPECT_NE(e.find("model.bin"), std::string::npos) << e;
  EXPECT_NE(e.find("byte offset 0"), std::string::npos) << e;
  EXPECT_NE(e.find("binary version 5"), std::string::npos) << e;
}

TEST(Ct2Reader, UnknownDtype) {
  TempDir tmp;
  const std::string e = open_error(tmp, tiny_bin(6, 9));
  // 4 version + 14 spec + 4 revision + 4 count + 4 name + 1 rank + 8 dims = byte 39.
  EXPECT_NE(e.find("byte offset 39"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown dtype id 9"), std::string::npos) << e;
}

TEST(Ct2Reader, DimsAndByteCountDisagree) {
  TempDir tmp;
  const std::string e = open_error(tmp, tiny_bin(6, 4, 24));  // f16 [2,3] is 12 bytes
  EXPECT_NE(e.find("needs 12 bytes but says 24"), std::string::npos) << e;
  EXPECT_NE(e.find("byte offset 40"), std::string::npos) << e;
}

TEST(Ct2Reader, EveryTruncationIsAnErrorNotACrash) {
  TempDir tmp;
  const Bytes full = tiny_bin();
  for (size_t n = 0; n < full.size(); ++n) {
    const std::string e = open_error(tmp, Bytes(full.begin(), full.begin() + n));
    EXPECT_NE(e.find("byte offset"), std::string::npos) << n << ": " << e;
  }
  Bytes extra = full;
  extra.push_back(7);
  EXPECT_NE(open_error(tmp, extra).find("follow the alias table"), std::string::npos);
}

TEST(Ct2Reader, BadAliasAndStrings) {
  TempDir tmp;
  Bytes b = tiny_bin();
  b[b.size() - 2] = 'x';  // alias target "w" -> "x"
  EXPECT_NE(open_error(tmp, b).find("unknown variable 'x'"), std::string::npos);
  Bytes c = tiny_bin();
  c[4 + 2 + 11] = 'Z';  // the spec name's NUL
  EXPECT_NE(open_error(tmp, c).find("not NUL-terminated"), std::string::npos);
}

TEST(Ct2Import, RefusesOtherSpecs) {
  TempDir tmp;
  fs::create_directories(tmp.path / "m");
  write_file(tmp.path / "m" / "model.bin", tiny_bin(6, 0, 24, "TransformerSpec"));
  const std::string e =
      error_of([&] { import_ctranslate2_whisper(tmp / "m", tmp / "o", tmp / "c"); });
  EXPECT_NE(e.find("not WhisperSpec"), std::string::npos) << e;
}

TEST(Ct2Import, RefusesQuantizedModels) {
  TempDir tmp;
  fs::create_directories(tmp.path / "m");
  write_file(tmp.path / "m" / "model.bin",
             tiny_bin(6, 0, 24, "WhisperSpec", "encoder/layer_0/ffn/linear_0/weight_scale"));
  const std::string e =
      error_of([&] { import_ctranslate2_whisper(tmp / "m", tmp / "o", tmp / "c"); });
  EXPECT_NE(e.find("quantized CTranslate2 models are not supported"), std::string::npos) << e;
}

}  // namespace
