// Designs as data: the validator accepts a small valid design and rejects, naming the resource,
// each kind of over-use; JSON round trips; the families produce valid designs for model shapes.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "npu/design.h"
#include "npu/design_families.h"

using namespace xdna;
using namespace xdna::npu;

namespace {

// One column: shim -> memtile -> one core and back, 1 KiB objects, 4 per invocation.
Design small_design() {
  Design d;
  d.name = "small";
  d.family = "test";
  d.tiles = {{{0, 0}, {}, false, {}}, {{0, 1}, {}, false, {}}, {{0, 2}, {{"acc", 4096, DType::F32}}, true,
              {"copy", DType::BF16, {{"n", 512}}, 0, 0, 2048}}};
  d.fifos = {{"in_l3l2", {{0, 0}, 0}, {{{0, 1}, 0}}, 2, 1024, 4},
             {"in", {{0, 1}, 0}, {{{0, 2}, 0}}, 2, 1024, 4},
             {"out", {{0, 2}, 0}, {{{0, 0}, 0}}, 2, 1024, 4}};
  d.links = {{{"in_l3l2"}, {"in"}, {}}};
  d.args = {{"x", 4096}, {"y", 4096}};
  d.sequence = {{SeqOp::Fill, "in_l3l2", 0, {4, 0, {{256, 1}, {4, 256}}, 1}},
                {SeqOp::Drain, "out", 1, {4, 0, {{256, 1}, {4, 256}}, 1}},
                {SeqOp::Wait, "out", 0, {}},
                {SeqOp::Wait, "in_l3l2", 0, {}}};
  return d;
}

// Expect validate_design to throw with every fragment in the message.
void expect_reject(const Design& d, std::initializer_list<const char*> fragments) {
  try {
    validate_design(d);
    FAIL() << "design was accepted; expected an error containing " << *fragments.begin();
  } catch (const std::invalid_argument& e) {
    for (const char* f : fragments) EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(Design, SmallDesignIsValid) {
  const Design d = small_design();
  EXPECT_NO_THROW(validate_design(d));
  // L1 of the core: acc 4096 + in ring 2 x 1024 + out ring 2 x 1024.
  EXPECT_EQ(tile_memory_bytes(d, {0, 2}), 4096 + 2048 + 2048);
  // The memtile link holds one shared ring.
  EXPECT_EQ(tile_memory_bytes(d, {0, 1}), 2048);
}

TEST(Design, RejectsL1Overflow) {
  Design d = small_design();
  d.tiles[2].buffers.push_back({"big", 60 * 1024, DType::F32});
  expect_reject(d, {"compute tile (0,2)", "L1", "65536"});
}

TEST(Design, RejectsL2Overflow) {
  Design d = small_design();
  d.fifos[0].elem_bytes = d.fifos[0].elem_bytes = 300 * 1024;  // ring of 2 x 300 KiB at the memtile
  expect_reject(d, {"memtile tile (0,1)", "L2", "524288"});
}

TEST(Design, RejectsMissingAndDoubleUsedChannels) {
  Design d = small_design();
  d.fifos[1].consumers[0].channel = 2;  // a compute tile has S2MM 0 and 1
  expect_reject(d, {"S2MM channel 2", "(0,2)", "does not exist"});
  d = small_design();
  d.fifos.push_back({"extra", {{0, 1}, 0}, {{{0, 2}, 1}}, 1, 64, 1});  // memtile MM2S 0 is taken
  expect_reject(d, {"MM2S channel 0", "(0,1)", "already used by FIFO 'in'"});
}

TEST(Design, RejectsBdAndLockOveruse) {
  Design d = small_design();
  d.fifos[1].depth = 15;  // 15 + 2 BDs on the core > 16 (and 15 KiB fits L1)
  expect_reject(d, {"compute tile (0,2)", "17 BDs", "limit 16"});
  d = small_design();
  d.fifos[0].depth = 25;  // memtile even-channel pool: 25 + 2 > 24
  d.fifos[0].elem_bytes = 64;
  d.fifos[0].objects = 64;
  expect_reject(d, {"memtile (0,1)", "even-channel BD pool", "limit 24"});
}

TEST(Design, RejectsLockOveruse) {
  // DMA FIFO ends cannot exhaust a tile's locks (4 channels x 2 locks on a core); shared-memory
  // FIFOs can: 9 of them between (0,2) and (0,3) need 18 locks on each core.
  Design d = small_design();
  d.tiles.push_back({{0, 3}, {}, false, {}});
  for (int i = 0; i < 9; ++i) {
    std::string name = "s";  // appended, not "s" + to_string(i): GCC 12 -Wrestrict false positive
    name += std::to_string(i);
    d.fifos.push_back({name, {{0, 2}, kSharedMemory}, {{{0, 3}, kSharedMemory}}, 1, 64, 1});
  }
  expect_reject(d, {"tile (0,2)", "locks, limit 16"});
  d.fifos.resize(d.fifos.size() - 3);  // 6 shared + 2 DMA ends on (0,2): 16 locks, accepted
  EXPECT_NO_THROW(validate_design(d));
  d.fifos.back().consumers[0].tile = {0, 4};  // not adjacent
  expect_reject(d, {"FIFO 's5'", "adjacent"});
}

TEST(Design, RejectsAccessPatternLimits) {
  Design d = small_design();
  d.sequence[0].pattern = {4, 0, {{1024, 1}}, 1};  // size[0] 1024 words > 1023
  d.args[0].bytes = 8192;
  expect_reject(d, {"step 0", "size[0] = 1024 words", "1023"});
  d = small_design();
  d.sequence[0].pattern = {4, 0, {{1, 1}, {1024, 1}, {1, 1}}, 1};
  expect_reject(d, {"size[1] = 1024", "1023"});
  d = small_design();
  d.sequence[0].pattern = {4, 0, {{4, 1}, {1, 1}}, 65};  // repeat 65 > 64
  expect_reject(d, {"repeat 65", "1..64"});
  d = small_design();
  d.sequence[0].pattern = {4, 0, {{256, 1}, {2, (1 << 20) + 1}, {2, 1}}, 1};
  d.args[0].bytes = int64_t(1) << 30;
  expect_reject(d, {"stride[1] = 1048577 words", "2^20"});
  d = small_design();
  d.sequence[0].pattern = {2, 1, {{512, 1}, {4, 512}}, 1};  // 2-byte offset
  expect_reject(d, {"offset of 2 bytes", "4-byte aligned"});
  d = small_design();
  d.sequence[0].pattern = {1, 0, {{1022, 1}, {4, 1024}}, 1};  // innermost 1022 bytes
  expect_reject(d, {"innermost run of 1022 bytes"});
  d = small_design();
  d.sequence[0].pattern = {4, 512, {{256, 1}, {4, 256}}, 1};  // runs past the 4 KiB argument
  expect_reject(d, {"host argument 'x'", "4096 bytes"});
}

TEST(Design, RejectsSequenceErrors) {
  Design d = small_design();
  d.sequence.pop_back();
  d.sequence.erase(d.sequence.begin() + 2);  // the drain is never awaited
  expect_reject(d, {"never awaited"});
  d = small_design();
  d.sequence[0].pattern.dims[1].size = 3;  // moves 3 KiB, the FIFO carries 4 x 1 KiB
  expect_reject(d, {"FIFO 'in_l3l2'", "moves 3072 bytes"});
  d = small_design();
  d.fifos[0].objects = 20;
  d.sequence.clear();
  for (int i = 0; i < 5; ++i)  // 5 outstanding fills on one shim channel: task queue is 4
    d.sequence.push_back({SeqOp::Fill, "in_l3l2", 0, {4, 0, {{256, 1}, {4, 256}}, 1}});
  expect_reject(d, {"step 4", "more than 4 transfers outstanding", "shim (0,0) MM2S channel 0"});
  d = small_design();
  d.tiles[0].at = {9, 0};
  expect_reject(d, {"(9,0)", "outside"});
  d = small_design();
  d.tiles[1].has_kernel = true;
  d.tiles[1].kernel.name = "k";
  expect_reject(d, {"tile (0,1) is a memtile", "cannot run kernel 'k'"});
}

TEST(Design, JsonRoundTrip) {
  for (const Design& d : {small_design(), gemv_design(DType::BFP16, 1024, 3072, 8),
                          gemm_design(DType::I8, 256, 1024, 3072)}) {
    const nlohmann::json j = design_to_json(d);
    const Design back = design_from_json(j);
    EXPECT_EQ(design_to_json(back), j) << d.name;
    EXPECT_NO_THROW(validate_design(back)) << d.name;
  }
  const auto path = std::filesystem::temp_directory_path() / "xdna_test_design.json";
  save_design(small_design(), path.string());
  EXPECT_EQ(design_to_json(load_design(path.string())), design_to_json(small_design()));
  std::filesystem::remove(path);
}

TEST(Design, JsonErrorsNameTheField) {
  nlohmann::json j = design_to_json(small_design());
  j["fifos"][1].erase("depth");
  EXPECT_THROW(
      {
        try {
          design_from_json(j);
        } catch (const std::invalid_argument& e) {
          EXPECT_NE(std::string(e.what()).find("fifos[1]"), std::string::npos) << e.what();
          throw;
        }
      },
      std::invalid_argument);
  j = design_to_json(small_design());
  j["sequence"][0]["op"] = "copy";
  EXPECT_THROW(design_from_json(j), std::invalid_argument);
  j = design_to_json(small_design());
  j["tiles"][2]["buffers"][0]["dtype"] = "f99";
  EXPECT_THROW(design_from_json(j), std::invalid_argument);
  EXPECT_THROW(load_design("/nonexistent/design.json"), std::runtime_error);
}

// Families at the shapes of the models the fronts run (Qwen3-0.6B, MiniLM) all validate.
TEST(DesignFamilies, ModelShapesValidate) {
  std::vector<Design> ds;
  for (DType t : {DType::BF16, DType::BFP16, DType::I8}) {
    // Qwen3-0.6B decode: q 2048x1024, k/v 1024x1024, o 1024x2048, gate/up 3072x1024,
    // down 1024x3072; MiniLM: 384x384, 1536x384, 384x1536.
    for (auto [n, k] : {std::pair<int64_t, int64_t>{2048, 1024}, {1024, 1024}, {1024, 2048}, {3072, 1024},
                        {1024, 3072}, {384, 384}, {1536, 384}, {384, 1536}, {151936, 1024}})
      ds.push_back(gemv_design(t, n, k));
    // Prefill / encoder GEMMs: 128 or 512 tokens.
    for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{128, 1024, 3072}, {512, 3072, 1024},
                           {128, 384, 1536}, {512, 1536, 384}, {512, 1024, 2048}})
      ds.push_back(gemm_design(t, m, k, n));
  }
  ds.push_back(gemm_design(DType::BFP16, 64, 64, 64, 1, 1));
  for (int64_t rows : {1, 128, 512}) {
    ds.push_back(norm_design(NormKind::RMS, rows, 1024));
    ds.push_back(norm_design(NormKind::RMS, rows, 128, 2));  // Qwen3 QK-norm per head
    ds.push_back(norm_design(NormKind::Layer, rows, 384));
    ds.push_back(softmax_design(rows * 16, 512));
  }
  for (const char* op : {"add", "mul", "silu", "gelu", "exp", "scale"}) {
    ds.push_back(elementwise_design(op, 3072));
    ds.push_back(elementwise_design(op, 512 * 1536));
  }
  for (const Design& d : ds) EXPECT_NO_THROW(validate_design(d)) << d.name;
}

TEST(DesignFamilies, TilesFillL1AndReuseTheBPanel) {
  const Design i8 = gemm_design(DType::I8, 2048, 2048, 2048);
  EXPECT_EQ(i8.params.at("m"), 88);
  EXPECT_EQ(i8.params.at("b_panel_in_memtile"), 1);
  EXPECT_LE(tile_memory_bytes(i8, {3, 4}), kAie2p.l1_bytes);
  EXPECT_GT(tile_memory_bytes(i8, {3, 4}), kAie2p.l1_bytes * 8 / 10);
  const Design bf16 = gemm_design(DType::BF16, 2048, 2048, 2048);
  EXPECT_EQ(bf16.params.at("m"), 64);
  EXPECT_EQ(bf16.params.at("M_pad"), 2048);
  const Design big_k = gemm_design(DType::BF16, 512, 8192, 512);  // panel 8192 x 64 x 2 = 1 MiB
  EXPECT_EQ(big_k.params.at("b_panel_in_memtile"), 0);
  EXPECT_NO_THROW(validate_design(big_k));
  const Design g = gemv_design(DType::BF16, 3072, 1024);
  EXPECT_EQ(g.params.at("N_pad"), 3072);
  EXPECT_LE(tile_memory_bytes(g, {7, 5}), kAie2p.l1_bytes);
}

TEST(DesignFamilies, BadParametersAreRefused) {
  EXPECT_THROW(gemv_design(DType::F32, 64, 64), std::invalid_argument);
  EXPECT_THROW(gemv_design(DType::BF16, 64, 60), std::invalid_argument);
  EXPECT_THROW(gemv_design(DType::BF16, 64, 64, 9), std::invalid_argument);
  EXPECT_THROW(gemm_design(DType::BF16, 64, 100, 64), std::invalid_argument);
  EXPECT_THROW(gemm_design(DType::BF16, 64, 64, 64, 2, 4), std::invalid_argument);
  EXPECT_THROW(gemv_design(DType::BF16, 64, 64 * 1024), std::invalid_argument);  // row > L1/4
  EXPECT_THROW(elementwise_design("tanh", 64), std::invalid_argument);
  EXPECT_THROW(norm_design(NormKind::RMS, 4, 100), std::invalid_argument);
  EXPECT_THROW(softmax_design(4, 0), std::invalid_argument);
  EXPECT_THROW(contiguous_pattern(0, 6), std::invalid_argument);
}

// The example files in designs/ are what the generators produce (regenerate with save_design
// when a family changes) and they validate.
TEST(DesignFamilies, CommittedExamplesMatchGenerators) {
  const std::string dir = std::string(XDNA_FIXTURE_DIR) + "/../../designs/";
  const std::pair<const char*, Design> cases[] = {
      {"gemv_bf16_1024x1024_c2.json", gemv_design(DType::BF16, 1024, 1024, 2)},
      {"rmsnorm_1x1024_c1.json", norm_design(NormKind::RMS, 1, 1024, 1)}};
  for (const auto& [file, want] : cases) {
    const Design d = load_design(dir + file);
    EXPECT_NO_THROW(validate_design(d)) << file;
    EXPECT_EQ(design_to_json(d), design_to_json(want)) << file;
  }
}
