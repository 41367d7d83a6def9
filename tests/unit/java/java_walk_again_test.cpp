// A walk brought up to date after young collections (JavaHeapWalker::
// walk_young_again) against a whole new walk of the same heap image, and
// what refuses it; and the loop that walks again while collections overlap
// (walk_between_collections): its counters and its one read budget.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <thread>

#include "java/walk_between_collections.h"
#include "java_heap_images.h"

using namespace oomsnap;
using namespace oomsnap::java_test;

namespace {

constexpr int32_t kEden = 2, kSurvivor = 3, kOld = 16;

// A G1 heap with named region types: an old region holding many Markers,
// a humongous array, an eden and a survivor region of Nodes.
struct YoungAndOld {
  FakeG1 h;
  uint32_t marker, node, fresh, bytes;
  uint64_t old, big, eden, survivor;
  YoungAndOld() {
    h.L.region_spaces = true, h.L.tag_eden = kEden, h.L.tag_survivor = kSurvivor, h.L.old_mask = kOld;
    marker = h.klass("Marker", 24), node = h.klass("Node", 32), fresh = h.klass("Fresh", 40);
    bytes = h.klass("[B", FakeG1::array_lh(false, 0));
    old = h.region(kOld);
    for (int i = 0; i < 30000; ++i) h.obj(old, marker, 24);  // 720,000 bytes
    big = h.region(h.L.tag_starts_humongous);
    h.array(big, bytes, FakeG1::kGrain / 2, 0);
    eden = h.region(kEden);
    for (int i = 0; i < 50; ++i) h.obj(eden, node, 32);
    survivor = h.region(kSurvivor);
    for (int i = 0; i < 20; ++i) h.obj(survivor, node, 32);
    h.table();
  }
  // What one young pause does: eden's survivors go to the survivor region
  // (refilled from its bottom) and, the older ones, to the end of the old
  // region and to a new old region; eden is refilled by the mutator.
  void young_collection() {
    h.set_top(survivor, h.bottom(survivor));
    for (int i = 0; i < 10; ++i) h.obj(survivor, node, 32);
    for (int i = 0; i < 15; ++i) h.obj(old, node, 32);
    const uint64_t promoted = h.region(kOld);
    for (int i = 0; i < 5; ++i) h.obj(promoted, node, 32);
    h.table();  // the new region in the table
    h.set_top(eden, h.bottom(eden));
    for (int i = 0; i < 30; ++i) h.obj(eden, fresh, 40);
  }
};

// One walker over a heap image, as the collector keeps it between walks.
struct Walking {
  RemoteMemory mem{getpid()};
  ChunkCache cache = cache_of_self(mem);
  Deadline deadline = no_deadline();
  JavaHeapWalker walker;
  // G1: the heap's region table built first (FakeG1::table).
  explicit Walking(FakeG1& h) : walker(cache, h.L, h.limits, deadline) {}
  std::optional<JavaHeapWalk> again() {
    cache.forget_contents();  // as the collector does: the bytes changed
    return walker.walk_young_again();
  }
};

void expect_same_walk(const JavaHeapWalk& a, const JavaHeapWalk& b) {
  EXPECT_EQ(a.status, b.status) << a.reason << " / " << b.reason;
  EXPECT_EQ(classes(a), classes(b));
  EXPECT_EQ(a.objects, b.objects);
  EXPECT_EQ(a.class_count, b.class_count);
  EXPECT_EQ(a.regions, b.regions);
  EXPECT_EQ(a.regions_walked, b.regions_walked);
  EXPECT_EQ(a.used_bytes, b.used_bytes);
  EXPECT_EQ(a.parsed_bytes, b.parsed_bytes);
  EXPECT_EQ(a.unparsed_bytes, b.unparsed_bytes);
  EXPECT_EQ(a.humongous_objects, b.humongous_objects);
  EXPECT_EQ(a.humongous_bytes, b.humongous_bytes);
  EXPECT_EQ(a.spaces.size(), b.spaces.size());
}

}  // namespace

