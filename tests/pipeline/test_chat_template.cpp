// Chat templates: the real templates of the covered models against transformers' renderings
// (tests/fixtures/chat_templates/cases.json, from scripts/make_chat_template_fixtures.py), then the
// Jinja features one by one, then malformed templates and runtime errors.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include "pipeline/chat_template.h"

using xdna::ChatTemplate;
using json = nlohmann::json;

namespace {

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

const std::string kDir = std::string(XDNA_FIXTURE_DIR) + "/chat_templates/";

std::string render(const std::string& src, const json& vars = json::object(),
                   const json& messages = json::array()) {
  return ChatTemplate::parse(src).render_json(messages, false, vars);
}

}  // namespace

TEST(ChatTemplate, RealTemplatesMatchTransformersByteForByte) {
  json cases = json::parse(read_file(kDir + "cases.json"));
  ASSERT_GE(cases.size(), 100u);
  std::map<std::string, ChatTemplate> templates;
  std::map<std::string, int> passed;
  for (const auto& c : cases) {
    const std::string name = c["template"];
    if (!templates.count(name)) templates.emplace(name, ChatTemplate::parse(read_file(kDir + name)));
    const ChatTemplate& t = templates.at(name);
    SCOPED_TRACE(name + " / " + c["conversation"].get<std::string>() +
                 " / add_generation_prompt=" + (c["add_generation_prompt"].get<bool>() ? "true" : "false") +
                 " / extra=" + c["extra"].dump());
    if (c.contains("error")) {
      try {
        t.render_json(c["messages"], c["add_generation_prompt"], c["extra"]);
        ADD_FAILURE() << "expected an error: " << c["error"];
      } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find(c["error"].get<std::string>()), std::string::npos) << e.what();
        passed[name]++;
      }
      continue;
    }
    std::string got = t.render_json(c["messages"], c["add_generation_prompt"], c["extra"]);
    EXPECT_EQ(got, c["expected"].get<std::string>());
    if (got == c["expected"].get<std::string>()) passed[name]++;
  }
  for (auto& [name, n] : passed) std::printf("  %-50s %d cases match\n", name.c_str(), n);
  EXPECT_EQ(templates.size(), 12u);
  for (const char* main : {"gemma-3-it.jinja", "smollm2-instruct.jinja", "qwen3.jinja", "llama-3.2-instruct.jinja"})
    EXPECT_GE(passed[main], 24) << main;
}

