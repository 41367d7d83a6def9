#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "capture/capture.h"
#include "core/snapshot.h"

using namespace oomsnap;

TEST(SnapshotJson, ShapeAndReasonRules) {
  Snapshot s;
  s.runtime_version = "go1.26.10";
  s.set_status(SnapshotStatus::kComplete, "");
  s.sample_rate = 524288;
  s.entries.push_back({"allocation_site", "main.b", 100, 4, {"main.b", "main.main"}, {}});
  s.entries.push_back({"allocation_site", "main.a", 300, 3, {"main.a"}, {}});
  s.entries.push_back({"allocation_site", "main.c", 10, 1, {"main.c"}, {}});
  s.sort_and_truncate(2);
  auto j = to_json(s);
  EXPECT_EQ(j["status"], "complete");
  EXPECT_FALSE(j.contains("reason"));
  EXPECT_TRUE(j["output_truncated"].get<bool>());
  ASSERT_EQ(j["entries"].size(), 2u);
  EXPECT_EQ(j["entries"][0]["name"], "main.a");
  EXPECT_EQ(j["entries"][0]["average_bytes"], 100);
  EXPECT_EQ(j["entries"][1]["stack"][1], "main.main");
  EXPECT_EQ(j["sample_rate"], 524288);

  Snapshot u;
  u.set_status(SnapshotStatus::kUnavailable, "sampling disabled");
  auto ju = to_json(u);
  EXPECT_EQ(ju["status"], "unavailable");
  EXPECT_EQ(ju["reason"], "sampling disabled");
  EXPECT_FALSE(ju.contains("sample_rate"));
}

TEST(SnapshotJson, RecordOmitsUnreadableMemoryFields) {
  CaptureRecord r;
  r.identity = {42, 777, "x"};
  r.process_memory.status = "ok";
  r.process_memory.rss_bytes = 4096;
  auto j = to_json(r);
  EXPECT_EQ(j["pid"], 42);
  EXPECT_EQ(j["start_time_ticks"], 777);
  EXPECT_EQ(j["process_memory"]["rss_bytes"], 4096);
  EXPECT_FALSE(j["process_memory"].contains("swap_bytes"));
  EXPECT_EQ(j["language"], "unknown");
}
