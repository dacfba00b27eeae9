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
  if (c.with_n < kFirstSteps) return true;
  if (c.without_n < kFirstSteps) return false;
  const bool faster = c.with >= c.without;
  if (c.steps >= c.next_probe) {
    const double fast = std::max(c.with, c.without), slow = std::min(c.with, c.without);
    const double gap = slow > 0 ? fast / slow - 1 : 1e6;
    const int64_t base = std::max<int64_t>(
        kFirstProbe, static_cast<int64_t>(std::min(kProbeBudget * gap, 1e6)));
    c.doublings = faster == c.last_answer ? std::min(c.doublings + 1, kMaxDoublings) : 0;
    c.probe_interval = base << c.doublings;
    c.last_answer = faster;
    c.next_probe = c.steps + c.probe_interval;
    c.probing = true;
    return !faster;
  }
  return faster;
}

void SpeculationGovernor::Record(int size_class, bool speculated, double tokens_per_second) {
  Class& c = classes_[Clamp(size_class)];
  double& rate = speculated ? c.with : c.without;
  int64_t& n = speculated ? c.with_n : c.without_n;
  const bool fresh = n == 0 || (c.probing && speculated != (c.with >= c.without));
  rate = fresh ? tokens_per_second : (1 - kWeight) * rate + kWeight * tokens_per_second;
  c.probing = false;
  ++n;
}

}  // namespace banyan::scheduler
