// The fused topology's builder (design_families.h, "Fused decode designs"): one design's stage
// list (FusedSpec, design_families_fused_internal.h) laid out on whole columns of 4 cores. Per-core
// work and bytes are those of the busiest core (shapes are split with ceil, so some cores have
// padding rows).
#include <algorithm>
#include <stdexcept>

#include "npu/design_families_fused_internal.h"

namespace xdna::npu::gen::fused {

void check(bool ok, const std::string& family, const std::string& what) {
  if (!ok) throw std::invalid_argument(family + ": " + what);
}

namespace {

// Objects each stage takes from the core's DDR stream (the parts padded to whole objects).
std::vector<int64_t> stage_objects(const FusedSpec& f) {
  std::vector<int64_t> n;
  int64_t at = 0;  // bytes into the current part
  for (const Stage& s : f.stages) {
    if (s.part_start) at = 0;
    n.push_back(ceil_div(at + s.bytes, kObj) - ceil_div(at, kObj));
    at += s.bytes;
  }
  return n;
}

// Every core's program from the stage list (design.h CoreStep).
void add_programs(Design& d, const FusedSpec& f, int64_t stream_objects) {
  const std::vector<int64_t> objs = stage_objects(f);
  int64_t total = 0, exchanges = 0;
  for (size_t i = 0; i < objs.size(); ++i) total += objs[i], exchanges += f.stages[i].exchanges;
  check(total == stream_objects, f.family, "stages take " + std::to_string(total) + " stream objects of " +
        std::to_string(stream_objects));
  check(exchanges == f.exchanges, f.family, "stages make " + std::to_string(exchanges) + " exchanges of " +
        std::to_string(f.exchanges));
  for (TileUse& t : d.tiles) {
    if (!t.has_kernel) continue;
    const int c = t.at.col, r = t.at.row - kAie2p.first_compute_row;
    const std::string k = f.kernel.name;
    std::vector<CoreStep>& p = t.program;
    // acquire `fifo`, call `fn` on its object, release; repeated `n` times.
    auto use = [&](const std::string& fifo, const std::string& fn, int64_t n) {
      if (n <= 0) return;
      if (n > 1) p.push_back({CoreOp::Loop, "", {}, {}, n, 3});
      p.push_back({CoreOp::Acquire, fifo, {}, {}});
      p.push_back({CoreOp::Call, fn, {fifo}, t.kernel.args});
      p.push_back({CoreOp::Release, fifo, {}, {}});
    };
    for (size_t i = 0; i < f.stages.size(); ++i) {
      const Stage& s = f.stages[i];
      use(crname("ddr", c, r), k + "_" + s.name, objs[i]);
      if (s.exchanges > 0) {
        const std::string slice = crname("slice", c, r);
        if (s.exchanges > 1) p.push_back({CoreOp::Loop, "", {}, {}, s.exchanges, 6});
        use(slice, k + "_" + s.name + "_give", 1);
        use("act", k + "_" + s.name + "_take", 1);
      }
      for (const std::string& out : s.outs) {
        const std::string fifo = out == "out" ? crname("out", c, r) : out;
        const ObjectFifo* of = d.find_fifo(fifo);
        if (of && of->producer.tile == t.at) use(fifo, k + "_" + s.name + "_" + out, 1);
      }
    }
    check_core_program(d.name, t);
  }
}

}  // namespace

Design build_fused(const FusedSpec& f) {
  check(f.columns >= 1 && f.columns <= kAie2p.columns, f.family,
        "columns must be 1.." + std::to_string(kAie2p.columns) + ", got " + std::to_string(f.columns));
  check(!(f.exchanges > 0 && f.join_bytes > 0), f.family,
        "an exchanging design uses core S2MM1 and MM2S0 for the exchange");
  Design d;
  d.family = f.family;
  d.name = f.name;
  d.params = f.params;
  d.params["columns"] = f.columns;
  d.params["object_bytes"] = kObj;
  auto tile = [&](TileCoord at) -> TileUse& {
    for (TileUse& t : d.tiles)
      if (t.at == at) return t;
    d.tiles.push_back({at, {}, false, {}});
    return d.tiles.back();
  };
  auto fifo = [&](const std::string& name, FifoEnd p, std::vector<FifoEnd> cons, int depth,
                  int64_t elem, int64_t objects) {
    tile(p.tile);
    for (const FifoEnd& c : cons) tile(c.tile);
    d.fifos.push_back({name, p, std::move(cons), depth, elem, objects});
  };
  auto arg = [&](const std::string& name, int64_t bytes) {
    for (size_t i = 0; i < d.args.size(); ++i)
      if (d.args[i].name == name) {
        d.args[i].bytes = std::max(d.args[i].bytes, bytes);
        return int(i);
      }
    d.args.push_back({name, bytes});
    return int(d.args.size()) - 1;
  };
  const int last_col = f.columns - 1;
  const TileCoord last_core = core(last_col, kCores - 1);

  // DDR stream: objects per core over all parts.
  int64_t objects = 0;
  for (const Part& p : f.parts) objects += ceil_div(p.bytes_per_core, kObj);
  check(objects > 0, f.family, "nothing to stream");
  for (int c = 0; c < f.columns; ++c) {
    const std::string in = cname("ddr", c) + "_l3l2";
    fifo(in, {shim(c), 0}, {{mem(c), 0}}, 2, kObj * kCores, objects);
    FifoLink split{{in}, {}, {}};
    for (int r = 0; r < kCores; ++r) {
      fifo(crname("ddr", c, r), {mem(c), r}, {{core(c, r), 0}}, 2, kObj, objects);
      split.outputs.push_back(crname("ddr", c, r));
      split.offsets.push_back(r * kObj);
    }
    d.links.push_back(split);
    for (int r = 0; r < kCores; ++r) {
      TileUse& t = tile(core(c, r));
      t.has_kernel = true;
      t.kernel = f.kernel;
      if (f.core_index) t.kernel.args["core"] = c * kCores + r;
      t.buffers.push_back({"stack", kStackBytes, DType::I8});
      for (const Buffer& b : f.core_buffers) t.buffers.push_back(b);
    }
  }
  if (f.exchanges > 0) {
    // Memtile chain: column c joins [what came from the left | its 4 slices].
    const int64_t s = f.slice_bytes;
    for (int c = 0; c < f.columns; ++c) {
      FifoLink join{{}, {}, {}};
      if (c > 0) {
        join.inputs.push_back(cname("chain", c - 1));
        join.offsets.push_back(0);
      }
      for (int r = 0; r < kCores; ++r) {
        fifo(crname("slice", c, r), {core(c, r), 0}, {{mem(c), 1 + r}}, 2, s, f.exchanges);
        join.inputs.push_back(crname("slice", c, r));
        join.offsets.push_back((int64_t(c) * kCores + r) * s);
      }
      const int64_t out = (int64_t(c) + 1) * kCores * s;
      if (c < last_col) {
        fifo(cname("chain", c), {mem(c), 5}, {{mem(c + 1), 5}}, 2, out, f.exchanges);
        join.outputs.push_back(cname("chain", c));
      } else {
        std::vector<FifoEnd> all;
        for (int cc = 0; cc < f.columns; ++cc)
          for (int r = 0; r < kCores; ++r) all.push_back({core(cc, r), 1});
        fifo("act", {mem(c), 4}, all, 2, out, f.exchanges);
        join.outputs.push_back("act");
      }
      d.links.push_back(join);
    }
  }
  if (f.join_bytes > 0)
    for (int c = 0; c < f.columns; ++c) {
      FifoLink join{{}, {cname("out", c) + "_l2l3"}, {}};
      for (int r = 0; r < kCores; ++r) {
        fifo(crname("out", c, r), {core(c, r), 0}, {{mem(c), 1 + r}}, 2, f.join_bytes, f.join_objects);
        join.inputs.push_back(crname("out", c, r));
        join.offsets.push_back(r * f.join_bytes);
      }
      fifo(cname("out", c) + "_l2l3", {mem(c), 4}, {{shim(c), 0}}, 2, kCores * f.join_bytes, f.join_objects);
      d.links.push_back(join);
    }
  if (f.result_bytes > 0) fifo("result", {last_core, 1}, {{shim(last_col), 0}}, 1, f.result_bytes, 1);
  if (f.kv_new_bytes > 0) fifo("kv_new", {core(0, 0), 1}, {{shim(0), 1}}, 1, f.kv_new_bytes, 1);
  if (!f.stages.empty()) add_programs(d, f, objects);

  // Runtime sequence: per column its stream parts in order, then the drains, then the waits.
  const int64_t W = 4;
  for (int c = 0; c < f.columns; ++c) {
    int queued = 0;  // fills on this column's shim MM2S0 not yet awaited
    for (const Part& p : f.parts) {
      const int64_t objs = ceil_div(p.bytes_per_core, kObj);
      if (objs == 0) continue;
      if (queued == kAie2p.task_queue_depth) {  // aie2p.md: task queue, 4 tasks per channel
        d.sequence.push_back({SeqOp::Wait, cname("ddr", c) + "_l3l2", 0, {}});
        queued = 0;
      }
      ++queued;
      AccessPattern pat;
      if (!p.fills.empty()) {  // read in place: the fills' waits follow the task queue too
        --queued;
        for (const AccessPattern& fp : p.fills[size_t(c)]) {
          if (queued == kAie2p.task_queue_depth) {
            d.sequence.push_back({SeqOp::Wait, cname("ddr", c) + "_l3l2", 0, {}});
            queued = 0;
          }
          ++queued;
          d.sequence.push_back({SeqOp::Fill, cname("ddr", c) + "_l3l2", arg(p.arg, p.arg_bytes), fp});
        }
      } else if (p.replicated) {  // one padded copy, sent to each of the 4 cores object by object
        const int a = arg(p.arg, objs * kObj);
        pat = {4, 0, {{kObj / W, 1}, {kCores, 0}, {objs, kObj / W}}, 1};
        d.sequence.push_back({SeqOp::Fill, cname("ddr", c) + "_l3l2", a, pat});
      } else {
        const int64_t col_bytes = objs * kObj * kCores;
        const int a = arg(p.arg, col_bytes * f.columns);
        d.sequence.push_back({SeqOp::Fill, cname("ddr", c) + "_l3l2", a,
                              contiguous_pattern(c * col_bytes, col_bytes)});
      }
    }
    if (f.join_bytes > 0) {
      const int64_t col = kCores * f.join_bytes * f.join_objects;
      d.sequence.push_back({SeqOp::Drain, cname("out", c) + "_l2l3", arg("out", col * f.columns),
                            contiguous_pattern(c * col, col)});
    }
  }
  if (f.result_bytes > 0)
    d.sequence.push_back({SeqOp::Drain, "result", arg("result", f.result_bytes),
                          contiguous_pattern(0, f.result_bytes)});
  if (f.kv_new_bytes > 0 && f.kv_new_drains.empty())
    d.sequence.push_back({SeqOp::Drain, "kv_new", arg("kv_new", f.kv_new_bytes),
                          contiguous_pattern(0, f.kv_new_bytes)});
  for (size_t i = 0; i < f.kv_new_drains.size(); ++i) {  // the row's pieces, in stream order
    if (i > 0 && i % size_t(kAie2p.task_queue_depth) == 0) d.sequence.push_back({SeqOp::Wait, "kv_new", 0, {}});
    const int a = f.kv_new_drain_args.empty()
                      ? arg(f.kv_new_arg, f.kv_new_arg_bytes)
                      : arg(f.kv_new_drain_args.at(i).first, f.kv_new_drain_args.at(i).second);
    d.sequence.push_back({SeqOp::Drain, "kv_new", a, f.kv_new_drains[i]});
  }
  for (int c = 0; c < f.columns; ++c) {
    if (f.join_bytes > 0) d.sequence.push_back({SeqOp::Wait, cname("out", c) + "_l2l3", 0, {}});
    d.sequence.push_back({SeqOp::Wait, cname("ddr", c) + "_l3l2", 0, {}});
  }
  if (f.result_bytes > 0) d.sequence.push_back({SeqOp::Wait, "result", 0, {}});
  if (f.kv_new_bytes > 0) d.sequence.push_back({SeqOp::Wait, "kv_new", 0, {}});
  validate_design(d);
  return d;
}

}  // namespace xdna::npu::gen::fused
