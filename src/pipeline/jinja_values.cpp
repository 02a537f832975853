// Python semantics of values for the Jinja engine: str(), repr(), json.dumps (as transformers'
// tojson calls it), truthiness, equality, and UTF-8 <-> code points (Python strings index by
// code point). Invalid UTF-8 bytes decode to lone surrogates U+DC80..U+DCFF and encode back to
// the same byte (Python's "surrogateescape"), so no input byte is ever lost.
#include <charconv>
#include <cmath>
#include <cstdio>

#include "pipeline/jinja.h"

namespace xdna::jinja {

std::u32string utf8_decode(const std::string& s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = s[i];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    char32_t cp = len == 1 ? c : len == 2 ? c & 0x1F : len == 3 ? c & 0x0F : c & 0x07;
    bool ok = len > 0 && i + len <= s.size();
    for (int k = 1; ok && k < len; k++) {
      unsigned char d = s[i + k];
      if ((d & 0xC0) != 0x80) ok = false;
      cp = (cp << 6) | (d & 0x3F);
    }
    // Overlong forms, surrogates and out-of-range values are invalid too.
    if (ok && ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000) ||
               cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)))
      ok = false;
    if (!ok) {
      out += static_cast<char32_t>(0xDC00 + c);
      i++;
    } else {
      out += cp;
      i += len;
    }
  }
  return out;
}

std::string utf8_encode(const std::u32string& s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t cp : s) {
    if (cp >= 0xDC80 && cp <= 0xDCFF) {
      out += static_cast<char>(cp - 0xDC00);
    } else if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  return out;
}

bool py_isspace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

std::string py_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  size_t e = sci.find('e');
  int exp = std::stoi(sci.substr(e + 1));
  std::string digits;
  for (size_t k = 0; k < e; k++)
    if (sci[k] != '.') digits += sci[k];
  // repr() switches to exponent form when exp < -4 or exp >= 16 (CPython's float_repr_style).
  if (exp < -4 || exp >= 16) {
    std::string m = digits.substr(0, 1);
    if (digits.size() > 1) m += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    return sign + m + eb;
  }
  std::string r;
  if (exp < 0) {
    r = "0." + std::string(-exp - 1, '0') + digits;
  } else if (static_cast<size_t>(exp) + 1 >= digits.size()) {
    r = digits + std::string(exp + 1 - digits.size(), '0') + ".0";
  } else {
    r = digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
  }
  return sign + r;
}

static std::string py_quote(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos, has_double = s.find('"') != std::string::npos;
  char q = has_single && !has_double ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == q) { out += '\\'; out += static_cast<char>(c); }
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7F) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else out += static_cast<char>(c);
  }
  return out + q;
}

std::string py_repr(const Json& j) {
  if (j.is_string()) return py_quote(j.get_ref<const std::string&>());
  if (j.is_discarded()) return "Undefined";
  return py_str(j);
}

std::string py_str(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null: return "None";
    case Json::value_t::boolean: return j.get<bool>() ? "True" : "False";
    case Json::value_t::string: return j.get_ref<const std::string&>();
    case Json::value_t::number_integer: return std::to_string(j.get<int64_t>());
    case Json::value_t::number_unsigned: return std::to_string(j.get<uint64_t>());
    case Json::value_t::number_float: return py_float_repr(j.get<double>());
    case Json::value_t::array: {
      std::string s = "[";
      for (size_t k = 0; k < j.size(); k++) s += (k ? ", " : "") + py_repr(j[k]);
      return s + "]";
    }
    case Json::value_t::object: {
      std::string s = "{";
      bool first = true;
      for (auto it = j.begin(); it != j.end(); ++it) {
        s += (first ? "" : ", ") + py_quote(it.key()) + ": " + py_repr(it.value());
        first = false;
      }
      return s + "}";
    }
    default: return "";
  }
}

std::string py_str(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined: return "";
    case Value::Kind::Json: return py_str(v.json());
    case Value::Kind::Namespace: {
      std::string s = "<Namespace {";
      bool first = true;
      for (auto& [k, val] : *v.ns) {
        s += (first ? "" : ", ") + py_quote(k) + ": " + (val.is_json() ? py_repr(val.json()) : py_str(val));
        first = false;
      }
      return s + "}>";
    }
    case Value::Kind::Callable: return "<function>";
  }
  return "";
}

std::string type_name(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined: return "Undefined";
    case Value::Kind::Namespace: return "Namespace";
    case Value::Kind::Callable: return "function";
    case Value::Kind::Json: break;
  }
  switch (v.json().type()) {
    case Json::value_t::null: return "NoneType";
    case Json::value_t::boolean: return "bool";
    case Json::value_t::string: return "str";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return "int";
    case Json::value_t::number_float: return "float";
    case Json::value_t::array: return "list";
    case Json::value_t::object: return "dict";
    default: return "object";
  }
}

