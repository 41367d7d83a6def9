// The CPython heap walker on byte images built in this process's own memory
// (read back through process_vm_readv on ourselves), laid out as 3.11 does:
// well-formed heaps, corrupted links, cycles, garbage types and caps.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/chunk_cache.h"
#include "python/python_heap.h"
#include "python/python_layout.h"
#include "python/python_walker.h"

using namespace oomsnap;

namespace {

constexpr uint64_t kHaveGc = 1ull << 14, kListSub = 1ull << 25, kHeapType = 1ull << 9;

// A fake interpreter: _PyRuntime -> one PyInterpreterState whose GC state
// has four empty circular lists; types and objects are added on demand.
class FakeHeap {
 public:
  explicit FakeHeap(uint32_t version = 0x030b02f0) : L(*python_layout_for(version)) {
    runtime_ = alloc(L.runtime_gc + 256);
    interp_ = alloc(L.interp_gc + 256);
    put(runtime_ + L.interpreters_head, interp_);
    const uint64_t gc = gc_state();
    for (uint32_t off : L.gc_head_sets[0]) put(gc + off, gc + off), put(gc + off + 8, gc + off);
    put(gc + L.gc_generation0, gc + L.gc_head_sets[0][0]);
  }
  ~FakeHeap() {
    for (auto& [p, n] : blocks_) munmap(p, n);
  }

  uint64_t type(const std::string& name, uint64_t basicsize, uint64_t itemsize, uint64_t flags) {
    const uint64_t t = alloc(L.type_read_size + 64);
    const uint64_t s = alloc(name.size() + 1);
    std::memcpy(reinterpret_cast<void*>(s), name.c_str(), name.size() + 1);
    put(t + L.tp_name, s);
    put(t + L.tp_basicsize, basicsize);
    put(t + L.tp_itemsize, itemsize);
    put(t + L.tp_flags, flags);
    return t;
  }
  // A GC-tracked object appended to generation `gen` (0-3, 3 = permanent).
  uint64_t tracked(uint64_t type, int gen = 2, size_t size = 64) {
    const uint64_t g = alloc(16 + size), obj = g + 16;
    put(obj + 8, type);
    const uint64_t head = gc_head(gen);
    const uint64_t last = get(head + 8);
    put(g, head), put(g + 8, last);  // g.next = head, g.prev = last
    put(last, g), put(head + 8, g);  // last.next = g, head.prev = g
    return obj;
  }
  uint64_t untracked(uint64_t type, uint64_t ob_size = 0, size_t size = 64) {
    const uint64_t obj = alloc(16 + size) + 16;  // zero GC head before it either way
    put(obj + 8, type);
    put(obj + 16, ob_size);
    return obj;
  }
  // Readable bytes that end where a PROT_NONE page begins: a read past
  // [addr, addr + size) fails, whatever else the process has mapped.
  uint64_t guarded(size_t size) {
    const size_t body = (size + 4095) & ~size_t{4095};
    const uint64_t a = alloc(body + 4096);
    if (mprotect(reinterpret_cast<void*>(a + body), 4096, PROT_NONE) != 0) throw std::bad_alloc();
    return a + body - size;
  }
  // size bytes of untouched (zero) readable memory.
  uint64_t zeros(size_t size) { return alloc(size); }
  uint64_t words(const std::vector<uint64_t>& v) {
    const uint64_t a = alloc(v.size() * 8 + 8);
    for (size_t i = 0; i < v.size(); ++i) put(a + i * 8, v[i]);
    return a;
  }

  PyHeapResult walk(uint64_t max_objects = 1'000'000, int budget_ms = 5000,
                    std::function<void()> before_rewalk = {}, size_t cache_bytes = ChunkCache::kDefaultMaxCached) {
    RemoteMemory mem(getpid());
    ChunkCache cache(mem, read_maps(getpid()), ChunkCache::kDefaultChunk, cache_bytes);
    PyHeapInput in;
    in.runtime_addr = runtime_;
    in.max_objects = max_objects;
    in.before_rewalk = std::move(before_rewalk);
    Deadline d{std::chrono::milliseconds(budget_ms)};
    PyHeapResult r = walk_python_heap(cache, L, in, d);
    bytes_read = mem.bytes_read();
    return r;
  }
  uint64_t bytes_read = 0;  // by the last walk

  static void put(uint64_t addr, uint64_t v) { std::memcpy(reinterpret_cast<void*>(addr), &v, 8); }
  static uint64_t get(uint64_t addr) {
    uint64_t v;
    std::memcpy(&v, reinterpret_cast<void*>(addr), 8);
    return v;
  }
  void set_long_lived(uint64_t n) { put(gc_state() + L.gc_long_lived_total, n); }
  // Links an object whose 16-byte GC head is at g (caller's memory) into
  // generation gen: for heaps of many objects in one block.
  void link(uint64_t g, uint64_t type, int gen = 2) {
    put(g + 16 + 8, type);
    const uint64_t head = gc_head(gen), last = get(head + 8);
    put(g, head), put(g + 8, last);
    put(last, g), put(head + 8, g);
  }
  uint64_t gc_state() const { return py_gc_state(L, runtime_, interp_); }
  uint64_t gc_head(int gen) const { return gc_state() + L.gc_head_sets[0][static_cast<size_t>(gen)]; }
  uint64_t runtime() const { return runtime_; }

  PyLayout L;

 private:
  uint64_t alloc(size_t n) {
    n = (n + 4095) & ~size_t{4095};
    void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    blocks_.emplace_back(p, n);
    return reinterpret_cast<uint64_t>(p);
  }
  std::vector<std::pair<void*, size_t>> blocks_;
  uint64_t runtime_ = 0, interp_ = 0;
};

std::map<std::string, std::pair<uint64_t, uint64_t>> by_name(const PyHeapResult& r) {
  std::map<std::string, std::pair<uint64_t, uint64_t>> m;
  for (const auto& t : r.types) m[t.name] = {t.objects, t.bytes};
  return m;
}

}  // namespace

