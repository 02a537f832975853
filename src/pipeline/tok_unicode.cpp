// UTF-8 <-> UTF-32, Unicode properties (utf8proc) and regexes (PCRE2, 32-bit, UTF + UCP).
#include "pipeline/tok_internal.h"

#define PCRE2_CODE_UNIT_WIDTH 32
#include <pcre2.h>
#include <utf8proc.h>

#include <cstdlib>
#include <stdexcept>

namespace xdna::tok {

// Decodes one code point at s[i]; returns its length, or 0 when the sequence is invalid
// (overlong, surrogate, > U+10FFFF, truncated).
static size_t decode_one(std::string_view s, size_t i, char32_t& c) {
  unsigned char b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) { c = b0; return 1; }
  size_t len = b0 >= 0xF0 ? 4 : b0 >= 0xE0 ? 3 : b0 >= 0xC2 ? 2 : 0;
  if (len == 0 || b0 > 0xF4 || i + len > s.size()) return 0;
  char32_t v = b0 & (0x7F >> len);
  for (size_t k = 1; k < len; k++) {
    unsigned char b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return 0;
    v = (v << 6) | (b & 0x3F);
  }
  if ((len == 3 && v < 0x800) || (len == 4 && (v < 0x10000 || v > 0x10FFFF)) ||
      (v >= 0xD800 && v <= 0xDFFF))
    return 0;
  c = v;
  return len;
}

std::u32string utf8_to_u32(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    char32_t c;
    size_t n = decode_one(s, i, c);
    if (n == 0)
      throw std::invalid_argument("tokenizer: input is not valid UTF-8 (bad byte sequence at byte " +
                                  std::to_string(i) + ")");
    out.push_back(c);
    i += n;
  }
  return out;
}

bool is_valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    char32_t c;
    size_t n = decode_one(s, i, c);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    char32_t c;
    size_t n = decode_one(s, i, c);
    if (n == 0) {
      append_utf8(out, 0xFFFD);
      // Skip the longest prefix of a valid sequence, as from_utf8_lossy does ("maximal subpart").
      unsigned char b0 = static_cast<unsigned char>(s[i]);
      size_t len = b0 >= 0xF0 ? 4 : b0 >= 0xE0 ? 3 : b0 >= 0xC2 ? 2 : 1;
      size_t k = 1;
      while (k < len && i + k < s.size()) {
        unsigned char b = static_cast<unsigned char>(s[i + k]);
        unsigned char lo = 0x80, hi = 0xBF;
        if (k == 1) {
          if (b0 == 0xE0) lo = 0xA0;
          if (b0 == 0xED) hi = 0x9F;
          if (b0 == 0xF0) lo = 0x90;
          if (b0 == 0xF4) hi = 0x8F;
          if (b0 > 0xF4) break;
        }
        if (b < lo || b > hi) break;
        k++;
      }
      i += k;
    } else {
      out.append(s.substr(i, n));
      i += n;
    }
  }
  return out;
}

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string u32_to_utf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_utf8(out, c);
  return out;
}

bool is_whitespace(char32_t c) {
  if (c < 0x80) return c == ' ' || (c >= 0x09 && c <= 0x0D);
  switch (c) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F:
    case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

static utf8proc_category_t category(char32_t c) {
  return utf8proc_category(static_cast<utf8proc_int32_t>(c));
}

bool is_punctuation(char32_t c) {
  if (c < 0x80)
    return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
           (c >= 0x7B && c <= 0x7E);
  auto k = category(c);
  return k >= UTF8PROC_CATEGORY_PC && k <= UTF8PROC_CATEGORY_PO;
}

bool is_numeric(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  auto k = category(c);
  return k == UTF8PROC_CATEGORY_ND || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO;
}

bool is_control_other(char32_t c) {
  // HF's table (unicode_categories) has no Cn: unassigned code points are kept.
  auto k = category(c);
  return k == UTF8PROC_CATEGORY_CC || k == UTF8PROC_CATEGORY_CF ||
         k == UTF8PROC_CATEGORY_CS || k == UTF8PROC_CATEGORY_CO;
}

bool is_mark_nonspacing(char32_t c) { return c >= 0x300 && category(c) == UTF8PROC_CATEGORY_MN; }

bool is_combining_mark(char32_t c) {
  if (c < 0x300) return false;
  auto k = category(c);
  return k == UTF8PROC_CATEGORY_MN || k == UTF8PROC_CATEGORY_MC || k == UTF8PROC_CATEGORY_ME;
}

bool is_word_char(char32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  if (c == 0x200C || c == 0x200D) return true;
  auto k = category(c);
  return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_ME) || k == UTF8PROC_CATEGORY_ND ||
         k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_PC;
}

