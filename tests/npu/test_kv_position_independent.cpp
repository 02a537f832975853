// decode_layer's per-token runtime sequence holds no position: the resident KV cache is passed
// as two views (kv: from the first row read; kv_row: from the new row's slot) whose addresses
// the command packet carries. Two tokens with the same per-core split share one instruction
// stream; a long run keeps the loaded streams and the DEV heap bounded; a view past the cache is
// refused by name. Over the dry-run driver (npu (needs hardware, unverified here)).
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <unistd.h>

#include "npu/artifacts/insts.h"
#include "npu/design_families.h"
#include "npu/driver/amdxdna_uapi.h"
#include "npu/driver/device.h"
#include "npu/driver/ert.h"
#include "npu/runtime/decode_dry_run.h"
#include "npu/runtime/device_runtime.h"
#include "npu/runtime/fused_decoder.h"

using namespace xdna;
using namespace xdna::npu;
namespace fs = std::filesystem;

namespace {

// A small layer: 2 KV heads on 32 cores, 16 cores per head, so the split changes every 16 tokens.
DecodeLayerShape small(int64_t context, int64_t capacity, int64_t window = 0) {
  DecodeLayerShape s{256, 4, 2, 64, 512, context, true, false};
  s.capacity = capacity;
  s.window = window;
  return s;
}

// A tiny layer for the long run (the same split: 2 KV heads, 16 cores per head).
DecodeLayerShape tiny(int64_t context, int64_t capacity) {
  DecodeLayerShape s{64, 2, 2, 16, 64, context, false, false};
  s.capacity = capacity;
  return s;
}

// Qwen3-0.6B's layer: 8 KV heads, 4 cores per head.
DecodeLayerShape qwen3_06b(int64_t context, int64_t capacity, int64_t window = 0) {
  DecodeLayerShape s{1024, 16, 8, 128, 3072, context, true, false};
  s.capacity = capacity;
  s.window = window;
  return s;
}

std::vector<uint32_t> stream(const Design& d) { return insts::encode(insts::lower_sequence(d)); }

size_t arg_of(const Design& d, const std::string& name) {
  for (size_t i = 0; i < d.args.size(); ++i)
    if (d.args[i].name == name) return i;
  ADD_FAILURE() << d.name << " has no argument " << name;
  return 0;
}

// One decode_layer design run per token through DeviceRuntime over DryRunIo, its cache resident.
struct Runner {
  fs::path dir;
  driver::DryRunIo* io = nullptr;
  std::unique_ptr<DeviceRuntime> rt;
  std::span<uint8_t> cache;
  std::map<std::string, std::vector<std::vector<uint8_t>>> buffers;  // by design name

