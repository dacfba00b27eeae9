// `banyan-grpc-client`: a command-line client of banyand's gRPC API (banyan.v1.Generation and
// grpc.health.v1.Health), used by people and by the end-to-end tests.
//
//   banyan-grpc-client [--addr HOST:PORT] (--prompt TEXT | --token-ids 1,2,3) [--model NAME]
//       [--max-tokens N] [--temperature T] [--top-p P] [--top-k K] [--min-p P]
//       [--repetition-penalty R] [--frequency-penalty F] [--presence-penalty P] [--seed S]
//       [--n N] [--stop STRING]... [--stop-token-id ID]... [--ignore-eos] [--no-bos]
//       [--logprobs K] [--priority P] [--cache-salt S] [--user U] [--request-id ID]
//       [--timeout-ms MS] [--api-key KEY] [--jsonl]
//       Generates. With n = 1 the text is streamed to stdout as it arrives; with n > 1 the
//       choices are printed when done, one after another under "--- sample i ---" headers.
//       --jsonl prints instead, when done, one JSON object per choice ({"index","text",
//       "token_ids","finish_reason"[,"logprobs"]}) and a last one {"usage":{...}}.
//       The finish reasons and usage go to stderr.
//   banyan-grpc-client [--addr HOST:PORT] --tokenize --prompt TEXT [--no-bos]
//       Prints the token ids, space-separated.
//   banyan-grpc-client [--addr HOST:PORT] --list-models
//       Prints the served models, one "id context_length vocab_size" line each.
//   banyan-grpc-client [--addr HOST:PORT] --health [--service NAME]
//       Prints SERVING / NOT_SERVING / ...; exit status 0 only for SERVING.
//
// --addr defaults to 127.0.0.1:50051, --api-key to $BANYAN_API_KEY. Exit status: 0 success,
// 1 the call failed (the gRPC status code and message go to stderr), 2 bad command line.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "banyan/v1/generation.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "nlohmann/json.hpp"

namespace {

namespace v1 = banyan::v1;

// Flags that take no value.
const char* const kSwitches[] = {"ignore-eos", "no-bos",      "jsonl",
                                 "tokenize",   "list-models", "health"};

struct Args {
  std::multimap<std::string, std::string> flags;

  bool Has(const std::string& k) const { return flags.count(k) > 0; }
  std::string Get(const std::string& k, const std::string& def = "") const {
    auto it = flags.find(k);
    return it == flags.end() ? def : it->second;
  }
  std::vector<std::string> All(const std::string& k) const {
    std::vector<std::string> out;
    for (auto [it, end] = flags.equal_range(k); it != end; ++it) out.push_back(it->second);
    return out;
  }
};

[[noreturn]] void Usage(const std::string& why) {
  std::cerr << "banyan-grpc-client: " << why
            << "\nusage: banyan-grpc-client [--addr HOST:PORT] (--prompt TEXT | --token-ids 1,2,3)"
               " [--max-tokens N] [--temperature T] [--seed S] [--n N] [--stop S]... ..."
               "\n       banyan-grpc-client [--addr HOST:PORT] --tokenize --prompt TEXT"
               "\n       banyan-grpc-client [--addr HOST:PORT] --list-models"
               "\n       banyan-grpc-client [--addr HOST:PORT] --health [--service NAME]"
               "\n(see the top of tools/grpc_client.cc for every flag)\n";
  std::exit(2);
}

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (k.rfind("--", 0) != 0) Usage("unexpected argument '" + k + "'");
    k = k.substr(2);
    bool is_switch = false;
    for (const char* s : kSwitches) is_switch |= k == s;
    if (auto eq = k.find('='); eq != std::string::npos) {
      a.flags.emplace(k.substr(0, eq), k.substr(eq + 1));
    } else if (is_switch) {
      a.flags.emplace(k, "");
    } else if (i + 1 < argc) {
      a.flags.emplace(k, argv[++i]);
    } else {
      Usage("flag --" + k + " needs a value");
    }
  }
  return a;
}

template <typename T>
T Number(const Args& a, const std::string& flag) {
  const std::string s = a.Get(flag);
  try {
    size_t used = 0;
    T v;
    if constexpr (std::is_floating_point_v<T>) {
      v = static_cast<T>(std::stod(s, &used));
    } else if constexpr (std::is_unsigned_v<T>) {
      v = static_cast<T>(std::stoull(s, &used));
    } else {
      v = static_cast<T>(std::stoll(s, &used));
    }
    if (used != s.size()) throw std::invalid_argument(s);
    return v;
  } catch (const std::exception&) {
    Usage("--" + flag + " needs a number, got '" + s + "'");
  }
}

std::vector<int32_t> IdList(const std::string& csv, const std::string& flag) {
  std::vector<int32_t> ids;
  size_t pos = 0;
  while (pos <= csv.size() && !csv.empty()) {
    size_t comma = csv.find(',', pos);
    if (comma == std::string::npos) comma = csv.size();
    Args one;
    one.flags.emplace(flag, csv.substr(pos, comma - pos));
    ids.push_back(Number<int32_t>(one, flag));
    pos = comma + 1;
  }
  return ids;
}

