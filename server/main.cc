// banyand: the banyan serving daemon.
//
// Start-up: configuration → model + tokenizer → backend and KV pool (from the memory budget) →
// scheduler → HTTP and gRPC front ends → ready. SIGTERM / SIGINT drain: /ready and gRPC health
// go false, new requests are refused (503 / UNAVAILABLE), running ones finish or are cut at
// drain_timeout_ms, then the process exits 0. A signal during start-up exits 0 at once; more
// signals during the drain are logged and ignored. The signals are blocked in every thread from
// before the first library constructor (kBlockShutdownSignals below) and taken by sigwait in one
// thread (server/common/shutdown_signals.h), so no work happens in a signal handler.
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <new>
#include <optional>

#include "engine/cpu/cpu_backend.h"
#ifdef BANYAN_HAVE_CUDA_BACKEND
#include <cuda_runtime_api.h>

#include "engine/cuda/cuda_backend.h"
#endif
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "model/model_bundle.h"
#include "model/weights_layout.h"
#include "engine/speculative/draft_heads.h"
#include "kvcache/chunk_pool.h"
#include "kvcache/prefix_tree.h"
#include "scheduler/scheduler.h"
#include "server/common/backend_choice.h"
#include "server/common/config.h"
#include "server/common/kv_event_publisher.h"
#include "server/grpc/grpc_server.h"
#include "server/common/load_chat_template.h"
#include "text/chat_template.h"
#include "server/http/http_server.h"
#include "server/common/shutdown_signals.h"
#include "spdlog/spdlog.h"

// Blocks SIGTERM and SIGINT before anything else runs. The dynamic loader calls the
// executable's DT_PREINIT_ARRAY functions before any shared library's constructors, and
// libopenblas starts its worker threads in one: they inherit this mask, as does every thread
// started later. Raw syscall: sigprocmask / sigaddset may be sanitizer interceptors that are
// not initialised yet. The kernel's sigset is one 64-bit word; signal n is bit n - 1.
extern "C" {
static void BlockShutdownSignals(int, char**, char**) {
  const uint64_t mask = (uint64_t{1} << (SIGTERM - 1)) | (uint64_t{1} << (SIGINT - 1));
  syscall(SYS_rt_sigprocmask, SIG_BLOCK, &mask, nullptr, sizeof(mask));
}
__attribute__((section(".preinit_array"), used)) static void (*kBlockShutdownSignals)(
    int, char**, char**) = &BlockShutdownSignals;
}

namespace banyan::server {
namespace {

constexpr char kUsage[] =
    "usage: banyand [--config FILE] [--model PATH] [--tokenizer FILE] [--served-model-name NAME]\n"
    "               [--backend auto|cpu|cuda] [--attention tpp|paged] [--cpu-threads N]\n"
    "               [--host ADDR] [--http-port N]\n"
    "               [--grpc-port N] [--kv-memory BYTES | --gpu-memory-utilization F]\n"
    "               [--chunk-size N] [--max-batch N]\n"
    "               [--prefill-budget N] [--queue-limit N] [--overlap auto|on|off]\n"
    "               [--feed auto|on|off]\n"
    "               [--api-key KEY]... [--tenants FILE]\n"
    "               [--max-body-bytes N] [--max-prompt-bytes N] [--listen-backlog N] [--max-n N]\n"
    "               [--chat-template model|plain|llama2|chatml|FILE] [--drain-timeout-ms N]\n"
    "               [--log-level trace|debug|info|warn|error] [--max-model-len N]\n"
    "               [--quantization none|fp8] [--kv-cache-dtype auto|bf16|fp8]\n"
    "               [--speculative off|hydra|lookup] [--draft-heads FILE] [--draft-tokens N]\n"
    "               [--draft-tree B1,B2,..] [--prompt-lookup-min N] [--prompt-lookup-max N]\n"
    "               [--speculation-max-rows N]\n"
    "               [--speculation-min-accept X] [--speculation-adaptive on|off]\n"
    "               [--speculation-profile on|off] [--draft-on device|host]\n"
    "               [--kv-events-config JSON] [--debug-kv-blocks on|off]\n"
    "               [--reasoning-parser qwen3|deepseek_r1|none] [--deterministic on|off]\n"
    "With no arguments: the bundled stories260K, 127.0.0.1, HTTP 8000, gRPC 50051, on the GPU\n"
    "when this banyand has CUDA and a device is visible, else the CPU (--backend auto).\n"
    "vLLM's names are accepted where they mean the same: --port, --max-num-seqs, --block-size,\n"
    "--enable-prefix-caching, --enable-chunked-prefill; others are refused, saying why.\n"
    "--model dummy:<shape>[:vocab=N][:context=N][:seed=N]: synthetic weights and tokenizer of a\n"
    "named shape (llama-2-7b-shape, llama-3-8b-shape, llama-3-70b-shape, ...), for benchmarks;\n"
    "with --tokenizer FILE, that tokenizer instead of the synthetic one (at most vocab ids).\n"
    "--quantization fp8: the projections of an unquantized model quantized to FP8 at load\n"
    "(per-output-channel scales); FP8 checkpoints (compressed-tensors, fine-grained fp8) load as\n"
    "FP8 without it. On a Hopper GPU FP8 projections run as W8A8 GEMMs on the FP8 tensor\n"
    "cores (the start-up log says so, or why they were dequantized to bf16 instead).\n"
    "--kv-cache-dtype fp8: K and V kept in FP8 (E4M3, a power-of-two scale per token and head),\n"
    "about half the bytes of bf16, so --kv-memory holds about twice the tokens.\n"
    "--kv-memory BYTES (default 256MiB) sizes the KV cache; on a GPU, --gpu-memory-utilization F\n"
    "instead lets this process hold F of the GPU's memory, the KV cache taking what the weights\n"
    "and a 2 GiB workspace leave (vLLM's option).\n"
    "--deterministic on: a request's tokens and logprobs are bit for bit the same in any batch as\n"
    "alone (paged attention, each row's products on its own: slower; on a GPU, bf16/fp16\n"
    "projections only).\n";

// Every connection holds a file descriptor, and the front ends hold thousands of connections
// without a thread each: raise the soft limit on open files to the hard limit (often 1024 ->
// 524288), as servers that expect many clients do.
void RaiseOpenFileLimit() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur >= lim.rlim_max) return;
  const rlim_t before = lim.rlim_cur;
  lim.rlim_cur = lim.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &lim) == 0) {
    spdlog::info("open files limit raised from {} to {}", before, lim.rlim_cur);
  }
}

