#include "scheduler/loop/step_timing.h"

#include <sys/resource.h>
#include <time.h>

namespace banyan::scheduler {

using Clock = std::chrono::steady_clock;

ThreadClocks ThreadClocks::Now() {
  ThreadClocks c;
  c.wall = Clock::now();
  timespec ts{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) == 0) {
    c.cpu_seconds = static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
  }
  rusage ru{};
  if (getrusage(RUSAGE_THREAD, &ru) == 0) c.context_switches = ru.ru_nvcsw + ru.ru_nivcsw;
  return c;
}

LaunchClock::LaunchClock(const ThreadClocks& cycle)
    : cycle_(cycle), schedule_(Clock::now()), place_(schedule_) {}

void LaunchClock::Placing() { place_ = Clock::now(); }

void LaunchClock::Waited(const ThreadClocks& collected) { waited_ = collected; }

StepTimes LaunchClock::BeforeLaunch(double device_seconds) const {
  StepTimes t;
  const Clock::time_point now = Clock::now();
  t.begin = waited_ ? waited_->wall : cycle_.wall;
  t.take_seconds = waited_ ? 0 : Seconds(cycle_.wall, schedule_);
  t.schedule_seconds = waited_ ? 0 : Seconds(schedule_, place_);
  t.place_seconds = Seconds(waited_ ? waited_->wall : place_, now);
  t.device_before = device_seconds;
  return t;
}

void LaunchClock::Launched(const ThreadClocks& launched, const ThreadClocks& from, bool fed,
                           double forward_seconds, StepTimes* t) {
  if (fed) {
    t->take_seconds = t->schedule_seconds = t->place_seconds = 0;
    t->launch_seconds = t->launch_cpu_seconds = t->backend_launch_seconds = 0;
    t->launch_context_switches = 0;
    return;
  }
  t->launch_seconds = Seconds(t->begin, launched.wall);
  t->launch_cpu_seconds = launched.cpu_seconds - from.cpu_seconds;
  t->launch_context_switches = launched.context_switches - from.context_switches;
  t->backend_launch_seconds = forward_seconds;  // Collect adds its wait later
}

}  // namespace banyan::scheduler