int Fail(const grpc::Status& s) {
  static const char* const kNames[] = {"OK",
                                       "CANCELLED",
                                       "UNKNOWN",
                                       "INVALID_ARGUMENT",
                                       "DEADLINE_EXCEEDED",
                                       "NOT_FOUND",
                                       "ALREADY_EXISTS",
                                       "PERMISSION_DENIED",
                                       "RESOURCE_EXHAUSTED",
                                       "FAILED_PRECONDITION",
                                       "ABORTED",
                                       "OUT_OF_RANGE",
                                       "UNIMPLEMENTED",
                                       "INTERNAL",
                                       "UNAVAILABLE",
                                       "DATA_LOSS",
                                       "UNAUTHENTICATED"};
  const int code = s.error_code();
  std::cerr << "error: " << (code >= 0 && code <= 16 ? kNames[code] : "?") << ": "
            << s.error_message() << "\n";
  return 1;
}

const char* FinishName(v1::FinishReason r) {
  switch (r) {
    case v1::FINISH_REASON_STOP:
      return "stop";
    case v1::FINISH_REASON_LENGTH:
      return "length";
    case v1::FINISH_REASON_CANCELLED:
      return "cancelled";
    case v1::FINISH_REASON_ERROR:
      return "error";
    case v1::FINISH_REASON_TOOL_CALLS:
      return "tool_calls";
    default:
      return "";
  }
}

void SetUp(const Args& a, grpc::ClientContext* ctx) {
  std::string key = a.Get("api-key");
  if (key.empty()) {
    const char* env = std::getenv("BANYAN_API_KEY");
    if (env != nullptr) key = env;
  }
  if (!key.empty()) ctx->AddMetadata("authorization", "Bearer " + key);
  if (a.Has("timeout-ms")) {
    ctx->set_deadline(std::chrono::system_clock::now() +
                      std::chrono::milliseconds(Number<int64_t>(a, "timeout-ms")));
  }
}

v1::GenerateRequest BuildRequest(const Args& a) {
  v1::GenerateRequest req;
  req.set_model(a.Get("model"));
  if (a.Has("token-ids")) {
    for (int32_t id : IdList(a.Get("token-ids"), "token-ids")) {
      req.mutable_token_ids()->add_ids(id);
    }
  } else if (a.Has("prompt")) {
    req.set_text(a.Get("prompt"));
  } else {
    Usage("give --prompt TEXT or --token-ids IDS");
  }
  if (a.Has("no-bos")) req.set_add_bos(false);
  v1::SamplingParams* s = req.mutable_sampling();
  if (a.Has("max-tokens")) s->set_max_tokens(Number<int32_t>(a, "max-tokens"));
  if (a.Has("temperature")) s->set_temperature(Number<float>(a, "temperature"));
  if (a.Has("top-p")) s->set_top_p(Number<float>(a, "top-p"));
  if (a.Has("top-k")) s->set_top_k(Number<int32_t>(a, "top-k"));
  if (a.Has("min-p")) s->set_min_p(Number<float>(a, "min-p"));
  if (a.Has("repetition-penalty")) {
    s->set_repetition_penalty(Number<float>(a, "repetition-penalty"));
  }
  if (a.Has("frequency-penalty")) s->set_frequency_penalty(Number<float>(a, "frequency-penalty"));
  if (a.Has("presence-penalty")) s->set_presence_penalty(Number<float>(a, "presence-penalty"));
  if (a.Has("seed")) s->set_seed(Number<uint64_t>(a, "seed"));
  if (a.Has("n")) s->set_n(Number<int32_t>(a, "n"));
  for (const std::string& stop : a.All("stop")) s->add_stop(stop);
  for (const std::string& id : a.All("stop-token-id")) {
    s->add_stop_token_ids(IdList(id, "stop-token-id").at(0));
  }
  if (a.Has("ignore-eos")) s->set_ignore_eos(true);
  if (a.Has("logprobs")) s->set_logprobs(Number<int32_t>(a, "logprobs"));
  if (a.Has("priority")) req.set_priority(Number<int32_t>(a, "priority"));
  req.set_cache_salt(a.Get("cache-salt"));
  req.set_user(a.Get("user"));
  req.set_request_id(a.Get("request-id"));
  return req;
}

struct ChoiceOut {
  std::string text;
  std::vector<int32_t> token_ids;
  std::vector<std::pair<int32_t, float>> logprobs;
  v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED;
};

