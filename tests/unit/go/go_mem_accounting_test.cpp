// The Go runtime's accounting (go_mem_accounting.h): the per-version table
// against each toolchain's DWARF (tests/fixtures/go/glayout), the decoder
// on byte images of runtime.memstats and the arena list, including crafted
// values that must yield a reason, and the read through process_vm_readv of
// images laid out in this process.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "go/go_mem_accounting.h"
#include "go_fixture_util.h"

namespace oomsnap {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
// arenaIdx of the arena at 0xc000000000, the first heap hint on amd64.
constexpr uint64_t kFirstArenaIdx = (uint64_t{1} << 21) + (0xc000000000ull >> 26);

class GoMemStatsLayoutTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoMemStatsLayoutTest, TableEqualsDwarf) {
  const std::string v = GetParam();
  OOMSNAP_REQUIRE_FIXTURE(testutil::fixture_path(v, "default"));
  const std::string out = testutil::go_dwarf_layout(v);
  auto j = nlohmann::json::parse(out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << out;
  auto l = go_memstats_layout_for(std::stoi(v.substr(2)));
  ASSERT_TRUE(l);
  EXPECT_EQ(j["heap_stats"], 0);  // mstats.heapStats.stats[0] is memstats itself
  EXPECT_EQ(j["shards"], 0);
  EXPECT_EQ(l->delta_size, j["delta_size"].get<uint32_t>());
  EXPECT_EQ(j["committed"], 0);
  EXPECT_EQ(j["released"], 8);
  EXPECT_EQ(j["inHeap"], 16);
  EXPECT_EQ(j["inStacks"], 24);
  EXPECT_EQ(j["inWorkBufs"], 32);
  EXPECT_EQ(l->ptr_scalar_bits, j.contains("inPtrScalarBits"));
  if (l->ptr_scalar_bits) {
    EXPECT_EQ(j["inPtrScalarBits"], 40);
  }
  EXPECT_EQ(l->stacks_sys, j["stacks_sys"].get<uint32_t>());
  const char* const sys[] = {"mspan_sys", "mcache_sys", "buckhash_sys", "gcMiscSys", "other_sys"};
  for (uint32_t i = 0; i < 5; ++i) EXPECT_EQ(l->stacks_sys + 8 * (i + 1), j[sys[i]].get<uint32_t>()) << sys[i];
  EXPECT_EQ(l->arenas, j["arenas"].get<uint32_t>());
}

INSTANTIATE_TEST_SUITE_P(AllGo, GoMemStatsLayoutTest, ::testing::ValuesIn(testutil::go_versions()),
                         [](const auto& i) {
                           std::string s = "go" + i.param;
                           for (char& c : s)
                             if (c == '.') c = '_';
                           return s;
                         });

TEST(GoMemStatsLayout, UnknownVersionsHaveNone) {
  EXPECT_FALSE(go_memstats_layout_for(18));
  EXPECT_FALSE(go_memstats_layout_for(20));
  EXPECT_FALSE(go_memstats_layout_for(28));
}

// An image of runtime.memstats for a layout: byte deltas per shard, the sys
// counters after stacks_sys.
struct MemStatsImage {
  explicit MemStatsImage(const GoMemStatsLayout& l) : layout(l), bytes(l.memstats_image_size()) {}
  void delta(int shard, uint32_t field, int64_t v) {
    std::memcpy(bytes.data() + uint64_t{layout.delta_size} * shard + field, &v, 8);
  }
  void sys(int i, uint64_t v) { std::memcpy(bytes.data() + layout.stacks_sys + 8 * i, &v, 8); }
  GoMemStatsLayout layout;
  std::vector<uint8_t> bytes;
};
constexpr uint32_t kCommitted = 0, kReleased = 8, kInHeap = 16, kInStacks = 24, kInWorkBufs = 32, kPtrBits = 40;

// 100 MiB in use, 20 MiB free, 5 MiB released, 1 MiB of stacks, 2 MiB of
// work bufs (and 1 MiB of GC program bits where the version has them),
// spread over the shards as deltas, some negative.
MemStatsImage honest(const GoMemStatsLayout& l) {
  MemStatsImage m(l);
  const int64_t bits = l.ptr_scalar_bits ? 1 * kMiB : 0;
  const int64_t committed = (100 + 20 + 1 + 2) * kMiB + bits;
  m.delta(0, kCommitted, committed + 7 * kMiB);
  m.delta(1, kCommitted, -7 * kMiB);
  m.delta(0, kReleased, 5 * kMiB);
  m.delta(0, kInHeap, 90 * kMiB);
  m.delta(2, kInHeap, 10 * kMiB);
  m.delta(1, kInStacks, 1 * kMiB);
  m.delta(0, kInWorkBufs, 2 * kMiB);
  if (l.ptr_scalar_bits) m.delta(0, kPtrBits, bits);
  for (int i = 0; i < 6; ++i) m.sys(i, (i + 1) * 100000);  // stacks_sys .. other_sys
  return m;
}

class GoMemStatsDecode : public ::testing::TestWithParam<int> {
 protected:
  GoMemStatsLayout layout() const { return *go_memstats_layout_for(GetParam()); }
};

TEST_P(GoMemStatsDecode, SumsTheShardsAsReadMemStatsDoes) {
  const auto l = layout();
  GoMemAccounting acc;
  std::string why;
  ASSERT_TRUE(decode_go_memstats(honest(l).bytes, l, acc, why)) << why;
  EXPECT_EQ(acc.heap_inuse, 100 * kMiB);
  EXPECT_EQ(acc.heap_free, 20 * kMiB);
  EXPECT_EQ(acc.heap_released, 5 * kMiB);
  EXPECT_EQ(acc.stack_inuse, 1 * kMiB);
  // mspan + mcache + buckhash + gcMisc + other (not stacks_sys), work bufs, bits.
  EXPECT_EQ(acc.runtime_sys, (200000 + 300000 + 400000 + 500000 + 600000) + 2 * kMiB + (l.ptr_scalar_bits ? kMiB : 0));
}

TEST_P(GoMemStatsDecode, AShortImageIsAReason) {
  const auto l = layout();
  auto m = honest(l);
  GoMemAccounting acc;
  std::string why;
  m.bytes.resize(m.bytes.size() - 1);
  EXPECT_FALSE(decode_go_memstats(m.bytes, l, acc, why));
  EXPECT_NE(why.find("too short"), std::string::npos) << why;
}

TEST_P(GoMemStatsDecode, InUseBeyondAnySaneSizeIsAReason) {
  const auto l = layout();
  GoMemAccounting acc;
  std::string why;
  auto m = honest(l);
  m.delta(1, kInHeap, int64_t{1} << 60);  // one shard beyond the address space
  EXPECT_FALSE(decode_go_memstats(m.bytes, l, acc, why));
  EXPECT_NE(why.find("inHeap shard 1 is implausible"), std::string::npos) << why;
  // Shards each plausible whose sum is not.
  m = honest(l);
  for (int i = 0; i < 3; ++i) m.delta(i, kInHeap, (int64_t{1} << 47) - 1);
  EXPECT_FALSE(decode_go_memstats(m.bytes, l, acc, why));
  EXPECT_NE(why.find("inHeap sums to an implausible"), std::string::npos) << why;
  // A count below zero.
  m = honest(l);
  m.delta(2, kReleased, -6 * int64_t{kMiB});
  EXPECT_FALSE(decode_go_memstats(m.bytes, l, acc, why));
  EXPECT_NE(why.find("released sums to an implausible -"), std::string::npos) << why;
  // Every shard at the int64 extremes: no overflow, a reason.
  m = honest(l);
  for (int i = 0; i < 3; ++i) m.delta(i, kCommitted, INT64_MIN);
  EXPECT_FALSE(decode_go_memstats(m.bytes, l, acc, why));
  EXPECT_NE(why.find("committed shard 0"), std::string::npos) << why;
}

TEST_P(GoMemStatsDecode, AnImplausibleSysCounterIsAReason) {
  const auto l = layout();
  GoMemAccounting acc;
  std::string why;
  auto m = honest(l);
  m.sys(5, UINT64_MAX);  // other_sys
  EXPECT_FALSE(decode_go_memstats(m.bytes, l, acc, why));
  EXPECT_NE(why.find("other_sys is implausible"), std::string::npos) << why;
}

// Found by fuzz_memory_accounting: counters each within the address space
// whose sum is not.
TEST_P(GoMemStatsDecode, SysCountersSummingPastTheAddressSpaceAreAReason) {
  const auto l = layout();
  GoMemAccounting acc;
  std::string why;
  auto m = honest(l);
  m.sys(1, kGoMaxSaneBytes - 1);  // mspan_sys
  m.sys(5, kGoMaxSaneBytes - 1);  // other_sys
  EXPECT_FALSE(decode_go_memstats(m.bytes, l, acc, why));
  EXPECT_NE(why.find("more than the address space"), std::string::npos) << why;
}

TEST_P(GoMemStatsDecode, AFreeHeapBelowZeroWhileTheShardsMoveIsNone) {
  // committed read before a span's commit reached it, inHeap after.
  const auto l = layout();
  auto m = honest(l);
  m.delta(0, kInHeap, 150 * kMiB);
  GoMemAccounting acc;
  std::string why;
  ASSERT_TRUE(decode_go_memstats(m.bytes, l, acc, why)) << why;
  EXPECT_EQ(acc.heap_free, 0u);
  EXPECT_EQ(acc.heap_inuse, 160 * kMiB);
}

INSTANTIATE_TEST_SUITE_P(Layouts, GoMemStatsDecode, ::testing::Values(19, 21, 22, 24, 25, 27),
                         [](const auto& i) { return "go1_" + std::to_string(i.param); });

TEST(GoArenas, IndicesAreArenasOf64MiBFromTheBaseOffset) {
  const uint64_t idx[2] = {kFirstArenaIdx, kFirstArenaIdx + 1};
  std::vector<AddressRange> out;
  std::string why;
  ASSERT_TRUE(decode_go_arenas({reinterpret_cast<const uint8_t*>(idx), sizeof idx}, out, why)) << why;
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].start, 0xc000000000u);
  EXPECT_EQ(out[0].end, 0xc004000000u);
  EXPECT_EQ(out[1].start, 0xc004000000u);
  // The last arena below 2^47 is in.
  const uint64_t last = (uint64_t{1} << 22) - 1;
  ASSERT_TRUE(decode_go_arenas({reinterpret_cast<const uint8_t*>(&last), 8}, out, why)) << why;
  EXPECT_EQ(out[0].end, uint64_t{1} << 47);
}

