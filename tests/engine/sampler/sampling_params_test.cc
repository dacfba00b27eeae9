#include "engine/sampler/sampling_params.h"

#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "gtest/gtest.h"

namespace banyan::engine {
namespace {

constexpr int kVocab = 100;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(Validate, AcceptsDefaultsAndBoundaries) {
  EXPECT_TRUE(Validate(SamplingParams{}, kVocab).ok());
  SamplingParams p;
  p.temperature = 0.0f;
  p.top_p = 1.0f;
  p.top_k = -1;
  p.min_p = 1.0f;
  p.repetition_penalty = 1e-3f;
  p.frequency_penalty = -2.0f;
  p.presence_penalty = 2.0f;
  p.max_tokens = 1;
  p.stop_token_ids = {0, kVocab - 1};
  p.logit_bias = {{0, -100.0f}, {7, 0.0f}, {kVocab - 1, 100.0f}};
  p.logprobs = 20;
  EXPECT_TRUE(Validate(p, kVocab).ok()) << Validate(p, kVocab);
  p.temperature = 5.0f;   // vLLM's range: any finite temperature >= 0
  p.top_k = kVocab * 10;  // larger than the vocabulary just means "all"
  p.top_p = 1e-6f;
  p.min_p = 0.0f;
  EXPECT_TRUE(Validate(p, kVocab).ok()) << Validate(p, kVocab);
}

struct BadCase {
  const char* field;
  std::function<void(SamplingParams&)> mutate;
};

TEST(Validate, RejectsEachBadFieldByName) {
  const BadCase cases[] = {
      {"temperature", [](SamplingParams& p) { p.temperature = -0.1f; }},
      {"temperature", [](SamplingParams& p) { p.temperature = kNaN; }},
      {"temperature", [](SamplingParams& p) { p.temperature = kInf; }},
      {"top_p", [](SamplingParams& p) { p.top_p = 0.0f; }},
      {"top_p", [](SamplingParams& p) { p.top_p = 1.01f; }},
      {"top_p", [](SamplingParams& p) { p.top_p = kNaN; }},
      {"top_k", [](SamplingParams& p) { p.top_k = -2; }},
      {"min_p", [](SamplingParams& p) { p.min_p = -0.01f; }},
      {"min_p", [](SamplingParams& p) { p.min_p = 1.5f; }},
      {"min_p", [](SamplingParams& p) { p.min_p = kNaN; }},
      {"repetition_penalty", [](SamplingParams& p) { p.repetition_penalty = 0.0f; }},
      {"repetition_penalty", [](SamplingParams& p) { p.repetition_penalty = -1.0f; }},
      {"repetition_penalty", [](SamplingParams& p) { p.repetition_penalty = kNaN; }},
      {"repetition_penalty", [](SamplingParams& p) { p.repetition_penalty = kInf; }},
      {"frequency_penalty", [](SamplingParams& p) { p.frequency_penalty = 2.01f; }},
      {"frequency_penalty", [](SamplingParams& p) { p.frequency_penalty = -2.5f; }},
      {"frequency_penalty", [](SamplingParams& p) { p.frequency_penalty = kNaN; }},
      {"presence_penalty", [](SamplingParams& p) { p.presence_penalty = 3.0f; }},
      {"presence_penalty", [](SamplingParams& p) { p.presence_penalty = -2.01f; }},
      {"presence_penalty", [](SamplingParams& p) { p.presence_penalty = kNaN; }},
      {"max_tokens", [](SamplingParams& p) { p.max_tokens = 0; }},
      {"max_tokens", [](SamplingParams& p) { p.max_tokens = -5; }},
      {"min_tokens", [](SamplingParams& p) { p.min_tokens = -1; }},
      {"min_tokens", [](SamplingParams& p) { p.min_tokens = p.max_tokens + 1; }},
      {"stop_token_ids",
       [](SamplingParams& p) {
         p.stop_token_ids = {3, -1};
       }},
      {"stop_token_ids", [](SamplingParams& p) { p.stop_token_ids = {kVocab}; }},
      {"logprobs", [](SamplingParams& p) { p.logprobs = -1; }},
      {"logprobs", [](SamplingParams& p) { p.logprobs = 21; }},
      {"logit_bias", [](SamplingParams& p) { p.logit_bias = {{kVocab, 1.0f}}; }},
      {"logit_bias", [](SamplingParams& p) { p.logit_bias = {{-1, 1.0f}}; }},
      {"logit_bias", [](SamplingParams& p) { p.logit_bias = {{3, 1.0f}, {3, 2.0f}}; }},
      {"logit_bias", [](SamplingParams& p) { p.logit_bias = {{4, 1.0f}, {3, 2.0f}}; }},
      {"logit_bias", [](SamplingParams& p) { p.logit_bias = {{3, 100.5f}}; }},
      {"logit_bias", [](SamplingParams& p) { p.logit_bias = {{3, kNaN}}; }},
      {"logit_bias", [](SamplingParams& p) { p.logit_bias = {{3, -kInf}}; }},
      {"logit_bias",
       [](SamplingParams& p) {
         for (int i = 0; i <= kMaxLogitBiasTokens; ++i) p.logit_bias.emplace_back(i, 1.0f);
       }},
  };
  for (const BadCase& c : cases) {
    SamplingParams p;
    c.mutate(p);
    const absl::Status s = Validate(p, kVocab);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.field << ": " << s;
    EXPECT_NE(std::string(s.message()).find(c.field), std::string::npos)
        << "message does not name " << c.field << ": " << s.message();
  }
}

TEST(Validate, MessageStatesValueAndRange) {
  SamplingParams p;
  p.top_p = 1.5f;
  const std::string msg(Validate(p, kVocab).message());
  EXPECT_NE(msg.find("1.5"), std::string::npos) << msg;
  EXPECT_NE(msg.find("(0, 1]"), std::string::npos) << msg;

  p = SamplingParams{};
  p.stop_token_ids = {kVocab + 7};
  const std::string stop_msg(Validate(p, kVocab).message());
  EXPECT_NE(stop_msg.find(std::to_string(kVocab + 7)), std::string::npos) << stop_msg;
  EXPECT_NE(stop_msg.find(std::to_string(kVocab)), std::string::npos) << stop_msg;
}

constexpr int kEos = 2;

TEST(CheckStop, EosStopsUnlessIgnored) {
  SamplingParams p;
  p.max_tokens = 10;
  EXPECT_EQ(CheckStop(kEos, 1, p, kEos), FinishReason::kStop);
  p.ignore_eos = true;
  EXPECT_EQ(CheckStop(kEos, 1, p, kEos), FinishReason::kNone);
  EXPECT_EQ(CheckStop(kEos, 10, p, kEos), FinishReason::kLength);
}

TEST(CheckStop, StopTokenIdsStopEvenWithIgnoreEos) {
  SamplingParams p;
  p.max_tokens = 10;
  p.stop_token_ids = {7, 9};
  p.ignore_eos = true;
  EXPECT_EQ(CheckStop(7, 3, p, kEos), FinishReason::kStop);
  EXPECT_EQ(CheckStop(9, 3, p, kEos), FinishReason::kStop);
  EXPECT_EQ(CheckStop(8, 3, p, kEos), FinishReason::kNone);
}

TEST(CheckStop, LengthCountsGeneratedTokensIncludingThisOne) {
  SamplingParams p;
  p.max_tokens = 3;
  EXPECT_EQ(CheckStop(5, 1, p, kEos), FinishReason::kNone);
  EXPECT_EQ(CheckStop(5, 2, p, kEos), FinishReason::kNone);
  EXPECT_EQ(CheckStop(5, 3, p, kEos), FinishReason::kLength);
  EXPECT_EQ(CheckStop(5, 4, p, kEos), FinishReason::kLength);
}

TEST(CheckStop, StopWinsOverLength) {
  SamplingParams p;
  p.max_tokens = 1;
  p.stop_token_ids = {5};
  EXPECT_EQ(CheckStop(kEos, 1, p, kEos), FinishReason::kStop);
  EXPECT_EQ(CheckStop(5, 1, p, kEos), FinishReason::kStop);
  EXPECT_EQ(CheckStop(6, 1, p, kEos), FinishReason::kLength);
}

}  // namespace
}  // namespace banyan::engine
