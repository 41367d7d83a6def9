// Liveness and readiness of the agent, as the HTTP server's thread sees
// them: the agent's loop stores into atomics (a heartbeat timer every
// second, "BPF attached", "first cgroup scan done"); the server reads them
// without ever waiting on the loop, so a stalled loop is reported, not shared.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>

namespace oomsnap {

struct HealthVerdict {
  bool ok = false;
  std::string reason;  // one line; "ok" when ok
};

class AgentHealth {
 public:
  // The loop is stalled when its heartbeat is older than this.
  static constexpr uint64_t kMaxHeartbeatAgeNs = 5'000'000'000ull;

  void beat(uint64_t mono_ns) { heartbeat_ns_.store(mono_ns, std::memory_order_relaxed); }
  void set_bpf_attached(bool v) { bpf_attached_.store(v, std::memory_order_relaxed); }
  void set_ready(bool v) { ready_.store(v, std::memory_order_relaxed); }

  // /healthz: the loop turned within kMaxHeartbeatAgeNs and BPF is attached.
  HealthVerdict live(uint64_t now_mono_ns) const;
  // /readyz: the first cgroup scan is done (the agent logged "ready:").
  HealthVerdict ready() const;

 private:
  std::atomic<uint64_t> heartbeat_ns_{0};
  std::atomic<bool> bpf_attached_{false}, ready_{false};
};

}  // namespace oomsnap
