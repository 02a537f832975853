// RequestQueue on its own: slots, the bounded line (QueueFull with a Retry-After hint), deadlines
// (QueueTimeout), tickets and turns that free their place when dropped, and many threads at once.
// Then through an in-process server: 429 + Retry-After from a full queue, 503 past the request
// timeout (waiting, or generating), and a client dropping a stream freeing its slot.
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>
#include <tuple>
#include <vector>

#include "serve/request_queue.h"
#include "serve/server.h"
#include "server_test_util.h"

using namespace xdna::serve;
using Clock = RequestQueue::Clock;
using namespace std::chrono_literals;

namespace {

Clock::time_point in(std::chrono::milliseconds ms) { return Clock::now() + ms; }

TEST(RequestQueue, SlotsRunAtOnceAndTheLineIsBounded) {
  RequestQueue q(2, 1);
  EXPECT_EQ(q.slots(), 2);
  EXPECT_EQ(q.max_waiting(), 1);
  RequestQueue::Turn a = q.enter(in(1000ms));
  RequestQueue::Turn b = q.enter(in(1000ms));
  EXPECT_TRUE(a.valid() && b.valid());
  EXPECT_EQ(q.running(), 2);
  EXPECT_EQ(q.waiting(), 0);
  RequestQueue::Ticket t = q.admit();  // the one place in line
  EXPECT_EQ(q.waiting(), 1);
  try {
    q.admit();
    FAIL() << "expected QueueFull";
  } catch (const QueueFull& e) {
    EXPECT_GE(e.retry_after_s, 1);
    EXPECT_NE(std::string(e.what()).find("2 running, 1 waiting"), std::string::npos) << e.what();
  }
  a = RequestQueue::Turn();  // a finishes: the ticket gets its slot at once
  EXPECT_EQ(q.running(), 1);
  RequestQueue::Turn c = q.wait(std::move(t), in(1000ms));
  EXPECT_FALSE(t.valid());
  EXPECT_EQ(q.running(), 2);
  EXPECT_EQ(q.waiting(), 0);
}

TEST(RequestQueue, AnIdleModelAlwaysAdmitsEvenWithNoLine) {
  RequestQueue q(1, 0);
  RequestQueue::Turn t = q.enter(in(1000ms));
  EXPECT_THROW(q.admit(), QueueFull);
  t = RequestQueue::Turn();
  EXPECT_NO_THROW(q.enter(in(1000ms)));
  EXPECT_EQ(q.running(), 0);  // the Turn above was a temporary
}

TEST(RequestQueue, RetryAfterGrowsWithTheLine) {
  RequestQueue q(1, 3);
  RequestQueue::Turn run = q.enter(in(1000ms));
  std::vector<RequestQueue::Ticket> line;
  for (int i = 0; i < 3; ++i) line.push_back(q.admit());
  try {
    q.admit();
    FAIL() << "expected QueueFull";
  } catch (const QueueFull& e) {
    EXPECT_EQ(e.retry_after_s, 4);  // 3 waiting, one slot: about 3 runs ahead, plus a second
  }
}

TEST(RequestQueue, WaitPastTheDeadlineThrowsAndGivesUpThePlace) {
  RequestQueue q(1, 1);
  RequestQueue::Turn run = q.enter(in(1000ms));
  const auto t0 = Clock::now();
  try {
    q.wait(q.admit(), in(50ms));
    FAIL() << "expected QueueTimeout";
  } catch (const QueueTimeout& e) {
    EXPECT_NE(std::string(e.what()).find("deadline"), std::string::npos) << e.what();
  }
  EXPECT_GE(Clock::now() - t0, 50ms);
  EXPECT_EQ(q.waiting(), 0);  // its place in line is free again
  EXPECT_EQ(q.running(), 1);
  EXPECT_NO_THROW(q.admit());
}

TEST(RequestQueue, AFreeSlotIsTakenEvenPastTheDeadline) {
  RequestQueue q(1, 0);
  RequestQueue::Turn t = q.enter(Clock::now() - 1s);  // nothing to wait for: the run decides
  EXPECT_TRUE(t.valid());
}

TEST(RequestQueue, DroppedTicketsAndTurnsFreeTheirPlace) {
  RequestQueue q(1, 2);
  {
    RequestQueue::Turn run = q.enter(in(1000ms));
    RequestQueue::Ticket a = q.admit(), b = q.admit();
    EXPECT_EQ(q.waiting(), 2);
    a = std::move(b);  // a's old place is given up, b's moves into a
    EXPECT_EQ(q.waiting(), 1);
    RequestQueue::Ticket c = std::move(a);
    EXPECT_FALSE(a.valid());
    EXPECT_EQ(q.waiting(), 1);
    RequestQueue::Turn moved = std::move(run);
    EXPECT_EQ(q.running(), 1);
  }
  EXPECT_EQ(q.running(), 0);
  EXPECT_EQ(q.waiting(), 0);
  RequestQueue other(1, 1);
  EXPECT_THROW(q.wait(RequestQueue::Ticket(), in(10ms)), std::invalid_argument);
  EXPECT_THROW(q.wait(other.admit(), in(10ms)), std::invalid_argument);
  EXPECT_EQ(other.waiting(), 0);  // the refused ticket was still released
}

TEST(RequestQueue, AWaiterIsWokenWhenASlotFrees) {
  RequestQueue q(1, 1);
  auto run = std::make_unique<RequestQueue::Turn>(q.enter(in(1000ms)));
  std::atomic<bool> got{false};
  std::thread waiter([&] {
    RequestQueue::Turn t = q.wait(q.admit(), in(10000ms));
    got = true;
  });
  while (q.waiting() == 0) std::this_thread::sleep_for(1ms);
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(got);
  run.reset();
  waiter.join();
  EXPECT_TRUE(got);
  EXPECT_EQ(q.running(), 0);
}

// Slots go to waiters in the order they were admitted, whatever order their threads start
// waiting in: no request starves behind later ones (the load test's p99 depends on it).
TEST(RequestQueue, SlotsGoFirstComeFirstServed) {
  RequestQueue q(1, 8);
  auto run = std::make_unique<RequestQueue::Turn>(q.enter(in(1000ms)));
  constexpr int kWaiters = 5;
  std::vector<RequestQueue::Ticket> tickets;
  for (int i = 0; i < kWaiters; ++i) tickets.push_back(q.admit());
  std::mutex order_mu;
  std::vector<int> order;
  std::vector<std::thread> threads;
  for (int i = kWaiters - 1; i >= 0; --i) {  // the youngest ticket starts waiting first
    threads.emplace_back([&, i] {
      RequestQueue::Turn t = q.wait(std::move(tickets[i]), in(10000ms));
      std::lock_guard<std::mutex> lock(order_mu);
      order.push_back(i);
    });
    std::this_thread::sleep_for(5ms);
  }
  run.reset();
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(q.running(), 0);
  EXPECT_EQ(q.waiting(), 0);
}

// A dropped ticket at the head of the line does not block the ones behind it.
TEST(RequestQueue, ADroppedHeadOfLineLetsTheNextIn) {
  RequestQueue q(1, 4);
  auto run = std::make_unique<RequestQueue::Turn>(q.enter(in(1000ms)));
  auto head = std::make_unique<RequestQueue::Ticket>(q.admit());
  std::atomic<bool> got{false};
  std::thread next([&] {
    RequestQueue::Turn t = q.wait(q.admit(), in(10000ms));
    got = true;
  });
  while (q.waiting() < 2) std::this_thread::sleep_for(1ms);
  run.reset();  // a free slot, but the head of the line has not asked for it yet
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(got);
  head.reset();  // the head gives up its place
  next.join();
  EXPECT_TRUE(got);
}

// 16 threads, 200 requests each, against 3 slots and a line of 4: never more than 3 run at once,
// every request is either refused (QueueFull), timed out or run, and nothing is left counted.
TEST(RequestQueue, ManyThreadsLoseNoSlot) {
  RequestQueue q(3, 4);
  std::atomic<int> inside{0}, most{0}, ran{0}, full{0}, late{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 16; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        try {
          RequestQueue::Ticket ticket = q.admit();
          if ((i + t) % 7 == 0) continue;  // a client that goes away while in line
          RequestQueue::Turn turn = q.wait(std::move(ticket), in((i % 5 == 0) ? 0ms : 200ms));
          const int now = ++inside;
          for (int m = most; now > m && !most.compare_exchange_weak(m, now);) {
          }
          if (i % 3 == 0) std::this_thread::yield();
          --inside;
          ++ran;
        } catch (const QueueFull&) {
          ++full;
        } catch (const QueueTimeout&) {
          ++late;
        }
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_LE(most.load(), 3);
  EXPECT_GE(most.load(), 1);
  EXPECT_GT(ran.load(), 0);
  EXPECT_EQ(q.running(), 0);
  EXPECT_EQ(q.waiting(), 0);
  // Still whole: all three slots and the line work.
  std::vector<RequestQueue::Turn> turns;
  for (int i = 0; i < 3; ++i) turns.push_back(q.enter(in(100ms)));
  std::vector<RequestQueue::Ticket> line;
  for (int i = 0; i < 4; ++i) line.push_back(q.admit());
  EXPECT_THROW(q.admit(), QueueFull);
}

}  // namespace

// ---- Through the server: the tiny chat LLM (and BERT) fixtures, one slot per model. ----

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace xdna;

const fs::path kLlm = fs::path(XDNA_FIXTURE_DIR) / "llm" / "tiny-llama-chat";
const fs::path kBert = fs::path(XDNA_FIXTURE_DIR) / "encoders" / "tiny-bert-e5";

json chat(bool stream = false, int max_tokens = 8) {
  return {{"model", "tiny-chat"},
          {"messages", {{{"role", "user"}, {"content", "Tell me a long story about queues."}}}},
          {"max_tokens", max_tokens},
          {"temperature", 0},
          {"stream", stream}};
}

// A server on a temp store holding tiny-chat and tiny-bert, with `tune` applied to its options.
class QueuedServer : public ::testing::Test {
 protected:
  void start(const std::function<void(serve::ServerOptions&)>& tune) {
    dir_ = test::make_temp_dir("xdna-request-queue");
    test::add_store_model(dir_, "tiny-chat", "llama", "safetensors", "f32", kLlm);
    test::add_store_model(dir_, "tiny-bert", "bert", "safetensors", "f32", kBert);
    serve::ServerOptions opts;
    opts.store_dir = dir_.string();
    opts.max_batch = 1;
    opts.log_requests = false;
    tune(opts);
    server_ = std::make_unique<test::RunningServer>(opts);
    ASSERT_TRUE(server_->is_running());
    client_ = server_->client();
  }
  void TearDown() override {
    client_.reset();
    server_.reset();
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  httplib::Result post(const std::string& path, const json& body) {
    return client_->Post(path.c_str(), body.dump(), "application/json");
  }
  std::shared_ptr<serve::CachedLanguageModel> llm() { return server_->server().models().get_llm("tiny-chat"); }
  // Waits up to 10 s for `done`.
  static bool eventually(const std::function<bool()>& done) {
    for (int i = 0; i < 1000; ++i) {
      if (done()) return true;
      std::this_thread::sleep_for(10ms);
    }
    return done();
  }

  fs::path dir_;
  std::unique_ptr<test::RunningServer> server_;
  std::unique_ptr<httplib::Client> client_;
};

json error_of(const httplib::Result& r) { return r ? json::parse(r->body, nullptr, false)["error"] : json(); }

TEST_F(QueuedServer, AFullQueueIs429WithRetryAfterAndTheServerRecovers) {
  start([](serve::ServerOptions& o) { o.max_queue = 1; });
  {
    auto warm = post("/v1/chat/completions", chat());  // loads the model
    ASSERT_TRUE(warm);
    ASSERT_EQ(warm->status, 200) << warm->body;
  }
  auto m = llm();
  auto busy = std::make_unique<serve::RequestQueue::Turn>(m->queue.enter(Clock::now() + 60s));  // the one slot

  constexpr int kClients = 5;  // one waits in the line of one, four are refused
  std::vector<int> status(kClients, 0);
  std::vector<std::string> retry_after(kClients), code(kClients);
  std::atomic<int> finished{0};
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i)
    clients.emplace_back([&, i] {
      auto c = server_->client();
      auto r = c->Post("/v1/chat/completions", chat().dump(), "application/json");
      if (r) {
        status[i] = r->status;
        retry_after[i] = r->get_header_value("Retry-After");
        if (r->status != 200) code[i] = error_of(r)["code"].get<std::string>();
      }
      ++finished;
    });
  ASSERT_TRUE(eventually([&] { return finished == kClients - 1 && m->queue.waiting() == 1; }))
      << finished << " finished, " << m->queue.waiting() << " waiting";
  {  // a stream is refused the same way, before any event
    auto r = post("/v1/chat/completions", chat(/*stream=*/true));
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 429);
    EXPECT_EQ(r->get_header_value("Content-Type"), "application/json");
    EXPECT_EQ(error_of(r)["code"], "queue_full");
  }
  busy.reset();  // the slot frees: the waiting request runs
  for (auto& t : clients) t.join();
  int ok = 0, refused = 0;
  for (int i = 0; i < kClients; ++i) {
    if (status[i] == 200) {
      ++ok;
      continue;
    }
    ++refused;
    EXPECT_EQ(status[i], 429);
    EXPECT_EQ(code[i], "queue_full");
    EXPECT_GE(std::atoi(retry_after[i].c_str()), 1) << "Retry-After: '" << retry_after[i] << "'";
  }
  EXPECT_EQ(ok, 1);
  EXPECT_EQ(refused, kClients - 1);
  auto next = post("/v1/chat/completions", chat());
  ASSERT_TRUE(next);
  EXPECT_EQ(next->status, 200) << next->body;
  EXPECT_EQ(m->queue.running(), 0);
  EXPECT_EQ(m->queue.waiting(), 0);
}

