// The Ollama request parsers (src/serve/ollama_requests.h) on arbitrary bodies. The first byte
// picks the endpoint, the rest is the JSON body. Each parser must return a request or throw
// OllamaError with a 4xx status, never anything else.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "serve/ollama_requests.h"

namespace {

[[noreturn]] void fail(const char* what) {
  std::fprintf(stderr, "%s\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  namespace s = xdna::serve;
  try {
    switch (data[0] % 5) {
      case 0: if (s::parse_ollama_generate(body).model.empty()) fail("generate: accepted without a model"); break;
      case 1: if (s::parse_ollama_chat(body).model.empty()) fail("chat: accepted without a model"); break;
      case 2: if (s::parse_ollama_embed(body).model.empty()) fail("embed: accepted without a model"); break;
      case 3: if (s::parse_ollama_embeddings(body).model.empty()) fail("embeddings: accepted without a model"); break;
      default: if (s::parse_ollama_show(body).model.empty()) fail("show: accepted without a model"); break;
    }
  } catch (const s::OllamaError& e) {
    if (e.status < 400 || e.status > 499) fail("OllamaError with a status that is not 4xx");
  }
  return 0;
}
