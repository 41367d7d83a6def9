// scale_heap_sample against numbers printed by a Go program (go1.26 and go1.27
// toolchains, identical output) that runs copies of runtime/pprof's
// scaleHeapSample: the <=1.26 form (count, size) and the 1.27 form
// (count, ObjectSize). The oracle program is in the comment at the end.
#include <gtest/gtest.h>

#include <cstdint>

#include "go/go_heap_profile.h"

using oomsnap::scale_heap_sample;

namespace {
struct Case {
  int64_t count, size, rate;
  int64_t old_objs, old_bytes;  // scaleHeapSample(count, size, rate), Go <= 1.26
  int64_t avg;                  // size / count, used as ObjectSize
  int64_t new_objs, new_bytes;  // scaleHeapSample(count, avg, rate), Go 1.27
};

// {count, size, rate, go<=1.26 objs, bytes, objsize, go1.27 objs, bytes}
const Case kCases[] = {
    {0, 0, 524288, 0, 0, 0, 0, 0},
    {0, 100, 524288, 0, 0, 0, 0, 0},
    {5, 0, 524288, 0, 0, 0, 0, 0},
    {1, 8, 524288, 65536, 524292, 8, 65536, 524292},
    {3, 24, 524288, 196609, 1572876, 8, 196609, 1572876},
    {10, 1024, 524288, 51205, 5243392, 102, 51405, 5243390},
    {7, 28672, 524288, 899, 3684370, 4096, 899, 3684370},
    {1, 1048576, 524288, 1, 1212696, 1048576, 1, 1212696},
    {2, 3145728, 524288, 2, 3310550, 1572864, 2, 3310550},
    {100, 4800, 524288, 1092316, 52431200, 48, 1092316, 52431200},
    {12345, 790080, 524288, 101136412, 6472730408, 64, 101136412, 6472730408},
    {999, 32735232, 524288, 16488, 540301812, 32768, 16488, 540301812},
    {5, 5000, 1, 5, 5000, 1000, 5, 5000},
    {5, 5000, 0, 5, 5000, 1000, 5, 5000},
    {5, 5000, -3, 5, 5000, 1000, 5, 5000},
    {1, 1, 2, 2, 2, 1, 2, 2},
    {3, 7, 4096, 5267, 12291, 2, 6145, 12291},
    {11, 1000, 4096, 501, 45557, 90, 506, 45552},
    {1000000, 16000000, 524288, 32768500002, 524296000040, 16, 32768500002, 524296000040},
    {17, 15232, 524288, 9955, 8920514, 896, 9955, 8920514},
    {1, 134217728, 524288, 1, 134217728, 134217728, 1, 134217728},
    {37, 909312, 524288, 807, 19856863, 24576, 807, 19856863},
    {4, 832, 524288, 10084, 2097568, 208, 10084, 2097568},
    {6, 81408, 65536, 32, 435323, 13568, 32, 435323},
    {250, 20000, 8192, 25725, 2058016, 80, 25725, 2058016},
    {1099511627776, 17592186044416, 524288, 36029346777530320, 576469548440485120, 16, 36029346777530320, 576469548440485120},
    {123, 4567, 524288, 1736858, 64489707, 37, 1742964, 64489699},
    {9, 81, 1000, 1004, 9040, 9, 1004, 9040},
};
}  // namespace

TEST(ScaleHeapSample, MatchesGoBefore127) {
  for (int minor : {19, 21, 22, 23, 24, 25, 26}) {
    for (const auto& c : kCases) {
      auto [objs, bytes] = scale_heap_sample(c.count, c.size, c.rate, minor, static_cast<uint64_t>(c.avg));
      EXPECT_EQ(objs, c.old_objs) << "go1." << minor << " count=" << c.count << " size=" << c.size << " rate=" << c.rate;
      EXPECT_EQ(bytes, c.old_bytes) << "go1." << minor << " count=" << c.count << " size=" << c.size << " rate=" << c.rate;
    }
  }
}

TEST(ScaleHeapSample, MatchesGo127UsesObjectSize) {
  for (const auto& c : kCases) {
    // The size argument is ignored for 1.27: pass garbage to prove it.
    auto [objs, bytes] = scale_heap_sample(c.count, 987654321, c.rate, 27, static_cast<uint64_t>(c.avg));
    EXPECT_EQ(objs, c.new_objs) << "count=" << c.count << " objsize=" << c.avg << " rate=" << c.rate;
    EXPECT_EQ(bytes, c.new_bytes) << "count=" << c.count << " objsize=" << c.avg << " rate=" << c.rate;
  }
}

