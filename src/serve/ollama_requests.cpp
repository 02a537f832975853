// Ollama request bodies -> structs (ollama_requests.h). Every refusal names the field and what
// was wrong with it, as Ollama's own errors do.
#include "serve/ollama_requests.h"

#include <cmath>
#include <limits>

namespace xdna::serve {

using nlohmann::json;

namespace {

constexpr size_t kMaxInputs = 2048;  // embedding inputs per request (as /v1/embeddings)
constexpr size_t kMaxStops = 16;

OllamaError bad(const std::string& message) { return OllamaError(400, message); }

bool present(const json& j, const char* key) { return j.contains(key) && !j[key].is_null(); }

json parse_object(const std::string& body) {
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw bad("the request body is not valid JSON");
  if (!j.is_object()) throw bad("the request body must be a JSON object");
  return j;
}

std::string string_field(const json& j, const char* key, const std::string& where = "") {
  if (!present(j, key)) return "";
  if (!j[key].is_string()) throw bad(where + key + " must be a string, not " + j[key].dump());
  return j[key].get<std::string>();
}

bool bool_field(const json& j, const char* key, bool fallback, const std::string& where = "") {
  if (!present(j, key)) return fallback;
  if (!j[key].is_boolean()) throw bad(where + key + " must be true or false, not " + j[key].dump());
  return j[key].get<bool>();
}

double number_option(const json& o, const char* key, double lo, double hi) {
  const json& v = o[key];
  if (!v.is_number()) throw bad(std::string("options.") + key + " must be a number, not " + v.dump());
  const double x = v.get<double>();
  if (!(x >= lo && x <= hi))  // also false for NaN
    throw bad(std::string("options.") + key + " must be in [" + json(lo).dump() + ", " + json(hi).dump() + "], not " +
              v.dump());
  return x;
}

int64_t int_option(const json& o, const char* key, int64_t lo, int64_t hi) {
  const json& v = o[key];
  if (!v.is_number_integer()) throw bad(std::string("options.") + key + " must be an integer, not " + v.dump());
  const bool too_big = v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi);
  const int64_t x = too_big ? hi : v.get<int64_t>();
  if (too_big || x < lo || x > hi)
    throw bad(std::string("options.") + key + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
              "], not " + v.dump());
  return x;
}

// The model the request names: "model", or "name" as older clients send it.
std::string request_model(const json& j) {
  const char* key = present(j, "model") ? "model" : "name";
  if (!present(j, key)) throw bad("model is required");
  if (!j[key].is_string()) throw bad(std::string(key) + " must be a string, not " + j[key].dump());
  return ollama_model_name(j[key].get<std::string>());
}

// Features of Ollama's generate and chat this engine does not have: refused, never ignored.
void refuse_unsupported(const json& j) {
  if (present(j, "format") && !(j["format"].is_string() && j["format"].get_ref<const std::string&>().empty()))
    throw bad("format " + j["format"].dump() + " is not supported: this server has no constrained (JSON) output");
  if (present(j, "images") && !(j["images"].is_array() && j["images"].empty()))
    throw bad("images are not supported: this server has no vision models");
  if (present(j, "tools") && !(j["tools"].is_array() && j["tools"].empty()))
    throw bad("tools are not supported: this server does not do tool calling");
  if (present(j, "think") && j["think"] != false)
    throw bad("think " + j["think"].dump() + " is not supported: this server has no thinking models");
  if (present(j, "logprobs") && j["logprobs"] != false)
    throw bad("logprobs are not supported on the Ollama API; POST /v1/chat/completions returns them");
  if (!string_field(j, "template").empty())
    throw bad("template overrides are not supported: the model's own chat template is used");
  if (!string_field(j, "suffix").empty()) throw bad("suffix (fill-in-the-middle) is not supported");
}

}  // namespace