// After a young pause, the walk brought up to date counts what a whole new
// walk counts, without reading the old region's 720,000 bytes again.
TEST(JavaWalkAgain, AfterAYoungPauseG1sWalkIsBroughtUpToDateAtTheCostOfTheYoungRegions) {
  YoungAndOld x;
  Walking w(x.h);
  const JavaHeapWalk first = w.walker.walk();
  ASSERT_EQ(first.status, SnapshotStatus::kComplete) << first.reason;
  EXPECT_EQ(classes(first)["Marker"].first, 30000u);
  EXPECT_EQ(classes(first)["Node"].first, 70u);
  x.young_collection();
  const uint64_t read0 = w.mem.bytes_read();
  const auto again = w.again();
  const uint64_t read = w.mem.bytes_read() - read0;
  ASSERT_TRUE(again.has_value());
  const JavaHeapWalk fresh = x.h.walk();
  ASSERT_EQ(fresh.status, SnapshotStatus::kComplete) << fresh.reason;
  expect_same_walk(*again, fresh);
  EXPECT_EQ(classes(*again)["Marker"].first, 30000u);
  EXPECT_EQ(classes(*again)["Node"].first, 30u);  // 10 survivors, 20 promoted
  EXPECT_EQ(classes(*again)["Fresh"].first, 30u);
  EXPECT_LT(read, 100000u) << "the old region was read again";
  // And again after the next pause, from the new checkpoint.
  x.young_collection();
  const auto third = w.again();
  ASSERT_TRUE(third.has_value());
  expect_same_walk(*third, x.h.walk());
}

// What a young collection never does, and a mixed or full one does: the
// walk is then not brought up to date but done afresh by a new walker.
TEST(JavaWalkAgain, AnOldRegionOrHumongousObjectNotAsWalkedRefusesIt) {
  auto after = [](const std::function<void(YoungAndOld&)>& change) {
    YoungAndOld x;
    Walking w(x.h);
    EXPECT_EQ(w.walker.walk().status, SnapshotStatus::kComplete);
    x.young_collection();
    change(x);
    return w.again().has_value();
  };
  EXPECT_TRUE(after([](YoungAndOld&) {}));
  // Evacuated by a mixed pause: free, or young again.
  EXPECT_FALSE(after([](YoungAndOld& x) { Arena::put<int32_t>(x.old + x.h.L.region_tag, x.h.L.tag_free); }));
  EXPECT_FALSE(after([](YoungAndOld& x) { Arena::put<int32_t>(x.old + x.h.L.region_tag, kEden); }));
  // Compacted: its top below where it was walked to.
  EXPECT_FALSE(after([](YoungAndOld& x) { x.h.set_top(x.old, x.h.bottom(x.old) + 24 * 100); }));
  // A humongous object reclaimed.
  EXPECT_FALSE(after([](YoungAndOld& x) { Arena::put<int32_t>(x.big + x.h.L.region_tag, x.h.L.tag_free); }));
}

// A sampled walk is never brought up to date (its windows are spread over
// every region), nor a walk when the heap is now to be sampled.
TEST(JavaWalkAgain, ASampledWalkIsDoneAfresh) {
  YoungAndOld x;
  x.h.limits.max_walk_bytes = 64 << 10;
  Walking w(x.h);
  EXPECT_GT(w.walker.walk().sample_stride, 1u);
  x.young_collection();
  EXPECT_FALSE(w.again().has_value());
}

// Serial (and Parallel): the old space is the stable part; eden, from and
// to are walked afresh, and what was promoted is walked at the old space's end.
TEST(JavaWalkAgain, AfterAYoungCollectionSerialsWalkIsBroughtUpToDate) {
  FakeG1 h;
  const uint32_t marker = h.klass("Marker", 24), node = h.klass("Node", 32);
  const uint64_t eden = h.region(2), from = h.region(2), to = h.region(2), old = h.region(2);
  for (int i = 0; i < 20000; ++i) h.obj(old, marker, 24);
  for (int i = 0; i < 40; ++i) h.obj(eden, node, 32);
  for (int i = 0; i < 8; ++i) h.obj(from, node, 32);
  use_spaces(h, HeapKind::kSerial, {{"eden", eden}, {"from", from}, {"to", to}, {"old", old}});
  Walking w(h);
  ASSERT_EQ(w.walker.walk().status, SnapshotStatus::kComplete);
  // Survivors copied to `to`, the older ones promoted, eden and from emptied.
  for (int i = 0; i < 6; ++i) h.obj(to, node, 32);
  for (int i = 0; i < 3; ++i) h.obj(old, node, 32);
  h.set_top(eden, h.bottom(eden)), h.set_top(from, h.bottom(from));
  for (int i = 0; i < 12; ++i) h.obj(eden, marker, 24);
  const uint64_t read0 = w.mem.bytes_read();
  const auto again = w.again();
  ASSERT_TRUE(again.has_value());
  EXPECT_LT(w.mem.bytes_read() - read0, 100000u) << "the old space was read again";
  expect_same_walk(*again, h.walk());
  EXPECT_EQ(classes(*again)["Marker"].first, 20012u);
  EXPECT_EQ(classes(*again)["Node"].first, 9u);
  // A full collection compacted the old space below where it was walked.
  h.set_top(old, h.bottom(old) + 24 * 1000);
  EXPECT_FALSE(w.again().has_value());
}

