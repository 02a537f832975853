// The server's bad-input matrix (issue 7): one in-process server with tiny fixture models (the BERT
// embedder, the chat LLM, a manifest-only whisper for the upload checks that come before any model
// is loaded), and a table of requests, each with the HTTP status, the OpenAI error code and a piece
// of the message it must get. After every case the same server must still answer a valid
// embeddings request and a valid greedy completion with the fixture's reference outputs.
#include <gtest/gtest.h>
#include <httplib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "serve/server.h"
#include "server_test_util.h"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace xdna;
using xdna::test::tone_wav;

namespace {

const fs::path kEncoder = fs::path(XDNA_FIXTURE_DIR) / "encoders" / "tiny-bert-e5";
const fs::path kLlm = fs::path(XDNA_FIXTURE_DIR) / "llm" / "tiny-llama-chat";
constexpr size_t kMaxBody = 8 << 10;    // ServerOptions::max_body_bytes, small so 413 is cheap
constexpr size_t kMaxAudio = 64 << 10;  // ServerOptions::max_audio_bytes; httplib refuses past it + 1 MiB
constexpr const char* kBoundary = "xdnaMatrixBoundary42";

struct Part {
  std::string name, content, filename, type;
};

// A multipart/form-data body as a client would send it (the Content-Type is kMultipart).
std::string multipart(const std::vector<Part>& parts) {
  std::string b;
  for (const Part& p : parts) {
    // Appended piece by piece: GCC 12 warns (-Warray-bounds, a false positive) on the temporaries
    // of a chain of string + string.
    b.append("--").append(kBoundary).append("\r\nContent-Disposition: form-data; name=\"").append(p.name).append("\"");
    if (!p.filename.empty()) b.append("; filename=\"").append(p.filename).append("\"");
    b.append("\r\n");
    if (!p.type.empty()) b.append("Content-Type: ").append(p.type).append("\r\n");
    b.append("\r\n").append(p.content).append("\r\n");
  }
  return b + "--" + kBoundary + "--\r\n";
}
const std::string kMultipart = std::string("multipart/form-data; boundary=") + kBoundary;


struct Case {
  std::string name;  // what is wrong, for the failure message
  std::string method, path;
  std::string content_type;  // of the body; empty: none
  std::string body;
  int status;
  std::string code;     // the error object's "code"; empty: null
  std::string message;  // a substring of the error message
  httplib::Headers headers = {};
  std::string allow = {};                  // 405: the Allow header
  bool may_drop_connection = false;        // httplib may close before reading an over-limit body
  std::function<void(const httplib::Response&)> check_ok = {};  // for the 200 cases
  bool ollama = false;  // Ollama's error shape, {"error": "message"}, and no code
};

std::string emb(const std::string& fields) { return R"({"model": "tiny-bert", )" + fields + "}"; }
std::string chat(const std::string& fields) {
  return R"({"model": "tiny-chat", "messages": [{"role": "user", "content": "hi"}], )" + fields + "}";
}
std::string cmpl(const std::string& fields) { return R"({"model": "tiny-chat", "prompt": "hi", )" + fields + "}"; }
std::string audio(std::vector<Part> extra, std::string file = tone_wav(800), std::string model = "fake-whisper") {
  std::vector<Part> parts = {{"file", std::move(file), "clip.wav", "audio/wav"}, {"model", std::move(model), "", ""}};
  for (Part& p : extra) parts.push_back(std::move(p));
  return multipart(parts);
}

std::vector<Case> matrix() {
  const std::string json_ct = "application/json";
  const std::string bad_utf8 = "\xff\xfe\xc3(";
  const std::string long_text(600, 'a');  // ~600 tokens of the char-level LLM fixture (context 128)
  std::vector<Case> c = {
      // Not JSON, or not an object.
      {"empty body", "POST", "/v1/embeddings", json_ct, "", 400, "invalid_json", "not valid JSON"},
      {"truncated JSON", "POST", "/v1/embeddings", json_ct, R"({"model": "tiny-bert", "input": )", 400, "invalid_json", "not valid JSON"},
      {"trailing garbage", "POST", "/v1/chat/completions", json_ct, chat("\"seed\": 1") + "}", 400, "invalid_json", "not valid JSON"},
      {"JSON array", "POST", "/v1/embeddings", json_ct, "[1, 2]", 400, "invalid_json", "JSON object"},
      {"JSON string", "POST", "/v1/chat/completions", json_ct, "\"hello\"", 400, "invalid_json", "JSON object"},
      {"JSON null", "POST", "/v1/completions", json_ct, "null", 400, "invalid_json", "JSON object"},
      {"form body to a JSON route", "POST", "/v1/embeddings", kMultipart, audio({}), 400, "invalid_json", "not valid JSON"},
      // Wrong field types.
      {"model as number", "POST", "/v1/embeddings", json_ct, R"({"model": 7, "input": "hi"})", 400, "missing_required_parameter", "model is required"},
      {"model as array (chat)", "POST", "/v1/chat/completions", json_ct, R"({"model": ["tiny-chat"], "messages": []})", 400, "missing_required_parameter", "model is required"},
      {"input as object", "POST", "/v1/embeddings", json_ct, emb(R"("input": {"text": "hi"})"), 400, "invalid_type", "input must be"},
      {"input array of mixed types", "POST", "/v1/embeddings", json_ct, emb(R"("input": ["a", 3])"), 400, "invalid_type", "input[1]"},
      {"token id out of vocabulary", "POST", "/v1/embeddings", json_ct, emb(R"("input": [1, 999999999999])"), 400, "invalid_token_id", "outside the vocabulary"},
      {"messages as string", "POST", "/v1/chat/completions", json_ct, R"({"model": "tiny-chat", "messages": "hi"})", 400, "invalid_value", "messages must be"},
      {"message without role", "POST", "/v1/chat/completions", json_ct, R"({"model": "tiny-chat", "messages": [{"content": "hi"}]})", 400, "invalid_value", "messages[0]"},
      {"content as number", "POST", "/v1/chat/completions", json_ct, R"({"model": "tiny-chat", "messages": [{"role": "user", "content": 5}]})", 400, "invalid_type", "content"},
      {"image content part", "POST", "/v1/chat/completions", json_ct, R"({"model": "tiny-chat", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}]}]})", 400, "unsupported_value", "only text parts"},
      {"max_tokens as string", "POST", "/v1/chat/completions", json_ct, chat(R"("max_tokens": "10")"), 400, "invalid_type", "max_tokens must be an integer"},
      {"max_tokens as float", "POST", "/v1/completions", json_ct, cmpl(R"("max_tokens": 1e30)"), 400, "invalid_type", "max_tokens must be an integer"},
      {"max_tokens zero", "POST", "/v1/completions", json_ct, cmpl(R"("max_tokens": 0)"), 400, "invalid_value", "max_tokens must be in"},
      {"stream as string", "POST", "/v1/chat/completions", json_ct, chat(R"("stream": "yes")"), 400, "invalid_type", "stream must be true or false"},
      {"prompt as object", "POST", "/v1/completions", json_ct, R"({"model": "tiny-chat", "prompt": {"a": 1}})", 400, "invalid_type", "prompt must be"},
      {"encoding_format unknown", "POST", "/v1/embeddings", json_ct, emb(R"("input": "hi", "encoding_format": "int8")"), 400, "invalid_value", "encoding_format"},
      {"dimensions as string", "POST", "/v1/embeddings", json_ct, emb(R"("input": "hi", "dimensions": "8")"), 400, "invalid_value", "dimensions must be"},
      // Missing or unknown model.
      {"missing model (embeddings)", "POST", "/v1/embeddings", json_ct, R"({"input": "hi"})", 400, "missing_required_parameter", "model is required"},
      {"missing model (chat)", "POST", "/v1/chat/completions", json_ct, R"({"messages": [{"role": "user", "content": "hi"}]})", 400, "missing_required_parameter", "model is required"},
      {"empty model", "POST", "/v1/completions", json_ct, R"({"model": "", "prompt": "hi"})", 400, "missing_required_parameter", "model is required"},
      {"unknown model (embeddings)", "POST", "/v1/embeddings", json_ct, R"({"model": "no-such-model", "input": "hi"})", 404, "model_not_found", "'no-such-model' does not exist"},
      {"unknown model (chat)", "POST", "/v1/chat/completions", json_ct, R"({"model": "no-such-model", "messages": [{"role": "user", "content": "hi"}]})", 404, "model_not_found", "does not exist"},
      {"LLM asked for embeddings", "POST", "/v1/embeddings", json_ct, R"({"model": "tiny-chat", "input": "hi"})", 400, "model_not_supported", "tiny-chat"},
      {"embedder asked to chat", "POST", "/v1/chat/completions", json_ct, R"({"model": "tiny-bert", "messages": [{"role": "user", "content": "hi"}]})", 400, "model_not_supported", "tiny-bert"},
      {"unknown model (GET)", "GET", "/v1/models/no-such-model", "", "", 404, "model_not_found", "does not exist"},
      // Missing input.
      {"missing input", "POST", "/v1/embeddings", json_ct, R"({"model": "tiny-bert"})", 400, "missing_required_parameter", "input is required"},
      {"missing messages", "POST", "/v1/chat/completions", json_ct, R"({"model": "tiny-chat"})", 400, "missing_required_parameter", "messages is required"},
      {"missing prompt", "POST", "/v1/completions", json_ct, R"({"model": "tiny-chat"})", 400, "missing_required_parameter", "prompt is required"},
      // Empty input.
      {"empty input string", "POST", "/v1/embeddings", json_ct, emb(R"("input": "")"), 400, "invalid_value", "empty string"},
      {"empty input array", "POST", "/v1/embeddings", json_ct, emb(R"("input": [])"), 400, "invalid_value", "empty array"},
      {"empty string in input array", "POST", "/v1/embeddings", json_ct, emb(R"("input": ["a", ""])"), 400, "invalid_value", "input[1] is an empty string"},
      {"empty token array", "POST", "/v1/embeddings", json_ct, emb(R"("input": [[]])"), 400, "invalid_value", "empty token array"},
      {"empty messages", "POST", "/v1/chat/completions", json_ct, R"({"model": "tiny-chat", "messages": []})", 400, "invalid_value", "non-empty array"},
      {"empty prompt", "POST", "/v1/completions", json_ct, R"({"model": "tiny-chat", "prompt": ""})", 400, "invalid_value", "prompt is an empty string"},
      // Over the context, over the body limits.
      {"prompt over the context", "POST", "/v1/completions", json_ct, R"({"model": "tiny-chat", "prompt": ")" + long_text + "\"}", 400, "context_length_exceeded", "context of 128 tokens"},
      {"messages over the context", "POST", "/v1/chat/completions", json_ct, R"({"model": "tiny-chat", "messages": [{"role": "user", "content": ")" + long_text + "\"}]}", 400, "context_length_exceeded", "context of 128 tokens"},
      {"token prompt over the context", "POST", "/v1/completions", json_ct, R"({"model": "tiny-chat", "prompt": [)" + [] { std::string s = "5"; for (int i = 0; i < 200; ++i) s += ",5"; return s; }() + "]}", 400, "context_length_exceeded", "has a context of 128"},
      {"embeddings body over max_body_bytes", "POST", "/v1/embeddings", json_ct, emb(R"("input": ")" + std::string(kMaxBody, 'a') + "\""), 413, "request_too_large", "at most 8192"},
      {"chat body over max_body_bytes", "POST", "/v1/chat/completions", json_ct, R"({"model": "tiny-chat", "messages": [{"role": "user", "content": ")" + std::string(kMaxBody, 'a') + "\"}]}", 413, "request_too_large", "at most 8192"},
      {"body over the server's payload limit", "POST", "/v1/embeddings", json_ct, emb(R"("input": ")" + std::string(kMaxAudio + (2 << 20), 'a') + "\""), 413, "request_too_large", "over the server's limit", {}, "", true},
      // Invalid UTF-8 (JSON requires UTF-8: refused by the parser).
      {"invalid UTF-8 in input", "POST", "/v1/embeddings", json_ct, emb("\"input\": \"" + bad_utf8 + "\""), 400, "invalid_json", "not valid JSON"},
      {"invalid UTF-8 in prompt", "POST", "/v1/completions", json_ct, R"({"model": "tiny-chat", "prompt": ")" + bad_utf8 + "\"}", 400, "invalid_json", "not valid JSON"},
      {"invalid UTF-8 in messages", "POST", "/v1/chat/completions", json_ct, R"({"model": "tiny-chat", "messages": [{"role": "user", "content": ")" + bad_utf8 + "\"}]}", 400, "invalid_json", "not valid JSON"},
      {"lone surrogate escape", "POST", "/v1/embeddings", json_ct, emb(R"("input": "\udc00")"), 400, "invalid_json", "not valid JSON"},
      {"invalid UTF-8 in a model path", "GET", "/v1/models/%FF%FE", "", "", 404, "model_not_found", "does not exist"},
      // Sampling parameters: out of range, and JSON's ways of not being a finite number.
      {"negative temperature", "POST", "/v1/chat/completions", json_ct, chat(R"("temperature": -0.5)"), 400, "invalid_value", "temperature must be in [0"},
      {"temperature too high", "POST", "/v1/chat/completions", json_ct, chat(R"("temperature": 2.5)"), 400, "invalid_value", "temperature must be in [0"},
      {"temperature as string", "POST", "/v1/completions", json_ct, cmpl(R"("temperature": "hot")"), 400, "invalid_type", "temperature must be a number"},
      {"temperature NaN literal", "POST", "/v1/chat/completions", json_ct, chat(R"("temperature": NaN)"), 400, "invalid_json", "not valid JSON"},
      {"temperature Infinity literal", "POST", "/v1/chat/completions", json_ct, chat(R"("temperature": Infinity)"), 400, "invalid_json", "not valid JSON"},
      {"temperature 1e999", "POST", "/v1/chat/completions", json_ct, chat(R"("temperature": 1e999)"), 400, "invalid_json", "not valid JSON"},
      {"top_p -1e999", "POST", "/v1/completions", json_ct, cmpl(R"("top_p": -1e999)"), 400, "invalid_json", "not valid JSON"},
      {"negative top_p", "POST", "/v1/completions", json_ct, cmpl(R"("top_p": -0.1)"), 400, "invalid_value", "top_p must be in [0"},
      {"top_p over 1", "POST", "/v1/chat/completions", json_ct, chat(R"("top_p": 1.5)"), 400, "invalid_value", "top_p must be in [0"},
      {"negative top_k", "POST", "/v1/chat/completions", json_ct, chat(R"("top_k": -3)"), 400, "invalid_value", "top_k must be in"},
      {"frequency_penalty out of range", "POST", "/v1/chat/completions", json_ct, chat(R"("frequency_penalty": 9)"), 400, "invalid_value", "frequency_penalty"},
      {"n = 2", "POST", "/v1/chat/completions", json_ct, chat(R"("n": 2)"), 400, "unsupported_value", "n = 2"},
      {"max_tokens over int64", "POST", "/v1/completions", json_ct, cmpl(R"("max_tokens": 18446744073709551615)"), 400, "invalid_value", "max_tokens must be at most"},
      {"stop list too long", "POST", "/v1/chat/completions", json_ct, chat(R"("stop": ["a", "b", "c", "d", "e"])"), 400, "invalid_value", "stop must be"},
      {"unsupported response_format", "POST", "/v1/chat/completions", json_ct, chat(R"("response_format": {"type": "json_schema", "json_schema": {}})"), 400, "unsupported_value", "response_format"},
      {"response_format as string", "POST", "/v1/chat/completions", json_ct, chat(R"("response_format": "json")"), 400, "invalid_type", "response_format"},
      // Uploads.
      {"audio as JSON", "POST", "/v1/audio/transcriptions", json_ct, R"({"model": "fake-whisper", "file": "/etc/passwd"})", 400, "invalid_request", "multipart"},
      {"multipart without a file", "POST", "/v1/audio/transcriptions", kMultipart, multipart({{"model", "fake-whisper", "", ""}}), 400, "missing_required_parameter", "file is required"},
      {"multipart with no parts", "POST", "/v1/audio/translations", kMultipart, std::string("--") + kBoundary + "--\r\n", 400, "", "HTTP status 400"},
      {"malformed multipart", "POST", "/v1/audio/transcriptions", kMultipart, "--not-the-boundary\r\nhello", 400, "", ""},
      {"empty upload", "POST", "/v1/audio/transcriptions", kMultipart, audio({}, ""), 400, "invalid_file", "is empty"},
      {"text upload", "POST", "/v1/audio/transcriptions", kMultipart, audio({}, "this is plain text, not audio"), 400, "invalid_file", "clip.wav"},
      {"corrupt WAV (header cut)", "POST", "/v1/audio/transcriptions", kMultipart, audio({}, tone_wav(800).substr(0, 30)), 400, "invalid_file", "file: "},
      {"WAV with a zero sample rate", "POST", "/v1/audio/translations", kMultipart, audio({}, [] { std::string w = tone_wav(800); w.replace(24, 4, 4, '\0'); return w; }()), 400, "invalid_file", "file: "},
      {"WAV with zero channels", "POST", "/v1/audio/transcriptions", kMultipart, audio({}, [] { std::string w = tone_wav(800); w.replace(22, 2, 2, '\0'); return w; }()), 400, "invalid_file", "file: "},
      {"random bytes upload", "POST", "/v1/audio/transcriptions", kMultipart, audio({}, [] { std::string s(4096, 0); uint32_t x = 7; for (char& ch : s) { x = x * 1664525u + 1013904223u; ch = static_cast<char>(x >> 24); } return s; }()), 400, "invalid_file", "file: "},
      {"upload over max_audio_bytes", "POST", "/v1/audio/transcriptions", kMultipart, audio({}, std::string(kMaxAudio + 1, 'x')), 413, "request_too_large", "at most 65536"},
      {"upload without model", "POST", "/v1/audio/transcriptions", kMultipart, multipart({{"file", tone_wav(800), "a.wav", "audio/wav"}}), 400, "missing_required_parameter", "model is required"},
      {"upload, unknown model", "POST", "/v1/audio/transcriptions", kMultipart, audio({}, tone_wav(800), "no-such-model"), 404, "model_not_found", "does not exist"},
      {"upload, embedder as ASR model", "POST", "/v1/audio/transcriptions", kMultipart, audio({}, tone_wav(800), "tiny-bert"), 400, "model_not_supported", "tiny-bert"},
      {"upload, temperature not a number", "POST", "/v1/audio/transcriptions", kMultipart, audio({{"temperature", "hot", "", ""}}), 400, "invalid_value", "temperature must be a number"},
      {"upload, temperature nan", "POST", "/v1/audio/transcriptions", kMultipart, audio({{"temperature", "nan", "", ""}}), 400, "invalid_value", "temperature must be a number"},
      {"upload, temperature inf", "POST", "/v1/audio/transcriptions", kMultipart, audio({{"temperature", "inf", "", ""}}), 400, "invalid_value", "temperature must be a number"},
      {"upload, negative temperature", "POST", "/v1/audio/transcriptions", kMultipart, audio({{"temperature", "-1", "", ""}}), 400, "invalid_value", "temperature must be a number"},
      {"upload, unsupported response_format", "POST", "/v1/audio/transcriptions", kMultipart, audio({{"response_format", "tsv", "", ""}}), 400, "invalid_value", "response_format 'tsv'"},
      {"upload, word timestamps", "POST", "/v1/audio/transcriptions", kMultipart, audio({{"timestamp_granularities[]", "word", "", ""}}), 400, "invalid_value", "word needs response_format verbose_json"},
      {"upload, language on translations", "POST", "/v1/audio/translations", kMultipart, audio({{"language", "de", "", ""}}), 400, "unsupported_parameter", "language"},
      {"upload, invalid UTF-8 model", "POST", "/v1/audio/transcriptions", kMultipart, audio({}, tone_wav(800), "m\xff\xfe"), 404, "model_not_found", "does not exist"},
      {"upload, invalid UTF-8 response_format", "POST", "/v1/audio/transcriptions", kMultipart, audio({{"response_format", "j\xffson", "", ""}}), 400, "invalid_value", "response_format"},
      {"upload, invalid UTF-8 file name", "POST", "/v1/audio/transcriptions", kMultipart, multipart({{"file", "", "\xff\xfe.wav", "audio/wav"}, {"model", "fake-whisper", "", ""}}), 400, "invalid_file", "is empty"},
      // Routes and methods.
      {"unknown route", "GET", "/v1/nope", "", "", 404, "not_found", "no route for GET /v1/nope"},
      {"unknown POST route", "POST", "/v2/embeddings", json_ct, emb(R"("input": "hi")"), 404, "not_found", "no route"},
      {"GET on a POST route", "GET", "/v1/embeddings", "", "", 405, "method_not_allowed", "not allowed", {}, "POST"},
      {"PUT on a POST route", "PUT", "/v1/chat/completions", json_ct, chat(R"("seed": 1)"), 405, "method_not_allowed", "not allowed", {}, "POST"},
      {"DELETE on a GET route", "DELETE", "/v1/models", "", "", 405, "method_not_allowed", "not allowed", {}, "GET"},
      {"POST on a GET route", "POST", "/health", json_ct, "{}", 405, "method_not_allowed", "not allowed", {}, "GET"},
  };
  // Model names that are paths: refused by name, never looked up on disk (a real model sits at
  // ../outside-model, next to the store).
  for (const std::string name : {"../outside-model", "..", ".", "/etc/passwd", "a/b", "tiny-bert/../tiny-bert",
                                 "..\\outside-model", "~/outside-model", "tiny-bert/", "TINY-BERT"}) {
    const std::string quoted = json(name).dump();
    c.push_back({"embeddings model " + quoted, "POST", "/v1/embeddings", json_ct,
                 R"({"model": )" + quoted + R"(, "input": "hi"})", 404, "model_not_found", "does not exist"});
    c.push_back({"chat model " + quoted, "POST", "/v1/chat/completions", json_ct,
                 R"({"model": )" + quoted + R"(, "messages": [{"role": "user", "content": "hi"}]})", 404,
                 "model_not_found", "does not exist"});
    c.push_back({"audio model " + quoted, "POST", "/v1/audio/transcriptions", kMultipart, audio({}, tone_wav(800), name),
                 404, "model_not_found", "does not exist"});
  }
  // (The message stops at the NUL: exceptions carry C strings.)
  c.push_back({"model name with NUL", "POST", "/v1/embeddings", json_ct, R"({"model": "tiny-bert\u0000x", "input": "hi"})",
               404, "model_not_found", "The model 'tiny-bert"});
  c.push_back({"GET model ../outside-model", "GET", "/v1/models/..%2Foutside-model", "", "", 404, "model_not_found",
               "does not exist"});
  // Accepted, with limits the server applies itself.
  c.push_back({"huge max_tokens: stops at the context", "POST", "/v1/completions", json_ct,
               cmpl(R"("max_tokens": 9223372036854775807, "temperature": 0)"), 200, "", "", {}, "", false,
               [](const httplib::Response& r) {
                 const json j = json::parse(r.body);
                 EXPECT_EQ(j["choices"][0]["finish_reason"], "length") << r.body;
                 EXPECT_LE(j["usage"]["total_tokens"].get<int>(), 128) << r.body;
                 EXPECT_GT(j["usage"]["completion_tokens"].get<int>(), 0) << r.body;
               }});
  c.push_back({"embeddings input over the context: cut, and said so", "POST", "/v1/embeddings", json_ct,
               emb(R"("input": ")" + [] { std::string s; for (int i = 0; i < 300; ++i) s += "a b "; return s; }() + "\""), 200, "", "", {}, "",
               false, [](const httplib::Response& r) {
                 EXPECT_EQ(r.get_header_value("X-Npu-Truncated"), "0");
                 EXPECT_EQ(json::parse(r.body)["data"][0]["embedding"].size(), 32u);
               }});
  c.push_back({"response_format text is fine", "POST", "/v1/chat/completions", json_ct,
               chat(R"("response_format": {"type": "text"}, "max_tokens": 2)"), 200, "", "", {}, "", false,
               [](const httplib::Response& r) { EXPECT_EQ(json::parse(r.body)["usage"]["completion_tokens"], 2); }});
  // Ollama's API (/api/*): the same kinds of mistakes, answered in Ollama's error shape.
  const auto ollama = [&](std::string name, std::string path, std::string body, int status, std::string message) {
    Case k{std::move(name), "POST", std::move(path), json_ct, std::move(body), status, "", std::move(message)};
    k.ollama = true;
    c.push_back(std::move(k));
  };
  ollama("ollama: invalid JSON", "/api/embed", "{\"model\": ", 400, "not valid JSON");
  ollama("ollama: JSON array", "/api/chat", "[]", 400, "JSON object");
  ollama("ollama: missing model", "/api/embed", R"({"input": "hi"})", 400, "model is required");
  ollama("ollama: model as number", "/api/generate", R"({"model": 3, "prompt": "hi"})", 400, "model must be a string");
  ollama("ollama: unknown model", "/api/embed", R"({"model": "no-such-model", "input": "hi"})", 404, "not found");
  ollama("ollama: unknown tag", "/api/generate", R"({"model": "tiny-chat:7b", "prompt": "hi"})", 404, "not found");
  ollama("ollama: model ../outside-model", "/api/embed", R"({"model": "../outside-model", "input": "hi"})", 404, "not found");
  ollama("ollama: model a/b (show)", "/api/show", R"({"model": "a/b"})", 404, "not found");
  ollama("ollama: invalid UTF-8 input", "/api/embed", "{\"model\": \"tiny-bert\", \"input\": \"" + bad_utf8 + "\"}", 400, "not valid JSON");
  ollama("ollama: body over max_body_bytes", "/api/embed", emb(R"("input": ")" + std::string(kMaxBody, 'a') + "\""), 413, "at most 8192");
  ollama("ollama: messages not an array", "/api/chat", R"({"model": "tiny-chat", "messages": "hi", "stream": false})", 400, "messages");
  ollama("ollama: negative temperature", "/api/chat", R"({"model": "tiny-chat", "messages": [{"role": "user", "content": "hi"}], "stream": false, "options": {"temperature": -1}})", 400, "options.temperature");
  ollama("ollama: top_p 1e999", "/api/generate", R"({"model": "tiny-chat", "prompt": "hi", "options": {"top_p": 1e999}})", 400, "not valid JSON");
  ollama("ollama: options not an object", "/api/generate", R"({"model": "tiny-chat", "prompt": "hi", "stream": false, "options": [1]})", 400, "options must be an object");
  ollama("ollama: JSON format", "/api/generate", R"({"model": "tiny-chat", "prompt": "hi", "stream": false, "format": "json"})", 400, "format");
  ollama("ollama: prompt over the context", "/api/generate", R"({"model": "tiny-chat", "stream": false, "prompt": ")" + long_text + "\"}", 400, "context of 128");
  ollama("ollama: embedder asked to chat", "/api/chat", R"({"model": "tiny-bert", "messages": [{"role": "user", "content": "hi"}], "stream": false})", 400, "tiny-bert");
  ollama("ollama: LLM asked to embed", "/api/embed", R"({"model": "tiny-chat", "input": "hi"})", 400, "tiny-chat");
  return c;
}

