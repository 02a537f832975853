// Jinja2 lexer with the settings transformers uses: trim_blocks and lstrip_blocks on,
// keep_trailing_newline off. Follows jinja2/lexer.py: the text before a tag is stripped by
// "{%-" (all trailing whitespace) or, for {% and {# tags, by lstrip_blocks (the spaces and tabs
// between the start of the line and the tag); "-%}" strips all whitespace after the tag, and "%}"
// / "#}" eat one newline (trim_blocks). A "+" on either side turns the stripping off.
#include <algorithm>
#include <stdexcept>

#include "pipeline/jinja.h"

namespace xdna::jinja {
namespace {

struct Lexer {
  std::string src;
  std::vector<size_t> line_starts;
  std::vector<Token> out;
  size_t pos = 0;

  void where(size_t at, int& line, int& col) const {
    auto it = std::upper_bound(line_starts.begin(), line_starts.end(), at);
    line = static_cast<int>(it - line_starts.begin());
    col = static_cast<int>(at - line_starts[line - 1]) + 1;
  }
  [[noreturn]] void error(size_t at, const std::string& msg) const {
    int line, col;
    where(at, line, col);
    throw std::invalid_argument("chat template line " + std::to_string(line) + ":" +
                                std::to_string(col) + ": " + msg);
  }
  void emit(Tok kind, std::string text, size_t at) {
    Token t{kind, std::move(text)};
    where(at, t.line, t.col);
    out.push_back(std::move(t));
  }
  bool at(size_t p, const char* s) const { return src.compare(p, std::char_traits<char>::length(s), s) == 0; }

  // Python's str.rstrip() on UTF-8 text.
  static std::string rstrip_ws(const std::string& text) {
    std::u32string u = utf8_decode(text);
    size_t n = u.size();
    while (n > 0 && py_isspace(u[n - 1])) n--;
    return utf8_encode(u.substr(0, n));
  }
  size_t skip_ws(size_t p) const {
    while (p < src.size()) {
      unsigned char c = src[p];
      if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v') p++;
      else break;
    }
    return p;
  }

  // Text before a tag, with "-" / lstrip_blocks applied.
  void emit_text(size_t begin, size_t end, char sign, bool is_variable, bool line_starting) {
    std::string text = src.substr(begin, end - begin);
    if (sign == '-') {
      text = rstrip_ws(text);
    } else if (sign != '+' && !is_variable) {
      size_t l_pos = text.rfind('\n');
      l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
      if ((l_pos > 0 || line_starting) && l_pos < text.size() &&
          text.find_first_not_of(" \t\r\f\v", l_pos) == std::string::npos)
        text.resize(l_pos);
    }
    if (!text.empty()) emit(Tok::Text, std::move(text), begin);
  }

  // After "%}"/"#}" with the given sign before it; returns the new position.
  size_t after_block_end(size_t p, char sign) const {
    if (sign == '-') return skip_ws(p);
    if (sign != '+' && p < src.size() && src[p] == '\n') return p + 1;
    return p;
  }

  // "{%" sign ws "raw" ws "%}" at p? Returns the position after it, or npos.
  size_t match_raw_begin(size_t p) const {
    size_t q = p + 2;
    if (q < src.size() && (src[q] == '-' || src[q] == '+')) q++;
    q = skip_ws(q);
    if (!at(q, "raw")) return std::string::npos;
    q = skip_ws(q + 3);
    if (at(q, "-%}")) return skip_ws(q + 3);
    if (at(q, "%}")) return q + 2;
    return std::string::npos;
  }

  void lex_raw(size_t body_begin) {
    // Find "{%" sign ws "endraw" ws end.
    for (size_t p = src.find("{%", body_begin); p != std::string::npos; p = src.find("{%", p + 1)) {
      size_t q = p + 2;
      char sign = 0;
      if (q < src.size() && (src[q] == '-' || src[q] == '+')) sign = src[q++];
      q = skip_ws(q);
      if (!at(q, "endraw")) continue;
      q = skip_ws(q + 6);
      char end_sign = 0;
      if (q < src.size() && (src[q] == '-' || src[q] == '+')) end_sign = src[q++];
      if (!at(q, "%}")) continue;
      emit_text(body_begin, p, sign, false, false);
      pos = after_block_end(q + 2, end_sign);
      return;
    }
    error(body_begin, "missing end of raw directive");
  }

