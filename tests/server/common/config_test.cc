// Tests of banyand's configuration (server/common/config.h): start-up inputs are checked before
// anything is opened or allocated.
#include "server/common/config.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/server/common/config_fixture.h"

namespace banyan::server {
namespace {

namespace fs = std::filesystem;

class ConfigTest : public testing::ConfigFixture {
 protected:
  std::string Fifo(const std::string& name) {
    const fs::path p = dir_ / name;
    EXPECT_EQ(mkfifo(p.c_str(), 0600), 0);
    return p.string();
  }
};

using testing::Has;

// Issue 14, finding 8: a FIFO as --model hung banyand forever at "loading model".
TEST_F(ConfigTest, InputPathsMustBeRegularFilesOrModelFolders) {
  const std::string fifo = Fifo("model.fifo");
  auto c = Load({"--model", fifo});
  EXPECT_FALSE(c.ok());
  EXPECT_TRUE(Has(Error(c), "regular file")) << Error(c);
  EXPECT_FALSE(Load({"--tokenizer", fifo}).ok());
  EXPECT_TRUE(Has(Error(Load({"--config", fifo})), "regular file")) << Error(Load({"--config", fifo}));
  EXPECT_FALSE(Load({"--tenants", fifo}).ok());
  EXPECT_FALSE(Load({"--model", "/dev/zero"}).ok());
  EXPECT_FALSE(Load({"--model", (dir_ / "absent.gguf").string()}).ok());
  EXPECT_FALSE(Load({"--tokenizer", dir_.string()}).ok());  // a folder is no tokenizer

  // A Hugging Face folder and plain files pass (their content is the loaders' business).
  const std::string file = Write("m.gguf", "x");
  EXPECT_TRUE(Load({"--model", file, "--tokenizer", file}).ok()) << Error(Load({"--model", file}));
  EXPECT_TRUE(Load({"--model", dir_.string()}).ok());
  // A symlink to a regular file is that file.
  fs::create_symlink(file, dir_ / "link.gguf");
  EXPECT_TRUE(Load({"--model", (dir_ / "link.gguf").string()}).ok());
}

// Issue 14, finding 8: --max-body-bytes 0 started and refused every POST.
TEST_F(ConfigTest, NonsenseLimitsAreRefused) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"--max-body-bytes", "0"},
           {"--max-body-bytes", "1023"},
           {"--max-body-bytes", "2GiB"},
           {"--kv-memory", "0"},
           {"--kv-memory", "99999999999999TiB"},  // overflows int64
           {"--kv-memory", "-5"},
           {"--http-port", "65536"},
           {"--grpc-port", "-1"},
           {"--listen-backlog", "0"},
           {"--listen-backlog", "100000"},
           {"--max-prompt-bytes", "0"},
           {"--max-body-bytes", "4096", "--max-prompt-bytes", "8192"},
           {"--queue-limit", "0"},
           {"--drain-timeout-ms", "-1"},
           {"--cpu-threads", "-1"},
           {"--cpu-threads", "two"},
       }) {
    std::string joined;
    for (const std::string& a : args) joined += a + " ";
    EXPECT_FALSE(Load(args).ok()) << joined;
  }
  auto ok = Load({"--max-body-bytes", "1024", "--listen-backlog", "64", "--cpu-threads", "3"});
  ASSERT_TRUE(ok.ok()) << Error(ok);
  EXPECT_EQ(ok->cpu_threads, 3);
  EXPECT_EQ(ok->server.max_body_bytes, 1024);
  EXPECT_EQ(ok->server.listen_backlog, 64);
  // An unset prompt limit follows a smaller body limit.
  EXPECT_EQ(ok->server.max_prompt_bytes, 1024);
  auto d = Load({});
  ASSERT_TRUE(d.ok()) << Error(d);
  EXPECT_EQ(d->server.listen_backlog, 1024);
  EXPECT_EQ(d->cpu_threads, 0);  // automatic
  EXPECT_EQ(d->server.max_prompt_bytes, int64_t{1} << 20);
  EXPECT_LE(d->server.max_prompt_bytes, d->server.max_body_bytes);
}

