// The G1 heap walk on byte images (java_heap_images.h): regions, humongous
// objects, TLAB tails, garbage, sampling, deadline, and offsets and sizes
// from a hostile target: refused with a reason, or bounded, never used to
// index past a buffer or to loop for long.

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <vector>

// The Java fuzzer's own entry point, for its regression inputs.
#include "../../fuzz/fuzz_java_heap.cpp"

#include "java_heap_images.h"

using namespace oomsnap;
using namespace oomsnap::java_test;

TEST(G1Heap, CountsObjectsArraysAndHumongous) {
  FakeG1 h;
  const uint32_t marker = h.klass("Fixture$Marker", 24), bytes = h.klass("[B", FakeG1::array_lh(false, 0)),
                 objs = h.klass("[Ljava/lang/Object;", FakeG1::array_lh(true, 2));
  const uint64_t eden = h.region(2), old = h.region(8);
  for (int i = 0; i < 1000; ++i) h.obj(i % 2 ? eden : old, marker, 24);
  for (uint32_t len = 0; len < 50; ++len) h.array(old, bytes, len, 0), h.array(eden, objs, len, 2);
  const uint64_t hum = h.region(4);
  h.region(5);                              // continues humongous: skipped
  h.array(hum, bytes, 1500000, 0);          // spans into the next region
  h.set_top(hum, h.bottom(hum) + FakeG1::kGrain);  // top at region end
  h.region(0);                              // free: skipped
  auto r = h.walk();
  ASSERT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
  auto m = classes(r);
  EXPECT_EQ(m["Fixture$Marker"], std::make_pair(uint64_t{1000}, uint64_t{24000}));
  uint64_t byte_bytes = (16 + 1500000 + 7) & ~7ull, obj_bytes = 0;
  for (uint64_t len = 0; len < 50; ++len) byte_bytes += (16 + len + 7) & ~7ull, obj_bytes += (16 + len * 4 + 7) & ~7ull;
  EXPECT_EQ(m["byte[]"], std::make_pair(uint64_t{51}, byte_bytes));
  EXPECT_EQ(m["java.lang.Object[]"], std::make_pair(uint64_t{50}, obj_bytes));
  EXPECT_EQ(r.unparsed_bytes, 0u);
  EXPECT_DOUBLE_EQ(r.coverage, 1.0);
}

// Unformatted memory inside a region: a live TLAB's tail is skipped as a
// hole; garbage elsewhere is skipped by resynchronising on the next object
// of a known class, and reported as unparsed.
TEST(G1Heap, TlabTailsAndGarbageAreSkipped) {
  FakeG1 h;
  const uint32_t marker = h.klass("Marker", 24), other = h.klass("Other", 32);
  const uint64_t r1 = h.region(2);
  for (int i = 0; i < 10; ++i) h.obj(r1, marker, 24);
  const uint64_t hole = h.top(r1);
  std::memset(reinterpret_cast<void*>(hole), 0xAB, 4096);  // unformatted TLAB tail
  h.set_top(r1, hole + 4096);
  h.L.holes = {{hole, hole + 4096}};
  for (int i = 0; i < 10; ++i) h.obj(r1, other, 32);
  const uint64_t junk = h.top(r1);
  std::memset(reinterpret_cast<void*>(junk), 0, 200);  // an object being published: zero klass
  h.set_top(r1, junk + 200);
  for (int i = 0; i < 10; ++i) h.obj(r1, marker, 24);
  auto r = h.walk();
  ASSERT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
  auto m = classes(r);
  EXPECT_EQ(m["Marker"].first, 20u);
  EXPECT_EQ(m["Other"].first, 10u);
  EXPECT_EQ(r.unparsed_bytes, 200u);
  EXPECT_LT(r.coverage, 1.0);
  EXPECT_GT(r.coverage, 0.9);
}

