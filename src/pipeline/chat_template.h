// Chat templates: the Jinja2 subset Hugging Face chat templates use, rendered byte for byte as
// transformers' apply_chat_template renders them (trim_blocks and lstrip_blocks on, as
// transformers sets them). No Debian package provides a Jinja engine for C++, so this is the
// engine's own: a lexer, a parser into a small AST, and an evaluator over JSON values.
//
//   auto t = xdna::ChatTemplate::parse(source);
//   std::string prompt = t.render({{"system", "Be brief."}, {"user", "Hi"}},
//                                 /*add_generation_prompt=*/true, {{"bos_token", "<bos>"}});
#pragma once
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace xdna {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant" (others passed through to the template)
  std::string content;
};

struct ChatTemplateImpl;

class ChatTemplate {
 public:
  // Throws std::invalid_argument with the line and column of a syntax error.
  static ChatTemplate parse(const std::string& source);

  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;
  ~ChatTemplate();

  // extra: further template variables (bos_token, eos_token, enable_thinking, tools, ...).
  // Throws std::runtime_error for a template error (undefined filter, raise_exception(...)).
  std::string render(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                     const nlohmann::json& extra = nlohmann::json::object()) const;
  // Same with messages given as JSON (OpenAI request form: [{"role":..., "content":...}]).
  std::string render_json(const nlohmann::json& messages, bool add_generation_prompt,
                          const nlohmann::json& extra = nlohmann::json::object()) const;

 private:
  explicit ChatTemplate(std::unique_ptr<ChatTemplateImpl> impl);
  std::unique_ptr<ChatTemplateImpl> impl_;
};

}  // namespace xdna