std::string ollama_model_name(const std::string& requested) {
  if (requested.empty()) throw bad("model is required");
  const size_t colon = requested.rfind(':');
  if (colon == std::string::npos) return requested;
  const std::string name = requested.substr(0, colon), tag = requested.substr(colon + 1);
  if (tag != "latest" || name.empty())
    throw OllamaError(404, "model \"" + requested + "\" not found: this server has one version of each model, "
                                                    "named without a tag or with \":latest\"");
  return name;
}

OllamaOptions parse_ollama_options(const json& o) {
  OllamaOptions r;
  SamplingParams& s = r.sampling;
  s.temperature = kOllamaTemperature;
  s.top_k = kOllamaTopK;
  s.top_p = kOllamaTopP;
  if (o.is_null()) return r;
  if (!o.is_object()) throw bad("options must be an object, not " + o.dump());
  if (present(o, "temperature")) s.temperature = static_cast<float>(number_option(o, "temperature", 0, 100));
  if (present(o, "top_k")) s.top_k = static_cast<int32_t>(int_option(o, "top_k", 0, INT32_MAX));
  if (present(o, "top_p")) s.top_p = static_cast<float>(number_option(o, "top_p", 0, 1));
  if (present(o, "min_p")) s.min_p = static_cast<float>(number_option(o, "min_p", 0, 1));
  if (present(o, "repeat_penalty")) s.repetition_penalty = static_cast<float>(number_option(o, "repeat_penalty", 1e-3, 100));
  if (present(o, "presence_penalty")) s.presence_penalty = static_cast<float>(number_option(o, "presence_penalty", -2, 2));
  if (present(o, "frequency_penalty"))
    s.frequency_penalty = static_cast<float>(number_option(o, "frequency_penalty", -2, 2));
  if (present(o, "seed")) {
    const int64_t seed = int_option(o, "seed", INT64_MIN, INT64_MAX);
    r.random_seed = seed < 0;  // Ollama: -1 (its default) draws a seed
    if (seed >= 0) s.seed = static_cast<uint64_t>(seed);
  }
  if (present(o, "num_predict")) {
    const int64_t n = int_option(o, "num_predict", -2, INT64_MAX);
    if (n == 0) throw bad("options.num_predict must be positive, or -1 (no limit) or -2 (fill the context), not 0");
    r.max_tokens = n < 0 ? 0 : n;
  }
  if (present(o, "stop")) {
    const json& st = o["stop"];
    if (st.is_string()) r.stop.push_back(st);
    else if (st.is_array() && st.size() <= kMaxStops)
      for (const json& x : st) {
        if (!x.is_string()) throw bad("options.stop must be an array of strings, not " + st.dump());
        r.stop.push_back(x);
      }
    else throw bad("options.stop must be a string or an array of at most " + std::to_string(kMaxStops) + " strings");
    for (const std::string& x : r.stop)
      if (x.empty()) throw bad("options.stop strings must not be empty");
  }
  // Sampling methods this engine does not have change the output: refused unless off.
  if (present(o, "mirostat") && o["mirostat"] != 0) throw bad("options.mirostat is not supported (only 0, off)");
  if (present(o, "typical_p") && o["typical_p"] != 1.0)
    throw bad("options.typical_p is not supported (only 1.0, off)");
  // The rest (num_ctx, num_thread, num_gpu, repeat_last_n ...) tune Ollama's runner: ignored.
  try {
    validate(s);
  } catch (const std::invalid_argument& e) {
    throw bad(std::string("options: ") + e.what());
  }
  return r;
}

OllamaGenerateRequest parse_ollama_generate(const std::string& body) {
  const json j = parse_object(body);
  OllamaGenerateRequest r;
  r.model = request_model(j);
  refuse_unsupported(j);
  r.prompt = string_field(j, "prompt");
  r.system = string_field(j, "system");
  r.raw = bool_field(j, "raw", false);
  r.stream = bool_field(j, "stream", true);
  if (present(j, "context")) {
    const json& c = j["context"];
    if (!c.is_array()) throw bad("context must be an array of token ids, not " + c.dump());
    for (size_t i = 0; i < c.size(); ++i) {
      if (!c[i].is_number_integer()) throw bad("context[" + std::to_string(i) + "] is not an integer token id");
      r.context.push_back(c[i].is_number_unsigned() && c[i].get<uint64_t>() > INT64_MAX ? INT64_MAX : c[i].get<int64_t>());
    }
  }
  r.options = parse_ollama_options(present(j, "options") ? j["options"] : json());
  r.load_only = r.prompt.empty() && r.context.empty();
  return r;
}