// --backend auto|cpu|cuda, resolved (server/common/backend_choice.h).
BackendChoice ResolveBackend(const std::string& requested) {
  bool built_with_cuda = false;
  int devices = 0;
  std::string error;
#ifdef BANYAN_HAVE_CUDA_BACKEND
  built_with_cuda = true;
  if (requested == "auto") {
    if (cudaError_t e = cudaGetDeviceCount(&devices); e != cudaSuccess) {
      devices = 0;
      error = absl::StrCat(cudaGetErrorName(e), ": ", cudaGetErrorString(e));
    }
  }
#endif
  return ChooseBackend(requested, built_with_cuda, devices, error);
}

// How to call the daemon, with the ports it really listens on (0 in the config: the ones the
// kernel gave). A wildcard listen address is called through loopback.
void LogUsage(const std::string& host, int http_port, int grpc_port, const std::string& model) {
  const std::string h = host == "0.0.0.0" || host == "127.0.0.1" || host == "localhost"
                            ? "localhost"
                        : host == "::" || host == "::1" ? "[::1]"
                        : host.find(':') != std::string::npos ? "[" + host + "]"
                                                               : host;
  spdlog::info("try: curl -s http://{}:{}/v1/completions -H 'Content-Type: application/json' "
               "-d '{{\"model\":\"{}\",\"prompt\":\"Once upon a time\",\"max_tokens\":64}}'",
               h, http_port, model);
  spdlog::info("try: banyan-grpc-client --addr {}:{} --prompt \"Once upon a time\"", h,
               grpc_port);
}

int Fail(const absl::Status& s) {
  spdlog::error("{}", std::string(s.message()));
  return 1;
}

// The model named by the config (the bundled one by default), its context cut to
// --max-model-len, and the Jinja chat template prompts are rendered with.
struct LoadedModel {
  std::string path;
  bool dummy = false;
  bool fp8 = false;  // --quantization fp8
  model::ModelBundle bundle;
  std::shared_ptr<const text::JinjaChat> jinja_chat;
};