TEST(ChatTemplate, RenderTakesChatMessages) {
  auto t = ChatTemplate::parse(read_file(kDir + "smollm2-instruct.jinja"));
  std::string s = t.render({{"system", "Be brief."}, {"user", "Hi"}}, true);
  EXPECT_EQ(s, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

// ---- whitespace control ----

TEST(ChatTemplate, TrimBlocksAndLstripBlocks) {
  EXPECT_EQ(render("{% if true %}\nyes\n{% endif %}\nafter"), "yes\nafter");
  EXPECT_EQ(render("  {% if true %}x{% endif %}"), "x");           // lstrip at line start
  EXPECT_EQ(render("a  {% if true %}x{% endif %}"), "a  x");       // not at line start
  EXPECT_EQ(render("a\n    {% if true %}x{% endif %}"), "a\nx");
  EXPECT_EQ(render("  {{ 'v' }}"), "  v");                         // lstrip never applies to {{
  EXPECT_EQ(render("a\n  {#- c #}\nb"), "ab");
  EXPECT_EQ(render("a\n  {# c #}\nb"), "a\nb");
  EXPECT_EQ(render("a \n {{- 'x' -}} \n b"), "axb");
  EXPECT_EQ(render("  {%+ if true %}x{% endif %}"), "  x");        // + keeps the indentation
  EXPECT_EQ(render("{% if true +%}\nx{% endif %}"), "\nx");        // + keeps the newline
  EXPECT_EQ(render("line\n"), "line");                              // one trailing newline dropped
  EXPECT_EQ(render("line\n\n"), "line\n");
  EXPECT_EQ(render("a\r\nb"), "a\nb");
  EXPECT_EQ(render("{% raw %}{{ x }}{% endraw %}"), "{{ x }}");
}

// ---- statements ----

TEST(ChatTemplate, IfElifElse) {
  const char* src = "{% if n == 1 %}one{% elif n == 2 %}two{% else %}many{% endif %}";
  EXPECT_EQ(render(src, {{"n", 1}}), "one");
  EXPECT_EQ(render(src, {{"n", 2}}), "two");
  EXPECT_EQ(render(src, {{"n", 5}}), "many");
}

TEST(ChatTemplate, ForLoopVariables) {
  EXPECT_EQ(render("{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}"
                   "{{ loop.length }};{% endfor %}",
                   {{"xs", {"a", "b"}}}),
            "10TrueFalse2;21FalseTrue2;");
  EXPECT_EQ(render("{% for x in xs %}{{ loop.previtem | default('-') }}{{ loop.nextitem | default('-') }}"
                   "{{ loop.revindex }},{% endfor %}",
                   {{"xs", {1, 2, 3}}}),
            "-23,132,2-1,");
  EXPECT_EQ(render("{% for x in xs %}{{ x }}{% else %}empty{% endfor %}", {{"xs", json::array()}}), "empty");
  EXPECT_EQ(render("{% for x in xs if x > 1 %}{{ x }}/{{ loop.length }} {% endfor %}", {{"xs", {1, 2, 3}}}),
            "2/2 3/2 ");
  EXPECT_EQ(render("{% for k, v in d | items %}{{ k }}={{ v }};{% endfor %}", {{"d", {{"a", 1}, {"b", 2}}}}),
            "a=1;b=2;");
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", {{"d", {{"a", 1}}}}), "a=1;");
  EXPECT_EQ(render("{% for x in xs %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}"
                   "{% endif %}{{ x }}{% endfor %}",
                   {{"xs", {1, 2, 3, 4, 5}}}),
            "13");
  EXPECT_EQ(render("{% for c in 'héé' %}[{{ c }}]{% endfor %}"), "[h][é][é]");
  EXPECT_EQ(render("{% for x in range(3) %}{{ x }}{% endfor %}"), "012");
}

TEST(ChatTemplate, SetScopingAndNamespace) {
  // A set inside a loop does not leak out; a namespace attribute does.
  EXPECT_EQ(render("{% set x = 1 %}{% for i in [1, 2] %}{% set x = i %}{% endfor %}{{ x }}"), "1");
  EXPECT_EQ(render("{% set ns = namespace(x=1) %}{% for i in [1, 2] %}{% set ns.x = ns.x + i %}{% endfor %}"
                   "{{ ns.x }}"),
            "4");
  EXPECT_EQ(render("{% set a, b = [1, 2] %}{{ b }}{{ a }}"), "21");
  EXPECT_EQ(render("{% set t %}inner {{ 1 + 1 }}{% endset %}[{{ t }}]"), "[inner 2]");
  EXPECT_EQ(render("{% set t | upper %}abc{% endset %}{{ t }}"), "ABC");
  EXPECT_EQ(render("{% if true %}{% set y = 5 %}{% endif %}{{ y }}"), "5");  // if has no scope
}

TEST(ChatTemplate, Macros) {
  EXPECT_EQ(render("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}"
                   "{{ greet('Bo') }} {{ greet('Al', punct='?') }}"),
            "Hi Bo! Hi Al?");
  EXPECT_EQ(render("{% set top = 'T' %}{% macro m() %}{{ top }}{% endmacro %}{{ m() }}"), "T");
}

TEST(ChatTemplate, FilterBlockAndGenerationTag) {
  EXPECT_EQ(render("{% filter upper %}abc{% endfilter %}"), "ABC");
  EXPECT_EQ(render("{% generation %}kept{% endgeneration %}"), "kept");
}

// ---- expressions ----

TEST(ChatTemplate, LiteralsAndArithmetic) {
  EXPECT_EQ(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 4 / 2 }}"),
            "3 -4 1 2 3.5 1024 2.0");
  EXPECT_EQ(render("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 1.5 + 1 }} {{ 'ab' * 2 }} {{ 0.1 + 0.2 }}"),
            "7 9 2.5 abab 0.30000000000000004");
  EXPECT_EQ(render("{{ 1e20 }} {{ 1e-5 }} {{ 123456789.0 }} {{ 1_000 }}"), "1e+20 1e-05 123456789.0 1000");
  EXPECT_EQ(render("{{ 'a' ~ 1 ~ none ~ true }}"), "a1NoneTrue");
  EXPECT_EQ(render("{{ [1, 'a', none, true, 1.0] }} {{ {'k': 'v'} }} {{ (1, 2) }}"),
            "[1, 'a', None, True, 1.0] {'k': 'v'} [1, 2]");
  EXPECT_EQ(render("{{ 'it''s' }}{{ \"x\\ty\\n\" }}{{ '\\u00e9\\x41' }}"), "its" "x\ty\n" "éA");
  EXPECT_EQ(render("{{ 'yes' if x else 'no' }}{{ 'a' if false }}", {{"x", 1}}), "yes");
}

