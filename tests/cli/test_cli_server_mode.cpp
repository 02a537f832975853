// The CLI's model commands against a running server: `npu embed`, `generate`, `chat` and
// `transcribe` print byte for byte the same with the server as in-process (--no-server), the server
// is the one that did the work (its model cache holds the model afterwards), and the cases that
// must stay in-process (local paths, options the API lacks, no server) say so. The server is the
// in-process harness on a free loopback port; the commands run as the built `npu` binary.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "../serve/server_test_util.h"
#include "cli_test_util.h"
#include "models/model_store.h"

namespace fs = std::filesystem;
using namespace xdna;

namespace {

const fs::path kBert = fs::path(XDNA_FIXTURE_DIR) / "encoders" / "tiny-bert-e5";
const fs::path kChat = fs::path(XDNA_FIXTURE_DIR) / "llm" / "tiny-llama-chat";
const fs::path kSpeech = fs::path(XDNA_FIXTURE_DIR) / "audio" / "speech16k.wav";
constexpr const char* kRealWhisper = "whisper-tiny.en";

struct CmdResult {
  int rc = -1;
  std::string out, err;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

class CliServerMode : public test::ServerSuite<CliServerMode> {
 protected:
  // The store is the default one of an XDG_CACHE_HOME under dir_: the CLI finds it without
  // --store (which keeps a command in-process), and so does the server.
  static fs::path store() { return dir_ / "cache" / "xdna-engine" / "models"; }

  static void SetUpTestSuite() {
    dir_ = test::make_temp_dir("xdna-cli-server");
    test::add_store_model(store(), "tiny-bert", "bert", "safetensors", "f32", kBert, true);
    test::add_store_model(store(), "tiny-chat", "llama", "safetensors", "f32", kChat, true);
    const fs::path real = fs::path(default_store_dir()) / kRealWhisper;
    if (fs::exists(real / "manifest.json")) fs::create_directory_symlink(real, store() / kRealWhisper);
    fs::create_directories(dir_ / "config");
    serve::ServerOptions opts;
    opts.store_dir = store().string();
    opts.log_requests = false;
    server_ = std::make_unique<test::RunningServer>(opts);
  }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(server_->port()); }

  // `npu ARGS` with this suite's cache and config directories; `stdin_text` piped in.
  CmdResult npu(const std::string& args, const std::string& stdin_text = "") const {
    const fs::path in = dir_ / "stdin.txt", err = dir_ / "stderr.txt";
    std::ofstream(in, std::ios::binary) << stdin_text;
    const std::string cmd = "XDG_CACHE_HOME='" + (dir_ / "cache").string() + "' XDG_CONFIG_HOME='" +
                            (dir_ / "config").string() + "' '" XDNA_NPU_BINARY "' " + args + " <'" + in.string() +
                            "' 2>'" + err.string() + "'";
    const test::ShellResult r = test::run_shell(cmd);
    return {r.rc, r.out, slurp(err)};
  }
  // The same command on the server and in-process: both succeed with the same stdout, which is
  // returned. The server run says nothing about running in-process.
  std::string same_both_ways(const std::string& args, const std::string& stdin_text = "") const {
    const CmdResult served = npu(args + " --server " + url(), stdin_text);
    EXPECT_EQ(served.rc, 0) << args << "\n" << served.err;
    EXPECT_EQ(served.err.find("in-process"), std::string::npos) << served.err;
    const CmdResult local = npu(args + " --no-server", stdin_text);
    EXPECT_EQ(local.rc, 0) << args << "\n" << local.err;
    EXPECT_FALSE(served.out.empty());
    EXPECT_EQ(served.out, local.out) << args;
    return served.out;
  }
  bool resident(const std::string& name) const {
    const auto models = server_->server().models().resident_info();
    return std::any_of(models.begin(), models.end(), [&](const serve::ResidentModel& m) { return m.name == name; });
  }
};

TEST_F(CliServerMode, EmbedIsTheSameOnTheServer) {
  const std::string out = same_both_ways("embed --model tiny-bert 'hello world' 'a second, longer sentence'");
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 2);
  EXPECT_TRUE(resident("tiny-bert"));
  // stdin lines, several requests of --batch inputs each.
  same_both_ways("embed --model tiny-bert --batch 2", "one\ntwo\nthree\n");
}

TEST_F(CliServerMode, GenerateIsTheSameOnTheServer) {
  same_both_ways("generate --model tiny-chat --prompt 'Once upon a time' --seed 7 --max-tokens 12");
  EXPECT_TRUE(resident("tiny-chat"));
  same_both_ways("generate --model tiny-chat --chat --system 'Be brief.' --prompt 'Hi there' --seed 3 -n 10 "
                 "--temperature 0");
  same_both_ways("generate --model tiny-chat --seed 11 -n 8 --top-k 5 --stop zzz", "from stdin");
}

TEST_F(CliServerMode, ChatIsTheSameOnTheServer) {
  const std::string out =
      same_both_ways("chat --model tiny-chat --seed 5 -n 8 --system 'You are terse.'", "hello\nand again\n/reset\nnew\n");
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 3);  // one line per reply
}

