#include "agent/ops/health.h"

#include <cstdio>

namespace oomsnap {

HealthVerdict AgentHealth::live(uint64_t now) const {
  const uint64_t beat = heartbeat_ns_.load(std::memory_order_relaxed);
  if (!beat) return {false, "event loop not started"};
  if (now > beat && now - beat > kMaxHeartbeatAgeNs) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "event loop stalled: last turn %.1f s ago", static_cast<double>(now - beat) / 1e9);
    return {false, buf};
  }
  if (!bpf_attached_.load(std::memory_order_relaxed)) return {false, "BPF programs not attached"};
  return {true, "ok"};
}

HealthVerdict AgentHealth::ready() const {
  if (!ready_.load(std::memory_order_relaxed)) return {false, "not ready: the first cgroup scan is not done"};
  return {true, "ok"};
}

}  // namespace oomsnap
