// The int8-weight fused designs (decode_layer_int8, lm_head_int8: aie_kernels/*_int8.cc) as
// npu-sim runs them (sim_exec.h run_design, through the cores' programs):
//  - bit for bit against the same layer built from its pieces outside the programs: the int8
//    GEMV of fused_stage_int8.h's numerics written out here (core/numeric.h quantize_int8 for the
//    weights and the vector, exact integer sums, float(sum) * sx * scale to bf16), the kernels'
//    norms / activations / adds (aie_kernels.h), QK-norm + RoPE, and the bf16 attention_decode
//    design over the same KV cache;
//  - within a stated tolerance of npu-sim's unfused int8 MatMul dispatches (NpuSimBackend), which
//    store each product through SRS to int8 with a dispatch-wide shift (the fused cores keep the
//    exact sum: docs/npu-sim.md), and of the host decoder in f32 (tiny Qwen3 and Gemma 3 fixtures,
//    tests/npu/test_sim_fused_llm.cpp's setup).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "aie_kernels/kernels.h"
#include "core/numeric.h"
#include "npu/artifacts/iron_emitter.h"
#include "npu/design_families.h"
#include "npu/sim_backend.h"
#include "npu/sim_exec.h"
#include "npu/sim_program.h"
#include "fused_test_util.h"

using namespace xdna;
using namespace xdna::npu;

