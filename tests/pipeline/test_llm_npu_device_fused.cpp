// `--device npu`'s fused decode (npu/runtime/fused_decoder.h, reached through
// NpuSimFusedDecode::prepare(lm, runtime)) on the tiny Qwen3 fixture, over the dry-run driver:
// npu (needs hardware, unverified here). DryRunIo answers every ioctl as amdxdna would and
// computes nothing, so what is checked is what goes to the device: one EXEC_CMD per token
// carrying a CMD_CHAIN of layers + 1 packets, the buffers each packet points to, the weights
// uploaded once in the layout npu-sim's fused execution reads, the instruction streams, and the
// token's transcript against a golden (tests/fixtures/npu_dry_run/; XDNA_UPDATE_GOLDENS=1
// rewrites it).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "host/host_backend.h"
#include "npu/artifacts/insts.h"
#include "npu/artifacts/manifest.h"
#include "npu/device_lock.h"
#include "npu/design_families.h"
#include "npu/driver/amdxdna_uapi.h"
#include "npu/driver/ert.h"
#include "npu/npu_backend.h"
#include "npu/planner.h"
#include "npu/runtime/decode_dry_run.h"
#include "npu/runtime/fused_decoder.h"
#include "npu/sim_exec.h"
#include "pipeline/llm.h"
#include "pipeline/llm_npu_fused.h"

using namespace xdna;
using namespace xdna::npu;
namespace uapi = xdna::npu::driver::uapi;
namespace fs = std::filesystem;

