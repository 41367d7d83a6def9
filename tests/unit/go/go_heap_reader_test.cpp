// The bucket reader against bucket lists laid out in this test's own memory
// (read back through process_vm_readv on our own pid): layout per version,
// cycle folding, and every way a hostile or changing list can go wrong.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <memory>
#include <set>
#include <thread>

#include "go/go_heap_reader.h"

using namespace oomsnap;

namespace {

// A fake persistentalloc chunk holding buckets.
struct FakeHeap {
  int minor;
  std::vector<uint64_t> chunk = std::vector<uint64_t>(1 << 16, 0);
  size_t used = 0;  // words
  uint64_t head = 0;
  int64_t rate = 1;
  uint32_t cycle = 0;

  explicit FakeHeap(int m) : minor(m) {}
  uint64_t* add(uint64_t size, std::vector<uint64_t> stack, std::vector<std::vector<uint64_t>> cycles) {
    uint64_t* b = &chunk[used];
    size_t words = go_bucket_size(minor, stack.size()) / 8;
    used += words;
    b[1] = head;  // allnext
    b[2] = 1;     // memProfile
    b[4] = size;
    b[5] = stack.size();
    for (size_t i = 0; i < stack.size(); ++i) b[6 + i] = stack[i];
    size_t rw = minor >= 27 ? 2 : 4;
    for (size_t c = 0; c < cycles.size(); ++c)
      for (size_t w = 0; w < rw && w < cycles[c].size(); ++w) b[6 + stack.size() + c * rw + w] = cycles[c][w];
    head = reinterpret_cast<uint64_t>(b);
    return b;
  }
  GoHeapAddrs addrs() {
    GoHeapAddrs a;
    a.mbuckets = reinterpret_cast<uint64_t>(&head);
    a.mem_profile_rate = reinterpret_cast<uint64_t>(&rate);
    a.mprof_cycle = reinterpret_cast<uint64_t>(&cycle);
    return a;
  }
  GoHeapReadResult read(CaptureOptions opts = {}) {
    RemoteMemory mem(getpid());
    auto maps = read_maps(getpid());
    Deadline d(opts.budget);
    return read_go_heap(mem, maps, addrs(), minor, opts, d, /*keep_stacks=*/true);
  }
};

}  // namespace

TEST(GoHeapReader, ReadsListAndFoldsActivePlusFlushedFuture) {
  FakeHeap h(26);
  h.cycle = (4 << 1);  // C = 4 → flush index 1
  // active, future0, future1, future2: {allocs, frees, alloc_bytes, free_bytes}
  h.add(64, {0x1000, 0x2000}, {{10, 2, 640, 128}, {100, 100, 0, 0}, {5, 1, 320, 64}, {7, 0, 448, 0}});
  h.add(128, {0x3000}, {{1, 0, 128, 0}});
  auto r = h.read();
  ASSERT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
  ASSERT_EQ(r.profile.buckets.size(), 2u);
  EXPECT_EQ(r.profile.mem_profile_rate, 1);
  const auto& b = r.profile.buckets[1];  // the first added is the last in the list
  EXPECT_EQ(b.size, 64u);
  auto stk = r.profile.stack(b);
  EXPECT_EQ(std::vector<uint64_t>(stk.begin(), stk.end()), (std::vector<uint64_t>{0x1000, 0x2000}));
  EXPECT_EQ(b.allocs, 15u);  // active + future[1]
  EXPECT_EQ(b.frees, 3u);
  EXPECT_EQ(b.inuse_bytes(), 640u + 320 - 128 - 64);
}

TEST(GoHeapReader, NoGcYetAddsEveryFuture) {
  // MemProfile flushes future[C%3] first; only if every bucket's active count
  // is still zero does it add the other futures too.
  FakeHeap h(22);
  h.cycle = 0;  // flush index 0, empty here
  h.add(32, {0x1000}, {{0, 0, 0, 0}, {0, 0, 0, 0}, {2, 0, 64, 0}, {3, 1, 96, 32}});
  auto r = h.read();
  ASSERT_EQ(r.profile.buckets.size(), 1u);
  EXPECT_EQ(r.profile.buckets[0].allocs, 5u);
  EXPECT_EQ(r.profile.buckets[0].frees, 1u);
  EXPECT_EQ(r.profile.buckets[0].inuse_bytes(), 128u);
  EXPECT_EQ(r.summaries[0].inuse_objects, 4u);
}

