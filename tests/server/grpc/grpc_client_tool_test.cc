// The banyan-grpc-client tool against a real in-process server: its output equals what the
// stubs receive, and failures give exit status 1 with the gRPC code on stderr.
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/server/grpc/test_server.h"

namespace banyan::server::testing {
namespace {

struct ToolRun {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') {
      q.append("'\\''");
    } else {
      q.push_back(c);
    }
  }
  q.push_back('\'');
  return q;
}

ToolRun RunTool(const std::vector<std::string>& args) {
  const std::filesystem::path err_file =
      std::filesystem::temp_directory_path() /
      ("banyan_grpc_client_" + std::to_string(::getpid()) + ".err");
  std::string cmd = Quote(BANYAN_GRPC_CLIENT);
  for (const std::string& a : args) {
    cmd.push_back(' ');
    cmd.append(Quote(a));
  }
  cmd.append(" 2>");
  cmd.append(Quote(err_file.string()));
  ToolRun run;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return run;
  std::array<char, 4096> buf;
  size_t got;
  while ((got = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) run.out.append(buf.data(), got);
  const int status = ::pclose(pipe);
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream err(err_file);
  std::stringstream ss;
  ss << err.rdbuf();
  run.err = ss.str();
  std::filesystem::remove(err_file);
  return run;
}

class GrpcClientToolTest : public ::testing::Test {
 protected:
  GrpcClientToolTest() : stub_(v1::Generation::NewStub(server_.NewChannel())) {}
  TestServer server_;
  std::unique_ptr<v1::Generation::Stub> stub_;
};

TEST_F(GrpcClientToolTest, StreamsTheSameTextAsTheStub) {
  GenerateResult want = Generate(*stub_, GreedyText("Once upon a time", 30));
  ASSERT_TRUE(want.status.ok());
  ToolRun run = RunTool({"--addr", server_.address(), "--prompt", "Once upon a time",
                         "--max-tokens", "30", "--temperature", "0"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_EQ(run.out, want.choices[0].text + "\n");
  EXPECT_NE(run.err.find("[usage]"), std::string::npos) << run.err;
}

TEST_F(GrpcClientToolTest, JsonlWithNAndSeed) {
  v1::GenerateRequest req = GreedyText("The cat", 10);
  req.mutable_sampling()->set_temperature(0.8f);
  req.mutable_sampling()->set_seed(7);
  req.mutable_sampling()->set_n(2);
  GenerateResult want = Generate(*stub_, req);
  ASSERT_TRUE(want.status.ok());
  ToolRun run = RunTool({"--addr", server_.address(), "--prompt", "The cat", "--max-tokens", "10",
                         "--temperature", "0.8", "--seed", "7", "--n", "2", "--jsonl"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  std::istringstream lines(run.out);
  std::string line;
  int index = 0;
  while (std::getline(lines, line)) {
    nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("usage")) {
      EXPECT_EQ(j["usage"]["completion_tokens"].get<int>(), want.usage->completion_tokens());
      continue;
    }
    EXPECT_EQ(j["index"].get<int>(), index);
    EXPECT_EQ(j["text"].get<std::string>(), want.choices[index].text);
    EXPECT_EQ(j["token_ids"].get<std::vector<int32_t>>(), want.choices[index].token_ids);
    ++index;
  }
  EXPECT_EQ(index, 2);
}

TEST_F(GrpcClientToolTest, OtherModesAndErrors) {
  ToolRun models = RunTool({"--addr", server_.address(), "--list-models"});
  EXPECT_EQ(models.exit_code, 0) << models.err;
  EXPECT_EQ(models.out.rfind(std::string(kModelName) + " ", 0), 0u) << models.out;

  ToolRun health = RunTool({"--addr", server_.address(), "--health"});
  EXPECT_EQ(health.exit_code, 0) << health.err;
  EXPECT_EQ(health.out, "SERVING\n");

  ToolRun tok = RunTool({"--addr", server_.address(), "--tokenize", "--prompt", "Hi there"});
  EXPECT_EQ(tok.exit_code, 0) << tok.err;
  std::string want;
  for (int32_t id : Bundle().tokenizer->Encode("Hi there", true)) {
    if (!want.empty()) want.push_back(' ');
    want.append(std::to_string(id));
  }
  EXPECT_EQ(tok.out, want + "\n");

  ToolRun bad = RunTool({"--addr", server_.address(), "--prompt", "x", "--n", "99"});
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("error: INVALID_ARGUMENT: n must be between 1 and 16"), std::string::npos)
      << bad.err;

  ToolRun usage = RunTool({"--addr", server_.address()});
  EXPECT_EQ(usage.exit_code, 2);
}

}  // namespace
}  // namespace banyan::server::testing