absl::StatusOr<LoadedModel> LoadModel(const DaemonConfig& cfg, const char* argv0) {
  LoadedModel m;
  m.path = cfg.model.empty() ? model::FindBundledModel(argv0) : cfg.model;
  if (m.path.empty()) {
    return absl::NotFoundError("no --model given and the bundled stories260K was not found");
  }
  spdlog::info("loading model {}", m.path);
  m.dummy = model::IsDummyModel(m.path);
  // A dummy model's weights are generated on the GPU by the CUDA backend: no host copy.
  model::WeightQuantization quantization = model::WeightQuantization::kNone;
  if (absl::Status s = model::ParseWeightQuantization(cfg.quantization, &quantization); !s.ok()) {
    return s;
  }
  auto bundle = m.dummy ? model::LoadDummyBundle(m.path, cfg.backend != "cuda", cfg.tokenizer,
                                                 quantization)
                        : model::LoadModelBundle(m.path, cfg.tokenizer, quantization);
  if (!bundle.ok()) return bundle.status();
  m.bundle = *std::move(bundle);
  m.fp8 = quantization == model::WeightQuantization::kFp8;
  if (cfg.backend == "cpu" && model::HasQuantizedWeights(m.bundle.weights)) {
    spdlog::info("weights: FP8 projections (dequantized to fp32 by the CPU backend)");
  }
  spdlog::info("tokenizer: {} ({})", m.bundle.tokenizer->Describe(), m.bundle.tokenizer_path);
  if (cfg.max_model_len > 0) {  // a lower context limit than the model's: vLLM's --max-model-len
    if (cfg.max_model_len > m.bundle.weights.config.max_seq_len) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--max-model-len ", cfg.max_model_len, " is longer than the model's context of ",
          m.bundle.weights.config.max_seq_len, " tokens"));
    }
    m.bundle.weights.config.max_seq_len = cfg.max_model_len;
  }
  absl::StatusOr<std::shared_ptr<const text::JinjaChat>> jinja_chat =
      LoadJinjaChat(cfg.server, m.bundle);
  if (!jinja_chat.ok()) return jinja_chat.status();
  m.jinja_chat = *std::move(jinja_chat);
  if (m.jinja_chat != nullptr) {
    spdlog::info("chat template: {} (tool calls: {})", m.jinja_chat->source,
                 text::tool_calls::ToolFamilyName(m.jinja_chat->tool_family));
  }
  return m;
}

// The backend the config asks for, with a KV pool of --kv-memory; *chunks is the pool's size in
// chunks (the error says so when it holds none).
absl::StatusOr<std::unique_ptr<engine::Backend>> MakeBackend(const DaemonConfig& cfg,
                                                             LoadedModel* m,
                                                             engine::AttentionMode attention,
                                                             int64_t* chunks_out) {
  const model::ModelConfig& mc = m->bundle.weights.config;
  std::unique_ptr<engine::Backend> backend;
  int64_t chunks = 0;
  if (cfg.backend == "cuda") {
#ifdef BANYAN_HAVE_CUDA_BACKEND
    size_t free_bytes = 0, total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
      return absl::UnavailableError("--backend cuda: no usable CUDA device");
    }
    const bool by_fraction = cfg.gpu_memory_utilization > 0;
    if (absl::Status s = CheckMemoryBudget("--kv-memory", by_fraction ? 0 : cfg.kv_memory_bytes,
                                           static_cast<int64_t>(free_bytes),
                                           "GPU (free memory, before the weights are loaded)");
        !s.ok()) {
      return s;
    }
    const bool kv_fp8 = cfg.kv_cache_dtype == "fp8";
    engine::CudaBackendOptions co;
    co.kv_fp8 = kv_fp8;
    if (by_fraction) {  // the backend sizes the pool once it knows the weights' bytes
      co.memory_fraction = cfg.gpu_memory_utilization;
    } else {
      co.num_chunks = static_cast<int32_t>(std::min<int64_t>(
          cfg.kv_memory_bytes / engine::CudaBackend::ChunkBytes(
                                    mc, cfg.chunk_size, kernels::cuda::DType::kBf16, kv_fp8),
          1 << 30));
    }
    co.chunk_size = cfg.chunk_size;
    co.attention = attention;
    co.fp8_dummy = m->dummy && m->fp8;
    co.batch_invariant = cfg.deterministic == "on";
    if (by_fraction || co.num_chunks >= 1) {
      auto cuda = m->dummy ? engine::CudaBackend::CreateDummy(
                                 mc, model::ParseDummyModel(m->path)->seed, co)
                           : engine::CudaBackend::Create(&m->bundle.weights, co);
      if (!cuda.ok()) return cuda.status();
      chunks = (*cuda)->num_chunks();
      if (by_fraction) {
        spdlog::info("[kv] --gpu-memory-utilization {}: {} MiB of KV cache beside {} MiB of weights",
                     cfg.gpu_memory_utilization, (*cuda)->kv_bytes() >> 20,
                     (*cuda)->weight_bytes() >> 20);
      }
      if (!(*cuda)->fp8_projections().empty()) {
        spdlog::info("weights: projections run as {}", (*cuda)->fp8_projections());
      } else if (!(*cuda)->fp8_fallback().empty()) {
        spdlog::warn("weights: FP8 projections dequantized to bf16 on the GPU: {}",
                     (*cuda)->fp8_fallback());
      }
      if (!(*cuda)->deterministic_gemms().empty()) {
        spdlog::info("deterministic GEMMs (N x K): {}", (*cuda)->deterministic_gemms());
      }
      backend = std::move(*cuda);
    }
#else
    return absl::UnimplementedError(
        "this banyand was built without CUDA (configure with nvcc available); use --backend cpu");
#endif
  } else {
    if (cfg.gpu_memory_utilization > 0) {
      return absl::InvalidArgumentError(
          "--gpu-memory-utilization sizes a GPU's KV cache; the CPU backend's is --kv-memory "
          "BYTES");
    }
    // The weights are loaded already, so MemAvailable is what the KV pool may take.
    absl::StatusOr<int64_t> avail = AvailableHostMemoryBytes();
    if (!avail.ok()) return avail.status();
    if (absl::Status s =
            CheckMemoryBudget("--kv-memory", cfg.kv_memory_bytes, *avail, "host (MemAvailable)");
        !s.ok()) {
      return s;
    }
    chunks = engine::CpuBackend::ChunksForBudget(mc, cfg.chunk_size, cfg.kv_memory_bytes);
    engine::CpuBackendOptions bo;
    bo.num_chunks = static_cast<int32_t>(std::min<int64_t>(chunks, 1 << 30));
    bo.chunk_size = cfg.chunk_size;
    bo.attention = attention;
    bo.kv_fp8 = cfg.kv_cache_dtype == "fp8";
    bo.row_invariant = cfg.deterministic == "on";
    bo.threads = cfg.cpu_threads;
    if (bo.num_chunks >= 1) {
      absl::StatusOr<std::unique_ptr<engine::CpuBackend>> cpu;
      try {  // the budget check above should make this unreachable; it stays a clean error
        cpu = engine::CpuBackend::Create(&m->bundle.weights, bo);
      } catch (const std::bad_alloc&) {
        cpu = absl::ResourceExhaustedError("--kv-memory: could not allocate the KV pool");
      }
      if (!cpu.ok()) return cpu.status();
      spdlog::info("[cpu] {} BLAS thread{} ({})", (*cpu)->threads(), (*cpu)->threads() == 1 ? "" : "s",
                   cfg.cpu_threads > 0 ? "--cpu-threads" : "automatic for the model's size");
      backend = std::move(*cpu);
    }
  }
  if (chunks < 1) {
    return absl::InvalidArgumentError(
        "--kv-memory " + std::to_string(cfg.kv_memory_bytes) + " bytes holds no KV chunk of " +
        std::to_string(cfg.chunk_size) + " tokens for this model");
  }
  *chunks_out = chunks;
  return backend;
}

