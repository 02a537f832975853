// Jinja2 evaluator: walks the Node tree with Python/Jinja semantics (truthiness, int vs float
// arithmetic, undefined vs none, per-iteration scopes in for loops, namespace() objects).
// Limits keep any input finite: nesting depth, total steps, output size.
#include <cmath>
#include <stdexcept>

#include "pipeline/jinja.h"

namespace xdna::jinja {

namespace {
constexpr int kMaxDepth = 256;                 // nested evaluation / macro calls
constexpr uint64_t kMaxSteps = 2'000'000;      // statements + expressions evaluated (~1 s)
constexpr size_t kMaxOutput = 32u << 20;       // bytes of any string or of the rendered text

bool is_num(const Json& j) { return j.is_number() || j.is_boolean(); }
bool is_int(const Json& j) { return j.is_number_integer() || j.is_boolean(); }
int64_t as_int(const Json& j) { return j.is_boolean() ? (j.get<bool>() ? 1 : 0) : j.get<int64_t>(); }
double as_double(const Json& j) { return j.is_boolean() ? (j.get<bool>() ? 1.0 : 0.0) : j.get<double>(); }

[[noreturn]] void type_error(const char* op, const Value& a, const Value& b) {
  fail(std::string("unsupported operand type(s) for ") + op + ": '" + type_name(a) + "' and '" +
       type_name(b) + "'");
}

void require_defined(const Value& v) {
  if (v.is_undefined()) fail("'" + (v.hint.empty() ? std::string("value") : v.hint) + "' is undefined");
}

Value arith(const std::string& op, const Value& a, const Value& b) {
  require_defined(a);
  require_defined(b);
  if (!a.is_json() || !b.is_json()) type_error(op.c_str(), a, b);
  const Json& x = a.json();
  const Json& y = b.json();
  if (op == "+") {
    auto length = [](const Json& j) { return j.is_string() ? j.get_ref<const std::string&>().size() : j.size(); };
    if ((x.is_string() || x.is_array()) && x.type() == y.type() && length(x) + length(y) > kMaxOutput)
      fail("concatenation result too large");
    if (x.is_string() && y.is_string()) {
      if (!a.markup && !b.markup) return Value::of(x.get_ref<const std::string&>() + y.get_ref<const std::string&>());
      // Markup + str escapes the str, and the result is Markup (markupsafe semantics).
      Value r = Value::of((a.markup ? x.get<std::string>() : html_escape(x.get<std::string>())) +
                          (b.markup ? y.get<std::string>() : html_escape(y.get<std::string>())));
      r.markup = true;
      return r;
    }
    if (x.is_array() && y.is_array()) {
      Json r = x;
      for (const auto& e : y) r.push_back(e);
      return Value::of(std::move(r));
    }
  }
  const bool x_seq = x.is_string() || x.is_array(), y_seq = y.is_string() || y.is_array();
  if (op == "*" && ((x_seq && is_int(y)) || (y_seq && is_int(x)))) {  // "ab" * 2, [1] * 3
    const Json& seq = x_seq ? x : y;
    int64_t n = x_seq ? as_int(y) : as_int(x);
    if (n <= 0) return Value::of(seq.is_string() ? Json("") : Json::array());
    size_t unit = seq.is_string() ? seq.get_ref<const std::string&>().size() : seq.size();
    if (unit != 0 && static_cast<uint64_t>(n) > kMaxOutput / unit) fail("repetition result too large");
    if (seq.is_string()) {
      std::string r;
      for (int64_t i = 0; i < n; i++) r += seq.get_ref<const std::string&>();
      return Value::of(r);
    }
    Json r = Json::array();
    for (int64_t i = 0; i < n; i++)
      for (const auto& e : seq) r.push_back(e);
    return Value::of(std::move(r));
  }
  if (!is_num(x) || !is_num(y)) type_error(op.c_str(), a, b);
  bool ints = is_int(x) && is_int(y);
  if (op == "/") {
    double d = as_double(y);
    if (d == 0) fail("division by zero");
    return Value::of(as_double(x) / d);
  }
  if (ints) {
    int64_t p = as_int(x), q = as_int(y), r = 0;
    if (op == "+") { if (__builtin_add_overflow(p, q, &r)) fail("integer overflow"); return Value::of(r); }
    if (op == "-") { if (__builtin_sub_overflow(p, q, &r)) fail("integer overflow"); return Value::of(r); }
    if (op == "*") { if (__builtin_mul_overflow(p, q, &r)) fail("integer overflow"); return Value::of(r); }
    if (op == "//" || op == "%") {
      if (q == 0) fail("integer division or modulo by zero");
      if (p == INT64_MIN && q == -1) fail("integer overflow");
      int64_t d = p / q, m = p % q;
      if (m != 0 && ((m < 0) != (q < 0))) { d -= 1; m += q; }  // Python floors
      return Value::of(op == "//" ? d : m);
    }
    if (op == "**") {
      if (q < 0) return Value::of(std::pow(static_cast<double>(p), static_cast<double>(q)));
      int64_t acc = 1;
      for (int64_t k = 0; k < q; k++) {
        if (__builtin_mul_overflow(acc, p, &acc)) fail("integer overflow");
        if (acc == 0 || acc == 1) break;
      }
      return Value::of(acc);
    }
  }
  double p = as_double(x), q = as_double(y);
  if (op == "+") return Value::of(p + q);
  if (op == "-") return Value::of(p - q);
  if (op == "*") return Value::of(p * q);
  if (op == "**") return Value::of(std::pow(p, q));
  if (q == 0) fail("float division or modulo by zero");
  double d = std::floor(p / q);
  if (op == "//") return Value::of(d);
  return Value::of(p - d * q);  // "%", sign of the divisor as in Python
}

// <, <=, >, >= with Python's rules: numbers with numbers, str with str, lists element-wise.
int order(const Value& a, const Value& b, const std::string& op) {
  if (!a.is_json() || !b.is_json()) type_error(op.c_str(), a, b);
  const Json& x = a.json();
  const Json& y = b.json();
  if (is_num(x) && is_num(y)) {
    if (is_int(x) && is_int(y)) return as_int(x) < as_int(y) ? -1 : as_int(x) > as_int(y) ? 1 : 0;
    double p = as_double(x), q = as_double(y);
    return p < q ? -1 : p > q ? 1 : 0;
  }
  if (x.is_string() && y.is_string()) {
    int c = x.get_ref<const std::string&>().compare(y.get_ref<const std::string&>());
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (x.is_array() && y.is_array()) {
    for (size_t i = 0; i < x.size() && i < y.size(); i++) {
      if (py_equal(x[i], y[i])) continue;
      return order(a.part(x[i]), b.part(y[i]), op);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  fail("'" + op + "' not supported between instances of '" + type_name(a) + "' and '" + type_name(b) + "'");
}

bool values_equal(const Value& a, const Value& b) {
  if (a.is_undefined() || b.is_undefined()) return a.is_undefined() && b.is_undefined();
  if (a.kind != b.kind) return false;
  if (a.kind == Value::Kind::Namespace) return a.ns == b.ns;
  if (a.kind == Value::Kind::Callable) return a.fn == b.fn;
  return py_equal(a.json(), b.json());
}

bool contains(const Value& container, const Value& item) {
  if (container.is_undefined()) return false;
  if (!container.is_json()) fail("argument of type '" + type_name(container) + "' is not iterable");
  const Json& c = container.json();
  if (c.is_string()) {
    if (!item.is_json() || !item.json().is_string())
      fail("'in <string>' requires string as left operand, not " + type_name(item));
    return c.get_ref<const std::string&>().find(item.json().get_ref<const std::string&>()) != std::string::npos;
  }
  if (c.is_array()) {
    for (const auto& e : c)
      if (values_equal(container.part(e), item)) return true;
    return false;
  }
  if (c.is_object()) {
    if (!item.is_json() || !item.json().is_string()) return false;
    return c.contains(item.json().get_ref<const std::string&>());
  }
  fail("argument of type '" + type_name(container) + "' is not iterable");
}

// Python index normalisation; returns false when out of range.
bool norm_index(int64_t& i, size_t n) {
  if (i < 0) i += static_cast<int64_t>(n);
  return i >= 0 && i < static_cast<int64_t>(n);
}

}  // namespace

// Items a for loop (or a filter) iterates over.
std::vector<Value> iterate(const Value& v) {
  std::vector<Value> items;
  if (v.is_undefined()) return items;
  if (v.kind == Value::Kind::Namespace) fail("'Namespace' object is not iterable");
  if (v.kind == Value::Kind::Callable) fail("'function' object is not iterable");
  const Json& j = v.json();
  if (j.is_array()) {
    for (const auto& e : j) items.push_back(v.part(e));
  } else if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) items.push_back(Value::of(it.key()));
  } else if (j.is_string()) {
    for (char32_t c : utf8_decode(j.get_ref<const std::string&>()))
      items.push_back(Value::of(utf8_encode(std::u32string(1, c))));
  } else {
    fail("'" + type_name(v) + "' object is not iterable");
  }
  return items;
}

Json to_json(const Value& v, const char* where) {
  if (v.is_json()) return v.json();
  if (v.is_undefined()) fail(std::string("undefined value '") + v.hint + "' " + where);
  fail(std::string("a ") + type_name(v) + " cannot be used " + where);
}

// A list or dict literal may hold undefined (Python puts the Undefined object there).
static Json element(const Value& v, const char* where) {
  return v.is_undefined() ? Json(Json::value_t::discarded) : to_json(v, where);
}

Value get_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) require_defined(obj);
  if (obj.kind == Value::Kind::Namespace) {
    auto it = obj.ns->find(name);
    return it == obj.ns->end() ? Value::undefined("Namespace." + name) : it->second;
  }
  if (obj.is_json() && obj.json().is_object()) {
    auto it = obj.json().find(name);
    if (it != obj.json().end()) return obj.part(*it);
  }
  return Value::undefined(name);
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) require_defined(obj);
  if (obj.kind == Value::Kind::Namespace && key.is_json() && key.json().is_string())
    return get_attr(obj, key.json().get<std::string>());
  if (!obj.is_json() || !key.is_json()) return Value::undefined("item");
  const Json& o = obj.json();
  const Json& k = key.json();
  if (o.is_object() && k.is_string()) {
    auto it = o.find(k.get_ref<const std::string&>());
    return it == o.end() ? Value::undefined(k.get<std::string>()) : obj.part(*it);
  }
  if (is_int(k) && (o.is_array() || o.is_string())) {
    int64_t i = as_int(k);
    if (o.is_array()) return norm_index(i, o.size()) ? obj.part(o[i]) : Value::undefined("item");
    std::u32string s = utf8_decode(o.get_ref<const std::string&>());
    if (!norm_index(i, s.size())) return Value::undefined("item");
    return Value::of(utf8_encode(s.substr(i, 1)));
  }
  return Value::undefined("item");
}

