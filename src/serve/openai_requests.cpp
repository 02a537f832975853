// OpenAI request parsing (see openai_requests.h); the routes run what these return.
#include "serve/openai_requests.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <random>
#include <string_view>

namespace xdna::serve {

using nlohmann::json;

namespace {

// ---- embeddings

constexpr size_t kMaxInputs = 2048;  // OpenAI's limit per request

std::vector<int64_t> token_array(const json& a, const std::string& where) {
  if (a.empty()) throw ApiError(400, where + " is an empty token array", "invalid_value", "input");
  std::vector<int64_t> ids;
  ids.reserve(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    if (!a[i].is_number_integer())
      throw ApiError(400, where + "[" + std::to_string(i) + "] is not an integer token id (input mixes types?)",
                     "invalid_type", "input");
    // Unsigned values above int64 would wrap: anything that large is out of any vocabulary.
    ids.push_back(a[i].is_number_unsigned() && a[i].get<uint64_t>() > INT64_MAX ? INT64_MAX : a[i].get<int64_t>());
  }
  return ids;
}

// Standard base64 (RFC 4648, padding optional, no whitespace). nullopt when it is not.
std::optional<std::string> decode_base64(std::string_view text) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    return c == '+' ? 62 : c == '/' ? 63 : -1;
  };
  while (!text.empty() && text.back() == '=') text.remove_suffix(1);
  if (text.size() % 4 == 1) return std::nullopt;
  std::string out;
  out.reserve(text.size() * 3 / 4);
  uint32_t acc = 0;
  int bits = 0;
  for (char c : text) {
    const int v = value(c);
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  return out;
}

constexpr std::string_view kImageUrlPrefix = "data:image/";

// The file bytes of an image data URL ("data:image/png;base64,..."); where names the item.
std::string image_from_data_url(const std::string& url, const std::string& where) {
  const size_t comma = url.find(',');
  const std::string header = url.substr(0, comma);  // "data:image/png;base64"
  if (header.rfind(kImageUrlPrefix, 0) != 0 || comma == std::string::npos || header.size() < 7 ||
      header.compare(header.size() - 7, 7, ";base64") != 0)
    throw ApiError(400, where + " is not a base64 image data URL (data:image/<type>;base64,<data>); "
                            "image URLs other than data URLs are not fetched", "invalid_value", "input");
  std::optional<std::string> bytes = decode_base64(std::string_view(url).substr(comma + 1));
  if (!bytes || bytes->empty())
    throw ApiError(400, where + ": the data URL's payload is not valid base64", "invalid_value", "input");
  return std::move(*bytes);
}

// `input`: a string, an array of strings, an array of token ids, or an array of token-id arrays;
// strings that are image data URLs and {"type": "image_url", ...} objects are images.
void parse_input(const json& in, EmbeddingsRequest& r) {
  auto add_text = [&](const json& s, const std::string& where) {
    const std::string& text = s.get_ref<const std::string&>();
    const size_t index = r.texts.size() + r.images.size();
    if (text.rfind(kImageUrlPrefix, 0) == 0) {
      if (!r.first_image) r.first_image = index;
      r.images.push_back(image_from_data_url(text, where));
      return;
    }
    // OpenAI rejects empty strings ("'$.input' is invalid"); we do too, with a message that says which.
    if (text.empty())
      throw ApiError(400, where + " is an empty string; every input must have some text", "invalid_value", "input");
    if (!r.first_text) r.first_text = index;
    r.texts.push_back(text);
  };
  auto add_image_object = [&](const json& o, const std::string& where) {
    if (!o.contains("type") || o["type"] != "image_url" || !o.contains("image_url") || !o["image_url"].is_object() ||
        !o["image_url"].contains("url") || !o["image_url"]["url"].is_string())
      throw ApiError(400, where + " must be a string, an array of them, token ids, or an image as "
                              "{\"type\": \"image_url\", \"image_url\": {\"url\": <data URL>}}",
                     "invalid_type", "input");
    if (!r.first_image) r.first_image = r.texts.size() + r.images.size();
    r.images.push_back(image_from_data_url(o["image_url"]["url"].get<std::string>(), where));
  };
  if (in.is_string()) return add_text(in, "input");
  if (in.is_object()) return add_image_object(in, "input");
  if (!in.is_array())
    throw ApiError(400, "input must be a string, an array of strings, an array of token ids or an array of arrays of token ids",
                   "invalid_type", "input");
  if (in.empty()) throw ApiError(400, "input is an empty array; give at least one input", "invalid_value", "input");
  const json& first = in[0];
  if (first.is_number_integer()) {  // one input as token ids
    r.tokens = true;
    r.ids.push_back(token_array(in, "input"));
    return;
  }
  if (in.size() > kMaxInputs)
    throw ApiError(400, "input has " + std::to_string(in.size()) + " items; at most " + std::to_string(kMaxInputs) +
                            " per request", "too_many_inputs", "input");
  r.tokens = first.is_array();
  for (size_t i = 0; i < in.size(); ++i) {
    const std::string where = "input[" + std::to_string(i) + "]";
    if (r.tokens && in[i].is_array()) r.ids.push_back(token_array(in[i], where));
    else if (!r.tokens && in[i].is_string()) add_text(in[i], where);
    else if (!r.tokens && in[i].is_object()) add_image_object(in[i], where);
    else
      throw ApiError(400, where + " is not " + (r.tokens ? "an array of token ids" : "a string") +
                              "; all items of input must have the same form", "invalid_type", "input");
  }
}

// ---- completions

constexpr size_t kMaxStops = 4;  // OpenAI's limit

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

// ---- audio

constexpr const char* kFormats = "json, text, srt, verbose_json, vtt";

// A text field of the form; empty when absent.
std::string field(const httplib::Request& req, const char* name) {
  return req.has_file(name) ? req.get_file_value(name).content : std::string();
}

}  // namespace

