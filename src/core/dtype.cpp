#include "core/dtype.h"

#include <array>
#include <stdexcept>
#include <string>

namespace xdna {

namespace {
constexpr std::array<DTypeTraits, 13> kTraits = {{
    {"f32", 1, 4},
    {"f16", 1, 2},
    {"bf16", 1, 2},
    {"i32", 1, 4},
    {"int8", 1, 1},
    {"int4", 2, 1},
    {"bfp16", 8, 9},
    {"q8_0", 32, 34},
    {"q4_0", 32, 18},
    {"q4_k", 256, 144},
    {"q5_k", 256, 176},
    {"q6_k", 256, 210},
    {"q5_0", 32, 22},
}};
}  // namespace

const DTypeTraits& traits(DType t) { return kTraits.at(static_cast<size_t>(t)); }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (size_t i = 0; i < kTraits.size(); ++i)
    if (kTraits[i].name == name) return static_cast<DType>(i);
  return std::nullopt;
}

int64_t dtype_bytes(DType t, int64_t n) {
  const auto& tr = traits(t);
  if (n < 0 || n % tr.block_elems != 0)
    throw std::invalid_argument(std::string(tr.name) + ": " + std::to_string(n) +
                                " values is not a whole number of " +
                                std::to_string(tr.block_elems) + "-value blocks");
  return n / tr.block_elems * tr.block_bytes;
}

}  // namespace xdna