TEST_F(CliServerMode, TranscribeIsTheSameOnTheServer) {
  if (!fs::exists(store() / kRealWhisper)) GTEST_SKIP() << kRealWhisper << " is not in the default store";
  const std::string clip = "'" + kSpeech.string() + "'";
  // txt is made by the CLI from the server's verbose_json; the other formats come as they are.
  const std::string out = same_both_ways(std::string("transcribe --model ") + kRealWhisper + " " + clip);
  EXPECT_FALSE(out.empty());
  EXPECT_TRUE(resident(kRealWhisper));
  same_both_ways(std::string("transcribe --model ") + kRealWhisper + " --format srt " + clip + " " + clip);
}

TEST_F(CliServerMode, LocalPathsAndUnsupportedOptionsRunInProcessAndSaySo) {
  const std::string text = "'path model'";
  CmdResult r = npu("embed --model '" + kBert.string() + "' " + text + " --server " + url());
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("running in-process"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("local path"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, npu("embed --model tiny-bert " + text + " --no-server").out);

  r = npu("embed --model tiny-bert --device npu-sim x --server " + url());
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("--device npu-sim"), std::string::npos) << r.err;
  r = npu("generate --model tiny-chat -p hi -n 2 --json --server " + url());
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("--json"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("\"prompt_ids\""), std::string::npos);
}

TEST_F(CliServerMode, ModelsTheServerLacksAreItsErrors) {
  const CmdResult r = npu("embed --model no-such-model x --server " + url());
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find(url()), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("no-such-model"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("does not exist"), std::string::npos) << r.err;
}

TEST_F(CliServerMode, NamedServerNotListeningIsAnError) {
  // Port 1 (tcpmux): nothing listens there on a test machine.
  const CmdResult r = npu("embed --model tiny-bert x --server http://127.0.0.1:1");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("no server answering"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("127.0.0.1:1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--no-server"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_EQ(npu("generate --model tiny-chat -p hi -n 2 --server http://127.0.0.1:1").rc == 0, false);
}

TEST_F(CliServerMode, NoServerAtTheDefaultAddressRunsInProcess) {
  // No --server: the configured address (port 1 here) is only a preference.
  const fs::path config = dir_ / "config" / "xdna-engine" / "config.json";
  fs::create_directories(config.parent_path());
  std::ofstream(config) << R"({"port": 1})";
  const CmdResult r = npu("embed --model tiny-bert x");
  fs::remove(config);
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, npu("embed --model tiny-bert x --no-server").out);
}

TEST_F(CliServerMode, ModelLsShowsWhatTheServerHasLoaded) {
  ASSERT_EQ(npu("embed --model tiny-bert warm --server " + url()).rc, 0);
  auto c = server_->client();
  const httplib::Result ps = c->Get("/api/ps");
  if (!ps || ps->status != 200) GTEST_SKIP() << "the server has no /api/ps yet";
  const CmdResult r = npu("model ls --server " + url());
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("LOADED"), std::string::npos) << r.out;
  std::string bert_row;
  for (size_t p = 0, e; (e = r.out.find('\n', p)) != std::string::npos; p = e + 1)
    if (r.out.compare(p, 9, "tiny-bert") == 0) bert_row = r.out.substr(p, e - p);
  EXPECT_NE(bert_row.find(" on host"), std::string::npos) << r.out;

  const nlohmann::json j = nlohmann::json::parse(npu("model ls --json --server " + url()).out);
  bool seen = false;
  for (const nlohmann::json& m : j)
    if (m["name"] == "tiny-bert") {
      seen = true;
      ASSERT_TRUE(m["loaded"].is_object()) << m.dump();
      EXPECT_GT(m["loaded"]["memory_bytes"].get<uint64_t>(), 0u);
      EXPECT_EQ(m["loaded"]["device"], "host");
    }
  EXPECT_TRUE(seen);
  // Without a server: the store alone, no LOADED column.
  EXPECT_EQ(npu("model ls --no-server").out.find("LOADED"), std::string::npos);
}

}  // namespace

namespace {

// A server started with --api-key is used when the config file holds the key.
TEST_F(CliServerMode, ConfigApiKeyReachesAKeyedServer) {
  serve::ServerOptions opts;
  opts.store_dir = store().string();
  opts.log_requests = false;
  opts.api_key = "sekret";
  test::RunningServer keyed(opts);
  ASSERT_TRUE(keyed.is_running());
  const std::string url = " --server http://127.0.0.1:" + std::to_string(keyed.port());
  CmdResult r = npu("embed --model tiny-bert key" + url);  // no key: not usable, said so
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("401"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("api_key"), std::string::npos) << r.err;

  const fs::path config = dir_ / "config" / "xdna-engine" / "config.json";
  fs::create_directories(config.parent_path());
  std::ofstream(config) << R"({"api_key": "sekret"})";
  r = npu("embed --model tiny-bert key" + url);
  fs::remove(config);
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.err.find("in-process"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, npu("embed --model tiny-bert key --no-server").out);
  const auto models = keyed.server().models().resident_info();
  EXPECT_EQ(models.size(), 1u);
}

}  // namespace