namespace {

const std::string kDir = std::string(XDNA_FIXTURE_DIR) + "/decoders/";
constexpr int64_t kContext = 32;
constexpr int64_t kPrefilled = 3;  // positions a prefill left in the cache

template <typename T>
T as(const std::vector<uint8_t>& b) {
  T v{};
  std::memcpy(&v, b.data(), std::min(sizeof v, b.size()));
  return v;
}

std::unique_ptr<LanguageModel> load(const std::string& name) {
  LoadOptions o;
  o.context_length = kContext;
  return LanguageModel::load(kDir + name + "/model.gguf", o);
}

fs::path temp_dir(const std::string& tag) {
  const fs::path d = fs::temp_directory_path() / ("xdna_fused_device_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  return d;
}

// K/V rows of `kPrefilled` positions with distinct non-zero values, as a prefill would leave them.
SimDecoderState prefilled(const SimDecoderModel& m) {
  SimDecoderState s(m, kContext);
  const int64_t kvd = m.shape.kv_heads * m.shape.head_dim;
  for (int64_t p = 0; p < kPrefilled; ++p)
    for (SimKvCache& kv : s.kv) {
      std::vector<float> row(size_t(2 * kvd));
      for (size_t i = 0; i < row.size(); ++i) row[i] = 0.01f * float(int(i % 97) - 48) + 0.5f * float(p + 1);
      kv.append(to_bf16(row));
    }
  s.position = kPrefilled;
  return s;
}

struct DryRun {
  std::unique_ptr<LanguageModel> lm;
  std::shared_ptr<NpuSimFusedDecode> sim;  // npu-sim's plan and model for the same file
  FusedDeviceDryRun r;
};

DryRun run(const std::vector<int32_t>& ids, DeviceRuntimeOptions o = {}) {
  DryRun x;
  x.lm = load("qwen3");
  x.sim = NpuSimFusedDecode::prepare(*x.lm);
  EXPECT_TRUE(x.sim->enabled()) << x.sim->refusal();
  const fs::path dir = temp_dir("run");
  x.r = fused_device_dry_run(x.sim->model(), prefilled(x.sim->model()), ids, dir.string(), o);
  fs::remove_all(dir);
  return x;
}

int count(const std::vector<driver::IoctlRecord>& records, const std::string& call) {
  int n = 0;
  for (const driver::IoctlRecord& r : records) n += r.call == call;
  return n;
}

// A packet's data-buffer addresses (the register map's bo<i>, in the design's argument order).
std::vector<uint64_t> bo_addresses(const driver::SubmittedCommand& c) {
  std::vector<uint64_t> a;
  const nlohmann::json dc = describe_command(c.words);
  for (const auto& h : dc["kernel_args"]["bo"]) a.push_back(std::stoull(h.get<std::string>(), nullptr, 16));
  return a;
}

uint64_t address_of(const Design& d, const driver::SubmittedCommand& c, const std::string& arg) {
  const std::vector<uint64_t> a = bo_addresses(c);
  for (size_t i = 0; i < d.args.size(); ++i)
    if (d.args[i].name == arg) return a.at(i);
  ADD_FAILURE() << d.name << " has no argument " << arg;
  return 0;
}

// The bytes of the BO at device address `addr` (every BO's address from its GET_BO_INFO reply).
const std::vector<uint8_t>& bytes_at(const FusedDeviceDryRun& r, uint64_t addr) {
  std::vector<driver::IoctlRecord> all = r.load_records;
  for (const DecodeDryRun& t : r.tokens) all.insert(all.end(), t.records.begin(), t.records.end());
  for (const driver::IoctlRecord& x : all)
    if (x.call == "GET_BO_INFO" && as<uapi::get_bo_info>(x.out).xdna_addr == addr)
      return r.bo_contents.at(as<uapi::get_bo_info>(x.out).handle);
  throw std::runtime_error("no BO at that address");
}

std::vector<uint8_t> prefix(const std::vector<uint8_t>& b, size_t n) { return {b.begin(), b.begin() + std::ptrdiff_t(n)}; }

}  // namespace

// The plan: npu-sim's decision for this file (every layer one decode_layer), so the device runs
// layers + 1 invocations; each token is one EXEC_CMD of one CMD_CHAIN holding them all.
TEST(NpuDeviceFusedDecode, OneChainPerTokenOfLayersPlusHead) {
  for (const CommandPacket packet : {CommandPacket::StartCu, CommandPacket::StartNpu}) {
    DeviceRuntimeOptions o;
    o.packet = packet;
    const DryRun x = run({17, 42}, o);
    const SimDecoderModel& m = x.sim->model();
    const size_t n = m.layers.size() + 1;
    ASSERT_EQ(m.layers.size(), 2u);
    ASSERT_EQ(x.r.tokens.size(), 2u);
    for (size_t t = 0; t < x.r.tokens.size(); ++t) {
      const DecodeDryRun& tok = x.r.tokens[t];
      EXPECT_EQ(count(tok.records, "EXEC_CMD"), 1) << "token " << t;
      ASSERT_EQ(tok.submissions.size(), 1u);
      const ert::ChainStatus chain = ert::decode_cmd_chain(tok.submissions[0].words);
      EXPECT_EQ(ert::decode_header(tok.submissions[0].words[0]).opcode, ert::Opcode::CmdChain);
      EXPECT_EQ(chain.command_bo_handles.size(), n);
      EXPECT_EQ(chain.state, ert::State::New);  // as submitted
      ASSERT_EQ(tok.commands.size(), n);
      for (const driver::SubmittedCommand& c : tok.commands)
        EXPECT_EQ(ert::decode_header(c.words[0]).opcode,
                  packet == CommandPacket::StartCu ? ert::Opcode::StartCu : ert::Opcode::StartNpu);
      // The invocations are the ones fused_decode_token runs: decode_layer at context = cached + 1.
      ASSERT_EQ(tok.invocations.size(), n);
      EXPECT_EQ(tok.invocations[0].params.at("context"), kPrefilled + int64_t(t) + 1);
      EXPECT_EQ(tok.invocations.back().family, "lm_head");
    }
    // Same decision and designs as the planner's plan for the model at its context.
    DecoderPlanInput in;
    in.name = "qwen3";
    in.layers = int64_t(m.layers.size());
    in.vocab = m.vocab;
    in.shape = m.shape;
    DecoderPlanOptions po;
    po.weights = DType::BF16;
    po.context = kContext;
    const DecoderPlan plan = plan_decoder(in, po);
    for (const DecoderLayerPlan& l : plan.layers) EXPECT_TRUE(l.fused);
    EXPECT_EQ(x.r.tokens[0].invocations[0].name, decode_token_designs(plan)[0].name);
    EXPECT_EQ(x.r.tokens[0].invocations.back().name, decode_token_designs(plan).back().name);
  }
}

// Weights, KV and activation buffers are made once at load; each packet points at them (the
// layer's own weights, the activation ping-pong: layer i's result is layer i + 1's x); the
// second token creates no SHMEM BO (only the instruction stream and command BOs of the new
// context's runtime sequence) and syncs in only x, rope and each layer's kv, and back only the
// kv_new rows and the logits.
TEST(NpuDeviceFusedDecode, ResidentBuffersMadeOnceAndPatchedIntoEveryPacket) {
  const DryRun x = run({17, 42});
  const size_t L = x.sim->model().layers.size();
  const auto shmem_creates = [](const std::vector<driver::IoctlRecord>& rs) {
    int n = 0;
    for (const driver::IoctlRecord& r : rs)
      n += r.call == "CREATE_BO" && as<uapi::create_bo>(r.in).type == uapi::BO_SHMEM;
    return n;
  };
  // weights + weights_rest + kv + kv_new per layer; head weights, 2 activations, rope, logits.
  EXPECT_EQ(shmem_creates(x.r.load_records), int(4 * L + 5));
  EXPECT_EQ(count(x.r.load_records, "EXEC_CMD"), 0);
  std::set<uint32_t> shmem;  // data BOs (instruction streams and PDIs are DEV BOs, synced on load)
  for (const driver::IoctlRecord& r : x.r.load_records)
    if (r.call == "CREATE_BO" && as<uapi::create_bo>(r.in).type == uapi::BO_SHMEM)
      shmem.insert(as<uapi::create_bo>(r.out).handle);
  for (size_t t = 0; t < 2; ++t) {
    const DecodeDryRun& tok = x.r.tokens[t];
    EXPECT_EQ(shmem_creates(tok.records), 0) << "token " << t;
    int to_device = 0, from_device = 0;
    for (const driver::IoctlRecord& r : tok.records)
      if (r.call == "SYNC_BO" && shmem.count(as<uapi::sync_bo>(r.in).handle))
        (as<uapi::sync_bo>(r.in).direction == uapi::SYNC_TO_DEVICE ? to_device : from_device)++;
    EXPECT_EQ(to_device, int(2 + L)) << "token " << t;
    EXPECT_EQ(from_device, int(L + 1)) << "token " << t;
  }
  for (size_t t = 0; t < 2; ++t) {
    const DecodeDryRun& tok = x.r.tokens[t];
    const std::vector<Design>& d = tok.invocations;
    std::set<uint64_t> weights;
    for (size_t i = 0; i < L; ++i) {
      const driver::SubmittedCommand& c = tok.commands[i];
      weights.insert(address_of(d[i], c, "weights"));
      weights.insert(address_of(d[i], c, "weights_rest"));
      EXPECT_EQ(address_of(d[i], c, "result"), address_of(d[i + 1], tok.commands[i + 1], "x")) << "layer " << i;
      EXPECT_NE(address_of(d[i], c, "x"), address_of(d[i], c, "result"));
      EXPECT_EQ(address_of(d[i], c, "rope"), address_of(d[0], tok.commands[0], "rope"));
      // The same BOs on both tokens: nothing re-uploaded.
      for (const char* a : {"weights", "weights_rest", "kv", "kv_new", "x", "result", "rope"})
        EXPECT_EQ(address_of(d[i], c, a), address_of(x.r.tokens[0].invocations[i], x.r.tokens[0].commands[i], a))
            << a << " of layer " << i << ", token " << t;
    }
    EXPECT_EQ(weights.size(), 2 * L);  // every layer its own
    EXPECT_EQ(address_of(d[L], tok.commands[L], "weights"),
              address_of(x.r.tokens[0].invocations[L], x.r.tokens[0].commands[L], "weights"));
  }
  // The second token has a new context (another runtime sequence): its instruction stream and
  // command BOs are new, nothing else.
  for (const driver::IoctlRecord& r : x.r.tokens[1].records)
    if (r.call == "CREATE_BO") {
      const uint32_t type = as<uapi::create_bo>(r.in).type;
      EXPECT_TRUE(type == uapi::BO_DEV || type == uapi::BO_CMD) << "type " << type;
    }
}

// What the packets of one token point to holds exactly what npu-sim's packer writes for that
// invocation: layer 0's x, weights, rope, kv and weights_rest, and the LM head's weights.
TEST(NpuDeviceFusedDecode, UploadedBuffersAreNpuSimsLayout) {
  const int32_t id = 17;
  const DryRun x = run({id});
  const SimDecoderModel& m = x.sim->model();
  const DecodeDryRun& tok = x.r.tokens[0];
  const Design& d = tok.invocations[0];
  const SimDecoderState before = prefilled(m);
  std::vector<float> e(m.embed.begin() + id * m.shape.hidden, m.embed.begin() + (id + 1) * m.shape.hidden);
  for (float& v : e) v *= m.embed_scale;
  const HostArgs want = pack_decode_layer(d, m.layers[0], to_bf16(e), rope_row(m.inv_freq, kPrefilled), before.kv[0]);
  for (size_t a = 0; a < d.args.size(); ++a) {
    const std::string& name = d.args[a].name;
    if (name == "result" || name == "kv_new") continue;
    const std::vector<uint8_t>& got = bytes_at(x.r, address_of(d, tok.commands[0], name));
    ASSERT_GE(got.size(), want[a].size()) << name;
    EXPECT_TRUE(prefix(got, want[a].size()) == want[a]) << name << " differs from npu-sim's packing";
  }
  const Design& hd = tok.invocations.back();
  const HostArgs hw = pack_lm_head(hd, m.final_norm, m.head, to_bf16(e));
  const size_t w = size_t(std::find_if(hd.args.begin(), hd.args.end(), [](const HostArg& a) { return a.name == "weights"; }) -
                          hd.args.begin());
  EXPECT_TRUE(bytes_at(x.r, address_of(hd, tok.commands.back(), "weights")) == hw[w]);
  // The weights are not zero (the comparison could not pass by accident).
  EXPECT_NE(std::count(hw[w].begin(), hw[w].end(), uint8_t(0)), std::ptrdiff_t(hw[w].size()));
}

// The instruction stream each packet names is the insts encoder's lowering of that design.
TEST(NpuDeviceFusedDecode, InstructionStreamsAreTheEncoders) {
  const DryRun x = run({17, 42});
  for (const DecodeDryRun& tok : x.r.tokens)
    for (size_t i = 0; i < tok.commands.size(); ++i) {
      const nlohmann::json dc = describe_command(tok.commands[i].words);
      const uint64_t addr = std::stoull(dc["kernel_args"]["instr"].get<std::string>(), nullptr, 16);
      const uint32_t ninstr = dc["kernel_args"]["ninstr"];
      const std::vector<uint32_t> want = insts::encode(insts::lower_sequence(tok.invocations[i]));
      ASSERT_EQ(ninstr, want.size()) << tok.invocations[i].name;
      const std::vector<uint8_t>& got = bytes_at(x.r, addr);
      ASSERT_GE(got.size(), want.size() * 4);
      EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0) << tok.invocations[i].name;
    }
}