TEST(PythonHeap, CountsEveryListAndSizesLikeGetsizeof) {
  FakeHeap h;
  const uint64_t node = h.type("Node", 48, 0, kHaveGc);
  const uint64_t frozen = h.type("Frozen", 32, 0, kHaveGc);
  for (int i = 0; i < 100; ++i) h.tracked(node, i % 3);
  h.tracked(frozen, 3);  // the permanent generation (gc.freeze) counts too
  auto r = h.walk();
  ASSERT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
  auto m = by_name(r);
  EXPECT_EQ(m["Node"], std::make_pair(uint64_t{100}, uint64_t{100 * (48 + 16)}));
  EXPECT_EQ(m["Frozen"].first, 1u);
  EXPECT_EQ(r.tracked_objects, 101u);
  EXPECT_EQ(r.lists_complete, 4u);
  EXPECT_EQ(r.coverage, 1.0);
}

// Untracked objects referenced by a tracked list are counted once each, by
// address, however often they are referenced; statics and NULLs are not.
TEST(PythonHeap, CountsReferencedUntrackedObjectsOnce) {
  FakeHeap h;
  const uint64_t list = h.type("list", 40, 0, kHaveGc | kListSub);
  const uint64_t bytes = h.type("bytes", 33, 1, 0);
  const uint64_t b1 = h.untracked(bytes, 1000), b2 = h.untracked(bytes, 10);
  const uint64_t items = h.words({b1, b2, b1, 0, b2});
  const uint64_t l = h.tracked(list);
  FakeHeap::put(l + 16, 5), FakeHeap::put(l + 24, items), FakeHeap::put(l + 32, 5);
  auto r = h.walk();
  ASSERT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
  auto m = by_name(r);
  EXPECT_EQ(m["bytes"], std::make_pair(uint64_t{2}, uint64_t{33 + 1000 + 33 + 10}));
  EXPECT_EQ(m["list"].second, 40u + 5 * 8 + 16);
  EXPECT_EQ(r.untracked_objects, 2u);
}

// Objects over obmalloc's 512-byte threshold were malloc'd outside the
// arenas: counted apart, by the sizes the walk gives them (GC head included).
TEST(PythonHeap, ObjectsOverTheSmallRequestThresholdAreCountedAsLarge) {
  FakeHeap h;
  const uint64_t big = h.type("Big", 600, 0, kHaveGc), small = h.type("Small", 496, 0, kHaveGc);
  const uint64_t list = h.type("list", 40, 0, kHaveGc | kListSub);
  const uint64_t bytes = h.type("bytes", 33, 1, 0);
  h.tracked(big, 2, 600);
  h.tracked(small, 2, 496);  // 512 with its GC head: still an arena block
  const uint64_t items = h.words({h.untracked(bytes, 1000), h.untracked(bytes, 10)});
  const uint64_t l = h.tracked(list);
  FakeHeap::put(l + 16, 2), FakeHeap::put(l + 24, items), FakeHeap::put(l + 32, 2);
  auto r = h.walk();
  ASSERT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
  EXPECT_EQ(r.large_objects, 2u);
  EXPECT_EQ(r.large_object_bytes, (600u + 16) + (33 + 1000));
}

TEST(PythonHeap, CorruptNextPointerStopsThatListAsPartial) {
  FakeHeap h;
  const uint64_t node = h.type("Node", 48, 0, kHaveGc);
  std::vector<uint64_t> objs;
  for (int i = 0; i < 10; ++i) objs.push_back(h.tracked(node, 2));
  for (int i = 0; i < 5; ++i) h.tracked(node, 0);
  FakeHeap::put(objs[4] - 16, 0xdead0000);  // g.next -> unmapped
  auto r = h.walk();
  EXPECT_EQ(r.status, SnapshotStatus::kPartial);
  EXPECT_NE(r.reason.find("changed under the reader"), std::string::npos) << r.reason;
  EXPECT_EQ(r.lists_complete, 3u);  // the other lists are still read
  EXPECT_EQ(by_name(r)["Node"].first, 5u + 5u);
  EXPECT_DOUBLE_EQ(r.coverage, 3.0 / 4.0);  // no usable count: the share of lists
  // With the runtime's long-lived count (10 in the oldest list), coverage is
  // the share of objects: 10 read of 10 + 5 expected.
  h.set_long_lived(10);
  r = h.walk();
  EXPECT_DOUBLE_EQ(r.coverage, 10.0 / 15.0);
}

// A list that changed under the walk is walked again on fresh bytes (a
// leaking program relinks its young list all the time: AgentEndToEnd once
// got "partial" for it); one that stays broken is walked max_walks times.
TEST(PythonHeap, AListChangedUnderTheWalkIsWalkedAgainOnFreshBytes) {
  FakeHeap h;
  const uint64_t node = h.type("Node", 48, 0, kHaveGc);
  std::vector<uint64_t> objs;
  for (int i = 0; i < 6; ++i) objs.push_back(h.tracked(node, 2));
  const uint64_t link = objs[3] - 16, good = FakeHeap::get(link);
  FakeHeap::put(link, 0xdead0000);
  int rewalks = 0;
  auto r = h.walk(1'000'000, 5000, [&] { ++rewalks, FakeHeap::put(link, good); });
  ASSERT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
  EXPECT_EQ(r.walks, 2u);
  EXPECT_EQ(rewalks, 1);
  EXPECT_EQ(by_name(r)["Node"].first, 6u);

  FakeHeap::put(link, 0xdead0000);
  rewalks = 0;
  r = h.walk(1'000'000, 5000, [&] { ++rewalks; });
  EXPECT_EQ(r.status, SnapshotStatus::kPartial);
  EXPECT_NE(r.reason.find("changed under the reader"), std::string::npos) << r.reason;
  EXPECT_EQ(r.walks, PyHeapInput{}.max_walks);
  EXPECT_EQ(rewalks, static_cast<int>(PyHeapInput{}.max_walks) - 1);

  // Cut for another reason (the object cap): not walked again.
  FakeHeap::put(link, good);
  rewalks = 0;
  r = h.walk(2, 5000, [&] { ++rewalks; });
  EXPECT_EQ(r.status, SnapshotStatus::kPartial);
  EXPECT_EQ(r.walks, 1u);
  EXPECT_EQ(rewalks, 0);
}

