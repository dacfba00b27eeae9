#include "scheduler/speculation_governor.h"

#include <algorithm>
#include <bit>

namespace banyan::scheduler {

int SpeculationGovernor::ClassOf(int64_t rows) {
  return Clamp(static_cast<int>(std::bit_width(static_cast<uint64_t>(std::max<int64_t>(rows, 1)))) - 1);
}

bool SpeculationGovernor::Speculate(int size_class) {
  Class& c = classes_[Clamp(size_class)];
  ++c.steps;
  if (c.burst_left > 0) {
    --c.burst_left;
    return c.burst_way;
  }
  // The first measurements: a run of each way long enough to settle and be measured.
  if (c.with.n < kMeasuredSteps) return true;
  if (c.without.n < kMeasuredSteps) return false;
  const bool faster = c.faster();
  if (c.steps >= c.next_probe) {
    const Way& fast = faster ? c.with : c.without;
    const Way& slow = faster ? c.without : c.with;
    const double gap = slow.rate() > 0 ? fast.rate() / slow.rate() - 1 : 1e6;
    const int64_t burst = kSettleSteps + kMeasuredSteps;
    const int64_t cap = kFirstProbe * (1 + slow.n);
    const int64_t base = std::clamp<int64_t>(
        static_cast<int64_t>(std::min(kProbeBudget * gap * static_cast<double>(burst), 1e6)),
        kFirstProbe, std::max(cap, kFirstProbe));
    c.doublings = faster == c.last_answer ? std::min(c.doublings + 1, kMaxDoublings) : 0;
    c.probe_interval = base << c.doublings;
    c.last_answer = faster;
    c.next_probe = c.steps + c.probe_interval;
    c.burst_way = !faster;
    c.burst_left = burst - 1;
    c.fresh = true;
    return !faster;
  }
  return faster;
}

bool SpeculationGovernor::MaySpeculate(int size_class) const {
  const Class& c = classes_[Clamp(size_class)];
  if (c.burst_left > 0) return c.burst_way;
  if (c.with.n < kMeasuredSteps) return true;
  if (c.without.n < kMeasuredSteps) return false;
  return c.steps + 1 >= c.next_probe ? !c.faster() : c.faster();
}

void SpeculationGovernor::Record(int size_class, bool speculated, double tokens, double seconds) {
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
    c.fresh = false;
  } else {
    w.tokens = (1 - kWeight) * w.tokens + kWeight * tokens;
    w.seconds = (1 - kWeight) * w.seconds + kWeight * std::min(seconds, 2 * w.seconds);
  }
  ++w.n;
}

}  // namespace banyan::scheduler
