// `npu plan MODEL [--tokens T] [--batch B] [--json] [--xclbin single|per-design]
// [--measure-host]`: where an encoder's ops would run on the NPU (npu-sim's designs) and what the
// cost model says they cost, without computing anything. Every NPU figure is modelled; with
// --measure-host the same forward pass is also timed on the host backend (measured).
// For a decoder (a GGUF file, an HF checkpoint of a decoder family, or a store name holding one):
// `npu plan MODEL [--weights int8|bfp16|bf16] [--context N] [--json]` prints the decode plan per
// layer (fused whole-layer designs where they fit) and the modelled tok/s.
// For a conformer ASR model (Parakeet / GigaAM: a .nemo archive, a GigaAM .ckpt, a transformers
// Parakeet directory or a store name): `npu plan MODEL [--seconds S] [--json]` places the encoder
// and head for S seconds of audio (per inference) and the RNN-T/TDT decode step (per token).
// For Whisper (a store name or a model directory: config.json model_type "whisper" or a store
// manifest of family whisper): `npu plan MODEL [--json] [--measure-host]` places the encoder per
// 30-s window, the cross-attention K/V computed once per window, and one decoder step per token.
#include <algorithm>
#include <filesystem>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <tuple>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/cmd_plan_conv.h"  // conv classifiers and upscalers
#include "cli/commands.h"
#include "cli/config.h"
#include "host/ops.h"
#include "models/conformer.h"
#include "models/decoder_spec.h"
#include "models/graph_builder.h"
#include "models/whisper.h"
#include "host/host_backend.h"
#include "npu/planner.h"
#include "pipeline/llm.h"
#include "pipeline/speech_model.h"
#include "weights/gguf.h"
#include "pipeline/embed.h"

