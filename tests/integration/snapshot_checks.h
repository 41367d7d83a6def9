// Helpers for the snapshot integration tests (Go, Python, Java, Node): the
// production capture path (a sandboxed capture process), reading a
// snapshot's entries and totals, and a collection during which the target is
// killed (the "exits mid-walk" check every collector must pass).
#pragma once
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <utility>

#include "capture/capture_sandbox.h"
#include "core/collector.h"
#include "test_process.h"

namespace oomsnap_test {

// What `oomsnap snapshot` and the agent do: the capture in a sandboxed
// capture process (the oomsnap binary), its result parsed back. Every
// oracle comparison goes through it, so the sandbox (seccomp allow-list,
// capabilities, memory cap, result parser) is checked against every runtime.
inline std::optional<oomsnap::CaptureRecord> capture_sandboxed(pid_t pid, const oomsnap::CaptureOptions& o,
                                                               std::string& error) {
  oomsnap::CaptureSandbox box(oomsnap::SandboxOptions{.helper_path = OOMSNAP_BINARY, .max_budget = o.budget});
  return box.capture(pid, o, error);
}

// Every entry, with a generous deadline (the machine may be busy).
inline oomsnap::CaptureOptions all_entries() {
  oomsnap::CaptureOptions o;
  o.max_entries = 100000;
  o.budget = std::chrono::milliseconds(20000);
  return o;
}

// name -> {objects, bytes}
inline std::map<std::string, std::pair<uint64_t, uint64_t>> by_name(const oomsnap::Snapshot& s) {
  std::map<std::string, std::pair<uint64_t, uint64_t>> m;
  for (const auto& e : s.entries) m[e.name] = {e.objects, e.bytes};
  return m;
}

// A target read while it changes: complete, or partial with its reason
// (fatal otherwise; callers wrap it in ASSERT_NO_FATAL_FAILURE).
inline void expect_complete_or_partial_with_reason(const oomsnap::Snapshot& s) {
  ASSERT_TRUE(s.status == oomsnap::SnapshotStatus::kComplete || s.status == oomsnap::SnapshotStatus::kPartial)
      << oomsnap::to_string(s.status) << ": " << s.reason;
  if (s.status == oomsnap::SnapshotStatus::kPartial) {
    EXPECT_FALSE(s.reason.empty());
  }
}

// A snapshot total by key, 0 when absent.
inline uint64_t total(const oomsnap::Snapshot& s, const std::string& key) {
  for (const auto& [k, v] : s.totals)
    if (k == key) return v;
  return 0;
}

// Opens the target, detects with `c`, then collects while another thread
// kills the process `after` into the collection. The result must be partial
// or failed, and say that the target exited.
inline void expect_exit_mid_walk_reported(oomsnap::Collector& c, Process& p, std::chrono::milliseconds after,
                                          const oomsnap::CaptureOptions& opts) {
  std::string err;
  auto target = oomsnap::Target::open(p.pid(), err);
  ASSERT_TRUE(target) << err;
  ASSERT_TRUE(c.detect(*target));
  std::atomic<bool> started{false};
  std::thread killer([&] {
    while (!started) std::this_thread::yield();
    std::this_thread::sleep_for(after);
    p.kill_now();
  });
  started = true;
  auto res = c.collect(*target, opts);
  killer.join();
  const oomsnap::Snapshot& s = res.snapshot;
  ASSERT_TRUE(s.status == oomsnap::SnapshotStatus::kPartial || s.status == oomsnap::SnapshotStatus::kFailed)
      << to_string(s.status) << " after " << s.duration_ms << " ms: the kill did not land inside the walk";
  EXPECT_NE(s.reason.find("exited"), std::string::npos) << s.reason;
}

}  // namespace oomsnap_test
