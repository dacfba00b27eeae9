// banyand's configuration as users coming from vLLM and from containers write it: vLLM's option
// names (server/common/option_aliases.h), paths in a config file relative to the file, and
// --backend auto (server/common/backend_choice.h).
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/server/common/config_fixture.h"
#include "server/common/backend_choice.h"
#include "server/common/config.h"
#include "server/common/option_aliases.h"

namespace banyan::server {
namespace {

namespace fs = std::filesystem;

using ConfigAliasesTest = testing::ConfigFixture;
using testing::Has;

TEST_F(ConfigAliasesTest, VllmNamesMapToBanyandOptions) {
  auto c = Load({"--port", "9123", "--max-num-seqs", "17", "--block-size=32", "--host",
                 "0.0.0.0", "--served-model-name", "m", "--api-key", "sk-1",
                 "--max-model-len", "1024"});
  ASSERT_TRUE(c.ok()) << Error(c);
  EXPECT_EQ(c->server.http_port, 9123);
  EXPECT_EQ(c->max_batch, 17);
  EXPECT_EQ(c->chunk_size, 32);
  EXPECT_EQ(c->server.host, "0.0.0.0");
  EXPECT_EQ(c->served_model_name, "m");
  EXPECT_EQ(c->server.api_keys, std::vector<std::string>{"sk-1"});
  EXPECT_EQ(c->max_model_len, 1024);
  // The alias checks its value like the option it stands for.
  EXPECT_TRUE(Has(Error(Load({"--port", "70000"})), "http-port")) << Error(Load({"--port", "70000"}));
  EXPECT_FALSE(Load({"--block-size", "8"}).ok());  // chunk-size is 16..256
  EXPECT_FALSE(Load({"--max-model-len", "-1"}).ok());
  // In a config file too.
  const fs::path file = Write("c.json", R"({"port": 9124, "max_num_seqs": 5})");
  c = Load({"--config", file.string()});
  ASSERT_TRUE(c.ok()) << Error(c);
  EXPECT_EQ(c->server.http_port, 9124);
  EXPECT_EQ(c->max_batch, 5);
}

// vLLM's --quantization: fp8 (or none); other methods are refused naming the option.
TEST_F(ConfigAliasesTest, QuantizationTakesFp8) {
  auto c = Load({});
  ASSERT_TRUE(c.ok()) << Error(c);
  EXPECT_EQ(c->quantization, "none");
  c = Load({"--quantization", "fp8"});
  ASSERT_TRUE(c.ok()) << Error(c);
  EXPECT_EQ(c->quantization, "fp8");
  c = Load({"--config", Write("q.json", R"({"quantization": "fp8"})").string()});
  ASSERT_TRUE(c.ok()) << Error(c);
  EXPECT_EQ(c->quantization, "fp8");
  for (const char* method : {"awq", "gptq", "bitsandbytes", "fp4", ""}) {
    c = Load({"--quantization", method});
    ASSERT_FALSE(c.ok()) << method;
    EXPECT_TRUE(Has(Error(c), "quantization: expected none|fp8")) << Error(c);
  }
}

// vLLM's --kv-cache-dtype: auto / bf16 keep the model's dtype, fp8 (and vLLM's fp8_e4m3) the FP8
// cache; what banyand does not have (fp8_e5m2, fp16 beside a bf16 model) is refused naming it.
TEST_F(ConfigAliasesTest, KvCacheDtypeTakesFp8) {
  auto c = Load({});
  ASSERT_TRUE(c.ok()) << Error(c);
  EXPECT_EQ(c->kv_cache_dtype, "auto");
  for (const char* v : {"fp8", "fp8_e4m3"}) {
    c = Load({"--kv-cache-dtype", v});
    ASSERT_TRUE(c.ok()) << Error(c);
    EXPECT_EQ(c->kv_cache_dtype, "fp8");
  }
  c = Load({"--config", Write("kv.json", R"({"kv_cache_dtype": "fp8"})").string()});
  ASSERT_TRUE(c.ok()) << Error(c);
  EXPECT_EQ(c->kv_cache_dtype, "fp8");
  for (const char* v : {"fp8_e5m2", "fp16", "int8", ""}) {
    c = Load({"--kv-cache-dtype", v});
    ASSERT_FALSE(c.ok()) << v;
    EXPECT_TRUE(Has(Error(c), "kv-cache-dtype: expected auto|bf16|fp8|fp8_e4m3")) << Error(c);
  }
}

TEST_F(ConfigAliasesTest, SwitchesTakeNoValue) {
  // An accepted switch does not swallow the option after it.
  auto c = Load({"--enable-prefix-caching", "--port", "9125", "--enable-chunked-prefill"});
  ASSERT_TRUE(c.ok()) << Error(c);
  EXPECT_EQ(c->server.http_port, 9125);
  // A refused switch is named, not the option after it.
  c = Load({"--trust-remote-code", "--port", "9125"});
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(Has(Error(c), "trust-remote-code")) << Error(c);
  EXPECT_TRUE(Has(Error(c), "no banyand counterpart")) << Error(c);
}

TEST_F(ConfigAliasesTest, UnmappedVllmOptionsAreRefusedSayingSo) {
  for (const char* opt : {"--tensor-parallel-size", "--dtype", "--max-num-batched-tokens",
                          "--swap-space"}) {
    auto c = Load({opt, "1"});
    ASSERT_FALSE(c.ok()) << opt;
    EXPECT_TRUE(Has(Error(c), std::string(opt).substr(2))) << Error(c);
    EXPECT_TRUE(Has(Error(c), "no banyand counterpart")) << Error(c);
  }
  // With what to use instead where there is something.
  EXPECT_TRUE(Has(Error(Load({"--max-num-batched-tokens", "4096"})), "--prefill-budget"));
  // A plain typo stays "unknown option".
  EXPECT_TRUE(Has(Error(Load({"--prot", "1"})), "unknown option")) << Error(Load({"--prot", "1"}));
  EXPECT_EQ(*CanonicalOptionName("http-port"), "http-port");
  EXPECT_EQ(*CanonicalOptionName("port"), "http-port");
  EXPECT_TRUE(IsVllmSwitch("enforce-eager"));
  EXPECT_FALSE(IsVllmSwitch("port"));
}

// vLLM's --gpu-memory-utilization: a fraction in (0, 1] that sizes a GPU's KV cache from what
// the weights leave; exclusive with --kv-memory, refused for the CPU backend.
TEST_F(ConfigAliasesTest, GpuMemoryUtilizationIsAFractionOfTheGpu) {
  auto c = Load({"--gpu-memory-utilization", "0.85"});
  ASSERT_TRUE(c.ok()) << Error(c);
  EXPECT_DOUBLE_EQ(c->gpu_memory_utilization, 0.85);
  EXPECT_FALSE(c->kv_memory_given);
  c = Load({"--gpu-memory-utilization=1"});
  ASSERT_TRUE(c.ok()) << Error(c);
  EXPECT_DOUBLE_EQ(c->gpu_memory_utilization, 1.0);
  for (const char* bad : {"0", "1.5", "-0.5", "abc", "nan", "", "0.9x"}) {
    auto e = Load({"--gpu-memory-utilization", bad});
    ASSERT_FALSE(e.ok()) << bad;
    EXPECT_TRUE(Has(Error(e), "fraction in (0, 1]")) << Error(e);
  }
  auto both = Load({"--gpu-memory-utilization", "0.9", "--kv-memory", "1GiB"});
  ASSERT_FALSE(both.ok());
  EXPECT_TRUE(Has(Error(both), "give one")) << Error(both);
  auto cpu = Load({"--gpu-memory-utilization", "0.9", "--backend", "cpu"});
  ASSERT_FALSE(cpu.ok());
  EXPECT_TRUE(Has(Error(cpu), "CPU backend")) << Error(cpu);
  // In a config file, with vLLM's underscore spelling.
  const fs::path file = Write("gmu/banyand.json", R"({"gpu_memory_utilization": 0.75})");
  c = Load({"--config", file.string()});
  ASSERT_TRUE(c.ok()) << Error(c);
  EXPECT_DOUBLE_EQ(c->gpu_memory_utilization, 0.75);
}

TEST_F(ConfigAliasesTest, DeterministicIsOnOrOffWithEitherSpeculation) {
  auto c = Load({"--deterministic", "on"});
  ASSERT_TRUE(c.ok()) << Error(c);
  EXPECT_EQ(c->deterministic, "on");
  c = Load({});
  ASSERT_TRUE(c.ok()) << Error(c);
  EXPECT_EQ(c->deterministic, "off");
  EXPECT_TRUE(Has(Error(Load({"--deterministic", "yes"})), "deterministic"));
  auto spec = Load({"--deterministic", "on", "--speculative", "lookup"});
  ASSERT_TRUE(spec.ok()) << Error(spec);
  EXPECT_EQ(spec->speculative, "lookup");
  spec = Load({"--deterministic", "on", "--speculative", "hydra"});
  ASSERT_TRUE(spec.ok()) << Error(spec);
  EXPECT_EQ(spec->speculative, "hydra");
}

TEST_F(ConfigAliasesTest, PathsInAConfigFileAreRelativeToTheFile) {
  const fs::path model = Write("deploy/models/m.gguf", "x");
  const fs::path tok = Write("deploy/models/tok.model", "x");
  const fs::path file = Write("deploy/conf/banyand.json", R"({
    "model": "../models/m.gguf", "tokenizer": "../models/tok.model"})");
  // The working directory is elsewhere: the paths still resolve against the file's folder.
  const fs::path cwd = fs::current_path();
  fs::current_path(dir_);
  auto c = Load({"--config", file.string()});
  fs::current_path(cwd);
  ASSERT_TRUE(c.ok()) << Error(c);
  EXPECT_TRUE(fs::equivalent(c->model, model)) << c->model;
  EXPECT_TRUE(fs::equivalent(c->tokenizer, tok)) << c->tokenizer;

