// RequestStream: the thread-safe channel between the engine thread (producer) and one front-end
// thread (consumer) for one request.
//
// Contract: the producer pushes events and finally calls Finish exactly once; after that Read
// returns the remaining events, then false. Cancel may be called from any thread at any time; the
// scheduler observes it before its next iteration, frees the request's KV, and finishes the
// stream with kCancelled events for the samples still running.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "scheduler/request.h"

namespace banyan::scheduler {

class RequestStream {
 public:
  RequestStream() = default;
  RequestStream(const RequestStream&) = delete;
  RequestStream& operator=(const RequestStream&) = delete;

  // --- consumer side
  // Waits up to `timeout` for events and appends them to *out. Returns false once the stream is
  // finished and every event has been read.
  bool Read(std::vector<TokenEvent>* out, std::chrono::milliseconds timeout);
  // The client went away or gave up.
  void Cancel();
  // `listener` is called after every Push and Finish, on the producer's thread and outside the
  // stream's lock, so a writer waiting for output can be woken instead of polling. It must be
  // cheap and must not call back into this stream's producer side, nor into SetListener.
  // Replaces any earlier one; an empty function removes it. Returns once no call of the earlier
  // listener is running, so that what the listener refers to (a connection, whose last
  // reference it may hold) can be released safely afterwards. Events pushed before it is set
  // are not announced: read once after setting it.
  void SetListener(std::function<void()> listener);
  // Final status and usage; meaningful once Read returned false.
  absl::Status status() const;
  Usage usage() const;

  // --- producer side (engine thread)
  // `announce`: call the listener now (true), or leave it to the producer, which then calls
  // Announce() once it has pushed a batch (the engine loop announces once per step, from another
  // thread when the scheduler gives it one).
  void Push(TokenEvent event, bool announce = true);
  void Finish(absl::Status status, Usage usage, bool announce = true);
  // Calls the listener, if one is set (any thread).
  void Announce();
  bool cancel_requested() const;
  bool finished() const;

 private:
  mutable absl::Mutex mu_;
  std::vector<TokenEvent> events_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  // Read without the lock: the engine loop polls every request's flag at every step, and the
  // front end's writers hold mu_ while they take events.
  std::atomic<bool> cancel_{false};
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  Usage usage_ ABSL_GUARDED_BY(mu_);
  // Held while the listener runs (and by SetListener), never together with mu_ held first.
  absl::Mutex call_mu_ ABSL_ACQUIRED_BEFORE(mu_);
  std::function<void()> listener_ ABSL_GUARDED_BY(call_mu_);

  // Calls the listener, if any (outside mu_).
  void Notify();
};

}  // namespace banyan::scheduler
