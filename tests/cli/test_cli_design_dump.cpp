// `npu design dump`: a design's lowered instruction stream as text and JSON, the same stream
// written to a file and decoded back with --insts, and clear errors (exit 1) for bad input.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "cli_test_util.h"

namespace {

xdna::test::ShellResult npu(const std::string& args) {
  return xdna::test::run_shell("'" XDNA_NPU_BINARY "' " + args + " 2>&1");
}

const std::string kGemv = std::string(XDNA_FIXTURE_DIR) + "/../../designs/gemv_bf16_1024x1024_c2.json";

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("xdna_design_dump_" + std::to_string(::getpid()) + name)).string();
}

}  // namespace

TEST(CliDesignDump, PrintsTheLoweredSequence) {
  const auto r = npu("design dump '" + kGemv + "'");
  ASSERT_EQ(r.rc, 0) << r.out;
  // 6 transfers x (BLOCKWRITE 12 + DDR_PATCH 12 + WRITE32 6 words) + 6 syncs x 4 + header 4 = 208 words
  EXPECT_NE(r.out.find("24 ops, 832 bytes"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("BLOCKWRITE (0,0)+0x1d000 [BD 0]"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("DDR_PATCH  (1,0)+0x1d024 [BD 1 word 1] += arg 0 + 1048576 bytes"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("[MM2S 1 queue] = 0x80000000"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("SYNC       S2MM 0 of (0,0)"), std::string::npos) << r.out;

  const auto j = npu("design dump '" + kGemv + "' --json");
  ASSERT_EQ(j.rc, 0) << j.out;
  const auto doc = nlohmann::json::parse(j.out);
  EXPECT_EQ(doc["op_count"], 24);
  EXPECT_EQ(doc["bytes"], 832);
  EXPECT_EQ(doc["ops"][0]["op"], "BLOCKWRITE");
  EXPECT_EQ(doc["ops"][0]["data"][0], 512);
}

TEST(CliDesignDump, DecodesAWrittenStreamBack) {
  const std::string bin = temp_path("gemv.bin");
  const auto w = npu("design dump '" + kGemv + "' --write-insts '" + bin + "'");
  ASSERT_EQ(w.rc, 0) << w.out;
  EXPECT_EQ(std::filesystem::file_size(bin), 832u);
  const auto r = npu("design dump --insts '" + bin + "'");
  EXPECT_EQ(r.rc, 0) << r.out;
  EXPECT_EQ(r.out, w.out);  // same text from the design and from its words

  // Cut the file short: a clean error naming the word, not a crash.
  std::filesystem::resize_file(bin, 800);
  const auto t = npu("design dump --insts '" + bin + "'");
  EXPECT_EQ(t.rc, 1) << t.out;
  EXPECT_NE(t.out.find("word 3: header says 832 bytes"), std::string::npos) << t.out;
  std::filesystem::resize_file(bin, 801);
  const auto odd = npu("design dump --insts '" + bin + "'");
  EXPECT_EQ(odd.rc, 1) << odd.out;
  EXPECT_NE(odd.out.find("not a whole number of u32 words"), std::string::npos) << odd.out;
  std::filesystem::remove(bin);
}

TEST(CliDesignDump, BadInputIsAnError) {
  const auto missing = npu("design dump --insts /nonexistent/insts.bin");
  EXPECT_EQ(missing.rc, 1) << missing.out;
  EXPECT_NE(missing.out.find("cannot open"), std::string::npos) << missing.out;
  const auto neither = npu("design dump");
  EXPECT_EQ(neither.rc, 1) << neither.out;
  EXPECT_NE(neither.out.find("either a DESIGN.json or --insts"), std::string::npos) << neither.out;
  const std::string junk = temp_path("junk.bin");
  {
    std::ofstream f(junk, std::ios::binary);
    f << "this is not an instruction stream!!!";  // 36 bytes
  }
  const auto j = npu("design dump --insts '" + junk + "'");
  EXPECT_EQ(j.rc, 1) << j.out;
  EXPECT_NE(j.out.find("word 0"), std::string::npos) << j.out;
  std::filesystem::remove(junk);
}
