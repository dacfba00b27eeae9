// The clock bookkeeping of the engine loop's steps: where a step's host work begins, how it
// splits into phases up to the launch (LoopStats' decode_*_seconds), and the thread's CPU time
// and context switches over it. No decisions depend on these times except the speculation
// governor's (which reads the collected step's wall time).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>

namespace banyan::scheduler {

// The engine thread's clocks at one point (wall, CPU time, context switches).
struct ThreadClocks {
  std::chrono::steady_clock::time_point wall;
  double cpu_seconds = 0;
  int64_t context_switches = 0;
  static ThreadClocks Now();
};

// One launched step's times (see LoopStats for what each adds to).
struct StepTimes {
  std::chrono::steady_clock::time_point begin;  // its host work began (its wall time starts)
  double launch_seconds = 0;                    // begin to the launch returning
  double backend_launch_seconds = 0;            // of which in the backend's LaunchSample
  double take_seconds = 0;      // taking the step before's tokens
  double schedule_seconds = 0;  // summarising and scheduling
  double place_seconds = 0;     // placing (appends, copies, rows)
  double launch_cpu_seconds = 0;     // the thread's CPU time, begin to the launch returning
  int64_t launch_context_switches = 0;
  double device_before = 0;  // the backend's device seconds at the launch
};

// Marks the phases of one step's host work, from the cycle's start (the previous step's tokens,
// or the Step call) to the launch returning.
class LaunchClock {
 public:
  // `cycle`: where the step's host work began. Schedule begins now.
  explicit LaunchClock(const ThreadClocks& cycle);
  // Summary and policy are done: placing begins.
  void Placing();
  // A fed step that took the step before's tokens after all (at `collected`): it counts from
  // them, as a step that waited for them does; its host work before that counts as placing.
  void Waited(const ThreadClocks& collected);
  std::chrono::steady_clock::time_point cycle_start() const { return cycle_.wall; }

  // Just before the launch: the phases so far, and the device's seconds as of now.
  StepTimes BeforeLaunch(double device_seconds) const;
  // Just after it (`launched`): the launch's totals. A fed step's host work ran beside the
  // device (it did not wait for it), so its phases are all zero.
  static void Launched(const ThreadClocks& launched, const ThreadClocks& from, bool fed,
                       double forward_seconds, StepTimes* times);
  // The clocks the launch's CPU time and context switches count from.
  const ThreadClocks& from() const { return waited_ ? *waited_ : cycle_; }

 private:
  ThreadClocks cycle_;
  std::chrono::steady_clock::time_point schedule_;
  std::chrono::steady_clock::time_point place_;
  std::optional<ThreadClocks> waited_;
};

inline double Seconds(std::chrono::steady_clock::time_point a,
                      std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace banyan::scheduler
