#include "agent/incident/climb_forecast.h"

#include <algorithm>

namespace oomsnap {

void ClimbForecast::add(MonoNs now, uint64_t usage_bytes) {
  if (!samples_.empty() && now < samples_.back().at) return;
  auto old = std::find_if(samples_.begin(), samples_.end(),
                          [now](const UsageSample& s) { return s.at + kForecastWindow >= now; });
  samples_.erase(samples_.begin(), old);
  if (samples_.size() == kForecastMaxSamples) samples_.erase(samples_.begin());
  samples_.push_back({now, usage_bytes});
}

std::optional<double> ClimbForecast::rate() const {
  if (samples_.size() < kForecastMinSamples) return std::nullopt;
  auto slope = median_pair_slope(samples_, kForecastMinPairSpan);
  if (!slope || *slope <= 0) return std::nullopt;
  // The newest step: from the newest sample back to the first one far enough away.
  const UsageSample& last = samples_.back();
  for (auto it = samples_.rbegin() + 1; it != samples_.rend(); ++it) {
    const MonoNs dt = last.at - it->at;
    if (dt < kForecastMinPairSpan) continue;
    const double step = (static_cast<double>(last.usage) - static_cast<double>(it->usage)) / (static_cast<double>(dt) / 1e9);
    if (step * 4 < *slope) return std::nullopt;
    return slope;
  }
  return std::nullopt;
}

std::optional<Forecast> ClimbForecast::due(uint64_t limit_bytes, double expected_capture_seconds,
                                           const ForecastOptions& o) {
  if (samples_.empty() || limit_bytes == 0) return std::nullopt;
  const uint64_t usage = samples_.back().usage;
  const double floor = static_cast<double>(limit_bytes) * o.floor_percent / 100.0;
  if (static_cast<double>(usage) < floor) {
    fired_ = false;  // the climb is over: the next one may be forecast
    return std::nullopt;
  }
  if (fired_) return std::nullopt;
  auto r = rate();
  if (!r) return std::nullopt;
  Forecast f;
  f.bytes_per_second = *r;
  f.seconds_to_limit = usage >= limit_bytes ? 0.0 : static_cast<double>(limit_bytes - usage) / *r;
  f.needed_seconds = std::max(0.0, expected_capture_seconds) + static_cast<double>(o.margin_ns) / 1e9;
  if (f.seconds_to_limit > f.needed_seconds) return std::nullopt;
  fired_ = true;
  return f;
}

}  // namespace oomsnap
