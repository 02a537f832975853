// Whisper speed on a full-size base config (d_model 512, 6 + 6 layers, 8 heads, vocab 51865) with
// random weights made here, in f16 (what real checkpoints hold), bf16 and f32: encoder ms per 30-s
// window, and decoder ms per token (one beam, and 5 beams batched) at ~100 tokens of context.
// Random weights give the same speed as real ones (no data-dependent work); like real ones they are
// read-only mappings (of a temporary file), so the GEMM's packed-weight cache applies.
//
//   bench_whisper --benchmark_min_time=3x          (threads: XDNA_THREADS or --threads=N, default 2)
// On a machine shared with other work the wall "Time" column is noisy: compare ratios of one run,
// and proc_cpu_ms (CPU time of all threads per iteration; / threads ~ idle-machine wall time).
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <fstream>
#include <random>
#include <stdexcept>

#include <unistd.h>

#include <time.h>

#include "core/buffer.h"
#include "core/numeric.h"
#include "core/parallel.h"
#include "models/whisper.h"
#include "bench_main.h"

namespace {

// Random weights held in memory under transformers' names.
class RandomWhisper final : public xdna::WeightSource {
 public:
  RandomWhisper(const xdna::WhisperSpec& s, xdna::DType dt) {
    const int64_t d = s.d_model, F = s.ffn_dim;
    add("model.encoder.conv1.weight", {d, s.n_mels, 3}, dt);
    add("model.encoder.conv1.bias", {d}, dt);
    add("model.encoder.conv2.weight", {d, d, 3}, dt);
    add("model.encoder.conv2.bias", {d}, dt);
    add("model.encoder.embed_positions.weight", {s.n_audio_ctx, d}, dt);
    const auto attention = [&](const std::string& p, const std::string& norm) {
      for (const char* m : {"q_proj", "k_proj", "v_proj", "out_proj"}) {
        add(p + "." + m + ".weight", {d, d}, dt);
        if (std::strcmp(m, "k_proj") != 0) add(p + "." + m + ".bias", {d}, dt);
      }
      add(norm + ".weight", {d}, dt);
      add(norm + ".bias", {d}, dt);
    };
    const auto ffn = [&](const std::string& p) {
      add(p + "fc1.weight", {F, d}, dt);
      add(p + "fc1.bias", {F}, dt);
      add(p + "fc2.weight", {d, F}, dt);
      add(p + "fc2.bias", {d}, dt);
      add(p + "final_layer_norm.weight", {d}, dt);
      add(p + "final_layer_norm.bias", {d}, dt);
    };
    for (int64_t i = 0; i < s.encoder_layers; ++i) {
      const std::string p = "model.encoder.layers." + std::to_string(i) + ".";
      attention(p + "self_attn", p + "self_attn_layer_norm");
      ffn(p);
    }
    add("model.encoder.layer_norm.weight", {d}, dt);
    add("model.encoder.layer_norm.bias", {d}, dt);
    add("model.decoder.embed_tokens.weight", {s.vocab, d}, dt);
    add("model.decoder.embed_positions.weight", {s.n_text_ctx, d}, dt);
    for (int64_t i = 0; i < s.decoder_layers; ++i) {
      const std::string p = "model.decoder.layers." + std::to_string(i) + ".";
      attention(p + "self_attn", p + "self_attn_layer_norm");
      attention(p + "encoder_attn", p + "encoder_attn_layer_norm");
      ffn(p);
    }
    add("model.decoder.layer_norm.weight", {d}, dt);
    add("model.decoder.layer_norm.bias", {d}, dt);
    map_read_only();
  }
  std::string format() const override { return "random"; }
  std::string path() const override { return "(random whisper-base)"; }
  const std::vector<xdna::TensorInfo>& tensors() const override { return infos_; }
  xdna::Tensor get(const std::string& name) const override { return tensors_.at(name); }
  nlohmann::json metadata() const override { return nlohmann::json::object(); }

