// SpeculationGovernor: whether a decode step speculates, from what speculation has measured to
// be worth (LoopOptions::speculation_adaptive).
//
// Steps fall into size classes by their decode rows (powers of two: 1, 2-3, 4-7, ...). For each
// class and way (with candidates, without) the governor keeps moving averages of the tokens a
// step took and of its wall time, and answers with the way of more tokens per second.
//
// Settling. The first kSettleSteps steps after a switch of ways are not measured: a new step
// shape runs eagerly until CUDA graphs have seen it twice in a row and is captured on the
// second, and caches are cold. So every visit to a way is a run of at least kSettleSteps + kMeasuredSteps steps: the
// first measurements of each way, and each probe. (Measuring single steps once kept speculation
// off for good on the H200: a lone speculative step never got its graph and always looked slow.)
// A measured step counts at most twice the average time, so one spike does not decide.
//
// Probing. After both ways are measured the governor runs the slower way now and then. A probe
// costs its steps at the slower rate, so the interval grows with the gap, kProbeBudget times
// (fast / slow - 1) steps per probe step (a way 3x slower: about 2 % of the time in probes), but
// only as the slower way's measurements accumulate (at most 16 x (1 + its measured steps)); it
// doubles each time the answer stays (up to 64 times) and starts over when the answer changes. A
// probe's first measurement replaces the probed way's averages (stale by then), so a change of
// the rates (acceptance, load) turns the answer at the next probe.
//
// Not thread-safe: the engine thread owns it.
#pragma once

#include <array>
#include <cstdint>

namespace banyan::scheduler {

class SpeculationGovernor {
 public:
  static constexpr int kClasses = 32;
  static constexpr int64_t kSettleSteps = 3;
  static constexpr int64_t kMeasuredSteps = 3;
  static constexpr int64_t kFirstProbe = 16;
  static constexpr double kProbeBudget = 50;  // steps per unit of (fast / slow - 1)
  static constexpr int64_t kMaxDoublings = 6;
  static constexpr double kWeight = 0.2;  // of the newest step in the moving averages

  // The size class of a step with `rows` decode rows (rows >= 1).
  static int ClassOf(int64_t rows);

  // Whether the next step of `size_class` should speculate. Counts the step.
  bool Speculate(int size_class);
  // What Speculate would answer for the next step of `size_class`, without counting it (the
  // loop copies hidden states for the draft heads only when a step may speculate).
  bool MaySpeculate(int size_class) const;
  // A step of `size_class` took `tokens` in `seconds` of wall time (for a step that also
  // prefilled, the engine loop passes its decode rows' share of the time), with
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
    int64_t burst_left = 0;  // more steps of the current visit to a way
    bool burst_way = true;
    bool fresh = false;      // the next measurement of the probed way replaces its averages
    bool run_way = true;     // the way of the last recorded steps, and how many in a row
    int64_t run_length = 0;
    bool faster() const { return with.rate() >= without.rate(); }
  };
  const Class& at(int size_class) const { return classes_[Clamp(size_class)]; }

 private:
  static int Clamp(int c) { return c < 0 ? 0 : c >= kClasses ? kClasses - 1 : c; }
  std::array<Class, kClasses> classes_{};
};

}  // namespace banyan::scheduler
