// Instruction-stream decoder (and the ERT packet printer) on arbitrary bytes: decode() must throw
// std::invalid_argument or return a stream that re-encodes to exactly the input words; never
// crash or read past the end.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <span>

#include "npu/artifacts/insts.h"
#include "npu/driver/ert.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const size_t n = size / 4;
  // Exactly n words on the heap, so that ASan flags a read one word past the end.
  std::unique_ptr<uint32_t[]> words(new uint32_t[n ? n : 1]);
  if (n) std::memcpy(words.get(), data, n * 4);
  const std::span<const uint32_t> w(words.get(), n);
  try {
    const xdna::npu::insts::Stream s = xdna::npu::insts::decode(w);
    (void)xdna::npu::insts::to_text(s);
    const auto again = xdna::npu::insts::encode(s);
    if (again.size() != n || std::memcmp(again.data(), w.data(), n * 4) != 0) std::abort();  // lossy decode
  } catch (const std::invalid_argument&) {
  }
  try {
    (void)xdna::npu::ert::describe(w);
  } catch (const std::invalid_argument&) {
  }
  return 0;
}
