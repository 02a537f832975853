// Model store bookkeeping (manifests, listing, removal, names) and the catalog's consistency.
// The network pull itself is exercised by tests/cli/test_cli.cpp (ModelPull*).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "models/catalog.h"
#include "models/model_store.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace xdna;

namespace {

fs::path make_temp_dir() {
  char tmpl[] = "/tmp/xdna-store-XXXXXX";
  return mkdtemp(tmpl);
}

Manifest sample(const std::string& name) {
  Manifest m;
  m.name = name;
  m.family = "gemma3";
  m.format = "gguf";
  m.precision = "q4_k_m";
  m.packages = {{"pkg", "1.0.0"}, {"pkg-part1", "1.0.0"}};
  m.files = {{"model.gguf", 1234, std::string(64, 'a')}};
  m.size_bytes = 1234;
  m.created = 1700000000;
  return m;
}

}  // namespace

TEST(Manifest, RoundTripsThroughJson) {
  const Manifest m = sample("gemma3-270m");
  const Manifest back = manifest_from_json(json::parse(manifest_to_json(m).dump()), "test");
  EXPECT_EQ(back.name, m.name);
  EXPECT_EQ(back.precision, "q4_k_m");
  ASSERT_EQ(back.packages.size(), 2u);
  EXPECT_EQ(back.packages[1].name, "pkg-part1");
  ASSERT_EQ(back.files.size(), 1u);
  EXPECT_EQ(back.files[0].size_bytes, 1234u);
  EXPECT_EQ(back.created, 1700000000);
}

TEST(Manifest, BadFieldsNameTheKey) {
  json j = manifest_to_json(sample("x"));
  j["size_bytes"] = "big";
  try {
    manifest_from_json(j, "/store/x/manifest.json");
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("size_bytes"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("/store/x/manifest.json"), std::string::npos) << e.what();
  }
  j = manifest_to_json(sample("x"));
  j.erase("family");
  EXPECT_THROW(manifest_from_json(j, "m"), std::runtime_error);
}

TEST(ModelStore, ListFindRemove) {
  const fs::path root = make_temp_dir();
  ModelStore store(root.string());
  EXPECT_TRUE(store.list().empty());
  for (const char* name : {"b-model", "a-model"}) {
    fs::create_directories(root / name);
    std::ofstream(root / name / "manifest.json") << manifest_to_json(sample(name)).dump();
  }
  fs::create_directories(root / "no-manifest");  // ignored
  const auto models = store.list();
  ASSERT_EQ(models.size(), 2u);
  EXPECT_EQ(models[0].name, "a-model");
  EXPECT_TRUE(store.find("b-model").has_value());
  EXPECT_FALSE(store.find("c-model").has_value());

  store.remove("a-model");
  EXPECT_FALSE(fs::exists(root / "a-model"));
  EXPECT_EQ(store.list().size(), 1u);
  EXPECT_THROW(store.remove("a-model"), std::runtime_error);
  EXPECT_THROW(store.remove("../etc"), std::runtime_error);
  fs::remove_all(root);
}

// `npu model import`'s store half: files copied and hashed into a manifest, listed like a pull;
// a taken name, a bad name and an empty source are errors.
TEST(ModelStore, ImportLocalCopiesAndHashes) {
  const fs::path root = make_temp_dir(), src = make_temp_dir();
  { std::ofstream(src / "model.nemo") << "abc"; }
  { std::ofstream(src / "notes.txt") << "hello"; }
  ModelStore store(root.string());
  const Manifest m = store.import_local("my-asr", "parakeet", "nemo", src.string());
  EXPECT_EQ(m.registry, "local");
  ASSERT_EQ(m.files.size(), 2u);
  EXPECT_EQ(m.files[0].name, "model.nemo");
  EXPECT_EQ(m.files[0].sha256, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");  // sha256("abc")
  EXPECT_EQ(m.size_bytes, 8u);
  ASSERT_TRUE(store.find("my-asr"));
  EXPECT_EQ(store.find("my-asr")->family, "parakeet");
  EXPECT_TRUE(fs::is_regular_file(fs::path(store.model_dir("my-asr")) / "model.nemo"));
  EXPECT_THROW(store.import_local("my-asr", "parakeet", "nemo", src.string()), std::runtime_error);
  EXPECT_NO_THROW(store.import_local("my-asr", "parakeet", "nemo", (src / "model.nemo").string(), /*force=*/true));
  EXPECT_EQ(store.find("my-asr")->files.size(), 1u);
  EXPECT_THROW(store.import_local("../x", "parakeet", "nemo", src.string()), std::runtime_error);
  EXPECT_THROW(store.import_local("other", "parakeet", "nemo", (src / "missing").string()), std::runtime_error);
  fs::remove_all(root);
  fs::remove_all(src);
}

TEST(ModelStore, MissingRootListsNothing) {
  ModelStore store("/nonexistent/xdna-store-test");
  EXPECT_TRUE(store.list().empty());
}

TEST(ModelStore, NamesCannotEscapeTheStore) {
  EXPECT_TRUE(valid_model_name("whisper-tiny.en"));
  EXPECT_TRUE(valid_model_name("all-minilm-l6-v2"));
  EXPECT_FALSE(valid_model_name(""));
  EXPECT_FALSE(valid_model_name(".."));
  EXPECT_FALSE(valid_model_name("../x"));
  EXPECT_FALSE(valid_model_name("a/b"));
  EXPECT_FALSE(valid_model_name(".pull-x"));
  EXPECT_FALSE(valid_model_name("Upper"));
}

TEST(ModelStore, PullFailsClearlyWithoutPython) {
  const fs::path root = make_temp_dir();
  ModelStore store(root.string());
  PullOptions opts;
  opts.python = "/nonexistent/python3";
  try {
    store.pull(*find_in_catalog("all-minilm-l6-v2"), opts);
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/python3"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(store.list().empty());
  EXPECT_FALSE(fs::exists(root / ".pull-all-minilm-l6-v2"));  // staging cleaned up
  fs::remove_all(root);
}

TEST(Catalog, EntriesAreWellFormed) {
  ASSERT_FALSE(catalog().empty());
  std::set<std::string> names;
  for (const CatalogEntry& e : catalog()) {
    EXPECT_TRUE(valid_model_name(e.name)) << e.name;
    EXPECT_TRUE(names.insert(e.name).second) << "duplicate " << e.name;
    EXPECT_FALSE(e.packages.empty()) << e.name;
    for (const CatalogPackage& p : e.packages) EXPECT_FALSE(p.version.empty()) << p.name;
    ASSERT_FALSE(e.files.empty()) << e.name;
    for (const CatalogFile& f : e.files) {
      EXPECT_EQ(f.sha256.size(), 64u) << e.name << "/" << f.name;
      EXPECT_FALSE(f.parts.empty()) << e.name << "/" << f.name;
    }
  }
  EXPECT_NE(find_in_catalog("gemma3-270m"), nullptr);
  EXPECT_EQ(find_in_catalog("gemma3-270m")->files[0].parts.size(), 4u);
  EXPECT_EQ(find_in_catalog("no-such-model"), nullptr);
}

TEST(FormatSize, HumanUnits) {
  EXPECT_EQ(format_size(612), "612 B");
  EXPECT_EQ(format_size(1536), "1.5 KiB");
  EXPECT_EQ(format_size(91539968), "87.3 MiB");
}
