// OpenAI text-generation fronts: POST /v1/chat/completions and POST /v1/completions, with
// `stream: true` as server-sent events (request, response, errors: docs/api.md).
#include <algorithm>
#include <chrono>
#include <mutex>
#include <cstdio>
#include <random>
#include <stdexcept>

#include "serve/server.h"

namespace xdna::serve {

using nlohmann::json;

namespace {

constexpr size_t kMaxStops = 4;  // OpenAI's limit

struct ApiError : std::runtime_error {
  ApiError(int status, const std::string& message, std::string code, std::string param = "")
      : std::runtime_error(message), status(status), code(std::move(code)), param(std::move(param)) {}
  int status;
  std::string code, param;
};

struct CompletionRequest {
  bool chat = false;
  std::string model;
  json messages;                    // chat: [{"role", "content"}], content flattened to a string
  std::string prompt;               // completions: the prompt text ...
  std::vector<int32_t> prompt_ids;  // ... or its token ids
  bool prompt_is_ids = false;
  int64_t max_tokens = 0;           // 0 = until the context is full
  SamplingParams sampling;
  std::vector<std::string> stop;
  bool logprobs = false;
  bool stream = false, include_usage = false;
};

bool present(const json& j, const char* key) { return j.contains(key) && !j[key].is_null(); }

double number_field(const json& j, const char* key, double lo, double hi) {
  const json& v = j[key];
  if (!v.is_number())
    throw ApiError(400, std::string(key) + " must be a number, not " + v.dump(), "invalid_type", key);
  const double x = v.get<double>();
  if (!(x >= lo && x <= hi))
    throw ApiError(400, std::string(key) + " must be in [" + json(lo).dump() + ", " + json(hi).dump() + "], not " +
                            v.dump(), "invalid_value", key);
  return x;
}

int64_t int_field(const json& j, const char* key, int64_t lo, int64_t hi) {
  const json& v = j[key];
  if (!v.is_number_integer())
    throw ApiError(400, std::string(key) + " must be an integer, not " + v.dump(), "invalid_type", key);
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi))
    throw ApiError(400, std::string(key) + " must be at most " + std::to_string(hi) + ", not " + v.dump(),
                   "invalid_value", key);
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi)
    throw ApiError(400, std::string(key) + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                            "], not " + v.dump(), "invalid_value", key);
  return x;
}

bool bool_field(const json& j, const char* key) {
  if (!j[key].is_boolean()) throw ApiError(400, std::string(key) + " must be true or false, not " + j[key].dump(),
                                           "invalid_type", key);
  return j[key].get<bool>();
}

// content: a string, or an array of parts of which only {"type": "text", "text": ...} is supported.
std::string message_content(const json& c, const std::string& where) {
  if (c.is_null()) return "";
  if (c.is_string()) return c.get<std::string>();
  if (!c.is_array()) throw ApiError(400, where + " must be a string or an array of content parts", "invalid_type", "messages");
  std::string text;
  for (size_t k = 0; k < c.size(); ++k) {
    const std::string part = where + "[" + std::to_string(k) + "]";
    if (!c[k].is_object() || c[k].value("type", std::string()) != "text" || !c[k].contains("text") ||
        !c[k]["text"].is_string())
      throw ApiError(400, part + ": only text parts ({\"type\": \"text\", \"text\": ...}) are supported",
                     "unsupported_value", "messages");
    text += c[k]["text"].get<std::string>();
  }
  return text;
}

json parse_messages(const json& j) {
  if (!present(j, "messages")) throw ApiError(400, "messages is required", "missing_required_parameter", "messages");
  const json& ms = j["messages"];
  if (!ms.is_array() || ms.empty())
    throw ApiError(400, "messages must be a non-empty array of {\"role\", \"content\"} objects", "invalid_value", "messages");
  json out = json::array();
  for (size_t i = 0; i < ms.size(); ++i) {
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!ms[i].is_object() || !ms[i].contains("role") || !ms[i]["role"].is_string())
      throw ApiError(400, where + " must be an object with a string role", "invalid_value", "messages");
    std::string role = ms[i]["role"];
    if (role == "developer") role = "system";  // OpenAI's newer name for the system message
    out.push_back({{"role", role}, {"content", message_content(ms[i].value("content", json()), where + ".content")}});
  }
  return out;
}