 private:
  void add(const std::string& name, const xdna::Shape& shape, xdna::DType dt) {
    const int64_t n = xdna::shape_numel(shape);
    const float sd = shape.size() >= 2 ? 1.0f / std::sqrt(static_cast<float>(shape.back())) : 0.1f;
    std::normal_distribution<float> dist(0.0f, sd);
    xdna::Tensor t = xdna::Tensor::empty(shape, dt);
    for (int64_t i = 0; i < n; ++i) {
      const float v = dist(rng_) + (name.ends_with("norm.weight") ? 1.0f : 0.0f);
      if (dt == xdna::DType::F16) t.data<uint16_t>()[i] = xdna::f32_to_f16(v);
      else if (dt == xdna::DType::BF16) t.data<uint16_t>()[i] = xdna::f32_to_bf16(v);
      else t.data<float>()[i] = v;
    }
    xdna::TensorInfo info;
    info.name = name;
    info.dtype = dt;
    info.shape = shape;
    infos_.push_back(info);
    tensors_[name] = t;
  }
  // Real weights are read-only file mappings, whose packed GEMM panels host::matmul caches (it
  // never caches writable heap tensors): so the weights go through a temporary file and are
  // mapped back, or multi-row steps would re-pack every matrix every call.
  void map_read_only() {
    const std::string path = "/tmp/xdna_bench_whisper_" + std::to_string(::getpid()) + ".bin";
    std::vector<size_t> offsets;
    {
      std::ofstream f(path, std::ios::binary);
      size_t pos = 0;
      for (const auto& info : infos_) {
        const xdna::Tensor& t = tensors_.at(info.name);
        const size_t pad = (64 - pos % 64) % 64;
        f.write(std::string(pad, '\0').data(), static_cast<std::streamsize>(pad));
        pos += pad;
        offsets.push_back(pos);
        f.write(reinterpret_cast<const char*>(t.raw()), t.nbytes());
        pos += static_cast<size_t>(t.nbytes());
      }
      if (!f) throw std::runtime_error(path + ": cannot write the random weights");
    }
    auto mapped = std::make_shared<xdna::MappedFile>(path);
    std::remove(path.c_str());  // the mapping keeps the pages
    for (size_t i = 0; i < infos_.size(); ++i)
      tensors_[infos_[i].name] = xdna::Tensor::view(mapped, offsets[i], infos_[i].shape, *infos_[i].dtype);
  }
  std::mt19937 rng_{42};
  std::vector<xdna::TensorInfo> infos_;
  std::map<std::string, xdna::Tensor> tensors_;
};

xdna::WhisperSpec base_spec() {
  xdna::WhisperSpec s;
  s.d_model = 512;
  s.encoder_layers = s.decoder_layers = 6;
  s.encoder_heads = s.decoder_heads = 8;
  s.ffn_dim = 2048;
  s.vocab = 51865;
  return s;
}

xdna::WhisperModel& model(int dtype_index) {
  static std::map<int, std::unique_ptr<xdna::WhisperModel>> models;
  auto& m = models[dtype_index];
  if (!m) {
    const xdna::DType dt = dtype_index == 0 ? xdna::DType::F16 : dtype_index == 1 ? xdna::DType::BF16 : xdna::DType::F32;
    m = std::make_unique<xdna::WhisperModel>(base_spec(), std::make_shared<RandomWhisper>(base_spec(), dt));
  }
  return *m;
}

const char* dtype_label(int i) { return i == 0 ? "f16" : i == 1 ? "bf16" : "f32"; }

// CPU time of every thread of the process: on a loaded machine, proc_cpu_ms / threads estimates
// the wall time an idle machine would show (it includes the worker threads' brief spinning).
double process_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return 1e3 * static_cast<double>(ts.tv_sec) + 1e-6 * static_cast<double>(ts.tv_nsec);
}

xdna::Tensor random_mel(const xdna::WhisperSpec& s) {
  xdna::Tensor mel = xdna::Tensor::empty({s.n_mels, 2 * s.n_audio_ctx});
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t i = 0; i < mel.numel(); ++i) mel.data<float>()[i] = u(rng);
  return mel;
}

void BM_Encode(benchmark::State& state) {
  xdna::WhisperModel& m = model(static_cast<int>(state.range(0)));
  state.SetLabel(dtype_label(static_cast<int>(state.range(0))));
  const xdna::Tensor mel = random_mel(m.spec());
  const double cpu0 = process_cpu_ms();
  xdna::RunReport report;  // the last run's, printed when XDNA_WHISPER_REPORT is set
  for (auto _ : state) benchmark::DoNotOptimize(m.encode(mel, {}, &report).data<float>());
  if (std::getenv("XDNA_WHISPER_REPORT")) std::printf("%s\n", report.summary().c_str());
  state.counters["proc_cpu_ms"] = (process_cpu_ms() - cpu0) / static_cast<double>(state.iterations());
}

// One decode step for `beams` beams at ~100 tokens of context (a typical mid-window position).
void BM_DecodeStep(benchmark::State& state) {
  xdna::WhisperModel& m = model(static_cast<int>(state.range(0)));
  const int64_t beams = state.range(1);
  state.SetLabel(std::string(dtype_label(static_cast<int>(state.range(0)))) + " beams=" + std::to_string(beams));
  static std::map<int, xdna::Tensor> features;
  auto& f = features[static_cast<int>(state.range(0))];
  if (!f.defined()) f = m.encode(random_mel(m.spec()));
  const std::vector<int32_t> prompt(100, 50258);
  xdna::WhisperDecodeState st = m.start(f, beams);
  m.decode(std::vector<std::vector<int32_t>>(beams, prompt), st);
  double total_ms = 0, matmul_ms = 0;
  int64_t steps = 0;
  const double cpu0 = process_cpu_ms();
  xdna::RunReport last;  // the last step's, printed when XDNA_WHISPER_REPORT is set
  for (auto _ : state) {
    if (st.position >= 400) {
      state.PauseTiming();
      st = m.start(f, beams);
      m.decode(std::vector<std::vector<int32_t>>(beams, prompt), st);
      state.ResumeTiming();
    }
    xdna::RunReport& report = last;
    const auto t0 = std::chrono::steady_clock::now();
    m.decode(std::vector<std::vector<int32_t>>(beams, std::vector<int32_t>{440}), st, {}, &report);
    total_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    for (const auto& r : report.ops)
      if (r.op == xdna::OpKind::MatMul) matmul_ms += r.ms;
    ++steps;
  }
  if (std::getenv("XDNA_WHISPER_REPORT")) std::printf("%s\n", last.summary().c_str());
  state.counters["ms/step"] = total_ms / static_cast<double>(steps);
  state.counters["proc_cpu_ms"] = (process_cpu_ms() - cpu0) / static_cast<double>(steps);
  state.counters["matmul_share"] = matmul_ms / total_ms;
}

BENCHMARK(BM_Encode)->Arg(0)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DecodeStep)->Args({0, 1})->Args({1, 1})->Args({2, 1})->Args({0, 5})->Args({1, 5})
    ->Unit(benchmark::kMillisecond);

}  // namespace

int main(int argc, char** argv) { return run_model_benchmarks(argc, argv); }
