// decode_layer with an int4 KV cache (DecodeLayerShape::kv_int4: decode_layer_int8_kv4, int8
// weights): the row quantizer (scale max|x| / 7, nearest even, +-7, two a byte, low nibble first),
// the stream bytes from the layout (the KV read a quarter of bf16's, the row scales itemised as
// with int8), the kernel's new K/V row equal bit for bit to the bf16-KV kernel's row quantized per
// (head, row), the layer output near the bf16-KV layer's within a stated tolerance, the runtime
// sequence still position-independent, the device decoder's packed upload (dry run), and bad
// input refused by name. (The tiny decoder fixtures against the host decoder in f32:
// test_sim_fused_llm.cpp, SimFusedInt4KvLlm.)
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

}  // namespace

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

// Qwen3-0.6B at context 1024: per core (4 cores a KV head, 256 positions) the int4 K and V blocks
// are 2 x 256 x 64 bytes (a quarter of the bf16 blocks) and the scales part the int8 cache's (one
// object: 256 positions x 8 bytes); the new row 1 KiB of values + 64 bytes of scales. The rest
// of the stream is unchanged, and the modelled DDR bytes differ by exactly the KV bytes saved.
TEST(Int4KvStreamBytes, QwenLayerQuartersTheKvReadAndItemisesTheScales) {
  const Design b = decode_layer_design(DType::I8, qwen3_06b(1024, 16));
  const Design q = decode_layer_design(DType::I8, qwen3_06b(1024, 4));
  EXPECT_EQ(q.name, b.name.substr(0, b.name.size() - 3) + "_kv4_c8");
  EXPECT_NO_THROW(validate_design(q));  // the hardware limits (aie2p.md) hold
  const int64_t kv = 8 * 128, ppc = 1024 / 4;
  EXPECT_EQ(moved(q, SeqOp::Fill, "kv") * 4, moved(b, SeqOp::Fill, "kv"));
  EXPECT_EQ(moved(q, SeqOp::Fill, "kv"), kP * 2 * ppc * 64);
  EXPECT_EQ(moved(q, SeqOp::Fill, "kv_scales"), kP * rup(ppc * 8, kObj));
  EXPECT_EQ(moved(q, SeqOp::Drain, "kv_row"), kv);
  EXPECT_EQ(moved(q, SeqOp::Drain, "kv_row_scales"), 8 * 8);
  const auto both = [](const Design& d, const char* a) { return moved(d, SeqOp::Fill, a) + moved(d, SeqOp::Drain, a); };
  for (const char* a : {"x", "weights", "rope", "weights_rest", "result"}) EXPECT_EQ(both(q, a), both(b, a)) << a;
  const int64_t saved = moved(b, SeqOp::Fill, "kv") + moved(b, SeqOp::Drain, "kv_row") -
                        (moved(q, SeqOp::Fill, "kv") + moved(q, SeqOp::Fill, "kv_scales") +
                         moved(q, SeqOp::Drain, "kv_row") + moved(q, SeqOp::Drain, "kv_row_scales"));
  EXPECT_EQ(model_design(b).ddr_bytes - model_design(q).ddr_bytes, saved);
  // The values buffer half a byte a value; the scale buffer as the int8 cache's.
  EXPECT_EQ(kv_cache_bytes(q), 2 * 8 * q.params.at("kv_rows") * 64);
  EXPECT_EQ(kv_scales_bytes(q), 8 * q.params.at("kv_rows") * 8);
}

