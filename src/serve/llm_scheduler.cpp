// CachedLanguageModel::generate: continuous batching. Every request runs on its own thread (the
// HTTP handler's) as a GenerationStepper; the model's compute is one thing at a time, run by
// whichever waiting request thread finds work:
//   - a new sequence's prompt is prefilled alone, one at a time, between decode steps;
//   - the running sequences that wait for their next token decode together, one row each, in one
//     Decoder::forward_batch step (rows bit-identical to decoding alone, so the tokens are the
//     same as xdna::generate's with the same seed, whoever shares the step).
// Sampling, detokenizing and on_piece run on each request's own thread, between steps, so a slow
// client does not hold the model: a step waits for the others at most about one step's time.
// A finished or cancelled sequence leaves at once and its KV cache is freed then.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>

#include "serve/model_cache.h"

namespace xdna::serve {

namespace {

using Clock = std::chrono::steady_clock;

// How long ready sequences wait for running ones still sampling or sending their last piece
// before a step runs without them: as long as the last decode step took (leaving one behind costs
// it a step of its own later), within these bounds (a stalled client holds the others no longer).
constexpr auto kMinJoinWait = std::chrono::milliseconds(2), kMaxJoinWait = std::chrono::milliseconds(100);

struct Sequence {
  explicit Sequence(GenerationStepper g) : gen(std::move(g)) {}
  GenerationStepper gen;
  bool ready = false;       // next_input() waits for a decoder call
  bool computing = false;   // in the prefill or step running now
  bool has_output = false;  // its call ran: step/row or error below
  Clock::time_point ready_since;
  std::shared_ptr<const DecoderStep> step;  // the call's logits: row `row` is this sequence's
  int64_t row = 0;
  std::exception_ptr error;
};

// What the model runs next: one prefill, or one decode step over `batch`; neither when nothing
// is due (`wake` then says when a partial batch becomes due, or is max() to wait for a change).
struct Work {
  Sequence* prefill = nullptr;
  std::vector<Sequence*> batch;
  Clock::time_point wake = Clock::time_point::max();
  bool any() const { return prefill || !batch.empty(); }
};

}  // namespace

struct CachedLanguageModel::Scheduler {
  std::mutex mu;
  std::condition_variable changed;  // a sequence arrived, became ready or left; a call finished
  bool busy = false;                // a prefill or decode step is running
  bool prefill_next = true;         // alternate: a prefill, then a decode step, when both wait
  std::deque<Sequence*> waiting;    // not yet prefilled, first come first served
  std::vector<Sequence*> running;   // prefilled, not finished: decoding or in their callbacks
  SchedulerStats stats;
  Clock::duration join_wait = kMinJoinWait;  // the last decode step's time, clamped

  Work next_work(int max_batch, Clock::time_point now);
  static void run_work(const LanguageModel& lm, Work& w);
  // Runs the model for whoever needs it until `self` has its output. With `lock` held on mu
  // (released while the model runs).
  void wait_for_output(const LanguageModel& lm, int max_batch, Sequence& self, std::unique_lock<std::mutex>& lock);
};

CachedLanguageModel::CachedLanguageModel(std::unique_ptr<LanguageModel> m, uint64_t bytes, int max_batch, int max_queue)
    : model(std::move(m)), bytes(bytes), queue(max_batch, max_queue), scheduler_(std::make_unique<Scheduler>()) {}

CachedLanguageModel::~CachedLanguageModel() = default;

CachedLanguageModel::SchedulerStats CachedLanguageModel::scheduler_stats() const {
  std::lock_guard<std::mutex> lock(scheduler_->mu);
  return scheduler_->stats;
}

GenerateResult CachedLanguageModel::generate(const GenerateRequest& request,
                                             const std::function<bool(const GeneratedPiece&)>& on_piece) {
  Sequence seq(GenerationStepper(*model, request, on_piece));  // a bad request throws here
  Scheduler& s = *scheduler_;
  const auto leave = [&] {
    std::unique_lock<std::mutex> lock(s.mu);
    s.changed.wait(lock, [&] { return !seq.computing; });
    s.waiting.erase(std::remove(s.waiting.begin(), s.waiting.end(), &seq), s.waiting.end());
    const auto it = std::find(s.running.begin(), s.running.end(), &seq);
    if (it != s.running.end()) {
      s.running.erase(it);
      --s.stats.live_sequences;
    }
    seq.ready = false;
    seq.gen.release_state();  // the KV cache goes now, not when the request's response is done
    s.changed.notify_all();
  };
  try {
    {
      std::unique_lock<std::mutex> lock(s.mu);
      seq.ready = true;
      seq.ready_since = Clock::now();
      s.waiting.push_back(&seq);
      s.changed.notify_all();
    }
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(s.mu);
        s.wait_for_output(*model, std::max(1, queue.slots()), seq, lock);
        seq.has_output = false;
      }
      if (seq.error) std::rethrow_exception(seq.error);
      const std::shared_ptr<const DecoderStep> step = std::move(seq.step);
      const int64_t width = step->logits.dim(1);
      const std::span<const float> logits(step->logits.data<float>() + seq.row * width, static_cast<size_t>(width));
      if (!seq.gen.advance(logits, step->report)) break;
      std::lock_guard<std::mutex> lock(s.mu);
      seq.ready = true;
      seq.ready_since = Clock::now();
      s.changed.notify_all();
    }
  } catch (...) {
    leave();
    throw;
  }
  leave();
  GenerateResult result = seq.gen.finish();
  if (metrics) metrics->record_generation(name, result.prompt_tokens, result.completion_tokens, result.decode_ms / 1000.0);
  return result;
}