// prompt: a string or a token-id array; a list holding exactly one of those is accepted too.
void parse_prompt(const json& j, CompletionRequest& r) {
  if (!present(j, "prompt")) throw ApiError(400, "prompt is required", "missing_required_parameter", "prompt");
  json p = j["prompt"];
  if (p.is_array() && p.size() == 1 && (p[0].is_string() || p[0].is_array())) p = json(p[0]);
  if (p.is_string()) {
    r.prompt = p.get<std::string>();
    return;
  }
  if (p.is_array() && !p.empty() && std::all_of(p.begin(), p.end(), [](const json& x) { return x.is_number_integer(); })) {
    r.prompt_is_ids = true;
    for (const json& x : p) {
      const int64_t id = x.is_number_unsigned() && x.get<uint64_t>() > INT32_MAX ? INT64_MAX : x.get<int64_t>();
      r.prompt_ids.push_back(id < INT32_MIN || id > INT32_MAX ? -1 : static_cast<int32_t>(id));
    }
    return;
  }
  if (p.is_array() && p.size() > 1 && (p[0].is_string() || p[0].is_array()))
    throw ApiError(400, "prompt holds " + std::to_string(p.size()) + " prompts; this server takes one per request",
                   "unsupported_value", "prompt");
  throw ApiError(400, "prompt must be a string or a non-empty array of token ids", "invalid_type", "prompt");
}

CompletionRequest parse_request(const std::string& body, bool chat) {
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw ApiError(400, "the request body is not valid JSON", "invalid_json");
  if (!j.is_object()) throw ApiError(400, "the request body must be a JSON object", "invalid_json");
  CompletionRequest r;
  r.chat = chat;
  if (!present(j, "model") || !j["model"].is_string() || j["model"].get_ref<const std::string&>().empty())
    throw ApiError(400, "model is required: the name of a model in the store (GET /v1/models)",
                   "missing_required_parameter", "model");
  r.model = j["model"];
  if (chat) r.messages = parse_messages(j);
  else parse_prompt(j, r);

  if (present(j, "n") && int_field(j, "n", INT64_MIN, INT64_MAX) != 1)
    throw ApiError(400, "n = " + j["n"].dump() + " is not supported: this server returns one choice (n = 1)",
                   "unsupported_value", "n");
  if (!chat && present(j, "best_of") && int_field(j, "best_of", INT64_MIN, INT64_MAX) != 1)
    throw ApiError(400, "best_of = " + j["best_of"].dump() + " is not supported (only 1)", "unsupported_value", "best_of");
  if (!chat && present(j, "echo") && bool_field(j, "echo"))
    throw ApiError(400, "echo = true is not supported", "unsupported_value", "echo");
  if (!chat) r.max_tokens = 16;  // OpenAI's default for /v1/completions; chat: until the context is full
  for (const char* key : {"max_tokens", "max_completion_tokens"})
    if (present(j, key)) r.max_tokens = int_field(j, key, 1, INT64_MAX);

  SamplingParams& s = r.sampling;
  if (present(j, "temperature")) s.temperature = static_cast<float>(number_field(j, "temperature", 0, 2));
  if (present(j, "top_p")) s.top_p = static_cast<float>(number_field(j, "top_p", 0, 1));
  if (present(j, "top_k")) s.top_k = static_cast<int32_t>(int_field(j, "top_k", 0, INT32_MAX));
  if (present(j, "min_p")) s.min_p = static_cast<float>(number_field(j, "min_p", 0, 1));
  if (present(j, "presence_penalty")) s.presence_penalty = static_cast<float>(number_field(j, "presence_penalty", -2, 2));
  if (present(j, "frequency_penalty")) s.frequency_penalty = static_cast<float>(number_field(j, "frequency_penalty", -2, 2));
  if (present(j, "repetition_penalty"))
    s.repetition_penalty = static_cast<float>(number_field(j, "repetition_penalty", 1e-3, 100));
  if (present(j, "seed")) s.seed = static_cast<uint64_t>(int_field(j, "seed", INT64_MIN, INT64_MAX));
  else s.seed = std::random_device{}();

  if (present(j, "stop")) {
    const json& st = j["stop"];
    if (st.is_string()) r.stop.push_back(st);
    else if (st.is_array() && st.size() <= kMaxStops && std::all_of(st.begin(), st.end(), [](const json& x) { return x.is_string(); }))
      for (const json& x : st) r.stop.push_back(x);
    else
      throw ApiError(400, "stop must be a string or an array of at most " + std::to_string(kMaxStops) + " strings",
                     "invalid_value", "stop");
    for (const std::string& x : r.stop)
      if (x.empty()) throw ApiError(400, "stop strings must not be empty", "invalid_value", "stop");
  }

  if (chat) {  // logprobs: bool; top_logprobs: 0..20 alternatives
    if (present(j, "logprobs")) r.logprobs = bool_field(j, "logprobs");
    if (present(j, "top_logprobs")) {
      s.top_logprobs = static_cast<int32_t>(int_field(j, "top_logprobs", 0, 20));
      if (!r.logprobs) throw ApiError(400, "top_logprobs needs logprobs: true", "invalid_value", "top_logprobs");
    }
  } else if (present(j, "logprobs")) {  // completions: the number of alternatives, 0..5
    s.top_logprobs = static_cast<int32_t>(int_field(j, "logprobs", 0, 5));
    r.logprobs = true;
  }

  if (present(j, "stream")) r.stream = bool_field(j, "stream");
  if (present(j, "stream_options")) {
    const json& so = j["stream_options"];
    if (!so.is_object()) throw ApiError(400, "stream_options must be an object", "invalid_type", "stream_options");
    if (!r.stream) throw ApiError(400, "stream_options needs stream: true", "invalid_value", "stream_options");
    if (present(so, "include_usage")) {
      if (!so["include_usage"].is_boolean())
        throw ApiError(400, "stream_options.include_usage must be true or false", "invalid_type", "stream_options");
      r.include_usage = so["include_usage"].get<bool>();
    }
  }
  try {
    validate(s);
  } catch (const std::invalid_argument& e) {
    throw ApiError(400, e.what(), "invalid_value");
  }
  return r;  // user, response_format and fields this server does not know are ignored
}

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
  g.logprobs = r.logprobs;
  return g;
}