  void lex_string(size_t p, size_t& next) {
    char quote = src[p];
    std::string value;
    size_t q = p + 1;
    while (true) {
      if (q >= src.size()) error(p, "unterminated string");
      char c = src[q];
      if (c == quote) break;
      if (c != '\\') { value += c; q++; continue; }
      if (q + 1 >= src.size()) error(p, "unterminated string");
      char e = src[q + 1];
      q += 2;
      auto hex = [&](int n) {
        if (q + n > src.size()) error(q, "truncated escape");
        uint32_t v = 0;
        for (int i = 0; i < n; i++) {
          char h = src[q + i];
          int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10
                  : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
          if (d < 0) error(q, "bad hex escape");
          v = v * 16 + d;
        }
        q += n;
        if (v > 0x10FFFF) error(q, "escape out of Unicode range");
        value += utf8_encode(std::u32string(1, static_cast<char32_t>(v)));
      };
      switch (e) {
        case 'n': value += '\n'; break;
        case 't': value += '\t'; break;
        case 'r': value += '\r'; break;
        case 'a': value += '\a'; break;
        case 'b': value += '\b'; break;
        case 'f': value += '\f'; break;
        case 'v': value += '\v'; break;
        case '\\': value += '\\'; break;
        case '\'': value += '\''; break;
        case '"': value += '"'; break;
        case '\n': break;  // line continuation
        case 'x': hex(2); break;
        case 'u': hex(4); break;
        case 'U': hex(8); break;
        default:
          if (e >= '0' && e <= '7') {
            uint32_t v = e - '0';
            for (int i = 0; i < 2 && q < src.size() && src[q] >= '0' && src[q] <= '7'; i++)
              v = v * 8 + (src[q++] - '0');
            value += utf8_encode(std::u32string(1, static_cast<char32_t>(v)));
          } else {
            value += '\\';  // unknown escapes stay as written, as in Python
            value += e;
          }
      }
    }
    emit(Tok::String, std::move(value), p);
    next = q + 1;
  }

  void lex_number(size_t p, size_t& next) {
    size_t q = p;
    auto digits = [&] {
      size_t s = q;
      while (q < src.size() && (isdigit(static_cast<unsigned char>(src[q])) ||
                                (src[q] == '_' && q > s && q + 1 < src.size() &&
                                 isdigit(static_cast<unsigned char>(src[q + 1])))))
        q++;
    };
    digits();
    bool is_float = false;
    if (q + 1 < src.size() && src[q] == '.' && isdigit(static_cast<unsigned char>(src[q + 1]))) {
      is_float = true;
      q++;
      digits();
    }
    if (q < src.size() && (src[q] == 'e' || src[q] == 'E')) {
      size_t r = q + 1;
      if (r < src.size() && (src[r] == '+' || src[r] == '-')) r++;
      if (r < src.size() && isdigit(static_cast<unsigned char>(src[r]))) {
        is_float = true;
        q = r;
        digits();
      }
    }
    std::string text;
    for (size_t i = p; i < q; i++)
      if (src[i] != '_') text += src[i];
    emit(is_float ? Tok::Float : Tok::Int, text, p);
    next = q;
  }

