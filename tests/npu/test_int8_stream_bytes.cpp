// The int8 fused designs' DDR bytes per token from the stream layout, term by term: each core's
// matrix slice is [rows x k int8][the rows' f32 scales, 8 to a 32-byte block, one zero pad to a
// whole block per slice] (aie_kernels/fused_stage_int8.h), every part of a core's stream padded
// to whole 2 KiB objects. Checks the per-layer and LM-head designs and the Qwen3-0.6B plan
// against that formula, and the packer's bytes (npu-sim's layout) against it, so any per-row
// padding of the scales (or other layout growth) shows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/numeric.h"
#include "npu/cost_model.h"
#include "npu/design_families.h"
#include "npu/planner.h"
#include "npu/sim_exec.h"
#include "fused_test_util.h"

using namespace xdna;
using namespace xdna::npu;

namespace {

constexpr int64_t kP = 32;      // 8 columns x 4 cores
constexpr int64_t kObj = 2048;  // stream object per core
int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t rup(int64_t a, int64_t b) { return cdiv(a, b) * b; }
// A core's int8 slice of `rows` rows of k values: the rows, then their scales packed densely.
int64_t slice(int64_t rows, int64_t k) { return rows * k + rup(rows * 4, 32); }
int64_t scales(int64_t rows) { return rup(rows * 4, 32); }

struct Qwen3 {  // Qwen3-0.6B (config.json)
  int64_t hidden = 1024, heads = 16, kv_heads = 8, D = 128, I = 3072, layers = 28, vocab = 151936;
  int64_t q() const { return heads * D; }
  int64_t kv() const { return kv_heads * D; }
};

// decode_layer int8 without the KV part: x, [gamma, qkv slice, QK-norm gammas, the o, gate, up
// and down slices' scales], rope row, [o rows, ffn gamma, gate and up rows, down rows]; writes:
// the result row. objects: a core's stream objects.
struct LayerBytes {
  int64_t stream = 0, scales = 0, writes = 0, objects = 0;
};
LayerBytes layer_bytes(const Qwen3& m) {
  const int64_t Rqkv = cdiv(m.q() + 2 * m.kv(), kP), Rh = cdiv(m.hidden, kP), Ri = cdiv(m.I, kP);
  const int64_t later_scales = scales(Rh) + 2 * scales(Ri) + scales(Rh);
  const int64_t w_attn = 2 * m.hidden + slice(Rqkv, m.hidden) + 4 * m.D + later_scales;
  const int64_t w_rest = Rh * m.q() + 2 * m.hidden + 2 * Ri * m.hidden + Rh * m.I;
  const int64_t objects = cdiv(2 * m.hidden, kObj) + cdiv(w_attn, kObj) + cdiv(4 * m.D, kObj) + cdiv(w_rest, kObj);
  return {kP * objects * kObj, kP * (scales(Rqkv) + later_scales), 2 * m.hidden, objects};
}

// lm_head int8: x, then [gamma, per logits object its slice]; writes: logits. A core's rows
// are spread evenly over the fewest objects of at most 256 rows (Qwen3-0.6B: 19 of 250 rows for
// 4748, 64 zero rows in all; 256-row objects had 3712).
struct HeadBytes {
  int64_t stream = 0, scales = 0, writes = 0, pad_rows = 0, scale_pad = 0;  // scale_pad: to whole 32-byte blocks
};
HeadBytes head_bytes(const Qwen3& m) {
  const int64_t per_core = cdiv(m.vocab, kP), objects = cdiv(per_core, 256), chunk = cdiv(per_core, objects);
  const int64_t rows = objects * chunk;
  const int64_t weights = 2 * m.hidden + objects * slice(chunk, m.hidden);
  return {kP * (cdiv(2 * m.hidden, kObj) + cdiv(weights, kObj)) * kObj, kP * objects * scales(chunk),
          kP * rows * 4, kP * rows - m.vocab, kP * objects * (scales(chunk) - 4 * chunk)};
}

}  // namespace

