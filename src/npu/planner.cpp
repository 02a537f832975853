#include "npu/planner.h"

#include <cstdio>
#include <map>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace xdna::npu {

namespace {

int64_t norm_axis(int64_t axis, size_t rank, const Node& n) {
  const int64_t r = int64_t(rank);
  if (axis < 0) axis += r;
  if (axis < 0 || axis >= r)
    throw std::invalid_argument("planner: node '" + n.name + "' has axis outside its rank");
  return axis;
}

}  // namespace

ValueInfo infer_output(const Node& n, std::span<const ValueInfo> in) {
  auto need = [&](size_t k) {
    if (in.size() < k)
      throw std::invalid_argument("planner: node '" + n.name + "' has too few inputs");
  };
  need(1);
  Shape s = in[0].shape;
  switch (n.op) {
    case OpKind::MatMul:
      need(2);
      if (s.empty() || in[1].shape.size() != 2)
        throw std::invalid_argument("planner: matmul '" + n.name + "' has no [out, in] weights");
      s.back() = in[1].shape[0];
      break;
    case OpKind::Add: case OpKind::Mul: case OpKind::Scale: case OpKind::LayerNorm:
    case OpKind::RMSNorm: case OpKind::Gelu: case OpKind::GeluTanh: case OpKind::Silu:
    case OpKind::Relu: case OpKind::Softmax: case OpKind::Rope:
      break;
    case OpKind::Attention:
      need(3);
      if (s.size() != 3 || in[2].shape.size() != 3)
        throw std::invalid_argument("planner: attention '" + n.name + "' wants [T, H, D] inputs");
      s[2] = in[2].shape[2];
      break;
    case OpKind::Embedding:
      need(2);
      s = {shape_numel(in[1].shape), in[0].shape.at(1)};
      break;
    case OpKind::Concat: {
      const int64_t a = norm_axis(n.attrs.axis, s.size(), n);
      for (size_t i = 1; i < in.size(); ++i) s[size_t(a)] += in[i].shape.at(size_t(a));
      break;
    }
    case OpKind::Slice: {
      const int64_t a = norm_axis(n.attrs.axis, s.size(), n);
      const int64_t end = std::min(n.attrs.end, s[size_t(a)]);
      s[size_t(a)] = std::max<int64_t>(0, end - n.attrs.start);
      break;
    }
    case OpKind::Transpose:
      std::swap(s.at(size_t(norm_axis(n.attrs.dim0, s.size(), n))),
                s.at(size_t(norm_axis(n.attrs.dim1, s.size(), n))));
      break;
    case OpKind::Reshape: {
      s = n.attrs.shape;
      int64_t known = 1, free = -1;
      for (size_t i = 0; i < s.size(); ++i)
        if (s[i] == -1) free = int64_t(i);
        else known *= s[i];
      if (free >= 0) s[size_t(free)] = known ? shape_numel(in[0].shape) / known : 0;
      break;
    }
    default:
      throw std::invalid_argument("planner: cannot infer the shape of " +
                                  std::string(op_name(n.op)) + " node '" + n.name + "'");
  }
  return {s, DType::F32, 0};
}

Plan plan_graph(const Graph& g, XclbinPolicy policy) {
  Plan plan;
  plan.policy = policy;
  DesignCache cache(policy);
  // Shapes of every value: inputs and constants from their tensors, node outputs inferred.
  std::vector<ValueInfo> info(const_cast<Graph&>(g).values().size());
  for (size_t v = 0; v < info.size(); ++v) {
    const Tensor& t = g.get(ValueId(v));
    if (t.defined()) info[v] = value_info(t);
  }
  std::vector<Invocation> invocations;
  std::vector<ValueInfo> args;
  for (const Node& n : g.nodes()) {
    args.clear();
    for (ValueId v : n.inputs) args.push_back(info[size_t(v)]);
    info[size_t(n.output)] = infer_output(n, args);
    const OpChoice c = cache.choose(n, args);
    PlannedOp op{n.name, n.op, info[size_t(n.output)].shape, c.on_npu, {}, c.reason, 0};
    if (c.on_npu) {
      op.design = c.design->name;
      op.modelled_us = model_design(*c.design).total_s * 1e6;
      invocations.push_back({c.design.get(), c.xclbin, true});
    }
    plan.ops.push_back(std::move(op));
  }
  // The cache owns the designs until here: price them before it goes away.
  plan.cost = cost_report(invocations);
  return plan;
}

int Plan::npu_ops() const {
  int k = 0;
  for (const PlannedOp& o : ops) k += o.on_npu;
  return k;
}
int Plan::host_ops() const { return int(ops.size()) - npu_ops(); }

std::string Plan::text() const {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line, "%-28s %-11s %-16s %-9s %s\n", "node", "op", "output",
                "placement", "design (modelled us) / host fallback reason");
  out += line;
  for (const PlannedOp& o : ops) {
    if (o.on_npu)
      std::snprintf(line, sizeof line, "%-28s %-11s %-16s %-9s %s (%.1f)\n", o.node.c_str(),
                    std::string(op_name(o.op)).c_str(), shape_str(o.out_shape).c_str(), "npu-sim",
                    o.design.c_str(), o.modelled_us);
    else
      std::snprintf(line, sizeof line, "%-28s %-11s %-16s %-9s %s\n", o.node.c_str(),
                    std::string(op_name(o.op)).c_str(), shape_str(o.out_shape).c_str(), "host",
                    o.reason.c_str());
    out += line;
  }
  std::snprintf(line, sizeof line, "%d ops on npu-sim, %d on host; xclbin policy: %s\n", npu_ops(),
                host_ops(), xclbin_policy_name(policy));
  out += line;
  out += cost.text();
  out += "(host ops are not timed here: all figures are the modelled NPU part only)\n";
  return out;
}

nlohmann::json Plan::to_json() const {
  nlohmann::json rows = nlohmann::json::array();
  for (const PlannedOp& o : ops) {
    nlohmann::json r = {{"node", o.node}, {"op", op_name(o.op)}, {"output", o.out_shape},
                        {"placement", o.on_npu ? "npu-sim" : "host"}};
    if (o.on_npu) {
      r["design"] = o.design;
      r["modelled_us"] = o.modelled_us;
    } else {
      r["reason"] = o.reason;
    }
    rows.push_back(std::move(r));
  }
  return {{"label", kModelledLabel},
          {"xclbin_policy", xclbin_policy_name(policy)},
          {"npu_ops", npu_ops()},
          {"host_ops", host_ops()},
          {"ops", rows},
          {"cost", cost.to_json()}};
}

}  // namespace xdna::npu
