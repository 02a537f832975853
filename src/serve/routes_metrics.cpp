// GET /metrics: the server's counters and gauges in Prometheus text format 0.0.4 (serve/metrics.h).
// A scrape is counted once it has been answered, so it shows in the next scrape, not in itself.
#include "serve/server.h"

namespace xdna::serve {

void add_metrics_routes(Server& s) {
  s.get("/metrics", [&s](const httplib::Request&, httplib::Response& res) {
    res.set_content(s.metrics().render_prometheus(s.models(), s.npu()), "text/plain; version=0.0.4; charset=utf-8");
  });
}

}  // namespace xdna::serve
