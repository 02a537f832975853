// The device runtime: the ioctl sequence XRT's XDNA shim issues for an xclbin + instruction
// stream kernel, without XRT (docs/npu-runtime.md, "What the runtime does"):
//   open: DEV_HEAP BO (CREATE_BO, GET_BO_INFO, mmap)
//   per xclbin: CREATE_HWCTX, a DEV BO per CU holding its PDI (synced), CONFIG_HWCTX(CONFIG_CU)
//   per design: a DEV BO holding the instruction stream (synced), a SHMEM BO per host argument,
//               a CMD BO
//   per run: copy + SYNC_BO(to device) each argument, write the packet, EXEC_CMD, syncobj wait,
//            read the header state, SYNC_BO(from device) + copy back each argument.
#include "npu/runtime/device_runtime.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "core/sha256.h"
#include "npu/artifacts/insts.h"
#include "npu/artifacts/xclbin.h"
#include "npu/driver/ert.h"

namespace xdna::npu {

std::vector<uint32_t> kernel_register_map(uint64_t instr_address, uint32_t instr_words,
                                          std::span<const uint64_t> data_addresses) {
  std::vector<uint32_t> w = {kKernelOpTransaction, 0, uint32_t(instr_address),
                             uint32_t(instr_address >> 32), instr_words};
  for (uint64_t a : data_addresses) {
    w.push_back(uint32_t(a));
    w.push_back(uint32_t(a >> 32));
  }
  return w;
}

std::vector<uint32_t> encode_start_cu(uint32_t cu_mask, std::span<const uint32_t> regmap) {
  ert::Header h;
  h.state = ert::State::New;
  h.opcode = ert::Opcode::StartCu;
  h.count = uint32_t(1 + regmap.size());
  std::vector<uint32_t> w = {ert::encode_header(h), cu_mask};
  w.insert(w.end(), regmap.begin(), regmap.end());
  return w;
}

namespace {

constexpr uint64_t kPage = 4096;
uint64_t page_round(uint64_t n) { return (n + kPage - 1) / kPage * kPage; }

std::string design_tag(const std::string& name) { return "design '" + name + "'"; }

std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot read " + path);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

// The kernel name part of an IP_LAYOUT name ("MLIR_AIE:MLIRAIE" -> "MLIR_AIE").
std::string kernel_of(const std::string& ip) { return ip.substr(0, ip.find(':')); }

// sha256 of the runtime sequence's fields (what its instruction stream is lowered from), without
// building the design's JSON: it is computed per invocation.
std::string sequence_hash(const Design& d) {
  std::vector<int64_t> w;
  std::string fifos;
  for (const SeqStep& st : d.sequence) {
    const AccessPattern& p = st.pattern;
    w.insert(w.end(), {int64_t(st.op), int64_t(st.arg), p.elem_bytes, p.offset, p.repeat, int64_t(p.dims.size())});
    for (const Dim& dm : p.dims) w.insert(w.end(), {dm.size, dm.stride});
    fifos += st.fifo;
    fifos += '\0';
  }
  std::string bytes(reinterpret_cast<const char*>(w.data()), w.size() * sizeof(int64_t));
  bytes += fifos;
  return sha256_hex(bytes.data(), bytes.size());
}

}  // namespace

struct DeviceRuntime::Impl {
  // A hardware context for one xclbin: its PDI BOs must outlive the context's use of them.
  struct Context {
    std::vector<driver::BufferObject> pdi_bos;
    std::unique_ptr<driver::HwContext> hw;
    std::vector<std::string> cus;  // configured CU names, in CONFIG_CU order (= cu mask bits)
  };
  // A command BO with the argument BOs of one invocation. A design invoked k times in one
  // sequence uses slots 0..k-1 (a chain lists distinct command BOs); an argument BO is made
  // only when the invocation's buffer is not already in a BO of the sequence.
  struct Slot {
    std::unique_ptr<driver::BufferObject> cmd;
    std::vector<std::unique_ptr<driver::BufferObject>> args;
  };
  // One design (per runtime sequence): its instruction stream and slots (slot 0 made on load).
  struct Loaded {
    Context* ctx = nullptr;
    uint32_t cu_mask = 1;
    uint32_t instr_words = 0;
    uint64_t cmd_bytes = 0;
    std::unique_ptr<driver::BufferObject> instr;
    std::vector<Slot> slots;
    uint64_t last_use = 0;  // the use_clock of its latest invocation
  };

