// The fused plan's decode token on the device (fused_decoder.h). npu (needs hardware, unverified
// here).
#include "npu/runtime/fused_decoder.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "npu/design_families.h"
#include "npu/sim_exec.h"

namespace xdna::npu {

namespace {

size_t arg_index(const Design& d, const std::string& name) {
  for (size_t i = 0; i < d.args.size(); ++i)
    if (d.args[i].name == name) return i;
  throw std::invalid_argument("design '" + d.name + "' has no argument '" + name + "'");
}

uint64_t arg_size(const Design& d, const std::string& name) { return uint64_t(d.args[arg_index(d, name)].bytes); }

// Layer `layer`'s shape at `context`: a sliding-window layer (Gemma 3's local ones) reads the last
// min(context, window) positions, as fused_decode_token sets it. post_norms come with m.shape.
DecodeLayerShape layer_shape(const SimDecoderModel& m, size_t layer, int64_t context, int64_t capacity) {
  DecodeLayerShape s = m.shape;
  s.context = context;
  s.capacity = std::max(capacity, context);
  s.window = m.is_local(layer) ? m.sliding_window : 0;
  return s;
}

Design layer_design(const SimDecoderModel& m, size_t layer, int64_t context, int64_t capacity = 0) {
  return decode_layer_design(m.weights, layer_shape(m, layer, context, capacity), m.columns);
}

Design head_design(const SimDecoderModel& m) { return lm_head_design(m.weights, m.vocab, m.shape.hidden, m.columns); }

// A resident buffer holding `bytes`, synced to the device.
std::span<uint8_t> upload(DeviceRuntime& rt, const std::vector<uint8_t>& bytes) {
  std::span<uint8_t> b = rt.allocate_resident(bytes.size());
  std::memcpy(b.data(), bytes.data(), bytes.size());
  rt.sync_to_device(b);
  return b;
}

}  // namespace

namespace {

// Argument `name` of d as the view of `buf` (the layer's `what`) from byte `offset`.
std::span<uint8_t> arg_view(const Design& d, std::span<uint8_t> buf, const char* name, int64_t offset,
                            const std::string& what) {
  const uint64_t bytes = arg_size(d, name);
  if (offset < 0 || uint64_t(offset) > buf.size() || bytes > buf.size() - uint64_t(offset))
    throw std::out_of_range("design '" + d.name + "': argument " + name + " (" + std::to_string(bytes) +
                            " bytes at byte " + std::to_string(offset) + " of the layer's " + what + ") runs past the cache (" +
                            std::to_string(buf.size()) + " bytes)");
  return buf.subspan(size_t(offset), size_t(bytes));
}

void check_layout(const Design& d, std::span<uint8_t> buf, int64_t bytes, const std::string& what) {
  if (uint64_t(bytes) != buf.size())
    throw std::invalid_argument("design '" + d.name + "': the layer's " + what + " has " + std::to_string(buf.size()) +
                                " bytes, the design's layout " + std::to_string(bytes));
}

}  // namespace

KvViews kv_views(const Design& d, std::span<uint8_t> cache) {
  KvViews v{arg_view(d, cache, "kv", kv_window_offset(d), "KV cache"),
            arg_view(d, cache, "kv_row", kv_row_offset(d), "KV cache")};
  check_layout(d, cache, kv_cache_bytes(d), "KV cache");
  return v;
}

KvViews kv_scale_views(const Design& d, std::span<uint8_t> scales) {
  KvViews v{arg_view(d, scales, "kv_scales", kv_scales_window_offset(d), "KV scale buffer"),
            arg_view(d, scales, "kv_row_scales", kv_scales_row_offset(d), "KV scale buffer")};
  check_layout(d, scales, kv_scales_bytes(d), "KV scale buffer");
  return v;
}

std::vector<Design> fused_token_designs(const SimDecoderModel& m, int64_t position, int64_t capacity) {
  std::vector<Design> d;
  for (size_t i = 0; i < m.layers.size(); ++i) d.push_back(layer_design(m, i, position + 1, capacity));
  d.push_back(head_design(m));
  return d;
}

std::string fused_device_refusal(const DeviceRuntime& rt, const SimDecoderModel& m) {
  if (m.sliding_window > 0 && m.inv_freq_local.size() != m.inv_freq.size())
    return "a sliding-window model needs head_dim / 2 local RoPE frequencies";
  // The window is a runtime parameter: local and global layers share one design (one name).
  for (const Design& d : {layer_design(m, 0, 1), head_design(m)})
    if (!rt.has_artifact(d.name)) return "no compiled artifact for design " + d.name + " in " + rt.manifest().dir;
  return "";
}

DeviceFusedDecoder::DeviceFusedDecoder(DeviceRuntime& rt, const SimDecoderModel& m, int64_t max_len)
    : rt_(rt), m_(m), max_len_(max_len) {
  if (const std::string why = fused_device_refusal(rt, m); !why.empty()) throw std::runtime_error("npu: " + why);
  if (max_len < 1) throw std::invalid_argument("npu: fused decode needs a KV capacity of at least 1");
  const int64_t H = m.shape.hidden;
  // The weights in the layout npu-sim's packer writes, converted once: a context-1 pack (x, rope
  // and KV zero) gives the weight arguments, which do not depend on the context.
  const Design d1 = layer_design(m, 0, 1), head = head_design(m);
  const std::vector<aie::bf16> zero_x(size_t(H), aie::bf16{});
  const std::vector<float> zero_rope(size_t(m.shape.head_dim), 0.0f);
  const SimKvCache empty(m.shape.kv_heads, m.shape.head_dim, 1, m.shape.kv_int8, m.shape.kv_int4);
  // The resident cache's layout: every token's design at this capacity has the same kv argument.
  const Design dk = layer_design(m, 0, 1, max_len);
  kv_rows_ = dk.params.at("kv_rows"), kv_heads_alloc_ = dk.params.at("kv_heads_alloc");
  for (size_t i = 0; i < m.layers.size(); ++i) {
    const HostArgs a = pack_decode_layer(d1, m.layers[i], zero_x, zero_rope, empty);
    LayerBuffers b;
    b.weights = upload(rt, a[arg_index(d1, "weights")]);
    b.weights_rest = upload(rt, a[arg_index(d1, "weights_rest")]);
    b.kv = rt.allocate_resident(uint64_t(kv_cache_bytes(dk)));  // zero: no position cached yet
    if (m.shape.kv_int8 || m.shape.kv_int4) b.kv_scales = rt.allocate_resident(uint64_t(kv_scales_bytes(dk)));
    layers_.push_back(b);
  }
  const HostArgs h = pack_lm_head(head, m.final_norm, m.head, zero_x);
  head_weights_ = upload(rt, h[arg_index(head, "weights")]);
  // Activations: x (the padded input vector) and result share a BO (result fills its start).
  const uint64_t x_bytes = arg_size(d1, "x");
  if (arg_size(head, "x") != x_bytes || arg_size(d1, "result") > x_bytes)
    throw std::logic_error("npu: decode_layer and lm_head disagree on the activation buffer");
  act_[0] = rt.allocate_resident(x_bytes);
  act_[1] = rt.allocate_resident(x_bytes);
  rope_ = rt.allocate_resident(arg_size(d1, "rope"));
  if (m.sliding_window > 0) rope_local_ = rt.allocate_resident(arg_size(d1, "rope"));  // the local layers' base
  logits_ = rt.allocate_resident(arg_size(head, "out"));
}

std::vector<float> DeviceFusedDecoder::decode(int32_t id, SimDecoderState& state) {
  const int64_t H = m_.shape.hidden, D = m_.shape.head_dim;
  if (id < 0 || id >= m_.vocab)
    throw std::invalid_argument("npu: token id " + std::to_string(id) + " outside the vocabulary [0, " +
                                std::to_string(m_.vocab) + ")");
  if (state.kv.size() != layers_.size()) throw std::invalid_argument("npu: the state was not made for this model");
  const int64_t pos = state.position;
  if (pos + 1 > max_len_) throw std::invalid_argument("npu: KV cache full (" + std::to_string(max_len_) + ")");

  // Host side: embedding row (scaled, bf16) into the first activation BO, the RoPE row.
  std::vector<float> e(m_.embed.begin() + id * H, m_.embed.begin() + (id + 1) * H);
  for (float& v : e) v *= m_.embed_scale;
  const std::vector<aie::bf16> x = to_bf16(e);
  std::memset(act_[0].data(), 0, act_[0].size());
  std::memcpy(act_[0].data(), x.data(), x.size() * 2);
  rt_.sync_to_device(act_[0]);
  const std::vector<float> rope = rope_row(m_.inv_freq, pos);
  std::memcpy(rope_.data(), rope.data(), rope.size() * 4);
  rt_.sync_to_device(rope_);
  if (m_.sliding_window > 0) {
    const std::vector<float> local = rope_row(m_.inv_freq_local, pos);
    std::memcpy(rope_local_.data(), local.data(), local.size() * 4);
    rt_.sync_to_device(rope_local_);
  }

  // The cache stays in the BOs; only rows the host state holds and the BOs do not (a prefill run
  // on the host) are written, once.
  for (size_t i = 0; i < layers_.size(); ++i)
    if (state.kv[i].length != pos)
      throw std::invalid_argument("npu: layer " + std::to_string(i) + "'s cache is not at the position");
  if (state.sequence_id != sequence_id_ || device_length_ > pos) device_length_ = 0;  // another sequence
  sequence_id_ = state.sequence_id;
  // A quantized cache (int8 or int4: rows of values plus row scales); int4 values two a byte.
  const bool int4 = m_.shape.kv_int4, int8 = m_.shape.kv_int8 || int4;
  const int64_t rb = D * (int4 ? 4 : int8 ? 8 : 16) / 8;  // bytes of one head's cached row
  for (size_t i = 0; i < layers_.size() && device_length_ < pos; ++i) {
    const SimKvCache& kv = state.kv[i];
    if (kv.int8 != int8 || kv.int4 != int4)
      throw std::invalid_argument("npu: layer " + std::to_string(i) + "'s cache is not the model's KV type");
    for (int64_t which = 0; which < 2; ++which)
      for (int64_t h = 0; h < m_.shape.kv_heads; ++h) {
        const size_t at = size_t(((which * kv_heads_alloc_ + h) * kv_rows_ + device_length_) * rb);
        const size_t n = size_t((pos - device_length_) * rb);
        const int64_t from = (h * kv.max_len + device_length_) * D;
        if (int4) {  // k8 / v8 hold one value a byte: packed low nibble first
          const int8_t* q = (which == 0 ? kv.k8 : kv.v8).data() + from;
          for (size_t b = 0; b < n; ++b)
            layers_[i].kv[at + b] = uint8_t((q[2 * b] & 0xF) | ((q[2 * b + 1] & 0xF) << 4));
        } else if (int8) {
          std::memcpy(layers_[i].kv.data() + at, (which == 0 ? kv.k8 : kv.v8).data() + from, n);
        } else {
          std::memcpy(layers_[i].kv.data() + at, (which == 0 ? kv.k : kv.v).data() + from, n);
        }
        rt_.sync_to_device(layers_[i].kv.subspan(at, n));
      }
    for (int64_t h = 0; int8 && h < m_.shape.kv_heads; ++h) {  // the rows' scales: [head][row][K, V]
      const size_t at = size_t((h * kv_rows_ + device_length_) * 8), n = size_t((pos - device_length_) * 8);
      std::memcpy(layers_[i].kv_scales.data() + at, kv.scales.data() + (h * kv.max_len + device_length_) * 2, n);
      rt_.sync_to_device(layers_[i].kv_scales.subspan(at, n));
    }
  }
  device_length_ = pos;
  const std::vector<Design> designs = fused_token_designs(m_, pos, max_len_);
  std::vector<DesignCall> calls;
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Design& d = designs[i];
    const KvViews kv = kv_views(d, layers_[i].kv);
    DesignCall c{&d, std::vector<std::span<uint8_t>>(d.args.size())};
    const auto bind = [&](const char* name, std::span<uint8_t> buf) {
      const size_t a = arg_index(d, name);
      c.args[a] = buf.first(size_t(d.args[a].bytes));
    };
    bind("x", act_[i % 2]);
    bind("weights", layers_[i].weights);
    bind("rope", m_.is_local(i) ? rope_local_ : rope_);
    bind("kv", kv.window);
    bind("kv_row", kv.row);
    if (int8) {
      const KvViews sv = kv_scale_views(d, layers_[i].kv_scales);
      bind("kv_scales", sv.window);
      bind("kv_row_scales", sv.row);
    }
    bind("weights_rest", layers_[i].weights_rest);
    bind("result", act_[(i + 1) % 2]);
    for (size_t a = 0; a < c.args.size(); ++a)
      if (c.args[a].data() == nullptr) throw std::logic_error("npu: argument " + d.args[a].name + " of " + d.name + " not bound");
    calls.push_back(std::move(c));
  }
  const Design& hd = designs.back();
  DesignCall hc{&hd, std::vector<std::span<uint8_t>>(hd.args.size())};
  hc.args[arg_index(hd, "x")] = act_[layers_.size() % 2];
  hc.args[arg_index(hd, "weights")] = head_weights_;
  hc.args[arg_index(hd, "out")] = logits_;
  for (size_t a = 0; a < hc.args.size(); ++a)
    if (hc.args[a].data() == nullptr) throw std::logic_error("npu: argument " + hd.args[a].name + " of lm_head not bound");
  calls.push_back(std::move(hc));