// The second token (steady state) against its golden transcript: every ioctl field by field,
// the chain and its packets word by word, the instruction streams' sha256.
TEST(NpuDeviceFusedDecode, SecondTokenMatchesGolden) {
  const DryRun x = run({17, 42});
  nlohmann::json got = x.r.tokens[1].transcript;
  got["model"] = "tests/fixtures/decoders/qwen3 (2 layers, hidden 64, vocab 128), bf16, context 32";
  const std::string path = std::string(XDNA_FIXTURE_DIR) + "/npu_dry_run/qwen3_tiny_fused_device_token.json";
  const char* update = std::getenv("XDNA_UPDATE_GOLDENS");
  if (update && std::string(update) == "1") {
    std::ofstream(path) << got.dump(1) << "\n";
    GTEST_SKIP() << "rewrote " << path;
  }
  std::ifstream f(path);
  ASSERT_TRUE(f.good()) << path << " is missing (XDNA_UPDATE_GOLDENS=1 writes it)";
  const nlohmann::json diff = nlohmann::json::diff(nlohmann::json::parse(f), got);
  EXPECT_TRUE(diff.empty()) << diff.size() << " differences, first: " << (diff.empty() ? "" : diff[0].dump());
}

// The wiring `npu generate --device npu` uses: the prompt op by op on the NpuBackend (no
// compiled design for its ops here: host, said per op), every decode token one chain.
TEST(NpuDeviceFusedDecode, GenerateDecodesThroughTheDeviceChain) {
  const auto lm = load("qwen3");
  const auto sim = NpuSimFusedDecode::prepare(*lm);
  const fs::path dir = temp_dir("generate");
  artifacts::Manifest manifest = write_placeholder_artifacts(fused_token_designs(sim->model(), 0), dir.string(), "decode");
  auto io = std::make_unique<driver::DryRunIo>();
  const driver::DryRunIo* rec = io.get();
  NpuBackend npu(std::make_unique<DeviceRuntime>(std::move(io), manifest));
  const auto fused = NpuSimFusedDecode::prepare(*lm, *npu.runtime());
  ASSERT_TRUE(fused->enabled()) << fused->refusal();
  EXPECT_TRUE(fused->on_device());
  HostBackend host;
  GenerateRequest req;
  req.prompt = {1, 17, 42, 99};
  req.sampling.temperature = 0.0f;
  req.max_tokens = 4;
  req.backends = {&npu, &host};
  req.fused_decode = fused;
  const GenerateResult r = generate(*lm, req);
  fs::remove_all(dir);
  ASSERT_EQ(r.completion_tokens, 4);
  const int decode_tokens = 3;  // the first token comes out of the prefill
  EXPECT_EQ(count(rec->records(), "EXEC_CMD"), decode_tokens);
  int on_npu = 0;
  for (const OpRecord& op : r.report.ops) on_npu += op.backend == "npu";
  EXPECT_EQ(on_npu, decode_tokens * int(lm->decoder().spec().layers + 1));
  const std::string text = fused->placement_text();
  EXPECT_NE(text.find("npu: decode ran fused on the device: 1 command chain per token"), std::string::npos) << text;
  EXPECT_NE(text.find("3 tokens"), std::string::npos) << text;
  EXPECT_NE(text.find("needs hardware, unverified here"), std::string::npos) << text;
  EXPECT_EQ(fused->placement_json()["command_chains_per_token"], 1.0);
}

