// The Java heap walk's classes (java_heap_images.h): only the top ones are
// named, exactly as Snapshot::sort_and_truncate would choose them; hidden and
// anonymous classes named as jcmd names them; the klass cap; a class whose
// name no longer reads by the end of the walk.

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "java_heap_images.h"

using namespace oomsnap;
using namespace oomsnap::java_test;

// --- Many classes: only the top ones named; the klass cap --------------------

namespace {

// The walk's classes as the collector turns them into entries, and the
// same list cut by Snapshot::sort_and_truncate itself: the reference order.
Snapshot as_snapshot(const JavaHeapWalk& r, size_t max_entries) {
  Snapshot s;
  for (const auto& c : r.classes) s.entries.push_back({"object_type", c.name, c.bytes, c.objects, {}, {}});
  s.sort_and_truncate(max_entries);
  return s;
}

std::vector<std::tuple<std::string, uint64_t, uint64_t>> rows(const JavaHeapWalk& r) {
  std::vector<std::tuple<std::string, uint64_t, uint64_t>> v;
  for (const auto& c : r.classes) v.emplace_back(c.name, c.bytes, c.objects);
  return v;
}
std::vector<std::tuple<std::string, uint64_t, uint64_t>> rows(const Snapshot& s) {
  std::vector<std::tuple<std::string, uint64_t, uint64_t>> v;
  for (const auto& e : s.entries) v.emplace_back(e.name, e.bytes, e.objects);
  return v;
}

}  // namespace

// 600 classes, many tied on (bytes, objects) and met out of name order: the
// walk names only the top N, and they are exactly the first N of the whole
// list as Snapshot::sort_and_truncate orders and cuts it, at every N (the
// boundary falling inside runs of ties); class_count counts them all.
TEST(G1Heap, OnlyTheTopClassesAreNamedExactlyAsSortAndTruncateWould) {
  FakeG1 h;
  constexpr int kClasses = 600;
  uint64_t hr = h.region(2);
  for (int i = 0; i < kClasses; ++i) {
    // Names in an order unrelated to the counts; 5 sizes x 4 counts: ~30 classes per tie.
    const int id = (i * 7919) % kClasses;
    const uint32_t k = h.klass("C" + std::to_string(1000 + id), 16 + 8 * (i % 5));
    if (h.top(hr) + 4 * 48 > h.bottom(hr) + FakeG1::kGrain) hr = h.region(2);
    for (int j = 0; j <= i % 4; ++j) h.obj(hr, k, 16 + 8 * (i % 5));
  }
  auto all = h.walk();
  ASSERT_EQ(all.status, SnapshotStatus::kComplete) << all.reason;
  ASSERT_EQ(all.class_count, uint64_t{kClasses});
  ASSERT_EQ(all.classes.size(), size_t{kClasses});
  for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{29}, size_t{30}, size_t{31}, size_t{64}, size_t{599},
                   size_t{600}, size_t{601}}) {
    h.limits.max_entries = n;
    auto top = h.walk();
    ASSERT_EQ(top.status, SnapshotStatus::kComplete) << top.reason;
    EXPECT_EQ(top.class_count, uint64_t{kClasses}) << n;
    const Snapshot want = as_snapshot(all, n);
    EXPECT_EQ(rows(top), rows(want)) << "top " << n;
    // What the collector reports as output_truncated.
    EXPECT_EQ(top.class_count > top.classes.size(), want.output_truncated) << n;
  }
}

// The boundary rule by hand: the 5th entry falls among 40 classes tied on
// bytes and objects; the first of them by name fill the last three places,
// whatever order they were met in.
TEST(G1Heap, ClassesTiedAtTheLastEntryAreChosenByName) {
  FakeG1 h;
  const uint64_t hr = h.region(2);
  auto add = [&](const std::string& name, uint64_t size, int count) {
    const uint32_t k = h.klass(name, static_cast<int32_t>(size));
    for (int j = 0; j < count; ++j) h.obj(hr, k, size);
  };
  add("Small", 16, 1);
  for (int i = 0; i < 40; ++i) {
    const int id = (i * 17 + 11) % 40;  // met out of name order
    add("Tie$" + std::string(id < 10 ? "0" : "") + std::to_string(id), 32, 3);
    if (i == 20) add("Big1", 64, 3);
  }
  add("Big2", 64, 4);
  h.limits.max_entries = 5;
  auto r = h.walk();
  ASSERT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
  EXPECT_EQ(r.class_count, 43u);
  using Row = std::tuple<std::string, uint64_t, uint64_t>;
  EXPECT_EQ(rows(r), (std::vector<Row>{{"Big2", 256, 4}, {"Big1", 192, 3}, {"Tie$00", 96, 3}, {"Tie$01", 96, 3},
                                       {"Tie$02", 96, 3}}));
}

