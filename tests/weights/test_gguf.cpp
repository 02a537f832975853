#include <gtest/gtest.h>

#include <cmath>

#include "weights/gguf.h"
#include "weights/safetensors.h"
#include "weights_test_util.h"

using namespace xdna;
using namespace wtest;

namespace {

// Metadata entries, appended to a blob; `n` counts them.
struct Kv {
  Bytes b;
  uint64_t n = 0;
  Kv& raw(const std::string& key, GgufType t, const Bytes& payload) {
    put_str(b, key);
    put<uint32_t>(b, static_cast<uint32_t>(t));
    b.insert(b.end(), payload.begin(), payload.end());
    ++n;
    return *this;
  }
  template <typename T>
  Kv& num(const std::string& key, GgufType t, T v) {
    Bytes p;
    put(p, v);
    return raw(key, t, p);
  }
  Kv& str(const std::string& key, const std::string& s) {
    Bytes p;
    put_str(p, s);
    return raw(key, GgufType::String, p);
  }
};

struct GTensor {
  std::string name;
  std::vector<uint64_t> ne;  // innermost first
  uint32_t type;
  Bytes data;
};

// A GGUF file: header, metadata, tensor infos, padding to `alignment`, tensors back to back
// (each padded to the alignment, the last one ending the file).
Bytes gguf_bytes(const Kv& kv, const std::vector<GTensor>& ts, uint64_t alignment = 32,
                 uint32_t version = 3) {
  Bytes b;
  put<uint32_t>(b, 0x46554747);
  put<uint32_t>(b, version);
  put<uint64_t>(b, ts.size());
  put<uint64_t>(b, kv.n);
  b.insert(b.end(), kv.b.begin(), kv.b.end());
  uint64_t off = 0;
  for (const auto& t : ts) {
    put_str(b, t.name);
    put<uint32_t>(b, static_cast<uint32_t>(t.ne.size()));
    for (uint64_t d : t.ne) put<uint64_t>(b, d);
    put<uint32_t>(b, t.type);
    put<uint64_t>(b, off);
    off = (off + t.data.size() + alignment - 1) / alignment * alignment;
  }
  while (b.size() % alignment) b.push_back(0);
  for (size_t i = 0; i < ts.size(); ++i) {
    b.insert(b.end(), ts[i].data.begin(), ts[i].data.end());
    if (i + 1 < ts.size())
      while (b.size() % alignment) b.push_back(0);
  }
  return b;
}

Bytes floats(std::initializer_list<float> v) {
  Bytes b;
  put_floats(b, v);
  return b;
}

// One q8_0 block: f16 scale 0.5 (0x3800), then 32 int8 values i - 16.
Bytes q8_block() {
  Bytes b;
  put<uint16_t>(b, 0x3800);
  for (int i = 0; i < 32; ++i) b.push_back(static_cast<uint8_t>(static_cast<int8_t>(i - 16)));
  return b;
}

Kv all_types() {
  Kv kv;
  kv.num("u8", GgufType::U8, uint8_t{200}).num("i8", GgufType::I8, int8_t{-100});
  kv.num("u16", GgufType::U16, uint16_t{60000}).num("i16", GgufType::I16, int16_t{-30000});
  kv.num("u32", GgufType::U32, uint32_t{4000000000u}).num("i32", GgufType::I32, int32_t{-7});
  kv.num("f32", GgufType::F32, 0.25f).num("u64", GgufType::U64, uint64_t{1} << 63);
  kv.num("i64", GgufType::I64, int64_t{-1} << 40).num("f64", GgufType::F64, 1.5);
  kv.num("yes", GgufType::Bool, uint8_t{1}).str("name", "tiny");
  Bytes arr;  // [u16: 1, 2, 3]
  put<uint32_t>(arr, static_cast<uint32_t>(GgufType::U16));
  put<uint64_t>(arr, 3);
  for (uint16_t v : {1, 2, 3}) put(arr, v);
  kv.raw("arr", GgufType::Array, arr);
  Bytes strs;  // ["x", ""]
  put<uint32_t>(strs, static_cast<uint32_t>(GgufType::String));
  put<uint64_t>(strs, 2);
  put_str(strs, "x");
  put_str(strs, "");
  kv.raw("strs", GgufType::Array, strs);
  Bytes nested;  // [[i32: 5], [i32:]]
  put<uint32_t>(nested, static_cast<uint32_t>(GgufType::Array));
  put<uint64_t>(nested, 2);
  put<uint32_t>(nested, static_cast<uint32_t>(GgufType::I32));
  put<uint64_t>(nested, 1);
  put<int32_t>(nested, 5);
  put<uint32_t>(nested, static_cast<uint32_t>(GgufType::I32));
  put<uint64_t>(nested, 0);
  kv.raw("nested", GgufType::Array, nested);
  return kv;
}

Bytes valid_file(uint32_t version = 3) {
  Kv kv = all_types();
  kv.num("general.alignment", GgufType::U32, uint32_t{64});
  return gguf_bytes(kv,
                    {{"mat", {3, 2}, 0, floats({0, 1, 2, 3, 4, 5})},
                     {"q", {32, 1}, 8, q8_block()},
                     {"v", {2}, 0, floats({7, 8})}},
                    64, version);
}

std::string open_error(const Bytes& b) {
  return error_of([&] { GgufFile f(buf(b), "bad.gguf"); });
}

void expect_has(const std::string& msg, const std::string& what) {
  EXPECT_NE(msg.find(what), std::string::npos) << "message: " << msg;
}

}  // namespace