// The loop's speculation options (--speculative, --draft-*), with the draft heads they load
// into *heads (which must outlive the scheduler).
absl::Status ConfigureSpeculation(const DaemonConfig& cfg, const model::ModelBundle& bundle,
                                  scheduler::LoopOptions* loop,
                                  std::optional<engine::DraftHeads>* heads_out) {
  if (cfg.speculative == "hydra") {
    if (cfg.draft_heads.empty()) {
      return absl::InvalidArgumentError(
          "--speculative hydra needs --draft-heads FILE (a head set's config.json; the bundled "
          "model's are in models/stories260K/hydra/)");
    }
    auto h = engine::DraftHeads::Load(cfg.draft_heads, bundle.weights);
    if (!h.ok()) return h.status();
    if (cfg.draft_tokens > h->num_heads()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--draft-tokens ", cfg.draft_tokens, " is more than the ", h->num_heads(),
          " draft heads of ", cfg.draft_heads, " can propose"));
    }
    if (static_cast<int>(cfg.draft_tree.size()) > h->num_heads()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--draft-tree has ", cfg.draft_tree.size(), " levels; the ", h->num_heads(),
          " draft heads of ", cfg.draft_heads, " can propose at most that many"));
    }
    heads_out->emplace(*std::move(h));
    loop->speculation = scheduler::LoopOptions::Speculation::kHeads;
    loop->draft_heads = &**heads_out;
  } else if (cfg.speculative == "lookup") {
    loop->speculation = scheduler::LoopOptions::Speculation::kLookup;
    loop->ngram_lookup = {.min_n = cfg.prompt_lookup_min, .max_n = cfg.prompt_lookup_max};
  } else if (!cfg.draft_heads.empty()) {
    return absl::InvalidArgumentError("--draft-heads is only read with --speculative hydra");
  }
  if (!cfg.draft_tree.empty() && cfg.speculative != "hydra") {
    return absl::InvalidArgumentError("--draft-tree is only read with --speculative hydra");
  }
  loop->draft_tokens = cfg.draft_tokens;
  loop->draft_tree = cfg.draft_tree;
  loop->speculation_max_rows = cfg.speculation_max_rows;
  loop->speculation_min_accept = cfg.speculation_min_accept;
  loop->speculation_adaptive = cfg.speculation_adaptive == "on";
  loop->draft_on_host = cfg.draft_on == "host";
  if (cfg.speculative != "off") {
    spdlog::info("speculative decoding: {} ({}, in steps of at most {} decode rows{}, paused for a "
                 "sample accepting fewer than {} per step)",
                 cfg.speculative == "hydra" ? "hydra heads " + cfg.draft_heads
                 : cfg.prompt_lookup_max == 0
                     ? std::string("prompt lookup, repeated prompts only")
                     : absl::StrCat("prompt lookup, repeated prompts and ", cfg.prompt_lookup_min,
                                    "- to ", cfg.prompt_lookup_max, "-grams of the context"),
                 cfg.draft_tree.empty()
                     ? absl::StrCat(cfg.draft_tokens, " candidates per chain")
                     : absl::StrCat("tree ", absl::StrJoin(cfg.draft_tree, ",")),
                 cfg.speculation_max_rows,
                 cfg.speculation_adaptive == "on" ? " where measured faster" : "",
                 cfg.speculation_min_accept);
  }
  return absl::OkStatus();
}

