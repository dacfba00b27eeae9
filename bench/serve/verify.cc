#include "bench/serve/verify.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>
#include <tuple>
#include <unordered_set>

#include "boost/asio/co_spawn.hpp"
#include "boost/asio/io_context.hpp"
#include "boost/asio/use_future.hpp"

namespace banyan::bench::serve {
namespace {

namespace net = boost::asio;

// Orders requests by what decides their greedy answer (a frequency penalty changes it).
struct SameAnswer {
  bool operator()(const RequestSpec* a, const RequestSpec* b) const {
    return std::tie(a->prompt, a->output_tokens, a->n, a->penalised) <
           std::tie(b->prompt, b->output_tokens, b->n, b->penalised);
  }
};

const std::string& ChoiceText(const std::vector<std::string>& texts, size_t i) {
  static const std::string* const kEmpty = new std::string();
  return i < texts.size() ? texts[i] : *kEmpty;
}

bool IsContinuationByte(char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; }

// Up to 16 bytes before `offset` and 48 from it, widened to whole UTF-8 sequences (the texts
// are valid UTF-8, and the JSON writer refuses anything else).
std::string Excerpt(const std::string& s, size_t offset) {
  size_t begin = offset > 16 ? offset - 16 : 0;
  size_t end = std::min(s.size(), offset + 48);
  while (begin > 0 && begin < s.size() && IsContinuationByte(s[begin])) --begin;
  while (end < s.size() && IsContinuationByte(s[end])) ++end;
  return begin < end ? s.substr(begin, end - begin) : std::string();
}

// The first `n` bytes of `s`, cut back to a whole UTF-8 sequence.
std::string Utf8Prefix(const std::string& s, size_t n) {
  if (s.size() <= n) return s;
  while (n > 0 && IsContinuationByte(s[n])) --n;
  return s.substr(0, n);
}

HttpReply Post(const Target& t, const std::string& body) {
  net::io_context ioc;
  std::string method = "POST", path = "/v1/completions", b = body;
  auto fut = net::co_spawn(ioc, SimpleRequest(t, method, path, b), net::use_future);
  ioc.run();
  return fut.get();
}

}  // namespace

Json VerifyTally::ToJson() const {
  return Json{{"groups", groups},
              {"compared", compared},
              {"checked", checked},
              {"mismatches", mismatches},
              {"errors", errors},
              {"distinct_texts", distinct_texts},
              {"first_mismatch", first_mismatch},
              {"first_error", first_error}};
}

std::vector<std::vector<size_t>> CheckGroups(const Workload& w,
                                             const std::vector<RequestResult>& results,
                                             VerifyTally* tally) {
  std::vector<std::vector<size_t>> groups;
  std::map<const RequestSpec*, size_t, SameAnswer> group_of;
  for (size_t i = 0; i < results.size(); ++i) {
    if (!results[i].ok) continue;
    auto [it, fresh] = group_of.emplace(&w.requests[i], groups.size());
    if (fresh) {
      groups.emplace_back();
    } else {
      const size_t ref = groups[it->second].front();
      ++tally->compared;
      CompareChoices("group", i, ref, results[ref].text, results[i].text, tally);
    }
    groups[it->second].push_back(i);
  }
  tally->groups = static_cast<int64_t>(groups.size());
  std::unordered_set<size_t> hashes;
  for (const std::vector<size_t>& g : groups) {
    size_t h = 0;
    for (const std::string& text : results[g.front()].text) {
      h = h * 1000003 ^ std::hash<std::string>()(text);
    }
    hashes.insert(h);
  }
  tally->distinct_texts = static_cast<int64_t>(hashes.size());
  return groups;
}

std::vector<size_t> SpreadSample(size_t count, size_t k) {
  std::vector<size_t> picks;
  if (count <= k) {
    for (size_t i = 0; i < count; ++i) picks.push_back(i);
    return picks;
  }
  // i * count / k is strictly increasing in i when count > k, so the picks are distinct.
  for (size_t i = 0; i < k; ++i) picks.push_back(i * count / k);
  return picks;
}

void CompareChoices(std::string_view kind, size_t request, size_t reference,
                    const std::vector<std::string>& want, const std::vector<std::string>& got,
                    VerifyTally* tally) {
  const size_t choices = std::max(want.size(), got.size());
  for (size_t c = 0; c < choices; ++c) {
    const std::string& a = ChoiceText(want, c);
    const std::string& b = ChoiceText(got, c);
    if (a == b) continue;
    ++tally->mismatches;
    if (tally->first_mismatch.is_null()) {
      const size_t at = static_cast<size_t>(
          std::mismatch(a.begin(), a.begin() + std::min(a.size(), b.size()), b.begin()).first -
          a.begin());
      tally->first_mismatch =
          Json{{"kind", kind},          {"request", request},     {"reference", reference},
               {"choice", c},           {"offset", at},           {"want_bytes", a.size()},
               {"got_bytes", b.size()}, {"want", Excerpt(a, at)}, {"got", Excerpt(b, at)}};
    }
    return;  // one mismatch per comparison
  }
}

std::string NonStreamingTexts(const std::string& body, std::vector<std::string>* texts) {
  Json j = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return "the answer is not a JSON object";
  auto choices = j.find("choices");
  if (choices == j.end() || !choices->is_array()) return "the answer has no choices array";
  texts->clear();
  for (const Json& c : *choices) {
    auto text = c.find("text");
    auto index = c.find("index");
    if (text == c.end() || !text->is_string() || index == c.end() || !index->is_number_unsigned()) {
      return "a choice without a string text and an index";
    }
    const size_t i = index->get<size_t>();
    if (i >= 1 << 20) return "choice index " + std::to_string(i) + " out of range";
    if (i >= texts->size()) texts->resize(i + 1);
    (*texts)[i] = text->get<std::string>();
  }
  return "";
}

Json VerifyGreedy(const Options& o, const Target& t, const Workload& w,
                  const std::vector<RequestResult>& results) {
  VerifyTally tally;
  const std::vector<std::vector<size_t>> groups = CheckGroups(w, results, &tally);
  for (size_t g : SpreadSample(groups.size(), static_cast<size_t>(o.verify_samples))) {
    const size_t ref = groups[g].front();
    const std::string body = CompletionBody(t, o, w.requests[ref], /*stream=*/false);
    const HttpReply reply = Post(t, body);
    std::vector<std::string> texts;
    std::string error;
    if (reply.status == 0) {
      error = reply.error;
    } else if (reply.status != 200) {
      error = "HTTP " + std::to_string(reply.status) + ": " + Utf8Prefix(reply.body, 200);
    } else {
      error = NonStreamingTexts(reply.body, &texts);
    }
    if (!error.empty()) {
      ++tally.errors;
      if (tally.first_error.is_null()) tally.first_error = {{"request", ref}, {"error", error}};
      continue;
    }
    ++tally.checked;
    CompareChoices("non_streaming", ref, ref, texts, results[ref].text, &tally);
  }
  return tally.ToJson();
}

std::string ReadableVerifySummary(const Json& v) {
  char buf[512];
  std::snprintf(buf, sizeof(buf),
                "verify: %lld groups (%lld distinct texts), %lld requests compared within "
                "groups, %lld re-sent without streaming: %lld mismatches, %lld errors\n",
                static_cast<long long>(v["groups"].get<int64_t>()),
                static_cast<long long>(v["distinct_texts"].get<int64_t>()),
                static_cast<long long>(v["compared"].get<int64_t>()),
                static_cast<long long>(v["checked"].get<int64_t>()),
                static_cast<long long>(v["mismatches"].get<int64_t>()),
                static_cast<long long>(v["errors"].get<int64_t>()));
  std::string out = buf;
  if (!v["first_mismatch"].is_null())
    out += "  first mismatch: " + v["first_mismatch"].dump() + "\n";
  if (!v["first_error"].is_null()) out += "  first error: " + v["first_error"].dump() + "\n";
  return out;
}

}  // namespace banyan::bench::serve