TEST(Gguf, ReadsEveryValueTypeInVersions2And3) {
  for (uint32_t version : {2u, 3u}) {
    GgufFile f(buf(valid_file(version)), "mem.gguf");
    EXPECT_EQ(f.version(), version);
    EXPECT_EQ(f.alignment(), 64u);
    EXPECT_EQ(f.get_int("u8"), 200);
    EXPECT_EQ(f.get_int("i8"), -100);
    EXPECT_EQ(f.get_int("u16"), 60000);
    EXPECT_EQ(f.get_int("i16"), -30000);
    EXPECT_EQ(f.get_uint("u32"), 4000000000u);
    EXPECT_EQ(f.get_int("i32"), -7);
    EXPECT_EQ(f.get_float("f32"), 0.25);
    EXPECT_EQ(f.get_uint("u64"), uint64_t{1} << 63);
    EXPECT_EQ(f.get_int("i64"), int64_t{-1} << 40);
    EXPECT_EQ(f.get_float("f64"), 1.5);
    EXPECT_TRUE(f.get_bool("yes"));
    EXPECT_EQ(f.get_string("name"), "tiny");
    EXPECT_EQ(f.get_int_array("arr"), (std::vector<int64_t>{1, 2, 3}));
    EXPECT_EQ(f.get_float_array("arr"), (std::vector<double>{1, 2, 3}));
    EXPECT_EQ(f.get_string_array("strs"), (std::vector<std::string>{"x", ""}));
    EXPECT_EQ(f.value("nested").value, nlohmann::json::parse("[[5], []]"));
    EXPECT_EQ(f.value("nested").elem_type, GgufType::Array);
    EXPECT_EQ(f.value("u16").type, GgufType::U16);
    EXPECT_EQ(f.get_int("absent", 9), 9);
    EXPECT_EQ(f.get_string("absent", "d"), "d");
    EXPECT_EQ(f.metadata()["name"], "tiny");
  }
}