Value slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  require_defined(obj);
  auto bound = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_undefined() || (v.is_json() && v.json().is_null())) return std::nullopt;
    if (!v.is_json() || !is_int(v.json())) fail(std::string("slice ") + what + " must be an integer");
    return as_int(v.json());
  };
  auto b = bound(start, "start"), e = bound(stop, "stop"), s = bound(step, "step");
  int64_t st = s.value_or(1);
  if (st == 0) fail("slice step cannot be zero");
  if (!obj.is_json() || !(obj.json().is_array() || obj.json().is_string()))
    fail("'" + type_name(obj) + "' object is not subscriptable");
  const Json& o = obj.json();
  std::u32string str;
  int64_t n = o.is_array() ? static_cast<int64_t>(o.size())
                           : static_cast<int64_t>((str = utf8_decode(o.get_ref<const std::string&>())).size());
  // Python's slice.indices()
  auto clamp = [&](std::optional<int64_t> v, int64_t def) {
    if (!v) return def;
    int64_t x = *v;
    if (x < 0) x += n;
    if (st > 0) return std::clamp<int64_t>(x, 0, n);
    return std::clamp<int64_t>(x, -1, n - 1);
  };
  int64_t lo = clamp(b, st > 0 ? 0 : n - 1), hi = clamp(e, st > 0 ? n : -1);
  std::vector<int64_t> idx;
  for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) idx.push_back(i);
  if (o.is_array()) {
    Json r = Json::array();
    for (int64_t i : idx) r.push_back(o[i]);
    return Value::of(std::move(r));
  }
  std::u32string r;
  for (int64_t i : idx) r += str[i];
  return Value::of(utf8_encode(r));
}

