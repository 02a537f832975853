#include <gtest/gtest.h>

#include <cmath>

#include "weights/safetensors.h"
#include "weights_test_util.h"

using namespace xdna;
using namespace wtest;
using nlohmann::json;

namespace {

// Two tensors: f32 [2, 3] = 0..5 at [0, 24), bf16 [4] = 1, 2, 3, 4 at [24, 32).
Bytes valid_file() {
  json h = {{"w", {{"dtype", "F32"}, {"shape", {2, 3}}, {"data_offsets", {0, 24}}}},
            {"b", {{"dtype", "BF16"}, {"shape", {4}}, {"data_offsets", {24, 32}}}},
            {"__metadata__", {{"format", "pt"}}}};
  Bytes data;
  put_floats(data, {0, 1, 2, 3, 4, 5});
  for (float x : {1.0f, 2.0f, 3.0f, 4.0f}) {
    uint32_t bits;
    std::memcpy(&bits, &x, 4);
    put<uint16_t>(data, static_cast<uint16_t>(bits >> 16));
  }
  return safetensors_bytes(h, data);
}

std::string open_error(const json& header, const Bytes& data) {
  return error_of([&] { SafetensorsFile f(buf(safetensors_bytes(header, data)), "bad.st"); });
}

json entry(const char* dtype, json shape, uint64_t b, uint64_t e) {
  return {{"dtype", dtype}, {"shape", shape}, {"data_offsets", {b, e}}};
}

}  // namespace

TEST(Safetensors, ReadsTensorsAndMetadata) {
  SafetensorsFile f(buf(valid_file()), "mem.st");
  ASSERT_EQ(f.names(), (std::vector<std::string>{"w", "b"}));  // file order, not key order
  Tensor w = f.get("w");
  EXPECT_EQ(w.dtype(), DType::F32);
  EXPECT_EQ(w.shape(), (Shape{2, 3}));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(w.data<float>()[i], float(i));
  Tensor b = f.get("b");
  EXPECT_EQ(b.dtype(), DType::BF16);
  EXPECT_EQ(b.data<uint16_t>()[2], 0x4040);  // 3.0 in bf16
  EXPECT_EQ(f.metadata()["format"], "pt");
  EXPECT_EQ(f.info("b").offset, f.info("w").offset + 24);
  EXPECT_NE(error_of([&] { f.get("nope"); }).find("no tensor named 'nope'"), std::string::npos);
}

TEST(Safetensors, FileTensorsAreViewsOfTheMapping) {
  TempDir dir;
  write_file(dir / "m.safetensors", valid_file());
  auto src = open_weights(dir / "m.safetensors");
  EXPECT_EQ(src->format(), "safetensors");
  Tensor w = src->get("w");
  auto* map = dynamic_cast<MappedFile*>(w.buffer().get());
  ASSERT_NE(map, nullptr);
  EXPECT_GE(w.raw(), map->data());
  EXPECT_LE(w.raw() + w.nbytes(), map->data() + map->size());
  EXPECT_EQ(w.data<float>()[5], 5.0f);
}

TEST(Safetensors, EveryTruncationThrows) {
  const Bytes full = valid_file();
  for (size_t cut = 0; cut < full.size(); ++cut) {
    const Bytes part(full.begin(), full.begin() + static_cast<long>(cut));
    const std::string msg = error_of([&] { SafetensorsFile f(buf(part), "cut.st"); });
    EXPECT_NE(msg.find("cut.st"), std::string::npos) << "cut at " << cut << ": " << msg;
  }
}

TEST(Safetensors, MalformedHeadersNameTheProblem) {
  Bytes d(64, 0);
  auto has = [](const std::string& msg, const char* what) {
    EXPECT_NE(msg.find(what), std::string::npos) << "message: " << msg;
  };
  // Header length beyond the file.
  Bytes huge;
  put<uint64_t>(huge, 1ull << 60);
  has(error_of([&] { SafetensorsFile f(buf(huge), "bad.st"); }), "header length");
  // JSON that does not parse / is not an object.
  Bytes junk;
  put<uint64_t>(junk, 5);
  for (char c : std::string("{\"a\":")) junk.push_back(static_cast<uint8_t>(c));
  has(error_of([&] { SafetensorsFile f(buf(junk), "bad.st"); }), "does not parse");
  has(open_error(json::array(), d), "not an object");
  has(open_error({{"t", entry("F7", {2}, 0, 8)}}, d), "unknown dtype 'F7'");
  has(open_error({{"t", entry("F32", {2, 3}, 0, 20)}}, d), "needs 24 bytes");
  has(open_error({{"t", entry("F32", {4}, 56, 72)}}, d), "exceed the data region");
  has(open_error({{"t", entry("F32", {0}, 8, 4)}}, d), "end before they begin");
  has(open_error({{"t", entry("F32", {-2}, 0, 8)}}, d), "non-negative");
  has(open_error({{"t", entry("F32", {1ll << 40, 1ll << 40}, 0, 8)}}, d), "absurdly large");
  has(open_error({{"t", {{"dtype", "F32"}, {"shape", {2}}}}}, d), "data_offsets");
  has(open_error({{"t", {{"shape", {2}}, {"data_offsets", {0, 8}}}}}, d), "'dtype'");
  has(open_error({{"t", 5}}, d), "not an object");
  has(open_error({{"__metadata__", 5}}, d), "__metadata__");
  const std::string overlap =
      open_error({{"a", entry("F32", {4}, 0, 16)}, {"b", entry("F32", {4}, 8, 24)}}, d);
  has(overlap, "overlap");
  has(overlap, "'a'");
  // The tensor name is part of the message.
  has(open_error({{"layer.7.w", entry("F32", {2, 3}, 0, 20)}}, d), "tensor 'layer.7.w'");
}

