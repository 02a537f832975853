// Jinja2 parser: tokens -> Node tree. Operator precedence as in jinja2/parser.py:
// cond-expr < or < and < not < compare < + - < ~ < * / // % < ** < unary - + < postfix/filter/test.
#include <stdexcept>

#include "pipeline/jinja.h"

namespace xdna::jinja {
namespace {

constexpr int kMaxNesting = 200;  // expression and block nesting: deep input errors, not overflows

struct Parser {
  const std::vector<Token>& toks;
  size_t i = 0;
  int nesting = 0;

  const Token& peek(size_t ahead = 0) const { return toks[std::min(i + ahead, toks.size() - 1)]; }
  [[noreturn]] void error(const Token& t, const std::string& msg) const {
    throw std::invalid_argument("chat template line " + std::to_string(t.line) + ":" +
                                std::to_string(t.col) + ": " + msg);
  }
  bool is_op(const char* op, size_t ahead = 0) const {
    return peek(ahead).kind == Tok::Op && peek(ahead).text == op;
  }
  bool is_name(const char* name, size_t ahead = 0) const {
    return peek(ahead).kind == Tok::Name && peek(ahead).text == name;
  }
  bool accept_op(const char* op) {
    if (!is_op(op)) return false;
    i++;
    return true;
  }
  bool accept_name(const char* name) {
    if (!is_name(name)) return false;
    i++;
    return true;
  }
  void expect_op(const char* op) {
    if (!accept_op(op)) error(peek(), std::string("expected '") + op + "', got '" + describe(peek()) + "'");
  }
  static std::string describe(const Token& t) {
    switch (t.kind) {
      case Tok::End: return "end of template";
      case Tok::BlockEnd: return "%}";
      case Tok::VarEnd: return "}}";
      case Tok::Text: return "template text";
      default: return t.text;
    }
  }
  std::string expect_name() {
    if (peek().kind != Tok::Name) error(peek(), "expected a name, got '" + describe(peek()) + "'");
    return toks[i++].text;
  }
  void expect_block_end() {
    if (peek().kind != Tok::BlockEnd) error(peek(), "expected '%}', got '" + describe(peek()) + "'");
    i++;
  }
  NodePtr node(NodeKind k, const Token& at) {
    auto n = std::make_unique<Node>();
    n->kind = k;
    n->line = at.line;
    n->col = at.col;
    return n;
  }
  struct Nest {
    Parser& p;
    Nest(Parser& parser, const Token& at) : p(parser) {
      if (++p.nesting > kMaxNesting) p.error(at, "template nested too deeply");
    }
    ~Nest() { p.nesting--; }
  };

