#include "pipeline/llm_npu_fused.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <set>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "host/ops.h"
#include "npu/planner.h"
#include "pipeline/llm.h"

namespace xdna {

namespace {

// Checkpoint names as the decoder resolves them: bare, or under Gemma 3's "language_model.".
std::string resolve(const WeightSource& w, const std::string& name) {
  for (const char* prefix : {"", "language_model."})
    if (w.contains(prefix + name)) return prefix + name;
  return "";
}

// RoPE frequencies of the global (or the local: Gemma 3's sliding-window layers) layers, the same
// f32 computation as the host decoder's (decoder.cpp, rope_frequencies): theta^(-2i/D), then
// llama3 or linear scaling, then GGUF's per-pair divisors (global layers only).
std::vector<float> rope_inv_freq(const DecoderSpec& s, const WeightSource& w, bool local) {
  Tensor divisors;
  if (!s.names.rope_freqs.empty())
    if (const std::string n = resolve(w, s.names.rope_freqs); !n.empty()) divisors = w.get(n);
  return rope_frequencies(s, local, divisors).to_vector();
}

// A GGML block tensor dequantized to f32 by the engine's block decoders (Tensor::to_vector, core/ggml_blocks.h).
std::vector<float> ggml_f32(const WeightSource& w, const TensorInfo& info) {
  return load_decoder_weight(w, info).to_vector();
}

void add_reason(std::string& all, const std::string& why) { all += (all.empty() ? "" : "; ") + why; }

// What the decode_layer design does not compute, from the spec alone. (Sliding-window layers and
// sandwich norms are decode_layer parameters: DecodeLayerShape::window, post_norms.)
std::string spec_refusal(const DecoderSpec& s) {
  std::string why;
  if (s.final_softcap > 0.0f) add_reason(why, "logit soft-capping is not part of the lm_head design");
  if (s.attn_bias) add_reason(why, "q/k/v biases are not part of the decode_layer design");
  if (s.act != Activation::Silu && s.act != Activation::GeluTanh)
    add_reason(why, "the MLP activation is neither SiLU nor tanh GELU");
  return why;
}

}  // namespace

std::shared_ptr<NpuSimFusedDecode> NpuSimFusedDecode::prepare(const LanguageModel& lm, DType weights, DType kv) {
  return prepare(lm.decoder(), lm.name(), lm.context_length(), weights, kv);
}

std::shared_ptr<NpuSimFusedDecode> NpuSimFusedDecode::prepare(const Decoder& decoder, const std::string& name,
                                                               int64_t context, DType weights, DType kv) {
  if (weights != DType::BF16 && weights != DType::I8)
    throw std::invalid_argument("fused decode: weights must be bf16 or int8, not " + std::string(dtype_name(weights)));
  if (kv != DType::BF16 && kv != DType::I8)
    throw std::invalid_argument("fused decode: the KV cache must be bf16 or int8, not " + std::string(dtype_name(kv)));
  if (kv == DType::I8 && weights != DType::I8)
    throw std::invalid_argument("fused decode: an int8 KV cache needs int8 weights (decode_layer_int8_kv8)");
  std::shared_ptr<NpuSimFusedDecode> f(new NpuSimFusedDecode());
  f->weights_ = weights;
  const DecoderSpec& s = decoder.spec();
  const WeightSource& w = decoder.weights();
  std::string why = spec_refusal(s);

  // The plan npu-sim would run: every layer must be one decode_layer at this context.
  npu::DecoderPlanInput in;
  in.name = name;
  in.family = s.family;
  in.layers = s.layers;
  in.vocab = s.vocab_size;
  in.shape = {s.hidden, s.heads, s.kv_heads, s.head_dim, s.intermediate, 1, s.qk_norm, s.act != Activation::Silu};
  in.shape.post_norms = s.sandwich_norms;
  in.shape.kv_int8 = kv == DType::I8;
  in.layer_is_local = s.layer_is_local;
  in.sliding_window = s.sliding_window;
  npu::DecoderPlanOptions opts;
  opts.weights = weights;
  opts.context = context;
  try {
    const npu::DecoderPlan plan = npu::plan_decoder(in, opts);
    for (const npu::DecoderLayerPlan& l : plan.layers)
      if (!l.fused) {
        add_reason(why, "layer " + std::to_string(l.layer) + " is not one decode_layer design: " + l.note);
        break;
      }
  } catch (const std::invalid_argument& e) {
    add_reason(why, std::string("no decode plan: ") + e.what());
  }

  // Every weight the designs read, as f32 (packed as bf16, or quantized per row to int8): f32 /
  // f16 / bf16 as the file holds them; a GGML block tensor (q8_0, q4_k, q6_k, q5_0 ...)
  // dequantized to f32 first (ggml_f32), so the plan runs at its own precision, not the file's.
  npu::SimDecoderModel& m = f->model_;
  std::set<std::string> block_types;
  int quantized = 0, missing = 0;
  const auto get = [&](const std::string& pattern, int64_t layer, std::vector<float>& out) {
    const std::string name = resolve(w, layer < 0 ? pattern : layer_name(pattern, layer));
    if (name.empty()) {  // e.g. q/k/v stored stacked: the first missing one is named
      if (missing++ == 0)
        add_reason(why, "no weight " + (layer < 0 ? pattern : layer_name(pattern, layer)) + " in the checkpoint");
      return;
    }
    const TensorInfo& info = w.info(name);
    const std::optional<DType> t = info.dtype;
    const bool plain = t && (*t == DType::F32 || *t == DType::F16 || *t == DType::BF16);
    if (!plain && !ggml_block_dtype(info).has_value()) {
      if (quantized++ == 0)  // the first one names the case; the rest would repeat it
        add_reason(why, name + " is " + info.file_dtype +
                          ": the fused designs take f32/f16/bf16 weights or GGML blocks dequantized to f32 "
                          "(run as bf16, or quantized per row to int8)");
      return;
    }
    if (!plain) block_types.insert(info.file_dtype);
    if (why.empty()) out = plain ? w.get(name).to_vector() : ggml_f32(w, info);
  };
  const DecoderWeightNames& n = s.names;
  get(n.token_embd, -1, m.embed);
  for (int64_t i = 0; i < s.layers; ++i) {
    npu::SimLayerWeights lw;
    get(n.attn_norm, i, lw.attn_norm);
    get(n.q, i, lw.q), get(n.k, i, lw.k), get(n.v, i, lw.v), get(n.o, i, lw.o);
    if (s.qk_norm) get(n.q_norm, i, lw.q_norm), get(n.k_norm, i, lw.k_norm);
    if (s.sandwich_norms) get(n.post_attn_norm, i, lw.post_attn_norm), get(n.post_ffn_norm, i, lw.post_ffn_norm);
    get(n.ffn_norm, i, lw.ffn_norm);
    get(n.gate, i, lw.gate), get(n.up, i, lw.up), get(n.down, i, lw.down);
    m.layers.push_back(std::move(lw));
  }
  get(n.final_norm, -1, m.final_norm);
  const bool tied = s.tied_embeddings || n.output.empty() || resolve(w, n.output).empty();
  if (!tied) get(n.output, -1, m.head);
  if (!why.empty()) {
    f->refusal_ = why;
    f->model_ = {};
    return f;
  }
  if (tied) m.head = m.embed;
  for (const std::string& b : block_types) f->dequantized_ += (f->dequantized_.empty() ? "" : ", ") + b;
  m.shape = in.shape;
  m.kernel.eps = s.norm_eps;
  m.kernel.rms_offset = s.rms_offset;
  m.kernel.attn_scale = s.attn_scale;
  m.kernel.rope_interleaved = s.rope_layout == 0;
  m.vocab = s.vocab_size;
  m.embed_scale = s.embed_scale;
  m.inv_freq = rope_inv_freq(s, w, /*local=*/false);
  if (s.sliding_window > 0) {
    m.sliding_window = s.sliding_window;
    m.layer_is_local = s.layer_is_local;
    m.inv_freq_local = rope_inv_freq(s, w, /*local=*/true);
  }
  m.columns = opts.columns;
  m.weights = weights;
  f->invocations_per_token_ = s.layers + 1;
  return f;
}

std::shared_ptr<NpuSimFusedDecode> NpuSimFusedDecode::prepare(const LanguageModel& lm, npu::DeviceRuntime& device,
                                                               DType weights, DType kv) {
  std::shared_ptr<NpuSimFusedDecode> f = prepare(lm, weights, kv);
  f->for_device_ = true;
  if (!f->enabled()) return f;
  // Whatever npu-sim runs fused, the device decoder runs too (Gemma 3's sliding-window layers,
  // their RoPE base and sandwich norms included: npu/runtime/fused_decoder.h); what is left is
  // the artifacts.
  if (const std::string why = npu::fused_device_refusal(device, f->model_); !why.empty()) {
    f->refusal_ = why;
    f->model_ = {};
    return f;
  }
  f->device_ = std::make_unique<npu::DeviceFusedDecoder>(device, f->model_, lm.context_length());
  for (size_t i = 0; i < f->model_.layers.size(); ++i)
    f->device_weight_bytes_ += int64_t(f->device_->layer_weights(i).size() + f->device_->layer_weights_rest(i).size());
  f->device_weight_bytes_ += int64_t(f->device_->head_weights().size());
  return f;
}

std::unique_ptr<NpuSimFusedDecode::Sequence> NpuSimFusedDecode::begin(const DecoderState& host) const {
  if (!enabled()) throw std::logic_error("npu-sim fused decode is off for this model: " + refusal_);
  auto seq = std::make_unique<Sequence>(Sequence{npu::SimDecoderState(model_, host.context_length())});
  const int64_t len = host.position, kvh = model_.shape.kv_heads, D = model_.shape.head_dim;
  const int64_t max_len = host.context_length();
  for (size_t l = 0; l < seq->state.kv.size(); ++l) {
    npu::SimKvCache& kv = seq->state.kv[l];
    // Host cache (head-major like the design's; f32, or a half cache widened) -> design
    // [kv_head][max_len][D] bf16, from [kv_head][len][D]: each head's filled rows are one run.
    const Tensor hk_f32 = host::to_f32(host.cache.key_storage(int64_t(l)).slice(0, 0, len).transpose(0, 1));
    const Tensor hv_f32 = host::to_f32(host.cache.value_storage(int64_t(l)).slice(0, 0, len).transpose(0, 1));
    const float* hk = hk_f32.data<float>();
    const float* hv = hv_f32.data<float>();
    for (int64_t h = 0; h < kvh; ++h)
      for (int64_t i = 0; i < len * D; ++i) {
        const size_t from = size_t(h * len * D + i), to = size_t(h * max_len * D + i);
        kv.k[to] = aie::to_bf16(hk[from], npu::kSimRounding);
        kv.v[to] = aie::to_bf16(hv[from], npu::kSimRounding);
      }
    kv.quantize_rows(0, len);  // an int8 cache: as the kernel quantizes a new row
    kv.length = len;
  }
  seq->state.position = len;
  return seq;
}

std::vector<float> NpuSimFusedDecode::decode(Sequence& seq, int32_t id, RunReport& report) {
  const std::lock_guard<std::mutex> lock(decode_mutex_);
  if (device_) {  // one command chain on the device; the ops as npu-sim lists them, on "npu"
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<float> logits = device_->decode(id, seq.state);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    const std::vector<npu::Design> designs = npu::fused_token_designs(model_, seq.state.position - 1);
    report.ops.push_back({"embed", OpKind::Embedding, "host", false, 0.0});
    for (size_t i = 0; i < designs.size(); ++i) {
      const bool head = i + 1 == designs.size();
      std::string node = "final_norm+output";
      if (!head) node = std::string("L").append(std::to_string(i)).append(".decode_layer");  // (GCC 12 -Wrestrict)
      report.ops.push_back({node + " [" + designs[i].name + "]", head ? OpKind::MatMul : OpKind::Attention, "npu",
                            false, i == 0 ? ms : 0.0});
      ++stats_.designs[designs[i].name];
    }
    ++stats_.tokens;
    ++stats_.dispatches;  // one EXEC_CMD (the chain)
    return logits;
  }
  npu::SimTokenResult r = npu::fused_decode_token(model_, id, seq.state, &resident_);
  stats_.weight_packs = resident_.weight_packs;
  report.ops.insert(report.ops.end(), r.report.ops.begin(), r.report.ops.end());
  ++stats_.tokens;
  stats_.dispatches += r.cost.run.dispatches;
  stats_.configures += r.cost.run.configures;
  stats_.xclbin_switches += r.cost.run.xclbin_switches;
  stats_.ddr_bytes += r.cost.run.ddr_bytes;
  stats_.modelled_s += r.cost.run.total_s;
  for (const auto& [name, count] : r.cost.designs) stats_.designs[name] += count;
  return std::move(r.logits);
}

namespace {

// "NAME xN, NAME xM": the designs run and their invocations ("" before any token).
std::string designs_text(const std::map<std::string, int>& designs) {
  std::string s;
  for (const auto& [name, count] : designs) s += (s.empty() ? "" : ", ") + name + " x" + std::to_string(count);
  return s;
}

}  // namespace

std::string NpuSimFusedDecode::dequantized_text() const {
  if (dequantized_.empty()) return "";
  return std::string(on_device() ? "npu" : "npu-sim") + ": weights dequantized from the file's GGML blocks (" +
         dequantized_ + ") to f32, then " +
         (weights_ == DType::I8 ? "quantized per row to int8" : "rounded to bf16") + " for the fused plan\n";
}

std::string NpuSimFusedDecode::placement_text() const {
  const char* precision = weights_ == DType::I8 ? "int8" : "bf16";
  const std::string designs =
      stats_.designs.empty() ? "" : std::string(on_device() ? "npu" : "npu-sim") + ": designs run: " +
                                        designs_text(stats_.designs) + "\n";
  if (!enabled())
    return std::string(for_device_ ? "npu" : "npu-sim") + ": decode ran op by op, not fused: " + refusal_ + "\n";
  if (device_) {
    char line[400];
    std::snprintf(line, sizeof line,
                  "npu: decode ran fused on the device: 1 command chain per token (%lld decode_layer + 1 lm_head "
                  "invocations, %s), %lld tokens; %.2f MB of weights uploaded once into resident buffers "
                  "[npu (needs hardware, unverified here)]\n",
                  static_cast<long long>(invocations_per_token_ - 1), precision, static_cast<long long>(stats_.tokens),
                  double(device_weight_bytes_) / 1e6);
    return dequantized_text() + line + designs;
  }
  if (stats_.tokens == 0)
    return dequantized_text() + "npu-sim: decode fused: 1 dispatch per token (" +
           std::to_string(invocations_per_token_ - 1) + " decode_layer + 1 lm_head invocations, " + precision +
           "); no decode token has run yet\n";
  const double t = double(stats_.tokens);
  const double per_token = double(stats_.dispatches) / t;
  char line[320];
  std::snprintf(line, sizeof line,
                "npu-sim: decode ran fused: %g dispatch%s per token (%lld decode_layer + 1 lm_head "
                "invocations, %s), %lld tokens; %.1f configures and %.2f MB DDR per token; "
                "%.3f ms per token [npu-sim (modelled)]\n",
                per_token, per_token == 1 ? "" : "es", static_cast<long long>(invocations_per_token_ - 1), precision,
                static_cast<long long>(stats_.tokens), double(stats_.configures) / t, double(stats_.ddr_bytes) / t / 1e6,
                1e3 * stats_.modelled_s / t);
  return std::string("npu-sim: the prompt ran op by op (prefill: the dispatches and modelled cost above); its K/V was "
                     "rounded to bf16 into the fused plan's cache") +
         (model_.shape.kv_int8 ? " (int8 KV: then quantized per row)\n" : "\n") + dequantized_text() +
         std::string(line) + designs;
}

nlohmann::json NpuSimFusedDecode::placement_json() const {
  nlohmann::json j = {{"fused", enabled()},
                      {"weights", weights_ == DType::I8 ? "int8" : "bf16"},
                      {"kv", model_.shape.kv_int8 ? "int8" : "bf16"}};
  if (!dequantized_.empty()) j["dequantized_from"] = dequantized_;
  if (!enabled()) {
    j["reason"] = refusal_;
    return j;
  }
  const double t = stats_.tokens ? double(stats_.tokens) : 1.0;
  if (device_) {
    j["label"] = "npu (needs hardware, unverified here)";
    j["tokens"] = stats_.tokens;
    j["invocations_per_token"] = invocations_per_token_;
    j["command_chains_per_token"] = double(stats_.dispatches) / t;
    j["resident_weight_bytes"] = device_weight_bytes_;
    j["designs"] = stats_.designs;
    return j;
  }
  j["label"] = std::string(npu::kModelledLabel);
  j["tokens"] = stats_.tokens;
  j["invocations_per_token"] = invocations_per_token_;
  j["dispatches_per_token"] = double(stats_.dispatches) / t;
  j["configures_per_token"] = double(stats_.configures) / t;
  j["ddr_bytes_per_token"] = double(stats_.ddr_bytes) / t;
  j["modelled_ms_per_token"] = 1e3 * stats_.modelled_s / t;
  j["designs"] = stats_.designs;
  j["prefill"] = "op by op; K/V rounded to bf16 into the fused cache";
  return j;
}

}  // namespace xdna