TEST_F(QueuedServer, WaitingPastTheRequestTimeoutIs503) {
  start([](serve::ServerOptions& o) { o.request_timeout_s = 1.0; });
  const json embed = {{"model", "tiny-bert"}, {"input", "hello"}};
  for (const auto& [path, body] : {std::pair{"/v1/chat/completions", chat()}, std::pair{"/v1/embeddings", embed}}) {
    auto r = post(path, body);  // loads the model
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
  }
  auto m = llm();
  auto e = server_->server().models().get_embedding("tiny-bert");
  for (const auto& [path, body, queue] : {std::tuple{"/v1/chat/completions", chat(), &m->queue},
                                          std::tuple{"/v1/embeddings", embed, &e->queue}}) {
    serve::RequestQueue::Turn busy = queue->enter(Clock::now() + 60s);
    const auto t0 = Clock::now();
    auto r = post(path, body);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 503) << r->body;
    EXPECT_EQ(error_of(r)["code"], "timeout") << r->body;
    EXPECT_EQ(error_of(r)["type"], "server_error");
    EXPECT_GE(Clock::now() - t0, 1s);
    EXPECT_EQ(queue->waiting(), 0);
  }
  auto r = post("/v1/embeddings", embed);  // the slots are free again
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
}

// A deadline that has passed by the first token: the queue lets the request in (a slot is free),
// the generation is stopped at once. Non-stream: 503; stream: an error event, then [DONE].
TEST_F(QueuedServer, AGenerationPastTheRequestTimeoutIsStopped) {
  start([](serve::ServerOptions& o) { o.request_timeout_s = 1e-6; });
  auto r = post("/v1/chat/completions", chat(false, 64));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503) << r->body;
  EXPECT_EQ(error_of(r)["code"], "timeout");
  EXPECT_NE(error_of(r)["message"].get<std::string>().find("--request-timeout"), std::string::npos) << r->body;

  r = post("/v1/chat/completions", chat(true, 64));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);  // the status went out before the generation ran
  const std::string& body = r->body;
  ASSERT_GE(body.size(), 14u);
  EXPECT_EQ(body.substr(body.size() - 14), "data: [DONE]\n\n") << body;
  const size_t err = body.rfind("data: {\"error\"");
  ASSERT_NE(err, std::string::npos) << body;
  const json event = json::parse(body.substr(err + 6, body.find("\n\n", err) - err - 6));
  EXPECT_EQ(event["error"]["code"], "timeout");
  EXPECT_EQ(body.find("\"finish_reason\":\"length\""), std::string::npos) << body;  // it did not run to the end
  auto m = llm();
  EXPECT_TRUE(eventually([&] { return m->queue.running() == 0; }));
}

