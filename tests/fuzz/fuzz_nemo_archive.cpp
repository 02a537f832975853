// Fuzzes the .nemo tar reader (plain and gzip): any bytes must either open (every member then
// reads and slices, and a model_weights.ckpt member parses as a torch checkpoint or throws) or
// throw, never crash.
#include <cstdint>
#include <cstring>
#include <exception>

#include "weights/nemo_archive.h"
#include "weights/torch_checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto buf = std::make_shared<xdna::HeapBuffer>(size ? size : 1);
  if (size) std::memcpy(buf->data(), data, size);
  try {
    xdna::TarArchive tar(std::make_shared<xdna::BufferSlice>(buf, 0, size), "fuzz");
    for (const xdna::TarMember& m : tar.members()) {
      const std::string bytes = tar.read(m);
      if (bytes.size() != m.size) __builtin_trap();
      auto slice = tar.slice(m);
      if (m.name.ends_with("model_weights.ckpt")) {
        try {
          xdna::TorchCheckpoint c(slice, m.name);
        } catch (const std::exception&) {
        }
      }
    }
    tar.find_suffix("tokenizer.model");
  } catch (const std::exception&) {
  }
  return 0;
}