namespace xdna::cli {

namespace {

struct PlanCliOptions {
  std::string model;
  std::string store;
  int64_t tokens = 128;
  int64_t batch = 1;
  bool json = false;
  std::string xclbin = "single";
  bool measure_host = false;
  std::string weights = "int8";
  std::string kv;  // decoders: the resident KV cache, "" = int8 with int8 weights, else bf16; or int4
  int64_t context = 1024;
  bool context_given = false;
  double seconds = 10.0;
  std::string image_size;  // conv models: HxW
};

namespace fs = std::filesystem;

// The decoder spec at a path (a .gguf, a directory with one, or an HF decoder checkpoint), or
// nothing when the path holds something else (an encoder). Errors in a decoder file propagate.
std::optional<DecoderSpec> decoder_spec_at(const std::string& path) {
  std::string gguf;
  if (fs::is_regular_file(path) && fs::path(path).extension() == ".gguf") gguf = path;
  if (fs::is_directory(path) && !fs::exists(fs::path(path) / "config.json"))
    for (const auto& e : fs::directory_iterator(path))
      if (e.path().extension() == ".gguf") gguf = e.path().string();
  if (!gguf.empty()) return decoder_spec_from_gguf(GgufFile(gguf));
  if (!fs::is_directory(path)) return std::nullopt;
  std::ifstream in(fs::path(path) / "config.json");
  const nlohmann::json cfg = nlohmann::json::parse(in, nullptr, false);
  if (cfg.is_discarded() || !cfg.contains("model_type")) return std::nullopt;
  const std::string type = cfg["model_type"].get<std::string>();
  if (type != "llama" && type != "qwen3" && type != "gemma3" && type != "gemma3_text") return std::nullopt;
  return decoder_spec_from_config(cfg, (fs::path(path) / "config.json").string());
}

void run_decoder_plan(const PlanCliOptions& o, const std::string& path, const DecoderSpec& spec) {
  npu::DecoderPlanInput in;
  in.name = fs::path(path).filename().string();
  if (in.name.empty()) in.name = path;
  in.family = spec.family;
  in.layers = spec.layers;
  in.vocab = spec.vocab_size;
  in.shape = {spec.hidden, spec.heads, spec.kv_heads, spec.head_dim, spec.intermediate, 1,
              spec.qk_norm, spec.act != Activation::Silu};
  in.shape.post_norms = spec.sandwich_norms;  // Gemma's sandwich norms: decode_layer "_pn"
  in.layer_is_local = spec.layer_is_local;
  in.sliding_window = spec.sliding_window;
  npu::DecoderPlanOptions opts;
  opts.weights = o.weights == "bf16" ? DType::BF16 : o.weights == "bfp16" ? DType::BFP16 : DType::I8;
  opts.context = o.context;
  opts.kv = o.kv == "int4"                                               ? DType::I4
            : o.kv == "int8" || (o.kv.empty() && opts.weights == DType::I8) ? DType::I8
                                                                             : DType::BF16;
  // The default (1024) shrinks to a smaller model's maximum; an explicit --context must fit.
  if (!o.context_given && spec.max_positions > 0) opts.context = std::min<int64_t>(o.context, spec.max_positions);
  else if (spec.max_positions > 0 && o.context > spec.max_positions)
    throw std::invalid_argument("plan: --context " + std::to_string(o.context) + " exceeds the model's " +
                                std::to_string(spec.max_positions) + " positions");
  const npu::DecoderPlan plan = npu::plan_decoder(in, opts);
  // The default int8 plan also reports the int4 KV cache's figures; int4 is not the default: it
  // misses the int8 plan's accuracy gate on the (random-init) decoder fixtures (docs/npu-sim.md).
  std::optional<npu::DecoderPlan> int4;
  if (o.kv.empty() && opts.kv == DType::I8) {
    npu::DecoderPlanOptions alt = opts;
    alt.kv = DType::I4;
    int4 = npu::plan_decoder(in, alt);
  }
  const auto ratio = [](const npu::DecoderPlan& p) {
    return double(p.cost.run.ddr_bytes) / double(std::max<int64_t>(1, p.weight_bytes));
  };
  if (o.json) {
    nlohmann::json j = plan.to_json();
    if (int4)
      j["alternatives"] = nlohmann::json::array(
          {{{"kv", "int4"},
            {"gate", "not the default: misses the int8 plan's accuracy gate on the random-init decoder fixtures "
                     "(max|dlogit| / max|logit| 0.11-0.16 against 0.08); no real checkpoint quality-tested"},
            {"ddr_bytes_per_token", int4->cost.run.ddr_bytes},
            {"kv_read_bytes_per_token", int4->kv_read_bytes},
            {"ddr_over_weights", ratio(*int4)},
            {"modelled_tok_per_s", int4->tok_per_s()}}});
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    std::printf("%s", plan.text().c_str());
    std::printf("  DDR per token: %.3f x the weights\n", ratio(plan));
    if (int4)
      std::printf("  with --kv int4 (not the default: misses the accuracy gate on the decoder fixtures): DDR %.1f MB "
                  "= %.3f x the weights, KV read %.1f MB, %.1f tok/s (npu-sim (modelled))\n",
                  double(int4->cost.run.ddr_bytes) / 1e6, ratio(*int4), double(int4->kv_read_bytes) / 1e6,
                  int4->tok_per_s());
  }
}

// ---- Conformer ASR encoders (Parakeet, GigaAM) ------------------------------------------------
// The encoder runs as a chain of graphs (ConformerModel::lower_encoder); for the planner they are
// joined into one graph in run order, each boundary input left as an input, so design changes
// across a boundary count as configures. Two kinds of work are outside the graphs' op set for the
// planner and are listed here as host work with the reason: the subsampling Conv2d nodes (the
// planner infers no convolution shapes; npu-sim has no Conv2d placement) and the host-direct GLU +
// depthwise conv1d + SiLU step of every layer.

// Mel frames of `seconds` of audio as the model's frontend counts them (centred STFT frames).
int64_t conformer_mel_frames(const ConformerMelConfig& m, double seconds) {
  const int64_t samples = int64_t(std::llround(seconds * m.sample_rate));
  int64_t frames = (m.center ? samples : samples - m.n_fft) / m.hop_length + 1;
  if (m.center && m.drop_last_frame) --frames;
  return frames;
}

// Host work the planner does not see as graph ops, with the reason it stays on the host.
struct HostWork {
  std::string node, op, reason;
  Shape out_shape;
};

struct JoinedGraph {
  Graph graph;
  ValueId output = -1;            // the encoder output
  std::vector<HostWork> host;     // conv2d nodes replaced by inputs of their output shape
};

JoinedGraph join_encoder_graphs(const ConformerEncoderGraphs& eg) {
  JoinedGraph j;
  npu::DesignCache cache;  // asked only for its reason to refuse a Conv2d
  for (const Graph& g : eg.graphs) {
    Graph& src = const_cast<Graph&>(g);
    std::vector<ValueId> map(src.values().size(), -1);
    std::vector<npu::ValueInfo> info(src.values().size());
    for (size_t v = 0; v < src.values().size(); ++v) {
      const Value& val = src.values()[v];
      if (val.producer >= 0) continue;
      map[v] = j.graph.input(val.name, val.tensor);
      info[v] = npu::value_info(val.tensor);
    }
    for (const Node& n : g.nodes()) {
      std::vector<npu::ValueInfo> args;
      std::vector<ValueId> inputs;
      for (ValueId v : n.inputs) args.push_back(info[size_t(v)]), inputs.push_back(map[size_t(v)]);
      if (n.op == OpKind::Conv2d) {
        // [Cin, H, W] * [Cout, Cin/g, Kh, Kw] -> [Cout, H', W'] (the output stands in as an input).
        const Shape& x = args.at(0).shape;
        const Shape& w = args.at(1).shape;
        Shape out{w.at(0), 0, 0};
        for (int a = 0; a < 2; ++a)
          out[size_t(a + 1)] = (x.at(size_t(a + 1)) + 2 * n.attrs.padding[a] - n.attrs.kernel[a]) / n.attrs.stride[a] + 1;
        const std::string why = cache.choose(n, args).reason;
        j.host.push_back({n.name, std::string(op_name(n.op)), why + " (subsampling, stride " + std::to_string(n.attrs.stride[0]) +
                                                (n.attrs.groups > 1 ? ", depthwise" : "") + ")", out});
        map[size_t(n.output)] = j.graph.input(n.name, Tensor::empty(out));
        info[size_t(n.output)] = {out, DType::F32, 0};
        continue;
      }
      info[size_t(n.output)] = npu::infer_output(n, args);
      map[size_t(n.output)] = j.graph.add(n.op, inputs, n.attrs, n.name);
    }
    j.output = map[size_t(g.outputs().back())];
  }
  return j;
}

// Op lines grouped by placement, op and design (or host reason), with counts, in first-seen order.
nlohmann::json group_ops(const npu::Plan& plan, const std::vector<HostWork>& host) {
  std::vector<std::tuple<std::string, std::string, std::string>> keys;
  std::map<std::tuple<std::string, std::string, std::string>, int> count;
  auto add = [&](const std::string& where, const std::string& op, const std::string& what) {
    const auto k = std::make_tuple(where, op, what);
    if (count[k]++ == 0) keys.push_back(k);
  };
  for (const npu::PlannedOp& o : plan.ops)
    add(o.on_npu ? "npu-sim" : "host", std::string(op_name(o.op)), o.on_npu ? o.design : o.reason);
  for (const HostWork& h : host) add("host", h.op, h.reason);
  // NPU rows first, then host rows, each in first-seen (run) order.
  std::stable_sort(keys.begin(), keys.end(),
                   [](const auto& a, const auto& b) { return std::get<0>(a) == "npu-sim" && std::get<0>(b) == "host"; });
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& k : keys) {
    const auto& [where, op, what] = k;
    nlohmann::json r = {{"placement", where}, {"op", op}, {"count", count[k]}};
    r[where == "host" ? "reason" : "design"] = what;
    rows.push_back(std::move(r));
  }
  return rows;
}

std::string group_text(const nlohmann::json& rows) {
  std::string out;
  char line[768];
  for (const auto& r : rows) {
    const bool npu = r["placement"] == "npu-sim";
    std::snprintf(line, sizeof line, "  %-8s %-30s x%-5d %s%s\n", r["placement"].get<std::string>().c_str(),
                  r["op"].get<std::string>().c_str(), r["count"].get<int>(), npu ? "" : "host: ",
                  (npu ? r["design"] : r["reason"]).get<std::string>().c_str());
    out += line;
  }
  return out;
}

Tensor matrix(const Tensor& w) { return w.ndim() == 3 ? w.contiguous().reshape({w.dim(0), w.dim(1)}) : w; }
Tensor bias_f32(const Tensor& b) { return b.defined() ? host::to_f32(b) : b; }

void run_conformer_plan(const PlanCliOptions& o, const std::string& path) {
  // One encoder pass; npu transcribe never encodes more than a chunk (60 s + context) at once.
  if (!(o.seconds > 0) || o.seconds > 600)
    throw std::invalid_argument("plan: --seconds must be in (0, 600], got " + std::to_string(o.seconds));
  const std::shared_ptr<ConformerModel> model = load_conformer(path);
  const ConformerConfig& c = model->config();
  const int64_t frames = conformer_mel_frames(c.mel, o.seconds);
  if (frames < 1 || c.encoded_frames(frames) < 1)
    throw std::invalid_argument("plan: --seconds " + std::to_string(o.seconds) + " gives " + std::to_string(frames) +
                                " mel frames, too few for one encoder frame");
  const ConformerEncoderGraphs eg = model->lower_encoder(frames);
  const int64_t T = eg.encoded_frames;
  JoinedGraph jg = join_encoder_graphs(eg);

  // The glu/depthwise step between graphs: [T, 2d] -> [T, d] per layer.
  const std::string glu_op = "glu+depthwise_conv1d+silu";
  const std::string glu_why =
      "no design family for depthwise conv1d or GLU (the op set has no sigmoid); runs host-direct between graphs, "
      "batch norm folded";
  for (const std::string& step : eg.host_steps) jg.host.push_back({step, glu_op, glu_why, {T, c.d_model}});

  // Head work per inference, appended to the same graph so its design changes count too.
  std::vector<HostWork> head_host;
  std::unique_ptr<TransducerHead> th;
  GraphBuilder hb;
  hb.g = std::move(jg.graph);
  if (c.head == "ctc") {
    const WeightSource& w = model->weights();
    hb.matmul(jg.output, matrix(w.get("decoder.decoder_layers.0.weight")), bias_f32(w.get("decoder.decoder_layers.0.bias")),
              "head.ctc.linear");
    head_host.push_back({"head.ctc.log_softmax+greedy", "log_softmax+argmax", "no design family for log-softmax or argmax; "
                         "per-frame argmax, repeats merged and blanks dropped on the host", {T, c.vocab_size + 1}});
  } else {
    th = std::make_unique<TransducerHead>(load_transducer_head(c, model->weights()));
    hb.matmul(jg.output, th->enc_w, bias_f32(th->enc_b), "head.joint.enc");  // all frames at once, before decoding
  }
  jg.graph = std::move(hb.g);
  const npu::XclbinPolicy policy = o.xclbin == "single" ? npu::XclbinPolicy::Single : npu::XclbinPolicy::PerDesign;
  const npu::Plan plan = npu::plan_graph(jg.graph, policy);
  std::vector<HostWork> all_host = jg.host;
  all_host.insert(all_host.end(), head_host.begin(), head_host.end());
  const nlohmann::json groups = group_ops(plan, all_host);

  // RNN-T / TDT: one decode step per emitted token, planned on its own (GEMVs, batch 1).
  std::optional<npu::Plan> step;
  std::vector<HostWork> step_host;
  if (th) {
    GraphBuilder sb;
    const int64_t H = c.pred_hidden, J = c.joint_hidden;
    ValueId x = sb.g.input("pred.embed_row", Tensor::empty({1, H}));
    step_host.push_back({"pred.embed", "embedding", "one row gather per token (host writes it to the input buffer)", {1, H}});
    for (size_t l = 0; l < th->w_ih.size(); ++l) {
      const std::string L = "pred.lstm" + std::to_string(l);
      const ValueId gi = sb.matmul(x, th->w_ih[l], bias_f32(th->lstm_bias[l]), L + ".ih");
      const ValueId gh = sb.matmul(sb.g.input(L + ".h_prev", Tensor::empty({1, H})), th->w_hh[l], Tensor(), L + ".hh");
      sb.g.add(OpKind::Add, {gi, gh}, {}, L + ".gates");
      step_host.push_back({L + ".cell", "lstm_cell",
                           "no design family for sigmoid or tanh (LSTM gates and cell update)", {1, H}});
      x = sb.g.input(L + ".h", Tensor::empty({1, H}));
    }
    const ValueId p = sb.matmul(x, th->pred_w, bias_f32(th->pred_b), "joint.pred");
    const ValueId s = sb.g.add(OpKind::Add, {sb.g.input("joint.enc_row", Tensor::empty({1, J})), p}, {}, "joint.sum");
    const ValueId r = sb.g.add(OpKind::Relu, {s}, {}, "joint.relu");
    sb.matmul(r, th->out_w, bias_f32(th->out_b), "joint.out");
    step_host.push_back({"joint.argmax", "argmax", std::string("no design family for argmax; the host picks the token") +
                         (c.head == "tdt" ? " and the duration" : ""), {1, 1}});
    step = npu::plan_graph(sb.g, policy);
  }

  const std::string name = fs::path(path).filename().string();
  const double chunk_s = 30.0;  // ConformerChunking's default kept span per encoder pass
  const std::string chunk_note =
      o.seconds > chunk_s ? "npu transcribe encodes audio over " + std::to_string(int(chunk_s)) +
                                " s in overlapping chunks; this plan is one pass over all of it"
                          : "";
  if (o.json) {
    nlohmann::json j;
    j["label"] = npu::kModelledLabel;
    j["model"] = name;
    j["kind"] = "conformer";
    j["family"] = c.family;
    j["head"] = c.head;
    j["seconds"] = o.seconds;
    j["mel_frames"] = frames;
    j["encoded_frames"] = T;
    j["layers"] = c.n_layers;
    j["d_model"] = c.d_model;
    j["graphs"] = eg.graphs.size();
    j["xclbin_policy"] = npu::xclbin_policy_name(policy);
    j["npu_ops"] = plan.npu_ops();
    j["host_ops"] = plan.host_ops() + int(all_host.size());
    j["placement"] = groups;
    nlohmann::json hosts = nlohmann::json::array();
    for (const HostWork& h : all_host)
      hosts.push_back({{"node", h.node}, {"op", h.op}, {"reason", h.reason}, {"output", h.out_shape}});
    j["host_work"] = hosts;
    j["ops"] = plan.to_json()["ops"];
    j["cost"] = plan.cost.to_json();
    if (step) {
      nlohmann::json t = step->to_json();
      t["placement"] = group_ops(*step, step_host);
      t["host_ops"] = step->host_ops() + int(step_host.size());
      t["note"] = "per emitted token: prediction network step + joint (the joint also runs on every blank step)";
      j["per_token"] = std::move(t);
    }
    if (!chunk_note.empty()) j["note"] = chunk_note;
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("%s: %s conformer, %s head; %g s of audio = %lld mel frames -> %lld encoder frames (%lldx subsampling)\n"
              "  d_model %lld, %lld layers, %lld heads, ff %lld, conv kernel %lld, %s attention, %s subsampling\n",
              name.c_str(), c.family.c_str(), c.head.c_str(), o.seconds, (long long)frames, (long long)T,
              (long long)c.subsampling_factor, (long long)c.d_model, (long long)c.n_layers, (long long)c.n_heads,
              (long long)c.ff_dim, (long long)c.conv_kernel, c.self_attention.c_str(), c.subsampling.c_str());
  std::printf("encoder + head, per inference (%zu graphs, split at each layer's host-direct convolution step):\n%s",
              eg.graphs.size(), group_text(groups).c_str());
  std::printf("%d ops on npu-sim, %d on host; xclbin policy: %s\n", plan.npu_ops(),
              plan.host_ops() + int(all_host.size()), npu::xclbin_policy_name(policy));
  std::printf("per inference %s", plan.cost.text().c_str());
  std::printf("(host work is not timed here: all figures are the modelled NPU part only)\n");
  if (step) {
    std::printf("%s head, per emitted token (prediction network step + joint; the joint also runs on every blank step):\n%s",
                c.head.c_str(), group_text(group_ops(*step, step_host)).c_str());
    std::printf("per token %s", step->cost.text().c_str());
  }
  if (!chunk_note.empty()) std::printf("note: %s\n", chunk_note.c_str());
}

// ---- Whisper ------------------------------------------------------------------------------------
// WhisperModel builds its graphs inside encode / start / decode and runs them at once, so the
// planner sees them through a backend that records every node the executor offers it (with its
// inputs' shapes) and declines it: the host then runs the pass on a silent window. That host pass
// is not timed; --measure-host times separate encoder passes.

bool looks_like_whisper(const std::string& path) {
  if (!fs::is_directory(path)) return false;
  for (const char* file : {"config.json", "manifest.json"}) {
    std::ifstream in(fs::path(path) / file);
    if (!in) continue;
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    if (j.is_object() && (j.value("model_type", "") == "whisper" || j.value("family", "") == "whisper")) return true;
  }
  return false;
}

class RecordingBackend final : public Backend {
 public:
  std::string_view name() const override { return "plan-recorder"; }
  bool supports(const Node& node, std::span<const Tensor> inputs) const override {
    npu::SeenNode s{node, {}};
    for (const Tensor& t : inputs) s.inputs.push_back(npu::value_info(t));
    seen.push_back(std::move(s));
    return false;
  }
  Tensor compute(const Node& node, std::span<const Tensor>) override {
    throw std::logic_error("plan recorder cannot run '" + node.name + "'");
  }
  mutable std::vector<npu::SeenNode> seen;
};

void run_whisper_plan(const PlanCliOptions& o, const std::string& path) {
  const std::shared_ptr<WhisperModel> model = WhisperModel::load(path);
  const WhisperSpec& s = model->spec();
  const npu::XclbinPolicy policy = o.xclbin == "single" ? npu::XclbinPolicy::Single : npu::XclbinPolicy::PerDesign;
  const Tensor mel = Tensor::zeros({s.n_mels, 2 * s.n_audio_ctx});
  HostBackend host;
  RecordingBackend enc_rec, kv_rec, step_rec;
  const Tensor features = model->encode(mel, {&enc_rec, &host});
  WhisperDecodeState state = model->start(features, 1, {&kv_rec, &host});
  const std::vector<std::vector<int32_t>> token(1, std::vector<int32_t>{0});
  model->decode(token, state);  // the first token (position 0); the step planned is the next one
  model->decode(token, state, {&step_rec, &host});
  const npu::Plan enc = npu::plan_nodes(enc_rec.seen, policy);
  const npu::Plan kv = npu::plan_nodes(kv_rec.seen, policy);
  const npu::Plan step = npu::plan_nodes(step_rec.seen, policy);

  double host_ms = -1;  // measured: median of 3 host encoder passes (after the recorded one)
  if (o.measure_host) {
    std::vector<double> ms;
    for (int i = 0; i < 3; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      model->encode(mel);
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    host_ms = ms[1];
  }
  const std::string name = fs::path(path).filename().string();
  if (o.json) {
    auto part = [&](const npu::Plan& p, const char* per) {
      nlohmann::json j = p.to_json();
      j["placement"] = group_ops(p, {});
      j["per"] = per;
      return j;
    };
    nlohmann::json j;
    j["label"] = npu::kModelledLabel;
    j["model"] = name;
    j["kind"] = "whisper";
    j["window_seconds"] = 30;
    j["mel_frames"] = 2 * s.n_audio_ctx;
    j["encoder_positions"] = s.n_audio_ctx;
    j["d_model"] = s.d_model;
    j["encoder_layers"] = s.encoder_layers;
    j["encoder_heads"] = s.encoder_heads;
    j["decoder_layers"] = s.decoder_layers;
    j["xclbin_policy"] = npu::xclbin_policy_name(policy);
    j["encoder"] = part(enc, "30-s window");
    j["cross_kv"] = part(kv, "30-s window");
    j["decoder_step"] = part(step, "token");
    if (host_ms >= 0) j["host_measured_encoder_ms"] = host_ms;
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("%s: Whisper, encoder %lld layers, d_model %lld, %lld heads x %lld; decoder %lld layers, vocab %lld\n",
              name.c_str(), (long long)s.encoder_layers, (long long)s.d_model, (long long)s.encoder_heads,
              (long long)s.head_dim(), (long long)s.decoder_layers, (long long)s.vocab);
  auto print = [&](const npu::Plan& p, const std::string& title, const char* per) {
    std::printf("%s:\n%s", title.c_str(), group_text(group_ops(p, {})).c_str());
    std::printf("%d ops on npu-sim, %d on host; xclbin policy: %s\nper %s %s", p.npu_ops(), p.host_ops(),
                npu::xclbin_policy_name(policy), per, p.cost.text().c_str());
  };
  print(enc, "encoder, per 30-s window (" + std::to_string(2 * s.n_audio_ctx) + " mel frames -> " +
                 std::to_string(s.n_audio_ctx) + " positions)", "window");
  print(kv, "cross-attention K/V, per 30-s window (computed once, before decoding)", "window");
  print(step, "decoder step, per token (batch 1; self-attention reads the KV cache)", "token");
  std::printf("(host ops are not timed here: all figures above are the modelled NPU part only)\n");
  if (host_ms >= 0)
    std::printf("host backend (measured, this CPU): encoder %.1f ms per 30-s window (median of 3) vs %.*s %.1f ms "
                "(NPU part only)\n",
                host_ms, int(npu::kModelledLabel.size()), npu::kModelledLabel.data(), enc.cost.run.total_s * 1e3);
}

void run_plan(const PlanCliOptions& o) {
  if (run_conv_plan_if_conv_model({o.model, o.store, o.image_size, o.xclbin, o.json, o.measure_host})) return;
  std::string path;
  try {
    path = resolve_model_path(o.model, resolve_store(o.store));
  } catch (const std::runtime_error&) {
    // Not found as a decoder: the encoder loader below reports what it tried.
  }
  if (!path.empty() && looks_like_conformer(path)) return run_conformer_plan(o, path);
  if (!path.empty() && looks_like_whisper(path)) return run_whisper_plan(o, path);
  if (!path.empty())
    if (const std::optional<DecoderSpec> spec = decoder_spec_at(path)) return run_decoder_plan(o, path, *spec);
  const EmbeddingModel model = EmbeddingModel::load(o.model, resolve_store(o.store));
  const Encoder& enc = model.encoder();
  if (o.tokens > enc.spec().max_positions)
    throw std::invalid_argument("plan: --tokens " + std::to_string(o.tokens) + " exceeds the model's " +
                                std::to_string(enc.spec().max_positions) + " positions");
  // Token values do not change the plan; any id inside the vocabulary will do.
  const int32_t id = int32_t(std::min<int64_t>(100, enc.weights().word.dim(0) - 1));
  const std::vector<std::vector<int32_t>> ids(size_t(o.batch), std::vector<int32_t>(size_t(o.tokens), id));
  EncoderGraph eg = enc.lower(ids);
  const npu::XclbinPolicy policy =
      o.xclbin == "single" ? npu::XclbinPolicy::Single : npu::XclbinPolicy::PerDesign;
  const npu::Plan plan = npu::plan_graph(eg.graph, policy);

  double host_ms = -1;
  if (o.measure_host) {
    std::vector<double> ms;
    enc.forward(ids);  // warm-up
    for (int i = 0; i < 5; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      enc.forward(ids);
      ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    host_ms = ms[ms.size() / 2];
  }
  if (o.json) {
    nlohmann::json j = plan.to_json();
    j["model"] = model.name();
    j["batch"] = o.batch;
    j["tokens"] = o.tokens;
    if (host_ms >= 0) j["host_measured_ms"] = host_ms;
    std::printf("%s\n", j.dump(2).c_str());
    return;
  }
  std::printf("%s: batch %lld x %lld tokens\n%s", model.name().c_str(), (long long)o.batch,
              (long long)o.tokens, plan.text().c_str());
  if (host_ms >= 0)
    std::printf("host backend (measured, this CPU): %.2f ms per forward pass (median of 5)\n", host_ms);
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto o = std::make_shared<PlanCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "plan", "Place an encoder's, decoder's or conformer ASR model's ops on npu-sim designs and price them with the cost model "
              "(modelled, nothing is run)");
  cmd->add_option("model", o->model, "A store name, a Hugging Face checkpoint directory or a baked file")
      ->required();
  cmd->add_option("--store", o->store, kStoreHelp);
  cmd->add_option("--tokens,-t", o->tokens, "Tokens per sequence")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--batch,-b", o->batch, "Sequences")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_flag("--json", o->json, "JSON output");
  cmd->add_option("--xclbin", o->xclbin,
                  "single: one xclbin holds every design (a design change = configure); "
                  "per-design: one xclbin per design (a design change = xclbin switch)")
      ->check(CLI::IsMember({"single", "per-design"}))
      ->capture_default_str();
  cmd->add_option("--weights", o->weights, "Decoders: weight precision on the NPU")
      ->check(CLI::IsMember({"int8", "bfp16", "bf16"}))
      ->capture_default_str();
  cmd->add_option("--kv", o->kv,
                  "Decoders: the resident KV cache on the NPU: int8 (default with --weights int8; int8 weights "
                  "only), int4 (int8 weights only; reported beside the default int8 plan, not the default: it "
                  "misses the accuracy gate) or bf16 (the default otherwise)")
      ->check(CLI::IsMember({"bf16", "int8", "int4"}));
  cmd->add_option_function<int64_t>(
         "--context", [o](const int64_t& v) { o->context = v, o->context_given = true; },
         "Decoders: KV positions read per decode token (default 1024, or the model's maximum if smaller)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--seconds", o->seconds, "Conformer ASR models: seconds of audio per inference")
      ->capture_default_str();
  cmd->add_option("--image-size", o->image_size,
                  "Conv models: input image HxW (default: the classifier's size; 256x256 for upscalers)");
  cmd->add_flag("--measure-host", o->measure_host,
                "Also time the same forward pass on the host backend (measured; Whisper: the encoder)");
  cmd->callback([o] { run_plan(*o); });
}

}  // namespace xdna::cli
