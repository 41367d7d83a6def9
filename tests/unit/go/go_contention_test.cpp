// Block/mutex profile reading on byte images and on bucket lists laid out in
// this test's own memory (read back through process_vm_readv on our own pid):
// the blockRecord decode, runtime/pprof's numbers per version, the ticks
// layout, and a hostile or changing list (cycle, wrong type, bad pointer).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "go/go_contention_profile.h"
#include "go/go_contention_reader.h"

using namespace oomsnap;

namespace {

// A fake persistentalloc chunk holding block (typ 2) or mutex (typ 3) buckets.
struct FakeContention {
  std::vector<uint64_t> chunk = std::vector<uint64_t>(1 << 14, 0);
  size_t used = 0;  // words
  uint64_t head = 0;
  uint64_t rate = 1;
  uint64_t ticks[4] = {0, 0, 0, 0};  // ticksType of 1.22+: lock, startTicks, startTime, val

  uint64_t* add(uint64_t typ, std::vector<uint64_t> stack, double count, int64_t cycles) {
    uint64_t* b = &chunk[used];
    used += 6 + stack.size() + 2;
    b[1] = head;  // allnext
    b[2] = typ;
    b[5] = stack.size();
    for (size_t i = 0; i < stack.size(); ++i) b[6 + i] = stack[i];
    std::memcpy(&b[6 + stack.size()], &count, 8);
    std::memcpy(&b[7 + stack.size()], &cycles, 8);
    head = reinterpret_cast<uint64_t>(b);
    return b;
  }
  GoContentionRead read(GoContentionKind kind, int minor = 27, CaptureOptions opts = {}) {
    RemoteMemory mem(getpid());
    auto maps = read_maps(getpid());
    Deadline d(opts.budget);
    GoContentionAddrs a;
    a.head = reinterpret_cast<uint64_t>(&head);
    a.rate = reinterpret_cast<uint64_t>(&rate);
    a.ticks = reinterpret_cast<uint64_t>(&ticks[0]);
    return read_go_contention(mem, maps, a, kind, minor, opts, d);
  }
};

std::vector<uint8_t> image(const uint64_t* words, size_t n) {
  std::vector<uint8_t> out(n * 8);
  std::memcpy(out.data(), words, out.size());
  return out;
}

}  // namespace

TEST(GoContentionDecode, BlockRecordAfterThePcs) {
  FakeContention f;
  uint64_t* b = f.add(2, {0x401000, 0x402000, 0x403000}, 2.75, 123456789);
  auto img = image(b, 6 + 3 + 2);
  std::string err;
  auto v = decode_go_block_bucket(img, GoContentionKind::kBlock, 32, err);
  ASSERT_TRUE(v) << err;
  EXPECT_EQ(v->nstk, 3u);
  EXPECT_EQ(v->pc(0), 0x401000u);
  EXPECT_EQ(v->pc(2), 0x403000u);
  EXPECT_DOUBLE_EQ(v->count, 2.75);
  EXPECT_EQ(v->cycles, 123456789);
  // The same bytes are not a mutex bucket.
  EXPECT_FALSE(decode_go_block_bucket(img, GoContentionKind::kMutex, 32, err));
  EXPECT_NE(err.find("not a mutex profile bucket"), std::string::npos) << err;
}

TEST(GoContentionDecode, TruncatedAndImplausibleImagesAreRejected) {
  FakeContention f;
  uint64_t* b = f.add(3, {1, 2}, 1, 10);
  auto whole = image(b, 6 + 2 + 2);
  std::string err;
  ASSERT_TRUE(decode_go_block_bucket(whole, GoContentionKind::kMutex, 32, err)) << err;
  for (size_t cut = 0; cut < whole.size(); ++cut) {
    std::vector<uint8_t> part(whole.begin(), whole.begin() + static_cast<std::ptrdiff_t>(cut));
    EXPECT_FALSE(decode_go_block_bucket(part, GoContentionKind::kMutex, 32, err)) << "cut at " << cut;
  }
  // A depth near 2^61 must not wrap nstk * 8 into a small size.
  b[5] = (uint64_t{1} << 61) + 1;
  auto huge = image(b, 6 + 2 + 2);
  EXPECT_FALSE(decode_go_block_bucket(huge, GoContentionKind::kMutex, ~size_t{0}, err));
  b[5] = 0;
  EXPECT_FALSE(decode_go_block_bucket(image(b, 10), GoContentionKind::kMutex, 32, err));
}

