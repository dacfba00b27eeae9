// KvEventPublisher: publishes the engine's KV-cache events (kvcache/kv_events.h) over ZeroMQ in
// vLLM's wire format, for prefix-aware routers (llm-d's KV-cache indexer, NVIDIA Dynamo's KV
// router, ...) that consume vLLM's stream. Configured by --kv-events-config
// (server/common/kv_events_config.h).
//
// Wire format, as vLLM's ZmqEventPublisher and its msgspec event structs define it (read in
// vllm/distributed/kv_events.py and vllm/config/kv_events.py; the map form in vLLM PR #42892;
// consumers checked: llm-d-kv-cache's vLLM adapter, Dynamo's vLLM decoder):
//  - PUB socket, one multipart message per engine step: [topic, seq, payload]. topic: the
//    configured bytes; seq: the batch's sequence number, 8 bytes big-endian unsigned, 0 for the
//    first batch and +1 per batch; payload: one msgpack value.
//  - payload: an event batch, a 3-element array [ts, events, data_parallel_rank]: ts the wall
//    time in seconds (float64), events an array, data_parallel_rank 0 (banyand runs one engine
//    per process; vLLM's publisher fills in its rank the same way).
//  - events, "array" encoding (msgspec array_like with tag: the tag first, then the fields in
//    declaration order, trailing defaults left out):
//      ["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium,
//       lora_name]
//      ["BlockRemoved", block_hashes, medium]
//      ["AllBlocksCleared"]
//    block_hashes: array of uint64; parent_block_hash: uint64 or nil (a first block); token_ids:
//    the blocks' tokens, concatenated (block_size each); lora_id and lora_name nil; medium "GPU".
//    "map" encoding: the same fields as a map keyed by field name, with "type" holding the tag.
//    Consecutive stored blocks that chain (each the parent of the next) share one BlockStored,
//    as vLLM reports a request's new blocks; consecutive removals share one BlockRemoved.
//  - replay: a ROUTER socket. A request is [identity, empty frame, start seq (8 bytes
//    big-endian)] (what a REQ or a DEALER that sends an empty delimiter first produces); the
//    answer is one message [identity, empty, seq, payload] per buffered batch with seq >= start,
//    oldest first, then [identity, empty, 8 bytes of 0xff (-1), empty payload] as the end. The
//    buffer holds the last buffer_steps batches. A malformed request (another frame count, a
//    start that is not 8 bytes) gets only the end marker when it has the envelope, nothing when
//    not, and is counted.
//
// Threads. Publish() runs on the engine thread: it stamps the batch, appends it to a bounded
// queue under a mutex held for O(1), and wakes the publisher's own thread through an eventfd:
// it never waits for I/O or for a subscriber. When the queue is full the oldest batch is
// dropped (counted) and TakeResyncRequest() turns true, so the engine's next flush resends the
// whole cache (kvcache::KvEventLog::Flush). The publisher thread numbers, encodes and sends the
// batches, keeps the replay buffer and answers replay requests. ZeroMQ's PUB socket never
// blocks either: a subscriber more than `hwm` messages behind loses messages, sees the gap in
// the sequence numbers, and fills it from the replay socket.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kvcache/kv_events.h"
#include "server/common/kv_events_config.h"

namespace banyan::server {

// One batch's msgpack payload (the format above). Pure.
std::string EncodeKvEventBatch(double ts, std::span<const kvcache::KvEvent> events,
                               int32_t block_size, bool map_encoding);

struct KvEventPublisherStats {
  int64_t batches_published = 0;   // sent on the PUB socket (sequence numbers handed out)
  int64_t batches_dropped = 0;     // dropped from a full queue before publishing
  int64_t events_published = 0;    // BlockStored / BlockRemoved / AllBlocksCleared sent
  int64_t replay_requests = 0;     // answered
  int64_t replay_bad_requests = 0; // malformed
};

// The counters in Prometheus text (banyan_kv_events_*, docs/metrics.md).
std::string RenderKvEventMetrics(const KvEventPublisherStats& s);

class KvEventPublisher : public kvcache::KvEventSink {
 public:
  // Opens the sockets (binding or connecting as the config says) and starts the thread.
  // InvalidArgument / Unavailable naming "kv-events-config.endpoint" or ".replay_endpoint"
  // when a socket cannot be opened (a port in use, an address that is not this host's).
  // `start_thread` false: batches queue until Run() (tests of the queue).
  static absl::StatusOr<std::unique_ptr<KvEventPublisher>> Create(const KvEventsConfig& config,
                                                                  int32_t block_size,
                                                                  bool start_thread = true);
  ~KvEventPublisher() override;  // publishes what is queued, then closes the sockets
  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;

  // kvcache::KvEventSink (engine thread; never blocks).
  void Publish(std::vector<kvcache::KvEvent> events) override;
  bool TakeResyncRequest() override { return resync_.exchange(false); }

  // Starts the thread when Create did not.
  void Run();
  KvEventPublisherStats stats() const;

 private:
  struct Impl;  // the ZeroMQ sockets, owned by the publisher thread once it runs
  struct Batch {
    double ts;
    std::vector<kvcache::KvEvent> events;
  };
  KvEventPublisher(const KvEventsConfig& config, int32_t block_size);
  void ThreadMain();
  void Wake();
  // Sends the queued batches; true when the queue was empty and stop was asked.
  bool Drain();

  const KvEventsConfig config_;
  const int32_t block_size_;
  std::unique_ptr<Impl> impl_;
  int wake_fd_ = -1;  // eventfd: the engine thread's doorbell

  mutable absl::Mutex mu_;
  std::deque<Batch> queue_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  KvEventPublisherStats stats_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> resync_{false};
  std::thread thread_;
};

}  // namespace banyan::server
