#include "scheduler/generate.h"

#include <chrono>
#include <memory>

#include "absl/strings/str_cat.h"

namespace banyan::scheduler {

absl::StatusOr<std::vector<GenerationResult>> GenerateAll(EngineLoop& loop,
                                                          std::span<const Request> requests) {
  for (size_t i = 0; i < requests.size(); ++i) {
    if (absl::Status s = loop.Check(requests[i]); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("request ", i, ": ", s.message()));
    }
  }
  std::vector<std::shared_ptr<RequestStream>> streams;
  const auto now = std::chrono::steady_clock::now();
  for (const Request& r : requests) {
    streams.push_back(std::make_shared<RequestStream>());
    loop.Add(r, streams.back(), now);
  }
  while (!loop.idle()) loop.Step();

  std::vector<GenerationResult> results(requests.size());
  std::vector<TokenEvent> events;
  for (size_t i = 0; i < requests.size(); ++i) {
    GenerationResult& res = results[i];
    res.samples.resize(requests[i].n);
    events.clear();
    while (streams[i]->Read(&events, std::chrono::milliseconds(0))) {
    }
    if (absl::Status s = streams[i]->status(); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("request ", i, ": ", s.message()));
    }
    for (TokenEvent& e : events) {
      SampleOutput& out = res.samples.at(e.sample);
      out.text += e.text;
      if (e.token >= 0 && e.finish != FinishReason::kStop) {
        out.tokens.push_back(e.token);
        out.logprobs.push_back(e.logprob);
      }
      if (e.finish != FinishReason::kNone) out.finish = e.finish;
    }
    res.usage = streams[i]->usage();
  }
  return results;
}

}  // namespace banyan::scheduler
