#include "npu/planner.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
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

namespace {

// Appends node `n`'s row to the plan; an NPU op is priced and its design joins the invocations.
void add_op(Plan& plan, std::vector<Invocation>& invocations, const Node& n, const Shape& out, const OpChoice& c) {
  PlannedOp op{n.name, n.op, out, c.on_npu, {}, c.reason, 0};
  if (c.on_npu) {
    op.design = c.design->name;
    op.modelled_us = model_design(*c.design).total_s * 1e6;
    invocations.push_back({c.design.get(), c.xclbin, true});
  }
  plan.ops.push_back(std::move(op));
}

}  // namespace

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
    add_op(plan, invocations, n, info[size_t(n.output)].shape, cache.choose(n, args));
  }
  // The cache owns the designs until here: price them before it goes away.
  plan.cost = cost_report(invocations);
  return plan;
}

Plan plan_nodes(std::span<const SeenNode> nodes, XclbinPolicy policy) {
  Plan plan;
  plan.policy = policy;
  DesignCache cache(policy);
  std::vector<Invocation> invocations;
  for (const SeenNode& s : nodes) {
    Shape out;
    try {
      out = infer_output(s.node, s.inputs).shape;
    } catch (const std::invalid_argument&) {
      // ops the planner has no shape rule for (cache writes, convolutions): shown without one
    }
    add_op(plan, invocations, s.node, out, cache.choose(s.node, s.inputs));
  }
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

// ---- Decoder plans ----------------------------------------------------------------------------

namespace xdna::npu {

namespace {

// Generated designs, kept alive for the invocations that point at them.
// Keyed by name and context: one design (configuration) may be invoked at several contexts
// (Gemma's local and global layers), each priced with its own KV bytes.
struct DesignPool {
  std::map<std::string, std::shared_ptr<const Design>> by_name;
  const Design* add(Design d) {
    auto ctx = d.params.find("context");
    const std::string name = d.name + "@" + std::to_string(ctx == d.params.end() ? 0 : ctx->second);
    auto it = by_name.find(name);
    if (it == by_name.end()) it = by_name.emplace(name, std::make_shared<const Design>(std::move(d))).first;
    return it->second.get();
  }
};

// What a decode_layer design moves between DDR and its resident KV cache (the "kv" and "kv_row"
// arguments, two views of it).
struct KvTraffic {
  int64_t read = 0, write = 0;
};
KvTraffic kv_traffic(const Design& d) {
  KvTraffic t;
  for (const SeqStep& s : d.sequence) {
    if (s.op == SeqOp::Wait) continue;
    if (const std::string& a = d.args.at(size_t(s.arg)).name;
        a != "kv" && a != "kv_row" && a != "kv_scales" && a != "kv_row_scales")
      continue;  // (an int8 cache's row scales count as KV traffic)
    (s.op == SeqOp::Fill ? t.read : t.write) += s.pattern.bytes();
  }
  return t;
}

int64_t weight_bytes_of(DType t, const DecodeLayerShape& s) {
  const int64_t q = s.heads * s.head_dim, kv = s.kv_heads * s.head_dim;
  return dtype_bytes(t, s.hidden) * (q + 2 * kv + 2 * s.intermediate) + dtype_bytes(t, q) * s.hidden +
         dtype_bytes(t, s.intermediate) * s.hidden;
}

}  // namespace

DecoderPlan plan_decoder(const DecoderPlanInput& m, const DecoderPlanOptions& o) {
  if (m.layers <= 0 || m.vocab <= 0)
    throw std::invalid_argument("plan_decoder: " + m.name + " has " + std::to_string(m.layers) +
                                " layers and a vocabulary of " + std::to_string(m.vocab));
  if (o.context < 1) throw std::invalid_argument("plan_decoder: context must be at least 1");
  if (o.kv != DType::BF16 && o.kv != DType::I8 && o.kv != DType::I4)
    throw std::invalid_argument("plan_decoder: the KV cache must be bf16, int8 or int4, not " +
                                std::string(dtype_name(o.kv)));
  if ((o.kv == DType::I8 || m.shape.kv_int8) && o.weights != DType::I8)
    throw std::invalid_argument("plan_decoder: an int8 KV cache needs int8 weights (decode_layer_int8_kv8), not " +
                                std::string(dtype_name(o.weights)));
  if ((o.kv == DType::I4 || m.shape.kv_int4) && o.weights != DType::I8)
    throw std::invalid_argument("plan_decoder: an int4 KV cache needs int8 weights (decode_layer_int8_kv4), not " +
                                std::string(dtype_name(o.weights)));
  DecoderPlan plan;
  plan.model = m;
  plan.options = o;
  DesignPool pool;
  std::vector<Invocation> inv;
  auto invoke = [&](Design d) {
    const Design* p = pool.add(std::move(d));
    inv.push_back({p, "decode", inv.empty()});  // one xclbin, one dispatch per token
    return p->name;
  };
  const int64_t kv_dim = m.shape.kv_heads * m.shape.head_dim;
  for (int64_t i = 0; i < m.layers; ++i) {
    DecoderLayerPlan lp;
    lp.layer = i;
    lp.local = m.sliding_window > 0 && i < int64_t(m.layer_is_local.size()) && m.layer_is_local[size_t(i)];
    DecodeLayerShape s = m.shape;
    // o.kv, when not bf16, sets the cache's precision (else the model's shape does).
    s.kv_int8 = o.kv == DType::I8 || (o.kv == DType::BF16 && m.shape.kv_int8);
    s.kv_int4 = o.kv == DType::I4 || (o.kv == DType::BF16 && m.shape.kv_int4);
    s.context = lp.local ? std::min(o.context, m.sliding_window) : o.context;
    s.window = lp.local ? m.sliding_window : 0;  // a runtime parameter: local and global layers share the design
    // decode_layer: the token at position context - 1 of a resident cache of `context` positions
    // (the design applies the window itself).
    DecodeLayerShape sl = s;
    sl.context = o.context;
    sl.capacity = o.context;
    try {
      const Design d = decode_layer_design(o.weights, sl, o.columns);
      const KvTraffic kv = kv_traffic(d);
      plan.kv_read_bytes += kv.read;
      plan.kv_write_bytes += kv.write;
      lp.designs.push_back(invoke(d));
      lp.fused = true;
    } catch (const std::invalid_argument& e) {
      // attention_decode reads the packed cache; the host writes the new row (an upload).
      plan.kv_read_bytes += 2 * s.context * kv_dim * 2;
      plan.kv_upload_bytes += 2 * kv_dim * 2;
      // Fall back to the fused blocks, then to plain GEMVs; a block that does not fit stays on
      // the host (named in the note).
      lp.note = e.what();
      const int64_t q = s.heads * s.head_dim;
      auto block = [&](const std::string& what, const std::vector<std::function<Design()>>& makes) {
        std::vector<std::string> names;
        try {
          for (const auto& make : makes) names.push_back(invoke(make()));
        } catch (const std::invalid_argument& err) {
          inv.resize(inv.size() - names.size());
          plan.host_ops.push_back({"layer " + std::to_string(i) + " " + what, err.what()});
          return false;
        }
        lp.designs.insert(lp.designs.end(), names.begin(), names.end());
        return true;
      };
      const DType t = o.weights;
      const int cols = o.columns;
      block("qkv+rope", {[&] { return qkv_rope_design(t, s, cols); }});
      block("attention", {[&] { return attention_decode_design(s, cols); }});
      block("o-proj", {[&] { return gemv_design(t, s.hidden, q, cols); }});
      if (!block("mlp", {[&] { return mlp_fused_design(t, s, cols); }}))
        block("mlp (unfused)", {[&] { return gemv_design(t, s.intermediate, s.hidden, cols); },
                                [&] { return gemv_design(t, s.intermediate, s.hidden, cols); },
                                [&] { return elementwise_design(s.gelu ? "gelu" : "silu", s.intermediate, cols); },
                                [&] { return elementwise_design("mul", s.intermediate, cols); },
                                [&] { return gemv_design(t, s.hidden, s.intermediate, cols); }});
    }
    plan.layers.push_back(std::move(lp));
  }
  // LM head (with the final norm): split the vocabulary into equal pieces until one validates;
  // equal pieces share one design, so they cost no configure.
  std::string last_error;
  for (int64_t pieces = 1; pieces <= 64 && plan.lm_head.empty(); pieces *= 2) {
    try {
      const Design d = lm_head_design(o.weights, (m.vocab + pieces - 1) / pieces, m.shape.hidden, o.columns);
      for (int64_t k = 0; k < pieces; ++k) plan.lm_head.push_back(invoke(d));
    } catch (const std::invalid_argument& e) {
      last_error = e.what();
    }
  }
  if (plan.lm_head.empty()) plan.host_ops.push_back({"lm_head", last_error});
  plan.host_ops.push_back({"embedding", "one row gather per token: the host writes hidden x 2 bytes into the input buffer"});
  plan.host_ops.push_back({"sampling", "reads the logits buffer (vocab x 4 bytes) after the dispatch"});
  plan.weight_bytes = m.layers * weight_bytes_of(o.weights, m.shape) +
                      (plan.lm_head.empty() ? 0 : dtype_bytes(o.weights, m.shape.hidden) * m.vocab);
  plan.cost = cost_report(inv);
  std::vector<const Design*> run;
  for (const Invocation& i : inv) run.push_back(i.design);
  plan.ddr = ddr_items(run);
  // Steady state: the next token's first design follows this token's last one.
  if (inv.size() > 1 && inv.back().design->name != inv.front().design->name) {
    const double c = cost_param("configure_s");
    ++plan.cost.run.configures;
    plan.cost.run.configure_s += c;
    plan.cost.run.total_s += c;
    plan.cost.reconfig_s += c;
  }
  return plan;
}

std::string DecoderPlan::text() const {
  std::string out;
  char line[1024];
  const DecodeLayerShape& s = model.shape;
  std::snprintf(line, sizeof line,
                "%s (%s): %lld layers, hidden %lld, heads %lld/%lld x %lld, intermediate %lld, "
                "vocab %lld; weights %s, context %lld\n",
                model.name.c_str(), model.family.c_str(), (long long)model.layers, (long long)s.hidden,
                (long long)s.heads, (long long)s.kv_heads, (long long)s.head_dim,
                (long long)s.intermediate, (long long)model.vocab,
                std::string(dtype_name(options.weights)).c_str(), (long long)options.context);
  out += line;
  // Consecutive layers with the same designs on one line.
  for (size_t i = 0; i < layers.size();) {
    size_t j = i;
    while (j + 1 < layers.size() && layers[j + 1].designs == layers[i].designs) ++j;
    std::string names;
    for (const std::string& d : layers[i].designs) names += (names.empty() ? "" : " + ") + d;
    std::snprintf(line, sizeof line, "  layers %lld-%lld: %s%s\n", (long long)layers[i].layer,
                  (long long)layers[j].layer, names.c_str(), layers[i].fused ? " (whole layer fused)" : "");
    out += line;
    if (!layers[i].note.empty()) out += "    not fused: " + layers[i].note + "\n";
    i = j + 1;
  }
  std::string local;
  for (const DecoderLayerPlan& l : layers)
    if (l.local) local += (local.empty() ? "" : ",") + std::to_string(l.layer);
  if (!local.empty())
    out += "  sliding window " + std::to_string(model.sliding_window) + " (KV read at most " +
           std::to_string(std::min(options.context, model.sliding_window)) + " positions, local RoPE): layers " +
           local + "\n";
  if (!lm_head.empty()) {
    std::snprintf(line, sizeof line, "  lm head: %zu x %s\n", lm_head.size(), lm_head[0].c_str());
    out += line;
  }
  for (const auto& [op, why] : host_ops) out += "  host: " + op + " (" + why + ")\n";
  const int64_t other = cost.run.ddr_bytes - weight_bytes - kv_read_bytes - kv_write_bytes;
  std::snprintf(line, sizeof line,
                "per token: DDR %.1f MB = weights %.1f MB + KV read %.1f MB (resident cache, whole context) + "
                "KV write %.1f KB (the new row) + vectors/padding %.2f MB\n",
                double(cost.run.ddr_bytes) / 1e6, double(weight_bytes) / 1e6, double(kv_read_bytes) / 1e6,
                double(kv_write_bytes) / 1e3, double(other) / 1e6);
  out += line;
  for (const DdrItem& it : ddr) {
    std::snprintf(line, sizeof line, "  %-28s %10.3f MB  %5.2f%% of weights  (%s)\n", it.name.c_str(),
                  double(it.bytes) / 1e6, 100.0 * double(it.bytes) / double(std::max<int64_t>(1, weight_bytes)),
                  it.note.c_str());
    out += line;
  }
  std::snprintf(line, sizeof line, "per token: host -> device %.2f KB (embedding row, RoPE row%s%s)\n",
                double(host_upload_bytes()) / 1e3, model.sliding_window > 0 ? "s" : "",
                kv_upload_bytes > 0 ? ", unfused layers' KV rows" : "");
  out += line;
  out += cost.text();
  std::snprintf(line, sizeof line, "%.*s decode: %.2f ms/token = %.1f tok/s (not measured)\n",
                int(kModelledLabel.size()), kModelledLabel.data(), cost.run.total_s * 1e3, tok_per_s());
  out += line;
  return out;
}

int64_t DecoderPlan::host_upload_bytes() const {
  const int64_t rope_rows = model.sliding_window > 0 ? 2 : 1;  // Gemma 3: the local layers' own base
  return model.shape.hidden * 2 + rope_rows * model.shape.head_dim * 4 + kv_upload_bytes;
}

nlohmann::json DecoderPlan::to_json() const {
  nlohmann::json ls = nlohmann::json::array();
  for (const DecoderLayerPlan& l : layers) {
    nlohmann::json j = {{"layer", l.layer}, {"local", l.local}, {"fused", l.fused}, {"designs", l.designs}};
    if (!l.note.empty()) j["not_fused_because"] = l.note;
    ls.push_back(std::move(j));
  }
  nlohmann::json items = nlohmann::json::array();
  for (const DdrItem& it : ddr) items.push_back({{"item", it.name}, {"bytes", it.bytes}, {"note", it.note}});
  nlohmann::json host = nlohmann::json::array();
  for (const auto& [op, why] : host_ops) host.push_back({{"op", op}, {"reason", why}});
  return {{"label", kModelledLabel},
          {"model", model.name},
          {"family", model.family},
          {"weights", dtype_name(options.weights)},
          {"context", options.context},
          {"layers", ls},
          {"lm_head", lm_head},
          {"host_ops", host},
          {"ddr_bytes_per_token",
           {{"total", cost.run.ddr_bytes},
            {"weights", weight_bytes},
            {"kv_read", kv_read_bytes},
            {"kv_write", kv_write_bytes},
            {"other", cost.run.ddr_bytes - weight_bytes - kv_read_bytes - kv_write_bytes},
            {"items", items}}},
          {"host_to_device_bytes_per_token", host_upload_bytes()},
          {"cost_per_token", cost.to_json()},
          {"modelled_ms_per_token", cost.run.total_s * 1e3},
          {"modelled_tok_per_s", tok_per_s()}};
}

}  // namespace xdna::npu