struct DepthGuard {
  Evaluator& e;
  explicit DepthGuard(Evaluator& ev) : e(ev) {
    if (++e.depth_ > kMaxDepth) fail("template recursion too deep");
    if (++e.steps_ > kMaxSteps) fail("template took too many steps");
  }
  ~DepthGuard() { e.depth_--; }
};

Evaluator::Evaluator(const std::map<std::string, Value>& globals) : globals_(globals) {
  scopes_.emplace_back();
}

Value Evaluator::lookup(const std::string& name) const {
  for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
    auto f = it->find(name);
    if (f != it->end()) return f->second;
  }
  auto g = globals_.find(name);
  return g == globals_.end() ? Value::undefined(name) : g->second;
}

void Evaluator::assign(const std::string& name, Value v) { scopes_.back()[name] = std::move(v); }

CallArgs Evaluator::eval_args(const Node& n, size_t first) {
  CallArgs args;
  for (size_t k = first; k < n.kids.size(); k++) {
    Value v = eval(*n.kids[k]);
    const std::string& kw = n.names[k - first];
    if (kw.empty()) args.pos.push_back(std::move(v));
    else args.kw.emplace_back(kw, std::move(v));
  }
  return args;
}

Value Evaluator::call(const Value& callee, CallArgs& args, const std::string& what) {
  if (callee.kind != Value::Kind::Callable) {
    if (callee.is_undefined()) fail("'" + what + "' is undefined");
    fail("'" + what + "' is not callable");
  }
  return (*callee.fn)(*this, args);
}

