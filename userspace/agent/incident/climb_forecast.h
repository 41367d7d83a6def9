// The predictive trigger's arithmetic (issue #25 item 2): whether a
// container climbing toward its limit will reach it before a capture started
// now could finish. A fixed threshold is the wrong trigger for a fast climb
// or a slow reader: at 90 % of 1 GiB and 500 MB/s the kill comes ~200 ms
// after the crossing, less than a 1 GiB JVM's walk. So, besides the
// threshold, the agent triggers when the time left before the limit at the
// current rate falls under the expected capture time plus a margin.
//
// The rate is the median slope between pairs of recent usage samples (the
// agent's usage poll), like UsageTrend's but over a short window, since it
// must see a climb of a second or less. Two guards keep a steady container
// from firing: the usage must be at or above a floor share of the limit, and
// the newest step must still climb (a JVM that commits 100 MiB at once and
// then stays flat has a steep median for a moment, but its last step is flat).
// It fires once per climb, and again only after usage fell below the floor.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "agent/incident/usage_trend.h"

namespace oomsnap {

constexpr MonoNs kForecastWindow = 1'000'000'000ull;      // samples older than this are forgotten
constexpr MonoNs kForecastMinPairSpan = 20'000'000ull;    // closer pairs give no slope (read jitter)
constexpr size_t kForecastMaxSamples = 12;                // the oldest goes first
constexpr size_t kForecastMinSamples = 3;                 // fewer say nothing

struct ForecastOptions {
  int floor_percent = 50;                    // ForecastFloorPercent: no forecast below this share of the limit
  MonoNs margin_ns = 200'000'000ull;         // ForecastMargin: added to the expected capture time
};

struct Forecast {
  double bytes_per_second = 0;  // the climb's rate
  double seconds_to_limit = 0;  // at that rate, from the newest sample
  double needed_seconds = 0;    // the expected capture time plus the margin
};

class ClimbForecast {
 public:
  // A usage figure read at `now`; samples arrive in time order, an older one is ignored.
  void add(MonoNs now, uint64_t usage_bytes);
  // The climb's rate in bytes a second, when the samples tell one and the
  // newest step still climbs at a quarter of it or more; nullopt otherwise.
  std::optional<double> rate() const;
  // The forecast, once per climb, when the newest usage is at or above the
  // floor and the limit is due within expected_capture_seconds plus the margin.
  std::optional<Forecast> due(uint64_t limit_bytes, double expected_capture_seconds, const ForecastOptions& o);
  size_t size() const { return samples_.size(); }

 private:
  std::vector<UsageSample> samples_;  // oldest first
  bool fired_ = false;                // this climb was forecast already
};

}  // namespace oomsnap
