// OpenAI request parsing: a JSON body or a multipart form -> the request struct the route runs,
// or an ApiError carrying the HTTP status and OpenAI's error code/param. Pure functions with no
// model or server access, so the fuzzers (tests/fuzz) can drive them with arbitrary bytes.
// What is checked here is only what needs no model: vocabularies, dimensions and context
// lengths are checked by the routes once the model is known.
#pragma once
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "pipeline/sampler.h"
#include "pipeline/transcribe.h"

namespace xdna::serve {

// A request the server rejects: status, message and OpenAI's code/param.
struct ApiError : std::runtime_error {
  ApiError(int status, const std::string& message, std::string code, std::string param = "")
      : std::runtime_error(message), status(status), code(std::move(code)), param(std::move(param)) {}
  int status;
  std::string code, param;
};

// POST /v1/embeddings
struct EmbeddingsRequest {
  std::string model;
  bool tokens = false;                       // input given as token ids, not text
  std::vector<std::string> texts;            // when !tokens
  std::vector<std::vector<int64_t>> ids;     // when tokens; checked against the vocabulary later
  // Image inputs for a vision model: an item that is a data URL "data:image/<type>;base64,<data>",
  // or {"type": "image_url", "image_url": {"url": <data URL>}}. The decoded file bytes, in order.
  std::vector<std::string> images;
  std::optional<size_t> first_text, first_image;  // input index of the first text / image item
  bool base64 = false;
  std::optional<int64_t> dimensions;
};
EmbeddingsRequest parse_embeddings_request(const std::string& body);

// POST /v1/chat/completions (chat) and POST /v1/completions
struct CompletionRequest {
  bool chat = false;
  std::string model;
  nlohmann::json messages;          // chat: [{"role", "content"}], content flattened to a string
  std::string prompt;               // completions: the prompt text ...
  std::vector<int32_t> prompt_ids;  // ... or its token ids (-1 for one outside int32)
  bool prompt_is_ids = false;
  int64_t max_tokens = 0;           // 0 = until the context is full
  SamplingParams sampling;          // seed drawn at random when the request gives none
  std::vector<std::string> stop;     // (logprobs: sampling.logprobs)
  bool stream = false, include_usage = false;
};
CompletionRequest parse_completion_request(const std::string& body, bool chat);

// POST /v1/audio/transcriptions and /v1/audio/translations (multipart/form-data). The audio
// itself is not decoded here.
struct AudioRequest {
  std::string model, response_format = "json";
  std::string file_name;
  const std::string* audio = nullptr;  // the uploaded file's bytes (owned by the request)
  TranscribeOptions options;  // options.word_timestamps: timestamp_granularities[] has word
  bool segments = true;        // verbose_json's segments (false: timestamp_granularities[] is word only)
};
AudioRequest parse_audio_request(const httplib::Request& req, uint64_t max_audio_bytes, bool translate);

}  // namespace xdna::serve
