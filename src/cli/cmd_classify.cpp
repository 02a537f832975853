// `npu classify IMAGE... [--model M] [--top-k K] [--json] [--device host|npu-sim|npu]`: the top
// classes of each image by a vision classifier (pipeline/classify.h). Every image is decoded before
// the model runs, so a bad file fails the command at once, naming the file.
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/config.h"
#include "cli/llm_options.h"  // DeviceBackends, add_device_options
#include "pipeline/classify.h"
#include "pipeline/conv_npu_sim.h"  // conv_host_reasons
#include "pipeline/embed.h"  // run_summary_json

namespace xdna::cli {

namespace {

struct ClassifyCliOptions {
  std::string model;
  std::string store;
  int top_k = 5;
  bool json = false;
  size_t batch = 8;
  std::string device = "host";
  std::string fallback;
  std::vector<std::string> images;
};

void run_classify(const ClassifyCliOptions& o) {
  std::vector<Image> images;
  for (const std::string& path : o.images) images.push_back(load_image(path));
  const ImageModel model = ImageModel::load(o.model, resolve_store(o.store));
  for (const std::string& note : model.notes()) std::fprintf(stderr, "npu classify: note: %s\n", note.c_str());

  DeviceBackends devices;
  ImageRunOptions ro;
  ro.backends = devices.list(o.device, o.fallback);
  ro.batch = o.batch;
  RunReport report;
  const std::vector<std::vector<ImageClass>> results = model.classify(images, o.top_k, ro, &report);
  devices.mark(report);
  if (o.device != "host") std::fprintf(stderr, "%s", devices.placement_text().c_str());
  if (devices.used == "npu-sim")  // conv classifiers: ops their npu-sim walk left on the host
    for (const auto& [op, why] : conv_host_reasons(report)) std::fprintf(stderr, "npu: %s on the host: %s\n", op.c_str(), why.c_str());

  if (!o.json) {
    for (size_t i = 0; i < results.size(); ++i) {
      std::printf("%s\n", o.images[i].c_str());
      for (const ImageClass& c : results[i])
        std::printf("  %.4f  %s (%lld)\n", c.probability, c.label.c_str(), static_cast<long long>(c.id));
    }
    if (devices.used == "npu-sim")
      std::fprintf(stderr, "%s%s", report.summary().c_str(), devices.sim.cost().text().c_str());
    return;
  }
  nlohmann::json data = nlohmann::json::array();
  for (size_t i = 0; i < results.size(); ++i) {
    nlohmann::json classes = nlohmann::json::array();
    for (const ImageClass& c : results[i])
      classes.push_back({{"id", c.id}, {"label", c.label}, {"probability", c.probability}});
    data.push_back({{"image", o.images[i]},
                    {"width", images[i].width},
                    {"height", images[i].height},
                    {"classes", classes}});
  }
  nlohmann::json out = {{"model", model.name()},
                        {"path", model.path()},
                        {"family", model.network().family()},
                        {"labels", model.network().num_labels()},
                        {"top_k", o.top_k},
                        {"notes", model.notes()},
                        {"data", data},
                        {"device", o.device},
                        {"run", run_summary_json(report)},
                        {"placement", devices.placement_json()}};
  if (devices.used == "npu-sim") out["npu_sim"] = devices.sim.cost().to_json();
  std::printf("%s\n", out.dump().c_str());
}

}  // namespace

void add_classify_command(CLI::App& app) {
  auto o = std::make_shared<ClassifyCliOptions>();
  CLI::App* cmd = app.add_subcommand("classify", "Top classes of each IMAGE (JPEG, PNG, WebP) by a vision classifier");
  cmd->add_option("--model,-m", o->model,
                  "Model: an image-classification directory (Hugging Face ViT / DINOv2, an "
                  "EfficientNet-Lite0 .pth) or a store name")
      ->required();
  cmd->add_option("--store", o->store, kStoreHelp);
  cmd->add_option("--top-k,-k", o->top_k, "Classes shown per image")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_flag("--json", o->json, "JSON output: classes with ids and probabilities, notes, where the ops ran");
  cmd->add_option("--batch", o->batch, "Images per forward pass")->check(CLI::PositiveNumber)->capture_default_str();
  add_device_options(cmd, o->device, o->fallback);
  cmd->add_option("image", o->images, "Image files")->required();
  cmd->callback([o] { run_classify(*o); });
}

}  // namespace xdna::cli
