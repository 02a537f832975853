// Internal to the chat-template engine: a Jinja2 subset (the one Hugging Face chat templates use).
// Pipeline: jinja_lexer.cpp (source -> tokens, with Jinja's whitespace control) ->
// jinja_parser.cpp (tokens -> Node tree) -> jinja_eval.cpp (Node tree + variables -> text).
// Values are JSON (ordered, as Python dicts are) plus the few things JSON cannot hold:
// undefined, namespace() objects and callables (macros, globals).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace xdna::jinja {

using Json = nlohmann::ordered_json;

// ---- lexer ----
enum class Tok : uint8_t {
  Text,        // template data between tags (whitespace control already applied)
  VarBegin,    // {{
  VarEnd,      // }}
  BlockBegin,  // {%
  BlockEnd,    // %}
  Name,
  String,      // value already unescaped
  Int,
  Float,
  Op,          // + - * / // % ** ~ == != < <= > >= = . , : | ( ) [ ] { }
  End,
};

struct Token {
  Tok kind;
  std::string text;
  int line = 1, col = 1;
};

// Throws std::invalid_argument("line L:C: ...") on a malformed template.
std::vector<Token> tokenize(const std::string& source);

// ---- syntax tree ----
enum class NodeKind : uint8_t {
  // expressions
  Literal,    // value
  Name,       // name
  ListLit,    // kids
  DictLit,    // kids = key0, val0, key1, val1, ...
  Attr,       // kids[0].name
  Item,       // kids[0][kids[1]]
  Slice,      // kids[0][kids[1]:kids[2]:kids[3]] (null kids where omitted)
  Call,       // kids[0](kids[1..]); names[i] = keyword of kids[i+1] or ""
  Filter,     // name: kids[0] | name(kids[1..]); names as Call
  Test,       // name: kids[0] is [not] name(kids[1..]); negated
  Unary,      // name in {"-", "+", "not"}: kids[0]
  Binary,     // name in {"+","-","*","/","//","%","**","~","and","or"}: kids[0], kids[1]
  Compare,    // kids[0] names[0] kids[1] names[1] kids[2] ... (chained, ops in names)
  Cond,       // kids[0] if kids[1] else kids[2] (kids[2] may be null)
  // statements
  Text,       // name = data
  Output,     // kids[0]
  If,         // kids = conditions; bodies[i] for each, bodies.back() = else when size > kids
  For,        // names = targets; kids[0] iterable, kids[1] filter (may be null);
              // bodies[0] loop body, bodies[1] else body
  Set,        // kids[0] value; names = targets, or name = "ns" + attr = names[0] for ns.attr
  SetBlock,   // names[0] target; bodies[0] body; kids = filters applied to the block (Filter nodes)
  Macro,      // name; names = params; kids = defaults (null where none); bodies[0]
  FilterBlock,// kids[0] Filter node applied to bodies[0]
  Break,
  Continue,
  Scope,      // bodies[0]: {% generation %} / {% with %} bodies; names = with-targets, kids = values
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  NodeKind kind;
  int line = 0, col = 0;
  std::string name;
  std::string attr;  // Set: attribute of a namespace target
  bool negated = false;
  Json value;
  std::vector<NodePtr> kids;
  std::vector<std::string> names;
  std::vector<Body> bodies;
};

// Throws std::invalid_argument("line L:C: ...").
Body parse(const std::vector<Token>& tokens);

// ---- evaluation ----
struct Value;
struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};
class Evaluator;
using Function = std::function<Value(Evaluator&, CallArgs&)>;

struct Value {
  enum class Kind : uint8_t { Undefined, Json, Namespace, Callable };
  Kind kind = Kind::Undefined;
  // Kind::Json. Values are immutable once made, so a part of a value (messages[0]) is a pointer
  // into its parent that shares the parent's ownership: no copies of long message lists.
  std::shared_ptr<const Json> j;
  std::shared_ptr<std::map<std::string, Value>> ns;  // Kind::Namespace, shared by reference
  std::shared_ptr<const Function> fn;                // Kind::Callable
  std::string hint;  // Kind::Undefined: what was looked up, for error messages
  bool markup = false;  // a string marked |safe (Jinja's Markup): `+` HTML-escapes the other side

