#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "weights/torch_checkpoint.h"

using namespace xdna;
using nlohmann::json;

namespace {

const std::string kDir = std::string(XDNA_FIXTURE_DIR) + "/torch_checkpoint/";

json expected() {
  std::ifstream in(kDir + "expected.json");
  return json::parse(in);
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::shared_ptr<Buffer> heap(const std::string& bytes) {
  auto b = std::make_shared<HeapBuffer>(std::max<size_t>(bytes.size(), 1));
  std::memcpy(b->data(), bytes.data(), bytes.size());
  return b;
}

// Error text of opening `path`, or "" if it opened.
std::string open_error(const std::string& path) {
  try {
    TorchCheckpoint c(path);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

void expect_values(const TorchCheckpoint& c, const json& tensors) {
  for (const auto& [name, want] : tensors.items()) {
    SCOPED_TRACE(name);
    const TensorInfo& info = c.info(name);
    EXPECT_EQ(info.shape, want["shape"].get<Shape>());
    const auto& vals = want["values"];
    if (want["dtype"] == "int64") {
      EXPECT_EQ(info.file_dtype, "int64");
      EXPECT_THROW(c.get(name), std::runtime_error);
      const std::vector<int64_t> got = c.get_i64(name);
      ASSERT_EQ(got.size(), vals.size());
      for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], vals[i].get<int64_t>());
      continue;
    }
    const std::vector<float> got = c.get(name).to_vector();
    ASSERT_EQ(got.size(), vals.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], vals[i].get<double>()) << "at " << i;
  }
}

TEST(TorchCheckpoint, ZipValuesDtypesStridesAndOffsets) {
  TorchCheckpoint c(kDir + "plain.pt");
  EXPECT_EQ(c.format(), "torch");
  EXPECT_EQ(c.metadata()["container"], "zip");
  const json want = expected()["tensors"];
  EXPECT_EQ(c.tensors().size(), want.size());
  EXPECT_EQ(c.info("half").dtype, DType::F16);
  EXPECT_EQ(c.info("bf16").dtype, DType::BF16);
  EXPECT_EQ(c.info("scalar").shape, Shape{});
  expect_values(c, want);
  // Contiguous tensors are views of the mapped file; strided ones are copies.
  EXPECT_FALSE(c.get("layer.weight").writable());
  EXPECT_TRUE(c.get("transposed").writable());
}

TEST(TorchCheckpoint, LegacyFormatReadsTheSameValues) {
  TorchCheckpoint c(kDir + "legacy.pt");
  EXPECT_EQ(c.metadata()["container"], "legacy");
  expect_values(c, expected()["tensors"]);
}

TEST(TorchCheckpoint, NestedStateDictUnderStateDictOrModel) {
  const json want = expected()["nested"];
  for (const char* file : {"nested_state_dict.pt", "nested_model.pt"}) {
    SCOPED_TRACE(file);
    TorchCheckpoint c(kDir + file);
    EXPECT_EQ(c.metadata()["state_dict_key"], std::string(file) == "nested_model.pt" ? "model" : "state_dict");
    ASSERT_EQ(c.names(), (std::vector<std::string>{"layer.weight", "layer.bias"}));
    const std::vector<float> w = c.get("layer.weight").to_vector();
    ASSERT_EQ(w.size(), want["layer.weight"].size());
    for (size_t i = 0; i < w.size(); ++i) EXPECT_EQ(w[i], want["layer.weight"][i].get<double>());
  }
}

TEST(TorchCheckpoint, RefusesDisallowedGlobalsAndOpcodes) {
  const std::string evil = open_error(kDir + "evil_global.pt");
  EXPECT_NE(evil.find("global os.system"), std::string::npos) << evil;
  EXPECT_NE(evil.find("offset 2"), std::string::npos) << evil;
  const std::string op = open_error(kDir + "bad_opcode.pt");
  EXPECT_NE(op.find("opcode 0x69"), std::string::npos) << op;
  const std::string deflated = open_error(kDir + "deflated.pt");
  EXPECT_NE(deflated.find("compressed entry"), std::string::npos) << deflated;
  const std::string truncated = open_error(kDir + "truncated.pt");
  EXPECT_NE(truncated.find("truncated"), std::string::npos) << truncated;
  EXPECT_NE(open_error(kDir + "expected.json").find("not a torch checkpoint"), std::string::npos);
}

TEST(TorchCheckpoint, EveryTruncationIsAnError) {
  for (const char* file : {"plain.pt", "legacy.pt"}) {
    const std::string bytes = read_all(kDir + file);
    for (size_t n = 0; n < bytes.size(); n += 7) {
      SCOPED_TRACE(std::string(file) + " cut at " + std::to_string(n));
      EXPECT_THROW(TorchCheckpoint(heap(bytes.substr(0, n)), file), std::invalid_argument);
    }
  }
}

// A hand-laid legacy checkpoint: {"w": float tensor of `shape`/`stride` at `offset` in a storage
// of 4 floats 1, 2, 3, 4}.
std::string legacy_file(int offset, int rows, int cols, int row_stride, int col_stride) {
  auto i1 = [](int v) { return std::string("K") + static_cast<char>(v); };
  auto str = [](const std::string& v) {  // BINUNICODE
    return std::string("X") + static_cast<char>(v.size()) + std::string(3, '\0') + v;
  };
  std::string f;
  f += std::string("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.", 15);  // magic
  f += std::string("\x80\x02M\xe9\x03.", 6);                                          // 1001
  f += std::string("\x80\x02}.", 4);                                                 // sys_info
  f += std::string("\x80\x02}(", 4) + str("w");
  f += "ctorch._utils\n_rebuild_tensor_v2\n(";
  f += "(" + str("storage") + "ctorch\nFloatStorage\n" + str("0") + str("cpu") + i1(4) + "NtQ";
  f += i1(offset) + "(" + i1(rows) + i1(cols) + "t(" + i1(row_stride) + i1(col_stride) + "t";
  f += "\x89" "ccollections\nOrderedDict\n)RtRu.";
  f += std::string("\x80\x02]", 3) + str("0") + "a.";  // storage keys ["0"]
  const int64_t count = 4;
  f.append(reinterpret_cast<const char*>(&count), 8);
  for (float v : {1.0f, 2.0f, 3.0f, 4.0f}) f.append(reinterpret_cast<const char*>(&v), 4);
  return f;
}

TEST(TorchCheckpoint, HandLaidStridesAndBounds) {
  {
    TorchCheckpoint c(heap(legacy_file(0, 2, 2, 1, 2)), "transposed");  // [[1, 3], [2, 4]]
    EXPECT_EQ(c.get("w").to_vector(), (std::vector<float>{1, 3, 2, 4}));
  }
  {
    TorchCheckpoint c(heap(legacy_file(1, 3, 1, 1, 1)), "offset");  // [2, 3, 4]
    EXPECT_EQ(c.get("w").to_vector(), (std::vector<float>{2, 3, 4}));
  }
  for (auto [off, rows, cols, rs, cs] : {std::array{1, 2, 2, 2, 1}, std::array{0, 2, 2, 3, 1},
                                         std::array{0, 5, 1, 1, 1}}) {
    try {
      TorchCheckpoint c(heap(legacy_file(off, rows, cols, rs, cs)), "outside");
      ADD_FAILURE() << "opened a tensor outside its storage";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("lies outside its storage of 4 elements"), std::string::npos) << e.what();
    }
  }
}

TEST(TorchCheckpoint, ByteFlipsNeverCrash) {
  const std::string bytes = read_all(kDir + "legacy.pt");
  int refused = 0;
  for (size_t i = 0; i < std::min<size_t>(bytes.size(), 900); ++i) {
    std::string b = bytes;
    b[i] = static_cast<char>(b[i] ^ 0x5a);
    try {
      TorchCheckpoint c(heap(b), "flipped");
      for (const TensorInfo& t : c.tensors())
        if (t.dtype) c.get(t.name);
    } catch (const std::exception&) {
      ++refused;
    }
  }
  EXPECT_GT(refused, 100);
}

}  // namespace
