// Jinja built-ins chat templates use: filters, tests, Python str/dict/list methods and the globals
// transformers adds (raise_exception, strftime_now, namespace, dict) plus range.
#include <algorithm>
#include <cmath>
#include <ctime>

#include "pipeline/jinja.h"

namespace xdna::jinja {
namespace {

// Argument `idx` given positionally or as keyword `name`; nullptr when absent.
const Value* arg(const CallArgs& a, size_t idx, const char* name) {
  if (idx < a.pos.size()) return &a.pos[idx];
  for (const auto& [k, v] : a.kw)
    if (k == name) return &v;
  return nullptr;
}
std::string str_arg(const CallArgs& a, size_t idx, const char* name, const std::string& def = "") {
  const Value* v = arg(a, idx, name);
  if (!v || v->is_undefined()) return def;
  if (!v->is_json() || !v->json().is_string()) fail(std::string("argument '") + name + "' must be a string");
  return v->json().get<std::string>();
}
int64_t int_arg(const CallArgs& a, size_t idx, const char* name, int64_t def) {
  const Value* v = arg(a, idx, name);
  if (!v || v->is_undefined() || (v->is_json() && v->json().is_null())) return def;
  if (!v->is_json() || !(v->json().is_number_integer() || v->json().is_boolean()))
    fail(std::string("argument '") + name + "' must be an integer");
  return v->json().is_boolean() ? v->json().get<bool>() : v->json().get<int64_t>();
}
bool bool_arg(const CallArgs& a, size_t idx, const char* name, bool def) {
  const Value* v = arg(a, idx, name);
  return v ? truthy(*v) : def;
}
const std::string& str_of(const Value& v, const char* what) {
  if (!v.is_json() || !v.json().is_string())
    fail(std::string("'") + type_name(v) + "' object has no attribute '" + what + "'");
  return v.json().get_ref<const std::string&>();
}

// ---- Python str helpers (code points) ----
std::string strip(const std::string& s, const Value* chars, bool left, bool right) {
  std::u32string u = utf8_decode(s);
  std::u32string set;
  bool ws = !chars || chars->is_undefined() || (chars->is_json() && chars->json().is_null());
  if (!ws) set = utf8_decode(str_of(*chars, "strip"));
  auto drop = [&](char32_t c) { return ws ? py_isspace(c) : set.find(c) != std::u32string::npos; };
  size_t b = 0, e = u.size();
  if (left)
    while (b < e && drop(u[b])) b++;
  if (right)
    while (e > b && drop(u[e - 1])) e--;
  return utf8_encode(u.substr(b, e - b));
}
std::string ascii_case(std::string s, bool upper) {
  for (char& c : s) c = static_cast<char>(upper ? toupper(static_cast<unsigned char>(c)) : tolower(static_cast<unsigned char>(c)));
  return s;
}
std::string capitalize(const std::string& s) {
  std::string r = ascii_case(s, false);
  if (!r.empty()) r[0] = static_cast<char>(toupper(static_cast<unsigned char>(r[0])));
  return r;
}
std::string title(const std::string& s) {
  std::string r = s;
  bool prev_alpha = false;
  for (char& c : r) {
    unsigned char u = c;
    c = static_cast<char>(prev_alpha ? tolower(u) : toupper(u));
    prev_alpha = isalpha(u) != 0;
  }
  return r;
}
Json split(const std::string& s, const Value* sep_v, int64_t maxsplit, bool from_right) {
  Json parts = Json::array();
  bool ws = !sep_v || sep_v->is_undefined() || (sep_v->is_json() && sep_v->json().is_null());
  if (ws) {  // runs of whitespace, no empty strings
    std::u32string u = utf8_decode(s);
    std::vector<std::pair<size_t, size_t>> spans;
    size_t k = 0;
    while (k < u.size()) {
      while (k < u.size() && py_isspace(u[k])) k++;
      if (k >= u.size()) break;
      size_t b = k;
      while (k < u.size() && !py_isspace(u[k])) k++;
      spans.emplace_back(b, k);
    }
    if (maxsplit >= 0 && static_cast<int64_t>(spans.size()) > maxsplit + 1) {
      if (!from_right) {
        size_t b = spans[maxsplit].first;
        size_t e = u.size();
        while (e > b && py_isspace(u[e - 1])) e--;
        spans.resize(maxsplit);
        spans.emplace_back(b, e);
      } else {
        size_t cut = spans.size() - maxsplit;
        size_t b = 0;
        while (b < u.size() && py_isspace(u[b])) b++;
        std::vector<std::pair<size_t, size_t>> r{{b, spans[cut - 1].second}};
        r.insert(r.end(), spans.begin() + cut, spans.end());
        spans = r;
      }
    }
    for (auto [b, e] : spans) parts.push_back(utf8_encode(u.substr(b, e - b)));
    return parts;
  }
  const std::string& sep = str_of(*sep_v, "split");
  if (sep.empty()) fail("empty separator");
  std::vector<std::string> pieces;
  if (!from_right) {
    size_t start = 0;
    int64_t n = 0;
    while (maxsplit < 0 || n < maxsplit) {
      size_t f = s.find(sep, start);
      if (f == std::string::npos) break;
      pieces.push_back(s.substr(start, f - start));
      start = f + sep.size();
      n++;
    }
    pieces.push_back(s.substr(start));
  } else {
    size_t end = s.size();
    int64_t n = 0;
    std::vector<std::string> rev;
    while ((maxsplit < 0 || n < maxsplit) && end >= sep.size()) {
      size_t f = s.rfind(sep, end - sep.size());
      if (f == std::string::npos) break;
      rev.push_back(s.substr(f + sep.size(), end - f - sep.size()));
      end = f;
      n++;
    }
    rev.push_back(s.substr(0, end));
    pieces.assign(rev.rbegin(), rev.rend());
  }
  for (auto& p : pieces) parts.push_back(p);
  return parts;
}
std::string replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` between every code point
    std::u32string u = utf8_decode(s);
    int64_t n = 0;
    for (size_t k = 0; k <= u.size(); k++) {
      if (count < 0 || n < count) { out += to; n++; }
      if (k < u.size()) out += utf8_encode(u.substr(k, 1));
    }
    return out;
  }
  size_t start = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    size_t f = s.find(from, start);
    if (f == std::string::npos) break;
    out += s.substr(start, f - start) + to;
    start = f + from.size();
    n++;
  }
  return out + s.substr(start);
}
// startswith / endswith with a string or a tuple of strings.
bool affix(const std::string& s, const Value* v, bool prefix) {
  if (!v) fail(prefix ? "startswith() takes at least 1 argument" : "endswith() takes at least 1 argument");
  auto one = [&](const Json& p) {
    if (!p.is_string()) fail("startswith/endswith arguments must be str or a tuple of str");
    const std::string& a = p.get_ref<const std::string&>();
    if (a.size() > s.size()) return false;
    return prefix ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0;
  };
  if (!v->is_json()) fail("startswith/endswith arguments must be str or a tuple of str");
  if (v->json().is_array()) {
    for (const auto& p : v->json())
      if (one(p)) return true;
    return false;
  }
  return one(v->json());
}

int64_t py_len(const Value& v) {
  if (v.is_undefined()) return 0;
  if (v.is_json()) {
    const Json& j = v.json();
    if (j.is_string()) return static_cast<int64_t>(utf8_decode(j.get_ref<const std::string&>()).size());
    if (j.is_array() || j.is_object()) return static_cast<int64_t>(j.size());
  }
  fail("object of type '" + type_name(v) + "' has no len()");
}

Json as_list(const Value& v) {
  Json a = Json::array();
  for (const Value& item : iterate(v)) a.push_back(to_json(item, "in a list"));
  return a;
}

// ---- filters ----
Value f_trim(Evaluator&, Value& v, CallArgs& a) { return Value::of(strip(py_str(v), arg(a, 0, "chars"), true, true)); }
Value f_length(Evaluator&, Value& v, CallArgs&) { return Value::of(py_len(v)); }
Value f_upper(Evaluator&, Value& v, CallArgs&) { return Value::of(ascii_case(py_str(v), true)); }
Value f_lower(Evaluator&, Value& v, CallArgs&) { return Value::of(ascii_case(py_str(v), false)); }
Value f_capitalize(Evaluator&, Value& v, CallArgs&) { return Value::of(capitalize(py_str(v))); }
Value f_title(Evaluator&, Value& v, CallArgs&) { return Value::of(title(py_str(v))); }
Value f_string(Evaluator&, Value& v, CallArgs&) { return Value::of(py_str(v)); }
Value f_safe(Evaluator&, Value& v, CallArgs&) {
  Value r = v.is_json() && v.json().is_string() ? v : Value::of(py_str(v));
  r.markup = true;
  return r;
}
Value f_tojson(Evaluator&, Value& v, CallArgs& a) {
  JsonStyle st;
  st.ensure_ascii = bool_arg(a, 0, "ensure_ascii", false);
  const Value* indent = arg(a, 1, "indent");
  if (indent && indent->is_json() && !indent->json().is_null()) {
    st.pretty = true;
    if (indent->json().is_string()) st.indent = indent->json().get<std::string>();
    else st.indent = std::string(std::max<int64_t>(0, int_arg(a, 1, "indent", 0)), ' ');
    st.item_sep = ",";
  }
  const Value* seps = arg(a, 2, "separators");
  if (seps && seps->is_json() && !seps->json().is_null()) {
    const Json& s = seps->json();
    if (!s.is_array() || s.size() != 2 || !s[0].is_string() || !s[1].is_string())
      fail("tojson separators must be a pair of strings");
    st.item_sep = s[0].get<std::string>();
    st.key_sep = s[1].get<std::string>();
  }
  st.sort_keys = bool_arg(a, 3, "sort_keys", false);
  return Value::of(py_json_dumps(to_json(v, "in tojson"), st));
}
Value f_join(Evaluator&, Value& v, CallArgs& a) {
  std::string sep = str_arg(a, 0, "d");
  const Value* attr = arg(a, 1, "attribute");
  std::string out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    out += (first ? "" : sep) + py_str(attr ? get_attr(item, py_str(*attr)) : item);
    first = false;
  }
  return Value::of(out);
}
Value f_first(Evaluator&, Value& v, CallArgs&) {
  auto items = iterate(v);
  return items.empty() ? Value::undefined("first") : items.front();
}
Value f_last(Evaluator&, Value& v, CallArgs&) {
  auto items = iterate(v);
  return items.empty() ? Value::undefined("last") : items.back();
}
Value f_default(Evaluator&, Value& v, CallArgs& a) {
  const Value* d = arg(a, 0, "default_value");
  bool boolean = bool_arg(a, 1, "boolean", false);
  if (v.is_undefined() || (boolean && !truthy(v))) return d ? *d : Value::of("");
  return v;
}
Value f_list(Evaluator&, Value& v, CallArgs&) { return Value::of(as_list(v)); }
Value f_items(Evaluator&, Value& v, CallArgs&) {
  Json r = Json::array();
  if (v.is_undefined()) return Value::of(r);
  if (!v.is_json() || !v.json().is_object()) fail("items filter needs a mapping, got " + type_name(v));
  for (auto it = v.json().begin(); it != v.json().end(); ++it) r.push_back(Json::array({it.key(), it.value()}));
  return Value::of(std::move(r));
}
Value f_replace(Evaluator&, Value& v, CallArgs& a) {
  return Value::of(replace(py_str(v), str_arg(a, 0, "old"), str_arg(a, 1, "new"), int_arg(a, 2, "count", -1)));
}
Value f_int(Evaluator&, Value& v, CallArgs& a) {
  int64_t def = int_arg(a, 0, "default", 0);
  if (!v.is_json()) return Value::of(def);
  const Json& j = v.json();
  if (j.is_number_integer() || j.is_boolean()) return Value::of(j.is_boolean() ? Json(j.get<bool>() ? 1 : 0) : j);
  if (j.is_number_float()) return std::isfinite(j.get<double>()) ? Value::of(static_cast<int64_t>(j.get<double>())) : Value::of(def);
  if (j.is_string()) {
    try {
      size_t used = 0;
      std::string s = strip(j.get<std::string>(), nullptr, true, true);
      int64_t r = std::stoll(s, &used);
      if (used == s.size()) return Value::of(r);
      double d = std::stod(s, &used);
      if (used == s.size() && std::isfinite(d)) return Value::of(static_cast<int64_t>(d));
    } catch (const std::exception&) {
    }
  }
  return Value::of(def);
}
Value f_float(Evaluator&, Value& v, CallArgs& a) {
  const Value* d = arg(a, 0, "default");
  Value def = d ? *d : Value::of(0.0);
  if (!v.is_json()) return def;
  const Json& j = v.json();
  if (j.is_number() || j.is_boolean()) return Value::of(j.is_boolean() ? (j.get<bool>() ? 1.0 : 0.0) : j.get<double>());
  if (j.is_string()) {
    try {
      size_t used = 0;
      std::string s = strip(j.get<std::string>(), nullptr, true, true);
      double r = std::stod(s, &used);
      if (used == s.size()) return Value::of(r);
    } catch (const std::exception&) {
    }
  }
  return def;
}
Value f_abs(Evaluator&, Value& v, CallArgs&) {
  if (!v.is_json() || !(v.json().is_number() || v.json().is_boolean())) fail("bad operand type for abs(): '" + type_name(v) + "'");
  if (v.json().is_number_float()) return Value::of(std::fabs(v.json().get<double>()));
  int64_t x = v.json().is_boolean() ? v.json().get<bool>() : v.json().get<int64_t>();
  if (x == INT64_MIN) fail("integer overflow");
  return Value::of(x < 0 ? -x : x);
}
Value f_escape(Evaluator&, Value& v, CallArgs&) {
  if (v.markup) return v;
  Value r = Value::of(html_escape(py_str(v)));
  r.markup = true;
  return r;
}
Value f_indent(Evaluator&, Value& v, CallArgs& a) {
  const Value* w = arg(a, 0, "width");
  std::string ind = w && w->is_json() && w->json().is_string() ? w->json().get<std::string>()
                                                              : std::string(std::max<int64_t>(0, int_arg(a, 0, "width", 4)), ' ');
  bool first = bool_arg(a, 1, "first", false), blank = bool_arg(a, 2, "blank", false);
  std::string s = py_str(v) + "\n";
  std::vector<std::string> lines;  // str.splitlines() on \n, \r\n, \r
  size_t b = 0;
  for (size_t k = 0; k < s.size(); k++) {
    if (s[k] == '\n' || s[k] == '\r') {
      lines.push_back(s.substr(b, k - b));
      if (s[k] == '\r' && k + 1 < s.size() && s[k + 1] == '\n') k++;
      b = k + 1;
    }
  }
  std::string out;
  for (size_t k = 0; k < lines.size(); k++) {
    if (k) out += "\n";
    if (k && (blank || !lines[k].empty())) out += ind;
    out += lines[k];
  }
  return Value::of(first ? ind + out : out);
}
Value f_reverse(Evaluator&, Value& v, CallArgs&) {
  if (v.is_json() && v.json().is_string()) {
    std::u32string u = utf8_decode(v.json().get<std::string>());
    std::reverse(u.begin(), u.end());
    return Value::of(utf8_encode(u));
  }
  Json l = as_list(v);
  std::reverse(l.begin(), l.end());
  return Value::of(std::move(l));
}
Value f_map(Evaluator& ev, Value& v, CallArgs& a) {
  Json out = Json::array();
  if (!truthy(v)) return Value::of(std::move(out));  // Jinja maps `none` to nothing
  const Value* attr = arg(a, 9999, "attribute");
  if (attr) {
    const Value* d = arg(a, 9999, "default");
    for (const Value& item : iterate(v)) {
      Value r = get_attr(item, py_str(*attr));
      if (r.is_undefined() && d) r = *d;
      out.push_back(to_json(r, "from map()"));
    }
    return Value::of(std::move(out));
  }
  if (a.pos.empty()) fail("map() needs a filter name or attribute=");
  std::string name = py_str(a.pos[0]);
  CallArgs rest;
  rest.pos.assign(a.pos.begin() + 1, a.pos.end());
  rest.kw = a.kw;
  for (Value item : iterate(v)) {
    CallArgs copy = rest;
    out.push_back(to_json(ev.apply_filter(name, item, copy), "from map()"));
  }
  return Value::of(std::move(out));
}
Value select_impl(Evaluator& ev, Value& v, CallArgs& a, bool by_attr, bool keep) {
  size_t next = 0;
  std::string attr;
  if (by_attr) {
    if (a.pos.empty()) fail("selectattr/rejectattr need an attribute name");
    attr = py_str(a.pos[next++]);
  }
  std::string test = next < a.pos.size() ? py_str(a.pos[next++]) : "";
  CallArgs rest;
  rest.pos.assign(a.pos.begin() + std::min(next, a.pos.size()), a.pos.end());
  Json out = Json::array();
  if (!truthy(v)) return Value::of(std::move(out));  // as Jinja: `none | select(...)` is empty
  for (const Value& item : iterate(v)) {
    Value subject = by_attr ? get_attr(item, attr) : item;
    CallArgs copy = rest;
    bool ok = test.empty() ? truthy(subject) : ev.apply_test(test, subject, copy);
    if (ok == keep) out.push_back(to_json(item, "from select()"));
  }
  return Value::of(std::move(out));
}
Value f_select(Evaluator& ev, Value& v, CallArgs& a) { return select_impl(ev, v, a, false, true); }
Value f_reject(Evaluator& ev, Value& v, CallArgs& a) { return select_impl(ev, v, a, false, false); }
Value f_selectattr(Evaluator& ev, Value& v, CallArgs& a) { return select_impl(ev, v, a, true, true); }
Value f_rejectattr(Evaluator& ev, Value& v, CallArgs& a) { return select_impl(ev, v, a, true, false); }
Value f_sum(Evaluator&, Value& v, CallArgs& a) {
  const Value* attr = arg(a, 0, "attribute");
  const Value* start = arg(a, 1, "start");
  Json acc = start ? to_json(*start, "as sum start") : Json(0);
  for (const Value& item : iterate(v)) {
    Json x = to_json(attr ? get_attr(item, py_str(*attr)) : item, "in sum()");
    if (!(x.is_number() || x.is_boolean()) || !acc.is_number()) fail("sum() needs numbers");
    if (acc.is_number_integer() && (x.is_number_integer() || x.is_boolean()))
      acc = acc.get<int64_t>() + (x.is_boolean() ? int64_t{x.get<bool>()} : x.get<int64_t>());
    else
      acc = acc.get<double>() + (x.is_boolean() ? double{x.get<bool>() ? 1.0 : 0.0} : x.get<double>());
  }
  return Value::of(std::move(acc));
}
Value f_round(Evaluator&, Value& v, CallArgs& a) {
  int64_t prec = int_arg(a, 0, "precision", 0);
  std::string method = str_arg(a, 1, "method", "common");
  if (!v.is_json() || !(v.json().is_number() || v.json().is_boolean())) fail("round needs a number");
  double x = v.json().is_boolean() ? v.json().get<bool>() : v.json().get<double>();
  double m = std::pow(10.0, static_cast<double>(prec));
  double r = method == "floor" ? std::floor(x * m) / m : method == "ceil" ? std::ceil(x * m) / m : std::round(x * m) / m;
  return Value::of(r);
}
Value f_attr(Evaluator&, Value& v, CallArgs& a) { return get_attr(v, str_arg(a, 0, "name")); }

bool sort_less(const Json& x, const Json& y, bool case_sensitive) {
  if (x.is_string() && y.is_string() && !case_sensitive)
    return ascii_case(x.get<std::string>(), false) < ascii_case(y.get<std::string>(), false);
  if ((x.is_number() || x.is_boolean()) && (y.is_number() || y.is_boolean())) {
    auto d = [](const Json& j) { return j.is_boolean() ? (j.get<bool>() ? 1.0 : 0.0) : j.get<double>(); };
    return d(x) < d(y);
  }
  if (x.is_string() && y.is_string()) return x.get_ref<const std::string&>() < y.get_ref<const std::string&>();
  fail("sort: cannot compare these values");
}
Value f_sort(Evaluator&, Value& v, CallArgs& a) {
  bool rev = bool_arg(a, 0, "reverse", false), cs = bool_arg(a, 1, "case_sensitive", false);
  const Value* attr = arg(a, 2, "attribute");
  Json l = as_list(v);
  auto key = [&](const Json& j) {
    return attr ? to_json(get_attr(Value::of(j), py_str(*attr)), "as sort key") : j;
  };
  std::stable_sort(l.begin(), l.end(), [&](const Json& x, const Json& y) {
    return rev ? sort_less(key(y), key(x), cs) : sort_less(key(x), key(y), cs);
  });
  return Value::of(std::move(l));
}
Value f_unique(Evaluator&, Value& v, CallArgs&) {
  Json out = Json::array();
  for (const Value& item : iterate(v)) {
    Json j = to_json(item, "in unique()");
    bool seen = false;
    for (const auto& o : out) seen = seen || py_equal(o, j);
    if (!seen) out.push_back(j);
  }
  return Value::of(std::move(out));
}
Value minmax(Value& v, bool want_max) {
  Json l = as_list(v);
  if (l.empty()) return Value::undefined("min/max of an empty sequence");
  size_t best = 0;
  for (size_t k = 1; k < l.size(); k++)
    if (want_max ? sort_less(l[best], l[k], false) : sort_less(l[k], l[best], false)) best = k;
  return Value::of(l[best]);
}
Value f_min(Evaluator&, Value& v, CallArgs&) { return minmax(v, false); }
Value f_max(Evaluator&, Value& v, CallArgs&) { return minmax(v, true); }
Value f_dictsort(Evaluator&, Value& v, CallArgs& a) {
  bool cs = bool_arg(a, 0, "case_sensitive", false);
  std::string by = str_arg(a, 1, "by", "key");
  bool rev = bool_arg(a, 2, "reverse", false);
  if (!v.is_json() || !v.json().is_object()) fail("dictsort needs a mapping, got " + type_name(v));
  if (by != "key" && by != "value") fail("dictsort: 'by' must be 'key' or 'value'");
  Json pairs = Json::array();
  for (auto it = v.json().begin(); it != v.json().end(); ++it) pairs.push_back(Json::array({it.key(), it.value()}));
  const size_t idx = by == "key" ? 0 : 1;
  std::stable_sort(pairs.begin(), pairs.end(), [&](const Json& x, const Json& y) {
    return rev ? sort_less(y[idx], x[idx], cs) : sort_less(x[idx], y[idx], cs);
  });
  return Value::of(std::move(pairs));
}
// "{} and {name} and {0}".format(...): replacement fields without format specs.
std::string py_format(const std::string& fmt, const CallArgs& a) {
  std::string out;
  size_t auto_idx = 0;
  for (size_t k = 0; k < fmt.size(); k++) {
    char c = fmt[k];
    if ((c == '{' || c == '}') && k + 1 < fmt.size() && fmt[k + 1] == c) {
      out += c;
      k++;
      continue;
    }
    if (c == '}') fail("format: single '}' encountered in format string");
    if (c != '{') {
      out += c;
      continue;
    }
    size_t close = fmt.find('}', k);
    if (close == std::string::npos) fail("format: single '{' encountered in format string");
    std::string field = fmt.substr(k + 1, close - k - 1);
    if (field.find_first_of(":!.[") != std::string::npos) fail("format: format specs are not supported: {" + field + "}");
    const Value* v = nullptr;
    if (field.empty() || isdigit(static_cast<unsigned char>(field[0]))) {
      size_t idx = field.empty() ? auto_idx++ : std::stoul(field);
      if (idx >= a.pos.size()) fail("format: replacement index " + std::to_string(idx) + " out of range");
      v = &a.pos[idx];
    } else {
      for (const auto& [name, val] : a.kw)
        if (name == field) v = &val;
      if (!v) fail("format: no argument named '" + field + "'");
    }
    out += py_str(*v);
    k = close;
  }
  return out;
}
Value f_wordcount(Evaluator&, Value& v, CallArgs&) {
  return Value::of(static_cast<int64_t>(split(py_str(v), nullptr, -1, false).size()));
}

// ---- tests ----
bool num_json(const Value& v) { return v.is_json() && (v.json().is_number() || v.json().is_boolean()); }
int64_t int_of(const Value& v, const char* test) {
  if (!v.is_json() || !(v.json().is_number_integer() || v.json().is_boolean())) fail(std::string("'") + test + "' test needs an integer");
  return v.json().is_boolean() ? v.json().get<bool>() : v.json().get<int64_t>();
}
const Value& test_arg(const CallArgs& a, const char* test) {
  if (a.pos.empty()) fail(std::string("test '") + test + "' needs an argument");
  return a.pos[0];
}
bool t_defined(Evaluator&, const Value& v, CallArgs&) { return !v.is_undefined(); }
bool t_undefined(Evaluator&, const Value& v, CallArgs&) { return v.is_undefined(); }
bool t_none(Evaluator&, const Value& v, CallArgs&) { return v.is_json() && v.json().is_null(); }
bool t_string(Evaluator&, const Value& v, CallArgs&) { return v.is_json() && v.json().is_string(); }
bool t_number(Evaluator&, const Value& v, CallArgs&) { return num_json(v); }
bool t_integer(Evaluator&, const Value& v, CallArgs&) { return v.is_json() && v.json().is_number_integer(); }
bool t_float(Evaluator&, const Value& v, CallArgs&) { return v.is_json() && v.json().is_number_float(); }
bool t_boolean(Evaluator&, const Value& v, CallArgs&) { return v.is_json() && v.json().is_boolean(); }
bool t_true(Evaluator&, const Value& v, CallArgs&) { return v.is_json() && v.json().is_boolean() && v.json().get<bool>(); }
bool t_false(Evaluator&, const Value& v, CallArgs&) { return v.is_json() && v.json().is_boolean() && !v.json().get<bool>(); }
bool t_mapping(Evaluator&, const Value& v, CallArgs&) { return v.is_json() && v.json().is_object(); }
// Jinja's undefined is iterable (and a sequence): it iterates as empty.
bool t_iterable(Evaluator&, const Value& v, CallArgs&) {
  return v.is_undefined() || (v.is_json() && (v.json().is_string() || v.json().is_array() || v.json().is_object()));
}
bool t_callable(Evaluator&, const Value& v, CallArgs&) { return v.kind == Value::Kind::Callable; }
bool t_eq(Evaluator&, const Value& v, CallArgs& a) {
  const Value& o = test_arg(a, "eq");
  if (v.is_undefined() || o.is_undefined()) return v.is_undefined() && o.is_undefined();
  return v.is_json() && o.is_json() && py_equal(v.json(), o.json());
}
bool t_ne(Evaluator& ev, const Value& v, CallArgs& a) { return !t_eq(ev, v, a); }
int cmp_nums(const Value& v, const Value& o, const char* test) {
  if (v.is_json() && o.is_json() && v.json().is_string() && o.json().is_string())
    return v.json().get<std::string>().compare(o.json().get<std::string>());
  if (!num_json(v) || !num_json(o)) fail(std::string("'") + test + "' test: cannot compare " + type_name(v) + " and " + type_name(o));
  auto d = [](const Json& j) { return j.is_boolean() ? (j.get<bool>() ? 1.0 : 0.0) : j.get<double>(); };
  double x = d(v.json()), y = d(o.json());
  return x < y ? -1 : x > y ? 1 : 0;
}
bool t_lt(Evaluator&, const Value& v, CallArgs& a) { return cmp_nums(v, test_arg(a, "lt"), "lt") < 0; }
bool t_le(Evaluator&, const Value& v, CallArgs& a) { return cmp_nums(v, test_arg(a, "le"), "le") <= 0; }
bool t_gt(Evaluator&, const Value& v, CallArgs& a) { return cmp_nums(v, test_arg(a, "gt"), "gt") > 0; }
bool t_ge(Evaluator&, const Value& v, CallArgs& a) { return cmp_nums(v, test_arg(a, "ge"), "ge") >= 0; }
bool t_in(Evaluator&, const Value& v, CallArgs& a) {
  const Value& c = test_arg(a, "in");
  if (!c.is_json()) return false;
  const Json& j = c.json();
  if (j.is_string()) return v.is_json() && v.json().is_string() && j.get<std::string>().find(v.json().get<std::string>()) != std::string::npos;
  if (j.is_array()) {
    for (const auto& e : j)
      if (v.is_json() && py_equal(e, v.json())) return true;
    return false;
  }
  if (j.is_object()) return v.is_json() && v.json().is_string() && j.contains(v.json().get<std::string>());
  return false;
}
bool t_odd(Evaluator&, const Value& v, CallArgs&) { return int_of(v, "odd") % 2 != 0; }
bool t_even(Evaluator&, const Value& v, CallArgs&) { return int_of(v, "even") % 2 == 0; }
bool t_divisibleby(Evaluator&, const Value& v, CallArgs& a) {
  int64_t d = int_of(test_arg(a, "divisibleby"), "divisibleby");
  if (d == 0) fail("divisibleby 0");
  return int_of(v, "divisibleby") % d == 0;
}
bool t_sameas(Evaluator&, const Value& v, CallArgs& a) {
  const Value& o = test_arg(a, "sameas");
  if (v.kind != o.kind) return false;
  if (v.kind == Value::Kind::Namespace) return v.ns == o.ns;
  if (v.kind == Value::Kind::Callable) return v.fn == o.fn;
  if (v.is_undefined()) return false;
  const Json& x = v.json();
  const Json& y = o.json();  // identity is only meaningful for None / True / False
  return (x.is_null() && y.is_null()) || (x.is_boolean() && y.is_boolean() && x == y) || v.j == o.j;
}
bool t_lower(Evaluator&, const Value& v, CallArgs&) {
  std::string s = py_str(v);
  return std::any_of(s.begin(), s.end(), [](char c) { return islower(static_cast<unsigned char>(c)); }) &&
         s == ascii_case(s, false);
}
bool t_upper(Evaluator&, const Value& v, CallArgs&) {
  std::string s = py_str(v);
  return std::any_of(s.begin(), s.end(), [](char c) { return isupper(static_cast<unsigned char>(c)); }) &&
         s == ascii_case(s, true);
}

}  // namespace

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

FilterFn find_filter(const std::string& name) {
  static const std::map<std::string, FilterFn> table = {
      {"trim", f_trim},       {"length", f_length},     {"count", f_length},       {"upper", f_upper},
      {"lower", f_lower},     {"capitalize", f_capitalize}, {"title", f_title},    {"string", f_string},
      {"safe", f_safe},       {"tojson", f_tojson},     {"join", f_join},          {"first", f_first},
      {"last", f_last},       {"default", f_default},   {"d", f_default},          {"list", f_list},
      {"items", f_items},     {"replace", f_replace},   {"int", f_int},            {"float", f_float},
      {"abs", f_abs},         {"escape", f_escape},     {"e", f_escape},           {"indent", f_indent},
      {"reverse", f_reverse}, {"map", f_map},           {"select", f_select},      {"reject", f_reject},
      {"selectattr", f_selectattr}, {"rejectattr", f_rejectattr}, {"sum", f_sum},  {"round", f_round},
      {"attr", f_attr},       {"sort", f_sort},         {"unique", f_unique},      {"min", f_min},
      {"max", f_max},         {"wordcount", f_wordcount}, {"dictsort", f_dictsort},
  };
  auto it = table.find(name);
  return it == table.end() ? nullptr : it->second;
}

TestFn find_test(const std::string& name) {
  static const std::map<std::string, TestFn> table = {
      {"defined", t_defined},   {"undefined", t_undefined}, {"none", t_none},       {"string", t_string},
      {"number", t_number},     {"integer", t_integer},     {"float", t_float},     {"boolean", t_boolean},
      {"true", t_true},         {"false", t_false},         {"mapping", t_mapping}, {"iterable", t_iterable},
      {"sequence", t_iterable}, {"callable", t_callable},   {"eq", t_eq},           {"equalto", t_eq},
      {"==", t_eq},             {"ne", t_ne},               {"!=", t_ne},           {"lt", t_lt},
      {"lessthan", t_lt},       {"<", t_lt},                {"le", t_le},           {"<=", t_le},
      {"gt", t_gt},             {"greaterthan", t_gt},      {">", t_gt},            {"ge", t_ge},
      {">=", t_ge},             {"in", t_in},               {"odd", t_odd},         {"even", t_even},
      {"divisibleby", t_divisibleby}, {"sameas", t_sameas}, {"lower", t_lower},     {"upper", t_upper},
  };
  auto it = table.find(name);
  return it == table.end() ? nullptr : it->second;
}

Value call_method(const Value& obj, const std::string& name, CallArgs& a, bool& found) {
  found = true;
  const Json& j = obj.json();
  if (j.is_string()) {
    const std::string& s = j.get_ref<const std::string&>();
    if (name == "strip") return Value::of(strip(s, arg(a, 0, "chars"), true, true));
    if (name == "lstrip") return Value::of(strip(s, arg(a, 0, "chars"), true, false));
    if (name == "rstrip") return Value::of(strip(s, arg(a, 0, "chars"), false, true));
    if (name == "split") return Value::of(split(s, arg(a, 0, "sep"), int_arg(a, 1, "maxsplit", -1), false));
    if (name == "rsplit") return Value::of(split(s, arg(a, 0, "sep"), int_arg(a, 1, "maxsplit", -1), true));
    if (name == "startswith") return Value::of(affix(s, arg(a, 0, "prefix"), true));
    if (name == "endswith") return Value::of(affix(s, arg(a, 0, "suffix"), false));
    if (name == "upper") return Value::of(ascii_case(s, true));
    if (name == "lower") return Value::of(ascii_case(s, false));
    if (name == "title") return Value::of(title(s));
    if (name == "capitalize") return Value::of(capitalize(s));
    if (name == "replace")
      return Value::of(replace(s, str_arg(a, 0, "old"), str_arg(a, 1, "new"), int_arg(a, 2, "count", -1)));
    if (name == "find" || name == "rfind" || name == "index" || name == "rindex") {
      std::string sub = str_arg(a, 0, "sub");
      size_t f = name[0] == 'r' ? s.rfind(sub) : s.find(sub);
      if (f == std::string::npos) {
        if (name.find("index") != std::string::npos) fail("substring not found");
        return Value::of(-1);
      }
      return Value::of(static_cast<int64_t>(utf8_decode(s.substr(0, f)).size()));
    }
    if (name == "count") {
      std::string sub = str_arg(a, 0, "sub");
      if (sub.empty()) return Value::of(static_cast<int64_t>(utf8_decode(s).size()) + 1);
      int64_t n = 0;
      for (size_t f = s.find(sub); f != std::string::npos; f = s.find(sub, f + sub.size())) n++;
      return Value::of(n);
    }
    if (name == "join") {
      const Value* items = arg(a, 0, "iterable");
      if (!items) fail("join() takes exactly one argument");
      std::string out;
      bool first = true;
      for (const Value& item : iterate(*items)) {
        out += (first ? "" : s) + str_of(item, "join");
        first = false;
      }
      return Value::of(out);
    }
    if (name == "removeprefix" || name == "removesuffix") {
      std::string x = str_arg(a, 0, "affix");
      bool pre = name == "removeprefix";
      Value xv = Value::of(x);
      if (!x.empty() && affix(s, &xv, pre)) return Value::of(pre ? s.substr(x.size()) : s.substr(0, s.size() - x.size()));
      return Value::of(s);
    }
    if (name == "isspace" || name == "isdigit" || name == "isalpha" || name == "isalnum") {
      std::u32string u = utf8_decode(s);
      if (u.empty()) return Value::of(false);
      for (char32_t c : u) {
        bool ok = name == "isspace" ? py_isspace(c)
                  : c >= 0x80 ? false
                  : name == "isdigit" ? isdigit(static_cast<int>(c)) != 0
                  : name == "isalpha" ? isalpha(static_cast<int>(c)) != 0
                                      : isalnum(static_cast<int>(c)) != 0;
        if (!ok) return Value::of(false);
      }
      return Value::of(true);
    }
    if (name == "format") return Value::of(py_format(s, a));
    if (name == "splitlines") {
      Value sep = Value::of("\n");
      Json parts = split(s, &sep, -1, false);
      if (!parts.empty() && parts.back() == "") parts.erase(parts.size() - 1);
      return Value::of(std::move(parts));
    }
  } else if (j.is_object()) {
    if (name == "items") {
      Json r = Json::array();
      for (auto it = j.begin(); it != j.end(); ++it) r.push_back(Json::array({it.key(), it.value()}));
      return Value::of(std::move(r));
    }
    if (name == "keys") {
      Json r = Json::array();
      for (auto it = j.begin(); it != j.end(); ++it) r.push_back(it.key());
      return Value::of(std::move(r));
    }
    if (name == "values") {
      Json r = Json::array();
      for (auto it = j.begin(); it != j.end(); ++it) r.push_back(it.value());
      return Value::of(std::move(r));
    }
    if (name == "get") {
      std::string key = str_arg(a, 0, "key");
      auto it = j.find(key);
      if (it != j.end()) return obj.part(*it);
      const Value* d = arg(a, 1, "default");
      return d ? *d : Value::of(nullptr);
    }
    if (name == "update" || name == "pop" || name == "setdefault" || name == "clear" || name == "popitem")
      fail("access to attribute '" + name + "' of 'dict' object is unsafe (templates cannot modify values)");
  } else if (j.is_array()) {
    if (name == "index" || name == "count") {
      const Value* x = arg(a, 0, "value");
      if (!x) fail(name + "() takes exactly one argument");
      int64_t n = 0;
      for (size_t k = 0; k < j.size(); k++) {
        if (x->is_json() && py_equal(j[k], x->json())) {
          if (name == "index") return Value::of(static_cast<int64_t>(k));
          n++;
        }
      }
      if (name == "index") fail("value is not in list");
      return Value::of(n);
    }
    if (name == "append" || name == "extend" || name == "pop" || name == "insert" || name == "remove" ||
        name == "clear" || name == "sort" || name == "reverse")
      fail("access to attribute '" + name + "' of 'list' object is unsafe (templates cannot modify values)");
  }
  found = false;
  return Value::undefined();
}

std::map<std::string, Value> builtin_globals() {
  std::map<std::string, Value> g;
  auto def = [&](const char* name, Function fn) {
    Value v;
    v.kind = Value::Kind::Callable;
    v.fn = std::make_shared<const Function>(std::move(fn));
    g[name] = std::move(v);
  };
  def("raise_exception", [](Evaluator&, CallArgs& a) -> Value {
    throw std::runtime_error("chat template raised: " + (a.pos.empty() ? std::string() : py_str(a.pos[0])));
  });
  def("strftime_now", [](Evaluator&, CallArgs& a) -> Value {
    std::string fmt = str_arg(a, 0, "format");
    std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[512];
    size_t n = fmt.empty() ? 0 : std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
    return Value::of(std::string(buf, n));
  });
  auto kwargs_object = [](CallArgs& a, const char* what, bool check_names) {  // namespace() attributes
    auto attrs = std::make_shared<std::map<std::string, Value>>();
    for (const Value& p : a.pos) {
      if (!p.is_json() || !p.json().is_object()) fail(std::string(what) + "() positional argument must be a dict");
      for (auto it = p.json().begin(); it != p.json().end(); ++it) (*attrs)[it.key()] = Value::of(it.value());
    }
    for (auto& [k, v] : a.kw) (*attrs)[k] = v;
    if (check_names)
      for (auto& [k, v] : *attrs)
        if (!k.empty() && k[0] == '_') fail("namespace attributes cannot start with '_': " + k);
    return attrs;
  };
  def("namespace", [kwargs_object](Evaluator&, CallArgs& a) -> Value {
    Value v;
    v.kind = Value::Kind::Namespace;
    v.ns = kwargs_object(a, "namespace", true);
    return v;
  });
  def("dict", [](Evaluator&, CallArgs& a) -> Value {
    Json o = Json::object();  // keyword order kept, as Python dicts keep it
    for (const Value& p : a.pos) {
      if (!p.is_json() || !p.json().is_object()) fail("dict() positional argument must be a dict");
      for (auto it = p.json().begin(); it != p.json().end(); ++it) o[it.key()] = it.value();
    }
    for (auto& [k, v] : a.kw) o[k] = to_json(v, "in dict()");
    return Value::of(std::move(o));
  });
  def("range", [](Evaluator&, CallArgs& a) -> Value {
    if (a.pos.empty() || a.pos.size() > 3) fail("range() takes 1 to 3 arguments");
    int64_t start = 0, stop, step = 1;
    if (a.pos.size() == 1) {
      stop = int_arg(a, 0, "stop", 0);
    } else {
      start = int_arg(a, 0, "start", 0);
      stop = int_arg(a, 1, "stop", 0);
      step = int_arg(a, 2, "step", 1);
    }
    if (step == 0) fail("range() step must not be zero");
    Json r = Json::array();
    for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step) {
      if (r.size() >= 100000) fail("range too big (the sandbox limit is 100000 items)");
      r.push_back(k);
    }
    return Value::of(std::move(r));
  });
  return g;
}

}  // namespace xdna::jinja
