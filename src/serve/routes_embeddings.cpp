// OpenAI "embeddings" front: POST /v1/embeddings (request, response, errors: docs/api.md).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <optional>
#include <set>
#include <stdexcept>

#include "pipeline/classify.h"
#include "serve/openai_requests.h"
#include "serve/server.h"

namespace xdna::serve {

using nlohmann::json;

namespace {

constexpr size_t kBatch = 32;                   // inputs per forward pass, bounds activations

// The vector as little-endian f32 bytes in base64: what the openai client decodes.
std::string base64_f32(const std::vector<float>& v) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string bytes(v.size() * 4, '\0');
  for (size_t i = 0; i < v.size(); ++i) {
    const uint32_t u = std::bit_cast<uint32_t>(v[i]);
    for (int b = 0; b < 4; ++b) bytes[4 * i + b] = static_cast<char>((u >> (8 * b)) & 0xff);
  }
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    uint32_t w = 0;
    for (size_t k = 0; k < 3; ++k) w = (w << 8) | (k < n ? static_cast<uint8_t>(bytes[i + k]) : 0u);
    for (size_t k = 0; k < 4; ++k) out += k <= n ? kAlphabet[(w >> (18 - 6 * k)) & 63] : '=';
  }
  return out;
}

// Keeps the first `d` values and scales them back to unit length (Matryoshka truncation).
void truncate_and_renormalise(std::vector<float>& v, size_t d) {
  v.resize(d);
  double ss = 0;
  for (float x : v) ss += double(x) * x;
  if (ss <= 0) return;
  const float inv = static_cast<float>(1.0 / std::sqrt(ss));
  for (float& x : v) x *= inv;
}

void check_dimensions(const EmbeddingsRequest& r, const CachedEmbeddingModel& m) {
  if (!r.dimensions) return;
  const int64_t native = m.model.dimensions(), d = *r.dimensions;
  if (d == native) return;  // nothing to cut: valid for every model
  if (m.matryoshka_dimensions.empty())
    throw ApiError(400, "model '" + r.model + "' does not support dimensions other than its native " +
                            std::to_string(native) + ": it is not Matryoshka-trained (no matryoshka_dimensions "
                            "in its config), so a truncated vector would be meaningless",
                   "unsupported_value", "dimensions");
  if (d > native)
    throw ApiError(400, "dimensions " + std::to_string(d) + " exceeds model '" + r.model + "''s " +
                            std::to_string(native), "invalid_value", "dimensions");
}

std::vector<std::vector<int32_t>> checked_ids(const EmbeddingsRequest& r, const CachedEmbeddingModel& m) {
  const int64_t vocab = m.model.spec().vocab_size;
  std::vector<std::vector<int32_t>> out;
  for (size_t i = 0; i < r.ids.size(); ++i) {
    for (size_t k = 0; k < r.ids[i].size(); ++k) {
      const int64_t id = r.ids[i][k];
      if (id < 0 || id >= vocab)
        throw ApiError(400, "input[" + std::to_string(i) + "][" + std::to_string(k) + "]: token id " +
                                std::to_string(id) + " is outside the vocabulary of model '" + r.model + "' [0, " +
                                std::to_string(vocab) + ")", "invalid_token_id", "input");
    }
    out.emplace_back(r.ids[i].begin(), r.ids[i].end());
  }
  return out;
}

void send_embeddings(httplib::Response& res, const EmbeddingsRequest& r, std::vector<std::vector<float>>& vectors,
                     size_t prompt_tokens) {
  json data = json::array();
  for (size_t i = 0; i < vectors.size(); ++i) {
    json e = {{"object", "embedding"}, {"index", i}};
    if (r.base64) e["embedding"] = base64_f32(vectors[i]);
    else e["embedding"] = std::move(vectors[i]);
    data.push_back(std::move(e));
  }
  send_json(res, {{"object", "list"},
                  {"data", data},
                  {"model", r.model},
                  {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}});
}