namespace {

constexpr auto kNe = xk::Rounding::NearestEven;

struct Rng : test::FusedRng {
  Rng() : FusedRng(23) {}
};
using test::rope;

// With Gemma 3's post-norm gammas where the shape has them.
SimLayerWeights layer_weights(Rng& r, const DecodeLayerShape& s) {
  SimLayerWeights w = test::layer_weights(r, s);
  const int64_t H = s.hidden;
  if (s.post_norms) w.post_attn_norm = r.vals(H, -0.5f, 0.5f), w.post_ffn_norm = r.vals(H, -0.5f, 0.5f);
  return w;
}

SimKvCache kv_cache(Rng& r, const DecodeLayerShape& s, int64_t length) {
  return test::kv_cache(r, s, length, length + 2);
}

using Vec = std::vector<aie::bf16>;

// y = W x with fused_stage_int8.h's numerics, written out: W [n][k] quantized per row, x per row,
// exact sums, (sum * sx) * scale, bf16 store.
std::vector<float> gemv_i8_f32(const std::vector<float>& w, int64_t n, int64_t k, const Vec& x) {
  const std::vector<float> xf = to_f32(x);
  std::vector<int8_t> qx(static_cast<size_t>(k)), qw(static_cast<size_t>(k));
  float sx = 0, sw = 0;
  quantize_int8(xf.data(), 1, k, k, qx.data(), &sx);
  std::vector<float> y(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) {
    quantize_int8(w.data() + r * k, 1, k, k, qw.data(), &sw);
    int32_t sum = 0;
    for (int64_t i = 0; i < k; ++i) sum += int32_t(qx[size_t(i)]) * int32_t(qw[size_t(i)]);
    y[size_t(r)] = float(sum) * sx * sw;
  }
  return y;
}
Vec gemv_i8(const std::vector<float>& w, int64_t n, int64_t k, const Vec& x) {
  const std::vector<float> y = gemv_i8_f32(w, n, k, x);
  Vec b(y.size());
  for (size_t i = 0; i < y.size(); ++i) b[i] = xk::to_bf16(y[i], kNe);
  return b;
}

Vec rmsnorm(const Vec& x, const std::vector<float>& gamma, const SimKernelArgs& k) {
  const Vec g = to_bf16(gamma);
  Vec y(x.size());
  xk_impl::rmsnorm_bf16(x.data(), g.data(), y.data(), int32_t(x.size()), k.eps, k.rms_offset, kNe);
  return y;
}
Vec add(const Vec& a, const Vec& b) {
  Vec c(a.size());
  xk_impl::add_bf16(a.data(), b.data(), c.data(), int32_t(a.size()), kNe);
  return c;
}

struct LayerOut {
  Vec y, kv_new;
};

// y = W v as npu-sim's unfused int8 MatMul dispatch computes it (W [n][k] quantized per row).
std::vector<float> unfused_matmul(NpuSimBackend& sim, const std::vector<float>& m, int64_t n, int64_t k,
                                  const Vec& v) {
  Tensor wt = Tensor::empty({n, k}, DType::I8);
  std::vector<float> scales(static_cast<size_t>(n));
  quantize_int8(m.data(), n, k, k, wt.data<int8_t>(), scales.data());
  wt.set_scales(Tensor::from_vector({n, 1}, scales), k);
  Node node;
  node.op = OpKind::MatMul;
  node.name = "matmul";
  const std::vector<Tensor> in = {Tensor::from_vector({1, k}, to_f32(v)), wt};
  EXPECT_TRUE(sim.supports(node, in));
  return sim.compute(node, in).to_vector();
}

// The layer from its pieces; `unfused`: each product an unfused npu-sim int8 MatMul dispatch.
LayerOut reference_layer(const DecodeLayerShape& s, const SimLayerWeights& w, const Vec& x,
                         const std::vector<float>& rope_row_, const SimKvCache& cache, const SimKernelArgs& k,
                         int columns, bool unfused) {
  NpuSimBackend sim;
  const auto matmul = [&](const std::vector<float>& m, int64_t n, int64_t kk, const Vec& v) {
    if (!unfused) return gemv_i8(m, n, kk, v);
    return to_bf16(unfused_matmul(sim, m, n, kk, v));  // the next op's bf16 input (nearest even)
  };
  const int64_t H = s.hidden, D = s.head_dim, Q = s.heads * D, KV = s.kv_heads * D;
  const Vec xn = rmsnorm(x, w.attn_norm, k);
  Vec qkv = matmul(w.q, Q, H, xn);
  for (const auto* m : {&w.k, &w.v}) {
    const Vec part = matmul(*m, KV, H, xn);
    qkv.insert(qkv.end(), part.begin(), part.end());
  }
  if (s.qk_norm) {
    const Vec qn = to_bf16(w.q_norm), kn = to_bf16(w.k_norm);
    for (int64_t h = 0; h < s.heads + s.kv_heads; ++h) {
      Vec t(static_cast<size_t>(D));
      xk_impl::rmsnorm_bf16(qkv.data() + h * D, h < s.heads ? qn.data() : kn.data(), t.data(), int32_t(D), k.eps,
                            k.rms_offset, kNe);
      std::copy(t.begin(), t.end(), qkv.begin() + h * D);
    }
  }
  xk_impl::rope_bf16(qkv.data(), rope_row_.data(), rope_row_.data() + D / 2, int32_t(s.heads + s.kv_heads),
                     int32_t(D), k.rope_interleaved, kNe);
  LayerOut out;
  out.kv_new.assign(qkv.begin() + Q, qkv.end());
  SimKvCache kv = cache;
  kv.append(out.kv_new);
  DecodeLayerShape sa = s;
  sa.context = kv.length;
  if (s.window > 0) sa.context = std::min<int64_t>(sa.context, s.window);
  const Design da = attention_decode_design(sa, columns);  // the layer's split of the positions
  HostArgs aa = pack_attention_decode(da, Vec(qkv.begin(), qkv.begin() + Q), kv);
  run_design(da, aa, k);
  const Vec attn = arg_bf16(da, aa, "result", Q);
  Vec o = matmul(w.o, H, Q, attn);
  if (s.post_norms) o = rmsnorm(o, w.post_attn_norm, k);
  const Vec h1 = add(x, o);
  const Vec xn2 = rmsnorm(h1, w.ffn_norm, k);
  const Vec gate = matmul(w.gate, s.intermediate, H, xn2), up = matmul(w.up, s.intermediate, H, xn2);
  Vec act(gate.size()), hm(gate.size());
  if (s.gelu) xk_impl::gelu_tanh_bf16(gate.data(), act.data(), int32_t(gate.size()), kNe);
  else xk_impl::silu_bf16(gate.data(), act.data(), int32_t(gate.size()), kNe);
  xk_impl::mul_bf16(act.data(), up.data(), hm.data(), int32_t(hm.size()), kNe);
  Vec dn = matmul(w.down, H, s.intermediate, hm);
  if (s.post_norms) dn = rmsnorm(dn, w.post_ffn_norm, k);
  out.y = add(h1, dn);
  return out;
}

double rel_err(const Vec& a, const Vec& b) {
  double span = 0, err = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double fa = aie::to_float(a[i]), fb = aie::to_float(b[i]);
    span = std::max(span, std::fabs(fb));
    err = std::max(err, std::fabs(fa - fb));
  }
  return err / span;
}

bool same_bits(const Vec& a, const Vec& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].bits != b[i].bits) return false;
  return true;
}

struct Case {
  const char* what;
  DecodeLayerShape s;
  int columns;
  int64_t cached;
  SimKernelArgs k;
};