class BadInputMatrix : public test::ServerSuite<BadInputMatrix> {
 protected:
  static void SetUpTestSuite() {
    dir_ = test::make_temp_dir("xdna-bad-input");
    const fs::path store = dir_ / "models";
    test::add_store_model(store, "tiny-bert", "bert", "safetensors", "f32", kEncoder, /*list_files=*/true);
    test::add_store_model(store, "tiny-chat", "llama", "safetensors", "f32", kLlm);
    test::add_store_model(store, "fake-whisper", "whisper", "ctranslate2", "f16");  // manifest only
    // A loadable model outside the store: a name that reached it would load it (200, not 404).
    test::add_store_model(dir_, "outside-model", "bert", "safetensors", "f32", kEncoder, /*list_files=*/true);
    const json enc = json::parse(std::ifstream(kEncoder / "reference.json"));
    embed_text_ = enc["inputs"][0]["text"];
    embed_ref_ = enc["inputs"][0]["embedding"].get<std::vector<float>>();
    const json llm = json::parse(std::ifstream(kLlm / "reference.json"));
    prompt_ = llm["cases"][0]["prompt"];
    greedy_ = llm["cases"][0]["greedy_text"];
    serve::ServerOptions opts;
    opts.store_dir = store.string();
    opts.max_body_bytes = kMaxBody;
    opts.max_audio_bytes = kMaxAudio;
    opts.log_requests = false;
    server_ = std::make_unique<test::RunningServer>(opts);
  }

