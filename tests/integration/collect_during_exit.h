// Test helper: a collection during which the target is killed, for the
// "exits mid-walk" checks every collector must pass.
#pragma once
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "core/collector.h"
#include "test_process.h"

namespace oomsnap_test {

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
