// --kv-events-config parsing (server/common/kv_events_config.h) and the ZeroMQ publisher
// (server/common/kv_event_publisher.h): the msgpack layout decoded back, the bounded queue's drops and
// resync request, replay from a sequence number, a malformed replay request, a port in use.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#define MSGPACK_NO_BOOST
#include <msgpack.hpp>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "gtest/gtest.h"
#include "server/common/kv_event_publisher.h"
#include "server/common/kv_events_config.h"
#include "tests/server/common/config_fixture.h"

namespace banyan::server {
namespace {

using kvcache::KvEvent;

TEST(KvEventsConfigTest, VllmSpellingDefaultsAndErrorsNamingTheField) {
  auto off = ParseKvEventsConfig("{}");
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->active());
  EXPECT_EQ(off->publisher, "null");

  auto c = ParseKvEventsConfig(
      R"({"enable_kv_cache_events":true,"publisher":"zmq","endpoint":"tcp://*:5557",)"
      R"("replay_endpoint":"tcp://*:5558","topic":"kv-events","buffer_steps":10000})");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(c->active());
  EXPECT_TRUE(c->BindsPub());
  EXPECT_EQ(c->topic, "kv-events");
  EXPECT_EQ(c->replay_endpoint, "tcp://*:5558");
  EXPECT_FALSE(c->map_encoding);

  auto implied = ParseKvEventsConfig(R"({"enable_kv_cache_events":true})");
  ASSERT_TRUE(implied.ok());
  EXPECT_EQ(implied->publisher, "zmq");  // as vLLM: zmq when enabled and unset
  EXPECT_EQ(implied->endpoint, "tcp://*:5557");

  auto connect = ParseKvEventsConfig(R"({"endpoint":"tcp://10.0.0.1:5557"})");
  ASSERT_TRUE(connect.ok());
  EXPECT_FALSE(connect->BindsPub());  // vLLM's rule: no wildcard, connect
  auto bind = ParseKvEventsConfig(R"({"endpoint":"tcp://127.0.0.1:5557","bind":true})");
  ASSERT_TRUE(bind.ok());
  EXPECT_TRUE(bind->BindsPub());
  EXPECT_TRUE(IsLocalEndpoint(bind->endpoint));
  EXPECT_FALSE(IsLocalEndpoint("tcp://*:5557"));
  EXPECT_FALSE(IsLocalEndpoint("tcp://0.0.0.0:5557"));

  struct Bad {
    const char* json;
    const char* field;
  } bad[] = {
      {R"({"publisher":"kafka"})", "kv-events-config.publisher"},
      {R"({"endpoint":"udp://127.0.0.1:1"})", "kv-events-config.endpoint"},
      {R"({"endpoint":"tcp://127.0.0.1"})", "kv-events-config.endpoint"},
      {R"({"endpoint":"tcp://127.0.0.1:70000"})", "kv-events-config.endpoint"},
      {R"({"replay_endpoint":"tcp://h:x"})", "kv-events-config.replay_endpoint"},
      {R"({"enable_kv_cache_events":"yes"})", "kv-events-config.enable_kv_cache_events"},
      {R"({"buffer_steps":0})", "kv-events-config.buffer_steps"},
      {R"({"max_queue_size":1.5})", "kv-events-config.max_queue_size"},
      {R"({"topics":"x"})", "kv-events-config.topics"},
      {R"({"event_encoding":"json"})", "kv-events-config.event_encoding"},
      {R"({"enable_kv_cache_events":true,"endpoint":"tcp://*:1","replay_endpoint":"tcp://*:1"})",
       "kv-events-config.replay_endpoint"},
      {R"([1])", "kv-events-config"},
      {R"({"topic":)", "kv-events-config"},
  };
  for (const Bad& b : bad) {
    auto r = ParseKvEventsConfig(b.json);
    ASSERT_FALSE(r.ok()) << b.json;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find(b.field), std::string::npos)
        << b.json << ": " << r.status();
  }
}

// The flag and the config file's object form reach DaemonConfig; errors name the field there too.
using KvEventsFlagTest = testing::ConfigFixture;

TEST_F(KvEventsFlagTest, FlagAndConfigFileObject) {
  auto off = Load({});
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_FALSE(off->kv_events.active());
  EXPECT_FALSE(off->server.debug_kv_blocks);

  auto flag = Load({"--kv-events-config",
                    R"({"enable_kv_cache_events":true,"endpoint":"tcp://*:6000","topic":"t"})",
                    "--debug-kv-blocks", "on"});
  ASSERT_TRUE(flag.ok()) << flag.status();
  EXPECT_TRUE(flag->kv_events.active());
  EXPECT_EQ(flag->kv_events.endpoint, "tcp://*:6000");
  EXPECT_TRUE(flag->server.debug_kv_blocks);

  const auto file = Write("c.json", R"({"kv_events_config": {"enable_kv_cache_events": true,
      "replay_endpoint": "tcp://*:6001", "buffer_steps": 5}})");
  auto from_file = Load({"--config", file.string()});
  ASSERT_TRUE(from_file.ok()) << from_file.status();
  EXPECT_TRUE(from_file->kv_events.active());
  EXPECT_EQ(from_file->kv_events.replay_endpoint, "tcp://*:6001");
  EXPECT_EQ(from_file->kv_events.buffer_steps, 5);

  EXPECT_TRUE(testing::Has(Error(Load({"--kv-events-config", R"({"hwm":-1})"})),
                           "kv-events-config.hwm"));
  EXPECT_TRUE(testing::Has(Error(Load({"--debug-kv-blocks", "yes"})), "debug-kv-blocks"));
}

KvEvent Stored(uint64_t h, std::optional<uint64_t> parent, int32_t first_token) {
  KvEvent e;
  e.kind = KvEvent::Kind::kStored;
  e.hash = h;
  e.parent = parent;
  for (int32_t i = 0; i < 4; ++i) e.tokens.push_back(first_token + i);
  e.ns = "tenant";
  return e;
}

KvEvent Removed(uint64_t h) {
  KvEvent e;
  e.kind = KvEvent::Kind::kRemoved;
  e.hash = h;
  return e;
}

std::vector<KvEvent> SampleEvents() {
  KvEvent cleared;
  cleared.kind = KvEvent::Kind::kAllCleared;
  // Two chained blocks (one BlockStored), one block of another chain, two removals, a clear.
  return {Stored(0xfedcba9876543210ull, std::nullopt, 1), Stored(2, 0xfedcba9876543210ull, 5),
          Stored(3, 7, 9), Removed(2), Removed(3), cleared};
}

TEST(KvEventEncodingTest, TaggedArraysInVllmOrder) {
  const std::vector<KvEvent> events = SampleEvents();
  const std::string payload = EncodeKvEventBatch(12.5, events, 4, /*map_encoding=*/false);
  msgpack::object_handle oh = msgpack::unpack(payload.data(), payload.size());
  const msgpack::object& batch = oh.get();
  ASSERT_EQ(batch.type, msgpack::type::ARRAY);
  ASSERT_EQ(batch.via.array.size, 3u);
  EXPECT_EQ(batch.via.array.ptr[0].type, msgpack::type::FLOAT64);
  EXPECT_EQ(batch.via.array.ptr[0].as<double>(), 12.5);
  EXPECT_EQ(batch.via.array.ptr[2].as<int>(), 0);  // data_parallel_rank
  const msgpack::object& ev = batch.via.array.ptr[1];
  ASSERT_EQ(ev.via.array.size, 4u);

  const msgpack::object* s = ev.via.array.ptr[0].via.array.ptr;
  ASSERT_EQ(ev.via.array.ptr[0].via.array.size, 8u);
  EXPECT_EQ(s[0].as<std::string>(), "BlockStored");
  EXPECT_EQ(s[1].as<std::vector<uint64_t>>(),
            (std::vector<uint64_t>{0xfedcba9876543210ull, 2}));
  EXPECT_TRUE(s[2].is_nil());
  EXPECT_EQ(s[3].as<std::vector<int32_t>>(), (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(s[4].as<int>(), 4);
  EXPECT_TRUE(s[5].is_nil());                   // lora_id
  EXPECT_EQ(s[6].as<std::string>(), "GPU");     // medium
  EXPECT_TRUE(s[7].is_nil());                   // lora_name

  const msgpack::object* s2 = ev.via.array.ptr[1].via.array.ptr;
  EXPECT_EQ(s2[1].as<std::vector<uint64_t>>(), std::vector<uint64_t>{3});
  EXPECT_EQ(s2[2].as<uint64_t>(), 7u);

  const msgpack::object* r = ev.via.array.ptr[2].via.array.ptr;
  ASSERT_EQ(ev.via.array.ptr[2].via.array.size, 3u);
  EXPECT_EQ(r[0].as<std::string>(), "BlockRemoved");
  EXPECT_EQ(r[1].as<std::vector<uint64_t>>(), (std::vector<uint64_t>{2, 3}));
  EXPECT_EQ(r[2].as<std::string>(), "GPU");

  ASSERT_EQ(ev.via.array.ptr[3].via.array.size, 1u);
  EXPECT_EQ(ev.via.array.ptr[3].via.array.ptr[0].as<std::string>(), "AllBlocksCleared");
}

TEST(KvEventEncodingTest, TaggedMapsKeyedByFieldName) {
  const std::vector<KvEvent> events = SampleEvents();
  const std::string payload = EncodeKvEventBatch(1.0, events, 4, /*map_encoding=*/true);
  msgpack::object_handle oh = msgpack::unpack(payload.data(), payload.size());
  const msgpack::object& ev = oh.get().via.array.ptr[1];
  ASSERT_EQ(ev.via.array.size, 4u);
  auto stored = ev.via.array.ptr[0].as<std::map<std::string, msgpack::object>>();
  EXPECT_EQ(stored.at("type").as<std::string>(), "BlockStored");
  EXPECT_EQ(stored.at("block_hashes").as<std::vector<uint64_t>>().size(), 2u);
  EXPECT_TRUE(stored.at("parent_block_hash").is_nil());
  EXPECT_EQ(stored.at("token_ids").as<std::vector<int32_t>>().size(), 8u);
  EXPECT_EQ(stored.at("block_size").as<int>(), 4);
  EXPECT_EQ(stored.at("medium").as<std::string>(), "GPU");
  EXPECT_TRUE(stored.contains("lora_id"));
  auto removed = ev.via.array.ptr[2].as<std::map<std::string, msgpack::object>>();
  EXPECT_EQ(removed.at("type").as<std::string>(), "BlockRemoved");
  auto cleared = ev.via.array.ptr[3].as<std::map<std::string, msgpack::object>>();
  EXPECT_EQ(cleared.at("type").as<std::string>(), "AllBlocksCleared");
}

// A publisher on ipc:// sockets in a fresh folder.
struct IpcPublisher {
  IpcPublisher(int64_t max_queue, bool start) {
    char dir[] = "/tmp/kv-events-test-XXXXXX";
    folder = mkdtemp(dir);
    config.enable_kv_cache_events = true;
    config.publisher = "zmq";
    config.endpoint = "ipc://" + folder + "/pub";
    config.replay_endpoint = "ipc://" + folder + "/replay";
    config.topic = "kv";
    config.max_queue_size = max_queue;
    auto p = KvEventPublisher::Create(config, 4, start);
    EXPECT_TRUE(p.ok()) << p.status();
    publisher = std::move(*p);
  }
  ~IpcPublisher() {
    publisher.reset();
    std::filesystem::remove_all(folder);
  }
  // Waits for a state (never a time): polls until `pred` holds, failing after a generous bound.
  template <typename Pred>
  bool WaitFor(Pred pred) {
    for (int i = 0; i < 6000; ++i) {
      if (pred()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return false;
  }
  std::string folder;
  KvEventsConfig config;
  std::unique_ptr<KvEventPublisher> publisher;
};

std::vector<KvEvent> OneBatch(uint64_t h) { return {Stored(h, std::nullopt, 0)}; }

TEST(KvEventPublisherTest, FullQueueDropsTheOldestAndAsksForAResync) {
  IpcPublisher p(/*max_queue=*/2, /*start=*/false);
  EXPECT_FALSE(p.publisher->TakeResyncRequest());
  for (uint64_t h = 1; h <= 5; ++h) p.publisher->Publish(OneBatch(h));
  EXPECT_EQ(p.publisher->stats().batches_dropped, 3);
  EXPECT_TRUE(p.publisher->TakeResyncRequest());
  EXPECT_FALSE(p.publisher->TakeResyncRequest()) << "a resync request is taken once";
  p.publisher->Run();
  EXPECT_TRUE(p.WaitFor([&] { return p.publisher->stats().batches_published == 2; }));
}

uint64_t SeqOf(const zmq::message_t& m) {
  uint64_t v = 0;
  for (size_t i = 0; i < m.size(); ++i) v = (v << 8) | m.data<uint8_t>()[i];
  return v;
}

TEST(KvEventPublisherTest, ReplayFromASequenceNumberAndAMalformedRequest) {
  IpcPublisher p(100, true);
  for (uint64_t h = 1; h <= 3; ++h) p.publisher->Publish(OneBatch(h));
  ASSERT_TRUE(p.WaitFor([&] { return p.publisher->stats().batches_published == 3; }));

  zmq::context_t ctx;
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::rcvtimeo, 30000);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.connect(p.config.replay_endpoint);
  const std::string start("\0\0\0\0\0\0\0\1", 8);  // from sequence number 1
  dealer.send(zmq::str_buffer(""), zmq::send_flags::sndmore);
  dealer.send(zmq::buffer(start));
  std::vector<uint64_t> seqs;
  for (;;) {
    std::vector<zmq::message_t> frames;
    ASSERT_TRUE(zmq::recv_multipart(dealer, std::back_inserter(frames)));
    ASSERT_EQ(frames.size(), 3u);
    EXPECT_EQ(frames[0].size(), 0u);
    if (frames[1].to_string() == std::string(8, '\xff')) {
      EXPECT_EQ(frames[2].size(), 0u);
      break;
    }
    seqs.push_back(SeqOf(frames[1]));
    msgpack::object_handle oh = msgpack::unpack(frames[2].data<char>(), frames[2].size());
    EXPECT_EQ(oh.get().via.array.size, 3u);
  }
  EXPECT_EQ(seqs, (std::vector<uint64_t>{1, 2}));

  // A start that is not 8 bytes: only the end marker, counted.
  dealer.send(zmq::str_buffer(""), zmq::send_flags::sndmore);
  dealer.send(zmq::str_buffer("abc"));
  std::vector<zmq::message_t> frames;
  ASSERT_TRUE(zmq::recv_multipart(dealer, std::back_inserter(frames)));
  ASSERT_EQ(frames.size(), 3u);
  EXPECT_EQ(frames[1].to_string(), std::string(8, '\xff'));
  EXPECT_TRUE(p.WaitFor([&] { return p.publisher->stats().replay_bad_requests == 1; }));
  EXPECT_EQ(p.publisher->stats().replay_requests, 1);
}

TEST(KvEventPublisherTest, PortInUseIsAStartUpErrorNamingTheField) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  KvEventsConfig c;
  c.enable_kv_cache_events = true;
  c.publisher = "zmq";
  c.endpoint = "tcp://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  c.bind = true;
  auto p = KvEventPublisher::Create(c, 16);
  close(fd);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("kv-events-config.endpoint: cannot bind"),
            std::string::npos)
      << p.status();
}

}  // namespace
}  // namespace banyan::server