// Hidden classes are named as jcmd names them: the walk tells them by their
// own address in HotSpot's suffix (an array's, by its bottom klass's), or by
// lying in a CDS archive; a '+' in any other class's name is kept.
TEST(G1Heap, HiddenClassesAreNamedAsJcmdNamesThem) {
  for (bool archive : {false, true}) {
    FakeG1 h;
    h.L.objarray_bottom_klass = 200;
    auto hex = [](uint64_t v) {
      char b[24];
      std::snprintf(b, sizeof b, "0x%016llx", static_cast<unsigned long long>(v));
      return std::string(b);
    };
    const uint64_t hr = h.region(2);
    const std::string lambda = "p/Foo$$Lambda+" + hex(h.next_klass());
    const uint32_t lam = h.klass(lambda, 16);
    const uint32_t lam_array = h.klass("[L" + lambda + ";", FakeG1::array_lh(true, 2));
    Arena::put<uint64_t>(h.klass_area() + lam_array + 200, h.klass_area() + lam);
    // Named as if hidden, but with another klass's address: ordinary.
    const uint32_t other = h.klass("p/Other+" + hex(h.klass_area() + lam), 24);
    const uint32_t other_array = h.klass("[Lp/Other+" + hex(h.klass_area() + lam) + ";", FakeG1::array_lh(true, 2));
    Arena::put<uint64_t>(h.klass_area() + other_array + 200, h.klass_area() + other);
    // A static CDS dump's counter: hidden only in an archive.
    const uint32_t archived = h.klass("p/Bar$$Lambda+0x800000029", 32);
    const uint32_t plus = h.klass("p/A+B", 40);
    if (archive) h.L.archive_ranges = {{h.klass_area(), h.klass_area() + FakeG1::kKlassArea}};
    for (uint32_t k : {lam, other, archived, plus}) h.obj(hr, k, k == lam ? 16 : k == other ? 24 : k == archived ? 32 : 40);
    h.array(hr, lam_array, 3, 2);
    h.array(hr, other_array, 5, 2);
    auto r = h.walk();
    ASSERT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
    auto m = classes(r);
    const std::string shown = "p.Foo$$Lambda/" + hex(h.klass_area() + lam);
    EXPECT_EQ(m[shown], std::make_pair(uint64_t{1}, uint64_t{16})) << archive;
    EXPECT_EQ(m[shown + "[]"], std::make_pair(uint64_t{1}, uint64_t{32})) << archive;
    EXPECT_EQ(m["p.A+B"], std::make_pair(uint64_t{1}, uint64_t{40})) << archive;
    EXPECT_EQ(m[archive ? "p.Bar$$Lambda/0x800000029" : "p.Bar$$Lambda+0x800000029"],
              std::make_pair(uint64_t{1}, uint64_t{32}));
    // In the archive any suffix of the dump's form is the dump's name.
    const std::string o = "p.Other" + std::string(archive ? "/" : "+") + hex(h.klass_area() + lam);
    EXPECT_EQ(m[o], std::make_pair(uint64_t{1}, uint64_t{24})) << archive;
    EXPECT_EQ(m[o + "[]"], std::make_pair(uint64_t{1}, uint64_t{40})) << archive;
    EXPECT_EQ(m.size(), 6u) << archive;
  }
}

