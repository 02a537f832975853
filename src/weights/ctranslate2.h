// CTranslate2 model directories (what faster-whisper loads: model.bin + config.json +
// tokenizer.json / vocabulary.*): a reader for model.bin, and the importer that turns a Whisper
// model into the engine's baked file with Hugging Face transformers tensor names.
//
// model.bin layout (little-endian), as CTranslate2 writes it: u32 binary version, u16-prefixed
// spec name, u32 spec revision, u32 variable count, then per variable: u16-prefixed name, u8 rank,
// u32 dims[rank], u8 dtype (0 f32, 1 i8, 2 i16, 3 i32, 4 f16, 5 bf16), u32 byte count, bytes;
// then u32 alias count and (alias, target) name pairs. See docs/formats.md.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "weights/bake.h"
#include "weights/source.h"

namespace xdna {

// model.bin as a WeightSource with CTranslate2's own names ("encoder/layer_0/self_attention/
// linear_0/weight"); aliases resolve to their targets. Throws std::runtime_error naming the file
// and the byte offset of anything malformed (bad version, truncated, unknown dtype).
std::unique_ptr<WeightSource> open_ctranslate2(const std::string& model_bin);

struct Ct2ImportSummary {
  std::string spec;  // "WhisperSpec"
  int64_t tensors = 0;
  uint64_t bytes = 0;
};

// Converts a CTranslate2 Whisper directory into `output` (a baked file) with transformers'
// Whisper names (fused q/k/v are split), each tensor stored as `precision` says under the bake
// rules of weights/bake.h (Keep: f16 stays f16), and writes config.json (transformers
// WhisperConfig fields) to config_out. Throws std::runtime_error naming what is wrong.
Ct2ImportSummary import_ctranslate2_whisper(const std::string& ct2_dir, const std::string& output,
                                            const std::string& config_out,
                                            Precision precision = Precision::Keep);

}  // namespace xdna
