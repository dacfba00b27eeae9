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
  if (c.with.n < kFirstSteps) return true;
  if (c.without.n < kFirstSteps) return false;
  const bool faster = c.faster();
  if (c.steps >= c.next_probe) {
    const Way& fast = faster ? c.with : c.without;
    const Way& slow = faster ? c.without : c.with;
    const double gap = slow.rate() > 0 ? fast.rate() / slow.rate() - 1 : 1e6;
    const int64_t cap = kFirstProbe * (1 + slow.n);
    const int64_t base = std::clamp<int64_t>(static_cast<int64_t>(std::min(kProbeBudget * gap, 1e6)),
                                             kFirstProbe, cap);
    c.doublings = faster == c.last_answer ? std::min(c.doublings + 1, kMaxDoublings) : 0;
    c.probe_interval = base << c.doublings;
    c.last_answer = faster;
    c.next_probe = c.steps + c.probe_interval;
    c.probing = true;
    return !faster;
  }
  return faster;
}

void SpeculationGovernor::Record(int size_class, bool speculated, double tokens, double seconds) {
  Class& c = classes_[Clamp(size_class)];
  Way& w = speculated ? c.with : c.without;
  const bool probe = c.probing && speculated != c.faster();
  c.probing = false;
  if (++w.seen == 1 || seconds <= 0) return;  // the warm-up step
  if (w.n == 0 || probe) {
    w.tokens = tokens;
    w.seconds = seconds;
  } else {
    w.tokens = (1 - kWeight) * w.tokens + kWeight * tokens;
    w.seconds = (1 - kWeight) * w.seconds + kWeight * std::min(seconds, 2 * w.seconds);
  }
  ++w.n;
}

}  // namespace banyan::scheduler
