// --kv-events-config: where and how banyand publishes KV-cache events (server/
// kv_event_publisher.h), spelled as vLLM spells it, so that a router's documented vLLM settings
// carry over:
//
//   --kv-events-config '{"enable_kv_cache_events": true, "publisher": "zmq",
//                        "endpoint": "tcp://*:5557", "replay_endpoint": "tcp://*:5558",
//                        "topic": "kv-events", "buffer_steps": 10000}'
//
// vLLM's fields (its KVEventsConfig), with its defaults:
//   enable_kv_cache_events  false: nothing is published (the default: off)
//   publisher               "zmq" or "null"; unset: "zmq" when enabled, else "null"
//   endpoint                "tcp://*:5557"; the PUB socket. As vLLM decides: it binds when the
//                           address has "*" or "::" or is ipc://, and connects otherwise (to a
//                           subscriber or proxy that binds)
//   replay_endpoint         null: no replay; else the ROUTER socket, always bound
//   buffer_steps            10000: batches (engine steps) kept for replay
//   hwm                     100000: the PUB socket's high-water mark, in messages; a subscriber
//                           further behind loses messages (and replays them)
//   max_queue_size          100000: batches queued between the engine thread and the publisher's
//                           thread; when full the oldest is dropped (counted) and the next flush
//                           resends the whole cache (AllBlocksCleared, then every block)
//   topic                   "": the first frame of every message
// banyand's additions (vLLM refuses them; leave them out to keep one config for both):
//   bind                    true / false: bind or connect the PUB socket whatever the address
//                           says ("tcp://127.0.0.1:5557" with bind: a loopback-only publisher)
//   event_encoding          "array" (the default): each event a tagged positional array, the
//                           layout of vLLM until its PR #42892 and what every consumer decodes;
//                           "map": a tagged map (vLLM's newer layout; newer consumers read both)
//
// Endpoints are tcp://HOST:PORT (HOST an address, a name, or "*"; PORT 1..65535) or ipc://PATH.
// Unknown fields, wrong types and bad endpoints are errors naming the field. A port already in
// use is found when banyand binds, before it serves (an error naming the field).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace banyan::server {

struct KvEventsConfig {
  bool enable_kv_cache_events = false;
  std::string publisher = "null";
  std::string endpoint = "tcp://*:5557";
  std::string replay_endpoint;  // empty: no replay socket
  int64_t buffer_steps = 10000;
  int64_t hwm = 100000;
  int64_t max_queue_size = 100000;
  std::string topic;
  std::optional<bool> bind;  // unset: vLLM's rule (BindsPub)
  bool map_encoding = false;

  // Events are published: enabled, with the zmq publisher.
  bool active() const { return enable_kv_cache_events && publisher == "zmq"; }
  // Whether the PUB socket binds (else connects).
  bool BindsPub() const;
};

// Parses the JSON object. InvalidArgument naming "kv-events-config.<field>".
absl::StatusOr<KvEventsConfig> ParseKvEventsConfig(std::string_view json);

// Whether a tcp:// endpoint's host is a loopback address (127.0.0.0/8, ::1, localhost); ipc://
// counts as local too. "*" and any other address do not.
bool IsLocalEndpoint(std::string_view endpoint);

}  // namespace banyan::server