TEST(PythonHeap, CycleThatSkipsTheHeadIsDetected) {
  FakeHeap h;
  const uint64_t node = h.type("Node", 48, 0, kHaveGc);
  std::vector<uint64_t> objs;
  for (int i = 0; i < 6; ++i) objs.push_back(h.tracked(node, 2));
  FakeHeap::put(objs[5] - 16, objs[1] - 16);  // last.next -> second: a loop that never returns to the head
  auto r = h.walk();
  EXPECT_EQ(r.status, SnapshotStatus::kPartial);
  EXPECT_NE(r.reason.find("prev link mismatch"), std::string::npos) << r.reason;
  EXPECT_EQ(by_name(r)["Node"].first, 6u);

  FakeHeap self;
  const uint64_t n2 = self.type("Node", 48, 0, kHaveGc);
  const uint64_t o = self.tracked(n2, 1);
  self.tracked(n2, 1);
  FakeHeap::put(o - 16, o - 16);  // points at itself
  r = self.walk();
  EXPECT_EQ(r.status, SnapshotStatus::kPartial);
}

TEST(PythonHeap, GarbageTypePointerIsCountedAsUnreadable) {
  FakeHeap h;
  const uint64_t node = h.type("Node", 48, 0, kHaveGc);
  h.tracked(node);
  h.tracked(0x10);                                     // not a readable address
  h.tracked(h.type("\x01\x02", 48, 0, kHaveGc));       // unprintable name
  h.tracked(h.type("Huge", uint64_t{1} << 40, 0, 0));  // implausible basicsize
  auto r = h.walk();
  ASSERT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
  auto m = by_name(r);
  EXPECT_EQ(m["Node"].first, 1u);
  EXPECT_EQ(m["<unreadable type>"].first, 3u);
}

TEST(PythonHeap, ObjectCapAndDeadlineGivePartial) {
  FakeHeap h;
  const uint64_t node = h.type("Node", 48, 0, kHaveGc);
  for (int i = 0; i < 5000; ++i) h.tracked(node, 2);
  auto r = h.walk(100);
  EXPECT_EQ(r.status, SnapshotStatus::kPartial);
  EXPECT_NE(r.reason.find("object cap of 100"), std::string::npos) << r.reason;
  EXPECT_EQ(r.tracked_objects, 100u);
  r = h.walk(1'000'000, 0);
  EXPECT_EQ(r.status, SnapshotStatus::kPartial);
  EXPECT_NE(r.reason.find("deadline"), std::string::npos) << r.reason;
}

// A list that broke, then the cap: the cap (what ended the walk) leads the
// reason, the broken list follows.
TEST(PythonHeap, HaltReasonLeadsEarlierListBreak) {
  FakeHeap h;
  const uint64_t node = h.type("Node", 48, 0, kHaveGc);
  std::vector<uint64_t> young;
  for (int i = 0; i < 4; ++i) young.push_back(h.tracked(node, 0));
  for (int i = 0; i < 500; ++i) h.tracked(node, 2);
  FakeHeap::put(young[1] - 16, 0xdead0000);
  auto r = h.walk(100);
  EXPECT_EQ(r.status, SnapshotStatus::kPartial);
  EXPECT_EQ(r.reason.rfind("object cap of 100 reached; before that: GC list changed", 0), 0u) << r.reason;
}

TEST(PythonHeap, UnreadableRuntimeOrGcStateFails) {
  FakeHeap h;
  FakeHeap::put(h.runtime() + h.L.interpreters_head, 0);
  auto r = h.walk();
  EXPECT_EQ(r.status, SnapshotStatus::kFailed);
  EXPECT_NE(r.reason.find("interpreters.head"), std::string::npos) << r.reason;

  FakeHeap g;
  FakeHeap::put(g.gc_head(0) - g.L.gc_head_sets[0][0] + g.L.gc_generation0, 0x1234);  // generation0 names no head
  r = g.walk();
  EXPECT_EQ(r.status, SnapshotStatus::kFailed);
  EXPECT_NE(r.reason.find("no well-formed GC generation lists"), std::string::npos) << r.reason;
}

// A list whose item count is hostile: the walk stays within the object cap.
TEST(PythonHeap, HostileContainerSizesStayBounded) {
  FakeHeap h;
  const uint64_t list = h.type("list", 40, 0, kHaveGc | kListSub);
  const uint64_t l = h.tracked(list);
  FakeHeap::put(l + 16, uint64_t{1} << 60), FakeHeap::put(l + 24, h.words({0, 0})),
      FakeHeap::put(l + 32, uint64_t{1} << 60);
  auto r = h.walk(1000);
  EXPECT_NE(r.status, SnapshotStatus::kFailed) << r.reason;
  EXPECT_EQ(by_name(r)["list"].first, 1u);
}