TEST(ChatTemplate, ComparisonsAndLogic) {
  EXPECT_EQ(render("{{ 1 < 2 < 3 }} {{ 1 == 1.0 }} {{ 'a' != 'b' }} {{ 'b' > 'a' }} {{ [1, 2] < [1, 3] }}"),
            "True True True True True");
  EXPECT_EQ(render("{{ 'ell' in 'hello' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 3 not in [1] }}"),
            "True True True True");
  EXPECT_EQ(render("{{ none or 'x' }} {{ 0 and 1 }} {{ not [] }} {{ 1 and 'y' }}"), "x 0 True y");
}

TEST(ChatTemplate, AttributeItemAndSlicing) {
  json vars = {{"m", {{"role", "user"}, {"content", "hello"}}}, {"xs", {1, 2, 3, 4}}, {"s", "héllo"}};
  EXPECT_EQ(render("{{ m.role }} {{ m['content'] }} {{ m.missing }}|{{ xs[-1] }} {{ xs[9] }}", vars),
            "user hello |4 ");
  EXPECT_EQ(render("{{ xs[1:3] }} {{ xs[::-1] }} {{ xs[:-1] }} {{ xs[::2] }} {{ s[1:3] }} {{ s[::-1] }} {{ s[1] }}",
                   vars),
            "[2, 3] [4, 3, 2, 1] [1, 2, 3] [1, 3] él olléh é");
}

TEST(ChatTemplate, Tests) {
  json vars = {{"n", nullptr}, {"s", "x"}, {"d", json::object()}, {"l", json::array()}, {"i", 3}, {"f", 1.5}};
  EXPECT_EQ(render("{{ u is defined }} {{ n is defined }} {{ n is none }} {{ u is none }} {{ u is undefined }}",
                   vars),
            "False True True False True");
  EXPECT_EQ(render("{{ s is string }} {{ d is mapping }} {{ l is iterable }} {{ s is iterable }} {{ i is iterable }}"
                   " {{ i is number }} {{ i is integer }} {{ f is float }} {{ true is boolean }}",
                   vars),
            "True True True True False True True True True");
  EXPECT_EQ(render("{{ i is odd }} {{ i is even }} {{ 9 is divisibleby 3 }} {{ i is not none }}"
                   " {{ false is false }} {{ 0 is false }} {{ i is eq 3 }} {{ i is gt(2) }} {{ 'a' is in 'cat' }}",
                   vars),
            "True False True True True False True True True");
}

TEST(ChatTemplate, Filters) {
  json vars = {{"xs", {"b", "a", "c"}}, {"d", {{"a", 1}}}, {"objs", {{{"n", "x"}, {"on", true}}, {{"n", "y"}, {"on", false}}}}};
  EXPECT_EQ(render("[{{ '  a b \\n' | trim }}] {{ 'ab' | upper }} {{ 'AB' | lower }} {{ 'hi' | length }}"
                   " {{ xs | length }} {{ xs | join(', ') }} {{ xs | first }} {{ xs | last }}",
                   vars),
            "[a b] AB ab 2 3 b, a, c b c");
  EXPECT_EQ(render("{{ u | default('dflt') }} {{ '' | default('e', true) }} {{ 'abc' | list }} {{ d | items }}"
                   " {{ 'a-b-a' | replace('a', 'o') }} {{ xs | sort | join }} {{ xs | reverse | join }}",
                   vars),
            "dflt e ['a', 'b', 'c'] [['a', 1]] o-b-o abc cab");
  EXPECT_EQ(render("{{ objs | selectattr('on') | map(attribute='n') | join }} "
                   "{{ objs | rejectattr('on') | map(attribute='n') | join }} {{ [1, 2, 3] | select('odd') | list }}"
                   " {{ [1, 2] | sum }} {{ '42' | int + 1 }} {{ 'x' | int }} {{ -3 | abs }} {{ 2.567 | round(1) }}",
                   vars),
            "x y [1, 3] 3 43 0 3 2.6");
  EXPECT_EQ(render("{{ 'a\\nb' | indent(2) }}|{{ 'a\\nb' | indent(2, true) }}|{{ '<&>' | e }}|{{ 'hi there' | title }}"),
            "a\n  b|  a\n  b|&lt;&amp;&gt;|Hi There");
}

