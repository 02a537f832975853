// The stage kernels of the fused designs (aie_kernels/{qkv_rope,attention_decode,lm_head,
// decode_layer}_bf16.cc), run through each design's core programs by the shared interpreter
// (src/npu/sim_program.h), which is how npu-sim executes them (sim_exec.h run_design). npu-sim
// once had its own stage code, and the two were compared byte for byte; the drained outputs are
// pinned here as digests of what that code gave for these inputs, so a change to a kernel's
// numerics or a program's order shows (the independent references that remain:
// test_sim_fused*.cpp, the op-by-op route and the f64 host reference). Shapes are small and
// chosen so rows straddle 2 KiB objects, K/V blocks straddle objects, the attention partials
// take several exchange rounds and (decode_layer) weights of a later stage arrive with an
// earlier stage's last object.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <ios>
#include <set>
#include <thread>
#include <random>
#include <vector>

#include "core/numeric.h"
#include "npu/design_families.h"
#include "npu/sim_exec.h"
#include "npu/sim_program.h"
#include "aie_kernels/fused_stage.h"
#include "fused_test_util.h"

using namespace xdna;
using namespace xdna::npu;

namespace {

struct Rng : test::FusedRng {
  Rng() : FusedRng(11) {}
};
using test::layer_weights;
using test::rope;

SimKvCache kv_cache(Rng& r, const DecodeLayerShape& s, int64_t length) {
  return test::kv_cache(r, s, length, length + 1);
}

// FNV-1a over the bytes of every argument the design drains into, in argument order.
// FNV-1a over the bytes every drain step wrote, in sequence order (a drain into a resident
// buffer, decode_layer's new K/V row, counts only the row).
uint64_t drained_digest(const Design& d, const HostArgs& a) {
  uint64_t h = 1469598103934665603ull;
  for (const SeqStep& s : d.sequence)
    if (s.op == SeqOp::Drain)
      sim::walk(s.pattern, [&](int64_t off) {
        for (int64_t b = 0; b < s.pattern.elem_bytes; ++b) h = (h ^ a.at(size_t(s.arg))[size_t(off + b)]) * 1099511628211ull;
      });
  return h;
}

// The kernels through the programs on `packed`: the drained bytes must be those npu-sim's former
// stage code gave (`want`); run_design must give the same (it runs these programs).
HostArgs expect_pinned_outputs(const Design& d, const HostArgs& packed, const SimKernelArgs& k, uint64_t want) {
  HostArgs prog = packed, sim = packed;
  run_design_programs(d, prog, k);
  run_design(d, sim, k);
  EXPECT_EQ(drained_digest(d, prog), want) << d.name << ": digest 0x" << std::hex << drained_digest(d, prog);
  EXPECT_TRUE(sim == prog) << d.name << ": run_design differs from the programs";
  return prog;
}

int nonzero(const std::vector<aie::bf16>& v) {
  int n = 0;
  for (aie::bf16 x : v) n += (x.bits & 0x7FFF) != 0;
  return n;
}

}  // namespace

TEST(AieStageKernels, QkvRopeProgramsGiveThePinnedOutputs) {
  Rng r;
  const uint64_t want[4] = {0x6ed7c24d10bc8d09, 0x10b6c31ae2a322bc, 0xfba805e264b1e90a, 0xd1bd6d112f0b24ce};
  size_t i = 0;
  for (bool qk_norm : {true, false}) {
    for (int columns : {1, 2}) {
      DecodeLayerShape s;
      // hidden 240: QKV rows straddle 2 KiB objects; 2 columns: 8 cores.
      s.hidden = 240, s.heads = 4, s.kv_heads = 2, s.head_dim = 32, s.intermediate = 64, s.qk_norm = qk_norm;
      const Design d = qkv_rope_design(DType::BF16, s, columns);
      const SimLayerWeights w = layer_weights(r, s);
      const std::vector<aie::bf16> x = r.bf16s(s.hidden);
      SimKernelArgs k;
      k.eps = 1e-5f, k.rms_offset = qk_norm ? 0.0f : 1.0f, k.rope_interleaved = columns == 2;
      const HostArgs a = pack_qkv_rope(d, w, x, rope(s.head_dim, 7));
      const HostArgs out = expect_pinned_outputs(d, a, k, want[i++]);
      EXPECT_GT(nonzero(arg_bf16(d, out, "result", s.heads * s.head_dim)), 100) << d.name;
      EXPECT_GT(nonzero(arg_bf16(d, out, "kv_new", 2 * s.kv_heads * s.head_dim)), 100) << d.name;
    }
  }
}

