// Prometheus text exposition format 0.0.4: one "# HELP" and "# TYPE" line per metric family,
// then one "name{label="value",...} number" line per series. Label values escape \ " and newline.
#include "serve/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <iterator>
#include <string_view>

#include "serve/model_cache.h"
#include "serve/system_info.h"

namespace xdna::serve {

namespace {

// Request latency bucket upper bounds in seconds: 1 ms (a /health) up to 120 s (a long
// generation or transcription); slower requests land only in +Inf.
constexpr double kLatencyBounds[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                     1,     2.5,    5,     10,   30,    60,   120};
constexpr size_t kBucketCount = std::size(kLatencyBounds);

std::string escape_label(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

// Shortest text that reads back as the same double; Prometheus spells the specials +Inf, -Inf, NaN.
std::string number(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

using Labels = std::initializer_list<std::pair<const char*, std::string>>;

struct Writer {
  std::string out;

  void family(const char* name, const char* type, const char* help) {
    out += "# HELP ";
    out += name;
    out += ' ';
    out += help;
    out += "\n# TYPE ";
    out += name;
    out += ' ';
    out += type;
    out += '\n';
  }
  void sample(std::string_view name, Labels labels, const std::string& value) {
    out += name;
    if (labels.size() > 0) {
      out += '{';
      bool first = true;
      for (const auto& [k, v] : labels) {
        if (!first) out += ',';
        first = false;
        out += k;
        out += "=\"";
        out += escape_label(v);
        out += '"';
      }
      out += '}';
    }
    out += ' ';
    out += value;
    out += '\n';
  }
  void sample(std::string_view name, Labels labels, double value) { sample(name, labels, number(value)); }
  void sample(std::string_view name, Labels labels, uint64_t value) { sample(name, labels, std::to_string(value)); }
};

}  // namespace

void Metrics::record_request(const std::string& endpoint, int status, double seconds) {
  if (!(seconds >= 0)) seconds = 0;  // NaN or a clock step back never poisons the sums
  std::lock_guard lock(mu_);
  ++requests_[{endpoint, status}];
  Histogram& h = latency_[endpoint];
  if (h.buckets.empty()) h.buckets.assign(kBucketCount, 0);
  for (size_t i = 0; i < kBucketCount; ++i)
    if (seconds <= kLatencyBounds[i]) ++h.buckets[i];
  ++h.count;
  h.sum += seconds;
}

void Metrics::record_generation(const std::string& model, int64_t prompt_tokens, int64_t completion_tokens,
                                double decode_seconds) {
  std::lock_guard lock(mu_);
  TokenCounts& t = tokens_[model];
  t.prompt += static_cast<uint64_t>(std::max<int64_t>(prompt_tokens, 0));
  t.completion += static_cast<uint64_t>(std::max<int64_t>(completion_tokens, 0));
  if (decode_seconds > 0 && std::isfinite(decode_seconds)) t.decode_seconds += decode_seconds;
}

std::string Metrics::render_prometheus(const ModelCache& models, const NpuInfo& npu) const {
  Writer w;
  {
    std::lock_guard lock(mu_);
    w.family("xdna_http_requests_total", "counter", "HTTP requests answered, by route pattern and status.");
    for (const auto& [key, n] : requests_)
      w.sample("xdna_http_requests_total", {{"endpoint", key.first}, {"status", std::to_string(key.second)}}, n);

    w.family("xdna_http_request_duration_seconds", "histogram",
             "Time from reading a request's headers to sending the last byte of its response.");
    for (const auto& [endpoint, h] : latency_) {
      for (size_t i = 0; i < kBucketCount; ++i)
        w.sample("xdna_http_request_duration_seconds_bucket", {{"endpoint", endpoint}, {"le", number(kLatencyBounds[i])}},
                 h.buckets[i]);
      w.sample("xdna_http_request_duration_seconds_bucket", {{"endpoint", endpoint}, {"le", "+Inf"}}, h.count);
      w.sample("xdna_http_request_duration_seconds_sum", {{"endpoint", endpoint}}, h.sum);
      w.sample("xdna_http_request_duration_seconds_count", {{"endpoint", endpoint}}, h.count);
    }

    w.family("xdna_generated_tokens_total", "counter", "Tokens language models read (prompt) and wrote (completion).");
    for (const auto& [model, t] : tokens_) {
      w.sample("xdna_generated_tokens_total", {{"model", model}, {"kind", "prompt"}}, t.prompt);
      w.sample("xdna_generated_tokens_total", {{"model", model}, {"kind", "completion"}}, t.completion);
    }
    w.family("xdna_decode_seconds_total", "counter", "Seconds spent decoding completion tokens.");
    for (const auto& [model, t] : tokens_) w.sample("xdna_decode_seconds_total", {{"model", model}}, t.decode_seconds);
    w.family("xdna_decode_tokens_per_second", "gauge",
             "Completion tokens per decode second over the server's life, per model.");
    for (const auto& [model, t] : tokens_)
      if (t.decode_seconds > 0)
        w.sample("xdna_decode_tokens_per_second", {{"model", model}}, static_cast<double>(t.completion) / t.decode_seconds);
  }

  // Gauges read now; the cache has its own lock, so ours is not held while taking it.
  const std::vector<ResidentModel> resident = models.resident_info();
  w.family("xdna_queue_running", "gauge", "Requests running on each loaded model.");
  for (const ResidentModel& m : resident) w.sample("xdna_queue_running", {{"model", m.name}}, uint64_t(m.running));
  w.family("xdna_queue_waiting", "gauge", "Requests waiting for a slot on each loaded model.");
  for (const ResidentModel& m : resident) w.sample("xdna_queue_waiting", {{"model", m.name}}, uint64_t(m.waiting));
  w.family("xdna_model_loaded_bytes", "gauge", "Memory each resident model takes, with its kind and device.");
  for (const ResidentModel& m : resident)
    w.sample("xdna_model_loaded_bytes", {{"model", m.name}, {"kind", m.kind}, {"device", m.device}}, m.bytes);
  w.family("xdna_models_loaded", "gauge", "Models resident now.");
  w.sample("xdna_models_loaded", {}, uint64_t(resident.size()));
  w.family("xdna_model_memory_budget_bytes", "gauge", "Memory budget for resident models (--max-memory).");
  w.sample("xdna_model_memory_budget_bytes", {}, models.options().budget_bytes);

  w.family("xdna_npu_present", "gauge", "1 when an AMD NPU was found on this machine, else 0.");
  w.sample("xdna_npu_present", {}, uint64_t(npu.found() ? 1 : 0));
  w.family("xdna_npu_usable", "gauge", "1 when the NPU is bound to the amdxdna driver and has a device node.");
  w.sample("xdna_npu_usable", {}, uint64_t(npu.usable() ? 1 : 0));
  w.family("xdna_npu_info", "gauge", "One series per NPU found, describing it; the value is always 1.");
  for (const NpuDevice& d : npu.devices)
    w.sample("xdna_npu_info",
             {{"device", d.pci_slot},
              {"generation", d.generation},
              {"device_id", d.device_id},
              {"node", d.accel_node},
              {"firmware", d.firmware_version},
              {"driver", npu.driver_version}},
             uint64_t(1));

  w.family("xdna_build_info", "gauge", "The engine's version; the value is always 1.");
  w.sample("xdna_build_info", {{"version", XDNA_VERSION}}, uint64_t(1));
  return w.out;
}

}  // namespace xdna::serve
