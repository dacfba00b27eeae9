// SpeculationGovernor: whether a decode step speculates, from what speculation has measured to
// be worth (LoopOptions::speculation_adaptive).
//
// Steps fall into size classes by their decode rows (powers of two: 1, 2-3, 4-7, ...). For each
// class and way (with candidates, without) the governor keeps moving averages of the tokens a
// step took and of its wall time, and answers with the way of more tokens per second. The first
// step of each way is not measured (it pays for CUDA graph captures and cold caches), and a later
// step counts at most twice the average time (one spike does not decide). It measures both ways
// first (2 steps each after that), then probes the slower way now and then. A probe costs one
// step at the slower rate, so the interval grows with the gap, kProbeBudget times
// (fast / slow - 1) steps (a way 3x slower: every 100 steps, about 2 % of the time), but only
// as the slower way's measurements accumulate (at most 16 x (1 + its measured steps)); it
// doubles each time the answer stays (up to 64 times) and starts over when the answer changes.
// A probe's measurement replaces the probed way's averages (stale by then), so a change of the
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
  // A decode-only step of `size_class` took `tokens` in `seconds` of wall time, with
  // candidates or without.
  void Record(int size_class, bool speculated, double tokens, double seconds);

  struct Way {
    double tokens = 0, seconds = 0;  // per step, moving averages
    int64_t seen = 0, n = 0;         // steps recorded; of them measured
    double rate() const { return seconds > 0 ? tokens / seconds : 0; }
  };
  struct Class {
    Way with, without;
    int64_t steps = 0, next_probe = kFirstProbe, probe_interval = kFirstProbe, doublings = 0;
    bool last_answer = true;
    bool probing = false;  // the last answer was a probe: its measurement replaces the averages
    bool faster() const { return with.rate() >= without.rate(); }
  };
  const Class& at(int size_class) const { return classes_[Clamp(size_class)]; }

 private:
  static int Clamp(int c) { return c < 0 ? 0 : c >= kClasses ? kClasses - 1 : c; }
  std::array<Class, kClasses> classes_{};
};

}  // namespace banyan::scheduler
