#include "kernels/runtime/device_clocks.h"

#include <vector>

#include "gtest/gtest.h"
#include "kernels/runtime/scripted_clocks.h"

namespace mxval {
namespace {

ScriptedClocks::Step At(int mhz, uint64_t reasons = 0, int64_t mw = 0) { return {{mhz, reasons, mw}, false}; }

TEST(ClockReasonNames, NamesKnownBitsAndKeepsUnknownOnesAsHex) {
  EXPECT_TRUE(ClockReasonNames(0).empty());
  EXPECT_TRUE(ClockReasonNames(kClockReasonIdle).empty());  // idle is never named
  EXPECT_EQ(ClockReasonNames(0x4 | 0x40), (std::vector<std::string>{"sw_power_cap", "hw_thermal"}));
  EXPECT_EQ(ClockReasonNames(0x1 | 0x8 | 0x1000), (std::vector<std::string>{"hw_slowdown", "0x1000"}));
}

TEST(SummarizeClocks, MinLowerMedianMaxReasonsAndPower) {
  const ClockSummary s = SummarizeClocks({{1980, 0x1, 300000}, {1500, 0x4, 690000}, {1755, 0, 650000}, {1980, 0, 0}});
  EXPECT_EQ(s.samples, 4);
  EXPECT_EQ(s.sm_mhz_min, 1500);
  EXPECT_EQ(s.sm_mhz_median, 1755);  // the lower middle of 1500 1755 1980 1980
  EXPECT_EQ(s.sm_mhz_max, 1980);
  EXPECT_EQ(s.reasons, 0x4u);  // idle dropped
  EXPECT_DOUBLE_EQ(s.power_w_max, 690.0);
  EXPECT_TRUE(s.Disturbed());
  EXPECT_EQ(ClockText(s), "1500-1980 MHz sw_power_cap");
}

TEST(SummarizeClocks, SteadyClockIsNotDisturbedButASlowdownReasonIs) {
  ClockSummary s = SummarizeClocks({{1980, 0x1, 0}, {1965, 0, 0}, {1980, 0, 0}});
  EXPECT_FALSE(s.Disturbed());  // 15 MHz of jitter
  EXPECT_EQ(ClockText(s), "1980 MHz");
  s = SummarizeClocks({{1980, 0x20, 0}, {1980, 0, 0}});
  EXPECT_TRUE(s.Disturbed());  // thermal slowdown set, clock not moved yet
  EXPECT_EQ(ClockText(s), "1980 MHz sw_thermal");
  EXPECT_FALSE(SummarizeClocks({}).Disturbed());
  ClockSummary none;
  none.note = "NVML not found";
  EXPECT_EQ(ClockText(none), "no clock: NVML not found");
}

// The window's first and last reads are taken in Start() and Stop(), so a
// window shorter than the poll interval still sees both ends: here the cap
// arrives after the first read.
TEST(ClockWatch, FirstAndLastReadsBoundTheWindow) {
  ScriptedClocks reader({At(1980), At(1500, 0x4, 680000)});
  ClockWatch watch(&reader, absl::Seconds(10));  // the thread never reads on its own here
  watch.Start();
  const ClockSummary s = watch.Stop();
  EXPECT_EQ(s.source, "scripted");
  EXPECT_EQ(s.samples, 2);
  EXPECT_EQ(s.sm_mhz_min, 1500);
  EXPECT_EQ(s.sm_mhz_max, 1980);
  EXPECT_EQ(s.reasons, 0x4u);
  EXPECT_TRUE(s.Disturbed());
}

TEST(ClockWatch, PollsWhileOpenAndRestartsClean) {
  ScriptedClocks reader({At(1980)});
  ClockWatch watch(&reader, absl::Microseconds(50));
  watch.Start();
  while (reader.reads() < 6) absl::SleepFor(absl::Microseconds(100));  // the thread reads on its own
  ClockSummary s = watch.Stop();
  EXPECT_GE(s.samples, 6);
  EXPECT_EQ(s.sm_mhz_median, 1980);
  watch.Start();  // a second window starts from no readings
  s = watch.Stop();
  EXPECT_GE(s.samples, 2);
  EXPECT_LT(s.samples, reader.reads());
  watch.Start();
  watch.Start();  // still open: closed and restarted, not a second thread
  EXPECT_GE(watch.Stop().samples, 2);
}

TEST(ClockWatch, FailedReadsAreLeftOutAndNamedWhenNothingWasRead) {
  ScriptedClocks partly({At(1980), {{}, true}, At(1965)});
  ClockWatch a(&partly, absl::Seconds(10));
  a.Start();
  ClockSummary s = a.Stop();
  EXPECT_EQ(s.samples, 1);  // the second read failed
  EXPECT_EQ(s.source, "scripted");

  ScriptedClocks broken({{{}, true}});
  ClockWatch b(&broken, absl::Seconds(10));
  b.Start();
  s = b.Stop();
  EXPECT_EQ(s.samples, 0);
  EXPECT_EQ(s.source, "");
  EXPECT_EQ(s.note, "scripted read failure");
  EXPECT_FALSE(s.Disturbed());
}

// Settle: a fake clock advanced by the injected sleep, so no real waiting.
struct FakeSleep {
  FakeClock clock;
  int sleeps = 0;
  std::function<void(absl::Duration)> fn() {
    return [this](absl::Duration d) {
      ++sleeps;
      clock.Advance(d);
    };
  }
};

TEST(Settle, ReturnsAtOnceWhenTheBoardIsCalm) {
  ScriptedClocks reader({At(1980, 0x1, 120000)}, 700000);
  FakeSleep fs;
  const SettleResult r = Settle(reader, absl::Seconds(3), absl::Milliseconds(10), fs.clock, fs.fn());
  EXPECT_TRUE(r.settled);
  EXPECT_EQ(r.waited_s, 0);
  EXPECT_EQ(fs.sleeps, 0);
}

TEST(Settle, WaitsForThePowerCapAndForPowerUnderHalfTheLimit) {
  // Capped twice, then uncapped but still drawing 400 of 700 W, then calm.
  ScriptedClocks reader({At(1500, 0x4, 690000), At(1600, 0x4, 650000), At(1980, 0, 400000), At(1980, 0, 300000)},
                        700000);
  FakeSleep fs;
  const SettleResult r = Settle(reader, absl::Seconds(3), absl::Milliseconds(10), fs.clock, fs.fn());
  EXPECT_TRUE(r.settled);
  EXPECT_EQ(fs.sleeps, 3);
  EXPECT_NEAR(r.waited_s, 0.03, 1e-9);
}

TEST(Settle, GivesUpAtMaxWait) {
  ScriptedClocks reader({At(1020, 0x4 | 0x20, 700000)}, 700000);
  FakeSleep fs;
  const SettleResult r = Settle(reader, absl::Milliseconds(100), absl::Milliseconds(10), fs.clock, fs.fn());
  EXPECT_FALSE(r.settled);
  EXPECT_EQ(fs.sleeps, 10);
  EXPECT_NEAR(r.waited_s, 0.1, 1e-9);
}

TEST(Settle, UnknownPowerLimitLeavesOnlyTheReasons) {
  ScriptedClocks reader({At(1980, 0x8, 900000), At(1980, 0, 900000)}, 0);
  FakeSleep fs;
  const SettleResult r = Settle(reader, absl::Seconds(1), absl::Milliseconds(10), fs.clock, fs.fn());
  EXPECT_TRUE(r.settled);
  EXPECT_EQ(fs.sleeps, 1);
}

TEST(Settle, AFailedReadEndsTheWaitUnsettled) {
  ScriptedClocks reader({{{}, true}});
  FakeSleep fs;
  EXPECT_FALSE(Settle(reader, absl::Seconds(1), absl::Milliseconds(10), fs.clock, fs.fn()).settled);
}

// The harness's window: settle, then watch until Finish(); the summary has
// the window's reads and the settle wait. No reader: no samples, the note.
TEST(SettledClockWindow, SettlesThenWatchesAndReportsBoth) {
  SettledClockWindow none(nullptr, absl::Seconds(1), absl::Milliseconds(1), "no clock reader for host devices");
  const ClockSummary n = none.Finish();
  EXPECT_EQ(n.samples, 0);
  EXPECT_EQ(n.note, "no clock reader for host devices");
  // Calm for the settle read, then capped at 1800 MHz while the window is open.
  ScriptedClocks calm({At(1980, 0, 100000), At(1800, 0x4, 650000)}, 700000);
  SettledClockWindow w(&calm, absl::Seconds(1), absl::Milliseconds(1), "unused");
  const ClockSummary c = w.Finish();
  EXPECT_GE(c.samples, 2);
  EXPECT_EQ(c.sm_mhz_min, 1800);
  EXPECT_EQ(c.reasons, 0x4u);
  EXPECT_TRUE(c.settled);
  EXPECT_LT(c.settle_s, 0.5);  // no wait: the first read was calm (the real clock still ticks)
  EXPECT_TRUE(c.Disturbed());
  EXPECT_EQ(c.source, "scripted");
  // A board that never comes off its cap: the wait gives up and says so.
  ScriptedClocks hot({At(1020, 0x4 | 0x20, 700000)}, 700000);
  SettledClockWindow h(&hot, absl::Milliseconds(5), absl::Milliseconds(1), "unused");
  const ClockSummary hs = h.Finish();
  EXPECT_FALSE(hs.settled);
  EXPECT_GE(hs.settle_s, 0.004);
  EXPECT_TRUE(hs.Disturbed());
}

// On a machine without the NVIDIA driver (CI) the reader is unavailable with
// a reason, never a crash; on a GPU node the same call finds no device at a
// bus id that does not exist.
TEST(OpenNvmlClocks, UnavailableWithAReason) {
  auto r = OpenNvmlClocks("ffff:ff:1f.7");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_FALSE(r.status().message().empty());
}

}  // namespace
}  // namespace mxval