// A list claiming 10M items (and one claiming 2^40) must not make the reader
// allocate for them: the queue grows only with pointers worth following, and
// a count the memory behind it does not hold makes the snapshot partial,
// saying which container. The object cap is as high as the default (10M), so
// only the reader's own bounds keep the queue small.
TEST(PythonHeap, ClaimedItemCountsDoNotGrowTheQueue) {
  for (uint64_t claim : {uint64_t{10'000'000}, uint64_t{1} << 40}) {
    FakeHeap h;
    const uint64_t list = h.type("list", 40, 0, kHaveGc | kListSub);
    const uint64_t bytes = h.type("bytes", 33, 1, 0);
    const uint64_t items = h.guarded(16);  // two real items, then a PROT_NONE page
    FakeHeap::put(items, h.untracked(bytes, 7)), FakeHeap::put(items + 8, h.untracked(bytes, 9));
    const uint64_t l = h.tracked(list);
    FakeHeap::put(l + 16, claim), FakeHeap::put(l + 24, items), FakeHeap::put(l + 32, claim);
    auto r = h.walk(20'000'000);
    EXPECT_EQ(r.status, SnapshotStatus::kPartial) << claim;
    EXPECT_NE(r.reason.find("a list at 0x"), std::string::npos) << r.reason;
    EXPECT_NE(r.reason.find("claims " + std::to_string(claim) + " items"), std::string::npos) << r.reason;
    EXPECT_LE(r.ref_queue_peak_bytes, 64u << 10) << claim;  // before: 80 MB for 10M
    EXPECT_EQ(by_name(r)["list"].first, 1u);
  }
}

// 10M items that are all readable (zeros: nothing to follow) are read in
// batches; nothing is queued for them, and the walk is complete.
TEST(PythonHeap, ReadableHugeContainerIsReadInBatches) {
  FakeHeap h;
  const uint64_t list = h.type("list", 40, 0, kHaveGc | kListSub);
  const uint64_t n = 10'000'000;
  const uint64_t items = h.zeros(n * 8);
  const uint64_t l = h.tracked(list);
  FakeHeap::put(l + 16, n), FakeHeap::put(l + 24, items), FakeHeap::put(l + 32, n);
  auto r = h.walk(20'000'000);
  EXPECT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
  EXPECT_LE(r.ref_queue_peak_bytes, 64u << 10);
  EXPECT_EQ(by_name(r)["list"], std::make_pair(uint64_t{1}, 40 + n * 8 + 16));
}

// __slots__ members are queued within the queue's room like container items,
// so many slots per object cannot grow the queue (or the seen marks, whose
// fallback set takes the scattered addresses) past the object cap.
TEST(PythonHeap, SlotReferencesStayWithinTheObjectCap) {
  FakeHeap h;
  constexpr int kSlots = 256, kObjects = 50;
  const uint64_t members = h.words(std::vector<uint64_t>(kSlots * 5 + 5, 0));
  for (int i = 0; i < kSlots; ++i) {  // PyMemberDef {name, type, offset, flags, doc}
    const uint64_t m = members + static_cast<uint64_t>(i) * 40;
    FakeHeap::put(m, 1), FakeHeap::put(m + 8, 6 /* T_OBJECT */), FakeHeap::put(m + 16, 16 + 8 * static_cast<uint64_t>(i));
  }
  const uint64_t slotted = h.type("Slotted", 16 + 8 * kSlots, 0, kHaveGc | kHeapType);
  FakeHeap::put(slotted + h.L.tp_members, members);
  uint64_t scattered = uint64_t{0x100000000000};
  for (int o = 0; o < kObjects; ++o) {
    const uint64_t obj = h.tracked(slotted, 2, 16 + 8 * kSlots);
    for (int i = 0; i < kSlots; ++i, scattered += uint64_t{1} << 20)  // a 1 MiB region each: the fallback set
      FakeHeap::put(obj + 16 + 8 * static_cast<uint64_t>(i), scattered);
  }
  const uint64_t cap = 100;
  auto r = h.walk(cap);
  EXPECT_EQ(r.status, SnapshotStatus::kPartial) << r.reason;
  EXPECT_EQ(by_name(r)["Slotted"].first, uint64_t{kObjects});
  EXPECT_LE(r.ref_queue_peak_bytes, 2 * cap * 8);  // before: 12800 queued
  EXPECT_LE(r.addresses_marked, 2 * cap + 1024);
}

// Names come from the target: a 5000-byte tp_name and a 2000-character
// Latin-1 qualname are cut to 1 KiB, marked, at a UTF-8 character boundary.
TEST(PythonHeap, LongTypeNamesAreCutAt1KiB) {
  FakeHeap h;
  const uint64_t longc = h.type(std::string(5000, 'N'), 48, 0, kHaveGc);
  h.tracked(longc);
  const uint64_t heap = h.type("Short", 48, 0, kHaveGc | kHeapType);
  const uint64_t q = h.untracked(0, 0, h.L.compact_size + 2000);
  FakeHeap::put(q + 16, 2000);
  FakeHeap::put(q + 32, (1u << 2) | (1u << 5));  // kind 1, compact, not ASCII: Latin-1
  std::memset(reinterpret_cast<void*>(q + h.L.compact_size), 0xE9, 2000);  // 'é'
  FakeHeap::put(heap + h.L.ht_qualname, q);
  h.tracked(heap);
  auto r = h.walk();
  ASSERT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
  int cut = 0;
  for (const auto& t : r.types) {
    EXPECT_LE(t.name.size(), 1024u) << t.name.substr(0, 40);
    if (t.name.size() < 1000) continue;
    ++cut;
    EXPECT_EQ(t.name.substr(t.name.size() - 5), "[...]");
    const std::string body = t.name.substr(0, t.name.size() - 5);
    EXPECT_TRUE(body == std::string(body.size(), 'N') || body.size() % 2 == 0) << "cut inside a character";
  }
  EXPECT_EQ(cut, 2);
  EXPECT_EQ(by_name(r).count("<unreadable type>"), 0u);
}

// A layout whose offsets do not fit the bytes read for their struct (a
// type field past type_read_size) is refused before anything is read.
TEST(PythonHeap, LayoutWithOffsetsOutsideTheirStructsIsRefused) {
  FakeHeap h;
  h.tracked(h.type("Node", 48, 0, kHaveGc));
  h.L.tp_flags = h.L.type_read_size;
  auto r = h.walk();
  EXPECT_EQ(r.status, SnapshotStatus::kFailed);
  EXPECT_NE(r.reason.find("unusable CPython layout"), std::string::npos) << r.reason;
  FakeHeap g;
  g.L.gc_head_sets[0].back() = g.L.gc_state_size - 8;  // a 16-byte head in the last 8 bytes
  r = g.walk();
  EXPECT_EQ(r.status, SnapshotStatus::kFailed);
  EXPECT_NE(r.reason.find("GC list head"), std::string::npos) << r.reason;
}

