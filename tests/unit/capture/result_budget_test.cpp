// The capture process cuts its result to what a record can hold: a hostile
// target's names and stacks are shortened, lists give way least important
// first, the encoded result fits the cap, and the snapshot says what was cut.
// An ordinary result passes untouched.
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "capture/capture_wire.h"
#include "capture/result_budget.h"

using namespace oomsnap;

namespace {

CaptureRecord go_record() {
  CaptureRecord r;
  r.identity.pid = 4242;
  r.result.language = "go";
  r.result.snapshot.set_status(SnapshotStatus::kComplete, "");
  return r;
}

SnapshotEntry site(const std::string& name, size_t frames, uint64_t bytes) {
  SnapshotEntry e{"allocation_site", name, bytes, 1, {}, std::nullopt};
  for (size_t i = 0; i < frames; ++i) e.stack.push_back(name);
  return e;
}

// What the child would write: the frame's JSON as encode_reply makes it.
size_t encoded_size(const CaptureRecord& r) {
  CaptureReply reply;
  reply.record = r;
  return encode_reply(reply).size();
}

bool mentions(const std::string& text, const std::string& what) { return text.find(what) != std::string::npos; }

}  // namespace

TEST(ResultBudget, AnOrdinaryResultIsUntouched) {
  CaptureRecord r = go_record();
  for (int i = 0; i < 10; ++i) r.result.snapshot.entries.push_back(site("main.leak" + std::to_string(i), 12, 1000 - i));
  r.result.snapshot.goroutines.emplace();
  r.result.snapshot.goroutines->status = SnapshotStatus::kComplete;
  r.result.snapshot.goroutines->groups.push_back({3, "waiting", "chan receive", {"runtime.gopark", "main.worker"}, "main.main", "main.worker"});
  const CaptureRecord before = r;
  EXPECT_EQ(fit_result_budget(r, ResultBudget{}), "");
  EXPECT_EQ(to_json(r), to_json(before));
  EXPECT_FALSE(r.result.snapshot.output_truncated);
}

// The deep-names target's shape: 4 KiB names, 1,000 frames per stack.
TEST(ResultBudget, LongNamesAndDeepStacksAreCutAndCounted) {
  CaptureRecord r = go_record();
  const std::string name(4096, 'A');
  for (int i = 0; i < 3; ++i) r.result.snapshot.entries.push_back(site(name + std::to_string(i), 1000, 100 - i));
  ResultBudget b;
  const std::string said = fit_result_budget(r, b);
  const Snapshot& s = r.result.snapshot;
  ASSERT_EQ(s.entries.size(), 3u);  // none dropped: the cut ones fit
  for (const auto& e : s.entries) {
    EXPECT_EQ(e.name.size(), b.max_name_bytes + 3) << "cut, with '...'";
    EXPECT_EQ(e.name.substr(b.max_name_bytes), "...");
    ASSERT_FALSE(e.stack.empty());
    size_t stack_bytes = 0;
    for (const auto& f : e.stack) stack_bytes += f.size();
    EXPECT_LE(stack_bytes, b.max_stack_bytes);
    EXPECT_EQ(e.stack.front().size(), b.max_name_bytes + 3);  // the leaf kept
  }
  EXPECT_TRUE(s.output_truncated);
  EXPECT_EQ(s.status, SnapshotStatus::kComplete) << "what was read is whole; only the output is cut";
  EXPECT_EQ(s.reason, said);
  EXPECT_TRUE(mentions(said, "3003 names cut to 1024 bytes")) << said;  // 3 names + 3,000 frames
  EXPECT_TRUE(mentions(said, "3 stacks cut to 32 KiB")) << said;
}