TEST(GoHeapReader, FlushedFutureMakesTheProfileNonEmpty) {
  FakeHeap h(22);
  h.cycle = 0;  // future[0] is flushed into active: not "no GC yet"
  h.add(32, {0x1000}, {{0, 0, 0, 0}, {1, 0, 32, 0}, {2, 0, 64, 0}, {3, 1, 96, 32}});
  auto r = h.read();
  ASSERT_EQ(r.profile.buckets.size(), 1u);
  EXPECT_EQ(r.profile.buckets[0].allocs, 1u);
  EXPECT_EQ(r.profile.buckets[0].frees, 0u);
}

TEST(GoHeapReader, Go127CountsOnlyBytesFromSize) {
  FakeHeap h(27);
  h.add(48, {0x1000, 0x2000, 0x3000}, {{10, 4}});
  auto r = h.read();
  ASSERT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
  ASSERT_EQ(r.profile.buckets.size(), 1u);
  EXPECT_EQ(r.profile.buckets[0].alloc_bytes, 480u);
  EXPECT_EQ(r.profile.buckets[0].inuse_bytes(), 6u * 48);
}

TEST(GoHeapReader, RateZeroIsUnavailable) {
  FakeHeap h(26);
  h.rate = 0;
  h.add(64, {0x1000}, {{1, 0, 64, 0}});
  auto r = h.read();
  EXPECT_EQ(r.status, SnapshotStatus::kUnavailable);
  EXPECT_NE(r.reason.find("sampling disabled"), std::string::npos);
}

TEST(GoHeapReader, UnreadableRateIsUnavailableNotGuessed) {
  FakeHeap h(26);
  auto a = h.addrs();
  a.mem_profile_rate = 8;  // unmapped
  RemoteMemory mem(getpid());
  auto maps = read_maps(getpid());
  Deadline d(std::chrono::milliseconds(1000));
  auto r = read_go_heap(mem, maps, a, 26, {}, d, true);
  EXPECT_EQ(r.status, SnapshotStatus::kUnavailable);
  EXPECT_EQ(r.profile.mem_profile_rate, 0);
}

TEST(GoHeapReader, CycleIsDetected) {
  FakeHeap h(26);
  uint64_t* first = h.add(64, {0x1000}, {{1, 0, 64, 0}});
  h.add(64, {0x2000}, {{1, 0, 64, 0}});
  first[1] = h.head;  // allnext of the oldest points back at the newest
  auto r = h.read();
  EXPECT_EQ(r.status, SnapshotStatus::kPartial);
  EXPECT_NE(r.reason.find("cycle"), std::string::npos);
  EXPECT_EQ(r.profile.buckets.size(), 2u);
}

TEST(GoHeapReader, CorruptPointerGivesPartialWithReason) {
  FakeHeap h(26);
  uint64_t* first = h.add(64, {0x1000}, {{1, 0, 64, 0}});
  h.add(64, {0x2000}, {{1, 0, 64, 0}});
  first[1] = 0x10;  // unmapped
  auto r = h.read();
  EXPECT_EQ(r.status, SnapshotStatus::kPartial);
  EXPECT_NE(r.reason.find("unreadable"), std::string::npos);
  EXPECT_EQ(r.profile.buckets.size(), 2u);
}

TEST(GoHeapReader, WrongTypeAndHugeDepthAreRejected) {
  FakeHeap h(26);
  uint64_t* b = h.add(64, {0x1000}, {{1, 0, 64, 0}});
  b[2] = 2;  // a block-profile bucket on the heap list
  auto r = h.read();
  EXPECT_EQ(r.status, SnapshotStatus::kFailed);
  EXPECT_NE(r.reason.find("type"), std::string::npos);
  b[2] = 1;
  b[5] = 1ull << 40;  // nstk
  r = h.read();
  EXPECT_EQ(r.status, SnapshotStatus::kFailed);
  EXPECT_NE(r.reason.find("depth"), std::string::npos);
}

TEST(GoHeapReader, BucketCapGivesPartial) {
  FakeHeap h(26);
  for (int i = 0; i < 50; ++i) h.add(64, {uint64_t(0x1000 + i)}, {{1, 0, 64, 0}});
  CaptureOptions o;
  o.max_records = 10;
  auto r = h.read(o);
  EXPECT_EQ(r.status, SnapshotStatus::kPartial);
  EXPECT_EQ(r.profile.buckets.size(), 10u);
}

TEST(GoHeapReader, ExpiredBudgetGivesPartial) {
  FakeHeap h(26);
  for (int i = 0; i < 10; ++i) h.add(64, {uint64_t(0x1000 + i)}, {{1, 0, 64, 0}});
  CaptureOptions o;
  o.budget = std::chrono::milliseconds(0);
  auto r = h.read(o);
  EXPECT_EQ(r.status, SnapshotStatus::kPartial);
  EXPECT_NE(r.reason.find("budget"), std::string::npos);
}

