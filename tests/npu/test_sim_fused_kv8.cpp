// decode_layer with an int8 KV cache (DecodeLayerShape::kv_int8: decode_layer_int8_kv8, int8
// weights): the stream bytes from the layout (the KV read halved, the row scales itemised), the
// kernel's new K/V row equal bit for bit to the bf16-KV kernel's row quantized per (head, row),
// the layer output near the bf16-KV layer's within a stated tolerance, the runtime sequence still
// position-independent, and bad input refused by name. (The tiny decoder fixtures' tokens and
// logits against the host decoder in f32: test_sim_fused_llm.cpp, SimFusedInt8KvLlm.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include <nlohmann/json.hpp>

#include "fused_test_util.h"
#include "kv_test_util.h"
#include "npu/artifacts/insts.h"
#include "npu/artifacts/iron_emitter.h"
#include "npu/cost_model.h"
#include "npu/design_families.h"
#include "npu/planner.h"
#include "npu/runtime/fused_decoder.h"
#include "npu/sim_exec.h"

using namespace xdna;
using namespace xdna::npu;
using namespace xdna::npu::test;

namespace {

constexpr int64_t kP = 32, kObj = 2048;

int64_t arg_bytes(const Design& d, const std::string& name) {
  for (const HostArg& a : d.args)
    if (a.name == name) return a.bytes;
  ADD_FAILURE() << d.name << " has no argument " << name;
  return 0;
}

}  // namespace

// Qwen3-0.6B at context 1024: per core (4 cores a KV head, 256 positions) the int8 K and V blocks
// are 2 x 256 x 128 bytes (half the bf16 blocks) and the scales part one object (256 positions x
// 8 bytes); over the 32 cores the KV read is 1 MiB of values + 64 KiB of scales per layer, the
// new row 2 KiB of values + 64 bytes of scales. The rest of the stream is unchanged.
TEST(Int8KvStreamBytes, QwenLayerHalvesTheKvReadAndItemisesTheScales) {
  const Design b = decode_layer_design(DType::I8, qwen3_06b(1024, 16));
  const Design q = decode_layer_design(DType::I8, qwen3_06b(1024, 8));
  EXPECT_EQ(q.name, b.name.substr(0, b.name.size() - 3) + "_kv8_c8");
  const int64_t kv = 8 * 128, ppc = 1024 / 4;
  EXPECT_EQ(moved(b, SeqOp::Fill, "kv"), kP * 2 * ppc * 128 * 2);
  EXPECT_EQ(moved(q, SeqOp::Fill, "kv"), kP * 2 * ppc * 128);
  EXPECT_EQ(moved(q, SeqOp::Fill, "kv_scales"), kP * rup(ppc * 8, kObj));
  EXPECT_EQ(moved(q, SeqOp::Drain, "kv_row"), 2 * kv);
  EXPECT_EQ(moved(q, SeqOp::Drain, "kv_row_scales"), 8 * 8);
  EXPECT_EQ(moved(b, SeqOp::Drain, "kv_row"), 2 * kv * 2);
  for (const char* a : {"x", "weights", "rope", "weights_rest", "result"})
    EXPECT_EQ(moved(q, SeqOp::Fill, a) + moved(q, SeqOp::Drain, a), moved(b, SeqOp::Fill, a) + moved(b, SeqOp::Drain, a))
        << a;
  const int64_t saved = moved(b, SeqOp::Fill, "kv") + moved(b, SeqOp::Drain, "kv_row") -
                        (moved(q, SeqOp::Fill, "kv") + moved(q, SeqOp::Fill, "kv_scales") +
                         moved(q, SeqOp::Drain, "kv_row") + moved(q, SeqOp::Drain, "kv_row_scales"));
  EXPECT_EQ(model_design(b).ddr_bytes - model_design(q).ddr_bytes, saved);
  // The scale buffer: f32 [kv_head][kv_rows][K, V]; the values buffer a byte a value.
  EXPECT_EQ(kv_scales_bytes(q), 8 * q.params.at("kv_rows") * 8);
  EXPECT_EQ(kv_cache_bytes(q), 2 * 8 * q.params.at("kv_rows") * 128);
  EXPECT_EQ(arg_bytes(q, "kv_row_scales"), kv_scales_bytes(q) - 1023 * 8);
}

