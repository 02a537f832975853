#include "core/graph.h"

#include <chrono>
#include <cstdio>
#include <mutex>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace xdna {

namespace {

// Every op allocates its output and the executor frees each result after its last reader, so a
// run allocates and frees the same few sizes over and over. glibc would return those blocks to
// the kernel (mmap for large blocks, heap trimming) and every op then pays page faults and the
// zeroing of fresh pages: ~5% of an encoder run at 128 tokens, more with 2 MiB pages. Keeping
// blocks up to 32 MiB (glibc's largest mmap threshold) in the heap, untrimmed, lets the next op
// reuse pages that are already mapped. Process-wide, set once, only raising the thresholds.
void keep_freed_memory() {
#if defined(__GLIBC__)
  static std::once_flag once;
  std::call_once(once, [] {
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 512 << 20);
  });
#endif
}

}  // namespace

ValueId Graph::input(const std::string& name, Tensor t) {
  values_.push_back(Value{std::move(t), -1, name});
  return static_cast<ValueId>(values_.size() - 1);
}

ValueId Graph::add(OpKind op, std::vector<ValueId> inputs, OpAttrs attrs, std::string name) {
  for (ValueId v : inputs)
    if (v < 0 || v >= static_cast<ValueId>(values_.size()))
      throw std::out_of_range("graph node '" + name + "' uses an undefined value");
  if (name.empty()) name = std::string(op_name(op)) + "." + std::to_string(nodes_.size());
  Node n{op, std::move(attrs), std::move(inputs), static_cast<ValueId>(values_.size()), name};
  values_.push_back(Value{{}, static_cast<int>(nodes_.size()), name});
  nodes_.push_back(std::move(n));
  return nodes_.back().output;
}

void Graph::set(ValueId v, Tensor t) {
  if (v < 0 || v >= static_cast<ValueId>(values_.size()) || values_[v].producer >= 0)
    throw std::invalid_argument("graph: value " + std::to_string(v) + " is not an input");
  values_[v].tensor = std::move(t);
}

const Tensor& Graph::get(ValueId v) const { return values_.at(v).tensor; }

void Graph::mark_output(ValueId v) {
  if (v < 0 || v >= static_cast<ValueId>(values_.size()))
    throw std::out_of_range("graph: output " + std::to_string(v) + " is not a value");
  outputs_.push_back(v);
}

int RunReport::fallbacks() const {
  int n = 0;
  for (const auto& r : ops) n += r.fallback;
  return n;
}

std::string RunReport::summary() const {
  std::map<std::pair<std::string, std::string>, std::pair<int, double>> agg;
  for (const auto& r : ops) {
    auto& a = agg[{std::string(op_name(r.op)), r.backend}];
    a.first += 1;
    a.second += r.ms;
  }
  std::string out;
  char line[256];
  for (const auto& [k, v] : agg) {
    std::snprintf(line, sizeof line, "%-14s %-22s %5d ops %10.3f ms\n", k.first.c_str(),
                  k.second.c_str(), v.first, v.second);
    out += line;
  }
  if (int f = fallbacks()) out += std::to_string(f) + " op(s) fell back to a later backend\n";
  return out;
}

nlohmann::json RunReport::to_json() const {
  nlohmann::json j = nlohmann::json::array();
  for (const auto& r : ops)
    j.push_back({{"node", r.node},
                 {"op", op_name(r.op)},
                 {"backend", r.backend},
                 {"fallback", r.fallback},
                 {"ms", r.ms}});
  return j;
}

Executor::Executor(std::vector<Backend*> backends) : backends_(std::move(backends)) {
  if (backends_.empty()) throw std::invalid_argument("executor needs at least one backend");
  keep_freed_memory();
}

RunReport Executor::run(Graph& g) {
  RunReport report;
  auto& values = g.values();
  const auto& nodes = g.nodes();
  // With marked outputs: the last node reading each node result, so it can be freed after that.
  std::vector<int> last_use(values.size(), -1);
  if (!g.outputs().empty()) {
    for (size_t i = 0; i < nodes.size(); ++i)
      for (ValueId v : nodes[i].inputs) last_use[v] = static_cast<int>(i);
    for (ValueId v : g.outputs()) last_use[v] = -1;
  }
  report.ops.reserve(nodes.size());
  // The op's inputs, as the span backends take. Slots are reassigned, not rebuilt: copying a
  // Tensor into a slot reuses the slot's shape and stride storage, so a run of hundreds of small
  // ops makes no allocations for them; clearing a slot (below) drops only the buffer reference.
  std::vector<Tensor> args;
  const Tensor none;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    if (args.size() < n.inputs.size()) args.resize(n.inputs.size());
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      const Value& in = values[n.inputs[k]];
      if (!in.tensor.defined())
        throw std::runtime_error("graph node '" + n.name + "': input '" + in.name + "' has no tensor bound");
      args[k] = in.tensor;
    }
    const std::span<const Tensor> inputs(args.data(), n.inputs.size());
    Backend* chosen = nullptr;
    bool fallback = false;
    for (Backend* b : backends_) {
      if (b->supports(n, inputs)) {
        chosen = b;
        break;
      }
      fallback = true;
    }
    if (!chosen)
      throw std::runtime_error("no backend can run '" + n.name + "' (" +
                               std::string(op_name(n.op)) + ")");
    const auto t0 = std::chrono::steady_clock::now();
    values[n.output].tensor = chosen->compute(n, inputs);
    const auto t1 = std::chrono::steady_clock::now();
    report.ops.push_back({n.name, n.op, std::string(chosen->name()), fallback,
                          std::chrono::duration<double, std::milli>(t1 - t0).count()});
    // Drop our references first, so freeing below releases the memory.
    for (size_t k = 0; k < n.inputs.size(); ++k) args[k] = none;
    for (ValueId v : n.inputs)
      if (last_use[v] == static_cast<int>(i) && values[v].producer >= 0) values[v].tensor = Tensor();
  }
  return report;
}

}  // namespace xdna