// JDK 9-15 name a VM-anonymous class (a lambda's) by its Symbol plus "/" and
// the InstanceKlass's address, which is how jcmd prints it; the flag is
// InstanceKlass::_misc_flags' _misc_is_anonymous bit. Arrays of one keep
// the plain name (Klass::external_name() adds the address to instance
// classes only).
TEST(G1Heap, AnonymousClassesAreNamedWithTheirAddress) {
  FakeG1 h;
  h.L.instance_misc_flags = 208, h.L.misc_is_anonymous = 32;
  const uint64_t hr = h.region(2);
  const uint32_t lam = h.klass("p/Foo$$Lambda$14", 16), plain = h.klass("p/Plain", 24);
  const uint32_t lam_array = h.klass("[Lp/Foo$$Lambda$14;", FakeG1::array_lh(true, 2));
  Arena::put<uint16_t>(h.klass_area() + lam + 208, 32 | 4);
  Arena::put<uint16_t>(h.klass_area() + plain + 208, 4 | 8);
  Arena::put<uint16_t>(h.klass_area() + lam_array + 208, 32);  // not an instance klass: not read
  h.obj(hr, lam, 16), h.obj(hr, plain, 24);
  h.array(hr, lam_array, 3, 2);
  auto r = h.walk();
  ASSERT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
  char name[80];
  std::snprintf(name, sizeof name, "p.Foo$$Lambda$14/0x%016llx",
                static_cast<unsigned long long>(h.klass_area() + lam));
  auto m = classes(r);
  EXPECT_EQ(m[name], std::make_pair(uint64_t{1}, uint64_t{16}));
  EXPECT_EQ(m["p.Plain"], std::make_pair(uint64_t{1}, uint64_t{24}));
  EXPECT_EQ(m["p.Foo$$Lambda$14[]"], std::make_pair(uint64_t{1}, uint64_t{32}));
  EXPECT_EQ(m.size(), 3u);
}

// More distinct klasses than the cap (4 here; 2^20 in a real walk): the
// classes past it are not dropped silently; their objects are counted
// together, and the walk is partial naming the cap.
TEST(G1Heap, KlassCapReachedIsPartialAndCountsTheClassesPastIt) {
  FakeG1 h;
  const uint64_t hr = h.region(2);
  std::vector<uint32_t> k;
  for (const char* name : {"A", "B", "C", "D"}) k.push_back(h.klass(name, 24));
  const uint32_t e = h.klass("E", 32), f = h.klass("F", 40);
  for (uint32_t x : k)
    for (int j = 0; j < 10; ++j) h.obj(hr, x, 24);
  for (int j = 0; j < 5; ++j) h.obj(hr, e, 32), h.obj(hr, f, 40);
  for (int j = 0; j < 2; ++j) h.obj(hr, f, 40);
  for (int j = 0; j < 3; ++j) h.obj(hr, k[0], 24);  // a class inside the cap, met again after it filled
  h.limits.max_klasses = 4;
  auto r = h.walk();
  EXPECT_EQ(r.status, SnapshotStatus::kPartial);
  EXPECT_NE(r.reason.find("klass cap"), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("more than 4 distinct klasses"), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("12 objects (440 bytes)"), std::string::npos) << r.reason;
  EXPECT_TRUE(r.klass_cap_reached);
  EXPECT_EQ(r.past_cap_objects, 12u);
  EXPECT_EQ(r.past_cap_bytes, 5u * 32 + 7 * 40);
  EXPECT_EQ(r.class_count, 4u);
  auto m = classes(r);
  EXPECT_EQ(m.size(), 4u);
  EXPECT_EQ(m["A"], std::make_pair(uint64_t{13}, uint64_t{13 * 24}));
  EXPECT_EQ(m["D"], std::make_pair(uint64_t{10}, uint64_t{240}));
  EXPECT_EQ(r.objects, 55u);  // every object parsed and counted: none of them skipped as garbage
  EXPECT_EQ(r.unparsed_bytes, 0u);
  // Without the cap: complete, every class by name.
  h.limits = JavaHeapLimits{};
  r = h.walk();
  EXPECT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
  EXPECT_FALSE(r.klass_cap_reached);
  EXPECT_EQ(classes(r)["F"], std::make_pair(uint64_t{7}, uint64_t{280}));
  // A cap asked above the walk's own is the walk's own.
  h.limits.max_klasses = SIZE_MAX;
  EXPECT_EQ(h.walk().status, SnapshotStatus::kComplete);
}

