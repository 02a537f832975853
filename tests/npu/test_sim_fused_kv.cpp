// decode_layer with a quantized KV cache, int8 weights, each check run for both cache widths:
// int8 (DecodeLayerShape::kv_int8: decode_layer_int8_kv8, SimFusedKv8 / Int8KvStreamBytes) and
// int4 (kv_int4: decode_layer_int8_kv4, SimFusedKv4 / Int4KvStreamBytes). The stream bytes from
// the layout (the KV read bits / 16 of bf16's, the row scales itemised), the kernel's new K/V row
// equal bit for bit to the bf16-KV kernel's row quantized per (head, row), the layer output near
// the bf16-KV layer's within a stated tolerance, the runtime sequence still position-independent,
// the IRON emitter's stage order, and bad input refused by name. int4 only: the row quantizer
// (scale max|x| / 7, nearest even, +-7, two a byte, low nibble first) and the device decoder's
// packed upload (dry run). (The tiny decoder fixtures' tokens and logits against the host decoder
// in f32: test_sim_fused_llm.cpp, SimFusedInt8KvLlm and SimFusedInt4KvLlm.)
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "aie_kernels/fused_stage_int8.h"
#include "fused_test_util.h"
#include "kv_test_util.h"
#include "npu/artifacts/insts.h"
#include "npu/artifacts/iron_emitter.h"
#include "npu/cost_model.h"
#include "npu/design_families.h"
#include "npu/planner.h"
#include "npu/runtime/decode_dry_run.h"
#include "npu/runtime/fused_decoder.h"
#include "npu/sim_exec.h"

using namespace xdna;
using namespace xdna::npu;
using namespace xdna::npu::test;

