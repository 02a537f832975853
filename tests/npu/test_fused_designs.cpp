// Fused decode designs (MLP block, QKV + RoPE, decode attention, whole layer) and the LM head:
// realistic shapes validate, oversized ones are refused naming the resource, and the
// cost model prices a fused layer below the same work as separate dispatches.
#include <gtest/gtest.h>

#include <functional>
#include <vector>

#include "npu/cost_model.h"
#include "npu/design_families.h"

using namespace xdna;
using namespace xdna::npu;

namespace {

// Qwen3-0.6B and Gemma 3 270M decoder layers (their config.json), 1024 positions of context.
DecodeLayerShape qwen3_06b() { return {1024, 16, 8, 128, 3072, 1024, true, false}; }
DecodeLayerShape gemma3_270m() { return {640, 4, 1, 256, 2048, 1024, true, true}; }

void expect_refused(const std::function<Design()>& make, std::initializer_list<const char*> fragments) {
  try {
    make();
    FAIL() << "design was accepted";
  } catch (const std::invalid_argument& e) {
    for (const char* f : fragments) EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what();
  }
}

double run_s(const std::vector<const Design*>& designs, bool one_dispatch) {
  std::vector<Invocation> inv;
  for (const Design* d : designs) inv.push_back({d, "x", !one_dispatch || inv.empty()});
  return model_run(inv).total_s;
}

// The same layer as separate dispatches of the unfused families (RoPE omitted: it has no
// unfused family, which only flatters the unfused side).
struct Unfused {
  std::vector<Design> designs;
  std::vector<const Design*> ptrs() const {
    std::vector<const Design*> p;
    for (const Design& d : designs) p.push_back(&d);
    return p;
  }
};
Unfused unfused_mlp(DType t, const DecodeLayerShape& s) {
  return {{gemv_design(t, s.intermediate, s.hidden), gemv_design(t, s.intermediate, s.hidden),
           elementwise_design(s.gelu ? "gelu" : "silu", s.intermediate),
           elementwise_design("mul", s.intermediate), gemv_design(t, s.hidden, s.intermediate)}};
}
Unfused unfused_layer(DType t, const DecodeLayerShape& s) {
  const int64_t q = s.heads * s.head_dim, kv = s.kv_heads * s.head_dim;
  Unfused u{{norm_design(NormKind::RMS, 1, s.hidden), gemv_design(t, q, s.hidden),
             gemv_design(t, kv, s.hidden), gemv_design(t, kv, s.hidden),
             norm_design(NormKind::RMS, s.heads + s.kv_heads, s.head_dim),
             attention_decode_design(s), gemv_design(t, s.hidden, q),
             elementwise_design("add", s.hidden), norm_design(NormKind::RMS, 1, s.hidden)}};
  for (Design& d : unfused_mlp(t, s).designs) u.designs.push_back(std::move(d));
  u.designs.push_back(elementwise_design("add", s.hidden));
  return u;
}

}  // namespace

TEST(FusedDesigns, ModelShapesValidate) {
  for (const DecodeLayerShape& s : {qwen3_06b(), gemma3_270m()}) {
    for (DType t : {DType::BF16, DType::BFP16, DType::I8}) {
      const Design layer = decode_layer_design(t, s);
      EXPECT_EQ(layer.family, "decode_layer");
      EXPECT_NO_THROW(validate_design(layer));
      EXPECT_NO_THROW(mlp_fused_design(t, s));
      EXPECT_NO_THROW(qkv_rope_design(t, s));
    }
    EXPECT_NO_THROW(attention_decode_design(s));
    // A long context only lengthens the KV fills: the array configuration is the same.
    DecodeLayerShape longer = s;
    longer.context = 32768;
    EXPECT_EQ(decode_layer_design(DType::I8, longer).name, decode_layer_design(DType::I8, s).name);
  }
  EXPECT_NO_THROW(lm_head_design(DType::I8, 151936, 1024));
  EXPECT_NO_THROW(lm_head_design(DType::BF16, 262144, 640));
}

