// `npu transcribe FILE... [--model M] [--language L] [--task transcribe|translate] [--format F]
// [--output-dir D] ...`: speech to text with a speech model (Whisper, or a conformer: Parakeet, GigaAM). Each FILE is any audio libavformat
// reads; its transcript goes to stdout, or to D/<name>.<ext> with --output-dir. A file that fails
// is reported with its name and the others still run; the exit status is then non-zero.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/config.h"
#include "cli/llm_options.h"  // DeviceBackends
#include "cli/server_client.h"
#include "models/catalog.h"
#include "models/model_store.h"
#include "pipeline/audio.h"
#include "pipeline/speech_model.h"
#include "pipeline/transcribe.h"

namespace fs = std::filesystem;

namespace xdna::cli {

namespace {

struct TranscribeCliOptions {
  std::vector<std::string> files;
  std::string model;  // empty: whisper-base if pulled, else whisper-tiny.en
  std::string store;
  std::string language;
  std::string task = "transcribe";
  std::string format = "txt";
  std::string output_dir;
  int beam_size = 5;
  float temperature = 0;
  bool temperature_given = false;
  std::string prompt;
  bool no_timestamps = false;
  bool word_timestamps = false;
  bool progress = false;
  bool timings = false;
  std::string device = "host";
  std::string fallback;  // --fallback ("" = config npu_fallback, else none)
  ServerFlags server;
};

// "whisper-base (pulled), whisper-tiny.en (pull with ...)" for error messages.
std::string available_speech_models(const ModelStore& store) {
  std::string pulled, pullable;
  for (const Manifest& m : store.list())
    if (is_speech_family(m.family)) pulled += (pulled.empty() ? "" : ", ") + m.name;
  for (const CatalogEntry& e : catalog())
    if (e.family == "whisper" && !store.find(e.name)) pullable += (pullable.empty() ? "" : ", ") + e.name;
  return "speech models in the store: " + (pulled.empty() ? std::string("none") : pulled) +
         (pullable.empty() ? "" : "; `npu model pull` can add: " + pullable);
}

// --model as a path, a store name or a catalog alias; the default when it is empty.
std::string resolve_speech_model(const std::string& wanted, const std::string& store_dir) {
  const ModelStore store(store_dir);
  std::string name = wanted;
  if (name.empty()) {
    name = store.find("whisper-base") ? "whisper-base" : "whisper-tiny.en";
    if (!store.find(name))
      throw std::runtime_error("transcribe: no --model and no speech model pulled (" + available_speech_models(store) +
                               ")");
  }
  if (fs::exists(name)) return name;
  std::optional<Manifest> m;
  if (valid_model_name(name)) {
    m = store.find(name);
    if (const CatalogEntry* e = find_in_catalog(name); !m && e) m = store.find(e->name);
  }
  if (!m) throw std::runtime_error("transcribe: model '" + name + "' is not a path and not in the store (" +
                                   available_speech_models(store) + ")");
  if (!is_speech_family(m->family))
    throw std::runtime_error("transcribe: model '" + name + "' is a " + m->family + " model, not a speech model (" +
                             available_speech_models(store) + ")");
  return store.model_dir(m->name);
}

// openai-whisper's CLI: --temperature T with fallback tries T, T + 0.2, ... up to 1.0.
std::vector<float> temperature_ladder(float start) {
  std::vector<float> ladder;
  for (int k = 0; start + 0.2f * k <= 1.0f + 1e-6f; ++k) ladder.push_back(start + 0.2f * k);
  return ladder;
}

std::string extension(const std::string& format) { return format == "verbose_json" ? "json" : format; }

std::string in_process_reason(const TranscribeCliOptions& o) {
  if (o.device != "host") return "--device " + o.device + " is a choice of this process";
  if (!o.store.empty()) return "--store names a store of this process";
  if (o.timings) return "--timings measures this process";
  if (o.temperature_given) return "--temperature's fallback ladder is not part of the transcription API";
  if (o.beam_size != TranscribeOptions{}.beam_size) return "--beam-size is not part of the transcription API";
  if (o.no_timestamps) return "--no-timestamps is not part of the transcription API";
  if (o.word_timestamps) return "--word-timestamps runs in this process";
  if (o.task == "translate" && !o.language.empty()) return "translations on the server take no --language";
  return "";
}

// The model name the server is asked for: --model, else the in-process default.
std::string server_model_name(const TranscribeCliOptions& o) {
  if (!o.model.empty()) return o.model;
  return ModelStore(resolve_store(o.store)).find("whisper-base") ? "whisper-base" : "whisper-tiny.en";
}

// One file transcribed by the server, formatted as in-process. txt (one segment per line) is not
// an API format: it is made here from verbose_json's segments.
std::string transcribe_on_server(ServerClient& server, const TranscribeCliOptions& o, const std::string& model,
                                 const std::string& file) {
  std::ifstream f(file, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + file);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const std::string format = o.format == "txt" ? "verbose_json" : o.format;
  httplib::MultipartFormDataItems form = {{"file", bytes, fs::path(file).filename().string(), "application/octet-stream"},
                                          {"model", model, "", ""},
                                          {"response_format", format, "", ""}};
  if (!o.language.empty()) form.push_back({"language", o.language, "", ""});
  if (!o.prompt.empty()) form.push_back({"prompt", o.prompt, "", ""});
  const bool translate = o.task == "translate";
  std::string out = server.post_form(translate ? "/v1/audio/translations" : "/v1/audio/transcriptions", form);
  if (o.format != "txt") return out;
  const nlohmann::json j = nlohmann::json::parse(out, nullptr, false);
  if (!j.is_object() || !j.contains("segments") || !j["segments"].is_array())
    throw std::runtime_error("the server's verbose_json has no segments");
  Transcript t;
  for (const nlohmann::json& seg : j["segments"]) {
    t.segments.emplace_back();
    t.segments.back().text = seg.value("text", std::string());
  }
  return format_transcript(t, "txt", o.task);
}

void run_transcribe(const TranscribeCliOptions& o) {
  const std::string server_model = o.model.empty() && !o.server.no_server ? server_model_name(o) : o.model;
  std::optional<ServerClient> server = choose_server("transcribe", o.server, server_model, in_process_reason(o));
  std::optional<SpeechModel> asr;
  if (!server) asr.emplace(SpeechModel::load(resolve_speech_model(o.model, resolve_store(o.store))));

  TranscribeOptions opts;
  opts.task = o.task;
  opts.language = o.language;
  opts.beam_size = o.beam_size;
  if (o.temperature_given) opts.temperatures = temperature_ladder(o.temperature);
  opts.initial_prompt = o.prompt;
  opts.timestamps = !o.no_timestamps;
  opts.word_timestamps = o.word_timestamps;
  DeviceBackends devices;
  opts.backends = devices.list(o.device, o.fallback);
  const std::string& format = o.format;
  if (!o.output_dir.empty()) fs::create_directories(o.output_dir);

  const bool tty = isatty(STDERR_FILENO);
  const bool show_progress = o.progress || tty;
  const bool several = o.files.size() > 1;
  const bool json_format = format == "json" || format == "verbose_json";
  size_t failed = 0;
  RunReport all;
  for (const std::string& file : o.files) {
    try {
      std::string out;
      Transcript t;  // in-process only (its timings and op placement)
      if (server) {
        out = transcribe_on_server(*server, o, server_model, file);
      } else {
        const std::vector<float> samples = load_audio(file, asr->sample_rate());
        if (show_progress)
          opts.progress = [&](double done, double total) {
            std::fprintf(stderr, "%snpu transcribe: %s: %.1f / %.1f s (%.0f%%)%s", tty ? "\r" : "", file.c_str(), done,
                         total, total > 0 ? 100.0 * done / total : 100.0, tty ? "" : "\n");
            std::fflush(stderr);
          };
        t = asr->transcribe(samples, opts);
        if (show_progress && tty) std::fprintf(stderr, "\n");
        all.ops.insert(all.ops.end(), t.report.ops.begin(), t.report.ops.end());
        out = format_transcript(t, format, o.task);
      }
      if (!o.output_dir.empty()) {
        const fs::path dst = fs::path(o.output_dir) / (fs::path(file).stem().string() + "." + extension(format));
        std::ofstream f(dst, std::ios::binary);
        f << out;
        if (!f.flush()) throw std::runtime_error("cannot write " + dst.string());
        std::fprintf(stderr, "npu transcribe: %s -> %s\n", file.c_str(), dst.c_str());
        continue;
      }
      if (json_format && (several || o.timings)) {  // one object per line, saying which file
        nlohmann::json j = nlohmann::json::parse(out);
        if (several) j["file"] = file;
        if (o.timings) {  // host wall clock of this run (benchmarks read these)
          j["encode_ms"] = t.encode_ms;                // per 30-s window
          j["decode_ms_per_token"] = t.decode_ms;      // per decoding step (all beams at once)
          j["windows"] = t.windows;
          j["decoded_tokens"] = t.decoded_tokens;
        }
        out = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
      } else if (o.timings) {
        std::fprintf(stderr, "npu transcribe: %s: %lld window(s), encoder %.1f ms/window, decoder %.2f ms/step\n",
                     file.c_str(), static_cast<long long>(t.windows), t.encode_ms, t.decode_ms);
      }
      if (several && !json_format) {
        out = "==> " + file + " <==\n" + out;
      }
      std::fwrite(out.data(), 1, out.size(), stdout);
      std::fflush(stdout);
    } catch (const std::exception& e) {
      if (show_progress && tty) std::fprintf(stderr, "\n");
      std::fprintf(stderr, "npu transcribe: %s: %s\n", file.c_str(), e.what());
      ++failed;
    }
  }
  devices.mark(all);  // a device fallback: every op is one
  if (devices.used == "npu-sim") std::fprintf(stderr, "%s%s", all.summary().c_str(), devices.sim.cost().text().c_str());
  if (o.device != "host") std::fprintf(stderr, "%s", devices.placement_text().c_str());
  if (failed)
    throw std::runtime_error("transcribe: " + std::to_string(failed) + " of " + std::to_string(o.files.size()) +
                             " file(s) failed");
}

}  // namespace

void add_transcribe_command(CLI::App& app) {
  auto o = std::make_shared<TranscribeCliOptions>();
  CLI::App* cmd = app.add_subcommand("transcribe", "Speech to text of audio FILEs with a Whisper or conformer (Parakeet, GigaAM) model");
  cmd->add_option("file", o->files, "Audio files (WAV, FLAC, MP3, OGG/Opus, M4A, ...)")->required();
  cmd->add_option("--model,-m", o->model,
                  "Model: a store name (e.g. whisper-base, or a conformer added with `npu model import`), a model "
                  "directory, a Hugging Face checkpoint, a .nemo archive or a GigaAM .ckpt "
                  "(default: whisper-base if pulled, else whisper-tiny.en)");
  cmd->add_option("--store", o->store, kStoreHelp);
  cmd->add_option("--language,-l", o->language, "Spoken language code (en, de, ...; default: detected)");
  cmd->add_option("--task", o->task, "transcribe, or translate into English")
      ->check(CLI::IsMember({"transcribe", "translate"}))
      ->capture_default_str();
  cmd->add_option("--format,-f", o->format, "Output: txt, json, verbose_json, srt or vtt")
      ->check(CLI::IsMember({"txt", "json", "verbose_json", "srt", "vtt"}))
      ->capture_default_str();
  cmd->add_option("--output-dir,-o", o->output_dir, "Write DIR/<file name>.<format> instead of stdout");
  cmd->add_option("--beam-size", o->beam_size, "Beam width at temperature 0 (1 = greedy)")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  cmd->add_option("--temperature", o->temperature,
                  "First sampling temperature; on failure retried at +0.2 up to 1.0 (default: 0, 0.2, ... 1.0)")
      ->check(CLI::Range(0.0, 1.0))
      ->each([o](const std::string&) { o->temperature_given = true; });
  cmd->add_option("--prompt", o->prompt, "Initial prompt: text that precedes the first window (names, spelling)");
  cmd->add_flag("--no-timestamps", o->no_timestamps, "Decode without timestamp tokens (one segment per 30-s window)");
  cmd->add_flag("--word-timestamps", o->word_timestamps,
                "Word-level timestamps (openai-whisper's word_timestamps): json and verbose_json list the words "
                "with start, end and probability; segment times move onto their words");
  cmd->add_flag("--progress", o->progress, "Show progress on stderr even when it is not a terminal");
  cmd->add_flag("--timings", o->timings,
                "Report encoder ms per window and decoder ms per step (json formats: as fields; else on stderr)");
  add_device_options(cmd, o->device, o->fallback);
  add_server_options(cmd, o->server);
  cmd->callback([o] { run_transcribe(*o); });
}

}  // namespace xdna::cli
