// OpenAI speech-to-text fronts: POST /v1/audio/transcriptions and POST /v1/audio/translations,
// multipart/form-data as the OpenAI API takes it (request, response, errors: docs/api.md).
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <stdexcept>

#include "pipeline/audio.h"
#include "pipeline/transcribe.h"
#include "serve/openai_requests.h"
#include "serve/server.h"

namespace xdna::serve {

namespace {

void handle_audio(Server& s, const httplib::Request& req, httplib::Response& res, bool translate) {
  AudioRequest r = parse_audio_request(req, s.options().max_audio_bytes, translate);
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
  const std::string body = format_transcript(t, r.response_format, r.options.task, r.segments);
  const bool is_json = r.response_format == "json" || r.response_format == "verbose_json";
  res.status = 200;
  set_backend_header(res, backends_of(t.report));
  res.set_content(body, is_json ? "application/json" : "text/plain; charset=utf-8");
}

}  // namespace

void add_audio_routes(Server& s) {
  // An std::invalid_argument here: options the model refused (language, task).
  for (const bool translate : {false, true})
    s.post(translate ? "/v1/audio/translations" : "/v1/audio/transcriptions",
           openai_route([&s, translate](const httplib::Request& req, httplib::Response& res) {
             handle_audio(s, req, res, translate);
           }));
}

}  // namespace xdna::serve
