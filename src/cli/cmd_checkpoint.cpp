// `npu checkpoint bake` converts a checkpoint into the engine's baked file;
// `npu checkpoint info` lists the tensors and metadata of a safetensors, GGUF, baked or
// CTranslate2 model.bin file; `npu checkpoint import` turns a CTranslate2 Whisper directory
// (what faster-whisper loads) into a model directory the engine loads (src/weights/ctranslate2.h).
// `--precision auto` measures the model on evaluation sentences and picks a precision per weight
// tensor (src/pipeline/precision_auto.h).
#include <chrono>
#include <filesystem>
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "pipeline/precision_auto.h"
#include "weights/bake.h"
#include "weights/ctranslate2.h"
#include "weights/baked.h"
#include "weights/gguf.h"
#include "core/sha256.h"
#include "weights/source.h"

namespace xdna::cli {

namespace {

using nlohmann::json;

std::string human_bytes(uint64_t n) {
  char buf[32];
  if (n >= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", n / double(1ull << 30));
  else if (n >= (1ull << 20)) std::snprintf(buf, sizeof buf, "%.2f MiB", n / double(1ull << 20));
  else if (n >= 1024) std::snprintf(buf, sizeof buf, "%.1f KiB", n / 1024.0);
  else std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(n));
  return buf;
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// One metadata value on one line: long arrays are summarised.
std::string brief(const json& v) {
  if (v.is_array() && v.size() > 8) {
    std::string s = "[" + std::to_string(v.size()) + " items: ";
    for (size_t i = 0; i < 4; ++i) s += (i ? ", " : "") + dump(v[i]);
    return s + ", ...]";
  }
  std::string s = dump(v);
  return s.size() > 200 ? s.substr(0, 200) + "..." : s;
}

void print_info(const std::string& path, bool as_json) {
  // CTranslate2's model.bin has no magic bytes: recognised by its name.
  std::unique_ptr<WeightSource> w =
      path.ends_with(".bin") ? open_ctranslate2(path) : open_weights(path);
  uint64_t total = 0;
  for (const auto& t : w->tensors()) total += t.bytes;
  json meta = w->metadata();

  if (as_json) {
    json out = {{"path", w->path()}, {"format", w->format()}, {"metadata", meta},
                {"tensor_bytes", total}};
    if (auto* g = dynamic_cast<GgufFile*>(w.get())) {
      out["version"] = g->version();
      out["alignment"] = g->alignment();
    }
    if (auto* b = dynamic_cast<BakedModel*>(w.get())) out["files"] = b->manifest()["files"];
    json tensors = json::array();
    for (const auto& t : w->tensors())
      tensors.push_back({{"name", t.name},
                         {"dtype", t.file_dtype},
                         {"engine_dtype", t.dtype ? json(dtype_name(*t.dtype)) : json(nullptr)},
                         {"shape", t.shape},
                         {"file", t.file},
                         {"offset", t.offset},
                         {"bytes", t.bytes}});
    out["tensors"] = tensors;
    std::printf("%s\n", out.dump(2, ' ', false, json::error_handler_t::replace).c_str());
    return;
  }

  std::printf("path:    %s\nformat:  %s", w->path().c_str(), w->format().c_str());
  if (auto* g = dynamic_cast<GgufFile*>(w.get()))
    std::printf(" (version %u, alignment %llu)", g->version(),
                static_cast<unsigned long long>(g->alignment()));
  std::printf("\ntensors: %zu, %s\n", w->tensors().size(), human_bytes(total).c_str());
  if (auto* b = dynamic_cast<BakedModel*>(w.get())) {
    const json& src = b->manifest()["source"];
    std::printf("precision: %s\nsource:  %s (%s)\n", meta.value("precision", "?").c_str(),
                src.value("path", "?").c_str(), src.value("format", "?").c_str());
    std::printf("config:  %s\n", b->config().is_null() ? "none" : "yes");
    for (const auto& f : b->file_names())
      std::printf("file:    %s (%s)\n", f.c_str(), human_bytes(b->file(f).size()).c_str());
    meta = src.value("metadata", json::object());
  }
  if (!meta.empty()) {
    std::printf("metadata (%zu keys):\n", meta.size());
    for (auto it = meta.begin(); it != meta.end(); ++it)
      std::printf("  %s = %s\n", it.key().c_str(), brief(it.value()).c_str());
  }
  size_t width = 4;
  for (const auto& t : w->tensors()) width = std::max(width, t.name.size());
  std::printf("%-*s  %-8s  %-20s  %s\n", static_cast<int>(width), "name", "dtype", "shape",
              "bytes");
  for (const auto& t : w->tensors())
    std::printf("%-*s  %-8s  %-20s  %llu%s\n", static_cast<int>(width), t.name.c_str(),
                t.file_dtype.c_str(), shape_str(t.shape).c_str(),
                static_cast<unsigned long long>(t.bytes), t.dtype ? "" : "  (unsupported)");
}

// --precision auto: choose per tensor, print the choice, and hand the plans to the bake.
void plan_auto(BakeOptions& o, const std::string& eval, double gate) {
  if (eval.empty())
    throw std::invalid_argument("--precision auto needs --eval FILE: evaluation sentences, one per "
                                "line (e.g. tests/fixtures/encoders/eval_sentences.txt)");
  const AccuracyProbe probe(o.source, read_eval_sentences(eval));
  std::fprintf(stderr, "auto: %zu ops, %zu sentences (%lld tokens), gate min cosine >= %g\n",
               probe.ops().size(), probe.sentences(), static_cast<long long>(probe.tokens()), gate);
  AutoOptions ao;
  ao.gate = gate;
  ao.log = [](const std::string& line) { std::fprintf(stderr, "auto: %s\n", line.c_str()); };
  const AutoChoice c = choose_precisions(probe, ao);
  size_t width = 6;
  for (const OpChoice& op : c.ops) width = std::max(width, op.tensor.size());
  std::printf("%-*s  %-9s  %10s  %10s  %11s  %s\n", static_cast<int>(width), "tensor", "precision",
              "bytes", "min cosine", "mean cosine", "rejected (min cosine)");
  for (const OpChoice& op : c.ops) {
    std::string rejected;
    for (const auto& [prec, a] : op.rejected) {
      char buf[48];
      std::snprintf(buf, sizeof buf, "%s%s %.6f", rejected.empty() ? "" : ", ", prec.c_str(), a.min_cosine);
      rejected += buf;
    }
    std::printf("%-*s  %-9s  %10llu  %10.6f  %11.6f  %s\n", static_cast<int>(width), op.tensor.c_str(),
                op.plan.precision.c_str(), static_cast<unsigned long long>(op.bytes),
                op.accuracy.min_cosine, op.accuracy.mean_cosine, rejected.c_str());
  }
  std::printf("auto: min cosine %.6f, mean %.6f over %zu sentences (gate %g); tensors %s vs %s "
              "at f32 (%.1f%%)\n",
              c.accuracy.min_cosine, c.accuracy.mean_cosine, c.sentences, gate,
              human_bytes(c.bytes).c_str(), human_bytes(c.bytes_f32).c_str(),
              100.0 * c.bytes / c.bytes_f32);
  o.source = probe.model().path();
  o.plans = c.plans();
  o.tensor_fields = c.tensor_fields();
  o.auto_record = c.record({{"path", std::filesystem::absolute(eval).lexically_normal().string()},
                            {"sha256", sha256_file(eval)},
                            {"sentences", probe.sentences()},
                            {"tokens", probe.tokens()}});
}

}  // namespace

void add_checkpoint_command(CLI::App& app) {
  CLI::App* cmd = app.add_subcommand("checkpoint", "Inspect checkpoints and bake them into the "
                                                   "engine's format");
  cmd->require_subcommand(1);

  struct BakeArgs {
    std::string source, output, precision, eval;
    int64_t group = 0;
    double gate = 0.999;
  };
  auto bake = std::make_shared<BakeArgs>();
  CLI::App* b = cmd->add_subcommand(
      "bake", "Convert a Hugging Face checkpoint directory or a .gguf file into a baked model");
  b->add_option("SRC", bake->source, "Checkpoint directory, .safetensors, index or .gguf file")
      ->required();
  b->add_option("-o,--output", bake->output, "Baked file to write")->required();
  b->add_option("--precision", bake->precision,
                "Weight-matrix storage: f32, f16, bf16, bfp16, int8, int4, keep, or auto (per "
                "tensor, the cheapest that keeps the embeddings' cosine to f32 >= --gate on --eval)")
      ->required()
      ->check(CLI::IsMember({"f32", "f16", "bf16", "bfp16", "int8", "int4", "keep", "auto"}));
  b->add_option("--group", bake->group,
                "int8/int4 quantization group (default: int8 one scale per row, int4 32)")
      ->check(CLI::PositiveNumber);
  b->add_option("--eval", bake->eval,
                "auto: evaluation sentences, one per line (tests/fixtures/encoders/eval_sentences.txt)");
  b->add_option("--gate", bake->gate, "auto: minimum cosine to the f32 embeddings (default 0.999)")
      ->check(CLI::Range(0.0, 1.0));
  b->callback([bake] {
    BakeOptions o;
    o.source = bake->source;
    o.output = bake->output;
    o.precision = *precision_from_name(bake->precision);
    o.group = bake->group;
    o.log = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
    const auto t0 = std::chrono::steady_clock::now();
    if (o.precision == Precision::Auto) plan_auto(o, bake->eval, bake->gate);
    else if (!bake->eval.empty()) throw std::invalid_argument("--eval applies only to --precision auto");
    const BakeSummary s = bake_checkpoint(o);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "wrote %s: %lld tensors (%lld skipped), %s read, %s written, %.1f s\n",
                 o.output.c_str(), static_cast<long long>(s.tensors),
                 static_cast<long long>(s.skipped), human_bytes(s.bytes_in).c_str(),
                 human_bytes(s.bytes_out).c_str(), secs);
  });

