// Designs as JSON (the files in designs/). Field names follow design.h; enums are written by
// name ("bf16", "fill"). Reading checks field presence and types and names the bad field.
#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "npu/design.h"

namespace xdna::npu {

using nlohmann::json;

namespace {

json coord(TileCoord t) { return json::array({t.col, t.row}); }
json end(const FifoEnd& e) { return {{"tile", coord(e.tile)}, {"channel", e.channel}}; }

// Reading: every access goes through `field`, so a missing or mistyped field names its path.
template <typename T>
T field(const json& j, const char* key, const std::string& where) {
  if (!j.is_object() || !j.contains(key))
    throw std::invalid_argument("design JSON: " + where + " has no field '" + key + "'");
  try {
    return j.at(key).get<T>();
  } catch (const json::exception& e) {
    throw std::invalid_argument("design JSON: " + where + "." + key + ": " + e.what());
  }
}

template <typename T>
T field_or(const json& j, const char* key, const std::string& where, T dflt) {
  return j.is_object() && j.contains(key) ? field<T>(j, key, where) : dflt;
}

TileCoord read_coord(const json& j, const std::string& where) {
  if (!j.is_array() || j.size() != 2 || !j[0].is_number_integer() || !j[1].is_number_integer())
    throw std::invalid_argument("design JSON: " + where + " is not [col, row]");
  return {j[0].get<int>(), j[1].get<int>()};
}

FifoEnd read_end(const json& j, const std::string& where) {
  if (!j.is_object() || !j.contains("tile"))
    throw std::invalid_argument("design JSON: " + where + " has no field 'tile'");
  return {read_coord(j["tile"], where + ".tile"), field<int>(j, "channel", where)};
}

DType read_dtype(const json& j, const char* key, const std::string& where) {
  const std::string s = field<std::string>(j, key, where);
  const auto t = dtype_from_name(s);
  if (!t) throw std::invalid_argument("design JSON: " + where + "." + key + ": unknown dtype '" + s + "'");
  return *t;
}

SeqOp read_op(const std::string& s, const std::string& where) {
  for (SeqOp op : {SeqOp::Fill, SeqOp::Drain, SeqOp::Wait})
    if (seq_op_name(op) == s) return op;
  throw std::invalid_argument("design JSON: " + where + ".op: unknown step '" + s +
                              "' (fill, drain, wait)");
}

CoreOp read_core_op(const std::string& s, const std::string& where) {
  for (CoreOp op : {CoreOp::Acquire, CoreOp::Release, CoreOp::Call, CoreOp::Loop})
    if (core_op_name(op) == s) return op;
  throw std::invalid_argument("design JSON: " + where + ".op: unknown core step '" + s +
                              "' (acquire, release, call, loop)");
}

json program_json(const std::vector<CoreStep>& program) {
  json steps = json::array();
  for (const CoreStep& s : program) {
    json js = {{"op", core_op_name(s.op)}};
    if (s.op == CoreOp::Loop) {
      js["count"] = s.count;
      js["body"] = s.body;
    } else {
      js["name"] = s.name;
    }
    if (s.op == CoreOp::Call) {
      js["operands"] = s.operands;
      if (!s.args.empty()) js["args"] = s.args;
    }
    steps.push_back(js);
  }
  return steps;
}

const json& array_at(const json& j, const char* key, const std::string& where) {
  static const json empty = json::array();
  if (!j.contains(key)) return empty;
  if (!j[key].is_array())
    throw std::invalid_argument("design JSON: " + where + "." + key + " is not an array");
  return j[key];
}

}  // namespace

json design_to_json(const Design& d) {
  json j;
  j["name"] = d.name;
  j["family"] = d.family;
  j["params"] = d.params;
  json tiles = json::array();
  for (const TileUse& t : d.tiles) {
    json jt = {{"tile", coord(t.at)}};
    json bufs = json::array();
    for (const Buffer& b : t.buffers)
      bufs.push_back({{"name", b.name}, {"bytes", b.bytes}, {"dtype", dtype_name(b.dtype)}});
    if (!bufs.empty()) jt["buffers"] = bufs;
    if (t.has_kernel)
      jt["kernel"] = {{"name", t.kernel.name},           {"dtype", dtype_name(t.kernel.dtype)},
                      {"args", t.kernel.args},           {"mmul_macs", t.kernel.mmul_macs},
                      {"vector_macs", t.kernel.vector_macs}, {"vector_ops", t.kernel.vector_ops}};
    if (!t.program.empty()) jt["program"] = program_json(t.program);
    tiles.push_back(jt);
  }
  j["tiles"] = tiles;
  json fifos = json::array();
  for (const ObjectFifo& f : d.fifos) {
    json cons = json::array();
    for (const FifoEnd& c : f.consumers) cons.push_back(end(c));
    fifos.push_back({{"name", f.name},
                     {"producer", end(f.producer)},
                     {"consumers", cons},
                     {"depth", f.depth},
                     {"elem_bytes", f.elem_bytes},
                     {"objects", f.objects}});
  }
  j["fifos"] = fifos;
  json links = json::array();
  for (const FifoLink& l : d.links)
    links.push_back({{"inputs", l.inputs}, {"outputs", l.outputs}, {"offsets", l.offsets}});
  j["links"] = links;
  json args = json::array();
  for (const HostArg& a : d.args) args.push_back({{"name", a.name}, {"bytes", a.bytes}});
  j["args"] = args;
  json seq = json::array();
  for (const SeqStep& s : d.sequence) {
    json js = {{"op", seq_op_name(s.op)}, {"fifo", s.fifo}};
    if (s.op != SeqOp::Wait) {
      json dims = json::array();
      for (const Dim& dm : s.pattern.dims) dims.push_back({dm.size, dm.stride});
      js["arg"] = s.arg;
      js["elem_bytes"] = s.pattern.elem_bytes;
      js["offset"] = s.pattern.offset;
      js["dims"] = dims;  // innermost first: [size, stride]
      js["repeat"] = s.pattern.repeat;
    }
    seq.push_back(js);
  }
  j["sequence"] = seq;
  return j;
}

Design design_from_json(const json& j) {
  Design d;
  d.name = field<std::string>(j, "name", "design");
  d.family = field_or<std::string>(j, "family", "design", "");
  d.params = field_or<std::map<std::string, int64_t>>(j, "params", "design", {});
  const json& tiles = array_at(j, "tiles", "design");
  for (size_t i = 0; i < tiles.size(); ++i) {
    const std::string w = "tiles[" + std::to_string(i) + "]";
    TileUse t;
    if (!tiles[i].contains("tile")) throw std::invalid_argument("design JSON: " + w + " has no field 'tile'");
    t.at = read_coord(tiles[i]["tile"], w + ".tile");
    const json& bufs = array_at(tiles[i], "buffers", w);
    for (size_t b = 0; b < bufs.size(); ++b) {
      const std::string wb = w + ".buffers[" + std::to_string(b) + "]";
      t.buffers.push_back({field<std::string>(bufs[b], "name", wb), field<int64_t>(bufs[b], "bytes", wb),
                           read_dtype(bufs[b], "dtype", wb)});
    }
    if (tiles[i].contains("kernel")) {
      const json& k = tiles[i]["kernel"];
      const std::string wk = w + ".kernel";
      t.has_kernel = true;
      t.kernel.name = field<std::string>(k, "name", wk);
      t.kernel.dtype = read_dtype(k, "dtype", wk);
      t.kernel.args = field_or<std::map<std::string, int64_t>>(k, "args", wk, {});
      t.kernel.mmul_macs = field_or<int64_t>(k, "mmul_macs", wk, 0);
      t.kernel.vector_macs = field_or<int64_t>(k, "vector_macs", wk, 0);
      t.kernel.vector_ops = field_or<int64_t>(k, "vector_ops", wk, 0);
    }
    const json& prog = array_at(tiles[i], "program", w);
    for (size_t k = 0; k < prog.size(); ++k) {
      const std::string wp = w + ".program[" + std::to_string(k) + "]";
      CoreStep st;
      st.op = read_core_op(field<std::string>(prog[k], "op", wp), wp);
      if (st.op == CoreOp::Loop) {
        st.count = field<int64_t>(prog[k], "count", wp);
        st.body = field<int64_t>(prog[k], "body", wp);
      } else {
        st.name = field<std::string>(prog[k], "name", wp);
      }
      if (st.op == CoreOp::Call) {
        st.operands = field<std::vector<std::string>>(prog[k], "operands", wp);
        st.args = field_or<std::map<std::string, int64_t>>(prog[k], "args", wp, {});
      }
      t.program.push_back(std::move(st));
    }
    if (!t.program.empty()) check_core_program(d.name, t);
    d.tiles.push_back(std::move(t));
  }
  const json& fifos = array_at(j, "fifos", "design");
  for (size_t i = 0; i < fifos.size(); ++i) {
    const std::string w = "fifos[" + std::to_string(i) + "]";
    const json& f = fifos[i];
    ObjectFifo o;
    o.name = field<std::string>(f, "name", w);
    if (!f.contains("producer")) throw std::invalid_argument("design JSON: " + w + " has no field 'producer'");
    o.producer = read_end(f["producer"], w + ".producer");
    const json& cons = array_at(f, "consumers", w);
    for (size_t c = 0; c < cons.size(); ++c)
      o.consumers.push_back(read_end(cons[c], w + ".consumers[" + std::to_string(c) + "]"));
    o.depth = field<int>(f, "depth", w);
    o.elem_bytes = field<int64_t>(f, "elem_bytes", w);
    o.objects = field_or<int64_t>(f, "objects", w, 1);
    d.fifos.push_back(std::move(o));
  }
  const json& links = array_at(j, "links", "design");
  for (size_t i = 0; i < links.size(); ++i) {
    const std::string w = "links[" + std::to_string(i) + "]";
    d.links.push_back({field<std::vector<std::string>>(links[i], "inputs", w),
                       field<std::vector<std::string>>(links[i], "outputs", w),
                       field_or<std::vector<int64_t>>(links[i], "offsets", w, {})});
  }
  const json& args = array_at(j, "args", "design");
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string w = "args[" + std::to_string(i) + "]";
    d.args.push_back({field<std::string>(args[i], "name", w), field<int64_t>(args[i], "bytes", w)});
  }
  const json& seq = array_at(j, "sequence", "design");
  for (size_t i = 0; i < seq.size(); ++i) {
    const std::string w = "sequence[" + std::to_string(i) + "]";
    SeqStep s;
    s.op = read_op(field<std::string>(seq[i], "op", w), w);
    s.fifo = field<std::string>(seq[i], "fifo", w);
    if (s.op != SeqOp::Wait) {
      s.arg = field<int>(seq[i], "arg", w);
      s.pattern.elem_bytes = field<int64_t>(seq[i], "elem_bytes", w);
      s.pattern.offset = field<int64_t>(seq[i], "offset", w);
      s.pattern.repeat = field_or<int64_t>(seq[i], "repeat", w, 1);
      for (const auto& dm : field<std::vector<std::vector<int64_t>>>(seq[i], "dims", w)) {
        if (dm.size() != 2) throw std::invalid_argument("design JSON: " + w + ".dims: each dim is [size, stride]");
        s.pattern.dims.push_back({dm[0], dm[1]});
      }
    }
    d.sequence.push_back(std::move(s));
  }
  return d;
}