int Generate(v1::Generation::Stub* stub, const Args& a) {
  const v1::GenerateRequest req = BuildRequest(a);
  const bool jsonl = a.Has("jsonl");
  const bool stream_text = !jsonl && (!req.sampling().has_n() || req.sampling().n() == 1);
  grpc::ClientContext ctx;
  SetUp(a, &ctx);
  std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader = stub->Generate(&ctx, req);
  std::map<int, ChoiceOut> choices;
  v1::GenerateResponse msg;
  v1::Usage usage;
  bool have_usage = false;
  std::string request_id;
  while (reader->Read(&msg)) {
    request_id = msg.request_id();
    for (const v1::Choice& c : msg.choices()) {
      ChoiceOut& out = choices[c.index()];
      out.text += c.text();
      out.token_ids.insert(out.token_ids.end(), c.token_ids().begin(), c.token_ids().end());
      for (const v1::StepLogprobs& lp : c.logprobs()) {
        out.logprobs.emplace_back(lp.token().token_id(), lp.token().logprob());
      }
      if (c.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) out.finish = c.finish_reason();
      if (stream_text) {
        std::fwrite(c.text().data(), 1, c.text().size(), stdout);
        std::fflush(stdout);
      }
    }
    if (msg.has_usage()) {
      usage = msg.usage();
      have_usage = true;
    }
  }
  const grpc::Status status = reader->Finish();
  if (stream_text && !choices.empty()) std::fputc('\n', stdout);
  if (jsonl) {
    for (const auto& [index, c] : choices) {
      nlohmann::json j = {{"index", index},
                          {"text", c.text},
                          {"token_ids", c.token_ids},
                          {"finish_reason", FinishName(c.finish)}};
      if (!c.logprobs.empty()) {
        nlohmann::json lps = nlohmann::json::array();
        for (const auto& [id, lp] : c.logprobs) lps.push_back({{"token_id", id}, {"logprob", lp}});
        j["logprobs"] = lps;
      }
      std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    }
    if (have_usage) {
      std::cout << nlohmann::json{{"usage",
                                   {{"prompt_tokens", usage.prompt_tokens()},
                                    {"completion_tokens", usage.completion_tokens()},
                                    {"cached_prompt_tokens", usage.cached_prompt_tokens()}}},
                                  {"request_id", request_id}}
                       .dump()
                << "\n";
    }
  } else if (!stream_text) {
    for (const auto& [index, c] : choices) {
      std::cout << "--- sample " << index << " ---\n" << c.text << "\n";
    }
  }
  std::cout.flush();
  for (const auto& [index, c] : choices) {
    std::cerr << "[choice " << index << "] finish_reason=" << FinishName(c.finish)
              << " tokens=" << c.token_ids.size() << "\n";
  }
  if (have_usage) {
    std::cerr << "[usage] request_id=" << request_id << " prompt_tokens=" << usage.prompt_tokens()
              << " completion_tokens=" << usage.completion_tokens()
              << " cached_prompt_tokens=" << usage.cached_prompt_tokens() << "\n";
  }
  return status.ok() ? 0 : Fail(status);
}

int Tokenize(v1::Generation::Stub* stub, const Args& a) {
  if (!a.Has("prompt")) Usage("--tokenize needs --prompt TEXT");
  v1::TokenizeRequest req;
  req.set_model(a.Get("model"));
  req.set_text(a.Get("prompt"));
  if (a.Has("no-bos")) req.set_add_bos(false);
  grpc::ClientContext ctx;
  SetUp(a, &ctx);
  v1::TokenizeResponse resp;
  const grpc::Status s = stub->Tokenize(&ctx, req, &resp);
  if (!s.ok()) return Fail(s);
  for (int i = 0; i < resp.token_ids_size(); ++i) {
    std::cout << (i > 0 ? " " : "") << resp.token_ids(i);
  }
  std::cout << "\n";
  return 0;
}

int ListModels(v1::Generation::Stub* stub, const Args& a) {
  grpc::ClientContext ctx;
  SetUp(a, &ctx);
  v1::ListModelsResponse resp;
  const grpc::Status s = stub->ListModels(&ctx, v1::ListModelsRequest(), &resp);
  if (!s.ok()) return Fail(s);
  for (const v1::Model& m : resp.models()) {
    std::cout << m.id() << " " << m.max_context_length() << " " << m.vocab_size() << "\n";
  }
  return 0;
}

int Health(const std::shared_ptr<grpc::Channel>& channel, const Args& a) {
  auto stub = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext ctx;
  SetUp(a, &ctx);
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(a.Get("service"));
  grpc::health::v1::HealthCheckResponse resp;
  const grpc::Status s = stub->Check(&ctx, req, &resp);
  if (!s.ok()) return Fail(s);
  std::cout << grpc::health::v1::HealthCheckResponse::ServingStatus_Name(resp.status()) << "\n";
  return resp.status() == grpc::health::v1::HealthCheckResponse::SERVING ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = Parse(argc, argv);
  const std::string addr = a.Get("addr", "127.0.0.1:50051");
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateChannel(addr, grpc::InsecureChannelCredentials());
  if (a.Has("health")) return Health(channel, a);
  std::unique_ptr<v1::Generation::Stub> stub = v1::Generation::NewStub(channel);
  if (a.Has("list-models")) return ListModels(stub.get(), a);
  if (a.Has("tokenize")) return Tokenize(stub.get(), a);
  return Generate(stub.get(), a);
}