TEST_F(ConfigTest, ChatTemplateIsABuiltinNameOrAJinjaFile) {
  auto d = Load({});
  ASSERT_TRUE(d.ok()) << Error(d);
  EXPECT_EQ(d->server.chat_template, text::ChatTemplate::kModel);
  EXPECT_TRUE(d->server.chat_template_file.empty());
  auto b = Load({"--chat-template", "chatml"});
  ASSERT_TRUE(b.ok()) << Error(b);
  EXPECT_EQ(b->server.chat_template, text::ChatTemplate::kChatML);

  const std::string tmpl = Write("t.jinja", "{{ messages | length }}");
  auto f = Load({"--chat-template", tmpl});
  ASSERT_TRUE(f.ok()) << Error(f);
  EXPECT_EQ(f->server.chat_template_file, tmpl);
  EXPECT_TRUE(Has(Error(Load({"--chat-template", (dir_ / "absent.jinja").string()})),
                  "chat-template takes model, plain, llama2, chatml or a Jinja file"));
  EXPECT_FALSE(Load({"--chat-template", dir_.string()}).ok());  // a folder is no template

  // In a config file, a relative path is relative to the file's folder, not the working one.
  fs::create_directories(dir_ / "conf");
  Write("conf/mine.jinja", "x");
  const std::string cfg = Write("conf/c.json", R"({"chat_template": "mine.jinja"})");
  auto c = Load({"--config", cfg});
  ASSERT_TRUE(c.ok()) << Error(c);
  EXPECT_EQ(fs::path(c->server.chat_template_file), dir_ / "conf" / "mine.jinja");
  EXPECT_FALSE(Load({"--config", Write("c2.json", R"({"chat_template": "conf/absent.jinja"})")}).ok());
}

// Speculative decoding: the mode is one of three names, the counts have ranges, and a config
// file's draft-heads path is relative to the file (as its model path is).
TEST_F(ConfigTest, SpeculationOptions) {
  auto c = Load({"--speculative", "lookup", "--draft-tokens", "4", "--speculation-max-rows", "16"});
  ASSERT_TRUE(c.ok()) << Error(c);
  EXPECT_EQ(c->speculative, "lookup");
  EXPECT_EQ(c->draft_tokens, 4);
  EXPECT_EQ(c->speculation_max_rows, 16);
  EXPECT_EQ(Load({}).value().speculative, "off");
  EXPECT_TRUE(Has(Error(Load({"--speculative", "medusa"})), "speculative"));
  EXPECT_FALSE(Load({"--draft-tokens", "0"}).ok());
  EXPECT_FALSE(Load({"--draft-tokens", "17"}).ok());
  EXPECT_FALSE(Load({"--speculation-max-rows", "0"}).ok());
  EXPECT_EQ(c->prompt_lookup_min, 2);
  EXPECT_EQ(c->prompt_lookup_max, 0);
  auto n = Load({"--speculative", "lookup", "--prompt-lookup-min", "3", "--prompt-lookup-max",
                 "8"});
  ASSERT_TRUE(n.ok()) << Error(n);
  EXPECT_EQ(n->prompt_lookup_min, 3);
  EXPECT_EQ(n->prompt_lookup_max, 8);
  auto off = Load({"--speculative", "lookup", "--prompt-lookup-max", "0"});
  ASSERT_TRUE(off.ok()) << Error(off);
  EXPECT_EQ(off->prompt_lookup_max, 0);
  EXPECT_TRUE(Has(Error(Load({"--speculative", "lookup", "--prompt-lookup-min", "5",
                              "--prompt-lookup-max", "4"})),
                  "prompt-lookup-min (5) is more"));
  EXPECT_TRUE(Has(Error(Load({"--prompt-lookup-max", "8"})),
                  "only read with --speculative lookup"));
  EXPECT_TRUE(Has(Error(Load({"--prompt-lookup-min", "0"})), "prompt-lookup-min"));
  EXPECT_TRUE(Has(Error(Load({"--prompt-lookup-max", "65"})), "prompt-lookup-max"));
  auto t = Load({"--speculative", "hydra", "--draft-tree", "4,2,2", "--speculation-min-accept",
                 "0.25"});
  ASSERT_TRUE(t.ok()) << Error(t);
  EXPECT_EQ(t->draft_tree, (std::vector<int>{4, 2, 2}));
  EXPECT_FLOAT_EQ(t->speculation_min_accept, 0.25f);
  EXPECT_TRUE(Has(Error(Load({"--draft-tree", "4,0"})), "branching factors"));
  EXPECT_TRUE(Has(Error(Load({"--draft-tree", "4,,2"})), "branching factors"));
  EXPECT_TRUE(Has(Error(Load({"--draft-tree", "16,16"})), "256 candidates"));
  EXPECT_TRUE(Has(Error(Load({"--speculation-min-accept", "-1"})), "speculation-min-accept"));
  EXPECT_TRUE(Has(Error(Load({"--speculation-min-accept", "nan"})), "speculation-min-accept"));
  EXPECT_EQ(Load({}).value().speculation_adaptive, "on");
  EXPECT_EQ(Load({"--speculation-adaptive", "off"}).value().speculation_adaptive, "off");
  EXPECT_EQ(Load({}).value().speculation_profile, "on");
  EXPECT_EQ(Load({"--speculation-profile", "off"}).value().speculation_profile, "off");
  EXPECT_TRUE(Has(Error(Load({"--speculation-profile", "maybe"})), "speculation-profile"));
  EXPECT_TRUE(Has(Error(Load({"--speculation-adaptive", "maybe"})), "speculation-adaptive"));
  const std::string tree_cfg =
      Write("tree.json", R"({"draft_tree": [3, 2], "speculation_min_accept": 0.5})");
  auto tc = Load({"--config", tree_cfg});
  ASSERT_TRUE(tc.ok()) << Error(tc);
  EXPECT_EQ(tc->draft_tree, (std::vector<int>{3, 2}));
  EXPECT_FLOAT_EQ(tc->speculation_min_accept, 0.5f);
  const std::string cfg = Write("spec.json", R"({"speculative": "hydra", "draft_heads": "h/config.json"})");
  auto f = Load({"--config", cfg});
  ASSERT_TRUE(f.ok()) << Error(f);
  EXPECT_EQ(f->speculative, "hydra");
  EXPECT_EQ(f->draft_heads, (dir_ / "h/config.json").string());
}