  httplib::Result send(const Case& k) {
    const char* ct = k.content_type.empty() ? "text/plain" : k.content_type.c_str();
    if (k.method == "GET") return client_->Get(k.path.c_str(), k.headers);
    if (k.method == "POST") return client_->Post(k.path.c_str(), k.headers, k.body, ct);
    if (k.method == "PUT") return client_->Put(k.path.c_str(), k.headers, k.body, ct);
    if (k.method == "DELETE") return client_->Delete(k.path.c_str(), k.headers, k.body, ct);
    ADD_FAILURE() << "no client call for method " << k.method;
    return client_->Get("/health");
  }

  // The server still does real work: the fixture's reference embedding and greedy completion.
  void expect_still_correct(const std::string& after) {
    SCOPED_TRACE("the valid requests after case: " + after);
    const auto e = client_->Post("/v1/embeddings", json{{"model", "tiny-bert"}, {"input", embed_text_}}.dump(),
                                 "application/json");
    ASSERT_TRUE(e) << "no answer: " << httplib::to_string(e.error());
    ASSERT_EQ(e->status, 200) << e->body;
    const std::vector<float> v = json::parse(e->body)["data"][0]["embedding"].get<std::vector<float>>();
    ASSERT_EQ(v.size(), embed_ref_.size());
    double ab = 0, aa = 0, bb = 0;
    for (size_t i = 0; i < v.size(); ++i)
      ab += double(v[i]) * embed_ref_[i], aa += double(v[i]) * v[i], bb += double(embed_ref_[i]) * embed_ref_[i];
    EXPECT_GT(ab / std::sqrt(aa * bb), 0.9999);

    const auto g = client_->Post(
        "/v1/completions",
        json{{"model", "tiny-chat"}, {"prompt", prompt_}, {"temperature", 0}, {"max_tokens", 6}}.dump(),
        "application/json");
    ASSERT_TRUE(g) << "no answer: " << httplib::to_string(g.error());
    ASSERT_EQ(g->status, 200) << g->body;
    const json j = json::parse(g->body);
    EXPECT_EQ(j["usage"]["completion_tokens"], 6);
    const std::string text = j["choices"][0]["text"];
    EXPECT_FALSE(text.empty());
    EXPECT_TRUE(greedy_.starts_with(text)) << text << " is not the start of the reference " << greedy_;
  }

