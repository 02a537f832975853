// `npu design dump DESIGN.json [--json] [--write-insts OUT.bin]`: the instruction stream the
// design's runtime sequence lowers to (insts.h lower_sequence), one line per instruction.
// `npu design dump --insts FILE.bin [--json]`: decode an existing insts.bin (e.g. aiecc's).
// A file that is not a valid stream is an error naming the word at fault (exit 1).
#include <cstdio>
#include <fstream>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "npu/artifacts/insts.h"
#include "npu/design.h"

namespace xdna::cli {

namespace {

struct DumpOptions {
  std::string design;
  std::string insts;
  std::string write_insts;
  bool json = false;
};

std::vector<uint32_t> read_words(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (bytes.size() % 4)
    throw std::runtime_error(path + ": " + std::to_string(bytes.size()) + " bytes is not a whole number of u32 words");
  std::vector<uint32_t> words(bytes.size() / 4);
  for (size_t i = 0; i < words.size(); ++i) {  // little-endian, whatever the host
    const auto* b = reinterpret_cast<const unsigned char*>(bytes.data() + 4 * i);
    words[i] = b[0] | b[1] << 8 | b[2] << 16 | uint32_t(b[3]) << 24;
  }
  return words;
}

void write_words(const std::string& path, const std::vector<uint32_t>& words) {
  std::string bytes(words.size() * 4, '\0');
  for (size_t i = 0; i < words.size(); ++i)
    for (int k = 0; k < 4; ++k) bytes[4 * i + k] = static_cast<char>(words[i] >> (8 * k));
  std::ofstream out(path, std::ios::binary);
  if (!out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()))) throw std::runtime_error("cannot write " + path);
}

nlohmann::json stream_json(const npu::insts::Stream& s, size_t bytes) {
  using npu::insts::Op;
  nlohmann::json ops = nlohmann::json::array();
  for (const auto& in : s.ops) {
    nlohmann::json o = {{"op", npu::insts::op_name(in.op)}};
    switch (in.op) {
      case Op::Write32: o["addr"] = in.addr, o["value"] = in.value; break;
      case Op::MaskWrite: o["addr"] = in.addr, o["value"] = in.value, o["mask"] = in.mask; break;
      case Op::BlockWrite: o["col"] = in.col, o["row"] = in.row, o["addr"] = in.addr, o["data"] = in.data; break;
      case Op::Sync:
        o["direction"] = in.direction ? "MM2S" : "S2MM", o["col"] = in.col, o["row"] = in.row,
        o["col_count"] = in.col_count, o["row_count"] = in.row_count, o["channel"] = in.channel;
        break;
      case Op::DdrPatch: o["addr"] = in.addr, o["arg_index"] = in.arg_index, o["arg_offset"] = in.arg_offset; break;
    }
    ops.push_back(std::move(o));
  }
  return {{"dev_gen", s.dev_gen}, {"rows", s.rows},           {"cols", s.cols}, {"mem_rows", s.mem_rows},
          {"op_count", s.ops.size()}, {"bytes", bytes}, {"ops", std::move(ops)}};
}

void run_dump(const DumpOptions& o) {
  if (o.design.empty() == o.insts.empty())
    throw std::invalid_argument("design dump: give either a DESIGN.json or --insts FILE.bin");
  npu::insts::Stream s;
  std::vector<uint32_t> words;
  if (!o.insts.empty()) {
    words = read_words(o.insts);
    try {
      s = npu::insts::decode(words);
    } catch (const std::invalid_argument& e) {
      throw std::runtime_error(o.insts + ": " + e.what());
    }
  } else {
    s = npu::insts::lower_sequence(npu::load_design(o.design));
    words = npu::insts::encode(s);
  }
  if (!o.write_insts.empty()) write_words(o.write_insts, words);
  if (o.json)
    std::printf("%s\n", stream_json(s, words.size() * 4).dump(2).c_str());
  else
    std::fputs(npu::insts::to_text(s).c_str(), stdout);
}

}  // namespace

void add_design_dump_command(CLI::App& design) {
  auto o = std::make_shared<DumpOptions>();
  CLI::App* cmd = design.add_subcommand("dump", "Print a design's NPU instruction stream (or decode an insts.bin)");
  cmd->add_option("design", o->design, "Design JSON file (designs/*.json)");
  cmd->add_option("--insts", o->insts, "Decode this instruction-stream file instead");
  cmd->add_option("--write-insts", o->write_insts, "Also write the stream's words to this file");
  cmd->add_flag("--json", o->json, "Print JSON instead of text");
  cmd->callback([o] { run_dump(*o); });
}

}  // namespace xdna::cli