TEST_F(ConfigTest, ParseBytesRefusesOverflow) {
  EXPECT_EQ(*ParseBytes("64TiB"), int64_t{64} << 40);
  EXPECT_FALSE(ParseBytes("9000000TiB").ok());
  EXPECT_FALSE(ParseBytes("99999999999999999999").ok());
}

// Issue 14, finding 8: --kv-memory 64TiB aborted with an uncaught std::bad_alloc.
TEST_F(ConfigTest, KvBudgetIsCheckedAgainstTheHost) {
  EXPECT_EQ(*ParseMemAvailable("MemTotal:       24684000 kB\nMemFree:  100 kB\n"
                               "MemAvailable:   23760096 kB\nBuffers: 1 kB\n"),
            int64_t{23760096} * 1024);
  EXPECT_FALSE(ParseMemAvailable("MemTotal: 5 kB\n").ok());
  const int64_t gib = int64_t{1} << 30;
  EXPECT_TRUE(CheckMemoryBudget("--kv-memory", gib, 4 * gib, "host").ok());
  absl::Status s = CheckMemoryBudget("--kv-memory", int64_t{64} << 40, 4 * gib, "host");
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(Has(std::string(s.message()), "--kv-memory")) << s;
  // This machine: MemAvailable exists and is positive.
  absl::StatusOr<int64_t> avail = AvailableHostMemoryBytes();
  ASSERT_TRUE(avail.ok()) << avail.status();
  EXPECT_GT(*avail, 0);
}

