// OpenAI speech-to-text fronts: POST /v1/audio/transcriptions and POST /v1/audio/translations,
// multipart/form-data as the OpenAI API takes it (request, response, errors: docs/api.md).
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <stdexcept>

#include "pipeline/audio.h"
#include "pipeline/transcribe.h"
#include "serve/server.h"

namespace xdna::serve {

namespace {

struct ApiError : std::runtime_error {
  ApiError(int status, const std::string& message, std::string code, std::string param = "")
      : std::runtime_error(message), status(status), code(std::move(code)), param(std::move(param)) {}
  int status;
  std::string code, param;
};

constexpr const char* kFormats = "json, text, srt, verbose_json, vtt";

struct AudioRequest {
  std::string model, response_format = "json";
  std::string file_name;
  const std::string* audio = nullptr;  // the uploaded file's bytes (owned by the request)
  TranscribeOptions options;
};

// A text field of the form; empty when absent.
std::string field(const httplib::Request& req, const char* name) {
  return req.has_file(name) ? req.get_file_value(name).content : std::string();
}

AudioRequest parse_request(const Server& s, const httplib::Request& req, bool translate) {
  if (!req.is_multipart_form_data())
    throw ApiError(400, "the request must be multipart/form-data with a `file` part (and `model`)",
                   "invalid_request");
  AudioRequest r;
  auto file = req.files.find("file");
  if (file == req.files.end())
    throw ApiError(400, "file is required: the audio to transcribe, as a multipart file part",
                   "missing_required_parameter", "file");
  r.audio = &file->second.content;
  r.file_name = file->second.filename.empty() ? "upload" : file->second.filename;
  if (r.audio->size() > s.options().max_audio_bytes)
    throw ApiError(413, "file '" + r.file_name + "' is " + std::to_string(r.audio->size()) + " bytes; at most " +
                            std::to_string(s.options().max_audio_bytes), "request_too_large", "file");
  if (r.audio->empty()) throw ApiError(400, "file '" + r.file_name + "' is empty", "invalid_file", "file");

  r.model = field(req, "model");
  if (r.model.empty())
    throw ApiError(400, "model is required: the name of a speech-to-text model in the store (GET /v1/models)",
                   "missing_required_parameter", "model");

  TranscribeOptions& o = r.options;
  o.task = translate ? "translate" : "transcribe";
  o.language = field(req, "language");  // translations take none: detected, then into English
  if (translate && !o.language.empty())
    throw ApiError(400, "language is not a parameter of translations (the source language is detected)",
                   "unsupported_parameter", "language");
  o.initial_prompt = field(req, "prompt");

  if (req.has_file("response_format")) {
    r.response_format = field(req, "response_format");
    bool known = false;
    for (const char* f : {"json", "text", "srt", "verbose_json", "vtt"}) known = known || r.response_format == f;
    if (!known)
      throw ApiError(400, "response_format '" + r.response_format + "' is not one of " + kFormats,
                     "invalid_value", "response_format");
  }
  if (req.has_file("temperature")) {
    const std::string t = field(req, "temperature");
    char* end = nullptr;
    const double x = t.empty() ? NAN : std::strtod(t.c_str(), &end);
    if (t.empty() || *end != '\0' || !(x >= 0 && x <= 1))
      throw ApiError(400, "temperature must be a number in [0, 1], not '" + t + "'", "invalid_value", "temperature");
    // 0: openai-whisper's fallback ladder (raise the temperature when a window fails its
    // thresholds), as OpenAI documents; above 0: sample at that temperature only.
    if (x > 0) o.temperatures = {static_cast<float>(x)};
  }
  for (const char* key : {"timestamp_granularities[]", "timestamp_granularities"}) {
    for (auto [it, end] = req.files.equal_range(key); it != end; ++it)
      if (it->second.content != "segment")
        throw ApiError(400, "timestamp_granularities: '" + it->second.content +
                                "' is not supported (only segment; word timestamps are not implemented)",
                       "unsupported_value", "timestamp_granularities");
  }
  return r;
}

void handle_audio(Server& s, const httplib::Request& req, httplib::Response& res, bool translate) {
  AudioRequest r = parse_request(s, req, translate);
  // The upload is checked before the model is looked up or loaded: a bad file costs nothing.
  std::vector<float> samples;
  try {
    samples = decode_audio(*r.audio, kWhisperSampleRate, r.file_name);
  } catch (const std::exception& e) {
    throw ApiError(400, std::string("file: ") + e.what(), "invalid_file", "file");
  }
  std::shared_ptr<CachedAsrModel> asr;
  try {
    asr = s.models().get_asr(r.model);
  } catch (const std::invalid_argument& e) {
    throw ApiError(400, e.what(), "model_not_supported", "model");
  }
  if (!asr)
    throw ApiError(404, "The model '" + r.model + "' does not exist (GET /v1/models lists the store; `npu model pull` adds to it)",
                   "model_not_found", "model");
  Transcript t;
  {
    const RequestQueue::Turn turn = asr->queue.enter(s.deadline());
    t = asr->asr.transcribe(samples, r.options);  // std::invalid_argument (language, task): 400 below
  }
  const std::string body = format_transcript(t, r.response_format, r.options.task);
  const bool is_json = r.response_format == "json" || r.response_format == "verbose_json";
  res.status = 200;
  res.set_content(body, is_json ? "application/json" : "text/plain; charset=utf-8");
}

void post_audio(Server& s, const std::string& path, bool translate) {
  s.post(path, [&s, translate](const httplib::Request& req, httplib::Response& res) {
    try {
      handle_audio(s, req, res, translate);
    } catch (const ApiError& e) {
      send_error(res, e.status, e.what(), "invalid_request_error", e.code, e.param);
    } catch (const QueueFull& e) {
      send_queue_full(res, e);
    } catch (const QueueTimeout& e) {
      send_queue_timeout(res, e);
    } catch (const std::invalid_argument& e) {  // options the model refused (language, task)
      send_error(res, 400, e.what(), "invalid_request_error", "invalid_value");
    }
  });
}

}  // namespace

void add_audio_routes(Server& s) {
  post_audio(s, "/v1/audio/transcriptions", /*translate=*/false);
  post_audio(s, "/v1/audio/translations", /*translate=*/true);
}

}  // namespace xdna::serve
