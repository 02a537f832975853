// Parsing of Ollama API request bodies (POST /api/generate, /api/chat, /api/embed, /api/embeddings,
// /api/show): pure functions from the body text to a plain struct, or an OllamaError carrying the
// HTTP status and the message of Ollama's `{"error": "..."}` object. No model or server is needed,
// so a fuzzer can drive them directly. What is accepted and refused: docs/api.md, "Ollama API".
#pragma once
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pipeline/sampler.h"

namespace xdna::serve {

// A request refused: the HTTP status (400, 404, 413 ...) and the message for {"error": message}.
struct OllamaError : std::runtime_error {
  OllamaError(int status, const std::string& message) : std::runtime_error(message), status(status) {}
  int status;
};

// Ollama's defaults where a request leaves a sampling option out (its api.DefaultOptions).
inline constexpr float kOllamaTemperature = 0.8f;
inline constexpr int32_t kOllamaTopK = 40;
inline constexpr float kOllamaTopP = 0.9f;

// `options` of /api/generate and /api/chat mapped onto the engine's generation settings.
struct OllamaOptions {
  SamplingParams sampling;     // temperature, top_k, top_p, min_p, penalties, seed
  bool random_seed = true;     // no seed (or a negative one) given: the caller draws one
  int64_t max_tokens = 0;      // num_predict; 0 = until a stop or the context is full (-1, -2)
  std::vector<std::string> stop;
};

struct OllamaGenerateRequest {
  std::string model;            // the store name (":latest" stripped)
  std::string prompt, system;
  bool raw = false;             // prompt sent as is, not through the chat template
  bool stream = true;           // Ollama streams unless told not to
  std::vector<int64_t> context; // token ids of an earlier response, prepended (checked later)
  OllamaOptions options;
  bool load_only = false;       // no prompt: load the model, answer done_reason "load"
};

struct OllamaChatRequest {
  std::string model;
  nlohmann::json messages = nlohmann::json::array();  // [{"role", "content"}], both strings
  bool stream = true;
  OllamaOptions options;
  bool load_only = false;  // no messages: load the model, answer done_reason "load"
};

struct OllamaEmbedRequest {
  std::string model;
  std::vector<std::string> inputs;  // empty: load the model, answer no embeddings
  bool truncate = true;             // false: an input over the model's length is a 400
  std::optional<int64_t> dimensions;
  bool legacy = false;              // /api/embeddings: one `prompt`, one unnormalised `embedding`
};

struct OllamaShowRequest {
  std::string model;
  bool verbose = false;
};

// "name" or "name:latest" -> "name"; another tag ("name:7b") is 404, as the store holds one
// version of each model. An empty name is 400.
std::string ollama_model_name(const std::string& requested);

OllamaOptions parse_ollama_options(const nlohmann::json& options);
OllamaGenerateRequest parse_ollama_generate(const std::string& body);
OllamaChatRequest parse_ollama_chat(const std::string& body);
OllamaEmbedRequest parse_ollama_embed(const std::string& body);       // POST /api/embed
OllamaEmbedRequest parse_ollama_embeddings(const std::string& body);  // POST /api/embeddings
OllamaShowRequest parse_ollama_show(const std::string& body);

}  // namespace xdna::serve