Value Evaluator::eval_call(const Node& n) {
  const Node& target = *n.kids[0];
  if (target.kind == NodeKind::Attr) {
    Value obj = eval(*target.kids[0]);
    if (obj.is_json()) {
      CallArgs args = eval_args(n, 1);
      bool found = false;
      Value r = call_method(obj, target.name, args, found);
      if (found) return r;
      Value attr = get_attr(obj, target.name);
      if (attr.kind != Value::Kind::Callable)
        fail("'" + type_name(obj) + "' object has no method '" + target.name + "'");
      return call(attr, args, target.name);
    }
    require_defined(obj);
    Value fn = get_attr(obj, target.name);
    CallArgs args = eval_args(n, 1);
    return call(fn, args, target.name);
  }
  Value fn = eval(target);
  CallArgs args = eval_args(n, 1);
  return call(fn, args, target.kind == NodeKind::Name ? target.name : "expression");
}

Value Evaluator::apply_filter(const std::string& name, Value v, CallArgs& args) {
  FilterFn f = find_filter(name);
  if (!f) fail("no filter named '" + name + "'");
  return f(*this, v, args);
}

bool Evaluator::apply_test(const std::string& name, const Value& v, CallArgs& args) {
  TestFn t = find_test(name);
  if (!t) fail("no test named '" + name + "'");
  return t(*this, v, args);
}

