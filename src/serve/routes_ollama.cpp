// Ollama's API, so Ollama clients work unchanged: GET /api/version, /api/tags, /api/ps,
// POST /api/show, /api/generate, /api/chat (NDJSON streams unless stream: false), /api/embed and
// the legacy /api/embeddings. Requests are parsed by serve/ollama_requests.cpp; errors are
// Ollama's {"error": "message"} with the HTTP status. Details: docs/api.md, "Ollama API".
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <set>

#include "serve/ollama_requests.h"
#include "serve/server.h"
#include "weights/gguf.h"
#include "core/sha256.h"
#include "weights/source.h"
#include "weights/text_file.h"

namespace xdna::serve {

using nlohmann::json;

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr size_t kEmbedBatch = 32;  // inputs per forward pass, bounds activations
// Models stay until evicted (LRU), never on a timer: /api/ps says so with a far expiry.
constexpr const char* kNeverExpires = "9999-12-31T23:59:59Z";

int64_t ns_since(Clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
}

std::string rfc3339(std::chrono::system_clock::time_point t) {
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
  const std::time_t secs = static_cast<std::time_t>(us / 1000000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char buf[48];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%06lldZ", tm.tm_year + 1900, tm.tm_mon + 1,
                tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, static_cast<long long>(us % 1000000));
  return buf;
}
std::string rfc3339_unix(double unix_s) {
  return rfc3339(std::chrono::system_clock::time_point(std::chrono::microseconds(static_cast<int64_t>(unix_s * 1e6))));
}
std::string now_rfc3339() { return rfc3339(std::chrono::system_clock::now()); }

void send_ollama_error(httplib::Response& res, int status, const std::string& message) {
  send_json(res, {{"error", message}}, status);
}

std::string not_found(const std::string& name) {
  return "model \"" + name + "\" not found, try pulling it first (npu model pull " + name + ")";
}

// "268.10M", "1.2B": Ollama's parameter_size.
std::string parameter_size(uint64_t n) {
  char buf[32];
  if (n >= 1000000000ull) std::snprintf(buf, sizeof buf, "%.1fB", n / 1e9);
  else if (n >= 1000000ull) std::snprintf(buf, sizeof buf, "%.2fM", n / 1e6);
  else if (n >= 1000ull) std::snprintf(buf, sizeof buf, "%.2fK", n / 1e3);
  else std::snprintf(buf, sizeof buf, "%llu", static_cast<unsigned long long>(n));
  return buf;
}

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

// What /api/tags, /api/show and /api/ps say about a store model, read from its files' headers
// (never its weights), cached by the manifest's digest.
struct ModelFacts {
  std::string digest;      // sha256 of manifest.json: changes when the model is pulled again
  uint64_t parameters = 0; // elements of every tensor; 0 when the weights could not be read
  json model_info = json::object();
  std::string chat_template;
};

// The weights of a store model directory: its .gguf, its baked file, or the directory itself.
std::string weights_path(const fs::path& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".gguf" || e.path().extension() == ".baked") return e.path().string();
  return dir.string();
}

uint64_t count_parameters(const WeightSource& w) {
  uint64_t n = 0;
  for (const TensorInfo& t : w.tensors()) {
    uint64_t e = 1;
    for (int64_t d : t.shape) e *= static_cast<uint64_t>(d);
    n += e;
  }
  return n;
}

// Ollama-style model_info keys ("<arch>.context_length" ...) from a Hugging Face config.json.
void add_config_info(json& info, const std::string& arch, const json& config) {
  const json& c = config.contains("text_config") && config["text_config"].is_object() ? config["text_config"] : config;
  const std::pair<const char*, const char*> keys[] = {
      {"max_position_embeddings", "context_length"}, {"hidden_size", "embedding_length"},
      {"num_hidden_layers", "block_count"},          {"intermediate_size", "feed_forward_length"},
      {"num_attention_heads", "attention.head_count"}, {"num_key_value_heads", "attention.head_count_kv"},
      {"vocab_size", "vocab_size"}};
  for (const auto& [from, to] : keys)
    if (c.contains(from) && c[from].is_number()) info[arch + "." + to] = c[from];
}