TEST(AieStageKernels, AttentionDecodeProgramsGiveThePinnedOutputs) {
  Rng r;
  const uint64_t want[3] = {0xd9e72e14d1e455d8, 0xdeb78d4903083897, 0x008b16cf8267f232};
  size_t i = 0;
  struct Case {
    int64_t heads, kv_heads, head_dim, context;
    int columns;
  };
  // group 4 x head_dim 64: partials of 544 bytes, three exchange rounds; K/V blocks of 19
  // positions straddle objects. kv_heads 8 on 4 cores: two KV heads per core. 8 cores on one
  // KV head with 5 positions: cores past the context give empty partials.
  for (const Case c : {Case{8, 2, 64, 37, 1}, Case{8, 8, 32, 21, 1}, Case{4, 1, 16, 5, 2}}) {
    DecodeLayerShape s;
    s.hidden = 64, s.heads = c.heads, s.kv_heads = c.kv_heads, s.head_dim = c.head_dim, s.intermediate = 64;
    s.context = c.context;
    const Design d = attention_decode_design(s, c.columns);
    const SimKvCache kv = kv_cache(r, s, c.context + 2);
    const std::vector<aie::bf16> q = r.bf16s(s.heads * s.head_dim);
    SimKernelArgs k;
    if (c.kv_heads == 8) k.attn_scale = 0.3f;
    const HostArgs a = pack_attention_decode(d, q, kv);
    const HostArgs out = expect_pinned_outputs(d, a, k, want[i++]);
    EXPECT_GT(nonzero(arg_bf16(d, out, "result", s.heads * s.head_dim)), int(s.heads * s.head_dim) / 2) << d.name;
  }
}

TEST(AieStageKernels, LmHeadProgramsGiveThePinnedOutputs) {
  Rng r;
  // The first re-pinned when a core's rows were spread evenly over its logits objects (175 rows
  // each where there were 256, 256, 13): the drain's layout changed, not a logit
  // (SimFused.LmHeadLogitsInVocabOrder checks them against gemv_bf16_f32 bit for bit).
  const uint64_t want[3] = {0x1394b365429faa6d, 0xff7b04298459af22, 0xbf9e3981968f7a7d};
  size_t i = 0;
  // vocab 2100 on 4 cores: 525 rows each, three logits objects of 175 rows; hidden 48: the
  // gamma and the first rows share an object, rows straddle objects. vocab 100, hidden 16: one
  // object of 25 rows, the padding rows after it in the same DDR object.
  for (const auto& [vocab, hidden] : {std::pair<int64_t, int64_t>{2100, 48}, {1000, 48}, {100, 16}}) {
    const Design d = lm_head_design(DType::BF16, vocab, hidden, 1);
    const std::vector<float> gamma = r.vals(hidden, 0.5f, 1.5f), head = r.vals(vocab * hidden);
    const std::vector<aie::bf16> x = r.bf16s(hidden);
    SimKernelArgs k;
    k.eps = 1e-6f;
    const HostArgs a = pack_lm_head(d, gamma, head, x);
    const HostArgs out = expect_pinned_outputs(d, a, k, want[i++]);
    const std::vector<float> logits = lm_head_logits(d, out);
    int n = 0;
    for (float v : logits) n += v != 0.0f;
    EXPECT_GT(n, int(vocab) * 9 / 10) << d.name;
  }
}

TEST(AieStageKernels, DecodeLayerProgramsGiveThePinnedOutputs) {
  Rng r;
  const uint64_t want[2] = {0x532649462d464235, 0x94dd43ce5ece3a2a};
  size_t i = 0;
  for (bool gelu : {false, true}) {
    DecodeLayerShape s;
    // hidden 240, intermediate 272: the gate rows start inside the o stage's last object and
    // the down rows inside gate_up's (the carry); partials over two exchange rounds.
    s.hidden = 240, s.heads = 4, s.kv_heads = 2, s.head_dim = 32, s.intermediate = 272, s.qk_norm = !gelu;
    s.gelu = gelu;
    SimKvCache kv = kv_cache(r, s, 8);
    s.context = kv.length + 1;
    const Design d = decode_layer_design(DType::BF16, s, 1);
    const SimLayerWeights w = layer_weights(r, s);
    const std::vector<aie::bf16> x = r.bf16s(s.hidden);
    SimKernelArgs k;
    k.eps = 1e-6f;
    const HostArgs a = pack_decode_layer(d, w, x, rope(s.head_dim, kv.length), kv);
    const HostArgs out = expect_pinned_outputs(d, a, k, want[i++]);
    EXPECT_GT(nonzero(arg_bf16(d, out, "result", s.hidden)), int(s.hidden) / 2) << d.name;
    EXPECT_GT(nonzero(kv_new_row(d, out)), 100) << d.name;
  }
}

