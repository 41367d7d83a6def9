// One record stays under its size limit whatever a target put in it, and says
// what was cut.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "agent/records/record_limit.h"
#include "agent/records/sink.h"

using namespace oomsnap;
using nlohmann::json;

namespace {

json record_with_entries(size_t n, size_t frames, size_t name_len) {
  json entries = json::array();
  for (size_t i = 0; i < n; ++i) {
    json stack = json::array();
    for (size_t f = 0; f < frames; ++f) stack.push_back(std::string(name_len, 'a' + static_cast<char>(f % 26)));
    entries.push_back({{"kind", "allocation_site"}, {"name", "main.f" + std::to_string(i)}, {"bytes", 1000 - i},
                       {"objects", 1}, {"stack", stack}});
  }
  return {{"time", "2026-12-01T00:00:00.000Z"}, {"node", "n"}, {"victim_pid", 42}, {"comm", "leaker"},
          {"container", {{"cgroup_path", "/box"}, {"usage_bytes", 1}, {"limit_bytes", 2}}},
          {"tracer_data", {{"language", "go"}, {"snapshot", {{"status", "complete"}, {"output_truncated", false},
                                                             {"entries", entries}}}}}};
}

}  // namespace

TEST(RecordLimit, SmallRecordIsUnchanged) {
  const json r = record_with_entries(10, 5, 20);
  EXPECT_EQ(serialise_record(r), r.dump());
  EXPECT_EQ(record_line(r), r.dump() + "\n");
}

TEST(RecordLimit, ManyEntriesAreCutFromTheLeastImportantEnd) {
  const json r = record_with_entries(20000, 10, 40);  // ~9 MB
  ASSERT_GT(r.dump().size(), 4 * kMaxRecordBytes);
  const std::string line = record_line(r);
  EXPECT_LE(line.size(), kMaxRecordBytes + 1);
  const json out = json::parse(line);
  EXPECT_EQ(out["output_truncated"], true);
  EXPECT_NE(out["output_truncated_reason"].get<std::string>().find("snapshot entries kept"), std::string::npos);
  const json& snap = out["tracer_data"]["snapshot"];
  EXPECT_EQ(snap["output_truncated"], true);
  ASSERT_GT(snap["entries"].size(), 1000u);  // as many as fit, not a token few
  EXPECT_EQ(snap["entries"][0]["name"], "main.f0");  // the largest first
  EXPECT_EQ(out["victim_pid"], 42);
  // Most of the limit is used.
  EXPECT_GT(line.size(), kMaxRecordBytes * 9 / 10);
}

TEST(RecordLimit, HugeNamesAndDeepStacksAreClamped) {
  const json r = record_with_entries(3, 100000, 64);  // three stacks of 100k frames
  const json out = json::parse(serialise_record(r));
  const json& e = out["tracer_data"]["snapshot"]["entries"];
  ASSERT_EQ(e.size(), 3u);
  EXPECT_LE(e[0]["stack"].size(), 64u);
  json one_name = record_with_entries(1, 1, 8 << 20);  // an 8 MiB function name
  const std::string line = serialise_record(one_name);
  EXPECT_LE(line.size(), kMaxRecordBytes);
  EXPECT_EQ(json::parse(line)["tracer_data"]["snapshot"]["entries"].size(), 1u);
}

TEST(RecordLimit, HostileTextOutsideTheSnapshotIsBoundedToo) {
  json r = record_with_entries(1, 1, 10);
  r["container"]["cgroup_path"] = std::string(3 << 20, '/');
  json many = json::array();
  for (int i = 0; i < 200000; ++i) many.push_back({{"type", "memcg_pressure"}, {"kernel_ts_ns", i}});
  r["triggers_seen"] = many;
  r["comm"] = std::string("bad\xff\xfe", 5);
  const std::string line = serialise_record(r);
  EXPECT_LE(line.size(), kMaxRecordBytes);
  const json out = json::parse(line);
  EXPECT_EQ(out["output_truncated"], true);
  EXPECT_EQ(out["victim_pid"], 42);
  EXPECT_LT(out["container"]["cgroup_path"].get<std::string>().size(), 2000u);
  // And a tiny limit still yields valid JSON naming the victim.
  const json tiny = json::parse(serialise_record(r, 600));
  EXPECT_EQ(tiny["victim_pid"], 42);
  EXPECT_EQ(tiny["output_truncated"], true);
}

