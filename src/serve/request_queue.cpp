#include "serve/request_queue.h"

#include <algorithm>
#include <utility>

namespace xdna::serve {

RequestQueue::RequestQueue(int slots, int max_waiting) : slots_(std::max(1, slots)), max_waiting_(std::max(0, max_waiting)) {}

RequestQueue::Ticket& RequestQueue::Ticket::operator=(Ticket&& o) noexcept {
  if (this != &o) {
    if (q_) q_->release_ticket(seq_);
    q_ = std::exchange(o.q_, nullptr);
    seq_ = o.seq_;
  }
  return *this;
}

RequestQueue::Ticket::~Ticket() {
  if (q_) q_->release_ticket(seq_);
}

RequestQueue::Turn& RequestQueue::Turn::operator=(Turn&& o) noexcept {
  if (this != &o) {
    if (q_) q_->release_turn();
    q_ = std::exchange(o.q_, nullptr);
  }
  return *this;
}

RequestQueue::Turn::~Turn() {
  if (q_) q_->release_turn();
}

RequestQueue::Ticket RequestQueue::admit() {
  std::lock_guard<std::mutex> lock(mu_);
  // Requests that will find a free slot do not wait, so they never count against the line.
  const int ahead = waiting_ + running_ - slots_;
  if (ahead >= max_waiting_) {
    // Retry-After: roughly when one waiting request has gone through; a second is the floor.
    throw QueueFull("the model's queue is full (" + std::to_string(running_) + " running, " + std::to_string(waiting_) +
                        " waiting, at most " + std::to_string(max_waiting_) + " may wait); retry later",
                    1 + std::max(0, ahead) / slots_);
  }
  ++waiting_;
  const uint64_t seq = next_seq_++;
  line_.insert(seq);
  return Ticket(this, seq);
}

RequestQueue::Turn RequestQueue::wait(Ticket ticket, Clock::time_point deadline) {
  if (ticket.q_ != this) throw std::invalid_argument("RequestQueue::wait: the ticket is empty or of another queue");
  std::unique_lock<std::mutex> lock(mu_);
  // A free slot goes to the oldest waiting ticket.
  const auto my_turn = [&] { return running_ < slots_ && *line_.begin() == ticket.seq_; };
  if (!freed_.wait_until(lock, deadline, my_turn))
    throw QueueTimeout("the request waited past its deadline for the model (" + std::to_string(running_) +
                       " running, " + std::to_string(waiting_) + " waiting)");
  ticket.q_ = nullptr;  // its place in line becomes the slot
  line_.erase(ticket.seq_);
  --waiting_;
  ++running_;
  if (running_ < slots_ && !line_.empty()) freed_.notify_all();  // a slot is still free: wake the next
  return Turn(this);
}

int RequestQueue::running() const {
  std::lock_guard<std::mutex> lock(mu_);
  return running_;
}

int RequestQueue::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return waiting_;
}

void RequestQueue::release_ticket(uint64_t seq) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    --waiting_;
    line_.erase(seq);
  }
  freed_.notify_all();  // the next in line may now be at the front
}

void RequestQueue::release_turn() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    --running_;
  }
  freed_.notify_all();  // all: a waiter whose deadline just passed must not swallow the wake-up
}

}  // namespace xdna::serve
