// Fuzzes the PyTorch checkpoint reader: any bytes must either open (and every readable tensor
// then reads) or throw, never crash.
#include <cstdint>
#include <cstring>
#include <exception>

#include "weights/torch_checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto buf = std::make_shared<xdna::HeapBuffer>(size ? size : 1);
  if (size) std::memcpy(buf->data(), data, size);
  try {
    xdna::TorchCheckpoint c(buf, "fuzz");
    for (const xdna::TensorInfo& t : c.tensors()) {
      if (t.file_dtype == "int64") c.get_i64(t.name);
      else if (t.dtype) c.get(t.name);
    }
  } catch (const std::exception&) {
  }
  return 0;
}