// Found by tests/fuzz/fuzz_safetensors: a zero dimension made the element count 0, so the other
// dimensions (each up to 2^48) were unchecked and get()'s int64 strides overflowed (UB).
TEST(Safetensors, ZeroSizeTensorCannotHideOverflowingStrides) {
  const Bytes d(8, 0);
  const std::string m = open_error({{"t", entry("F32", {0, 1ll << 48, 1ll << 48, 1ll << 48}, 0, 0)}}, d);
  EXPECT_NE(m.find("absurdly large"), std::string::npos) << m;
  // A zero-size tensor of sane dimensions is still a valid (empty) view.
  SafetensorsFile f(buf(safetensors_bytes({{"t", entry("F32", {0, 4}, 0, 0)}}, d)), "empty.st");
  const Tensor t = f.get("t");
  EXPECT_EQ(t.shape(), (Shape{0, 4}));
  EXPECT_EQ(t.numel(), 0);
}

TEST(Safetensors, UnsupportedDtypeFailsOnGet) {
  Bytes d(16, 0);
  SafetensorsFile f(buf(safetensors_bytes({{"pos", entry("I64", {2}, 0, 16)}}, d)), "x.st");
  ASSERT_EQ(f.tensors().size(), 1u);
  EXPECT_EQ(f.tensors()[0].file_dtype, "I64");
  EXPECT_FALSE(f.tensors()[0].dtype.has_value());
  const std::string msg = error_of([&] { f.get("pos"); });
  EXPECT_NE(msg.find("'pos'"), std::string::npos);
  EXPECT_NE(msg.find("I64"), std::string::npos);
}

TEST(Safetensors, ReadsUpstreamFixture) {
  const std::string path = std::string(XDNA_FIXTURE_DIR) + "/weights/tiny.safetensors";
  auto src = open_weights(path);
  EXPECT_EQ(src->metadata()["note"], "xdna fixture");
  EXPECT_EQ(src->info("linear.weight").shape, (Shape{3, 4}));
  EXPECT_EQ(src->info("half").file_dtype, "F16");
  EXPECT_EQ(src->info("brain").shape, (Shape{4, 2}));
  EXPECT_EQ(src->info("scalar").shape, Shape{});
  // Values were drawn as k / 8 with k in [-64, 64): check they decode as such.
  Tensor w = src->get("linear.weight");
  for (int i = 0; i < 12; ++i) {
    const float x = w.data<float>()[i] * 8;
    EXPECT_EQ(x, std::round(x));
    EXPECT_LT(std::fabs(x), 65);
  }
  Tensor ids = src->get("ids");
  EXPECT_EQ(ids.dtype(), DType::I32);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(ids.data<int32_t>()[i], i);
  Tensor codes = src->get("codes");
  EXPECT_EQ(codes.dtype(), DType::I8);
  EXPECT_EQ(codes.data<int8_t>()[0], -128);
  EXPECT_EQ(codes.data<int8_t>()[4], 127);
  EXPECT_EQ(src->get("scalar").data<float>()[0], 2.5f);
  EXPECT_NE(error_of([&] { src->get("steps"); }).find("I64"), std::string::npos);
  Tensor brain = src->get("brain");
  EXPECT_EQ(brain.dtype(), DType::BF16);
  uint32_t bits = uint32_t(brain.data<uint16_t>()[0]) << 16;
  float x;
  std::memcpy(&x, &bits, 4);
  EXPECT_EQ(x * 8, std::round(x * 8));
}

TEST(Safetensors, ReadsShardedCheckpointDirectory) {
  const std::string dir = std::string(XDNA_FIXTURE_DIR) + "/weights/sharded";
  auto src = open_weights(dir);
  EXPECT_EQ(src->tensors().size(), 4u);
  EXPECT_EQ(src->info("lm_head.weight").shape, (Shape{8, 16}));
  EXPECT_NE(src->info("lm_head.weight").file.find("model-00002-of-00002"), std::string::npos);
  EXPECT_NE(src->info("model.norm.weight").file.find("model-00001-of-00002"), std::string::npos);
  EXPECT_EQ(src->metadata()["total_size"], 4 * (8 * 16 + 16 + 32 * 16 + 8 * 16));
  EXPECT_EQ(src->get("model.layers.0.mlp.up_proj.weight").shape(), (Shape{32, 16}));
}

TEST(Safetensors, ShardIndexMustMatchTheShards) {
  TempDir dir;
  write_file(dir / "a.safetensors", valid_file());
  write_text(dir / "model.safetensors.index.json",
             R"({"weight_map": {"w": "a.safetensors", "missing": "a.safetensors"}})");
  std::string msg = error_of([&] { open_weights(dir.path.string()); });
  EXPECT_NE(msg.find("'missing'"), std::string::npos) << msg;
  write_text(dir / "model.safetensors.index.json", R"({"weight_map": {"w": "../a.safetensors"}})");
  msg = error_of([&] { open_weights(dir.path.string()); });
  EXPECT_NE(msg.find("leaves the checkpoint directory"), std::string::npos) << msg;
  write_text(dir / "model.safetensors.index.json", R"({"weight_map": {"w": "b.safetensors"}})");
  msg = error_of([&] { open_weights(dir.path.string()); });
  EXPECT_NE(msg.find("b.safetensors"), std::string::npos) << msg;
}

TEST(Safetensors, DuplicateNamesAcrossShardsThrow) {
  TempDir dir;
  write_file(dir / "a.safetensors", valid_file());
  write_file(dir / "b.safetensors", valid_file());
  const std::string msg = error_of([&] { open_weights(dir.path.string()); });
  EXPECT_NE(msg.find("more than one shard"), std::string::npos) << msg;
}
