// GGUF reader on arbitrary bytes: the header, metadata, tensor infos and views; then the
// tokenizer a GGUF carries (tokenizer.ggml.*), built and run on a short text. Must throw
// (std::exception) or work, never crash, over-read or leak.
#include <exception>

#include "fuzz_util.h"
#include "pipeline/tokenizer.h"
#include "weights/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::unique_ptr<xdna::GgufFile> f;
  try {
    f = std::make_unique<xdna::GgufFile>(std::make_shared<xdna::fuzz::ExactBuffer>(data, size), "fuzz.gguf");
    (void)f->metadata().dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    for (const auto& [key, v] : f->kv()) {  // flat arrays are read from the file by each getter
      if (v.type != xdna::GgufType::Array) continue;
      try { (void)f->get_string_array(key), (void)f->find_in_string_array(key, "<eos>"); } catch (const std::exception&) {}
      try { (void)f->get_int_array(key); } catch (const std::exception&) {}
      try { (void)f->get_float_array(key); } catch (const std::exception&) {}
    }
    for (const xdna::TensorInfo& info : f->tensors()) {
      try {
        xdna::fuzz::touch(f->get(info.name));
      } catch (const std::exception&) {  // a ggml type the engine has no dtype for
      }
    }
  } catch (const std::exception&) {
    return 0;
  }
  if (!f->has("tokenizer.ggml.model")) return 0;
  try {
    const xdna::Tokenizer tok = xdna::Tokenizer::from_gguf(*f);
    const xdna::Encoding e = tok.encode("Hello world, <b>fuzz</b> 123 ünïcode", true);
    (void)tok.decode(e.ids, false);
  } catch (const std::exception&) {
  }
  return 0;
}