namespace {

constexpr int64_t kP = 32, kObj = 2048;

std::string kv_name(int bits) { return "int" + std::to_string(bits); }

int64_t arg_bytes(const Design& d, const std::string& name) {
  for (const HostArg& a : d.args)
    if (a.name == name) return a.bytes;
  ADD_FAILURE() << d.name << " has no argument " << name;
  return 0;
}

// An empty cache of `bits` a value (8 or 4) for shape s, `capacity` positions.
SimKvCache quantized_cache(const DecodeLayerShape& s, int bits, int64_t capacity) {
  return SimKvCache(s.kv_heads, s.head_dim, capacity, bits == 8, bits == 4);
}

// The int8-weight layer at shape s over `kv` (the kernel's new K/V row appended to it after the
// run): its output.
std::vector<float> run_layer(const DecodeLayerShape& s, const SimLayerWeights& w, const std::vector<aie::bf16>& x,
                             const std::vector<float>& ro, SimKvCache& kv, bool append_new_row) {
  const Design d = decode_layer_design(DType::I8, s);
  HostArgs a = pack_decode_layer(d, w, x, ro, kv);
  run_design(d, a);
  if (append_new_row) append_kv_new(d, a, kv);
  return to_f32(arg_bf16(d, a, "result", s.hidden));
}

// max|yq - yb| / max|yb|.
double relative_deviation(const std::vector<float>& yq, const std::vector<float>& yb) {
  double span = 0, err = 0;
  for (size_t i = 0; i < yb.size(); ++i)
    span = std::max(span, std::fabs(double(yb[i]))), err = std::max(err, std::fabs(double(yq[i]) - yb[i]));
  return err / span;
}

// Qwen3-0.6B at context 1024: per core (4 cores a KV head, 256 positions) the K and V blocks are
// 2 x 256 x 128 x bits / 8 bytes (bits / 16 of the bf16 blocks) and the scales part one object
// (256 positions x 8 bytes); over the 32 cores the KV read is bits / 16 of bf16's + 64 KiB of
// scales per layer, the new row 2 x 1024 x bits / 8 bytes of values + 64 bytes of scales. The
// rest of the stream is unchanged, and the modelled DDR bytes differ by exactly the KV bytes saved.
void expect_qwen_layer_stream_bytes(int bits) {
  const Design b = decode_layer_design(DType::I8, qwen3_06b(1024, 16));
  const Design q = decode_layer_design(DType::I8, qwen3_06b(1024, bits));
  EXPECT_EQ(q.name, b.name.substr(0, b.name.size() - 3) + "_kv" + std::to_string(bits) + "_c8");
  EXPECT_NO_THROW(validate_design(q));  // the hardware limits (aie2p.md) hold
  const int64_t kv = 8 * 128, ppc = 1024 / 4;
  EXPECT_EQ(moved(b, SeqOp::Fill, "kv"), kP * 2 * ppc * 128 * 2);
  EXPECT_EQ(moved(q, SeqOp::Fill, "kv") * 16 / bits, moved(b, SeqOp::Fill, "kv"));
  EXPECT_EQ(moved(q, SeqOp::Fill, "kv"), kP * 2 * ppc * 128 * bits / 8);
  EXPECT_EQ(moved(q, SeqOp::Fill, "kv_scales"), kP * rup(ppc * 8, kObj));
  EXPECT_EQ(moved(q, SeqOp::Drain, "kv_row"), 2 * kv * bits / 8);
  EXPECT_EQ(moved(q, SeqOp::Drain, "kv_row_scales"), 8 * 8);
  EXPECT_EQ(moved(b, SeqOp::Drain, "kv_row"), 2 * kv * 2);
  const auto both = [](const Design& d, const char* a) { return moved(d, SeqOp::Fill, a) + moved(d, SeqOp::Drain, a); };
  for (const char* a : {"x", "weights", "rope", "weights_rest", "result"}) EXPECT_EQ(both(q, a), both(b, a)) << a;
  const int64_t saved = moved(b, SeqOp::Fill, "kv") + moved(b, SeqOp::Drain, "kv_row") -
                        (moved(q, SeqOp::Fill, "kv") + moved(q, SeqOp::Fill, "kv_scales") +
                         moved(q, SeqOp::Drain, "kv_row") + moved(q, SeqOp::Drain, "kv_row_scales"));
  EXPECT_EQ(model_design(b).ddr_bytes - model_design(q).ddr_bytes, saved);
  // The scale buffer: f32 [kv_head][kv_rows][K, V] for either width; the values buffer bits / 8
  // bytes a value.
  EXPECT_EQ(kv_scales_bytes(q), 8 * q.params.at("kv_rows") * 8);
  EXPECT_EQ(kv_cache_bytes(q), 2 * 8 * q.params.at("kv_rows") * 128 * bits / 8);
  EXPECT_EQ(arg_bytes(q, "kv_row_scales"), kv_scales_bytes(q) - 1023 * 8);
}

// The plan's KV bytes per token: bits / 16 of bf16's values plus the scales, itemised; int4
// against int8 too. Faster than the next wider cache (bf16 for int8, int8 for int4).
void expect_plan_kv_bytes(int bits) {
  DecoderPlanInput in;
  in.name = "qwen3-0.6b";
  in.family = "qwen3";
  in.layers = 28;
  in.vocab = 151936;
  in.shape = qwen3_06b(1, 16);
  for (const int64_t ctx : {128, 512, 1024}) {
    DecoderPlanOptions o;
    o.context = ctx;
    const DecoderPlan b = plan_decoder(in, o);
    o.kv = DType::I8;
    const DecoderPlan q8 = plan_decoder(in, o);
    o.kv = DType::I4;
    const DecoderPlan q = bits == 4 ? plan_decoder(in, o) : q8;
    const int64_t ppc = ctx / 4, scales = 28 * kP * rup(ppc * 8, kObj);
    EXPECT_EQ(b.kv_read_bytes, 28 * kP * 2 * ppc * 128 * 2) << ctx;
    EXPECT_EQ(q.kv_read_bytes, b.kv_read_bytes * bits / 16 + scales) << ctx;
    if (bits == 4) {
      EXPECT_EQ(q.kv_read_bytes, (q8.kv_read_bytes - scales) / 2 + scales) << ctx;
    }
    EXPECT_EQ(q.kv_write_bytes, 28 * (2 * 8 * 128 * bits / 8 + 8 * 8)) << ctx;
    EXPECT_EQ(q.weight_bytes, b.weight_bytes);
    EXPECT_GT(q.tok_per_s(), (bits == 4 ? q8 : b).tok_per_s()) << ctx;
    for (const DecoderLayerPlan& l : q.layers)
      EXPECT_NE(l.designs.at(0).find("_kv" + std::to_string(bits) + "_"), std::string::npos) << ctx;
  }
  DecoderPlanOptions bad;
  bad.weights = DType::BF16;
  bad.kv = bits == 4 ? DType::I4 : DType::I8;
  EXPECT_THROW(plan_decoder(in, bad), std::invalid_argument);
  EXPECT_NE(error_of([&] { plan_decoder(in, bad); }).find("an " + kv_name(bits) + " KV cache needs int8 weights"),
            std::string::npos);
  bad.weights = DType::I8;
  bad.kv = DType::F32;
  EXPECT_NE(error_of([&] { plan_decoder(in, bad); }).find("bf16, int8 or int4"), std::string::npos);
}

// The quantized kernel's new row is the int8 kernel's bf16 row quantized per (head, row) by
// quantize_row / quantize_row_int4 (bit for bit: the same QKV, QK-norm and RoPE). Its layer
// output, over a cache of 40 positions: (exact) rows the cache holds exactly (integers up to
// qmax = 127 or 7 times 1 / (qmax + 1), a qmax in each row: scale 1 / (qmax + 1), so
// dot(q, k) * scale and bf16(p * scale) * v are exact rescalings): bit for bit the bf16-KV
// layer's; (random) rows uniform in [-1, 1): the bf16-KV layer's within `tolerance` of max|y|.
void expect_new_row_quantized_and_output_near_bf16(int bits, double tolerance) {
  const int qmax = (1 << (bits - 1)) - 1;
  for (const bool exact : {true, false})
    for (const int64_t length : {0, 40}) {
      FusedRng r(811);
      const DecodeLayerShape sb = small(length + 1, 16), sq = small(length + 1, bits);
      const SimLayerWeights w = layer_weights(r, sb);
      const std::vector<aie::bf16> x = r.bf16s(sb.hidden);
      const std::vector<float> ro = rope(sb.head_dim, length);
      const int64_t kvd = sb.kv_heads * sb.head_dim, D = sb.head_dim;
      SimKvCache kb(sb.kv_heads, D, sb.capacity), kq = quantized_cache(sq, bits, sq.capacity);
      std::uniform_int_distribution<int> q(-qmax, qmax);
      for (int64_t t = 0; t < length; ++t) {
        std::vector<aie::bf16> row = r.bf16s(2 * kvd);
        if (exact)
          for (int64_t i = 0; i < 2 * kvd; ++i)
            row[size_t(i)] = aie::to_bf16(float(i % D == t % D ? qmax : q(r.g)) / float(qmax + 1), kSimRounding);
        kb.append(row);
        kq.append(row);  // quantized as the kernel quantizes a new row
      }
      const std::vector<float> yb = run_layer(sb, w, x, ro, kb, true), yq = run_layer(sq, w, x, ro, kq, true);
      // Every row (the cached ones and the kernel's new one) == kb's bf16 rows quantized.
      SimKvCache ref = quantized_cache(sq, bits, sq.capacity);
      for (int64_t t = 0; t <= length; ++t) {
        std::vector<aie::bf16> row(size_t(2 * kvd));
        for (int64_t h = 0; h < sq.kv_heads; ++h) {
          const int64_t at = (h * kb.max_len + t) * D;
          std::copy_n(kb.k.begin() + at, D, row.begin() + h * D);
          std::copy_n(kb.v.begin() + at, D, row.begin() + kvd + h * D);
        }
        ref.append(row);
      }
      EXPECT_EQ(kq.k8, ref.k8) << length;
      EXPECT_EQ(kq.v8, ref.v8) << length;
      EXPECT_EQ(kq.scales, ref.scales) << length;
      EXPECT_TRUE(std::all_of(kq.k8.begin(), kq.k8.end(), [&](int8_t v) { return v >= -qmax && v <= qmax; }));
      const double dev = relative_deviation(yq, yb);
      std::printf("%s rows, context %lld: max|dy| / max|y| %.2e (%s vs bf16 KV)\n", exact ? "exact" : "random",
                  (long long)(length + 1), dev, kv_name(bits).c_str());
      if (exact || length == 0) {  // length 0: only the new row, bf16 from the array
        EXPECT_EQ(yq, yb) << length;
      }
      EXPECT_LE(dev, tolerance) << length;
    }
}

// Two positions with the same per-core split share the runtime sequence and instruction words
// with a quantized cache too: the position is only where kv, kv_row, kv_scales and kv_row_scales
// start in their buffers (kv_row moves head_dim x bits / 8 bytes a position).
void expect_instruction_stream_position_independent(int bits) {
  const int64_t row = 128 * bits / 8;
  const Design a = decode_layer_design(DType::I8, qwen3_06b(701, bits));
  const Design b = decode_layer_design(DType::I8, qwen3_06b(704, bits));
  EXPECT_EQ(design_to_json(a)["sequence"], design_to_json(b)["sequence"]);
  EXPECT_EQ(insts::encode(insts::lower_sequence(a)), insts::encode(insts::lower_sequence(b)));
  EXPECT_EQ(kv_window_offset(a), 0);
  EXPECT_EQ(kv_row_offset(b) - kv_row_offset(a), 3 * row);
  EXPECT_EQ(kv_scales_window_offset(a), 0);
  EXPECT_EQ(kv_scales_row_offset(a), 700 * 8);
  EXPECT_EQ(kv_scales_row_offset(b) - kv_scales_row_offset(a), 3 * 8);
  DecodeLayerShape la = qwen3_06b(600, bits), lb = qwen3_06b(900, bits);
  la.window = lb.window = 512;
  const Design wa = decode_layer_design(DType::I8, la), wb = decode_layer_design(DType::I8, lb);
  EXPECT_EQ(insts::encode(insts::lower_sequence(wa)), insts::encode(insts::lower_sequence(wb)));
  EXPECT_EQ(kv_window_offset(wb), (900 - 512) * row);
  EXPECT_EQ(kv_scales_window_offset(wb), (900 - 512) * 8);
}

// A scale view past the buffer or of another layout, a cache of another type for the design
// (bf16, the other width), bf16 weights with a quantized cache, a drained row of the wrong size
// and a row of the other width: refused by name.
void expect_bad_input_refused(int bits) {
  const DecodeLayerShape s = small(20, bits);
  const Design d = decode_layer_design(DType::I8, s);
  std::vector<uint8_t> short_scales(size_t(kv_scales_bytes(d)) / 2);
  EXPECT_THROW(kv_scale_views(d, short_scales), std::out_of_range);
  const std::string view = error_of([&] { kv_scale_views(d, short_scales); });
  EXPECT_NE(view.find("argument kv_"), std::string::npos) << view;
  EXPECT_NE(view.find("KV scale buffer"), std::string::npos) << view;
  EXPECT_NE(view.find(d.name), std::string::npos) << view;
  std::vector<uint8_t> larger(size_t(kv_scales_bytes(d)) + 64);
  EXPECT_THROW(kv_scale_views(d, larger), std::invalid_argument);
  std::vector<uint8_t> exact(size_t(kv_scales_bytes(d)));
  EXPECT_EQ(kv_scale_views(d, exact).row.data(), exact.data() + kv_scales_row_offset(d));

  FusedRng r(5);
  const SimLayerWeights w = layer_weights(r, s);
  const int other = 12 - bits;  // 8 <-> 4
  const SimKvCache bf16_cache = kv_cache(r, s, 19, s.capacity);
  SimKvCache other_cache = quantized_cache(s, other, s.capacity);
  for (int64_t t = 0; t < 19; ++t) other_cache.append(r.bf16s(2 * s.kv_heads * s.head_dim));
  const auto pack = [&](const SimKvCache& kv) {
    return error_of([&] { pack_decode_layer(d, w, r.bf16s(s.hidden), rope(s.head_dim, 19), kv); });
  };
  const std::string reads = "reads an " + kv_name(bits) + " KV cache; the cache given is ";
  EXPECT_NE(pack(bf16_cache).find(reads + "bf16"), std::string::npos) << pack(bf16_cache);
  EXPECT_NE(pack(other_cache).find(reads + kv_name(other)), std::string::npos) << pack(other_cache);
  EXPECT_NE(error_of([&] { decode_layer_design(DType::BF16, s); }).find("an " + kv_name(bits) +
                                                                          " KV cache needs int8 weights"),
            std::string::npos);
  DecodeLayerShape both = s;
  both.kv_int8 = both.kv_int4 = true;
  EXPECT_NE(error_of([&] { decode_layer_design(DType::I8, both); }).find("exclusive"), std::string::npos);
  const Design plain = decode_layer_design(DType::I8, small(20, 16));
  EXPECT_THROW(kv_scales_bytes(plain), std::invalid_argument);
  SimKvCache q = quantized_cache(s, bits, 4);
  const auto append = [&](int row_bits) {
    return error_of([&] {
      if (row_bits == 8) q.append_int8(std::vector<uint8_t>(7));
      else q.append_int4(std::vector<uint8_t>(7));
    });
  };
  EXPECT_NE(append(bits).find(kv_name(bits) + " kv row of 7 bytes"), std::string::npos) << append(bits);
  EXPECT_NE(append(other).find("an " + kv_name(other) + " KV row for an " + kv_name(bits) + " KV cache"),
            std::string::npos)
      << append(other);
}

// The IRON emitter takes the quantized design: its kernel source is written, and every core
// calls the kv_scales stage before attention, the new row into kv_new after RoPE.
void expect_iron_with_the_kv_scales_stage(int bits) {
  const Design d = decode_layer_design(DType::I8, small(20, bits), 2);
  const std::string k = "decode_layer_int8_kv" + std::to_string(bits);
  EXPECT_TRUE(missing_kernels(d).empty());
  EXPECT_EQ(kernel_sources(d), std::vector<std::string>{"aie_kernels/" + k + ".cc"});
  const std::string py = emit_iron(d);
  const size_t rope = py.find("k_" + k + "_rope_kv_new(e_kv_new"), scales = py.find("k_" + k + "_kv_scales(e_ddr_c0r0"),
               attention = py.find("k_" + k + "_attention(e_ddr_c0r0");
  ASSERT_NE(scales, std::string::npos) << py.substr(0, 2000);
  ASSERT_NE(rope, std::string::npos);
  ASSERT_NE(attention, std::string::npos);
  EXPECT_LT(rope, scales);
  EXPECT_LT(scales, attention);
}

}  // namespace