// The plan's KV bytes per token: int8 values (half of bf16) plus the scales, itemised.
TEST(Int8KvStreamBytes, PlanKvReadIsHalfPlusScales) {
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
    const DecoderPlan q = plan_decoder(in, o);
    const int64_t ppc = ctx / 4, scales = 28 * kP * rup(ppc * 8, kObj);
    EXPECT_EQ(b.kv_read_bytes, 28 * kP * 2 * ppc * 128 * 2) << ctx;
    EXPECT_EQ(q.kv_read_bytes, b.kv_read_bytes / 2 + scales) << ctx;
    EXPECT_EQ(q.kv_write_bytes, 28 * (2 * 8 * 128 + 8 * 8)) << ctx;
    EXPECT_EQ(q.weight_bytes, b.weight_bytes);
    EXPECT_GT(q.tok_per_s(), b.tok_per_s()) << ctx;
  }
  DecoderPlanOptions bad;
  bad.weights = DType::BF16;
  bad.kv = DType::I8;
  EXPECT_THROW(plan_decoder(in, bad), std::invalid_argument);
}

// The kv8 kernel's new row is the int8 kernel's bf16 row quantized per (head, row) by
// quantize_row (bit for bit: the same QKV, QK-norm and RoPE). Its layer output, over a cache of
// 40 positions: (exact) rows that int8 holds exactly (integers times 2^-7, max 127 x 2^-7: scale
// 2^-7, so dot(q, k) * scale and bf16(p * scale) * v are exact rescalings): bit for bit the
// bf16-KV layer's; (random) rows uniform in [-1, 1): the bf16-KV layer's within 5% of max|y|
// (int8 rounding, <= 1/254 of a row's max, then the int8 activations of the o and MLP rows;
// measured 2.5e-2).
TEST(SimFusedKv8, NewRowIsTheQuantizedBf16RowAndOutputNearBf16Kv) {
  for (const bool exact : {true, false})
    for (const int64_t length : {0, 40}) {
      FusedRng r(811);
      const DecodeLayerShape sb = small(length + 1, 16), sq = small(length + 1, 8);
      const SimLayerWeights w = layer_weights(r, sb);
      const std::vector<aie::bf16> x = r.bf16s(sb.hidden);
      const std::vector<float> ro = rope(sb.head_dim, length);
      const int64_t kvd = sb.kv_heads * sb.head_dim;
      SimKvCache kb(sb.kv_heads, sb.head_dim, sb.capacity), kq(sq.kv_heads, sq.head_dim, sq.capacity, true);
      std::uniform_int_distribution<int> q(-127, 127);
      for (int64_t t = 0; t < length; ++t) {
        std::vector<aie::bf16> row = r.bf16s(2 * kvd);
        if (exact) {
          for (int64_t i = 0; i < 2 * kvd; ++i)
            row[size_t(i)] = aie::to_bf16(float(i % sb.head_dim == t % sb.head_dim ? 127 : q(r.g)) / 128.0f, kSimRounding);
        }
        kb.append(row);
        kq.append(row);  // quantized as the kernel quantizes a new row
      }
      const Design db = decode_layer_design(DType::I8, sb), dq = decode_layer_design(DType::I8, sq);
      HostArgs ab = pack_decode_layer(db, w, x, ro, kb), aq = pack_decode_layer(dq, w, x, ro, kq);
      run_design(db, ab);
      run_design(dq, aq);
      append_kv_new(db, ab, kb);
      append_kv_new(dq, aq, kq);
      // The new row: kq's int8 values and scales == kb's bf16 row quantized.
      SimKvCache ref(sq.kv_heads, sq.head_dim, sq.capacity, true);
      for (int64_t t = 0; t <= length; ++t) {
        std::vector<aie::bf16> row(size_t(2 * kvd));
        for (int64_t h = 0; h < sq.kv_heads; ++h) {
          std::copy_n(kb.k.begin() + (h * kb.max_len + t) * sq.head_dim, sq.head_dim, row.begin() + h * sq.head_dim);
          std::copy_n(kb.v.begin() + (h * kb.max_len + t) * sq.head_dim, sq.head_dim, row.begin() + kvd + h * sq.head_dim);
        }
        ref.append(row);
      }
      EXPECT_EQ(kq.k8, ref.k8) << length;
      EXPECT_EQ(kq.v8, ref.v8) << length;
      EXPECT_EQ(kq.scales, ref.scales) << length;
      const std::vector<float> yb = to_f32(arg_bf16(db, ab, "result", sb.hidden));
      const std::vector<float> yq = to_f32(arg_bf16(dq, aq, "result", sq.hidden));
      double span = 0, err = 0;
      for (size_t i = 0; i < yb.size(); ++i)
        span = std::max(span, std::fabs(double(yb[i]))), err = std::max(err, std::fabs(double(yq[i]) - yb[i]));
      std::printf("%s rows, context %lld: max|dy| / max|y| %.2e (int8 vs bf16 KV)\n", exact ? "exact" : "random",
                  (long long)(length + 1), err / span);
      if (exact || length == 0) {  // length 0: only the new row, bf16 from the array
        EXPECT_EQ(yq, yb) << length;
      }
      EXPECT_LE(err / span, 0.05) << length;
    }
}

