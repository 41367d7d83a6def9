// How fast a container's memory usage grows, from the usage figures the
// policy sees anyway (at each trigger and at each re-check), so that
// candidates can be ranked by how soon they reach their limit and not only
// by how close they are now (issue #28 item 6: thirty containers parked at
// 99 % must not starve a leak rising through 92 %).
//
// The rate is the Theil-Sen slope (the median of the slopes between pairs
// of samples): one outlier, or noise either way, does not move it the way it
// moves a least-squares fit or a first-to-last difference. Pairs closer than
// kTrendMinPairSpan apart are left out, since sub-second jitter would read
// as enormous rates; so a rate needs samples at least that far apart.
#pragma once
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

namespace oomsnap {

using MonoNs = uint64_t;

constexpr MonoNs kTrendWindow = 120'000'000'000ull;      // samples older than this are forgotten
constexpr MonoNs kTrendMinPairSpan = 1'000'000'000ull;   // pairs closer than this give no slope
constexpr MonoNs kTrendMinSpacing = 500'000'000ull;      // a sample closer to the newest is not kept
constexpr size_t kTrendMaxSamples = 16;                  // bounds memory and the pair count
// Growth under this share of the limit per minute is noise: the container is steady.
constexpr double kTrendMinGrowthPerMinute = 0.01;

enum class GrowthKind {
  kGrowing,  // rising at least kTrendMinGrowthPerMinute of its limit a minute
  kUnknown,  // too few samples, or too close together, to say
  kSteady,   // static or shrinking: it is not heading for its limit
};
const char* to_string(GrowthKind k);

// A usage figure at a time.
struct UsageSample {
  MonoNs at;
  uint64_t usage;
};

// The median of the slopes (bytes a second) between every pair of points
// at least `min_span` apart (Theil-Sen); nullopt when no pair is.
std::optional<double> median_pair_slope(const std::vector<UsageSample>& points, MonoNs min_span);

struct Growth {
  GrowthKind kind = GrowthKind::kUnknown;
  double bytes_per_second = 0;  // the estimated rate (known unless kUnknown)
  // Seconds until usage reaches the limit at that rate; infinity unless kGrowing.
  double seconds_to_limit = std::numeric_limits<double>::infinity();
};

class UsageTrend {
 public:
  // A usage figure read at `now`. Samples arrive in time order; an older one is ignored.
  void add(MonoNs now, uint64_t usage_bytes);
  // The growth at `now` of a container with this limit and current usage
  // (the current figure counts as a sample too).
  Growth growth(MonoNs now, uint64_t usage_bytes, uint64_t limit_bytes) const;
  // True when every sample is older than the window (the entry can go).
  bool stale(MonoNs now) const;
  size_t size() const { return samples_.size(); }

 private:
  using Sample = UsageSample;
  void expire(MonoNs now);
  void thin();
  std::optional<double> slope_per_second(MonoNs now, Sample current) const;

  std::vector<Sample> samples_;  // oldest first
};

}  // namespace oomsnap
