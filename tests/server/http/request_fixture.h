// The fixture of the HTTP request-parser tests: the bundled model's tokenizer (loaded once per
// suite), a model config of its size and a ServerContext over them. Suites add what their
// requests need (structured outputs, tool calling, a chat template) in their own SetUp.
#pragma once

#include <string>
#include <string_view>

#include "model/model.h"
#include "text/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "server/http/openai_request.h"
#include "server/common/server_context.h"
#include "text/grammar/matcher.h"
#include "tests/testing/bundled_model.h"

namespace banyan::server {

// The bundled model's SentencePiece tokenizer, in the folder tests/testing finds it in.
inline std::string BundledTokenizerPath() {
  return banyan::testing::BundledModelDir() + "/tok512.model";
}

class BundledRequestTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto t = text::Tokenizer::FromFile(BundledTokenizerPath());
    ASSERT_TRUE(t.ok()) << t.status();
    tokenizer_ = t->release();
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    tokenizer_ = nullptr;
  }
  void SetUp() override {
    config_.max_seq_len = 512;
    config_.vocab_size = 512;
    ctx_.model_name = "stories";
    ctx_.model_config = &config_;
    ctx_.tokenizer = tokenizer_;
  }

  // Whether the first input's grammar accepts `text` whole (false without a grammar).
  static bool Accepts(const http::ParsedGeneration& p, std::string_view text) {
    const auto& c = p.inputs.at(0).constraint;
    if (c == nullptr) return false;
    text::grammar::Matcher m(c->grammar);
    return m.Accept(text) && m.CanEnd();
  }

  static inline text::Tokenizer* tokenizer_ = nullptr;
  model::ModelConfig config_;
  ServerContext ctx_;
};

}  // namespace banyan::server