TEST(ScaleHeapSample, ZeroAndUnscaled) {
  EXPECT_EQ(scale_heap_sample(0, 100, 512 * 1024, 26, 100), std::make_pair(int64_t{0}, int64_t{0}));
  EXPECT_EQ(scale_heap_sample(3, 0, 512 * 1024, 26, 100), std::make_pair(int64_t{0}, int64_t{0}));
  EXPECT_EQ(scale_heap_sample(3, 300, 512 * 1024, 27, 0), std::make_pair(int64_t{0}, int64_t{0}));
  EXPECT_EQ(scale_heap_sample(3, 301, 1, 26, 100), std::make_pair(int64_t{3}, int64_t{301}));
  EXPECT_EQ(scale_heap_sample(3, 301, 1, 27, 100), std::make_pair(int64_t{3}, int64_t{300}));
  EXPECT_EQ(scale_heap_sample(3, 301, 0, 27, 100), std::make_pair(int64_t{3}, int64_t{300}));
}

/* Oracle (go run with GOTOOLCHAIN=local GO111MODULE=off):
func scaleOld(count, size, rate int64) (int64, int64) {
	if count == 0 || size == 0 { return 0, 0 }
	if rate <= 1 { return count, size }
	avgSize := float64(size) / float64(count)
	scale := 1 / (1 - math.Exp(-avgSize/float64(rate)))
	return int64(float64(count) * scale), int64(float64(size) * scale)
}
func scaleNew(count, avgSize, rate int64) (int64, int64) {
	if count == 0 || avgSize == 0 { return 0, 0 }
	if rate <= 1 { return count, count * avgSize }
	scale := 1 / (1 - math.Exp(-float64(avgSize)/float64(rate)))
	return int64(float64(count) * scale), int64(float64(count*avgSize) * scale)
}
// printed: count, size, rate, scaleOld(count, size, rate), size/count, scaleNew(count, size/count, rate)
*/

// The PC pool keeps 4 bytes a PC: every PC must come back exactly, near the
// base, at the edges of its reach, and outside it (a cgo frame, a hostile
// bucket), whether the reader named a base or the first PC set it.
TEST(GoHeapProfilePool, EveryStoredPcComesBackExactly) {
  const uint64_t exe = 0x4a0000;  // runtime.mbuckets of a non-PIE binary
  const std::vector<std::vector<uint64_t>> stacks = {
      {0x401000, 0x402345, 0x47ffff},
      {0x7f12'3456'7890, 0x401000},            // a libc frame, then Go
      {0, 1, ~uint64_t{0}, 0xffff'8000'0000'0000},  // nothing a real stack holds
      {0x7fff'ffff, 0x8000'0000},  // the base is 0 (exe is under 1 GiB): the last PC in reach, the first out
  };
  for (bool named : {true, false}) {
    oomsnap::GoHeapProfile p;
    if (named) p.set_base_near(exe);
    for (const auto& s : stacks) p.add_bucket(64, s);
    ASSERT_EQ(p.buckets.size(), stacks.size());
    for (size_t i = 0; i < stacks.size(); ++i) EXPECT_EQ(p.stack(p.buckets[i]), stacks[i]) << i << " named " << named;
    EXPECT_EQ(p.stored_pcs(), 11u);
    // Named or from the first PC (0x401000), the base is 0 here.
    EXPECT_EQ(p.foreign_pcs(), 4u) << "PCs within 2 GiB of the base are kept in 4 bytes, no others";
  }
}

TEST(GoHeapProfilePool, APieExecutableHighInTheAddressSpaceIsInReach) {
  oomsnap::GoHeapProfile p;
  const uint64_t text = 0x55d1'2340'0000;
  p.set_base_near(text + 0x80'0000);
  p.add_bucket(32, std::vector<uint64_t>{text + 0x1234, text + 0x7f'ffff});
  EXPECT_EQ(p.foreign_pcs(), 0u);
  EXPECT_EQ(p.stack(p.buckets[0]), (std::vector<uint64_t>{text + 0x1234, text + 0x7f'ffff}));
}