TEST(GoContentionValues, AsRuntimePprofWritesThem) {
  const int64_t cps = 2'000'000'000;  // 2 GHz: 2 cycles per ns
  // Block: int64(count), cycles / GHz.
  auto v = go_contention_values(3.9, 2'000'000, GoContentionKind::kBlock, 27, cps, 1);
  EXPECT_EQ(v.contentions, 3);
  EXPECT_EQ(v.delay_ns, 1'000'000);
  // Block records whose count truncates to 0 say 1 (blockProfileInternal).
  EXPECT_EQ(go_contention_values(0.4, 10, GoContentionKind::kBlock, 22, cps, 1).contentions, 1);
  // Mutex records are not clamped.
  EXPECT_EQ(go_contention_values(0.4, 10, GoContentionKind::kMutex, 22, cps, 1).contentions, 0);
  // Go 1.19 scales mutex records by the fraction in pprof; 1.21+ do not.
  auto m19 = go_contention_values(2, 2000, GoContentionKind::kMutex, 19, cps, 5);
  EXPECT_EQ(m19.contentions, 10);
  EXPECT_EQ(m19.delay_ns, 5000);
  auto m21 = go_contention_values(2, 2000, GoContentionKind::kMutex, 21, cps, 5);
  EXPECT_EQ(m21.contentions, 2);
  EXPECT_EQ(m21.delay_ns, 1000);
  // The truncation happens after the float division, as in Go.
  EXPECT_EQ(go_contention_values(1, 3, GoContentionKind::kBlock, 27, cps, 1).delay_ns, 1);
  // NaN / out of range behave as Go's int64(float64) on amd64.
  EXPECT_EQ(go_contention_values(std::nan(""), 1, GoContentionKind::kMutex, 27, cps, 1).contentions,
            std::numeric_limits<int64_t>::min());
}

TEST(GoContentionTicks, LayoutPerVersion) {
  EXPECT_EQ(go_ticks_layout(19).val, 16u);
  EXPECT_FALSE(go_ticks_layout(19).start_ticks);
  EXPECT_EQ(go_ticks_layout(21).val, 8u);
  EXPECT_EQ(go_ticks_layout(22).val, 24u);
  EXPECT_EQ(*go_ticks_layout(27).start_ticks, 8u);
  EXPECT_EQ(*go_ticks_layout(27).start_time, 16u);
}

