// `npu chat [--model M] [--system TEXT]`: a multi-turn conversation over stdin. Each line is a
// user message; the reply streams to stdout as it is generated, then a newline. `/reset` starts
// over (keeping --system), `/exit` (or end of input) quits. The prompt marker "> " is shown only
// when stdin is a terminal, so piped input gives just the replies.
#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <memory>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/llm_options.h"

namespace xdna::cli {

namespace {

struct ChatCliOptions {
  LlmCliOptions llm;
  std::string system;
};

void run_chat(const ChatCliOptions& o) {
  const std::unique_ptr<LanguageModel> lm = load_llm(o.llm);
  if (!lm->has_chat_template())
    throw std::runtime_error("chat: model '" + lm->name() + "' has no chat template (use `npu generate`)");
  DeviceBackends devices;
  const std::vector<Backend*> backends = devices.list(o.llm.device);
  const bool interactive = isatty(STDIN_FILENO);

  nlohmann::json history = nlohmann::json::array();
  const auto reset = [&] {
    history = nlohmann::json::array();
    if (!o.system.empty()) history.push_back({{"role", "system"}, {"content", o.system}});
  };
  reset();
  if (interactive)
    std::fprintf(stderr, "npu chat: %s, context %lld tokens. /reset starts over, /exit quits.\n",
                 lm->name().c_str(), static_cast<long long>(lm->context_length()));
  std::string line;
  uint64_t turn = 0;
  for (;;) {
    if (interactive) {
      std::printf("> ");
      std::fflush(stdout);
    }
    if (!std::getline(std::cin, line)) break;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      reset();
      if (interactive) std::fprintf(stderr, "(conversation cleared)\n");
      continue;
    }
    if (line.empty()) continue;

    history.push_back({{"role", "user"}, {"content", line}});
    GenerateRequest req = make_request(o.llm, encode_prompt(*lm, lm->render_chat(history)));
    if (o.llm.seed) req.sampling.seed = *o.llm.seed + turn;  // reproducible, yet not the same draw every turn
    req.backends = backends;
    GenerateResult r;
    try {
      r = generate(*lm, req, [](const GeneratedPiece& p) {
        std::fwrite(p.text.data(), 1, p.text.size(), stdout);
        std::fflush(stdout);
        return true;
      });
    } catch (const std::invalid_argument& e) {  // the conversation outgrew the context
      history.erase(history.end() - 1);
      std::fprintf(stderr, "npu chat: %s; /reset to start over\n", e.what());
      continue;
    }
    std::printf("\n");
    std::fflush(stdout);
    if (r.finish_reason == "length" && interactive)
      std::fprintf(stderr, "(reply cut at %lld tokens)\n", static_cast<long long>(r.completion_tokens));
    history.push_back({{"role", "assistant"}, {"content", r.text}});
    ++turn;
  }
}

}  // namespace

void add_chat_command(CLI::App& app) {
  auto o = std::make_shared<ChatCliOptions>();
  CLI::App* cmd = app.add_subcommand("chat", "Chat with an LLM: each stdin line is a message, replies stream back");
  add_llm_options(cmd, o->llm);
  cmd->add_option("--system", o->system, "System message at the start of the conversation");
  cmd->callback([o] { run_chat(*o); });
}

}  // namespace xdna::cli