OllamaChatRequest parse_ollama_chat(const std::string& body) {
  const json j = parse_object(body);
  OllamaChatRequest r;
  r.model = request_model(j);
  refuse_unsupported(j);
  r.stream = bool_field(j, "stream", true);
  if (present(j, "messages")) {
    const json& ms = j["messages"];
    if (!ms.is_array()) throw bad("messages must be an array of {\"role\", \"content\"} objects");
    for (size_t i = 0; i < ms.size(); ++i) {
      const std::string where = "messages[" + std::to_string(i) + "].";
      const json& m = ms[i];
      if (!m.is_object()) throw bad("messages[" + std::to_string(i) + "] must be an object");
      if (!present(m, "role") || !m["role"].is_string() || m["role"].get_ref<const std::string&>().empty())
        throw bad(where + "role is required (a string: system, user, assistant or tool)");
      if (present(m, "images") && !(m["images"].is_array() && m["images"].empty()))
        throw bad(where + "images are not supported: this server has no vision models");
      if (present(m, "tool_calls") && !(m["tool_calls"].is_array() && m["tool_calls"].empty()))
        throw bad(where + "tool_calls are not supported: this server does not do tool calling");
      r.messages.push_back({{"role", m["role"]}, {"content", string_field(m, "content", where)}});
    }
  }
  r.options = parse_ollama_options(present(j, "options") ? j["options"] : json());
  r.load_only = r.messages.empty();
  return r;
}

OllamaEmbedRequest parse_ollama_embed(const std::string& body) {
  const json j = parse_object(body);
  OllamaEmbedRequest r;
  r.model = request_model(j);
  if (present(j, "input")) {
    const json& in = j["input"];
    if (in.is_string()) {
      if (!in.get_ref<const std::string&>().empty()) r.inputs.push_back(in);  // "": load only, as Ollama
    } else if (in.is_array()) {
      if (in.size() > kMaxInputs)
        throw bad("input has " + std::to_string(in.size()) + " items; at most " + std::to_string(kMaxInputs) +
                  " per request");
      for (size_t i = 0; i < in.size(); ++i) {
        if (!in[i].is_string()) throw bad("input[" + std::to_string(i) + "] must be a string, not " + in[i].dump());
        if (in[i].get_ref<const std::string&>().empty())
          throw bad("input[" + std::to_string(i) + "] is an empty string; every input must have some text");
        r.inputs.push_back(in[i]);
      }
    } else {
      throw bad("input must be a string or an array of strings, not " + in.dump());
    }
  }
  r.truncate = bool_field(j, "truncate", true);
  if (present(j, "dimensions")) {
    const json& d = j["dimensions"];
    if (!d.is_number_integer() || d.get<int64_t>() < 1)
      throw bad("dimensions must be a positive integer, not " + d.dump());
    r.dimensions = d.get<int64_t>();
  }
  if (present(j, "options") && !j["options"].is_object()) throw bad("options must be an object");
  return r;
}

OllamaEmbedRequest parse_ollama_embeddings(const std::string& body) {
  const json j = parse_object(body);
  OllamaEmbedRequest r;
  r.legacy = true;
  r.model = request_model(j);
  const std::string prompt = string_field(j, "prompt");
  if (!prompt.empty()) r.inputs.push_back(prompt);
  if (present(j, "options") && !j["options"].is_object()) throw bad("options must be an object");
  return r;
}

OllamaShowRequest parse_ollama_show(const std::string& body) {
  const json j = parse_object(body);
  OllamaShowRequest r;
  r.model = request_model(j);
  r.verbose = bool_field(j, "verbose", false);
  return r;
}

}  // namespace xdna::serve