TEST(AieStageKernels, DecodeLayerGemmaOptionsGiveThePinnedOutputs) {
  Rng r;
  const uint64_t want = 0x1b36ae20bb75d4bb;
  DecodeLayerShape s;
  // Gemma 3's layer: GeGLU, QK-norm, gamma offset 1, post-norms (a gamma after the o rows and
  // after the down rows), a sliding window shorter than the cache.
  s.hidden = 240, s.heads = 4, s.kv_heads = 1, s.head_dim = 64, s.intermediate = 272, s.qk_norm = true;
  s.gelu = true, s.post_norms = true, s.window = 6;
  SimKvCache kv = kv_cache(r, s, 11);
  s.context = kv.length + 1;
  const Design d = decode_layer_design(DType::BF16, s, 1);
  SimLayerWeights w = layer_weights(r, s);
  w.post_attn_norm = r.vals(s.hidden, -0.5f, 0.5f), w.post_ffn_norm = r.vals(s.hidden, -0.5f, 0.5f);
  const std::vector<aie::bf16> x = r.bf16s(s.hidden);
  SimKernelArgs k;
  k.rms_offset = 1.0f;
  const HostArgs a = pack_decode_layer(d, w, x, rope(s.head_dim, kv.length), kv);
  const HostArgs out = expect_pinned_outputs(d, a, k, want);
  EXPECT_GT(nonzero(arg_bf16(d, out, "result", s.hidden)), int(s.hidden) / 2) << d.name;
}

TEST(AieStageKernels, InterpreterRefusesAKernelWithoutTheProgramsEntryPoints) {
  DecodeLayerShape s;
  s.hidden = 64, s.heads = 2, s.kv_heads = 1, s.head_dim = 32, s.intermediate = 64;
  const Design d = mlp_fused_design(DType::BF16, s, 1);
  HostArgs a;
  for (const HostArg& h : d.args) a.emplace_back(size_t(h.bytes), uint8_t{0});
  EXPECT_THROW(run_core_programs(d, stage_kernel("qkv_rope_bf16"), program_streams(d, a), runtime_scalars({})),
               std::invalid_argument);
  EXPECT_THROW(stage_kernel("mlp_fused_int8"), std::invalid_argument);
  // mlp_fused's programs pass every scalar its entry points take.
  EXPECT_TRUE(scalars_beyond_program(d, stage_kernel("mlp_fused_bf16")).empty());
}

// Every fused family's programs pass all the design scalars its stage kernel takes (the IRON
// worker bodies pass the same list), "core" being each core's index in (column, row) order.
TEST(AieStageKernels, FusedDesignsCallsPassEveryScalarTheKernelTakes) {
  DecodeLayerShape s;
  s.hidden = 64, s.heads = 2, s.kv_heads = 1, s.head_dim = 32, s.intermediate = 64, s.context = 8;
  DecodeLayerShape gemma = s;
  gemma.post_norms = true, gemma.gelu = true, gemma.window = 4;
  const std::vector<Design> designs = {qkv_rope_design(DType::BF16, s, 2), attention_decode_design(s, 2),
                                       lm_head_design(DType::BF16, 1000, 64, 2), decode_layer_design(DType::BF16, s, 2),
                                       decode_layer_design(DType::BF16, gemma, 2), mlp_fused_design(DType::BF16, s, 2)};
  for (const Design& d : designs) {
    std::vector<const TileUse*> cores;
    for (const TileUse& t : d.tiles)
      if (t.has_kernel) cores.push_back(&t);
    std::sort(cores.begin(), cores.end(), [](const TileUse* a, const TileUse* b) { return a->at < b->at; });
    ASSERT_EQ(cores.size(), 8u) << d.name;
    const StageKernel& k = stage_kernel(cores[0]->kernel.name);
    EXPECT_TRUE(scalars_beyond_program(d, k).empty()) << d.name;
    const bool takes_core = std::find(k.scalars.begin(), k.scalars.end(), "core") != k.scalars.end();
    for (size_t p = 0; p < cores.size(); ++p) {
      EXPECT_EQ(cores[p]->kernel.args.count("core") ? cores[p]->kernel.args.at("core") : -1,
                takes_core ? int64_t(p) : -1)
          << d.name;
      EXPECT_EQ(cores[p]->kernel.args.at("cores"), 8) << d.name;
      for (const CoreStep& c : cores[p]->program) {
        if (c.op == CoreOp::Call) {
          EXPECT_EQ(c.args, cores[p]->kernel.args) << d.name << " " << c.name;
        }
      }
    }
  }
  // post_norms is passed either way: Qwen3 and Gemma 3 layers share one signature.
  EXPECT_EQ(designs[3].tiles.back().kernel.args.at("post_norms") + 1, designs[4].tiles.back().kernel.args.at("post_norms"));
}