// Refusals: npu-sim's own (the same text for the same file), and an artifacts directory
// without the lm_head design, named.
TEST(NpuDeviceFusedDecode, RefusesWithNpuSimsReasonsAndMissingArtifacts) {
  const auto lm = load("qwen3");
  const auto sim = NpuSimFusedDecode::prepare(*lm);
  const fs::path dir = temp_dir("refuse");
  const std::vector<Design> designs = fused_token_designs(sim->model(), 0);
  artifacts::Manifest only_layers = write_placeholder_artifacts({designs[0]}, dir.string(), "decode");
  DeviceRuntime rt(std::make_unique<driver::DryRunIo>(), only_layers);
  const auto f = NpuSimFusedDecode::prepare(*lm, rt);
  fs::remove_all(dir);
  EXPECT_FALSE(f->enabled());
  EXPECT_FALSE(f->on_device());
  EXPECT_EQ(f->refusal(), "no compiled artifact for design " + designs.back().name + " in " + dir.string());
  EXPECT_EQ(f->placement_text().rfind("npu: decode ran op by op, not fused: no compiled artifact", 0), 0u)
      << f->placement_text();
  EXPECT_THROW(DeviceFusedDecoder(rt, sim->model(), kContext), std::runtime_error);

  const auto gemma = load("gemma3");
  const fs::path dir2 = temp_dir("refuse_gemma");
  DeviceRuntime rt2(std::make_unique<driver::DryRunIo>(), write_placeholder_artifacts(designs, dir2.string(), "decode"));
  const auto g = NpuSimFusedDecode::prepare(*gemma, rt2);
  fs::remove_all(dir2);
  EXPECT_FALSE(g->enabled());
  EXPECT_TRUE(NpuSimFusedDecode::prepare(*gemma)->enabled());  // fused on npu-sim, not yet on the device
  EXPECT_NE(g->refusal().find("sliding-window layers (window 16) run fused on npu-sim only"), std::string::npos)
      << g->refusal();

  LoadOptions o;
  o.context_length = kContext;
  const auto quantized = LanguageModel::load(kDir + "gemma3/model-q5q8.gguf", o);
  const fs::path dir3 = temp_dir("refuse_q");
  DeviceRuntime rt3(std::make_unique<driver::DryRunIo>(), write_placeholder_artifacts(designs, dir3.string(), "decode"));
  const auto q = NpuSimFusedDecode::prepare(*quantized, rt3);
  fs::remove_all(dir3);
  EXPECT_EQ(q->refusal(), NpuSimFusedDecode::prepare(*quantized)->refusal());
  EXPECT_NE(q->refusal().find("npu-sim executes bf16 designs only"), std::string::npos) << q->refusal();
}