std::string_view core_op_name(CoreOp op) {
  switch (op) {
    case CoreOp::Acquire: return "acquire";
    case CoreOp::Release: return "release";
    case CoreOp::Call: return "call";
    case CoreOp::Loop: return "loop";
  }
  return "?";
}

void check_core_program(const std::string& design, const TileUse& t) {
  const auto bad = [&](size_t i, const std::string& what) {
    throw std::invalid_argument("design " + design + ": core " + to_string(t.at) + " program step " +
                                std::to_string(i) + ": " + what);
  };
  std::vector<std::string> held;  // FIFOs with an acquired object, in acquire order
  std::vector<size_t> loop_end;   // open loops: index one past their body
  for (size_t i = 0; i <= t.program.size(); ++i) {
    while (!loop_end.empty() && loop_end.back() == i) loop_end.pop_back();
    if (i == t.program.size()) break;
    const CoreStep& s = t.program[i];
    switch (s.op) {
      case CoreOp::Loop:
        if (s.count < 1 || s.body < 1) bad(i, "loop needs count >= 1 and a body of >= 1 steps");
        if (i + 1 + size_t(s.body) > t.program.size() || (!loop_end.empty() && i + 1 + size_t(s.body) > loop_end.back()))
          bad(i, "loop body runs past its enclosing block");
        loop_end.push_back(i + 1 + size_t(s.body));
        break;
      case CoreOp::Acquire:
        if (std::find(held.begin(), held.end(), s.name) != held.end()) bad(i, "acquires " + s.name + " twice");
        held.push_back(s.name);
        break;
      case CoreOp::Release: {
        auto it = std::find(held.begin(), held.end(), s.name);
        if (it == held.end()) bad(i, "releases " + s.name + " which it does not hold");
        held.erase(it);
        break;
      }
      case CoreOp::Call:
        if (s.name.empty()) bad(i, "call names no entry point");
        for (const std::string& f : s.operands)
          if (std::find(held.begin(), held.end(), f) == held.end()) bad(i, s.name + " takes " + f + " which is not acquired");
        break;
    }
  }
  if (!held.empty()) bad(t.program.size(), "ends holding " + held.front());
}

void save_design(const Design& d, const std::string& path) {
  std::ofstream f(path);
  if (!f) throw std::runtime_error("cannot write design file " + path);
  f << design_to_json(d).dump(1) << "\n";
  if (!f) throw std::runtime_error("error writing design file " + path);
}

Design load_design(const std::string& path) {
  std::ifstream f(path);
  if (!f) throw std::runtime_error("cannot open design file " + path);
  json j;
  try {
    j = json::parse(f);
  } catch (const json::parse_error& e) {
    throw std::invalid_argument("design file " + path + ": " + e.what());
  }
  return design_from_json(j);
}

}  // namespace xdna::npu
