// `banyan`: command-line front end to the engine.
//
//   banyan generate [--model PATH] [--tokenizer FILE] [--prompt TEXT] [--max-tokens N]
//                   [--temperature T] [--top-p P] [--top-k K] [--min-p P] [--seed S] [--n N]
//                   [--chunk-size C] [--kv-mb MB] [--attention tpp|paged] [--backend cpu|cuda]
//                   [--prompts-file FILE] [--speculative off|hydra|lookup] [--draft-heads FILE]
//                   [--draft-tokens K] [--draft-tree B1,B2,..] [--speculation-adaptive on|off]
//                   [--draft-on device|host] [--quantization none|fp8]
//                   [--kv-cache-dtype auto|bf16|fp8] [--deterministic on|off]
//       Prints the completion (generated text only). With --n > 1 the samples share the
//       prompt's KV and are printed one after another under "--- sample i ---" headers.
//       --prompts-file: one prompt per line, all run as one batch on the engine loop (the loop
//       the daemon runs); each completion is printed on one line, newlines escaped as \n.
//       --speculative hydra: requests verify candidate chains (or, with --draft-tree, trees)
//       from the draft heads (--draft-heads, a head set's config.json); the output is the same
//       as without. --speculative lookup (prompt lookup, draft-tokens candidates per chain, 3 by
//       default): the batch runs twice in one loop and the second run is printed, its chains
//       drafted from the continuations the first generated (greedy requests only).
//       --kv-cache-dtype fp8: K and V in FP8 as banyand's (kernels/kv_fp8.h; the CPU backend
//       rounds its fp32 rows the same way).
//       --deterministic on: banyand's batch-invariant mode (each prompt's output the same alone
//       as in the batch; attention paged); with --speculative hydra or lookup, chains and trees
//       give plain decoding's bits (tools/gpu/speculation_identity.sh checks them).
//   banyan convert --model PATH --out DIR [--dtype f32|f16|bf16] [--tokenizer FILE]
//                  [--quantization none|fp8]
//       Writes the model as a Hugging Face folder (config.json, model.safetensors,
//       tokenizer.model). FP8 weights (an FP8 checkpoint, or --quantization fp8, as banyand's)
//       are written as FP8 (docs/model_formats.md); --dtype applies to the other tensors.
//
// PATH is a Hugging Face folder, a .gguf, or a llama2.c .bin; the bundled stories260K is the
// default.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "engine/cpu/cpu_backend.h"
#include "model/model_io.h"
#include "model/model_bundle.h"
#include "engine/speculative/draft_heads.h"
#include "scheduler/generate.h"
#include "spdlog/spdlog.h"
#ifdef BANYAN_HAVE_CUDA_BACKEND
#include "engine/cuda/cuda_backend.h"
#endif
#include <fstream>

namespace banyan {
namespace {

using engine::FinishReason;

struct Args {
  std::string command;
  std::map<std::string, std::string> flags;