ModelFacts read_facts(const fs::path& dir, const Manifest& m, const std::string& digest) {
  ModelFacts f;
  f.digest = digest;
  f.model_info["general.architecture"] = m.family;
  try {
    const std::string wpath = weights_path(dir);
    if (fs::path(wpath).extension() == ".gguf") {
      const GgufFile g(wpath);
      f.parameters = count_parameters(g);
      for (const auto& [key, v] : g.kv()) {  // scalars only: the token tables are megabytes
        if (key == "tokenizer.chat_template" && v.value.is_string()) f.chat_template = v.value;
        else if (v.type != GgufType::Array && !(v.value.is_string() && v.value.get_ref<const std::string&>().size() > 256))
          f.model_info[key] = v.value;
      }
    } else {
      f.parameters = count_parameters(*open_weights(wpath));
    }
  } catch (const std::exception&) {  // a model the engine cannot read still lists; its size is unknown
  }
  if (const auto text = read_text_file(dir / "config.json")) {
    const json config = json::parse(*text, nullptr, false);
    if (config.is_object()) add_config_info(f.model_info, m.family, config);
  }
  if (const auto text = read_text_file(dir / "tokenizer_config.json"); text && f.chat_template.empty()) {
    const json tc = json::parse(*text, nullptr, false);
    if (tc.is_object() && tc.contains("chat_template")) {
      const json& t = tc["chat_template"];
      if (t.is_string()) f.chat_template = t;
      else if (t.is_array() && !t.empty() && t[0].is_object() && t[0].contains("template") && t[0]["template"].is_string())
        f.chat_template = t[0]["template"];  // named templates: the first ("default")
    }
  }
  if (f.chat_template.empty())  // newer transformers write the template to its own file
    if (const auto jinja = read_text_file(dir / "chat_template.jinja")) f.chat_template = *jinja;
  if (f.parameters) f.model_info["general.parameter_count"] = f.parameters;
  return f;
}

ModelFacts facts(const ModelStore& store, const Manifest& m) {
  static std::mutex mu;
  static std::map<std::string, ModelFacts> cache;  // name -> facts of its current manifest
  const fs::path dir = store.model_dir(m.name);
  const std::string manifest = read_text_file(dir / "manifest.json").value_or(m.name);
  const std::string digest = sha256_hex(manifest.data(), manifest.size());
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(m.name);
    if (it != cache.end() && it->second.digest == digest) return it->second;
  }
  ModelFacts f = read_facts(dir, m, digest);
  std::lock_guard<std::mutex> lock(mu);
  return cache[m.name] = std::move(f);
}

json details(const Manifest& m, const ModelFacts& f) {
  return {{"parent_model", ""},
          {"format", m.format},
          {"family", m.family},
          {"families", json::array({m.family})},
          {"parameter_size", f.parameters ? parameter_size(f.parameters) : ""},
          {"quantization_level", upper(m.precision)}};
}

// What a store model can do, by its manifest's family, as ModelCache decides which loader it takes
// (the encoder families: models/spec.h).
std::vector<std::string> capabilities(const std::string& family) {
  if (is_speech_family(family)) return {"transcription"};  // an extension: Ollama has no speech models
  for (const char* f : {"bert", "roberta", "xlm-roberta", "modernbert", "esm"})
    if (family == f) return {"embedding"};
  return {"completion"};
}

// The store model a request names (":latest" already stripped), or 404.
Manifest store_model(Server& s, const std::string& name) {
  std::optional<Manifest> m;
  if (valid_model_name(name)) m = s.store().find(name);
  if (!m) throw OllamaError(404, not_found(name));
  return *m;
}

void check_body(Server& s, const httplib::Request& req) {
  if (req.body.size() > s.options().max_body_bytes)
    throw OllamaError(413, "request body is " + std::to_string(req.body.size()) + " bytes; at most " +
                               std::to_string(s.options().max_body_bytes));
}