TEST(GoHeapReader, ManyBucketsFewSyscalls) {
  FakeHeap h(26);
  for (int i = 0; i < 2000; ++i) h.add(64, {uint64_t(0x1000 + i), 0x2000, 0x3000}, {{1, 0, 64, 0}});
  RemoteMemory mem(getpid());
  auto maps = read_maps(getpid());
  Deadline d(std::chrono::milliseconds(2000));
  auto r = read_go_heap(mem, maps, h.addrs(), 26, {}, d, false);
  ASSERT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
  EXPECT_EQ(r.summaries.size(), 2000u);
  EXPECT_TRUE(r.profile.buckets.empty());  // PCs are not kept unless asked for
  // 2000 buckets × 200 bytes = 400 KB: a handful of 256 KiB windows.
  EXPECT_LT(mem.syscalls(), 20u) << "reads must not grow with the bucket count";
}

TEST(GoHeapReader, SummariesHashStacksAndRereadPcs) {
  FakeHeap h(26);
  h.add(64, {0x1000, 0x2000}, {{3, 1, 192, 64}});
  h.add(64, {0x1000, 0x2000}, {{1, 0, 64, 0}});
  h.add(64, {0x1000, 0x2001}, {{1, 0, 64, 0}});
  auto r = h.read();
  ASSERT_EQ(r.summaries.size(), 3u);
  const auto& s = r.summaries;
  EXPECT_EQ(s[1].stack_hash, s[2].stack_hash);  // same PCs, same key
  EXPECT_NE(s[0].stack_hash, s[1].stack_hash);
  EXPECT_EQ(s[0].nstk(), 2u);
  EXPECT_EQ(s[2].inuse_objects, 2u);
  RemoteMemory mem(getpid());
  std::vector<const GoBucketSummary*> want = {&s[0], &s[2]};
  auto stacks = read_bucket_stacks(mem, want);
  EXPECT_EQ(stacks[0], (std::vector<uint64_t>{0x1000, 0x2001}));
  EXPECT_EQ(stacks[1], (std::vector<uint64_t>{0x1000, 0x2000}));
  EXPECT_EQ(mem.syscalls(), 1u);
}

// The stack hash is the grouping key: every PC and its place in the stack
// must count, in each of its four lanes and in the tail after them.
TEST(GoHeapReader, StackHashTellsEveryPcAndItsPlaceApart) {
  FakeHeap h(26);
  std::vector<std::vector<uint64_t>> stacks;
  for (size_t n = 1; n <= 11; ++n) {
    std::vector<uint64_t> base;
    for (size_t i = 0; i < n; ++i) base.push_back(0x401000 + 0x40 * i);
    stacks.push_back(base);
    for (size_t i = 0; i < n; ++i) {
      auto changed = base;
      changed[i] += 8;
      stacks.push_back(changed);
      if (i + 1 < n) {
        auto swapped = base;
        std::swap(swapped[i], swapped[i + 1]);
        stacks.push_back(swapped);
      }
      if (i + 4 < n) {  // the same lane, four apart
        auto swapped = base;
        std::swap(swapped[i], swapped[i + 4]);
        stacks.push_back(swapped);
      }
    }
  }
  for (const auto& st : stacks) h.add(64, st, {{1, 0, 64, 0}});
  auto r = h.read();
  ASSERT_EQ(r.summaries.size(), stacks.size());
  std::set<uint64_t> seen;
  for (const auto& s : r.summaries) seen.insert(s.stack_hash);
  EXPECT_EQ(seen.size(), stacks.size()) << "two different stacks got one key";
}

TEST(GoHeapReader, DecoderRejectsTruncatedImages) {
  std::string err;
  std::vector<uint8_t> img(40, 0);
  EXPECT_FALSE(decode_go_bucket(img, 26, 1024, err));
  img.assign(48 + 8, 0);
  uint64_t typ = 1, nstk = 4;
  std::memcpy(&img[16], &typ, 8);
  std::memcpy(&img[40], &nstk, 8);
  EXPECT_FALSE(decode_go_bucket(img, 26, 1024, err));
  EXPECT_NE(err.find("truncated"), std::string::npos);
}