// Runs of objects of classes already met are sized without a lookup per
// object (Walker::walk_known); every rule of the general step still holds
// inside such a run: a TLAB hole full of stale objects of a known class is
// skipped, a known array class whose length runs past the top is unparsed,
// and mirrors (sized by a field) and fillers (not counted as objects) are
// told apart even after a long run of one class. The headers cross the
// test cache's 4 KiB chunks at every alignment.
TEST(G1Heap, RunsOfKnownClassesKeepEveryRule) {
  FakeG1 h;
  const uint32_t marker = h.klass("Marker", 24), bytes = h.klass("[B", FakeG1::array_lh(false, 0)),
                 mirror = h.klass("java/lang/Class", 96), filler = h.klass("jdk/internal/vm/FillerObject", 16);
  const uint64_t r1 = h.region(8);
  uint64_t mirror_bytes = 0;
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < 500; ++i) h.obj(r1, marker, 24), h.array(r1, bytes, static_cast<uint32_t>(i % 40), 0);
    // A mirror whose size (in words, at mirror_size_offset) is not its klass's.
    const uint64_t words = 14 + static_cast<uint64_t>(round);
    const uint64_t m = h.obj(r1, mirror, words * 8);
    Arena::put<int32_t>(m + h.L.mirror_size_offset, static_cast<int32_t>(words));
    mirror_bytes += words * 8;
    h.obj(r1, filler, 16);
  }
  for (int i = 0; i < 10; ++i) h.obj(r1, marker, 24);  // a run that reaches the hole
  // A TLAB's unformatted tail that happens to hold stale Marker objects.
  const uint64_t hole = h.top(r1);
  for (int i = 0; i < 100; ++i) h.obj(r1, marker, 24);
  h.L.holes = {{hole, h.top(r1)}};
  for (int i = 0; i < 10; ++i) h.obj(r1, marker, 24);
  // The region ends in a byte[] whose length runs past its top.
  const uint64_t last = h.array(r1, bytes, 4096, 0);
  h.set_top(r1, last + 64);
  auto r = h.walk();
  ASSERT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
  auto m = classes(r);
  uint64_t byte_bytes = 0;
  for (int i = 0; i < 500; ++i) byte_bytes += (16 + static_cast<uint64_t>(i % 40) + 7) & ~7ull;
  EXPECT_EQ(m["Marker"], std::make_pair(uint64_t{1520}, uint64_t{1520 * 24}));
  EXPECT_EQ(m["byte[]"], std::make_pair(uint64_t{1500}, 3 * byte_bytes));
  EXPECT_EQ(m["java.lang.Class"], std::make_pair(uint64_t{3}, mirror_bytes));
  EXPECT_EQ(m.count("jdk.internal.vm.FillerObject"), 0u);
  EXPECT_EQ(r.filler_bytes, 3u * 16);
  EXPECT_EQ(r.unparsed_bytes, 64u);
}

TEST(G1Heap, CorruptRegionEntriesAreSkippedNotFatal) {
  FakeG1 h;
  const uint32_t marker = h.klass("Marker", 24);
  const uint64_t good = h.region(2);
  for (int i = 0; i < 5; ++i) h.obj(good, marker, 24);
  const uint64_t bad = h.region(2);
  h.set_top(bad, 1);  // top below bottom
  const uint64_t wild = h.region(8);
  h.obj(wild, 0x7fffff00, 24);        // a klass that does not exist
  h.obj(wild, marker, 24);
  auto r = h.walk();
  EXPECT_EQ(classes(r)["Marker"].first, 6u) << r.reason;
  EXPECT_GT(r.unparsed_bytes, 0u);
}

TEST(G1Heap, SampledAboveTheBudgetAndDeadline) {
  FakeG1 h;
  const uint32_t marker = h.klass("Marker", 64);
  for (int i = 0; i < 8; ++i) {
    const uint64_t r = h.region(8);
    for (int j = 0; j < 1000; ++j) h.obj(r, marker, 64);
  }
  auto r = h.walk(2 * 64000);  // budget for two of the eight regions
  EXPECT_EQ(r.status, SnapshotStatus::kPartial);
  EXPECT_EQ(r.sample_stride, 4u);
  EXPECT_NE(r.reason.find("sampled walk: 1 of every 4 64 KiB windows"), std::string::npos) << r.reason;
  EXPECT_EQ(classes(r)["Marker"].first, 8000u);  // 2 regions read, scaled by 4
  EXPECT_NEAR(r.coverage, 0.25, 0.01);
  r = h.walk(1ull << 30, 0);
  EXPECT_EQ(r.status, SnapshotStatus::kPartial);
  EXPECT_NE(r.reason.find("deadline"), std::string::npos) << r.reason;
}

TEST(G1Heap, ImplausibleTableFails) {
  FakeG1 h;
  auto r = h.walk();  // no regions in use
  EXPECT_EQ(r.status, SnapshotStatus::kFailed);
  h.L.region_count = 0;
  JavaHeapLimits lim;
  RemoteMemory mem(getpid());
  ChunkCache c(mem, read_maps(getpid()));
  Deadline d{std::chrono::milliseconds(1000)};
  h.L.region_table = 0;
  r = walk_java_heap(c, h.L, lim, d);
  EXPECT_EQ(r.status, SnapshotStatus::kFailed);
  EXPECT_NE(r.reason.find("implausible"), std::string::npos);
}