TEST(GoArenas, AnArenaOutsideUserSpaceIsAReason) {
  std::vector<AddressRange> out;
  std::string why;
  // Index 0 (-2^47), the arena just below 0, the first past the 48-bit space, the largest.
  for (uint64_t bad : {uint64_t{0}, (uint64_t{1} << 21) - 1, uint64_t{1} << 22, UINT64_MAX}) {
    const uint64_t idx[2] = {kFirstArenaIdx, bad};
    EXPECT_FALSE(decode_go_arenas({reinterpret_cast<const uint8_t*>(idx), sizeof idx}, out, why)) << bad;
    EXPECT_NE(why.find("arena 1 "), std::string::npos) << why;
    EXPECT_TRUE(out.empty());
  }
}

TEST(GoArenas, TheSliceHeaderIsChecked) {
  std::string why;
  EXPECT_TRUE(check_go_arena_slice({0x1000, 3, 4}, why)) << why;
  EXPECT_TRUE(check_go_arena_slice({0, 0, 0}, why)) << why;
  EXPECT_FALSE(check_go_arena_slice({0x1000, 5, 4}, why));
  EXPECT_NE(why.find("len 5 > cap 4"), std::string::npos) << why;
  EXPECT_FALSE(check_go_arena_slice({0x1000, 3'000'000'000, 3'000'000'000}, why));  // billions
  EXPECT_NE(why.find("3000000000 arenas"), std::string::npos) << why;
  EXPECT_FALSE(check_go_arena_slice({0x1000, kGoMaxArenas + 1, kGoMaxArenas + 1}, why));
  EXPECT_FALSE(check_go_arena_slice({0, 2, 2}, why));
  EXPECT_NE(why.find("no array"), std::string::npos) << why;
}