TEST(Int8KvStreamBytes, QwenLayerHalvesTheKvReadAndItemisesTheScales) { expect_qwen_layer_stream_bytes(8); }
TEST(Int4KvStreamBytes, QwenLayerQuartersTheKvReadAndItemisesTheScales) { expect_qwen_layer_stream_bytes(4); }
TEST(Int8KvStreamBytes, PlanKvReadIsHalfPlusScales) { expect_plan_kv_bytes(8); }
TEST(Int4KvStreamBytes, PlanKvReadIsAQuarterPlusScales) { expect_plan_kv_bytes(4); }

// Tolerances: int8 5% of max|y| (int8 rounding, <= 1/254 of a row's max, then the int8
// activations of the o and MLP rows; measured 2.5e-2); int4 10% (int4 rounding, <= 1/14 of a
// row's max a value, through attention, then those activations; measured 5.4e-2).
TEST(SimFusedKv8, NewRowIsTheQuantizedBf16RowAndOutputNearBf16Kv) {
  expect_new_row_quantized_and_output_near_bf16(8, 0.05);
}
TEST(SimFusedKv4, NewRowIsTheQuantizedBf16RowAndOutputNearBf16Kv) {
  expect_new_row_quantized_and_output_near_bf16(4, 0.10);
}

TEST(SimFusedKv8, InstructionStreamIsPositionIndependent) { expect_instruction_stream_position_independent(8); }
TEST(SimFusedKv4, InstructionStreamIsPositionIndependent) { expect_instruction_stream_position_independent(4); }
TEST(SimFusedKv8, BadInputIsRefusedByName) { expect_bad_input_refused(8); }
TEST(SimFusedKv4, BadInputIsRefusedByName) { expect_bad_input_refused(4); }
TEST(SimFusedKv8, EmitsIronWithTheKvScalesStage) { expect_iron_with_the_kv_scales_stage(8); }
TEST(SimFusedKv4, EmitsIronWithTheKvScalesStage) { expect_iron_with_the_kv_scales_stage(4); }