static void json_string(const std::string& s, bool ensure_ascii, std::string& out) {
  out += '"';
  auto esc = [&](char32_t cp) {
    char b[16];
    std::snprintf(b, sizeof b, "\\u%04x", static_cast<unsigned>(cp));
    out += b;
  };
  for (char32_t cp : utf8_decode(s)) {
    switch (cp) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (cp < 0x20) esc(cp);
        else if (ensure_ascii && cp > 0x7E) {
          if (cp >= 0x10000) {
            esc(0xD800 + ((cp - 0x10000) >> 10));
            esc(0xDC00 + ((cp - 0x10000) & 0x3FF));
          } else {
            esc(cp);
          }
        } else out += utf8_encode(std::u32string(1, cp));
    }
  }
  out += '"';
}

static void dumps(const Json& j, const JsonStyle& st, int level, std::string& out) {
  auto newline = [&](int lvl) {
    out += '\n';
    for (int k = 0; k < lvl; k++) out += st.indent;
  };
  switch (j.type()) {
    case Json::value_t::null: out += "null"; return;
    case Json::value_t::boolean: out += j.get<bool>() ? "true" : "false"; return;
    case Json::value_t::string: json_string(j.get_ref<const std::string&>(), st.ensure_ascii, out); return;
    case Json::value_t::number_float: {
      double d = j.get<double>();
      out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : py_float_repr(d);
      return;
    }
    case Json::value_t::array:
      if (j.empty()) { out += "[]"; return; }
      out += '[';
      for (size_t k = 0; k < j.size(); k++) {
        if (k) out += st.item_sep;
        if (st.pretty) newline(level + 1);
        dumps(j[k], st, level + 1, out);
      }
      if (st.pretty) newline(level);
      out += ']';
      return;
    case Json::value_t::object: {
      if (j.empty()) { out += "{}"; return; }
      std::vector<Json::const_iterator> items;
      for (auto it = j.begin(); it != j.end(); ++it) items.push_back(it);
      if (st.sort_keys)
        std::stable_sort(items.begin(), items.end(), [](auto& a, auto& b) { return a.key() < b.key(); });
      out += '{';
      for (size_t k = 0; k < items.size(); k++) {
        if (k) out += st.item_sep;
        if (st.pretty) newline(level + 1);
        json_string(items[k].key(), st.ensure_ascii, out);
        out += st.key_sep;
        dumps(items[k].value(), st, level + 1, out);
      }
      if (st.pretty) newline(level);
      out += '}';
      return;
    }
    case Json::value_t::discarded: fail("Object of type Undefined is not JSON serializable");
    default: out += py_str(j); return;  // integers
  }
}

std::string py_json_dumps(const Json& j, const JsonStyle& style) {
  std::string out;
  dumps(j, style, 0, out);
  return out;
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Value::Kind::Undefined: return false;
    case Value::Kind::Namespace:
    case Value::Kind::Callable: return true;
    case Value::Kind::Json: break;
  }
  const Json& j = v.json();
  switch (j.type()) {
    case Json::value_t::null: return false;
    case Json::value_t::boolean: return j.get<bool>();
    case Json::value_t::number_integer: return j.get<int64_t>() != 0;
    case Json::value_t::number_unsigned: return j.get<uint64_t>() != 0;
    case Json::value_t::number_float: return j.get<double>() != 0.0;
    case Json::value_t::string: return !j.get_ref<const std::string&>().empty();
    default: return !j.empty();
  }
}

bool py_equal(const Json& a, const Json& b) {
  bool an = a.is_number() || a.is_boolean(), bn = b.is_number() || b.is_boolean();
  if (an && bn) {
    auto as_d = [](const Json& x) { return x.is_boolean() ? (x.get<bool>() ? 1.0 : 0.0) : x.get<double>(); };
    auto is_i = [](const Json& x) { return x.is_boolean() || x.is_number_integer(); };
    auto as_i = [](const Json& x) { return x.is_boolean() ? (x.get<bool>() ? 1 : 0) : x.get<int64_t>(); };
    if (is_i(a) && is_i(b)) return as_i(a) == as_i(b);
    return as_d(a) == as_d(b);
  }
  if (a.type() != b.type()) return false;
  if (a.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t k = 0; k < a.size(); k++)
      if (!py_equal(a[k], b[k])) return false;
    return true;
  }
  if (a.is_object()) {
    if (a.size() != b.size()) return false;
    for (auto it = a.begin(); it != a.end(); ++it) {
      auto f = b.find(it.key());
      if (f == b.end() || !py_equal(it.value(), *f)) return false;
    }
    return true;
  }
  return a == b;
}

}  // namespace xdna::jinja
