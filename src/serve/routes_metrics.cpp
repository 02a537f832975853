// GET /metrics (in progress).
#include "serve/server.h"

namespace xdna::serve {

void add_metrics_routes(Server&) {}

}  // namespace xdna::serve
