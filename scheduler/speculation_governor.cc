#include "scheduler/speculation_governor.h"

#include <algorithm>
#include <bit>

#include "spdlog/spdlog.h"

namespace banyan::scheduler {

int SpeculationGovernor::ClassOf(int64_t rows) {
  return Clamp(static_cast<int>(std::bit_width(static_cast<uint64_t>(std::max<int64_t>(rows, 1)))) - 1);
}

double SpeculationGovernor::Advantage(const Class& c) const {
  const bool measured = c.with.n >= kMeasuredSteps && c.without.n >= kMeasuredSteps;
  if (!c.profiled()) {
    const double without = c.without.rate();
    return without > 0 ? c.with.rate() / without : measured ? 1e6 : 1;
  }
  // Tokens per row with candidates (a plain step makes one per row) over the time ratio.
  const double tokens = c.with.n >= kMeasuredSteps && c.with.rows > 0 ? c.with.tokens / c.with.rows
                        : accept_n_ >= kMeasuredSteps                 ? tokens_per_row_
                                                                      : prior_tokens_per_row_;
  double ratio = c.profile_with / c.profile_without;
  if (measured && c.with.rows > 0 && c.without.rows > 0 && c.without.seconds > 0) {
    ratio = (c.with.seconds / c.with.rows) / (c.without.seconds / c.without.rows);
  }
  return ratio > 0 ? tokens / ratio : 1e6;
}

bool SpeculationGovernor::Faster(const Class& c) const {
  return c.profiled() ? Advantage(c) > kMargin : c.with.rate() >= c.without.rate();
}

int64_t SpeculationGovernor::ProbeBase(const Class& c, bool faster) const {
  const double adv = std::max(Advantage(c), 1e-6);
  const double gap = faster ? adv - 1 : 1 / adv - 1;
  const int64_t burst = kSettleSteps + kMeasuredSteps;
  // Unprofiled, the slower way's few measurements may be wrong: probe it again soon.
  const Way& slow = faster ? c.without : c.with;
  const int64_t cap = c.profiled() ? int64_t{1} << 20 : kFirstProbe * (1 + slow.n);
  const bool measured = c.with.n >= kMeasuredSteps && c.without.n >= kMeasuredSteps;
  const int64_t floor = c.profiled() && measured ? kProfiledReprobe : kFirstProbe;
  return std::clamp<int64_t>(
      static_cast<int64_t>(std::min(kProbeBudget * std::max(gap, 0.0) * static_cast<double>(burst), 1e6)),
      floor, std::max(cap, floor));
}

bool SpeculationGovernor::Speculate(int size_class) {
  Class& c = classes_[Clamp(size_class)];
  ++c.steps;
  if (c.burst_left > 0) {
    --c.burst_left;
    return c.burst_way;
  }
  if (!c.profiled()) {
    // The first measurements: a run of each way long enough to settle and be measured.
    if (c.with.n < kMeasuredSteps) return true;
    if (c.without.n < kMeasuredSteps) return false;
  }
  const bool faster = Faster(c);
  if (c.verdict_pending) {
    c.verdict_pending = false;
    if (faster != c.last_answer) return Confirm(c);
  }
  if (c.steps >= c.next_probe) {
    c.doublings = faster == c.last_answer ? std::min(c.doublings + 1, kMaxDoublings) : 0;
    c.probe_interval = ProbeBase(c, faster) << c.doublings;
    // A probe is rare (at least 16 steps apart, usually hundreds): its trace says why each way ran.
    spdlog::debug(
        "speculation governor: class {} step {}: {} (advantage {:.3f}; with {} measured, {:.0f} "
        "tok/s; without {} measured, {:.0f} tok/s), probing the other way, next probe in {} steps",
        size_class, c.steps, faster ? "speculate" : "plain", Advantage(c), c.with.n, c.with.rate(),
        c.without.n, c.without.rate(), c.probe_interval);
    c.last_answer = faster;
    c.next_probe = c.steps + c.probe_interval;
    c.burst_way = !faster;
    c.burst_left = kSettleSteps + kMeasuredSteps - 1;
    c.fresh = true;
    c.verdict_pending = true;
    return !faster;
  }
  return faster;
}

bool SpeculationGovernor::Confirm(Class& c) {
  spdlog::debug("speculation governor: step {}: the probe says switch; measuring the way that ran "
                "({}) again first", c.steps, c.last_answer ? "speculate" : "plain");
  c.burst_way = c.last_answer;
  c.burst_left = kSettleSteps + kMeasuredSteps - 1;
  c.fresh = true;
  return c.burst_way;
}

bool SpeculationGovernor::MaySpeculate(int size_class) const {
  const Class& c = classes_[Clamp(size_class)];
  if (c.burst_left > 0) return c.burst_way;
  if (!c.profiled()) {
    if (c.with.n < kMeasuredSteps) return true;
    if (c.without.n < kMeasuredSteps) return false;
  }
  const bool faster = Faster(c);
  if (c.verdict_pending && faster != c.last_answer) return c.last_answer;
  return c.steps + 1 >= c.next_probe ? !faster : faster;
}

void SpeculationGovernor::SetProfile(int size_class, double seconds_with, double seconds_without) {
  if (seconds_with <= 0 || seconds_without <= 0) return;
  Class& c = classes_[Clamp(size_class)];
  c.profile_with = seconds_with;
  c.profile_without = seconds_without;
  // The first probe of the slower way, priced by the predicted gap.
  const bool faster = Faster(c);
  c.last_answer = faster;
  c.doublings = 0;
  c.probe_interval = ProbeBase(c, faster);
  c.next_probe = c.steps + c.probe_interval;
}

void SpeculationGovernor::Record(int size_class, bool speculated, double rows, double tokens,
                                 double seconds) {
  Class& c = classes_[Clamp(size_class)];
  Way& w = speculated ? c.with : c.without;
  ++w.seen;
  c.run_length = speculated == c.run_way ? c.run_length + 1 : 1;
  c.run_way = speculated;
  if (c.run_length <= kSettleSteps || seconds <= 0) return;  // settling after a switch
  const bool probe = c.fresh && speculated == c.burst_way;
  if (w.n == 0 || probe) {
    w.tokens = tokens;
    w.seconds = seconds;
    w.rows = rows;
    c.fresh = false;
  } else {
    w.tokens = (1 - kWeight) * w.tokens + kWeight * tokens;
    w.seconds = (1 - kWeight) * w.seconds + kWeight * std::min(seconds, 2 * w.seconds);
    w.rows = (1 - kWeight) * w.rows + kWeight * rows;
  }
  ++w.n;
  if (speculated && rows > 0) {
    tokens_per_row_ = accept_n_ == 0 ? tokens / rows
                                     : (1 - kWeight) * tokens_per_row_ + kWeight * tokens / rows;
    ++accept_n_;
  }
}

}  // namespace banyan::scheduler
