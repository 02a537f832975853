// `npu chat [--model M] [--system TEXT]`: a multi-turn conversation over stdin. Each line is a
// user message; the reply streams to stdout as it is generated, then a newline. `/reset` starts
// over (keeping --system), `/exit` (or end of input) quits. The prompt marker "> " is shown only
// when stdin is a terminal, so piped input gives just the replies.
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <random>
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

// One reply to `history`: streamed to stdout as it comes; its text and finish reason. Throws
// std::invalid_argument when the conversation no longer fits the context.
using ReplyFn = std::function<GenerateResult(const nlohmann::json& history, uint64_t seed)>;

// In-process replies: the model loaded here.
ReplyFn local_replies(const ChatCliOptions& o, std::string& banner) {
  std::shared_ptr<LanguageModel> lm = load_llm(o.llm);
  if (!lm->has_chat_template())
    throw std::runtime_error("chat: model '" + lm->name() + "' has no chat template (use `npu generate`)");
  banner = lm->name() + ", context " + std::to_string(lm->context_length()) + " tokens";
  auto devices = std::make_shared<DeviceBackends>();
  const std::vector<Backend*> backends = devices->list(o.llm.device, o.llm.fallback);
  // npu-sim: decode through the fused plan, or op by op; either way said once, here.
  if (const auto fused = devices->fused_decode(*lm, resolve_npu_weights(o.llm)))
    std::fprintf(stderr, "%s", fused->placement_text().c_str());
  return [&o, lm, devices, backends](const nlohmann::json& history, uint64_t seed) {
    GenerateRequest req = make_request(o.llm, encode_prompt(*lm, lm->render_chat(history)));
    req.sampling.seed = seed;
    req.backends = backends;
    req.fused_decode = devices->fused;
    return generate(*lm, req, [](const GeneratedPiece& p) {
      std::fwrite(p.text.data(), 1, p.text.size(), stdout);
      std::fflush(stdout);
      return true;
    });
  };
}

// Replies from a running server (POST /v1/chat/completions, streamed).
ReplyFn server_replies(const ChatCliOptions& o, ServerClient server, std::string& banner) {
  banner = o.llm.model + " on the server at " + server.url();
  return [&o, server](const nlohmann::json& history, uint64_t seed) mutable {
    nlohmann::json body = llm_request_json(o.llm, seed);
    body["messages"] = history;
    body["stream"] = true;
    body["stream_options"] = {{"include_usage", true}};
    GenerateResult r;
    try {
      server.post_stream("/v1/chat/completions", body, [&](const nlohmann::json& event) {
        const std::string text = streamed_text(event);
        std::fwrite(text.data(), 1, text.size(), stdout);
        std::fflush(stdout);
        r.text += text;
        const nlohmann::json& c = event.value("choices", nlohmann::json::array());
        if (!c.empty() && c[0].contains("finish_reason") && c[0]["finish_reason"].is_string())
          r.finish_reason = c[0]["finish_reason"];
        if (event.contains("usage") && event["usage"].is_object())
          r.completion_tokens = event["usage"].value("completion_tokens", int64_t{0});
      });
    } catch (const ServerError& e) {
      if (e.code == "context_length_exceeded") throw std::invalid_argument(e.what());
      throw;
    }
    return r;
  };
}

void run_chat(const ChatCliOptions& o) {
  std::string banner;
  std::optional<ServerClient> server = choose_server("chat", o.llm.server, o.llm.model, llm_in_process_reason(o.llm));
  const ReplyFn reply = server ? server_replies(o, *server, banner) : local_replies(o, banner);
  const bool interactive = isatty(STDIN_FILENO);

  nlohmann::json history = nlohmann::json::array();
  const auto reset = [&] {
    history = nlohmann::json::array();
    if (!o.system.empty()) history.push_back({{"role", "system"}, {"content", o.system}});
  };
  reset();
  if (interactive)
    std::fprintf(stderr, "npu chat: %s. /reset starts over, /exit quits.\n", banner.c_str());
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
    // Reproducible with --seed, yet not the same draw every turn.
    const uint64_t seed = o.llm.seed ? *o.llm.seed + turn : std::random_device{}();
    GenerateResult r;
    try {
      r = reply(history, seed);
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
