// Baking: converting a Hugging Face checkpoint (safetensors) or a GGUF file into the engine's
// baked file, with one storage precision chosen for the weight matrices. Rules (also in
// docs/baked-format.md):
//   - weight matrices (2-D tensors whose name ends in "weight") get the requested precision;
//   - embedding tables (names containing "embed", "wte", "wpe") are gathered by row, not
//     multiplied, so with bfp16/int8/int4 they are stored as bf16 instead;
//   - everything else (norms, biases, 1-D and >2-D tensors) is stored as f32;
//   - a matrix whose row length the format cannot split (bfp16: multiple of 8; int8/int4: of
//     the group) is stored as f32, with a warning;
//   - integer tensors are copied unchanged; `keep` stores every tensor as the source has it
//     (GGUF quantized tensors stay in their GGML block format);
//   - `auto` takes a precision per tensor from BakeOptions::plans (chosen by measuring the
//     model's accuracy: src/pipeline/precision_auto.h); unlisted tensors follow the f32 rules.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/tensor.h"

namespace xdna {

class BakedWriter;

enum class Precision { F32, F16, BF16, BFP16, Int8, Int4, Keep, Auto };
std::optional<Precision> precision_from_name(std::string_view name);
const char* precision_name(Precision p);

constexpr int64_t kDefaultInt4Group = 32;

// What one tensor becomes: dtype, quantization group (int8/int4) and why.
struct TensorPlan {
  DType dtype;
  int64_t group = 0;
  std::string precision;  // the rule applied: "int4", "f32", "keep", "embedding", ...
  std::string warning;    // non-empty when the requested precision could not be used
};
TensorPlan plan_tensor(const std::string& name, const Shape& shape, DType source, Precision p,
                       int64_t group);

// Streams `src` converted to `plan` into the writer (a bounded chunk of rows at a time); returns
// the int8/int4 scales, for the caller to write as the ".scales" tensor that follows.
std::vector<float> write_converted(const Tensor& src, const TensorPlan& plan, BakedWriter& w);

struct BakeOptions {
  std::string source;  // HF checkpoint directory, .safetensors file, shard index or .gguf file
  std::string output;
  Precision precision = Precision::Keep;
  int64_t group = 0;  // int8: 0 = one scale per row; int4: 0 = kDefaultInt4Group
  std::function<void(const std::string&)> log;  // progress lines; may be empty
  // Precision::Auto: the plan per tensor name, extra manifest fields per tensor (the measured
  // cosines) and the manifest's top-level "auto" record. Ignored for the other precisions.
  std::map<std::string, TensorPlan> plans{};
  std::map<std::string, nlohmann::json> tensor_fields{};
  nlohmann::json auto_record{};
};

struct BakeSummary {
  int64_t tensors = 0;
  int64_t skipped = 0;
  uint64_t bytes_in = 0;   // tensor bytes read
  uint64_t bytes_out = 0;  // size of the baked file
};

BakeSummary bake_checkpoint(const BakeOptions& opts);

}  // namespace xdna