// ---- GET /api/tags, POST /api/show, GET /api/ps ------------------------------------------------

json tag_entry(Server& s, const Manifest& m) {
  const ModelFacts f = facts(s.store(), m);
  return {{"name", m.name + ":latest"},
          {"model", m.name + ":latest"},
          {"modified_at", rfc3339_unix(static_cast<double>(m.created))},
          {"size", m.size_bytes},
          {"digest", f.digest},
          {"details", details(m, f)}};
}

void handle_show(Server& s, const httplib::Request& req, httplib::Response& res) {
  check_body(s, req);
  const OllamaShowRequest r = parse_ollama_show(req.body);
  const Manifest m = store_model(s, r.model);
  const ModelFacts f = facts(s.store(), m);
  json body = {{"modelfile", "# npu serve: model \"" + m.name + "\" from the engine's store\nFROM " + m.name + "\n"},
               {"parameters", ""},
               {"template", f.chat_template},
               {"details", details(m, f)},
               {"model_info", f.model_info},
               {"capabilities", capabilities(m.family)},
               {"modified_at", rfc3339_unix(static_cast<double>(m.created))}};
  send_json(res, body);
}

void handle_ps(Server& s, httplib::Response& res) {
  json models = json::array();
  for (const ResidentModel& r : s.models().resident_info()) {
    json entry = {{"name", r.name + ":latest"}, {"model", r.name + ":latest"}, {"size", r.bytes}, {"size_vram", 0},
                  {"expires_at", kNeverExpires}, {"device", r.device}, {"kind", r.kind}};
    if (const auto m = s.store().find(r.name)) {
      const ModelFacts f = facts(s.store(), *m);
      entry["digest"] = f.digest;
      entry["details"] = details(*m, f);
    }
    models.push_back(std::move(entry));
  }
  send_json(res, {{"models", models}});
}

// ---- POST /api/generate, POST /api/chat ---------------------------------------------------------

struct LoadedLlm {
  std::shared_ptr<CachedLanguageModel> m;
  int64_t load_ns = 0;
};

LoadedLlm load_llm(Server& s, const std::string& name, const char* what) {
  LoadedLlm out;
  if (!valid_model_name(name)) throw OllamaError(404, not_found(name));
  const auto t0 = Clock::now();
  try {
    out.m = s.models().get_llm(name);
  } catch (const std::invalid_argument&) {
    throw OllamaError(400, "\"" + name + "\" does not support " + what + " (it is not a language model)");
  }
  if (!out.m) throw OllamaError(404, not_found(name));
  out.load_ns = ns_since(t0);
  return out;
}

std::vector<int32_t> generate_prompt(const OllamaGenerateRequest& r, const LanguageModel& lm) {
  const int64_t vocab = lm.decoder().spec().vocab_size;
  std::vector<int32_t> ids;
  for (size_t i = 0; i < r.context.size(); ++i) {
    if (r.context[i] < 0 || r.context[i] >= vocab)
      throw OllamaError(400, "context[" + std::to_string(i) + "]: token id " + std::to_string(r.context[i]) +
                                 " is outside the vocabulary of model \"" + r.model + "\" [0, " + std::to_string(vocab) + ")");
    ids.push_back(static_cast<int32_t>(r.context[i]));
  }
  std::string text;
  if (r.raw || !lm.has_chat_template()) {  // Ollama's raw mode sends the prompt as is
    text = r.raw || r.system.empty() ? r.prompt : r.system + "\n\n" + r.prompt;
  } else {
    json messages = json::array();
    if (!r.system.empty()) messages.push_back({{"role", "system"}, {"content", r.system}});
    messages.push_back({{"role", "user"}, {"content", r.prompt}});
    try {
      text = lm.render_chat(messages);
    } catch (const std::exception& e) {
      throw OllamaError(400, std::string("the model's chat template refused the prompt: ") + e.what());
    }
  }
  if (!text.empty()) {
    const std::vector<int32_t> more = encode_prompt(lm, text);
    ids.insert(ids.end(), more.begin(), more.end());
  }
  return ids;
}