// Completion tokens the server has counted for tiny-chat (GET /metrics' counter, read in-process).
double completion_tokens(test::RunningServer& s) {
  std::istringstream text(s.server().metrics().render_prometheus(s.server().models(), s.server().npu()));
  for (std::string line; std::getline(text, line);)
    if (line.starts_with("xdna_generated_tokens_total{") && line.find("model=\"tiny-chat\"") != std::string::npos &&
        line.find("kind=\"completion\"") != std::string::npos)
      return std::stod(line.substr(line.rfind(' ') + 1));
  return -1;
}

// A client that drops a streaming chat mid-way (after its first event, while it waits for the
// model): the generation is cancelled at its first token instead of running its 40, its slot is
// freed, and the next request is served.
TEST_F(QueuedServer, AClientThatDropsAStreamCancelsItAndFreesItsSlot) {
  constexpr int kTokens = 40;
  start([](serve::ServerOptions&) {});
  {
    auto warm = post("/v1/chat/completions", chat());
    ASSERT_TRUE(warm);
    ASSERT_EQ(warm->status, 200) << warm->body;
  }
  auto m = llm();
  const double tokens_before = completion_tokens(*server_);
  ASSERT_GE(tokens_before, 8);  // the warm-up's
  auto busy = std::make_unique<serve::RequestQueue::Turn>(m->queue.enter(Clock::now() + 60s));
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(server_->port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  const std::string body = chat(/*stream=*/true, kTokens).dump();
  const std::string request = "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                              "application/json\r\nContent-Length: " +
                              std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(send(fd, request.data(), request.size(), MSG_NOSIGNAL), static_cast<ssize_t>(request.size()));
  std::string got;
  char buf[256];
  while (got.find("data: ") == std::string::npos) {  // the first event (the role) comes before the wait
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    ASSERT_GT(n, 0) << got;
    got.append(buf, static_cast<size_t>(n));
  }
  EXPECT_NE(got.find("200 OK"), std::string::npos) << got;
  const linger reset{1, 0};  // close with a reset: the server's next write fails at once
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof reset);
  close(fd);
  EXPECT_EQ(m->queue.waiting(), 1);
  busy.reset();  // the dropped request gets the slot and starts generating

  EXPECT_TRUE(eventually([&] { return m->queue.running() == 0 && m->queue.waiting() == 0; }))
      << m->queue.running() << " running";
  EXPECT_LT(completion_tokens(*server_) - tokens_before, 4);  // cancelled at its first writes
  auto next = post("/v1/chat/completions", chat(false, kTokens));  // the same request runs in full
  ASSERT_TRUE(next);
  ASSERT_EQ(next->status, 200) << next->body;
  EXPECT_EQ(json::parse(next->body)["usage"]["completion_tokens"], kTokens);
}

}  // namespace
