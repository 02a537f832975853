// `npu generate --prompt TEXT [--chat] [--json] ...`: one completion from the command line.
// Text mode streams the completion to stdout as it is generated; --json prints one object at the
// end (text, token ids, usage, finish_reason, timings, where the ops ran).
#include <cstdio>
#include <iostream>
#include <iterator>
#include <memory>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/llm_options.h"
#include "pipeline/embed.h"  // run_summary_json

namespace xdna::cli {

namespace {

struct GenerateCliOptions {
  LlmCliOptions llm;
  std::string prompt;
  bool prompt_given = false;
  bool chat = false;
  std::string system;
  bool json = false;
  int32_t top_logprobs = -1;  // -1 = no logprobs
};

std::string in_process_reason(const GenerateCliOptions& o) {
  if (o.json) return "--json reports this process's token ids, timings and op placement";
  if (o.top_logprobs >= 0) return "--logprobs is reported by --json of this process";
  return llm_in_process_reason(o.llm);
}

// The completion streamed from the server: the same text, token for token, as in-process.
void generate_on_server(ServerClient& server, const GenerateCliOptions& o, const std::string& prompt) {
  nlohmann::json body = llm_request_json(o.llm, o.llm.seed ? *o.llm.seed : std::random_device{}());
  std::string path = "/v1/completions";
  if (o.chat) {
    nlohmann::json messages = nlohmann::json::array();
    if (!o.system.empty()) messages.push_back({{"role", "system"}, {"content", o.system}});
    messages.push_back({{"role", "user"}, {"content", prompt}});
    body["messages"] = messages;
    path = "/v1/chat/completions";
  } else {
    body["prompt"] = prompt;
  }
  server.post_stream(path, body, [](const nlohmann::json& event) {
    const std::string text = streamed_text(event);
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
  });
  std::printf("\n");
}

void run_generate(const GenerateCliOptions& o) {
  std::string prompt = o.prompt;
  if (!o.prompt_given) {  // the prompt from stdin
    prompt.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    if (prompt.empty()) throw std::runtime_error("generate: no --prompt and nothing on stdin");
  }
  if (!o.chat && !o.system.empty()) throw std::runtime_error("generate: --system needs --chat");
  if (std::optional<ServerClient> server = choose_server("generate", o.llm.server, o.llm.model, in_process_reason(o)))
    return generate_on_server(*server, o, prompt);
  const std::unique_ptr<LanguageModel> lm = load_llm(o.llm);
  std::string text = prompt;
  if (o.chat) {
    nlohmann::json messages = nlohmann::json::array();
    if (!o.system.empty()) messages.push_back({{"role", "system"}, {"content", o.system}});
    messages.push_back({{"role", "user"}, {"content", prompt}});
    text = lm->render_chat(messages);
  } else if (!o.system.empty()) {
    throw std::runtime_error("generate: --system needs --chat");
  }
  GenerateRequest req = make_request(o.llm, encode_prompt(*lm, text));
  if (o.top_logprobs >= 0) {
    req.sampling.logprobs = true;
    req.sampling.top_logprobs = o.top_logprobs;
  }
  DeviceBackends devices;
  req.backends = devices.list(o.llm.device, o.llm.fallback);
  req.fused_decode = devices.fused_decode(*lm, resolve_npu_weights(o.llm));  // npu-sim: the fused plan if it can

  GenerateResult r = generate(*lm, req, [&](const GeneratedPiece& p) {
    if (!o.json && !p.text.empty()) {
      std::fwrite(p.text.data(), 1, p.text.size(), stdout);
      std::fflush(stdout);
    }
    return true;
  });
  devices.mark(r.report);  // a device fallback: every op is one
  const auto per_s = [](int64_t n, double ms) { return ms > 0 ? 1000.0 * double(n) / ms : 0.0; };
  if (!o.json) {
    std::printf("\n");
    if (devices.used == "npu-sim")
      std::fprintf(stderr, "%s%s", r.report.summary().c_str(), devices.sim.cost().text().c_str());
    if (o.llm.device != "host") std::fprintf(stderr, "%s", devices.placement_text().c_str());
    return;
  }
  nlohmann::json out = {
      {"model", lm->name()},
      {"prompt_text", text},
      {"prompt_ids", req.prompt},
      {"text", r.text},
      {"tokens", r.tokens},
      {"finish_reason", r.finish_reason},
      {"usage",
       {{"prompt_tokens", r.prompt_tokens},
        {"completion_tokens", r.completion_tokens},
        {"total_tokens", r.prompt_tokens + r.completion_tokens}}},
      {"timings",
       {{"prefill_ms", r.prefill_ms},
        {"decode_ms", r.decode_ms},
        {"prefill_tokens_per_s", per_s(r.prompt_tokens, r.prefill_ms)},
        // The first token comes out of the prefill; the decode phase makes the rest.
        {"decode_tokens_per_s", per_s(r.completion_tokens - 1, r.decode_ms)}}},
      {"seed", req.sampling.seed},
      {"context_length", lm->context_length()},
      {"device", o.llm.device},
      {"run", run_summary_json(r.report)},
      {"placement", devices.placement_json()},
  };
  if (req.sampling.logprobs) {
    nlohmann::json lp = nlohmann::json::array();
    for (const TokenChoice& c : r.logprobs) {
      nlohmann::json top = nlohmann::json::array();
      for (const auto& [id, l] : c.top) top.push_back({{"id", id}, {"token", lm->tokenizer().id_to_token(id)}, {"logprob", l}});
      lp.push_back({{"id", c.id}, {"token", lm->tokenizer().id_to_token(c.id)}, {"logprob", c.logprob}, {"top", top}});
    }
    out["logprobs"] = lp;
  }
  if (devices.used == "npu-sim") out["npu_sim"] = devices.sim.cost().to_json();
  std::printf("%s\n", out.dump().c_str());
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto o = std::make_shared<GenerateCliOptions>();
  CLI::App* cmd = app.add_subcommand("generate", "Generate a completion of --prompt (or of stdin) with an LLM");
  add_llm_options(cmd, o->llm);
  cmd->add_option("--prompt,-p", o->prompt, "The prompt (default: all of stdin)")
      ->each([o](const std::string&) { o->prompt_given = true; });
  cmd->add_flag("--chat", o->chat, "Wrap the prompt as a user message in the model's chat template");
  cmd->add_option("--system", o->system, "System message (with --chat)");
  cmd->add_flag("--json", o->json,
                "One JSON object at the end: text, token ids, usage, finish_reason, timings, op placement");
  cmd->add_option("--logprobs", o->top_logprobs,
                  "Report each token's log-prob and N alternatives in the JSON (0..20)")
      ->check(CLI::Range(0, 20));
  cmd->callback([o] { run_generate(*o); });
}

}  // namespace xdna::cli