// Words a container claims as items that are no objects (unmapped, or
// readable but with no valid type) are neither marked seen nor counted: the
// seen marks cost the reader memory, and a list claiming 10M items over junk
// memory used to mark (and allocate bitmap regions for) every word.
TEST(PythonHeap, JunkItemsAreNotMarked) {
  FakeHeap h;
  const uint64_t list = h.type("list", 40, 0, kHaveGc | kListSub);
  const uint64_t n = 100'000;
  std::vector<uint64_t> junk(n);
  const uint64_t readable = h.zeros(n * 16);  // zero words: no type
  for (uint64_t i = 0; i < n; ++i)
    junk[i] = i % 2 ? 0x300000000000ull + i * (uint64_t{1} << 20)  // unmapped, a 1 MiB region each
                    : readable + i * 16;
  const uint64_t items = h.words(junk);
  const uint64_t l = h.tracked(list);
  FakeHeap::put(l + 16, n), FakeHeap::put(l + 24, items), FakeHeap::put(l + 32, n);
  auto r = h.walk(20'000'000);
  EXPECT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
  EXPECT_EQ(r.untracked_objects, 0u);
  EXPECT_LE(r.addresses_marked, 16u);  // before: 100,001
}

// An untracked container is followed a batch at a time, depth first: what is
// pending stays at a batch, whatever the container holds (before: every item
// was queued at once, 8 bytes each, up to the object cap).
TEST(PythonHeap, HugeUntrackedContainerIsFollowedInBatches) {
  FakeHeap h;
  const uint64_t list = h.type("list", 40, 0, kHaveGc | kListSub);
  const uint64_t tuple = h.type("tuple", 24, 8, kHaveGc | (1ull << 26));
  const uint64_t bytes = h.type("bytes", 33, 1, 0);
  const uint64_t n = 200'000;
  const uint64_t objs = h.zeros(n * 48);
  const uint64_t t = h.untracked(tuple, n, 24 + n * 8);  // zero GC head: untracked
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t o = objs + i * 48;
    FakeHeap::put(o + 8, bytes), FakeHeap::put(o + 16, 1);
    FakeHeap::put(t + 24 + i * 8, o);
  }
  const uint64_t l = h.tracked(list);
  FakeHeap::put(l + 16, 1), FakeHeap::put(l + 24, h.words({t})), FakeHeap::put(l + 32, 1);
  auto r = h.walk(20'000'000);
  ASSERT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
  auto m = by_name(r);
  EXPECT_EQ(m["bytes"], std::make_pair(n, n * 34));
  EXPECT_EQ(m["tuple"], std::make_pair(uint64_t{1}, 24 + n * 8 + 16));
  EXPECT_LE(r.ref_queue_peak_bytes, 64u << 10);  // before: 2 MiB (200k pointers)
}

// More references pending than the walk keeps (here 40,000 tracked lists, a
// range each) are followed during the GC-list walk; tracked objects met that
// way before their list reaches them are still counted once, from the list.
TEST(PythonHeap, ReferencesFollowedDuringTheListWalkCountTrackedObjectsOnce) {
  FakeHeap h;
  const uint64_t list = h.type("list", 40, 0, kHaveGc | kListSub);
  const uint64_t bytes = h.type("bytes", 33, 1, 0);
  const uint64_t n = 40'000;
  const uint64_t block = h.zeros(n * 128);
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t g = block + i * 128, obj = g + 16, items = g + 64, b = g + 80;  // list, items, bytes
    h.link(g, list);
    FakeHeap::put(b + 8, bytes), FakeHeap::put(b + 16, 0);
    // items: the next list (tracked, not walked yet) and one bytes object.
    FakeHeap::put(items, i + 1 < n ? block + (i + 1) * 128 + 16 : 0), FakeHeap::put(items + 8, b);
    FakeHeap::put(obj + 16, 2), FakeHeap::put(obj + 24, items), FakeHeap::put(obj + 32, 2);
  }
  auto r = h.walk(20'000'000);
  ASSERT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
  auto m = by_name(r);
  EXPECT_EQ(m["list"].first, n);
  EXPECT_EQ(m["bytes"], std::make_pair(n, n * 33));
  EXPECT_EQ(r.tracked_objects, n);
  EXPECT_EQ(r.untracked_objects, n);
  EXPECT_LE(r.ref_queue_peak_bytes, 4u << 20);  // before: 40k ranges queued to the end
}

