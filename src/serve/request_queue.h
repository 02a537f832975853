// A bounded request queue for one model: at most `slots` requests run on it at once (1 for an
// embedding or speech model, whose one pass already uses every core; the batch size for an LLM,
// whose sequences decode together) and at most `max_waiting` more wait for a slot. A request past
// that is refused at once (HTTP 429 with Retry-After) instead of growing memory without bound.
// Slots go to waiting requests first come, first served, so no request starves behind later ones.
//
//   RequestQueue::Ticket t = m->queue.admit();            // QueueFull: 429, before any response
//   RequestQueue::Turn turn = m->queue.wait(std::move(t), deadline);  // QueueTimeout: 503
//   ... run the model; the slot frees when `turn` goes out of scope.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>

namespace xdna::serve {

// The queue is full: the request was not admitted (429).
struct QueueFull : std::runtime_error {
  QueueFull(const std::string& what, int retry_after_s) : std::runtime_error(what), retry_after_s(retry_after_s) {}
  int retry_after_s;  // a hint for the Retry-After header
};

// The request waited past its deadline without getting a slot (503).
struct QueueTimeout : std::runtime_error {
  using std::runtime_error::runtime_error;
};

class RequestQueue {
 public:
  using Clock = std::chrono::steady_clock;

  RequestQueue(int slots, int max_waiting);
  RequestQueue(const RequestQueue&) = delete;
  RequestQueue& operator=(const RequestQueue&) = delete;

  // A place in line (counted as waiting until it becomes a Turn or is dropped).
  class Ticket {
   public:
    Ticket() = default;
    Ticket(Ticket&& o) noexcept : q_(o.q_), seq_(o.seq_) { o.q_ = nullptr; }
    Ticket& operator=(Ticket&& o) noexcept;
    ~Ticket();
    bool valid() const { return q_ != nullptr; }

   private:
    friend class RequestQueue;
    Ticket(RequestQueue* q, uint64_t seq) : q_(q), seq_(seq) {}
    RequestQueue* q_ = nullptr;
    uint64_t seq_ = 0;  // its place in line
  };

  // A running request's slot, released on destruction.
  class Turn {
   public:
    Turn() = default;
    Turn(Turn&& o) noexcept : q_(o.q_) { o.q_ = nullptr; }
    Turn& operator=(Turn&& o) noexcept;
    ~Turn();
    bool valid() const { return q_ != nullptr; }

   private:
    friend class RequestQueue;
    explicit Turn(RequestQueue* q) : q_(q) {}
    RequestQueue* q_ = nullptr;
  };

  // Takes a place in line; throws QueueFull when max_waiting requests already wait (a free slot
  // never counts against the line: an idle model always admits).
  Ticket admit();
  // Blocks until a slot is free, then turns the ticket into a running Turn. Throws QueueTimeout
  // when `deadline` passes first (the ticket is given up), std::invalid_argument for an empty ticket.
  Turn wait(Ticket ticket, Clock::time_point deadline);
  // admit() then wait(): for callers that have nothing to send before they run.
  Turn enter(Clock::time_point deadline) { return wait(admit(), deadline); }

  int slots() const { return slots_; }
  int max_waiting() const { return max_waiting_; }
  int running() const;
  int waiting() const;

 private:
  void release_ticket(uint64_t seq);
  void release_turn();

  const int slots_, max_waiting_;
  mutable std::mutex mu_;
  std::condition_variable freed_;
  int running_ = 0, waiting_ = 0;
  uint64_t next_seq_ = 0;
  std::set<uint64_t> line_;  // waiting tickets in arrival order
};

}  // namespace xdna::serve