std::vector<Case> cases() {
  std::vector<Case> c;
  DecodeLayerShape s;
  // hidden 224, intermediate 288: int8 rows straddle 2 KiB objects, the gate rows start inside
  // the o stage's last object and the down rows inside gate_up's (the carry).
  s.hidden = 224, s.heads = 4, s.kv_heads = 2, s.head_dim = 32, s.intermediate = 288, s.qk_norm = true;
  SimKernelArgs qwen;
  qwen.eps = 1e-6f;
  c.push_back({"qwen3-like, 1 column", s, 1, 8, qwen});
  c.push_back({"qwen3-like, 2 columns", s, 2, 8, qwen});
  DecodeLayerShape g = s;  // Gemma 3: GeGLU, post-norms, (1 + w) gammas, a window shorter than the cache
  g.kv_heads = 1, g.head_dim = 64, g.gelu = true, g.post_norms = true, g.window = 6;
  SimKernelArgs gemma;
  gemma.rms_offset = 1.0f, gemma.rope_interleaved = false;
  c.push_back({"gemma3-like, window 6", g, 1, 11, gemma});
  return c;
}

}  // namespace

TEST(SimFusedInt8, DecodeLayerEqualsItsPiecesBitForBitAndUnfusedInt8WithinTolerance) {
  for (const Case& c : cases()) {
    Rng r;
    DecodeLayerShape s = c.s;
    const SimKvCache kv = kv_cache(r, s, c.cached);
    s.context = kv.length + 1;
    const Design d = decode_layer_design(DType::I8, s, c.columns);
    for (const TileUse& t : d.tiles) {
      if (t.has_kernel) {
        ASSERT_EQ(t.kernel.name, "decode_layer_int8");
      }
    }
    const SimLayerWeights w = layer_weights(r, s);
    const Vec x = r.bf16s(s.hidden);
    const std::vector<float> rr = rope(s.head_dim, kv.length);
    HostArgs a = pack_decode_layer(d, w, x, rr, kv);
    run_design(d, a, c.k);
    const Vec y = arg_bf16(d, a, "result", s.hidden), kv_new = kv_new_row(d, a);

    const LayerOut ref = reference_layer(c.s, w, x, rr, kv, c.k, c.columns, false);
    EXPECT_TRUE(same_bits(y, ref.y)) << c.what << ": result differs from the pieces, rel " << rel_err(y, ref.y);
    EXPECT_TRUE(same_bits(kv_new, ref.kv_new)) << c.what << ": kv_new differs from the pieces";

    // npu-sim's unfused int8 MatMuls store each product through SRS to int8 (a shift over the
    // whole dispatch, a power of two): up to about 1/127 of the largest output per product, in
    // seven products carried through the layer (measured 4e-2 .. 6e-2 on these cases).
    const LayerOut unf = reference_layer(c.s, w, x, rr, kv, c.k, c.columns, true);
    const double e = rel_err(y, unf.y), ek = rel_err(kv_new, unf.kv_new);
    std::printf("%s: max|dy| / max|y| vs unfused int8 %.2e, kv_new %.2e\n", c.what, e, ek);
    EXPECT_LE(e, 0.1) << c.what;
    EXPECT_LE(ek, 0.03) << c.what;
    EXPECT_FALSE(same_bits(y, unf.y)) << c.what << ": the SRS step should show";
  }
}

// Gemma 3 270M's layer shape (hidden 640, 4 query heads on 1 KV head of head_dim 256,
// intermediate 2048) on 8 columns: every core holds a 2,080-byte partial of the one KV head, 17
// exchange rounds of 128 bytes; the 32 cores' partials (69,632 bytes as gathered) are combined
// as they arrive, so the layer runs, and gives the pieces' bits (whose attention_decode design
// combines the same way).
TEST(SimFusedInt8, DecodeLayerAtGemma3_270mShapeEqualsItsPieces) {
  Rng r;
  DecodeLayerShape s;
  s.hidden = 640, s.heads = 4, s.kv_heads = 1, s.head_dim = 256, s.intermediate = 2048, s.qk_norm = true;
  s.gelu = true, s.post_norms = true;
  const SimKvCache kv = kv_cache(r, s, 40);
  s.context = kv.length + 1;
  const Design d = decode_layer_design(DType::I8, s, 8);
  const SimLayerWeights w = layer_weights(r, s);
  const Vec x = r.bf16s(s.hidden);
  const std::vector<float> rr = rope(s.head_dim, kv.length);
  SimKernelArgs k;
  k.rms_offset = 1.0f, k.rope_interleaved = false;
  HostArgs a = pack_decode_layer(d, w, x, rr, kv);
  run_design(d, a, k);
  const Vec y = arg_bf16(d, a, "result", s.hidden);
  const LayerOut ref = reference_layer(s, w, x, rr, kv, k, 8, false);
  EXPECT_TRUE(same_bits(y, ref.y)) << "result differs from the pieces, rel " << rel_err(y, ref.y);
  EXPECT_TRUE(same_bits(kv_new_row(d, a), ref.kv_new));
  int nonzero = 0;
  for (const auto& v : y) nonzero += (v.bits & 0x7FFF) != 0;
  EXPECT_GT(nonzero, int(s.hidden) / 2);
}