namespace {

// What run_design_programs throws for `d` over zeroed host arguments ("" when it runs).
std::string refusal(const Design& d) {
  HostArgs a;
  for (const HostArg& h : d.args) a.emplace_back(size_t(h.bytes), uint8_t{0});
  try {
    run_design_programs(d, a);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(AieStageKernels, InterpreterRefusesAProgramCallWithoutAScalar) {
  DecodeLayerShape s;
  s.hidden = 64, s.heads = 2, s.kv_heads = 1, s.head_dim = 32, s.intermediate = 64, s.context = 8;
  Design d = decode_layer_design(DType::BF16, s, 1);
  for (TileUse& t : d.tiles)
    for (CoreStep& c : t.program)
      if (t.at.row == 3 && c.op == CoreOp::Call && c.name == "decode_layer_bf16_o") c.args.erase("heads");
  EXPECT_EQ(scalars_beyond_program(d, stage_kernel("decode_layer_bf16")), std::vector<std::string>{"heads"});
  const std::string why = refusal(d);
  EXPECT_NE(why.find("lack heads"), std::string::npos) << (why.empty() ? "ran a program whose call lacks 'heads'" : why);
}

TEST(AieStageKernels, InterpreterRefusesADesignPastTheKernelsL1State) {
  DecodeLayerShape s;
  s.hidden = 8192, s.heads = 2, s.kv_heads = 1, s.head_dim = 32, s.intermediate = 64;  // hidden > 4096
  const Design d = qkv_rope_design(DType::BF16, s, 1);
  const std::string why = refusal(d);
  EXPECT_NE(why.find("hidden 8192 > 4096"), std::string::npos) << (why.empty() ? "ran a design past the state's bounds" : why);
}

// The attention combine keeps every core's {max, sum} headers and one accumulator per query head
// (fused_stage.h attn_take): past kMaxHeads query heads the interpreter refuses, naming it.
TEST(AieStageKernels, InterpreterRefusesAttentionPastTheCombinesBounds) {
  DecodeLayerShape s;
  s.hidden = 64, s.heads = 128, s.kv_heads = 128, s.head_dim = 16, s.intermediate = 64, s.context = 4;
  const std::string why = refusal(attention_decode_design(s, 8));  // 32 cores: a core's rows fit
  EXPECT_NE(why.find("attention partials past the state's bounds"), std::string::npos)
      << (why.empty() ? "ran 128 query heads" : why);
}

// Each run keeps its cores' L1 states to itself (xk::core_state): runs on several threads at
// once give what one run alone gives.
TEST(AieStageKernels, ConcurrentRunsKeepTheirOwnCoreStates) {
  Rng r;
  DecodeLayerShape s;
  s.hidden = 240, s.heads = 4, s.kv_heads = 2, s.head_dim = 32, s.intermediate = 272, s.qk_norm = true;
  SimKvCache kv = kv_cache(r, s, 8);
  s.context = kv.length + 1;
  const Design d = decode_layer_design(DType::BF16, s, 1);
  const SimLayerWeights w = layer_weights(r, s);
  std::vector<HostArgs> in;
  for (int i = 0; i < 4; ++i) in.push_back(pack_decode_layer(d, w, r.bf16s(s.hidden), rope(s.head_dim, 8), kv));
  std::vector<HostArgs> alone = in, together = in;
  for (HostArgs& a : alone) run_design(d, a, {});
  std::vector<std::thread> threads;
  for (HostArgs& a : together) threads.emplace_back([&d, &a] { run_design(d, a, {}); });
  for (std::thread& t : threads) t.join();
  for (size_t i = 0; i < in.size(); ++i) EXPECT_TRUE(alone[i] == together[i]) << i;
  EXPECT_FALSE(alone[0] == alone[1]);  // different inputs, different outputs
}

// The lm_head kernels find their logits objects' rows from (cores, vocab) as the design splits
// them: the same chunk for every vocabulary and column count.
TEST(AieStageKernels, LmHeadChunkRowsMatchTheDesign) {
  for (int columns : {1, 2, 8})
    for (int64_t vocab : {1, 31, 100, 1000, 1024, 1025, 2100, 2101, 8193, 151936, 262144}) {
      const Design d = lm_head_design(DType::I8, vocab, 64, columns);
      EXPECT_EQ(xk_fused::lm_head::chunk_rows(columns * 4, int32_t(vocab)), d.params.at("chunk_rows"))
          << d.name;
    }
}