  // A config file named relative to the working directory: its folder is too.
  fs::current_path(dir_ / "deploy");
  c = Load({"--config", "conf/banyand.json"});
  fs::current_path(cwd);
  ASSERT_TRUE(c.ok()) << Error(c);
  EXPECT_TRUE(fs::equivalent(dir_ / "deploy" / c->model, model)) << c->model;

  // Absolute paths and synthetic models are left alone; the command line is relative to the
  // working directory, as always.
  const fs::path abs = Write("abs.json", R"({"model": ")" + model.string() + R"("})");
  c = Load({"--config", abs.string()});
  ASSERT_TRUE(c.ok()) << Error(c);
  EXPECT_EQ(c->model, model.string());
  c = Load({"--config", Write("d.json", R"({"model": "dummy:llama-2-7b-shape"})").string()});
  ASSERT_TRUE(c.ok()) << Error(c);
  EXPECT_EQ(c->model, "dummy:llama-2-7b-shape");
  fs::current_path(dir_ / "deploy");
  c = Load({"--model", "models/m.gguf"});
  fs::current_path(cwd);
  EXPECT_TRUE(c.ok()) << Error(c);
  // A relative path that does not exist next to the file is an error naming the resolved path.
  c = Load({"--config", Write("deploy/bad.json", R"({"model": "nowhere.gguf"})").string()});
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(Has(Error(c), (dir_ / "deploy" / "nowhere.gguf").string())) << Error(c);
}

TEST_F(ConfigAliasesTest, BackendAutoIsTheDefault) {
  auto c = Load({});
  ASSERT_TRUE(c.ok()) << Error(c);
  EXPECT_EQ(c->backend, "auto");
  EXPECT_FALSE(Load({"--backend", "gpu"}).ok());

  BackendChoice b = ChooseBackend("auto", /*built_with_cuda=*/true, 2, "");
  EXPECT_EQ(b.backend, "cuda");
  EXPECT_TRUE(Has(b.reason, "2 CUDA devices")) << b.reason;
  b = ChooseBackend("auto", true, 0, "cudaErrorNoDevice: no CUDA-capable device is detected");
  EXPECT_EQ(b.backend, "cpu");
  EXPECT_TRUE(Has(b.reason, "cudaErrorNoDevice")) << b.reason;
  b = ChooseBackend("auto", /*built_with_cuda=*/false, 4, "");
  EXPECT_EQ(b.backend, "cpu");
  EXPECT_TRUE(Has(b.reason, "without the CUDA backend")) << b.reason;
  // Explicit choices are kept, whatever the machine has.
  EXPECT_EQ(ChooseBackend("cuda", false, 0, "").backend, "cuda");
  EXPECT_EQ(ChooseBackend("cpu", true, 8, "").backend, "cpu");
}

}  // namespace
}  // namespace banyan::server