// The kv4 and kv8 layers against the bf16-KV layer reading the same cache dequantized on the
// host (bf16(q * scale)): the kernels' exact rescaling differs from it only by that bf16
// rounding, which the int8 activations of the o and MLP rows can move by a quantization step:
// within 5% of max|y| (measured: int4 up to 3.5e-2, int8 up to 3.0e-2). Head dims 16 (the decoder
// fixtures': 256 positions an int4 object) and 64, every context from 1 to 20.
TEST(SimFusedKv4, OutputNearTheBf16LayerOverTheDequantizedCache) {
  for (const int bits : {4, 8})
    for (const int64_t D : {16, 64})
      for (const int64_t length : {0, 1, 2, 3, 15, 16, 17, 19}) {  // 16 cores a KV head: 1 or 2 positions a core
        FusedRng r(97);
        DecodeLayerShape sb{128, 4, 2, D, 256, length + 1, true, false};
        sb.capacity = 48;
        const DecodeLayerShape sq = with_kv_bits(sb, bits);
        const SimLayerWeights w = layer_weights(r, sb);
        const std::vector<aie::bf16> x = r.bf16s(sb.hidden);
        const std::vector<float> ro = rope(D, length);
        SimKvCache kq = quantized_cache(sq, bits, sq.capacity);
        for (int64_t t = 0; t < length; ++t) kq.append(r.bf16s(2 * sq.kv_heads * D));
        SimKvCache kb(sb.kv_heads, D, sb.capacity);  // bf16(q * scale) of every cached value
        for (int64_t h = 0; h < sq.kv_heads; ++h)
          for (int64_t t = 0; t < length; ++t)
            for (int64_t i = 0; i < D; ++i) {
              const size_t at = size_t((h * sq.capacity + t) * D + i), row = size_t((h * sq.capacity + t) * 2);
              kb.k[at] = aie::to_bf16(float(kq.k8[at]) * kq.scales[row], kSimRounding);
              kb.v[at] = aie::to_bf16(float(kq.v8[at]) * kq.scales[row + 1], kSimRounding);
            }
        kb.length = length;
        const std::vector<float> yb = run_layer(sb, w, x, ro, kb, false), yq = run_layer(sq, w, x, ro, kq, false);
        EXPECT_LE(relative_deviation(yq, yb), 5e-2)
            << kv_name(bits) << ", head_dim " << D << ", context " << length + 1;
      }
}

