// GGUF q5_0 tensors load as the engine's Q5_0 (the file's bytes, not a conversion), and malformed
// ones are refused with the tensor's name.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "weights/gguf.h"
#include "weights_test_util.h"

using namespace xdna;
using namespace wtest;

namespace {

constexpr uint32_t kGgmlQ5_0 = 6;

// A GGUF v3 file with no metadata and one tensor (`ne` innermost first), its data at offset 0.
Bytes one_tensor(const std::string& name, const std::vector<uint64_t>& ne, const Bytes& data) {
  Bytes b;
  put<uint32_t>(b, 0x46554747);  // "GGUF"
  put<uint32_t>(b, 3);
  put<uint64_t>(b, 1);  // tensors
  put<uint64_t>(b, 0);  // metadata entries
  put_str(b, name);
  put<uint32_t>(b, static_cast<uint32_t>(ne.size()));
  for (uint64_t d : ne) put<uint64_t>(b, d);
  put<uint32_t>(b, kGgmlQ5_0);
  put<uint64_t>(b, 0);
  while (b.size() % 32) b.push_back(0);
  b.insert(b.end(), data.begin(), data.end());
  return b;
}

// n blocks: d = 0.5; qh bit j set for odd j; low nibbles j % 16.
Bytes q5_blocks(int n) {
  Bytes b;
  for (int i = 0; i < n; ++i) {
    put<uint16_t>(b, 0x3800);
    put<uint32_t>(b, 0xAAAAAAAAu);
    for (int j = 0; j < 16; ++j) b.push_back(static_cast<uint8_t>(j | (15 - j) << 4));
  }
  return b;
}

std::string open_error(const Bytes& b) {
  return error_of([&] { GgufFile f(buf(b), "bad.gguf"); });
}

TEST(GgufQ5_0, LoadsAsEngineQ5_0) {
  const Bytes data = q5_blocks(4);
  GgufFile f(buf(one_tensor("w", {64, 2}, data)), "mem.gguf");
  const TensorInfo& info = f.info("w");
  EXPECT_EQ(info.file_dtype, "q5_0");
  ASSERT_TRUE(info.dtype.has_value());
  EXPECT_EQ(*info.dtype, DType::Q5_0);
  const Tensor t = f.get("w");
  EXPECT_EQ(t.dtype(), DType::Q5_0);
  EXPECT_EQ(t.shape(), (Shape{2, 64}));
  const std::vector<float> v = t.to_vector();
  ASSERT_EQ(v.size(), 128u);
  // Value j < 16: nibble j, fifth bit j % 2; value j + 16: nibble 15 - j, fifth bit (j + 16) % 2.
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(v[j], 0.5f * float((j | (j % 2) << 4) - 16)) << j;
    EXPECT_EQ(v[j + 16], 0.5f * float(((15 - j) | (j % 2) << 4) - 16)) << j + 16;
  }
}

TEST(GgufQ5_0, MalformedTensorsNameTheTensor) {
  // A row of 48 values is not whole blocks of 32.
  std::string m = open_error(one_tensor("blk.0.attn_q.weight", {48, 2}, q5_blocks(3)));
  EXPECT_NE(m.find("blk.0.attn_q.weight"), std::string::npos) << m;
  EXPECT_NE(m.find("not a multiple of the q5_0 block size 32"), std::string::npos) << m;
  // Data shorter than 2 rows of 2 blocks (22 bytes each) need.
  m = open_error(one_tensor("blk.0.ffn_up.weight", {64, 2}, q5_blocks(3)));
  EXPECT_NE(m.find("blk.0.ffn_up.weight"), std::string::npos) << m;
}

}  // namespace
