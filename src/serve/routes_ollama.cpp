// Ollama's API (in progress).
#include "serve/server.h"

namespace xdna::serve {

void add_ollama_routes(Server&) {}

}  // namespace xdna::serve
