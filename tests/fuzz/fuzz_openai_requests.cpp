// The OpenAI request parsers (src/serve/openai_requests.h) on arbitrary bodies. The first byte
// picks the endpoint; the rest is the JSON body, or for audio the multipart form's fields,
// separated by 0xFF bytes, each "name=value" (the part named "file" is the upload). Each parser
// must return a request or throw ApiError with a 4xx status, never anything else.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "serve/openai_requests.h"

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "%s\n", what);
  std::abort();
}

httplib::Request form(std::string_view rest, bool multipart) {
  httplib::Request req;
  req.method = "POST";
  if (multipart) req.set_header("Content-Type", "multipart/form-data; boundary=fuzz");
  size_t begin = 0;
  while (begin <= rest.size()) {
    size_t end = rest.find('\xff', begin);
    if (end == std::string_view::npos) end = rest.size();
    const std::string_view part = rest.substr(begin, end - begin);
    const size_t eq = part.find('=');
    httplib::MultipartFormData f;
    f.name = std::string(part.substr(0, eq));
    f.content = eq == std::string_view::npos ? std::string() : std::string(part.substr(eq + 1));
    if (f.name == "file") f.filename = "fuzz.wav";
    req.files.emplace(f.name, f);
    begin = end + 1;
  }
  return req;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  try {
    switch (data[0] % 6) {
      case 0: {
        const xdna::serve::EmbeddingsRequest r = xdna::serve::parse_embeddings_request(std::string(rest));
        if (r.model.empty() || (r.tokens ? r.ids.empty() : r.texts.empty())) fail("embeddings: accepted without model or input");
        break;
      }
      case 1:
      case 2: {
        const xdna::serve::CompletionRequest r = xdna::serve::parse_completion_request(std::string(rest), data[0] % 6 == 1);
        if (r.model.empty()) fail("completions: accepted without a model");
        break;
      }
      default: {  // 3, 4: transcriptions, translations; 5: not multipart
        const httplib::Request req = form(rest, data[0] % 6 != 5);
        const xdna::serve::AudioRequest r = xdna::serve::parse_audio_request(req, 4096, data[0] % 6 == 4);
        if (!r.audio || r.audio->empty() || r.audio->size() > 4096 || r.model.empty()) fail("audio: bad request accepted");
        break;
      }
    }
  } catch (const xdna::serve::ApiError& e) {
    if (e.status < 400 || e.status > 499) fail("ApiError with a status that is not 4xx");
  }
  return 0;
}