// runtime.memstats and runtime.mheap_ laid out in this process, read back
// through process_vm_readv as the collector reads a target.
class GoMemAccountingRead : public ::testing::Test {
 protected:
  GoMemAccountingRead() : layout_(*go_memstats_layout_for(27)), memstats_(honest(layout_)), mheap_(layout_.arenas + 24) {
    set_slice(reinterpret_cast<uint64_t>(indices_.data()), indices_.size(), indices_.size());
  }
  void set_slice(uint64_t ptr, uint64_t len, uint64_t cap) {
    const uint64_t h[3] = {ptr, len, cap};
    std::memcpy(mheap_.data() + layout_.arenas, h, sizeof h);
  }
  std::optional<GoMemAccounting> read(std::string& why) {
    return read_go_mem_accounting(mem_, reinterpret_cast<uint64_t>(memstats_.bytes.data()),
                                  reinterpret_cast<uint64_t>(mheap_.data()), layout_, why);
  }
  GoMemStatsLayout layout_;
  MemStatsImage memstats_;
  std::vector<uint8_t> mheap_;
  std::vector<uint64_t> indices_{kFirstArenaIdx + 1, kFirstArenaIdx};
  RemoteMemory mem_{getpid()};
};

TEST_F(GoMemAccountingRead, ReadsTheCountsAndTheArenas) {
  std::string why;
  auto acc = read(why);
  ASSERT_TRUE(acc) << why;
  EXPECT_EQ(acc->heap_inuse, 100 * kMiB);
  ASSERT_EQ(acc->arenas.size(), 2u);
  EXPECT_EQ(acc->arenas[0].start, 0xc004000000u);
  EXPECT_EQ(acc->arenas[1].start, 0xc000000000u);
}