TEST(ChatTemplate, MarkupDictsortFormatAndUndefinedInLists) {
  // Markup (|safe) + str escapes the str, as markupsafe does; plain str + str does not.
  EXPECT_EQ(render("{{ 'a<'|safe + '<b>' }} {{ 'a<' + '<b>' }} {{ '<x>' | e }}"), "a<&lt;b&gt; a<<b> &lt;x&gt;");
  EXPECT_EQ(render("{% for k, v in {'b': 1, 'a': 2} | dictsort %}{{ k }}{{ v }}{% endfor %}"), "a2b1");
  EXPECT_EQ(render("{{ '<{}|{x}|{0}>'.format('p', x='q') }} {{ '{{}}'.format() }}"), "<p|q|p> {}");
  EXPECT_EQ(render("{{ [u, 1] | length }} {{ [u][0] is defined }} {{ u in [u] }}"), "2 False True");
}

TEST(ChatTemplate, ToJsonAsTransformers) {
  json vars = {{"v", {{"b", {1, 2.5, nullptr, true}}, {"a", "é\"\n<tag>"}}}};
  // Keys come sorted from nlohmann::json; dict literals keep their order.
  EXPECT_EQ(render("{{ v | tojson }}", vars), "{\"a\": \"é\\\"\\n<tag>\", \"b\": [1, 2.5, null, true]}");
  EXPECT_EQ(render("{{ {'z': 1, 'a': []} | tojson }}"), "{\"z\": 1, \"a\": []}");
  EXPECT_EQ(render("{{ {'z': 1, 'a': {}} | tojson(indent=2) }}"), "{\n  \"z\": 1,\n  \"a\": {}\n}");
  EXPECT_EQ(render("{{ {'z': [1, 2]} | tojson(indent=1, sort_keys=true) }}"), "{\n \"z\": [\n  1,\n  2\n ]\n}");
  EXPECT_EQ(render("{{ {'z': 'é'} | tojson(ensure_ascii=true, separators=(',', ':')) }}"), "{\"z\":\"\\u00e9\"}");
}

TEST(ChatTemplate, StringMethods) {
  EXPECT_EQ(render("{{ 'a,b,,c'.split(',') }} {{ ' a  b '.split() }} {{ 'a b c'.split(' ', 1) }}"
                   " {{ 'a,b,c'.rsplit(',', 1) }}"),
            "['a', 'b', '', 'c'] ['a', 'b'] ['a', 'b c'] ['a,b', 'c']");
  EXPECT_EQ(render("[{{ '\\n x \\n'.strip() }}][{{ 'xxaxx'.strip('x') }}][{{ '\\nx'.lstrip('\\n') }}]"
                   "[{{ 'x\\n\\n'.rstrip() }}]"),
            "[x][a][x][x]");
  EXPECT_EQ(render("{{ 'hello'.startswith('he') }} {{ 'hello'.endswith(('x', 'lo')) }} {{ 'Ab'.upper() }}"
                   " {{ 'Ab'.lower() }} {{ 'a-b'.replace('-', '+') }} {{ 'abc'.find('c') }} {{ '-'.join(['a', 'b']) }}"),
            "True True AB ab a+b 2 a-b");
  json vars = {{"d", {{"k", "v"}}}};
  EXPECT_EQ(render("{{ d.get('k') }} {{ d.get('x') }} {{ d.get('x', 'z') }} {{ d.keys() | list }} {{ d.values() | list }}",
                   vars),
            "v None z ['k'] ['v']");
}

TEST(ChatTemplate, VariablesAndGlobals) {
  auto t = ChatTemplate::parse("{{ tools is none }} {{ documents is none }} {{ add_generation_prompt }} {{ bos_token }}");
  EXPECT_EQ(t.render({}, true, {{"bos_token", "<s>"}}), "True True True <s>");
  // strftime_now formats the current date.
  std::string date = render("{{ strftime_now('%Y-%m-%d') }}");
  ASSERT_EQ(date.size(), 10u);
  EXPECT_EQ(date[4], '-');
  EXPECT_EQ(render("{{ dict(a=1) }} {{ namespace(a=2).a }}"), "{'a': 1} 2");
}

TEST(ChatTemplate, MessageNormalisationAsTransformers) {
  auto t = ChatTemplate::parse(
      "{% for m in messages %}{{ m.reasoning_content }}|{{ m.thinking }}|{{ m.name is defined }};{% endfor %}");
  json msgs = {{{"role", "assistant"}, {"content", "x"}, {"reasoning", "r"}, {"name", nullptr}}};
  EXPECT_EQ(t.render_json(msgs, false), "r|r|False;");
}

// ---- errors ----