Work CachedLanguageModel::Scheduler::next_work(int max_batch, Clock::time_point now) {
  Scheduler& s = *this;
  Work w;
  std::vector<Sequence*> ready;
  for (Sequence* q : s.running)
    if (q->ready && !q->has_output) ready.push_back(q);
  const bool can_prefill = !s.waiting.empty() && static_cast<int>(s.running.size()) < max_batch;
  if (can_prefill && (ready.empty() || s.prefill_next)) {
    w.prefill = s.waiting.front();
    return w;
  }
  if (ready.empty()) return w;
  // Sequences with other backends than the first ready one's wait for a step of their own.
  const std::vector<Backend*>& backends = ready.front()->gen.request().backends;
  std::erase_if(ready, [&](Sequence* q) { return q->gen.request().backends != backends; });
  Clock::time_point oldest = Clock::time_point::max();
  for (Sequence* q : ready) oldest = std::min(oldest, q->ready_since);
  // Every running sequence not ready is sampling or sending its piece: wait a little for it.
  if (ready.size() < s.running.size() && now < oldest + s.join_wait) {
    w.wake = oldest + s.join_wait;
    return w;
  }
  w.batch = std::move(ready);
  return w;
}

void CachedLanguageModel::Scheduler::run_work(const LanguageModel& lm, Work& w) {
  const Decoder& decoder = lm.decoder();
  if (w.prefill) {
    Sequence& q = *w.prefill;
    try {
      auto step = std::make_shared<DecoderStep>(decoder.forward(q.gen.next_input(), q.gen.state(), false,
                                                                q.gen.request().backends));
      q.row = step->logits.dim(0) - 1;  // the prompt's last token: the first completion token
      q.step = std::move(step);
    } catch (...) {
      q.error = std::current_exception();
    }
    return;
  }
  std::vector<int32_t> ids;
  std::vector<DecoderState*> states;
  try {
    for (Sequence* q : w.batch) {
      ids.push_back(q->gen.next_input().back());
      states.push_back(&q->gen.state());
    }
    auto step = std::make_shared<const DecoderStep>(
        decoder.forward_batch(ids, states, w.batch.front()->gen.request().backends));
    for (size_t r = 0; r < w.batch.size(); ++r) {
      w.batch[r]->step = step;
      w.batch[r]->row = static_cast<int64_t>(r);
    }
  } catch (...) {
    for (Sequence* q : w.batch) q->error = std::current_exception();
  }
}

void CachedLanguageModel::Scheduler::wait_for_output(const LanguageModel& lm, int max_batch, Sequence& self,
                                                     std::unique_lock<std::mutex>& lock) {
  Scheduler& s = *this;
  while (!self.has_output) {
    if (s.busy) {
      s.changed.wait(lock);
      continue;
    }
    Work w = next_work(max_batch, Clock::now());
    if (!w.any()) {
      if (w.wake == Clock::time_point::max()) s.changed.wait(lock);
      else s.changed.wait_until(lock, w.wake);
      continue;
    }
    // Take the work: its sequences are no longer ready, and none of them may leave meanwhile.
    std::vector<Sequence*> taken = w.batch;
    if (w.prefill) {
      taken.push_back(w.prefill);
      s.waiting.pop_front();
      s.running.push_back(w.prefill);
      ++s.stats.live_sequences;
      ++s.stats.prefills;
      s.prefill_next = false;
    } else {
      ++s.stats.decode_steps;
      s.stats.decode_rows += static_cast<int64_t>(w.batch.size());
      s.prefill_next = true;
    }
    for (Sequence* q : taken) {
      q->ready = false;
      q->computing = true;
    }
    s.busy = true;
    lock.unlock();
    const Clock::time_point t0 = Clock::now();
    run_work(lm, w);  // catches what the model throws into each sequence's error
    const Clock::duration took = Clock::now() - t0;
    lock.lock();
    s.busy = false;
    if (!w.prefill) s.join_wait = std::clamp<Clock::duration>(took, kMinJoinWait, kMaxJoinWait);
    for (Sequence* q : taken) {
      q->computing = false;
      q->has_output = true;
    }
    s.changed.notify_all();
  }
}

}  // namespace xdna::serve
