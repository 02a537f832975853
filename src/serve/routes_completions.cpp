// OpenAI text-generation fronts: POST /v1/chat/completions and POST /v1/completions, with
// `stream: true` as server-sent events (request, response, errors: docs/api.md).
#include <algorithm>
#include <chrono>
#include <mutex>
#include <cstdio>
#include <random>
#include <stdexcept>

#include "serve/openai_requests.h"
#include "serve/server.h"

namespace xdna::serve {

using nlohmann::json;

namespace {

std::string new_id(const char* prefix) {
  static std::mt19937_64 rng{std::random_device{}()};
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  char buf[40];
  std::snprintf(buf, sizeof buf, "%s-%016llx", prefix, static_cast<unsigned long long>(rng()));
  return buf;
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

json usage_json(const GenerateResult& r) {
  return {{"prompt_tokens", r.prompt_tokens},
          {"completion_tokens", r.completion_tokens},
          {"total_tokens", r.prompt_tokens + r.completion_tokens}};
}

// The text a single token stands for (split UTF-8 bytes come out as U+FFFD).
std::string token_str(const LanguageModel& lm, int32_t id) { return lm.tokenizer().decode({id}, false); }

// Chat form: {"token", "logprob", "bytes", "top_logprobs": [...]} per token.
json chat_logprob(const LanguageModel& lm, const TokenChoice& c) {
  const auto entry = [&](int32_t id, float lp) {
    const std::string t = token_str(lm, id);
    json bytes = json::array();
    for (char ch : t) bytes.push_back(static_cast<uint8_t>(ch));
    return json{{"token", t}, {"logprob", lp}, {"bytes", bytes}};
  };
  json e = entry(c.id, c.logprob);
  json top = json::array();
  for (const auto& [id, lp] : c.top) top.push_back(entry(id, lp));
  e["top_logprobs"] = top;
  return e;
}

// Completions (legacy) form: parallel arrays.
json completion_logprobs(const LanguageModel& lm, const std::vector<TokenChoice>& choices) {
  json tokens = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  size_t offset = 0;
  for (const TokenChoice& c : choices) {
    const std::string t = token_str(lm, c.id);
    tokens.push_back(t);
    lps.push_back(c.logprob);
    json top = json::object();
    for (const auto& [id, lp] : c.top) top[token_str(lm, id)] = lp;
    tops.push_back(top);
    offsets.push_back(offset);
    offset += t.size();
  }
  return {{"tokens", tokens}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

// What every response and chunk of one request shares.
struct ResponseHead {
  std::string id, object, model;
  int64_t created = 0;
  json with(json choices) const {
    return {{"id", id}, {"object", object}, {"created", created}, {"model", model},
            {"system_fingerprint", std::string("xdna-engine-") + kEngineVersion}, {"choices", std::move(choices)}};
  }
};

// The request's prompt as token ids, checked against the context (400 stating both lengths).
std::vector<int32_t> prompt_ids(const CompletionRequest& r, const LanguageModel& lm) {
  std::vector<int32_t> ids;
  if (r.chat) {
    if (!lm.has_chat_template())
      throw ApiError(400, "model '" + r.model + "' has no chat template; use POST /v1/completions", "unsupported_value", "model");
    std::string text;
    try {
      text = lm.render_chat(r.messages);
    } catch (const std::exception& e) {  // the template refused the conversation (roles, order)
      throw ApiError(400, std::string("messages: the model's chat template: ") + e.what(), "invalid_value", "messages");
    }
    ids = encode_prompt(lm, text);
  } else if (r.prompt_is_ids) {
    const int64_t vocab = lm.decoder().spec().vocab_size;
    for (size_t i = 0; i < r.prompt_ids.size(); ++i)
      if (r.prompt_ids[i] < 0 || r.prompt_ids[i] >= vocab)
        throw ApiError(400, "prompt[" + std::to_string(i) + "]: token id is outside the vocabulary of model '" + r.model +
                                "' [0, " + std::to_string(vocab) + ")", "invalid_token_id", "prompt");
    ids = r.prompt_ids;
  } else {
    if (r.prompt.empty()) throw ApiError(400, "prompt is an empty string", "invalid_value", "prompt");
    ids = encode_prompt(lm, r.prompt);
  }
  const int64_t n = static_cast<int64_t>(ids.size()), ctx = lm.context_length();
  if (n >= ctx)
    throw ApiError(400, "the prompt is " + std::to_string(n) + " tokens, but model '" + r.model + "' has a context of " +
                            std::to_string(ctx) + " tokens (prompt and completion together; at least one token must "
                            "be left for the completion)", "context_length_exceeded", r.chat ? "messages" : "prompt");
  return ids;
}

GenerateRequest generate_request(const CompletionRequest& r, std::vector<int32_t> ids) {
  GenerateRequest g;
  g.prompt = std::move(ids);
  g.sampling = r.sampling;
  g.max_tokens = r.max_tokens;
  g.stop = r.stop;
  return g;
}

json final_choice(const CompletionRequest& r, const LanguageModel& lm, const GenerateResult& g) {
  json choice = {{"index", 0}, {"finish_reason", g.finish_reason}, {"logprobs", nullptr}};
  if (r.chat) {
    choice["message"] = {{"role", "assistant"}, {"content", g.text}};
    if (r.sampling.logprobs) {
      json content = json::array();
      for (const TokenChoice& c : g.logprobs) content.push_back(chat_logprob(lm, c));
      choice["logprobs"] = {{"content", content}};
    }
  } else {
    choice["text"] = g.text;
    if (r.sampling.logprobs) choice["logprobs"] = completion_logprobs(lm, g.logprobs);
  }
  return choice;
}

std::string sse(const json& j) { return "data: " + j.dump() + "\n\n"; }

// Why a generation stopped at the request's deadline (`npu serve --request-timeout`).
std::string past_deadline(int64_t tokens) {
  return "the request ran past its deadline (npu serve --request-timeout); the generation was stopped after " +
         std::to_string(tokens) + " tokens";
}

// Streams one generation as server-sent events; runs inside httplib's content provider, after
// the status and headers have gone out, so failures become an error event.
void stream_generation(const CompletionRequest& r, const ResponseHead& head, std::shared_ptr<CachedLanguageModel> m,
                       const GenerateRequest& g, RequestQueue::Ticket ticket,
                       std::chrono::steady_clock::time_point deadline, httplib::DataSink& sink) {
  const LanguageModel& lm = *m->model;
  const auto send = [&](const json& j) {
    const std::string event = sse(j);
    return sink.write(event.data(), event.size());
  };
  const json usage_null = r.include_usage ? json{{"usage", nullptr}} : json::object();
  const auto chunk = [&](json choice) {
    json c = head.with(json::array({std::move(choice)}));
    c.update(usage_null);
    return c;
  };
  bool open = true;
  if (r.chat) open = send(chunk({{"index", 0}, {"delta", {{"role", "assistant"}, {"content", ""}}},
                                 {"logprobs", nullptr}, {"finish_reason", nullptr}}));
  const auto send_error_event = [&](const std::string& message, const json& code) {
    send({{"error", {{"message", message}, {"type", "server_error"}, {"param", nullptr}, {"code", code}}}});
  };
  try {
    const RequestQueue::Turn turn = m->queue.wait(std::move(ticket), deadline);
    std::vector<TokenChoice> pending;  // log-probs of tokens whose text is still held back
    bool late = false;                 // stopped at the request's deadline
    int64_t tokens = 0;
    const GenerateResult res = m->generate(g, [&](const GeneratedPiece& p) {
      if (!open) return false;
      tokens += p.token.id >= 0;
      if (std::chrono::steady_clock::now() > deadline) {
        late = true;
        return false;
      }
      if (r.sampling.logprobs && p.token.id >= 0) pending.push_back(p.token);
      if (p.text.empty()) return true;
      json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
      if (r.chat) {
        choice["delta"] = {{"content", p.text}};
        if (r.sampling.logprobs) {
          json content = json::array();
          for (const TokenChoice& c : pending) content.push_back(chat_logprob(lm, c));
          choice["logprobs"] = {{"content", content}};
        }
      } else {
        choice["text"] = p.text;
        if (r.sampling.logprobs) choice["logprobs"] = completion_logprobs(lm, pending);
      }
      pending.clear();
      open = send(chunk(std::move(choice)));
      return open;
    });
    if (!open) return;  // the client went away: generation was cancelled
    if (late) throw QueueTimeout(past_deadline(tokens));  // an error event, then [DONE]
    json last = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", res.finish_reason}};
    if (r.chat) last["delta"] = json::object();
    else last["text"] = "";
    if (!send(chunk(std::move(last)))) return;
    if (r.include_usage) {
      json u = head.with(json::array());
      u["usage"] = usage_json(res);
      if (!send(u)) return;
    }
  } catch (const QueueTimeout& e) {
    send_error_event(e.what(), "timeout");
  } catch (const std::exception& e) {
    send_error_event(e.what(), nullptr);
  }
  const std::string done = "data: [DONE]\n\n";
  sink.write(done.data(), done.size());
}

void handle_completion(Server& s, const httplib::Request& req, httplib::Response& res, bool chat) {
  if (req.body.size() > s.options().max_body_bytes)
    throw ApiError(413, "request body is " + std::to_string(req.body.size()) + " bytes; at most " +
                            std::to_string(s.options().max_body_bytes), "request_too_large");
  const CompletionRequest r = parse_completion_request(req.body, chat);
  std::shared_ptr<CachedLanguageModel> m;
  try {
    m = s.models().get_llm(r.model);
  } catch (const std::invalid_argument& e) {
    throw ApiError(400, e.what(), "model_not_supported", "model");
  }
  if (!m)
    throw ApiError(404, "The model '" + r.model + "' does not exist (GET /v1/models lists the store; `npu model pull` adds to it)",
                   "model_not_found", "model");
  const GenerateRequest g = generate_request(r, prompt_ids(r, *m->model));
  const ResponseHead head{new_id(chat ? "chatcmpl" : "cmpl"), chat ? (r.stream ? "chat.completion.chunk" : "chat.completion")
                                                                   : "text_completion",
                          r.model, unix_now()};
  if (r.stream) {
    res.set_header("Cache-Control", "no-cache");
    // A place in the model's queue is taken now, so a full queue is a 429 before any event.
    auto ticket = std::make_shared<RequestQueue::Ticket>(m->queue.admit());
    const auto deadline = s.deadline();
    res.set_chunked_content_provider("text/event-stream", [r, head, m, g, ticket, deadline](size_t, httplib::DataSink& sink) {
      stream_generation(r, head, m, g, std::move(*ticket), deadline, sink);
      sink.done();
      return true;
    });
    return;
  }
  GenerateResult out;
  {
    const auto deadline = s.deadline();
    const RequestQueue::Turn turn = m->queue.enter(deadline);
    bool late = false;  // the generation is stopped at the request's deadline (503)
    int64_t tokens = 0;
    out = m->generate(g, [&](const GeneratedPiece& p) {
      tokens += p.token.id >= 0;
      return !(late = std::chrono::steady_clock::now() > deadline);
    });
    if (late) throw QueueTimeout(past_deadline(tokens));
  }
  json body = head.with(json::array({final_choice(r, *m->model, out)}));
  body["usage"] = usage_json(out);
  set_backend_header(res, backends_of(out.report));
  send_json(res, body);
}

}  // namespace

void add_completion_routes(Server& s) {
  for (const bool chat : {true, false})
    s.post(chat ? "/v1/chat/completions" : "/v1/completions",
           openai_route([&s, chat](const httplib::Request& req, httplib::Response& res) {
             handle_completion(s, req, res, chat);
           }));
}

}  // namespace xdna::serve