std::vector<int32_t> chat_prompt(const OllamaChatRequest& r, const LanguageModel& lm) {
  if (!lm.has_chat_template())
    throw OllamaError(400, "\"" + r.model + "\" does not support chat: its files have no chat template (use /api/generate)");
  try {
    return encode_prompt(lm, lm.render_chat(r.messages));
  } catch (const std::exception& e) {  // the template refused the conversation (roles, order)
    throw OllamaError(400, std::string("messages: the model's chat template: ") + e.what());
  }
}

void check_context(const std::vector<int32_t>& ids, const LanguageModel& lm, const std::string& model) {
  const int64_t n = static_cast<int64_t>(ids.size()), ctx = lm.context_length();
  if (n >= ctx)
    throw OllamaError(400, "the prompt is " + std::to_string(n) + " tokens, but model \"" + model + "\" has a context of " +
                               std::to_string(ctx) + " tokens (prompt and response together; at least one token must "
                               "be left for the response)");
}

GenerateRequest to_generate(const OllamaOptions& o, std::vector<int32_t> ids) {
  GenerateRequest g;
  g.prompt = std::move(ids);
  g.sampling = o.sampling;
  if (o.random_seed) g.sampling.seed = std::random_device{}();
  g.max_tokens = o.max_tokens;
  g.stop = o.stop;
  return g;
}

// One generation's identity and timing, shared by its stream lines and final object.
struct Reply {
  bool chat = false;
  std::string model;
  Clock::time_point t0;
  int64_t load_ns = 0;

  json line(const std::string& text, bool done) const {
    json j = {{"model", model}, {"created_at", now_rfc3339()}};
    if (chat) j["message"] = {{"role", "assistant"}, {"content", text}};
    else j["response"] = text;
    j["done"] = done;
    return j;
  }
  json final(const GenerateResult& g, const std::string& text, bool with_context) const {
    json j = line(text, true);
    j["done_reason"] = g.finish_reason;
    if (with_context) j["context"] = g.tokens;  // prompt and response ids: a later `context` continues
    j["total_duration"] = ns_since(t0);
    j["load_duration"] = load_ns;
    j["prompt_eval_count"] = g.prompt_tokens;
    j["prompt_eval_duration"] = static_cast<int64_t>(g.prefill_ms * 1e6);
    j["eval_count"] = g.completion_tokens;
    j["eval_duration"] = static_cast<int64_t>(g.decode_ms * 1e6);
    return j;
  }
};

// Streams one generation as NDJSON inside httplib's content provider, after the headers went
// out: failures become an {"error"} line; a client gone (write fails) cancels the generation.
void stream_generation(const Reply& reply, const std::shared_ptr<CachedLanguageModel>& m, const GenerateRequest& g,
                       RequestQueue::Ticket ticket, Clock::time_point deadline, bool with_context,
                       httplib::DataSink& sink) {
  const auto send = [&](const json& j) {
    const std::string line = j.dump() + "\n";
    return sink.write(line.data(), line.size());
  };
  bool open = true;
  try {
    const RequestQueue::Turn turn = m->queue.wait(std::move(ticket), deadline);
    GenerateResult res = m->generate(g, [&](const GeneratedPiece& p) {
      if (!open) return false;
      if (p.text.empty()) return true;
      open = send(reply.line(p.text, false));
      return open;
    });
    if (!open) return;  // the client went away: generation was cancelled, its KV cache freed
    if (with_context) res.tokens.insert(res.tokens.begin(), g.prompt.begin(), g.prompt.end());
    json last = reply.final(res, "", with_context);
    last["backend"] = backends_of(res.report);  // an extension: where it ran (the header went out first)
    send(last);
  } catch (const std::exception& e) {  // a queue timeout, a failed run
    send({{"error", e.what()}});
  }
}

