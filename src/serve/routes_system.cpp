// GET /health: liveness plus what the engine runs on, for clients and monitoring.
#include "serve/server.h"

namespace xdna::serve {

void add_system_routes(Server& s) {
  s.get("/health", [&s](const httplib::Request&, httplib::Response& res) {
    send_json(res, {{"status", "ok"},
                    {"version", kEngineVersion},
                    {"backend", backend_json(s.npu())},
                    {"models", s.store().list().size()}});
  });
}

}  // namespace xdna::serve