// The LM head spreads a core's rows evenly over the fewest logits objects of at most 256 rows:
// Qwen3-0.6B's 4748 rows a core in 19 objects of 250 (2 padding rows a core; 256-row objects
// padded to 4864), Gemma 3 270M's 8192 in 32 of 256 (none), a small vocabulary in one object.
TEST(FusedDesigns, LmHeadObjectsFitTheVocabulary) {
  for (const auto& [vocab, hidden, chunk, pad] : {std::tuple<int64_t, int64_t, int64_t, int64_t>{151936, 1024, 250, 4750 * 32},
                                                 {262144, 640, 256, 262144}, {300, 64, 10, 320}}) {
    const Design d = lm_head_design(DType::I8, vocab, hidden);
    EXPECT_EQ(d.params.at("chunk_rows"), chunk) << d.name;
    EXPECT_EQ(d.params.at("vocab_pad"), pad) << d.name;
    EXPECT_LT(pad - vocab, 32 * ((vocab + 32 * 256 - 1) / (32 * 256))) << d.name;  // fewer than the objects, a core
  }
}

TEST(FusedDesigns, FusedLayerStreamsEachWeightOnce) {
  const DecodeLayerShape s = qwen3_06b();
  const Design d = decode_layer_design(DType::I8, s);
  const DesignCost c = model_design(d);
  const int64_t q = s.heads * s.head_dim, kv = s.kv_heads * s.head_dim;
  const int64_t weights = s.hidden * (q + 2 * kv) + q * s.hidden + 3 * s.hidden * s.intermediate;
  const int64_t kv_cache = 2 * s.context * kv * 2;
  // DDR bytes = weights + KV cache + small vectors (padding to 4 KiB objects): within 5%.
  EXPECT_GE(c.ddr_bytes, weights + kv_cache);
  EXPECT_LE(double(c.ddr_bytes), 1.05 * double(weights + kv_cache));
  EXPECT_EQ(c.bottleneck, "ddr");  // bytes streamed from DDR dominate
}

TEST(FusedDesigns, OversizedShapesAreRefusedNamingTheResource) {
  // Llama-70B-like layer: the resident residual stream and exchange ring no longer fit L1.
  const DecodeLayerShape big{8192, 64, 8, 128, 28672, 1024, false, false};
  expect_refused([&] { return decode_layer_design(DType::I8, big); }, {"compute tile", "L1", "65536"});
  expect_refused([&] { return mlp_fused_design(DType::I8, big); }, {"compute tile", "L1"});
  // Parameters that cannot be met are refused by name.
  DecodeLayerShape bad = qwen3_06b();
  bad.kv_heads = 3;
  expect_refused([&] { return decode_layer_design(DType::I8, bad); }, {"kv_heads"});
  expect_refused([&] { return mlp_fused_design(DType::F32, qwen3_06b()); }, {"dtype"});
}

TEST(FusedDesigns, FusedIsCheaperThanUnfusedDispatches) {
  for (const DecodeLayerShape& s : {qwen3_06b(), gemma3_270m()}) {
    for (DType t : {DType::BF16, DType::I8}) {
      const Design layer = decode_layer_design(t, s);
      const Unfused u = unfused_layer(t, s);
      const double fused = run_s({&layer}, true);
      const double separate = run_s(u.ptrs(), false);
      const double one_dispatch = run_s(u.ptrs(), true);  // same, but configures instead
      EXPECT_LT(fused, one_dispatch) << layer.name;
      EXPECT_LT(one_dispatch, separate) << layer.name;
      // Fewer DDR round trips: the fused layer reads no more DDR bytes than the pieces.
      int64_t bytes = 0;
      for (const Design& d : u.designs) bytes += model_design(d).ddr_bytes;
      EXPECT_LT(model_design(layer).ddr_bytes, bytes) << layer.name;

      const Design mlp = mlp_fused_design(t, s);
      const Unfused um = unfused_mlp(t, s);
      EXPECT_LT(run_s({&mlp}, true), run_s(um.ptrs(), true)) << mlp.name;
    }
  }
}