  // Tokens inside {{ }} or {% %} up to the end delimiter; returns whether the end had a newline.
  bool lex_tag(size_t p, bool variable, size_t tag_start) {
    std::vector<char> balance;
    while (true) {
      p = skip_ws(p);
      if (p >= src.size()) error(tag_start, variable ? "unclosed '{{'" : "unclosed '{%'");
      if (balance.empty()) {
        if (variable) {
          if (at(p, "-}}")) {
            emit(Tok::VarEnd, "}}", p);
            size_t q = skip_ws(p + 3);
            pos = q;
            return q > p + 3 && src[q - 1] == '\n';
          }
          if (at(p, "}}")) {
            emit(Tok::VarEnd, "}}", p);
            pos = p + 2;
            return false;
          }
        } else {
          char sign = 0;
          size_t q = p;
          if (at(p, "-%}") || at(p, "+%}")) sign = src[q++];
          if (at(q, "%}")) {
            emit(Tok::BlockEnd, "%}", p);
            pos = after_block_end(q + 2, sign);
            return pos > q + 2 && src[pos - 1] == '\n';
          }
        }
      }
      unsigned char c = src[p];
      size_t next = p + 1;
      if (isdigit(c)) {
        lex_number(p, next);
      } else if (isalpha(c) || c == '_') {
        size_t q = p;
        while (q < src.size() && (isalnum(static_cast<unsigned char>(src[q])) || src[q] == '_')) q++;
        emit(Tok::Name, src.substr(p, q - p), p);
        next = q;
      } else if (c == '\'' || c == '"') {
        lex_string(p, next);
      } else {
        static const char* two[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op;
        for (const char* t : two)
          if (at(p, t)) op = t;
        if (op.empty()) {
          if (std::string("+-*/%~<>=.,:|()[]{};").find(static_cast<char>(c)) == std::string::npos)
            error(p, std::string("unexpected character '") + static_cast<char>(c) + "'");
          op = std::string(1, static_cast<char>(c));
        }
        if (op == "(" || op == "[" || op == "{") {
          balance.push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
        } else if (op == ")" || op == "]" || op == "}") {
          if (balance.empty()) error(p, "unexpected '" + op + "'");
          if (balance.back() != op[0])
            error(p, "unexpected '" + op + "', expected '" + std::string(1, balance.back()) + "'");
          balance.pop_back();
        }
        emit(Tok::Op, op, p);
        next = p + op.size();
      }
      p = next;
    }
  }

  void run() {
    bool line_starting = true;
    while (pos < src.size()) {
      size_t start = std::string::npos;
      for (const char* opener : {"{{", "{%", "{#"}) start = std::min(start, src.find(opener, pos));
      if (start == std::string::npos) {
        emit(Tok::Text, src.substr(pos), pos);
        break;
      }
      char kind = src[start + 1];
      char sign = start + 2 < src.size() && (src[start + 2] == '-' || src[start + 2] == '+')
                      ? src[start + 2] : 0;
      emit_text(pos, start, sign, kind == '{', line_starting);
      size_t body = start + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        size_t close = src.find("#}", body);
        if (close == std::string::npos) error(start, "missing end of comment tag");
        char end_sign = close > body && (src[close - 1] == '-' || src[close - 1] == '+')
                            ? src[close - 1] : 0;
        pos = after_block_end(close + 2, end_sign);
        line_starting = pos > close + 2 && src[pos - 1] == '\n';
      } else if (kind == '%' && match_raw_begin(start) != std::string::npos) {
        lex_raw(match_raw_begin(start));
        line_starting = pos > 0 && src[pos - 1] == '\n';
      } else {
        emit(kind == '{' ? Tok::VarBegin : Tok::BlockBegin, kind == '{' ? "{{" : "{%", start);
        line_starting = lex_tag(body, kind == '{', start);
      }
    }
    emit(Tok::End, "", src.size());
  }
};

}  // namespace

std::vector<Token> tokenize(const std::string& source) {
  Lexer lx;
  // Newlines normalised to "\n" and one trailing newline dropped, as Jinja does.
  lx.src.reserve(source.size());
  for (size_t i = 0; i < source.size(); i++) {
    if (source[i] == '\r') {
      lx.src += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') i++;
    } else {
      lx.src += source[i];
    }
  }
  if (!lx.src.empty() && lx.src.back() == '\n') lx.src.pop_back();
  lx.line_starts.push_back(0);
  for (size_t i = 0; i < lx.src.size(); i++)
    if (lx.src[i] == '\n') lx.line_starts.push_back(i + 1);
  lx.run();
  return std::move(lx.out);
}

}  // namespace xdna::jinja