std::u32string normalize(std::u32string_view s, NormForm form) {
  bool ascii = true;
  for (char32_t c : s) ascii = ascii && c < 0x80;
  if (ascii) return std::u32string(s);  // ASCII is invariant under every normalization form
  std::string utf8 = u32_to_utf8(s);
  int options = UTF8PROC_DECOMPOSE | UTF8PROC_STABLE;
  if (form == NormForm::NFKD || form == NormForm::NFKC) options |= UTF8PROC_COMPAT;
  std::vector<utf8proc_int32_t> buf(s.size() * 4 + 16);
  for (;;) {
    auto n = utf8proc_decompose(reinterpret_cast<const utf8proc_uint8_t*>(utf8.data()),
                                static_cast<utf8proc_ssize_t>(utf8.size()), buf.data(),
                                static_cast<utf8proc_ssize_t>(buf.size()),
                                static_cast<utf8proc_option_t>(options));
    if (n < 0) throw std::runtime_error(std::string("tokenizer: utf8proc: ") + utf8proc_errmsg(n));
    if (static_cast<size_t>(n) > buf.size()) {
      buf.resize(static_cast<size_t>(n));
      continue;
    }
    if (form == NormForm::NFC || form == NormForm::NFKC) {
      n = utf8proc_normalize_utf32(buf.data(), n, static_cast<utf8proc_option_t>(options | UTF8PROC_COMPOSE));
      if (n < 0) throw std::runtime_error(std::string("tokenizer: utf8proc: ") + utf8proc_errmsg(n));
    }
    return std::u32string(buf.begin(), buf.begin() + n);
  }
}

std::u32string lowercase(std::u32string_view s) {
  std::u32string out;
  out.reserve(s.size());
  for (char32_t c : s) {
    if (c < 0x80) {
      out.push_back(c >= 'A' && c <= 'Z' ? c + 32 : c);
    } else if (c == 0x130) {  // the one unconditional multi-char lowercase mapping (SpecialCasing)
      out.push_back(U'i');
      out.push_back(0x307);
    } else {
      out.push_back(static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))));
    }
  }
  return out;
}

// ---- Regex ----------------------------------------------------------------------------------
// Oniguruma (used by HF) reads \s as White_Space and \w as Unicode word characters; PCRE2's UCP
// classes differ slightly (\w lacks marks), so spell them out as properties.
static std::string rewrite_oniguruma(const std::string& p) {
  static const char* kWord = "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}";
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); i++) {
    char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      char e = p[++i];
      switch (e) {
        case 's': out += "\\p{White_Space}"; break;
        case 'S': out += "\\P{White_Space}"; break;
        case 'd': out += "\\p{Nd}"; break;
        case 'D': out += "\\P{Nd}"; break;
        case 'w': out += in_class ? std::string(kWord) : "[" + std::string(kWord) + "]"; break;
        case 'W':
          if (in_class) out += "\\W";
          else out += "[^" + std::string(kWord) + "]";
          break;
        default: out += '\\'; out += e;
      }
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];  // leading ] is literal
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

Regex::Regex(const std::string& pattern_utf8, bool literal) {
  std::u32string pat = utf8_to_u32(literal ? pattern_utf8 : rewrite_oniguruma(pattern_utf8));
  int err = 0;
  PCRE2_SIZE off = 0;
  uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pat.data()), pat.size(), options, &err, &off, nullptr);
  if (!code_) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, 256);
    std::string m;
    for (PCRE2_UCHAR* q = msg; *q; q++) append_utf8(m, static_cast<char32_t>(*q));
    throw std::runtime_error("tokenizer: bad regex '" + pattern_utf8 + "': " + m + " at offset " +
                             std::to_string(off));
  }
  pcre2_jit_compile(static_cast<pcre2_code*>(code_), PCRE2_JIT_COMPLETE);  // falls back if no JIT
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::u32string_view s) const {
  std::vector<std::pair<size_t, size_t>> out;
  auto* code = static_cast<pcre2_code*>(code_);
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  PCRE2_SIZE start = 0;
  // An empty subject needs a non-null pointer.
  static const char32_t kEmpty[1] = {0};
  auto subject = reinterpret_cast<PCRE2_SPTR>(s.empty() ? kEmpty : s.data());
  while (start <= s.size()) {
    int rc = pcre2_match(code, subject, s.size(), start, 0, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      pcre2_match_data_free(md);
      throw std::runtime_error("tokenizer: regex match failed (PCRE2 error " + std::to_string(rc) + ")");
    }
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    if (ov[1] == ov[0]) {  // empty match: skip one position
      start = ov[1] + 1;
      continue;
    }
    out.emplace_back(ov[0], ov[1]);
    start = ov[1];
  }
  pcre2_match_data_free(md);
  return out;
}

}  // namespace xdna::tok