// The plan's KV bytes per token: int4 values (a quarter of bf16) plus the int8 cache's scales.
TEST(Int4KvStreamBytes, PlanKvReadIsAQuarterPlusScales) {
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
    const DecoderPlan q4 = plan_decoder(in, o);
    const int64_t ppc = ctx / 4, scales = 28 * kP * rup(ppc * 8, kObj);
    EXPECT_EQ(q4.kv_read_bytes, b.kv_read_bytes / 4 + scales) << ctx;
    EXPECT_EQ(q4.kv_read_bytes, (q8.kv_read_bytes - scales) / 2 + scales) << ctx;
    EXPECT_EQ(q4.kv_write_bytes, 28 * (8 * 128 + 8 * 8)) << ctx;
    EXPECT_EQ(q4.weight_bytes, b.weight_bytes);
    EXPECT_GT(q4.tok_per_s(), q8.tok_per_s()) << ctx;
    for (const DecoderLayerPlan& l : q4.layers) EXPECT_NE(l.designs.at(0).find("_kv4_"), std::string::npos) << ctx;
  }
  DecoderPlanOptions bad;
  bad.weights = DType::BF16;
  bad.kv = DType::I4;
  EXPECT_NE(error_of([&] { plan_decoder(in, bad); }).find("an int4 KV cache needs int8 weights"), std::string::npos);
  bad.weights = DType::I8;
  bad.kv = DType::F32;
  EXPECT_NE(error_of([&] { plan_decoder(in, bad); }).find("bf16, int8 or int4"), std::string::npos);
}

// The kv4 kernel's new row is the int8 kernel's bf16 row quantized per (head, row) by
// quantize_row_int4 (bit for bit). Its layer output, over a cache of 40 positions: (exact) rows
// int4 holds exactly (integers in [-7, 7] times 2^-3 with a +-7 in each row: scale 2^-3, so
// dot(q, k) * scale and bf16(p * scale) * v are exact rescalings): bit for bit the bf16-KV
// layer's; (random) rows uniform in [-1, 1): the bf16-KV layer's within 10% of max|y| (int4
// rounding, <= 1/14 of a row's max a value, through attention, then the int8 activations of the
// o and MLP rows; measured 5.4e-2, the int8 cache's 2.5e-2).
TEST(SimFusedKv4, NewRowIsTheQuantizedBf16RowAndOutputNearBf16Kv) {
  for (const bool exact : {true, false})
    for (const int64_t length : {0, 40}) {
      FusedRng r(811);
      const DecodeLayerShape sb = small(length + 1, 16), sq = small(length + 1, 4);
      const SimLayerWeights w = layer_weights(r, sb);
      const std::vector<aie::bf16> x = r.bf16s(sb.hidden);
      const std::vector<float> ro = rope(sb.head_dim, length);
      const int64_t kvd = sb.kv_heads * sb.head_dim;
      SimKvCache kb(sb.kv_heads, sb.head_dim, sb.capacity), kq(sq.kv_heads, sq.head_dim, sq.capacity, false, true);
      std::uniform_int_distribution<int> q(-7, 7);
      for (int64_t t = 0; t < length; ++t) {
        std::vector<aie::bf16> row = r.bf16s(2 * kvd);
        if (exact)
          for (int64_t i = 0; i < 2 * kvd; ++i)
            row[size_t(i)] = aie::to_bf16(float(i % sb.head_dim == t % sb.head_dim ? 7 : q(r.g)) / 8.0f, kSimRounding);
        kb.append(row);
        kq.append(row);  // quantized as the kernel quantizes a new row
      }
      const Design db = decode_layer_design(DType::I8, sb), dq = decode_layer_design(DType::I8, sq);
      HostArgs ab = pack_decode_layer(db, w, x, ro, kb), aq = pack_decode_layer(dq, w, x, ro, kq);
      run_design(db, ab);
      run_design(dq, aq);
      append_kv_new(db, ab, kb);
      append_kv_new(dq, aq, kq);
      // Every row (the cached ones and the kernel's new one) == kb's bf16 rows quantized.
      SimKvCache ref(sq.kv_heads, sq.head_dim, sq.capacity, false, true);
      for (int64_t t = 0; t <= length; ++t) {
        std::vector<aie::bf16> row(size_t(2 * kvd));
        for (int64_t h = 0; h < sq.kv_heads; ++h) {
          const int64_t D = sq.head_dim, at = (h * kb.max_len + t) * D;
          std::copy_n(kb.k.begin() + at, D, row.begin() + h * D);
          std::copy_n(kb.v.begin() + at, D, row.begin() + kvd + h * D);
        }
        ref.append(row);
      }
      EXPECT_EQ(kq.k8, ref.k8) << length;
      EXPECT_EQ(kq.v8, ref.v8) << length;
      EXPECT_EQ(kq.scales, ref.scales) << length;
      EXPECT_TRUE(std::all_of(kq.k8.begin(), kq.k8.end(), [](int8_t v) { return v >= -7 && v <= 7; }));
      const std::vector<float> yb = to_f32(arg_bf16(db, ab, "result", sb.hidden));
      const std::vector<float> yq = to_f32(arg_bf16(dq, aq, "result", sq.hidden));
      double span = 0, err = 0;
      for (size_t i = 0; i < yb.size(); ++i)
        span = std::max(span, std::fabs(double(yb[i]))), err = std::max(err, std::fabs(double(yq[i]) - yb[i]));
      std::printf("%s rows, context %lld: max|dy| / max|y| %.2e (int4 vs bf16 KV)\n", exact ? "exact" : "random",
                  (long long)(length + 1), err / span);
      if (exact || length == 0) {  // length 0: only the new row, bf16 from the array
        EXPECT_EQ(yq, yb) << length;
      }
      EXPECT_LE(err / span, 0.10) << length;
    }
}