  struct ImportArgs {
    std::string source, output, precision = "keep";
  };
  auto imp = std::make_shared<ImportArgs>();
  CLI::App* im = cmd->add_subcommand(
      "import", "Convert a CTranslate2 Whisper model directory (model.bin, config.json, "
                "tokenizer.json) into OUT/model.baked + OUT/config.json + OUT/tokenizer.json");
  im->add_option("CT2_DIR", imp->source, "CTranslate2 model directory (faster-whisper's)")
      ->required()
      ->check(CLI::ExistingDirectory);
  im->add_option("-o,--out", imp->output, "Model directory to write")->required();
  im->add_option("--precision", imp->precision,
                 "Weight-matrix storage: keep (default: as model.bin has it), f32, f16, bf16, "
                 "bfp16, int8, int4")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "bfp16", "int8", "int4", "keep"}));
  im->callback([imp] {
    namespace fs = std::filesystem;
    const fs::path out(imp->output), src(imp->source);
    if (fs::exists(out) && fs::equivalent(out, src))
      throw std::invalid_argument("--out must differ from CT2_DIR");
    fs::create_directories(out);
    const auto t0 = std::chrono::steady_clock::now();
    const Ct2ImportSummary s = import_ctranslate2_whisper(
        imp->source, (out / "model.baked").string(), (out / "config.json").string(),
        *precision_from_name(imp->precision));
    for (const char* f : {"tokenizer.json", "vocabulary.json", "vocabulary.txt",
                          "preprocessor_config.json"})
      if (fs::is_regular_file(src / f))
        fs::copy_file(src / f, out / f, fs::copy_options::overwrite_existing);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "imported %s (%s): %lld tensors, %s read, %s written to %s, %.1f s\n",
                 imp->source.c_str(), s.spec.c_str(), static_cast<long long>(s.tensors),
                 human_bytes(s.bytes).c_str(),
                 human_bytes(fs::file_size(out / "model.baked")).c_str(),
                 (out / "model.baked").c_str(), secs);
  });

  auto info_path = std::make_shared<std::string>();
  auto info_json = std::make_shared<bool>(false);
  CLI::App* i = cmd->add_subcommand("info", "List the tensors and metadata of a checkpoint");
  i->add_option("FILE", *info_path,
                "safetensors file or directory, .gguf, baked or CTranslate2 model.bin file")
      ->required();
  i->add_flag("--json", *info_json, "Print JSON");
  i->callback([info_path, info_json] { print_info(*info_path, *info_json); });
}

}  // namespace xdna::cli
