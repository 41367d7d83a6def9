// What the policy's tests feed it: usage figures, triggers and options on a
// fake clock, and the names a decision collects.
#pragma once
#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "agent/incident/policy.h"

namespace oomsnap::policy_fakes {

constexpr MonoNs kMs = 1'000'000;
constexpr MonoNs kSec = 1'000'000'000;

inline MemcgStats stats(uint64_t usage, std::optional<uint64_t> limit) {
  MemcgStats s;
  s.usage_bytes = usage;
  s.limit_bytes = limit;
  return s;
}

inline Trigger trig(const char* type, MonoNs at) {
  Trigger t;
  t.type = type;
  t.kernel_ns = at;
  t.received_ns = at;
  return t;
}

inline PolicyOptions opts(int threshold = 90, std::chrono::nanoseconds interval = std::chrono::seconds(300),
                          std::chrono::nanoseconds window = std::chrono::milliseconds(200),
                          unsigned per_minute = 6) {
  PolicyOptions o;
  o.threshold_percent = threshold;
  o.interval = interval;
  o.batch_window = window;
  o.max_per_minute = per_minute;
  return o;
}

inline std::vector<std::string> names(const Decision& d) {
  std::vector<std::string> v;
  for (const auto& c : d.collect) v.push_back(c.memcg);
  return v;
}

}  // namespace oomsnap::policy_fakes
