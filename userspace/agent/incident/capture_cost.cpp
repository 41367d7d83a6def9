#include "agent/incident/capture_cost.h"

#include <algorithm>
#include <cmath>

namespace oomsnap {

double default_capture_seconds(uint64_t usage_bytes) {
  const double gib = static_cast<double>(usage_bytes) / (1024.0 * 1024 * 1024);
  return std::min(kMaxCaptureSeconds, kDefaultCaptureBaseSeconds + kDefaultCaptureSecondsPerGiB * gib);
}

void CaptureCost::learn(const std::string& memcg, double seconds, uint64_t usage_bytes) {
  if (!std::isfinite(seconds) || seconds < 0) return;
  learned_[memcg] = {std::clamp(seconds, kMinCaptureSeconds, kMaxCaptureSeconds), usage_bytes};
}

double CaptureCost::expected_seconds(const std::string& memcg, uint64_t usage_bytes) const {
  auto it = learned_.find(memcg);
  if (it == learned_.end()) return default_capture_seconds(usage_bytes);
  const Learned& l = it->second;
  // A heap walk grows with the heap: a container bigger now than at its last
  // collection is expected to take longer in proportion (never shorter).
  const double scale = l.usage && usage_bytes > l.usage ? static_cast<double>(usage_bytes) / static_cast<double>(l.usage) : 1.0;
  return std::min(kMaxCaptureSeconds, l.seconds * scale);
}

}  // namespace oomsnap
