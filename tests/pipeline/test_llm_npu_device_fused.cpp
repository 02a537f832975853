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
#include <map>
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
SimDecoderState prefilled(const SimDecoderModel& m, int64_t filled = kPrefilled) {
  SimDecoderState s(m, kContext);
  const int64_t kvd = m.shape.kv_heads * m.shape.head_dim;
  for (int64_t p = 0; p < filled; ++p)
    for (SimKvCache& kv : s.kv) {
      std::vector<float> row(size_t(2 * kvd));
      for (size_t i = 0; i < row.size(); ++i) row[i] = 0.01f * float(int(i % 97) - 48) + 0.5f * float(p + 1);
      kv.append(to_bf16(row));
    }
  s.position = filled;
  return s;
}

struct DryRun {
  std::unique_ptr<LanguageModel> lm;
  std::shared_ptr<NpuSimFusedDecode> sim;  // npu-sim's plan and model for the same file
  FusedDeviceDryRun r;
};

DryRun run(const std::vector<int32_t>& ids, DeviceRuntimeOptions o = {}, const std::string& model = "qwen3",
           int64_t filled = kPrefilled, DType weights = DType::BF16) {
  DryRun x;
  x.lm = load(model);
  x.sim = NpuSimFusedDecode::prepare(*x.lm, weights);
  EXPECT_TRUE(x.sim->enabled()) << x.sim->refusal();
  const fs::path dir = temp_dir("run");
  x.r = fused_device_dry_run(x.sim->model(), prefilled(x.sim->model(), filled), ids, dir.string(), o);
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

// The bytes of the BO holding device address `addr`, from `addr` on (every BO's address from its
// GET_BO_INFO reply; an argument may be bound inside a BO, e.g. decode_layer's kv and kv_row).
std::vector<uint8_t> bytes_at(const FusedDeviceDryRun& r, uint64_t addr) {
  std::vector<driver::IoctlRecord> all = r.load_records;
  for (const DecodeDryRun& t : r.tokens) all.insert(all.end(), t.records.begin(), t.records.end());
  for (const driver::IoctlRecord& x : all) {
    if (x.call != "GET_BO_INFO") continue;
    const uint64_t base = as<uapi::get_bo_info>(x.out).xdna_addr;
    const auto it = r.bo_contents.find(as<uapi::get_bo_info>(x.out).handle);
    if (it != r.bo_contents.end() && addr >= base && addr < base + it->second.size())
      return {it->second.begin() + std::ptrdiff_t(addr - base), it->second.end()};
  }
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
// context's runtime sequence). The KV cache is resident: the first token writes the prefilled
// rows once (one sync per layer, K / V and head); after that a token moves host -> device only
// the embedding row (x) and the RoPE row, and reads back the logits and each layer's new row.
TEST(NpuDeviceFusedDecode, ResidentBuffersMadeOnceAndPatchedIntoEveryPacket) {
  const DryRun x = run({17, 42});
  const size_t L = x.sim->model().layers.size();
  const auto shmem_creates = [](const std::vector<driver::IoctlRecord>& rs) {
    int n = 0;
    for (const driver::IoctlRecord& r : rs)
      n += r.call == "CREATE_BO" && as<uapi::create_bo>(r.in).type == uapi::BO_SHMEM;
    return n;
  };
  // weights + weights_rest + kv per layer; head weights, 2 activations, rope, logits.
  EXPECT_EQ(shmem_creates(x.r.load_records), int(3 * L + 5));
  const int64_t kvh = x.sim->model().shape.kv_heads;
  std::set<uint32_t> kv_bos;  // every layer's resident cache, by its address in the first packet
  for (size_t i = 0; i < L; ++i) {
    const uint64_t a = address_of(x.r.tokens[0].invocations[i], x.r.tokens[0].commands[i], "kv");
    for (const driver::IoctlRecord& r : x.r.load_records)
      if (r.call == "GET_BO_INFO" && as<uapi::get_bo_info>(r.out).xdna_addr == a)
        kv_bos.insert(as<uapi::get_bo_info>(r.out).handle);
  }
  EXPECT_EQ(kv_bos.size(), L);
  EXPECT_EQ(count(x.r.load_records, "EXEC_CMD"), 0);
  std::set<uint32_t> shmem;  // data BOs (instruction streams and PDIs are DEV BOs, synced on load)
  for (const driver::IoctlRecord& r : x.r.load_records)
    if (r.call == "CREATE_BO" && as<uapi::create_bo>(r.in).type == uapi::BO_SHMEM)
      shmem.insert(as<uapi::create_bo>(r.out).handle);
  for (size_t t = 0; t < 2; ++t) {
    const DecodeDryRun& tok = x.r.tokens[t];
    EXPECT_EQ(shmem_creates(tok.records), 0) << "token " << t;
    int to_device = 0, from_device = 0, kv_to_device = 0;
    uint64_t bytes_to_device = 0;
    for (const driver::IoctlRecord& r : tok.records)
      if (r.call == "SYNC_BO" && shmem.count(as<uapi::sync_bo>(r.in).handle)) {
        const uapi::sync_bo sb = as<uapi::sync_bo>(r.in);
        if (sb.direction == uapi::SYNC_TO_DEVICE) {
          ++to_device, bytes_to_device += sb.size;
          kv_to_device += kv_bos.count(sb.handle) ? 1 : 0;
        } else {
          ++from_device;
        }
      }
    // Token 0 writes the prefilled rows (kPrefilled of them per layer, K / V, head) once.
    EXPECT_EQ(kv_to_device, t == 0 ? int(L * 2 * kvh) : 0) << "token " << t;
    EXPECT_EQ(to_device, int(2 + (t == 0 ? L * 2 * kvh : 0))) << "token " << t;
    EXPECT_EQ(from_device, int(L * 2 * kvh + 1)) << "token " << t;  // the new rows, the logits
    if (t == 1) {  // the steady state: the embedding row (x, padded) and the RoPE row only
      const Design& d0 = tok.invocations[0];
      const auto bytes = [&](const char* a) {
        for (const HostArg& h : d0.args)
          if (h.name == a) return uint64_t(h.bytes);
        return uint64_t(0);
      };
      EXPECT_EQ(bytes_to_device, bytes("x") + bytes("rope"));
    }
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
      for (const char* a : {"weights", "weights_rest", "kv", "x", "result", "rope"})
        EXPECT_EQ(address_of(d[i], c, a), address_of(x.r.tokens[0].invocations[i], x.r.tokens[0].commands[i], a))
            << a << " of layer " << i << ", token " << t;
    }
    EXPECT_EQ(weights.size(), 2 * L);  // every layer its own
    EXPECT_EQ(address_of(d[L], tok.commands[L], "weights"),
              address_of(x.r.tokens[0].invocations[L], x.r.tokens[0].commands[L], "weights"));
  }
  // The second token has a new context but the same per-core split: its runtime sequence and
  // instruction stream are the first token's, so it creates no BO at all; only kv_row's address
  // (the new row's slot in the same cache BO) moves, by one row.
  EXPECT_EQ(count(x.r.tokens[1].records, "CREATE_BO"), 0);
  const int64_t row_bytes = x.sim->model().shape.head_dim * 2;
  for (size_t i = 0; i < L; ++i) {
    const auto at = [&](size_t t, const char* a) {
      return address_of(x.r.tokens[t].invocations[i], x.r.tokens[t].commands[i], a);
    };
    EXPECT_EQ(int64_t(at(1, "kv_row") - at(0, "kv_row")), row_bytes) << "layer " << i;
    EXPECT_EQ(int64_t(at(0, "kv_row") - at(0, "kv")), kPrefilled * row_bytes) << "layer " << i;
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
    if (name == "result") continue;
    // kv: the resident cache after the token; its new row (drained at row kPrefilled: zeros, the
    // dry run computes nothing) is where npu-sim's packing has zeros too.
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
void expect_golden(const DryRun& x, const std::string& model, const std::string& file);

TEST(NpuDeviceFusedDecode, SecondTokenMatchesGolden) {
  expect_golden(run({17, 42}), "tests/fixtures/decoders/qwen3 (2 layers, hidden 64, vocab 128), bf16, context 32",
                "qwen3_tiny_fused_device_token.json");
}

void expect_golden(const DryRun& x, const std::string& model, const std::string& file) {
  nlohmann::json got = x.r.tokens[1].transcript;
  got["model"] = model;
  const std::string path = std::string(XDNA_FIXTURE_DIR) + "/npu_dry_run/" + file;
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

// `npu generate --device npu` over the dry-run driver: greedy generation of `max_tokens` from
// `prompt`, the prompt op by op on the NpuBackend (no compiled design for its ops here: host, said
// per op), every decode token one chain. `npu` stays alive for `fused`, which runs on its runtime.
struct DeviceGenerate {
  std::unique_ptr<NpuBackend> npu;
  const driver::DryRunIo* io = nullptr;  // npu's driver: its ioctl records
  std::shared_ptr<NpuSimFusedDecode> fused;
  GenerateResult result;
};

DeviceGenerate generate_on_device(const LanguageModel& lm, const std::string& tag, const std::vector<int32_t>& prompt,
                                  int max_tokens, DType weights = DType::BF16) {
  const auto sim = NpuSimFusedDecode::prepare(lm, weights);
  const fs::path dir = temp_dir(tag);
  artifacts::Manifest manifest = write_placeholder_artifacts(fused_token_designs(sim->model(), 0), dir.string(), "decode");
  auto io = std::make_unique<driver::DryRunIo>();
  DeviceGenerate g;
  g.io = io.get();
  g.npu = std::make_unique<NpuBackend>(std::make_unique<DeviceRuntime>(std::move(io), manifest));
  g.fused = NpuSimFusedDecode::prepare(lm, *g.npu->runtime(), weights);
  if (g.fused->enabled()) {  // (the caller asserts it)
    HostBackend host;
    GenerateRequest req;
    req.prompt = prompt;
    req.sampling.temperature = 0.0f;
    req.max_tokens = max_tokens;
    req.backends = {g.npu.get(), &host};
    req.fused_decode = g.fused;
    g.result = generate(lm, req);
  }
  fs::remove_all(dir);
  return g;
}

// The wiring `npu generate --device npu` uses: the prompt op by op on the NpuBackend (no
// compiled design for its ops here: host, said per op), every decode token one chain.
TEST(NpuDeviceFusedDecode, GenerateDecodesThroughTheDeviceChain) {
  const auto lm = load("qwen3");
  const DeviceGenerate g = generate_on_device(*lm, "generate", {1, 17, 42, 99}, 4);
  const auto& fused = g.fused;
  ASSERT_TRUE(fused->enabled()) << fused->refusal();
  EXPECT_TRUE(fused->on_device());
  const driver::DryRunIo* rec = g.io;
  const GenerateResult& r = g.result;
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

// The int8 plan the same way: one chain per token of decode_layer_int8 per layer and lm_head_int8,
// named in the placement; artifacts of the bf16 designs only refuse it, naming the int8 design.
TEST(NpuDeviceFusedDecode, Int8GenerateDecodesThroughTheDeviceChain) {
  const auto lm = load("qwen3");
  const DeviceGenerate g = generate_on_device(*lm, "generate_i8", {1, 17, 42, 99}, 4, DType::I8);
  ASSERT_TRUE(g.fused->enabled()) << g.fused->refusal();
  EXPECT_TRUE(g.fused->on_device());
  EXPECT_EQ(g.result.completion_tokens, 4);
  EXPECT_EQ(count(g.io->records(), "EXEC_CMD"), 3);
  const std::string text = g.fused->placement_text();
  EXPECT_NE(text.find("1 command chain per token (2 decode_layer + 1 lm_head invocations, int8), 3 tokens"),
            std::string::npos)
      << text;
  const nlohmann::json j = g.fused->placement_json();
  EXPECT_EQ(j["weights"], "int8");
  ASSERT_EQ(j["designs"].size(), 2u) << j.dump();
  for (const auto& [name, n] : j["designs"].items())
    EXPECT_TRUE(name.rfind("decode_layer_int8_", 0) == 0 ? n == 6 : name.rfind("lm_head_int8_", 0) == 0 && n == 3)
        << name << " x" << n;

  const auto bf16 = NpuSimFusedDecode::prepare(*lm);
  const fs::path dir = temp_dir("refuse_i8");
  DeviceRuntime rt(std::make_unique<driver::DryRunIo>(),
                   write_placeholder_artifacts(fused_token_designs(bf16->model(), 0), dir.string(), "decode"));
  const auto f = NpuSimFusedDecode::prepare(*lm, rt, DType::I8);
  fs::remove_all(dir);
  EXPECT_FALSE(f->enabled());
  EXPECT_EQ(f->refusal().rfind("no compiled artifact for design decode_layer_int8_", 0), 0u) << f->refusal();
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
  // Gemma 3 runs fused on the device too: refused here only for Qwen3's artifacts (its own
  // decode_layer design, "_pn", is not among them).
  EXPECT_FALSE(g->enabled());
  const std::string gemma_layer = fused_token_designs(NpuSimFusedDecode::prepare(*gemma)->model(), 0)[0].name;
  EXPECT_NE(gemma_layer.find("_pn_"), std::string::npos) << gemma_layer;
  EXPECT_EQ(g->refusal(), "no compiled artifact for design " + gemma_layer + " in " + dir2.string());

  LoadOptions o;
  o.context_length = kContext;
  const auto quantized = LanguageModel::load(kDir + "gemma3/model-q5q8.gguf", o);
  const fs::path dir3 = temp_dir("refuse_q");
  DeviceRuntime rt3(std::make_unique<driver::DryRunIo>(), write_placeholder_artifacts(designs, dir3.string(), "decode"));
  const auto q = NpuSimFusedDecode::prepare(*quantized, rt3);
  fs::remove_all(dir3);
  // Its Q5_0/Q8_0 blocks are dequantized as for npu-sim: refused only for Gemma 3's missing artifact.
  EXPECT_TRUE(NpuSimFusedDecode::prepare(*quantized)->enabled());
  EXPECT_NE(q->refusal().find("no compiled artifact for design " + gemma_layer), std::string::npos) << q->refusal();
}

// ---- Gemma 3 (sliding-window layers 0 and 2, window 16; sandwich norms) ---------------------------

namespace {

constexpr int64_t kGemmaFilled = 17;  // both tokens (positions 17, 18) are past the window

// The device's memory at the end of a dry run: every live BO's bytes by its device address.
std::map<uint64_t, std::vector<uint8_t>> device_memory(const FusedDeviceDryRun& r) {
  std::vector<driver::IoctlRecord> all = r.load_records;
  for (const DecodeDryRun& t : r.tokens) all.insert(all.end(), t.records.begin(), t.records.end());
  std::map<uint64_t, std::vector<uint8_t>> mem;
  for (const driver::IoctlRecord& x : all)
    if (x.call == "GET_BO_INFO")
      if (const auto it = r.bo_contents.find(as<uapi::get_bo_info>(x.out).handle); it != r.bo_contents.end())
        mem[as<uapi::get_bo_info>(x.out).xdna_addr] = it->second;
  return mem;
}

// Arguments only written (the rest are read; the resident kv is read and drained into).
// The BO holding `addr` in `mem` (by base address) and the offset of `addr` in it.
std::pair<std::vector<uint8_t>*, size_t> locate(std::map<uint64_t, std::vector<uint8_t>>& mem, uint64_t addr) {
  auto it = mem.upper_bound(addr);
  if (it == mem.begin()) throw std::runtime_error("no BO at that address");
  --it;
  if (addr - it->first >= it->second.size()) throw std::runtime_error("no BO at that address");
  return {&it->second, size_t(addr - it->first)};
}

bool is_output(const std::string& arg) { return arg == "result" || arg == "out"; }
bool is_drained(const Design& d, size_t arg) {
  for (const SeqStep& s : d.sequence)
    if (s.op == SeqOp::Drain && size_t(s.arg) == arg) return true;
  return false;
}

}  // namespace

// The chain as submitted: one EXEC_CMD per token of layers + 1 packets; the local layers' packets
// carry window 16 and context min(position + 1, 16), the global ones the full context; every
// layer the one "_pn" design; the local layers share their own RoPE BO; no BO made per token
// (besides the new context's instruction streams and command BOs).
TEST(NpuDeviceFusedDecodeGemma, OneChainPerTokenWithWindowedLocalLayers) {
  const DryRun x = run({17, 42}, {}, "gemma3", kGemmaFilled);
  const SimDecoderModel& m = x.sim->model();
  const size_t L = m.layers.size();
  ASSERT_EQ(L, 4u);
  ASSERT_EQ(m.sliding_window, 16);
  ASSERT_TRUE(m.is_local(0) && !m.is_local(1) && m.is_local(2) && !m.is_local(3));
  ASSERT_EQ(x.r.tokens.size(), 2u);
  int load_shmem = 0;
  std::set<uint32_t> shmem;
  for (const driver::IoctlRecord& r : x.r.load_records)
    if (r.call == "CREATE_BO" && as<uapi::create_bo>(r.in).type == uapi::BO_SHMEM) {
      ++load_shmem;
      shmem.insert(as<uapi::create_bo>(r.out).handle);
    }
  EXPECT_EQ(load_shmem, int(3 * L + 6));  // + the local layers' RoPE row
  for (size_t t = 0; t < 2; ++t) {
    const DecodeDryRun& tok = x.r.tokens[t];
    const int64_t pos = kGemmaFilled + int64_t(t);
    EXPECT_EQ(count(tok.records, "EXEC_CMD"), 1) << "token " << t;
    ASSERT_EQ(tok.submissions.size(), 1u);
    EXPECT_EQ(ert::decode_cmd_chain(tok.submissions[0].words).command_bo_handles.size(), L + 1);
    ASSERT_EQ(tok.commands.size(), L + 1);
    ASSERT_EQ(tok.invocations.size(), L + 1);
    int to_device = 0, from_device = 0;
    for (const driver::IoctlRecord& r : tok.records) {
      if (r.call == "CREATE_BO") {
        EXPECT_NE(as<uapi::create_bo>(r.in).type, uint32_t(uapi::BO_SHMEM)) << "token " << t;
      }
      if (r.call == "SYNC_BO" && shmem.count(as<uapi::sync_bo>(r.in).handle))
        (as<uapi::sync_bo>(r.in).direction == uapi::SYNC_TO_DEVICE ? to_device : from_device)++;
    }
    // x, two RoPE rows (token 0 also the prefilled rows, once); the new rows and the logits back.
    const int kv_syncs = int(L) * 2 * int(m.shape.kv_heads);
    EXPECT_EQ(to_device, 3 + (t == 0 ? kv_syncs : 0)) << "token " << t;
    EXPECT_EQ(from_device, kv_syncs + 1) << "token " << t;
    const std::vector<Design>& d = tok.invocations;
    for (size_t i = 0; i < L; ++i) {
      EXPECT_EQ(d[i].name, d[0].name);
      EXPECT_NE(d[i].name.find("_pn_"), std::string::npos) << d[i].name;
      EXPECT_EQ(d[i].params.at("context"), m.is_local(i) ? 16 : pos + 1) << "layer " << i << ", token " << t;
      EXPECT_EQ(d[i].params.count("window"), m.is_local(i) ? 1u : 0u) << "layer " << i;
      EXPECT_EQ(address_of(d[i], tok.commands[i], "rope") == address_of(d[0], tok.commands[0], "rope"), m.is_local(i))
          << "layer " << i;
    }
    EXPECT_EQ(address_of(d[1], tok.commands[1], "rope"), address_of(d[3], tok.commands[3], "rope"));
    EXPECT_EQ(d[L].family, "lm_head");
  }
}

// The last token's chain executed packet by packet by npu-sim (run_design on the bytes each packet
// points to, every output written back where the packet drains it) gives exactly npu-sim's own
// fused_decode_token from the same cache: logits and new K/V rows bit for bit. On the way, every
// layer's inputs (x, weights, rope, kv, weights_rest) equal npu-sim's packing of that invocation.
// Qwen3 and Gemma 3 (past its window: local layers read positions 3..18 only), bf16 and int8.
TEST(NpuDeviceFusedDecodeGemma, ChainExecutedByNpuSimEqualsFusedDecodeToken) {
  for (const DType weights : {DType::BF16, DType::I8})
  for (const auto& [model, filled] : {std::pair{"qwen3", kPrefilled}, std::pair{"gemma3", kGemmaFilled}}) {
    SCOPED_TRACE(std::string(model) + ", " + std::string(dtype_name(weights)));
    const DryRun x = run({17, 42}, {}, model, filled, weights);
    const SimDecoderModel& m = x.sim->model();
    const DecodeDryRun& tok = x.r.tokens.back();
    ASSERT_EQ(m.weights, weights);
    for (const Design& d : tok.invocations)  // the chain's designs are the plan's precision
      EXPECT_NE(d.name.find("_" + std::string(dtype_name(weights)) + "_"), std::string::npos) << d.name;
    // The cache before the last token (its earlier token's K/V row is the dry run's zeros).
    SimDecoderState before = x.r.state;
    for (SimKvCache& kv : before.kv) --kv.length;
    const int64_t pos = --before.position;
    ASSERT_EQ(pos, filled + 1);
    SimDecoderState sim_state = before;
    const SimTokenResult want = fused_decode_token(m, 42, sim_state);

    std::map<uint64_t, std::vector<uint8_t>> mem = device_memory(x.r);
    const int64_t H = m.shape.hidden, kvd = m.shape.kv_heads * m.shape.head_dim;
    std::vector<float> e(m.embed.begin() + 42 * H, m.embed.begin() + 43 * H);
    for (float& v : e) v *= m.embed_scale;
    std::vector<aie::bf16> act = to_bf16(e);
    std::vector<float> logits;
    for (size_t i = 0; i < tok.invocations.size(); ++i) {
      const Design& d = tok.invocations[i];
      const std::vector<uint64_t> addr = bo_addresses(tok.commands[i]);
      ASSERT_EQ(addr.size(), d.args.size()) << d.name;
      HostArgs a(d.args.size());
      for (size_t j = 0; j < d.args.size(); ++j)
        a[j] = is_output(d.args[j].name) ? std::vector<uint8_t>(size_t(d.args[j].bytes), 0)
                                         : [&] {
                                             const auto [bo, at] = locate(mem, addr[j]);
                                             return std::vector<uint8_t>(bo->begin() + std::ptrdiff_t(at),
                                                                         bo->begin() + std::ptrdiff_t(at + size_t(d.args[j].bytes)));
                                           }();
      const bool head = i + 1 == tok.invocations.size();
      if (!head) {
        const bool local = m.is_local(i);
        const HostArgs packed = pack_decode_layer(d, m.layers[i], act, rope_row(local ? m.inv_freq_local : m.inv_freq, pos),
                                                  before.kv[i]);
        for (size_t j = 0; j < d.args.size(); ++j)
          if (!is_output(d.args[j].name)) {
            EXPECT_TRUE(a[j] == packed[j]) << d.args[j].name << " of layer " << i << " differs from npu-sim's packing";
          }
      }
      run_design(d, a, m.kernel);
      for (size_t j = 0; j < d.args.size(); ++j)
        if (is_drained(d, j)) {
          const auto [bo, at] = locate(mem, addr[j]);
          std::memcpy(bo->data() + at, a[j].data(), a[j].size());
        }
      if (head) {
        logits = lm_head_logits(d, a);
        break;
      }
      act = arg_bf16(d, a, "result", H);
      const std::vector<aie::bf16> row = kv_new_row(d, a);
      const SimKvCache& kv = sim_state.kv[i];
      for (int64_t h = 0; h < kv.kv_heads; ++h) {
        const size_t at = size_t((h * kv.max_len + pos) * kv.head_dim), n = size_t(kv.head_dim) * 2;
        EXPECT_EQ(std::memcmp(row.data() + h * kv.head_dim, kv.k.data() + at, n), 0) << "K of layer " << i;
        EXPECT_EQ(std::memcmp(row.data() + kvd + h * kv.head_dim, kv.v.data() + at, n), 0) << "V of layer " << i;
      }
    }
    ASSERT_EQ(logits.size(), want.logits.size());
    EXPECT_EQ(std::memcmp(logits.data(), want.logits.data(), logits.size() * 4), 0) << "logits";
    // Not all zero: the comparison cannot pass by accident.
    EXPECT_NE(std::count(logits.begin(), logits.end(), 0.0f), std::ptrdiff_t(logits.size()));
  }
}

// Gemma 3's second token (position 18, past the window) against its golden transcript
// (XDNA_UPDATE_GOLDENS=1 build/tests/test_llm_npu_device_fused rewrites it).
TEST(NpuDeviceFusedDecodeGemma, SecondTokenMatchesGolden) {
  expect_golden(run({17, 42}, {}, "gemma3", kGemmaFilled),
                "tests/fixtures/decoders/gemma3 (4 layers, local 0 and 2, window 16), bf16, context 32, 17 cached",
                "gemma3_tiny_fused_device_token.json");
}

// `npu generate --device npu` on Gemma 3 over the dry-run driver: a prompt past the window, then
// every decode token one chain.
TEST(NpuDeviceFusedDecodeGemma, GenerateDecodesThroughTheDeviceChain) {
  const auto lm = load("gemma3");
  std::vector<int32_t> prompt;
  for (int i = 0; i < 18; ++i) prompt.push_back(int32_t(3 + (i * 37) % 120));
  const DeviceGenerate g = generate_on_device(*lm, "generate_gemma", prompt, 3);
  const auto& fused = g.fused;
  ASSERT_TRUE(fused->enabled()) << fused->refusal();
  EXPECT_TRUE(fused->on_device());
  const driver::DryRunIo* rec = g.io;
  const GenerateResult& r = g.result;
  ASSERT_EQ(r.completion_tokens, 3);
  EXPECT_EQ(count(rec->records(), "EXEC_CMD"), 2);
  EXPECT_NE(fused->placement_text().find("npu: decode ran fused on the device: 1 command chain per token (4 decode_layer"),
            std::string::npos)
      << fused->placement_text();
}

// On the NPU itself: two decode tokens of the Qwen3 and Gemma 3 fixtures (Gemma past its window) through the device's fused decode
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
  const DeviceLock lock = DeviceLock::acquire(*node);
  DeviceRuntime rt(driver::open_kernel_io(*node), std::move(manifest));
  for (const auto& [model, filled] : {std::pair{"qwen3", kPrefilled}, std::pair{"gemma3", kGemmaFilled}}) {
    SCOPED_TRACE(model);
    const auto lm = load(model);
    const auto sim = NpuSimFusedDecode::prepare(*lm);
    if (const std::string why = fused_device_refusal(rt, sim->model()); !why.empty()) GTEST_SKIP() << why;
    DeviceFusedDecoder device(rt, sim->model(), kContext);
    SimDecoderState on_device = prefilled(sim->model(), filled), on_sim = prefilled(sim->model(), filled);
    for (const int32_t id : {17, 42}) {
      const std::vector<float> got = device.decode(id, on_device);
      const SimTokenResult want = fused_decode_token(sim->model(), id, on_sim);
      ASSERT_EQ(got.size(), want.logits.size());
      EXPECT_EQ(std::memcmp(got.data(), want.logits.data(), got.size() * 4), 0) << "logits of token " << id;
      for (size_t l = 0; l < on_sim.kv.size(); ++l)
        for (const auto& [a, b] : {std::pair{&on_device.kv[l].k, &on_sim.kv[l].k}, std::pair{&on_device.kv[l].v, &on_sim.kv[l].v}})
          EXPECT_EQ(std::memcmp(a->data(), b->data(), a->size() * sizeof((*a)[0])), 0) << "K/V of layer " << l;
    }
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
