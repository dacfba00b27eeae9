// The engine loop's stats stage alone (scheduler/loop/step_stats.h) and the step clock it reads
// (scheduler/loop/step_timing.h): what one collected step adds, from values given by hand.
#include "scheduler/loop/step_stats.h"

#include "gtest/gtest.h"
#include "scheduler/loop/step_timing.h"

namespace banyan::scheduler {
namespace {

InFlightStep DecodeStep() {
  InFlightStep f;
  f.fed = true;
  f.decode_rows = 3;
  f.times = {.begin = {}, .launch_seconds = 0.5, .backend_launch_seconds = 0.25,
             .take_seconds = 0.125, .schedule_seconds = 0.0625, .place_seconds = 0.03125,
             .launch_cpu_seconds = 0.4, .launch_context_switches = 2};
  return f;
}

TEST(StepStatsTest, DecodeOnlyStepCountsItsPhases) {
  LoopStats stats;
  MetricsSnapshot metrics;
  RecordStep(DecodeStep(),
             {.step_seconds = 2, .forward_seconds = 1.5, .device_seconds = 1.25, .plan_builds = 7},
             &stats, &metrics);
  EXPECT_EQ(stats.steps, 1);
  EXPECT_EQ(stats.decode_steps, 1);
  EXPECT_EQ(stats.decode_tokens, 3);
  EXPECT_EQ(stats.prefill_tokens, 0);
  EXPECT_DOUBLE_EQ(stats.host_seconds, 0.5);
  EXPECT_DOUBLE_EQ(stats.decode_seconds, 2);
  EXPECT_DOUBLE_EQ(stats.decode_device_seconds, 1.25);
  EXPECT_DOUBLE_EQ(stats.decode_launch_seconds, 0.5);
  EXPECT_DOUBLE_EQ(stats.decode_backend_launch_seconds, 0.25);
  EXPECT_DOUBLE_EQ(stats.decode_take_seconds, 0.125);
  EXPECT_DOUBLE_EQ(stats.decode_schedule_seconds, 0.0625);
  EXPECT_DOUBLE_EQ(stats.decode_place_seconds, 0.03125);
  EXPECT_DOUBLE_EQ(stats.decode_launch_cpu_seconds, 0.4);
  EXPECT_EQ(stats.decode_launch_context_switches, 2);
  EXPECT_DOUBLE_EQ(stats.prefill_seconds, 0);
  EXPECT_EQ(stats.plan_builds, 7);
  EXPECT_EQ(metrics.decode_steps_total, 1);
  EXPECT_EQ(metrics.decode_fed_steps_total, 1);
  EXPECT_EQ(metrics.decode_rows_total, 3);
  EXPECT_DOUBLE_EQ(metrics.decode_step_seconds_total, 2);
  EXPECT_DOUBLE_EQ(metrics.decode_forward_seconds_total, 1.5);
  EXPECT_DOUBLE_EQ(metrics.decode_device_seconds_total, 1.25);
  EXPECT_EQ(metrics.prefill_steps_total, 0);
  EXPECT_EQ(metrics.prefill_tokens_total, 0);
}

TEST(StepStatsTest, StepWithPrefillCountsAsPrefill) {
  InFlightStep f = DecodeStep();
  f.prefill_tokens = 40;
  LoopStats stats;
  MetricsSnapshot metrics;
  RecordStep(f, {.step_seconds = 3, .forward_seconds = 2}, &stats, &metrics);
  EXPECT_EQ(stats.steps, 1);
  EXPECT_EQ(stats.decode_steps, 0);
  EXPECT_DOUBLE_EQ(stats.prefill_seconds, 3);
  EXPECT_DOUBLE_EQ(stats.decode_launch_seconds, 0);
  EXPECT_EQ(stats.prefill_tokens, 40);
  EXPECT_EQ(stats.decode_tokens, 3);
  EXPECT_EQ(metrics.decode_steps_total, 0);
  EXPECT_EQ(metrics.prefill_steps_total, 1);
  EXPECT_EQ(metrics.prefill_tokens_total, 40);
  EXPECT_DOUBLE_EQ(metrics.prefill_step_seconds_total, 3);
}

TEST(StepStatsTest, GaugesKeepThePeakOfLiveChunks) {
  LoopStats stats;
  MetricsSnapshot metrics;
  kvcache::MemoryStats kv{.chunks_total = 10, .chunks_free = 4, .chunks_live = 5,
                          .chunks_cached = 1};
  RecordGauges(kv, 2, 3, &stats, &metrics);
  kv.chunks_live = 2;
  kv.chunks_free = 7;
  RecordGauges(kv, 1, 0, &stats, &metrics);
  EXPECT_EQ(metrics.kv_chunks_live, 2);
  EXPECT_EQ(metrics.kv_chunks_free, 7);
  EXPECT_EQ(metrics.kv_chunks_live_peak, 5);
  EXPECT_EQ(metrics.requests_running, 1);
  EXPECT_EQ(metrics.requests_waiting, 0);
  EXPECT_EQ(stats.peak.chunks_live, 5);
  EXPECT_EQ(stats.peak.chunks_free, 4) << "the whole stats of the peak step";
}

TEST(LaunchClockTest, FedStepHasNoPhasesAndAnUnfedOneCountsFromItsBeginning) {
  ThreadClocks cycle{.wall = std::chrono::steady_clock::now(), .cpu_seconds = 1,
                     .context_switches = 10};
  LaunchClock clock(cycle);
  clock.Placing();
  StepTimes t = clock.BeforeLaunch(/*device_seconds=*/4);
  EXPECT_EQ(t.begin, cycle.wall);
  EXPECT_DOUBLE_EQ(t.device_before, 4);
  EXPECT_GE(t.take_seconds, 0);
  ThreadClocks launched{.wall = cycle.wall + std::chrono::seconds(1), .cpu_seconds = 1.5,
                        .context_switches = 13};
  StepTimes unfed = t;
  LaunchClock::Launched(launched, clock.from(), /*fed=*/false, /*forward_seconds=*/0.25, &unfed);
  EXPECT_DOUBLE_EQ(unfed.launch_seconds, 1);
  EXPECT_DOUBLE_EQ(unfed.launch_cpu_seconds, 0.5);
  EXPECT_EQ(unfed.launch_context_switches, 3);
  EXPECT_DOUBLE_EQ(unfed.backend_launch_seconds, 0.25);
  StepTimes fed = t;
  LaunchClock::Launched(launched, clock.from(), /*fed=*/true, 0.25, &fed);
  EXPECT_DOUBLE_EQ(fed.launch_seconds, 0);
  EXPECT_DOUBLE_EQ(fed.take_seconds + fed.schedule_seconds + fed.place_seconds, 0);
  EXPECT_EQ(fed.begin, cycle.wall);
}

TEST(LaunchClockTest, StepThatWaitedForTheStepBeforeCountsFromItsTokens) {
  ThreadClocks cycle{.wall = std::chrono::steady_clock::now()};
  LaunchClock clock(cycle);
  clock.Placing();
  ThreadClocks collected{.wall = std::chrono::steady_clock::now(), .cpu_seconds = 2,
                         .context_switches = 5};
  clock.Waited(collected);
  const StepTimes t = clock.BeforeLaunch(0);
  EXPECT_EQ(t.begin, collected.wall);
  EXPECT_DOUBLE_EQ(t.take_seconds, 0);
  EXPECT_DOUBLE_EQ(t.schedule_seconds, 0);
  EXPECT_EQ(clock.from().context_switches, 5) << "CPU time counts from the tokens too";
}

}  // namespace
}  // namespace banyan::scheduler