  static inline std::string embed_text_, prompt_, greedy_;
  static inline std::vector<float> embed_ref_;
};

TEST_F(BadInputMatrix, EveryCaseGetsItsErrorAndTheServerStaysCorrect) {
  expect_still_correct("(none: before the matrix)");
  for (const Case& k : matrix()) {
    SCOPED_TRACE(k.name + ": " + k.method + " " + k.path);
    const httplib::Result r = send(k);
    if (!r) {
      EXPECT_TRUE(k.may_drop_connection) << "no response: " << httplib::to_string(r.error());
    } else if (k.status == 200) {
      EXPECT_EQ(r->status, 200) << r->body;
      if (r->status == 200 && k.check_ok) k.check_ok(*r);
    } else if (k.ollama) {
      EXPECT_EQ(r->status, k.status) << r->body.substr(0, 500);
      const json j = json::parse(r->body, nullptr, false);
      ASSERT_TRUE(j.is_object() && j.contains("error") && j["error"].is_string()) << r->body.substr(0, 500);
      EXPECT_NE(j["error"].get<std::string>().find(k.message), std::string::npos)
          << "message lacks '" << k.message << "': " << r->body;
    } else {
      EXPECT_EQ(r->status, k.status) << r->body.substr(0, 500);
      EXPECT_EQ(r->get_header_value("Content-Type"), "application/json");
      const json j = json::parse(r->body, nullptr, false);
      ASSERT_TRUE(j.is_object() && j.contains("error") && j["error"].is_object()) << r->body.substr(0, 500);
      const json& err = j["error"];
      ASSERT_TRUE(err["message"].is_string()) << r->body;
      EXPECT_NE(err["message"].get<std::string>().find(k.message), std::string::npos)
          << "message lacks '" << k.message << "': " << r->body;
      EXPECT_EQ(err["type"], "invalid_request_error") << r->body;
      if (!k.code.empty()) {
        EXPECT_EQ(err["code"], k.code) << r->body;
      }
      if (!k.allow.empty()) {
        EXPECT_EQ(r->get_header_value("Allow"), k.allow);
      }
    }
    expect_still_correct(k.name);
    if (HasFatalFailure()) return;
  }
}

// Nothing the matrix sent loaded a model from outside the store, and every model it did load is
// still listed by name only.
TEST_F(BadInputMatrix, NoModelOutsideTheStoreIsListed) {
  const auto r = client_->Get("/v1/models");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  std::vector<std::string> ids;
  const json list = json::parse(r->body);
  for (const json& m : list["data"]) ids.push_back(m["id"]);
  EXPECT_EQ(ids, (std::vector<std::string>{"fake-whisper", "tiny-bert", "tiny-chat"})) << r->body;
  const auto o = client_->Post("/v1/embeddings", R"({"model": "outside-model", "input": "hi"})", "application/json");
  ASSERT_TRUE(o);
  EXPECT_EQ(o->status, 404) << o->body;
}

}  // namespace