// In a sampled walk the objects past the cap are scaled like every class's.
TEST(G1Heap, ObjectsPastTheKlassCapAreScaledInASampledWalk) {
  FakeG1 h;
  const uint32_t marker = h.klass("Marker", 64), other = h.klass("Other", 64);
  for (int i = 0; i < 8; ++i) {
    const uint64_t r = h.region(8);
    for (int j = 0; j < 500; ++j) h.obj(r, marker, 64);
    for (int j = 0; j < 500; ++j) h.obj(r, other, 64);
  }
  h.limits.max_klasses = 1;
  auto r = h.walk(2 * 64000);  // budget for two of the eight regions
  EXPECT_EQ(r.sample_stride, 4u);
  EXPECT_NE(r.reason.find("sampled walk"), std::string::npos) << r.reason;
  EXPECT_NE(r.reason.find("klass cap reached"), std::string::npos) << r.reason;
  EXPECT_EQ(classes(r)["Marker"].first, 4000u);
  EXPECT_EQ(r.past_cap_objects, 4000u);
  EXPECT_EQ(r.past_cap_bytes, 4000u * 64);
}

namespace {

// A heap whose region table, region record, two Klasses and their Symbols
// share one 4 KiB page P, and whose one region spans 16 pages: Victim's
// objects first, then Keeper's. A test reads P into a two-chunk cache, then
// changes P: the walk meets both klasses in P as cached (before the region's
// second page evicts it), and reads P afresh for their names at the end,
// the way a class unloaded during the walk reads by then.
struct OnePageHeap {
  static constexpr uint64_t kRecord = 256, kVictim = 1024, kKeeper = 1536, kVictimSym = 2048, kKeeperSym = 2560;
  OnePageHeap() {
    page = a.alloc(4096, 4096);
    heap = a.alloc(16 * 4096, 4096);
    auto klass = [&](uint64_t k, uint64_t sym, const std::string& name, int32_t lh) {
      Arena::put<int32_t>(page + k + 8, lh);
      Arena::put<uint64_t>(page + k + 24, page + sym);
      Arena::put<uint16_t>(page + sym + 4, static_cast<uint16_t>(name.size()));
      std::memcpy(reinterpret_cast<void*>(page + sym + 6), name.data(), name.size());
    };
    klass(kVictim, kVictimSym, "Victim", 24);
    klass(kKeeper, kKeeperSym, "Keeper", 32);
    uint64_t top = heap;
    auto obj = [&](uint32_t nk, uint64_t size) {
      Arena::put<uint64_t>(top, 1), Arena::put<uint32_t>(top + 8, nk);
      top += size;
    };
    for (int i = 0; i < 10; ++i) obj(kVictim, 24);
    while (top + 32 <= heap + 16 * 4096) obj(kKeeper, 32), ++keepers;
    Arena::put(page, page + kRecord);  // the region table: one region, then an uncommitted slot
    Arena::put(page + kRecord + 0, heap), Arena::put(page + kRecord + 8, heap + FakeG1::kGrain);
    Arena::put(page + kRecord + 16, top), Arena::put<int32_t>(page + kRecord + 24, 2);
    L.region_table = page, L.region_count = 2;
    L.grain_bytes = FakeG1::kGrain;
    L.region_bottom = 0, L.region_end = 8, L.region_top = 16, L.region_tag = 24;
    L.tag_free = 0, L.tag_starts_humongous = 4, L.tag_continues_humongous = 5;
    L.narrow_klass_base = page, L.narrow_klass_shift = 0;
    L.mirror_size_offset = 16;
  }
  // Walks through a two-chunk cache that read P before `change` ran.
  template <typename Change>
  JavaHeapWalk walk(Change change) {
    RemoteMemory mem(getpid());
    ChunkCache c(mem, read_maps(getpid()), 4096, 2 * 4096);
    uint8_t b = 0;
    EXPECT_TRUE(c.read(page, &b, 1));
    change();
    Deadline d{std::chrono::milliseconds(5000)};
    return walk_java_heap(c, L, JavaHeapLimits{}, d);
  }
  std::string placeholder(uint64_t klass) const {
    char buf[80];
    std::snprintf(buf, sizeof buf, "<unreadable class name: Klass 0x%llx>", static_cast<unsigned long long>(page + klass));
    return buf;
  }
  Arena a;
  uint64_t page = 0, heap = 0;
  uint64_t keepers = 0;
  JavaHeapLayout L;
};

}  // namespace

