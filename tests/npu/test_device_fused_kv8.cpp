// `--device npu`'s fused decode (runtime/fused_decoder.h) with an int8 KV cache, over the dry-run
// driver (npu (needs hardware, unverified here): DryRunIo computes nothing). Per layer the
// decoder keeps two resident buffers, the int8 values and the f32 row scales; the host state's
// prefilled rows are uploaded into both in the designs' layouts, and every token's packets bind
// kv / kv_row and kv_scales / kv_row_scales as views whose addresses alone move with the position.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "fused_test_util.h"
#include "kv_test_util.h"
#include "npu/design_families.h"
#include "npu/runtime/decode_dry_run.h"
#include "npu/runtime/fused_decoder.h"

using namespace xdna;
using namespace xdna::npu;
using namespace xdna::npu::test;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kMaxLen = 16, kFilled = 3;


uint64_t bo_address(const std::vector<uint32_t>& packet, size_t arg) {
  const nlohmann::json dc = describe_command(packet);
  return std::stoull(dc["kernel_args"]["bo"].at(arg).get<std::string>(), nullptr, 16);
}

size_t arg_of(const Design& d, const std::string& name) {
  for (size_t i = 0; i < d.args.size(); ++i)
    if (d.args[i].name == name) return i;
  ADD_FAILURE() << d.name << " has no argument " << name;
  return 0;
}

std::vector<uint32_t> words(const driver::SubmittedCommand& c) { return c.words; }

}  // namespace

TEST(NpuDeviceFusedDecodeKv8, UploadsValuesAndScalesAndMovesOnlyTheViews) {
  const SimDecoderModel m = small_int8_model(8);
  SimDecoderState st(m, kMaxLen);
  FusedRng r(9);
  const int64_t kvd = m.shape.kv_heads * m.shape.head_dim;
  for (int64_t p = 0; p < kFilled; ++p)
    for (SimKvCache& kv : st.kv) kv.append(r.bf16s(2 * kvd));  // quantized per row on append
  st.position = kFilled;
  const fs::path dir = fs::temp_directory_path() / ("xdna_fused_kv8_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const std::vector<int32_t> ids = {5, 9};
  const FusedDeviceDryRun x = fused_device_dry_run(m, st, ids, dir.string());
  fs::remove_all(dir);
  ASSERT_EQ(x.tokens.size(), 2u);
  EXPECT_EQ(x.state.position, kFilled + 2);
  EXPECT_TRUE(x.state.kv[0].int8);

  // The prefilled rows' scales and int8 values, in the resident buffers' layouts.
  const Design d0 = x.tokens[0].invocations[0];
  ASSERT_NE(d0.name.find("_kv8_"), std::string::npos) << d0.name;
  const int64_t rows = d0.params.at("kv_rows"), D = m.shape.head_dim;
  int scale_bufs = 0, value_bufs = 0;
  for (const auto& [handle, bytes] : x.bo_contents) {
    if (int64_t(bytes.size()) == kv_scales_bytes(d0)) {
      for (size_t l = 0; l < st.kv.size() && scale_bufs < 2; ++l) {
        bool same = true;
        for (int64_t h = 0; h < m.shape.kv_heads; ++h)
          same = same && std::memcmp(bytes.data() + h * rows * 8, st.kv[l].scales.data() + h * kMaxLen * 2,
                                     size_t(kFilled) * 8) == 0;
        scale_bufs += same;
      }
    }
    if (int64_t(bytes.size()) == kv_cache_bytes(d0))
      for (size_t l = 0; l < st.kv.size(); ++l)
        value_bufs += std::memcmp(bytes.data() + rows * D, st.kv[l].k8.data() + kMaxLen * D, size_t(kFilled * D)) == 0;
  }
  EXPECT_EQ(scale_bufs, 2);  // one per layer, the prefilled scales uploaded
  EXPECT_EQ(value_bufs, 2);  // head 1's K rows of each layer

  // Per layer: the scale views sit pos * 8 apart in one buffer, and move by 8 bytes a token, as
  // kv_row moves by head_dim bytes; the instruction streams do not change.
  for (size_t l = 0; l < 2; ++l) {
    const Design& a = x.tokens[0].invocations[l];
    const Design& b = x.tokens[1].invocations[l];
    const std::vector<uint32_t> pa = words(x.tokens[0].commands[l]), pb = words(x.tokens[1].commands[l]);
    const uint64_t s0 = bo_address(pa, arg_of(a, "kv_scales")), r0 = bo_address(pa, arg_of(a, "kv_row_scales"));
    const uint64_t s1 = bo_address(pb, arg_of(b, "kv_scales")), r1 = bo_address(pb, arg_of(b, "kv_row_scales"));
    EXPECT_EQ(int64_t(r0 - s0), kv_scales_row_offset(a) - kv_scales_window_offset(a));
    EXPECT_EQ(int64_t(r0 - s0), kFilled * 8);
    EXPECT_EQ(s1, s0);
    EXPECT_EQ(r1 - r0, 8u);
    EXPECT_EQ(bo_address(pb, arg_of(b, "kv_row")) - bo_address(pa, arg_of(a, "kv_row")), uint64_t(D));
    EXPECT_EQ(x.tokens[0].insts_sha256.size(), x.tokens[1].insts_sha256.size());
  }
}
