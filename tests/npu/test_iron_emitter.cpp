// The IRON emitter: the Python it writes parses, and carries the design's structure.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "npu/artifacts/iron_emitter.h"
#include "npu/design_families.h"

namespace xdna::npu {
namespace {

namespace fs = std::filesystem;

DecodeLayerShape small_layer() {
  DecodeLayerShape s;
  s.hidden = 1024, s.heads = 16, s.kv_heads = 8, s.head_dim = 64, s.intermediate = 3072, s.context = 256;
  return s;
}

// Writes `py` to a file and asks python3 to parse it.
bool python_parses(const std::string& py, const std::string& tag) {
  const fs::path p = fs::temp_directory_path() / ("xdna_iron_" + tag + "_" + std::to_string(::getpid()) + ".py");
  std::ofstream(p) << py;
  const std::string cmd = "python3 -c \"import ast,sys; ast.parse(open(sys.argv[1]).read())\" " + p.string();
  const int rc = std::system(cmd.c_str());
  fs::remove(p);
  return rc == 0;
}

// "[a, b, c]" after `key` at or after `from` -> its items (strings unquoted).
std::vector<std::string> list_after(const std::string& py, const std::string& key, size_t from) {
  const size_t open = py.find(key + "[", from) + key.size() + 1, close = py.find(']', open);
  std::vector<std::string> items;
  std::stringstream ss(py.substr(open, close - open));
  for (std::string item; std::getline(ss, item, ',');) {
    item.erase(0, item.find_first_not_of(" \""));
    item.erase(item.find_last_not_of(" \"") + 1);
    items.push_back(item);
  }
  return items;
}

// FIFO name -> depth as the program declares it: ObjectFifo(..., depth=D, name="N"), forward(...,
// depth=D, name="N"), or the aligned depths=[...] / names=[...] lists of a split or join.
std::map<std::string, int> declared_depths(const std::string& py) {
  std::map<std::string, int> out;
  for (size_t at = py.find("depth="); at != std::string::npos; at = py.find("depth=", at + 1)) {
    const size_t name = py.find("name=\"", at), eol = py.find('\n', at);
    if (name < eol) {
      const size_t q = name + 6;
      out[py.substr(q, py.find('"', q) - q)] = std::stoi(py.substr(at + 6));
    }
  }
  for (size_t at = py.find("depths=["); at != std::string::npos; at = py.find("depths=[", at + 1)) {
    const auto depths = list_after(py, "depths=", at), names = list_after(py, "names=", at);
    EXPECT_EQ(depths.size(), names.size());
    for (size_t i = 0; i < std::min(depths.size(), names.size()); ++i) out[names[i]] = std::stoi(depths[i]);
  }
  return out;
}

void expect_structure(const Design& d, const std::string& py) {
  const auto depths = declared_depths(py);
  for (const ObjectFifo& f : d.fifos) {
    ASSERT_TRUE(depths.count(f.name)) << f.name;
    EXPECT_EQ(depths.at(f.name), f.depth) << f.name;
  }
  for (const FifoLink& l : d.links) {
    if (l.offsets.empty()) continue;
    const std::string first = l.inputs.size() == 1 ? l.outputs[0] : l.inputs[0];  // made by the link
    const size_t names = py.find("names=[\"" + first + "\"");
    ASSERT_NE(names, std::string::npos) << first;
    const size_t op = py.rfind(l.inputs.size() == 1 ? ".cons().split(" : ".prod().join(", names);
    ASSERT_NE(op, std::string::npos) << first;
    std::vector<std::string> want;
    for (int64_t off : l.offsets) want.push_back(std::to_string(off));
    EXPECT_EQ(list_after(py, "", op), want) << first;
  }
  for (const TileUse& t : d.tiles)
    if (t.has_kernel) {
      const std::string placed = "], placement=Tile(" + std::to_string(t.at.col) + ", " + std::to_string(t.at.row) + ")";
      EXPECT_NE(py.find(placed), std::string::npos) << to_string(t.at);
    }
  for (const SeqStep& s : d.sequence) {
    if (s.op == SeqOp::Wait) continue;
    const std::string call = std::string("rt.") + (s.op == SeqOp::Fill ? "fill(" : "drain(");
    std::string sizes = std::to_string(s.pattern.repeat);
    std::vector<Dim> dims = s.pattern.dims;
    while (dims.size() < 3) dims.push_back({1, 0});
    for (int k = 2; k >= 0; --k) sizes += ", " + std::to_string(dims[size_t(k)].size);
    const std::string needle = "offset=" + std::to_string(s.pattern.offset) + ", sizes=[" + sizes + "]";
    bool found = false;
    for (size_t at = py.find(call); at != std::string::npos && !found; at = py.find(call, at + 1)) {
      const std::string line = py.substr(at, py.find('\n', at) - at);
      found = line.find("of_" + s.fifo) != std::string::npos && line.find(needle) != std::string::npos;
    }
    EXPECT_TRUE(found) << s.fifo << " " << needle;
  }
}

TEST(IronEmitter, GemvParsesAndHasEveryFifoWorkerAndTransfer) {
  const Design d = gemv_design(DType::BF16, 1024, 1024, 2);
  const std::string py = emit_iron(d);
  EXPECT_TRUE(python_parses(py, "gemv"));
  expect_structure(d, py);
  EXPECT_NE(py.find(".cons().split("), std::string::npos);
  EXPECT_NE(py.find(".prod().join("), std::string::npos);
  EXPECT_NE(py.find("wait=True"), std::string::npos);
  EXPECT_NE(py.find("# kernel source: aie_kernels/gemv_bf16.cc (exports gemv_bf16; npu: needs hardware and the "
                    "toolchain, unverified)"),
            std::string::npos);
  EXPECT_TRUE(missing_kernels(d).empty());
  EXPECT_EQ(kernel_sources(d), std::vector<std::string>{"aie_kernels/gemv_bf16.cc"});
}

TEST(IronEmitter, DecodeLayerParsesAndHasEveryFifoWorkerAndTransfer) {
  const Design d = decode_layer_design(DType::BF16, small_layer(), 2);
  const std::string py = emit_iron(d);
  EXPECT_TRUE(python_parses(py, "layer"));
  expect_structure(d, py);
  EXPECT_TRUE(missing_kernels(d).empty());  // decode_layer_bf16.cc is written
  EXPECT_EQ(kernel_sources(d), std::vector<std::string>{"aie_kernels/decode_layer_bf16.cc"});
  // Five stream parts per column exceed the 4-task queue: the mid-sequence Wait closes a task group.
  EXPECT_NE(py.find("    rt.finish_task_group(tg)\n    tg = rt.task_group()\n"), std::string::npos);
  // The memtile chain: each column's join is fed by the previous column's chain FIFO.
  EXPECT_NE(py.find("of_act.prod().join("), std::string::npos);
  EXPECT_NE(py.find("of_chain_c0.prod().join("), std::string::npos);
}

// Objects a core program acquires from `fifo` per invocation (loops multiplied out).
int64_t acquired(const std::vector<CoreStep>& prog, const std::string& fifo) {
  int64_t n = 0;
  std::vector<std::pair<size_t, int64_t>> loops;  // (end, multiplier)
  int64_t mult = 1;
  for (size_t i = 0; i < prog.size(); ++i) {
    while (!loops.empty() && loops.back().first == i) mult /= loops.back().second, loops.pop_back();
    if (prog[i].op == CoreOp::Loop) loops.push_back({i + 1 + size_t(prog[i].body), prog[i].count}), mult *= prog[i].count;
    if (prog[i].op == CoreOp::Acquire && prog[i].name == fifo) n += mult;
  }
  return n;
}

TEST(IronEmitter, FusedCoresRunTheirProgramInTheSimulatorsStageOrder) {
  DecodeLayerShape s = small_layer();
  s.qk_norm = true;
  for (const Design& d : {decode_layer_design(DType::BF16, s, 2), qkv_rope_design(DType::BF16, s, 2),
                          attention_decode_design(s, 2), mlp_fused_design(DType::BF16, s, 2),
                          lm_head_design(DType::BF16, 4096, 1024, 2)}) {
    for (const TileUse& t : d.tiles) {
      if (!t.has_kernel) continue;
      ASSERT_FALSE(t.program.empty()) << d.name;
      const std::string cr = "_c" + std::to_string(t.at.col) + "r" + std::to_string(t.at.row - 2);
      // Every FIFO end of the core moves exactly its objects through the program.
      for (const ObjectFifo& f : d.fifos) {
        bool mine = f.producer.tile == t.at;
        for (const FifoEnd& e : f.consumers) mine = mine || e.tile == t.at;
        if (mine) {
          EXPECT_EQ(acquired(t.program, f.name), f.objects) << d.name << " " << f.name << cr;
        }
      }
    }
    const std::string py = emit_iron(d);
    EXPECT_TRUE(python_parses(py, d.family)) << d.name;
    expect_structure(d, py);
    EXPECT_EQ(py.find("placeholder"), std::string::npos) << d.name;
    // The program survives JSON.
    EXPECT_EQ(design_to_json(design_from_json(design_to_json(d))), design_to_json(d)) << d.name;
    EXPECT_EQ(design_from_json(design_to_json(d)).tiles[2].program.size(), d.tiles[2].program.size());
  }
  // decode_layer, in the order npu-sim runs it: x, norm + QKV rows, then the QKV exchange
  // (give the slice, take the gathered vector), RoPE, the KV stream, ..., the result.
  const Design d = decode_layer_design(DType::BF16, s, 2);
  const std::string py = emit_iron(d);
  const size_t w = py.find("def core_0_2(");
  ASSERT_NE(w, std::string::npos);
  size_t at = w;
  for (const char* step : {"k_decode_layer_bf16_x(e_ddr_c0r0", "k_decode_layer_bf16_qkv(e_ddr_c0r0",
                           "e_slice_c0r0 = slice_c0r0.acquire(1)", "k_decode_layer_bf16_qkv_give(e_slice_c0r0",
                           "k_decode_layer_bf16_qkv_take(e_act", "k_decode_layer_bf16_rope(e_ddr_c0r0",
                           "k_decode_layer_bf16_rope_kv_new(e_kv_new", "k_decode_layer_bf16_attention(e_ddr_c0r0",
                           "k_decode_layer_bf16_attention_give(", "k_decode_layer_bf16_o(e_ddr_c0r0",
                           "k_decode_layer_bf16_gate_up(", "k_decode_layer_bf16_down(", "k_decode_layer_bf16_down_take("}) {
    const size_t next = py.find(step, at);
    ASSERT_NE(next, std::string::npos) << step << "\n" << py.substr(w, 3000);
    at = next;
  }
  EXPECT_EQ(py.find("k_decode_layer_bf16_down_result", w), py.find("k_decode_layer_bf16_down_result"))
      << "only the last core produces the result";
  // A broken program is refused, naming the step.
  Design bad = d;
  bad.tiles[2].program.pop_back();  // a Release
  EXPECT_THROW(emit_iron(bad), std::invalid_argument);
}

TEST(IronEmitter, LibraryKernelNamesItsSource) {
  const Design d = gemm_design(DType::BF16, 256, 256, 256, 2, 2);
  const std::string py = emit_iron(d);
  EXPECT_TRUE(python_parses(py, "gemm"));
  EXPECT_NE(py.find("mlir-aie aie_kernels/aie2p/mm.cc (matmul_bf16_bf16"), std::string::npos);
  EXPECT_TRUE(missing_kernels(d).empty());
  // gemm cores nest the k-block loop inside the output-block loop, clearing C before it, and
  // call the library function with its own signature (buffers only: m, k, n are compile-time).
  EXPECT_NE(py.find("        zero(e_C_c0r0)\n        for _ in range_(4):\n"), std::string::npos) << py;
  EXPECT_NE(py.find("            kernel0(e_A_r0, e_B_c0, e_C_c0r0)\n"), std::string::npos);
}

TEST(IronEmitter, EveryPlannerFamilyKernelIsMapped) {
  const DecodeLayerShape s = small_layer();
  for (DType t : {DType::BF16, DType::BFP16, DType::I8}) {
    EXPECT_NO_THROW(emit_iron(gemv_design(t, 1024, 1024, 2)));
    EXPECT_NO_THROW(emit_iron(decode_layer_design(t, s, 2)));
    EXPECT_NO_THROW(emit_iron(qkv_rope_design(t, s, 2)));
    EXPECT_NO_THROW(emit_iron(mlp_fused_design(t, s, 2)));
    EXPECT_NO_THROW(emit_iron(lm_head_design(t, 4096, 1024, 2)));
  }
  EXPECT_NO_THROW(emit_iron(attention_decode_design(s, 2)));
  for (const char* op : {"silu", "gelu", "mul", "add", "exp", "scale"})
    EXPECT_NO_THROW(emit_iron(elementwise_design(op, 4096, 2))) << op;
  EXPECT_NO_THROW(emit_iron(norm_design(NormKind::RMS, 8, 1024, 2)));
  EXPECT_NO_THROW(emit_iron(softmax_design(8, 256, 2)));
}

TEST(IronEmitter, UnmappedKernelIsNamed) {
  Design d = gemv_design(DType::BF16, 1024, 1024, 1);
  for (TileUse& t : d.tiles)
    if (t.has_kernel) t.kernel.name = "warp_drive_bf16";
  try {
    emit_iron(d);
    FAIL() << "expected invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("warp_drive_bf16"), std::string::npos);
  }
}

TEST(IronEmitter, DesignDirHasPythonJsonAndMakefile) {
  const Design d = gemv_design(DType::BF16, 1024, 1024, 2);
  const fs::path dir = fs::temp_directory_path() / ("xdna_emit_" + std::to_string(::getpid()));
  const auto files = emit_design_dir(d, dir.string());
  ASSERT_EQ(files.size(), 3u);
  for (const std::string& f : files) EXPECT_TRUE(fs::is_regular_file(f)) << f;
  EXPECT_EQ(load_design((dir / "design.json").string()).name, d.name);
  std::stringstream mk;
  mk << std::ifstream(dir / "Makefile").rdbuf();
  EXPECT_NE(mk.str().find("--aie-generate-xclbin --xclbin-name=$(NAME).xclbin"), std::string::npos);
  EXPECT_NE(mk.str().find("--npu-insts-name=insts.bin"), std::string::npos);
  EXPECT_NE(mk.str().find("# missing kernels: none"), std::string::npos);
  EXPECT_NE(mk.str().find("gemv_bf16.o: $(XDNA_KERNELS)/gemv_bf16.cc"), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace xdna::npu