// A class whose name no longer reads at the end as it did when the walk met
// it (unloaded, its Klass reused by another class, or unmapped) keeps its
// counts under a placeholder naming the Klass; it is not dropped, and not
// given the other class's name.
TEST(G1Heap, ClassWhoseNameNoLongerReadsGetsAPlaceholder) {
  {
    OnePageHeap h;
    auto r = h.walk([&] {});  // unchanged: the names as read at first sight
    ASSERT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
    auto m = classes(r);
    EXPECT_EQ(m["Victim"], std::make_pair(uint64_t{10}, uint64_t{240}));
    EXPECT_EQ(m["Keeper"], std::make_pair(h.keepers, h.keepers * 32));
  }
  {
    // Victim's Symbol now spells another class's name.
    OnePageHeap h;
    auto r = h.walk([&] {
      const std::string other = "Another";
      Arena::put<uint16_t>(h.page + OnePageHeap::kVictimSym + 4, static_cast<uint16_t>(other.size()));
      std::memcpy(reinterpret_cast<void*>(h.page + OnePageHeap::kVictimSym + 6), other.data(), other.size());
    });
    ASSERT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
    EXPECT_EQ(r.class_count, 2u);
    auto m = classes(r);
    EXPECT_EQ(m.count("Another"), 0u);
    EXPECT_EQ(m.count("Victim"), 0u);
    EXPECT_EQ(m[h.placeholder(OnePageHeap::kVictim)], std::make_pair(uint64_t{10}, uint64_t{240}));
    EXPECT_EQ(m["Keeper"], std::make_pair(h.keepers, h.keepers * 32));
  }
  {
    // The page cannot be read any more: both names are placeholders.
    OnePageHeap h;
    auto r = h.walk([&] { ASSERT_EQ(mprotect(reinterpret_cast<void*>(h.page), 4096, PROT_NONE), 0); });
    mprotect(reinterpret_cast<void*>(h.page), 4096, PROT_READ | PROT_WRITE);
    EXPECT_EQ(r.class_count, 2u);
    auto m = classes(r);
    EXPECT_EQ(m[h.placeholder(OnePageHeap::kVictim)], std::make_pair(uint64_t{10}, uint64_t{240}));
    EXPECT_EQ(m[h.placeholder(OnePageHeap::kKeeper)], std::make_pair(h.keepers, h.keepers * 32));
  }
}

// A walk that used up the read budget still names its top classes when the
// caller leaves room for the names (JavaHeapLimits::name_read_limit, as the
// collector does); without it they are placeholders, not dropped.
TEST(G1Heap, NamesAreReadPastAnExhaustedWalkBudget) {
  FakeG1 h;
  const uint32_t marker = h.klass("Marker", 32);
  const uint64_t hr = h.region(2);
  for (int i = 0; i < 30000; ++i) h.obj(hr, marker, 32);  // ~940 KiB: far past the budget below
  h.table();
  for (bool room : {false, true}) {
    RemoteMemory mem(getpid());
    ChunkCache c(mem, read_maps(getpid()), 4096, 2 * 4096);
    c.set_read_limit(mem.bytes_read() + (128 << 10));
    h.limits.name_read_limit = room ? mem.bytes_read() + (16 << 20) : 0;
    auto r = h.walk_with(c);
    EXPECT_EQ(r.status, SnapshotStatus::kPartial) << room;
    EXPECT_NE(r.reason.find("read budget"), std::string::npos) << r.reason;
    ASSERT_EQ(r.classes.size(), 1u) << room;
    EXPECT_GT(r.classes[0].objects, 1000u);
    EXPECT_LT(r.classes[0].objects, 30000u);
    if (room)
      EXPECT_EQ(r.classes[0].name, "Marker");
    else
      EXPECT_EQ(r.classes[0].name.rfind("<unreadable class name: Klass 0x", 0), 0u) << r.classes[0].name;
  }
}