TEST_F(ConfigTest, TenantsFromTheConfigFileAndTheTenantsFlag) {
  const std::string cfg = Write("c.json", R"({
    "api_keys": ["sk-plain"],
    "tenants": [{"name": "alice", "keys": ["sk-a"], "max_concurrent_requests": 4},
                {"name": "bob", "keys": ["sk-b1", "sk-b2"], "max_kv_chunks": 100}]})");
  auto c = Load({"--config", cfg});
  ASSERT_TRUE(c.ok()) << Error(c);
  const std::vector<TenantSpec>& t = c->server.tenants;
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0].name, "alice");
  EXPECT_EQ(t[0].max_concurrent_requests, 4);
  EXPECT_EQ(t[1].keys, (std::vector<std::string>{"sk-b1", "sk-b2"}));
  EXPECT_EQ(t[1].max_kv_chunks, 100);
  EXPECT_EQ(t[2].name, kDefaultTenant);  // the plain keys' tenant
  EXPECT_EQ(t[2].keys, (std::vector<std::string>{"sk-plain"}));

  // --tenants FILE replaces the file's section; --api-key flags replace its keys.
  const std::string tf = Write("t.json", R"([{"name": "carol", "keys": ["sk-c"]}])");
  c = Load({"--config", cfg, "--tenants", tf, "--api-key", "sk-flag"});
  ASSERT_TRUE(c.ok()) << Error(c);
  ASSERT_EQ(c->server.tenants.size(), 2u);
  EXPECT_EQ(c->server.tenants[0].name, "carol");
  EXPECT_EQ(c->server.tenants[1].keys, (std::vector<std::string>{"sk-flag"}));

  for (const char* bad : {
           R"([{"name": "a", "keys": ["k"], "colour": "red"}])",     // unknown key
           R"([{"name": "a", "keys": "k"}])",                         // keys not a list
           R"([{"name": "a", "keys": ["k"]}, {"name": "b", "keys": ["k"]}])",
           R"([{"name": "a b", "keys": ["k"]}])",
           R"([{"name": "a", "keys": ["k "]}])",
           R"([{"name": "a", "keys": ["k"], "max_concurrent_requests": -1}])",
           R"([{"name": "a", "keys": ["k"], "max_concurrent_requests": 1.5}])",
           R"({"name": "a"})",
       }) {
    EXPECT_FALSE(Load({"--tenants", Write("bad.json", bad)}).ok()) << bad;
  }
  // A key with a trailing space can not be configured (it could never be sent).
  EXPECT_FALSE(Load({"--api-key", "sk-x "}).ok());
}

TEST_F(ConfigTest, DeeplyNestedConfigIsAClearError) {
  const std::string deep = "{\"model\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
  auto c = Load({"--config", Write("deep.json", deep)});
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(Has(Error(c), "nest")) << Error(c);
  auto t = Load({"--tenants", Write("deep_t.json", std::string(100000, '[') + std::string(100000, ']'))});
  EXPECT_TRUE(Has(Error(t), "nest")) << Error(t);
}

TEST_F(ConfigTest, ReasoningParserTakesVllmsNames) {
  auto d = Load({});
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->server.reasoning_parser, text::ReasoningParser::kNone);
  auto q = Load({"--reasoning-parser", "qwen3"});
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_EQ(q->server.reasoning_parser, text::ReasoningParser::kQwen3);
  auto r1 = Load({"--reasoning-parser=deepseek_r1"});
  ASSERT_TRUE(r1.ok()) << r1.status();
  EXPECT_EQ(r1->server.reasoning_parser, text::ReasoningParser::kDeepSeekR1);
  auto f = Load({"--config", Write("r.json", R"({"reasoning_parser": "qwen3"})")});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->server.reasoning_parser, text::ReasoningParser::kQwen3);
  auto off = Load({"--config", Write("r2.json", R"({"reasoning_parser": "qwen3"})"),
                   "--reasoning-parser", "none"});
  ASSERT_TRUE(off.ok()) << off.status();
  EXPECT_EQ(off->server.reasoning_parser, text::ReasoningParser::kNone);
  const std::string e = Error(Load({"--reasoning-parser", "granite"}));
  EXPECT_TRUE(Has(e, "reasoning-parser") && Has(e, "granite") && Has(e, "qwen3") &&
              Has(e, "deepseek_r1"))
      << e;
}

}  // namespace
}  // namespace banyan::server