// --speculation-profile: the start-up profile of a step's cost with candidates and without,
// logged per size class.
void ProfileSpeculation(scheduler::EngineLoop& loop) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto rows = loop.ProfileSpeculation();
  for (const auto& r : rows) {
    spdlog::info("speculation profile, steps of {} rows: {:.3f} ms with candidates, {:.3f} ms "
                 "without ({} and {} steady steps): {}",
                 r.rows, r.seconds_with * 1e3, r.seconds_without * 1e3, r.steps_with,
                 r.steps_without,
                 r.seconds_with > 0 && r.seconds_without > 0
                     ? absl::StrFormat("speculation pays above %.2f tokens per row",
                                       r.seconds_with / r.seconds_without)
                     : std::string("not measured"));
  }
  spdlog::info("speculation profile: {} size classes in {:.1f} s", rows.size(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

// The KV-event publisher of --kv-events-config; null when events are off.
absl::StatusOr<std::unique_ptr<KvEventPublisher>> MakeKvEventPublisher(const DaemonConfig& cfg) {
  if (!cfg.kv_events.active()) return nullptr;
  auto p = KvEventPublisher::Create(cfg.kv_events, cfg.chunk_size);
  if (!p.ok()) return p.status();
  spdlog::info("[kv-events] publishing on {} ({}), topic '{}', replay {}, block size {}",
               cfg.kv_events.endpoint, cfg.kv_events.BindsPub() ? "bound" : "connected",
               cfg.kv_events.topic,
               cfg.kv_events.replay_endpoint.empty() ? "off" : cfg.kv_events.replay_endpoint,
               cfg.chunk_size);
  if (cfg.kv_events.BindsPub() && !IsLocalEndpoint(cfg.kv_events.endpoint)) {
    spdlog::warn("[kv-events] {} is reachable beyond this host: every tenant's token ids go to "
                 "whoever subscribes (docs/kv_events.md)", cfg.kv_events.endpoint);
  }
  return *std::move(p);
}

// The drain after SIGTERM / SIGINT: /ready and gRPC health say so, generation ends (or is cut
// at --drain-timeout-ms), every accepted answer is delivered, then the front ends and the
// scheduler stop.
void Drain(int sig, ServerContext& ctx, std::atomic<bool>& ready, http::HttpFrontEnd& http,
           GrpcFrontEnd& grpc_server, scheduler::Scheduler& sched) {
  spdlog::info("signal {}: draining (up to {} ms)", sig, ctx.options.drain_timeout_ms);
  ready = false;
  grpc_server.UpdateHealth();
  // One deadline for the whole drain: generation ends (or is cut) first, then every accepted
  // answer must reach its client, slow readers included; what is left at the deadline is cut,
  // a stream with a final error event.
  const auto drain_end = std::chrono::steady_clock::now() +
                         std::chrono::milliseconds(ctx.options.drain_timeout_ms);
  sched.Drain(std::chrono::milliseconds(ctx.options.drain_timeout_ms));
  // Answers the scheduler cut at the deadline still have their last events (finish "abort") to
  // write: delivery gets at least 2 s more (as gRPC does below), so that a loaded machine does
  // not turn a clean abort into a stream cut with an error event.
  const auto deliver_by =
      std::max(drain_end, std::chrono::steady_clock::now() + std::chrono::seconds(2));
  if (!http.WaitDelivered(deliver_by)) {
    spdlog::warn("drain timeout: {} HTTP answers not yet delivered are cut",
                 http.responses_in_flight());
  }
  // gRPC calls still open get the rest of the drain (at least 2 s) to reach their clients.
  const auto grpc_left = std::max<std::chrono::steady_clock::duration>(
      drain_end - std::chrono::steady_clock::now(), std::chrono::seconds(2));
  grpc_server.Shutdown(std::chrono::system_clock::now() +
                       std::chrono::duration_cast<std::chrono::system_clock::duration>(grpc_left));
  http.Stop();
  sched.Stop();
}

// What the engine did, logged at exit: steps, host and device time, speculation, CUDA graphs.
void LogEngineReport(scheduler::Scheduler& sched) {
  const scheduler::LoopStats& st = sched.loop().stats();
  spdlog::info("engine: {} steps, {} decode-only ({} rows, {:.3f} s, of which {:.3f} s on the "
               "device and {:.3f} s of host work before each launch, {:.3f} s of it in the "
               "backend); host time outside the backend calls {:.3f} s; CPU a step ahead: {}; fed "
               "steps: {} ({:.3f} s of host work beside the device, {} fallbacks; {} with late "
               "sampling for constrained rows, {:.3f} s)",
               st.steps, st.decode_steps, st.decode_tokens, st.decode_seconds,
               st.decode_device_seconds, st.decode_launch_seconds,
               st.decode_backend_launch_seconds, st.host_seconds,
               sched.loop().overlap() ? "on" : "off", st.fed_steps, st.fed_launch_seconds,
               st.fed_fallbacks, st.late_sampled_steps, st.late_sampling_seconds);
  if (st.late_sampled_steps > 0 || st.mask_sit_outs > 0) {
    const scheduler::MaskWorkers::Stats workers = sched.loop().mask_worker_stats();
    spdlog::info("engine: constrained rows: late sampling {:.3f} s = {:.3f} s filling masks ({} "
                 "straight into the upload) + "
                 "{:.3f} s completing the specs and launching the sampling; {} waits for a mask "
                 "worker, {} sit-outs; vocabulary walks: {} by the mask workers ({} of them ahead of "
                 "need, for {} grammars), {} on the engine thread, {} on the fill threads",
                 st.late_sampling_seconds, st.late_fill_seconds, st.late_masks_staged,
                 st.late_launch_seconds,
                 st.mask_waits, st.mask_sit_outs, workers.walks, workers.prefetch_walks,
                 workers.prefetches,
                 st.mask_walks_on_loop, st.mask_walks_on_fill);
  }
  if (st.decode_steps > 0) {
    const double per = 1e3 / static_cast<double>(st.decode_steps);
    spdlog::info("engine: host work before each decode launch, ms per step: {:.3f} taking the "
                 "previous tokens, {:.3f} scheduling, {:.3f} placing, {:.3f} in the backend; "
                 "engine thread CPU {:.3f} ms, {:.1f} context switches per step",
                 st.decode_take_seconds * per, st.decode_schedule_seconds * per,
                 st.decode_place_seconds * per, st.decode_backend_launch_seconds * per,
                 st.decode_launch_cpu_seconds * per,
                 static_cast<double>(st.decode_launch_context_switches) * per / 1e3);
  }
  if (const scheduler::MetricsSnapshot& sm = sched.loop().metrics(); sm.spec_drafts_total > 0) {
    std::string per_position;
    for (int64_t a : sm.spec_accepted_per_position) absl::StrAppend(&per_position, " ", a);
    spdlog::info("speculative: {} verifications, {} candidates, {} accepted ({:.2f} tokens per "
                 "verification step); accepted by position:{}",
                 sm.spec_drafts_total, sm.spec_draft_tokens_total, sm.spec_accepted_tokens_total,
                 1.0 + static_cast<double>(sm.spec_accepted_tokens_total) /
                           static_cast<double>(sm.spec_drafts_total),
                 per_position);
    if (st.speculating_samples > 0) {
      spdlog::info("speculative: {:.2f} KV chunks taken per speculating sample and step ({} "
                   "samples)",
                   static_cast<double>(st.candidate_chunks) /
                       static_cast<double>(st.speculating_samples),
                   st.speculating_samples);
    }
    if (st.draft_steps > 0) {
      spdlog::info("speculative: drafting in {} steps, {:.3f} ms per step ({} failed)",
                   st.draft_steps, st.draft_seconds * 1e3 / static_cast<double>(st.draft_steps),
                   st.draft_failures);
    }
    const scheduler::SpeculationGovernor& g = sched.loop().speculation_governor();
    for (int c = 0; c < scheduler::SpeculationGovernor::kClasses; ++c) {
      const auto& k = g.at(c);
      if (k.with.n + k.without.n == 0) continue;
      spdlog::info("speculation governor, steps of {}-{} rows: {} with candidates at {:.0f} "
                   "tok/s, {} without at {:.0f} tok/s (decode-only steps)",
                   int64_t{1} << c, (int64_t{2} << c) - 1, k.with.seen, k.with.rate(),
                   k.without.seen, k.without.rate());
    }
  }
#ifdef BANYAN_HAVE_CUDA_BACKEND
  if (auto* cuda = dynamic_cast<engine::CudaBackend*>(&sched.loop().backend())) {
    const engine::CudaAttentionStats& a = cuda->attention_stats();
    const engine::cuda::DecodeGraphStats& g = a.graph;
    spdlog::info("tpp: {} steps, {} work-plan builds ({:.0f} us of host time), {} span-end "
                 "updates ({:.0f} us)",
                 a.tpp_steps, a.tpp_plan_builds, a.build_host_us, a.tpp_plan_updates,
                 a.update_host_us);
    if (cuda->batch_invariant()) {
      spdlog::info("deterministic: {} steps read a shared prefix once, for {} decode rows in all",
                   a.invariant_shared_steps, a.invariant_shared_rows);
    }
    spdlog::info("cuda graphs: {} decode steps replayed ({} after updating the attention "
                 "nodes, {:.0f} us), {} captured ({:.0f} us), {} eager while a new key "
                 "settled, {} fallbacks",
                 g.replays, g.patches, g.patch_host_us, g.captures, g.capture_host_us,
                 g.unstable, g.fallbacks);
    if (a.host_steps > 0) {
      const double per = 1e-3 / static_cast<double>(a.host_steps);
      spdlog::info("cuda backend: host work of a step with decode rows, ms: {:.3f} inputs, {:.3f} "
                   "attention work, {:.3f} launch, {:.3f} sampling ({} steps); {:.3f} ms per "
                   "cudaGraphLaunch call ({} graph steps, {} kernel nodes)",
                   a.inputs_host_us * per, a.attention_host_us * per, a.launch_host_us * per,
                   a.sample_host_us * per, a.host_steps,
                   g.steps > 0 ? g.launch_call_us * 1e-3 / static_cast<double>(g.steps) : 0.0,
                   g.steps, g.kernel_nodes);
    }
    if (a.late_steps > 0) {
      spdlog::info("cuda backend: steps sampled late (masks after the step before): {}; the "
                   "device waited for their sampling after the forward pass in {} of them, "
                   "{:.3f} s in all ({:.3f} ms per late step)",
                   a.late_steps, a.late_waits, a.late_wait_us * 1e-6,
                   a.late_wait_us * 1e-3 / static_cast<double>(a.late_steps));
    }
    if (g.patch_failures > 0) {
      spdlog::warn("cuda graphs: {} attention-node updates failed (captured instead): {}",
                   g.patch_failures, cuda->graph_update_error());
    }
  }
#endif
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
  // absl::Mutex's deadlock detection (on in Debian's absl build) records lock acquisitions in a
  // global graph, a visible share of the engine loop's profile (docs/benchmarks.md, section 7),
  // and banyand takes thousands of stream locks per step. The tests keep it on.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  spdlog::set_default_logger(spdlog::default_logger()->clone("banyand"));
  spdlog::set_level(spdlog::level::from_str(cfg->log_level));
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e [%n] %l: %v");

  // From here a signal ends start-up with exit 0; once serving, it starts the drain.
  ShutdownSignals signals;
  absl::StatusOr<Auth> auth = Auth::Create(cfg->server.tenants);
  if (!auth.ok()) return Fail(auth.status());
  RaiseOpenFileLimit();

  const BackendChoice choice = ResolveBackend(cfg->backend);
  spdlog::info("backend {} ({})", choice.backend, choice.reason);
  cfg->backend = choice.backend;

  std::atomic<bool> ready = false;
  absl::StatusOr<LoadedModel> loaded = LoadModel(*cfg, argv[0]);
  if (!loaded.ok()) return Fail(loaded.status());
  const model::ModelConfig& mc = loaded->bundle.weights.config;
  // --deterministic on runs no TPP (paged): TPP's shared-prefix split and merge depend on who
  // shares the prefix. Its own attention reads a shared prefix once where the head dim has the
  // tensor-core kernels, with each row's sums in the order it runs alone (engine/backend.h,
  // shared_prefix_plans).
  if (cfg->deterministic == "on" && cfg->attention != "paged") {
    spdlog::info("--deterministic on: attention paged (no TPP; each row's sums in the order it "
                 "runs alone)");
    cfg->attention = "paged";
  }
  const engine::AttentionMode attention = cfg->attention == "paged"
                                              ? engine::AttentionMode::kPaged
                                              : engine::AttentionMode::kTpp;
  int64_t chunks = 0;
  absl::StatusOr<std::unique_ptr<engine::Backend>> backend =
      MakeBackend(*cfg, &*loaded, attention, &chunks);
  if (!backend.ok()) return Fail(backend.status());
  spdlog::info(
      "model: dim {}, {} layers, {} heads ({} kv), vocab {}, context {}; backend {}, attention {}",
      mc.dim, mc.n_layers, mc.n_heads, mc.n_kv_heads, mc.vocab_size, mc.max_seq_len,
      cfg->backend, cfg->attention);
  spdlog::info("[kv] memory budget {}: {} chunks of {} tokens ({} tokens), KV dtype {}",
               cfg->gpu_memory_utilization > 0
                   ? absl::StrCat("what --gpu-memory-utilization ", cfg->gpu_memory_utilization,
                                  " leaves")
                   : absl::StrCat(cfg->kv_memory_bytes >> 20, " MiB"),
               chunks, cfg->chunk_size, chunks * cfg->chunk_size,
               cfg->kv_cache_dtype == "fp8" ? "fp8 (E4M3, a power-of-two scale per token and head)"
                                            : "the model's");

  if ((*backend)->batch_invariant()) {
    spdlog::info("mode: deterministic: a request's tokens and logprobs are the same in any batch "
                 "as alone (row-invariant products, paged attention)");
  }
  scheduler::SchedulerOptions so;
  so.loop.max_running_sequences = cfg->max_batch;
  so.loop.prefill_token_budget = cfg->prefill_budget;
  so.queue_limit = cfg->queue_limit;
  so.loop.overlap = cfg->overlap == "auto" ? -1 : cfg->overlap == "on" ? 1 : 0;
  so.loop.feed = cfg->feed == "auto" ? -1 : cfg->feed == "on" ? 1 : 0;
  std::optional<engine::DraftHeads> heads;
  if (absl::Status s = ConfigureSpeculation(*cfg, loaded->bundle, &so.loop, &heads); !s.ok()) {
    return Fail(s);
  }
  so.loop.attention = attention;
  // KV events: the publisher outlives the scheduler (declared first, destroyed last), which
  // flushes into it until its engine thread stops.
  absl::StatusOr<std::unique_ptr<KvEventPublisher>> kv_events = MakeKvEventPublisher(*cfg);
  if (!kv_events.ok()) return Fail(kv_events.status());
  scheduler::Scheduler sched(mc, loaded->bundle.tokenizer.get(), *std::move(backend), so);
  if (cfg->speculative != "off" && cfg->speculation_adaptive == "on" &&
      cfg->speculation_profile == "on") {
    ProfileSpeculation(sched.loop());  // before KV events: routers never see its requests
  }
  if (*kv_events) sched.set_kv_event_sink(kv_events->get());
  sched.Start();

  ServerContext ctx;
  ctx.model_name = cfg->served_model_name.empty()
                       ? (loaded->dummy ? loaded->path
                                        : std::filesystem::path(loaded->path).stem().string())
                       : cfg->served_model_name;
  ctx.model_config = &mc;
  ctx.tokenizer = loaded->bundle.tokenizer.get();
  ctx.scheduler = &sched;
  ctx.options = cfg->server;
  ctx.jinja_chat = loaded->jinja_chat;
  ctx.auth = *std::move(auth);
  ctx.ready = &ready;
  if (*kv_events) {
    ctx.extra_metrics = [p = kv_events->get()] { return RenderKvEventMetrics(p->stats()); };
  }
  // Schemas compile on the front ends' threads; the vocabulary is built at the first one.
  ctx.structured_outputs = std::make_shared<StructuredOutputs>(ctx.tokenizer);
  ctx.tool_calling = std::make_shared<ToolCalling>(ctx.tokenizer);

  http::HttpFrontEnd http(&ctx);
  if (absl::Status s = http.Start(); !s.ok()) return Fail(s);
  GrpcFrontEnd grpc_server(&ctx);
  if (absl::Status s = grpc_server.Start(); !s.ok()) return Fail(s);
  signals.Serving();
  // The banner goes out before /ready and gRPC health say SERVING: whoever waits for ready
  // (a script, an orchestrator, the tests) finds the ports and the example calls logged.
  spdlog::info("serving model '{}': HTTP http://{}:{} (OpenAI API), gRPC {}:{}{}", ctx.model_name,
               ctx.options.host, http.port(), ctx.options.host, grpc_server.port(),
               ctx.auth.keys_required()
                   ? absl::StrCat(" (API keys required; ", ctx.auth.tenants().size(), " tenants)")
                   : std::string(" (no API key: one tenant)"));
  LogUsage(ctx.options.host, http.port(), grpc_server.port(), ctx.model_name);
  ready = true;
  grpc_server.UpdateHealth();

  // The drain. Further signals meanwhile are logged and ignored by `signals`' thread.
  Drain(signals.WaitForDrain(), ctx, ready, http, grpc_server, sched);
  LogEngineReport(sched);
  spdlog::info("stopped");
  return 0;
}

}  // namespace
}  // namespace banyan::server

int main(int argc, char** argv) { return banyan::server::Run(argc, argv); }
