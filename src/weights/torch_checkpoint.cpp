#include "weights/torch_checkpoint.h"

#include <cstring>
#include <fstream>
#include <map>
#include <stdexcept>

namespace xdna {

namespace {

// ---- the restricted unpickler ----------------------------------------------------------------

// One pickled value. Only the kinds a state dict is made of. Values live in an Arena and point at
// each other with plain pointers: memo ops can build cycles, and a hostile file can nest deeply,
// so nothing is owned through the graph (no leaks, no recursive destruction).
struct PyObj;
using Obj = PyObj*;
struct PyObj {
  enum Kind { None, Bool, Int, BigInt, Float, Str, Tuple, List, Dict, Global, Storage, Tensor, Object } kind;
  int64_t i = 0;
  double f = 0;
  std::string s;           // Str text; BigInt raw bytes; Global / Object "module.name"; Storage key
  std::vector<Obj> items;  // Tuple / List; Dict as key, value, key, value ...; Object: its BUILD state
  std::string type;        // Storage / Tensor: the storage type ("FloatStorage")
  TorchCheckpoint::Entry tensor;
};

using Arena = std::vector<std::unique_ptr<PyObj>>;

struct StorageType {
  const char* name;  // torch.<name>
  int elem_size;
  const char* dtype;  // TensorInfo::file_dtype
  std::optional<DType> engine;
};

const StorageType kStorageTypes[] = {
    {"FloatStorage", 4, "float32", DType::F32}, {"HalfStorage", 2, "float16", DType::F16},
    {"BFloat16Storage", 2, "bfloat16", DType::BF16}, {"IntStorage", 4, "int32", DType::I32},
    {"LongStorage", 8, "int64", std::nullopt},   {"DoubleStorage", 8, "float64", std::nullopt},
    {"ShortStorage", 2, "int16", std::nullopt},  {"CharStorage", 1, "int8", std::nullopt},
    {"ByteStorage", 1, "uint8", std::nullopt},   {"BoolStorage", 1, "bool", std::nullopt},
};

const StorageType* find_storage_type(const std::string& name) {
  for (const auto& t : kStorageTypes)
    if (name == t.name) return &t;
  return nullptr;
}

class Unpickler {
 public:
  Unpickler(const uint8_t* data, size_t size, std::string where, Arena& arena)
      : p_(data), n_(size), where_(std::move(where)), arena_(arena) {}

  // Runs one pickle up to its STOP and returns the value; pos() is then just past the STOP.
  Obj load();
  size_t pos() const { return at_; }
  // Storages met in persistent ids, by key.
  std::map<std::string, TorchCheckpoint::Storage> storages;

