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
// Confirming. A probe compares the probed way, measured now, with the averages of the way that
// ran, measured before the probe. Rates move with the load (the KV a step reads, the rows), so
// a probe taken where every step got faster can look like a win against an older, slower
// average: on an H100 the bundled model's 1-row trees won their first probe against a plain
// average taken in an earlier load and then ran 167 measured steps with candidates at 0.8 of
// plain's rate. So when a probe says switch, the way that ran first runs one more burst whose
// measurement replaces its averages, and the answer is taken from the two fresh rates.
//
// A start-up profile (SetProfile; EngineLoop::ProfileSpeculation) makes the answer right from a
// class's first step. It gives the class the seconds of a steady step with candidates and
// without, measured on the model and device that serve. A plain step makes one token per row; a
// step with candidates makes tokens_per_row, which is the class's own measurement once it has
// one, else what any class measured (acceptance depends on the text, not on the batch), else
// SetPrior's guess. The class then speculates while tokens_per_row is more than the
// profiled time ratio, by kMargin. The first steps run that way; no bursts measure both ways
// first. Probes are priced by the predicted gap (a class whose way loses by 3x is probed
// after hundreds of steps, not after 16); once both ways are measured online, never before
// kProfiledReprobe steps.
// Online measurements of both ways replace the profile's time ratio as they come.
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
  // A profiled class whose ways have both been measured online probes again after at least
  // this many steps. A probe costs more than its steps at the slower rate: each of its two
  // switches runs steps eagerly while the new launch shape settles and captures a CUDA graph,
  // and those settling steps are left out of the rates the answer rests on. On an H100
  // (2026-12-06) the bundled model's probes at 64 rows, every ~80 steps, cost 7 % of a 128-step
  // load. The first probe keeps its gap-priced interval: the profile is one measurement and
  // can be wrong (the same 1-row step with candidates measured 0.30 and 0.42 ms in two runs),
  // and only a probe finds a gain it hides.
  static constexpr int64_t kProfiledReprobe = 1024;
  static constexpr double kProbeBudget = 50;  // steps per unit of (fast / slow - 1)
  static constexpr int64_t kMaxDoublings = 6;
  static constexpr double kWeight = 0.2;  // of the newest step in the moving averages
  // A profiled class speculates while the predicted rate with candidates is more than kMargin
  // times the rate without: near a tie, plain decoding (it needs no graphs of its own).
  static constexpr double kMargin = 1.02;

  // The size class of a step with `rows` decode rows (rows >= 1).
  static int ClassOf(int64_t rows);

  // Whether the next step of `size_class` should speculate. Counts the step.
  bool Speculate(int size_class);
  // What Speculate would answer for the next step of `size_class`, without counting it (the
  // loop copies hidden states for the draft heads only when a step may speculate).
  bool MaySpeculate(int size_class) const;
  // A step of `size_class` with `rows` decode rows took `tokens` in `seconds` of wall time (for
  // a step that also prefilled, the engine loop passes its decode rows' share of the time), with
  // candidates or without.
  void Record(int size_class, bool speculated, double rows, double tokens, double seconds);
  // The start-up profile of `size_class`: seconds of a steady step with candidates in every row
  // and of a step without (both > 0; the same rows).
  void SetProfile(int size_class, double seconds_with, double seconds_without);
  // Tokens per row a step with candidates makes, until one is measured (the profile's steps run
  // on synthetic text, so they cannot tell).
  void SetPrior(double tokens_per_row) { prior_tokens_per_row_ = tokens_per_row; }
  // Tokens per row of the steps with candidates measured in any class (0: fewer than
  // kMeasuredSteps yet, when SetPrior's guess stands).
  double tokens_per_row() const { return accept_n_ >= kMeasuredSteps ? tokens_per_row_ : 0; }

  struct Way {
    double tokens = 0, seconds = 0, rows = 0;  // per step, moving averages
    int64_t seen = 0, n = 0;         // steps recorded; of them measured
    double rate() const { return seconds > 0 ? tokens / seconds : 0; }
  };
  struct Class {
    Way with, without;
    int64_t steps = 0, next_probe = kFirstProbe, probe_interval = kFirstProbe, doublings = 0;
    bool last_answer = true;
    int64_t burst_left = 0;  // more steps of the current visit to a way
    bool burst_way = true;
    bool fresh = false;      // the next measurement of the burst's way replaces its averages
    bool verdict_pending = false;  // a probe's burst ran: its answer is still to be taken
    bool run_way = true;     // the way of the last recorded steps, and how many in a row
    int64_t run_length = 0;
    double profile_with = 0, profile_without = 0;  // SetProfile's seconds per step (0: none)
    bool profiled() const { return profile_with > 0 && profile_without > 0; }
  };
  const Class& at(int size_class) const { return classes_[Clamp(size_class)]; }
  // The rate with candidates over the rate without that the class's answer rests on: measured
  // rates, or for a profiled class the prediction above.
  double Advantage(int size_class) const { return Advantage(at(size_class)); }

 private:
  static int Clamp(int c) { return c < 0 ? 0 : c >= kClasses ? kClasses - 1 : c; }
  double Advantage(const Class& c) const;
  bool Faster(const Class& c) const;
  // Starts the burst that measures the way that ran again (see Confirming); its answer.
  bool Confirm(Class& c);
  // Steps before the next probe of the slower way: kProbeBudget x the gap's bursts, doubled
  // while the answer stays.
  int64_t ProbeBase(const Class& c, bool faster) const;
  std::array<Class, kClasses> classes_{};
  double prior_tokens_per_row_ = 1;
  double tokens_per_row_ = 0;  // moving average over every class's measured steps with candidates
  int64_t accept_n_ = 0;
};

}  // namespace banyan::scheduler