TEST(SimFusedInt8, LmHeadEqualsItsPiecesBitForBitAndUnfusedInt8WithinTolerance) {
  Rng r;
  // vocab 2100 on 4 cores: three logits objects of 175 rows (rows and scales straddle DDR
  // objects); 2101: three of 176, two padding rows a core; vocab 100 on 8 cores: padding rows.
  for (const auto& [vocab, hidden, columns] :
       {std::tuple<int64_t, int64_t, int>{2100, 64, 1}, {2101, 64, 1}, {100, 32, 2}}) {
    const Design d = lm_head_design(DType::I8, vocab, hidden, columns);
    const std::vector<float> gamma = r.vals(hidden, 0.5f, 1.5f), head = r.vals(vocab * hidden);
    const Vec x = r.bf16s(hidden);
    SimKernelArgs k;
    k.eps = 1e-6f;
    HostArgs a = pack_lm_head(d, gamma, head, x);
    run_design(d, a, k);
    const std::vector<float> logits = lm_head_logits(d, a);
    const Vec xn = rmsnorm(x, gamma, k);
    const std::vector<float> want = gemv_i8_f32(head, vocab, hidden, xn);
    ASSERT_EQ(logits.size(), want.size());
    EXPECT_TRUE(std::equal(logits.begin(), logits.end(), want.begin())) << d.name;

    NpuSimBackend sim;
    const std::vector<float> unf = unfused_matmul(sim, head, vocab, hidden, xn);
    double span = 0, err = 0;
    for (size_t i = 0; i < unf.size(); ++i)
      span = std::max(span, std::fabs(double(unf[i]))), err = std::max(err, std::fabs(double(unf[i]) - logits[i]));
    std::printf("%s: max|dlogit| / max|logit| vs unfused int8 %.2e\n", d.name.c_str(), err / span);
    // The SRS rounding: half a step (the step a power of two <= 2 max|sum| / 127) times the row's
    // weight scale, against the largest logit.
    EXPECT_LE(err / span, 0.02) << d.name;
    EXPECT_GT(err, 0.0) << d.name << ": the SRS step should show";
  }
}

TEST(SimFusedInt8, RunDesignRefusesBfp16AndInt8WithoutKernel) {
  DecodeLayerShape s;
  s.hidden = 64, s.heads = 2, s.kv_heads = 1, s.head_dim = 32, s.intermediate = 64, s.context = 4;
  const auto refusal = [](const Design& d) -> std::string {
    HostArgs a;
    for (const HostArg& h : d.args) a.emplace_back(size_t(h.bytes), uint8_t{0});
    try {
      run_design(d, a, {});
    } catch (const std::invalid_argument& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(refusal(decode_layer_design(DType::BFP16, s, 1)).find("bfp16 is priced, not executed"), std::string::npos);
  EXPECT_NE(refusal(mlp_fused_design(DType::I8, s, 1)).find("no stage kernel 'mlp_fused_int8'"), std::string::npos);
  // int8 rows need k in 32s.
  DecodeLayerShape odd = s;
  odd.hidden = 48;
  EXPECT_NE(refusal(decode_layer_design(DType::I8, odd, 1)).find("multiples of 32"), std::string::npos);
  EXPECT_EQ(refusal(decode_layer_design(DType::I8, s, 1)), "");
}

// design.py of the int8 designs declares the written int8 entry points (their arity against
// kernels.h: test_iron_emitter_families.cpp, EveryDeclaredEntryPointHasItsPrototypesArity).
TEST(SimFusedInt8, EmittedDesignsDeclareTheWrittenInt8Kernels) {
  DecodeLayerShape s;
  s.hidden = 256, s.heads = 4, s.kv_heads = 2, s.head_dim = 64, s.intermediate = 512, s.context = 16;
  const Design layer = decode_layer_design(DType::I8, s, 2), head = lm_head_design(DType::I8, 4096, 256, 2);
  EXPECT_TRUE(missing_kernels(layer).empty());
  EXPECT_TRUE(missing_kernels(head).empty());
  const std::string py = emit_iron(layer) + emit_iron(head);
  for (const char* sym : {"decode_layer_int8_qkv", "decode_layer_int8_attention_take", "decode_layer_int8_down_result",
                          "lm_head_int8_rows", "lm_head_int8_rows_out"})
    EXPECT_NE(py.find(std::string("Kernel(\"") + sym + "\""), std::string::npos) << sym;
  EXPECT_EQ(py.find("not yet written"), std::string::npos);
}
