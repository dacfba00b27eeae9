#include "scheduler/policy.h"

#include <algorithm>
#include <unordered_map>

namespace banyan::scheduler {
namespace {

int32_t CeilDiv(int32_t a, int32_t b) { return (a + b - 1) / b; }

// Higher priority first, then earlier arrival.
bool Before(const PolicyRequest& a, const PolicyRequest& b) {
  if (a.priority != b.priority) return a.priority > b.priority;
  return a.arrival < b.arrival;
}

}  // namespace

IterationPlan Schedule(const PolicyInput& in) {
  IterationPlan plan;
  int64_t available = int64_t{in.chunks_free} + in.chunks_cached;

  // 1. Decode memory, preempting the least important running requests when short.
  std::vector<PolicyRequest> running = in.running;
  std::sort(running.begin(), running.end(), Before);
  int64_t need = 0;
  for (const PolicyRequest& r : running) need += r.decoding ? r.chunks_needed : 0;
  std::vector<bool> preempted(running.size(), false);
  // Never the last one: alone it always fits (Submit refuses requests larger than the whole
  // cache), and preempting it would only re-admit it (livelock).
  for (size_t v = running.size(); need > available && v > 1; --v) {
    const PolicyRequest& victim = running[v - 1];
    preempted[v - 1] = true;
    plan.preempt.push_back(victim.handle);
    available += victim.chunks_private;
    if (victim.decoding) need -= victim.chunks_needed;
  }

  // 2. Decode rows.
  int32_t sequences = 0;
  for (size_t i = 0; i < running.size(); ++i) {
    if (preempted[i]) continue;
    sequences += running[i].sequences;
    if (running[i].decoding) plan.decode.push_back(running[i].handle);
  }

  // 3. Continue chunked prefills.
  int64_t budget = in.prefill_token_budget;
  int64_t committed = 0;  // chunks still to come for admitted prompts
  std::unordered_map<uint64_t, int32_t> tokens_of;  // handle -> prefill tokens planned
  for (size_t i = 0; i < running.size(); ++i) {
    const PolicyRequest& r = running[i];
    if (preempted[i] || r.decoding || r.remaining_prefill <= 0) continue;
    committed += CeilDiv(r.remaining_prefill, in.chunk_size) + 1;
    if (budget <= 0) continue;
    const int32_t t = static_cast<int32_t>(std::min<int64_t>(r.remaining_prefill, budget));
    const int64_t mem = CeilDiv(t, in.chunk_size) + 1;
    if (need + mem > available) continue;
    plan.prefill.emplace_back(r.handle, t);
    tokens_of[r.handle] = t;
    budget -= t;
    need += mem;
  }

  // 4. Admission.
  if (!plan.preempt.empty()) return plan;
  std::vector<PolicyRequest> waiting = in.waiting;
  std::sort(waiting.begin(), waiting.end(), Before);
  std::vector<PolicyTenant> tenants = in.tenants;
  std::vector<bool> tenant_running(tenants.size(), false);
  for (size_t i = 0; i < running.size(); ++i) {
    const int32_t t = running[i].tenant;
    if (t >= 0 && t < static_cast<int32_t>(tenants.size())) tenant_running[t] = true;
  }
  for (const PolicyRequest& w0 : waiting) {
    PolicyRequest w = w0;
    if (w.leader != 0 && !w.resume) {
      const auto lead = tokens_of.find(w.leader);
      if (lead != tokens_of.end() && lead->second > 0) {
        if (lead->second < w.leader_tokens) continue;  // held: the leader computes it first
        w.remaining_prefill = w.led_prefill;
        w.chunks_needed = w.led_chunks;
      }
    }
    if (sequences + w.sequences > in.max_sequences && sequences > 0) break;
    if (w.tenant >= 0 && w.tenant < static_cast<int32_t>(tenants.size())) {
      PolicyTenant& tenant = tenants[w.tenant];
      if (tenant_running[w.tenant] &&
          tenant.chunks_used + w.chunks_needed > tenant.chunks_budget) {
        continue;  // held by its tenant's budget; others may still be admitted
      }
    }
    // Headroom of one chunk per running sequence for its next appends, so that admitting does
    // not immediately force a preemption (thrash). With nothing running the head request is
    // admitted whatever the estimate says: alone it fits, and waiting could not change that.
    if (need + committed + w.chunks_needed + sequences > available && sequences > 0) break;
    int32_t t;
    if (w.resume || w.remaining_prefill == 0) {
      t = w.remaining_prefill;  // recompute in one go / nothing to prefill
    } else {
      if (budget <= 0) break;
      t = static_cast<int32_t>(std::min<int64_t>(w.remaining_prefill, budget));
    }
    plan.admit.push_back(w.handle);
    plan.prefill.emplace_back(w.handle, t);
    tokens_of[w.handle] = t;
    budget -= t;
    sequences += w.sequences;
    need += w.chunks_needed;
    if (w.tenant >= 0 && w.tenant < static_cast<int32_t>(tenants.size())) {
      tenants[w.tenant].chunks_used += w.chunks_needed;
      tenant_running[w.tenant] = true;
    }
  }
  return plan;
}

int32_t AdmissionChunks(int32_t uncached_tokens, int32_t cached_chunks, int32_t samples,
                        int32_t chunk_size) {
  return CeilDiv(uncached_tokens, chunk_size) + cached_chunks + 1 + samples;
}

int32_t ResumeChunks(int32_t uncached_tokens, int32_t cached_chunks, int32_t samples,
                     int32_t chunk_size) {
  return CeilDiv(uncached_tokens, chunk_size) + cached_chunks + 2 * samples;
}

uint64_t ChooseAppendVictim(const std::vector<PolicyRequest>& candidates) {
  const PolicyRequest* victim = nullptr;
  for (const PolicyRequest& r : candidates) {
    if (victim == nullptr || Before(*victim, r)) victim = &r;
  }
  return victim == nullptr ? 0 : victim->handle;
}

}  // namespace banyan::scheduler
