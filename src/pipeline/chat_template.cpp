// ChatTemplate: parses once, renders with the variables transformers' apply_chat_template passes:
// messages (keys whose value is null dropped; reasoning under "reasoning_content", "thinking" or
// "reasoning" copied to "thinking" and "reasoning_content"), tools = None and documents = None
// unless given, add_generation_prompt, then `extra` (special tokens, enable_thinking, ...).
#include "pipeline/chat_template.h"

#include "pipeline/jinja.h"

namespace xdna {

struct ChatTemplateImpl {
  jinja::Body program;
};

ChatTemplate::ChatTemplate(std::unique_ptr<ChatTemplateImpl> impl) : impl_(std::move(impl)) {}
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;
ChatTemplate::~ChatTemplate() = default;

ChatTemplate ChatTemplate::parse(const std::string& source) {
  auto impl = std::make_unique<ChatTemplateImpl>();
  impl->program = jinja::parse(jinja::tokenize(source));
  return ChatTemplate(std::move(impl));
}

namespace {

jinja::Json normalize_message(const jinja::Json& m) {
  if (!m.is_object()) throw std::invalid_argument("chat message must be a JSON object, got: " + m.dump());
  jinja::Json out = jinja::Json::object();
  for (auto it = m.begin(); it != m.end(); ++it)
    if (!it.value().is_null()) out[it.key()] = it.value();
  for (const char* key : {"reasoning_content", "thinking", "reasoning"}) {
    auto r = out.find(key);
    if (r == out.end()) continue;
    jinja::Json reasoning = *r;
    jinja::Json aliased = jinja::Json::object();
    aliased["thinking"] = reasoning;
    for (auto it = out.begin(); it != out.end(); ++it) aliased[it.key()] = it.value();
    aliased["reasoning_content"] = reasoning;
    return aliased;
  }
  return out;
}

}  // namespace

std::string ChatTemplate::render_json(const nlohmann::json& messages, bool add_generation_prompt,
                                      const nlohmann::json& extra) const {
  if (!messages.is_array()) throw std::invalid_argument("chat messages must be a JSON array");
  if (!extra.is_object()) throw std::invalid_argument("chat template variables must be a JSON object");
  jinja::Json msgs = jinja::Json::array();
  for (const auto& m : messages) msgs.push_back(normalize_message(jinja::Json(m)));

  std::map<std::string, jinja::Value> globals = jinja::builtin_globals();
  globals["messages"] = jinja::Value::of(std::move(msgs));
  globals["tools"] = jinja::Value::of(nullptr);
  globals["documents"] = jinja::Value::of(nullptr);
  globals["add_generation_prompt"] = jinja::Value::of(add_generation_prompt);
  for (auto it = extra.begin(); it != extra.end(); ++it) globals[it.key()] = jinja::Value::of(jinja::Json(it.value()));
  return jinja::render(impl_->program, globals);
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                                 const nlohmann::json& extra) const {
  nlohmann::json msgs = nlohmann::json::array();
  for (const auto& m : messages) msgs.push_back({{"role", m.role}, {"content", m.content}});
  return render_json(msgs, add_generation_prompt, extra);
}

}  // namespace xdna
