#include "npu/planner_conv.h"

#include <cstdio>
#include <map>
#include <memory>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "npu/cost_model.h"

namespace xdna::npu {

int ConvPlan::npu_ops() const {
  int n = 0;
  for (const ConvPlannedOp& o : ops) n += o.on_npu;
  return n;
}

int ConvPlan::host_ops() const { return int(ops.size()) - npu_ops(); }

ConvPlan plan_conv_model(const ConvPlanInput& in, XclbinPolicy policy, int columns) {
  ConvPlan p;
  p.name = in.name, p.family = in.family, p.height = in.height, p.width = in.width, p.policy = policy;
  std::map<std::string, std::unique_ptr<Design>> designs;  // stable addresses for the invocations
  std::vector<Invocation> run;
  bool new_dispatch = true;
  for (const ConvModelOp& op : in.ops) {
    ConvPlannedOp po;
    po.op = op;
    if (op.kind == "conv" && op.unsupported.empty()) {
      ConvTile t;
      try {
        t = choose_conv_tile(op.shape);
      } catch (const std::invalid_argument& e) {
        po.reason = e.what();  // no tile fits L1: the conv stays on the host
      }
      if (po.reason.empty()) {
        const std::string key = conv_design(op.shape, t, columns).name;
        auto it = designs.find(key);
        if (it == designs.end()) it = designs.emplace(key, std::make_unique<Design>(conv_design(op.shape, t, columns))).first;
        const Design* dp = it->second.get();
        const DesignCost dc = model_design(*dp);
        po.on_npu = true;
        po.design = dp->name;
        po.tile = t;
        po.invocations = conv_invocations(op.shape, t, columns);
        po.modelled_us = dc.total_s * 1e6 * double(po.invocations);
        po.ddr_bytes = dc.ddr_bytes * po.invocations;
        const std::string xclbin = policy == XclbinPolicy::Single ? "conv" : dp->name;
        for (int64_t i = 0; i < po.invocations; ++i) {
          run.push_back({dp, xclbin, new_dispatch});
          new_dispatch = false;
        }
        p.macs += op.shape.out_height * op.shape.out_width * op.shape.c_out * op.shape.kernel * op.shape.kernel *
                  (op.shape.depthwise ? 1 : op.shape.c_in);
      }
    } else {
      po.reason = op.kind == "conv" ? op.unsupported : op.host_reason;
      if (po.reason.empty()) throw std::invalid_argument("plan: host op " + op.name + " (" + op.kind + ") has no reason");
    }
    if (!po.on_npu) new_dispatch = true;
    p.ops.push_back(std::move(po));
  }
  p.cost = cost_report(run);
  return p;
}

std::string ConvPlan::text() const {
  std::string s;
  char line[512];
  std::snprintf(line, sizeof line, "%s (%s), one %lldx%lld image; times are %s\n", name.c_str(), family.c_str(),
                (long long)height, (long long)width, std::string(kModelledLabel).c_str());
  s += line;
  std::snprintf(line, sizeof line, "%-28s %-14s %-16s %-40s %8s %11s\n", "op", "kind", "output", "placement",
                "invoc.", "design us");
  s += line;
  for (const ConvPlannedOp& o : ops) {
    std::snprintf(line, sizeof line, "%-28s %-14s %-16s %-40s %8lld %11.1f\n", o.op.name.c_str(),
                  (o.op.kind == "conv" ? (o.op.shape.depthwise ? "conv dw" : o.op.shape.kernel == 1 ? "conv 1x1" : "conv")
                                       : o.op.kind).c_str(),
                  o.op.out_shape.c_str(), (o.on_npu ? o.design : "host").c_str(), (long long)o.invocations,
                  o.modelled_us);
    s += line;
  }
  std::map<std::string, std::string> reasons;  // kind -> reason, once each
  for (const ConvPlannedOp& o : ops)
    if (!o.on_npu) reasons.emplace(o.op.kind, o.reason);
  std::snprintf(line, sizeof line, "%d ops on npu-sim, %d on host; xclbin policy %s; %.3f GMAC on the NPU\n", npu_ops(),
                host_ops(), xclbin_policy_name(policy), double(macs) / 1e9);
  s += line;
  for (const auto& [kind, why] : reasons) s += "  host " + kind + ": " + why + "\n";
  s += "per image " + cost.text();
  return s;
}

nlohmann::json ConvPlan::to_json() const {
  nlohmann::json ops_j = nlohmann::json::array();
  for (const ConvPlannedOp& o : ops) {
    nlohmann::json j = {{"name", o.op.name}, {"kind", o.op.kind}, {"output", o.op.out_shape}, {"on_npu", o.on_npu}};
    if (o.op.kind == "conv")
      j["conv"] = {{"in", {o.op.shape.height, o.op.shape.width, o.op.shape.c_in}}, {"c_out", o.op.shape.c_out},
                   {"kernel", o.op.shape.kernel}, {"stride", o.op.shape.stride}, {"depthwise", o.op.shape.depthwise}};
    if (o.on_npu) {
      j["design"] = o.design;
      j["tile"] = {{"rows", o.tile.rows}, {"cols", o.tile.cols}, {"channels", o.tile.channels}};
      j["invocations"] = o.invocations;
      j["modelled_us"] = o.modelled_us;
      j["ddr_bytes"] = o.ddr_bytes;
    } else {
      j["reason"] = o.reason;
    }
    ops_j.push_back(std::move(j));
  }
  const RunCost& r = cost.run;
  return {{"model", name},
          {"family", family},
          {"image", {{"height", height}, {"width", width}}},
          {"label", std::string(kModelledLabel)},
          {"xclbin_policy", xclbin_policy_name(policy)},
          {"npu_ops", npu_ops()},
          {"host_ops", host_ops()},
          {"npu_macs", macs},
          {"per_image",
           {{"dispatches", r.dispatches},
            {"configures", r.configures},
            {"xclbin_switches", r.xclbin_switches},
            {"ddr_bytes", r.ddr_bytes},
            {"compute_ms", cost.compute_s * 1e3},
            {"dma_ms", cost.exposed_dma_s * 1e3},
            {"dispatch_ms", r.dispatch_s * 1e3},
            {"reconfigure_ms", cost.reconfig_s * 1e3},
            {"total_ms", r.total_s * 1e3}}},
          {"cost", cost.to_json()},
          {"ops", ops_j}};
}

}  // namespace xdna::npu