json final_choice(const CompletionRequest& r, const LanguageModel& lm, const GenerateResult& g) {
  json choice = {{"index", 0}, {"finish_reason", g.finish_reason}, {"logprobs", nullptr}};
  if (r.chat) {
    choice["message"] = {{"role", "assistant"}, {"content", g.text}};
    if (r.logprobs) {
      json content = json::array();
      for (const TokenChoice& c : g.logprobs) content.push_back(chat_logprob(lm, c));
      choice["logprobs"] = {{"content", content}};
    }
  } else {
    choice["text"] = g.text;
    if (r.logprobs) choice["logprobs"] = completion_logprobs(lm, g.logprobs);
  }
  return choice;
}

std::string sse(const json& j) { return "data: " + j.dump() + "\n\n"; }

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
  try {
    const RequestQueue::Turn turn = m->queue.wait(std::move(ticket), deadline);
    std::vector<TokenChoice> pending;  // log-probs of tokens whose text is still held back
    const GenerateResult res = m->generate(g, [&](const GeneratedPiece& p) {
      if (!open) return false;
      if (r.logprobs && p.token.id >= 0) pending.push_back(p.token);
      if (p.text.empty()) return true;
      json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
      if (r.chat) {
        choice["delta"] = {{"content", p.text}};
        if (r.logprobs) {
          json content = json::array();
          for (const TokenChoice& c : pending) content.push_back(chat_logprob(lm, c));
          choice["logprobs"] = {{"content", content}};
        }
      } else {
        choice["text"] = p.text;
        if (r.logprobs) choice["logprobs"] = completion_logprobs(lm, pending);
      }
      pending.clear();
      open = send(chunk(std::move(choice)));
      return open;
    });
    if (!open) return;  // the client went away: generation was cancelled
    json last = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", res.finish_reason}};
    if (r.chat) last["delta"] = json::object();
    else last["text"] = "";
    if (!send(chunk(std::move(last)))) return;
    if (r.include_usage) {
      json u = head.with(json::array());
      u["usage"] = usage_json(res);
      if (!send(u)) return;
    }
  } catch (const std::exception& e) {
    send({{"error", {{"message", e.what()}, {"type", "server_error"}, {"param", nullptr}, {"code", nullptr}}}});
  }
  const std::string done = "data: [DONE]\n\n";
  sink.write(done.data(), done.size());
}

void handle_completion(Server& s, const httplib::Request& req, httplib::Response& res, bool chat) {
  if (req.body.size() > s.options().max_body_bytes)
    throw ApiError(413, "request body is " + std::to_string(req.body.size()) + " bytes; at most " +
                            std::to_string(s.options().max_body_bytes), "request_too_large");
  const CompletionRequest r = parse_request(req.body, chat);
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
    const RequestQueue::Turn turn = m->queue.enter(s.deadline());
    out = m->generate(g);
  }
  json body = head.with(json::array({final_choice(r, *m->model, out)}));
  body["usage"] = usage_json(out);
  send_json(res, body);
}

void post_completion(Server& s, const std::string& path, bool chat) {
  s.post(path, [&s, chat](const httplib::Request& req, httplib::Response& res) {
    try {
      handle_completion(s, req, res, chat);
    } catch (const ApiError& e) {
      send_error(res, e.status, e.what(), "invalid_request_error", e.code, e.param);
    } catch (const QueueFull& e) {
      send_queue_full(res, e);
    } catch (const QueueTimeout& e) {
      send_queue_timeout(res, e);
    } catch (const std::invalid_argument& e) {  // input the pipeline refused
      send_error(res, 400, e.what(), "invalid_request_error", "invalid_value");
    }
  });
}

}  // namespace

void add_completion_routes(Server& s) {
  post_completion(s, "/v1/chat/completions", /*chat=*/true);
  post_completion(s, "/v1/completions", /*chat=*/false);
}

}  // namespace xdna::serve