// The row quantizer: max|x| maps to +-7; halves round to even (x / scale = 2.5 -> 2, 3.5 -> 4,
// -0.5 -> 0); values packed two a byte, value 2i in the low nibble; unpack sign-extends them back;
// an all-zero row has scale 0 and zero values.
TEST(Int4KvQuantizer, ScaleRoundingSaturationAndPacking) {
  const float in[8] = {7.0f, -7.0f, 2.5f, 3.5f, -0.5f, 1.0f, -3.5f, 0.0f};  // scale 1
  aie::bf16 x[8];
  for (int i = 0; i < 8; ++i) x[i] = aie::to_bf16(in[i], kSimRounding);
  uint8_t packed[4];
  EXPECT_EQ(xk_fused::quantize_row_int4(x, packed, 8), 1.0f);
  int8_t q[8];
  xk_fused::unpack_int4(packed, q, 8);
  EXPECT_EQ(std::vector<int8_t>(q, q + 8), (std::vector<int8_t>{7, -7, 2, 4, 0, 1, -4, 0}));
  EXPECT_EQ(packed[0], uint8_t(0x07 | (0x9 << 4)));  // 7 low, -7 (0b1001) high
  for (int i = 0; i < 8; ++i) x[i] = aie::bf16{};
  EXPECT_EQ(xk_fused::quantize_row_int4(x, packed, 8), 0.0f);
  EXPECT_EQ(std::count(packed, packed + 4, 0), 4);
  // Every value stays in [-7, 7] (never -8) for random rows.
  FusedRng r(3);
  const std::vector<aie::bf16> row = r.bf16s(256);
  std::vector<uint8_t> p(128);
  std::vector<int8_t> v(256);
  const float scale = xk_fused::quantize_row_int4(row.data(), p.data(), 256);
  xk_fused::unpack_int4(p.data(), v.data(), 256);
  float amax = 0;
  for (int i = 0; i < 256; ++i) {
    EXPECT_LE(std::abs(int(v[size_t(i)])), 7);
    amax = std::max(amax, std::fabs(aie::to_float(row[size_t(i)])));
    EXPECT_LE(std::fabs(float(v[size_t(i)]) * scale - aie::to_float(row[size_t(i)])), 0.5f * scale * 1.0001f) << i;
  }
  EXPECT_EQ(scale, amax / 7.0f);
}

