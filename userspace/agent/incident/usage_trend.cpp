#include "agent/incident/usage_trend.h"

#include <algorithm>

namespace oomsnap {

const char* to_string(GrowthKind k) {
  switch (k) {
    case GrowthKind::kGrowing: return "growing";
    case GrowthKind::kUnknown: return "unknown";
    case GrowthKind::kSteady: return "steady";
  }
  return "?";
}

std::optional<double> median_pair_slope(const std::vector<UsageSample>& points, MonoNs min_span) {
  std::vector<double> slopes;
  for (size_t i = 0; i < points.size(); ++i) {
    for (size_t j = i + 1; j < points.size(); ++j) {
      const MonoNs dt = points[j].at - points[i].at;
      if (dt < min_span) continue;
      const double du = static_cast<double>(points[j].usage) - static_cast<double>(points[i].usage);
      slopes.push_back(du / (static_cast<double>(dt) / 1e9));
    }
  }
  if (slopes.empty()) return std::nullopt;
  const size_t mid = slopes.size() / 2;
  std::nth_element(slopes.begin(), slopes.begin() + static_cast<std::ptrdiff_t>(mid), slopes.end());
  if (slopes.size() % 2) return slopes[mid];
  const double lower = *std::max_element(slopes.begin(), slopes.begin() + static_cast<std::ptrdiff_t>(mid));
  return (lower + slopes[mid]) / 2;
}

void UsageTrend::expire(MonoNs now) {
  // The newest sample stays even when old: it is what the next one is compared with.
  size_t drop = 0;
  while (drop + 1 < samples_.size() && samples_[drop].at + kTrendWindow < now) ++drop;
  samples_.erase(samples_.begin(), samples_.begin() + static_cast<std::ptrdiff_t>(drop));
}

// A full ring loses the sample whose neighbours are closest together, not
// the oldest: a container that triggers many times a second keeps samples
// spread over the whole window rather than only its last few seconds.
void UsageTrend::thin() {
  size_t victim = 1;
  MonoNs narrowest = ~MonoNs{0};
  for (size_t i = 1; i + 1 < samples_.size(); ++i) {
    const MonoNs gap = samples_[i + 1].at - samples_[i - 1].at;
    if (gap < narrowest) {
      narrowest = gap;
      victim = i;
    }
  }
  samples_.erase(samples_.begin() + static_cast<std::ptrdiff_t>(victim));
}

void UsageTrend::add(MonoNs now, uint64_t usage_bytes) {
  if (!samples_.empty() && now < samples_.back().at + kTrendMinSpacing) return;
  expire(now);
  if (samples_.size() == kTrendMaxSamples) thin();
  samples_.push_back({now, usage_bytes});
}

bool UsageTrend::stale(MonoNs now) const {
  return samples_.empty() || samples_.back().at + kTrendWindow < now;
}

std::optional<double> UsageTrend::slope_per_second(MonoNs now, Sample current) const {
  std::vector<Sample> points;
  for (const Sample& s : samples_)
    if (s.at + kTrendWindow >= now && s.at <= now) points.push_back(s);
  // The current figure is the freshest: it stands in for a sample taken just before it.
  if (!points.empty() && now < points.back().at + kTrendMinSpacing) points.pop_back();
  points.push_back(current);

  return median_pair_slope(points, kTrendMinPairSpan);
}

Growth UsageTrend::growth(MonoNs now, uint64_t usage_bytes, uint64_t limit_bytes) const {
  Growth g;
  auto slope = slope_per_second(now, {now, usage_bytes});
  if (!slope || limit_bytes == 0) return g;
  g.bytes_per_second = *slope;
  if (*slope * 60.0 < kTrendMinGrowthPerMinute * static_cast<double>(limit_bytes)) {
    g.kind = GrowthKind::kSteady;
    return g;
  }
  g.kind = GrowthKind::kGrowing;
  const double headroom = usage_bytes >= limit_bytes ? 0.0 : static_cast<double>(limit_bytes - usage_bytes);
  g.seconds_to_limit = headroom / *slope;
  return g;
}

}  // namespace oomsnap
