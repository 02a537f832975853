// safetensors reader on arbitrary bytes: it must throw (std::exception) or hand out views that
// lie inside the file, never crash, over-read or leak.
#include <exception>

#include "fuzz_util.h"
#include "weights/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    xdna::SafetensorsFile f(std::make_shared<xdna::fuzz::ExactBuffer>(data, size), "fuzz.safetensors");
    (void)f.metadata().dump();
    for (const xdna::TensorInfo& info : f.tensors()) {
      try {
        xdna::fuzz::touch(f.get(info.name));
      } catch (const std::exception&) {  // a dtype the engine cannot represent
      }
    }
  } catch (const std::exception&) {
  }
  return 0;
}