// With other processes' snapshots in the record, theirs are cut first: the
// victim's entries stay whole while the others' can make room.
TEST(RecordLimit, OtherProcessesEntriesGoBeforeTheVictims) {
  json r = record_with_entries(500, 4, 40);  // ~110 KB: fits on its own
  ASSERT_LT(r.dump().size(), kMaxRecordBytes / 4);
  json others = json::array();
  for (int pid : {43, 44}) {
    json other = record_with_entries(20000, 10, 40);  // ~9 MB each
    others.push_back({{"pid", pid}, {"comm", "sidecar"}, {"tracer_data", other["tracer_data"]}});
  }
  r["other_processes"] = others;
  const std::string line = record_line(r);
  EXPECT_LE(line.size(), kMaxRecordBytes + 1);
  const json out = json::parse(line);
  EXPECT_EQ(out["output_truncated"], true);
  const json& victim = out["tracer_data"]["snapshot"];
  EXPECT_EQ(victim["entries"].size(), 500u) << "the victim's entries were cut while others' could go";
  EXPECT_EQ(victim["output_truncated"], false);
  ASSERT_EQ(out["other_processes"].size(), 2u);
  const json& first = out["other_processes"][0]["tracer_data"]["snapshot"];
  const json& last = out["other_processes"][1]["tracer_data"]["snapshot"];
  EXPECT_EQ(first["output_truncated"], true);
  EXPECT_EQ(last["output_truncated"], true);
  EXPECT_GT(first["entries"].size(), 1000u) << "the first other process keeps what fits";
  EXPECT_EQ(last["entries"].size(), 0u) << "the last one is cut first";
  EXPECT_EQ(out["other_processes"][1]["pid"], 44);
}

// A Go snapshot's recent allocations (snapshot.recent.entries) are bounded the
// same way: their stacks clamped, and they give way before the in-use entries.
TEST(RecordLimit, RecentEntriesAreBoundedAndGoBeforeTheInUseOnes) {
  json r = record_with_entries(1500, 10, 40);
  json& snap = r["tracer_data"]["snapshot"];
  json recent = snap["entries"];
  for (auto& e : recent) e["name"] = "main.recent" + e["name"].get<std::string>().substr(6);
  recent[0]["stack"] = std::vector<std::string>(100000, "deep");
  snap["recent"] = {{"bytes", 1}, {"objects", 1}, {"entries", recent}};
  ASSERT_GT(r.dump().size(), kMaxRecordBytes);
  const std::string line = record_line(r);
  EXPECT_LE(line.size(), kMaxRecordBytes + 1);
  const json out = json::parse(line);
  const json& s = out["tracer_data"]["snapshot"];
  EXPECT_EQ(s["output_truncated"], true);
  EXPECT_EQ(s["entries"].size(), 1500u) << "the in-use entries stay whole while recent ones can go";
  ASSERT_TRUE(s["recent"]["entries"].is_array());
  EXPECT_LT(s["recent"]["entries"].size(), 1500u);
  if (!s["recent"]["entries"].empty()) {
    EXPECT_EQ(s["recent"]["entries"][0]["name"], "main.recent0");
    EXPECT_LE(s["recent"]["entries"][0]["stack"].size(), 64u);
  }
}

// Text from a target reaches log pipelines and UIs that show a line as it is:
// the record is printable ASCII, every other character a \u escape, and it
// reads back to the same text (invalid UTF-8 replaced).
TEST(RecordLimit, RecordsArePrintableAsciiWithEscapes) {
  const std::string hostile = std::string("\xc2\x9b") + "31m" +  // C1 CSI (U+009B)
                              "\xe2\x80\xae" + "txt.exe" +       // right-to-left override
                              "\xe2\x80\xa8\xe2\x80\xa9" +       // line and paragraph separators
                              "\x7f\x1b[2J\r\t" + "\xe5\x86\x85\xe5\xad\x98";  // DEL, ESC, CR, TAB, CJK
  json r = {{"comm", hostile}, {"container", {{"cgroup_path", "/a\x7f" "b"}}}, {"bad", "\xff\xfe"}};
  const std::string line = serialise_record(r);
  for (unsigned char c : line) EXPECT_TRUE(c >= 0x20 && c <= 0x7e) << "byte " << static_cast<int>(c) << " in " << line;
  for (const char* esc : {"\\u009b", "\\u202e", "\\u2028", "\\u2029", "\\u007f", "\\u001b", "\\r", "\\t", "\\u5185"})
    EXPECT_NE(line.find(esc), std::string::npos) << esc << " in " << line;
  const json back = json::parse(line);
  EXPECT_EQ(back["comm"], hostile);
  EXPECT_EQ(back["container"]["cgroup_path"], "/a\x7f" "b");
  EXPECT_EQ(back["bad"], "\xef\xbf\xbd\xef\xbf\xbd");  // U+FFFD twice
  EXPECT_EQ(dump_printable_json(json{{"k", "plain"}}), R"({"k":"plain"})");
}