// `--device npu`'s fused decode over the dry-run driver (npu (needs hardware, unverified here)):
// the prefilled rows are uploaded packed two a byte, and kv_row moves head_dim / 2 bytes a token.
TEST(NpuDeviceFusedDecodeKv4, UploadsPackedValuesAndMovesOnlyTheViews) {
  const SimDecoderModel m = small_int8_model(4);
  constexpr int64_t kMaxLen = 16, kFilled = 3;
  SimDecoderState st(m, kMaxLen);
  FusedRng r(9);
  const int64_t kvd = m.shape.kv_heads * m.shape.head_dim, D = m.shape.head_dim;
  for (int64_t p = 0; p < kFilled; ++p)
    for (SimKvCache& kv : st.kv) kv.append(r.bf16s(2 * kvd));
  st.position = kFilled;
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("xdna_fused_kv4_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const std::vector<int32_t> ids = {5, 9};
  const FusedDeviceDryRun x = fused_device_dry_run(m, st, ids, dir.string());
  std::filesystem::remove_all(dir);
  ASSERT_EQ(x.tokens.size(), 2u);
  EXPECT_EQ(x.state.position, kFilled + 2);
  EXPECT_TRUE(x.state.kv[0].int4);
  const Design d0 = x.tokens[0].invocations[0];
  ASSERT_NE(d0.name.find("_kv4_"), std::string::npos) << d0.name;
  const int64_t rows = d0.params.at("kv_rows");
  std::vector<uint8_t> packed(size_t(kFilled * D / 2));  // layer l, K, head 1: rows 0..kFilled-1
  int value_bufs = 0;
  for (const auto& [handle, bytes] : x.bo_contents)
    if (int64_t(bytes.size()) == kv_cache_bytes(d0))
      for (size_t l = 0; l < st.kv.size(); ++l) {
        const int8_t* q = st.kv[l].k8.data() + kMaxLen * D;
        for (size_t b = 0; b < packed.size(); ++b) packed[b] = uint8_t((q[2 * b] & 0xF) | ((q[2 * b + 1] & 0xF) << 4));
        value_bufs += std::memcmp(bytes.data() + rows * D / 2, packed.data(), packed.size()) == 0;
      }
  EXPECT_EQ(value_bufs, 2);
  EXPECT_EQ(x.tokens[0].insts_sha256.size(), x.tokens[1].insts_sha256.size());
  // The decoded rows came back through append_int4: each layer holds kFilled + 2 positions.
  for (const SimKvCache& kv : x.state.kv) EXPECT_EQ(kv.length, kFilled + 2);
}