Value Evaluator::eval(const Node& n) {
  DepthGuard guard(*this);
  switch (n.kind) {
    case NodeKind::Literal: return Value::of(n.value);
    case NodeKind::Name: return lookup(n.name);
    case NodeKind::ListLit: {
      Json a = Json::array();
      for (const auto& k : n.kids) a.push_back(element(eval(*k), "in a list"));
      return Value::of(std::move(a));
    }
    case NodeKind::DictLit: {
      Json o = Json::object();
      for (size_t k = 0; k + 1 < n.kids.size(); k += 2) {
        Value key = eval(*n.kids[k]);
        if (!key.is_json() || !key.json().is_string()) fail("dict keys must be strings");
        o[key.json().get<std::string>()] = element(eval(*n.kids[k + 1]), "in a dict");
      }
      return Value::of(std::move(o));
    }
    case NodeKind::Attr: return get_attr(eval(*n.kids[0]), n.name);
    case NodeKind::Item: return get_item(eval(*n.kids[0]), eval(*n.kids[1]));
    case NodeKind::Slice: {
      Value obj = eval(*n.kids[0]);
      Value parts[3];
      for (int k = 0; k < 3; k++)
        if (n.kids[k + 1]) parts[k] = eval(*n.kids[k + 1]);
      return slice(obj, parts[0], parts[1], parts[2]);
    }
    case NodeKind::Call: return eval_call(n);
    case NodeKind::Filter: {
      Value v = eval(*n.kids[0]);
      CallArgs args = eval_args(n, 1);
      return apply_filter(n.name, std::move(v), args);
    }
    case NodeKind::Test: {
      Value v = eval(*n.kids[0]);
      CallArgs args = eval_args(n, 1);
      return Value::of(apply_test(n.name, v, args) != n.negated);
    }
    case NodeKind::Unary: {
      Value v = eval(*n.kids[0]);
      if (n.name == "not") return Value::of(!truthy(v));
      require_defined(v);
      if (!v.is_json() || !is_num(v.json())) fail("bad operand type for unary " + n.name + ": '" + type_name(v) + "'");
      if (n.name == "+") return Value::of(is_int(v.json()) ? Json(as_int(v.json())) : v.json());
      if (is_int(v.json())) {
        int64_t x = as_int(v.json());
        if (x == INT64_MIN) fail("integer overflow");
        return Value::of(-x);
      }
      return Value::of(-v.json().get<double>());
    }
    case NodeKind::Binary: {
      if (n.name == "and") {
        Value a = eval(*n.kids[0]);
        return truthy(a) ? eval(*n.kids[1]) : a;
      }
      if (n.name == "or") {
        Value a = eval(*n.kids[0]);
        return truthy(a) ? a : eval(*n.kids[1]);
      }
      Value a = eval(*n.kids[0]);
      Value b = eval(*n.kids[1]);
      if (n.name == "~") {
        std::string s = py_str(a) + py_str(b);
        if (s.size() > kMaxOutput) fail("string too large");
        return Value::of(std::move(s));
      }
      return arith(n.name, a, b);
    }
    case NodeKind::Compare: {
      Value left = eval(*n.kids[0]);
      for (size_t k = 0; k < n.names.size(); k++) {
        Value right = eval(*n.kids[k + 1]);
        const std::string& op = n.names[k];
        bool ok;
        if (op == "==") ok = values_equal(left, right);
        else if (op == "!=") ok = !values_equal(left, right);
        else if (op == "in") ok = contains(right, left);
        else if (op == "notin") ok = !contains(right, left);
        else {
          require_defined(left);
          require_defined(right);
          int c = order(left, right, op);
          ok = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
        }
        if (!ok) return Value::of(false);
        left = std::move(right);
      }
      return Value::of(true);
    }
    case NodeKind::Cond:
      if (truthy(eval(*n.kids[1]))) return eval(*n.kids[0]);
      return n.kids[2] ? eval(*n.kids[2]) : Value::undefined("else branch");
    default:
      fail("statement used as an expression");
  }
}