 private:
  [[noreturn]] void fail(size_t offset, const std::string& what) const {
    throw std::invalid_argument(where_ + ": pickle offset " + std::to_string(offset) + ": " + what);
  }
  const uint8_t* take(size_t k) {
    if (k > n_ - at_) fail(at_, "truncated (needs " + std::to_string(k) + " more bytes)");
    const uint8_t* q = p_ + at_;
    at_ += k;
    return q;
  }
  uint64_t le(size_t k) {
    const uint8_t* q = take(k);
    uint64_t v = 0;
    for (size_t b = 0; b < k; ++b) v |= static_cast<uint64_t>(q[b]) << (8 * b);
    return v;
  }
  std::string line() {
    const size_t start = at_;
    while (at_ < n_ && p_[at_] != '\n') ++at_;
    if (at_ >= n_) fail(start, "truncated GLOBAL name");
    std::string s(reinterpret_cast<const char*>(p_ + start), at_ - start);
    ++at_;
    return s;
  }
  Obj pop(size_t op) {
    if (stack_.size() <= floor()) fail(op, "stack underflow");
    Obj o = stack_.back();
    stack_.pop_back();
    return o;
  }
  Obj& top(size_t op) {
    if (stack_.size() <= floor()) fail(op, "stack underflow");
    return stack_.back();
  }
  size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  std::vector<Obj> pop_to_mark(size_t op) {
    if (marks_.empty()) fail(op, "no MARK");
    const size_t m = marks_.back();
    marks_.pop_back();
    std::vector<Obj> items(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return items;
  }
  Obj global(size_t op, const std::string& module, const std::string& name);
  Obj reduce(size_t op, const Obj& callable, const Obj& args);
  Obj persistent(size_t op, const Obj& pid);
  void set_items(size_t op, Obj& dict, const std::vector<Obj>& kv);

  Obj make(PyObj::Kind k) {
    // A state dict of 10k tensors needs ~100k values; this bounds what a hostile pickle can
    // allocate (about 150 bytes a value).
    if (arena_.size() >= (size_t{1} << 20)) fail(at_, "more than 2^20 pickled values");
    arena_.push_back(std::make_unique<PyObj>());
    arena_.back()->kind = k;
    return arena_.back().get();
  }

  const uint8_t* p_;
  size_t n_;
  size_t at_ = 0;
  std::string where_;
  Arena& arena_;
  std::vector<Obj> stack_;
  std::vector<size_t> marks_;
  std::map<uint32_t, Obj> memo_;
};

// Beside the state dict, training checkpoints pickle their configuration: GigaAM's .ckpt holds
// {"cfg": an OmegaConf DictConfig, "state_dict": ...}. These classes are only ever instantiated
// as inert records (NEWOBJ + BUILD state), never run; their fields become plain JSON.
bool is_config_class(const std::string& full) {
  static const char* const kNames[] = {
      "omegaconf.dictconfig.DictConfig", "omegaconf.listconfig.ListConfig", "omegaconf.nodes.AnyNode",
      "omegaconf.nodes.StringNode", "omegaconf.nodes.IntegerNode", "omegaconf.nodes.FloatNode",
      "omegaconf.nodes.BooleanNode", "omegaconf.base.ContainerMetadata", "omegaconf.base.Metadata"};
  for (const char* n : kNames)
    if (full == n) return true;
  return false;
}

// Type objects a config records as field types (referenced, never called).
bool is_type_tag(const std::string& full) {
  static const char* const kNames[] = {"typing.Any", "__builtin__.dict", "__builtin__.list", "__builtin__.long",
                                       "__builtin__.int", "__builtin__.str", "__builtin__.float",
                                       "__builtin__.bool", "__builtin__.object", "builtins.dict", "builtins.list",
                                       "builtins.int", "builtins.str", "builtins.float", "builtins.bool",
                                       "builtins.object"};
  for (const char* n : kNames)
    if (full == n) return true;
  return false;
}

Obj Unpickler::global(size_t op, const std::string& module, const std::string& name) {
  const std::string full = module + "." + name;
  const bool ok = full == "collections.OrderedDict" || full == "torch._utils._rebuild_tensor_v2" ||
                  full == "torch._utils._rebuild_parameter" || full == "collections.defaultdict" ||
                  is_config_class(full) || is_type_tag(full) ||
                  (module == "torch" && find_storage_type(name));
  if (!ok) fail(op, "global " + full + " is not allowed (only state-dict globals are)");
  Obj g = make(PyObj::Global);
  g->s = full;
  return g;
}

int64_t as_int(const Obj& o, const char* what, const std::string& where) {
  if (o->kind != PyObj::Int && o->kind != PyObj::Bool)
    throw std::invalid_argument(where + ": " + what + " is not an integer");
  return o->i;
}

Obj Unpickler::reduce(size_t op, const Obj& callable, const Obj& args) {
  if (callable->kind != PyObj::Global) fail(op, "REDUCE on something that is not a global");
  if (args->kind != PyObj::Tuple) fail(op, "REDUCE arguments are not a tuple");
  const auto& a = args->items;
  if (callable->s == "collections.OrderedDict") {
    if (!a.empty()) fail(op, "OrderedDict with arguments");
    return make(PyObj::Dict);
  }
  if (callable->s == "collections.defaultdict") {  // (default factory): only its items matter
    if (a.size() > 1) fail(op, "defaultdict with more than a factory");
    return make(PyObj::Dict);
  }
  if (callable->s == "torch._utils._rebuild_parameter") {
    if (a.size() < 1 || a[0]->kind != PyObj::Tensor) fail(op, "_rebuild_parameter without a tensor");
    return a[0];
  }
  if (callable->s == "torch._utils._rebuild_tensor_v2") {
    // (storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])
    if (a.size() < 4 || a[0]->kind != PyObj::Storage || a[2]->kind != PyObj::Tuple ||
        a[3]->kind != PyObj::Tuple)
      fail(op, "_rebuild_tensor_v2 arguments are not (storage, offset, size, stride, ...)");
    Obj t = make(PyObj::Tensor);
    t->type = a[0]->type;
    t->tensor.storage = a[0]->s;
    t->tensor.elem_size = find_storage_type(a[0]->type)->elem_size;
    const std::string w = where_ + ": pickle offset " + std::to_string(op);
    t->tensor.offset = as_int(a[1], "storage offset", w);
    for (const Obj& d : a[2]->items) t->tensor.shape.push_back(as_int(d, "size", w));
    for (const Obj& d : a[3]->items) t->tensor.strides.push_back(as_int(d, "stride", w));
    if (t->tensor.shape.size() != t->tensor.strides.size())
      fail(op, "tensor with " + std::to_string(t->tensor.shape.size()) + " sizes but " +
                   std::to_string(t->tensor.strides.size()) + " strides");
    return t;
  }
  fail(op, callable->s + " is not callable here");
}

// ('storage', torch.<Type>Storage, key, location, numel[, view_metadata])
Obj Unpickler::persistent(size_t op, const Obj& pid) {
  const auto& a = pid->items;
  if (pid->kind != PyObj::Tuple || a.size() < 5 || a[0]->kind != PyObj::Str ||
      a[0]->s != "storage" || a[1]->kind != PyObj::Global || a[2]->kind != PyObj::Str ||
      a[4]->kind != PyObj::Int)
    fail(op, "persistent id is not ('storage', type, key, location, numel)");
  if (a.size() > 5 && a[5]->kind != PyObj::None) fail(op, "storage views are not supported");
  const std::string type = a[1]->s.substr(a[1]->s.find('.') + 1);
  const StorageType* st = a[1]->s.starts_with("torch.") ? find_storage_type(type) : nullptr;
  if (!st) fail(op, a[1]->s + " is not a storage type");
  if (a[4]->i < 0) fail(op, "negative storage size");
  auto [it, fresh] = storages.try_emplace(a[2]->s);
  if (fresh) {
    it->second.key = a[2]->s;
    it->second.elem_size = st->elem_size;
    it->second.numel = a[4]->i;
  } else if (it->second.elem_size != st->elem_size || it->second.numel != a[4]->i) {
    fail(op, "storage " + a[2]->s + " described twice differently");
  }
  Obj s = make(PyObj::Storage);
  s->s = a[2]->s;
  s->type = type;
  s->i = a[4]->i;
  return s;
}

void Unpickler::set_items(size_t op, Obj& dict, const std::vector<Obj>& kv) {
  if (dict->kind != PyObj::Dict) fail(op, "SETITEM(S) on something that is not a dict");
  if (kv.size() % 2) fail(op, "SETITEMS with an odd number of items");
  dict->items.insert(dict->items.end(), kv.begin(), kv.end());
}

Obj Unpickler::load() {
  stack_.clear();
  marks_.clear();
  memo_.clear();
  for (;;) {
    const size_t op = at_;
    const uint8_t code = *take(1);
    switch (code) {
      case 0x80: take(1); break;  // PROTO
      case 0x95: take(8); break;  // FRAME: a length hint only
      case '.': {                 // STOP
        if (stack_.size() != 1 || !marks_.empty()) fail(op, "STOP with a malformed stack");
        return stack_.back();
      }
      case '}': stack_.push_back(make(PyObj::Dict)); break;
      case ']': stack_.push_back(make(PyObj::List)); break;
      case ')': stack_.push_back(make(PyObj::Tuple)); break;
      case '(': marks_.push_back(stack_.size()); break;
      case 'N': stack_.push_back(make(PyObj::None)); break;
      case 0x88:
      case 0x89: {
        Obj b = make(PyObj::Bool);
        b->i = code == 0x88;
        stack_.push_back(b);
        break;
      }
      case 'J': case 'K': case 'M': {  // BININT (i32), BININT1 (u8), BININT2 (u16)
        Obj v = make(PyObj::Int);
        v->i = code == 'J' ? static_cast<int32_t>(le(4)) : static_cast<int64_t>(le(code == 'K' ? 1 : 2));
        stack_.push_back(v);
        break;
      }
      case 0x8a: {  // LONG1: little-endian two's complement of n bytes
        const size_t k = *take(1);
        const uint8_t* q = take(k);
        Obj v = make(k <= 8 ? PyObj::Int : PyObj::BigInt);
        if (k <= 8) {
          uint64_t u = 0;
          for (size_t b = 0; b < k; ++b) u |= static_cast<uint64_t>(q[b]) << (8 * b);
          if (k > 0 && k < 8 && (q[k - 1] & 0x80)) u |= ~uint64_t{0} << (8 * k);
          v->i = static_cast<int64_t>(u);
        } else {
          v->s.assign(reinterpret_cast<const char*>(q), k);
        }
        stack_.push_back(v);
        break;
      }
      case 'G': {  // BINFLOAT, big-endian
        const uint8_t* q = take(8);
        uint64_t u = 0;
        for (int b = 0; b < 8; ++b) u = (u << 8) | q[b];
        Obj v = make(PyObj::Float);
        std::memcpy(&v->f, &u, 8);
        stack_.push_back(v);
        break;
      }
      case 'X': case 0x8c: {  // BINUNICODE (u32 length), SHORT_BINUNICODE (u8 length)
        const size_t k = le(code == 'X' ? 4 : 1);
        const uint8_t* q = take(k);
        Obj v = make(PyObj::Str);
        v->s.assign(reinterpret_cast<const char*>(q), k);
        stack_.push_back(v);
        break;
      }
      case 't': {
        Obj t = make(PyObj::Tuple);
        t->items = pop_to_mark(op);
        stack_.push_back(t);
        break;
      }
      case 0x85: case 0x86: case 0x87: {  // TUPLE1..3
        Obj t = make(PyObj::Tuple);
        t->items.resize(code - 0x84);
        for (size_t k = t->items.size(); k-- > 0;) t->items[k] = pop(op);
        stack_.push_back(t);
        break;
      }
      case 'q': memo_[static_cast<uint32_t>(le(1))] = top(op); break;  // BINPUT
      case 'r': memo_[static_cast<uint32_t>(le(4))] = top(op); break;  // LONG_BINPUT
      case 0x94: memo_[static_cast<uint32_t>(memo_.size())] = top(op); break;  // MEMOIZE
      case 'h': case 'j': {  // BINGET, LONG_BINGET
        const auto k = static_cast<uint32_t>(le(code == 'h' ? 1 : 4));
        auto it = memo_.find(k);
        if (it == memo_.end()) fail(op, "memo " + std::to_string(k) + " is empty");
        stack_.push_back(it->second);
        break;
      }
      case 'c': {  // GLOBAL "module\nname\n"
        const std::string module = line();
        const std::string name = line();
        stack_.push_back(global(op, module, name));
        break;
      }
      case 0x93: {  // STACK_GLOBAL
        Obj name = pop(op), module = pop(op);
        if (name->kind != PyObj::Str || module->kind != PyObj::Str) fail(op, "STACK_GLOBAL of non-strings");
        stack_.push_back(global(op, module->s, name->s));
        break;
      }
      case 'R': {
        Obj args = pop(op), callable = pop(op);
        stack_.push_back(reduce(op, callable, args));
        break;
      }
      case 'Q': {  // BINPERSID
        Obj pid = pop(op);
        stack_.push_back(persistent(op, pid));
        break;
      }
      case 's': {
        Obj v = pop(op), k = pop(op);
        set_items(op, top(op), {k, v});
        break;
      }
      case 'u': {
        std::vector<Obj> kv = pop_to_mark(op);
        set_items(op, top(op), kv);
        break;
      }
      case 'a': {
        Obj v = pop(op);
        Obj& l = top(op);
        if (l->kind != PyObj::List) fail(op, "APPEND to something that is not a list");
        l->items.push_back(v);
        break;
      }
      case 'e': {
        std::vector<Obj> vs = pop_to_mark(op);
        Obj& l = top(op);
        if (l->kind != PyObj::List) fail(op, "APPENDS to something that is not a list");
        l->items.insert(l->items.end(), vs.begin(), vs.end());
        break;
      }
      case 0x81: {  // NEWOBJ cls args: only the config record classes
        Obj args = pop(op), cls = pop(op);
        if (cls->kind != PyObj::Global || !is_config_class(cls->s) || args->kind != PyObj::Tuple)
          fail(op, "NEWOBJ of " + (cls->kind == PyObj::Global ? cls->s : std::string("a non-class")) +
                       " is not allowed");
        Obj o = make(PyObj::Object);
        o->s = cls->s;
        stack_.push_back(o);
        break;
      }
      case 'b': {  // BUILD: a config record's state, or the _metadata torch sets on an OrderedDict
        Obj state = pop(op);
        Obj& target = top(op);
        if (target->kind == PyObj::Object) {
          if (!target->items.empty()) fail(op, "BUILD twice on one " + target->s);
          target->items.push_back(state);
        } else if (target->kind != PyObj::Dict) {
          fail(op, "BUILD on something that is not an OrderedDict or a config record");
        }
        break;
      }
      default: {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02x", code);
        fail(op, std::string("opcode ") + hex + " is not allowed");
      }
    }
  }
}

// ---- zip (stored entries only) ----------------------------------------------------------------

struct ZipEntry {
  uint64_t offset = 0, size = 0;  // of the data in the file
};

uint64_t rd(const std::byte* p, int k) {
  uint64_t v = 0;
  for (int b = 0; b < k; ++b) v |= static_cast<uint64_t>(std::to_integer<uint8_t>(p[b])) << (8 * b);
  return v;
}

std::map<std::string, ZipEntry> read_zip(const std::byte* d, uint64_t n, const std::string& where) {
  auto fail = [&](const std::string& what) -> void {
    throw std::invalid_argument(where + ": zip: " + what);
  };
  auto need = [&](uint64_t off, uint64_t k, const char* what) {
    if (off > n || k > n - off) fail(std::string(what) + " runs past the end of the file (truncated?)");
  };
  // End of central directory: 22 bytes plus a comment of up to 64 KiB, at the very end.
  if (n < 22) fail("too short for an end-of-central-directory record (truncated?)");
  uint64_t eocd = n;
  for (uint64_t i = n - 22 + 1; i-- > 0 && n - i <= 22 + 65535;)
    if (rd(d + i, 4) == 0x06054b50) { eocd = i; break; }
  if (eocd == n) fail("no end-of-central-directory record (truncated?)");
  uint64_t count = rd(d + eocd + 10, 2), cd_size = rd(d + eocd + 12, 4), cd_off = rd(d + eocd + 16, 4);
  if (count == 0xFFFF || cd_size == 0xFFFFFFFF || cd_off == 0xFFFFFFFF) {  // zip64
    if (eocd < 20 || rd(d + eocd - 20, 4) != 0x07064b50) fail("zip64 fields without a zip64 locator");
    const uint64_t z = rd(d + eocd - 20 + 8, 8);
    need(z, 56, "zip64 end record");
    if (rd(d + z, 4) != 0x06064b50) fail("bad zip64 end record signature");
    count = rd(d + z + 32, 8);
    cd_size = rd(d + z + 40, 8);
    cd_off = rd(d + z + 48, 8);
  }
  need(cd_off, cd_size, "central directory");
  std::map<std::string, ZipEntry> out;
  uint64_t at = cd_off;
  for (uint64_t e = 0; e < count; ++e) {
    need(at, 46, "central directory entry");
    if (rd(d + at, 4) != 0x02014b50) fail("bad central directory signature");
    const uint64_t flags = rd(d + at + 8, 2), method = rd(d + at + 10, 2);
    uint64_t csize = rd(d + at + 20, 4), usize = rd(d + at + 24, 4);
    const uint64_t nlen = rd(d + at + 28, 2), xlen = rd(d + at + 30, 2), clen = rd(d + at + 32, 2);
    uint64_t local = rd(d + at + 42, 4);
    need(at + 46, nlen + xlen + clen, "central directory entry");
    std::string name(reinterpret_cast<const char*>(d + at + 46), nlen);
    // zip64 extra field: the 64-bit values of the fields saturated above, in this order.
    for (uint64_t x = at + 46 + nlen; x + 4 <= at + 46 + nlen + xlen;) {
      const uint64_t id = rd(d + x, 2), len = rd(d + x + 2, 2);
      if (x + 4 + len > at + 46 + nlen + xlen) fail(name + ": extra field runs past its entry");
      if (id == 1) {
        uint64_t y = x + 4;
        for (uint64_t* f : {&usize, &csize, &local})
          if (*f == 0xFFFFFFFF) {
            if (y + 8 > x + 4 + len) fail(name + ": short zip64 extra field");
            *f = rd(d + y, 8);
            y += 8;
          }
      }
      x += 4 + len;
    }
    if (flags & 1) fail(name + ": encrypted entry");
    if (method != 0 || csize != usize)
      fail(name + ": compressed entry (method " + std::to_string(method) +
           "); torch.save writes entries stored, so this file was repacked");
    need(local, 30, "local header");
    if (rd(d + local, 4) != 0x04034b50) fail(name + ": bad local header signature");
    const uint64_t data = local + 30 + rd(d + local + 26, 2) + rd(d + local + 28, 2);
    need(data, csize, (name + " data").c_str());
    out[name] = {data, csize};
    at += 46 + nlen + xlen + clen;
  }
  return out;
}

// The magic number the legacy format starts with (a LONG1 of 10 bytes).
const uint8_t kLegacyMagic[10] = {0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};

const Obj* dict_get(const Obj& dict, const std::string& key) {
  for (size_t k = 0; k + 1 < dict->items.size(); k += 2)
    if (dict->items[k]->kind == PyObj::Str && dict->items[k]->s == key) return &dict->items[k + 1];
  return nullptr;
}

// A pickled value as JSON: containers, scalars, and OmegaConf configs by their content
// (DictConfig / ListConfig "_content", a node's "_val"). Tensors, storages, big integers and
// unknown records become null. Bounded in depth and in total size: memo references can make a
// small pickle describe a cyclic or exponentially large tree.
nlohmann::json to_json(const Obj& o, int depth, size_t& budget, const std::string& where) {
  if (depth > 64 || budget == 0) throw std::invalid_argument(where + ": pickled config is too deep or too large");
  --budget;
  auto state_field = [&](const char* key) -> const Obj* {
    return o->items.empty() || o->items[0]->kind != PyObj::Dict ? nullptr : dict_get(o->items[0], key);
  };
  switch (o->kind) {
    case PyObj::Bool: return o->i != 0;
    case PyObj::Int: return o->i;
    case PyObj::Float: return o->f;
    case PyObj::Str: return o->s;
    case PyObj::Global: return o->s;
    case PyObj::Tuple:
    case PyObj::List: {
      nlohmann::json a = nlohmann::json::array();
      for (const Obj& v : o->items) a.push_back(to_json(v, depth + 1, budget, where));
      return a;
    }
    case PyObj::Dict: {
      nlohmann::json d = nlohmann::json::object();
      for (size_t k = 0; k + 1 < o->items.size(); k += 2) {
        const Obj& key = o->items[k];
        const std::string name = key->kind == PyObj::Str ? key->s
                                 : key->kind == PyObj::Int ? std::to_string(key->i) : std::string();
        if (!name.empty()) d[name] = to_json(o->items[k + 1], depth + 1, budget, where);
      }
      return d;
    }
    case PyObj::Object: {
      if (o->s == "omegaconf.dictconfig.DictConfig" || o->s == "omegaconf.listconfig.ListConfig") {
        const Obj* content = state_field("_content");
        return content ? to_json(*content, depth + 1, budget, where) : nlohmann::json();
      }
      if (o->s.starts_with("omegaconf.nodes.")) {
        const Obj* val = state_field("_val");
        return val ? to_json(*val, depth + 1, budget, where) : nlohmann::json();
      }
      return nullptr;
    }
    default: return nullptr;
  }
}

}  // namespace

TorchCheckpoint::TorchCheckpoint(const std::string& path)
    : path_(path), buffer_(std::make_shared<MappedFile>(path)) {
  parse();
}

TorchCheckpoint::TorchCheckpoint(std::shared_ptr<Buffer> bytes, const std::string& name)
    : path_(name), buffer_(std::move(bytes)) {
  parse();
}

void TorchCheckpoint::parse() {
  const auto* d = reinterpret_cast<const uint8_t*>(buffer_->data());
  const uint64_t n = buffer_->size();
  Arena arena;  // every pickled value, freed together at the end
  Obj root = nullptr;
  std::map<std::string, Storage> storages;
  if (n >= 4 && std::memcmp(d, "PK\x03\x04", 4) == 0) {
    const auto zip = read_zip(buffer_->data(), n, path_);
    std::string prefix;
    const ZipEntry* pkl = nullptr;
    for (const auto& [name, e] : zip)
      if (name.ends_with("/data.pkl") && name.find('/') == name.size() - 9) {
        if (pkl) throw std::invalid_argument(path_ + ": zip holds more than one data.pkl");
        pkl = &e;
        prefix = name.substr(0, name.size() - 8);
      }
    if (!pkl) throw std::invalid_argument(path_ + ": zip without <archive>/data.pkl: not a torch checkpoint");
    if (auto bo = zip.find(prefix + "byteorder"); bo != zip.end()) {
      const std::string order(reinterpret_cast<const char*>(d + bo->second.offset), bo->second.size);
      if (order != "little") throw std::invalid_argument(path_ + ": byteorder is '" + order + "', not little");
    }
    Unpickler u(d + pkl->offset, pkl->size, path_ + ": " + prefix + "data.pkl", arena);
    root = u.load();
    storages = u.storages;
    for (auto& [key, s] : storages) {
      auto it = zip.find(prefix + "data/" + key);
      if (it == zip.end()) throw std::invalid_argument(path_ + ": storage " + key + " has no data/" + key + " entry");
      s.byte_offset = it->second.offset;
      s.bytes = it->second.size;
    }
    metadata_["container"] = "zip";
  } else if (n >= 14 && d[0] == 0x80 && d[2] == 0x8a && d[3] == 10 &&
             std::memcmp(d + 4, kLegacyMagic, 10) == 0) {
    size_t at = 0;
    auto next = [&](Unpickler& u) {
      Obj o = u.load();
      at += u.pos();
      return o;
    };
    Unpickler magic(d, n, path_, arena);
    next(magic);
    Unpickler version(d + at, n - at, path_ + " (protocol version)", arena);
    Obj v = next(version);
    if (v->kind != PyObj::Int || v->i != 1001)
      throw std::invalid_argument(path_ + ": legacy protocol version is not 1001");
    Unpickler sys(d + at, n - at, path_ + " (sys_info)", arena);
    Obj info = next(sys);
    if (info->kind == PyObj::Dict)
      if (const Obj* le = dict_get(info, "little_endian"); le && (*le)->kind == PyObj::Bool && !(*le)->i)
        throw std::invalid_argument(path_ + ": written on a big-endian machine");
    Unpickler body(d + at, n - at, path_, arena);
    root = next(body);
    storages = body.storages;
    Unpickler keys_u(d + at, n - at, path_ + " (storage keys)", arena);
    Obj keys = next(keys_u);
    if (keys->kind != PyObj::List) throw std::invalid_argument(path_ + ": storage key list is not a list");
    // Then each storage in the list's order: i64 element count, bytes.
    for (const Obj& k : keys->items) {
      if (k->kind != PyObj::Str) throw std::invalid_argument(path_ + ": storage key is not a string");
      auto it = storages.find(k->s);
      if (it == storages.end()) throw std::invalid_argument(path_ + ": storage key " + k->s + " is not used");
      if (n - at < 8) throw std::invalid_argument(path_ + ": truncated before storage " + k->s);
      const uint64_t count = rd(buffer_->data() + at, 8);
      const uint64_t bytes = count * static_cast<uint64_t>(it->second.elem_size);
      if (count != static_cast<uint64_t>(it->second.numel) || bytes / it->second.elem_size != count ||
          bytes > n - at - 8)
        throw std::invalid_argument(path_ + ": storage " + k->s + " has " + std::to_string(count) +
                                    " elements on disk, the pickle says " + std::to_string(it->second.numel) +
                                    " (or the file is truncated)");
      it->second.byte_offset = at + 8;
      it->second.bytes = bytes;
      at += 8 + bytes;
    }
    metadata_["container"] = "legacy";
  } else {
    throw std::invalid_argument(path_ + ": not a torch checkpoint (neither a zip nor a legacy pickle)");
  }

  // The state dict: the object itself, or its "state_dict" / "model" entry (training checkpoints).
  if (root->kind != PyObj::Dict) throw std::invalid_argument(path_ + ": the pickled object is not a dict");
  metadata_["state_dict_key"] = "";
  for (const char* key : {"state_dict", "model"})
    if (const Obj* inner = dict_get(root, key); inner && (*inner)->kind == PyObj::Dict) {
      // What sits beside the state dict (GigaAM's "cfg", Lightning's "hyper_parameters") as JSON.
      nlohmann::json objects = nlohmann::json::object();
      size_t budget = size_t{1} << 20;
      for (size_t k = 0; k + 1 < root->items.size(); k += 2)
        if (root->items[k]->kind == PyObj::Str && root->items[k]->s != key)
          objects[root->items[k]->s] = to_json(root->items[k + 1], 0, budget, path_);
      metadata_["objects"] = objects;
      root = *inner;
      metadata_["state_dict_key"] = key;
      break;
    }

  for (auto& [key, s] : storages) {
    if (s.bytes < static_cast<uint64_t>(s.numel) * s.elem_size)
      throw std::invalid_argument(path_ + ": storage " + key + " holds " + std::to_string(s.bytes) +
                                  " bytes, fewer than its " + std::to_string(s.numel) + " elements");
    storages_.push_back(s);
  }
  for (size_t k = 0; k + 1 < root->items.size(); k += 2) {
    const Obj& key = root->items[k];
    const Obj& val = root->items[k + 1];
    if (val->kind != PyObj::Tensor) continue;  // epochs, optimizer settings ...
    if (key->kind != PyObj::Str) throw std::invalid_argument(path_ + ": a tensor's key is not a string");
    if (find(key->s)) throw std::invalid_argument(path_ + ": tensor " + key->s + " appears twice");
    const Entry& e = val->tensor;
    const Storage& s = storages.at(e.storage);
    // Highest element index the view touches; everything non-negative and inside the storage.
    unsigned __int128 last = 0, numel = 1;
    bool bad = e.offset < 0;
    for (size_t dim = 0; dim < e.shape.size(); ++dim) {
      if (e.shape[dim] < 0 || e.strides[dim] < 0) bad = true;
      else {
        numel *= static_cast<uint64_t>(e.shape[dim]);
        if (e.shape[dim] > 0)
          last += static_cast<unsigned __int128>(e.shape[dim] - 1) * static_cast<uint64_t>(e.strides[dim]);
      }
    }
    if (!bad && numel > 0 && last + static_cast<uint64_t>(e.offset) >= static_cast<uint64_t>(s.numel))
      bad = true;
    if (bad || numel > (uint64_t{1} << 48))
      throw std::invalid_argument(path_ + ": tensor " + key->s + " (shape " + shape_str(e.shape) +
                                  ", offset " + std::to_string(e.offset) + ") lies outside its storage of " +
                                  std::to_string(s.numel) + " elements");
    const StorageType* st = find_storage_type(val->type);
    TensorInfo info;
    info.name = key->s;
    info.file_dtype = st->dtype;
    info.dtype = st->engine;
    info.shape = e.shape;
    info.file = path_;
    info.offset = s.byte_offset + static_cast<uint64_t>(e.offset) * s.elem_size;
    info.bytes = static_cast<uint64_t>(numel) * s.elem_size;
    infos_.push_back(info);
    entries_.push_back(e);
  }
}

const TorchCheckpoint::Entry& TorchCheckpoint::entry(const std::string& name) const {
  for (size_t k = 0; k < infos_.size(); ++k)
    if (infos_[k].name == name) return entries_[k];
  throw std::runtime_error(path_ + ": no tensor " + name);
}

// Copies a strided view's elements into dst in logical (row-major) order.
static void gather(const std::byte* src, const TorchCheckpoint::Entry& e, std::byte* dst) {
  const int64_t total = shape_numel(e.shape);
  std::vector<int64_t> idx(e.shape.size(), 0);
  for (int64_t k = 0; k < total; ++k) {
    int64_t at = 0;
    for (size_t dim = 0; dim < idx.size(); ++dim) at += idx[dim] * e.strides[dim];
    std::memcpy(dst + k * e.elem_size, src + at * e.elem_size, static_cast<size_t>(e.elem_size));
    for (size_t dim = idx.size(); dim-- > 0;) {
      if (++idx[dim] < e.shape[dim]) break;
      idx[dim] = 0;
    }
  }
}

Tensor TorchCheckpoint::packed(const std::string& name, DType dtype) const {
  const Entry& e = entry(name);
  const TensorInfo& in = info(name);
  const std::byte* src = buffer_->data() + in.offset;
  // A view when the bytes are already packed and aligned (legacy files place storages anywhere).
  if (e.strides == contiguous_strides(e.shape) && reinterpret_cast<uintptr_t>(src) % e.elem_size == 0)
    return Tensor::view(buffer_, in.offset, e.shape, dtype);
  Tensor out = Tensor::empty(e.shape, dtype);
  gather(src, e, out.raw());
  return out;
}

Tensor TorchCheckpoint::get(const std::string& name) const {
  const TensorInfo& in = info(name);
  if (!in.dtype)
    throw std::runtime_error(path_ + ": tensor " + name + " is " + in.file_dtype +
                             ", which the engine cannot compute with");
  return packed(name, *in.dtype);
}

std::vector<int64_t> TorchCheckpoint::get_i64(const std::string& name) const {
  const TensorInfo& in = info(name);
  if (in.file_dtype != "int64")
    throw std::runtime_error(path_ + ": tensor " + name + " is " + in.file_dtype + ", not int64");
  std::vector<int64_t> out(static_cast<size_t>(shape_numel(in.shape)));
  gather(buffer_->data() + in.offset, entry(name), reinterpret_cast<std::byte*>(out.data()));
  return out;
}

bool looks_like_torch_checkpoint(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  unsigned char head[14] = {};
  in.read(reinterpret_cast<char*>(head), sizeof head);
  if (in.gcount() >= 4 && std::memcmp(head, "PK\x03\x04", 4) == 0) return true;
  return in.gcount() == 14 && head[0] == 0x80 && head[2] == 0x8a && head[3] == 10 &&
         std::memcmp(head + 4, kLegacyMagic, 10) == 0;
}

}  // namespace xdna