// On the NPU itself: two decode tokens of the Qwen3 fixture through the device's fused decode
// and through npu-sim's fused_decode_token from the same prefilled cache; the logits and the new
// K/V rows must be equal (the same kernels on the same bytes). Skips without /dev/accel or
// without the compiled decode_layer / lm_head designs in $XDNA_NPU_ARTIFACTS (else the default
// artifacts directory). Never run: no machine here has the NPU.
TEST(NpuHardware, FusedDecodeTokenMatchesNpuSim) {
  const std::optional<std::string> node = find_accel_node();
  if (!node) GTEST_SKIP() << "no /dev/accel: no /dev/accel/accel* node (no NPU, or the amdxdna driver is not loaded)";
  const char* env = std::getenv("XDNA_NPU_ARTIFACTS");
  const std::string dir = env && *env ? env : artifacts::default_artifacts_dir();
  artifacts::Manifest manifest;
  try {
    manifest = artifacts::load_manifest(dir);
  } catch (const std::exception& e) {
    GTEST_SKIP() << "no artifacts in " << dir << ": " << e.what();
  }
  const auto lm = load("qwen3");
  const auto sim = NpuSimFusedDecode::prepare(*lm);
  const DeviceLock lock = DeviceLock::acquire(*node);
  DeviceRuntime rt(driver::open_kernel_io(*node), std::move(manifest));
  if (const std::string why = fused_device_refusal(rt, sim->model()); !why.empty()) GTEST_SKIP() << why;
  DeviceFusedDecoder device(rt, sim->model(), kContext);
  SimDecoderState on_device = prefilled(sim->model()), on_sim = prefilled(sim->model());
  for (const int32_t id : {17, 42}) {
    const std::vector<float> got = device.decode(id, on_device);
    const SimTokenResult want = fused_decode_token(sim->model(), id, on_sim);
    ASSERT_EQ(got.size(), want.logits.size());
    EXPECT_EQ(std::memcmp(got.data(), want.logits.data(), got.size() * 4), 0) << "logits of token " << id;
    for (size_t l = 0; l < on_sim.kv.size(); ++l)
      for (const auto [a, b] : {std::pair{&on_device.kv[l].k, &on_sim.kv[l].k}, std::pair{&on_device.kv[l].v, &on_sim.kv[l].v}})
        EXPECT_EQ(std::memcmp(a->data(), b->data(), a->size() * sizeof((*a)[0])), 0) << "K/V of layer " << l;
  }
}

// Resident buffers: a sync outside one is refused by name; any sub-range of one syncs.
TEST(NpuDeviceFusedDecode, ResidentSyncChecksTheRange) {
  DeviceRuntime rt(std::make_unique<driver::DryRunIo>(), artifacts::Manifest{});
  std::vector<uint8_t> host(64);
  EXPECT_THROW(rt.sync_to_device(host), std::invalid_argument);
  EXPECT_THROW(rt.allocate_resident(0), std::invalid_argument);
  const std::span<uint8_t> b = rt.allocate_resident(100);
  EXPECT_EQ(std::count(b.begin(), b.end(), uint8_t(0)), 100);
  EXPECT_NO_THROW(rt.sync_to_device(b.subspan(10, 20)));
  EXPECT_NO_THROW(rt.sync_from_device(b));
}
