// One decode token of Gemma 3 270M and Qwen3-0.6B (shapes only, int8 weights, context 1024)
// through DeviceRuntime over the dry-run driver, compared with goldens field by field
// (tests/fixtures/npu_dry_run/<model>_decode_token.json), plus hand checks that do not depend
// on the goldens. XDNA_UPDATE_GOLDENS=1 rewrites the goldens (docs/testing.md).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "dry_run_test_util.h"
#include "npu/design_families.h"
#include "npu/driver/amdxdna_uapi.h"
#include "npu/driver/ert.h"
#include "npu/runtime/decode_dry_run.h"

using namespace xdna;
using namespace xdna::npu;
namespace uapi = xdna::npu::driver::uapi;
namespace fs = std::filesystem;

namespace {

using test::as;

DecodeDryRun run_model(const DecoderPlanInput& in, const std::string& tag) {
  const fs::path dir = fs::temp_directory_path() / ("xdna_dry_run_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  DecodeDryRun r = decode_dry_run(in, {DType::I8, 1024, 8}, dir.string());
  fs::remove_all(dir);
  return r;
}

void compare_with_golden(const nlohmann::json& got, const std::string& file) {
  const std::string path = std::string(XDNA_FIXTURE_DIR) + "/npu_dry_run/" + file;
  const char* update = std::getenv("XDNA_UPDATE_GOLDENS");
  if (update && std::string(update) == "1") {
    fs::create_directories(fs::path(path).parent_path());
    std::ofstream(path) << got.dump(1) << "\n";
    GTEST_SKIP() << "rewrote " << path;
  }
  std::ifstream f(path);
  ASSERT_TRUE(f.good()) << path << " is missing (XDNA_UPDATE_GOLDENS=1 writes it)";
  const nlohmann::json want = nlohmann::json::parse(f);
  // Field by field: a JSON patch from the golden to what ran names every differing field.
  const nlohmann::json diff = nlohmann::json::diff(want, got);
  std::string shown;
  for (size_t i = 0; i < diff.size() && i < 10; ++i) {
    const std::string p = diff[i]["path"];
    shown += "  " + diff[i]["op"].get<std::string>() + " " + p + ": golden " +
             (want.contains(nlohmann::json::json_pointer(p)) ? want[nlohmann::json::json_pointer(p)].dump() : "-") +
             ", now " + (diff[i].contains("value") ? diff[i]["value"].dump() : "-") + "\n";
  }
  EXPECT_TRUE(diff.empty()) << diff.size() << " differences from " << path << ":\n" << shown;
}

// Checks written from the driver's and mlir-aie's conventions, independent of the goldens.
void hand_checks(const DecodeDryRun& r) {
  // The number of invocations is the plan's.
  size_t planned = r.plan.lm_head.size();
  for (const DecoderLayerPlan& l : r.plan.layers) planned += l.designs.size();
  EXPECT_EQ(r.invocations.size(), planned);
  ASSERT_EQ(r.commands.size(), planned);  // one EXEC_CMD (one command) per invocation
  // One context of 8 columns x 4 core rows, configured once with one CU per distinct design.
  std::vector<const driver::IoctlRecord*> ctx, cfg, exec;
  std::map<uint32_t, uint64_t> addr, size;
  for (const auto& x : r.records) {
    if (x.call == "CREATE_BO") size[as<uapi::create_bo>(x.out).handle] = as<uapi::create_bo>(x.in).size;
    if (x.call == "CREATE_HWCTX") ctx.push_back(&x);
    if (x.call == "CONFIG_HWCTX") cfg.push_back(&x);
    if (x.call == "EXEC_CMD") exec.push_back(&x);
    if (x.call == "GET_BO_INFO") addr[as<uapi::get_bo_info>(x.out).handle] = as<uapi::get_bo_info>(x.out).xdna_addr;
  }
  ASSERT_EQ(ctx.size(), 1u);
  EXPECT_EQ(as<uapi::create_hwctx>(ctx[0]->in).num_tiles, 32u);
  ASSERT_EQ(cfg.size(), 1u);
  std::set<std::string> distinct;
  for (const Design& d : r.invocations) distinct.insert(d.name);
  EXPECT_EQ(as<uapi::hwctx_param_config_cu>(cfg[0]->payload).num_cus, distinct.size());
  // One EXEC_CMD for the whole token: a CMD_CHAIN listing one command BO per invocation.
  ASSERT_EQ(exec.size(), 1u);
  ASSERT_EQ(r.submissions.size(), 1u);
  const ert::ChainStatus chain = ert::decode_cmd_chain(r.submissions[0].words);
  ASSERT_EQ(chain.command_bo_handles.size(), planned);
  EXPECT_EQ(as<uapi::exec_cmd>(exec[0]->in).cmd_handles, r.submissions[0].bo_handle);
  EXPECT_EQ(as<uapi::exec_cmd>(exec[0]->out).seq, 1u);
  // The EXEC_CMD's BO list: every instruction and argument BO the chain's packets name, once.
  std::set<uint64_t> listed;
  std::map<uint64_t, uint64_t> listed_size;  // base address -> bytes
  const auto e = as<uapi::exec_cmd>(exec[0]->in);
  for (uint32_t k = 0; k < e.arg_count; ++k) {
    uint32_t h = 0;
    std::memcpy(&h, exec[0]->payload.data() + 4 * k, 4);
    listed.insert(addr.at(h));
    listed_size[addr.at(h)] = size.at(h);
  }
  EXPECT_EQ(listed.size(), e.arg_count) << "a BO listed twice";
  // An argument may be bound inside a BO (decode_layer's kv and kv_row: views of its cache).
  const auto inside_listed = [&](uint64_t a) {
    auto it = listed_size.upper_bound(a);
    return it != listed_size.begin() && a < std::prev(it)->first + std::prev(it)->second;
  };
  std::set<uint32_t> distinct_cmds(chain.command_bo_handles.begin(), chain.command_bo_handles.end());
  EXPECT_EQ(distinct_cmds.size(), planned) << "a command BO listed twice in one chain";
  for (size_t i = 0; i < planned; ++i) {
    const Design& d = r.invocations[i];
    const std::vector<uint32_t>& w = r.commands[i].words;
    EXPECT_EQ(r.commands[i].bo_handle, chain.command_bo_handles[i]);
    const ert::Header h = ert::decode_header(w[0]);
    EXPECT_EQ(h.opcode, ert::Opcode::StartCu);
    EXPECT_EQ(h.state, ert::State::New);
    // Kernel arguments: opcode, instr, ninstr + one per design argument.
    EXPECT_EQ((h.count - 1 - 1) / 2 + 1, d.args.size() + 3) << d.name;  // (count - mask - ninstr)/2 + ninstr
    EXPECT_EQ(w[2], 3u);
    // The instruction buffer and every argument address are (inside) BOs the EXEC_CMD lists.
    EXPECT_TRUE(listed.count(uint64_t(w[4]) | uint64_t(w[5]) << 32)) << d.name;
    for (size_t k = 0; k < d.args.size(); ++k)
      EXPECT_TRUE(inside_listed(uint64_t(w[7 + 2 * k]) | uint64_t(w[8 + 2 * k]) << 32)) << d.name << " arg " << k;
  }
}

}  // namespace

TEST(DecodeDryRun, Gemma3_270mOneToken) {
  const DecodeDryRun r = run_model(gemma3_270m_plan_input(), "gemma3");
  hand_checks(r);
  // 18 fused layers + the LM head pieces; local and global layers share the design but not the
  // KV length, so the token uses two instruction streams for the layer design.
  EXPECT_EQ(r.plan.layers.size(), 18u);
  EXPECT_GE(r.insts_sha256.size(), 3u);
  compare_with_golden(r.transcript, "gemma3-270m_decode_token.json");
}

TEST(DecodeDryRun, Qwen3_06bOneToken) {
  const DecodeDryRun r = run_model(qwen3_06b_plan_input(), "qwen3");
  hand_checks(r);
  EXPECT_EQ(r.plan.layers.size(), 28u);
  compare_with_golden(r.transcript, "qwen3-0.6b_decode_token.json");
}

// The planner's fallback designs for a layer that does not fuse (Qwen3-0.6B's unfused blocks:
// o-projection, gate, up, SiLU, product, down) through the same path.
TEST(DecodeDryRun, Qwen3UnfusedLayerBlocks) {
  const DecodeLayerShape s = qwen3_06b_plan_input().shape;
  const DType t = DType::I8;
  std::vector<Design> ds = {gemv_design(t, s.hidden, s.heads * s.head_dim), gemv_design(t, s.intermediate, s.hidden),
                            gemv_design(t, s.intermediate, s.hidden), elementwise_design("silu", s.intermediate),
                            elementwise_design("mul", s.intermediate), gemv_design(t, s.hidden, s.intermediate)};
  const fs::path dir = fs::temp_directory_path() / ("xdna_dry_run_blocks_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const DecodeDryRun r = dry_run_designs(ds, dir.string());
  fs::remove_all(dir);
  ASSERT_EQ(r.commands.size(), ds.size());
  size_t exec = 0;
  for (const auto& x : r.records) exec += x.call == "EXEC_CMD";
  EXPECT_EQ(exec, 1u);  // one chain
  // gate and up are the same design: one instruction stream, four distinct designs + silu/mul.
  EXPECT_EQ(r.insts_sha256.size(), 5u);
  for (size_t i = 0; i < ds.size(); ++i) {
    const nlohmann::json c = describe_command(r.commands[i].words);
    EXPECT_EQ(c["header"]["opcode"], "START_CU");
    EXPECT_EQ(c["kernel_args"]["opcode"], 3);
    EXPECT_EQ(c["kernel_args"]["bo"].size(), ds[i].args.size());
  }
  compare_with_golden(r.transcript, "qwen3-0.6b_unfused_layer_blocks.json");
}

// Unchained submission (Submission::PerCommand) keeps one EXEC_CMD per invocation, with the
// same packets as the chain's sub-commands.
TEST(DecodeDryRun, PerCommandSubmissionMatchesTheChainsPackets) {
  std::vector<Design> ds = {gemv_design(DType::I8, 256, 256, 1), elementwise_design("silu", 256, 1),
                            gemv_design(DType::I8, 256, 256, 1)};
  const fs::path dir = fs::temp_directory_path() / ("xdna_dry_run_percmd_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  DeviceRuntimeOptions per;
  per.submission = Submission::PerCommand;
  const DecodeDryRun a = dry_run_designs(ds, dir.string(), 1, per);
  fs::remove_all(dir);
  const DecodeDryRun b = dry_run_designs(ds, dir.string(), 1);
  fs::remove_all(dir);
  size_t exec_a = 0, exec_b = 0;
  for (const auto& x : a.records) exec_a += x.call == "EXEC_CMD";
  for (const auto& x : b.records) exec_b += x.call == "EXEC_CMD";
  EXPECT_EQ(exec_a, ds.size());
  EXPECT_EQ(exec_b, 1u);
  EXPECT_EQ(a.transcript["submission"], "per command");
  EXPECT_EQ(b.transcript["submission"], "chained");
  ASSERT_EQ(a.commands.size(), b.commands.size());
  // The repeated GEMV: per command it reuses its one command BO; chained, it needs a second.
  EXPECT_EQ(a.commands[0].bo_handle, a.commands[2].bo_handle);
  EXPECT_NE(b.commands[0].bo_handle, b.commands[2].bo_handle);
  for (size_t i = 0; i < ds.size(); ++i) {
    const nlohmann::json ja = describe_command(a.commands[i].words), jb = describe_command(b.commands[i].words);
    EXPECT_EQ(ja["header"], jb["header"]) << i;
    EXPECT_EQ(ja["kernel_args"]["ninstr"], jb["kernel_args"]["ninstr"]) << i;
  }
}

TEST(DecodeDryRun, RecordsDecodeByName) {
  driver::IoctlRecord rec;
  rec.call = "CREATE_BO";
  uapi::create_bo b{};
  b.size = 4096;
  b.type = uapi::BO_CMD;
  rec.in.resize(sizeof b);
  std::memcpy(rec.in.data(), &b, sizeof b);
  b.handle = 7;
  rec.out.resize(sizeof b);
  std::memcpy(rec.out.data(), &b, sizeof b);
  const nlohmann::json j = describe_record(rec);
  EXPECT_EQ(j["in"]["type"], "CMD");
  EXPECT_EQ(j["in"]["size"], 4096);
  EXPECT_EQ(j["out"]["handle"], 7);
}