// Where VMStructs names the generations' tags (JDK 9+), the regions in use
// are named by type: adjacent regions of one type make one run when the
// first is full; free regions and empty ones are in none; humongous
// regions are "humongous" whichever of the series they are.
TEST(G1Heap, RegionsInUseAreNamedByTypeInRuns) {
  FakeG1 h;
  h.L.region_spaces = true, h.L.tag_eden = 2, h.L.tag_survivor = 3, h.L.old_mask = 16;
  const uint32_t marker = h.klass("Marker", 24);
  auto s = h.series(4);
  const int32_t tags[] = {16, 16, 2, 16 | 32};  // old, old, eden, an archive region (old)
  for (size_t i = 0; i < s.size(); ++i) Arena::put<int32_t>(s[i] + h.L.region_tag, tags[i]);
  h.set_top(s[0], h.bottom(s[0]) + FakeG1::kGrain);  // full: the next old region extends its run
  for (int i = 0; i < 10; ++i) h.obj(s[1], marker, 24), h.obj(s[2], marker, 24), h.obj(s[3], marker, 24);
  const uint64_t surv = h.region(3);
  h.obj(surv, marker, 24);
  h.region(3);   // a survivor region with nothing in it: no run
  h.region(0);   // free
  const uint64_t odd = h.region(64);  // a tag none of the known ones
  h.obj(odd, marker, 24);
  auto r = h.walk();
  ASSERT_NE(r.status, SnapshotStatus::kFailed) << r.reason;
  std::map<std::string, uint64_t> bytes;
  std::map<std::string, int> runs;
  for (const HeapSpaceUse& u : r.spaces) bytes[u.name] += u.used.end - u.used.start, ++runs[u.name];
  EXPECT_EQ(bytes["old"], FakeG1::kGrain + 240 + 240);
  EXPECT_EQ(bytes["eden"], 240u);
  EXPECT_EQ(bytes["survivor"], 24u);
  EXPECT_EQ(bytes["other"], 24u);
  EXPECT_EQ(bytes.size(), 4u);
  // s[0] + s[1] one run; s[2] eden breaks it, so s[3] (old again) is another.
  EXPECT_EQ(runs["old"], 2);
  bool joined = false;
  for (const HeapSpaceUse& u : r.spaces)
    joined |= u.used.start == h.bottom(s[0]) && u.used.end == h.bottom(s[1]) + 240;
  EXPECT_TRUE(joined);
  uint64_t total = 0;
  for (const auto& [name, b] : bytes) total += b;
  EXPECT_EQ(total, r.used_bytes);
}

TEST(G1Heap, TheGenerationOfATagIsG1sOwn) {
  JavaHeapLayout L;  // JDK 17's tags (heapRegionType.hpp)
  L.tag_free = 0, L.tag_eden = 2, L.tag_survivor = 3, L.tag_starts_humongous = 12, L.tag_continues_humongous = 13;
  L.old_mask = 16;
  EXPECT_STREQ(g1_region_space(L, 2), "eden");
  EXPECT_STREQ(g1_region_space(L, 3), "survivor");
  EXPECT_STREQ(g1_region_space(L, 12), "humongous");
  EXPECT_STREQ(g1_region_space(L, 13), "humongous");
  EXPECT_STREQ(g1_region_space(L, 16), "old");
  EXPECT_STREQ(g1_region_space(L, 32 | 8 | 16), "old");      // open archive
  EXPECT_STREQ(g1_region_space(L, (32 | 8 | 16) + 1), "old");  // closed archive
  EXPECT_STREQ(g1_region_space(L, 8), "other");
  EXPECT_STREQ(g1_region_space(L, -1 & ~16), "other");
}