TEST(Int8StreamBytes, DecodeLayerMatchesThePackedLayout) {
  const Qwen3 m;
  const DecodeLayerShape s{m.hidden, m.heads, m.kv_heads, m.D, m.I, 1024, true, false};
  const DesignCost c = model_design(decode_layer_design(DType::I8, s));
  const int64_t kv_read = 2 * 1024 * m.kv() * 2, kv_write = 2 * m.kv() * 2;
  const LayerBytes b = layer_bytes(m);
  EXPECT_EQ(c.ddr_bytes, b.stream + kv_read + b.writes + kv_write);
  // The scales are 4 bytes a row: 12288 rows (4096 qkv, 1024 o, 2 x 3072 gate/up, 1024 down).
  EXPECT_EQ(b.scales, 4 * (m.q() + 2 * m.kv() + m.hidden + 2 * m.I + m.hidden));
  // Both weight parts are whole objects (66 and 177): 245 a core, where each slice's scales after
  // its rows left half an object at the end of both (66 + 178 = 246 with x and rope).
  EXPECT_EQ(b.objects, 1 + 66 + 1 + 177);
}

TEST(Int8StreamBytes, LmHeadMatchesThePackedLayout) {
  const Qwen3 m;
  const DesignCost c = model_design(lm_head_design(DType::I8, m.vocab, m.hidden));
  const HeadBytes b = head_bytes(m);
  EXPECT_EQ(c.ddr_bytes, b.stream + b.writes);
  // One scale per (padded) vocabulary row, each object's 250 (1000 bytes) padded to 1024.
  EXPECT_EQ(b.scales, 4 * (m.vocab + b.pad_rows) + b.scale_pad);
  EXPECT_EQ(b.pad_rows, 64);  // 2 a core: 19 x 250 rows for 4748
  EXPECT_EQ(b.scale_pad, kP * 19 * 24);
  EXPECT_EQ(lm_head_design(DType::I8, m.vocab, m.hidden).params.at("chunk_rows"), 250);
}

// Plan total = 28 layers + LM head by the formula above; the scales add 4 bytes a row (about
// 2.0 MB, 0.34% of the 596 MB int8 weights) and the stream minus the KV traffic stays within
// 2.5% of the weights at any context (2.1%; 2.7% with 256-row LM-head objects).
TEST(Int8StreamBytes, Qwen3PlanBytesPerTokenAreTheFormula) {
  const Qwen3 m;
  const DecoderPlanInput in{"Qwen3-0.6B", "qwen3", m.layers, m.vocab, {m.hidden, m.heads, m.kv_heads, m.D, m.I, 1, true, false}, {}, 0};
  const LayerBytes l = layer_bytes(m);
  const HeadBytes h = head_bytes(m);
  const int64_t weights = m.layers * m.hidden * (2 * m.q() + 2 * m.kv() + 3 * m.I) + m.vocab * m.hidden;
  for (int64_t context : {128, 512, 1024}) {
    const DecoderPlan p = plan_decoder(in, {DType::I8, context, 8});
    EXPECT_EQ(p.weight_bytes, weights);
    const int64_t kv_read = m.layers * 2 * context * m.kv() * 2, kv_write = m.layers * 2 * m.kv() * 2;
    EXPECT_EQ(p.kv_read_bytes, kv_read) << context;
    EXPECT_EQ(p.cost.run.ddr_bytes, m.layers * (l.stream + l.writes) + kv_read + kv_write + h.stream + h.writes)
        << context;
    EXPECT_LT(double(p.cost.run.ddr_bytes - kv_read - kv_write), 1.025 * double(weights)) << context;
  }
  const int64_t all_scales = m.layers * l.scales + h.scales;
  EXPECT_EQ(all_scales, 4 * (m.layers * (m.q() + 2 * m.kv() + 2 * m.hidden + 2 * m.I) + m.vocab + h.pad_rows) + h.scale_pad);
  EXPECT_LT(double(all_scales), 0.004 * double(weights));
}

