// The CPython heap walker on byte images built in this process's own memory
// (read back through process_vm_readv on ourselves), laid out as 3.11 does:
// well-formed heaps, corrupted links, cycles, garbage types and caps.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/chunk_cache.h"
#include "python/python_heap.h"
#include "python/python_layout.h"

using namespace oomsnap;

namespace {

constexpr uint64_t kHaveGc = 1ull << 14, kListSub = 1ull << 25;

// A fake interpreter: _PyRuntime -> one PyInterpreterState whose GC state
// has four empty circular lists; types and objects are added on demand.
class FakeHeap {
 public:
  FakeHeap() : L(*python_layout_for(0x030b02f0)) {
    runtime_ = alloc(64);
    interp_ = alloc(L.interp_gc + 256);
    put(runtime_ + L.interpreters_head, interp_);
    const uint64_t gc = interp_ + L.interp_gc;
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
    const uint64_t head = interp_ + L.interp_gc + L.gc_head_sets[0][static_cast<size_t>(gen)];
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
  uint64_t words(const std::vector<uint64_t>& v) {
    const uint64_t a = alloc(v.size() * 8 + 8);
    for (size_t i = 0; i < v.size(); ++i) put(a + i * 8, v[i]);
    return a;
  }

  PyHeapResult walk(uint64_t max_objects = 1'000'000, int budget_ms = 5000) {
    RemoteMemory mem(getpid());
    ChunkCache cache(mem, read_maps(getpid()));
    PyHeapInput in;
    in.runtime_addr = runtime_;
    in.max_objects = max_objects;
    Deadline d{std::chrono::milliseconds(budget_ms)};
    return walk_python_heap(cache, L, in, d);
  }

  static void put(uint64_t addr, uint64_t v) { std::memcpy(reinterpret_cast<void*>(addr), &v, 8); }
  static uint64_t get(uint64_t addr) {
    uint64_t v;
    std::memcpy(&v, reinterpret_cast<void*>(addr), 8);
    return v;
  }
  void set_long_lived(uint64_t n) { put(interp_ + L.interp_gc + L.gc_long_lived_total, n); }
  uint64_t gc_head(int gen) const { return interp_ + L.interp_gc + L.gc_head_sets[0][static_cast<size_t>(gen)]; }
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