EmbeddingsRequest parse_embeddings_request(const std::string& body) {
  const json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw ApiError(400, "the request body is not valid JSON", "invalid_json", "");
  if (!j.is_object()) throw ApiError(400, "the request body must be a JSON object", "invalid_json", "");
  EmbeddingsRequest r;
  if (!j.contains("model") || !j["model"].is_string() || j["model"].get_ref<const std::string&>().empty())
    throw ApiError(400, "model is required: the name of an embedding model in the store (GET /v1/models)",
                   "missing_required_parameter", "model");
  r.model = j["model"];
  if (!j.contains("input") || j["input"].is_null())
    throw ApiError(400, "input is required", "missing_required_parameter", "input");
  parse_input(j["input"], r);
  if (j.contains("encoding_format") && !j["encoding_format"].is_null()) {
    const json& f = j["encoding_format"];
    if (f != "float" && f != "base64")
      throw ApiError(400, "encoding_format must be \"float\" or \"base64\", not " + f.dump(), "invalid_value",
                     "encoding_format");
    r.base64 = f == "base64";
  }
  if (j.contains("dimensions") && !j["dimensions"].is_null()) {
    const json& d = j["dimensions"];
    if (!d.is_number_integer() || d.get<int64_t>() < 1)
      throw ApiError(400, "dimensions must be a positive integer, not " + d.dump(), "invalid_value", "dimensions");
    r.dimensions = d.get<int64_t>();
  }
  // `user` is accepted and ignored, as are fields this server does not know.
  return r;
}

CompletionRequest parse_completion_request(const std::string& body, bool chat) {
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
    if (present(j, "logprobs")) s.logprobs = bool_field(j, "logprobs");
    if (present(j, "top_logprobs")) {
      s.top_logprobs = static_cast<int32_t>(int_field(j, "top_logprobs", 0, 20));
      if (!s.logprobs) throw ApiError(400, "top_logprobs needs logprobs: true", "invalid_value", "top_logprobs");
    }
  } else if (present(j, "logprobs")) {  // completions: the number of alternatives, 0..5
    s.top_logprobs = static_cast<int32_t>(int_field(j, "logprobs", 0, 5));
    s.logprobs = true;
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
  // response_format: plain text only; JSON modes would need constrained decoding, and output that
  // merely looks like it honoured them would be a fake result.
  if (present(j, "response_format")) {
    const json& rf = j["response_format"];
    if (!rf.is_object() || !rf.contains("type") || !rf["type"].is_string())
      throw ApiError(400, "response_format must be an object like {\"type\": \"text\"}, not " + rf.dump(),
                     "invalid_type", "response_format");
    if (rf["type"] != "text")
      throw ApiError(400, "response_format type " + rf["type"].dump() + " is not supported (only \"text\"; no "
                              "constrained JSON output)", "unsupported_value", "response_format");
  }
  return r;  // user and fields this server does not know are ignored
}

