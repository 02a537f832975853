#include "pipeline/upscale_precision.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace xdna {

Image downscale_box(const Image& img, int s) {
  if (s < 1 || img.width < s || img.height < s)
    throw std::invalid_argument("downscale: a " + std::to_string(img.width) + "x" + std::to_string(img.height) +
                                " image has no " + std::to_string(s) + "x" + std::to_string(s) + " block");
  Image out;
  out.width = img.width / s;
  out.height = img.height / s;
  out.rgb.resize(size_t(out.width) * out.height * 3);
  for (int y = 0; y < out.height; ++y)
    for (int x = 0; x < out.width; ++x)
      for (int c = 0; c < 3; ++c) {
        int sum = 0;
        for (int dy = 0; dy < s; ++dy)
          for (int dx = 0; dx < s; ++dx) sum += img.at(x * s + dx, y * s + dy, c);
        out.rgb[(size_t(y) * out.width + x) * 3 + c] = uint8_t((sum + s * s / 2) / (s * s));
      }
  return out;
}

Image center_crop(const Image& img, int side) {
  const int w = std::min(img.width, side), h = std::min(img.height, side);
  const int x0 = (img.width - w) / 2, y0 = (img.height - h) / 2;
  Image out;
  out.width = w;
  out.height = h;
  out.rgb.resize(size_t(w) * h * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x)
      for (int c = 0; c < 3; ++c) out.rgb[(size_t(y) * w + x) * 3 + c] = img.at(x0 + x, y0 + y, c);
  return out;
}

PrecisionGate gate_upscale_precision(const Upscaler& up, const Image& reference, double max_drop_db) {
  const int s = up.net.scale;
  const Image lr = downscale_box(reference, s);
  Image hr;  // the reference trimmed to the region the low-resolution image covers
  hr.width = lr.width * s;
  hr.height = lr.height * s;
  hr.rgb.resize(size_t(hr.width) * hr.height * 3);
  for (int y = 0; y < hr.height; ++y)
    for (int x = 0; x < hr.width; ++x)
      for (int c = 0; c < 3; ++c) hr.rgb[(size_t(y) * hr.width + x) * 3 + c] = reference.at(x, y, c);
  PrecisionGate g;
  g.max_drop_db = max_drop_db;
  g.width = hr.width;
  g.height = hr.height;
  Image f32_out;
  for (const char* p : {"f32", "bf16"}) {
    UpscaleOptions o;
    o.precision = p;
    const auto t0 = std::chrono::steady_clock::now();
    const Image out = upscale_image(up, lr, o);
    PrecisionProbe pr;
    pr.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    pr.precision = p;
    pr.psnr_db = psnr_rgb(out, hr);
    if (g.probes.empty()) f32_out = out;
    pr.drop_db = g.probes.empty() ? 0.0 : g.probes[0].psnr_db - pr.psnr_db;
    pr.psnr_vs_f32_db = psnr_rgb(out, f32_out);
    pr.passes = g.probes.empty() || pr.drop_db <= max_drop_db;  // f32 is the reference
    if (pr.passes) g.chosen = p;  // precisions go from highest to lowest
    g.probes.push_back(pr);
  }
  return g;
}

std::string PrecisionGate::text() const {
  std::string t;
  char line[256];
  std::snprintf(line, sizeof line, "precision gate (%dx%d reference, box-downscaled, upscaled back; PSNR drop <= %.2f dB vs f32):\n",
                width, height, max_drop_db);
  t += line;
  for (const PrecisionProbe& p : probes) {
    std::snprintf(line, sizeof line, "  %-5s PSNR %7.3f dB  drop %+7.4f dB  vs f32 %s  %s  (%.2f s, measured)\n",
                  p.precision.c_str(), p.psnr_db, p.drop_db,
                  std::isinf(p.psnr_vs_f32_db) ? "identical" : (std::to_string(p.psnr_vs_f32_db).substr(0, 6) + " dB").c_str(),
                  p.passes ? "passes" : "FAILS", p.seconds);
    t += line;
  }
  t += "  chosen: " + chosen + " (the lowest precision within the limit)\n";
  return t;
}

nlohmann::json PrecisionGate::to_json() const {
  nlohmann::json ps = nlohmann::json::array();
  for (const PrecisionProbe& p : probes)
    ps.push_back({{"precision", p.precision},
                  {"psnr_db", p.psnr_db},
                  {"drop_db", p.drop_db},
                  {"psnr_vs_f32_db", std::isinf(p.psnr_vs_f32_db) ? nlohmann::json(nullptr) : nlohmann::json(p.psnr_vs_f32_db)},
                  {"passes", p.passes},
                  {"seconds", p.seconds}});
  return {{"max_drop_db", max_drop_db}, {"width", width}, {"height", height}, {"probes", ps}, {"chosen", chosen}};
}

}  // namespace xdna