// A container walked before the tracked objects it holds (a list made
// before its items, first on the oldest list) used to read each of them
// once for its items and again on the list walk: 2x the heap through a
// cache smaller than it. Items whose memory is not in the cache are put off
// and found counted by the list walk; untracked objects read next to their
// referrer are counted at once, and the rest after the lists, in address
// order. Each byte is read about once.
TEST(PythonHeap, AContainerBeforeItsItemsDoesNotReadThemTwice) {
  FakeHeap h;
  const uint64_t list = h.type("list", 40, 0, kHaveGc | kListSub);
  const uint64_t bytes = h.type("bytes", 33, 1, 0);
  const uint64_t n = 65'536, stride = 128;  // 8 MiB of lists (tracked), each holding one bytes (untracked)
  const uint64_t holder_items = h.zeros(n * 8), holder_g = h.zeros(64);
  h.link(holder_g, list);  // first on the list, before its items
  FakeHeap::put(holder_g + 16 + 16, n), FakeHeap::put(holder_g + 16 + 24, holder_items),
      FakeHeap::put(holder_g + 16 + 32, n);
  const uint64_t block = h.zeros(n * stride);
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t g = block + i * stride, obj = g + 16, items = g + 64, b = g + 80;
    h.link(g, list);
    FakeHeap::put(holder_items + i * 8, obj);
    FakeHeap::put(b + 8, bytes), FakeHeap::put(b + 16, 0);
    FakeHeap::put(items, b);
    FakeHeap::put(obj + 16, 1), FakeHeap::put(obj + 24, items), FakeHeap::put(obj + 32, 1);
  }
  // A few of them hold a bytes object of the holder's block instead: far
  // from them, so put off and counted after the lists.
  const uint64_t far = h.zeros(4096) + 1024;
  FakeHeap::put(far + 8, bytes), FakeHeap::put(far + 16, 0);
  for (uint64_t i = 0; i < n; i += 8192) FakeHeap::put(block + i * stride + 64, far + i / 8192 * 64);
  for (uint64_t k = 1; k < n / 8192; ++k) FakeHeap::put(far + k * 64 + 8, bytes), FakeHeap::put(far + k * 64 + 16, 0);

  auto r = h.walk(20'000'000, 5000, {}, size_t{1} << 20);
  ASSERT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
  auto m = by_name(r);
  EXPECT_EQ(m["list"].first, n + 1);
  EXPECT_EQ(m["bytes"], std::make_pair(n, n * 33));
  const uint64_t heap = n * stride + n * 8;
  EXPECT_LE(h.bytes_read, heap + heap / 4) << "read " << h.bytes_read << " bytes for " << heap << " of heap";
}

// References put off are bounded by the bitmap's regions (1,024 of 1 MiB):
// a target whose references spread over more regions has the rest read at
// once, every object still counted once; and the objects visited after the
// lists count toward the object cap like any other.
TEST(PythonHeap, ReferencesPutOffStayBoundedAndWithinTheObjectCap) {
  FakeHeap h;
  const uint64_t list = h.type("list", 40, 0, kHaveGc | kListSub);
  const uint64_t bytes = h.type("bytes", 33, 1, 0);
  const uint64_t n = py_walk::kMaxDeferredRegions + 100;  // one object per 1 MiB region
  const uint64_t spread = h.zeros((n + 1) << 20);          // address space; a page of it touched per object
  const uint64_t first = (spread + (1 << 20) - 1) & ~uint64_t{(1 << 20) - 1};
  const uint64_t items = h.zeros(n * 8), g = h.zeros(64);
  h.link(g, list);
  FakeHeap::put(g + 16 + 16, n), FakeHeap::put(g + 16 + 24, items), FakeHeap::put(g + 16 + 32, n);
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t b = first + (i << 20) + 64;
    FakeHeap::put(b + 8, bytes), FakeHeap::put(b + 16, 0);
    FakeHeap::put(items + i * 8, b);
  }
  auto r = h.walk(20'000'000, 5000, {}, size_t{1} << 20);
  ASSERT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
  EXPECT_EQ(by_name(r)["bytes"], std::make_pair(n, n * 33));
  EXPECT_EQ(r.untracked_objects, n);

  auto capped = h.walk(n / 2, 5000, {}, size_t{1} << 20);
  EXPECT_EQ(capped.status, SnapshotStatus::kPartial);
  EXPECT_LE(capped.tracked_objects + capped.untracked_objects, n / 2);
}

// Sizes come from the target's fields: an untracked object whose size does
// not fit the mapping it lies in is no object (not counted); a tracked one
// is counted at its fixed size, and the snapshot says so. Before: a junk
// word read as a generator added 8 TB to the totals. (A var-sized type of
// no special kind: generators have a rule of their own since 3.11, tested
// with hostile code below.)
TEST(PythonHeap, SizesThatDoNotFitTheirMemoryAreNotBelieved) {
  FakeHeap h;
  const uint64_t list = h.type("list", 40, 0, kHaveGc | kListSub);
  const uint64_t gen = h.type("var_object", 96, 8, 0);
  const uint64_t tracked_gen = h.type("tracked_var", 96, 8, kHaveGc);
  const uint64_t liar = h.untracked(gen, uint64_t{1} << 39);
  const uint64_t honest = h.untracked(gen, 4);
  const uint64_t l = h.tracked(list);
  FakeHeap::put(l + 16, 2), FakeHeap::put(l + 24, h.words({liar, honest})), FakeHeap::put(l + 32, 2);
  const uint64_t t = h.tracked(tracked_gen);
  FakeHeap::put(t + 16, uint64_t{1} << 39);
  auto r = h.walk();
  EXPECT_EQ(r.status, SnapshotStatus::kPartial) << r.reason;
  EXPECT_NE(r.reason.find("1 GC-tracked objects claim sizes that do not fit"), std::string::npos) << r.reason;
  EXPECT_EQ(r.implausible_sizes, 1u);
  auto m = by_name(r);
  EXPECT_EQ(m["var_object"], std::make_pair(uint64_t{1}, uint64_t{96 + 4 * 8}));
  EXPECT_EQ(m["tracked_var"], std::make_pair(uint64_t{1}, uint64_t{96 + 16}));
}

