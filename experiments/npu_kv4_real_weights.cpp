// Real-weights check of the fused decode's KV cache precisions on npu-sim (not a test: it needs a
// GGUF from the model store and minutes of CPU): the int8 plan (decode_layer_int8 + lm_head_int8,
// weights dequantized from the file to f32 and quantized per row as the plan packs them) with the
// int8 KV cache and with the int4 one, against the host decoder running the file as it is, on a
// short text fed token by token (teacher forcing): per KV precision the perplexity of the text,
// the top-1 agreement with the host's next-token argmax, and the worst max|dlogit| / max|logit|.
// Then a short greedy continuation of the text's first tokens per precision. The plan's model
// is the one `npu generate --device npu-sim` runs (NpuSimFusedDecode::prepare): a GGUF's GGML
// block tensors (Gemma 3 270M's Q4_K_M file: q4_k, q5_0, q6_k, q8_0) dequantized to f32, then
// quantized per row to int8. The host loader always ran that file; what refused it before was the
// fused path's weight intake (f32/f16/bf16 only) and, at Gemma 3 270M's head_dim 256 on one KV
// head, the kernels' gathered-partials bound, both lifted (the partials are now combined as the
// exchange delivers them). Measured on that file (593 s): host perplexity 28.82; int8 KV 29.65,
// top-1 31 / 37, worst 0.162; int4 KV 49.19, 21 / 37, 0.505.
// Build (from a configured build dir B, after `ninja -C B npu`; one command line):
//   g++ -O2 -std=gnu++20 -fopenmp -I. -Isrc -isystem /usr/include/libdrm experiments/npu_kv4_real_weights.cpp
//     B/src/libxdna_pipeline.a B/src/libxdna_npu.a B/src/libxdna_models.a B/src/libxdna_weights.a
//     B/src/host/libxdna_host.a B/src/libxdna_core.a -ldrm -lcrypto -lz -lyaml-cpp -lsentencepiece
//     -lutf8proc -lpcre2-32 -lpthread -o /tmp/npu_kv4_real_weights
// Run: /tmp/npu_kv4_real_weights MODEL.gguf
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "models/decoder.h"
#include "npu/sim_exec_decoder.h"
#include "pipeline/llm.h"
#include "pipeline/llm_npu_fused.h"

using namespace xdna;
using namespace xdna::npu;

namespace {

int32_t argmax(const std::vector<float>& l) { return int32_t(std::max_element(l.begin(), l.end()) - l.begin()); }

double nll(const std::vector<float>& l, int32_t target) {
  const float mx = *std::max_element(l.begin(), l.end());
  double z = 0;
  for (float v : l) z += std::exp(double(v - mx));
  return std::log(z) - double(l[size_t(target)] - mx);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL.gguf\n", argv[0]);
    return 2;
  }
  const auto t0 = std::chrono::steady_clock::now();
  LoadOptions o;
  o.context_length = 256;
  const auto lm = LanguageModel::load(argv[1], o);
  const DecoderSpec& spec = lm->decoder().spec();
  const Tokenizer& tok = lm->tokenizer();
  const std::string text =
      "The river runs through the old town, past the market square and under three stone bridges. In spring the "
      "water rises, and the children watch the boats carry timber down to the sea.";
  const std::vector<int32_t> ids = tok.encode(text).ids;
  const int64_t n = int64_t(ids.size());
  if (n < 3) {
    std::fprintf(stderr, "%s: the text is %lld token(s) with this file's tokenizer; need at least 3\n", argv[1],
                 (long long)n);
    return 1;
  }
  std::printf("%s: %lld layers, hidden %lld, head_dim %lld, kv_heads %lld; text of %lld tokens\n", argv[1],
              (long long)spec.layers, (long long)spec.hidden, (long long)spec.head_dim, (long long)spec.kv_heads,
              (long long)n);

  // Host: logits after each prefix (the file's own weights, f32 activations).
  const Decoder& host = lm->decoder();
  DecoderState hs = host.new_state(n + 16);
  std::vector<std::vector<float>> host_logits;
  for (int64_t i = 0; i + 1 < n; ++i) {
    const DecoderStep st = host.forward({ids[size_t(i)]}, hs);
    const float* l = st.logits.data<float>();
    host_logits.emplace_back(l, l + spec.vocab_size);
  }
  double host_nll = 0;
  for (int64_t i = 0; i + 1 < n; ++i) host_nll += nll(host_logits[size_t(i)], ids[size_t(i + 1)]);
  std::printf("host (file weights, f32): perplexity %.3f\n", std::exp(host_nll / double(n - 1)));

  const auto fused = NpuSimFusedDecode::prepare(*lm, DType::I8);
  if (!fused->enabled()) {
    std::fprintf(stderr, "%s: npu-sim refuses the fused plan: %s\n", argv[1], fused->refusal().c_str());
    return 1;
  }
  SimDecoderModel m = fused->model();
  const int64_t prompt = std::min<int64_t>(8, n - 1), greedy = 12;
  for (const char* kv : {"int8", "int4"}) {
    m.shape.kv_int8 = std::string(kv) == "int8";
    m.shape.kv_int4 = std::string(kv) == "int4";
    SimDecoderState st(m, n + greedy + 4);
    double total = 0, worst = 0;
    int agree = 0;
    for (int64_t i = 0; i + 1 < n; ++i) {
      const std::vector<float> l = fused_decode_token(m, ids[size_t(i)], st).logits;
      const std::vector<float>& h = host_logits[size_t(i)];
      total += nll(l, ids[size_t(i + 1)]);
      agree += argmax(l) == argmax(h);
      double span = 0, err = 0;
      for (size_t v = 0; v < l.size(); ++v)
        span = std::max(span, std::fabs(double(h[v]))), err = std::max(err, std::fabs(double(l[v]) - h[v]));
      worst = std::max(worst, err / span);
    }
    std::printf("npu-sim int8 plan, %s KV: perplexity %.3f, top-1 agreement with the host %d / %lld, worst "
                "max|dlogit| / max|logit| %.3f\n",
                kv, std::exp(total / double(n - 1)), agree, (long long)(n - 1), worst);
    std::fflush(stdout);
    // Greedy continuation of the first `prompt` tokens.
    SimDecoderState g(m, n + greedy + 4);
    SimTokenResult r;
    for (int64_t i = 0; i < prompt; ++i) r = fused_decode_token(m, ids[size_t(i)], g);
    std::vector<int32_t> out;
    for (int64_t t = 0; t < greedy; ++t) {
      out.push_back(argmax(r.logits));
      if (t + 1 < greedy) r = fused_decode_token(m, out.back(), g);
    }
    std::printf("  greedy after \"%s\": \"%s\"\n",
                tok.decode(std::vector<int32_t>(ids.begin(), ids.begin() + prompt)).c_str(), tok.decode(out).c_str());
    std::fflush(stdout);
  }
  {  // the host's greedy continuation of the same prefix
    DecoderState s2 = host.new_state(prompt + greedy + 4);
    DecoderStep st = host.forward(std::vector<int32_t>(ids.begin(), ids.begin() + prompt), s2);
    std::vector<int32_t> out;
    for (int64_t t = 0; t < greedy; ++t) {
      const float* l = st.logits.data<float>();
      out.push_back(int32_t(std::max_element(l, l + spec.vocab_size) - l));
      if (t + 1 < greedy) st = host.forward({out.back()}, s2);
    }
    std::printf("host greedy: \"%s\"\n", tok.decode(out).c_str());
  }
  std::printf("(%.0f s)\n", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return 0;
}
