// banyand: the banyan serving daemon.
//
// Start-up: configuration → model + tokenizer → backend and KV pool (from the memory budget) →
// scheduler → HTTP and gRPC front ends → ready. SIGTERM / SIGINT drain: /ready and gRPC health
// go false, new requests are refused (503 / UNAVAILABLE), running ones finish or are cut at
// drain_timeout_ms, then the process exits 0. The signals are taken by sigwait in the main
// thread (blocked in every other thread), so no work happens in a signal handler.
#include <pthread.h>
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "engine/cpu/cpu_backend.h"
#ifdef BANYAN_HAVE_CUDA_BACKEND
#include "engine/cuda/cuda_backend.h"
#endif
#include "engine/model_bundle.h"
#include "kvcache/chunk_pool.h"
#include "kvcache/prefix_tree.h"
#include "scheduler/scheduler.h"
#include "server/config.h"
#include "server/grpc/grpc_server.h"
#include "server/http/http_server.h"
#include "spdlog/spdlog.h"

namespace banyan::server {
namespace {

constexpr char kUsage[] =
    "usage: banyand [--config FILE] [--model PATH] [--tokenizer FILE] [--served-model-name NAME]\n"
    "               [--backend cpu|cuda] [--attention tpp|paged] [--host ADDR] [--http-port N]\n"
    "               [--grpc-port N] [--kv-memory BYTES] [--chunk-size N] [--max-batch N]\n"
    "               [--prefill-budget N] [--queue-limit N] [--api-key KEY]... [--max-body-bytes N]\n"
    "               [--max-n N] [--chat-template plain|llama2|chatml] [--drain-timeout-ms N]\n"
    "               [--log-level trace|debug|info|warn|error]\n"
    "With no arguments: the bundled stories260K on the CPU, 127.0.0.1, HTTP 8000, gRPC 50051.\n";

int Fail(const absl::Status& s) {
  spdlog::error("{}", std::string(s.message()));
  return 1;
}

int Run(int argc, char** argv) {
  auto cfg = LoadDaemonConfig(argc, argv);
  if (absl::IsCancelled(cfg.status())) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (!cfg.ok()) {
    std::fprintf(stderr, "banyand: %s\n%s", std::string(cfg.status().message()).c_str(), kUsage);
    return 2;
  }
  spdlog::set_default_logger(spdlog::default_logger()->clone("banyand"));
  spdlog::set_level(spdlog::level::from_str(cfg->log_level));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e [%n] %l: %v");

  // Block the shutdown signals before any thread starts, so that every thread inherits the mask
  // and only sigwait below receives them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  std::atomic<bool> ready = false;
  std::string model_path = cfg->model.empty() ? engine::FindBundledModel(argv[0]) : cfg->model;
  if (model_path.empty()) {
    return Fail(absl::NotFoundError("no --model given and the bundled stories260K was not found"));
  }
  spdlog::info("loading model {}", model_path);
  auto bundle = engine::LoadModelBundle(model_path, cfg->tokenizer);
  if (!bundle.ok()) return Fail(bundle.status());
  const engine::ModelConfig& mc = bundle->weights.config;

  const engine::AttentionMode attention = cfg->attention == "paged"
                                              ? engine::AttentionMode::kPaged
                                              : engine::AttentionMode::kTpp;
  std::unique_ptr<engine::Backend> backend;
  int64_t chunks = 0;
  if (cfg->backend == "cuda") {
#ifdef BANYAN_HAVE_CUDA_BACKEND
    chunks = cfg->kv_memory_bytes /
             engine::CudaBackend::ChunkBytes(mc, cfg->chunk_size, kernels::cuda::DType::kBf16);
    engine::CudaBackendOptions co;
    co.num_chunks = static_cast<int32_t>(std::min<int64_t>(chunks, 1 << 30));
    co.chunk_size = cfg->chunk_size;
    co.attention = attention;
    if (co.num_chunks >= 1) {
      auto cuda = engine::CudaBackend::Create(&bundle->weights, co);
      if (!cuda.ok()) return Fail(cuda.status());
      backend = std::move(*cuda);
    }
#else
    return Fail(absl::UnimplementedError(
        "this banyand was built without CUDA (configure with nvcc available); use --backend cpu"));
#endif
  } else {
    chunks = engine::CpuBackend::ChunksForBudget(mc, cfg->chunk_size, cfg->kv_memory_bytes);
    engine::CpuBackendOptions bo;
    bo.num_chunks = static_cast<int32_t>(std::min<int64_t>(chunks, 1 << 30));
    bo.chunk_size = cfg->chunk_size;
    bo.attention = attention;
    if (bo.num_chunks >= 1) {
      auto cpu = engine::CpuBackend::Create(&bundle->weights, bo);
      if (!cpu.ok()) return Fail(cpu.status());
      backend = std::move(*cpu);
    }
  }
  if (chunks < 1) {
    return Fail(absl::InvalidArgumentError(
        "--kv-memory " + std::to_string(cfg->kv_memory_bytes) + " bytes holds no KV chunk of " +
        std::to_string(cfg->chunk_size) + " tokens for this model"));
  }
  auto pool = kvcache::ChunkPool::Create(static_cast<int32_t>(std::min<int64_t>(chunks, 1 << 30)),
                                         cfg->chunk_size);
  if (!pool.ok()) return Fail(pool.status());
  kvcache::PrefixTree tree(&*pool);
  spdlog::info(
      "model: dim {}, {} layers, {} heads ({} kv), vocab {}, context {}; backend {}, attention {}",
      mc.dim, mc.n_layers, mc.n_heads, mc.n_kv_heads, mc.vocab_size, mc.max_seq_len,
      cfg->backend, cfg->attention);
  spdlog::info("[kv] memory budget {} MiB: {} chunks of {} tokens ({} tokens)",
               cfg->kv_memory_bytes >> 20, chunks, cfg->chunk_size, chunks * cfg->chunk_size);

  scheduler::SchedulerOptions so;
  so.max_running_sequences = cfg->max_batch;
  so.prefill_token_budget = cfg->prefill_budget;
  so.queue_limit = cfg->queue_limit;
  so.attention = attention;
  scheduler::Scheduler sched(mc, bundle->tokenizer.get(), backend.get(), &tree, so);
  sched.Start();

  ServerContext ctx;
  ctx.model_name = cfg->served_model_name.empty()
                       ? std::filesystem::path(model_path).stem().string()
                       : cfg->served_model_name;
  ctx.model_config = &mc;
  ctx.tokenizer = bundle->tokenizer.get();
  ctx.scheduler = &sched;
  ctx.options = cfg->server;
  ctx.ready = &ready;

  http::HttpFrontEnd http(&ctx);
  if (absl::Status s = http.Start(); !s.ok()) return Fail(s);
  GrpcFrontEnd grpc_server(&ctx);
  if (absl::Status s = grpc_server.Start(); !s.ok()) return Fail(s);
  ready = true;
  grpc_server.UpdateHealth();
  spdlog::info("serving model '{}': HTTP http://{}:{} (OpenAI API), gRPC {}:{}{}", ctx.model_name,
               ctx.options.host, http.port(), ctx.options.host, grpc_server.port(),
               ctx.options.api_keys.empty() ? "" : " (API keys required)");

  int sig = 0;
  sigwait(&signals, &sig);
  spdlog::info("signal {}: draining (up to {} ms)", sig, ctx.options.drain_timeout_ms);
  ready = false;
  grpc_server.UpdateHealth();
  sched.Drain(std::chrono::milliseconds(ctx.options.drain_timeout_ms));
  grpc_server.Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  http.Stop();
  sched.Stop();
  spdlog::info("stopped");
  return 0;
}

}  // namespace
}  // namespace banyan::server

int main(int argc, char** argv) { return banyan::server::Run(argc, argv); }
