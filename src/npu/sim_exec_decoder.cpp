#include "npu/sim_exec_decoder.h"

#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "npu/design_families.h"
#include "npu/sim_program.h"

namespace xdna::npu {

// ---- one decode token ------------------------------------------------------------------------------

SimDecoderState::SimDecoderState(const SimDecoderModel& m, int64_t max_len) {
  static std::atomic<uint64_t> next{1};
  sequence_id = next++;
  for (size_t i = 0; i < m.layers.size(); ++i) kv.emplace_back(m.shape.kv_heads, m.shape.head_dim, max_len, m.shape.kv_int8, m.shape.kv_int4);
}

SimTokenResult fused_decode_token(const SimDecoderModel& m, int32_t id, SimDecoderState& state,
                                  SimResidentArgs* resident) {
  const int64_t H = m.shape.hidden;
  if (id < 0 || id >= m.vocab)
    throw std::invalid_argument("npu-sim: token id " + std::to_string(id) + " outside the vocabulary [0, " +
                                std::to_string(m.vocab) + ")");
  if (state.kv.size() != m.layers.size()) throw std::invalid_argument("npu-sim: the state was not made for this model");
  using clock = std::chrono::steady_clock;
  const auto ms = [](clock::time_point t0) {
    return std::chrono::duration<double, std::milli>(clock::now() - t0).count();
  };
  SimTokenResult r;
  const std::string sim(kModelledLabel);
  auto t0 = clock::now();
  std::vector<float> e(m.embed.begin() + id * H, m.embed.begin() + (id + 1) * H);
  for (float& v : e) v *= m.embed_scale;
  std::vector<aie::bf16> x = to_bf16(e);
  r.report.ops.push_back({"embed", OpKind::Embedding, "host", false, ms(t0)});

  const std::vector<float> rope = rope_row(m.inv_freq, state.position);
  if (m.sliding_window > 0 && m.inv_freq_local.size() != m.inv_freq.size())
    throw std::invalid_argument("npu-sim: a sliding-window model needs head_dim / 2 local RoPE frequencies");
  const std::vector<float> rope_local = m.sliding_window > 0 ? rope_row(m.inv_freq_local, state.position) : rope;
  std::vector<std::shared_ptr<const Design>> designs;
  std::vector<Invocation> inv;
  if (resident && resident->layers.size() != m.layers.size()) {
    if (!resident->layers.empty()) throw std::invalid_argument("npu-sim: the resident arguments are another model's");
    resident->layers.resize(m.layers.size());
  }
  SimStreamCounts counts;
  int64_t cleared = 0;
  struct Built {  // one of this token's designs, checked and its programs resolved once
    DecodeLayerShape shape;
    std::shared_ptr<const Design> design;
    std::shared_ptr<const CorePrograms> programs;
  };
  std::vector<Built> built;
  for (size_t i = 0; i < m.layers.size(); ++i) {
    t0 = clock::now();
    DecodeLayerShape s = m.shape;
    const bool local = m.is_local(i);
    s.context = state.kv[i].length + 1;
    s.capacity = state.kv[i].max_len;         // the resident cache the design reads in place
    s.window = local ? m.sliding_window : 0;  // the design reads min(context, window) positions
    // Layers differ only in the fields set above (the rest is m.shape): one build serves every
    // layer with the same context, capacity and window (all of them, or the local / global ones).
    const Built* b = nullptr;
    for (size_t j = 0; j < built.size() && !b; ++j)
      if (built[j].shape.context == s.context && built[j].shape.capacity == s.capacity &&
          built[j].shape.window == s.window)
        b = &built[j];
    if (!b) {
      auto made = std::make_shared<const Design>(decode_layer_design(m.weights, s, m.columns));
      built.push_back({s, made, prepare_design(*made, m.kernel)});
      b = &built.back();
    }
    const std::shared_ptr<const Design> d = b->design;
    HostArgs fresh;  // each invocation's arguments: the resident ones (weights packed once), or fresh
    HostArgs& a = resident ? resident->layers[i] : fresh;
    if (a.empty()) {
      a = pack_decode_layer(*d, m.layers[i], x, local ? rope_local : rope, state.kv[i]);
      if (resident) ++resident->weight_packs;
    } else {
      std::vector<std::optional<ByteRanges>> written(a.size());
      for (size_t j = 0; j < a.size() && j < resident->spare.size(); ++j)
        if (a[j].empty()) {  // the last layer's buffers (same arguments)
          a[j].swap(resident->spare[j]);
          if (j < resident->spare_written.size()) written[j] = std::move(resident->spare_written[j]);
        }
      cleared += repack_decode_layer(*d, a, x, local ? rope_local : rope, state.kv[i], &written);
    }
    run_design(*b->programs, a, &counts);
    append_kv_new(*d, a, state.kv[i]);
    x = arg_bf16(*d, a, "result", H);
    if (resident) {
      keep_weights_only(*d, a, &resident->spare);
      resident->spare_written = kv_args_written(*d, state.kv[i]);
    }
    const double t = ms(t0);
    // The layer's ops, all inside this one decode_layer invocation (its time on the first).
    const std::string L = std::string("L").append(std::to_string(i)).append(".");
    const std::pair<const char*, OpKind> ops[] = {
        {"attn_norm", OpKind::RMSNorm}, {"qkv", OpKind::MatMul},        {"qk_norm", OpKind::RMSNorm},
        {"rope", OpKind::Rope},         {"cache.write", OpKind::KvWrite}, {"attention", OpKind::Attention},
        {"o", OpKind::MatMul},          {"post_attn_norm", OpKind::RMSNorm}, {"attn_residual", OpKind::Add},
        {"ffn_norm", OpKind::RMSNorm},  {"gate_up", OpKind::MatMul},  {"act", m.shape.gelu ? OpKind::GeluTanh : OpKind::Silu},
        {"gated", OpKind::Mul},         {"down", OpKind::MatMul},     {"post_ffn_norm", OpKind::RMSNorm},
        {"ffn_residual", OpKind::Add}};
    bool first = true;
    for (const auto& [name, op] : ops) {
      const std::string n = name;
      if (n == "qk_norm" && !m.shape.qk_norm) continue;
      if ((n == "post_attn_norm" || n == "post_ffn_norm") && !m.shape.post_norms) continue;
      r.report.ops.push_back({L + name + " [" + d->name + "]", op, sim, false, first ? t : 0.0});
      first = false;
    }
    inv.push_back({d.get(), "model.xclbin", i == 0});
    designs.push_back(d);
  }
  t0 = clock::now();
  auto head = std::make_shared<const Design>(lm_head_design(m.weights, m.vocab, H, m.columns));
  HostArgs fresh;
  HostArgs& a = resident ? resident->head : fresh;
  if (a.empty()) {
    a = pack_lm_head(*head, m.final_norm, m.head, x);
    if (resident) ++resident->weight_packs;
  } else {
    repack_lm_head(*head, a, x);
  }
  run_design(*head, a, m.kernel, &counts);
  r.logits = lm_head_logits(*head, a);
  const double t = ms(t0);
  r.report.ops.push_back({"final_norm [" + head->name + "]", OpKind::RMSNorm, sim, false, t});
  r.report.ops.push_back({"output [" + head->name + "]", OpKind::MatMul, sim, false, 0.0});
  inv.push_back({head.get(), "model.xclbin", false});
  designs.push_back(head);
  r.cost = cost_report(inv);
  if (resident) resident->last_token = counts, resident->last_token_cleared = cleared;
  ++state.position;
  return r;
}

}  // namespace xdna::npu