  std::string Get(const std::string& k, const std::string& def = "") const {
    auto it = flags.find(k);
    return it == flags.end() ? def : it->second;
  }
};

absl::StatusOr<Args> Parse(int argc, char** argv) {
  Args a;
  if (argc < 2) return absl::InvalidArgumentError("missing command: generate or convert");
  a.command = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string k = argv[i];
    if (!k.starts_with("--")) return absl::InvalidArgumentError("unexpected argument " + k);
    k = k.substr(2);
    if (auto eq = k.find('='); eq != std::string::npos) {
      a.flags[k.substr(0, eq)] = k.substr(eq + 1);
    } else if (i + 1 < argc) {
      a.flags[k] = argv[++i];
    } else {
      return absl::InvalidArgumentError("flag --" + k + " needs a value");
    }
  }
  return a;
}

template <typename T>
absl::Status ParseNum(const Args& a, const std::string& key, T* out) {
  std::string v = a.Get(key);
  if (v.empty()) return absl::OkStatus();
  bool ok;
  if constexpr (std::is_same_v<T, float>) {
    ok = absl::SimpleAtof(v, out);
  } else {
    ok = absl::SimpleAtoi(v, out);
  }
  if (!ok) return absl::InvalidArgumentError(absl::StrCat("--", key, ": not a number: ", v));
  return absl::OkStatus();
}

absl::Status Generate(const Args& a, const char* argv0) {
  std::string model = a.Get("model", model::FindBundledModel(argv0));
  if (model.empty()) {
    return absl::NotFoundError("no --model given and the bundled stories260K was not found");
  }
  model::WeightQuantization quantization;
  if (absl::Status s = model::ParseWeightQuantization(a.Get("quantization", "none"), &quantization);
      !s.ok()) {
    return s;
  }
  auto bundle = model::LoadModelBundle(model, a.Get("tokenizer"), quantization);
  if (!bundle.ok()) return bundle.status();
  const model::ModelConfig& cfg = bundle->weights.config;

  scheduler::Request req;
  req.prompt = bundle->tokenizer->Encode(a.Get("prompt"), /*add_bos=*/true);
  req.params.max_tokens = 256;
  int32_t chunk_size = 64, kv_mb = 256;
  int64_t seed = -1;
  for (absl::Status s : {ParseNum(a, "max-tokens", &req.params.max_tokens),
                         ParseNum(a, "temperature", &req.params.temperature),
                         ParseNum(a, "top-p", &req.params.top_p),
                         ParseNum(a, "top-k", &req.params.top_k),
                         ParseNum(a, "min-p", &req.params.min_p), ParseNum(a, "n", &req.n),
                         ParseNum(a, "seed", &seed), ParseNum(a, "chunk-size", &chunk_size),
                         ParseNum(a, "kv-mb", &kv_mb)}) {
    if (!s.ok()) return s;
  }
  if (seed >= 0) {
    req.params.seed = static_cast<uint64_t>(seed);
    req.params.has_seed = true;
  }
  std::string attention = a.Get("attention", "tpp");
  if (attention != "tpp" && attention != "paged") {
    return absl::InvalidArgumentError("--attention must be tpp or paged, got " + attention);
  }
  const std::string deterministic = a.Get("deterministic", "off");
  if (deterministic != "on" && deterministic != "off") {
    return absl::InvalidArgumentError("--deterministic must be on or off, got " + deterministic);
  }
  const bool invariant = deterministic == "on";
  if (invariant) attention = "paged";  // as banyand: no TPP, each row's sums as it runs alone
  const engine::AttentionMode mode =
      attention == "tpp" ? engine::AttentionMode::kTpp : engine::AttentionMode::kPaged;
  const std::string kv_dtype = a.Get("kv-cache-dtype", "auto");
  if (kv_dtype != "auto" && kv_dtype != "bf16" && kv_dtype != "fp8" && kv_dtype != "fp8_e4m3") {
    return absl::InvalidArgumentError("--kv-cache-dtype must be auto, bf16 or fp8, got " + kv_dtype);
  }
  const bool kv_fp8 = kv_dtype.starts_with("fp8");
  std::unique_ptr<engine::Backend> backend;
  const std::string backend_name = a.Get("backend", "cpu");
  if (backend_name == "cpu") {
    engine::CpuBackendOptions opts;
    opts.chunk_size = chunk_size;
    opts.num_chunks = static_cast<int32_t>(
        engine::CpuBackend::ChunksForBudget(cfg, chunk_size, int64_t{kv_mb} << 20));
    opts.attention = mode;
    opts.kv_fp8 = kv_fp8;
    opts.row_invariant = invariant;
    auto cpu = engine::CpuBackend::Create(&bundle->weights, opts);
    if (!cpu.ok()) return cpu.status();
    backend = std::move(*cpu);
  } else if (backend_name == "cuda") {
#ifdef BANYAN_HAVE_CUDA_BACKEND
    engine::CudaBackendOptions opts;
    opts.chunk_size = chunk_size;
    opts.kv_memory_bytes = int64_t{kv_mb} << 20;
    opts.attention = mode;
    opts.kv_fp8 = kv_fp8;
    opts.batch_invariant = invariant;
    auto cuda = engine::CudaBackend::Create(&bundle->weights, opts);
    if (!cuda.ok()) return cuda.status();
    backend = std::move(*cuda);
#else
    return absl::UnimplementedError("this banyan was built without CUDA; use --backend cpu");
#endif
  } else {
    return absl::InvalidArgumentError("--backend must be cpu or cuda, got " + backend_name);
  }
  std::vector<scheduler::Request> requests;
  if (std::string file = a.Get("prompts-file"); !file.empty()) {
    std::ifstream in(file);
    if (!in) return absl::NotFoundError("cannot read --prompts-file " + file);
    for (std::string line; std::getline(in, line);) {
      scheduler::Request r = req;
      r.prompt = bundle->tokenizer->Encode(line, /*add_bos=*/true);
      requests.push_back(std::move(r));
    }
  } else {
    requests.push_back(req);
  }
  // Batch settings: every request admitted at once, whole prompts prefilled in one step.
  scheduler::LoopOptions lo{.max_running_sequences = 1 << 16,
                            .prefill_token_budget = 1 << 24,
                            .attention = mode};
  std::optional<engine::DraftHeads> heads;
  const std::string speculative = a.Get("speculative", "off");
  if (speculative == "hydra") {
    const std::string path = a.Get("draft-heads");
    if (path.empty()) return absl::InvalidArgumentError("--speculative hydra needs --draft-heads");
    auto h = engine::DraftHeads::Load(path, bundle->weights);
    if (!h.ok()) return h.status();
    heads.emplace(*std::move(h));
    lo.speculation = scheduler::LoopOptions::Speculation::kHeads;
    lo.draft_heads = &*heads;
    lo.draft_tokens = heads->num_heads();
    if (absl::Status s = ParseNum(a, "draft-tokens", &lo.draft_tokens); !s.ok()) return s;
    if (const std::string tree = a.Get("draft-tree"); !tree.empty()) {
      auto b = engine::DraftHeads::ParseBranching(tree);
      if (!b.ok()) return b.status();
      lo.draft_tree.assign(b->begin(), b->end());
    }
    lo.speculation_max_rows = 1 << 16;
    const std::string adaptive = a.Get("speculation-adaptive", "on");
    if (adaptive != "on" && adaptive != "off") {
      return absl::InvalidArgumentError("--speculation-adaptive must be on or off, got " + adaptive);
    }
    lo.speculation_adaptive = adaptive == "on";
    const std::string draft_on = a.Get("draft-on", "device");
    if (draft_on != "device" && draft_on != "host") {
      return absl::InvalidArgumentError("--draft-on must be device or host, got " + draft_on);
    }
    lo.draft_on_host = draft_on == "host";
  } else if (speculative == "lookup") {
    lo.speculation = scheduler::LoopOptions::Speculation::kLookup;
    if (absl::Status s = ParseNum(a, "draft-tokens", &lo.draft_tokens); !s.ok()) return s;
    lo.speculation_max_rows = 1 << 16;
    lo.speculation_adaptive = false;  // the second run drafts wherever a continuation is known
  } else if (speculative != "off") {
    return absl::InvalidArgumentError("--speculative must be off, hydra or lookup, got " +
                                      speculative);
  }
  scheduler::EngineLoop loop(cfg, bundle->tokenizer.get(), std::move(backend), lo);
  auto results = scheduler::GenerateAll(loop, requests);
  // Prompt lookup drafts what this loop generated for the same prompt: the second run.
  if (results.ok() && speculative == "lookup") results = scheduler::GenerateAll(loop, requests);
  if (!results.ok()) return results.status();
  // --prompts-file prints each completion on one line, whatever the number of prompts (a file of
  // one prompt too: scripts compare its line with the same prompt's line from a larger file).
  const bool one_line = !a.Get("prompts-file").empty();
  for (const scheduler::GenerationResult& result : *results) {
    const auto& samples = result.samples;
    for (size_t i = 0; i < samples.size(); ++i) {
      if (samples.size() > 1) std::printf("--- sample %zu ---\n", i + 1);
      // The streamed text, as the API returns it: decoded after the prompt, so a completion
      // that starts a word keeps its leading space (Decode of the tokens alone drops it).
      std::string text = samples[i].text;
      if (one_line) text = absl::StrReplaceAll(text, {{"\\", "\\\\"}, {"\n", "\\n"}});
      std::printf("%s\n", text.c_str());
    }
  }
  const scheduler::LoopStats& st = loop.stats();
  std::fprintf(stderr,
               "[banyan] %s on %s: %lld prompt tokens, %lld decode steps, %.1f tok/s decode; "
               "[kv] peak %d live chunks, %lld saved by sharing\n",
               model.c_str(), backend_name.c_str(), static_cast<long long>(st.prefill_tokens),
               static_cast<long long>(st.decode_steps),
               st.decode_seconds > 0 ? st.decode_tokens / st.decode_seconds : 0.0,
               st.peak.chunks_live, static_cast<long long>(st.peak.chunks_saved_by_sharing));
#ifdef BANYAN_HAVE_CUDA_BACKEND
  if (auto* cuda = dynamic_cast<engine::CudaBackend*>(&loop.backend());
      cuda != nullptr && cuda->batch_invariant()) {
    const engine::CudaAttentionStats& as = cuda->attention_stats();
    std::fprintf(stderr, "[banyan] deterministic: %lld steps read a shared prefix once, for %lld "
                 "decode rows in all\n", static_cast<long long>(as.invariant_shared_steps),
                 static_cast<long long>(as.invariant_shared_rows));
  }
#endif
  if (const scheduler::MetricsSnapshot& m = loop.metrics(); m.spec_drafts_total > 0) {
    std::fprintf(stderr, "[banyan] speculative: %lld verifications, %lld of %lld candidates accepted\n",
                 static_cast<long long>(m.spec_drafts_total),
                 static_cast<long long>(m.spec_accepted_tokens_total),
                 static_cast<long long>(m.spec_draft_tokens_total));
  }
  return absl::OkStatus();
}

absl::Status Convert(const Args& a) {
  std::string model = a.Get("model"), out = a.Get("out");
  if (model.empty() || out.empty()) {
    return absl::InvalidArgumentError("convert needs --model PATH and --out DIR");
  }
  std::string dtype = a.Get("dtype", "f32");
  model::HfDtype dt;
  if (dtype == "f32") {
    dt = model::HfDtype::kF32;
  } else if (dtype == "f16") {
    dt = model::HfDtype::kF16;
  } else if (dtype == "bf16") {
    dt = model::HfDtype::kBF16;
  } else {
    return absl::InvalidArgumentError("--dtype must be f32, f16 or bf16, got " + dtype);
  }
  model::WeightQuantization quantization;
  if (absl::Status s = model::ParseWeightQuantization(a.Get("quantization", "none"), &quantization);
      !s.ok()) {
    return s;
  }
  auto bundle = model::LoadModelBundle(model, a.Get("tokenizer"), quantization);
  if (!bundle.ok()) return bundle.status();
  if (absl::Status s = model::WriteHfFolder(bundle->weights, out, dt); !s.ok()) return s;
  namespace fs = std::filesystem;
  if (bundle->tokenizer_path != "<gguf metadata>") {
    std::error_code ec;
    const fs::path source = bundle->tokenizer_path;
    const bool json = source.extension() == ".json";
    fs::copy_file(source, fs::path(out) / (json ? "tokenizer.json" : "tokenizer.model"),
                  fs::copy_options::overwrite_existing, ec);
    if (ec) return absl::InternalError("cannot copy the tokenizer: " + ec.message());
    const fs::path config = source.parent_path() / "tokenizer_config.json";
    if (json && fs::exists(config, ec)) {
      fs::copy_file(config, fs::path(out) / "tokenizer_config.json",
                    fs::copy_options::overwrite_existing, ec);
      if (ec) return absl::InternalError("cannot copy tokenizer_config.json: " + ec.message());
    }
  } else {
    std::fprintf(stderr, "[banyan] note: the GGUF's tokenizer was not written; pass --tokenizer\n");
  }
  std::fprintf(stderr, "[banyan] wrote %s\n", out.c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace banyan

int main(int argc, char** argv) {
  spdlog::set_level(spdlog::level::warn);  // the engine loop's per-request lines are for banyand
  auto args = banyan::Parse(argc, argv);
  absl::Status s = args.status();
  if (s.ok()) {
    if (args->command == "generate") {
      s = banyan::Generate(*args, argv[0]);
    } else if (args->command == "convert") {
      s = banyan::Convert(*args);
    } else {
      s = absl::InvalidArgumentError("unknown command " + args->command +
                                     " (expected generate or convert)");
    }
  }
  if (!s.ok()) {
    std::fprintf(stderr, "banyan: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  return 0;
}