void handle_generation(Server& s, const httplib::Request& req, httplib::Response& res, bool chat) {
  const auto t0 = Clock::now();
  check_body(s, req);
  OllamaOptions options;
  std::string model;
  bool stream = true, load_only = false;
  OllamaGenerateRequest gr;
  OllamaChatRequest cr;
  if (chat) {
    cr = parse_ollama_chat(req.body);
    options = cr.options, model = cr.model, stream = cr.stream, load_only = cr.load_only;
  } else {
    gr = parse_ollama_generate(req.body);
    options = gr.options, model = gr.model, stream = gr.stream, load_only = gr.load_only;
  }
  const LoadedLlm loaded = load_llm(s, model, chat ? "chat" : "generate");
  const Reply reply{chat, model, t0, loaded.load_ns};
  if (load_only) {  // Ollama's way to load a model: no prompt, done_reason "load"
    json j = reply.line("", true);
    j["done_reason"] = "load";
    send_json(res, j);
    return;
  }
  const LanguageModel& lm = *loaded.m->model;
  std::vector<int32_t> ids = chat ? chat_prompt(cr, lm) : generate_prompt(gr, lm);
  check_context(ids, lm, model);
  const GenerateRequest g = to_generate(options, std::move(ids));
  const bool with_context = !chat;
  if (stream) {
    // A place in the model's queue is taken now, so a full queue is a 429 before any line.
    auto ticket = std::make_shared<RequestQueue::Ticket>(loaded.m->queue.admit());
    const auto deadline = s.deadline();
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "application/x-ndjson", [reply, m = loaded.m, g, ticket, deadline, with_context](size_t, httplib::DataSink& sink) {
          stream_generation(reply, m, g, std::move(*ticket), deadline, with_context, sink);
          sink.done();
          return true;
        });
    return;
  }
  GenerateResult out;
  {
    const RequestQueue::Turn turn = loaded.m->queue.enter(s.deadline());
    out = loaded.m->generate(g);
  }
  if (with_context) out.tokens.insert(out.tokens.begin(), g.prompt.begin(), g.prompt.end());
  set_backend_header(res, backends_of(out.report));
  send_json(res, reply.final(out, out.text, with_context));
}

// ---- POST /api/embed, POST /api/embeddings ------------------------------------------------------

void normalise(std::vector<float>& v) {
  double ss = 0;
  for (float x : v) ss += double(x) * x;
  if (ss <= 0) return;
  const float inv = static_cast<float>(1.0 / std::sqrt(ss));
  for (float& x : v) x *= inv;
}

