// `npu bench llm --model M [--prompt-tokens 512] [--gen-tokens 128] [--json]`: prefill and decode
// speed of a decoder-only LLM, timed in-process (load and start-up outside the timing), with
// the bytes each decoded token reads and the fraction of this machine's STREAM-triad bandwidth
// that decode reaches. `--device npu-sim`: the same prompt and decode through npu-sim as
// `npu generate --device npu-sim` runs them (prefill op by op, decode through the fused plan when
// the model allows it: DeviceBackends::fused_decode); the times are then the simulator's wall time
// (measured), reported beside the plan's modelled NPU latency. The prompt is fixed token ids (same formula as bench/llm_vs_llamacpp.py)
// and decode is greedy without stopping at end-of-sequence, so a peer fed the same ids does the
// same work.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/config.h"
#include "cli/llm_options.h"  // DeviceBackends: npu-sim's backends and fused decode, as `npu generate`
#include "core/cpu.h"
#include "core/parallel.h"
#include "host/kv_cache.h"
#include "host/matmul_bench.h"
#include "models/decoder.h"
#include "pipeline/llm.h"
#include "pipeline/sampler.h"
#include "weights/gguf.h"
#include "weights/source.h"

namespace xdna::cli {
namespace {

namespace fs = std::filesystem;

struct BenchLlmOptions {
  std::string model = "gemma3-270m";
  std::string store;
  int prompt_tokens = 512;
  int gen_tokens = 128;
  bool json = false;
  std::string kv_type;  // "" = config kv_type, else the model format's default
  std::string device = "host";  // host or npu-sim
  int64_t context = 0;          // the KV cache's positions; 0 = prompt + generated tokens
};

// A GGUF file or HF directory: the path itself, or what a store entry's directory holds.
std::string model_file(const std::string& model, const std::string& store_flag) {
  const fs::path p = resolve_model_path(model, resolve_store(store_flag));
  if (!fs::is_directory(p) || fs::exists(p / "config.json")) return p.string();
  for (const auto& e : fs::directory_iterator(p))
    if (e.path().extension() == ".gguf") return e.path().string();
  throw std::runtime_error("bench llm: " + p.string() + " holds neither config.json nor a .gguf file");
}

DecoderSpec spec_for(const WeightSource& w, const std::string& path) {
  if (const auto* g = dynamic_cast<const GgufFile*>(&w)) return decoder_spec_from_gguf(*g);
  const fs::path cfg = (fs::is_directory(path) ? fs::path(path) : fs::path(path).parent_path()) / "config.json";
  std::FILE* f = std::fopen(cfg.c_str(), "rb");
  if (!f) throw std::runtime_error("bench llm: no config.json beside " + path);
  std::string text;
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
  std::fclose(f);
  return decoder_spec_from_config(nlohmann::json::parse(text), cfg.string());
}

// The prompt: ids spread over the vocabulary away from its first (special) ids; the Python peer
// script computes the same formula. BOS first when the model has one.
std::vector<int32_t> bench_prompt(const DecoderSpec& s, int n) {
  std::vector<int32_t> ids;
  if (s.bos_token_id >= 0) ids.push_back(s.bos_token_id);
  const int64_t lo = std::min<int64_t>(1000, s.vocab_size / 2), span = std::max<int64_t>(1, s.vocab_size - lo);
  for (int64_t t = 0; static_cast<int>(ids.size()) < n; ++t)
    ids.push_back(static_cast<int32_t>(lo + (t * 7919) % span));
  return ids;
}

// Weight bytes one decoded token streams: every tensor of the file, except that an untied
// embedding table contributes only the row it looks up (a tied one is read whole by the head).
uint64_t weight_bytes_per_token(const WeightSource& w, const DecoderSpec& s) {
  uint64_t total = 0;
  const bool untied = !s.names.output.empty() &&
                      std::any_of(w.tensors().begin(), w.tensors().end(),
                                  [&](const TensorInfo& t) { return t.name == s.names.output; });
  for (const auto& t : w.tensors()) {
    if (untied && t.name == s.names.token_embd) continue;
    total += t.bytes;
  }
  return total;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Greedy pick from the last row of [rows, vocab] logits.
int32_t argmax(const Tensor& logits) {
  const int64_t vocab = logits.shape().back();
  if (logits.dtype() != DType::F32 || !logits.is_contiguous()) {
    const auto v = logits.to_vector();
    return first_argmax({v.data() + v.size() - vocab, static_cast<size_t>(vocab)});
  }
  return first_argmax({logits.data<float>() + logits.numel() - vocab, static_cast<size_t>(vocab)});
}

// --device npu-sim: the simulator's wall time per phase (measured) beside the plan's NPU latency
// per decode token (modelled), and how decode ran (fused, or op by op and why).
void report_npu_sim(const BenchLlmOptions& o, const std::string& path, const DecoderSpec& spec, double prefill_s,
                    double decode_s, const NpuSimFusedDecode* fused, const std::string& refusal,
                    const NpuSimFusedDecode::Stats& warm,
                    const RunReport& last) {
  const double decode_ms = 1000.0 * decode_s / o.gen_tokens;
  const int64_t timed = fused ? fused->stats().tokens - warm.tokens : 0;
  const double modelled_ms = timed > 0 ? 1000.0 * (fused->stats().modelled_s - warm.modelled_s) / double(timed) : 0.0;
  const std::string how = fused ? "fused" : "op by op";
  if (o.json) {
    nlohmann::json out = {{"label", "npu-sim wall time (measured)"},
                          {"device", "npu-sim"},
                          {"model", o.model},
                          {"path", path},
                          {"family", spec.family},
                          {"threads", num_threads()},
                          {"prompt_tokens", o.prompt_tokens},
                          {"gen_tokens", o.gen_tokens},
                          {"context", o.context > 0 ? o.context : o.prompt_tokens + o.gen_tokens},
                          {"prefill_s", prefill_s},
                          {"decode_s", decode_s},
                          {"decode_ms_per_token", decode_ms},
                          {"decode", how},
                          {"decode_refusal", refusal},
                          {"last_step", last.to_json()}};
    if (fused) {
      out["placement"] = fused->placement_json();
      out["modelled_npu_ms_per_token"] = {{"value", modelled_ms}, {"label", "npu-sim (modelled)"}};
    }
    std::printf("%s\n", out.dump().c_str());
    return;
  }
  std::printf("%s (%s) on npu-sim, decode %s   [npu-sim wall time (measured)]\n", o.model.c_str(),
              spec.family.c_str(), how.c_str());
  std::printf("prefill %d tokens: %.3f s (op by op, its K/V then handed to the fused plan's cache)\n",
              o.prompt_tokens, prefill_s);
  std::printf("decode  %d tokens: %.3f s = %.1f ms per token\n", o.gen_tokens, decode_s, decode_ms);
  if (fused) std::printf("the plan's NPU latency: %.3f ms per decode token [npu-sim (modelled)]\n", modelled_ms);
  else std::printf("decode ran op by op, not fused: %s\n", refusal.c_str());
}

void run_bench_llm(const BenchLlmOptions& o) {
  if (o.prompt_tokens < 1 || o.gen_tokens < 1)
    throw std::invalid_argument("bench llm: --prompt-tokens and --gen-tokens must be >= 1");
  if (o.context < 0) throw std::invalid_argument("bench llm: --context must be >= 0");
  const std::string path = model_file(o.model, o.store);
  std::shared_ptr<const WeightSource> weights = open_weights(path);
  DecoderSpec spec = spec_for(*weights, path);
  const int64_t ctx = o.context > 0 ? o.context : o.prompt_tokens + o.gen_tokens;
  if (ctx < o.prompt_tokens + o.gen_tokens)
    throw std::invalid_argument("bench llm: --context " + std::to_string(ctx) + " holds fewer than the " +
                                std::to_string(o.prompt_tokens + o.gen_tokens) + " prompt and generated tokens");
  if (spec.max_positions > 0 && ctx > spec.max_positions)
    throw std::invalid_argument("bench llm: " + std::to_string(ctx) + " tokens exceed the model's context of " +
                                std::to_string(spec.max_positions));
  const auto kv_flag = resolve_kv_type(o.kv_type);
  const DType kv_dtype = kv_flag ? host::kv_dtype_from_name(*kv_flag) : default_kv_dtype();
  Decoder decoder(spec, weights);
  decoder.set_kv_dtype(kv_dtype);
  // npu-sim: the backends and the fused plan's precision as `npu generate --device npu-sim`
  // chooses them (DeviceBackends, resolve_npu_weights), the plan prepared from the decoder (the
  // bench needs no tokenizer).
  const bool sim = o.device == "npu-sim";
  DeviceBackends devices;
  std::vector<Backend*> backends;
  std::shared_ptr<NpuSimFusedDecode> fused;
  std::string refusal;  // npu-sim: why decode runs op by op (empty: fused)
  if (sim) {
    LlmCliOptions choice;
    choice.device = o.device;
    backends = devices.list(o.device);
    const NpuFusedChoice c = resolve_npu_weights(choice);
    fused = NpuSimFusedDecode::prepare(decoder, fs::path(path).stem().string(), ctx, c.weights, c.kv);
    if (!fused->enabled()) refusal = fused->refusal(), fused.reset();
  }
  const int64_t kv_elem = dtype_bytes(decoder.kv_dtype(), 1);
  const auto prompt = bench_prompt(spec, o.prompt_tokens);
  // One decode token: through the fused plan when npu-sim runs it, else the decoder's forward.
  std::unique_ptr<NpuSimFusedDecode::Sequence> seq;
  const auto decode_step = [&](int32_t id, DecoderState& st, DecoderStep& step) {
    if (!fused) {
      step = decoder.forward({id}, st, false, backends);
      return;
    }
    if (!seq) seq = fused->begin(st);
    RunReport report;
    std::vector<float> logits = fused->decode(*seq, id, report);
    step.logits = Tensor::from_vector({1, int64_t(logits.size())}, logits);
    step.report = std::move(report);
  };

  // Warm-up: a short prefill and a few decode steps (page in the weights, pack caches).
  {
    const int64_t warm_prompt = std::min<int64_t>(o.prompt_tokens, 8);
    int64_t warm_ctx = std::max<int64_t>(ctx, warm_prompt + 3);  // its own room: --gen-tokens may be < 3
    if (spec.max_positions > 0) warm_ctx = std::min<int64_t>(warm_ctx, spec.max_positions);
    const int warm_steps = int(std::min<int64_t>(3, warm_ctx - warm_prompt));
    DecoderState warm = decoder.new_state(warm_ctx);
    auto step = decoder.forward({prompt.begin(), prompt.begin() + warm_prompt}, warm, false, backends);
    for (int i = 0; i < warm_steps; ++i) decode_step(argmax(step.logits), warm, step);
    seq.reset();
  }
  const NpuSimFusedDecode::Stats warm_stats = fused ? fused->stats() : NpuSimFusedDecode::Stats{};

  DecoderState state = decoder.new_state(ctx);
  auto t0 = std::chrono::steady_clock::now();
  DecoderStep step = decoder.forward(prompt, state, false, backends);
  // npu-sim: the prompt's K/V handed to the fused plan's cache (allocated at --context) is the
  // prefill's last step, once per sequence: timed with it, not with the decode tokens.
  if (fused) seq = fused->begin(state);
  const double prefill_s = seconds_since(t0);

  t0 = std::chrono::steady_clock::now();
  RunReport last;
  for (int i = 0; i < o.gen_tokens; ++i) {
    decode_step(argmax(step.logits), state, step);
    if (i + 1 == o.gen_tokens) last = step.report;
  }
  const double decode_s = seconds_since(t0);
  if (sim) return report_npu_sim(o, path, spec, prefill_s, decode_s, fused.get(), refusal, warm_stats, last);

  // Bytes per decoded token: weights plus the K/V read by attention at the mean decode position.
  const uint64_t wbytes = weight_bytes_per_token(*weights, spec);
  const double mean_pos = o.prompt_tokens + 0.5 * o.gen_tokens;
  double kv_bytes = 0;
  for (int64_t l = 0; l < spec.layers; ++l) {
    const double seen = spec.is_local(l) ? std::min<double>(mean_pos, static_cast<double>(spec.sliding_window)) : mean_pos;
    kv_bytes += 2.0 * seen * static_cast<double>(spec.kv_heads * spec.head_dim * kv_elem);
  }
  const double bytes_per_token = static_cast<double>(wbytes) + kv_bytes;
  const double decode_tps = o.gen_tokens / decode_s, prefill_tps = o.prompt_tokens / prefill_s;
  // Peak RSS before the bandwidth probe, whose 3 x 64 MiB arrays are not the engine's.
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  const double triad = host::triad_bytes_per_s(64ll << 20, 10, 1.0);
  const double fraction = bytes_per_token * decode_tps / triad;
  const double peak_mib = static_cast<double>(ru.ru_maxrss) / 1024.0;
  const double kv_cache_mib = static_cast<double>(decoder.kv_cache_bytes(ctx)) / (1 << 20);

  if (o.json) {
    const nlohmann::json out = {{"label", "host measurement (CPU)"},
                                {"device", "host"},
                                {"model", o.model},
                                {"path", path},
                                {"family", spec.family},
                                {"threads", num_threads()},
                                {"isa", isa_name(active_isa())},
                                {"prompt_tokens", o.prompt_tokens},
                                {"gen_tokens", o.gen_tokens},
                                {"prefill_s", prefill_s},
                                {"decode_s", decode_s},
                                {"prefill_tok_s", prefill_tps},
                                {"decode_tok_s", decode_tps},
                                {"weight_bytes_per_token", wbytes},
                                {"bytes_per_token", bytes_per_token},
                                {"triad_gb_s", triad / 1e9},
                                {"decode_bandwidth_fraction", fraction},
                                {"peak_rss_mib", peak_mib},
                                {"kv_cache_mib", kv_cache_mib},
                                {"kv_type", std::string(dtype_name(decoder.kv_dtype()))},
                                {"last_step", last.to_json()}};
    std::printf("%s\n", out.dump().c_str());
    return;
  }
  std::printf("%s (%s): %d threads, isa %s   [host measurement]\n", o.model.c_str(), spec.family.c_str(),
              num_threads(), isa_name(active_isa()).c_str());
  std::printf("prefill %d tokens: %.3f s = %.1f tok/s\n", o.prompt_tokens, prefill_s, prefill_tps);
  std::printf("decode  %d tokens: %.3f s = %.1f tok/s\n", o.gen_tokens, decode_s, decode_tps);
  std::printf("bytes per decoded token: %.1f MiB (weights %.1f MiB + KV %.2f MiB)\n", bytes_per_token / (1 << 20),
              static_cast<double>(wbytes) / (1 << 20), kv_bytes / (1 << 20));
  std::printf("decode streams %.1f GB/s = %.0f%% of the STREAM triad (%.1f GB/s)\n",
              bytes_per_token * decode_tps / 1e9, 100 * fraction, triad / 1e9);
  std::printf("peak RSS %.1f MiB (KV cache %.1f MiB, %s)\n", peak_mib, kv_cache_mib,
              std::string(dtype_name(decoder.kv_dtype())).c_str());
  std::printf("last decode step by op:\n%s", last.summary().c_str());
}

}  // namespace

void add_bench_llm_command(CLI::App& bench) {
  auto* cmd = bench.add_subcommand("llm", "LLM prefill and decode tokens per second, timed in-process");
  static BenchLlmOptions o;
  cmd->add_option("--model", o.model, "Model name in the store, GGUF file or checkpoint directory");
  cmd->add_option("--store", o.store, kStoreHelp);
  cmd->add_option("--prompt-tokens", o.prompt_tokens, "Prompt length for the prefill timing");
  cmd->add_option("--gen-tokens", o.gen_tokens, "Greedy tokens decoded (end-of-sequence ignored)");
  cmd->add_flag("--json", o.json, "Print the figures as one JSON object");
  cmd->add_option("--device", o.device,
                  "host (measured) or npu-sim (the simulator's wall time, measured, beside the fused plan's "
                  "modelled NPU latency)")
      ->check(CLI::IsMember({"host", "npu-sim"}))
      ->capture_default_str();
  cmd->add_option("--context", o.context,
                  "KV cache positions (default: prompt + generated tokens); npu-sim's fused plan reads a cache "
                  "of this capacity, as `npu generate --context`");
  cmd->add_option("--kv-type", o.kv_type, "KV cache element type: f32, f16 or bf16 (default: as `npu generate`)")
      ->check(CLI::IsMember({"f32", "f16", "bf16"}));
  cmd->callback([] { run_bench_llm(o); });
}

}  // namespace xdna::cli