// The kv4 (and kv8) layer against the bf16-KV layer reading the same cache dequantized on the
// host (bf16(q * scale)): the kernels' exact rescaling differs from it only by that bf16
// rounding, which the int8 activations of the o and MLP rows can move by a quantization step:
// within 5% of max|y| (measured: int4 up to 3.5e-2, int8 up to 3.0e-2). Head dims 16 (the decoder
// fixtures': 256 positions an int4 object) and 64, every context from 1 to 20.
TEST(SimFusedKv4, OutputNearTheBf16LayerOverTheDequantizedCache) {
  for (const bool int4 : {true, false})
    for (const int64_t D : {16, 64})
      for (const int64_t length : {0, 1, 2, 3, 15, 16, 17, 19}) {  // 16 cores a KV head: 1 or 2 positions a core
        FusedRng r(97);
        DecodeLayerShape sb{128, 4, 2, D, 256, length + 1, true, false};
        sb.capacity = 48;
        DecodeLayerShape sq = sb;
        sq.kv_int4 = int4;
        sq.kv_int8 = !int4;
        const SimLayerWeights w = layer_weights(r, sb);
        const std::vector<aie::bf16> x = r.bf16s(sb.hidden);
        const std::vector<float> ro = rope(D, length);
        SimKvCache kq(sq.kv_heads, D, sq.capacity, !int4, int4);
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
        const Design db = decode_layer_design(DType::I8, sb), dq = decode_layer_design(DType::I8, sq);
        HostArgs ab = pack_decode_layer(db, w, x, ro, kb), aq = pack_decode_layer(dq, w, x, ro, kq);
        run_design(db, ab);
        run_design(dq, aq);
        const std::vector<float> yb = to_f32(arg_bf16(db, ab, "result", sb.hidden));
        const std::vector<float> yq = to_f32(arg_bf16(dq, aq, "result", sq.hidden));
        double span = 0, err = 0;
        for (size_t i = 0; i < yb.size(); ++i)
          span = std::max(span, std::fabs(double(yb[i]))), err = std::max(err, std::fabs(double(yq[i]) - yb[i]));
        EXPECT_LE(err / span, 5e-2) << (int4 ? "int4" : "int8") << ", head_dim " << D << ", context " << length + 1;
      }
}

// Two positions with the same per-core split share the runtime sequence and instruction words
// with the int4 cache too: the position is only where kv, kv_row, kv_scales and kv_row_scales
// start in their buffers (half a byte a value: kv_row moves head_dim / 2 bytes a position).
TEST(SimFusedKv4, InstructionStreamIsPositionIndependent) {
  const Design a = decode_layer_design(DType::I8, qwen3_06b(701, 4));
  const Design b = decode_layer_design(DType::I8, qwen3_06b(704, 4));
  EXPECT_EQ(design_to_json(a)["sequence"], design_to_json(b)["sequence"]);
  EXPECT_EQ(insts::encode(insts::lower_sequence(a)), insts::encode(insts::lower_sequence(b)));
  EXPECT_EQ(kv_window_offset(a), 0);
  EXPECT_EQ(kv_row_offset(b) - kv_row_offset(a), 3 * 64);
  EXPECT_EQ(kv_scales_row_offset(b) - kv_scales_row_offset(a), 3 * 8);
  DecodeLayerShape la = qwen3_06b(600, 4), lb = qwen3_06b(900, 4);
  la.window = lb.window = 512;
  const Design wa = decode_layer_design(DType::I8, la), wb = decode_layer_design(DType::I8, lb);
  EXPECT_EQ(insts::encode(insts::lower_sequence(wa)), insts::encode(insts::lower_sequence(wb)));
  EXPECT_EQ(kv_window_offset(wb), (900 - 512) * 64);
  EXPECT_EQ(kv_scales_window_offset(wb), (900 - 512) * 8);
}