TEST(ChatTemplate, SyntaxErrorsNameLineAndColumn) {
  auto expect_syntax = [](const std::string& src, const std::string& where) {
    try {
      ChatTemplate::parse(src);
      ADD_FAILURE() << "no error for: " << src;
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(where), std::string::npos) << src << " -> " << e.what();
    }
  };
  expect_syntax("{% if x %}open", "line 1:");
  expect_syntax("a\nb {{ x + }}", "line 2:");
  expect_syntax("{{ x", "unclosed");
  expect_syntax("{% for x in %}{% endfor %}", "line 1:");
  expect_syntax("{% endfor %}", "endfor");
  expect_syntax("{% include 'x' %}", "include");
  expect_syntax("{{ 'abc }}", "unterminated string");
  expect_syntax("{# open", "comment");
  expect_syntax("{{ (1 }}", "line 1:");
  expect_syntax("{{ 1 ] }}", "unexpected ']'");
  expect_syntax("{{ 99999999999999999999 }}", "out of range");
  expect_syntax("{% set %}", "expected a name");
  expect_syntax("{{ " + std::string(300, '(') + "1" + std::string(300, ')') + " }}", "nested too deeply");
  expect_syntax(std::string(300, '{') + "{% if x %}", "line 1:");
}

TEST(ChatTemplate, RuntimeErrors) {
  auto expect_runtime = [](const std::string& src, const std::string& what) {
    auto t = ChatTemplate::parse(src);
    try {
      t.render_json(json::array(), false, {{"n", nullptr}, {"s", "x"}});
      ADD_FAILURE() << "no error for: " << src;
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << src << " -> " << e.what();
    }
  };
  expect_runtime("{{ raise_exception('custom failure') }}", "custom failure");
  expect_runtime("{{ x | nosuchfilter }}", "no filter named 'nosuchfilter'");
  expect_runtime("{{ x is nosuchtest }}", "no test named 'nosuchtest'");
  expect_runtime("{{ undefined_thing.attr }}", "'undefined_thing' is undefined");
  expect_runtime("{{ 1 + 'a' }}", "unsupported operand");
  expect_runtime("{{ 1 // 0 }}", "by zero");
  expect_runtime("{{ s.nosuchmethod() }}", "no method 'nosuchmethod'");
  expect_runtime("{{ nosuchfn() }}", "'nosuchfn' is undefined");
  expect_runtime("{% for x in n %}{% endfor %}", "not iterable");
  expect_runtime("{% set s.attr = 1 %}", "not a namespace");
  expect_runtime("{{ [1].append(2) }}", "unsafe");
  expect_runtime("{{ range(1000000) | length }}", "range too big");
  expect_runtime("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", "too deep");
  expect_runtime("{{ 'a' * 1000000000000 }}", "too large");
  expect_runtime("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}",
                 "too large");
  expect_runtime("{{ 9223372036854775807 + 1 }}", "overflow");
  expect_runtime("{{ 1 < 'a' }}", "not supported");
  expect_runtime("{{ [u] | tojson }}", "not JSON serializable");
}

TEST(ChatTemplate, StepLimitEndsLongLoops) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "2M evaluation steps take ~20 s under the sanitizers; the Release suite runs this";
#endif
  auto t = ChatTemplate::parse(
      "{% for i in range(100000) %}{% for j in range(100000) %}{{ j + j + j + j + j + j }}{% endfor %}{% endfor %}");
  try {
    t.render({}, false);
    ADD_FAILURE() << "10^10 iterations finished?";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("too many steps"), std::string::npos) << e.what();
  }
}

TEST(ChatTemplate, BadInputNeverCrashes) {
  // Random byte soup built from template syntax: every input either parses and renders or throws
  // one of the two documented exception types.
  const std::vector<std::string> atoms = {"{{", "}}", "{%", "%}", "{#", "#}", "-", "+", "if", "for", "in", "endif",
                                          "endfor", "set", "x", "=", "(", ")", "[", "]", "'", "\"", "|", "trim",
                                          ".", ",", ":", "1", " ", "\n", "not", "is", "loop", "~", "*", "/", "{", "}"};
  uint64_t state = 12345;
  int rendered = 0;
  for (int n = 0; n < 3000; n++) {
    std::string src;
    int len = 1 + static_cast<int>(state % 24);
    for (int k = 0; k < len; k++) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      src += atoms[(state >> 33) % atoms.size()];
    }
    try {
      ChatTemplate::parse(src).render({{"user", "hi"}}, true, {{"x", {1, 2}}});
      rendered++;
    } catch (const std::invalid_argument&) {
    } catch (const std::runtime_error&) {
    }
  }
  EXPECT_GT(rendered, 0);
}
