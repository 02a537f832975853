// Host ops against PyTorch / transformers reference outputs (scripts/make_op_fixtures.py writes
// tests/fixtures/ops/*.bin), plus edge cases the fixtures cannot express.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/graph.h"
#include "core/numeric.h"
#include "host/attention.h"
#include "host/conv.h"
#include "host/host_backend.h"
#include "host/kv_cache.h"
#include "host/ops.h"

using namespace xdna;
namespace fs = std::filesystem;

namespace {

const fs::path kDir = fs::path(XDNA_FIXTURE_DIR) / "ops";
constexpr float kInf = std::numeric_limits<float>::infinity();

struct Case {
  std::string op;
  nlohmann::json attrs;
  std::vector<Tensor> inputs;
  Tensor expected;
};

Tensor read_tensor(std::ifstream& f, const nlohmann::json& meta) {
  const Shape shape = meta.at("shape").get<Shape>();
  const DType dt = meta.at("dtype") == "i32" ? DType::I32 : DType::F32;
  Tensor t = Tensor::empty(shape, dt);
  f.read(reinterpret_cast<char*>(t.raw()), t.nbytes());  // fixtures are little-endian, as is x86
  if (!f) throw std::runtime_error("fixture truncated");
  return t;
}

Case load_case(const std::string& name) {
  std::ifstream f(kDir / (name + ".bin"), std::ios::binary);
  if (!f) throw std::runtime_error("cannot open fixture " + name);
  std::string line;
  std::getline(f, line);
  const auto h = nlohmann::json::parse(line);
  Case c{h.at("op"), h.at("attrs"), {}, {}};
  for (const auto& m : h.at("inputs")) c.inputs.push_back(read_tensor(f, m));
  c.expected = read_tensor(f, h.at("output"));
  return c;
}

OpKind op_from_name(const std::string& s) {
  for (int i = 0; i < static_cast<int>(OpKind::Count_); ++i)
    if (op_name(static_cast<OpKind>(i)) == s) return static_cast<OpKind>(i);
  throw std::runtime_error("unknown op " + s);
}

OpAttrs attrs_from_json(const nlohmann::json& j) {
  OpAttrs a;
  auto pair = [&](const char* key, int64_t out[2]) {
    if (j.contains(key)) {
      out[0] = j[key][0];
      out[1] = j[key][1];
    }
  };
  a.eps = j.value("eps", a.eps);
  a.scale = j.value("scale", a.scale);
  a.rms_offset = j.value("rms_offset", a.rms_offset);
  a.axis = j.value("axis", a.axis);
  a.causal = j.value("causal", a.causal);
  a.window = j.value("window", a.window);
  a.q_offset = j.value("q_offset", a.q_offset);
  a.softcap = j.value("softcap", a.softcap);
  a.attn_scale = j.value("attn_scale", a.attn_scale);
  a.rope_layout = j.value("rope_layout", "half_split") == "interleaved" ? RopeLayout::Interleaved
                                                                         : RopeLayout::HalfSplit;
  a.rope_theta = j.value("rope_theta", a.rope_theta);
  a.rope_dims = j.value("rope_dims", a.rope_dims);
  a.position = j.value("position", a.position);
  pair("kernel", a.kernel);
  pair("stride", a.stride);
  pair("padding", a.padding);
  pair("dilation", a.dilation);
  a.groups = j.value("groups", a.groups);
  const std::string pool = j.value("pool", "max");
  a.pool = pool == "avg" ? PoolKind::Avg : pool == "global_avg" ? PoolKind::GlobalAvg : PoolKind::Max;
  a.upscale = j.value("upscale", a.upscale);
  a.start = j.value("start", a.start);
  a.end = j.value("end", a.end);
  a.dim0 = j.value("dim0", a.dim0);
  a.dim1 = j.value("dim1", a.dim1);
  if (j.contains("shape")) a.shape = j["shape"].get<Shape>();
  return a;
}

// Largest |got - want| divided by max(1, largest |want|): absolute error for values of order 1,
// relative to the output's scale for larger ones. Infinities must match exactly.
double scaled_error(const std::vector<float>& got, const std::vector<float>& want) {
  double err = 0, mag = 1;
  for (size_t i = 0; i < want.size(); ++i)
    if (std::isfinite(want[i])) mag = std::max(mag, double(std::fabs(want[i])));
  for (size_t i = 0; i < want.size(); ++i) {
    if (!std::isfinite(want[i]) || !std::isfinite(got[i])) {
      if (!(got[i] == want[i])) return kInf;
      continue;
    }
    err = std::max(err, std::fabs(double(got[i]) - double(want[i])));
  }
  return err / mag;
}

// Tolerances (also in docs/ops.md). Everything is f32 against f32 PyTorch; ops that sum many
// products (attention, conv) differ from PyTorch's summation order by a few ulps per term.
double tolerance(const std::string& op) {
  if (op == "attention" || op == "conv1d" || op == "conv2d") return 2e-5;
  return 1e-5;
}

std::vector<std::string> case_names() {
  std::vector<std::string> names;
  if (fs::is_directory(kDir))
    for (const auto& e : fs::directory_iterator(kDir))
      if (e.path().extension() == ".bin") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

class OpFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(OpFixture, MatchesReference) {
  const Case c = load_case(GetParam());
  Node node{op_from_name(c.op), attrs_from_json(c.attrs), {}, 0, GetParam()};
  HostBackend host;
  ASSERT_TRUE(host.supports(node, c.inputs));
  const Tensor y = host.compute(node, c.inputs);
  ASSERT_EQ(y.shape(), c.expected.shape());
  const double err = scaled_error(y.to_vector(), c.expected.to_vector());
  EXPECT_LE(err, tolerance(c.op)) << c.op;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g", err);
  RecordProperty("scaled_error", buf);
}

INSTANTIATE_TEST_SUITE_P(Ops, OpFixture, ::testing::ValuesIn(case_names()),
                         [](const auto& info) { return info.param; });

TEST(OpFixtures, EveryOpKindHasACase) {
  std::vector<bool> seen(static_cast<size_t>(OpKind::Count_), false);
  for (const auto& n : case_names()) seen[static_cast<size_t>(op_from_name(load_case(n).op))] = true;
  for (size_t i = 0; i < seen.size(); ++i) {
    if (static_cast<OpKind>(i) == OpKind::MatMul) continue;  // matmul has its own tests
    if (static_cast<OpKind>(i) == OpKind::KvWrite) continue;  // in place: tests/models/test_decoder.cpp
    EXPECT_TRUE(seen[i]) << "no fixture for " << op_name(static_cast<OpKind>(i));
  }
}

// ---- edge cases ------------------------------------------------------------------------------

TEST(Softmax, MaskedAndFullyMaskedRows) {
  const Tensor x = Tensor::from_vector({3, 3}, {1, -kInf, 1, -kInf, -kInf, -kInf, -kInf, 0, -kInf});
  const auto y = host::softmax(x).to_vector();
  EXPECT_FLOAT_EQ(y[0], 0.5f);
  EXPECT_EQ(y[1], 0.0f);
  EXPECT_FLOAT_EQ(y[2], 0.5f);
  for (int i = 3; i < 6; ++i) EXPECT_EQ(y[i], 0.0f) << "fully masked row must be zeros, not NaN";
  EXPECT_EQ(y[7], 1.0f);
}

TEST(Softmax, HugeValuesStayFinite) {
  const Tensor x = Tensor::from_vector({1, 4}, {3e38f, 3e38f, -3e38f, 1e30f});
  const auto y = host::softmax(x).to_vector();
  EXPECT_FLOAT_EQ(y[0], 0.5f);
  EXPECT_FLOAT_EQ(y[1], 0.5f);
  EXPECT_EQ(y[2], 0.0f);
  EXPECT_EQ(y[3], 0.0f);
}

TEST(Activations, ExtremeInputs) {
  const Tensor x = Tensor::from_vector({4}, {-1e4f, 1e4f, -kInf, 0.0f});
  const auto s = host::silu(x).to_vector();
  EXPECT_EQ(s[0], 0.0f);
  EXPECT_EQ(s[1], 1e4f);
  EXPECT_EQ(s[3], 0.0f);
  const auto g = host::gelu(x).to_vector();
  EXPECT_EQ(g[0], 0.0f);
  EXPECT_EQ(g[1], 1e4f);
  const auto gt = host::gelu_tanh(x).to_vector();
  EXPECT_EQ(gt[1], 1e4f);
}

TEST(EmptyTensors, OpsReturnEmptyResults) {
  const Tensor e = Tensor::empty({0, 8});
  EXPECT_EQ(host::softmax(e).shape(), (Shape{0, 8}));
  EXPECT_EQ(host::silu(e).shape(), (Shape{0, 8}));
  EXPECT_EQ(host::add(e, Tensor::zeros({8})).shape(), (Shape{0, 8}));
  EXPECT_EQ(host::rms_norm(e, Tensor::zeros({8}), 1e-5f).shape(), (Shape{0, 8}));
  EXPECT_EQ(host::layer_norm(e, Tensor::zeros({8}), nullptr, 1e-5f).shape(), (Shape{0, 8}));
  const Tensor q = Tensor::empty({0, 2, 4}), kv = Tensor::zeros({3, 1, 4});
  EXPECT_EQ(host::attention(q, kv, kv, {}).shape(), (Shape{0, 2, 4}));
  EXPECT_EQ(host::rope(q, 5, 1e4f, 0, RopeLayout::HalfSplit).shape(), (Shape{0, 2, 4}));
  const Tensor a = Tensor::from_vector({1, 2}, {1, 2});
  const Tensor parts[] = {a, Tensor::empty({0, 2}), a};
  EXPECT_EQ(host::concat(parts, 0).to_vector(), (std::vector<float>{1, 2, 1, 2}));
  const Tensor ids = Tensor::empty({0}, DType::I32);
  EXPECT_EQ(host::embedding(Tensor::zeros({4, 3}), ids).shape(), (Shape{0, 3}));
}

TEST(StridedInputs, ArePackedFirst) {
  const Tensor x = Tensor::from_vector({2, 3}, {1, 2, 3, 4, 5, 6}).transpose(0, 1);  // [3, 2]
  EXPECT_EQ(host::relu(x).to_vector(), (std::vector<float>{1, 4, 2, 5, 3, 6}));
  const Tensor b = Tensor::from_vector({2}, {10, 20});
  EXPECT_EQ(host::add(x, b).to_vector(), (std::vector<float>{11, 24, 12, 25, 13, 26}));
  EXPECT_EQ(host::softmax(x).to_vector(), host::softmax(x.contiguous()).to_vector());
  // rope on a [T, H, D] view of a [H, T, D] tensor; the input must not be modified.
  std::vector<float> v(2 * 3 * 4);
  for (size_t i = 0; i < v.size(); ++i) v[i] = float(i) * 0.1f;
  const Tensor hx = Tensor::from_vector({2, 3, 4}, v), tx = hx.transpose(0, 1);
  EXPECT_EQ(host::rope(tx, 3, 1e4f, 0, RopeLayout::Interleaved).to_vector(),
            host::rope(tx.contiguous(), 3, 1e4f, 0, RopeLayout::Interleaved).to_vector());
  const Tensor packed = tx.contiguous();
  host::rope(packed, 3, 1e4f, 0, RopeLayout::HalfSplit);
  EXPECT_EQ(packed.to_vector(), tx.contiguous().to_vector());
  EXPECT_EQ(hx.to_vector(), v);
}

TEST(Attention, FullyMaskedQueryGivesZeros) {
  const Tensor q = Tensor::from_vector({2, 1, 2}, {1, 0, 0, 1});
  const Tensor kv = Tensor::from_vector({2, 1, 2}, {1, 2, 3, 4});
  const Tensor mask = Tensor::from_vector({2, 2}, {-kInf, -kInf, 0, -kInf});
  const auto y = host::attention(q, kv, kv, {}, &mask).to_vector();
  EXPECT_EQ(y, (std::vector<float>{0, 0, 1, 2}));
}

// Decoding: a prefill writes the cache, then one token at a time attends to the cached prefix;
// every step must equal the matching row of one causal attention over the whole sequence.
TEST(Attention, DecodeWithCacheMatchesFullCausal) {
  const int64_t S = 9, Hq = 4, Hkv = 2, D = 8, prefill = 5;
  std::vector<float> qv(S * Hq * D), kv(S * Hkv * D), vv(S * Hkv * D);
  for (size_t i = 0; i < qv.size(); ++i) qv[i] = std::sin(0.37f * i);
  for (size_t i = 0; i < kv.size(); ++i) kv[i] = std::cos(0.11f * i);
  for (size_t i = 0; i < vv.size(); ++i) vv[i] = std::sin(0.05f * i + 1);
  const Tensor q = Tensor::from_vector({S, Hq, D}, qv), k = Tensor::from_vector({S, Hkv, D}, kv),
               v = Tensor::from_vector({S, Hkv, D}, vv);
  host::AttentionParams causal;
  causal.causal = true;
  const auto full = host::attention(q, k, v, causal).to_vector();

  host::KvCache cache(2, 16, Hkv, D);
  const int layer = 1;
  cache.append(layer, k.slice(0, 0, prefill), v.slice(0, 0, prefill));
  const auto pre = host::attention(q.slice(0, 0, prefill), cache.keys(layer), cache.values(layer),
                                   causal).to_vector();
  for (size_t i = 0; i < pre.size(); ++i) ASSERT_NEAR(pre[i], full[i], 1e-6);
  for (int64_t t = prefill; t < S; ++t) {
    cache.append(layer, k.slice(0, t, t + 1), v.slice(0, t, t + 1));
    host::AttentionParams step = causal;
    step.q_offset = t;
    const auto y = host::attention(q.slice(0, t, t + 1), cache.keys(layer), cache.values(layer),
                                   step).to_vector();
    for (int64_t i = 0; i < Hq * D; ++i) ASSERT_NEAR(y[i], full[t * Hq * D + i], 1e-6) << t;
  }
  EXPECT_EQ(cache.length(layer), S);
  EXPECT_EQ(cache.length(0), 0);
  cache.truncate(3);
  EXPECT_EQ(cache.keys(layer).shape(), (Shape{3, Hkv, D}));
  EXPECT_THROW(cache.append(layer, Tensor::zeros({14, Hkv, D}), Tensor::zeros({14, Hkv, D})),
               std::length_error);
  EXPECT_THROW(cache.append(layer, Tensor::zeros({1, Hkv + 1, D}), Tensor::zeros({1, Hkv + 1, D})),
               std::invalid_argument);
  EXPECT_THROW(cache.keys(2), std::out_of_range);
}

// Big enough that the im2col scratch is split into several slices.
TEST(Conv2d, LargeImageMatchesDirectLoop) {
  const int64_t Cin = 3, H = 300, W = 300, Cout = 4, K = 3;
  std::vector<float> xv(Cin * H * W), wv(Cout * Cin * K * K);
  for (size_t i = 0; i < xv.size(); ++i) xv[i] = std::sin(0.013f * i);
  for (size_t i = 0; i < wv.size(); ++i) wv[i] = std::cos(0.7f * i);
  host::ConvParams p;
  p.padding[0] = p.padding[1] = 1;
  const auto y = host::conv2d(Tensor::from_vector({Cin, H, W}, xv),
                              Tensor::from_vector({Cout, Cin, K, K}, wv), nullptr, p).to_vector();
  ASSERT_EQ(y.size(), size_t(Cout * H * W));
  double worst = 0;
  for (int64_t o = 0; o < Cout; ++o)
    for (int64_t oh = 0; oh < H; oh += 7)
      for (int64_t ow = 0; ow < W; ow += 5) {
        double acc = 0;
        for (int64_t c = 0; c < Cin; ++c)
          for (int64_t i = 0; i < K; ++i)
            for (int64_t j = 0; j < K; ++j) {
              const int64_t ih = oh - 1 + i, iw = ow - 1 + j;
              if (ih >= 0 && ih < H && iw >= 0 && iw < W)
                acc += double(xv[(c * H + ih) * W + iw]) * wv[((o * Cin + c) * K + i) * K + j];
            }
        worst = std::max(worst, std::fabs(acc - y[(o * H + oh) * W + ow]));
      }
  EXPECT_LT(worst, 1e-4);
}

TEST(Embedding, ReadsHalfPrecisionTables) {
  const std::vector<float> rows = {0.5f, -1.25f, 2.0f, 3.0f, -0.125f, 8.0f};
  for (DType dt : {DType::F16, DType::BF16}) {
    Tensor table = Tensor::empty({2, 3}, dt);
    quantize_row(dt, rows.data(), table.raw(), 6);
    Tensor ids = Tensor::empty({3}, DType::I32);
    ids.data<int32_t>()[0] = 1;
    ids.data<int32_t>()[1] = 0;
    ids.data<int32_t>()[2] = 1;
    EXPECT_EQ(host::embedding(table, ids).to_vector(),
              (std::vector<float>{3, -0.125f, 8, 0.5f, -1.25f, 2, 3, -0.125f, 8}));
  }
}

// int8 rows carry per-group scales: row i must use its own scales.
TEST(Embedding, ReadsInt8TablesWithScales) {
  const int64_t V = 3, D = 8, group = 4;
  std::vector<float> vals(V * D);
  for (size_t i = 0; i < vals.size(); ++i) vals[i] = std::sin(0.9f * i) * float(1 + i / D * 10);
  Tensor table = Tensor::empty({V, D}, DType::I8);
  Tensor scales = Tensor::empty({V, D / group});
  quantize_int8(vals.data(), V, D, group, table.data<int8_t>(), scales.data<float>());
  table.set_scales(scales, group);
  const auto all = table.to_vector();
  Tensor ids = Tensor::empty({2}, DType::I32);
  ids.data<int32_t>()[0] = 2;
  ids.data<int32_t>()[1] = 1;
  const auto y = host::embedding(table, ids).to_vector();
  for (int64_t i = 0; i < D; ++i) {
    EXPECT_EQ(y[i], all[2 * D + i]);
    EXPECT_EQ(y[D + i], all[1 * D + i]);
    EXPECT_NEAR(y[i], vals[2 * D + i], 21.0f / 127);  // within half a quantization step
  }
}

// Bad shapes are std::invalid_argument whose message names the op.
template <typename Fn>
void expect_invalid(const char* op, Fn fn) {
  try {
    fn();
    ADD_FAILURE() << op << ": no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(op), std::string::npos) << e.what();
  }
}

TEST(BadShapes, ThrowNamingTheOp) {
  const Tensor a = Tensor::zeros({2, 3}), b4 = Tensor::zeros({4});
  expect_invalid("add", [&] { host::add(a, b4); });
  expect_invalid("mul", [&] { host::mul(a, Tensor::zeros({2})); });
  expect_invalid("layer_norm", [&] { host::layer_norm(a, b4, nullptr, 1e-5f); });
  expect_invalid("rms_norm", [&] { host::rms_norm(a, b4, 1e-5f); });
  expect_invalid("rope", [&] { host::rope(Tensor::zeros({2, 1, 5}), 0, 1e4f, 0, RopeLayout::HalfSplit); });
  expect_invalid("rope", [&] { host::rope(a, 0, 1e4f, 0, RopeLayout::HalfSplit); });
  expect_invalid("attention", [&] {
    host::attention(Tensor::zeros({1, 3, 4}), Tensor::zeros({2, 2, 4}), Tensor::zeros({2, 2, 4}), {});
  });
  expect_invalid("attention", [&] {
    const Tensor m = Tensor::zeros({2, 2});
    host::attention(Tensor::zeros({1, 2, 4}), Tensor::zeros({2, 2, 4}), Tensor::zeros({2, 2, 4}), {}, &m);
  });
  expect_invalid("conv2d", [&] {
    host::conv2d(Tensor::zeros({3, 5, 5}), Tensor::zeros({4, 2, 3, 3}), nullptr, {});
  });
  expect_invalid("conv2d", [&] {
    host::conv2d(Tensor::zeros({3, 2, 2}), Tensor::zeros({4, 3, 3, 3}), nullptr, {});
  });
  expect_invalid("conv1d", [&] { host::conv1d(a, Tensor::zeros({2, 2}), nullptr, 1, 0, 1, 1); });
  expect_invalid("pixel_shuffle", [&] { host::pixel_shuffle(Tensor::zeros({6, 2, 2}), 2); });
  const int64_t k[2] = {3, 3}, s[2] = {1, 1}, pad[2] = {2, 2};
  expect_invalid("pool2d", [&] { host::pool2d(Tensor::zeros({1, 4, 4}), PoolKind::Max, k, s, pad); });
  expect_invalid("embedding", [&] {
    Tensor ids = Tensor::zeros({1}, DType::I32);
    ids.data<int32_t>()[0] = 7;
    host::embedding(Tensor::zeros({4, 2}), ids);
  });
  expect_invalid("concat", [&] {
    const Tensor parts[] = {a, Tensor::zeros({2, 4})};
    host::concat(parts, 0);
  });
  expect_invalid("slice", [&] { host::slice(a, 1, 2, 4); });
  expect_invalid("reshape", [&] { host::reshape(a, {4, 2}); });
  expect_invalid("softmax", [&] { host::softmax(Tensor::zeros({2}, DType::I32)); });
}

TEST(HostBackend, ChecksInputCount) {
  HostBackend host;
  Node n{OpKind::Silu, {}, {}, 0, "act"};
  const Tensor two[] = {Tensor::zeros({2}), Tensor::zeros({2})};
  expect_invalid("silu", [&] { host.compute(n, two); });
}

}  // namespace
