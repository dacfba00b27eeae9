#include "server/common/kv_event_publisher.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <iterator>

#define MSGPACK_NO_BOOST
#include <msgpack.hpp>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "absl/strings/str_cat.h"
#include "common/check.h"
#include "spdlog/spdlog.h"

namespace banyan::server {
namespace {

std::shared_ptr<spdlog::logger> Log() {
  static std::shared_ptr<spdlog::logger> logger = [] {
    auto l = spdlog::get("kv-events");
    return l ? l : spdlog::default_logger()->clone("kv-events");
  }();
  return logger;
}

using kvcache::KvEvent;
using Packer = msgpack::packer<msgpack::sbuffer>;

void PackString(Packer& pk, std::string_view s) {
  pk.pack_str(static_cast<uint32_t>(s.size()));
  pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

// Events [begin, end) of one kind, packed as one vLLM event.
struct Group {
  KvEvent::Kind kind;
  size_t begin, end;
};

std::vector<Group> GroupEvents(std::span<const KvEvent> events) {
  std::vector<Group> groups;
  for (size_t i = 0; i < events.size(); ++i) {
    const KvEvent& e = events[i];
    if (!groups.empty() && groups.back().kind == e.kind && e.kind != KvEvent::Kind::kAllCleared) {
      const KvEvent& prev = events[i - 1];
      // Stored blocks join when they chain (one parent for the run, as vLLM reports them).
      if (e.kind == KvEvent::Kind::kRemoved || (e.parent.has_value() && *e.parent == prev.hash)) {
        groups.back().end = i + 1;
        continue;
      }
    }
    groups.push_back(Group{e.kind, i, i + 1});
  }
  return groups;
}

void PackHashes(Packer& pk, std::span<const KvEvent> run) {
  pk.pack_array(static_cast<uint32_t>(run.size()));
  for (const KvEvent& e : run) pk.pack_uint64(e.hash);
}

void PackStored(Packer& pk, std::span<const KvEvent> run, int32_t block_size, bool map) {
  auto field = [&](std::string_view name) {
    if (map) PackString(pk, name);
  };
  if (map) {
    pk.pack_map(8);
    PackString(pk, "type");
  } else {
    pk.pack_array(8);
  }
  PackString(pk, "BlockStored");
  field("block_hashes");
  PackHashes(pk, run);
  field("parent_block_hash");
  if (run.front().parent.has_value()) {
    pk.pack_uint64(*run.front().parent);
  } else {
    pk.pack_nil();
  }
  field("token_ids");
  size_t tokens = 0;
  for (const KvEvent& e : run) tokens += e.tokens.size();
  pk.pack_array(static_cast<uint32_t>(tokens));
  for (const KvEvent& e : run) {
    for (int32_t t : e.tokens) pk.pack_int32(t);
  }
  field("block_size");
  pk.pack_int32(block_size);
  field("lora_id");
  pk.pack_nil();
  field("medium");
  PackString(pk, "GPU");
  field("lora_name");
  pk.pack_nil();
}

void PackRemoved(Packer& pk, std::span<const KvEvent> run, bool map) {
  if (map) {
    pk.pack_map(3);
    PackString(pk, "type");
    PackString(pk, "BlockRemoved");
    PackString(pk, "block_hashes");
    PackHashes(pk, run);
    PackString(pk, "medium");
  } else {
    pk.pack_array(3);
    PackString(pk, "BlockRemoved");
    PackHashes(pk, run);
  }
  PackString(pk, "GPU");
}

void PackCleared(Packer& pk, bool map) {
  if (map) {
    pk.pack_map(1);
    PackString(pk, "type");
  } else {
    pk.pack_array(1);
  }
  PackString(pk, "AllBlocksCleared");
}

std::string BigEndian(uint64_t v) {
  std::string out(8, '\0');
  for (int i = 7; i >= 0; --i) {
    out[static_cast<size_t>(i)] = static_cast<char>(v & 0xff);
    v >>= 8;
  }
  return out;
}

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

std::string EncodeKvEventBatch(double ts, std::span<const KvEvent> events, int32_t block_size,
                               bool map_encoding) {
  msgpack::sbuffer buf;
  Packer pk(&buf);
  const std::vector<Group> groups = GroupEvents(events);
  pk.pack_array(3);
  pk.pack_double(ts);
  pk.pack_array(static_cast<uint32_t>(groups.size()));
  for (const Group& g : groups) {
    std::span<const KvEvent> run = events.subspan(g.begin, g.end - g.begin);
    switch (g.kind) {
      case KvEvent::Kind::kStored:
        PackStored(pk, run, block_size, map_encoding);
        break;
      case KvEvent::Kind::kRemoved:
        PackRemoved(pk, run, map_encoding);
        break;
      case KvEvent::Kind::kAllCleared:
        PackCleared(pk, map_encoding);
        break;
    }
  }
  pk.pack_int32(0);  // data_parallel_rank
  return std::string(buf.data(), buf.size());
}

std::string RenderKvEventMetrics(const KvEventPublisherStats& s) {
  std::string out;
  auto counter = [&](const std::string& name, const std::string& help, int64_t v) {
    absl::StrAppend(&out, "# HELP ", name, " ", help, "\n# TYPE ", name, " counter\n", name, " ",
                    v, "\n");
  };
  counter("banyan_kv_events_batches_published_total",
          "KV event batches (engine steps with events) sent on the PUB socket.",
          s.batches_published);
  counter("banyan_kv_events_batches_dropped_total",
          "KV event batches dropped from the publisher's full queue (a resync follows).",
          s.batches_dropped);
  counter("banyan_kv_events_events_published_total", "KV events published.", s.events_published);
  counter("banyan_kv_events_replay_requests_total", "Replay requests answered.",
          s.replay_requests);
  counter("banyan_kv_events_replay_bad_requests_total", "Malformed replay requests.",
          s.replay_bad_requests);
  return out;
}

struct KvEventPublisher::Impl {
  zmq::context_t ctx{1};
  zmq::socket_t pub;
  zmq::socket_t replay;  // absent when no replay endpoint
  std::deque<std::pair<uint64_t, std::string>> ring;  // (seq, payload), oldest first
  uint64_t next_seq = 0;
};

absl::StatusOr<std::unique_ptr<KvEventPublisher>> KvEventPublisher::Create(
    const KvEventsConfig& config, int32_t block_size, bool start_thread) {
  std::unique_ptr<KvEventPublisher> p(new KvEventPublisher(config, block_size));
  p->wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (p->wake_fd_ < 0) {
    return absl::InternalError(absl::StrCat("kv-events: eventfd: ", std::strerror(errno)));
  }
  Impl& z = *p->impl_;
  const char* field = "endpoint";
  const std::string* where = &config.endpoint;
  try {
    z.pub = zmq::socket_t(z.ctx, zmq::socket_type::pub);
    z.pub.set(zmq::sockopt::sndhwm, static_cast<int>(config.hwm));
    z.pub.set(zmq::sockopt::linger, 200);
    if (config.BindsPub()) {
      z.pub.bind(config.endpoint);
    } else {
      z.pub.connect(config.endpoint);
    }
    if (!config.replay_endpoint.empty()) {
      field = "replay_endpoint";
      where = &config.replay_endpoint;
      z.replay = zmq::socket_t(z.ctx, zmq::socket_type::router);
      z.replay.set(zmq::sockopt::linger, 0);
      z.replay.bind(config.replay_endpoint);
    }
  } catch (const zmq::error_t& e) {
    const bool binding = std::string_view(field) == "replay_endpoint" || config.BindsPub();
    return absl::UnavailableError(absl::StrCat("kv-events-config.", field, ": cannot ",
                                               binding ? "bind " : "connect ", *where, ": ",
                                               e.what()));
  }
  if (start_thread) p->Run();
  return p;
}

KvEventPublisher::KvEventPublisher(const KvEventsConfig& config, int32_t block_size)
    : config_(config), block_size_(block_size), impl_(std::make_unique<Impl>()) {}

KvEventPublisher::~KvEventPublisher() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  Wake();
  if (thread_.joinable()) thread_.join();
  impl_.reset();  // closes the sockets (PUB lingers briefly for the last messages)
  if (wake_fd_ >= 0) close(wake_fd_);
}

void KvEventPublisher::Run() {
  if (!thread_.joinable()) thread_ = std::thread([this] { ThreadMain(); });
}

void KvEventPublisher::Wake() {
  if (wake_fd_ < 0) return;
  const uint64_t one = 1;
  // Non-blocking: a counter that is already high (the thread has not read it) needs no more.
  [[maybe_unused]] ssize_t n = write(wake_fd_, &one, sizeof(one));
}

void KvEventPublisher::Publish(std::vector<KvEvent> events) {
  Batch b{NowSeconds(), std::move(events)};
  Batch dropped;  // freed outside the lock
  {
    absl::MutexLock lock(&mu_);
    if (static_cast<int64_t>(queue_.size()) >= config_.max_queue_size) {
      dropped = std::move(queue_.front());
      queue_.pop_front();
      ++stats_.batches_dropped;
      resync_.store(true);
    }
    queue_.push_back(std::move(b));
  }
  Wake();
}

KvEventPublisherStats KvEventPublisher::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

bool KvEventPublisher::Drain() {
  std::deque<Batch> taken;
  bool stop;
  {
    absl::MutexLock lock(&mu_);
    taken.swap(queue_);
    stop = stop_;
  }
  Impl& z = *impl_;
  int64_t events = 0;
  for (const Batch& b : taken) {
    const uint64_t seq = z.next_seq++;
    std::string payload = EncodeKvEventBatch(b.ts, b.events, block_size_, config_.map_encoding);
    const std::string seq_bytes = BigEndian(seq);
    try {
      z.pub.send(zmq::buffer(config_.topic), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      z.pub.send(zmq::buffer(seq_bytes), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
      z.pub.send(zmq::buffer(payload), zmq::send_flags::dontwait);
    } catch (const zmq::error_t& e) {
      Log()->warn("[kv-events] send of batch {} failed: {}", seq, e.what());
    }
    z.ring.emplace_back(seq, std::move(payload));
    while (static_cast<int64_t>(z.ring.size()) > config_.buffer_steps) z.ring.pop_front();
    events += static_cast<int64_t>(b.events.size());
  }
  if (!taken.empty()) {
    absl::MutexLock lock(&mu_);
    stats_.batches_published += static_cast<int64_t>(taken.size());
    stats_.events_published += events;
  }
  return stop;
}

void KvEventPublisher::ThreadMain() {
  Impl& z = *impl_;
  const std::string end_seq(8, '\xff');  // -1, 8 bytes big-endian two's complement
  auto serve_replay = [&] {
    for (;;) {
      std::vector<zmq::message_t> frames;
      zmq::recv_result_t got;
      try {
        got = zmq::recv_multipart(z.replay, std::back_inserter(frames), zmq::recv_flags::dontwait);
      } catch (const zmq::error_t& e) {
        Log()->warn("[kv-events] replay receive failed: {}", e.what());
        return;
      }
      if (!got) return;
      const bool envelope = frames.size() >= 2 && frames[1].size() == 0;
      const bool good = frames.size() == 3 && envelope && frames[2].size() == 8;
      try {
        if (good) {
          uint64_t start = 0;
          for (size_t i = 0; i < 8; ++i) start = (start << 8) | frames[2].data<uint8_t>()[i];
          for (const auto& [seq, payload] : z.ring) {
            if (seq < start) continue;
            z.replay.send(zmq::buffer(frames[0].to_string_view()), zmq::send_flags::sndmore);
            z.replay.send(zmq::str_buffer(""), zmq::send_flags::sndmore);
            z.replay.send(zmq::buffer(BigEndian(seq)), zmq::send_flags::sndmore);
            z.replay.send(zmq::buffer(payload), zmq::send_flags::dontwait);
          }
        }
        if (envelope) {
          z.replay.send(zmq::buffer(frames[0].to_string_view()), zmq::send_flags::sndmore);
          z.replay.send(zmq::str_buffer(""), zmq::send_flags::sndmore);
          z.replay.send(zmq::buffer(end_seq), zmq::send_flags::sndmore);
          z.replay.send(zmq::str_buffer(""), zmq::send_flags::dontwait);
        }
      } catch (const zmq::error_t& e) {
        Log()->warn("[kv-events] replay answer failed: {}", e.what());
      }
      absl::MutexLock lock(&mu_);
      if (good) {
        ++stats_.replay_requests;
      } else {
        if (stats_.replay_bad_requests++ < 10) {
          Log()->warn("[kv-events] malformed replay request ({} frames): expected [empty frame, "
                      "8-byte big-endian start sequence number]",
                      frames.size() > 0 ? frames.size() - 1 : 0);
        }
      }
    }
  };
  for (;;) {
    zmq::pollitem_t items[2] = {{nullptr, wake_fd_, ZMQ_POLLIN, 0},
                                {z.replay ? z.replay.handle() : nullptr, 0, ZMQ_POLLIN, 0}};
    const size_t n = z.replay ? 2 : 1;
    try {
      zmq::poll(items, n, std::chrono::milliseconds(-1));
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) Log()->warn("[kv-events] poll failed: {}", e.what());
      continue;
    }
    if (items[0].revents & ZMQ_POLLIN) {
      uint64_t count;
      [[maybe_unused]] ssize_t r = read(wake_fd_, &count, sizeof(count));
    }
    if (n == 2 && (items[1].revents & ZMQ_POLLIN)) serve_replay();
    if (Drain()) break;
  }
}

}  // namespace banyan::server