// snapshot.recent: the futures MemProfile does not fold in. Mallocs go to
// future[(C+2)%3], the sweep's frees and the previous cycle's mallocs wait in
// future[(C+1)%3]; only future[C%3] is flushed into the in-use view.
TEST(GoHeapReader, RecentIsTheTwoFuturesTheFlushLeavesForEachCycle) {
  for (uint32_t c = 3; c < 6; ++c) {
    FakeHeap h(26);
    h.cycle = c << 1;
    // active, future0, future1, future2 (objects of 16 bytes)
    h.add(16, {0x1000}, {{5, 0, 80, 0}, {1, 0, 16, 0}, {10, 0, 160, 0}, {100, 0, 1600, 0}});
    auto r = h.read();
    ASSERT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
    const uint64_t future[3] = {1, 10, 100};
    const uint64_t flushed = future[c % 3];
    const uint64_t recent = 111 - flushed;
    SCOPED_TRACE("C%3 = " + std::to_string(c % 3));
    EXPECT_EQ(r.summaries[0].inuse_objects, 5 + flushed);
    EXPECT_EQ(r.summaries[0].recent_objects, recent);
    EXPECT_EQ(r.summaries[0].recent_bytes, recent * 16);
    EXPECT_EQ(r.profile.buckets[0].recent_objects, recent);
    EXPECT_EQ(r.profile.buckets[0].recent_bytes, recent * 16);
  }
}

TEST(GoHeapReader, RecentIsNetOfItsFreesAndNeverNegative) {
  FakeHeap h(26);
  h.cycle = 0;  // flush index 0; futures 1 and 2 are recent
  h.add(32, {0x1000}, {{4, 0, 128, 0}, {0, 0, 0, 0}, {3, 1, 96, 32}, {2, 0, 64, 0}});  // +4 net
  h.add(32, {0x2000}, {{9, 0, 288, 0}, {0, 0, 0, 0}, {0, 6, 0, 192}, {1, 0, 32, 0}});  // shrank: 0
  auto r = h.read();
  ASSERT_EQ(r.summaries.size(), 2u);
  EXPECT_EQ(r.summaries[1].recent_objects, 4u);
  EXPECT_EQ(r.summaries[1].recent_bytes, 128u);
  EXPECT_EQ(r.summaries[0].recent_objects, 0u);
  EXPECT_EQ(r.summaries[0].recent_bytes, 0u);
}

// Before the first GC MemProfile shows every future as in use: recent must be
// empty then, or the same objects would be counted twice.
TEST(GoHeapReader, NoGcYetLeavesNothingRecent) {
  FakeHeap h(26);
  h.cycle = 1 << 1;
  h.add(32, {0x1000}, {{0, 0, 0, 0}, {2, 0, 64, 0}, {0, 0, 0, 0}, {3, 0, 96, 0}});
  h.add(64, {0x2000}, {{0, 0, 0, 0}, {0, 0, 0, 0}, {0, 0, 0, 0}, {7, 1, 448, 64}});
  auto r = h.read();
  ASSERT_EQ(r.summaries.size(), 2u);
  EXPECT_EQ(r.summaries[1].inuse_objects, 5u);
  EXPECT_EQ(r.summaries[0].inuse_objects, 6u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(r.summaries[i].recent_objects, 0u);
    EXPECT_EQ(r.summaries[i].recent_bytes, 0u);
    EXPECT_EQ(r.profile.buckets[i].recent_objects, 0u);
    EXPECT_EQ(r.profile.buckets[i].recent_bytes, 0u);
  }
  // One bucket with an active count anywhere in the list ends the rule.
  h.add(8, {0x3000}, {{1, 0, 8, 0}});
  r = h.read();
  EXPECT_EQ(r.summaries[1].inuse_objects, 0u);  // active 0 + future[C%3 = 2] 0
  EXPECT_EQ(r.summaries[1].recent_objects, 6u);  // futures 0 and 2
  EXPECT_EQ(r.summaries[2].recent_objects, 5u);
}

TEST(GoHeapReader, RecentGo127BytesAreCountTimesSize) {
  FakeHeap h(27);
  h.cycle = 2 << 1;  // flush index 2
  h.add(48, {0x1000}, {{10, 4}, {7, 2}, {3, 0}, {100, 100}});
  auto r = h.read();
  ASSERT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
  EXPECT_EQ(r.summaries[0].recent_objects, 8u);  // (7 + 3) - (2 + 0)
  EXPECT_EQ(r.summaries[0].recent_bytes, 8u * 48);
}

// Without the cycle (stripped binaries) the in-use view is the active cycle
// alone, so every future is recent: still nothing counted twice.
TEST(GoHeapReader, UnknownCycleMakesEveryFutureRecent) {
  FakeHeap h(26);
  h.add(16, {0x1000}, {{5, 0, 80, 0}, {1, 0, 16, 0}, {10, 0, 160, 0}, {100, 0, 1600, 0}});
  auto a = h.addrs();
  a.mprof_cycle.reset();
  RemoteMemory mem(getpid());
  auto maps = read_maps(getpid());
  Deadline d(std::chrono::milliseconds(1000));
  auto r = read_go_heap(mem, maps, a, 26, {}, d, false);
  EXPECT_EQ(r.summaries[0].inuse_objects, 5u);
  EXPECT_EQ(r.summaries[0].recent_objects, 111u);
}
