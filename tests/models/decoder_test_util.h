// What the decoder tests share: loading a tiny fixture decoder (tests/fixtures/decoders/NAME) from
// its safetensors (with config.json) or its GGUF file.
#pragma once
#include <fstream>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "models/decoder.h"
#include "models/decoder_spec.h"
#include "weights/gguf.h"
#include "weights/source.h"

namespace mtest {

inline std::unique_ptr<xdna::Decoder> load_fixture_decoder(const std::string& name, const std::string& file) {
  const std::string dir = std::string(XDNA_FIXTURE_DIR) + "/decoders/" + name + "/";
  if (file.ends_with(".gguf")) {
    auto g = std::make_shared<xdna::GgufFile>(dir + file);
    return std::make_unique<xdna::Decoder>(xdna::decoder_spec_from_gguf(*g), g);
  }
  std::ifstream f(dir + "config.json");
  return std::make_unique<xdna::Decoder>(xdna::decoder_spec_from_config(nlohmann::json::parse(f)),
                                         xdna::open_weights(dir + file));
}

}  // namespace mtest