TEST(GoContentionReader, ReadsListRateAndTicks) {
  FakeContention f;
  f.rate = 7;
  f.ticks[3] = 2'500'000'000;
  f.add(2, {0x10, 0x20}, 1, 100);
  f.add(2, {0x30}, 4, 400);
  auto r = f.read(GoContentionKind::kBlock);
  ASSERT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
  EXPECT_EQ(r.rate.value_or(-1), 7);
  EXPECT_EQ(r.cycles_per_second, 2'500'000'000);
  EXPECT_EQ(r.cycles_per_second_source, "runtime.ticks");
  ASSERT_EQ(r.records.size(), 2u);
  EXPECT_EQ(r.records[0].pcs, (std::vector<uint64_t>{0x30}));  // newest first, as allnext runs
  EXPECT_EQ(r.records[0].cycles, 400);
  EXPECT_EQ(r.records[1].pcs, (std::vector<uint64_t>{0x10, 0x20}));
}

TEST(GoContentionReader, NeverEnabledIsUnavailableWithTheReason) {
  FakeContention f;
  f.rate = 0;
  auto r = f.read(GoContentionKind::kMutex);
  EXPECT_EQ(r.status, SnapshotStatus::kUnavailable);
  EXPECT_NE(r.reason.find("never enabled"), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("SetMutexProfileFraction"), std::string::npos) << r.reason;
  // Enabled but nothing recorded yet: an empty, complete profile.
  f.rate = 1;
  auto e = f.read(GoContentionKind::kMutex);
  EXPECT_EQ(e.status, SnapshotStatus::kComplete) << e.reason;
  EXPECT_TRUE(e.records.empty());
}

TEST(GoContentionReader, TicksNotYetComputedAreEstimatedFromTheStart) {
  FakeContention f;
  f.add(3, {0x10}, 1, 100);
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  const int64_t now_ns = static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
  f.ticks[1] = __builtin_ia32_rdtsc();
  f.ticks[2] = static_cast<uint64_t>(now_ns);
  usleep(20'000);
  auto r = f.read(GoContentionKind::kMutex, 26);
  ASSERT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
  EXPECT_NE(r.cycles_per_second_source.find("estimated"), std::string::npos);
  EXPECT_GT(r.cycles_per_second, 100'000'000);  // any real TSC runs faster than 100 MHz
}

TEST(GoContentionReader, HostileListsEndWithAReason) {
  {
    FakeContention f;  // a cycle
    uint64_t* first = f.add(2, {1}, 1, 1);
    f.add(2, {2}, 1, 1);
    uint64_t* last = f.add(2, {3}, 1, 1);
    first[1] = reinterpret_cast<uint64_t>(last);
    auto r = f.read(GoContentionKind::kBlock);
    EXPECT_EQ(r.status, SnapshotStatus::kPartial);
    EXPECT_NE(r.reason.find("cycle"), std::string::npos) << r.reason;
    EXPECT_EQ(r.records.size(), 3u);
  }
  {
    FakeContention f;  // a heap bucket on the block list
    f.add(1, {1}, 1, 1);
    auto r = f.read(GoContentionKind::kBlock);
    EXPECT_EQ(r.status, SnapshotStatus::kFailed);
    EXPECT_NE(r.reason.find("not a block profile bucket"), std::string::npos) << r.reason;
  }
  {
    FakeContention f;  // a kernel pointer after one good bucket
    uint64_t* b = f.add(3, {1}, 1, 1);
    b[1] = 0xffff888000000000ull;
    auto r = f.read(GoContentionKind::kMutex);
    EXPECT_EQ(r.status, SnapshotStatus::kPartial);
    EXPECT_EQ(r.records.size(), 1u);
    EXPECT_NE(r.reason.find("implausible bucket pointer"), std::string::npos) << r.reason;
  }
  {
    FakeContention f;  // more buckets than the cap
    for (int i = 0; i < 10; ++i) f.add(2, {static_cast<uint64_t>(i + 1)}, 1, 1);
    CaptureOptions o;
    o.max_records = 4;
    auto r = f.read(GoContentionKind::kBlock, 27, o);
    EXPECT_EQ(r.status, SnapshotStatus::kPartial);
    EXPECT_EQ(r.records.size(), 4u);
  }
}

TEST(GoContentionSummary, SortedByDelayMergedByStackCapped) {
  std::vector<GoContentionSample> s(3);
  auto frames = [](std::vector<std::string> names) {
    std::vector<GoFrame> out;
    for (auto& n : names) out.push_back(GoFrame{n, "?", 0, 0, 0, 0, false});
    return out;
  };
  s[0] = {{2, 100}, frames({"runtime.chanrecv1", "main.a"})};
  s[1] = {{1, 500}, frames({"sync.(*Mutex).Unlock", "main.b"})};
  s[2] = {{3, 50}, frames({"runtime.chanrecv1", "main.a"})};
  auto p = summarize_go_contention(s, 10);
  EXPECT_EQ(p.total_contentions, 6);
  EXPECT_EQ(p.total_delay_ns, 650);
  ASSERT_EQ(p.entries.size(), 2u);
  EXPECT_EQ(p.entries[0].name, "sync.(*Mutex).Unlock");
  EXPECT_EQ(p.entries[1].contentions, 5);
  EXPECT_EQ(p.entries[1].delay_ns, 150);
  EXPECT_EQ(p.entries[1].stack, (std::vector<std::string>{"runtime.chanrecv1", "main.a"}));
  auto capped = summarize_go_contention(s, 1);
  EXPECT_EQ(capped.entries.size(), 1u);
  EXPECT_TRUE(capped.output_truncated);
  EXPECT_EQ(capped.total_delay_ns, 650);  // totals cover every record
}
