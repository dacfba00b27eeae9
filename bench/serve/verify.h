// --verify-greedy: at temperature 0 a completion is a function of its request, so every stream
// of a load can be checked for the right text, not only for its timing.
//
//  (a) Completed requests that are identical in prompt ids, max_tokens and n (what decides a
//      greedy answer; `user` only narrows the prefix cache) form a group. Every member must have
//      streamed, choice by choice, exactly the text of the group's reference: its member with
//      the lowest request index.
//  (b) At most o.verify_samples groups, spread evenly over the groups in the order of their
//      references (SpreadSample), are sent again after the load has ended, one at a time, with
//      "stream": false. The answer's choices[i].text must equal the reference's streamed text
//      of choice i.
//
// A streamed text is the concatenation of its choice's `text` fields in arrival order; a choice
// that streamed nothing counts as "". Failed requests are left out: they are the run's failures
// already. A re-sent request that fails is an error, not a mismatch; either makes the bench exit
// 1. Memory: the run keeps each request's streamed text until the check, a few bytes per token
// (4,096 requests x 300 tokens: a few MB).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "bench/serve/client.h"
#include "bench/serve/options.h"
#include "bench/serve/stats.h"
#include "bench/serve/workload.h"

namespace banyan::bench::serve {

struct VerifyTally {
  int64_t groups = 0;          // distinct requests among the completed ones
  int64_t compared = 0;        // completed requests compared with their group's reference
  int64_t checked = 0;         // references re-sent without streaming and compared
  int64_t mismatches = 0;      // comparisons, of either kind, that differed
  int64_t errors = 0;          // re-sent requests that failed
  int64_t distinct_texts = 0;  // distinct reference texts (by hash): the check's power
  Json first_mismatch = nullptr;
  Json first_error = nullptr;

  Json ToJson() const;
};

// Step (a): groups the completed requests, compares every member with its group's reference
// and counts distinct reference texts. Returns the groups (request indices ascending, the
// reference first) in the order of their references.
std::vector<std::vector<size_t>> CheckGroups(const Workload& w,
                                             const std::vector<RequestResult>& results,
                                             VerifyTally* tally);

// Which of `count` groups step (b) re-sends: all when count <= k, else k indices spread evenly
// (i * count / k), ascending, so the same run always checks the same groups.
std::vector<size_t> SpreadSample(size_t count, size_t k);

// Compares two answers choice by choice; on a difference counts a mismatch and, for the first,
// records where it starts. `kind` is "group" (want: the reference's stream) or "non_streaming"
// (want: the non-streamed answer); `got` is always a streamed text.
void CompareChoices(std::string_view kind, size_t request, size_t reference,
                    const std::vector<std::string>& want, const std::vector<std::string>& got,
                    VerifyTally* tally);

// The texts per choice index of a non-streaming completions answer. Returns an empty string on
// success, else what is wrong with the body.
std::string NonStreamingTexts(const std::string& body, std::vector<std::string>* texts);

// Steps (a) and (b); the report's "verify" object. Sends requests to `t` (after the load).
Json VerifyGreedy(const Options& o, const Target& t, const Workload& w,
                  const std::vector<RequestResult>& results);

// One line for stderr.
std::string ReadableVerifySummary(const Json& verify);

}  // namespace banyan::bench::serve