// Generators, coroutines and frame objects (3.11+) have tp_itemsize 8 but no
// ob_size: offset 16 is gi_code / f_back, a pointer. sys.getsizeof counts
// the frame slots of their code object (co_nlocalsplus + co_stacksize), as
// gen_sizeof and frame_sizeof do. Before: every live generator (one sits in
// importlib.resources in any 3.11 program that imported it) was read as a
// var object of ~10^14 items and the snapshot was partial for nothing.
TEST(PythonHeap, GeneratorsAndFramesAreSizedFromTheirCode) {
  FakeHeap h;
  const uint64_t code_t = h.type("code", 192, 2, 0);
  const uint64_t gen_t = h.type("generator", 152, 8, kHaveGc);
  const uint64_t coro_t = h.type("coroutine", 152, 8, kHaveGc);
  const uint64_t frame_t = h.type("frame", 120, 8, kHaveGc);
  const uint64_t code = h.untracked(code_t, 0, 256);
  FakeHeap::put(code + h.L.code_stacksize, 3);  // two int32 fields: stacksize 3, nlocalsplus 2
  FakeHeap::put(code + h.L.code_nlocalsplus, 2);
  const uint64_t gen = h.tracked(gen_t, 2, 256), coro = h.tracked(coro_t, 1, 256);
  FakeHeap::put(gen + h.L.gen_code, code), FakeHeap::put(coro + h.L.gen_code, code);
  const uint64_t iframe = h.zeros(128);
  FakeHeap::put(iframe + h.L.iframe_code, code);
  const uint64_t frame = h.tracked(frame_t, 2, 256);
  FakeHeap::put(frame + 16, gen);  // f_back: a pointer where ob_size would be
  FakeHeap::put(frame + h.L.frame_iframe, iframe);
  ASSERT_EQ(h.L.gen_code, 16u);  // 3.11: gi_code sits where ob_size would
  auto r = h.walk();
  EXPECT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
  EXPECT_EQ(r.implausible_sizes, 0u);
  auto m = by_name(r);
  EXPECT_EQ(m["generator"], std::make_pair(uint64_t{1}, uint64_t{152 + 5 * 8 + 16}));
  EXPECT_EQ(m["coroutine"], std::make_pair(uint64_t{1}, uint64_t{152 + 5 * 8 + 16}));
  EXPECT_EQ(m["frame"], std::make_pair(uint64_t{1}, uint64_t{120 + 5 * 8 + 16}));
}

// What a generator's code pointer leads to is the target's: a code pointer
// to an object that is no code object, a negative count (a 4 G-slot frame)
// or a frame object whose frame is unreadable is counted at the fixed size
// and named, never believed.
TEST(PythonHeap, GeneratorsWithHostileCodeAreNotBelieved) {
  FakeHeap h;
  const uint64_t code_t = h.type("code", 192, 2, 0);
  const uint64_t not_code_t = h.type("dict", 48, 0, kHaveGc);
  const uint64_t gen_t = h.type("generator", 152, 8, kHaveGc);
  const uint64_t frame_t = h.type("frame", 120, 8, kHaveGc);
  auto code_with = [&](uint64_t type, uint64_t stack, uint64_t nlocals) {
    const uint64_t c = h.untracked(type, 0, 256);
    std::memcpy(reinterpret_cast<void*>(c + h.L.code_stacksize), &stack, 4);
    std::memcpy(reinterpret_cast<void*>(c + h.L.code_nlocalsplus), &nlocals, 4);
    return c;
  };
  const uint64_t g1 = h.tracked(gen_t, 2, 256);
  FakeHeap::put(g1 + h.L.gen_code, code_with(not_code_t, 3, 2));  // sane counts, but no code object
  const uint64_t g2 = h.tracked(gen_t, 2, 256);
  FakeHeap::put(g2 + h.L.gen_code, code_with(code_t, 0xffffffff, 1));  // stacksize -1
  const uint64_t f = h.tracked(frame_t, 2, 256);
  FakeHeap::put(f + h.L.frame_iframe, 8);  // f_frame into page zero
  auto r = h.walk();
  EXPECT_EQ(r.status, SnapshotStatus::kPartial) << r.reason;
  EXPECT_EQ(r.implausible_sizes, 3u);
  EXPECT_NE(r.reason.find("3 GC-tracked objects claim sizes"), std::string::npos) << r.reason;
  auto m = by_name(r);
  EXPECT_EQ(m["generator"], std::make_pair(uint64_t{2}, uint64_t{2 * (152 + 16)}));
  EXPECT_EQ(m["frame"], std::make_pair(uint64_t{1}, uint64_t{120 + 16}));
}

// 3.8-3.10 on byte images: 3.8's one GC state lives in _PyRuntimeState (a
// second interpreter is counted, its lists not walked twice); dict keys have
// the 40-byte header with dk_size and 1-byte indices; an instance's __dict__
// is found at tp_dictoffset although the GC does not track it; int 0 is 24
// bytes. Sizes as sys.getsizeof of 3.8.18 gives them (live: old.py checks).
TEST(PythonHeap, Python38LayoutOnByteImages) {
  FakeHeap h(0x030812f0);
  ASSERT_NE(h.L.runtime_gc, 0u);
  const uint64_t dict_t = h.type("dict", 48, 0, kHaveGc | (1ull << 29));
  const uint64_t int_t = h.type("int", 24, 4, 1ull << 24);
  const uint64_t inst_t = h.type("C", 32, 0, kHaveGc | kHeapType);
  FakeHeap::put(inst_t + h.L.tp_dictoffset, 16);
  // A combined dict of 8 slots with one entry {hash, key, value}: 40-byte
  // header, 8 one-byte indices, 5 entries of 24 bytes.
  const uint64_t keys = h.zeros(4096);
  FakeHeap::put(keys, 1), FakeHeap::put(keys + 8, 8), FakeHeap::put(keys + 24, 4), FakeHeap::put(keys + 32, 1);
  const uint64_t zero = h.untracked(int_t, 0);
  FakeHeap::put(keys + 40 + 8 + 8, zero);       // key
  FakeHeap::put(keys + 40 + 8 + 16, zero);      // value
  const uint64_t d = h.untracked(dict_t);
  FakeHeap::put(d + 32, keys);
  const uint64_t inst = h.tracked(inst_t);
  FakeHeap::put(inst + 16, d);  // __dict__ at tp_dictoffset 16
  // A split (shared-key) instance dict: its values array counts the usable
  // fraction of the keys' size, the shared keys are not its own (104 as live).
  const uint64_t shared = h.zeros(4096);
  FakeHeap::put(shared, 2), FakeHeap::put(shared + 8, 8), FakeHeap::put(shared + 24, 3), FakeHeap::put(shared + 32, 2);
  const uint64_t split = h.tracked(dict_t);
  FakeHeap::put(split + 32, shared), FakeHeap::put(split + 40, h.words({zero, zero}));
  // A second interpreter sharing the runtime's GC state.
  const uint64_t interp2 = h.zeros(4096);
  FakeHeap::put(FakeHeap::get(h.runtime() + h.L.interpreters_head) + h.L.interp_next, interp2);
  auto r = h.walk();
  EXPECT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
  EXPECT_EQ(r.interpreters, 2u);
  EXPECT_EQ(r.lists_total, 4u);  // one GC state: three generations and the permanent one, once
  auto m = by_name(r);
  EXPECT_EQ(m["C"], std::make_pair(uint64_t{1}, uint64_t{32 + 16}));
  EXPECT_EQ(m["dict"], std::make_pair(uint64_t{2}, uint64_t{(48 + 40 + 8 + 5 * 24 + 16) + (48 + 5 * 8 + 16)}));  // 232 + 104
  EXPECT_EQ(m["int"], std::make_pair(uint64_t{1}, uint64_t{24}));
}