AudioRequest parse_audio_request(const httplib::Request& req, uint64_t max_audio_bytes, bool translate) {
  if (!req.is_multipart_form_data())
    throw ApiError(400, "the request must be multipart/form-data with a `file` part (and `model`)",
                   "invalid_request");
  AudioRequest r;
  auto file = req.files.find("file");
  if (file == req.files.end())
    throw ApiError(400, "file is required: the audio to transcribe, as a multipart file part",
                   "missing_required_parameter", "file");
  r.audio = &file->second.content;
  r.file_name = file->second.filename.empty() ? "upload" : file->second.filename;
  if (r.audio->size() > max_audio_bytes)
    throw ApiError(413, "file '" + r.file_name + "' is " + std::to_string(r.audio->size()) + " bytes; at most " +
                            std::to_string(max_audio_bytes), "request_too_large", "file");
  if (r.audio->empty()) throw ApiError(400, "file '" + r.file_name + "' is empty", "invalid_file", "file");

  r.model = field(req, "model");
  if (r.model.empty())
    throw ApiError(400, "model is required: the name of a speech-to-text model in the store (GET /v1/models)",
                   "missing_required_parameter", "model");

  TranscribeOptions& o = r.options;
  o.task = translate ? "translate" : "transcribe";
  o.language = field(req, "language");  // translations take none: detected, then into English
  if (translate && !o.language.empty())
    throw ApiError(400, "language is not a parameter of translations (the source language is detected)",
                   "unsupported_parameter", "language");
  o.initial_prompt = field(req, "prompt");

  if (req.has_file("response_format")) {
    r.response_format = field(req, "response_format");
    bool known = false;
    for (const char* f : {"json", "text", "srt", "verbose_json", "vtt"}) known = known || r.response_format == f;
    if (!known)
      throw ApiError(400, "response_format '" + r.response_format + "' is not one of " + kFormats,
                     "invalid_value", "response_format");
  }
  if (req.has_file("temperature")) {
    const std::string t = field(req, "temperature");
    char* end = nullptr;
    const double x = t.empty() ? NAN : std::strtod(t.c_str(), &end);
    if (t.empty() || *end != '\0' || !(x >= 0 && x <= 1))
      throw ApiError(400, "temperature must be a number in [0, 1], not '" + t + "'", "invalid_value", "temperature");
    // 0: openai-whisper's fallback ladder (raise the temperature when a window fails its
    // thresholds), as OpenAI documents; above 0: sample at that temperature only.
    if (x > 0) o.temperatures = {static_cast<float>(x)};
  }
  bool segment = false, any = false;
  for (const char* key : {"timestamp_granularities[]", "timestamp_granularities"}) {
    for (auto [it, end] = req.files.equal_range(key); it != end; ++it) {
      const std::string& g = it->second.content;
      if (g != "segment" && g != "word")
        throw ApiError(400, "timestamp_granularities: '" + g + "' is not one of segment, word", "invalid_value",
                       "timestamp_granularities");
      any = true;
      segment = segment || g == "segment";
      o.word_timestamps = o.word_timestamps || g == "word";
    }
  }
  // As OpenAI: segments unless only word was asked for; words only in verbose_json.
  r.segments = !any || segment;
  if (o.word_timestamps && r.response_format != "verbose_json")
    throw ApiError(400, "timestamp_granularities: word needs response_format verbose_json, not '" +
                            r.response_format + "'", "invalid_value", "timestamp_granularities");
  return r;
}

}  // namespace xdna::serve