TEST(ResultBudget, TheEncodedResultFitsAndListsGiveWayLeastImportantFirst) {
  CaptureRecord r = go_record();
  Snapshot& s = r.result.snapshot;
  for (int i = 0; i < 2000; ++i) s.entries.push_back(site("main.entry" + std::to_string(i) + std::string(900, 'e'), 5, 1'000'000 - i));
  s.recent.emplace();
  for (int i = 0; i < 500; ++i) s.recent->entries.push_back(site("main.recent" + std::to_string(i), 30, 500 - i));
  s.goroutines.emplace();
  s.goroutines->status = SnapshotStatus::kComplete;
  for (int i = 0; i < 100; ++i) s.goroutines->groups.push_back({100u - i, "waiting", "select", {"main.g"}, "main.main", "main.g"});
  ASSERT_GT(encoded_size(r), 8u << 20);
  ResultBudget b;
  b.max_bytes = 2 << 20;
  const std::string said = fit_result_budget(r, b);
  EXPECT_LE(encoded_size(r), b.max_bytes);
  // The entries keep the room they fit in, sorted order kept (largest first).
  ASSERT_FALSE(s.entries.empty());
  EXPECT_LT(s.entries.size(), 2000u);
  EXPECT_EQ(s.entries.front().bytes, 1'000'000u);
  EXPECT_TRUE(mentions(said, std::to_string(s.entries.size()) + " of 2000 entries kept")) << said;
  // The goroutine groups (small) take what the entries left, and the recent
  // allocations, last in line, get nothing; each says so.
  EXPECT_LT(s.goroutines->groups.size(), 100u);
  EXPECT_TRUE(s.goroutines->groups_truncated);
  EXPECT_TRUE(mentions(s.goroutines->reason, std::to_string(s.goroutines->groups.size()) + " of 100 goroutine groups kept"))
      << s.goroutines->reason;
  EXPECT_TRUE(s.recent->entries.empty());
  EXPECT_TRUE(mentions(said, "0 of 500 recent entries kept")) << said;
  EXPECT_TRUE(mentions(said, "the 2048 KiB result cap")) << said;
}

// Escapes are counted at their widest: names of control bytes and invalid
// UTF-8 (6 and 3 bytes each when encoded) still fit.
TEST(ResultBudget, EscapedAndInvalidBytesStillFit) {
  CaptureRecord r = go_record();
  for (int i = 0; i < 1000; ++i) {
    std::string name(500, '\x01');
    name += std::string(500, '\xff') + std::to_string(i);
    r.result.snapshot.entries.push_back(site(name, 4, 1000 - i));
  }
  ResultBudget b;
  b.max_bytes = 1 << 20;
  fit_result_budget(r, b);
  EXPECT_LE(encoded_size(r), b.max_bytes);
  EXPECT_FALSE(r.result.snapshot.entries.empty());
}

TEST(ResultBudget, ContentionProfilesAreCutAndSaySo) {
  CaptureRecord r = go_record();
  r.result.snapshot.block.emplace();
  r.result.snapshot.block->status = SnapshotStatus::kComplete;
  r.result.snapshot.block->entries.push_back({std::string(5000, 'b'), std::vector<std::string>(4000, "main.wait"), 1, 1});
  fit_result_budget(r, ResultBudget{});
  const ContentionProfile& p = *r.result.snapshot.block;
  EXPECT_TRUE(p.output_truncated);
  EXPECT_TRUE(mentions(p.reason, "1 stacks cut to 32 KiB")) << p.reason;
  EXPECT_EQ(p.entries.front().name.size(), 1024u + 3);
}

// The pprof profiles travel in the same frame: the JSON gets what they leave.
TEST(ResultBudget, ProfilesLeaveTheRestForTheJson) {
  CaptureRecord r = go_record();
  r.result.pprof = std::string(1 << 20, 'p');
  r.result.recent_pprof = std::string(512 << 10, 'r');
  EXPECT_EQ(result_budget_for(r, 4 << 20).max_bytes, (4u << 20) - (1u << 20) - (512u << 10));
  r.result.pprof = std::string(5 << 20, 'p');
  EXPECT_EQ(result_budget_for(r, 4 << 20).max_bytes, 0u);
}