// 3.8-3.10 dict keys are the target's: a dk_size that is no power of two
// (or under PyDict_MINSIZE) is no keys object, and the dict is counted
// without them; its items are not followed.
TEST(PythonHeap, Python38DictKeysThatAreNoKeysAreRefused) {
  for (uint64_t bad_size : {uint64_t{12}, uint64_t{4}, uint64_t{1} << 50}) {
    FakeHeap h(0x030a0df0);
    const uint64_t dict_t = h.type("dict", 48, 0, kHaveGc | (1ull << 29));
    const uint64_t int_t = h.type("int", 24, 4, 1ull << 24);
    const uint64_t keys = h.zeros(4096);
    FakeHeap::put(keys, 1), FakeHeap::put(keys + 8, bad_size), FakeHeap::put(keys + 24, 4), FakeHeap::put(keys + 32, 1);
    FakeHeap::put(keys + 40 + 8 + 16, h.untracked(int_t, 1));
    const uint64_t d = h.tracked(dict_t);
    FakeHeap::put(d + 32, keys);
    auto r = h.walk();
    auto m = by_name(r);
    EXPECT_EQ(m["dict"], std::make_pair(uint64_t{1}, uint64_t{48 + 16})) << bad_size;
    EXPECT_EQ(m.count("int"), 0u) << bad_size;
  }
}

// A tp_dictoffset is the target's: one outside the instance's basic size
// is not followed (the word past the object is another object's).
TEST(PythonHeap, Python38DictOffsetOutsideTheInstanceIsNotFollowed) {
  FakeHeap h(0x030912f0);
  const uint64_t dict_t = h.type("dict", 48, 0, kHaveGc | (1ull << 29));
  const uint64_t inst_t = h.type("C", 32, 0, kHaveGc | kHeapType);
  FakeHeap::put(inst_t + h.L.tp_dictoffset, 32);  // just past the 32-byte instance
  const uint64_t inst = h.tracked(inst_t);
  FakeHeap::put(inst + 32, h.untracked(dict_t));  // a readable dict there all the same
  auto r = h.walk();
  EXPECT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
  EXPECT_EQ(by_name(r).count("dict"), 0u);
  FakeHeap::put(inst_t + h.L.tp_dictoffset, 24);  // the last word inside: followed
  FakeHeap::put(inst + 24, FakeHeap::get(inst + 32));
  r = h.walk();
  EXPECT_EQ(by_name(r)["dict"], std::make_pair(uint64_t{1}, uint64_t{48 + 16}));
}

// 3.8-3.10 frame objects are PyVarObjects whose ob_size can exceed what
// frame_sizeof counts (frames are reused): sized from their code object,
// sizeof(PyFrameObject) + (co_stacksize + co_nlocals + cells + free
// variables - 1) * 8 (424 for such a frame on 3.8, as live). Code that is no
// code object, or cell variables that are no tuple, are not believed.
TEST(PythonHeap, Python38FramesAreSizedFromTheirCode) {
  FakeHeap h(0x030812f0);
  const uint64_t code_t = h.type("code", 176, 0, 0);
  const uint64_t tuple_t = h.type("tuple", 24, 8, kHaveGc | (1ull << 26));
  const uint64_t dict_t = h.type("dict", 48, 0, kHaveGc | (1ull << 29));
  const uint64_t frame_t = h.type("frame", 368, 8, kHaveGc);
  auto code_with = [&](uint64_t cells) {
    const uint64_t c = h.untracked(code_t, 0, 256);
    const uint32_t stack = 3, nlocals = 2;
    std::memcpy(reinterpret_cast<void*>(c + h.L.code_stacksize), &stack, 4);
    std::memcpy(reinterpret_cast<void*>(c + h.L.code_nlocals), &nlocals, 4);
    FakeHeap::put(c + h.L.code_cellvars, cells);
    FakeHeap::put(c + h.L.code_freevars, h.untracked(tuple_t, 0));
    return c;
  };
  const uint64_t f = h.tracked(frame_t, 2, 512);
  FakeHeap::put(f + 16, 9);  // ob_size: more slots than the code needs (a reused frame)
  FakeHeap::put(f + h.L.frame_f_code, code_with(h.untracked(tuple_t, 1)));
  auto r = h.walk();
  EXPECT_EQ(r.status, SnapshotStatus::kComplete) << r.reason;
  EXPECT_EQ(by_name(r)["frame"], std::make_pair(uint64_t{1}, uint64_t{368 + 5 * 8 + 16}));

  const uint64_t g = h.tracked(frame_t, 2, 512);
  FakeHeap::put(g + h.L.frame_f_code, code_with(h.untracked(dict_t, 1)));  // co_cellvars no tuple
  r = h.walk();
  EXPECT_EQ(r.status, SnapshotStatus::kPartial) << r.reason;
  EXPECT_EQ(r.implausible_sizes, 1u);
  EXPECT_EQ(by_name(r)["frame"], std::make_pair(uint64_t{2}, uint64_t{(368 + 5 * 8 + 16) + (368 + 16)}));
}