  rt_.run_sequence(calls);  // one CMD_CHAIN, one EXEC_CMD, one wait

  // The new K/V rows (the decode_layer drained them into the cache BOs at row pos) into the
  // host state, and the logits.
  // Rows as drained: bf16 [K][V], or int8 / int4 [K][V][per head: K scale, V scale], gathered
  // piece by piece in that order (each piece a view of the cache BO, so its length bounds the copy).
  const size_t head_row = size_t(rb);  // one head's K or V values at one position
  std::vector<uint8_t> row;
  row.reserve(size_t(2 * m_.shape.kv_heads * rb + (int8 ? m_.shape.kv_heads * 8 : 0)));
  for (size_t i = 0; i < layers_.size(); ++i) {
    row.clear();
    const auto gather = [&](std::span<const uint8_t> piece) {
      rt_.sync_from_device(piece);
      row.insert(row.end(), piece.begin(), piece.end());
    };
    for (int64_t which = 0; which < 2; ++which)
      for (int64_t h = 0; h < m_.shape.kv_heads; ++h)
        gather(layers_[i].kv.subspan(size_t(((which * kv_heads_alloc_ + h) * kv_rows_ + pos) * rb), head_row));
    for (int64_t h = 0; int8 && h < m_.shape.kv_heads; ++h)
      gather(layers_[i].kv_scales.subspan(size_t((h * kv_rows_ + pos) * 8), 8));
    if (int4) {
      state.kv[i].append_int4(row);
    } else if (int8) {
      state.kv[i].append_int8(row);
    } else {
      std::vector<aie::bf16> values(row.size() / sizeof(aie::bf16));
      std::memcpy(values.data(), row.data(), values.size() * sizeof(aie::bf16));
      state.kv[i].append(values);
    }
  }
  device_length_ = pos + 1;
  rt_.sync_from_device(logits_);
  HostArgs out(hd.args.size());
  out[arg_index(hd, "out")].assign(logits_.begin(), logits_.end());
  ++state.position;
  ++tokens_;
  return lm_head_logits(hd, out);
}

}  // namespace xdna::npu
