// OpenAI "models" front: GET /v1/models lists the store, GET /v1/models/{id} retrieves one.
#include "serve/server.h"

namespace xdna::serve {

namespace {

nlohmann::json model_object(const Manifest& m) {
  return {{"id", m.name}, {"object", "model"}, {"created", m.created}, {"owned_by", "xdna-engine"}};
}

}  // namespace

void add_model_routes(Server& s) {
  s.get("/v1/models", [&s](const httplib::Request&, httplib::Response& res) {
    nlohmann::json data = nlohmann::json::array();
    for (const Manifest& m : s.store().list()) data.push_back(model_object(m));
    send_json(res, {{"object", "list"}, {"data", data}});
  });
  s.get("/v1/models/(.+)", [&s](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    std::optional<Manifest> m;
    if (valid_model_name(id)) m = s.store().find(id);
    if (!m) {
      send_error(res, 404, "The model '" + id + "' does not exist", "invalid_request_error", "model_not_found",
                 "model");
      return;
    }
    send_json(res, model_object(*m));
  });
}

}  // namespace xdna::serve