TEST(Gguf, TypedGettersRefuseOtherTypes) {
  GgufFile f(buf(valid_file()), "mem.gguf");
  expect_has(error_of([&] { f.get_string("u32"); }), "'u32' is u32, not a string");
  expect_has(error_of([&] { f.get_int("name"); }), "is string, not an integer");
  expect_has(error_of([&] { f.get_int("u64"); }), "does not fit in an int64");
  expect_has(error_of([&] { f.get_uint("i8"); }), "negative");
  expect_has(error_of([&] { f.get_bool("u8"); }), "not a bool");
  expect_has(error_of([&] { f.get_string_array("arr"); }), "array of u16, not an array of string");
  expect_has(error_of([&] { f.get_int_array("strs"); }), "array of string");
  expect_has(error_of([&] { f.get_int("absent"); }), "no metadata key 'absent'");
  expect_has(error_of([&] { f.get_int("name", 3); }), "not an integer");
}

TEST(Gguf, TensorsAreOutermostFirstViews) {
  GgufFile f(buf(valid_file()), "mem.gguf");
  ASSERT_EQ(f.names(), (std::vector<std::string>{"mat", "q", "v"}));
  EXPECT_EQ(f.data_offset() % 64, 0u);
  Tensor m = f.get("mat");
  EXPECT_EQ(m.shape(), (Shape{2, 3}));  // ne = {3, 2}
  EXPECT_EQ(m.data<float>()[4], 4.0f);
  EXPECT_EQ(m.byte_offset(), f.data_offset());
  Tensor q = f.get("q");
  EXPECT_EQ(q.dtype(), DType::Q8_0);
  EXPECT_EQ(q.shape(), (Shape{1, 32}));
  EXPECT_EQ(q.byte_offset(), f.data_offset() + 64);
  EXPECT_EQ(f.info("q").file_dtype, "q8_0");
  EXPECT_EQ(f.ggml_type("q"), 8u);
  EXPECT_EQ(f.get("v").data<float>()[1], 8.0f);
  EXPECT_EQ(f.get("v").shape(), (Shape{2}));
}

TEST(Gguf, EveryTruncationThrows) {
  const Bytes full = valid_file();
  for (size_t cut = 0; cut < full.size(); ++cut) {
    const Bytes part(full.begin(), full.begin() + static_cast<long>(cut));
    const std::string msg = error_of([&] { GgufFile f(buf(part), "cut.gguf"); });
    EXPECT_NE(msg.find("cut.gguf"), std::string::npos) << "cut at " << cut << ": " << msg;
  }
}

