// Issue 43, item 4, over gRPC: refusals are counted by reason and tenant in the context's
// RejectionCounters (rendered by /metrics on the HTTP port), like HTTP's.
#include <string>

#include "gtest/gtest.h"
#include "tests/server/grpc/test_server.h"

namespace banyan::server::testing {
namespace {

auto As(const std::string& key) {
  return [key](grpc::ClientContext* ctx) { ctx->AddMetadata("authorization", "Bearer " + key); };
}

TEST(GrpcRejectionsTest, RefusalsAreCountedByReasonAndTenant) {
  TestServerOptions options;
  options.num_chunks = 2048;
  options.max_prompt_bytes = 1024;
  TenantSpec alice{"alice", {"sk-alice"}};
  alice.max_concurrent_requests = 1;
  options.tenants = {alice, TenantSpec{"bob", {"sk-bob"}}};
  TestServer server(options);
  const RejectionCounters& counts = *server.context().rejections;
  auto stub = v1::Generation::NewStub(server.NewChannel());

  EXPECT_EQ(Generate(*stub, GreedyText("Hi", 2)).status.error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  grpc::ClientContext c1;
  v1::ListModelsResponse models;
  EXPECT_EQ(stub->ListModels(&c1, v1::ListModelsRequest(), &models).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(counts.Count(RejectReason::kUnauthorized, ""), 2);

  const GenerateResult long_prompt =
      Generate(*stub, GreedyText(std::string(2000, 'a'), 2), As("sk-bob"));
  EXPECT_EQ(long_prompt.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  grpc::ClientContext c2;
  c2.AddMetadata("authorization", "Bearer sk-bob");
  v1::TokenizeRequest treq;
  treq.set_text(std::string(2000, 'a'));
  v1::TokenizeResponse tresp;
  EXPECT_EQ(stub->Tokenize(&c2, treq, &tresp).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(counts.Count(RejectReason::kPromptTooLong, "bob"), 2);

  v1::GenerateRequest bad = GreedyText("Hi", 2);
  bad.set_model("gpt-evil");
  EXPECT_EQ(Generate(*stub, bad, As("sk-bob")).status.error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(counts.Count(RejectReason::kNotFound, "bob"), 1);

  // alice's one slot held by a long stream.
  v1::GenerateRequest long_req = GreedyText("Once upon a time", 400);
  long_req.mutable_sampling()->set_ignore_eos(true);
  long_req.mutable_sampling()->set_n(4);
  grpc::ClientContext first_ctx;
  first_ctx.AddMetadata("authorization", "Bearer sk-alice");
  auto reader = stub->Generate(&first_ctx, long_req);
  v1::GenerateResponse msg;
  ASSERT_TRUE(reader->Read(&msg));
  EXPECT_EQ(Generate(*stub, GreedyText("Hi", 2), As("sk-alice")).status.error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(counts.Count(RejectReason::kTenantConcurrency, "alice"), 1);
  EXPECT_EQ(counts.Count(RejectReason::kQueueFull, "alice"), 0);
  first_ctx.TryCancel();
  while (reader->Read(&msg)) {
  }
  reader->Finish();

  server.ready() = false;
  EXPECT_EQ(Generate(*stub, GreedyText("Hi", 2), As("sk-bob")).status.error_code(),
            grpc::StatusCode::UNAVAILABLE);
  EXPECT_EQ(counts.Count(RejectReason::kDraining, "bob"), 1);
  server.ready() = true;

  int64_t total = 0;
  for (const RejectionSample& s : counts.Snapshot()) total += s.count;
  EXPECT_EQ(total, 7) << "a refusal counted twice, or one not listed above";
}

TEST(GrpcRejectionsTest, QueueFullIsCounted) {
  TestServerOptions options;
  options.scheduler.queue_limit = 0;  // every submission finds the queue full
  TestServer server(options);
  auto stub = v1::Generation::NewStub(server.NewChannel());
  EXPECT_EQ(Generate(*stub, GreedyText("Hi", 2)).status.error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(server.context().rejections->Count(RejectReason::kQueueFull, "default"), 1);
}

}  // namespace
}  // namespace banyan::server::testing