  static Value undefined(std::string hint = {}) { Value v; v.hint = std::move(hint); return v; }
  static Value of(Json json) {
    Value v;
    v.kind = Kind::Json;
    v.j = std::make_shared<const Json>(std::move(json));
    return v;
  }
  // A part of this value; child must live inside *j. An undefined put in a list or dict literal
  // is stored as a "discarded" JSON value and reads back as undefined.
  Value part(const Json& child) const {
    if (child.is_discarded()) return undefined();
    Value v;
    v.kind = Kind::Json;
    v.j = std::shared_ptr<const Json>(j, &child);
    return v;
  }
  const Json& json() const { return *j; }
  bool is_undefined() const { return kind == Kind::Undefined; }
  bool is_json() const { return kind == Kind::Json; }
};

// Renders a parsed template. globals: the template's variables (messages, add_generation_prompt...).
std::string render(const Body& program, const std::map<std::string, Value>& globals);

// ---- Python semantics shared by the evaluator and the built-ins (jinja_builtins.cpp) ----
std::string py_str(const Value& v);                  // str(v) / {{ v }}
std::string py_str(const Json& j);
std::string type_name(const Value& v);               // Python type name for messages
std::string py_repr(const Json& j);                  // repr(v) inside containers
std::string py_float_repr(double d);                 // repr(float)
struct JsonStyle {  // json.dumps options, as transformers' tojson filter passes them
  bool ensure_ascii = false;
  bool pretty = false;  // indent given
  std::string indent;
  bool sort_keys = false;
  std::string item_sep = ", ", key_sep = ": ";
};
std::string py_json_dumps(const Json& j, const JsonStyle& style);
bool truthy(const Value& v);
bool py_equal(const Json& a, const Json& b);
std::u32string utf8_decode(const std::string& s);
std::string utf8_encode(const std::u32string& s);
bool py_isspace(char32_t c);
std::string html_escape(const std::string& s);  // markupsafe.escape

// Filters, tests and methods by name; nullptr when unknown.
using FilterFn = Value (*)(Evaluator&, Value&, CallArgs&);
using TestFn = bool (*)(Evaluator&, const Value&, CallArgs&);
FilterFn find_filter(const std::string& name);
TestFn find_test(const std::string& name);
// obj.name(args) for strings, dicts and lists. Sets found = false when the method is unknown.
Value call_method(const Value& obj, const std::string& name, CallArgs& args, bool& found);
// Global functions (range, namespace, dict, raise_exception, strftime_now).
std::map<std::string, Value> builtin_globals();

[[noreturn]] void fail(const std::string& msg);  // throws std::runtime_error

// Value helpers of the evaluator (jinja_eval.cpp) the built-ins use too.
std::vector<Value> iterate(const Value& v);              // for-loop items
Json to_json(const Value& v, const char* where);         // throws for undefined / non-JSON values
Value get_attr(const Value& obj, const std::string& name);
Value get_item(const Value& obj, const Value& key);

class Evaluator {
 public:
  Evaluator(const std::map<std::string, Value>& globals);
  void run(const Body& body, std::string& out);
  Value eval(const Node& n);
  Value call(const Value& callee, CallArgs& args, const std::string& what);
  Value apply_filter(const std::string& name, Value v, CallArgs& args);
  bool apply_test(const std::string& name, const Value& v, CallArgs& args);

 private:
  Value lookup(const std::string& name) const;
  void assign(const std::string& name, Value v);
  void exec(const Node& n, std::string& out);
  void exec_body(const Body& b, std::string& out);
  void exec_for(const Node& n, std::string& out);
  Value eval_call(const Node& n);
  Value make_macro(const Node& n);
  CallArgs eval_args(const Node& n, size_t first);
  void check_output(const std::string& out);

  friend struct DepthGuard;
  const std::map<std::string, Value>& globals_;
  std::vector<std::map<std::string, Value>> scopes_;  // innermost last
  int depth_ = 0;
  uint64_t steps_ = 0;
  enum class Flow : uint8_t { Normal, Break, Continue } flow_ = Flow::Normal;
};

}  // namespace xdna::jinja
