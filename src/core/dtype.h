// Element types the engine stores and computes with, including the NPU's block format.
// The byte layouts are documented in docs/formats.md.
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>

namespace xdna {

enum class DType : uint8_t {
  F32,
  F16,
  BF16,
  I32,
  I8,     // symmetric int8, scales held beside the tensor (per output channel or per group)
  I4,     // symmetric int4, two per byte (low nibble first), per-group scales beside the tensor
  BFP16,  // AIE2P bfp16ebs8: 8 values in 9 bytes (shared exponent byte + 8 int8 mantissas)
  // GGML block formats, kept as loaded from GGUF so quantized checkpoints run without re-encoding.
  Q8_0,
  Q4_0,
  Q4_K,
  Q5_K,
  Q6_K,
  Q5_0,  // (appended: the enum's values are stable)
};

struct DTypeTraits {
  std::string_view name;
  int64_t block_elems;  // values per storage block (1 for plain types)
  int64_t block_bytes;  // bytes per storage block
};

const DTypeTraits& traits(DType t);
inline std::string_view dtype_name(DType t) { return traits(t).name; }
std::optional<DType> dtype_from_name(std::string_view name);

// Bytes needed for n consecutive values of type t; throws if n is not a whole number of blocks.
int64_t dtype_bytes(DType t, int64_t n);

}  // namespace xdna