// The packer (sim_exec_pack.cpp: npu-sim's layout, which the device runtime uploads too) writes a
// core's slice as the rows, then their scales back to back, then zeros to a whole 32-byte block:
// 13 rows a core (vocab 416 over 32 cores) give 52 bytes of scales and 12 of padding.
TEST(Int8StreamBytes, PackerWritesTheScalesDenselyAfterTheRows) {
  const int64_t vocab = 416, hidden = 64, R = 13;
  const Design d = lm_head_design(DType::I8, vocab, hidden);
  std::vector<float> gamma(hidden, 1.0f), head(size_t(vocab * hidden));
  for (size_t i = 0; i < head.size(); ++i) head[i] = float(int64_t(i * 7919 % 201) - 100) / float(1 + i % 13);
  const std::vector<aie::bf16> x = to_bf16(std::vector<float>(hidden, 0.5f));
  const HostArgs a = pack_lm_head(d, gamma, head, x);
  int weights = -1;
  for (size_t i = 0; i < d.args.size(); ++i)
    if (d.args[i].name == "weights") weights = int(i);
  ASSERT_GE(weights, 0);
  const std::vector<uint8_t>& w = a.at(size_t(weights));
  // Each core streams gamma + rows + scales in one 2 KiB object: [object][core] per column.
  const int64_t bytes = 2 * hidden + slice(R, hidden);
  ASSERT_EQ(bytes, 128 + 13 * 64 + 64);
  EXPECT_EQ(int64_t(w.size()), kP * cdiv(bytes, kObj) * kObj);
  std::vector<int8_t> q(size_t(vocab * hidden));
  std::vector<float> want(static_cast<size_t>(vocab));
  quantize_int8(head.data(), vocab, hidden, hidden, q.data(), want.data());
  for (int64_t core : {0, 1, 5, 31}) {  // column core / 4, row core % 4: at (column * 4 + row) * 2 KiB
    const uint8_t* stream = w.data() + core * kObj;
    for (int64_t r = 0; r < R; ++r) {
      float got;
      std::memcpy(&got, stream + 2 * hidden + R * hidden + 4 * r, 4);
      EXPECT_EQ(got, want[size_t(core * R + r)]) << "core " << core << " row " << r;
      EXPECT_EQ(std::memcmp(stream + 2 * hidden + r * hidden, q.data() + (core * R + r) * hidden, size_t(hidden)), 0);
    }
    for (int64_t b = 2 * hidden + R * hidden + 4 * R; b < 2 * hidden + slice(R, hidden); ++b)
      EXPECT_EQ(stream[b], 0) << "core " << core << " pad byte " << b;
  }
}