// Two positions with the same per-core split share the runtime sequence and instruction words
// with the int8 cache too: the position is only where kv, kv_row, kv_scales and kv_row_scales
// start in their buffers.
TEST(SimFusedKv8, InstructionStreamIsPositionIndependent) {
  const Design a = decode_layer_design(DType::I8, qwen3_06b(701, 8));
  const Design b = decode_layer_design(DType::I8, qwen3_06b(704, 8));
  EXPECT_EQ(design_to_json(a)["sequence"], design_to_json(b)["sequence"]);
  EXPECT_EQ(insts::encode(insts::lower_sequence(a)), insts::encode(insts::lower_sequence(b)));
  EXPECT_EQ(kv_window_offset(a), 0);
  EXPECT_EQ(kv_row_offset(b) - kv_row_offset(a), 3 * 128);  // a byte a value
  EXPECT_EQ(kv_scales_window_offset(a), 0);
  EXPECT_EQ(kv_scales_row_offset(a), 700 * 8);
  EXPECT_EQ(kv_scales_row_offset(b) - kv_scales_row_offset(a), 3 * 8);
  DecodeLayerShape la = qwen3_06b(600, 8), lb = qwen3_06b(900, 8);
  la.window = lb.window = 512;
  const Design wa = decode_layer_design(DType::I8, la), wb = decode_layer_design(DType::I8, lb);
  EXPECT_EQ(insts::encode(insts::lower_sequence(wa)), insts::encode(insts::lower_sequence(wb)));
  EXPECT_EQ(kv_scales_window_offset(wb), (900 - 512) * 8);
}

// A scale view past the buffer, a buffer of another layout, a bf16 cache for the int8 design,
// bf16 weights with an int8 cache, and a bf16 design asked for its scales: refused by name.
TEST(SimFusedKv8, BadInputIsRefusedByName) {
  const Design d = decode_layer_design(DType::I8, small(20, 8));
  std::vector<uint8_t> short_scales(size_t(kv_scales_bytes(d)) / 2);
  try {
    kv_scale_views(d, short_scales);
    ADD_FAILURE() << "no error";
  } catch (const std::out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find("argument kv_"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("KV scale buffer"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(d.name), std::string::npos) << e.what();
  }
  std::vector<uint8_t> larger(size_t(kv_scales_bytes(d)) + 64);
  EXPECT_THROW(kv_scale_views(d, larger), std::invalid_argument);
  std::vector<uint8_t> exact(size_t(kv_scales_bytes(d)));
  EXPECT_EQ(kv_scale_views(d, exact).row.data(), exact.data() + kv_scales_row_offset(d));

  FusedRng r(5);
  const DecodeLayerShape s = small(20, 8);
  const SimLayerWeights w = layer_weights(r, s);
  const SimKvCache bf16_cache = kv_cache(r, s, 19, s.capacity);
  try {
    pack_decode_layer(d, w, r.bf16s(s.hidden), rope(s.head_dim, 19), bf16_cache);
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("int8 KV cache"), std::string::npos) << e.what();
  }
  try {
    decode_layer_design(DType::BF16, s);
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("an int8 KV cache needs int8 weights"), std::string::npos) << e.what();
  }
  const Design plain = decode_layer_design(DType::I8, small(20, 16));
  EXPECT_THROW(kv_scales_bytes(plain), std::invalid_argument);
  SimKvCache q(s.kv_heads, s.head_dim, 4, true);
  EXPECT_THROW(q.append_int8(std::vector<uint8_t>(7)), std::invalid_argument);
}

// The IRON emitter takes the kv8 design: its kernel source is written, and every core calls the
// kv_scales stage before attention, the new row into kv_new after RoPE.
TEST(SimFusedKv8, EmitsIronWithTheKvScalesStage) {
  const Design d = decode_layer_design(DType::I8, small(20, 8), 2);
  EXPECT_TRUE(missing_kernels(d).empty());
  EXPECT_EQ(kernel_sources(d), std::vector<std::string>{"aie_kernels/decode_layer_int8_kv8.cc"});
  const std::string py = emit_iron(d);
  const size_t rope = py.find("k_decode_layer_int8_kv8_rope_kv_new(e_kv_new"),
               scales = py.find("k_decode_layer_int8_kv8_kv_scales(e_ddr_c0r0"),
               attention = py.find("k_decode_layer_int8_kv8_attention(e_ddr_c0r0");
  ASSERT_NE(scales, std::string::npos) << py.substr(0, 2000);
  ASSERT_NE(rope, std::string::npos);
  ASSERT_NE(attention, std::string::npos);
  EXPECT_LT(rope, scales);
  EXPECT_LT(scales, attention);
}