TEST(Gguf, CorruptHeadersAndCountsNameTheProblem) {
  Bytes b = valid_file();
  Bytes x = b;
  x[0] = 'X';
  expect_has(open_error(x), "bad magic");
  for (auto [version, what] : std::vector<std::pair<uint32_t, std::string>>{
           {1, "version 1 is not supported"}, {4, "version 4"}, {0x03000000, "big-endian"}}) {
    x = b;
    std::memcpy(&x[4], &version, 4);
    expect_has(open_error(x), what);
  }
  x = b;
  const uint64_t absurd = uint64_t{1} << 60;
  std::memcpy(&x[8], &absurd, 8);
  expect_has(open_error(x), "tensor count");
  x = b;
  std::memcpy(&x[16], &absurd, 8);
  expect_has(open_error(x), "metadata count");
  x = b;
  std::memcpy(&x[24], &absurd, 8);  // the first key's length
  expect_has(open_error(x), "truncated: metadata key needs");

  Kv kv;
  Bytes big_array;
  put<uint32_t>(big_array, static_cast<uint32_t>(GgufType::U64));
  put<uint64_t>(big_array, absurd);
  kv.raw("tokens", GgufType::Array, big_array);
  const std::string msg = open_error(gguf_bytes(kv, {}));
  expect_has(msg, "array count");
  expect_has(msg, "'tokens'");
  Kv bad_type;
  bad_type.num("k", static_cast<GgufType>(13), uint32_t{0});
  expect_has(open_error(gguf_bytes(bad_type, {})), "value type 13 is unknown");
  Bytes bad_elem;
  put<uint32_t>(bad_elem, 77);
  put<uint64_t>(bad_elem, 0);
  Kv kv2;
  kv2.raw("k", GgufType::Array, bad_elem);
  expect_has(open_error(gguf_bytes(kv2, {})), "array element type 77");
  Kv dup;
  dup.num("k", GgufType::U8, uint8_t{1}).num("k", GgufType::U8, uint8_t{2});
  expect_has(open_error(gguf_bytes(dup, {})), "duplicate metadata key");
  Kv boolean;
  boolean.num("b", GgufType::Bool, uint8_t{2});
  expect_has(open_error(gguf_bytes(boolean, {})), "neither 0 nor 1");
  // Arrays nested 9 deep.
  Bytes deep;
  for (int i = 0; i < 9; ++i) {
    put<uint32_t>(deep, static_cast<uint32_t>(GgufType::Array));
    put<uint64_t>(deep, 1);
  }
  put<uint32_t>(deep, static_cast<uint32_t>(GgufType::U8));
  put<uint64_t>(deep, 0);
  Kv nest;
  nest.raw("deep", GgufType::Array, deep);
  expect_has(open_error(gguf_bytes(nest, {})), "nested deeper");
  // Flat arrays stay in the file, but are checked when it is opened.
  Bytes bools;  // [bool: 1, 3]
  put<uint32_t>(bools, static_cast<uint32_t>(GgufType::Bool));
  put<uint64_t>(bools, 2);
  bools.push_back(1);
  bools.push_back(3);
  Kv bool_arr;
  bool_arr.raw("flags", GgufType::Array, bools);
  expect_has(open_error(gguf_bytes(bool_arr, {})), "bool value 3 is neither 0 nor 1 (in metadata 'flags')");
  Bytes long_str;  // [string: "ab", then a length past the end of the file]
  put<uint32_t>(long_str, static_cast<uint32_t>(GgufType::String));
  put<uint64_t>(long_str, 2);
  put_str(long_str, "ab");
  put<uint64_t>(long_str, 1000);
  Kv str_arr;
  str_arr.raw("tokens", GgufType::Array, long_str);
  expect_has(open_error(gguf_bytes(str_arr, {})), "truncated: string value needs 1000 bytes");
}

// Flat arrays (tokenizer tables: 100k+ entries) are not held as JSON; every reader of them gets
// what the JSON form would have held.
TEST(Gguf, FlatArraysAreReadFromTheFile) {
  GgufFile f(buf(valid_file()), "mem.gguf");
  EXPECT_TRUE(f.value("strs").value.is_null());
  EXPECT_TRUE(f.value("arr").value.is_null());
  EXPECT_FALSE(f.value("nested").value.is_null());
  EXPECT_EQ(f.json_of(f.value("arr")), nlohmann::json::parse("[1, 2, 3]"));
  EXPECT_EQ(f.json_of(f.value("strs")), nlohmann::json::parse(R"(["x", ""])"));
  EXPECT_EQ(f.json_of(f.value("u16")), 60000);
  EXPECT_EQ(f.metadata()["strs"], nlohmann::json::parse(R"(["x", ""])"));
  EXPECT_EQ(f.metadata()["nested"], nlohmann::json::parse("[[5], []]"));
  EXPECT_EQ(f.get_array_size("strs"), 2u);
  EXPECT_EQ(f.get_array_size("nested"), 2u);
  EXPECT_EQ(f.find_in_string_array("strs", ""), std::optional<uint64_t>(1));
  EXPECT_EQ(f.find_in_string_array("strs", "x"), std::optional<uint64_t>(0));
  EXPECT_EQ(f.find_in_string_array("strs", "y"), std::nullopt);
  expect_has(error_of([&] { f.find_in_string_array("arr", "x"); }), "array of u16, not an array of string");
  expect_has(error_of([&] { f.get_array_size("u8"); }), "is u8, not an array");
}