TEST(JavaWalkAgain, OnlyYoungCollectionsAreToldByTheFullCollectionCounter) {
  const CollectionCounts at{10, 3, 5};
  for (HeapKind kind : {HeapKind::kSerial, HeapKind::kParallel}) {
    EXPECT_TRUE(only_young_collections_between(kind, at, {11, 3, 5}));
    EXPECT_TRUE(only_young_collections_between(kind, at, {17, 3, 5}));   // any number of young ones
    EXPECT_FALSE(only_young_collections_between(kind, at, {12, 4, 5}));  // a full one among them
    EXPECT_FALSE(only_young_collections_between(kind, {10, std::nullopt, 5}, {11, std::nullopt, 5}));  // no counters
    EXPECT_TRUE(only_young_collections_between(kind, {10, 3, std::nullopt}, {11, 3, std::nullopt}));  // not G1's
  }
  EXPECT_TRUE(only_young_collections_between(HeapKind::kG1, at, {11, 3, 5}));
  EXPECT_FALSE(only_young_collections_between(HeapKind::kG1, at, {12, 3, 5}));  // two pauses
  EXPECT_FALSE(only_young_collections_between(HeapKind::kG1, at, {11, 4, 5}));
  // A remark or cleanup pause freed empty old regions, which the pause could reuse.
  EXPECT_FALSE(only_young_collections_between(HeapKind::kG1, at, {11, 3, 6}));
  EXPECT_FALSE(only_young_collections_between(HeapKind::kG1, {10, 3, std::nullopt}, {11, 3, std::nullopt}));
  EXPECT_TRUE(only_young_collections_between(HeapKind::kSerial, {UINT32_MAX, 3, 5}, {2, 3, 5}));  // the u32 wraps
}

// A counter that moves all the time (a JVM collecting without pause, or one
// made to look so) gets one more whole walk out of the read budget, not
// kMaxHeapWalks: every walk reads from one budget of twice a walk's.
TEST(JavaWalkAgain, ACounterThatAlwaysMovesCostsOneMoreWalkAtMost) {
  FakeG1 h;
  const uint32_t marker = h.klass("Marker", 24);
  for (int r = 0; r < 4; ++r) {
    const uint64_t hr = h.region(2);
    for (int i = 0; i < 40000; ++i) h.obj(hr, marker, 24);  // 960,000 bytes each
  }
  h.table();
  FakeVm v = generic_vm(20, 20);  // tables of a plausible size, describing no threads: no TLABs
  std::string err;
  auto vm = read_fake_vm(v, err);
  ASSERT_TRUE(vm) << err;
  // The "CollectedHeap": a counter at 0 that a thread bumps, never busy.
  struct {
    std::atomic<uint32_t> collections{0};
    uint8_t active = 0;
  } heap;
  std::atomic<bool> stop{false};
  std::thread bumper([&] {
    while (!stop) {
      ++heap.collections;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  });
  CollectionCounters counters;
  counters.heap = reinterpret_cast<uint64_t>(&heap);
  counters.collections = reinterpret_cast<uint64_t>(&heap.collections) - counters.heap;
  counters.active = reinterpret_cast<uint64_t>(&heap.active) - counters.heap;
  RemoteMemory mem(getpid());
  ChunkCache cache = cache_of_self(mem);
  Deadline deadline = no_deadline();
  auto walks = walk_between_collections(mem, cache, *vm, counters, h.L, h.limits, 5u << 20, deadline, err);
  stop = true;
  bumper.join();
  ASSERT_TRUE(walks) << err;
  EXPECT_EQ(walks->walk.status, SnapshotStatus::kComplete) << walks->walk.reason;
  EXPECT_TRUE(walks->moved);
  EXPECT_EQ(walks->young_walks, 0u);  // no full-collection counter: never only young
  EXPECT_EQ(walks->walks, 2u) << "a budget per walk would allow " << kMaxHeapWalks;
}
