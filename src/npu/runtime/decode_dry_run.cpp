#include "npu/runtime/decode_dry_run.h"

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <stdexcept>

#include "core/sha256.h"
#include "npu/artifacts/insts.h"
#include "npu/artifacts/manifest.h"
#include "npu/artifacts/xclbin.h"
#include "npu/design_families.h"
#include "npu/driver/amdxdna_uapi.h"
#include "npu/driver/ert.h"
#include "npu/runtime/fused_decoder.h"

namespace fs = std::filesystem;

namespace xdna::npu {

// ---- Model shapes -----------------------------------------------------------------------------

// google/gemma-3-270m config.json: hidden_size 640, 4 heads / 1 KV head x head_dim 256,
// intermediate 2048, 18 layers, vocab 262144, sliding_window 512, every 6th layer global
// (layer_types), QK-norm, GeGLU (gelu_pytorch_tanh), sandwich norms (post_attention_layernorm,
// post_feedforward_layernorm). The window is per layer: the planner sets it on the local layers
// from sliding_window (the shape's own window stays 0, the global layers').
DecoderPlanInput gemma3_270m_plan_input() {
  DecoderPlanInput in{"gemma-3-270m", "gemma3", 18, 262144, {640, 4, 1, 256, 2048, 1, true, true, 0, true}, {}, 512};
  for (int i = 0; i < 18; ++i) in.layer_is_local.push_back(i % 6 != 5);
  return in;
}

// Qwen/Qwen3-0.6B config.json: hidden_size 1024, 16 heads / 8 KV heads x head_dim 128,
// intermediate 3072, 28 layers, vocab 151936, QK-norm, SwiGLU, no sliding window.
DecoderPlanInput qwen3_06b_plan_input() {
  return {"Qwen3-0.6B", "qwen3", 28, 151936, {1024, 16, 8, 128, 3072, 1, true, false}, {}, 0};
}

// ---- The token's designs ----------------------------------------------------------------------

std::vector<Design> decode_token_designs(const DecoderPlan& plan) {
  const DecoderPlanInput& m = plan.model;
  const DecoderPlanOptions& o = plan.options;
  const DType t = o.weights;
  const int cols = o.columns;
  std::vector<Design> out;
  // Every generator the planner may call for a layer (planner.cpp, plan_decoder), keyed by the
  // design name it returns; those that refuse the shape are simply absent.
  auto candidates = [&](const DecodeLayerShape& s, const DecodeLayerShape& sl) {
    std::map<std::string, Design> by_name;
    const int64_t q = s.heads * s.head_dim;
    const std::vector<std::function<Design()>> makes = {
        [&] { return decode_layer_design(t, sl, cols); },
        [&] { return qkv_rope_design(t, s, cols); },
        [&] { return attention_decode_design(s, cols); },
        [&] { return gemv_design(t, s.hidden, q, cols); },
        [&] { return mlp_fused_design(t, s, cols); },
        [&] { return gemv_design(t, s.intermediate, s.hidden, cols); },
        [&] { return elementwise_design(s.gelu ? "gelu" : "silu", s.intermediate, cols); },
        [&] { return elementwise_design("mul", s.intermediate, cols); },
        [&] { return gemv_design(t, s.hidden, s.intermediate, cols); },
    };
    for (const auto& make : makes) {
      try {
        Design d = make();
        const std::string name = d.name;
        by_name.emplace(name, std::move(d));
      } catch (const std::invalid_argument&) {
      }
    }
    return by_name;
  };
  for (const DecoderLayerPlan& lp : plan.layers) {
    DecodeLayerShape s = m.shape;
    s.context = lp.local ? std::min(o.context, m.sliding_window) : o.context;
    s.window = lp.local ? m.sliding_window : 0;
    // decode_layer as the planner makes it: position context - 1 of a resident cache of
    // `context` positions, the window applied by the design.
    DecodeLayerShape sl = s;
    sl.context = o.context;
    sl.capacity = o.context;
    const std::map<std::string, Design> by_name = candidates(s, sl);
    for (const std::string& name : lp.designs) {
      auto it = by_name.find(name);
      if (it == by_name.end())
        throw std::runtime_error("decode dry run: layer " + std::to_string(lp.layer) + " design " + name +
                                 " is not produced by any generator the planner uses");
      out.push_back(it->second);
    }
  }
  if (!plan.lm_head.empty()) {
    const int64_t pieces = int64_t(plan.lm_head.size());
    const Design d = lm_head_design(t, (m.vocab + pieces - 1) / pieces, m.shape.hidden, cols);
    if (d.name != plan.lm_head[0])
      throw std::runtime_error("decode dry run: LM head design " + plan.lm_head[0] + " regenerates as " + d.name);
    for (int64_t k = 0; k < pieces; ++k) out.push_back(d);
  }
  return out;
}

// ---- Decoding records -------------------------------------------------------------------------

namespace {

namespace uapi = driver::uapi;

std::string hex(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%llx", (unsigned long long)v);
  return b;
}

template <typename T>
T load(const std::vector<uint8_t>& bytes, size_t at = 0) {
  T v{};
  if (bytes.size() >= at + sizeof(T)) std::memcpy(&v, bytes.data() + at, sizeof(T));
  return v;
}

const char* kUserPointer = "<user pointer>";

nlohmann::json decode_struct(const std::string& call, const std::vector<uint8_t>& b) {
  using nlohmann::json;
  if (call == "CREATE_HWCTX") {
    const auto a = load<uapi::create_hwctx>(b);
    return {{"ext", a.ext}, {"ext_flags", a.ext_flags}, {"qos_p", a.qos_p ? kUserPointer : "0"},
            {"umq_bo", a.umq_bo}, {"log_buf_bo", a.log_buf_bo}, {"max_opc", a.max_opc},
            {"num_tiles", a.num_tiles}, {"mem_size", a.mem_size}, {"umq_doorbell", a.umq_doorbell},
            {"handle", a.handle}, {"syncobj_handle", a.syncobj_handle}};
  }
  if (call == "DESTROY_HWCTX") {
    const auto a = load<uapi::destroy_hwctx>(b);
    return {{"handle", a.handle}, {"pad", a.pad}};
  }
  if (call == "CONFIG_HWCTX") {
    const auto a = load<uapi::config_hwctx>(b);
    return {{"handle", a.handle}, {"param_type", a.param_type == uapi::CONFIG_CU ? "CONFIG_CU" : hex(a.param_type)},
            {"param_val", a.param_val ? kUserPointer : "0"}, {"param_val_size", a.param_val_size}, {"pad", a.pad}};
  }
  if (call == "CREATE_BO") {
    const auto a = load<uapi::create_bo>(b);
    static const char* types[] = {"INVALID", "SHMEM", "DEV_HEAP", "DEV", "CMD"};
    return {{"flags", a.flags}, {"vaddr", hex(a.vaddr)}, {"size", a.size},
            {"type", a.type < 5 ? types[a.type] : hex(a.type)}, {"handle", a.handle}};
  }
  if (call == "GET_BO_INFO") {
    const auto a = load<uapi::get_bo_info>(b);
    return {{"ext", a.ext}, {"ext_flags", a.ext_flags}, {"handle", a.handle}, {"pad", a.pad},
            {"map_offset", hex(a.map_offset)}, {"vaddr", hex(a.vaddr)}, {"xdna_addr", hex(a.xdna_addr)}};
  }
  if (call == "SYNC_BO") {
    const auto a = load<uapi::sync_bo>(b);
    return {{"handle", a.handle},
            {"direction", a.direction == uapi::SYNC_TO_DEVICE ? "TO_DEVICE" : a.direction == uapi::SYNC_FROM_DEVICE ? "FROM_DEVICE" : hex(a.direction)},
            {"offset", a.offset}, {"size", a.size}};
  }
  if (call == "EXEC_CMD") {
    const auto a = load<uapi::exec_cmd>(b);
    return {{"ext", a.ext}, {"ext_flags", a.ext_flags}, {"hwctx", a.hwctx},
            {"type", a.type == uapi::CMD_SUBMIT_EXEC_BUF ? "EXEC_BUF" : hex(a.type)},
            {"cmd_handles", a.cmd_count == 1 ? json(a.cmd_handles) : json(kUserPointer)},
            {"args", a.args ? kUserPointer : "0"}, {"cmd_count", a.cmd_count}, {"arg_count", a.arg_count},
            {"seq", a.seq}};
  }
  if (call == "GET_INFO") {
    const auto a = load<uapi::get_info>(b);
    return {{"param", a.param}, {"buffer_size", a.buffer_size}, {"buffer", a.buffer ? kUserPointer : "0"}};
  }
  if (call == "GEM_CLOSE") {
    const auto a = load<uapi::gem_close>(b);
    return {{"handle", a.handle}, {"pad", a.pad}};
  }
  std::string h;
  for (uint8_t c : b) h += hex(c) + " ";
  return {{"bytes", h}};
}

nlohmann::json decode_payload(const driver::IoctlRecord& r) {
  using nlohmann::json;
  const std::vector<uint8_t>& p = r.payload;
  if (r.call == "CREATE_HWCTX") {
    const auto q = load<uapi::qos_info>(p);
    return {{"qos", {{"gops", q.gops}, {"fps", q.fps}, {"dma_bandwidth", q.dma_bandwidth}, {"latency", q.latency},
                     {"frame_exec_time", q.frame_exec_time}, {"priority", q.priority}}}};
  }
  if (r.call == "CONFIG_HWCTX") {
    const auto h = load<uapi::hwctx_param_config_cu>(p);
    json cus = json::array();
    for (size_t i = 0; i < h.num_cus; ++i) {
      const auto c = load<uapi::cu_config>(p, sizeof h + i * sizeof(uapi::cu_config));
      cus.push_back({{"cu_bo", c.cu_bo}, {"cu_func", c.cu_func}});
    }
    return {{"num_cus", h.num_cus}, {"cu_configs", cus}};
  }
  if (r.call == "EXEC_CMD") {
    json handles = json::array();
    for (size_t i = 0; i + 4 <= p.size(); i += 4) handles.push_back(load<uint32_t>(p, i));
    return {{"arg_bo_handles", handles}};
  }
  if (r.call == "GET_INFO" && load<uapi::get_info>(r.in).param == uapi::QUERY_AIE_METADATA) {
    const auto m = load<uapi::query_aie_metadata>(p);
    auto tile = [](const uapi::query_aie_tile_metadata& t) {
      return json{{"row_count", t.row_count}, {"row_start", t.row_start}, {"dma_channel_count", t.dma_channel_count},
                  {"lock_count", t.lock_count}, {"event_reg_count", t.event_reg_count}};
    };
    return {{"col_size", m.col_size}, {"cols", m.cols}, {"rows", m.rows},
            {"version", {{"major", m.version.major}, {"minor", m.version.minor}}},
            {"core", tile(m.core)}, {"mem", tile(m.mem)}, {"shim", tile(m.shim)}};
  }
  std::string h;
  for (uint8_t c : p) h += hex(c) + " ";
  return {{"bytes", h}};
}

}  // namespace

nlohmann::json describe_record(const driver::IoctlRecord& r) {
  nlohmann::json j = {{"call", r.call}, {"request", hex(r.request)}, {"in", decode_struct(r.call, r.in)},
                      {"out", decode_struct(r.call, r.out)}};
  if (!r.payload.empty()) j["payload"] = decode_payload(r);
  return j;
}

nlohmann::json describe_command(const std::vector<uint32_t>& w) {
  using nlohmann::json;
  json words = json::array();
  const size_t shown = w.empty() ? 0 : std::min(w.size(), size_t(1 + ((w[0] >> 12) & 0x7FF)));
  for (size_t k = 0; k < shown; ++k) words.push_back(hex(w[k]));
  json j = {{"words", words}};
  if (w.empty()) return j;
  const ert::Header h = ert::decode_header(w[0]);
  j["header"] = {{"state", ert::state_name(h.state)}, {"extra_cu_masks", h.extra_cu_masks},
                 {"count", h.count}, {"opcode", ert::opcode_name(h.opcode)}};
  if (h.opcode == ert::Opcode::CmdChain) {
    const ert::ChainStatus c = ert::decode_cmd_chain(w);
    j["command_count"] = c.command_bo_handles.size();
    j["submit_index"] = c.submit_index;
    j["error_index"] = c.error_index;
    j["command_bo_handles"] = c.command_bo_handles;
    return j;
  }
  if (w.size() < 2 + h.extra_cu_masks) return j;
  j["cu_mask"] = hex(w[1]);
  size_t i = 2 + h.extra_cu_masks;  // first word after the cu masks
  auto u64 = [&](size_t at) { return uint64_t(w.at(at)) | uint64_t(w.at(at + 1)) << 32; };
  if (h.opcode == ert::Opcode::StartNpu) {
    j["instruction_buffer"] = hex(u64(i));
    j["instruction_buffer_size"] = w.at(i + 2);
    j["instruction_prop_count"] = w.at(i + 3);
    i += 4 + w.at(i + 3);
  }
  if (h.opcode == ert::Opcode::StartCu || h.opcode == ert::Opcode::StartNpu) {
    // The mlir-aie kernel's register map.
    j["kernel_args"] = {{"opcode", u64(i)}, {"instr", hex(u64(i + 2))}, {"ninstr", w.at(i + 4)}};
    json bos = json::array();
    const size_t end = std::min(w.size(), size_t(1 + h.count));  // the header counts the payload
    for (size_t k = i + 5; k + 1 < end; k += 2) bos.push_back(hex(u64(k)));
    j["kernel_args"]["bo"] = bos;
  }
  return j;
}

// ---- The dry run ------------------------------------------------------------------------------

namespace {

void write_bytes(const fs::path& p, const void* data, size_t n) {
  std::ofstream f(p, std::ios::binary);
  f.write(static_cast<const char*>(data), std::streamsize(n));
  if (!f) throw std::runtime_error("cannot write " + p.string());
}

std::array<uint8_t, 16> uuid_of(const std::string& text) {
  const std::string h = sha256_hex(text.data(), text.size());
  std::array<uint8_t, 16> u{};
  for (size_t i = 0; i < 16; ++i) u[i] = uint8_t(std::stoi(h.substr(2 * i, 2), nullptr, 16));
  return u;
}

// The first DPU kernel id mlir-aie assigns (aiecc: dpu_kernel_id 0x901); ours count up from it.
constexpr uint32_t kFirstKernelId = 0x901;

}  // namespace

artifacts::Manifest write_placeholder_artifacts(const std::vector<Design>& designs, const std::string& work_dir,
                                                const std::string& name, int columns) {
  // One xclbin for all designs (XclbinPolicy::Single), one CU + PDI per distinct design.
  const fs::path dir = work_dir;
  fs::create_directories(dir);
  xclbin::Xclbin x;
  x.uuid = uuid_of(name + " xclbin");
  xclbin::AiePartition part;
  part.name = name;
  part.column_width = uint32_t(columns);
  part.start_columns = {0};
  artifacts::Manifest m;
  m.toolchain = "none: dry-run placeholder artifacts (PDIs are not array configurations)";
  std::set<std::string> seen;
  for (const Design& d : designs) {
    if (!seen.insert(d.name).second) continue;
    const uint32_t kid = kFirstKernelId + uint32_t(seen.size() - 1);
    const std::string ip_name = d.name + ":" + d.name.substr(0, 8);
    fs::create_directories(dir / d.name);
    save_design(d, (dir / d.name / "design.json").string());
    const std::vector<uint32_t> words = insts::encode(insts::lower_sequence(d));
    write_bytes(dir / d.name / "insts.bin", words.data(), words.size() * 4);
    const std::string label = "PLACEHOLDER PDI for " + d.name +
                              ": not an array configuration (no AIE toolchain on the machine that made it)";
    xclbin::Pdi pdi;
    pdi.uuid = uuid_of(d.name + " pdi");
    pdi.image.assign(label.begin(), label.end());
    xclbin::CdoGroup g;
    g.name = "DPU";
    g.type = 1;  // primary
    g.pdi_id = kid;
    g.kernel_ids = {kid};
    pdi.cdo_groups.push_back(g);
    part.pdis.push_back(std::move(pdi));
    xclbin::Ip ip;
    ip.name = ip_name;
    ip.type = xclbin::kIpPsKernel;
    ip.properties = xclbin::kSubtypeDpu | (0u << 4) | (kid << 16);  // functional 0, as aiecc writes
    x.ips.push_back(ip);
    artifacts::Entry e;
    e.design = d.name;
    e.family = d.family;
    e.params = d.params;
    e.kernel = ip_name;
    e.xclbin = name + ".xclbin";
    e.insts = d.name + "/insts.bin";
    m.designs.push_back(e);
  }
  x.partition = part;
  const std::vector<uint8_t> xb = xclbin::write(x);
  write_bytes(dir / (name + ".xclbin"), xb.data(), xb.size());
  artifacts::save_manifest(m, dir.string());
  return artifacts::load_manifest(dir.string());
}

DecodeDryRun decode_dry_run(const DecoderPlanInput& model, const DecoderPlanOptions& options,
                            const std::string& work_dir, DeviceRuntimeOptions runtime) {
  const DecoderPlan plan = plan_decoder(model, options);
  DecodeDryRun r = dry_run_designs(decode_token_designs(plan), work_dir, options.columns, runtime);
  r.plan = plan;
  r.transcript["model"] = model.name;
  r.transcript["weights"] = dtype_name(options.weights);
  r.transcript["context"] = options.context;
  return r;
}

namespace {

// The invocations' packets and instruction-stream hashes of a run whose records and
// submissions are in `r`, read from `rec` while its BOs live.
void collect_commands(DecodeDryRun& r, const driver::DryRunIo& rec) {
  // The invocations' own packets: as submitted, or the sub-commands a chain lists (read from
  // their CMD BOs: each is written once per sequence).
  for (const driver::SubmittedCommand& c : r.submissions) {
    if (c.words.empty() || ert::decode_header(c.words[0]).opcode != ert::Opcode::CmdChain) {
      r.commands.push_back(c);
      continue;
    }
    for (uint32_t h : ert::decode_cmd_chain(c.words).command_bo_handles) {
      const std::vector<uint8_t>& b = rec.bo_bytes(h);
      driver::SubmittedCommand sub;
      sub.bo_handle = h;
      sub.words.resize(b.size() / 4);
      std::memcpy(sub.words.data(), b.data(), sub.words.size() * 4);
      r.commands.push_back(std::move(sub));
    }
  }
  // Instruction streams as the device would read them: the BO behind each command's instr address.
  std::map<uint64_t, uint32_t> bo_at;  // xdna_addr -> handle, from every GET_BO_INFO reply so far
  for (const driver::IoctlRecord& x2 : rec.records())
    if (x2.call == "GET_BO_INFO") {
      const auto a = load<uapi::get_bo_info>(x2.out);
      bo_at[a.xdna_addr] = a.handle;
    }
  for (const driver::SubmittedCommand& c : r.commands) {
    const nlohmann::json dc = describe_command(c.words);
    const uint64_t addr = std::stoull(dc["kernel_args"]["instr"].get<std::string>(), nullptr, 16);
    const uint32_t ninstr = dc["kernel_args"]["ninstr"];
    const std::vector<uint8_t>& bytes = rec.bo_bytes(bo_at.at(addr));
    r.insts_sha256[addr] = sha256_hex(bytes.data(), std::min<size_t>(bytes.size(), size_t(ninstr) * 4));
  }
}

// The golden form of `r` (decoded, deterministic).
nlohmann::json dry_run_transcript(const DecodeDryRun& r, int columns, const DeviceRuntimeOptions& runtime) {
  nlohmann::json calls = nlohmann::json::array();
  for (const driver::IoctlRecord& x2 : r.records) calls.push_back(describe_record(x2));
  nlohmann::json cmds = nlohmann::json::array();
  for (const driver::SubmittedCommand& c : r.commands) {
    nlohmann::json j = describe_command(c.words);
    j["bo_handle"] = c.bo_handle;
    cmds.push_back(std::move(j));
  }
  nlohmann::json subs = nlohmann::json::array();
  for (const driver::SubmittedCommand& c : r.submissions) {
    nlohmann::json j = describe_command(c.words);
    j["bo_handle"] = c.bo_handle;
    subs.push_back(std::move(j));
  }
  const bool chained = runtime.submission == Submission::Chained;
  nlohmann::json inv = nlohmann::json::array();
  for (const Design& d : r.invocations) inv.push_back(d.name);
  nlohmann::json streams = nlohmann::json::object();
  for (const auto& [addr, sha] : r.insts_sha256) streams[hex(addr)] = sha;
  return {{"columns", columns},
          {"packet", runtime.packet == CommandPacket::StartCu ? "START_CU" : "START_NPU"},
          {"submission", chained ? "chained" : "per command"},
          {"note", chained ? "dry run over DryRunIo: placeholder PDIs, zero-filled buffers, one EXEC_CMD per "
                             "CMD_CHAIN of up to 64 invocations"
                           : "dry run over DryRunIo: placeholder PDIs, zero-filled buffers, one EXEC_CMD per "
                             "invocation"},
          {"invocations", inv},
          {"calls", calls},
          {"submitted", subs},
          {"commands", cmds},
          {"instruction_streams_sha256", streams}};
}

}  // namespace

DecodeDryRun dry_run_designs(std::vector<Design> invocations, const std::string& work_dir, int columns,
                             DeviceRuntimeOptions runtime) {
  DecodeDryRun r;
  r.invocations = std::move(invocations);
  artifacts::Manifest loaded = write_placeholder_artifacts(r.invocations, work_dir, "decode", columns);

  // One token: every invocation with zero-filled buffers (one set per design and sizes, reused;
  // decode_layer's KV cache resident, one per layer, as DeviceFusedDecoder keeps it).
  auto io = std::make_unique<driver::DryRunIo>();
  driver::DryRunIo* rec = io.get();
  {
    DeviceRuntime rt(std::move(io), std::move(loaded), runtime);
    std::map<std::string, std::vector<std::vector<uint8_t>>> buffers;
    std::vector<DesignCall> calls;
    for (const Design& d : r.invocations) {
      // Same name, other KV length: other argument sizes. decode_layer's kv and kv_row are views
      // of its resident cache (below), so its local and global layers share one buffer set.
      const auto view = [&](const HostArg& a) { return d.family == "decode_layer" && (a.name == "kv" || a.name == "kv_row"); };
      std::string key = d.name;
      for (const HostArg& a : d.args) key.append(",").append(std::to_string(view(a) ? 0 : a.bytes));  // (GCC 12 -Wrestrict)
      auto& bufs = buffers[key];
      if (bufs.empty())
        for (const HostArg& a : d.args) bufs.emplace_back(view(a) ? 0 : size_t(a.bytes), uint8_t(0));
      DesignCall call{&d, std::vector<std::span<uint8_t>>(bufs.begin(), bufs.end())};
      if (d.family == "decode_layer") {  // kv and kv_row: views of one resident cache per layer
        const KvViews v = kv_views(d, rt.allocate_resident(uint64_t(kv_cache_bytes(d))));
        for (size_t i = 0; i < d.args.size(); ++i)
          if (d.args[i].name == "kv") call.args[i] = v.window;
          else if (d.args[i].name == "kv_row") call.args[i] = v.row;
      }
      calls.push_back(std::move(call));
    }
    rt.run_sequence(calls);  // the buffers map is complete: its vectors no longer move
    r.records = rec->records();
    r.submissions = rec->submitted();
    collect_commands(r, *rec);
  }
  r.transcript = dry_run_transcript(r, columns, runtime);
  return r;
}

FusedDeviceDryRun fused_device_dry_run(const SimDecoderModel& m, SimDecoderState state, std::span<const int32_t> ids,
                                       const std::string& work_dir, DeviceRuntimeOptions runtime) {
  FusedDeviceDryRun r;
  const int64_t max_len = state.kv.empty() ? 0 : state.kv[0].max_len;  // the resident cache's capacity
  artifacts::Manifest loaded =
      write_placeholder_artifacts(fused_token_designs(m, state.position, max_len), work_dir, "decode", m.columns);
  auto io = std::make_unique<driver::DryRunIo>();
  driver::DryRunIo* rec = io.get();
  DeviceRuntime rt(std::move(io), std::move(loaded), runtime);
  const size_t open_records = rec->records().size();
  DeviceFusedDecoder dec(rt, m, max_len);
  r.load_records.assign(rec->records().begin() + std::ptrdiff_t(open_records), rec->records().end());
  for (int32_t id : ids) {
    const size_t first_record = rec->records().size(), first_submission = rec->submitted().size();
    const int64_t position = state.position;
    r.logits.push_back(dec.decode(id, state));
    DecodeDryRun t;
    t.invocations = fused_token_designs(m, position, max_len);
    t.records.assign(rec->records().begin() + std::ptrdiff_t(first_record), rec->records().end());
    t.submissions.assign(rec->submitted().begin() + std::ptrdiff_t(first_submission), rec->submitted().end());
    collect_commands(t, *rec);
    t.transcript = dry_run_transcript(t, m.columns, runtime);
    t.transcript["note"] = "fused decode on the device (npu/runtime/fused_decoder.h), one token after the load, over "
                           "DryRunIo: placeholder PDIs, weights resident; npu (needs hardware, unverified here)";
    t.transcript["position"] = position;
    t.transcript["token"] = id;
    r.tokens.push_back(std::move(t));
  }
  // Every BO still alive, as the device would hold it.
  for (const driver::IoctlRecord& x : rec->records())
    if (x.call == "CREATE_BO") {
      const uint32_t h = load<uapi::create_bo>(x.out).handle;
      try {
        r.bo_contents[h] = rec->bo_bytes(h);
      } catch (const std::exception&) {  // closed since
      }
    }
  r.state = std::move(state);
  return r;
}

}  // namespace xdna::npu