void handle_embed(Server& s, const httplib::Request& req, httplib::Response& res, bool legacy) {
  const auto t0 = Clock::now();
  check_body(s, req);
  const OllamaEmbedRequest r = legacy ? parse_ollama_embeddings(req.body) : parse_ollama_embed(req.body);
  if (!valid_model_name(r.model)) throw OllamaError(404, not_found(r.model));
  std::shared_ptr<CachedEmbeddingModel> m;
  try {
    m = s.models().get_embedding(r.model);
  } catch (const std::invalid_argument&) {
    throw OllamaError(400, "\"" + r.model + "\" does not support embeddings (it is not an embedding model)");
  }
  if (!m) throw OllamaError(404, not_found(r.model));
  const int64_t load_ns = ns_since(t0);
  const int64_t native = m->model.dimensions();
  if (r.dimensions && *r.dimensions != native) {
    if (m->matryoshka_dimensions.empty())
      throw OllamaError(400, "model \"" + r.model + "\" does not support dimensions other than its native " +
                                 std::to_string(native) + " (it is not Matryoshka-trained)");
    if (*r.dimensions > native)
      throw OllamaError(400, "dimensions " + std::to_string(*r.dimensions) + " exceeds model \"" + r.model + "\"'s " +
                                 std::to_string(native));
  }

  std::vector<EmbeddingItem> items;
  std::string backends = "host";
  if (!r.inputs.empty()) {
    RunReport report;
    const RequestQueue::Turn turn = m->queue.enter(s.deadline());
    for (size_t b0 = 0; b0 < r.inputs.size(); b0 += kEmbedBatch) {
      const size_t b1 = std::min(r.inputs.size(), b0 + kEmbedBatch);
      EmbedResult part = m->model.embed({r.inputs.begin() + b0, r.inputs.begin() + b1});
      report.ops.insert(report.ops.end(), part.report.ops.begin(), part.report.ops.end());
      for (EmbeddingItem& it : part.items) items.push_back(std::move(it));
    }
    backends = backends_of(report);
  }
  json vectors = json::array();
  size_t tokens = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    EmbeddingItem& it = items[i];
    if (it.truncated && !r.truncate)
      throw OllamaError(400, "input[" + std::to_string(i) + "] is " + std::to_string(it.original_tokens) +
                                 " tokens, over the " + std::to_string(m->model.max_length()) + " of model \"" +
                                 r.model + "\" (truncate: true cuts it)");
    tokens += it.tokens;
    if (r.dimensions && *r.dimensions != native) it.vector.resize(static_cast<size_t>(*r.dimensions));
    if (!legacy) normalise(it.vector);  // Ollama's /api/embed returns unit vectors
    vectors.push_back(std::move(it.vector));
  }
  set_backend_header(res, backends);
  if (legacy) {
    send_json(res, {{"embedding", vectors.empty() ? json::array() : vectors[0]}});
    return;
  }
  send_json(res, {{"model", r.model},
                  {"embeddings", vectors},
                  {"total_duration", ns_since(t0)},
                  {"load_duration", load_ns},
                  {"prompt_eval_count", tokens}});
}

// Every Ollama route answers failures as {"error": message}.
template <class F>
Handler ollama_handler(F f) {
  return [f](const httplib::Request& req, httplib::Response& res) {
    try {
      f(req, res);
    } catch (const OllamaError& e) {
      send_ollama_error(res, e.status, e.what());
    } catch (const QueueFull& e) {
      res.set_header("Retry-After", std::to_string(e.retry_after_s));
      send_ollama_error(res, 429, e.what());
    } catch (const QueueTimeout& e) {
      send_ollama_error(res, 503, e.what());
    } catch (const ModelTooLarge& e) {  // the model cannot fit the server's --max-memory
      send_ollama_error(res, 507, e.what());
    } catch (const std::invalid_argument& e) {  // input the pipeline refused
      send_ollama_error(res, 400, e.what());
    } catch (const std::exception& e) {  // a model that cannot be loaded
      send_ollama_error(res, 500, e.what());
    }
  };
}

}  // namespace

void add_ollama_routes(Server& s) {
  s.get("/api/version", ollama_handler([](const httplib::Request&, httplib::Response& res) {
    send_json(res, {{"version", kEngineVersion}});
  }));
  s.get("/api/tags", ollama_handler([&s](const httplib::Request&, httplib::Response& res) {
    json models = json::array();
    for (const Manifest& m : s.store().list()) models.push_back(tag_entry(s, m));
    send_json(res, {{"models", models}});
  }));
  s.post("/api/show", ollama_handler([&s](const httplib::Request& req, httplib::Response& res) { handle_show(s, req, res); }));
  s.get("/api/ps", ollama_handler([&s](const httplib::Request&, httplib::Response& res) { handle_ps(s, res); }));
  s.post("/api/generate", ollama_handler([&s](const httplib::Request& req, httplib::Response& res) {
    handle_generation(s, req, res, /*chat=*/false);
  }));
  s.post("/api/chat", ollama_handler([&s](const httplib::Request& req, httplib::Response& res) {
    handle_generation(s, req, res, /*chat=*/true);
  }));
  s.post("/api/embed", ollama_handler([&s](const httplib::Request& req, httplib::Response& res) {
    handle_embed(s, req, res, /*legacy=*/false);
  }));
  s.post("/api/embeddings", ollama_handler([&s](const httplib::Request& req, httplib::Response& res) {
    handle_embed(s, req, res, /*legacy=*/true);
  }));
}

}  // namespace xdna::serve