// JDK 8 describes no region types: a region whose first object is half a
// region or more is humongous, the regions that object covers are its
// continues-humongous ones (JDK 8 sets a series' first region's end and
// top to the series' end), and each region counts at most GrainBytes.
TEST(G1Heap, RegionsWithoutTypesAreToldByTheirObjects) {
  FakeG1 h;
  h.L.region_types = false;
  const uint32_t marker = h.klass("Marker", 24), bytes = h.klass("[B", FakeG1::array_lh(false, 0));
  const uint64_t first = h.region(0);
  for (int i = 0; i < 100; ++i) h.obj(first, marker, 24);
  h.region(0);  // empty (free): not a region in use
  auto s = h.series(3);
  const uint32_t big = 2 * FakeG1::kGrain + 4096;
  h.array(s[0], bytes, big, 0);
  const uint64_t big_bytes = (16 + big + 7) & ~7ull;
  h.set_end(s[0], h.bottom(s[0]) + 3 * FakeG1::kGrain);  // JDK 8: the series' end
  h.set_top(s[1], h.bottom(s[1]) + FakeG1::kGrain);
  h.set_top(s[2], h.bottom(s[0]) + big_bytes);
  const uint64_t one = h.region(0);
  const uint32_t half = FakeG1::kGrain / 2;
  h.array(one, bytes, half, 0);  // humongous in one region
  const uint64_t last = h.region(0);
  for (int i = 0; i < 50; ++i) h.obj(last, marker, 24);
  auto r = h.walk();
  ASSERT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
  auto m = classes(r);
  EXPECT_EQ(m["Marker"], std::make_pair(uint64_t{150}, uint64_t{150 * 24}));
  const uint64_t half_bytes = (16 + half + 7) & ~7ull;
  EXPECT_EQ(m["byte[]"], std::make_pair(uint64_t{2}, big_bytes + half_bytes));
  EXPECT_EQ(r.humongous_objects, 2u);
  EXPECT_EQ(r.humongous_bytes, big_bytes + half_bytes);
  EXPECT_EQ(r.regions, 6u);
  EXPECT_EQ(r.used_bytes, 150 * 24 + big_bytes + half_bytes);
  EXPECT_EQ(r.unparsed_bytes, 0u);
  EXPECT_DOUBLE_EQ(r.coverage, 1.0);
}

// Without region types, a humongous object is one of half a region or more
// that ends at its region's top: a stale header of one at the bottom of a
// region in use for allocation (its top elsewhere) is not counted.
TEST(G1Heap, RegionsWithoutTypesNeedTheHumongousObjectToEndAtTheTop) {
  FakeG1 h;
  h.L.region_types = false;
  const uint32_t marker = h.klass("Marker", 24), bytes = h.klass("[B", FakeG1::array_lh(false, 0));
  const uint64_t reused = h.region(0);
  h.array(reused, bytes, FakeG1::kGrain / 2, 0);
  h.set_top(reused, h.bottom(reused) + 4096);
  const uint64_t next = h.region(0);
  for (int i = 0; i < 10; ++i) h.obj(next, marker, 24);
  auto r = h.walk();
  EXPECT_EQ(r.humongous_objects, 0u);
  EXPECT_EQ(classes(r).count("byte[]"), 0u) << r.reason;
  EXPECT_EQ(classes(r)["Marker"].first, 10u);
  EXPECT_EQ(r.unparsed_bytes, 4096u);
}

// Without region types a region's end may lie past GrainBytes (a humongous
// series' first region); one whose first object is not humongous is still
// walked for GrainBytes only, and one claiming to end past the whole table
// is not a region.
TEST(G1Heap, RegionsWithoutTypesAreNeverWalkedPastTheGrain) {
  FakeG1 h;
  h.L.region_types = false;
  const uint32_t marker = h.klass("Marker", 24);
  auto s = h.series(4);
  const uint64_t per_region = FakeG1::kGrain / 24;
  for (uint64_t i = 0; i < 4 * per_region; ++i) h.obj(s[0], marker, 24);
  h.set_end(s[0], h.top(s[0]));  // 4 regions' worth claimed by the first
  auto wide = h.region(0);
  for (int i = 0; i < 10; ++i) h.obj(wide, marker, 24);
  h.set_end(wide, h.bottom(wide) + (uint64_t{1} << 40));
  h.set_top(wide, h.bottom(wide) + (uint64_t{1} << 40));
  auto r = h.walk();
  EXPECT_EQ(classes(r)["Marker"].first, per_region) << r.reason;
  EXPECT_EQ(r.regions, 1u);
  EXPECT_LE(r.used_bytes, FakeG1::kGrain);
}

// --- Offsets and sizes from a hostile target (the security issue) ----------