// A short scale view, a cache of another type for the int4 design (bf16, int8), bf16 weights with
// an int4 cache, both int8 and int4 set, and drained rows of the wrong size or for another cache:
// refused by name.
TEST(SimFusedKv4, BadInputIsRefusedByName) {
  const DecodeLayerShape s = small(20, 4);
  const Design d = decode_layer_design(DType::I8, s);
  std::vector<uint8_t> short_scales(size_t(kv_scales_bytes(d)) / 2);
  const std::string view = error_of([&] { kv_scale_views(d, short_scales); });
  EXPECT_NE(view.find("argument kv_"), std::string::npos) << view;
  EXPECT_NE(view.find("KV scale buffer"), std::string::npos) << view;
  EXPECT_NE(view.find(d.name), std::string::npos) << view;

  FusedRng r(5);
  const SimLayerWeights w = layer_weights(r, s);
  const SimKvCache bf16_cache = kv_cache(r, s, 19, s.capacity);
  SimKvCache int8_cache(s.kv_heads, s.head_dim, s.capacity, true);
  for (int64_t t = 0; t < 19; ++t) int8_cache.append(r.bf16s(2 * s.kv_heads * s.head_dim));
  const auto pack = [&](const SimKvCache& kv) {
    return error_of([&] { pack_decode_layer(d, w, r.bf16s(s.hidden), rope(s.head_dim, 19), kv); });
  };
  EXPECT_NE(pack(bf16_cache).find("reads an int4 KV cache; the cache given is bf16"), std::string::npos)
      << pack(bf16_cache);
  EXPECT_NE(pack(int8_cache).find("reads an int4 KV cache; the cache given is int8"), std::string::npos)
      << pack(int8_cache);
  EXPECT_NE(error_of([&] { decode_layer_design(DType::BF16, s); }).find("an int4 KV cache needs int8 weights"),
            std::string::npos);
  DecodeLayerShape both = s;
  both.kv_int8 = true;
  EXPECT_NE(error_of([&] { decode_layer_design(DType::I8, both); }).find("exclusive"), std::string::npos);
  SimKvCache q(s.kv_heads, s.head_dim, 4, false, true);
  EXPECT_NE(error_of([&] { q.append_int4(std::vector<uint8_t>(7)); }).find("int4 kv row of 7 bytes"),
            std::string::npos);
  EXPECT_NE(error_of([&] { q.append_int8(std::vector<uint8_t>(7)); }).find("an int8 KV row for an int4 KV cache"),
            std::string::npos);
  SimKvCache q8(s.kv_heads, s.head_dim, 4, true);
  EXPECT_NE(error_of([&] { q8.append_int4(std::vector<uint8_t>(7)); }).find("an int4 KV row for an int8 KV cache"),
            std::string::npos);
}

// The IRON emitter takes the kv4 design: its kernel source is written, and every core calls the
// kv_scales stage before attention.
TEST(SimFusedKv4, EmitsIronWithTheKvScalesStage) {
  const Design d = decode_layer_design(DType::I8, small(20, 4), 2);
  EXPECT_TRUE(missing_kernels(d).empty());
  EXPECT_EQ(kernel_sources(d), std::vector<std::string>{"aie_kernels/decode_layer_int8_kv4.cc"});
  const std::string py = emit_iron(d);
  const size_t scales = py.find("k_decode_layer_int8_kv4_kv_scales(e_ddr_c0r0"),
               attention = py.find("k_decode_layer_int8_kv4_attention(e_ddr_c0r0");
  ASSERT_NE(scales, std::string::npos) << py.substr(0, 2000);
  ASSERT_NE(attention, std::string::npos);
  EXPECT_LT(scales, attention);
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