// Image inputs (data URLs) on a vision model: ImageModel::embed_images, unit length. `dimensions`
// is refused unless native (no vision model here is Matryoshka-trained); usage counts 0 tokens.
void handle_image_embeddings(Server& s, const EmbeddingsRequest& r, httplib::Response& res) {
  if (r.first_text)
    throw ApiError(400, "input[" + std::to_string(*r.first_text) + "] is text, but model '" + r.model +
                            "' is a vision model: give images as data URLs (data:image/png;base64,...)",
                   "invalid_input_type", "input");
  if (r.tokens)
    throw ApiError(400, "input is token ids, but model '" + r.model + "' is a vision model: give images as data URLs",
                   "invalid_input_type", "input");
  std::shared_ptr<CachedVisionModel> m;
  try {
    m = s.models().get_vision(r.model);
  } catch (const std::invalid_argument& e) {
    throw ApiError(400, e.what(), "model_not_supported", "model");
  }
  if (!m) throw ApiError(404, "The model '" + r.model + "' does not exist", "model_not_found", "model");
  const int64_t native = m->model.dimensions();
  if (native == 0)
    throw ApiError(400, "model '" + r.model + "' (" + m->model.network().family() +
                            ") is an image classifier without an embedding output", "model_not_supported", "model");
  if (r.dimensions && *r.dimensions != native)
    throw ApiError(400, "model '" + r.model + "' gives " + std::to_string(native) +
                            "-dimensional image embeddings; other dimensions are not supported",
                   "unsupported_value", "dimensions");
  // Decode every image before queueing: a bad or oversized one fails the request alone.
  std::vector<Image> images;
  for (size_t i = 0; i < r.images.size(); ++i) {
    const std::string where = "input[" + std::to_string(*r.first_image + i) + "]";
    try {
      images.push_back(decode_image(r.images[i], where));
    } catch (const std::invalid_argument& e) {
      const bool too_big = std::string(e.what()).find("exceeds the limit") != std::string::npos;  // the pixel cap
      throw ApiError(too_big ? 413 : 400, e.what(), too_big ? "image_too_large" : "invalid_image", "input");
    }
  }
  std::vector<std::vector<float>> vectors;
  RunReport report;
  {
    const RequestQueue::Turn turn = m->queue.enter(s.deadline());
    vectors = m->model.embed_images(images, /*normalize=*/true, {}, &report);
  }
  std::set<std::string> backends;
  for (const OpRecord& op : report.ops) backends.insert(op.backend);
  std::string where;
  for (const std::string& b : backends) where += (where.empty() ? "" : ",") + b;
  set_backend_header(res, where.empty() ? "host" : where);
  send_embeddings(res, r, vectors, 0);
}

void handle_embeddings(Server& s, const httplib::Request& req, httplib::Response& res) {
  if (req.body.size() > s.options().max_body_bytes)
    throw ApiError(413, "request body is " + std::to_string(req.body.size()) + " bytes; at most " +
                            std::to_string(s.options().max_body_bytes) + " (split the inputs over several requests)",
                   "request_too_large", "");
  const EmbeddingsRequest r = parse_embeddings_request(req.body);
  const std::string family = s.models().family_of(r.model);
  if (is_vision_family(family)) return handle_image_embeddings(s, r, res);
  if (r.first_image && !family.empty())
    throw ApiError(400, "input[" + std::to_string(*r.first_image) + "] is an image, but model '" + r.model +
                            "' is a " + family + " model, not a vision model: images need one (vit, dinov2)",
                   "invalid_input_type", "input");
  std::shared_ptr<CachedEmbeddingModel> m;
  try {
    m = s.models().get_embedding(r.model);
  } catch (const std::invalid_argument& e) {
    throw ApiError(400, e.what(), "model_not_supported", "model");
  }
  if (!m)
    throw ApiError(404, "The model '" + r.model + "' does not exist (GET /v1/models lists the store; `npu model pull` adds to it)",
                   "model_not_found", "model");
  check_dimensions(r, *m);
  const std::vector<std::vector<int32_t>> ids = r.tokens ? checked_ids(r, *m) : std::vector<std::vector<int32_t>>{};

  const size_t n = r.tokens ? ids.size() : r.texts.size();
  std::vector<EmbeddingItem> items;
  std::set<std::string> backends;
  {
    const RequestQueue::Turn turn = m->queue.enter(s.deadline());
    for (size_t b0 = 0; b0 < n; b0 += kBatch) {
      const size_t b1 = std::min(n, b0 + kBatch);
      EmbedResult part = r.tokens ? m->model.embed_ids({ids.begin() + b0, ids.begin() + b1})
                                  : m->model.embed({r.texts.begin() + b0, r.texts.begin() + b1});
      for (const OpRecord& op : part.report.ops) backends.insert(op.backend);
      for (EmbeddingItem& it : part.items) items.push_back(std::move(it));
    }
  }

  json data = json::array();
  size_t prompt_tokens = 0;
  std::string truncated;
  for (size_t i = 0; i < items.size(); ++i) {
    EmbeddingItem& it = items[i];
    prompt_tokens += it.tokens;
    if (it.truncated) {
      if (!truncated.empty()) truncated += ',';
      truncated += std::to_string(i);
    }
    if (r.dimensions && *r.dimensions != m->model.dimensions())
      truncate_and_renormalise(it.vector, static_cast<size_t>(*r.dimensions));
    json e = {{"object", "embedding"}, {"index", i}};
    if (r.base64) e["embedding"] = base64_f32(it.vector);
    else e["embedding"] = it.vector;
    data.push_back(std::move(e));
  }
  std::string where;
  for (const std::string& b : backends) {
    if (!where.empty()) where += ',';
    where += b;
  }
  set_backend_header(res, where.empty() ? "host" : where);
  // Inputs cut to the model's max length: never silent.
  if (!truncated.empty()) res.set_header("X-Npu-Truncated", truncated);
  send_json(res, {{"object", "list"},
                  {"data", data},
                  {"model", r.model},
                  {"usage", {{"prompt_tokens", prompt_tokens}, {"total_tokens", prompt_tokens}}}});
}

}  // namespace

void add_embedding_routes(Server& s) {
  s.post("/v1/embeddings", openai_route([&s](const httplib::Request& req, httplib::Response& res) {
           handle_embeddings(s, req, res);
         }, "input"));
}

}  // namespace xdna::serve