TEST(Gguf, BadTensorInfosNameTheTensor) {
  const Bytes f32x2 = floats({1, 2});
  auto err = [&](const std::vector<GTensor>& ts, const Kv& kv = Kv{}) {
    return open_error(gguf_bytes(kv, ts));
  };
  std::string m = err({{"t5", {1, 1, 1, 1, 2}, 0, f32x2}});
  expect_has(m, "'t5'");
  expect_has(m, "5 dimensions");
  expect_has(err({{"big", {uint64_t{1} << 40, uint64_t{1} << 40}, 0, f32x2}}), "overflow");
  expect_has(err({{"odd", {2}, 99, f32x2}}), "unknown ggml type 99");
  expect_has(err({{"q", {33}, 8, q8_block()}}), "not a multiple of the q8_0 block size 32");
  expect_has(err({{"a", {2}, 0, f32x2}, {"a", {2}, 0, f32x2}}), "duplicate tensor name");
  expect_has(err({{"long", {64}, 0, f32x2}}), "tensor 'long': data");

  // Offsets: misaligned, beyond the data, overlapping. Patch the first tensor's offset field.
  Bytes b = gguf_bytes(Kv{}, {{"a", {2}, 0, f32x2}, {"b", {2}, 0, f32x2}});
  const size_t off_a = 24 + 8 + 1 + 4 + 8 + 4;  // header, name, n_dims, ne[0], type
  auto patched = [&](uint64_t off) {
    Bytes x = b;
    std::memcpy(&x[off_a], &off, 8);
    return x;
  };
  expect_has(open_error(patched(4)), "not a multiple of the alignment 32");
  expect_has(open_error(patched(1 << 20)), "exceeds the data region");
  m = open_error(patched(32));  // a now sits on b
  expect_has(m, "overlap");
  Kv align;
  align.num("general.alignment", GgufType::U32, uint32_t{48});
  expect_has(err({}, align), "not a power of two");
  Kv align64;
  align64.num("general.alignment", GgufType::U64, uint64_t{64});
  expect_has(err({}, align64), "alignment must be u32");
}

// Found by tests/fuzz/fuzz_gguf: a tensor with a zero dimension has no elements, so the element
// count did not overflow, but get() computed the 2^62-value row's bytes in int64 (UB).
TEST(Gguf, ZeroSizeTensorCannotHideAnOverflowingDimension) {
  expect_has(open_error(gguf_bytes(Kv{}, {{"e", {uint64_t{1} << 62, 0}, 0, Bytes{}}})), "overflow");
  expect_has(open_error(gguf_bytes(Kv{}, {{"e", {0, uint64_t{1} << 40, uint64_t{1} << 40}, 0, Bytes{}}})), "overflow");
  // A zero-size tensor of sane dimensions is still a valid (empty) view.
  GgufFile f(buf(gguf_bytes(Kv{}, {{"e", {4, 0}, 0, Bytes{}}})), "empty.gguf");
  const Tensor t = f.get("e");
  EXPECT_EQ(t.shape(), (Shape{0, 4}));
  EXPECT_EQ(t.numel(), 0);
}

TEST(Gguf, UnsupportedTypeFailsOnGetNamingTensorAndType) {
  Bytes q41(20, 0);  // one q4_1 block
  GgufFile f(buf(gguf_bytes(Kv{}, {{"blk.0.w", {32}, 3, q41}})), "m.gguf");
  EXPECT_EQ(f.info("blk.0.w").file_dtype, "q4_1");
  const std::string m = error_of([&] { f.get("blk.0.w"); });
  expect_has(m, "'blk.0.w'");
  expect_has(m, "q4_1");
}