TEST_F(GoMemAccountingRead, AnArenaCountInTheBillionsIsAReasonNotAnAllocation) {
  set_slice(reinterpret_cast<uint64_t>(indices_.data()), 3'000'000'000, 3'000'000'000);
  std::string why;
  const uint64_t bytes0 = mem_.bytes_read();
  EXPECT_FALSE(read(why));
  EXPECT_NE(why.find("3000000000 arenas"), std::string::npos) << why;
  EXPECT_EQ(mem_.bytes_read() - bytes0, layout_.memstats_image_size() + 24);  // the list was never read
}

TEST_F(GoMemAccountingRead, PointersOutsideTheMappingsAreAReason) {
  std::string why;
  set_slice(0x10, 2, 2);  // the arena list
  EXPECT_FALSE(read(why));
  EXPECT_NE(why.find("cannot read the 2 arena indices at 0x10"), std::string::npos) << why;
  EXPECT_FALSE(read_go_mem_accounting(mem_, 0x20, reinterpret_cast<uint64_t>(mheap_.data()), layout_, why));
  EXPECT_NE(why.find("cannot read runtime.memstats at 0x20"), std::string::npos) << why;
  EXPECT_FALSE(read_go_mem_accounting(mem_, reinterpret_cast<uint64_t>(memstats_.bytes.data()), 0x30, layout_, why));
  EXPECT_NE(why.find("cannot read the arena list of runtime.mheap_"), std::string::npos) << why;
}

TEST_F(GoMemAccountingRead, AHeapLargerThanItsArenasIsAReason) {
  indices_.resize(1);  // 64 MiB of arenas for 120 MiB of heap
  set_slice(reinterpret_cast<uint64_t>(indices_.data()), 1, 1);
  std::string why;
  EXPECT_FALSE(read(why));
  EXPECT_NE(why.find("more than its 1 arenas hold"), std::string::npos) << why;
}

TEST(GoMemoryClaims, HeapThenFreeHeapInTheArenasThenTheRuntimeFromUnnamedMemory) {
  GoMemAccounting acc;
  acc.heap_inuse = 100 * kMiB;
  acc.heap_free = 20 * kMiB;
  acc.runtime_sys = 7 * kMiB;
  acc.arenas = {{0xc000000000, 0xc004000000}};
  const std::vector<Mapping> maps = {{0xc000000000, 0xc004000000, 0, "rw-p", 0, ""},
                                     {0x7f0000000000, 0x7f0000100000, 0, "rw-p", 0, ""}};
  auto c = go_memory_claims(acc, maps);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].kind, MemoryKind::kHeap);
  EXPECT_EQ(c[0].what, "Go heap (in use)");
  EXPECT_EQ(c[0].max_bytes, 100 * kMiB);
  EXPECT_EQ(c[0].ranges.size(), 1u);
  EXPECT_EQ(c[1].kind, MemoryKind::kHeapFree);
  EXPECT_EQ(c[1].what, "Go heap (free, not returned to the OS)");
  EXPECT_EQ(c[1].max_bytes, 20 * kMiB);
  EXPECT_EQ(c[1].ranges.size(), 1u);
  EXPECT_EQ(c[2].kind, MemoryKind::kRuntime);
  EXPECT_EQ(c[2].what, "Go runtime metadata");
  EXPECT_EQ(c[2].max_bytes, 7 * kMiB);
  EXPECT_TRUE(c[2].ranges.empty());  // the unnamed anonymous memory
}

TEST(GoMemoryClaims, MappingsTheRuntimeNamedAreTheMetadatasRanges) {
  // Go 1.25+ on a kernel with CONFIG_ANON_VMA_NAME: "[anon:Go: ...]".
  GoMemAccounting acc;
  acc.runtime_sys = 7 * kMiB;
  const std::vector<Mapping> maps = {{0x400000, 0x500000, 0, "r-xp", 1, "/bin/x"},
                                     {0xc000000000, 0xc004000000, 0, "rw-p", 0, "[anon:Go: heap]"},
                                     {0x7f0000000000, 0x7f0000100000, 0, "rw-p", 0, "[anon:Go: heap metadata]"},
                                     {0x7f0000200000, 0x7f0000300000, 0, "rw-p", 0, ""},
                                     {0x7f0000400000, 0x7f0000500000, 0, "rw-p", 0, "[anon:glibc: malloc]"}};
  auto c = go_memory_claims(acc, maps);
  ASSERT_EQ(c.size(), 3u);
  ASSERT_EQ(c[2].ranges.size(), 3u);
  EXPECT_EQ(c[2].ranges[0].start, 0xc000000000u);
  EXPECT_EQ(c[2].ranges[1].start, 0x7f0000000000u);
  EXPECT_EQ(c[2].ranges[2].start, 0x7f0000200000u);
}

}  // namespace
}  // namespace oomsnap