void Evaluator::check_output(const std::string& out) {
  if (out.size() > kMaxOutput) fail("rendered text exceeds " + std::to_string(kMaxOutput >> 20) + " MiB");
}

void Evaluator::exec_body(const Body& b, std::string& out) {
  for (const auto& s : b) {
    exec(*s, out);
    if (flow_ != Flow::Normal) return;
  }
}

void Evaluator::exec_for(const Node& n, std::string& out) {
  Value seq = eval(*n.kids[0]);
  if (seq.is_json() && seq.json().is_null()) fail("'NoneType' object is not iterable");
  std::vector<Value> items = iterate(seq);
  auto bind = [&](const Value& item) {
    if (n.names.size() == 1) {
      assign(n.names[0], item);
      return;
    }
    std::vector<Value> parts = iterate(item);
    if (parts.size() != n.names.size())
      fail("cannot unpack " + std::to_string(parts.size()) + " values into " +
           std::to_string(n.names.size()) + " loop variables");
    for (size_t k = 0; k < parts.size(); k++) assign(n.names[k], parts[k]);
  };
  if (n.kids[1]) {  // {% for x in xs if cond %}: the loop counts only the kept items
    std::vector<Value> kept;
    for (auto& item : items) {
      scopes_.emplace_back();
      bind(item);
      bool keep = truthy(eval(*n.kids[1]));
      scopes_.pop_back();
      if (keep) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    exec_body(n.bodies[1], out);
    return;
  }
  const int64_t len = static_cast<int64_t>(items.size());
  for (int64_t k = 0; k < len; k++) {
    if (++steps_ > kMaxSteps) fail("template took too many steps");
    Json loop = {{"index", k + 1}, {"index0", k},          {"revindex", len - k}, {"revindex0", len - k - 1},
                 {"first", k == 0}, {"last", k == len - 1}, {"length", len},      {"depth", 1},
                 {"depth0", 0}};
    if (k > 0 && items[k - 1].is_json()) loop["previtem"] = items[k - 1].json();
    if (k + 1 < len && items[k + 1].is_json()) loop["nextitem"] = items[k + 1].json();
    scopes_.emplace_back();
    assign("loop", Value::of(std::move(loop)));
    bind(items[k]);
    exec_body(n.bodies[0], out);
    scopes_.pop_back();
    if (flow_ == Flow::Break) {
      flow_ = Flow::Normal;
      break;
    }
    flow_ = Flow::Normal;
  }
}

Value Evaluator::make_macro(const Node& n) {
  const Node* def = &n;
  Function fn = [def](Evaluator& ev, CallArgs& args) -> Value {
    if (args.pos.size() > def->names.size())
      fail("macro '" + def->name + "' takes " + std::to_string(def->names.size()) + " arguments, got " +
           std::to_string(args.pos.size()));
    std::map<std::string, Value> frame;
    for (size_t k = 0; k < args.pos.size(); k++) frame[def->names[k]] = args.pos[k];
    for (auto& [key, v] : args.kw) {
      if (std::find(def->names.begin(), def->names.end(), key) == def->names.end())
        fail("macro '" + def->name + "' has no parameter '" + key + "'");
      frame[key] = v;
    }
    // A macro sees the template's top-level variables and its own parameters.
    std::vector<std::map<std::string, Value>> saved = std::move(ev.scopes_);
    ev.scopes_ = {saved.front(), {}};
    std::string out;
    try {
      for (size_t k = 0; k < def->names.size(); k++) {
        auto it = frame.find(def->names[k]);
        if (it != frame.end()) ev.assign(def->names[k], it->second);
        else if (def->kids[k]) ev.assign(def->names[k], ev.eval(*def->kids[k]));
        else ev.assign(def->names[k], Value::undefined(def->names[k]));
      }
      DepthGuard guard(ev);
      ev.exec_body(def->bodies[0], out);
      ev.flow_ = Flow::Normal;
    } catch (...) {
      ev.scopes_ = std::move(saved);
      throw;
    }
    ev.scopes_ = std::move(saved);
    return Value::of(std::move(out));
  };
  Value v;
  v.kind = Value::Kind::Callable;
  v.fn = std::make_shared<const Function>(std::move(fn));
  return v;
}

void Evaluator::exec(const Node& n, std::string& out) {
  DepthGuard guard(*this);
  switch (n.kind) {
    case NodeKind::Text:
      out += n.name;
      check_output(out);
      return;
    case NodeKind::Output:
      out += py_str(eval(*n.kids[0]));
      check_output(out);
      return;
    case NodeKind::If:
      for (size_t k = 0; k < n.kids.size(); k++)
        if (truthy(eval(*n.kids[k]))) {
          exec_body(n.bodies[k], out);
          return;
        }
      if (n.bodies.size() > n.kids.size()) exec_body(n.bodies.back(), out);
      return;
    case NodeKind::For:
      exec_for(n, out);
      return;
    case NodeKind::Set: {
      Value v = eval(*n.kids[0]);
      if (!n.attr.empty()) {
        Value ns = lookup(n.name);
        if (ns.kind != Value::Kind::Namespace)
          fail("cannot assign attribute '" + n.attr + "' on '" + n.name + "', which is not a namespace");
        (*ns.ns)[n.attr] = std::move(v);
      } else if (n.names.size() == 1) {
        assign(n.names[0], std::move(v));
      } else {
        std::vector<Value> parts = iterate(v);
        if (parts.size() != n.names.size())
          fail("cannot unpack " + std::to_string(parts.size()) + " values into " +
               std::to_string(n.names.size()) + " names");
        for (size_t k = 0; k < parts.size(); k++) assign(n.names[k], parts[k]);
      }
      return;
    }
    case NodeKind::SetBlock: {
      std::string text;
      exec_body(n.bodies[0], text);
      Value v = Value::of(std::move(text));
      for (const auto& f : n.kids) {
        CallArgs args = eval_args(*f, 1);
        v = apply_filter(f->name, std::move(v), args);
      }
      assign(n.names[0], std::move(v));
      return;
    }
    case NodeKind::Macro:
      assign(n.name, make_macro(n));
      return;
    case NodeKind::FilterBlock: {
      std::string text;
      exec_body(n.bodies[0], text);
      const Node& f = *n.kids[0];
      CallArgs args = eval_args(f, 1);
      out += py_str(apply_filter(f.name, Value::of(std::move(text)), args));
      check_output(out);
      return;
    }
    case NodeKind::Break:
      flow_ = Flow::Break;
      return;
    case NodeKind::Continue:
      flow_ = Flow::Continue;
      return;
    case NodeKind::Scope: {
      std::vector<Value> values;
      for (const auto& k : n.kids) values.push_back(eval(*k));
      scopes_.emplace_back();
      for (size_t k = 0; k < values.size(); k++) assign(n.names[k], values[k]);
      exec_body(n.bodies[0], out);
      scopes_.pop_back();
      return;
    }
    default:
      fail("expression used as a statement");
  }
}

void Evaluator::run(const Body& body, std::string& out) {
  exec_body(body, out);
  flow_ = Flow::Normal;
}

std::string render(const Body& program, const std::map<std::string, Value>& globals) {
  Evaluator ev(globals);
  std::string out;
  ev.run(program, out);
  return out;
}

void fail(const std::string& msg) { throw std::runtime_error("chat template: " + msg); }

}  // namespace xdna::jinja
