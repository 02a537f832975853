// A compute graph: values (tensors) and nodes (ops over values), in topological order because
// nodes can only consume values that already exist. The executor places each node on the first
// backend that supports it and records where it ran and how long it took.
#pragma once
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/backend.h"
#include "core/op.h"
#include "core/tensor.h"

namespace xdna {

using ValueId = int;

struct Node {
  OpKind op;
  OpAttrs attrs;
  std::vector<ValueId> inputs;
  ValueId output = -1;
  std::string name;
};

struct Value {
  Tensor tensor;      // set for inputs/constants at build time, for node outputs by the executor
  int producer = -1;  // node index, -1 for inputs/constants
  std::string name;
};

class Graph {
 public:
  ValueId input(const std::string& name, Tensor t = {});
  ValueId add(OpKind op, std::vector<ValueId> inputs, OpAttrs attrs = {}, std::string name = "");
  void set(ValueId v, Tensor t);  // bind an input before a run
  const Tensor& get(ValueId v) const;
  // Marks v as a result the caller reads after the run. Once a graph has any marked output, the
  // executor frees every other node result after its last consumer has run (peak memory, and
  // fresh pages for every op otherwise); results nothing consumes are always kept.
  void mark_output(ValueId v);
  const std::vector<ValueId>& outputs() const { return outputs_; }

  const std::vector<Node>& nodes() const { return nodes_; }
  std::vector<Value>& values() { return values_; }
  // Node i's attributes, for a graph kept and run again with some of them changed (a decode
  // step's position: models/decoder.cpp).
  OpAttrs& attrs(size_t node) { return nodes_.at(node).attrs; }

 private:
  std::vector<Node> nodes_;
  std::vector<Value> values_;
  std::vector<ValueId> outputs_;
};

struct OpRecord {
  std::string node;     // node name (or op name when unnamed)
  OpKind op;
  std::string backend;  // where it ran
  bool fallback;        // true when the preferred backend could not run it
  double ms;
};

struct RunReport {
  std::vector<OpRecord> ops;
  int fallbacks() const;
  // One line per op kind and backend: count and total time.
  std::string summary() const;
  nlohmann::json to_json() const;
};

class Executor {
 public:
  // Backends in order of preference; the last must support every op (the host backend).
  explicit Executor(std::vector<Backend*> backends);
  RunReport run(Graph& g);

 private:
  std::vector<Backend*> backends_;
};

}  // namespace xdna