  Runner(const Design& first, const std::string& tag, DeviceRuntimeOptions o = {}) {
    dir = fs::temp_directory_path() / ("xdna_kv_pi_" + tag + "_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    artifacts::Manifest m = write_placeholder_artifacts({first}, dir.string(), "decode");
    auto p = std::make_unique<driver::DryRunIo>();
    io = p.get();
    rt = std::make_unique<DeviceRuntime>(std::move(p), std::move(m), o);
    cache = rt->allocate_resident(uint64_t(kv_cache_bytes(first)));
  }
  ~Runner() {
    rt.reset();
    fs::remove_all(dir);
  }
  // Runs `d`; returns its command packet as submitted (the chain's one sub-command).
  std::vector<uint32_t> run(const Design& d) {
    auto& bufs = buffers[d.name];  // kv and kv_row (sized per token) are views of the cache
    if (bufs.empty())
      for (const HostArg& a : d.args)
        bufs.emplace_back(a.name == "kv" || a.name == "kv_row" ? 0 : size_t(a.bytes), uint8_t(0));
    DesignCall call{&d, std::vector<std::span<uint8_t>>(bufs.begin(), bufs.end())};
    const KvViews v = kv_views(d, cache);
    call.args[arg_of(d, "kv")] = v.window;
    call.args[arg_of(d, "kv_row")] = v.row;
    rt->run_sequence(std::span<const DesignCall>(&call, 1));
    const driver::SubmittedCommand& chain = io->submitted().back();
    const uint32_t h = ert::decode_cmd_chain(chain.words).command_bo_handles.at(0);
    const std::vector<uint8_t>& b = io->bo_bytes(h);
    std::vector<uint32_t> w(b.size() / 4);
    std::memcpy(w.data(), b.data(), w.size() * 4);
    return w;
  }
  size_t creates(uint32_t type) const {
    size_t n = 0;
    for (const auto& r : io->records())
      if (r.call == "CREATE_BO") {
        driver::uapi::create_bo c{};
        std::memcpy(&c, r.in.data(), std::min(sizeof c, r.in.size()));
        n += c.type == type;
      }
    return n;
  }
};

uint64_t bo_address(const std::vector<uint32_t>& packet, size_t arg) {
  const nlohmann::json dc = describe_command(packet);
  return std::stoull(dc["kernel_args"]["bo"].at(arg).get<std::string>(), nullptr, 16);
}

}  // namespace

// Positions 700 and 703 of Qwen3-0.6B (contexts 701, 704: 176 positions per core both), and a
// sliding-window layer (window 512) at positions 599 and 899: the runtime sequences and their
// instruction words are identical; only where kv and kv_row start in the cache differs.
TEST(NpuKvPositionIndependent, TwoPositionsHaveByteIdenticalInstructionStreams) {
  for (const DType t : {DType::I8, DType::BF16}) {
    const Design a = decode_layer_design(t, qwen3_06b(701, 1024)), b = decode_layer_design(t, qwen3_06b(704, 1024));
    EXPECT_EQ(design_to_json(a)["sequence"], design_to_json(b)["sequence"]);
    EXPECT_EQ(stream(a), stream(b));
    EXPECT_EQ(kv_window_offset(a), 0);
    EXPECT_EQ(kv_window_offset(b), 0);
    EXPECT_EQ(kv_row_offset(a), 700 * 128 * 2);
    EXPECT_EQ(kv_row_offset(b) - kv_row_offset(a), 3 * 128 * 2);

    const Design la = decode_layer_design(t, qwen3_06b(600, 1024, 512)),
                 lb = decode_layer_design(t, qwen3_06b(900, 1024, 512));
    EXPECT_EQ(stream(la), stream(lb));
    EXPECT_EQ(kv_window_offset(la), (600 - 512) * 128 * 2);
    EXPECT_EQ(kv_window_offset(lb), (900 - 512) * 128 * 2);
    EXPECT_EQ(kv_row_offset(lb), 899 * 128 * 2);
  }
  // Another split (704 -> 705: 177 positions per core) is another stream.
  EXPECT_NE(stream(decode_layer_design(DType::I8, qwen3_06b(704, 1024))),
            stream(decode_layer_design(DType::I8, qwen3_06b(705, 1024))));
}

// Through the runtime: the second token loads nothing (no DEV or CMD BO), and its packet is the
// first one's but for the kv_row address (and kv's, past a sliding window), which moves by the
// rows between them inside the same cache BO.
TEST(NpuKvPositionIndependent, PacketsDifferOnlyInTheKvArgumentAddresses) {
  for (const int64_t window : {int64_t(0), int64_t(40)}) {
    SCOPED_TRACE("window " + std::to_string(window));
    const Design a = decode_layer_design(DType::I8, small(97, 256, window));
    const Design b = decode_layer_design(DType::I8, small(100, 256, window));
    ASSERT_EQ(a.name, b.name);
    Runner r(a, "packets" + std::to_string(window));
    const std::vector<uint32_t> pa = r.run(a);
    const size_t dev = r.creates(3), cmd = r.creates(4);
    const std::vector<uint32_t> pb = r.run(b);
    EXPECT_EQ(r.creates(3), dev) << "a second instruction stream was loaded";
    EXPECT_EQ(r.creates(4), cmd) << "a second command BO was made";
    EXPECT_EQ(r.rt->loaded_sequences(), 1u);
    ASSERT_EQ(pa.size(), pb.size());
    const size_t kv = arg_of(a, "kv"), kv_row = arg_of(a, "kv_row");
    const int64_t rows = 3;  // positions 96 -> 99
    EXPECT_EQ(int64_t(bo_address(pb, kv_row) - bo_address(pa, kv_row)), rows * 64 * 2);
    EXPECT_EQ(int64_t(bo_address(pb, kv) - bo_address(pa, kv)), window > 0 ? rows * 64 * 2 : 0);
    for (size_t i = 0; i < a.args.size(); ++i)
      if (i != kv && i != kv_row) {
        EXPECT_EQ(bo_address(pa, i), bo_address(pb, i)) << a.args[i].name;
      }
    // Word by word: the packets differ only in the words holding those addresses.
    nlohmann::json ja = describe_command(pa), jb = describe_command(pb);
    for (nlohmann::json* j : {&ja, &jb}) (*j)["kernel_args"].erase("bo"), j->erase("words");
    EXPECT_EQ(ja, jb);
    size_t differing = 0;
    for (size_t i = 0; i < pa.size(); ++i) differing += pa[i] != pb[i];
    EXPECT_GE(differing, 1u);
    EXPECT_LE(differing, window > 0 ? 4u : 2u);
  }
}

// 480 tokens (contexts 1..480) of one layer: a new stream only when the per-core split changes
// (every 16 tokens here), the loaded sequences at most max_loaded_sequences, and the DEV heap
// never above that many streams (before: one stream per token, none freed).
TEST(NpuKvPositionIndependent, LongRunKeepsLoadedStreamsAndHeapBounded) {
  // 30 context splits against 4 loaded sequences exercise the eviction many times over; a longer
  // run only costs time (over a minute under the sanitizers at 2000 tokens).
  constexpr int64_t kTokens = 480;
  DeviceRuntimeOptions o;
  o.max_loaded_sequences = 4;
  const Design first = decode_layer_design(DType::I8, tiny(1, kTokens));
  Runner r(first, "long", o);
  std::set<std::vector<uint32_t>> distinct;
  uint64_t largest = 0;
  for (int64_t ctx = 1; ctx <= kTokens; ++ctx) {
    const Design d = decode_layer_design(DType::I8, tiny(ctx, kTokens));
    if (ctx % 97 == 1 || distinct.size() < 3) {  // lowering every token would dominate the run time
      const std::vector<uint32_t> s = stream(d);
      largest = std::max<uint64_t>(largest, (s.size() * 4 + 4095) / 4096 * 4096);
      distinct.insert(s);
    }
    r.run(d);
    ASSERT_LE(r.rt->loaded_sequences(), o.max_loaded_sequences) << "context " << ctx;
  }
  const size_t streams = r.creates(3) - 1;  // DEV BOs: the instruction streams and the one PDI
  // ceil(480 / 16) = 30 splits: one stream each, far fewer than the 480 tokens.
  EXPECT_LE(streams, size_t(30 + 1));
  EXPECT_GE(streams, size_t(24));
  EXPECT_LE(r.io->heap_used(), uint64_t(o.max_loaded_sequences + 1) * largest + (1u << 20));
  EXPECT_LE(r.io->heap_peak(), uint64_t(o.max_loaded_sequences + 2) * largest + (1u << 20));
  EXPECT_LE(r.rt->loaded_instruction_bytes(), o.max_loaded_sequences * largest);
}

// A view past the cache BO (a design for a larger cache than the buffer) is refused naming the
// design and the argument; a cache of another layout is refused too; and the validator refuses a
// fill past the kv argument naming the step.
TEST(NpuKvPositionIndependent, ViewsPastTheCacheAreRefusedByName) {
  const Design d = decode_layer_design(DType::I8, small(100, 256));
  std::vector<uint8_t> small_cache(size_t(kv_cache_bytes(d)) / 2);
  try {
    kv_views(d, small_cache);
    ADD_FAILURE() << "no error";
  } catch (const std::out_of_range& e) {
    EXPECT_NE(std::string(e.what()).find(d.name), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("runs past the cache"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("argument kv"), std::string::npos) << e.what();
  }
  std::vector<uint8_t> larger(size_t(kv_cache_bytes(d)) + 4096);
  EXPECT_THROW(kv_views(d, larger), std::invalid_argument);
  std::vector<uint8_t> exact(size_t(kv_cache_bytes(d)));
  const KvViews v = kv_views(d, exact);
  EXPECT_EQ(v.window.data(), exact.data());
  EXPECT_EQ(v.row.data(), exact.data() + kv_row_offset(d));
  EXPECT_EQ(v.row.data() + v.row.size(), exact.data() + exact.size());

  Design bad = d;
  for (SeqStep& st : bad.sequence)
    if (st.op == SeqOp::Fill && bad.args[size_t(st.arg)].name == "kv") {
      st.pattern.offset += bad.args[size_t(st.arg)].bytes / st.pattern.elem_bytes;
      break;
    }
  try {
    validate_design(bad);
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("of host argument 'kv'"), std::string::npos) << e.what();
  }
}

// The dry-run driver reuses a closed DEV BO's heap range (first fit), as the driver's range
// allocator does, so freed instruction streams do not exhaust the 64 MiB heap.
TEST(NpuKvPositionIndependent, DryRunHeapReusesClosedDevRanges) {
  auto p = std::make_unique<driver::DryRunIo>();
  driver::DryRunIo* io = p.get();
  driver::Device dev(std::move(p));
  driver::BufferObject heap(dev, driver::BoType::DevHeap, kDevHeapBytes);
  auto a = std::make_unique<driver::BufferObject>(dev, driver::BoType::Dev, 6424);
  driver::BufferObject b(dev, driver::BoType::Dev, 3 * 4096);
  const uint64_t first = a->device_address();
  EXPECT_EQ(b.device_address(), first + 8192);
  EXPECT_EQ(io->heap_used(), 8192u + 3 * 4096);
  a.reset();
  EXPECT_EQ(io->heap_used(), 3u * 4096);
  driver::BufferObject c(dev, driver::BoType::Dev, 4096);  // fits the freed range
  EXPECT_EQ(c.device_address(), first);
  driver::BufferObject d(dev, driver::BoType::Dev, 8192);  // does not: after b
  EXPECT_EQ(d.device_address(), first + 8192 + 3 * 4096);
  EXPECT_EQ(io->heap_peak(), 3u * 4096 + 4096 + 8192);  // b, c, d
  // 20000 streams of 6.4 KiB loaded and freed one after another never exhaust the heap.
  for (int i = 0; i < 20000; ++i) driver::BufferObject s(dev, driver::BoType::Dev, 6424);
  EXPECT_EQ(io->heap_peak(), 3u * 4096 + 4096 + 8192 + 8192);
}