  Impl(std::unique_ptr<driver::DriverIo> io, artifacts::Manifest m, DeviceRuntimeOptions o)
      : dev(std::move(io)), manifest(std::move(m)), options(o),
        heap(dev, driver::BoType::DevHeap, kDevHeapBytes) {}

  Context& context_for(const artifacts::Entry& e);
  // `resident[i]`: argument i binds a resident buffer, so slot 0 gets no BO of its own for it.
  Loaded& load(const Design& d, const artifacts::Entry& e, const std::vector<bool>& resident = {});
  // The resident buffer `host` starts inside (null if none; `offset`: where in it), throwing
  // std::out_of_range naming `what` when `host` runs past its end; and the one holding `part`
  // (its offset there; throws when none does).
  driver::BufferObject* resident_at(std::span<const uint8_t> host, uint64_t& offset, const std::string& what) const;
  // Frees least recently used sequences until one more fits in options.max_loaded_sequences,
  // sparing those of the running sequence (last_use == use_clock).
  void evict();
  driver::BufferObject& resident_holding(std::span<const uint8_t> part, uint64_t& offset) const;
  std::vector<uint32_t> instruction_words(const Design& d, const artifacts::Entry& e) const;
  const artifacts::Entry& check(const Design& d, std::span<const std::span<uint8_t>> args) const;
  Slot& slot(Loaded& l, size_t k);
  driver::BufferObject& arg_bo(Slot& s, size_t i, uint64_t bytes);
  // The packet of one invocation with the argument BOs at `addresses`.
  std::vector<uint32_t> packet(const Loaded& l, std::span<const uint64_t> addresses) const;
  void run_chained(std::span<const DesignCall> calls);