TEST(Gguf, ReadsUpstreamFixture) {
  const std::string path = std::string(XDNA_FIXTURE_DIR) + "/weights/tiny.gguf";
  auto src = open_weights(path);
  auto* f = dynamic_cast<GgufFile*>(src.get());
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->get_string("general.architecture"), "llama");
  EXPECT_EQ(f->get_int("test.u8"), 200);
  EXPECT_EQ(f->get_int("test.i8"), -100);
  EXPECT_EQ(f->get_int("test.u16"), 60000);
  EXPECT_EQ(f->get_int("test.i16"), -30000);
  EXPECT_EQ(f->get_uint("test.u32"), 4000000000u);
  EXPECT_EQ(f->get_int("test.i32"), -2000000000);
  EXPECT_EQ(f->get_float("test.f32"), 0.5);
  EXPECT_EQ(f->get_uint("test.u64"), (uint64_t{1} << 63) + 5);
  EXPECT_EQ(f->get_int("test.i64"), -(int64_t{1} << 40));
  EXPECT_EQ(f->get_float("test.f64"), 3.25);
  EXPECT_TRUE(f->get_bool("test.bool"));
  EXPECT_EQ(f->get_string("test.string"), "h\xc3\xa9llo");
  EXPECT_EQ(f->get_int_array("test.ints"), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(f->get_string_array("test.strings"), (std::vector<std::string>{"a", "bc", ""}));
  EXPECT_EQ(f->value("test.nested").value, nlohmann::json::parse("[[1, 2], [3]]"));
  EXPECT_EQ(f->get_int("llama.context_length"), 128);

  EXPECT_EQ(f->info("f32").shape, (Shape{2, 32}));
  EXPECT_EQ(f->info("cube").shape, (Shape{2, 3, 4}));
  EXPECT_EQ(f->info("vec").shape, (Shape{4}));
  EXPECT_EQ(f->info("q4_k").shape, (Shape{2, 256}));
  EXPECT_EQ(f->get("q6_k").dtype(), DType::Q6_K);
  EXPECT_EQ(f->get("q5_k").dtype(), DType::Q5_K);
  EXPECT_EQ(f->get("q4_0").dtype(), DType::Q4_0);
  EXPECT_EQ(f->get("bf16").dtype(), DType::BF16);
  expect_has(error_of([&] { f->get("q4_1"); }), "q4_1");
  for (const auto& t : f->tensors()) EXPECT_EQ((t.offset - f->data_offset()) % 32, 0u);
}

// Each tensor dequantized by the engine equals gguf-py's dequantization.
TEST(Gguf, DequantizesLikeGgufPy) {
  const std::string dir = std::string(XDNA_FIXTURE_DIR) + "/weights/";
  GgufFile f(dir + "tiny.gguf");
  SafetensorsFile expected(std::vector<std::string>{dir + "tiny_gguf_expected.safetensors"});
  ASSERT_EQ(expected.tensors().size(), f.tensors().size() - 1);  // all but q4_1
  for (const auto& e : expected.tensors()) {
    Tensor want = expected.get(e.name);
    Tensor got = f.get(e.name);
    ASSERT_EQ(got.shape(), want.shape()) << e.name;
    const std::vector<float> g = got.to_vector();
    for (int64_t i = 0; i < want.numel(); ++i)
      ASSERT_NEAR(g[i], want.data<float>()[i], 1e-6f * (1 + std::fabs(want.data<float>()[i])))
          << e.name << "[" << i << "]";
  }
}

TEST(Gguf, FixtureTruncationsThrowUnlessOnlyPaddingIsCut) {
  const std::string path = std::string(XDNA_FIXTURE_DIR) + "/weights/tiny.gguf";
  GgufFile whole(path);
  uint64_t data_end = 0;
  for (const auto& t : whole.tensors()) data_end = std::max(data_end, t.offset + t.bytes);
  MappedFile m(path);
  const Bytes full(reinterpret_cast<const uint8_t*>(m.data()),
                   reinterpret_cast<const uint8_t*>(m.data()) + m.size());
  for (size_t cut = 0; cut < full.size(); ++cut) {
    const Bytes part(full.begin(), full.begin() + static_cast<long>(cut));
    if (cut >= data_end) {
      EXPECT_NO_THROW(GgufFile(buf(part), "cut.gguf")) << cut;
    } else {
      EXPECT_THROW(GgufFile(buf(part), "cut.gguf"), std::runtime_error) << cut;
    }
  }
}