// decode_layer reads its KV cache in place (DecodeLayerShape::capacity): per column one fill per
// K / V of the column's KV head, the 4 cores one stride (their position blocks) apart; the new row
// drains into the same cache, through the kv_row argument (the cache from the new row's slot on),
// per K / V with all heads in one pattern while the head stride fits the shim BD, one drain per
// head and per K / V beyond (Qwen3-0.6B's 40960 positions: 10 MiB per head); no kv_new argument.
// The patterns are relative to the two views' starts: no pattern holds the position.
TEST(ResidentKvDesign, FillsAndDrainsTheResidentCache) {
  for (const int64_t capacity : {int64_t(1024), int64_t(40960)}) {
    DecodeLayerShape s = qwen3_06b();
    s.context = 700, s.capacity = capacity;  // position 699
    const Design d = decode_layer_design(DType::I8, s);
    int kv = -1, kv_row = -1;
    for (size_t i = 0; i < d.args.size(); ++i) {
      EXPECT_NE(d.args[i].name, "kv_new");
      if (d.args[i].name == "kv") kv = int(i);
      if (d.args[i].name == "kv_row") kv_row = int(i);
    }
    ASSERT_GE(kv, 0);
    ASSERT_GE(kv_row, 0);
    const int64_t rows = kv_cache_rows(s), row_words = 128 * 2 / 4;
    EXPECT_EQ(d.params.at("kv_rows"), rows);
    EXPECT_EQ(kv_cache_bytes(d), 2 * 8 * rows * 128 * 2);
    EXPECT_EQ(d.args[size_t(kv)].bytes, 2 * 8 * rows * 128 * 2);  // full attention: from row 0
    EXPECT_EQ(kv_window_offset(d), 0);
    EXPECT_EQ(kv_row_offset(d), 699 * 128 * 2);
    EXPECT_EQ(d.args[size_t(kv_row)].bytes, 2 * 8 * rows * 128 * 2 - 699 * 128 * 2);
    int fills = 0, drains = 0;
    int64_t written = 0;
    for (const SeqStep& st : d.sequence) {
      if (st.op == SeqOp::Wait) continue;
      EXPECT_EQ(st.arg == kv_row, st.op == SeqOp::Drain && st.fifo == "kv_new") << st.fifo;
      if (st.arg != kv && st.arg != kv_row) continue;
      if (st.op == SeqOp::Fill) {
        // Column c holds KV head c (32 cores / 8 heads): K at row 0, V at row 8 x rows; the 4
        // cores' blocks of ceil(700 / 4) = 175 positions, each padded to 176 (whole 2 KiB objects).
        const int64_t col = std::stoi(st.fifo.substr(5)), which = fills % 2;
        EXPECT_EQ(st.pattern.offset, (which * 8 + col) * rows * row_words) << st.fifo;
        ASSERT_EQ(st.pattern.dims.size(), 3u);
        EXPECT_EQ(st.pattern.dims[1].size, 4);
        EXPECT_EQ(st.pattern.dims[1].stride, 175 * row_words);
        EXPECT_EQ(st.pattern.bytes(), 4 * 176 * 128 * 2);
        ++fills;
      } else {
        if (drains == 0) {
          EXPECT_EQ(st.pattern.offset, 0);  // K of head 0 at the slot's start
        }
        written += st.pattern.bytes();
        ++drains;
      }
    }
    EXPECT_EQ(fills, 2 * 8);
    EXPECT_EQ(drains, capacity == 1024 ? 2 : 2 * 8) << capacity;
    EXPECT_EQ(written, 2 * 8 * 128 * 2);  // one row: K and V of every head
  }
}

// The validator names the step and the limit when a resident-cache pattern's stride is past the
// shim's 2^20 words: with a KV head per core (32 KV heads on 32 cores) the column's 4 cores are
// one head (capacity x head_dim) apart; 40000 positions x 64 x 2 bytes is 1.28 M words.
TEST(ResidentKvDesign, StrideBeyondTheShimLimitIsRefusedNamingTheStep) {
  DecodeLayerShape s{512, 32, 32, 64, 512, 100, true, false};
  s.capacity = 4000;
  EXPECT_NO_THROW(decode_layer_design(DType::I8, s));  // 4000 x 32 words per head: fits
  s.capacity = 40000;
  expect_refused([&] { return decode_layer_design(DType::I8, s); },
                 {"sequence step", "(fill 'ddr_c0_l3l2')", "stride[1] = ", "exceeds the DMA limit 2^20"});
  // The same design with the stride set by hand past the limit, and one within it.
  s.capacity = 4000;
  Design d = decode_layer_design(DType::I8, s);
  for (SeqStep& st : d.sequence)
    if (st.op == SeqOp::Fill && d.args[size_t(st.arg)].name == "kv") {
      st.pattern.dims[1].stride = (int64_t(1) << 20) + 64;
      break;
    }
  expect_refused([&] { validate_design(d); return d; }, {"(fill 'ddr_c0_l3l2')", "stride[1] = 1048640 words"});
}

TEST(ResidentKvDesign, CapacityBelowTheContextIsRefused) {
  DecodeLayerShape s = qwen3_06b();
  s.capacity = 10;
  expect_refused([&] { return decode_layer_design(DType::I8, s); }, {"decode_layer", "KV capacity 10", "context 1024"});
}
