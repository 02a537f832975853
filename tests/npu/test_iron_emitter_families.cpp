// Every design family the planner can place, emitted as IRON input: design.py parses, has a
// worker per core with a complete body (no placeholder schedule), declares each kernel entry
// point with as many arguments as its prototype in aie_kernels/kernels.h, and the design
// directory (design.py, design.json, Makefile) is written.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "aie_kernels/kernels.h"
#include "npu/artifacts/iron_emitter.h"
#include "npu/design_families.h"

namespace xdna::npu {
namespace {

namespace fs = std::filesystem;

const fs::path kKernelDir = fs::path(XDNA_FIXTURE_DIR) / ".." / ".." / "aie_kernels";

std::string read(const fs::path& p) {
  std::stringstream s;
  s << std::ifstream(p).rdbuf();
  return s.str();
}

// Asks python3 (Debian ships it; CI has it) to parse every program, in one run (one
// interpreter start per program would dominate the test's time); returns the labels that fail,
// with python's message.
std::string python_parse_failures(const std::map<std::string, std::string>& programs) {
  const fs::path dir = fs::temp_directory_path() / ("xdna_ironfam_py_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (const auto& [label, py] : programs) std::ofstream(dir / (label + ".py")) << py;
  const fs::path report = dir / "report.txt";
  const std::string cmd = "python3 -c \"import ast,glob,sys\n"
                          "for f in sorted(glob.glob(sys.argv[1] + '/*.py')):\n"
                          "    try: ast.parse(open(f).read())\n"
                          "    except SyntaxError as e: print(f, e)\n\" " +
                          dir.string() + " > " + report.string();
  const int rc = std::system(cmd.c_str());
  std::string out = rc == 0 ? read(report) : "python3 did not run (exit " + std::to_string(rc) + ")";
  fs::remove_all(dir);
  return out;
}

// extern "C" prototypes of kernels.h: entry point -> parameter count.
std::map<std::string, int> kernel_arities() {
  const std::string h = read(kKernelDir / "kernels.h");
  const size_t open = h.find("extern \"C\" {");
  const std::string block = h.substr(open, h.find("\n}", open) - open);
  std::map<std::string, int> out;
  const std::regex proto("void ([a-z0-9_]+)\\(([^)]*)\\);");
  for (std::sregex_iterator it(block.begin(), block.end(), proto), end; it != end; ++it) {
    const std::string params = (*it)[2];
    out[(*it)[1]] = int(std::count(params.begin(), params.end(), ',')) + 1;
  }
  return out;
}

DecodeLayerShape small_layer() {
  DecodeLayerShape s;
  s.hidden = 512, s.heads = 8, s.kv_heads = 4, s.head_dim = 64, s.intermediate = 1024, s.context = 64;
  s.qk_norm = true;
  return s;
}

ConvShape conv_shape(int64_t hw, int64_t c_in, int64_t c_out, int64_t k, int64_t stride, bool dw) {
  ConvShape s;
  s.height = s.width = hw, s.c_in = c_in, s.c_out = c_out, s.kernel = k, s.stride = stride, s.depthwise = dw;
  s.out_height = s.out_width = (hw + 2 * (k / 2) - k) / stride + 1;
  return s;
}

Design conv_family(const ConvShape& s) { return conv_design(s, choose_conv_tile(s), 2); }

// One representative shape per family (and per dtype / variant the planner places).
std::vector<std::pair<std::string, std::function<Design()>>> families() {
  std::vector<std::pair<std::string, std::function<Design()>>> f;
  const DecodeLayerShape s = small_layer();
  for (DType t : {DType::BF16, DType::BFP16, DType::I8}) {
    const std::string n(dtype_name(t));
    f.push_back({"gemv_" + n, [t] { return gemv_design(t, 1024, 512, 2); }});
    f.push_back({"gemm_" + n, [t] { return gemm_design(t, 128, 256, 128, 2, 2); }});
    f.push_back({"mlp_fused_" + n, [t, s] { return mlp_fused_design(t, s, 2); }});
    f.push_back({"qkv_rope_" + n, [t, s] { return qkv_rope_design(t, s, 2); }});
    f.push_back({"decode_layer_" + n, [t, s] { return decode_layer_design(t, s, 2); }});
    f.push_back({"lm_head_" + n, [t] { return lm_head_design(t, 4096, 512, 2); }});
  }
  f.push_back({"attention_decode", [s] { return attention_decode_design(s, 2); }});
  f.push_back({"rmsnorm", [] { return norm_design(NormKind::RMS, 8, 512, 2); }});
  f.push_back({"layernorm", [] { return norm_design(NormKind::Layer, 8, 512, 2); }});
  f.push_back({"softmax", [] { return softmax_design(8, 256, 2); }});
  for (const char* op : {"silu", "gelu", "exp", "scale", "add", "mul"})
    f.push_back({std::string("eltwise_") + op, [op] { return elementwise_design(op, 4096, 2); }});
  f.push_back({"encoder_attention", [] {
                 EncoderAttentionShape e;
                 e.T = e.S = 200, e.heads = 4, e.kv_heads = 2, e.head_dim = 64;
                 return encoder_attention_design(e, 2);
               }});
  f.push_back({"encoder_attention_causal_window", [] {
                 EncoderAttentionShape e;
                 e.T = e.S = 300, e.heads = 2, e.kv_heads = 2, e.head_dim = 64, e.causal = true, e.window = 128;
                 return encoder_attention_design(e, 2);
               }});
  f.push_back({"conv_dense_k3", [] { return conv_family(conv_shape(32, 16, 32, 3, 1, false)); }});
  f.push_back({"conv_dense_k1_stride2", [] { return conv_family(conv_shape(32, 64, 128, 1, 2, false)); }});
  f.push_back({"conv_depthwise_k3_stride2", [] { return conv_family(conv_shape(32, 64, 64, 3, 2, true)); }});
  f.push_back({"conv_dense_k7_stride2_rgb", [] { return conv_family(conv_shape(64, 3, 64, 7, 2, false)); }});
  return f;
}

// Every Kernel("symbol", "kernel.o", [types]) declaration of design.py.
struct Decl {
  std::string symbol, kernel;
  int args = 0;
};
std::vector<Decl> declarations(const std::string& py) {
  std::vector<Decl> out;
  const std::regex decl("Kernel\\(\"([^\"]+)\", \"([^\"]+)\\.o\", \\[([^\\n]*)\\]\\)\\n");
  for (std::sregex_iterator it(py.begin(), py.end(), decl), end; it != end; ++it) {
    const std::string types = (*it)[3];
    // Each type is "np.int32" or "np.ndarray[(...), np.dtype[...]]": count the top-level commas.
    int depth = 0, n = types.empty() ? 0 : 1;
    for (char c : types) {
      depth += (c == '[' || c == '(') - (c == ']' || c == ')');
      n += (c == ',' && depth == 0);
    }
    out.push_back({(*it)[1], (*it)[2], n});
  }
  return out;
}

TEST(IronEmitterFamilies, EveryFamilyEmitsACompleteProgram) {
  std::string failures;
  std::map<std::string, std::string> programs;
  int emitted = 0;
  for (const auto& [label, make] : families()) {
    Design d;
    std::string py;
    try {
      d = make();
      py = emit_iron(d);
    } catch (const std::exception& e) {
      failures += "\n  " + label + ": " + e.what();
      continue;
    }
    ++emitted;
    programs[label] = py;
    EXPECT_EQ(py.find("placeholder"), std::string::npos) << label << ": a guessed schedule, not the design's";
    // One worker per core, placed at its tile, and started.
    int cores = 0;
    for (const TileUse& t : d.tiles) {
      if (!t.has_kernel) continue;
      ++cores;
      const std::string w = "w_" + std::to_string(t.at.col) + "_" + std::to_string(t.at.row);
      EXPECT_NE(py.find(w + " = Worker(core_" + std::to_string(t.at.col) + "_" + std::to_string(t.at.row)),
                std::string::npos)
          << label << " " << w;
      EXPECT_NE(py.find("placement=" + std::string("Tile(") + std::to_string(t.at.col) + ", " +
                        std::to_string(t.at.row) + "), stack_size="),
                std::string::npos)
          << label << " " << w;
    }
    EXPECT_GT(cores, 0) << label;
    // Every FIFO is made (name="x", or in the names=[...] of the split / join that makes it),
    // and every transfer of the runtime sequence issued.
    for (const ObjectFifo& f : d.fifos) EXPECT_NE(py.find("\"" + f.name + "\""), std::string::npos) << label << " " << f.name;
    size_t transfers = 0, issued = 0;
    for (const SeqStep& s : d.sequence) transfers += s.op != SeqOp::Wait;
    for (size_t at = py.find("    rt.fill("); at != std::string::npos; at = py.find("    rt.fill(", at + 1)) ++issued;
    for (size_t at = py.find("    rt.drain("); at != std::string::npos; at = py.find("    rt.drain(", at + 1)) ++issued;
    EXPECT_EQ(issued, transfers) << label;
    EXPECT_FALSE(declarations(py).empty()) << label;
  }
  EXPECT_EQ(failures, "") << "families that do not emit:" << failures;
  programs["zz_canary"] = "def broken(:\n";  // proves the parse ran: the one failure expected
  const std::string parse = python_parse_failures(programs);
  EXPECT_NE(parse.find("zz_canary.py"), std::string::npos) << parse;
  EXPECT_EQ(std::count(parse.begin(), parse.end(), '\n'), 1) << "programs that do not parse:\n" << parse;
  EXPECT_EQ(emitted, int(families().size()));
}

// Written kernels: each entry point design.py declares exists in kernels.h and takes as many
// arguments as design.py passes (FIFO objects, the design's scalars, the runtime constants).
TEST(IronEmitterFamilies, EveryDeclaredEntryPointHasItsPrototypesArity) {
  const std::map<std::string, int> arity = kernel_arities();
  for (const auto& [label, make] : families()) {
    const Design d = make();
    const std::vector<std::string> missing = missing_kernels(d);
    for (const Decl& k : declarations(emit_iron(d))) {
      const std::string src = "aie_kernels/" + k.kernel + ".cc";
      if (std::find(missing.begin(), missing.end(), src) != missing.end()) continue;
      if (!fs::exists(kKernelDir / (k.kernel + ".cc"))) continue;  // mlir-aie's library
      ASSERT_TRUE(arity.count(k.symbol)) << label << ": " << k.symbol << " has no prototype in kernels.h";
      EXPECT_EQ(k.args, arity.at(k.symbol)) << label << ": " << k.symbol << " declared with " << k.args
                                            << " arguments, kernels.h has " << arity.at(k.symbol);
    }
  }
}

TEST(IronEmitterFamilies, EveryFamilyWritesItsDesignDirectory) {
  const fs::path root = fs::temp_directory_path() / ("xdna_ironfam_dir_" + std::to_string(::getpid()));
  for (const auto& [label, make] : families()) {
    const Design d = make();
    const std::vector<std::string> files = emit_design_dir(d, (root / d.name).string());
    ASSERT_EQ(files.size(), 3u) << label;
    for (const std::string& f : files) EXPECT_TRUE(fs::is_regular_file(f)) << f;
    EXPECT_EQ(load_design((root / d.name / "design.json").string()).name, d.name);
    const std::string mk = read(root / d.name / "Makefile");
    std::set<std::string> kernels;
    for (const TileUse& t : d.tiles)
      if (t.has_kernel) kernels.insert(t.kernel.name);
    for (const std::string& k : kernels) EXPECT_NE(mk.find(k + ".o: "), std::string::npos) << label << " " << k;
  }
  fs::remove_all(root);
}

// The encoder cores run the simulator's schedule: per unit, init, one call per visible K/V
// block (key position b * kv_block), finish; the query position of core r is q0 + r * q_tile.
TEST(IronEmitterFamilies, EncoderAttentionWorkersFollowTheUnitSchedule) {
  EncoderAttentionShape e;
  e.T = e.S = 300, e.heads = 2, e.kv_heads = 1, e.head_dim = 64, e.causal = true, e.window = 128;
  const Design d = encoder_attention_design(e, 2);
  const std::string py = emit_iron(d);
  const int64_t tq = d.params.at("q_tile"), kb = d.params.at("kv_block");
  for (int c = 0; c < 2; ++c)
    for (int r = 0; r < 4; ++r) {
      std::string units;
      for (const EncoderAttentionUnit& u : encoder_attention_units(e, tq, kb, 2, c))
        units += (units.empty() ? "" : ", ") + std::string("(") + std::to_string(u.q0 + r * tq) + ", " +
                 std::to_string(u.b0) + ", " + std::to_string(u.b1) + ")";
      const size_t w = py.find("def core_" + std::to_string(c) + "_" + std::to_string(2 + r) + "(");
      ASSERT_NE(w, std::string::npos);
      EXPECT_NE(py.find("for q_pos0, b0, b1 in [" + units + "]:", w), std::string::npos) << units;
    }
  EXPECT_NE(py.find("k_attention_encoder_bf16_init(m, l, o, " + std::to_string(tq) + ", 64)"), std::string::npos);
  EXPECT_NE(py.find("k_attention_encoder_bf16(e_q_c0r0, e_kv_c0, m, l, o, scores, " + std::to_string(tq) + ", " +
                    std::to_string(kb) + ", 64, q_pos0, b * " + std::to_string(kb) + ", 300, 1, 128, ATTN_SCALE_BITS)"),
            std::string::npos)
      << py.substr(py.find("def core_0_2("), 1500);
  float scale = 1.0f / std::sqrt(64.0f);
  int32_t bits;
  std::memcpy(&bits, &scale, 4);
  EXPECT_NE(py.find("ATTN_SCALE_BITS = " + std::to_string(bits)), std::string::npos);
}

// A fused core passes its own index ("core", (column, row) order) with the shared scalars, in
// the entry point's order: decode_layer's context, core, cores, gelu, head_dim, heads, hidden,
// intermediate, kv_heads, post_norms, qk_norm, then the runtime constants.
TEST(IronEmitterFamilies, FusedCoresPassTheirIndexWithTheShapeScalars) {
  DecodeLayerShape s;
  s.hidden = 64, s.heads = 2, s.kv_heads = 1, s.head_dim = 32, s.intermediate = 96, s.context = 8, s.qk_norm = true;
  const std::string py = emit_iron(decode_layer_design(DType::BF16, s, 2));
  for (int c = 0; c < 2; ++c)
    for (int r = 0; r < 4; ++r) {
      const size_t w = py.find("def core_" + std::to_string(c) + "_" + std::to_string(2 + r) + "(");
      ASSERT_NE(w, std::string::npos);
      const std::string call = "k_decode_layer_bf16_x(e_ddr_c" + std::to_string(c) + "r" + std::to_string(r) + ", 8, " +
                               std::to_string(c * 4 + r) + ", 8, 0, 32, 2, 64, 96, 1, 0, 1, ";
      EXPECT_NE(py.find(call, w), std::string::npos) << call << "\n" << py.substr(w, 800);
    }
}

// conv2d cores call the packed entry point (weights and epilogue in one object) with the
// scalars in the prototype's order, not the design's name order.
TEST(IronEmitterFamilies, ConvCallsThePackedEntryPointInPrototypeOrder) {
  const ConvShape s = conv_shape(32, 64, 64, 3, 2, true);
  const ConvTile t = choose_conv_tile(s);
  const Design d = conv_design(s, t, 1);
  const std::string py = emit_iron(d);
  const Kernel& k = d.tiles[2].has_kernel ? d.tiles[2].kernel : d.tiles[3].kernel;
  std::string scalars;
  for (const char* a : {"rows", "cols", "in_cols", "c_in", "ch", "kernel", "stride", "depthwise"})
    scalars += ", " + std::to_string(k.args.at(a));
  EXPECT_NE(py.find("kernel0(e_in_c0r0, e_weights_c0, e_out_c0r0" + scalars + ")"), std::string::npos) << py;
  EXPECT_NE(py.find("Kernel(\"conv2d_bf16_packed\", \"conv2d_bf16.o\""), std::string::npos);
}

// The packed entry point is conv2d_bf16 with the epilogue read behind the weights.
TEST(IronEmitterFamilies, ConvPackedEntryPointMatchesTheSplitOne) {
  for (const bool dw : {false, true}) {
    const int32_t rows = 2, cols = 3, k = 3, stride = 1, ch = 16, c_in = dw ? 16 : 8;
    const int32_t in_cols = (cols - 1) * stride + k, in_rows = (rows - 1) * stride + k;
    const int64_t n_w = int64_t(k) * k * ch * (dw ? 1 : c_in);
    std::vector<xk::bf16> in(static_cast<size_t>(in_rows * in_cols * c_in)), packed(static_cast<size_t>(n_w + 2 * (ch + 3)));
    std::vector<float> epi(static_cast<size_t>(ch + 3));
    uint32_t seed = 7;
    auto next = [&] { return float(int((seed = seed * 1103515245u + 12345u) >> 20) % 200 - 100) / 64.0f; };
    for (xk::bf16& v : in) v = xk::to_bf16(next(), xk::Rounding::NearestEven);
    for (int64_t i = 0; i < n_w; ++i) packed[size_t(i)] = xk::to_bf16(next(), xk::Rounding::NearestEven);
    for (int i = 0; i < ch; ++i) epi[size_t(i)] = next();  // bias
    epi[size_t(ch)] = -4.0f, epi[size_t(ch + 1)] = 4.0f, epi[size_t(ch + 2)] = 0.1f;  // lo, hi, slope
    std::memcpy(reinterpret_cast<unsigned char*>(packed.data() + n_w), epi.data(), epi.size() * sizeof(float));
    std::vector<xk::bf16> split_out(static_cast<size_t>(rows * cols * ch)), packed_out(split_out.size());
    conv2d_bf16(in.data(), packed.data(), epi.data(), split_out.data(), rows, cols, in_cols, c_in, ch, k, stride, dw);
    conv2d_bf16_packed(in.data(), packed.data(), packed_out.data(), rows, cols, in_cols, c_in, ch, k, stride, dw);
    int nonzero = 0;
    for (size_t i = 0; i < split_out.size(); ++i) {
      EXPECT_EQ(packed_out[i].bits, split_out[i].bits) << i;
      nonzero += split_out[i].bits != 0;
    }
    EXPECT_GT(nonzero, int(split_out.size()) / 2);
  }
}

}  // namespace
}  // namespace xdna::npu
