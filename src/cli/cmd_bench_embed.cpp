// `npu bench embed --model M --batch B --tokens T [--iters N] [--warmup W] [--json]`: sentence
// embeddings per second for B sequences of exactly T tokens, timed in-process (model load and
// process start-up are outside the timing). Tokenization is outside it too: the inputs are token
// ids, [CLS] + T-2 body ids + [SEP] as the model's tokenizer frames an empty text, so a peer
// runtime fed the same ids (bench/embeddings_vs_onnxruntime.py) does the same work.
//
// `npu bench embed --model M --accuracy FILE [--json]` instead measures accuracy: the cosine
// (min and mean over the sentences of FILE, one per line) of the embeddings with the weights
// stored as each bake precision would store them, against the f32 embeddings.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/config.h"
#include "core/cpu.h"
#include "core/parallel.h"
#include "pipeline/embed.h"
#include "pipeline/precision_auto.h"

namespace xdna::cli {
namespace {

struct BenchEmbedOptions {
  std::string model = "all-minilm-l6-v2";
  std::string store;
  int batch = 1;
  int tokens = 16;
  int iters = 20;
  int warmup = 3;
  bool json = false;
  std::string accuracy;  // evaluation sentences: measure accuracy instead of speed
};

// The body ids of sequence b: a fixed spread over the vocabulary, away from the special and
// unused ids at its start. The Python peer script computes the same formula.
int32_t body_id(int64_t b, int64_t t, int64_t vocab) {
  const int64_t lo = std::min<int64_t>(1000, vocab / 2), span = std::max<int64_t>(1, vocab - lo);
  return static_cast<int32_t>(lo + ((b * 131 + t) * 7919) % span);
}

std::vector<std::vector<int32_t>> make_inputs(const EmbeddingModel& model, int batch, int tokens) {
  const Encoding frame = model.tokenizer().encode("", true);  // e.g. [CLS] [SEP]
  const int specials = static_cast<int>(frame.ids.size());
  if (tokens <= specials)
    throw std::invalid_argument("bench embed: --tokens must exceed the " + std::to_string(specials) +
                                " special tokens the model adds");
  if (static_cast<size_t>(tokens) > model.max_length())
    throw std::invalid_argument("bench embed: --tokens " + std::to_string(tokens) + " is more than the model's " +
                                std::to_string(model.max_length()) + "-token maximum");
  std::vector<std::vector<int32_t>> ids(batch);
  for (int b = 0; b < batch; ++b) {
    auto& seq = ids[b];
    if (specials > 0) seq.push_back(frame.ids.front());
    for (int t = 0; t < tokens - specials; ++t) seq.push_back(body_id(b, t, model.spec().vocab_size));
    for (int s = 1; s < specials; ++s) seq.push_back(frame.ids[s]);
  }
  return ids;
}

void run_bench_embed(const BenchEmbedOptions& o) {
  if (o.batch < 1 || o.tokens < 1 || o.iters < 1 || o.warmup < 0)
    throw std::invalid_argument("bench embed: --batch, --tokens and --iters must be >= 1, --warmup >= 0");
  const EmbeddingModel model = EmbeddingModel::load(o.model, resolve_store(o.store));
  const auto ids = make_inputs(model, o.batch, o.tokens);
  EmbedOptions eo;
  eo.max_length = static_cast<size_t>(o.tokens);

  EmbedResult last;
  for (int i = 0; i < o.warmup; ++i) last = model.embed_ids(ids, eo);
  std::vector<double> seconds;
  for (int i = 0; i < o.iters; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    last = model.embed_ids(ids, eo);
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::vector<double> sorted = seconds;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  const double median = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  const double per_s = o.batch / median;

  if (o.json) {
    const nlohmann::json out = {{"model", model.name()},
                                {"path", model.path()},
                                {"batch", o.batch},
                                {"tokens", o.tokens},
                                {"iters", o.iters},
                                {"warmup", o.warmup},
                                {"threads", num_threads()},
                                {"isa", isa_name(active_isa())},
                                {"median_s", median},
                                {"min_s", sorted.front()},
                                {"max_s", sorted.back()},
                                {"sentences_per_s", per_s},
                                {"input_ids_0", ids.front()},
                                {"embedding_0", last.items[0].vector},
                                {"last_run", run_summary_json(last.report)}};
    std::printf("%s\n", out.dump().c_str());
    return;
  }
  std::printf("%s: batch %d x %d tokens, %d threads, isa %s\n", model.name().c_str(), o.batch, o.tokens,
              num_threads(), isa_name(active_isa()).c_str());
  std::printf("median %.3f ms (min %.3f, max %.3f over %d iters) = %.1f sentences/s\n", median * 1e3,
              sorted.front() * 1e3, sorted.back() * 1e3, o.iters, per_s);
  std::printf("last run by op:\n%s", last.report.summary().c_str());
}

void run_accuracy(const BenchEmbedOptions& o) {
  const AccuracyProbe probe(o.model, read_eval_sentences(o.accuracy), resolve_store(o.store));
  const uint64_t f32_bytes = probe.bytes({});
  nlohmann::json rows = nlohmann::json::array();
  if (!o.json)
    std::printf("%s: %zu sentences (%lld tokens) from %s, cosine against f32\n"
                "precision  weight MiB  vs f32  min cosine  mean cosine\n",
                probe.model().name().c_str(), probe.sentences(), static_cast<long long>(probe.tokens()),
                o.accuracy.c_str());
  for (Precision p : {Precision::F32, Precision::BF16, Precision::BFP16, Precision::Int8, Precision::Int4}) {
    const auto plans = probe.uniform_plans(p);
    const Accuracy a = probe.measure(plans);
    const uint64_t bytes = probe.bytes(plans);
    rows.push_back({{"precision", precision_name(p)}, {"bytes", bytes}, {"min_cosine", a.min_cosine},
                    {"mean_cosine", a.mean_cosine}, {"worst_sentence", a.worst}});
    if (!o.json)
      std::printf("%-9s  %10.2f  %5.1f%%  %10.6f  %11.6f\n", precision_name(p), bytes / 1048576.0,
                  100.0 * bytes / f32_bytes, a.min_cosine, a.mean_cosine);
    std::fflush(stdout);
  }
  if (o.json)
    std::printf("%s\n", nlohmann::json({{"model", probe.model().name()}, {"path", probe.model().path()},
                                        {"eval", o.accuracy}, {"sentences", probe.sentences()},
                                        {"tokens", probe.tokens()}, {"isa", isa_name(active_isa())},
                                        {"precisions", rows}}).dump().c_str());
}

}  // namespace

void add_bench_embed_command(CLI::App& bench) {
  auto* cmd = bench.add_subcommand("embed", "Sentence embeddings per second, timed in-process");
  static BenchEmbedOptions o;
  cmd->add_option("--model", o.model, "Model name in the store, checkpoint directory or baked file");
  cmd->add_option("--store", o.store, "Model store directory");
  cmd->add_option("--batch", o.batch, "Sequences per call");
  cmd->add_option("--tokens", o.tokens, "Tokens per sequence, special tokens included");
  cmd->add_option("--iters", o.iters, "Timed calls (the median is reported)");
  cmd->add_option("--warmup", o.warmup, "Untimed calls first");
  cmd->add_flag("--json", o.json, "Print the figures as one JSON object");
  cmd->add_option("--accuracy", o.accuracy,
                  "Measure accuracy instead of speed: cosine against f32 per bake precision, over "
                  "the sentences of this file (one per line)");
  cmd->callback([] {
    if (o.accuracy.empty()) run_bench_embed(o);
    else run_accuracy(o);
  });
}

}  // namespace xdna::cli