// decode_layer int8: the packer puts the o, gate, up and down slices' scales at the end of the
// weights part (after the QK-norm gammas) and only their rows in weights_rest; the scales are
// those of quantize_int8 on the core's rows.
TEST(Int8StreamBytes, DecodeLayerPackerCarriesTheLaterScalesInTheWeightsPart) {
  const DecodeLayerShape s{256, 4, 2, 64, 512, 8, true, false};
  const Design d = decode_layer_design(DType::I8, s, 1);  // 4 cores: 64 hidden rows, 128 intermediate rows a core
  test::FusedRng r(7);
  const SimLayerWeights lw = test::layer_weights(r, s);
  const SimKvCache kv = test::kv_cache(r, s, 7, 8);
  const HostArgs a = pack_decode_layer(d, lw, r.bf16s(s.hidden), test::rope(s.head_dim, 7), kv);
  const auto arg = [&](const char* name) -> const std::vector<uint8_t>& {
    for (size_t i = 0; i < d.args.size(); ++i)
      if (d.args[i].name == name) return a.at(i);
    throw std::logic_error(name);
  };
  const int64_t P = 4, Rqkv = (256 + 2 * 128) / P, Rh = 256 / P, Ri = 512 / P;
  const int64_t attn = 2 * 256 + slice(Rqkv, 256) + 4 * 64, later = 2 * scales(Rh) + 2 * scales(Ri);
  const int64_t rest = Rh * 256 + 2 * 256 + 2 * Ri * 256 + Rh * 512;
  // One column: [object][core][2 KiB]; a core's stream is its 2 KiB pieces in object order.
  const auto stream = [&](const std::vector<uint8_t>& arg_bytes, int64_t core) {
    std::vector<uint8_t> out;
    for (size_t o = 0; o < arg_bytes.size() / size_t(P * kObj); ++o) {
      const uint8_t* at = arg_bytes.data() + (o * size_t(P) + size_t(core)) * size_t(kObj);
      out.insert(out.end(), at, at + kObj);
    }
    return out;
  };
  EXPECT_EQ(int64_t(arg("weights").size()), P * rup(attn + later, kObj));
  EXPECT_EQ(int64_t(arg("weights_rest").size()), P * rup(rest, kObj));  // rows only: no scales
  std::vector<int8_t> q(size_t(s.intermediate * s.hidden));
  std::vector<float> gate_scales(size_t(s.intermediate)), down_scales(size_t(s.hidden));
  quantize_int8(lw.gate.data(), s.intermediate, s.hidden, s.hidden, q.data(), gate_scales.data());
  std::vector<int8_t> qd(size_t(s.hidden * s.intermediate));
  quantize_int8(lw.down.data(), s.hidden, s.intermediate, s.intermediate, qd.data(), down_scales.data());
  for (int64_t core : {0, 3}) {
    const std::vector<uint8_t> w = stream(arg("weights"), core), wr = stream(arg("weights_rest"), core);
    const auto scale_at = [&](int64_t byte) {
      float f;
      std::memcpy(&f, w.data() + byte, 4);
      return f;
    };
    for (int64_t i = 0; i < Ri; ++i)  // after the o scales
      EXPECT_EQ(scale_at(attn + scales(Rh) + 4 * i), gate_scales[size_t(core * Ri + i)]) << core << " gate " << i;
    for (int64_t i = 0; i < Rh; ++i)  // the last block of scales
      EXPECT_EQ(scale_at(attn + scales(Rh) + 2 * scales(Ri) + 4 * i), down_scales[size_t(core * Rh + i)]) << core;
    // weights_rest: o rows, ffn gamma, gate rows (the first is the core's first gate row).
    EXPECT_EQ(std::memcmp(wr.data() + Rh * 256 + 2 * 256, q.data() + core * Ri * s.hidden, size_t(s.hidden)), 0) << core;
    // down rows end the part: the core's last down row is its last bytes.
    EXPECT_EQ(std::memcmp(wr.data() + rest - s.intermediate, qd.data() + (core * Rh + Rh - 1) * s.intermediate,
                          size_t(s.intermediate)), 0) << core;
  }
}

// The scales decode_layer int8 sends ahead are held in L1 until their rows: every core declares
// them (the validator counts them against its 64 KiB); bf16 layers have none.
TEST(Int8StreamBytes, DecodeLayerHoldsTheLaterScalesInL1) {
  const Qwen3 m;
  const DecodeLayerShape s{m.hidden, m.heads, m.kv_heads, m.D, m.I, 1024, true, false};
  const auto rest_scales = [](const Design& d) {
    int64_t cores = 0, bytes = -1;
    for (const TileUse& t : d.tiles)
      for (const npu::Buffer& b : t.buffers)
        if (b.name == "rest_scales") ++cores, bytes = b.bytes;
    return std::pair{cores, bytes};
  };
  EXPECT_EQ(rest_scales(decode_layer_design(DType::I8, s)), (std::pair<int64_t, int64_t>{kP, 2 * 128 + 2 * 384}));
  EXPECT_EQ(rest_scales(decode_layer_design(DType::BF16, s)).first, 0);
}
