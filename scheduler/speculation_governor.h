// SpeculationGovernor: whether a decode step speculates, from what speculation has measured to
// be worth (LoopOptions::speculation_adaptive).
//
// Steps fall into size classes by their decode rows (powers of two: 1, 2-3, 4-7, ...). For each
// class the governor keeps moving averages of the tokens per second of the steps with candidates
// and of those without, and answers with the faster. It measures both ways first (2 steps each),
// then probes the slower way now and then. A probe costs one step at the slower rate, so the
// interval grows with the gap: at least 16 steps and kProbeBudget times (fast / slow - 1), so
// that probing costs at most about 2 % (a way 10x slower is probed every 450 steps); it doubles
// each time the answer stays (up to 64 times the base) and starts over when the answer changes.
// A probe's measurement replaces the probed way's average (stale by then), so a change of the
// rates (acceptance, load) turns the answer at the next probe.
//
// Not thread-safe: the engine thread owns it.
#pragma once

#include <array>
#include <cstdint>

namespace banyan::scheduler {

class SpeculationGovernor {
 public:
  static constexpr int kClasses = 32;
  static constexpr int64_t kFirstSteps = 2;
  static constexpr int64_t kFirstProbe = 16;
  static constexpr double kProbeBudget = 50;  // steps per unit of (fast / slow - 1)
  static constexpr int64_t kMaxDoublings = 6;
  static constexpr double kWeight = 0.2;  // of the newest step in the moving averages

  // The size class of a step with `rows` decode rows (rows >= 1).
  static int ClassOf(int64_t rows);

  // Whether the next step of `size_class` should speculate. Counts the step.
  bool Speculate(int size_class);
  // A decode-only step of `size_class` produced `tokens_per_second` (tokens taken over its wall
  // time), with candidates or without.
  void Record(int size_class, bool speculated, double tokens_per_second);

  struct Class {
    double with = 0, without = 0;  // tokens per second, moving averages
    int64_t with_n = 0, without_n = 0;
    int64_t steps = 0, next_probe = kFirstProbe, probe_interval = kFirstProbe, doublings = 0;
    bool last_answer = true;
    bool probing = false;  // the last answer was a probe: its measurement replaces the average
  };
  const Class& at(int size_class) const { return classes_[Clamp(size_class)]; }

 private:
  static int Clamp(int c) { return c < 0 ? 0 : c >= kClasses ? kClasses - 1 : c; }
  std::array<Class, kClasses> classes_{};
};

}  // namespace banyan::scheduler