  // ---- expressions ----
  NodePtr expression(bool with_cond = true) {
    Nest guard(*this, peek());
    NodePtr e = or_expr();
    while (with_cond && is_name("if")) {
      const Token& t = toks[i++];
      auto c = node(NodeKind::Cond, t);
      NodePtr cond = or_expr();
      NodePtr other;
      if (accept_name("else")) other = expression();
      c->kids.push_back(std::move(e));
      c->kids.push_back(std::move(cond));
      c->kids.push_back(std::move(other));
      e = std::move(c);
    }
    return e;
  }
  NodePtr binary(const Token& t, const char* op, NodePtr a, NodePtr b) {
    auto n = node(NodeKind::Binary, t);
    n->name = op;
    n->kids.push_back(std::move(a));
    n->kids.push_back(std::move(b));
    return n;
  }
  NodePtr or_expr() {
    NodePtr e = and_expr();
    while (is_name("or")) {
      const Token& t = toks[i++];
      e = binary(t, "or", std::move(e), and_expr());
    }
    return e;
  }
  NodePtr and_expr() {
    NodePtr e = not_expr();
    while (is_name("and")) {
      const Token& t = toks[i++];
      e = binary(t, "and", std::move(e), not_expr());
    }
    return e;
  }
  NodePtr not_expr() {
    if (is_name("not")) {
      Nest guard(*this, peek());
      auto n = node(NodeKind::Unary, toks[i++]);
      n->name = "not";
      n->kids.push_back(not_expr());
      return n;
    }
    return compare();
  }
  NodePtr compare() {
    const Token& start = peek();
    NodePtr first = math1();
    NodePtr cmp;
    while (true) {
      std::string op;
      if (peek().kind == Tok::Op && (peek().text == "==" || peek().text == "!=" || peek().text == "<" ||
                                     peek().text == "<=" || peek().text == ">" || peek().text == ">=")) {
        op = toks[i++].text;
      } else if (is_name("in")) {
        i++;
        op = "in";
      } else if (is_name("not") && is_name("in", 1)) {
        i += 2;
        op = "notin";
      } else {
        break;
      }
      if (!cmp) {
        cmp = node(NodeKind::Compare, start);
        cmp->kids.push_back(std::move(first));
      }
      cmp->names.push_back(op);
      cmp->kids.push_back(math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }
  NodePtr math1() {
    NodePtr e = concat();
    while (is_op("+") || is_op("-")) {
      const Token& t = toks[i++];
      e = binary(t, t.text == "+" ? "+" : "-", std::move(e), concat());
    }
    return e;
  }
  NodePtr concat() {
    NodePtr e = math2();
    while (is_op("~")) {
      const Token& t = toks[i++];
      e = binary(t, "~", std::move(e), math2());
    }
    return e;
  }
  NodePtr math2() {
    NodePtr e = power();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& t = toks[i++];
      std::string op = t.text;
      e = binary(t, op.c_str(), std::move(e), power());
    }
    return e;
  }
  NodePtr power() {
    NodePtr e = unary(true);
    while (is_op("**")) {
      const Token& t = toks[i++];
      e = binary(t, "**", std::move(e), unary(true));
    }
    return e;
  }
  NodePtr unary(bool with_filter) {
    Nest guard(*this, peek());
    NodePtr e;
    if (is_op("-") || is_op("+")) {
      const Token& t = toks[i++];
      e = node(NodeKind::Unary, t);
      e->name = t.text;
      e->kids.push_back(unary(false));
    } else {
      e = postfix(primary());
    }
    return with_filter ? filter_expr(std::move(e)) : std::move(e);
  }
  NodePtr primary() {
    const Token& t = peek();
    switch (t.kind) {
      case Tok::Name: {
        i++;
        auto n = node(NodeKind::Literal, t);
        if (t.text == "true" || t.text == "True") n->value = true;
        else if (t.text == "false" || t.text == "False") n->value = false;
        else if (t.text == "none" || t.text == "None") n->value = nullptr;
        else { n->kind = NodeKind::Name; n->name = t.text; }
        return n;
      }
      case Tok::String: {
        std::string s;
        while (peek().kind == Tok::String) s += toks[i++].text;  // adjacent literals concatenate
        auto n = node(NodeKind::Literal, t);
        n->value = s;
        return n;
      }
      case Tok::Int: {
        i++;
        auto n = node(NodeKind::Literal, t);
        try {
          n->value = std::stoll(t.text);
        } catch (const std::exception&) {
          error(t, "integer literal out of range: " + t.text);
        }
        return n;
      }
      case Tok::Float: {
        i++;
        auto n = node(NodeKind::Literal, t);
        n->value = std::strtod(t.text.c_str(), nullptr);
        return n;
      }
      case Tok::Op:
        if (t.text == "(") {
          i++;
          if (accept_op(")")) {  // empty tuple
            auto n = node(NodeKind::ListLit, t);
            return n;
          }
          NodePtr e = expression();
          if (is_op(",")) {
            auto tup = node(NodeKind::ListLit, t);
            tup->kids.push_back(std::move(e));
            while (accept_op(",")) {
              if (is_op(")")) break;
              tup->kids.push_back(expression());
            }
            e = std::move(tup);
          }
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          i++;
          auto n = node(NodeKind::ListLit, t);
          while (!is_op("]")) {
            n->kids.push_back(expression());
            if (!accept_op(",")) break;
          }
          expect_op("]");
          return n;
        }
        if (t.text == "{") {
          i++;
          auto n = node(NodeKind::DictLit, t);
          while (!is_op("}")) {
            n->kids.push_back(expression());
            expect_op(":");
            n->kids.push_back(expression());
            if (!accept_op(",")) break;
          }
          expect_op("}");
          return n;
        }
        break;
      default:
        break;
    }
    error(t, "unexpected '" + describe(t) + "'");
  }
  NodePtr postfix(NodePtr e) {
    while (true) {
      const Token& t = peek();
      if (is_op(".")) {
        i++;
        auto n = node(NodeKind::Attr, t);
        if (peek().kind == Tok::Int) {  // x.0 is x[0] in Jinja
          auto idx = node(NodeKind::Literal, peek());
          idx->value = std::stoll(toks[i++].text);
          n->kind = NodeKind::Item;
          n->kids.push_back(std::move(e));
          n->kids.push_back(std::move(idx));
        } else {
          n->name = expect_name();
          n->kids.push_back(std::move(e));
        }
        e = std::move(n);
      } else if (is_op("[")) {
        i++;
        e = subscript(t, std::move(e));
      } else if (is_op("(")) {
        auto n = node(NodeKind::Call, t);
        n->kids.push_back(std::move(e));
        call_args(*n);
        e = std::move(n);
      } else {
        return e;
      }
    }
  }
  NodePtr subscript(const Token& t, NodePtr obj) {
    NodePtr parts[3];
    int part = 0;
    bool is_slice = false;
    while (!is_op("]")) {
      if (accept_op(":")) {
        is_slice = true;
        if (++part > 2) error(peek(), "too many ':' in slice");
        continue;
      }
      if (parts[part]) error(peek(), "expected ':' or ']'");
      parts[part] = expression();
    }
    expect_op("]");
    auto n = node(is_slice ? NodeKind::Slice : NodeKind::Item, t);
    n->kids.push_back(std::move(obj));
    if (!is_slice) {
      if (!parts[0]) error(t, "empty subscript");
      n->kids.push_back(std::move(parts[0]));
    } else {
      for (auto& p : parts) n->kids.push_back(std::move(p));
    }
    return n;
  }
  // "(" args ")" into n.kids (after the first kid) and n.names.
  void call_args(Node& n) {
    expect_op("(");
    bool seen_kw = false;
    while (!is_op(")")) {
      if (peek().kind == Tok::Name && is_op("=", 1)) {
        n.names.push_back(toks[i].text);
        i += 2;
        seen_kw = true;
      } else {
        if (seen_kw) error(peek(), "positional argument after keyword argument");
        n.names.push_back("");
      }
      n.kids.push_back(expression());
      if (!accept_op(",")) break;
    }
    expect_op(")");
  }
  NodePtr filter_expr(NodePtr e) {
    while (true) {
      if (is_op("|")) {
        i++;
        e = filter(std::move(e));
      } else if (is_name("is")) {
        const Token& t = toks[i++];
        auto n = node(NodeKind::Test, t);
        n->negated = accept_name("not");
        n->name = expect_name();
        if (n->name == "none" || n->name == "true" || n->name == "false") {
        }
        n->kids.push_back(std::move(e));
        if (is_op("(")) {
          call_args(*n);
        } else if ((peek().kind == Tok::Name || peek().kind == Tok::String || peek().kind == Tok::Int ||
                    peek().kind == Tok::Float || is_op("[") || is_op("{") || is_op("(") || is_op("-")) &&
                   !(peek().kind == Tok::Name &&
                     (peek().text == "else" || peek().text == "or" || peek().text == "and" ||
                      peek().text == "if" || peek().text == "is" || peek().text == "in" ||
                      peek().text == "not"))) {
          n->names.push_back("");
          n->kids.push_back(postfix(primary()));  // "is divisibleby 3", "is sameas false"
        }
        e = std::move(n);
      } else if (is_op("(")) {
        auto n = node(NodeKind::Call, peek());
        n->kids.push_back(std::move(e));
        call_args(*n);
        e = std::move(n);
      } else {
        return e;
      }
    }
  }
  NodePtr filter(NodePtr e) {
    const Token& t = peek();
    auto n = node(NodeKind::Filter, t);
    n->name = expect_name();
    while (accept_op(".")) n->name += "." + expect_name();
    n->kids.push_back(std::move(e));
    if (is_op("(")) call_args(*n);
    return n;
  }

  // ---- statements ----
  // Parses until a block tag named in `ends`; leaves i at that tag's name and returns it.
  std::string body(Body& out, std::initializer_list<const char*> ends) {
    Nest guard(*this, peek());
    while (true) {
      const Token& t = peek();
      if (t.kind == Tok::End) {
        if (ends.size() == 0) return "";
        std::string names;
        for (const char* e : ends) names += std::string(names.empty() ? "" : " or ") + "'" + e + "'";
        error(t, "unexpected end of template, expected " + names);
      }
      if (t.kind == Tok::Text) {
        auto n = node(NodeKind::Text, t);
        n->name = t.text;
        out.push_back(std::move(n));
        i++;
      } else if (t.kind == Tok::VarBegin) {
        i++;
        auto n = node(NodeKind::Output, t);
        n->kids.push_back(expression());
        if (peek().kind != Tok::VarEnd) error(peek(), "expected '}}', got '" + describe(peek()) + "'");
        i++;
        out.push_back(std::move(n));
      } else if (t.kind == Tok::BlockBegin) {
        const Token& name = peek(1);
        if (name.kind != Tok::Name) error(name, "expected a statement name");
        for (const char* e : ends)
          if (name.text == e) {
            i++;
            return name.text;
          }
        i++;
        out.push_back(statement());
      } else {
        error(t, "unexpected '" + describe(t) + "'");
      }
    }
  }
  void end_tag(const char* name) {
    i++;  // the name, checked by body()
    (void)name;
    expect_block_end();
  }

  NodePtr statement() {
    const Token& t = toks[i++];
    const std::string& kw = t.text;
    if (kw == "if") return if_stmt(t);
    if (kw == "for") return for_stmt(t);
    if (kw == "set") return set_stmt(t);
    if (kw == "macro") return macro_stmt(t);
    if (kw == "filter") {
      auto n = node(NodeKind::FilterBlock, t);
      auto f = node(NodeKind::Filter, peek());
      f->name = expect_name();
      if (is_op("(")) call_args(*f);
      f->kids.insert(f->kids.begin(), nullptr);  // the block's text goes here
      n->kids.push_back(std::move(f));
      expect_block_end();
      n->bodies.emplace_back();
      body(n->bodies[0], {"endfilter"});
      end_tag("endfilter");
      return n;
    }
    if (kw == "break" || kw == "continue") {
      auto n = node(kw == "break" ? NodeKind::Break : NodeKind::Continue, t);
      expect_block_end();
      return n;
    }
    if (kw == "generation") {  // transformers' AssistantTracker tag: renders its body
      auto n = node(NodeKind::Scope, t);
      expect_block_end();
      n->bodies.emplace_back();
      body(n->bodies[0], {"endgeneration"});
      end_tag("endgeneration");
      return n;
    }
    if (kw == "with") {
      auto n = node(NodeKind::Scope, t);
      while (peek().kind != Tok::BlockEnd) {
        n->names.push_back(expect_name());
        expect_op("=");
        n->kids.push_back(expression());
        if (!accept_op(",")) break;
      }
      expect_block_end();
      n->bodies.emplace_back();
      body(n->bodies[0], {"endwith"});
      end_tag("endwith");
      return n;
    }
    error(t, "unknown or unsupported tag '" + kw + "'");
  }

  NodePtr if_stmt(const Token& t) {
    auto n = node(NodeKind::If, t);
    n->kids.push_back(expression());
    expect_block_end();
    while (true) {
      n->bodies.emplace_back();
      std::string end = body(n->bodies.back(), {"elif", "else", "endif"});
      i++;
      if (end == "elif") {
        n->kids.push_back(expression());
        expect_block_end();
      } else if (end == "else") {
        expect_block_end();
        n->bodies.emplace_back();
        body(n->bodies.back(), {"endif"});
        end_tag("endif");
        return n;
      } else {
        expect_block_end();
        return n;
      }
    }
  }

  void targets(Node& n) {
    bool paren = accept_op("(");
    do {
      n.names.push_back(expect_name());
    } while (accept_op(","));
    if (paren) expect_op(")");
  }

  NodePtr for_stmt(const Token& t) {
    auto n = node(NodeKind::For, t);
    targets(*n);
    if (!accept_name("in")) error(peek(), "expected 'in' in for loop");
    n->kids.push_back(expression(false));
    n->kids.push_back(accept_name("if") ? expression(false) : nullptr);
    if (accept_name("recursive")) error(t, "recursive for loops are not supported");
    expect_block_end();
    n->bodies.emplace_back();
    n->bodies.emplace_back();
    std::string end = body(n->bodies[0], {"else", "endfor"});
    if (end == "else") {
      end_tag("else");
      body(n->bodies[1], {"endfor"});
    }
    end_tag("endfor");
    return n;
  }

  NodePtr set_stmt(const Token& t) {
    auto n = node(NodeKind::Set, t);
    std::string first = expect_name();
    if (accept_op(".")) {  // ns.attr = value
      n->name = first;
      n->attr = expect_name();
    } else {
      n->names.push_back(first);
      while (accept_op(",")) n->names.push_back(expect_name());
    }
    if (accept_op("=")) {
      NodePtr value = expression();
      if (is_op(",")) {  // set a, b = 1, 2
        auto tup = node(NodeKind::ListLit, t);
        tup->kids.push_back(std::move(value));
        while (accept_op(",")) tup->kids.push_back(expression());
        value = std::move(tup);
      }
      n->kids.push_back(std::move(value));
      expect_block_end();
      return n;
    }
    // {% set x %}...{% endset %}, optionally {% set x | filter %}
    if (!n->attr.empty() || n->names.size() != 1) error(peek(), "expected '='");
    n->kind = NodeKind::SetBlock;
    while (accept_op("|")) {
      auto f = filter(nullptr);
      n->kids.push_back(std::move(f));
    }
    expect_block_end();
    n->bodies.emplace_back();
    body(n->bodies[0], {"endset"});
    end_tag("endset");
    return n;
  }

  NodePtr macro_stmt(const Token& t) {
    auto n = node(NodeKind::Macro, t);
    n->name = expect_name();
    expect_op("(");
    while (!is_op(")")) {
      n->names.push_back(expect_name());
      n->kids.push_back(accept_op("=") ? expression() : nullptr);
      if (!accept_op(",")) break;
    }
    expect_op(")");
    expect_block_end();
    n->bodies.emplace_back();
    body(n->bodies[0], {"endmacro"});
    end_tag("endmacro");
    return n;
  }
};

}  // namespace

Body parse(const std::vector<Token>& tokens) {
  Parser p{tokens};
  Body program;
  p.body(program, {});
  return program;
}

}  // namespace xdna::jinja