// Klass::_name comes from the target: 200 bytes into the Klass is a legal
// place for it (Klass is bigger than that), and the walk must read the klass
// record at that size; it once read it into a 32-byte stack buffer.
TEST(G1Heap, KlassFieldsAnywhereInsideTheKlassAreRead) {
  FakeG1 h;
  h.L.klass_name = 200, h.L.klass_layout_helper = 240;
  const uint32_t marker = h.klass("Marker", 24);
  const uint64_t r1 = h.region(2);
  for (int i = 0; i < 10; ++i) h.obj(r1, marker, 24);
  auto r = h.walk();
  ASSERT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
  EXPECT_EQ(classes(r)["Marker"], std::make_pair(uint64_t{10}, uint64_t{240}));
}

// The HeapRegion fields may lie in any order: the region record is read at
// the size of its farthest field (it was sized from _tag and _top only, and
// _bottom/_end were read past it).
TEST(G1Heap, RegionFieldsAreReadInsideTheRecord) {
  FakeG1 h;
  h.L.region_tag = 0, h.L.region_top = 8, h.L.region_bottom = 200, h.L.region_end = 208;
  const uint32_t marker = h.klass("Marker", 24);
  const uint64_t r1 = h.region(2);
  for (int i = 0; i < 10; ++i) h.obj(r1, marker, 24);
  auto r = h.walk();
  ASSERT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
  EXPECT_EQ(classes(r)["Marker"].first, 10u);
  EXPECT_EQ(r.regions, 1u);
}

// Offsets no HotSpot struct could hold are refused before the walk reads
// anything, with the field named.
TEST(G1Heap, LayoutOffsetsBeyondTheCapsAreRefused) {
  const std::pair<const char*, void (*)(JavaHeapLayout&)> cases[] = {
      {"Klass::_name", [](JavaHeapLayout& L) { L.klass_name = 0xfffffff0u; }},
      {"Klass::_layout_helper", [](JavaHeapLayout& L) { L.klass_layout_helper = 1u << 20; }},
      {"HeapRegion::_bottom", [](JavaHeapLayout& L) { L.region_bottom = 0xfffffffcu; }},
      {"HeapRegion::_end", [](JavaHeapLayout& L) { L.region_end = 1u << 20; }},
      {"HeapRegionType::_tag", [](JavaHeapLayout& L) { L.region_tag = 0xfffffffeu; }},
      {"Symbol::_length", [](JavaHeapLayout& L) { L.symbol_length = 0xffffffffu; }},
      {"markWord::klass_shift", [](JavaHeapLayout& L) { L.compact_headers = true, L.mark_klass_shift = 64; }},
      {"narrow klass shift", [](JavaHeapLayout& L) { L.narrow_klass_shift = 64; }},
      {"ObjectAlignmentInBytes", [](JavaHeapLayout& L) { L.object_alignment = 12; }},
      {"GrainBytes", [](JavaHeapLayout& L) { L.grain_bytes = 3 << 20; }},
      {"InstanceKlass::_misc_flags", [](JavaHeapLayout& L) { L.instance_misc_flags = 0xffffffffu; }},
  };
  for (auto [what, spoil] : cases) {
    FakeG1 h;
    const uint32_t marker = h.klass("Marker", 24);
    h.obj(h.region(2), marker, 24);
    spoil(h.L);
    auto r = h.walk();
    EXPECT_EQ(r.status, SnapshotStatus::kFailed) << what;
    EXPECT_NE(r.reason.find(what), std::string::npos) << what << ": " << r.reason;
  }
}

// A region record is believed only as large as a region: one whose end lies
// 1 TiB above its bottom was walked to its top, resynchronising 8 bytes at a
// time through unmapped memory, one failed read each (the fuzzer's slow unit).
// The deadline is far: the walk must end on the region size alone.
TEST(G1Heap, RegionsLargerThanTheGrainAreNotWalked) {
  FakeG1 h;
  const uint32_t marker = h.klass("Marker", 24);
  const uint64_t good = h.region(2);
  for (int i = 0; i < 10; ++i) h.obj(good, marker, 24);
  const uint64_t huge = h.region(2);
  for (int i = 0; i < 10; ++i) h.obj(huge, marker, 24);
  h.set_end(huge, h.bottom(huge) + (1ull << 40));
  h.set_top(huge, h.bottom(huge) + (1ull << 39));
  const auto t0 = std::chrono::steady_clock::now();
  auto r = h.walk(1ull << 30, 60000);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
  EXPECT_EQ(classes(r)["Marker"].first, 10u) << r.reason;
  EXPECT_EQ(r.regions, 1u);
}