  // Declaration order is destruction order reversed: designs' BOs go first, the device last.
  driver::Device dev;
  artifacts::Manifest manifest;
  DeviceRuntimeOptions options;
  driver::BufferObject heap;
  uint32_t core_rows = 0;
  std::map<std::string, std::unique_ptr<Context>> contexts;  // by xclbin path
  std::map<std::string, std::unique_ptr<Loaded>> designs;    // by name + sequence hash
  uint64_t use_clock = 0;                                     // advanced per run / run_sequence
  std::vector<std::unique_ptr<driver::BufferObject>> chain_bos;  // CMD BOs for CMD_CHAIN packets
  std::vector<std::unique_ptr<driver::BufferObject>> resident;   // allocate_resident()'s BOs
};

driver::BufferObject* DeviceRuntime::Impl::resident_at(std::span<const uint8_t> host, uint64_t& offset,
                                                       const std::string& what) const {
  const auto start = reinterpret_cast<uintptr_t>(host.data());
  for (const auto& bo : resident) {
    const auto b = reinterpret_cast<uintptr_t>(bo->bytes().data());
    if (start < b || start >= b + bo->size()) continue;
    offset = start - b;
    if (host.size() > bo->size() - offset)
      throw std::out_of_range("argument " + what + " (" + std::to_string(host.size()) + " bytes at offset " +
                              std::to_string(offset) + ") runs past its resident buffer of " +
                              std::to_string(bo->size()) + " bytes");
    return bo.get();
  }
  return nullptr;
}

void DeviceRuntime::Impl::evict() {
  while (!designs.empty() && designs.size() >= std::max<size_t>(1, options.max_loaded_sequences)) {
    auto lru = designs.end();
    for (auto it = designs.begin(); it != designs.end(); ++it)
      if (it->second->last_use != use_clock && (lru == designs.end() || it->second->last_use < lru->second->last_use))
        lru = it;
    if (lru == designs.end()) return;  // every loaded sequence is in the running one
    designs.erase(lru);                // its instruction, command and argument BOs are closed
  }
}

driver::BufferObject& DeviceRuntime::Impl::resident_holding(std::span<const uint8_t> part, uint64_t& offset) const {
  for (const auto& bo : resident) {
    const uint8_t* b = bo->bytes().data();
    if (part.data() >= b && part.data() + part.size() <= b + bo->size()) {
      offset = uint64_t(part.data() - b);
      return *bo;
    }
  }
  throw std::invalid_argument("a span of " + std::to_string(part.size()) + " bytes that is not inside a resident buffer");
}

DeviceRuntime::Impl::Context& DeviceRuntime::Impl::context_for(const artifacts::Entry& e) {
  const std::string path = manifest.dir + "/" + e.xclbin;
  auto it = contexts.find(path);
  if (it != contexts.end()) return *it->second;
  const xclbin::Xclbin x = xclbin::load(path);
  if (!x.partition) throw std::runtime_error(path + ": no AIE_PARTITION section");
  // num_tiles = partition columns x core rows per column, as the shim computes it
  // (amd/xdna-driver src/shim/hwctx.cpp: n_cols * get_core_rows(), the latter from AIE metadata).
  if (core_rows == 0) {
    core_rows = uint32_t(dev.aie_metadata().core.row_count);
    if (core_rows == 0) throw std::runtime_error("the driver reports 0 core rows (AIE_METADATA)");
  }
  auto c = std::make_unique<Context>();
  driver::HwContextParams p;
  p.num_tiles = x.partition->column_width * core_rows;
  p.max_opc = x.partition->operations_per_cycle;  // the shim passes the partition's ops/cycle
  c->hw = std::make_unique<driver::HwContext>(dev, p);
  // One CU per DPU kernel instance, with the PDI whose CDO groups name its kernel id (the
  // shim's xclbin_parser); the PDI goes into a DEV BO (the driver refuses other BO types).
  std::vector<driver::CuConfig> cus;
  for (const xclbin::Ip& ip : x.ips) {
    if (!ip.is_dpu_kernel()) continue;
    const xclbin::Pdi* pdi = x.pdi_for_kernel(ip.kernel_id());
    if (!pdi || pdi->image.empty())
      throw std::runtime_error(path + ": no PDI for CU " + ip.name + " (kernel id " +
                               std::to_string(ip.kernel_id()) + ")");
    driver::BufferObject bo(dev, driver::BoType::Dev, pdi->image.size());
    std::memcpy(bo.bytes().data(), pdi->image.data(), pdi->image.size());
    bo.sync_to_device();
    cus.push_back({bo.handle(), ip.functional()});
    c->cus.push_back(ip.name);
    c->pdi_bos.push_back(std::move(bo));
  }
  if (cus.empty()) throw std::runtime_error(path + ": no NPU (DPU) compute unit in IP_LAYOUT");
  c->hw->configure_cus(cus);
  return *contexts.emplace(path, std::move(c)).first->second;
}

std::vector<uint32_t> DeviceRuntime::Impl::instruction_words(const Design& d,
                                                             const artifacts::Entry& e) const {
  // The artifact's stream is used only when it was built for this runtime sequence: the same
  // design name covers several sequences (the KV context length is not part of the name).
  if (!e.insts.empty()) {
    const std::string design_json = manifest.dir + "/" + d.name + "/design.json";
    bool same = true;
    if (std::ifstream(design_json).good())
      same = design_to_json(load_design(design_json))["sequence"] == design_to_json(d)["sequence"];
    if (same) {
      const std::vector<uint8_t> bytes = read_file(manifest.dir + "/" + e.insts);
      if (bytes.empty() || bytes.size() % 4)
        throw std::runtime_error(manifest.dir + "/" + e.insts + ": not a whole number of u32 words");
      std::vector<uint32_t> w(bytes.size() / 4);
      std::memcpy(w.data(), bytes.data(), bytes.size());
      return w;
    }
  }
  return insts::encode(insts::lower_sequence(d));
}

DeviceRuntime::Impl::Loaded& DeviceRuntime::Impl::load(const Design& d, const artifacts::Entry& e,
                                                       const std::vector<bool>& resident_args) {
  const std::string key = d.name + "@" + sequence_hash(d);
  auto it = designs.find(key);
  if (it != designs.end()) {
    it->second->last_use = use_clock;
    return *it->second;
  }
  evict();  // before the new stream is carved from the heap
  auto l = std::make_unique<Loaded>();
  l->last_use = use_clock;
  l->ctx = &context_for(e);
  size_t cu = 0;
  if (!e.kernel.empty()) {
    while (cu < l->ctx->cus.size() && l->ctx->cus[cu] != e.kernel && kernel_of(l->ctx->cus[cu]) != e.kernel) ++cu;
    if (cu == l->ctx->cus.size())
      throw std::runtime_error("the xclbin " + e.xclbin + " has no compute unit named " + e.kernel);
  }
  if (cu >= 32) throw std::runtime_error("compute unit index " + std::to_string(cu) + " beyond the first cu mask");
  l->cu_mask = 1u << cu;
  const std::vector<uint32_t> words = instruction_words(d, e);
  l->instr_words = uint32_t(words.size());
  l->instr = std::make_unique<driver::BufferObject>(dev, driver::BoType::Dev, words.size() * 4);
  std::memcpy(l->instr->bytes().data(), words.data(), words.size() * 4);
  l->instr->sync_to_device();
  l->slots.emplace_back();
  for (size_t i = 0; i < d.args.size(); ++i) {
    const HostArg& a = d.args[i];
    if (a.bytes <= 0) throw std::runtime_error("argument " + a.name + " has " + std::to_string(a.bytes) + " bytes");
    const bool bound_elsewhere = i < resident_args.size() && resident_args[i];
    l->slots[0].args.push_back(bound_elsewhere ? nullptr
                                               : std::make_unique<driver::BufferObject>(dev, driver::BoType::Shmem,
                                                                                       uint64_t(a.bytes)));
  }
  // START_CU: header + cu mask + 5 + 2 per argument; START_NPU adds 4 words of its own fields.
  const uint64_t packet_words = 2 + 5 + 2 * d.args.size() + 4;
  l->cmd_bytes = page_round(packet_words * 4);
  l->slots[0].cmd = std::make_unique<driver::BufferObject>(dev, driver::BoType::Cmd, l->cmd_bytes);
  return *designs.emplace(key, std::move(l)).first->second;
}

DeviceRuntime::Impl::Slot& DeviceRuntime::Impl::slot(Loaded& l, size_t k) {
  while (l.slots.size() <= k) {
    Slot s;
    s.cmd = std::make_unique<driver::BufferObject>(dev, driver::BoType::Cmd, l.cmd_bytes);
    s.args.resize(l.slots[0].args.size());
    l.slots.push_back(std::move(s));
  }
  return l.slots[k];
}

driver::BufferObject& DeviceRuntime::Impl::arg_bo(Slot& s, size_t i, uint64_t bytes) {
  // One design name and runtime sequence can take arguments of other sizes (decode_layer's kv and
  // kv_row shrink as the position moves): a BO too small for this invocation is replaced.
  if (!s.args.at(i) || s.args[i]->size() < bytes)
    s.args[i] = std::make_unique<driver::BufferObject>(dev, driver::BoType::Shmem, bytes);
  return *s.args[i];
}

std::vector<uint32_t> DeviceRuntime::Impl::packet(const Loaded& l, std::span<const uint64_t> addresses) const {
  const std::vector<uint32_t> regmap = kernel_register_map(l.instr->device_address(), l.instr_words, addresses);
  if (options.packet == CommandPacket::StartCu) return encode_start_cu(l.cu_mask, regmap);
  ert::StartNpu s;
  s.cu_mask = l.cu_mask;
  s.instruction_buffer = l.instr->device_address();
  s.instruction_bytes = l.instr_words * 4;
  s.args = regmap;
  return ert::encode_start_npu(s);
}

const artifacts::Entry& DeviceRuntime::Impl::check(const Design& d, std::span<const std::span<uint8_t>> args) const {
  const artifacts::Entry* e = manifest.find(d.name);
  if (!e) throw std::runtime_error(design_tag(d.name) + ": no compiled artifact in " + manifest.dir);
  if (args.size() != d.args.size())
    throw std::invalid_argument(design_tag(d.name) + ": " + std::to_string(args.size()) +
                                " buffers given, the design takes " + std::to_string(d.args.size()));
  for (size_t i = 0; i < args.size(); ++i)
    if (int64_t(args[i].size()) != d.args[i].bytes)
      throw std::invalid_argument(design_tag(d.name) + ": argument " + d.args[i].name + " has " +
                                  std::to_string(args[i].size()) + " bytes, the design wants " +
                                  std::to_string(d.args[i].bytes));
  return *e;
}

namespace {

// Rethrows the exception in flight with `tag` in its message, keeping its type (and a
// DriverError's call and errno).
[[noreturn]] void rethrow_tagged(const std::string& tag) {
  try {
    throw;
  } catch (const driver::DriverError& err) {
    // Same call and errno; the detail gains the tag (DriverError adds the prefix again).
    const std::string prefix = "amdxdna " + err.call() + " failed: " + driver::errno_name(err.error()) +
                               " (" + std::strerror(err.error()) + ")";
    std::string detail = err.what();
    detail = detail.rfind(prefix, 0) == 0 ? detail.substr(prefix.size()) : ": " + detail;
    throw driver::DriverError(err.call(), err.error(), tag + detail);
  } catch (const std::invalid_argument& err) {
    throw std::invalid_argument(tag + ": " + err.what());
  } catch (const std::runtime_error& err) {
    throw std::runtime_error(tag + ": " + err.what());
  }
}

}  // namespace

void DeviceRuntime::Impl::run_chained(std::span<const DesignCall> calls) {
  // 1. Per invocation: its loaded design, its slot (k-th use of the design in this sequence),
  //    and a BO for each buffer: the BO of the buffer's first use, or the slot's own.
  struct Bound {
    std::span<uint8_t> host;
    driver::BufferObject* bo;
  };
  std::vector<Bound> bound;  // distinct buffers, in first-use order
  struct Planned {
    Loaded* l;
    driver::BufferObject* cmd;  // the slot's (slots may move as they grow; their BOs do not)
    std::vector<uint32_t> packet;
    std::vector<driver::BufferObject*> bos;
  };
  std::vector<Planned> planned;
  std::map<const Loaded*, size_t> uses;
  for (size_t c = 0; c < calls.size(); ++c) {
    if (!calls[c].design) throw std::invalid_argument("invocation " + std::to_string(c) + " has no design");
    const Design& d = *calls[c].design;
    try {
      const artifacts::Entry& e = check(d, calls[c].args);
      std::vector<bool> resident_args;
      std::vector<uint64_t> offsets(calls[c].args.size(), 0);
      std::vector<driver::BufferObject*> resident_bos;
      for (size_t i = 0; i < calls[c].args.size(); ++i) {
        resident_bos.push_back(resident_at(calls[c].args[i], offsets[i], d.args[i].name));
        resident_args.push_back(resident_bos.back() != nullptr);
      }
      Loaded& l = load(d, e, resident_args);
      Slot& s = slot(l, uses[&l]++);
      Planned p{&l, s.cmd.get(), {}, {}};
      std::vector<uint64_t> addresses;
      for (size_t i = 0; i < calls[c].args.size(); ++i) {
        const std::span<uint8_t> h = calls[c].args[i];
        driver::BufferObject* bo = resident_bos[i];  // resident: bound at its offset, never copied here
        for (const Bound& b : bound) {
          if (bo) break;
          const bool same = b.host.data() == h.data() && b.host.size() == h.size();
          const bool overlap = b.host.data() < h.data() + h.size() && h.data() < b.host.data() + b.host.size();
          if (same) bo = b.bo;
          else if (overlap)
            throw std::invalid_argument("argument " + d.args[i].name + " overlaps another invocation's buffer without being it");
        }
        if (!bo) {
          bo = &arg_bo(s, i, h.size());
          bound.push_back({h, bo});
        }
        addresses.push_back(bo->device_address() + (resident_bos[i] ? offsets[i] : 0));
        p.bos.push_back(bo);
      }
      p.packet = packet(l, addresses);
      planned.push_back(std::move(p));
    } catch (...) {
      rethrow_tagged(design_tag(d.name) + " (invocation " + std::to_string(c) + ")");
    }
  }
  // 2. Chains: consecutive invocations on one context, within the driver's limits (ert.h).
  std::vector<std::pair<size_t, size_t>> chains;  // [begin, end) of `planned`
  for (size_t i = 0; i < planned.size();) {
    size_t j = i + 1, bytes = ert::chain_slot_bytes(planned[i].packet);
    while (j < planned.size() && planned[j].l->ctx == planned[i].l->ctx && j - i < ert::kMaxChainCommands &&
           bytes + ert::chain_slot_bytes(planned[j].packet) <= ert::kChainBufferBytes)
      bytes += ert::chain_slot_bytes(planned[j++].packet);
    chains.emplace_back(i, j);
    i = j;
  }
  // 3. Copy in, submit and wait chain by chain, copy out.
  try {
    for (const Bound& b : bound) {
      std::memcpy(b.bo->bytes().data(), b.host.data(), b.host.size());
      b.bo->sync_to_device();
    }
    for (size_t n = 0; n < chains.size(); ++n) {
      const auto [begin, end] = chains[n];
      std::vector<uint32_t> sub_handles, arg_handles;
      std::vector<std::vector<uint32_t>> packets;
      auto add_arg = [&](uint32_t h) {
        if (std::find(arg_handles.begin(), arg_handles.end(), h) == arg_handles.end()) arg_handles.push_back(h);
      };
      for (size_t i = begin; i < end; ++i) {
        const Planned& p = planned[i];
        std::span<uint8_t> cmd = p.cmd->bytes();
        std::memset(cmd.data(), 0, cmd.size());
        std::memcpy(cmd.data(), p.packet.data(), p.packet.size() * 4);
        sub_handles.push_back(p.cmd->handle());
        packets.push_back(p.packet);
        add_arg(p.l->instr->handle());
        for (driver::BufferObject* bo : p.bos) add_arg(bo->handle());
      }
      ert::check_chain(packets);
      if (chain_bos.size() <= n)
        chain_bos.push_back(std::make_unique<driver::BufferObject>(
            dev, driver::BoType::Cmd, page_round((1 + 6 + 2 * ert::kMaxChainCommands) * 4)));
      const std::vector<uint32_t> chain = ert::encode_cmd_chain(sub_handles);
      std::span<uint8_t> cb = chain_bos[n]->bytes();
      std::memset(cb.data(), 0, cb.size());
      std::memcpy(cb.data(), chain.data(), chain.size() * 4);
      driver::HwContext& hw = *planned[begin].l->ctx->hw;
      const uint64_t seq = hw.submit(*chain_bos[n], arg_handles);
      hw.wait(seq, options.timeout);
      std::vector<uint32_t> back(chain.size());
      std::memcpy(back.data(), cb.data(), back.size() * 4);
      const ert::ChainStatus st = ert::decode_cmd_chain(back);
      if (st.state != ert::State::Completed) {
        const size_t at = begin + std::min<size_t>(st.error_index, end - begin - 1);
        throw std::runtime_error("command chain seq " + std::to_string(seq) + " (" + std::to_string(end - begin) +
                                 " commands) ended in state " + std::string(ert::state_name(st.state)) +
                                 " at command " + std::to_string(st.error_index) + ": " +
                                 design_tag(calls[at].design->name));
      }
    }
    for (const Bound& b : bound) {
      b.bo->sync_from_device();
      std::memcpy(b.host.data(), b.bo->bytes().data(), b.host.size());
    }
  } catch (...) {
    rethrow_tagged("sequence of " + std::to_string(calls.size()) + " invocations");
  }
}

DeviceRuntime::DeviceRuntime(std::unique_ptr<driver::DriverIo> io, artifacts::Manifest manifest,
                             DeviceRuntimeOptions options)
    : impl_(std::make_unique<Impl>(std::move(io), std::move(manifest), options)) {}

DeviceRuntime::~DeviceRuntime() = default;

driver::Device& DeviceRuntime::device() { return impl_->dev; }
const artifacts::Manifest& DeviceRuntime::manifest() const { return impl_->manifest; }

bool DeviceRuntime::has_artifact(const std::string& design) const {
  return impl_->manifest.find(design) != nullptr;
}

void DeviceRuntime::run(const Design& d, std::span<const std::span<uint8_t>> args) {
  const artifacts::Entry& e = impl_->check(d, args);
  ++impl_->use_clock;
  try {
    Impl::Loaded& l = impl_->load(d, e);
    Impl::Slot& s = l.slots[0];
    std::vector<uint64_t> addresses;
    std::vector<uint32_t> handles = {l.instr->handle()};  // every BO the command references
    for (size_t i = 0; i < args.size(); ++i) {
      // None (a resident argument in run_sequence: run() copies every argument), or too small.
      if (!s.args[i] || s.args[i]->size() < args[i].size())
        s.args[i] = std::make_unique<driver::BufferObject>(impl_->dev, driver::BoType::Shmem, args[i].size());
      driver::BufferObject& bo = *s.args[i];
      std::memcpy(bo.bytes().data(), args[i].data(), args[i].size());
      bo.sync_to_device();
      addresses.push_back(bo.device_address());
      handles.push_back(bo.handle());
    }
    const std::vector<uint32_t> packet = impl_->packet(l, addresses);
    std::span<uint8_t> cmd = s.cmd->bytes();
    std::memset(cmd.data(), 0, cmd.size());
    std::memcpy(cmd.data(), packet.data(), packet.size() * 4);
    const uint64_t seq = l.ctx->hw->submit(*s.cmd, handles);
    l.ctx->hw->wait(seq, impl_->options.timeout);
    uint32_t header = 0;
    std::memcpy(&header, cmd.data(), 4);
    const ert::State state = ert::decode_header(header).state;
    if (state != ert::State::Completed)
      throw std::runtime_error("command seq " + std::to_string(seq) + " ended in state " +
                               std::string(ert::state_name(state)));
    for (size_t i = 0; i < args.size(); ++i) {
      s.args[i]->sync_from_device();
      std::memcpy(args[i].data(), s.args[i]->bytes().data(), args[i].size());
    }
  } catch (...) {
    rethrow_tagged(design_tag(d.name));
  }
}

void DeviceRuntime::run_sequence(std::span<const DesignCall> calls) {
  if (impl_->options.submission == Submission::PerCommand) {
    for (const DesignCall& c : calls) {
      if (!c.design) throw std::invalid_argument("run_sequence: an invocation has no design");
      run(*c.design, c.args);
    }
    return;
  }
  if (calls.empty()) return;
  ++impl_->use_clock;
  impl_->run_chained(calls);
}

size_t DeviceRuntime::loaded_sequences() const { return impl_->designs.size(); }

uint64_t DeviceRuntime::loaded_instruction_bytes() const {
  uint64_t n = 0;
  for (const auto& [key, l] : impl_->designs) n += uint64_t(l->instr_words) * 4;
  return n;
}

std::span<uint8_t> DeviceRuntime::allocate_resident(uint64_t bytes) {
  if (bytes == 0) throw std::invalid_argument("allocate_resident: 0 bytes");
  auto bo = std::make_unique<driver::BufferObject>(impl_->dev, driver::BoType::Shmem, bytes);
  std::memset(bo->bytes().data(), 0, bytes);
  impl_->resident.push_back(std::move(bo));
  return impl_->resident.back()->bytes();
}

void DeviceRuntime::sync_to_device(std::span<const uint8_t> part) {
  if (part.empty()) return;
  uint64_t offset = 0;
  impl_->resident_holding(part, offset).sync_to_device(offset, part.size());
}

void DeviceRuntime::sync_from_device(std::span<const uint8_t> part) {
  if (part.empty()) return;
  uint64_t offset = 0;
  impl_->resident_holding(part, offset).sync_from_device(offset, part.size());
}

}  // namespace xdna::npu