// A region whose memory cannot be read is given up at the first failed read
// (reported unparsed), not stepped through 8 bytes at a time.
TEST(G1Heap, UnreadableRegionIsGivenUpAtTheFirstFailedRead) {
  FakeG1 h;
  const uint32_t marker = h.klass("Marker", 24);
  const uint64_t good = h.region(2);
  for (int i = 0; i < 10; ++i) h.obj(good, marker, 24);
  const uint64_t gone = h.region(2);
  h.set_top(gone, h.bottom(gone) + FakeG1::kGrain);
  ASSERT_EQ(mprotect(reinterpret_cast<void*>(h.bottom(gone)), FakeG1::kGrain, PROT_NONE), 0);
  auto r = h.walk(1ull << 30, 60000);
  EXPECT_EQ(classes(r)["Marker"].first, 10u) << r.reason;
  EXPECT_EQ(r.unparsed_bytes, FakeG1::kGrain);
  EXPECT_LT(h.last_syscalls, 100u);
}

// Resynchronising through a region of garbage notices the deadline.
TEST(G1Heap, DeadlineEndsAResynchronisation) {
  FakeG1 h;
  h.klass("Marker", 24);
  const uint64_t junk = h.region(8);
  std::memset(reinterpret_cast<void*>(h.bottom(junk)), 0xAB, FakeG1::kGrain);
  h.set_top(junk, h.bottom(junk) + FakeG1::kGrain);
  auto r = h.walk(1ull << 30, 0);
  EXPECT_EQ(r.status, SnapshotStatus::kPartial);
  EXPECT_NE(r.reason.find("deadline"), std::string::npos) << r.reason;
  EXPECT_LT(r.unparsed_bytes, FakeG1::kGrain);
}

// A region table of 2M entries that all point at unreadable memory: the scan
// ends after a few failed reads, not 2M of them (the 16 MiB table itself
// costs one read per 4 KiB chunk of the test's cache).
TEST(G1Heap, UnreadableRegionRecordsEndTheTableScan) {
  FakeG1 h;
  const uint64_t n = 1u << 21;
  const uint64_t table = h.a_.alloc(8 * n);
  for (uint64_t i = 0; i < n; ++i) Arena::put<uint64_t>(table + 8 * i, 0x1000 + 8 * i);
  h.L.region_table = table;
  h.L.region_count = n;
  auto r = h.walk(1ull << 30, 60000);
  EXPECT_EQ(r.status, SnapshotStatus::kFailed);
  EXPECT_NE(r.reason.find("unreadable"), std::string::npos) << r.reason;
  EXPECT_LT(h.last_syscalls, 8 * n / 4096 + 200);
}

// The fuzzer's slow unit (tests/fuzz/fuzz_java_heap.cpp found it in an 8-minute
// run): the G1 walk of this 273-byte image ran for more than 12 minutes.
TEST(G1Heap, FuzzSlowUnitFinishesFast) {
  static const uint8_t kSlowUnit[] = {
    0x0a, 0xb0, 0xb0, 0xb0, 0xb0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x30, 0x30,
    0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30,
    0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30,
    0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x37, 0x39,
    0x38, 0x36, 0x35, 0x32, 0x34, 0x34, 0x2b, 0x16, 0x33, 0x33, 0x79, 0x7a, 0x00, 0x00, 0x30, 0x61,
    0x00, 0x00, 0x33, 0x33, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xff, 0x48, 0xb0, 0x90, 0xb0, 0xb0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x09, 0x00, 0xff, 0xff,
    0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33,
    0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x2b, 0x16, 0x33,
    0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x33, 0x00, 0x20, 0x00, 0x00, 0x00,
    0x20, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x32, 0xb0, 0x90, 0xb0, 0xb0, 0xff, 0xff, 0xff,
    0xff, 0xff, 0xff, 0x09, 0x00, 0xff, 0xff, 0xbf, 0xfc, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xe3,
    0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7a,
    0xff, 0x09, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xff, 0xff, 0xff, 0xff, 0xff, 0x7a, 0xff, 0x09, 0x00, 0xff, 0xff, 0xff, 0x51, 0x2e, 0xd9, 0x00,
    0x70, 0x62, 0xff, 0xff, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x0a, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0a, 0xb0, 0xb0, 0xb0, 0xb0, 0x33, 0x33, 0x33,
    0xb0,
  };
  static_assert(sizeof kSlowUnit == 273);
  const auto t0 = std::chrono::steady_clock::now();
  LLVMFuzzerTestOneInput(kSlowUnit, sizeof kSlowUnit);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(500));
}
